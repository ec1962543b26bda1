//! `launch` with real rank processes on loopback: collectives under 1 to 16 ranks, a rank that is
//! killed, freezes, fails or dies before joining ends the job with the right status, signals to
//! `launch` reach the ranks (or kill them with it), and the watchdog ends ranks stuck outside the
//! bootstrap. The roles and helpers are in `common/mod.rs`.

mod common;

use common::*;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::process::Signal;

fn collectives_under_launch(n: u32) {
    let (p, took) = run_launch(n, "collectives", &[]);
    let (out, err) = (p.stdout(), p.stderr());
    assert_eq!(p.status.unwrap().code(), Some(0), "launch -n {n}: {err}");
    assert_eq!(
        out,
        format!("OK {n} ranks\n"),
        "only rank 0's stdout is shown"
    );
    for r in 0..n {
        assert!(
            err.contains(&format!("[rank {r}] rank {r} ok\n")),
            "rank {r} missing: {err}"
        );
    }
    eprintln!("    {n} ranks: all_gather/barrier/gather/broadcast ok in {took:.2?}");
}

fn launch_1_rank() {
    collectives_under_launch(1)
}

fn launch_2_ranks() {
    collectives_under_launch(2)
}

fn launch_8_ranks() {
    collectives_under_launch(8)
}

fn launch_16_ranks() {
    collectives_under_launch(16)
}

fn launch_ends_the_job_when_a_rank_is_killed() {
    let t = FAIL_TIMEOUT.as_secs_f64().to_string();
    let (p, took) = run_launch(
        4,
        "barrier",
        &[
            (VICTIM, "3"),
            (ACTION, "selfkill"),
            (TIMEOUT, &t),
            (GRACE, "5"),
        ],
    );
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(137), "{err}");
    assert!(
        err.contains("efabench launch: rank 3 was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    // The other ranks noticed on their own and named the dead rank.
    for r in 0..3 {
        assert!(
            err.contains(&format!("[rank {r}] rank {r}: rank 3 on ")) && err.contains(" died"),
            "rank {r}: {err}"
        );
    }
    assert!(took < FAIL_TIMEOUT + SLACK, "took {took:?}");
}

fn launch_ends_the_job_when_a_rank_freezes() {
    let t = FAIL_TIMEOUT.as_secs_f64().to_string();
    let (p, took) = run_launch(
        4,
        "poll",
        &[
            (VICTIM, "1"),
            (ACTION, "selfstop"),
            (TIMEOUT, &t),
            (GRACE, "1"),
        ],
    );
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(1), "{err}");
    assert!(
        err.contains("rank 1 on ") && err.contains(" stopped answering"),
        "{err}"
    );
    assert!(
        err.contains("still running"),
        "the stopped rank had to be stopped by launch: {err}"
    );
    assert!(took < FAIL_TIMEOUT + SLACK, "took {took:?}");
}

fn launch_exits_with_the_first_failing_status() {
    let (p, _) = run_launch(3, "exit2", &[(VICTIM, "1"), (TIMEOUT, "20"), (GRACE, "1")]);
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(2), "{err}");
    assert!(err.contains("[rank 1] bad option"), "{err}");
    assert!(
        err.contains("efabench launch: rank 1 exited with status 2"),
        "{err}"
    );
}

fn launch_forwards_sigint() {
    let mut c = command("launcher");
    c.env(RANKS, "2").env(MODE, "poll").env(TIMEOUT, "20");
    let (tx, rx) = mpsc::channel();
    let mut p = start(c, Some(tx));
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("rank 0 did not get ready");
    assert_eq!(line, "READY 0");
    signal(&p.child, Signal::INT);
    assert!(
        p.wait_until(Instant::now() + Duration::from_secs(30)),
        "launch ignored SIGINT"
    );
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(130), "{err}");
    assert!(
        err.contains("received SIGINT; passing SIGINT on to the ranks"),
        "{err}"
    );
}

fn the_watchdog_ends_ranks_stuck_outside_the_bootstrap() {
    let t = FAIL_TIMEOUT.as_secs_f64().to_string();
    let (p, took) = run_launch(
        3,
        "watchdog",
        &[
            (VICTIM, "1"),
            (ACTION, "selfkill"),
            (TIMEOUT, &t),
            (GRACE, "30"),
        ],
    );
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(137), "{err}");
    for r in [0, 2] {
        assert!(
            err.contains(&format!("[rank {r}] efabench: rank {r}: rank 1 on "))
                && err.contains(" died"),
            "rank {r}: {err}"
        );
    }
    assert!(err.contains("ended by the watchdog"), "{err}");
    assert!(
        !err.contains("still running"),
        "launch had to stop them: {err}"
    );
    assert!(took < FAIL_TIMEOUT + SLACK, "took {took:?}");
}

fn pids_in(text: &str) -> Vec<i32> {
    text.lines()
        .filter_map(|l| {
            l.split_once(" pid ")
                .and_then(|(_, p)| p.trim().parse().ok())
        })
        .collect()
}

/// Gone, or a zombie waiting for a parent that does not reap.
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

fn ranks_die_with_a_killed_launcher(sig: Signal, code: Option<i32>) {
    let mut c = command("launcher");
    c.env(RANKS, "3").env(MODE, "poll").env(TIMEOUT, "60");
    let mut p = start(c, None);
    let until = Instant::now() + Duration::from_secs(60);
    let pids = loop {
        let pids = pids_in(&p.stderr());
        if pids.len() == 3 {
            break pids;
        }
        assert!(
            Instant::now() < until,
            "ranks did not start: {}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    signal(&p.child, sig);
    assert!(p.wait_until(Instant::now() + Duration::from_secs(30)));
    assert_eq!(p.status.unwrap().code(), code, "{}", p.stderr());
    let until = Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(|&pid| process_gone(pid)) {
        assert!(
            Instant::now() < until,
            "ranks {pids:?} outlived launch killed by {sig:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ranks_die_with_a_sigkilled_launcher() {
    ranks_die_with_a_killed_launcher(Signal::KILL, None)
}

fn sighup_to_launch_ends_the_ranks() {
    ranks_die_with_a_killed_launcher(Signal::HUP, Some(129))
}

fn a_rank_dead_before_joining_ends_the_job_at_once() {
    // The others would wait 60 s to join and then get 30 s of grace: launch must not wait.
    let (p, took) = run_launch(4, "exit2", &[(VICTIM, "2"), (TIMEOUT, "60"), (GRACE, "30")]);
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(2), "{err}");
    assert!(err.contains("had not joined the job yet"), "{err}");
    // The rank's own words come before launch's summary.
    let own = err.find("[rank 2] bad option").expect("rank 2's message");
    let summary = err.find("efabench launch: rank 2 exited").expect("summary");
    assert!(own < summary, "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {err}");
}

fn main() {
    common::main(&[
        ("launch_1_rank", launch_1_rank),
        ("launch_2_ranks", launch_2_ranks),
        ("launch_8_ranks", launch_8_ranks),
        ("launch_16_ranks", launch_16_ranks),
        (
            "launch_ends_the_job_when_a_rank_is_killed",
            launch_ends_the_job_when_a_rank_is_killed,
        ),
        (
            "launch_ends_the_job_when_a_rank_freezes",
            launch_ends_the_job_when_a_rank_freezes,
        ),
        (
            "launch_exits_with_the_first_failing_status",
            launch_exits_with_the_first_failing_status,
        ),
        ("launch_forwards_sigint", launch_forwards_sigint),
        (
            "the_watchdog_ends_ranks_stuck_outside_the_bootstrap",
            the_watchdog_ends_ranks_stuck_outside_the_bootstrap,
        ),
        (
            "ranks_die_with_a_sigkilled_launcher",
            ranks_die_with_a_sigkilled_launcher,
        ),
        (
            "sighup_to_launch_ends_the_ranks",
            sighup_to_launch_ends_the_ranks,
        ),
        (
            "a_rank_dead_before_joining_ends_the_job_at_once",
            a_rank_dead_before_joining_ends_the_job_at_once,
        ),
    ]);
}
