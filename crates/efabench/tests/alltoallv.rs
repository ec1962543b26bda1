//! `alltoallv` with real ranks over loopback (shm and tcp), started by hand with
//! `--rank/--world/--rdzv`: 2, 3, 4 ranks (8 once, small), every `--counts` generator and a
//! matrix file, verified; algbw = the busiest rank's bytes / the slowest rank's time and
//! busbw = algbw × (n−1)/n in every record; per-rail bytes add up to the matrix; a corrupted
//! chunk is caught; a killed rank fails the job fast, named; bad `--counts` exit 2; `--bind` and
//! `--window` reach the records and the header. Every run's
//! records carry exactly the keys of `tests/golden/alltoallv.keys`.

use std::time::Duration;

mod common;
use common::collective::*;
use common::failures::*;
use common::*;

/// Runs `alltoallv` on `world` ranks and checks every record; returns the records' matrices.
fn alltoallv(
    provider: &str,
    world: u32,
    counts: &str,
    sizes: (&str, &str),
    expect: usize,
) -> Vec<Vec<Vec<u64>>> {
    let name = format!(
        "v-{provider}-{world}-{}",
        counts.replace([':', ',', '/'], "_")
    );
    let (b, e) = sizes;
    let line =
        format!("alltoallv -p {provider} -b {b} -e {e} -f 4 -n 5 -w 2 --timeout 60 --matrix");
    let mut args = words(&line);
    // A matrix file's path is one argument, whatever it holds.
    args.extend(["--counts", counts]);
    let run = recorded(&name, world, &args);
    let what = format!("alltoallv {provider} n={world} --counts {counts}");
    let recs = run.passed(&what);
    assert_eq!(recs.len(), expect, "{what}: points");
    let n = world as usize;
    let mut matrices = Vec::new();
    for r in &recs {
        assert_eq!(r.bench, "alltoallv");
        assert_eq!(r.world, world);
        assert!(r.verified && r.errors == 0, "{what}: {}", r.describe());
        let m: Vec<Vec<u64>> = serde_json::from_value(r.extra["counts_bytes"].clone()).unwrap();
        assert_eq!(m.len(), n, "{what}: n rows");
        assert!(m
            .iter()
            .all(|row| row.len() == n && row.iter().all(|c| c % 16 == 0)));
        let sent: Vec<u64> = m.iter().map(|row| row.iter().sum()).collect();
        let received: Vec<u64> = (0..n).map(|d| m.iter().map(|row| row[d]).sum()).collect();
        let busiest = sent.iter().chain(&received).copied().max().unwrap();
        assert_eq!(r.extra["busiest_bytes"].as_u64(), Some(busiest), "{what}");
        assert!(
            sent.iter().all(|&s| s <= r.size_bytes),
            "{what}: a rank sends at most -e"
        );
        // algbw = busiest bytes / the slowest rank's mean time; busbw = algbw (n-1)/n.
        let bw = busiest as f64 * 8.0 / (r.lat_us.mean * 1000.0);
        assert!(
            (r.bw_gbps - bw).abs() <= 1e-3 * bw.max(1e-9),
            "{what}: bw {} vs {bw}",
            r.bw_gbps
        );
        assert_busbw(r, world, &what);
        slowest_mean(r, world, &what);
        let bind = r.extra["bind"].as_str().unwrap();
        assert!(bind == "core" || bind == "none", "{what}: {bind}");
        let window = r.extra["window"].as_u64().unwrap();
        assert!((1..n as u64).contains(&window), "{what}: window {window}");
        let notify = r.extra["notify"].as_str().unwrap();
        assert!(
            ["data", "signal", "mixed"].contains(&notify),
            "{what}: {notify}"
        );
        let rb = r.extra["rank_bytes"].as_array().unwrap();
        for (i, x) in rb.iter().enumerate() {
            assert_eq!(x["sent"].as_u64(), Some(sent[i]));
            assert_eq!(x["received"].as_u64(), Some(received[i]));
        }
        assert_eq!(r.extra["matrix_gbps"].as_array().unwrap().len(), n);
        // Every byte to a peer crossed a rail, once per timed iteration.
        let off_diagonal: u64 = (0..n)
            .flat_map(|s| (0..n).map(move |d| (s, d)))
            .filter(|(s, d)| s != d)
            .map(|(s, d)| m[s][d])
            .sum();
        assert_eq!(
            per_rail_bytes(r),
            r.iters * off_diagonal,
            "{what}: per_rail bytes"
        );
        matrices.push(m);
    }
    assert_golden_keys("alltoallv", &record_keys(&run.out));
    let table = run.stdout(0);
    assert!(
        table.contains("# bw: algbw = the busiest rank's bytes"),
        "{table}"
    );
    let err = run.stderr(0);
    assert_slowest_and_matrix_said(&err);
    assert!(err.contains("receive imbalance"), "{err}");
    matrices
}

/// A 5 x 5 matrix file (cut to the job's ranks), with zeros, a diagonal and values that round
/// down to 16 bytes.
fn matrix_file(dir: &std::path::Path) -> String {
    let p = dir.join("m.txt");
    std::fs::write(
        &p,
        "0 1000 64 0 7\n32 100 0 4096 0\n0 0 0 17 2048\n160 16 0 16 0\n1 1 1 1 1\n",
    )
    .unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn alltoallv_shm_every_generator_and_a_matrix_file() {
    let dir = tmp("shm-matrix");
    let file = format!("file:{}", matrix_file(&dir));
    for n in [2, 3, 4] {
        let u = alltoallv("shm", n, "uniform", ("1K", "16K"), 3);
        // uniform is alltoall's chunks: size / n rounded down to 16.
        let chunk = 1024 / n as u64 / 16 * 16;
        assert!(u[0].iter().flatten().all(|&c| c == chunk), "{u:?}");
        let z = alltoallv("shm", n, "zipf:1.2", ("1K", "16K"), 3);
        // Rank 0 is the hottest destination.
        assert!(z[2].iter().all(|row| row[0] > row[n as usize - 1]), "{z:?}");
        let e = 2 * n;
        alltoallv("shm", n, &format!("moe:16,64,2,{e}"), ("8K", "8K"), 1);
        let m = alltoallv("shm", n, &file, ("16K", "16K"), 1);
        assert_eq!(m[0][0][1], 992, "1000 rounds down to 992");
    }
    alltoallv("shm", 8, "zipf:1.0", ("4K", "4K"), 1);
}

#[test]
fn alltoallv_tcp_every_generator_and_a_matrix_file() {
    let dir = tmp("tcp-matrix");
    let file = format!("file:{}", matrix_file(&dir));
    for n in [2, 3, 4] {
        alltoallv("tcp", n, "zipf:0.8", ("1K", "4K"), 2);
        alltoallv("tcp", n, &format!("moe:8,64,3,{}", 3 * n), ("8K", "8K"), 1);
        alltoallv("tcp", n, &file, ("8K", "8K"), 1);
    }
}

#[test]
fn bind_window_and_notify_are_in_the_records() {
    for bind in ["core", "none"] {
        let notify = if bind == "core" { "signal" } else { "data" };
        let line = format!(
            "alltoallv -p shm --counts zipf:1.0 -b 4K -e 4K -n 5 -w 2 --timeout 60 \
             --bind {bind} --window 1 --notify {notify}"
        );
        let run = recorded(&format!("v-bind-{bind}"), 3, &words(&line));
        let recs = run.passed(&format!("alltoallv --bind {bind}"));
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].extra["bind"].as_str(), Some(bind));
        assert_eq!(recs[0].extra["window"].as_u64(), Some(1), "--window 1");
        // zipf:1.0 at 4 KiB has empty chunks (announced by a signal either way) and others.
        assert_eq!(recs[0].extra["notify"].as_str(), Some(notify));
        assert!(
            recs[0].verified && recs[0].errors == 0,
            "{}",
            recs[0].describe()
        );
        if bind == "core" {
            let table = run.stdout(0);
            // 3 ranks on this host: a core each, or shared where the host has fewer cores.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let on = if cores >= 3 {
                "a core of its own".to_string()
            } else {
                format!("a core shared by up to {} ranks", 3usize.div_ceil(cores))
            };
            let line = format!("# bind: each rank's data-path thread on {on} (--bind core)");
            assert!(table.contains(&line), "{table}");
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs the fault hooks: cargo test --features test-hooks"
)]
fn a_corrupted_chunk_is_caught() {
    let args = words("alltoallv -p shm --counts zipf:1.0 -b 4K -e 4K -n 4 -w 1");
    let run = corrupted("v-corrupt", 3, &args, "EFABENCH_TEST_CORRUPT_PAYLOAD");
    assert_eq!(run.records()[0].errors, 1, "exactly the corrupted word");
}

#[test]
fn a_killed_rank_fails_the_job_fast_and_is_named() {
    let args = words(
        "alltoallv -p tcp --counts zipf:1.0 -b 4K -e 4K -n 10000000 --max-time 600 -w 1 --timeout 5",
    );
    let hit = Hit::kill(2, Duration::from_secs(3), Duration::from_secs(25));
    the_others_name_the_hit_rank(4, &args, hit);
}

#[test]
fn bad_counts_exit_2_with_a_fix() {
    let dir = tmp("v-bad");
    let small = matrix_file(&dir);
    std::fs::write(&small, "16 16\n16 16\n").unwrap();
    let missing = format!("file:{}", dir.join("none.txt").display());
    let small = format!("file:{small}");
    for (counts, sizes, says) in [
        ("zipf", ("1K", "1K"), "--counts"),
        ("normal", ("1K", "1K"), "use uniform, zipf:S"),
        ("moe:16,64,2,9", ("1K", "8K"), "-b and -e the same size"),
        ("moe:16,64,2,9", ("1K", "1K"), "more than -e 1024"),
        (
            "moe:16,64,2,8",
            ("64K", "64K"),
            "do not split evenly over 3 ranks",
        ),
        (missing.as_str(), ("1K", "1K"), "traffic matrix file"),
        (small.as_str(), ("1K", "1K"), "smaller than the 3 ranks"),
    ] {
        let (b, e) = sizes;
        let outs = job(
            3,
            &[
                "alltoallv",
                "-p",
                "shm",
                "--counts",
                counts,
                "-b",
                b,
                "-e",
                e,
            ],
        );
        assert!(outs.iter().all(|o| !o.status.success()), "{counts}");
        assert!(outs.iter().any(|o| o.status.code() == Some(2)), "{counts}");
        let err: String = outs.iter().map(|o| text(&o.stderr)).collect();
        assert!(err.contains(says), "--counts {counts}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
