//! The fault matrix, `launch` itself: SIGHUP, SIGTERM or SIGKILL to `launch` mid-sweep ends
//! every rank; the first line under `launch` is the failing rank's own error.

mod common;
#[path = "common/faults.rs"]
mod faults;

use faults::*;

use rustix::process::Signal;

fn launch_hit_mid_sweep(sig: Signal) -> (Proc, Vec<i32>) {
    let dir = tempdir(&format!("launch-{}", sig.as_raw()));
    let out = dir.join("r.jsonl");
    let bench = "sendrecv -b 8 -e 4M -n 200 -p tcp --timeout 3 -o";
    let mut cmd = launch(3, &["--timeout", "2"], bench);
    cmd.arg(&out);
    let mut launch = start(cmd);
    let pids = wait_for_ranks(&launch, 3);
    let before = wait_for_a_record(&mut launch, &out);
    signal(launch.pid(), sig);
    assert!(launch.wait(SLACK), "launch ignored {sig:?}");
    assert_all_gone(&pids, &format!("launch got {sig:?}"));
    assert!(intact_records(&out) >= before);
    (launch, pids)
}

#[test]
fn sighup_to_launch_ends_every_rank() {
    let _one = serial();
    let (launch, _) = launch_hit_mid_sweep(Signal::HUP);
    let err = launch.stderr();
    assert_eq!(launch.code(), Some(129), "{err}");
    assert!(err.contains("received SIGHUP"), "{err}");
}

#[test]
fn sigterm_to_launch_ends_every_rank() {
    let _one = serial();
    let (launch, _) = launch_hit_mid_sweep(Signal::TERM);
    assert_eq!(launch.code(), Some(143), "{}", launch.stderr());
}

/// SIGKILL cannot be passed on: the ranks must die by themselves (PR_SET_PDEATHSIG, set by
/// `die_with_launcher` at the start of efabench's main).
#[test]
fn sigkill_to_launch_ends_every_rank() {
    let _one = serial();
    let (launch, _) = launch_hit_mid_sweep(Signal::KILL);
    assert_eq!(launch.status.and_then(|s| s.code()), None);
}

#[test]
fn the_first_line_under_launch_is_the_ranks_own_error() {
    let _one = serial();
    let mut launch = start(launch(2, &["--timeout", "2"], "sendrecv --timeout -1"));
    assert!(launch.wait(SLACK));
    let err = launch.stderr();
    assert_eq!(launch.code(), Some(2), "{err}");
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("[rank ") && first.contains("--timeout"),
        "first line: {first}\n{err}"
    );
}
