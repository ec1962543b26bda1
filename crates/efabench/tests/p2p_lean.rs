//! `sendrecv --loop lean` (fabtests' ping-pong loop) between two real ranks over loopback: it
//! verifies every payload over shm and tcp, reports a corrupted one, ends within `--timeout`
//! naming a killed or frozen peer, and is refused (exit 2, one line) where it does not apply.

use std::process::Output;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

mod common;
use common::*;

fn lean_job(provider: &str, out: &std::path::Path, env1: &[(&str, &str)]) -> Vec<Output> {
    job_env(
        2,
        &[
            "sendrecv",
            "-p",
            provider,
            "-b",
            "8",
            "-e",
            "64",
            "-f",
            "8",
            "-n",
            "300",
            "-w",
            "10",
            "--variant",
            "pingpong",
            "--loop",
            "lean",
            "--timeout",
            "30",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
        env1,
    )
}

fn lean_verifies(provider: &str) {
    let dir = tmp(&format!("lean-{provider}"));
    let out = dir.join("r.jsonl");
    let outs = lean_job(provider, &out, &[]);
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(&o.stderr));
    }
    let recs = records(&out);
    assert_eq!(recs.len(), 2, "8 and 64 B: {recs:?}");
    for r in &recs {
        assert_eq!((r.errors, r.verified), (0, true), "{r:?}");
        assert_eq!(r.variant, "pingpong");
        assert_eq!(r.extra["loop"], "lean", "{r:?}");
        assert!(r.lat_us.min > 0.0 && r.lat_us.min <= r.lat_us.max, "{r:?}");
        // One inject per timed iteration, on the one rail.
        let rail = &r.extra["per_rail"][0];
        assert_eq!(rail["ops"], 300, "{r:?}");
        assert_eq!(rail["bytes"], 300 * r.size_bytes, "{r:?}");
    }
    let stdout = text(&outs[0].stdout);
    assert!(stdout.contains("# loop: lean"), "{stdout}");
}

#[test]
fn lean_loop_verifies_over_shm() {
    lean_verifies("shm");
}

#[test]
fn lean_loop_verifies_over_tcp() {
    lean_verifies("tcp");
}

/// By default (`--loop auto`) the ping-pong runs fabtests' loop up to the inject size and the
/// tracked loop above it and for the stream; each record says which, and `--loop tracked` keeps
/// the tracked loop everywhere.
#[test]
fn auto_runs_the_lean_loop_where_it_applies() {
    let dir = tmp("lean-auto");
    let out = dir.join("r.jsonl");
    let outs = job(
        2,
        &[
            "sendrecv",
            "-p",
            "shm",
            "-b",
            "8",
            "-e",
            "64K",
            "-f",
            "1024",
            "-n",
            "20",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    all_ok(&outs, "auto");
    let stdout = text(&outs[0].stdout);
    assert!(
        stdout.contains("# loop: lean for the ping-pong up to 4K"),
        "{stdout}"
    );
    let recs = records(&out);
    let loop_of = |variant: &str, size: u64| {
        recs.iter()
            .find(|r| r.variant == variant && r.size_bytes == size)
            .unwrap_or_else(|| panic!("no {variant} {size} in {recs:?}"))
            .extra["loop"]
            .clone()
    };
    assert_eq!(loop_of("pingpong", 8), "lean");
    assert_eq!(loop_of("pingpong", 65536), "tracked");
    assert_eq!(loop_of("stream", 8), "tracked");
    for r in &recs {
        assert_eq!((r.errors, r.verified), (0, true), "{r:?}");
    }

    let outs = job(
        2,
        &[
            "sendrecv",
            "-p",
            "tcp",
            "-b",
            "8",
            "-e",
            "8",
            "-n",
            "20",
            "--variant",
            "pingpong",
            "--loop",
            "tracked",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    all_ok(&outs, "tracked");
    assert!(text(&outs[0].stdout).contains("# loop: tracked"));
    assert_eq!(records(&out).last().unwrap().extra["loop"], "tracked");
}

#[test]
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs the fault hooks: cargo test --features test-hooks"
)]
fn lean_loop_reports_a_corrupted_payload() {
    let dir = tmp("lean-corrupt");
    let out = dir.join("r.jsonl");
    let outs = lean_job("shm", &out, &[("EFABENCH_TEST_CORRUPT_PAYLOAD", "1")]);
    let err = text(&outs[0].stderr);
    assert_eq!(outs[0].status.code(), Some(1), "rank 0 must fail: {err}");
    assert!(err.contains("failed verification"), "{err}");
    let recs = records(&out);
    assert_eq!(recs[0].errors, 1, "one corrupted word: {:?}", recs[0]);
}

/// Rank 1 is hit by `sig` in the middle of a long lean ping-pong; rank 0 must end within its
/// `--timeout` (plus start-up and slack), naming rank 1.
fn peer_hit(provider: &str, sig: Signal) {
    let port = free_port();
    let args = [
        "sendrecv",
        "-p",
        provider,
        "-b",
        "8",
        "-e",
        "8",
        "-n",
        "10000000",
        "--variant",
        "pingpong",
        "--loop",
        "lean",
        "--no-check",
        "--timeout",
        "3",
    ];
    let mut r0 = rank(0, 2, port, &args, &[]);
    let mut r1 = rank(1, 2, port, &args, &[]);
    std::thread::sleep(Duration::from_secs(2));
    if let Some(pid) = Pid::from_raw(r1.id() as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
    let t0 = Instant::now();
    let o = loop {
        if r0.try_wait().unwrap().is_some() {
            break r0.wait_with_output().unwrap();
        }
        if t0.elapsed() > Duration::from_secs(15) {
            let _ = r0.kill();
            let _ = r1.kill();
            panic!("rank 0 still running 15 s after rank 1 got {sig:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = r1.kill();
    let _ = r1.wait();
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("rank 1"), "must name rank 1: {err}");
}

#[test]
fn lean_loop_ends_when_the_peer_is_killed() {
    peer_hit("tcp", Signal::KILL);
}

#[test]
fn lean_loop_ends_when_the_peer_freezes() {
    peer_hit("shm", Signal::STOP);
}

fn refused(extra: &[&str], says: &str) {
    let mut args = vec![
        "sendrecv", "-p", "shm", "-b", "8", "-n", "10", "--loop", "lean",
    ];
    args.extend_from_slice(extra);
    let outs = job(2, &args);
    for (r, o) in outs.iter().enumerate() {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "rank {r} {extra:?}: {err}");
        let lines: Vec<_> = err.lines().filter(|l| l.contains("--loop lean")).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(says), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn lean_loop_is_refused_where_it_does_not_apply() {
    refused(
        &["-e", "8", "--variant", "pingpong", "--rails", "2"],
        "--rails 1",
    );
    refused(&["-e", "8", "--variant", "stream"], "--variant pingpong");
    refused(&["-e", "1M", "--variant", "pingpong"], "fi_inject");
}
