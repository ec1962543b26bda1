//! One verdict per node from everything the stages found.
//!
//! * **ISOLATE** — take the node out of the pool: a check fails on it but not on most nodes;
//!   its hardware differs from the majority's (instance type, EFA devices, GPUs, link speed);
//!   its pairs, or one rail's, are confidently below `isolate_below` of the pairs without it
//!   ([`crate::decide`] on the matrix between hosts) or below the absolute floor
//!   (`--min-pair-gbps`, or `--min-link-fraction` of its link, [`crate::expected`]); it never
//!   joined or died during a stage.
//! * **WARN** — usable, look at it: a check warns on it but not on most nodes; its software
//!   (libfabric, driver, plugin, NCCL, CUDA, huge pages, kernel) differs from the majority's;
//!   its pairs (or a rail's) are confidently below `warn_below` of its peers; one of its links
//!   (a single pair) is confidently slow while neither end is; `alltoall` named it as its
//!   slowest node.
//! * **PASS** — none of the above.
//!
//! A check that fails (or warns) on most nodes says nothing about one node: it is the image or
//! the cluster's configuration. It goes to the cluster's findings, printed and kept in the
//! summary, and makes no node ISOLATE. A check that *fails* on most nodes also fails the
//! cluster as a whole ([`ClusterVerdict::Fail`], "FAIL: cluster-wide"): no node is to blame, but
//! no job should be started on it either, so the run ends [`Ending::ClusterFailed`] (exit 3),
//! apart from a node to isolate (exit 1) and bad input (exit 2). A check that only *warns* on most nodes stays a
//! finding. The link is judged the same way: when the median node's pairs are below
//! `--min-link-fraction` of what its instance type's link carries, the cluster fails as a whole
//! and the floor names no node.

use std::collections::BTreeMap;

use efabench_bench::locate;
use serde::{Deserialize, Serialize};

use crate::decide::{self, Level, Scope};

use crate::consistency::Consistency;
use crate::expected::{self, Expected, LinkProfile, Share};
use crate::figures::{gbps, Matrix, PairFigures};
use crate::node::{CheckStatus, NodeCheck, NodeFacts, NodeReport, Weight};

/// A node's verdict, worst last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Warn,
    Isolate,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Isolate => "ISOLATE",
        }
    }
}

/// How a run ends, the same on every rank: what the caller turns into the exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ending {
    /// The cluster passes and no node is ISOLATE (nodes may WARN).
    Healthy,
    /// A node is ISOLATE, or a stage failed (a node was lost).
    NodesFailed,
    /// The cluster fails as a whole (a check failing on most nodes): worse than a node to
    /// isolate, since draining nodes one by one would not fix it.
    ClusterFailed,
}

impl Ending {
    /// One byte for rank 0 to tell the other ranks how the run ended.
    pub(crate) fn to_wire(self) -> u8 {
        match self {
            Ending::Healthy => 0,
            Ending::NodesFailed => 1,
            Ending::ClusterFailed => 2,
        }
    }

    /// The ending [`Ending::to_wire`] sent; an unknown byte is a failed run.
    pub(crate) fn from_wire(b: u8) -> Ending {
        match b {
            0 => Ending::Healthy,
            2 => Ending::ClusterFailed,
            _ => Ending::NodesFailed,
        }
    }
}

/// The verdict on the cluster as a whole, beside the per-node ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ClusterVerdict {
    /// Nothing fails on most nodes.
    #[default]
    Pass,
    /// Something fails on most nodes ("FAIL: cluster-wide").
    Fail,
}

impl ClusterVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterVerdict::Pass => "PASS",
            ClusterVerdict::Fail => "FAIL",
        }
    }
}

/// The verdict of the whole run: the worst node verdict, or FAIL when the cluster fails as a
/// whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum RunVerdict {
    Pass,
    Warn,
    Isolate,
    Fail,
}

impl RunVerdict {
    /// How a run with this verdict ends.
    pub fn ending(self) -> Ending {
        match self {
            RunVerdict::Fail => Ending::ClusterFailed,
            RunVerdict::Isolate => Ending::NodesFailed,
            RunVerdict::Pass | RunVerdict::Warn => Ending::Healthy,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunVerdict::Pass => "PASS",
            RunVerdict::Warn => "WARN",
            RunVerdict::Isolate => "ISOLATE",
            RunVerdict::Fail => "FAIL",
        }
    }
}

/// Why a node is not PASS: the stage that saw it, what it means, and the numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    pub stage: String,
    pub verdict: Verdict,
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence: String,
}

/// One node of the summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeVerdict {
    pub host: String,
    pub ranks: Vec<u32>,
    pub verdict: Verdict,
    pub reasons: Vec<Reason>,
    /// The node's checks (empty when the checks stage did not reach it).
    pub checks: Vec<NodeCheck>,
    pub facts: Option<NodeFacts>,
    pub pairs: Option<PairFigures>,
    pub alltoall: Option<PairFigures>,
    /// The NICs the pairs stage drove on this node, against its EFA devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nics: Option<NicCoverage>,
}

/// Which of a node's NICs the pairs stage measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicCoverage {
    /// The libfabric domains its ranks drove (all rails of all its ranks).
    pub used: Vec<String>,
    /// EFA devices the node reported (0 when none, e.g. tcp on hosts without EFA).
    pub efa_devices: usize,
}

impl NicCoverage {
    /// All EFA devices measured (or no EFA device to measure).
    pub fn complete(&self) -> bool {
        self.efa_devices == 0 || self.used.len() >= self.efa_devices
    }

    /// "NICs covered: 16 of 16", or "1 NIC (eth0), no EFA device".
    pub fn describe(&self) -> String {
        if self.efa_devices == 0 {
            format!(
                "{} NIC(s) ({}), no EFA device",
                self.used.len(),
                self.used.join(",")
            )
        } else {
            format!(
                "NICs covered: {} of {}",
                self.used.len().min(self.efa_devices),
                self.efa_devices
            )
        }
    }
}

/// `alltoall` names its slowest node (WARN) when its per-peer chunk rates are below this
/// fraction of those without it, in the timed loop and after a barrier alike
/// ([`locate::arrival_suspect`]): one iteration's arrival times carry the skew of the ranks'
/// starts, so only a gap both views show is worth a WARN.
pub const ALLTOALL_SLOWEST_BELOW: f64 = 0.6;

/// The thresholds the verdicts use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// ISOLATE a node confidently below this fraction of its peers.
    pub isolate_below: f64,
    /// WARN about a node confidently below this fraction of its peers.
    pub warn_below: f64,
    /// The chance, over the whole run, that the decision names a node of a healthy cluster.
    pub alpha: f64,
    /// Absolute floor of a node's send and receive medians, Gbps (`--min-pair-gbps`); without
    /// it the floor is `min_link_fraction` of each figure's expectation ([`crate::expected`]).
    pub min_pair_gbps: Option<f64>,
    /// Where `min_pair_gbps` comes from.
    pub min_pair_from: Option<String>,
    /// Fraction of the link below which a node's pairs are under the floor, and the median
    /// node's fail the cluster as a whole.
    #[serde(default = "default_min_link_fraction")]
    pub min_link_fraction: f64,
    /// Checks left out of the verdicts (`--ignore-check`): known to fail where the run is
    /// (e.g. `efa-devices` when testing over tcp on hosts without EFA).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_checks: Vec<String>,
}

fn default_min_link_fraction() -> f64 {
    expected::MIN_LINK_FRACTION
}

impl Thresholds {
    /// The decision's configuration.
    pub fn config(&self) -> decide::Config {
        decide::Config {
            isolate_below: self.isolate_below,
            warn_below: self.warn_below,
            alpha: self.alpha,
        }
    }
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        let d = decide::Config::default();
        Thresholds {
            isolate_below: d.isolate_below,
            warn_below: d.warn_below,
            alpha: d.alpha,
            min_pair_gbps: None,
            min_pair_from: None,
            min_link_fraction: expected::MIN_LINK_FRACTION,
            ignore_checks: Vec::new(),
        }
    }
}

/// A node lost during the run: it never joined, or died in a stage.
#[derive(Clone, Debug, PartialEq)]
pub struct Lost {
    pub host: String,
    pub stage: String,
    pub why: String,
}

/// Everything the verdicts are made from.
pub struct Inputs<'a> {
    /// Host of each rank (index = rank).
    pub rank_host: &'a [String],
    /// One report per host that ran its checks.
    pub reports: &'a [NodeReport],
    pub consistency: &'a Consistency,
    pub pairs: Option<&'a Matrix>,
    pub alltoall: Option<&'a Matrix>,
    pub lost: &'a [Lost],
    pub thresholds: &'a Thresholds,
}

/// The verdicts, one per host in rank order, and the cluster-wide findings.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    pub nodes: Vec<NodeVerdict>,
    /// Every cluster-wide finding (failing ones included).
    pub cluster: Vec<String>,
    /// The findings that fail the cluster as a whole (empty: the cluster passes).
    pub cluster_failures: Vec<String>,
    /// The link the figures were judged against, where every node reported one known type.
    pub link: Option<LinkProfile>,
}

impl Judgement {
    /// The worst verdict of any node (PASS for none).
    pub fn worst(&self) -> Verdict {
        self.nodes
            .iter()
            .map(|n| n.verdict)
            .max()
            .unwrap_or(Verdict::Pass)
    }

    pub fn count(&self, v: Verdict) -> usize {
        self.nodes.iter().filter(|n| n.verdict == v).count()
    }

    /// The verdict on the cluster as a whole.
    pub fn cluster_verdict(&self) -> ClusterVerdict {
        if self.cluster_failures.is_empty() {
            ClusterVerdict::Pass
        } else {
            ClusterVerdict::Fail
        }
    }

    /// The run's verdict: FAIL when the cluster fails as a whole, else the worst node's.
    pub fn run_verdict(&self) -> RunVerdict {
        if self.cluster_verdict() == ClusterVerdict::Fail {
            return RunVerdict::Fail;
        }
        match self.worst() {
            Verdict::Pass => RunVerdict::Pass,
            Verdict::Warn => RunVerdict::Warn,
            Verdict::Isolate => RunVerdict::Isolate,
        }
    }

    /// How the run ends: the cluster failing as a whole, a node to isolate, or healthy.
    pub fn ending(&self) -> Ending {
        self.run_verdict().ending()
    }
}

/// The NIC (libfabric domain) of rail `rail` of host `by[node]`, from its first rank's pair
/// records; `rail N` when they do not say.
fn rail_name(m: &Matrix, rank_host: &[String], by: &[String], node: usize, rail: usize) -> String {
    by.get(node)
        .and_then(|h| rank_host.iter().position(|x| x == h))
        .and_then(|r| m.nics.get(&r))
        .and_then(|n| n.get(rail))
        .cloned()
        .unwrap_or_else(|| format!("rail {rail}"))
}

/// Hosts in order of their first rank, then hosts only known from `lost`.
fn hosts_in_order(rank_host: &[String], lost: &[Lost]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for h in rank_host.iter().chain(lost.iter().map(|l| &l.host)) {
        if !out.contains(h) {
            out.push(h.clone());
        }
    }
    out
}

pub fn judge(i: &Inputs) -> Judgement {
    let hosts = hosts_in_order(i.rank_host, i.lost);
    let mut reasons: BTreeMap<String, Vec<Reason>> = BTreeMap::new();
    let mut add = |host: &str, r: Reason| reasons.entry(host.to_string()).or_default().push(r);
    let mut cluster = Vec::new();
    let mut cluster_failures = Vec::new();

    // Checks: node-specific findings only; what most nodes share is the cluster's.
    let reported = i.reports.len();
    let mut by_check: BTreeMap<(&str, CheckStatus), Vec<(&str, &NodeCheck)>> = BTreeMap::new();
    for r in i.reports {
        for c in &r.checks {
            if matches!(c.status, CheckStatus::Fail | CheckStatus::Warn) {
                by_check
                    .entry((c.id.as_str(), c.status))
                    .or_default()
                    .push((r.host.as_str(), c));
            }
        }
    }
    for ((id, status), on) in &by_check {
        if i.thresholds.ignore_checks.iter().any(|x| x == id) {
            cluster.push(format!(
                "check {id} {}s on {} of {reported} nodes, left out of the verdicts (--ignore-check)",
                status.as_str(),
                on.len(),
            ));
            continue;
        }
        if on.len() * 2 > reported {
            let finding = format!(
                "check {id} {}s on {} of {reported} nodes (the image or the cluster's setup, not \
                 one node): {}",
                status.as_str(),
                on.len(),
                on[0].1.summary
            );
            if *status == CheckStatus::Fail {
                cluster_failures.push(finding.clone());
            }
            cluster.push(finding);
            continue;
        }
        for (host, c) in on {
            let verdict = if *status == CheckStatus::Fail {
                Verdict::Isolate
            } else {
                Verdict::Warn
            };
            add(
                host,
                Reason {
                    stage: "checks".into(),
                    verdict,
                    reason: format!(
                        "check {id} {}s here (it passes on most nodes)",
                        status.as_str()
                    ),
                    evidence: if c.fix.is_empty() {
                        c.summary.clone()
                    } else {
                        format!("{}; fix: {}", c.summary, c.fix)
                    },
                },
            );
        }
    }

    // Consistency.
    for d in &i.consistency.deviations {
        let verdict = match d.weight {
            Weight::Hardware => Verdict::Isolate,
            Weight::Software => Verdict::Warn,
        };
        add(
            &d.host,
            Reason {
                stage: "consistency".into(),
                verdict,
                reason: format!("{} differs from the majority", d.field),
                evidence: d.describe(),
            },
        );
    }
    for s in &i.consistency.splits {
        cluster.push(s.describe());
    }

    // Against the link: each node's pairs and the cluster's median node, where every node
    // reported one instance type efabench knows.
    let link = LinkProfile::shared(i.reports);
    let pair_expected: BTreeMap<String, Expected> = match (i.pairs, &link) {
        (Some(m), Some(l)) => hosts
            .iter()
            .filter_map(|h| {
                let f = m.figures(i.rank_host, h);
                expected::expected(m, i.rank_host, h, &f, l, Share::Alone).map(|e| (h.clone(), e))
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    let link_finding = link.as_ref().and_then(|l| {
        let nodes: Vec<Expected> = pair_expected.values().copied().collect();
        expected::cluster_finding(&nodes, l, i.thresholds.min_link_fraction)
    });
    if let Some(f) = &link_finding {
        cluster_failures.push(f.clone());
        cluster.push(f.clone());
    }

    // Pairs: the decision on the matrix between hosts (relative to the cluster's own pairs)
    // and the absolute floor.
    let mut estimates: BTreeMap<String, decide::Estimate> = BTreeMap::new();
    if let Some(m) = i.pairs {
        let (by, cells) = m.cells(i.rank_host);
        let cfg = i.thresholds.config();
        let d = decide::decide(by.len(), &cells, &cfg);
        for (node, e) in d.nodes.iter().enumerate() {
            let worst = e
                .iter()
                .flatten()
                .min_by(|a, b| a.ratio.total_cmp(&b.ratio));
            if let (Some(h), Some(w)) = (by.get(node), worst) {
                estimates.insert(h.clone(), *w);
            }
        }
        let name = |n: usize| by.get(n).cloned().unwrap_or_default();
        let nic = |n: usize, rail: usize| rail_name(m, i.rank_host, &by, n, rail);
        for f in &d.findings {
            let verdict = match f.level {
                Level::Isolate => Verdict::Isolate,
                Level::Warn => Verdict::Warn,
                Level::Pass => continue,
            };
            let line = match f.level {
                Level::Isolate => cfg.isolate_below,
                _ => cfg.warn_below,
            };
            let e = &f.estimate;
            let conf = format!(
                "confidently below {:.0}% of its peers ({:.2}% confidence)",
                line * 100.0,
                e.confidence * 100.0
            );
            match f.scope {
                Scope::Node { node, dir } => add(
                    &name(node),
                    Reason {
                        stage: "pairs".into(),
                        verdict,
                        reason: format!("slow {}: {conf}", dir.describe()),
                        evidence: format!(
                            "at {} B: {}: {}; noise {:.1}% per pair",
                            m.size_bytes,
                            name(node),
                            e.describe(),
                            e.noise * 100.0
                        ),
                    },
                ),
                Scope::Rail { node, rail, dir } => add(
                    &name(node),
                    Reason {
                        stage: "pairs".into(),
                        verdict,
                        reason: format!(
                            "NIC {} (rail {rail}) slow {}: {conf}",
                            nic(node, rail),
                            dir.describe()
                        ),
                        evidence: format!(
                            "at {} B, rail {rail} alone: {}: {}",
                            m.size_bytes,
                            name(node),
                            e.describe()
                        ),
                    },
                ),
                Scope::Link { src, dst } => {
                    for end in [src, dst] {
                        add(
                            &name(end),
                            Reason {
                                stage: "pairs".into(),
                                verdict,
                                reason: format!(
                                    "link {} -> {} slow while neither end is: {}",
                                    name(src),
                                    name(dst),
                                    conf.replace("its peers", "the other pairs")
                                ),
                                evidence: format!(
                                    "at {} B: {:.0}% of the pairs without either end [{:.0}-{:.0}%]",
                                    m.size_bytes,
                                    e.ratio * 100.0,
                                    e.low * 100.0,
                                    e.high * 100.0
                                ),
                            },
                        );
                    }
                }
            }
        }
        // The floor: a node below it while the cluster as a whole is not. When the median node
        // is below the link's fraction, it is the cluster's finding instead, as with a check
        // failing on most nodes: no node is to blame for it.
        if link_finding.is_none() {
            for h in &hosts {
                let f = m.figures(i.rank_host, h);
                let e = pair_expected.get(h);
                let low: Vec<(f64, String, String)> = [
                    ("sending", f.send, e.and_then(|e| e.send)),
                    ("receiving", f.recv, e.and_then(|e| e.recv)),
                ]
                .iter()
                .filter_map(|(what, s, against)| {
                    let (floor, from) =
                        expected::floor(i.thresholds, against.as_ref(), link.as_ref())?;
                    s.filter(|s| s.median < floor).map(|s| {
                        (
                            floor,
                            format!("{what} median {} Gbps", gbps(s.median)),
                            from,
                        )
                    })
                })
                .collect();
                if let Some((floor, _, from)) = low.first() {
                    let what: Vec<&str> = low.iter().map(|l| l.1.as_str()).collect();
                    add(
                        h,
                        Reason {
                            stage: "pairs".into(),
                            verdict: Verdict::Isolate,
                            reason: format!("pairs below the floor of {} Gbps", gbps(*floor)),
                            evidence: format!(
                                "at {} B: {} ({from})",
                                m.size_bytes,
                                what.join(", "),
                            ),
                        },
                    );
                }
            }
        }
    }

    // Alltoall: its slowest node, when the per-peer chunk rates name one.
    if let Some(m) = i.alltoall {
        let (by, pairs) = m.by_host(i.rank_host);
        let probe = Matrix {
            pairs: m.probe.clone(),
            ..Matrix::default()
        };
        let (_, probed) = probe.by_host(i.rank_host);
        if let locate::ArrivalVerdict::Named { looped: s, .. } =
            locate::arrival_suspect(by.len(), &pairs, &probed, ALLTOALL_SLOWEST_BELOW)
        {
            let host = by.get(s.rank).cloned().unwrap_or_default();
            add(
                &host,
                Reason {
                    stage: "alltoall".into(),
                    verdict: Verdict::Warn,
                    reason: format!(
                        "slowest node of the all-to-all ({})",
                        s.direction.describe()
                    ),
                    evidence: format!(
                        "at {} B, per-peer chunk rate: {}",
                        m.size_bytes,
                        s.evidence()
                    ),
                },
            );
        }
    }

    for l in i.lost {
        add(
            &l.host,
            Reason {
                stage: l.stage.clone(),
                verdict: Verdict::Isolate,
                reason: if l.stage == "join" {
                    "never joined the job".into()
                } else {
                    format!("lost during the {} stage", l.stage)
                },
                evidence: l.why.clone(),
            },
        );
    }

    // NIC coverage: what the pairs stage drove on each node, against its EFA devices.
    let coverage = |h: &str| -> Option<NicCoverage> {
        let m = i.pairs?;
        let mut used: Vec<String> = i
            .rank_host
            .iter()
            .enumerate()
            .filter(|(_, x)| *x == h)
            .filter_map(|(r, _)| m.nics.get(&r))
            .flatten()
            .cloned()
            .collect();
        used.sort();
        used.dedup();
        let efa_devices = i
            .reports
            .iter()
            .find(|r| r.host == h)
            .map_or(0, |r| r.facts.efa_devices);
        (!used.is_empty()).then_some(NicCoverage { used, efa_devices })
    };
    let partial: Vec<String> = hosts
        .iter()
        .filter_map(|h| {
            coverage(h)
                .filter(|c| !c.complete())
                .map(|c| format!("{h} {}", c.describe()))
        })
        .collect();
    if !partial.is_empty() {
        cluster.push(format!(
            "the pairs stage did not measure every NIC ({}): a NIC it did not drive can be slow \
             unseen; run one rank per GPU (srun --ntasks-per-node=GPUs) with --rails all",
            partial.join("; ")
        ));
    }

    let nodes = hosts
        .iter()
        .map(|h| {
            let rs = reasons.remove(h).unwrap_or_default();
            let report = i.reports.iter().find(|r| &r.host == h);
            NodeVerdict {
                host: h.clone(),
                ranks: i
                    .rank_host
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| *x == h)
                    .map(|(r, _)| r as u32)
                    .collect(),
                verdict: rs.iter().map(|r| r.verdict).max().unwrap_or(Verdict::Pass),
                reasons: rs,
                checks: report.map(|r| r.checks.clone()).unwrap_or_default(),
                facts: report.map(|r| r.facts.clone()),
                pairs: i.pairs.map(|m| PairFigures {
                    estimate: estimates.get(h).copied(),
                    expected: pair_expected.get(h).copied(),
                    ..m.figures(i.rank_host, h)
                }),
                alltoall: i.alltoall.map(|m| {
                    let f = m.figures(i.rank_host, h);
                    PairFigures {
                        expected: link.as_ref().and_then(|l| {
                            expected::expected(m, i.rank_host, h, &f, l, Share::AllPeers)
                        }),
                        ..f
                    }
                }),
                nics: coverage(h),
            }
        })
        .collect();
    Judgement {
        nodes,
        cluster,
        cluster_failures,
        link,
    }
}

#[cfg(test)]
#[path = "verdict_tests.rs"]
mod tests;
