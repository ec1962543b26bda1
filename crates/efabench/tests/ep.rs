//! `ep` with real ranks over loopback (shm and tcp), started by hand with
//! `--rank/--world/--rdzv`: 2, 3, 4 and 8 ranks, every routing (uniform, zipf, a file), both
//! layouts, the CPU initiator and the GPU initiator's ring with a CPU thread as the producer, all
//! verified; a corrupted token is caught; a killed rank fails the job fast, named; bad input
//! exits 2.
//!
//! Shapes are tiny (a few tokens of 128 to 256 elements): this file runs on a 2-core CI host
//! with up to 8 ranks.

use std::process::Child;
use std::time::{Duration, Instant};

mod common;
use common::*;

/// One verified job; checks every record and returns them.
fn ep(world: u32, provider: &str, extra: &[&str]) -> Vec<efabench_report::Record> {
    let tag = format!(
        "{provider}-{world}-{}",
        extra.join("").replace(['/', ':'], "_")
    );
    let dir = tmp(&tag);
    let out = dir.join("r.jsonl");
    let mut args = vec![
        "ep",
        "-p",
        provider,
        "--tokens",
        "6",
        "--hidden",
        "256",
        "--topk",
        "3",
        "--experts",
        "24",
        "--initiator",
        "gpu,cpu",
        "--producer",
        "host",
        "-n",
        "3",
        "-w",
        "1",
        "--timeout",
        "60",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let outs = job(world, &args);
    let what = format!("ep {provider} n={world} {extra:?}");
    all_ok(&outs, &what);
    let recs = records(&out);
    assert_eq!(recs.len(), 6, "{what}: 2 initiators x 3 parts");
    // Every shape, layout and routing writes the same fields (`docs/records.md`).
    assert_golden_keys("ep", &record_keys(&out));
    for r in &recs {
        let x = &r.extra;
        assert_eq!(r.bench, "ep");
        assert_eq!(r.world, world);
        assert!(r.verified && r.errors == 0, "{what}: {}", r.describe());
        assert_eq!(r.iters, 3, "{what}");
        let init = x["initiator"].as_str().unwrap();
        assert_eq!(
            x["producer"].as_str(),
            (init == "gpu").then_some("host"),
            "{what}"
        );
        // DeepEP's GB/s: bytes / 1e9 / mean time of the slowest rank per iteration.
        let bytes = x["ep_bytes"].as_f64().unwrap();
        let gbs = x["ep_GBps"].as_f64().unwrap();
        assert!(
            (gbs - bytes / 1e3 / r.lat_us.mean).abs() <= 1e-3 + 1e-3 * gbs,
            "{what}: {gbs} GB/s"
        );
        assert!(r.lat_us.p50 > 0.0 && r.lat_us.p99 >= r.lat_us.p50, "{what}");
        let ranks = x["rank_mean_us"].as_array().unwrap();
        assert_eq!(ranks.len(), world as usize, "{what}: every rank's time");
        let worst = ranks
            .iter()
            .map(|v| v.as_f64().unwrap())
            .fold(0.0, f64::max);
        // Each iteration's slowest rank is at least as slow as any rank's mean says on average.
        assert!(
            r.lat_us.mean + 1e-3 >= worst,
            "{what}: {} < {worst}",
            r.lat_us.mean
        );
        let dest = x["dest_bytes"].as_array().unwrap();
        assert_eq!(dest.len(), world as usize);
        let stages = &x["ep_stages"];
        let parts = [
            "launch_us",
            "post_us",
            "copy_us",
            "feed_us",
            "quiet_us",
            "network_us",
            "arrival_us",
            "settle_us",
            "reduce_us",
        ];
        let mut sum = 0.0;
        for k in parts {
            let v = stages[k].as_f64().unwrap();
            assert!(v >= 0.0, "{what}: {k}");
            sum += v;
        }
        assert!(stages["push_us"].as_f64().unwrap() >= 0.0, "{what}");
        // The stages of the slowest rank's median iteration add up to its time.
        let total = stages["total_us"].as_f64().unwrap();
        assert!(total > 0.0, "{what}");
        assert!(
            (sum - total).abs() <= 0.01,
            "{what}: stages add up to {sum} us, not {total} us: {stages}"
        );
        assert!(
            total <= r.lat_us.max + 0.01,
            "{what}: {total} us beyond the slowest iteration"
        );
        if init == "cpu" {
            for k in ["push_us", "launch_us", "quiet_us"] {
                assert_eq!(stages[k].as_f64(), Some(0.0), "{what}: {k}");
            }
            assert_eq!(x["proxy_merge"], serde_json::Value::Null, "{what}");
        } else {
            let merging = !extra.contains(&"--no-merge");
            assert_eq!(x["proxy_merge"].as_bool(), Some(merging), "{what}");
            if !merging {
                assert_eq!(stages["merged"].as_u64(), Some(0), "{what}");
            }
        }
        if x["phase"] == "combine" {
            assert!(stages["reduce_us"].as_f64().unwrap() > 0.0, "{what}");
        }
        assert!(x["rank_imbalance"].as_f64().unwrap() >= 1.0, "{what}");
        assert!(x["tokens_per_s"].as_f64().unwrap() > 0.0, "{what}");
    }
    recs
}

fn routing_file(world: u32, dir: &std::path::Path) -> String {
    // Rank r's token t goes to experts (r + t), (r + t + 8), (r + t + 16) of 24.
    let mut s = String::from("# generated by the ep test\n");
    for r in 0..world {
        for t in 0..6 {
            let e = r + t;
            s.push_str(&format!("{} {},{}\n", e % 24, (e + 8) % 24, (e + 16) % 24));
        }
    }
    let p = dir.join("routing.txt");
    std::fs::write(&p, s).unwrap();
    format!("file:{}", p.display())
}

#[test]
fn ep_shm_2_3_4_8_ranks() {
    let recs = ep(2, "shm", &["--routing", "uniform"]);
    // In the low-latency layout every rank sends selections x message bytes.
    let d = recs
        .iter()
        .find(|r| r.extra["phase"] == "dispatch")
        .unwrap();
    let msg = d.extra["dispatch_msg_bytes"].as_u64().unwrap();
    assert_eq!(msg, 16 + 2 * 256, "bf16: header + 2 bytes per element");
    assert_eq!(d.extra["ep_bytes"].as_u64(), Some(6 * 3 * msg));
    let sum: u64 = d.extra["dest_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(sum, 2 * 6 * 3 * msg, "every selection lands somewhere");
    let recs = ep(
        3,
        "shm",
        &[
            "--layout",
            "per-rank",
            "--routing",
            "zipf:1.2",
            "--dtype",
            "fp8",
        ],
    );
    let d = recs
        .iter()
        .find(|r| r.extra["phase"] == "dispatch")
        .unwrap();
    assert_eq!(
        d.extra["dispatch_msg_bytes"].as_u64(),
        Some(16 + 256 + 256 / 128 * 4),
        "fp8: header + 1 byte per element + a 4-byte scale per 128"
    );
    assert!(
        d.extra["ep_bytes"].as_u64().unwrap()
            <= 6 * 3 * d.extra["dispatch_msg_bytes"].as_u64().unwrap(),
        "per-rank sends a token once per destination rank"
    );
    let dir = tmp("shm-file");
    ep(4, "shm", &["--routing", &routing_file(4, &dir)]);
    ep(8, "shm", &["--layout", "per-rank"]);
}

#[test]
fn ep_tcp_2_3_4_8_ranks() {
    let dir = tmp("tcp-file");
    ep(
        2,
        "tcp",
        &["--layout", "per-rank", "--routing", &routing_file(2, &dir)],
    );
    let recs = ep(3, "tcp", &["--dtype", "fp8", "--no-merge"]);
    // Without merging the ring posts a write per message; the cpu initiator merges.
    let writes = |init: &str| {
        recs.iter()
            .find(|r| r.extra["phase"] == "dispatch" && r.extra["initiator"] == init)
            .unwrap()
            .extra["writes_per_iter"]
            .as_u64()
            .unwrap()
    };
    assert!(writes("gpu") >= writes("cpu"));
    let recs = ep(4, "tcp", &["--routing", "zipf:2"]);
    // Zipf routing loads the first rank: its imbalance shows.
    assert!(recs[0].extra["rank_imbalance"].as_f64().unwrap() > 1.3);
    ep(8, "tcp", &["--layout", "per-rank", "--routing", "zipf:0.8"]);
}

#[test]
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs the fault hooks: cargo test --features test-hooks"
)]
fn a_corrupted_token_is_caught() {
    let dir = tmp("ep-corrupt");
    let out = dir.join("r.jsonl");
    let outs = job_env(
        3,
        &[
            "ep",
            "-p",
            "shm",
            "--tokens",
            "4",
            "--hidden",
            "128",
            "--topk",
            "2",
            "--experts",
            "6",
            "-n",
            "2",
            "-w",
            "1",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
        &[("EFABENCH_TEST_EP_CORRUPT", "1")],
    );
    assert_eq!(outs[0].status.code(), Some(1), "{}", text(&outs[0].stderr));
    let recs = records(&out);
    // One flipped byte of a dispatched token (one 8-byte word) and one flipped exponent of a
    // combine slot (one element); the token's own sum may be off too.
    let e: u64 = recs.iter().map(|r| r.errors).sum();
    assert!(
        (2..=3).contains(&e),
        "{e} errors:\n{}\n{}",
        text(&outs[0].stderr),
        text(&outs[1].stderr)
    );
    assert!(text(&outs[0].stderr).contains("failed verification"));
}

#[test]
fn a_killed_rank_fails_the_job_fast_and_is_named() {
    let port = free_port();
    let args = [
        "ep",
        "-p",
        "tcp",
        "--tokens",
        "4",
        "--hidden",
        "128",
        "--topk",
        "2",
        "--experts",
        "8",
        "-n",
        "10000000",
        "-w",
        "1",
        "--timeout",
        "5",
    ];
    let mut kids: Vec<Child> = (0..4).map(|r| rank(r, 4, port, &args, &[])).collect();
    std::thread::sleep(Duration::from_secs(3));
    kids[2].kill().unwrap();
    let _ = kids[2].wait();
    let t0 = Instant::now();
    for (r, k) in kids.iter_mut().enumerate() {
        if r == 2 {
            continue;
        }
        while k.try_wait().unwrap().is_none() {
            if t0.elapsed() > Duration::from_secs(25) {
                let _ = k.kill();
                panic!("rank {r} still running 25 s after rank 2 was killed");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for (r, k) in kids.into_iter().enumerate() {
        if r == 2 {
            continue;
        }
        let o = k.wait_with_output().unwrap();
        assert!(!o.status.success(), "rank {r}");
        let err = text(&o.stderr);
        assert!(
            err.contains("rank 2"),
            "rank {r} must name the dead rank: {err}"
        );
    }
}

#[test]
fn bad_input_exits_2_with_a_fix() {
    // Caught before the job starts.
    let o = std::process::Command::new(BIN)
        .args(["ep", "--producer", "gpu", "--world", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--mem cuda"),
        "{}",
        text(&o.stderr)
    );
    // Caught by every rank once the job knows its size.
    let outs = job(
        3,
        &[
            "ep",
            "-p",
            "tcp",
            "--experts",
            "8",
            "--tokens",
            "2",
            "--hidden",
            "128",
            "--topk",
            "2",
        ],
    );
    for o in &outs {
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    }
    assert!(
        text(&outs[0].stderr).contains("--experts 6"),
        "{}",
        text(&outs[0].stderr)
    );
    let dir = tmp("ep-bad-file");
    let f = dir.join("r.txt");
    std::fs::write(&f, "0 1\n").unwrap();
    let arg = format!("file:{}", f.display());
    let outs = job(
        2,
        &[
            "ep",
            "-p",
            "tcp",
            "--experts",
            "4",
            "--tokens",
            "2",
            "--hidden",
            "128",
            "--topk",
            "2",
            "--routing",
            &arg,
        ],
    );
    assert_eq!(outs[0].status.code(), Some(2), "{}", text(&outs[0].stderr));
    assert!(
        text(&outs[0].stderr).contains("token lines"),
        "{}",
        text(&outs[0].stderr)
    );
}
