//! The verdict table rank 0 prints at the end. What a reader acts on comes first: the stages
//! and the conclusion (which nodes to isolate, the exit status), then the cluster-wide findings,
//! then one line per node with its pair figures and its reasons under it, the nodes that are
//! not PASS first. Its length grows with the nodes, never with the pairs: the per-pair rows and
//! matrices are `-v`'s and the records'.

use crate::summary::Summary;
use crate::verdict;

/// The verdict table on stdout (rank 0).
pub fn print_verdicts(s: &Summary) {
    println!("{}", render_verdicts(s));
}

/// The verdict table: the conclusion, then one line per node with its pair figures and its
/// reasons under it, ISOLATE nodes first, then WARN, then PASS (each in the summary's order).
pub fn render_verdicts(s: &Summary) -> String {
    use crate::figures::gbps;
    let mut out = Vec::new();
    let stages: Vec<String> = s
        .stages
        .iter()
        .map(|st| {
            format!(
                "{} {}{}",
                st.name,
                serde_json::to_value(st.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                if st.elapsed_s > 0.0 {
                    format!(" {:.1} s", st.elapsed_s)
                } else {
                    String::new()
                }
            )
        })
        .collect();
    let joined = !s
        .nodes
        .iter()
        .any(|n| n.reasons.iter().any(|r| r.stage == "join"));
    out.push(if joined {
        format!(
            "# cluster: {} ranks on {} host(s); {}",
            s.world,
            s.hosts,
            stages.join(", ")
        )
    } else {
        format!(
            "# cluster: {} ranks, not all of them joined; {}",
            s.world,
            stages.join(", ")
        )
    });
    let hosts = |v: verdict::Verdict| -> Vec<&str> {
        s.nodes
            .iter()
            .filter(|n| n.verdict == v)
            .map(|n| n.host.as_str())
            .collect()
    };
    let (isolate, warned) = (
        hosts(verdict::Verdict::Isolate),
        hosts(verdict::Verdict::Warn),
    );
    let warn = warned.len();
    if s.cluster_verdict == verdict::ClusterVerdict::Fail {
        out.push(format!(
            "# cluster verdict: FAIL: cluster-wide ({})",
            s.cluster_failures.join("; ")
        ));
    }
    out.push(if isolate.is_empty() {
        format!(
            "# verdict: no node to isolate ({} PASS, {warn} WARN); exit {}",
            s.nodes.len() - warn,
            s.exit_code
        )
    } else {
        format!(
            "# verdict: ISOLATE {} ({} of {} nodes); exit {}",
            isolate.join(", "),
            isolate.len(),
            s.nodes.len(),
            s.exit_code
        )
    });
    if !warned.is_empty() {
        out.push(format!(
            "# WARN {} (their reasons are under them below)",
            warned.join(", ")
        ));
    }
    // "of link": the lower of the node's send and receive medians against its link, and the
    // profile once above the table, only where some node's instance type gave one.
    let of_link = |n: &verdict::NodeVerdict| {
        n.pairs
            .as_ref()
            .and_then(|p| p.expected)
            .and_then(|e| e.lowest_pct())
    };
    let link_col = s.nodes.iter().any(|n| of_link(n).is_some());
    if let (Some(l), true) = (&s.link_profile, link_col) {
        out.push(format!("# expected: {}", l.describe()));
    }
    for c in &s.cluster {
        out.push(format!("# cluster-wide: {c}"));
    }
    if let Some(b) = &s.baseline {
        out.push(format!("# {}", b.describe()));
    }
    let w = s
        .nodes
        .iter()
        .map(|n| n.host.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let col = |v: String| {
        if link_col {
            format!("  {v:>7}")
        } else {
            String::new()
        }
    };
    out.push(format!(
        "{:<w$}  {:<7}  {:>28}  {:>18}{}  {:>14}  NICs",
        "host",
        "verdict",
        "pairs send/recv/others Gbps",
        "vs peers [interval]",
        col("of link".into()),
        "alltoall ratio"
    ));
    let rank = |v: verdict::Verdict| match v {
        verdict::Verdict::Isolate => 0,
        verdict::Verdict::Warn => 1,
        verdict::Verdict::Pass => 2,
    };
    let mut nodes: Vec<&verdict::NodeVerdict> = s.nodes.iter().collect();
    nodes.sort_by_key(|n| rank(n.verdict));
    for n in nodes {
        let med = |x: &Option<crate::figures::Stats>| x.map_or("-".to_string(), |s| gbps(s.median));
        let pairs = n
            .pairs
            .as_ref()
            .map(|p| {
                format!(
                    "{} / {} / {}",
                    med(&p.send),
                    med(&p.recv),
                    med(&p.reference)
                )
            })
            .unwrap_or_else(|| "-".into());
        let a2a = n
            .alltoall
            .as_ref()
            .and_then(|a| a.ratio)
            .map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
        let peers = n
            .pairs
            .as_ref()
            .and_then(|p| p.estimate)
            .map_or("-".to_string(), |e| {
                format!(
                    "{:.0}% [{:.0}-{:.0}%]",
                    e.ratio * 100.0,
                    e.low * 100.0,
                    e.high * 100.0
                )
            });
        let nics = n.nics.as_ref().map_or("-".to_string(), |c| {
            if c.efa_devices == 0 {
                c.used.join(",")
            } else {
                format!("{} of {}", c.used.len().min(c.efa_devices), c.efa_devices)
            }
        });
        let link = of_link(n).map_or("-".to_string(), pct);
        out.push(format!(
            "{:<w$}  {:<7}  {pairs:>28}  {peers:>18}{}  {a2a:>14}  {nics}",
            n.host,
            n.verdict.as_str(),
            col(link)
        ));
        for r in &n.reasons {
            out.push(format!(
                "{:<w$}    {} {}: {}{}",
                "",
                r.verdict.as_str(),
                r.stage,
                r.reason,
                if r.evidence.is_empty() {
                    String::new()
                } else {
                    format!("; {}", r.evidence)
                }
            ));
        }
    }
    out.join("\n")
}

/// A percentage: one decimal below 10% (a link at 1.2% is not at 1%), whole above.
fn pct(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.1}%")
    } else {
        format!("{v:.0}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::{self, Summary};
    use crate::verdict::{ClusterVerdict, NodeVerdict, Reason, RunVerdict, Thresholds, Verdict};

    fn doc(nodes: Vec<NodeVerdict>) -> Summary {
        let worst = nodes
            .iter()
            .map(|n| n.verdict)
            .max()
            .unwrap_or(Verdict::Pass);
        Summary {
            schema: summary::SCHEMA.into(),
            version: "0".into(),
            git: None,
            started: String::new(),
            written: String::new(),
            world: 4,
            hosts: nodes.len(),
            verdict: if worst == Verdict::Isolate {
                RunVerdict::Isolate
            } else {
                RunVerdict::Pass
            },
            exit_code: i32::from(worst == Verdict::Isolate),
            cluster_verdict: ClusterVerdict::Pass,
            cluster_failures: Vec::new(),
            complete: true,
            thresholds: Thresholds::default(),
            stages: Vec::new(),
            cluster: vec!["check x fails on 4 of 4 nodes".into()],
            link_profile: None,
            nodes,
            baseline: None,
        }
    }

    fn node(host: &str, reasons: Vec<Reason>) -> NodeVerdict {
        NodeVerdict {
            host: host.into(),
            ranks: vec![0],
            verdict: reasons
                .iter()
                .map(|r| r.verdict)
                .max()
                .unwrap_or(Verdict::Pass),
            reasons,
            checks: Vec::new(),
            facts: None,
            pairs: None,
            alltoall: None,
            nics: None,
        }
    }

    #[test]
    fn the_table_names_the_isolated_nodes_and_their_reasons() {
        let r = |stage: &str, v| Reason {
            stage: stage.into(),
            verdict: v,
            reason: "slow".into(),
            evidence: "its 6 pairs".into(),
        };
        let t = render_verdicts(&doc(vec![
            node("node1", Vec::new()),
            node(
                "node3",
                vec![r("pairs", Verdict::Isolate), r("alltoall", Verdict::Warn)],
            ),
        ]));
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("# cluster: 4 ranks on 2 host(s)"),
            "{t}"
        );
        // The conclusion first, then the findings, then the nodes: the isolated one first.
        assert_eq!(
            lines[1], "# verdict: ISOLATE node3 (1 of 2 nodes); exit 1",
            "{t}"
        );
        assert!(
            lines[2].starts_with("# cluster-wide: check x fails on 4 of 4 nodes"),
            "{t}"
        );
        assert!(lines[3].starts_with("host "), "{t}");
        assert!(lines[4].starts_with("node3 "), "{t}");
        assert!(t.contains("ISOLATE pairs: slow; its 6 pairs"), "{t}");
        assert!(t.lines().last().unwrap().starts_with("node1 "), "{t}");
        let t = render_verdicts(&doc(vec![node("node4", vec![r("join", Verdict::Isolate)])]));
        assert!(
            t.starts_with("# cluster: 4 ranks, not all of them joined"),
            "{t}"
        );
        let mut d = doc(vec![node("a", Vec::new()), node("b", Vec::new())]);
        let t = render_verdicts(&d);
        assert_eq!(
            t.lines().nth(1),
            Some("# verdict: no node to isolate (2 PASS, 0 WARN); exit 0"),
            "{t}"
        );
        // WARN nodes are named under the verdict and listed before the PASS ones.
        let w = node("b", vec![r("pairs", Verdict::Warn)]);
        let t = render_verdicts(&doc(vec![node("a", Vec::new()), w]));
        assert_eq!(
            t.lines().nth(1),
            Some("# verdict: no node to isolate (1 PASS, 1 WARN); exit 0"),
            "{t}"
        );
        assert_eq!(
            t.lines().nth(2),
            Some("# WARN b (their reasons are under them below)"),
            "{t}"
        );
        let b = t.find("\nb ").expect("b's row");
        let a = t.find("\na ").expect("a's row");
        assert!(b < a, "{t}");
        // A check failing on every node fails the cluster, whatever the nodes' verdicts.
        d.cluster_verdict = ClusterVerdict::Fail;
        d.cluster_failures = vec!["check x fails on 4 of 4 nodes".into()];
        d.verdict = RunVerdict::Fail;
        d.exit_code = 3;
        let t = render_verdicts(&d);
        assert!(
            t.contains("# cluster verdict: FAIL: cluster-wide (check x fails on 4 of 4 nodes)"),
            "{t}"
        );
        assert!(t.lines().nth(2).unwrap().ends_with("exit 3"), "{t}");
    }
}
