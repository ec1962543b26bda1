//! `efabench queue` as the built binary: bad options are refused (exit 2, one line) before any
//! GPU probe, and on a machine without a CUDA driver (CI) the run exits 2 saying so.

use std::process::{Command, Output};

fn efabench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_efabench"))
        .args(args)
        .env("EFABENCH_KERNEL_CACHE", "0")
        .output()
        .expect("run efabench")
}

fn one_line_exit_2(o: &Output, wants: &[&str]) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {e}");
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    for w in wants {
        assert!(e.contains(w), "{w:?} missing from: {e}");
    }
}

#[test]
fn bad_options_are_refused_before_the_gpu_is_touched() {
    one_line_exit_2(
        &efabench(&["queue", "--ring", "fifo"]),
        &["fifo", "pinned", "libefaxx"],
    );
    one_line_exit_2(
        &efabench(&["queue", "--producers", "1x2048"]),
        &["1x2048", "SMx1024"],
    );
    one_line_exit_2(
        &efabench(&["queue", "--consumers", "9"]),
        &["--consumers", "1 to 8"],
    );
    one_line_exit_2(
        &efabench(&["queue", "--mode", "quiet"]),
        &["nbi", "blocking"],
    );
    one_line_exit_2(&efabench(&["queue", "--commands", "0"]), &["--commands"]);
    // Options of groups the queue does not take are refused by clap, an explicit default too.
    for (opt, val) in [("-n", "10"), ("-b", "8"), ("-p", "tcp"), ("--mem", "host")] {
        one_line_exit_2(
            &efabench(&["queue", opt, val]),
            &[&format!("unexpected argument '{opt}'")],
        );
    }
    one_line_exit_2(
        &efabench(&["queue", "--no-check"]),
        &["verifies", "--no-check"],
    );
}

#[test]
fn without_a_cuda_driver_queue_exits_2_saying_so() {
    // The library's own answer to "is there a driver", the one `queue` acts on.
    if !efabench_gpu::driver().is_err_and(|e| e.is_no_driver()) {
        println!("skipped: a CUDA driver is present (this test is for machines without one)");
        return;
    }
    let o = efabench(&["queue", "--producers", "1x32", "--mode", "nbi"]);
    one_line_exit_2(&o, &["no CUDA driver"]);
    assert!(o.stdout.is_empty() || !String::from_utf8_lossy(&o.stdout).contains("pinned/"));
}
