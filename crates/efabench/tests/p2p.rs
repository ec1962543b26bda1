//! Two real ranks over loopback for every point-to-point benchmark and variant, on the tcp and
//! shm providers, with payload verification on; plus the verification hook, a dying peer, and
//! bad inputs (sizes, windows, providers). Ranks are started by hand (`--rank/--world/--rdzv`), the way a user
//! runs efabench on two hosts without a launcher.
//!
//! Select the libfabric under test with EFABENCH_LIBFABRIC (scripts/test.sh runs this file
//! against Debian's 1.17 and against 2.5.1).

use std::process::Command;
use std::time::Duration;

mod common;
use common::failures::*;
use common::*;

fn provider_available(p: &str) -> bool {
    // `efabench topo` needs no ranks; ask libfabric through a one-rank failing run instead is
    // heavier, so trust fi_info when present and otherwise assume tcp/shm exist (Debian's build).
    match Command::new("fi_info").args(["-l"]).output() {
        Ok(o) => text(&o.stdout)
            .lines()
            .any(|l| l.trim_end_matches(':') == p),
        Err(_) => true,
    }
}

fn sweep(bench: &str, provider: &str) {
    if !provider_available(provider) {
        eprintln!("skipped: provider {provider} not offered by this libfabric");
        return;
    }
    let line = format!(
        "{bench} -p {provider} -b 8 -e 1M -f 4 -n 30 -w 3 --window 16 --timeout 30 --format csv"
    );
    let run = recorded(&format!("{bench}-{provider}"), 2, &words(&line));
    let recs = run.passed(&format!("{bench}/{provider}"));
    // 8, 32, ..., 512K and 1M: ten sizes, two variants.
    assert_eq!(recs.len(), 20, "{bench}/{provider}: {recs:?}");
    for r in &recs {
        assert_eq!(r.bench, bench);
        assert_eq!(r.errors, 0, "{r:?}");
        assert!(r.verified);
        assert_eq!(r.peer, Some(1));
        assert_eq!(r.world, 2);
        assert!(r.provider.starts_with(provider), "{}", r.provider);
        assert!(
            r.bw_gbps > 0.0
                && r.lat_us.min > 0.0
                && r.lat_us.min <= r.lat_us.p50
                && r.lat_us.p50 <= r.lat_us.max
        );
        assert!(r.libfabric.is_some());
        // Host memory: no GPU to share, said as null in every record.
        assert_eq!(r.extra.get("gpu_sharing"), Some(&serde_json::Value::Null));
    }
    let variants: std::collections::BTreeSet<_> = recs.iter().map(|r| r.variant.as_str()).collect();
    assert_eq!(
        variants.into_iter().collect::<Vec<_>>(),
        ["pingpong", "stream"]
    );
    let kinds: Vec<_> = recs
        .iter()
        .map(|r| r.extra["lat_kind"].as_str().unwrap().to_string())
        .collect();
    if bench == "read" {
        assert!(kinds.iter().any(|k| k == "post-to-completion"));
    } else {
        assert!(kinds.iter().any(|k| k.starts_with("one-way")));
    }
    // CSV on rank 0's stdout: a header and one line per record.
    let csv = run.stdout(0);
    assert_eq!(
        csv.lines().filter(|l| !l.trim().is_empty()).count(),
        21,
        "{csv}"
    );
}

/// `--timing run` reads the clock around the whole timed loop, as fabtests: every latency
/// figure is the mean, the records and the header say so; the default keeps percentiles.
#[test]
fn timing_run_times_the_loop_as_fabtests_do() {
    for (timing, bench) in [("run", "sendrecv"), ("run", "read"), ("iteration", "write")] {
        let line =
            format!("{bench} -p tcp -b 8 -e 64 -f 8 -n 200 -w 5 --timing {timing} --timeout 30");
        let run = recorded(&format!("timing-{timing}-{bench}"), 2, &words(&line));
        let recs = run.passed(bench);
        assert_eq!(recs.len(), 4, "{recs:?}");
        for r in &recs {
            assert_eq!(r.extra["timing"], timing, "{r:?}");
            assert_eq!(r.errors, 0);
            let l = &r.lat_us;
            assert!(l.mean > 0.0, "{r:?}");
            if timing == "run" {
                for x in [l.min, l.p50, l.p99, l.max] {
                    assert!((x - l.mean).abs() <= 1e-3 * l.mean + 1e-3, "{r:?}");
                }
            }
        }
        let header = run.stdout(0);
        assert_eq!(
            header.contains("# timing: one clock read before and after the timed loop"),
            timing == "run",
            "{header}"
        );
    }
}

#[test]
fn sendrecv_tcp() {
    sweep("sendrecv", "tcp");
}
#[test]
fn sendrecv_shm() {
    sweep("sendrecv", "shm");
}
#[test]
fn write_tcp() {
    sweep("write", "tcp");
}
#[test]
fn write_shm() {
    sweep("write", "shm");
}
#[test]
fn read_tcp() {
    sweep("read", "tcp");
}
#[test]
fn read_shm() {
    sweep("read", "shm");
}

#[test]
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs the fault hooks: cargo test --features test-hooks"
)]
fn corrupted_payload_is_reported_and_fails_the_run() {
    for bench in ["sendrecv", "write"] {
        let line = format!("{bench} -p tcp -b 4K -e 4K -n 20 --variant pingpong");
        let hook = "EFABENCH_TEST_CORRUPT_PAYLOAD";
        let run = corrupted(&format!("corrupt-{bench}"), 2, &words(&line), hook);
        let recs = run.records();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].errors, 1, "one corrupted word: {:?}", recs[0]);
    }
}

#[test]
fn a_killed_peer_fails_the_job_fast_and_keeps_records() {
    let dir = tmp("kill");
    let out = dir.join("r.jsonl");
    let mut args = words("sendrecv -p tcp -b 8 -e 8 -n 10000000 --variant pingpong --timeout 5");
    args.extend(["-o", out.to_str().unwrap()]);
    let hit = Hit::kill(1, Duration::from_secs(2), Duration::from_secs(20));
    the_others_name_the_hit_rank(2, &args, hit);
}

/// An error line of the CLI: `efabench: ...` (bad arguments) or `efabench <command>: ...` (a
/// benchmark that refused its input).
fn error_line(l: &str) -> bool {
    l.split_once(": ").is_some_and(|(head, _)| {
        head == "efabench"
            || head
                .strip_prefix("efabench ")
                .is_some_and(|c| !c.contains(' '))
    })
}

fn bad(args: &[&str]) -> String {
    let outs = job(2, args);
    let o = &outs[0];
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
    let err = text(&o.stderr);
    assert_eq!(
        err.trim().lines().filter(|l| error_line(l)).count(),
        1,
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn bad_inputs_exit_2_with_one_line() {
    assert!(bad(&["sendrecv", "-b", "1X"]).contains("K, M or G"));
    assert!(bad(&["sendrecv", "-b", "1M", "-e", "8"]).contains("-b/--min-bytes"));
    assert!(bad(&["sendrecv", "-n", "0"]).contains("1 to 10000000"));
    assert!(bad(&["write", "--mem", "gpu"]).contains("host, huge, pinned, cuda, managed"));
    assert!(bad(&["read", "--window", "0"]).contains("--window"));
    assert!(bad(&["sendrecv", "-p", "nosuchprovider"]).contains("available:"));
    assert!(
        bad(&["sendrecv", "-o", "/nonexistent-dir/x.jsonl"]).contains("/nonexistent-dir/x.jsonl")
    );
    // GPU memory over tcp: no CUDA driver here (CI); on a GPU machine tcp has no FI_HMEM.
    let e = bad(&["write", "-p", "tcp", "--mem", "cuda"]);
    assert!(e.contains("no CUDA driver") || e.contains("FI_HMEM"), "{e}");
}

#[test]
fn one_rank_alone_says_how_to_start_two() {
    let o = Command::new(BIN)
        .args(["sendrecv"])
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("efabench launch -n 2"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn three_ranks_measure_each_peer_in_turn() {
    let run = recorded("three", 3, &words("write -p tcp -b 64 -e 4K -f 64 -n 20"));
    let recs = run.passed("write, 3 ranks");
    // 2 sizes × 2 variants × 2 peers.
    assert_eq!(recs.len(), 8);
    for peer in [1, 2] {
        assert_eq!(
            recs.iter()
                .filter(|r| r.peer == Some(peer) && r.errors == 0 && r.world == 3)
                .count(),
            4
        );
    }
}
