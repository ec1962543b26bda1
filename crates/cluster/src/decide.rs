//! The statistical decision on a pair matrix between hosts: for each node and direction (and
//! each rail, and each single link), how fast its pairs are against the pairs without it, with
//! an interval, and whether that is confidently below the ISOLATE or WARN line.
//!
//! # Why a test and not a fixed line
//! A fixed line (a node's median below 60% of the others') misses the common faults that cost a
//! job 10-30% (one NIC of several down, a PCIe link at half width, a throttling NIC), and where
//! it sits against the noise changes with whatever bounds the healthy pairs. Here the noise is
//! taken from the same run: the spread of the pairs that do not involve the node judged.
//!
//! # The test
//! Everything is on the log of Gbps, so a node's effect is a ratio. For node c and a direction
//! (the pairs it sends, or receives), with the nodes already named left out of both sides:
//! * own: c's pairs in that direction (each pair's figure its bytes over its timed windows);
//! * reference: the pairs with neither end on c;
//! * estimate: `exp(median(own) - median(reference))`, the node's share of its peers' speed;
//! * noise: `s`, the robust spread (1.4826 x MAD) within the own pairs and within the reference
//!   pairs, pooled as in a two-sample test: what one pair varies by here; never below what the
//!   pairs' own windows say about a pair's figure ([`window_noise`]) nor [`MIN_NOISE`];
//! * standard error of the log estimate: `1.2533 s sqrt(1/k + 1/m)` (the median's efficiency,
//!   k own pairs, m reference pairs);
//! * interval: estimate +- q standard errors, q the Student t quantile (k + m - 2 degrees of
//!   freedom) at `1 - alpha / tests`: Bonferroni over every node judged three ways (sending,
//!   receiving, all its pairs), so `alpha` bounds the chance that a healthy cluster gets any
//!   WARN.
//!
//! The node is ISOLATE when the interval's upper end is below `isolate_below`, WARN when it is
//! below `warn_below`, PASS otherwise: it takes both an effect that matters and a measurement
//! sure of it. Nodes are judged worst estimate first, and a named node is left out of the
//! reference and of the own pairs of the nodes judged after it (their pairs with it are not
//! evidence about them), so two slow nodes do not hide each other.
//!
//! A single pair (a link) is judged the same way against the pairs with neither of its ends,
//! with the spread of single pairs as its noise (`s sqrt(1 + pi/2m)`), heavy tails
//! ([`LINK_DF`] degrees of freedom) and Bonferroni over every link, its figure its best
//! window (a bad link is slow in every window, a stall in some); it is reported when it is
//! confidently below the WARN line *and* its estimate is below the ISOLATE line (one
//! measurement has heavier tails than a node's pooled pairs), and only when neither end was
//! named for that direction, so a bad cable is told from a bad node; it is a WARN for both ends. With several rails, each rail's figures are judged like the node's.
//!
//! Above [`EXACT_UP_TO`] nodes the reference is every pair not on a named node (c's own pairs,
//! 2/n of them, are left in): the median moves by less than the noise, and the test stays
//! O(n^2 log n) for 1,024 nodes.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The smallest noise a figure is given (log units: half a percent): timers, rounding.
pub const MIN_NOISE: f64 = 0.005;

/// Degrees of freedom of a single pair's test: a pair's figure is one measurement, and a stall
/// of its own (a descheduled rank, a retransmission) gives heavier tails than a normal's.
pub const LINK_DF: usize = 4;

/// Up to this many nodes the reference of a node excludes its own pairs exactly.
pub const EXACT_UP_TO: usize = 64;

/// One ordered pair of hosts: its figure and what backs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cell {
    pub src: usize,
    pub dst: usize,
    /// The pair's figure, Gbps.
    pub gbps: f64,
    /// Each timed window's Gbps (empty when not known).
    pub windows: Vec<f64>,
    /// Each rail alone, Gbps (empty with one rail).
    pub rails: Vec<f64>,
}

impl Cell {
    /// The figure judged: the pair's own (all its bytes over all its timed windows' time).
    /// Its windows vary more than it does (a rate limiter's bucket, a scheduler's slice), so
    /// they bound its noise from below ([`window_noise`]) rather than replace it.
    pub fn figure(&self) -> f64 {
        self.gbps
    }
}

/// The lines and the error rate of the decision.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// ISOLATE when confidently below this fraction of the peers.
    pub isolate_below: f64,
    /// WARN when confidently below this fraction.
    pub warn_below: f64,
    /// Family-wise error rate: the chance that any node of a healthy cluster is named.
    pub alpha: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            isolate_below: 0.85,
            warn_below: 0.95,
            alpha: 0.01,
        }
    }
}

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Sending,
    Receiving,
    Both,
}

impl Dir {
    pub fn describe(self) -> &'static str {
        match self {
            Dir::Sending => "sending",
            Dir::Receiving => "receiving",
            Dir::Both => "sending and receiving",
        }
    }
}

/// The level of a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    Pass,
    Warn,
    Isolate,
}

/// A ratio to the peers with its interval and the numbers behind it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Own figure over the reference's (medians).
    pub ratio: f64,
    /// The interval at the corrected confidence.
    pub low: f64,
    pub high: f64,
    /// Confidence of the interval (two-sided), after the correction for the tests made.
    pub confidence: f64,
    /// Own pairs, and how many of them are below the slowest reference pair.
    pub pairs: usize,
    pub below_slowest: usize,
    /// Reference pairs, and the noise of one pair (log units, ~ relative).
    pub reference: usize,
    pub noise: f64,
}

impl Estimate {
    pub fn level(&self, cfg: &Config) -> Level {
        if self.high < cfg.isolate_below {
            Level::Isolate
        } else if self.high < cfg.warn_below {
            Level::Warn
        } else {
            Level::Pass
        }
    }

    /// "80% of its peers [77-83%], 13 of 14 pairs below the slowest healthy pair".
    pub fn describe(&self) -> String {
        format!(
            "{:.0}% of its peers [{:.0}-{:.0}%], {} of {} pairs below the slowest healthy pair",
            self.ratio * 100.0,
            self.low * 100.0,
            self.high * 100.0,
            self.below_slowest,
            self.pairs
        )
    }
}

/// Where a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Scope {
    /// The node's pairs (all rails together).
    Node { node: usize, dir: Dir },
    /// One rail (NIC index) of the node.
    Rail { node: usize, rail: usize, dir: Dir },
    /// One ordered pair: `src` sending to `dst`.
    Link { src: usize, dst: usize },
}

/// One named node, rail or link.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub scope: Scope,
    pub level: Level,
    pub estimate: Estimate,
}

/// Everything the decision found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// Named nodes, rails and links (WARN or ISOLATE), worst first within each kind.
    pub findings: Vec<Finding>,
    /// Every node's estimate per direction (sending, receiving), named or not.
    pub nodes: Vec<[Option<Estimate>; 2]>,
}

impl Decision {
    /// The worst level of any finding on `node` (links count for both ends).
    pub fn level_of(&self, node: usize) -> Level {
        self.findings
            .iter()
            .filter(|f| match f.scope {
                Scope::Node { node: x, .. } | Scope::Rail { node: x, .. } => x == node,
                Scope::Link { src, dst } => src == node || dst == node,
            })
            .map(|f| f.level)
            .max()
            .unwrap_or(Level::Pass)
    }
}

/// The estimator median ([`efabench_record::stats::sample_median`]); NaN for no values.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    efabench_record::stats::sample_median(v).unwrap_or(f64::NAN)
}

/// 1.4826 x the median absolute deviation: the standard deviation of normal data, robust to a
/// few wild values.
pub(crate) fn robust_scale(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    efabench_record::stats::robust_sd(v).unwrap_or(0.0)
}

/// The noise of one pair's figure from its own windows: the median over pairs of the windows'
/// robust spread over the square root of their count (log units).
pub fn window_noise(cells: &[Cell]) -> f64 {
    let mut per: Vec<f64> = cells
        .iter()
        .filter(|c| c.windows.len() >= 3)
        .map(|c| {
            let l: Vec<f64> = c
                .windows
                .iter()
                .filter(|x| **x > 0.0)
                .map(|x| x.ln())
                .collect();
            robust_scale(&l) / (l.len().max(1) as f64).sqrt()
        })
        .collect();
    if per.is_empty() {
        0.0
    } else {
        median(&mut per)
    }
}

/// The standard normal quantile (Acklam's rational approximation, relative error < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Student's t quantile with `df` degrees of freedom: exact for 1, 2 and 4, else the
/// Cornish-Fisher expansion around the normal quantile (within 1% from 3 on at the levels
/// used here).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    let df = df.max(1.0);
    if df <= 1.0 {
        return (std::f64::consts::PI * (p - 0.5)).tan();
    }
    if df <= 2.0 {
        let a = 4.0 * p * (1.0 - p);
        return (2.0 * p - 1.0) * (2.0 / a).sqrt();
    }
    if df == 4.0 {
        let a = 4.0 * p * (1.0 - p);
        let q = (a.sqrt().acos() / 3.0).cos() / a.sqrt();
        return (p - 0.5).signum() * 2.0 * (q - 1.0).sqrt();
    }
    let z = normal_quantile(p);
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * df)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df * df)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * df.powi(3))
}

/// Log figures of the cells, by index (NaN for a figure that is not positive).
fn logs(cells: &[Cell], rail: Option<usize>) -> Vec<f64> {
    cells
        .iter()
        .map(|c| {
            let g = match rail {
                Some(r) => c.rails.get(r).copied().unwrap_or(f64::NAN),
                None => c.figure(),
            };
            if g > 0.0 {
                g.ln()
            } else {
                f64::NAN
            }
        })
        .collect()
}

/// What a comparison needs of its reference pairs.
#[derive(Clone, Copy, Debug)]
struct Reference {
    median: f64,
    scale: f64,
    count: usize,
    slowest: f64,
}

impl Reference {
    fn of(v: &[f64]) -> Reference {
        Reference {
            median: median(&mut v.to_vec()),
            scale: robust_scale(v),
            count: v.len(),
            slowest: v.iter().copied().fold(f64::INFINITY, f64::min),
        }
    }
}

/// One comparison: own log figures against the reference's; `single` for one pair judged
/// alone (its noise is one pair's, not a median's).
fn compare(
    own: &[f64],
    r: &Reference,
    floor: f64,
    single: bool,
    tests: usize,
    alpha: f64,
) -> Option<Estimate> {
    let (k, m) = (own.len(), r.count);
    if k == 0 || m < 2 {
        return None;
    }
    // One pair alone: the reference's spread is its noise. A node's pairs: the spread within
    // its own pairs and within the reference, pooled (a two-sample test), so a small
    // reference (three or four nodes) still gives a usable noise.
    let (s, df) = if single {
        // One measurement is exposed to any stall of its own: heavy tails (4 degrees of
        // freedom) whatever the reference's size.
        (r.scale, (m - 1).min(LINK_DF))
    } else if k < 2 {
        (r.scale, m - 1)
    } else {
        let so = robust_scale(own);
        let pooled =
            ((k - 1) as f64 * so * so + (m - 1) as f64 * r.scale * r.scale) / (k + m - 2) as f64;
        (pooled.sqrt(), k + m - 2)
    };
    let s = s.max(floor).max(MIN_NOISE);
    let own_med = median(&mut own.to_vec());
    let se = if single {
        s * (1.0 + std::f64::consts::FRAC_PI_2 / m as f64).sqrt()
    } else {
        1.2533 * s * (1.0 / k as f64 + 1.0 / m as f64).sqrt()
    };
    let one_sided = alpha / tests.max(1) as f64;
    let q = t_quantile(1.0 - one_sided, df as f64);
    let d = own_med - r.median;
    Some(Estimate {
        ratio: d.exp(),
        low: (d - q * se).exp(),
        high: (d + q * se).exp(),
        confidence: 1.0 - 2.0 * one_sided,
        pairs: k,
        below_slowest: own.iter().filter(|x| **x < r.slowest).count(),
        reference: m,
        noise: s,
    })
}

/// What the node tests of a grid give: the findings (node, direction, estimate) worst first,
/// every node's estimates per direction, and the nodes named.
type Judged = (
    Vec<(usize, Dir, Estimate)>,
    Vec<[Option<Estimate>; 2]>,
    BTreeSet<usize>,
);

/// The cells of a grid indexed by node, with their log figures.
struct Grid<'a> {
    n: usize,
    cells: &'a [Cell],
    lg: Vec<f64>,
    by_src: Vec<Vec<usize>>,
    by_dst: Vec<Vec<usize>>,
    floor: f64,
}

impl<'a> Grid<'a> {
    fn new(n: usize, cells: &'a [Cell], rail: Option<usize>, floor: f64) -> Grid<'a> {
        let lg = logs(cells, rail);
        let mut by_src = vec![Vec::new(); n];
        let mut by_dst = vec![Vec::new(); n];
        for (i, c) in cells.iter().enumerate() {
            if lg[i].is_finite() && c.src < n && c.dst < n && c.src != c.dst {
                by_src[c.src].push(i);
                by_dst[c.dst].push(i);
            }
        }
        Grid {
            n,
            cells,
            lg,
            by_src,
            by_dst,
            floor,
        }
    }

    /// Log figures of the pairs with no end in `out`.
    fn without(&self, out: &BTreeSet<usize>) -> Vec<f64> {
        self.cells
            .iter()
            .enumerate()
            .filter(|(i, x)| {
                self.lg[*i].is_finite() && !out.contains(&x.src) && !out.contains(&x.dst)
            })
            .map(|(i, _)| self.lg[i])
            .collect()
    }

    /// Node c's log figures: sending (dir 0), receiving (1) or both (2), partners not named.
    fn own(&self, c: usize, dir: usize, named: &BTreeSet<usize>) -> Vec<f64> {
        let send = self.by_src[c]
            .iter()
            .filter(|&&i| !named.contains(&self.cells[i].dst));
        let recv = self.by_dst[c]
            .iter()
            .filter(|&&i| !named.contains(&self.cells[i].src));
        let idx: Vec<usize> = match dir {
            0 => send.copied().collect(),
            1 => recv.copied().collect(),
            _ => send.chain(recv).copied().collect(),
        };
        idx.into_iter().map(|i| self.lg[i]).collect()
    }

    /// The reference of node c: exact (its pairs left out) up to [`EXACT_UP_TO`] nodes, else
    /// every pair not on a named node (computed once per named set).
    fn reference(
        &self,
        c: usize,
        named: &BTreeSet<usize>,
        cache: &mut Option<(BTreeSet<usize>, Reference)>,
    ) -> Reference {
        if self.n <= EXACT_UP_TO {
            let mut out = named.clone();
            out.insert(c);
            return Reference::of(&self.without(&out));
        }
        if let Some((set, r)) = cache {
            if set == named {
                return *r;
            }
        }
        let r = Reference::of(&self.without(named));
        *cache = Some((named.clone(), r));
        r
    }

    /// The node tests: findings (worst first) and every node's estimates per direction.
    /// Each node is judged three ways (sending, receiving, all its pairs), so `tests` (the
    /// Bonferroni count) is 3 per node: a node slow both ways by a little is seen by the
    /// pooled test, a node slow one way by the direction's.
    fn judge_nodes(&self, cfg: &Config, tests: usize) -> Judged {
        let n = self.n;
        let mut named: BTreeSet<usize> = BTreeSet::new();
        let mut cache = None;
        let mut all: Vec<[Option<Estimate>; 2]> = vec![[None, None]; n];
        let mut order: Vec<(f64, usize)> = Vec::new();
        for (c, slot) in all.iter_mut().enumerate() {
            let r = self.reference(c, &named, &mut cache);
            let mut worst = f64::INFINITY;
            for (dir, est) in slot.iter_mut().enumerate() {
                if let Some(e) = compare(
                    &self.own(c, dir, &named),
                    &r,
                    self.floor,
                    false,
                    tests,
                    cfg.alpha,
                ) {
                    *est = Some(e);
                    worst = worst.min(e.ratio);
                }
            }
            order.push((worst, c));
        }
        // Worst first: a named node leaves the reference and the partners of those after it.
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut found: Vec<(usize, Dir, Estimate)> = Vec::new();
        for (_, c) in order {
            let r = self.reference(c, &named, &mut cache);
            let e: Vec<Option<Estimate>> = (0..3)
                .map(|dir| {
                    compare(
                        &self.own(c, dir, &named),
                        &r,
                        self.floor,
                        false,
                        tests,
                        cfg.alpha,
                    )
                })
                .collect();
            all[c] = [e[0], e[1]];
            let level = |x: &Option<Estimate>| x.map_or(Level::Pass, |e| e.level(cfg));
            let (ls, lr, lb) = (level(&e[0]), level(&e[1]), level(&e[2]));
            let finding = match (ls > Level::Pass, lr > Level::Pass) {
                (true, true) => {
                    let worse = if ls >= lr { e[0] } else { e[1] };
                    let pick = if lb >= ls.max(lr) { e[2] } else { worse };
                    pick.map(|x| (Dir::Both, x))
                }
                (true, false) | (false, true) => {
                    // Named one way: is the other way slow too? A follow-up question about
                    // this node alone, so corrected for its two directions only.
                    let (named_dir, other) = if ls > Level::Pass { (0, 1) } else { (1, 0) };
                    let again = compare(
                        &self.own(c, other, &named),
                        &r,
                        self.floor,
                        false,
                        2,
                        cfg.alpha,
                    );
                    if again.is_some_and(|x| x.level(cfg) > Level::Pass) {
                        let pick = if lb >= ls.max(lr) { e[2] } else { e[named_dir] };
                        pick.map(|x| (Dir::Both, x))
                    } else {
                        e[named_dir].map(|x| {
                            (
                                if named_dir == 0 {
                                    Dir::Sending
                                } else {
                                    Dir::Receiving
                                },
                                x,
                            )
                        })
                    }
                }
                (false, false) if lb > Level::Pass => e[2].map(|x| (Dir::Both, x)),
                (false, false) => None,
            };
            if let Some((dir, x)) = finding {
                found.push((c, dir, x));
                named.insert(c);
            }
        }
        (found, all, named)
    }
}

/// Above this many nodes a link is judged against every pair not on a named node.
const EXACT_LINKS_UP_TO: usize = 16;

/// The decision on `n` hosts' pair matrix (`cells`, host indices).
pub fn decide(n: usize, cells: &[Cell], cfg: &Config) -> Decision {
    let mut d = Decision {
        findings: Vec::new(),
        nodes: vec![[None, None]; n],
    };
    if n < 3 {
        // Two nodes: a slow pair cannot be told from a slow node (no pair without either).
        return d;
    }
    let floor = window_noise(cells);
    let grid = Grid::new(n, cells, None, floor);
    let (found, all, named) = grid.judge_nodes(cfg, 3 * n);
    d.nodes = all;
    for (node, dir, e) in found {
        d.findings.push(Finding {
            scope: Scope::Node { node, dir },
            level: e.level(cfg),
            estimate: e,
        });
    }

    // Each rail alone, when every pair has the same rails.
    let rails = cells.first().map_or(0, |c| c.rails.len());
    if rails > 1 && cells.iter().all(|c| c.rails.len() == rails) {
        for r in 0..rails {
            let g = Grid::new(n, cells, Some(r), floor);
            for (node, dir, e) in g.judge_nodes(cfg, 3 * n * rails).0 {
                d.findings.push(Finding {
                    scope: Scope::Rail { node, rail: r, dir },
                    level: e.level(cfg),
                    estimate: e,
                });
            }
        }
    }

    // Single links whose ends were not named.
    let tests = n * (n - 1);
    let global = Reference::of(&grid.without(&named));
    let mut links = Vec::new();
    for (i, c) in cells.iter().enumerate() {
        if !grid.lg[i].is_finite() || named.contains(&c.src) || named.contains(&c.dst) {
            continue;
        }
        let r = if n <= EXACT_LINKS_UP_TO {
            let mut out = named.clone();
            out.insert(c.src);
            out.insert(c.dst);
            Reference::of(&grid.without(&out))
        } else {
            global
        };
        // A bad link is slow in every window; a stall slows some. The link's best window
        // (its figure without windows) is what must be confidently slow.
        let best = c.windows.iter().copied().fold(c.gbps, f64::max);
        let e = compare(&[best.ln()], &r, floor, true, tests, cfg.alpha);
        // One pair's figure is one measurement: besides being confidently below the WARN line,
        // its estimate must be below the ISOLATE line. 8 simulated nodes, every link at
        // 300 Mbit/s, put one healthy pair's best window at 87% [80-95%] of the others.
        if let Some(e) = e.filter(|e| e.level(cfg) > Level::Pass && e.ratio < cfg.isolate_below) {
            links.push(Finding {
                scope: Scope::Link {
                    src: c.src,
                    dst: c.dst,
                },
                // A link is both ends' problem: neither node is to be drained for it.
                level: Level::Warn,
                estimate: e,
            });
        }
    }
    links.sort_by(|a, b| a.estimate.ratio.total_cmp(&b.estimate.ratio));
    d.findings.extend(links);
    d
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
