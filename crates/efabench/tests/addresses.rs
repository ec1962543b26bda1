//! Endpoint addresses of different lengths: shm names an endpoint by a string holding its process
//! id, so ranks whose pids have different numbers of digits (9999 and 10000) have addresses of
//! different lengths. The job is started in a fresh pid namespace whose next pid is set just
//! below such a boundary, so the ranks land on both sides of it.

mod common;
use common::*;

use std::process::Command;

/// Runs `efabench launch -n N -- ARGS` in a new pid namespace whose next pid is `next`.
/// `None` where this machine cannot make pid namespaces (not root, or no `unshare`).
fn launch_at_pid(next: u32, n: u32, args: &str) -> Option<std::process::Output> {
    let script =
        format!("echo {next} > /proc/sys/kernel/ns_last_pid && exec {BIN} launch -n {n} -- {args}");
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "sh", "-c", &script])
        .output()
        .ok()?;
    let err = text(&out.stderr);
    if !out.status.success()
        && (err.contains("unshare failed") || err.contains("Permission denied"))
    {
        return None;
    }
    Some(out)
}

#[test]
fn shm_ranks_whose_addresses_differ_in_length_connect() {
    // The launcher takes the next pid, its ranks the ones after: 9997 | 9998 9999 10000 10001.
    let Some(out) = launch_at_pid(9996, 4, "alltoall -p shm -b 1K -e 4K -n 5 -w 1") else {
        eprintln!("skipped: this machine cannot make pid namespaces (needs root and unshare)");
        return;
    };
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "alltoall: {o}\n{e}");
    assert!(o.contains("Errors: 0 OK"), "{o}");
    // Two ranks: 9998 | 9999 10000.
    let out = launch_at_pid(9997, 2, "sendrecv -p shm -b 8 -e 64 -n 20 -w 2")
        .expect("pid namespaces worked a moment ago");
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "sendrecv: {o}\n{e}");
    assert!(o.contains("Errors: 0 OK"), "{o}");
}
