//! `pairs`, `alltoall`, `alltoallv` and `ep` across simulated nodes (network namespaces on a bridge, each with its
//! own hostname and address, tcp provider, ranks started by hand): a node throttled with `tc` is
//! measured within the time budget and named, with the direction of the fault; healthy clusters
//! name nobody. Small sizes and short time budgets keep each test to seconds.

mod common;

use common::netns::{Cluster, Impair, Side};
use common::{all_ok, text};
use std::process::Output;
use std::sync::{Mutex, MutexGuard};

/// One simulated cluster at a time: on a 2-core host, clusters measured at once share the CPU
/// and the healthy pairs drop to the throttled ones' speed.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn suspects(err: &str) -> Vec<String> {
    err.lines()
        .filter(|l| l.starts_with("# suspect"))
        .map(str::to_string)
        .collect()
}

fn ok(outs: &[Output]) -> String {
    all_ok(outs, "simulated nodes");
    let err = text(&outs[0].stderr);
    println!("{}\n{err}", text(&outs[0].stdout));
    err
}

/// The judgement of most cases here: the run's output names one suspect, `who`; otherwise the
/// output, for the failure message.
fn names_alone(err: String, who: &str) -> Result<(), String> {
    let s = suspects(&err);
    if s.len() == 1 && s[0].contains(who) {
        Ok(())
    } else {
        Err(err)
    }
}

/// Runs one measurement and its judgement, once (no retries: a wrong verdict is a product
/// defect), and fails the test with the run's output when the judgement is wrong.
fn judged(run: impl FnOnce() -> Result<(), String>) {
    if let Err(e) = run() {
        panic!("{e}");
    }
}

/// `pairs` over tcp at one size with a short budget per pair (0.3 s unless `extra` sets one).
fn pairs(c: &mut Cluster, size: &str, extra: &[&str]) -> String {
    let mut args = vec!["pairs", "-p", "tcp", "-b", size, "-e", size];
    args.extend_from_slice(extra);
    if !extra.contains(&"--max-time") {
        args.extend(["--max-time", "0.3"]);
    }
    ok(&c.job(&args, |_| Vec::new()))
}

/// The acceptance case with default options: four nodes, one at 300 Mbit/s both ways.
#[test]
fn four_nodes_one_throttled_is_named_alone() {
    let _one = serial();
    let Some(mut c) = Cluster::new(4) else { return };
    c.impair(2, Side::Both, Impair::rate(300));
    let outs = c.job(&["pairs", "-b", "1M", "-e", "1M"], |_| Vec::new());
    let err = ok(&outs);
    let out = text(&outs[0].stdout);
    let s = suspects(&err);
    assert_eq!(s.len(), 1, "{err}");
    assert!(
        s[0].contains("rank 2 on node3 NIC eth0 (sending and receiving)"),
        "{}",
        s[0]
    );
    assert!(
        out.contains("# schedule: all ordered pairs: 3 rounds of 4 pairs at once"),
        "{out}"
    );
}

#[test]
fn three_nodes_one_throttled_is_named_although_its_pairs_are_the_majority() {
    let _one = serial();
    let Some(mut c) = Cluster::new(3) else { return };
    c.impair(1, Side::Both, Impair::rate(100));
    let err = pairs(&mut c, "256K", &[]);
    let s = suspects(&err);
    assert_eq!(s.len(), 1, "{err}");
    assert!(s[0].contains("rank 1 on node2"), "{}", s[0]);
    assert!(
        s[0].contains("its 4 pairs sending and receiving"),
        "{}",
        s[0]
    );
}

#[test]
fn one_direction_is_named_as_such() {
    let _one = serial();
    let Some(mut c) = Cluster::new(4) else { return };
    c.impair(3, Side::Sending, Impair::rate(100));
    // One pair at a time: in a ring shift the node's acknowledgements of what it receives
    // queue behind its own throttled sends (one egress, one tcp connection per peer).
    judged(|| {
        let err = pairs(&mut c, "256K", &["--one-at-a-time", "--max-time", "0.2"]);
        names_alone(err, "rank 3 on node4 NIC eth0 (sending)")
    });
}

#[test]
fn eight_nodes_two_throttled_and_eight_healthy() {
    let _one = serial();
    let Some(mut c) = Cluster::new(8) else { return };
    // Eight ranks share two cores, so the scheduler alone slows a healthy node's pairs: a rank it
    // starved measured its sends at 54% of the others at 0.2 s per pair, and rank 0 (which also
    // gathers and prints) at 58% at 0.5 s, both in CI runs and both named, as measured, at the
    // default 60% margin. This test is about finding two nodes at 1% among eight, so its margin
    // sits below what this host's CPU does to healthy nodes: 30%.
    let small = [
        "--window",
        "4",
        "--max-time",
        "0.5",
        "--suspect-below",
        "30",
    ];
    let err = pairs(&mut c, "64K", &small);
    assert!(
        suspects(&err).is_empty(),
        "healthy cluster named someone:\n{err}"
    );
    assert!(err.contains("# no suspect at 65536 B"), "{err}");
    // Eight ranks on a small host are CPU-bound well below 100 Mbit/s per pair.
    c.impair(1, Side::Both, Impair::rate(10));
    c.impair(6, Side::Both, Impair::rate(10));
    judged(|| {
        let err = pairs(&mut c, "64K", &small);
        let s = suspects(&err);
        let named = |n: &str| s.iter().any(|l| l.contains(n));
        if s.len() == 2 && named("rank 1 on node2") && named("rank 6 on node7") {
            Ok(())
        } else {
            Err(err)
        }
    });
}

#[test]
fn a_lossy_node_is_named() {
    let _one = serial();
    let Some(mut c) = Cluster::new(4) else { return };
    let lossy = Impair {
        loss_pct: Some(10.0),
        ..Impair::default()
    };
    if let Err(e) = c.try_impair(0, Side::Both, lossy) {
        eprintln!("skipped: packet loss needs the netem qdisc or nftables ({e})");
        return;
    }
    // With 10% loss a tcp pair's rate swings between retransmission timeouts, and on a loaded
    // 2-core host a 0.3 s budget holds only a few windows per pair: give each pair two seconds,
    // so that its median window is the loss's typical rate. A retransmission lost several times in a row backs the
    // connection's timer off exponentially (0.2, 0.4, 0.8 ... s); once, in CI, a pair here went
    // the default 30 s `--timeout` without a completion, which fits such a backoff. The link is
    // alive, so the job allows it 120 s.
    judged(|| {
        let err = pairs(&mut c, "256K", &["--max-time", "2", "--timeout", "120"]);
        names_alone(err, "rank 0 on node1")
    });
}

/// Sixteen nodes with the cheap schedule: a ring (each rank with its two neighbours), then two
/// retest rounds that pair the suspect with ranks not named: 4 rounds of 16 pairs in place of
/// 15, and the throttled node alone is named. (16 ranks on two cores: at 0.1 s per pair a
/// starved rank once measured its sends at 52% and was named too, as measured; the margin here is
/// 30%, below what the host's CPU does to healthy nodes, the throttled one sitting near 1%.)
#[test]
fn sixteen_nodes_ring_then_retest_names_the_throttled_one() {
    let _one = serial();
    let Some(mut c) = Cluster::new(16) else {
        return;
    };
    c.impair(5, Side::Both, Impair::rate(4));
    let args = [
        "pairs",
        "-p",
        "tcp",
        "-b",
        "64K",
        "-e",
        "64K",
        "--window",
        "4",
        "--max-time",
        "0.25",
        "--pairs",
        "ring",
        "--suspect-below",
        "30",
    ];
    judged(|| {
        let outs = c.job(&args, |_| Vec::new());
        let err = ok(&outs);
        let out = text(&outs[0].stdout);
        assert!(
            out.contains(
                "# schedule: ring, each rank with its two neighbours: 2 rounds of 16 pairs"
            ),
            "{out}"
        );
        assert!(out.contains("then 2 retest rounds"), "{out}");
        assert!(out.contains("= 64 pair measurements"), "{out}");
        names_alone(err, "rank 5 on node6")
    });
}

/// Two NICs per node (eth0 and eth1 on two bridges), `--rails 2` over tcp: node3's eth1 is
/// throttled, and the suspect NIC is named by rail and domain from each rail measured alone.
#[test]
fn a_slow_rail_of_two_is_named_by_its_domain() {
    let _one = serial();
    let Some(mut c) = Cluster::with_nics(4, 2) else {
        return;
    };
    c.try_impair_nic(2, 1, Side::Both, Impair::rate(20))
        .expect("tc on eth1");
    let err = pairs(&mut c, "256K", &["--rails", "2", "--window", "4"]);
    let nic: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("# suspect NIC"))
        .collect();
    assert_eq!(nic.len(), 1, "{err}");
    assert!(nic[0].contains("rank 2 on node3 rail"), "{}", nic[0]);
    assert!(nic[0].contains("(domain eth1)"), "{}", nic[0]);
}

/// `alltoall` across four nodes, one throttled: every size stops within its time budget on
/// every rank at once, the job exits 0, and the slowest rank is named with its host.
///
/// The node is named where the timed loop's arrival times and those after a barrier agree. The
/// chunks (128 and 256 KiB) take 50-100 ms through the 20 Mbit/s throttle, more than the
/// barrier's release skew when four ranks share two busy cores.
#[test]
fn alltoall_names_the_slowest_node_within_the_budget() {
    let _one = serial();
    let Some(mut c) = Cluster::new(4) else { return };
    c.impair(2, Side::Both, Impair::rate(20));
    let args = [
        "alltoall",
        "-p",
        "tcp",
        "-b",
        "512K",
        "-e",
        "1M",
        "--max-time",
        "0.5",
        "--format",
        "json",
    ];
    let outs = c.job(&args, |_| Vec::new());
    let err = ok(&outs);
    let out = text(&outs[0].stdout);
    let recs: Vec<serde_json::Value> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON record"))
        .collect();
    assert_eq!(recs.len(), 2, "{out}");
    for r in &recs {
        assert_eq!(r["stopped_by"], "time", "{r}");
        assert!(r["iters"].as_u64().unwrap() >= 1, "{r}");
    }
    // Every rank waits for node3's chunks, so the ranks' times are alike; the per-peer
    // arrival matrix names it.
    let s: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("# slowest node"))
        .collect();
    assert_eq!(s.len(), 2, "{err}");
    assert!(s.iter().all(|l| l.contains("rank 2 on node3")), "{s:?}");
}

/// `alltoallv` (hot destinations) and `ep` (dispatch and combine) across four nodes, one
/// throttled: both name it with its host from the per-source arrival times.
#[test]
fn alltoallv_and_ep_name_the_throttled_node() {
    let _one = serial();
    let Some(mut c) = Cluster::new(4) else { return };
    c.impair(2, Side::Both, Impair::rate(20));
    let v = [
        "alltoallv",
        "-p",
        "tcp",
        "--counts",
        "zipf:0.5",
        "-b",
        "1M",
        "-e",
        "1M",
        "--max-time",
        "0.5",
    ];
    let err = ok(&c.job(&v, |_| Vec::new()));
    let s: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("# slowest node"))
        .collect();
    assert_eq!(s.len(), 1, "{err}");
    assert!(s[0].contains("rank 2 on node3"), "{s:?}");
    judged(|| {
        let e = [
            "ep",
            "-p",
            "tcp",
            "--tokens",
            "32",
            "--hidden",
            "2048",
            "--experts",
            "8",
            "--topk",
            "2",
            "-n",
            "12",
            "-w",
            "1",
            "--initiator",
            "cpu",
        ];
        let outs = c.job(&e, |_| Vec::new());
        let all = format!("{}{}", text(&outs[0].stdout), ok(&outs));
        let named: Vec<&str> = all
            .lines()
            .filter(|l| l.contains("# slowest node in"))
            .collect();
        let want = ["dispatch/cpu", "combine/cpu"];
        if named.len() == 2
            && want.iter().all(|w| {
                named
                    .iter()
                    .any(|l| l.contains(w) && l.contains("rank 2 on node3"))
            })
        {
            Ok(())
        } else {
            Err(format!("want rank 2 on node3 named for {want:?}:\n{all}"))
        }
    });
}

/// A rank killed in the middle of `pairs` fails the job within the timeout, and the others name
/// it with its host.
#[test]
fn a_rank_killed_mid_pairs_is_named_by_host() {
    let _one = serial();
    let Some(mut c) = Cluster::new(4) else { return };
    let mut kids = c.start_job(
        &[
            "pairs",
            "-p",
            "tcp",
            "-b",
            "256K",
            "-e",
            "256K",
            "-n",
            "1000000",
            "--max-time",
            "600",
            "--timeout",
            "5",
        ],
        |_| Vec::new(),
    );
    std::thread::sleep(std::time::Duration::from_secs(3));
    kids[2].kill().unwrap();
    let t0 = std::time::Instant::now();
    let outs: Vec<Output> = kids.into_iter().map(|k| c.reap(k)).collect();
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(25),
        "the job took {:?} to end after rank 2 was killed",
        t0.elapsed()
    );
    for (r, o) in outs.iter().enumerate() {
        if r == 2 {
            continue;
        }
        assert!(!o.status.success(), "rank {r} must fail");
        let err = text(&o.stderr);
        assert!(
            err.contains("rank 2") && err.contains("node3"),
            "rank {r} must name rank 2 and its host node3: {err}"
        );
    }
}
