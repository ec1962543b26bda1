//! Expected figures on synthetic clusters: a p5en cluster at 70% of its link, mixed and unknown
//! types (no expectation, the output unchanged), every node at 20% (cluster-wide FAIL), one
//! node under the floor, and alltoall's per-peer share.
use super::*;
use crate::consistency::compare;
use crate::node::NodeFacts;
use crate::summary::{Summary, SCHEMA};
use crate::table::render_verdicts;
use crate::verdict::{judge, ClusterVerdict, Ending, Inputs, Judgement, RunVerdict, Verdict};

fn hosts(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node{i}")).collect()
}

fn reports(types: &[Option<&str>]) -> Vec<NodeReport> {
    hosts(types.len())
        .iter()
        .zip(types)
        .map(|(h, t)| NodeReport {
            host: h.clone(),
            checks: Vec::new(),
            facts: NodeFacts {
                instance_type: t.map(str::to_string),
                efa_devices: 16,
                ..NodeFacts::default()
            },
        })
        .collect()
}

/// Every ordered pair of `n` one-rank nodes at `f(src, dst)` Gbps, each rank driving `rails`.
fn matrix(n: usize, rails: usize, f: impl Fn(usize, usize) -> f64) -> Matrix {
    Matrix {
        drove: rails,
        ..crate::figures::full(n, f)
    }
}

fn run(
    types: &[Option<&str>],
    pairs: &Matrix,
    alltoall: Option<&Matrix>,
    t: &Thresholds,
) -> Judgement {
    let r = reports(types);
    let h = hosts(types.len());
    let c = compare(&r);
    judge(&Inputs {
        rank_host: &h,
        reports: &r,
        consistency: &c,
        pairs: Some(pairs),
        alltoall,
        lost: &[],
        thresholds: t,
    })
}

/// The summary rank 0 writes from a judgement (as `run` builds it).
fn summary(j: Judgement, t: &Thresholds) -> Summary {
    Summary {
        schema: SCHEMA.into(),
        version: "0".into(),
        git: None,
        started: String::new(),
        written: String::new(),
        world: j.nodes.len() as u32,
        hosts: j.nodes.len(),
        verdict: j.run_verdict(),
        exit_code: crate::summary::exit_code(j.ending()),
        cluster_verdict: j.cluster_verdict(),
        cluster_failures: j.cluster_failures,
        complete: true,
        thresholds: t.clone(),
        stages: Vec::new(),
        cluster: j.cluster,
        link_profile: j.link,
        nodes: j.nodes,
        baseline: None,
    }
}

const P5EN: Option<&str> = Some("p5en.48xlarge");

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn a_p5en_cluster_at_70_percent_of_its_link() {
    let t = Thresholds::default();
    // One rail per rank: 200 Gbps each; every pair at 140.
    let j = run(&[P5EN; 4], &matrix(4, 1, |_, _| 140.0), None, &t);
    let link = j.link.clone().expect("a link for four p5en nodes");
    assert_eq!((link.efa_devices, link.gbps_per_efa), (16, 200.0));
    assert_eq!(link.evidence, Evidence::Source);
    for n in &j.nodes {
        let e = n.pairs.as_ref().unwrap().expected.unwrap();
        for a in [e.send.unwrap(), e.recv.unwrap()] {
            assert_eq!(a.expected_gbps, 200.0, "{}", n.host);
            assert!(close(a.pct_of_expected, 70.0), "{a:?}");
        }
        assert_eq!(n.verdict, Verdict::Pass, "{n:?}");
    }
    assert_eq!(j.cluster_verdict(), ClusterVerdict::Pass);
    let text = render_verdicts(&summary(j, &t));
    assert!(
        text.contains(
            "# expected: p5en.48xlarge, 16 x 200 Gbps per node (read in the AWS cluster health check's"
        ),
        "{text}"
    );
    assert!(text.contains("of link"), "{text}");
    let row = text.lines().find(|l| l.starts_with("node2 ")).unwrap();
    assert!(row.contains("  70%  "), "{row}");
    // The NICs the records name count, not the rails: two NICs per rank carry 400 Gbps.
    let mut m = matrix(4, 1, |_, _| 140.0);
    for r in 0..4 {
        m.nics
            .insert(r, vec![format!("rdmap{r}s0"), format!("rdmap{r}s1")]);
    }
    let j = run(&[P5EN; 4], &m, None, &t);
    let e = j.nodes[0].pairs.as_ref().unwrap().expected.unwrap();
    assert_eq!(e.send.unwrap().expected_gbps, 400.0);
    assert!(close(e.lowest_pct().unwrap(), 35.0));
    // A pair's expectation is the smaller end's: node1 drives one NIC, the others two.
    m.nics.insert(0, vec!["rdmap0s0".into()]);
    let j = run(&[P5EN; 4], &m, None, &t);
    let e = j.nodes[1].pairs.as_ref().unwrap().expected.unwrap();
    // node2 sends to node1 (200), node3 and node4 (400): the median of 200, 400, 400.
    assert_eq!(e.send.unwrap().expected_gbps, 400.0);
    let e = j.nodes[0].pairs.as_ref().unwrap().expected.unwrap();
    assert_eq!(e.send.unwrap().expected_gbps, 200.0);
}

#[test]
fn mixed_or_unknown_types_have_no_expectation_and_the_output_is_unchanged() {
    let t = Thresholds::default();
    let m = matrix(4, 1, |_, _| 2.0);
    let unknown = render_verdicts(&summary(run(&[None; 4], &m, Some(&m), &t), &t));
    for types in [
        [Some("Standard PC (Q35 + ICH9, 2009)"); 4],
        [P5EN, P5EN, P5EN, None],
        [P5EN, P5EN, Some("p5.48xlarge"), P5EN],
    ] {
        let j = run(&types, &m, Some(&m), &t);
        assert_eq!(j.link, None, "{types:?}");
        for n in &j.nodes {
            assert_eq!(n.pairs.as_ref().unwrap().expected, None, "{types:?}");
            assert_eq!(n.alltoall.as_ref().unwrap().expected, None, "{types:?}");
        }
        let text = render_verdicts(&summary(j, &t));
        assert!(
            !text.contains("of link") && !text.contains("# expected"),
            "{text}"
        );
        // No column, no header line: the table of a cluster of one unknown type is the table
        // of a cluster whose type was never read.
        if types.iter().all(|x| *x == types[0]) {
            assert_eq!(text, unknown);
        }
    }
    // Nor does the JSON change: no `expected`, no `link_profile`.
    let j = run(&[None; 4], &m, Some(&m), &t);
    let v = serde_json::to_value(summary(j, &t)).unwrap();
    assert!(v.get("link_profile").is_none(), "{v}");
    assert!(v["nodes"][0]["pairs"].get("expected").is_none(), "{v}");
}

#[test]
fn every_node_at_20_percent_fails_the_cluster_as_a_whole() {
    let t = Thresholds::default();
    let j = run(&[P5EN; 4], &matrix(4, 1, |_, _| 40.0), None, &t);
    assert_eq!(j.cluster_verdict(), ClusterVerdict::Fail);
    assert_eq!(
        (j.run_verdict(), j.ending()),
        (RunVerdict::Fail, Ending::ClusterFailed)
    );
    assert_eq!(j.cluster_failures.len(), 1, "{:?}", j.cluster_failures);
    let f = &j.cluster_failures[0];
    assert!(
        f.starts_with(
            "pairs at a median 20.0% of the link of p5en.48xlarge over 4 node(s), 4 of them below 50% (--min-link-fraction 0.5)"
        ),
        "{f}"
    );
    assert_eq!(j.cluster, j.cluster_failures);
    // The cluster's finding, not each node's: no node is isolated for the floor.
    assert!(j.nodes.iter().all(|n| n.verdict == Verdict::Pass), "{j:?}");
    let text = render_verdicts(&summary(j, &t));
    assert!(
        text.contains("# cluster-wide: pairs at a median 20.0% of the link"),
        "{text}"
    );
    assert!(
        text.contains("# cluster verdict: FAIL: cluster-wide (pairs at a median 20.0%"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("# verdict: ") && l.ends_with("exit 3")),
        "{text}"
    );
    let row = text.lines().find(|l| l.starts_with("node1 ")).unwrap();
    assert!(row.contains("  20%  "), "{row}");
    // A lower --min-link-fraction puts the same cluster above the line.
    let t = Thresholds {
        min_link_fraction: 0.1,
        ..Thresholds::default()
    };
    let j = run(&[P5EN; 4], &matrix(4, 1, |_, _| 40.0), None, &t);
    assert_eq!(j.cluster_verdict(), ClusterVerdict::Pass);
}

#[test]
fn one_node_under_the_floor_is_isolated_and_the_cluster_passes() {
    let t = Thresholds::default();
    let slow = |s: usize, d: usize| if s == 2 || d == 2 { 60.0 } else { 170.0 };
    let j = run(&[P5EN; 4], &matrix(4, 1, slow), None, &t);
    assert_eq!(j.cluster_verdict(), ClusterVerdict::Pass, "{:?}", j.cluster);
    let n3 = &j.nodes[2];
    assert_eq!(n3.verdict, Verdict::Isolate);
    let r = n3
        .reasons
        .iter()
        .find(|r| r.reason == "pairs below the floor of 100.00 Gbps")
        .unwrap_or_else(|| panic!("{:?}", n3.reasons));
    assert!(
        r.evidence.contains(
            "sending median 60.00 Gbps, receiving median 60.00 Gbps (--min-link-fraction 0.5 of 200.00 Gbps expected"
        ),
        "{}",
        r.evidence
    );
    assert!(close(
        n3.pairs
            .as_ref()
            .unwrap()
            .expected
            .unwrap()
            .lowest_pct()
            .unwrap(),
        30.0
    ));
    // --min-pair-gbps is the floor where given, the expectation stays.
    let t = Thresholds {
        min_pair_gbps: Some(50.0),
        min_pair_from: Some("--min-pair-gbps".into()),
        ..Thresholds::default()
    };
    let j = run(&[P5EN; 4], &matrix(4, 1, slow), None, &t);
    assert!(j.nodes[2]
        .reasons
        .iter()
        .all(|r| !r.reason.contains("below the floor")));
    assert!(j.nodes[2].pairs.as_ref().unwrap().expected.is_some());
}

#[test]
fn alltoall_per_peer_rates_are_expected_at_their_share_of_the_link() {
    let t = Thresholds::default();
    // Four one-rank nodes: each rank's 200 Gbps shared by three remote peers.
    let a2a = matrix(4, 1, |_, _| 50.0);
    let j = run(&[P5EN; 4], &matrix(4, 1, |_, _| 150.0), Some(&a2a), &t);
    let e = j.nodes[0].alltoall.as_ref().unwrap().expected.unwrap();
    let s = e.send.unwrap();
    assert!(close(s.expected_gbps, 200.0 / 3.0), "{s:?}");
    assert!(close(s.pct_of_expected, 75.0), "{s:?}");
    // Two ranks per host: a rank's peers on its own host do not share its link.
    let h: Vec<String> = ["a", "a", "b", "b"].map(String::from).to_vec();
    let m = matrix(4, 1, |_, _| 50.0);
    let link = LinkProfile::shared(&reports(&[P5EN; 2])).unwrap();
    let f = m.figures(&h, "a");
    let e = expected(&m, &h, "a", &f, &link, Share::AllPeers).unwrap();
    assert!(close(e.send.unwrap().expected_gbps, 100.0));
    let e = expected(&m, &h, "a", &f, &link, Share::Alone).unwrap();
    assert!(close(e.recv.unwrap().expected_gbps, 200.0));
}
