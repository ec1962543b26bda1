//! `cluster --prometheus FILE`: the verdicts and pair figures of a cluster run in the Prometheus
//! text format (0.0.4), written like `counters --prometheus` (whole, for node_exporter's
//! textfile collector, or to stdout).
//!
//! Families (all gauges):
//! * `efabench_cluster_node_verdict{host,verdict}`: 1 for the node's verdict, 0 for the other
//!   two (PASS, WARN, ISOLATE), so an alert is `efabench_cluster_node_verdict{verdict="ISOLATE"} == 1`;
//! * `efabench_cluster_pairs_gbps{host,direction,stat}`: the node's pairs (direction `send`,
//!   `recv`, or `others` = the pairs without it), stat `median` or `min`;
//! * `efabench_cluster_pairs_vs_peers{host,bound}`: the decision's estimate of the node's share
//!   of its peers' speed (`estimate`) and its interval (`low`, `high`);
//! * `efabench_cluster_pairs_ratio{host}`, `efabench_cluster_alltoall_ratio{host}`: the lower of
//!   its send and receive medians over the median of the pairs without it;
//! * `efabench_cluster_pairs_expected_gbps{host,direction}`,
//!   `efabench_cluster_pairs_pct_of_expected{host,direction}` (direction `send`, `recv`): what the
//!   link of the nodes' instance type could carry for the node's pairs, and the median's share
//!   of it in percent; `efabench_cluster_alltoall_expected_gbps`,
//!   `efabench_cluster_alltoall_pct_of_expected` the same for the per-peer chunk rates; absent
//!   (no family) where the type is unknown;
//! * `efabench_cluster_stage_seconds{stage,status}`: each stage's time;
//! * `efabench_cluster_verdict{verdict}`: the verdict on the cluster as a whole, 1 for it and 0
//!   for the other (PASS, FAIL: a check fails on most nodes);
//! * `efabench_cluster_baseline_ratio{bound}`: with `--baseline`, the median ratio of the
//!   cluster's pairs to the baseline's (`estimate`) and its interval (`low`, `high`); absent
//!   without a baseline or a matched pair;
//! * `efabench_cluster_exit_code`: 3 when the cluster fails as a whole, else 1 when any node is
//!   ISOLATE, else 0.

use super::prometheus::label;
use efabench_cluster::expected::Expected;
use efabench_cluster::figures::{PairFigures, Stats};
use efabench_cluster::summary::Summary;
use efabench_cluster::verdict::{ClusterVerdict, Verdict};

struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }

    fn push(&mut self, labels: Vec<(&'static str, String)>, v: f64) {
        if v.is_finite() {
            self.samples.push((labels, v));
        }
    }

    fn render(&self, out: &mut String) {
        out.push_str(&format!("# HELP {} {}\n", self.name, self.help));
        out.push_str(&format!("# TYPE {} gauge\n", self.name));
        for (labels, v) in &self.samples {
            let l: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", label(v)))
                .collect();
            if l.is_empty() {
                out.push_str(&format!("{} {v}\n", self.name));
            } else {
                out.push_str(&format!("{}{{{}}} {v}\n", self.name, l.join(",")));
            }
        }
    }
}

pub fn render(s: &Summary) -> String {
    let mut verdict = Family::new(
        "efabench_cluster_node_verdict",
        "Verdict of efabench cluster for the node: 1 for its verdict, 0 for the others",
    );
    let mut pairs = Family::new(
        "efabench_cluster_pairs_gbps",
        "Pairs of the node measured by efabench cluster, Gbps (others = the pairs without it)",
    );
    let mut ratio = Family::new(
        "efabench_cluster_pairs_ratio",
        "Lower of the node's send and receive pair medians over the median of the pairs without it",
    );
    let mut peers = Family::new(
        "efabench_cluster_pairs_vs_peers",
        "The decision's estimate of the node's share of its peers' pair speed (slower direction), with its interval (bound low, high)",
    );
    let mut a2a = Family::new(
        "efabench_cluster_alltoall_ratio",
        "Lower of the node's all-to-all per-peer chunk rate medians over those of the pairs without it",
    );
    let mut expected = [
        Family::new(
            "efabench_cluster_pairs_expected_gbps",
            "What the link of the nodes' instance type carries for the node's pairs, Gbps (the NICs driven x Gbps per EFA)",
        ),
        Family::new(
            "efabench_cluster_pairs_pct_of_expected",
            "The node's pairs median over what the link of its instance type carries, percent",
        ),
        Family::new(
            "efabench_cluster_alltoall_expected_gbps",
            "What the link of the nodes' instance type carries for one all-to-all peer (the NICs driven x Gbps per EFA, shared by the remote peers), Gbps",
        ),
        Family::new(
            "efabench_cluster_alltoall_pct_of_expected",
            "The node's all-to-all per-peer chunk rate median over its expected_gbps, percent",
        ),
    ];
    for n in &s.nodes {
        let against = |e: Option<Expected>, fams: &mut [Family]| {
            let Some(e) = e else { return };
            for (dir, a) in [("send", e.send), ("recv", e.recv)] {
                if let Some(a) = a {
                    let l = || vec![("host", n.host.clone()), ("direction", dir.into())];
                    fams[0].push(l(), a.expected_gbps);
                    fams[1].push(l(), a.pct_of_expected);
                }
            }
        };
        let (pair_fams, a2a_fams) = expected.split_at_mut(2);
        against(n.pairs.as_ref().and_then(|p| p.expected), pair_fams);
        against(n.alltoall.as_ref().and_then(|p| p.expected), a2a_fams);
        for v in [Verdict::Pass, Verdict::Warn, Verdict::Isolate] {
            verdict.push(
                vec![("host", n.host.clone()), ("verdict", v.as_str().into())],
                f64::from(u8::from(n.verdict == v)),
            );
        }
        let stat = |dir: &'static str, st: &Option<Stats>, fam: &mut Family| {
            if let Some(st) = st {
                for (k, v) in [("median", st.median), ("min", st.min)] {
                    fam.push(
                        vec![
                            ("host", n.host.clone()),
                            ("direction", dir.into()),
                            ("stat", k.into()),
                        ],
                        v,
                    );
                }
            }
        };
        if let Some(PairFigures {
            send,
            recv,
            reference,
            ratio: r,
            ..
        }) = &n.pairs
        {
            stat("send", send, &mut pairs);
            stat("recv", recv, &mut pairs);
            stat("others", reference, &mut pairs);
            if let Some(r) = r {
                ratio.push(vec![("host", n.host.clone())], *r);
            }
            if let Some(e) = n.pairs.as_ref().and_then(|p| p.estimate) {
                for (b, v) in [("estimate", e.ratio), ("low", e.low), ("high", e.high)] {
                    peers.push(vec![("host", n.host.clone()), ("bound", b.into())], v);
                }
            }
        }
        if let Some(r) = n.alltoall.as_ref().and_then(|a| a.ratio) {
            a2a.push(vec![("host", n.host.clone())], r);
        }
    }
    let mut stages = Family::new(
        "efabench_cluster_stage_seconds",
        "Seconds each stage of efabench cluster took, with how it ended",
    );
    for st in &s.stages {
        let status = serde_json::to_value(st.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        stages.push(
            vec![("stage", st.name.clone()), ("status", status)],
            st.elapsed_s,
        );
    }
    let mut cluster = Family::new(
        "efabench_cluster_verdict",
        "Verdict of efabench cluster on the cluster as a whole: 1 for its verdict, 0 for the other",
    );
    for v in [ClusterVerdict::Pass, ClusterVerdict::Fail] {
        cluster.push(
            vec![("verdict", v.as_str().into())],
            f64::from(u8::from(s.cluster_verdict == v)),
        );
    }
    let mut exit = Family::new(
        "efabench_cluster_exit_code",
        "Exit status of efabench cluster: 3 when the cluster fails as a whole, else 1 when any node is ISOLATE, else 0",
    );
    exit.push(Vec::new(), f64::from(s.exit_code));
    let mut out = String::new();
    for f in [&verdict, &pairs, &ratio, &peers, &a2a] {
        f.render(&mut out);
    }
    // Only where some node's type gave an expectation: without one the file stays as it was.
    for f in expected.iter().filter(|f| !f.samples.is_empty()) {
        f.render(&mut out);
    }
    for f in [&stages, &cluster] {
        f.render(&mut out);
    }
    if let Some(c) = s.baseline.as_ref().and_then(|b| b.cluster) {
        let mut base = Family::new(
            "efabench_cluster_baseline_ratio",
            "Median ratio of the cluster's pairs to the --baseline file's, with its interval (bound low, high)",
        );
        for (b, v) in [("estimate", c.ratio), ("low", c.low), ("high", c.high)] {
            base.push(vec![("bound", b.into())], v);
        }
        base.render(&mut out);
    }
    exit.render(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::prometheus::check_exposition as check;
    use efabench_cluster::baseline::{Comparison, Finding, Ratio};
    use efabench_cluster::summary::{StageReport, StageStatus, SCHEMA};
    use efabench_cluster::verdict::{NodeVerdict, RunVerdict, Thresholds};
    use efabench_report::compare::Context;

    #[test]
    fn verdicts_and_figures_are_valid_exposition() {
        let fig = PairFigures {
            size_bytes: 1 << 20,
            send: Stats::of(&[0.4, 0.5]),
            recv: Stats::of(&[0.45]),
            reference: Stats::of(&[3.0, 3.2]),
            ratio: Some(0.13),
            estimate: Some(efabench_cluster::decide::Estimate {
                ratio: 0.8,
                low: 0.77,
                high: 0.83,
                confidence: 0.999,
                pairs: 14,
                below_slowest: 13,
                reference: 42,
                noise: 0.02,
            }),
            expected: None,
        };
        let against = |pct: f64| efabench_cluster::expected::AgainstLink {
            expected_gbps: 200.0,
            pct_of_expected: pct,
        };
        let node = |h: &str, v: Verdict| NodeVerdict {
            host: h.into(),
            ranks: vec![0],
            verdict: v,
            reasons: Vec::new(),
            checks: Vec::new(),
            facts: None,
            pairs: Some(fig.clone()),
            alltoall: None,
            nics: None,
        };
        let s = Summary {
            schema: SCHEMA.into(),
            version: "0".into(),
            git: None,
            started: String::new(),
            written: String::new(),
            world: 2,
            hosts: 2,
            verdict: RunVerdict::Fail,
            exit_code: 3,
            cluster_verdict: ClusterVerdict::Fail,
            cluster_failures: vec!["check efa-devices fails on 2 of 2 nodes".into()],
            complete: true,
            thresholds: Thresholds::default(),
            stages: vec![StageReport {
                name: "pairs".into(),
                status: StageStatus::Ok,
                budget_s: Some(1.0),
                elapsed_s: 2.5,
                detail: String::new(),
            }],
            cluster: Vec::new(),
            link_profile: None,
            nodes: vec![
                node("node\"1", Verdict::Pass),
                node("node3", Verdict::Isolate),
            ],
            baseline: Some(Comparison {
                file: "b.json".into(),
                baseline_points: 2,
                baseline_runs: 1,
                run_pairs: 2,
                matched_pairs: 2,
                matched_alltoall: 0,
                alltoall_ratio: None,
                cluster: Some(Ratio {
                    ratio: 0.5,
                    low: 0.45,
                    high: 0.55,
                    confidence: 0.99,
                    pairs: 2,
                    noise: 0.02,
                }),
                left_out: Vec::new(),
                finding: Finding::Fail,
                nodes: Vec::new(),
                baseline_context: Context::default(),
                run_context: Context::default(),
                message: None,
            }),
        };
        // Without an expectation, no family for it.
        assert!(!render(&s).contains("expected"), "{}", render(&s));
        let mut s = s;
        s.nodes[1].pairs.as_mut().unwrap().expected = Some(Expected {
            send: Some(against(0.2)),
            recv: Some(against(0.225)),
        });
        let text = render(&s);
        let samples = check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let get = |name: &str, want: &[(&str, &str)]| {
            samples
                .iter()
                .find(|(n, l, _)| {
                    n == name
                        && want
                            .iter()
                            .all(|(k, v)| l.iter().any(|(a, b)| a == k && b == v))
                })
                .map(|x| x.2)
        };
        assert_eq!(
            get(
                "efabench_cluster_node_verdict",
                &[("host", "node3"), ("verdict", "ISOLATE")]
            ),
            Some(1.0)
        );
        assert_eq!(
            get(
                "efabench_cluster_node_verdict",
                &[("host", "node\"1"), ("verdict", "ISOLATE")]
            ),
            Some(0.0)
        );
        assert_eq!(
            get(
                "efabench_cluster_pairs_gbps",
                &[("host", "node3"), ("direction", "send"), ("stat", "median")]
            ),
            // The median of two is the lower one (p50, docs/metrics.md).
            Some(0.4)
        );
        assert_eq!(get("efabench_cluster_exit_code", &[]), Some(3.0));
        assert_eq!(
            get(
                "efabench_cluster_pairs_pct_of_expected",
                &[("host", "node3"), ("direction", "recv")]
            ),
            Some(0.225)
        );
        assert_eq!(
            get(
                "efabench_cluster_pairs_expected_gbps",
                &[("host", "node3"), ("direction", "send")]
            ),
            Some(200.0)
        );
        assert_eq!(
            get(
                "efabench_cluster_pairs_pct_of_expected",
                &[("host", "node\"1")]
            ),
            None
        );
        assert_eq!(
            get("efabench_cluster_baseline_ratio", &[("bound", "high")]),
            Some(0.55)
        );
        assert_eq!(
            get(
                "efabench_cluster_pairs_vs_peers",
                &[("host", "node3"), ("bound", "high")]
            ),
            Some(0.83)
        );
        assert_eq!(
            get("efabench_cluster_verdict", &[("verdict", "FAIL")]),
            Some(1.0)
        );
        assert_eq!(
            get("efabench_cluster_verdict", &[("verdict", "PASS")]),
            Some(0.0)
        );
        assert_eq!(
            get(
                "efabench_cluster_stage_seconds",
                &[("stage", "pairs"), ("status", "ok")]
            ),
            Some(2.5)
        );
    }
}
