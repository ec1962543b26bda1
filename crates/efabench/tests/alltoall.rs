//! `alltoall` and `pairs` with real ranks over loopback (shm and tcp), started by hand with
//! `--rank/--world/--rdzv`: 2, 3, 4 and 8 ranks, verified; busbw = algbw × (n−1)/n in every
//! record; a corrupted chunk is caught; a killed rank fails the job fast, named; `pairs` names a
//! deliberately slowed rank (test hook) and not the healthy ones, and `--min-bw` fails the run.
//! Every `alltoall` run's records carry exactly the keys of `tests/golden/alltoall.keys`.
//!
//! Sizes and iteration counts are small: this file runs on a 2-core CI host with up to 8 ranks.

use std::time::Duration;

use serde_json::Value;

mod common;
use common::collective::*;
use common::failures::*;
use common::*;

/// The CPUs this test may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn alltoall(provider: &str, world: u32, op: &str, extra: &[&str]) {
    alltoall_to(provider, world, op, extra, "64K", 3)
}

fn alltoall_to(provider: &str, world: u32, op: &str, extra: &[&str], max: &str, sizes: usize) {
    let line = format!(
        "alltoall -p {provider} --op {op} -b 1K -e {max} -f 8 -n 6 -w 2 --timeout 60 --matrix"
    );
    let mut args = words(&line);
    args.extend_from_slice(extra);
    let run = recorded(&format!("{provider}-{world}-{op}"), world, &args);
    let what = format!("alltoall {provider} n={world} {op} {extra:?}");
    let recs = run.passed(&what);
    assert_eq!(recs.len(), sizes, "{what}: 1K, 8K, 64K, ...");
    for r in &recs {
        assert_eq!(r.bench, "alltoall");
        assert_eq!(r.world, world);
        assert!(r.verified && r.errors == 0, "{what}: {}", r.describe());
        let chunk = r.extra["chunk_bytes"].as_u64().unwrap();
        assert_eq!(chunk % 16, 0, "{what}: chunks are 16-byte aligned");
        let bind = r.extra["bind"].as_str().unwrap();
        match extra.windows(2).find(|w| w[0] == "--bind").map(|w| w[1]) {
            Some(chosen) => assert_eq!(bind, chosen, "{what}"),
            None => assert!(bind == "core" || bind == "none", "{what}: {bind}"),
        }
        let notify = r.extra["notify"].as_str().unwrap();
        match extra.windows(2).find(|w| w[0] == "--notify").map(|w| w[1]) {
            Some(chosen) => assert_eq!(notify, chosen, "{what}"),
            // auto signals only over shm with a core per rank (and small pages), for write
            // chunks above shm's 4 KiB inject size.
            None if provider == "shm" && world > 2 && world as usize <= cores() => {
                let want = if chunk > 4096 && op == "write" {
                    "signal"
                } else {
                    "data"
                };
                assert_eq!(notify, want, "{what}")
            }
            None => assert_eq!(notify, "data", "{what}"),
        }
        assert_eq!(
            r.size_bytes,
            chunk * world as u64,
            "{what}: size = n chunks"
        );
        assert!(r.bw_gbps > 0.0, "{what}");
        assert_busbw(r, world, &what);
        // The record's time is the slowest rank's mean.
        let worst = slowest_mean(r, world, &what);
        assert!(
            (r.lat_us.mean - worst).abs() <= 1e-6 * worst.max(1.0),
            "{what}"
        );
        let m = r.extra["matrix_gbps"].as_array().unwrap();
        assert_eq!(m.len(), world as usize);
        // Every rank's per-rail bytes sum to what it sent to peers (n-1 chunks per iteration).
        assert_eq!(
            per_rail_bytes(r),
            r.iters * chunk * (world as u64 - 1) * world as u64,
            "{what}: per_rail bytes"
        );
    }
    assert_golden_keys("alltoall", &record_keys(&run.out));
    let table = run.stdout(0);
    assert!(table.contains("busbw"), "{table}");
    assert_slowest_and_matrix_said(&run.stderr(0));
}

#[test]
fn alltoall_shm_2_3_4_8_ranks() {
    for n in [2, 3, 4, 8] {
        alltoall("shm", n, "write", &[]);
    }
    alltoall("shm", 3, "sendrecv", &[]);
    // One or two chunks in flight, the rest posted as they complete.
    alltoall("shm", 4, "write", &["--window", "1"]);
    alltoall("shm", 4, "sendrecv", &["--window", "2"]);
    // Each rank's data-path thread on a core of its own (two ranks a core here), or unbound.
    alltoall("shm", 4, "write", &["--bind", "core"]);
    alltoall("shm", 3, "write", &["--bind", "none"]);
    // Chunks written without CQ data and announced by a signal, whole or in stripes.
    alltoall("shm", 4, "write", &["--notify", "signal"]);
    alltoall("shm", 3, "write", &["--notify", "data", "--bind", "core"]);
    alltoall(
        "shm",
        4,
        "write",
        &["--rails", "2", "--strategy", "round-robin"],
    );
    // Chunks of 256 KiB: split into stripes over both rails.
    alltoall_to(
        "shm",
        4,
        "sendrecv",
        &["--rails", "2", "--strategy", "split"],
        "1M",
        5,
    );
    alltoall_to(
        "shm",
        3,
        "write",
        &["--rails", "2", "--strategy", "split"],
        "1M",
        5,
    );
    alltoall_to(
        "shm",
        3,
        "write",
        &["--rails", "2", "--strategy", "split", "--notify", "signal"],
        "1M",
        5,
    );
}

#[test]
fn alltoall_tcp_2_3_4_8_ranks() {
    for n in [2, 3, 4, 8] {
        alltoall("tcp", n, "write", &[]);
    }
    alltoall(
        "tcp",
        4,
        "sendrecv",
        &["--rails", "2", "--strategy", "round-robin"],
    );
}

#[test]
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs the fault hooks: cargo test --features test-hooks"
)]
fn a_corrupted_chunk_is_caught() {
    let args = words("alltoall -p shm -b 4K -e 4K -n 4 -w 1");
    let run = corrupted("corrupt", 3, &args, "EFABENCH_TEST_CORRUPT_PAYLOAD");
    assert_eq!(run.records()[0].errors, 1, "exactly the corrupted word");
}

#[test]
fn a_killed_rank_fails_the_job_fast_and_is_named() {
    let args = words("alltoall -p tcp -b 4K -e 4K -n 10000000 --max-time 600 -w 1 --timeout 5");
    let hit = Hit::kill(2, Duration::from_secs(3), Duration::from_secs(25));
    the_others_name_the_hit_rank(4, &args, hit);
}

#[test]
fn a_frozen_rank_fails_the_job_within_the_timeout_and_is_named() {
    let args = words("alltoall -p shm -b 4K -e 4K -n 10000000 --max-time 600 -w 1 --timeout 4");
    let hit = Hit::stop(1, Duration::from_secs(3), Duration::from_secs(25));
    the_others_name_the_hit_rank(3, &args, hit);
}

#[test]
fn too_small_sizes_are_refused_with_exit_2() {
    let outs = job(4, &["alltoall", "-p", "shm", "-b", "8", "-e", "32"]);
    // Every rank finds it; the first to tell the others wins, so look at all of them.
    assert!(outs.iter().all(|o| !o.status.success()));
    assert!(outs.iter().any(|o| o.status.code() == Some(2)));
    let err = text(&outs[0].stderr);
    assert!(
        err.contains("too small for 4 ranks") && err.contains("-e 64"),
        "{err}"
    );
}

#[test]
fn a_signal_where_it_could_overtake_its_data_is_refused_with_exit_2() {
    for (provider, op, needle) in [
        ("tcp", "write", "--notify signal needs -p shm"),
        ("shm", "sendrecv", "--notify signal applies to --op write"),
    ] {
        let args = [
            "alltoall", "-p", provider, "--op", op, "-b", "64K", "-e", "64K", "--notify", "signal",
        ];
        let outs = job(2, &args);
        assert!(outs.iter().all(|o| o.status.code() == Some(2)), "{args:?}");
        let err = text(&outs[0].stderr);
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs the fault hooks: cargo test --features test-hooks"
)]
fn pairs_names_the_slowed_rank_and_gates_on_min_bw() {
    let args =
        words("pairs -p tcp -b 64K -e 64K -n 5 -w 1 --window 8 --min-bw 1000000 --timeout 60");
    let slow = [
        ("EFABENCH_TEST_SLOW_RANK", "2"),
        ("EFABENCH_TEST_SLOW_US", "30000"),
    ];
    let run = recorded_env("pairs", 4, &args, &slow, &[]);
    let outs = &run.outs;
    let err = text(&outs[0].stderr);
    assert_eq!(
        outs[0].status.code(),
        Some(1),
        "--min-bw fails the run: {err}"
    );
    assert!(
        err.contains("--min-bw 1000000: FAILED, 12 pair(s)"),
        "{err}"
    );
    // The harness names every pair that missed the gate.
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("--min-bw 1000000 Gbps measured"))
            .count(),
        12,
        "{err}"
    );
    let suspect = err
        .lines()
        .find(|l| l.starts_with("# suspect at 65536 B"))
        .unwrap_or_else(|| panic!("no suspect named: {err}"));
    assert!(suspect.contains("rank 2 "), "{suspect}");
    for healthy in ["rank 0 ", "rank 1 ", "rank 3 "] {
        assert!(!suspect.contains(healthy), "{healthy}named: {suspect}");
    }
    assert!(err.contains("# outlier at 65536 B: 2 -> "), "{err}");
    let recs = run.records();
    assert_eq!(recs.len(), 12, "every ordered pair of 4 ranks");
    let mut pairs: Vec<(u64, u32)> = recs
        .iter()
        .map(|r| (r.extra["src"].as_u64().unwrap(), r.peer.unwrap()))
        .collect();
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs.len(), 12);
    assert!(recs.iter().all(|r| r.errors == 0 && r.verified));
    assert!(recs
        .iter()
        .all(|r| r.extra.get("src_nic") != Some(&Value::Null)));
}

#[test]
fn pairs_one_at_a_time_covers_every_pair() {
    let args = words("pairs -p shm -b 4K -e 4K -n 3 -w 1 --one-at-a-time --min-bw 0");
    let run = recorded("pairs1", 3, &args);
    let recs = run.passed("pairs --one-at-a-time");
    assert_eq!(recs.len(), 6);
    assert!(recs.iter().all(|r| r.extra["round"].is_null()));
    assert!(run.stderr(0).contains("every pair passed"));
}

#[test]
fn alltoall_on_huge_pages() {
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let args = words("alltoall -p shm --mem huge -b 64K -e 1M -f 16 -n 6 -w 2 --timeout 60");
    let run = recorded("shm-huge", 3, &args);
    let outs = &run.outs;
    if thp.contains("[never]") {
        // Refused up front, with the way out.
        assert!(outs.iter().any(|o| o.status.code() == Some(2)));
        assert!(text(&outs[0].stderr).contains("echo madvise"));
        return;
    }
    let recs = run.passed("alltoall --mem huge");
    assert_eq!(recs.len(), 2, "64K and 1M");
    for r in &recs {
        assert_eq!(r.mem, "huge");
        assert!(r.verified && r.errors == 0, "{}", r.describe());
    }
}
