//! The fault matrix, jobs, ports and options: two jobs at once, a taken port named with the fix,
//! ranks started with different options, and a long step beside an idle third rank (healthy).

mod common;
#[path = "common/faults.rs"]
mod faults;

use faults::*;
use std::net::TcpListener;
use std::time::Duration;

#[test]
fn two_jobs_at_once_do_not_interfere() {
    let _one = serial();
    let dir = tempdir("two-jobs");
    let outs = [dir.join("a.jsonl"), dir.join("b.jsonl")];
    let sweep = "sendrecv -b 8 -e 1K -n 50 -w 2 -p tcp --timeout 20 -o";
    let mut jobs: Vec<Proc> = outs
        .iter()
        .map(|out| {
            let mut c = launch(2, &[], sweep);
            c.arg(out);
            start(c)
        })
        .collect();
    for j in &mut jobs {
        assert!(j.wait(Duration::from_secs(120)), "a job did not end");
        assert_eq!(j.code(), Some(0), "{}", j.stderr());
    }
    let counts: Vec<usize> = outs.iter().map(|o| intact_records(o)).collect();
    // 8 sizes x 2 variants x 1 peer each.
    assert_eq!(counts, [16, 16]);
}

#[test]
fn a_taken_port_is_named_with_the_fix() {
    let _one = serial();
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let rdzv = format!("127.0.0.1:{port}");
    let args = |rank| sendrecv_rank(rank, 2, &rdzv, "8", &[]);
    let mut zero = start(args(0));
    let mut one = start(args(1));
    assert!(zero.wait(SLACK));
    let err = zero.stderr();
    assert_eq!(zero.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&port.to_string()) && err.contains("already in use") && err.contains("--rdzv"),
        "{err}"
    );
    // Rank 1 finds something that is not a rendezvous: it gives up within its timeout.
    assert!(
        one.wait(BENCH_TIMEOUT * 2 + SLACK),
        "rank 1 hangs on the squatter"
    );
    let err = one.stderr();
    assert_eq!(one.code(), Some(1), "{err}");
    assert!(err.contains(&rdzv), "{err}");
    drop(squatter);
}

/// Ranks started by hand with different options are told so (without the check they
/// would see "Truncation error" or millions of payload errors).
#[test]
fn different_options_are_named() {
    let _one = serial();
    let rdzv = free_rdzv();
    let mut procs: Vec<Proc> = [(0, "--check"), (1, "--no-check")]
        .into_iter()
        .map(|(rank, check)| start(sendrecv_rank(rank, 2, &rdzv, "1K", &[check])))
        .collect();
    for p in &mut procs {
        assert!(p.wait(BENCH_TIMEOUT + SLACK));
        let err = p.stderr();
        assert_eq!(p.code(), Some(2), "{err}");
        assert!(
            err.contains("rank 1 was started with different options than rank 0")
                && err.contains("--no-check"),
            "{err}"
        );
    }
}

/// With three ranks, rank 2 idles in a collective while ranks 0 and 1 run a step longer than
/// --timeout: healthy, and it must pass (it did with two ranks, not with three).
#[test]
fn a_long_step_with_an_idle_third_rank_is_not_a_timeout() {
    let _one = serial();
    let step = "sendrecv -b 1M -e 1M -n 4000 -p tcp --timeout 3 --variant pingpong";
    let mut launch = start(launch(3, &[], step));
    assert!(launch.wait(Duration::from_secs(600)));
    assert_eq!(launch.code(), Some(0), "{}", launch.stderr());
}
