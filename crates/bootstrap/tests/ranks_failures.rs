//! Failure detection without a launcher: ranks killed or frozen while the others poll or wait
//! in a barrier, an abort, a rank that left or never came, mismatched collectives, and a long
//! step with and without progress ticks. Every surviving rank names the culprit.

mod common;

use common::*;
use std::time::{Duration, Instant};

use efabench_bootstrap::{Bootstrap, BootstrapError};
use rustix::process::Signal;

fn sigkill_a_rank_while_others_poll_check() {
    let mut procs = start_ranks(4, "poll", 2, FAIL_TIMEOUT);
    let t0 = Instant::now();
    procs[2].child.kill().unwrap();
    expect_others_fail(&mut procs, 2, t0, FAIL_TIMEOUT + SLACK, "died");
}

fn sigstop_a_rank_while_others_poll_check() {
    let mut procs = start_ranks(4, "poll", 1, FAIL_TIMEOUT);
    let t0 = Instant::now();
    signal(&procs[1].child, Signal::STOP);
    expect_others_fail(&mut procs, 1, t0, FAIL_TIMEOUT + SLACK, "stopped answering");
}

fn sigstop_rank_0_while_others_wait_in_a_barrier() {
    let mut procs = start_ranks(3, "barrier", 0, FAIL_TIMEOUT);
    let t0 = Instant::now();
    signal(&procs[0].child, Signal::STOP);
    expect_others_fail(
        &mut procs,
        0,
        t0,
        FAIL_TIMEOUT + SLACK,
        "rank 0 stopped answering",
    );
}

fn abort_reaches_every_rank_with_its_reason() {
    let rdzv = free_rdzv();
    let handles: Vec<_> = (0..3)
        .map(|r| {
            let i = info(r, 3, &rdzv, "abort-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                if r == 2 {
                    b.abort("the NIC is missing");
                    return b.check();
                }
                b.barrier()
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let e = h.join().unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            "rank 2 aborted the job: the NIC is missing",
            "rank {r}"
        );
    }
}

fn a_rank_that_left_cannot_be_waited_for() {
    let rdzv = free_rdzv();
    let i1 = info(1, 2, &rdzv, "left-test");
    let leaver =
        std::thread::spawn(move || Bootstrap::connect(&i1, Duration::from_secs(20)).map(drop));
    let b = Bootstrap::connect(&info(0, 2, &rdzv, "left-test"), Duration::from_secs(20)).unwrap();
    leaver.join().unwrap().unwrap();
    let e = b.barrier().unwrap_err();
    assert!(matches!(e, BootstrapError::Left { rank: 1, .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("rank 1 already left the job but barrier #1 still needs it"),
        "{e}"
    );
}

fn a_rank_that_never_comes_is_named_by_everyone() {
    let rdzv = free_rdzv();
    let i1 = info(1, 3, &rdzv, "missing-test");
    let t = Duration::from_secs(1);
    let one = std::thread::spawn(move || Bootstrap::connect(&i1, t).map(drop));
    let t0 = Instant::now();
    let e0 = Bootstrap::connect(&info(0, 3, &rdzv, "missing-test"), t).unwrap_err();
    let e1 = one.join().unwrap().unwrap_err();
    for e in [e0, e1] {
        assert!(
            e.to_string()
                .starts_with("rank 2 did not join the job within 1 s"),
            "{e}"
        );
    }
    assert!(t0.elapsed() < t + SLACK);
}

fn mismatched_collectives_fail_on_every_rank() {
    let rdzv = free_rdzv();
    let handles: Vec<_> = (0..3)
        .map(|r| {
            let i = info(r, 3, &rdzv, "mismatch-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                if r == 1 {
                    b.all_gather(b"x").map(drop)
                } else {
                    b.barrier()
                }
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(
            e.contains("must call the same collectives in the same order"),
            "rank {r}: {e}"
        );
    }
}

/// Three ranks: 0 and 1 run a "measured step" three times as long as the timeout while rank 2
/// waits in a barrier. With progress ticks the job is healthy; without, the barrier times out
/// naming the ranks that did not arrive.
fn three_ranks_busy_step(tick: bool) -> Vec<Result<(), BootstrapError>> {
    let rdzv = free_rdzv();
    let timeout = Duration::from_millis(800);
    let handles: Vec<_> = (0..3)
        .map(|r| {
            let i = info(r, 3, &rdzv, "progress-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, timeout)?;
                b.barrier()?;
                if r < 2 {
                    let progress = b.progress();
                    let t0 = Instant::now();
                    while t0.elapsed() < timeout * 3 {
                        if tick {
                            progress.tick();
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                b.barrier()?;
                b.barrier()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn a_long_step_with_progress_is_not_a_timeout() {
    for (r, res) in three_ranks_busy_step(true).into_iter().enumerate() {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

fn a_long_step_without_progress_times_out_naming_the_ranks() {
    for (r, res) in three_ranks_busy_step(false).into_iter().enumerate() {
        let e = res.unwrap_err().to_string();
        assert!(
            e.contains("waiting for ranks 0 and 1: no rank made progress"),
            "rank {r}: {e}"
        );
    }
}

fn main() {
    common::main(&[
        (
            "abort_reaches_every_rank_with_its_reason",
            abort_reaches_every_rank_with_its_reason,
        ),
        (
            "a_rank_that_left_cannot_be_waited_for",
            a_rank_that_left_cannot_be_waited_for,
        ),
        (
            "a_rank_that_never_comes_is_named_by_everyone",
            a_rank_that_never_comes_is_named_by_everyone,
        ),
        (
            "mismatched_collectives_fail_on_every_rank",
            mismatched_collectives_fail_on_every_rank,
        ),
        (
            "sigkill_a_rank_while_others_poll_check",
            sigkill_a_rank_while_others_poll_check,
        ),
        (
            "sigstop_a_rank_while_others_poll_check",
            sigstop_a_rank_while_others_poll_check,
        ),
        (
            "sigstop_rank_0_while_others_wait_in_a_barrier",
            sigstop_rank_0_while_others_wait_in_a_barrier,
        ),
        (
            "a_long_step_with_progress_is_not_a_timeout",
            a_long_step_with_progress_is_not_a_timeout,
        ),
        (
            "a_long_step_without_progress_times_out_naming_the_ranks",
            a_long_step_without_progress_times_out_naming_the_ranks,
        ),
    ]);
}
