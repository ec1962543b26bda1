//! A rank that crashes on a signal inside the run (the `test-hooks` feature's SIGSEGV, as a
//! provider's bad access would) is reported dead by that signal at once, by every rank and by
//! `launch`, not kept "alive" by its heartbeat thread until --timeout.
#![cfg(feature = "test-hooks")]

mod common;

use common::{job_env, text, BIN};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_crashing_rank_is_reported_dead_by_signal_within_a_second() {
    let t0 = Instant::now();
    let outs = job_env(
        3,
        &[
            "pairs",
            "-p",
            "tcp",
            "--domain",
            "lo",
            "-b",
            "4K",
            "-e",
            "4K",
            "--timeout",
            "30",
        ],
        &[],
        &[("EFABENCH_TEST_CRASH_RANK", "1")],
    );
    let took = t0.elapsed();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        outs[1].status.signal(),
        Some(11),
        "rank 1 must end by SIGSEGV: {:?}\n{}",
        outs[1].status,
        text(&outs[1].stderr)
    );
    assert!(
        text(&outs[1].stderr).contains("rank 1 on "),
        "{}",
        text(&outs[1].stderr)
    );
    for r in [0, 2] {
        let err = text(&outs[r].stderr);
        assert_eq!(outs[r].status.code(), Some(1), "rank {r}: {err}");
        assert!(
            err.contains("rank 1") && err.contains("signal 11 (SIGSEGV)"),
            "rank {r}: {err}"
        );
    }
    // Far below the 30 s --timeout: the news travels at once (the bound covers a loaded host).
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[test]
fn launch_names_the_signal() {
    let out = Command::new(BIN)
        .args([
            "launch", "-n", "3", "--", "pairs", "-p", "tcp", "--domain", "lo", "-b", "4K", "-e",
            "4K",
        ])
        .env("EFABENCH_TEST_CRASH_RANK", "2")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 11), "{err}");
    assert!(err.contains("signal 11 (SIGSEGV)"), "{err}");
}
