//! The verdicts from synthetic reports and matrices: checks, consistency, the pairs'
//! decision, the floor, lost nodes and the cluster-wide failure.
use super::*;
use crate::consistency::compare;
use efabench_bench::locate::PairBw;

fn hosts(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node{i}")).collect()
}

fn report(host: &str, checks: &[(&str, CheckStatus)], f: impl Fn(&mut NodeFacts)) -> NodeReport {
    let mut facts = NodeFacts {
        efa_devices: 4,
        libfabric: Some("2.1.0".into()),
        ..NodeFacts::default()
    };
    f(&mut facts);
    NodeReport {
        host: host.into(),
        checks: checks
            .iter()
            .map(|(id, s)| NodeCheck {
                id: id.to_string(),
                status: *s,
                summary: format!("{id} summary"),
                fix: String::new(),
            })
            .collect(),
        facts,
    }
}

fn matrix(n: usize, f: impl Fn(usize, usize) -> f64) -> Matrix {
    let mut pairs = Vec::new();
    for s in 0..n {
        for d in (0..n).filter(|&d| d != s) {
            // A little spread, as measured pairs have.
            let g = f(s, d) * (1.0 + ((s * 7 + d * 3) % 5) as f64 * 0.02);
            pairs.push(PairBw {
                src: s,
                dst: d,
                gbps: g,
            });
        }
    }
    Matrix {
        size_bytes: 1 << 20,
        pairs,
        ..Matrix::default()
    }
}

fn relative() -> Thresholds {
    Thresholds::default()
}

fn run(
    reports: &[NodeReport],
    pairs: Option<&Matrix>,
    alltoall: Option<&Matrix>,
    lost: &[Lost],
    t: &Thresholds,
) -> Judgement {
    let h = hosts(4);
    let c = compare(reports);
    judge(&Inputs {
        rank_host: &h,
        reports,
        consistency: &c,
        pairs,
        alltoall,
        lost,
        thresholds: t,
    })
}

fn healthy() -> Vec<NodeReport> {
    hosts(4)
        .iter()
        .map(|h| report(h, &[("efa-devices", CheckStatus::Fail)], |_| {}))
        .collect()
}

#[test]
fn a_throttled_node_alone_is_isolated_with_its_evidence() {
    let m = matrix(4, |s, d| if s == 2 || d == 2 { 0.4 } else { 3.5 });
    let j = run(&healthy(), Some(&m), Some(&m), &[], &relative());
    let v: Vec<(&str, Verdict)> = j
        .nodes
        .iter()
        .map(|n| (n.host.as_str(), n.verdict))
        .collect();
    assert_eq!(
        v,
        [
            ("node1", Verdict::Pass),
            ("node2", Verdict::Pass),
            ("node3", Verdict::Isolate),
            ("node4", Verdict::Pass)
        ]
    );
    let n3 = &j.nodes[2];
    assert_eq!(n3.reasons[0].stage, "pairs");
    assert!(
        n3.reasons[0]
            .evidence
            .contains("node3: 11% of its peers [10-13%], 6 of 6 pairs below"),
        "{:?}",
        n3.reasons
    );
    let est = n3.pairs.as_ref().unwrap().estimate.unwrap();
    assert!(est.low < est.ratio && est.ratio < est.high && est.high < 0.85);
    assert!(n3
        .reasons
        .iter()
        .any(|r| r.stage == "alltoall" && r.verdict == Verdict::Warn));
    assert!(n3.pairs.as_ref().unwrap().ratio.unwrap() < 0.2);
    assert_eq!(j.worst(), Verdict::Isolate);
    // Failing everywhere (no EFA on any node) is the cluster's finding, not a node's.
    assert_eq!(j.cluster.len(), 1, "{:?}", j.cluster);
    assert!(
        j.cluster[0].contains("efa-devices fails on 4 of 4"),
        "{:?}",
        j.cluster
    );
    // ... and it fails the cluster as a whole, above the node to isolate.
    assert_eq!(j.cluster_failures, j.cluster);
    assert_eq!(j.cluster_verdict(), ClusterVerdict::Fail);
    assert_eq!(j.run_verdict(), RunVerdict::Fail);
    assert_eq!(j.ending(), Ending::ClusterFailed);
}

#[test]
fn a_check_failing_on_most_nodes_fails_the_cluster_and_a_warning_does_not() {
    let warn_everywhere: Vec<NodeReport> = hosts(4)
        .iter()
        .map(|h| report(h, &[("hugepages", CheckStatus::Warn)], |_| {}))
        .collect();
    let j = run(&warn_everywhere, None, None, &[], &relative());
    assert_eq!(j.cluster.len(), 1, "{:?}", j.cluster);
    assert_eq!(j.cluster_verdict(), ClusterVerdict::Pass);
    assert_eq!(
        (j.run_verdict(), j.ending()),
        (RunVerdict::Pass, Ending::Healthy)
    );
    // Three of four: most nodes, the cluster fails and no node is isolated for it.
    let mut r = warn_everywhere.clone();
    for x in r.iter_mut().take(3) {
        x.checks[0].status = CheckStatus::Fail;
    }
    let j = run(&r, None, None, &[], &relative());
    assert_eq!(j.cluster_verdict(), ClusterVerdict::Fail);
    assert!(j.cluster_failures[0].contains("hugepages fails on 3 of 4"));
    assert_eq!(j.worst(), Verdict::Warn);
    assert_eq!(
        (j.run_verdict(), j.ending()),
        (RunVerdict::Fail, Ending::ClusterFailed)
    );
    // A check the user said to ignore fails nothing, and is still reported.
    let t = Thresholds {
        ignore_checks: vec!["hugepages".into()],
        ..Thresholds::default()
    };
    let j = run(&r, None, None, &[], &t);
    assert_eq!(
        (j.cluster_verdict(), j.ending()),
        (ClusterVerdict::Pass, Ending::Healthy)
    );
    assert!(j.cluster[0].contains("--ignore-check"), "{:?}", j.cluster);
    // Two of four is not most: each is a node's own failure.
    let mut r = warn_everywhere;
    for x in r.iter_mut().take(2) {
        x.checks[0].status = CheckStatus::Fail;
    }
    let j = run(&r, None, None, &[], &relative());
    assert_eq!(j.cluster_verdict(), ClusterVerdict::Pass);
    assert_eq!(j.count(Verdict::Isolate), 2);
    assert_eq!(j.ending(), Ending::NodesFailed);
}

#[test]
fn a_healthy_cluster_passes() {
    let m = matrix(4, |_, _| 3.5);
    let ok: Vec<NodeReport> = hosts(4)
        .iter()
        .map(|h| report(h, &[("efa-devices", CheckStatus::Pass)], |_| {}))
        .collect();
    let j = run(&ok, Some(&m), Some(&m), &[], &relative());
    assert_eq!(j.ending(), Ending::Healthy);
    assert!(
        j.nodes.iter().all(|n| n.verdict == Verdict::Pass),
        "{:?}",
        j.nodes
    );
    assert_eq!(j.worst(), Verdict::Pass);
}

#[test]
fn a_check_failing_on_one_node_isolates_it_and_a_version_warns() {
    let mut r = healthy();
    r[1] = report(
        "node2",
        &[
            ("efa-devices", CheckStatus::Fail),
            ("memlock", CheckStatus::Fail),
        ],
        |_| {},
    );
    r[3] = report("node4", &[("efa-devices", CheckStatus::Fail)], |f| {
        f.libfabric = Some("1.18.0".into())
    });
    r[0] = report("node1", &[("efa-devices", CheckStatus::Fail)], |f| {
        f.efa_devices = 3
    });
    let j = run(&r, None, None, &[], &relative());
    assert_eq!(j.nodes[1].verdict, Verdict::Isolate);
    assert!(j.nodes[1].reasons[0].reason.contains("memlock"));
    assert_eq!(j.nodes[3].verdict, Verdict::Warn);
    assert!(j.nodes[3].reasons[0].evidence.contains("1.18.0"));
    assert_eq!(j.nodes[0].verdict, Verdict::Isolate);
    assert_eq!(j.nodes[2].verdict, Verdict::Pass);
}

#[test]
fn the_floor_isolates_every_node_below_it_and_a_lost_node_is_named() {
    let m = matrix(4, |_, _| 3.5);
    let t = Thresholds {
        min_pair_gbps: Some(50.0),
        min_pair_from: Some("0.5 x 100 Gbps".into()),
        ..Thresholds::default()
    };
    let j = run(&healthy(), Some(&m), None, &[], &t);
    assert!(j.nodes.iter().all(|n| n.verdict == Verdict::Isolate));
    let lost = [Lost {
        host: "node5".into(),
        stage: "join".into(),
        why: "rank 4 did not join".into(),
    }];
    let j = run(&healthy(), None, None, &lost, &relative());
    assert_eq!(j.nodes.len(), 5);
    assert_eq!(j.nodes[4].host, "node5");
    assert_eq!(j.nodes[4].verdict, Verdict::Isolate);
    assert_eq!(j.nodes[4].reasons[0].reason, "never joined the job");
}
