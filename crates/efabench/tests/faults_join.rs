//! The fault matrix, before the job is complete: a rank killed or frozen right after it starts,
//! before it joins. The others end within the timeout naming it; under `launch` the job ends at
//! once.

mod common;
#[path = "common/faults.rs"]
mod faults;

use faults::*;
use std::time::{Duration, Instant};

use rustix::process::Signal;

/// Ranks started by hand; `victim` is hit right after it starts, before it can join. The others
/// end within the timeout, naming it (or, for rank 0, the rendezvous they cannot reach).
fn before_join(n: u32, victim: u32, fault: Fault) {
    let _one = serial();
    let rdzv = free_rdzv();
    let mut procs: Vec<Proc> = (0..n)
        .map(|r| {
            let p = start(sendrecv_rank(r, n, &rdzv, "8", &[]));
            if r == victim {
                signal(p.pid(), fault.signal());
            }
            p
        })
        .collect();
    let t0 = Instant::now();
    let pids: Vec<i32> = procs.iter().map(Proc::pid).collect();
    for (r, p) in procs.iter_mut().enumerate() {
        if r as u32 == victim {
            continue;
        }
        assert!(
            p.wait(BENCH_TIMEOUT * 2 + SLACK),
            "rank {r} still waits {:?} after rank {victim} was hit",
            t0.elapsed()
        );
        let err = p.stderr();
        assert_eq!(p.code(), Some(1), "rank {r}: {err}");
        let named = if victim == 0 {
            err.contains("could not reach rank 0's rendezvous")
                || err.contains("rank 0 died")
                || err.contains("rank 0 stopped answering")
        } else {
            err.contains(&format!("rank {victim}"))
        };
        assert!(named, "rank {r} does not name the cause: {err}");
        assert_eq!(err.lines().count(), 1, "rank {r}: one line: {err}");
    }
    signal(pids[victim as usize], Signal::KILL);
    let _ = procs[victim as usize].wait(Duration::from_secs(5));
    assert_all_gone(&pids, "before join");
    eprintln!(
        "    {n} ranks: {fault:?} rank {victim} before it joined -> others ended in {:.2?}",
        t0.elapsed()
    );
}

#[test]
fn kill_rank_1_of_2_before_join() {
    before_join(2, 1, Fault::Kill);
}

#[test]
fn kill_rank_0_of_4_before_join() {
    before_join(4, 0, Fault::Kill);
}

#[test]
fn stop_rank_3_of_4_before_join() {
    before_join(4, 3, Fault::Stop);
}

/// Under launch, a rank that dies before joining ends the job at once: launch knows.
#[test]
fn launch_ends_the_job_at_once_when_a_rank_dies_before_joining() {
    let _one = serial();
    let bench = "sendrecv -b 8 -e 8 -n 10 -p tcp --timeout 60";
    let mut launch = start(launch(4, &["--timeout", "30"], bench));
    // Kill rank 2 the moment it exists.
    let until = Instant::now() + Duration::from_secs(30);
    let victim = loop {
        if let Some(&(_, pid)) = ranks_of(launch.pid()).iter().find(|(r, _)| *r == 2) {
            break pid;
        }
        assert!(Instant::now() < until, "rank 2 never started");
    };
    signal(victim, Signal::KILL);
    let t0 = Instant::now();
    let pids = ranks_of(launch.pid())
        .into_iter()
        .map(|(_, p)| p)
        .collect::<Vec<_>>();
    assert!(
        launch.wait(SLACK),
        "launch waited for a rank that never joined"
    );
    let err = launch.stderr();
    assert_eq!(launch.code(), Some(137), "{err}");
    assert!(
        err.contains("rank 2 was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?}: {err}",
        t0.elapsed()
    );
    assert_all_gone(&pids, "launch, rank dead before joining");
}
