//! Expected figures: each node's pair figures against the link of its instance type.
//!
//! The decision ([`crate::decide`]) judges a node against its peers, so a cluster where every
//! node is slow alike (a bad image, the wrong provider) passes it. Where every node reported the
//! same instance type and efabench has its profile ([`efabench_topology::profiles`]), each
//! figure also gets what the link could carry, `expected_gbps`, and the measured median's share
//! of it, `pct_of_expected`. One expectation serves both absolute rules: the floor under a
//! node ([`floor`], `--min-link-fraction` of it) and the cluster-wide finding when the median
//! node is below that same fraction ([`cluster_finding`]), so the two cannot disagree.
//!
//! A pair's expectation is the smaller of its two ends' capacity, an end's capacity the NICs its
//! rank drove times the type's Gb/s per EFA device (the rails the records report where they do
//! not name the NICs). `pairs` measures each pair with its ends' NICs to itself; in `alltoall`
//! every rank sends to and receives from all its remote peers at once, so an end's capacity is
//! shared among them and a per-peer chunk rate is expected at that share.

use efabench_record::stats::median_of;
use efabench_topology::profiles::{instance_profile, Evidence};
use serde::{Deserialize, Serialize};

use crate::figures::{gbps, Matrix, PairFigures};
use crate::node::NodeReport;
use crate::verdict::Thresholds;

/// `--min-link-fraction` when not given.
pub const MIN_LINK_FRACTION: f64 = 0.5;

/// The instance type every node reported, with the link figures of its profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkProfile {
    pub instance_type: String,
    pub efa_devices: usize,
    /// Link speed of one EFA device, Gb/s.
    pub gbps_per_efa: f64,
    pub evidence: Evidence,
    /// How the profile is known, in words (`read in the AWS cluster health check's ...`).
    pub provenance: String,
}

impl LinkProfile {
    /// The profile of the one type every report names; `None` when a node reported none, the
    /// types differ (the consistency stage names the odd node first) or efabench does not know
    /// the type.
    pub fn shared(reports: &[NodeReport]) -> Option<LinkProfile> {
        fn kind(r: &NodeReport) -> Option<&str> {
            r.facts.instance_type.as_deref().map(str::trim)
        }
        let t = kind(reports.first()?)?;
        if reports.iter().any(|r| kind(r) != Some(t)) {
            return None;
        }
        let p = instance_profile(t)?;
        Some(LinkProfile {
            instance_type: t.to_string(),
            efa_devices: p.efa_devices,
            gbps_per_efa: p.gbps_per_efa,
            evidence: p.evidence,
            provenance: p.provenance(),
        })
    }

    /// What `nics` EFA devices carry, Gbps (one at least).
    pub fn capacity(&self, nics: usize) -> f64 {
        nics.max(1) as f64 * self.gbps_per_efa
    }

    /// `p5en.48xlarge, 16 x 200 Gbps per node (read in ...)`.
    pub fn describe(&self) -> String {
        format!(
            "{}, {} x {} Gbps per node ({})",
            self.instance_type, self.efa_devices, self.gbps_per_efa, self.provenance
        )
    }
}

/// One figure against its link.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgainstLink {
    /// What the link could carry for this figure, Gbps (the median over its pairs).
    pub expected_gbps: f64,
    /// The figure's median over `expected_gbps`, in percent.
    pub pct_of_expected: f64,
}

/// A node's send and receive figures against the link.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    pub send: Option<AgainstLink>,
    pub recv: Option<AgainstLink>,
}

impl Expected {
    /// The lower of the send and receive percentages (the direction a floor trips on first).
    pub fn lowest_pct(&self) -> Option<f64> {
        [self.send, self.recv]
            .iter()
            .flatten()
            .map(|a| a.pct_of_expected)
            .min_by(f64::total_cmp)
    }
}

/// How a stage loads each rank's link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// `pairs`: a pair has its ends' NICs to itself.
    Alone,
    /// `alltoall`: a rank's NICs carry all its remote peers at once.
    AllPeers,
}

/// What the NICs rank `rank` drove carry, Gbps: the distinct NICs the records name for it,
/// else the rails every rank drove.
fn rank_capacity(m: &Matrix, link: &LinkProfile, rank: usize) -> f64 {
    let named = m.nics.get(&rank).map_or(0, |n| {
        let mut n = n.clone();
        n.sort();
        n.dedup();
        n.len()
    });
    link.capacity(if named > 0 { named } else { m.drove })
}

/// The figures `fig` of `host` (from `m`) against the link; `None` when neither direction has
/// a pair.
pub fn expected(
    m: &Matrix,
    rank_host: &[String],
    host: &str,
    fig: &PairFigures,
    link: &LinkProfile,
    share: Share,
) -> Option<Expected> {
    let on = |r: usize| rank_host.get(r).is_some_and(|h| h == host);
    let remote = |r: usize| {
        let own = rank_host.get(r);
        rank_host.iter().filter(|h| Some(*h) != own).count().max(1)
    };
    let capacity = |r: usize| match share {
        Share::Alone => rank_capacity(m, link, r),
        Share::AllPeers => rank_capacity(m, link, r) / remote(r) as f64,
    };
    let against = |pick: &dyn Fn(usize, usize) -> bool, median: Option<f64>| {
        let e = median_of(
            m.pairs
                .iter()
                .filter(|p| pick(p.src, p.dst))
                .map(|p| capacity(p.src).min(capacity(p.dst))),
        )?;
        let got = median?;
        (e > 0.0).then(|| AgainstLink {
            expected_gbps: e,
            pct_of_expected: got / e * 100.0,
        })
    };
    let send = against(&|s, d| on(s) && !on(d), fig.send.map(|s| s.median));
    let recv = against(&|s, d| !on(s) && on(d), fig.recv.map(|s| s.median));
    (send.is_some() || recv.is_some()).then_some(Expected { send, recv })
}

/// The floor under one figure, with where it comes from: `--min-pair-gbps` where given, else
/// `--min-link-fraction` of the figure's expectation; `None` without either.
pub fn floor(
    t: &Thresholds,
    against: Option<&AgainstLink>,
    link: Option<&LinkProfile>,
) -> Option<(f64, String)> {
    if let Some(f) = t.min_pair_gbps {
        let from = t.min_pair_from.as_deref().unwrap_or("--min-pair-gbps");
        return Some((f, from.to_string()));
    }
    let (a, l) = (against?, link?);
    Some((
        t.min_link_fraction * a.expected_gbps,
        format!(
            "--min-link-fraction {} of {} Gbps expected: the NICs driven x {} Gbps per EFA of {}",
            t.min_link_fraction,
            gbps(a.expected_gbps),
            l.gbps_per_efa,
            l.instance_type
        ),
    ))
}

/// The cluster-wide finding when the median node's pairs (the lower direction) are below
/// `fraction` of the link: every node is slow alike, which no node-by-node rule names.
pub fn cluster_finding(nodes: &[Expected], link: &LinkProfile, fraction: f64) -> Option<String> {
    let pcts: Vec<f64> = nodes.iter().filter_map(Expected::lowest_pct).collect();
    let median = median_of(pcts.iter().copied())?;
    let line = fraction * 100.0;
    if median >= line {
        return None;
    }
    let below = pcts.iter().filter(|p| **p < line).count();
    Some(format!(
        "pairs at a median {median:.1}% of the link of {} over {} node(s), {below} of them below \
         {line:.0}% (--min-link-fraction {fraction}): the cluster as a whole is slow (image, provider, \
         fabric), which the per-node decision cannot see",
        link.instance_type,
        pcts.len(),
    ))
}

#[cfg(test)]
#[path = "expected_tests.rs"]
mod tests;
