//! Naming the slow node of a pair matrix.
//!
//! Input: the measured bandwidth of ordered pairs (source rank → destination rank) of one size.
//! Output: the ranks whose own pairs are slow, the direction (the pairs it sends, the pairs it
//! receives, or both), and the numbers that show it.
//!
//! # The rule
//! A rank is judged against the pairs that do **not** involve it. A slow node takes part in
//! 2(n−1) of the n(n−1) ordered pairs; with three nodes that is four of six, so a global median
//! is the slow node's own number and nobody stands out. The pairs without a candidate are
//! free of the candidate's fault, so when the candidate is healthy its reference is no better
//! than its own pairs, and when it is the faulty one the reference is the healthy level.
//!
//! For every rank c and each direction (pairs c sends, pairs c receives): the median of those
//! pairs is compared with the median of the pairs in which c is neither source nor destination.
//! Below `margin` (a fraction, e.g. 0.6) the rank is named for that direction; when both are
//! below it and only one stands apart from the reference (see below), for that one alone. Named
//! ranks are taken out of the reference of the ranks judged after them, worst first, so two slow
//! nodes of eight do not lift each other. A rank judged after another was named must have a reference
//! of more pairs than its own: with four nodes and one named, the two pairs left without a
//! candidate are too few to be the healthy level (so 2 slow nodes of 4 name the worst only), and
//! its pairs must stand apart from that reference (their upper quartile below its lower
//! quartile): the pairs left were measured beside the named node's and carry its effect on a
//! shared host.
//!
//! The margin is a fraction of the reference, not a count of deviations: a degraded port, a
//! link trained at a lower speed, one rail of two down or a lossy cable costs a half or more
//! of a pair's bandwidth, while the spread of healthy pairs measured at once in a ring shift
//! comes from sharing CPU and fabric and stays well inside that (see the README's cluster
//! acceptance section for measured spreads). A median over at least two pairs per direction
//! means a single noisy pair cannot name a rank.

/// Whether rates of the pairs of a byte matrix (`rows[src][dst]`; the diagonal and zeros left
/// out) can be judged against each other: every one within half and twice their median. A rate
/// measured as bytes over arrival time favours large transfers (a fixed latency weighs more on a
/// small one), so pairs of very different sizes would name the senders of small ones.
pub fn comparable_sizes<R: AsRef<[u64]>>(rows: &[R]) -> bool {
    let mut b: Vec<u64> = rows
        .iter()
        .enumerate()
        .flat_map(|(s, row)| {
            row.as_ref()
                .iter()
                .enumerate()
                .filter(move |&(d, &x)| d != s && x > 0)
                .map(|(_, &x)| x)
        })
        .collect();
    if b.is_empty() {
        return false;
    }
    b.sort_unstable();
    // The centre of the bound is the upper middle value, not the reported median (p50, the
    // lower one): with an even count the stricter centre keeps the imbalanced matrices of
    // `alltoallv --counts zipf` out, whose small transfers would otherwise name their senders.
    let m = b[b.len() / 2];
    b[0] * 2 >= m && b[b.len() - 1] <= m * 2
}

/// What the two arrival matrices of an all-to-all say together ([`arrival_suspect`]).
#[derive(Clone, Debug, PartialEq)]
pub enum ArrivalVerdict {
    /// The loop names no node (the probes alone, a few iterations with the barrier's release
    /// skew, are no verdict).
    Nobody,
    /// Both name the same node: the loop's suspect and the probes' (same rank).
    Named { looped: Suspect, probed: Suspect },
    /// The loop names a node the probes do not: another one, or none.
    Unclear {
        looped: Suspect,
        probed: Option<Suspect>,
    },
}

/// The slow node of an all-to-all, from its two arrival matrices: `loop_pairs`, each chunk's mean
/// arrival time in the back-to-back timed loop, and `probe_pairs`, its median in the iterations
/// that each start after a barrier. Both are a transfer time plus a skew. In the loop a rank starts
/// iteration i+1 when the slowest chunk of i reached *it*, so behind a slow node every start drifts
/// with that node's send order, and a healthy node's median can fall under the margin (four ranks
/// on two cores, a node at 20 Mbit/s, 64 KiB chunks: a healthy node at 52% while the slow one was
/// at 17%). The probes are free of that drift but are few, and carry the barrier's release skew (on
/// that host it alone put healthy nodes at 10-50%). So the loop says whether anyone is slow and the
/// probes say who: the probes' worst node is named when the loop puts it under the margin too,
/// whether or not it is the loop's own worst (the drift can rank a healthy node first: alltoallv
/// with zipf counts once put rank 0, the hottest destination, first at 25% in the loop while the
/// probes put the throttled node at 0%; in 20 other runs of that case the throttled node's loop
/// pairs sat at 2-43% of the rest). Where the probes' worst is not under the margin in the loop, or
/// the probes name nobody, it is unclear and `pairs` is the measurement to run; where the loop
/// names nobody, nobody is named. Without probes (records written before they existed) the loop's
/// verdict stands alone.
pub fn arrival_suspect(
    n: usize,
    loop_pairs: &[PairBw],
    probe_pairs: &[PairBw],
    margin: f64,
) -> ArrivalVerdict {
    let a = locate(n, loop_pairs, margin).into_iter().next();
    if probe_pairs.is_empty() {
        return match a {
            Some(s) => ArrivalVerdict::Named {
                looped: s.clone(),
                probed: s,
            },
            None => ArrivalVerdict::Nobody,
        };
    }
    let Some(looped) = a else {
        return ArrivalVerdict::Nobody;
    };
    let Some(p) = locate(n, probe_pairs, margin).into_iter().next() else {
        return ArrivalVerdict::Unclear {
            looped,
            probed: None,
        };
    };
    // The loop's own verdict on the probes' node (the loop's worst, when it is that node).
    match judge(loop_pairs, p.rank, &[], margin) {
        Some(seen) => ArrivalVerdict::Named {
            looped: seen,
            probed: p,
        },
        None => ArrivalVerdict::Unclear {
            looped,
            probed: Some(p),
        },
    }
}

/// One measured ordered pair.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairBw {
    pub src: usize,
    pub dst: usize,
    pub gbps: f64,
}

/// Which of a rank's pairs are slow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The pairs it sends (its egress).
    Sending,
    /// The pairs it receives (its ingress).
    Receiving,
    /// Both.
    Both,
}

impl Direction {
    pub fn describe(self) -> &'static str {
        match self {
            Direction::Sending => "sending",
            Direction::Receiving => "receiving",
            Direction::Both => "sending and receiving",
        }
    }
}

/// The numbers behind one side of a verdict.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub count: usize,
    pub min: f64,
    /// Lower and upper quartiles (nearest rank, like every percentile here).
    pub q1: f64,
    pub median: f64,
    pub q3: f64,
    pub max: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Option<Spread> {
        let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return None;
        }
        s.sort_by(f64::total_cmp);
        Some(Spread {
            count: s.len(),
            min: s[0],
            q1: crate::stats::nearest_rank(&s, 0.25).unwrap_or(0.0),
            median: crate::stats::median(&s).unwrap_or(0.0),
            q3: crate::stats::nearest_rank(&s, 0.75).unwrap_or(0.0),
            max: s[s.len() - 1],
        })
    }
}

/// A rank named slow, with its evidence.
#[derive(Clone, Debug, PartialEq)]
pub struct Suspect {
    pub rank: usize,
    pub direction: Direction,
    /// Its slow pairs (the direction's, or all of them for `Both`).
    pub mine: Spread,
    /// The pairs without it (and without ranks named before it).
    pub others: Spread,
}

impl Suspect {
    /// Its pairs' median as a fraction of the reference.
    pub fn ratio(&self) -> f64 {
        self.mine.median / self.others.median.max(f64::MIN_POSITIVE)
    }

    /// Whether its pairs stand apart from the reference: their upper quartile below the
    /// reference's lower quartile.
    pub fn stands_apart(&self) -> bool {
        self.mine.q3 < self.others.q1
    }

    /// One line of evidence: "its 4 pairs sending and receiving at 0.40-0.44 Gbps (median
    /// 0.42), the 2 pairs without it at median 3.65 Gbps (12%)".
    pub fn evidence(&self) -> String {
        let range = if self.mine.count == 1 {
            format!("{} Gbps", gbps_text(self.mine.min))
        } else {
            format!(
                "{}-{} Gbps (median {})",
                gbps_text(self.mine.min),
                gbps_text(self.mine.max),
                gbps_text(self.mine.median)
            )
        };
        format!(
            "its {} pair{} {} at {range}, the {} pair{} without it at median {} Gbps ({:.0}%)",
            self.mine.count,
            if self.mine.count == 1 { "" } else { "s" },
            self.direction.describe(),
            self.others.count,
            if self.others.count == 1 { "" } else { "s" },
            gbps_text(self.others.median),
            self.ratio() * 100.0
        )
    }
}

/// Gbps with two decimals, three significant digits below 1 (0.0123, not 0.01).
pub fn gbps_text(v: f64) -> String {
    if v >= 1.0 || v == 0.0 {
        format!("{v:.2}")
    } else {
        let digits = (2 - v.log10().floor() as i32).clamp(2, 9) as usize;
        format!("{v:.digits$}")
    }
}

/// The verdict for one candidate against a reference that excludes `excluded` ranks.
fn judge(pairs: &[PairBw], c: usize, excluded: &[usize], margin: f64) -> Option<Suspect> {
    let reference: Vec<f64> = pairs
        .iter()
        .filter(|p| p.src != c && p.dst != c)
        .filter(|p| !excluded.contains(&p.src) && !excluded.contains(&p.dst))
        .map(|p| p.gbps)
        .collect();
    let others = Spread::of(&reference)?;
    // Pairs with already named ranks say nothing about c.
    let own = |f: &dyn Fn(&PairBw) -> bool| -> Vec<f64> {
        pairs
            .iter()
            .filter(|p| f(p))
            .filter(|p| !excluded.contains(&p.src) && !excluded.contains(&p.dst))
            .map(|p| p.gbps)
            .collect()
    };
    let out = own(&|p| p.src == c);
    let inn = own(&|p| p.dst == c);
    let line = others.median * margin;
    let slow = |v: &[f64]| Spread::of(v).filter(|s| s.median < line);
    let (so, si) = (slow(&out), slow(&inn));
    // With both directions under the line, one that stands apart from the reference while the
    // other does not is named alone: a node throttled one way has its other direction at the
    // reference level, and on a busy host that direction's median alone can fall under the
    // line (a node sending at 0.2% of the rest, its three received pairs at 13, 21 and 55 Gbps
    // against healthy pairs at 15-56).
    let apart = |s: &Spread| s.q3 < others.q1;
    let (direction, mine) = match (so, si) {
        (Some(o), Some(i)) if apart(&o) && !apart(&i) => (Direction::Sending, o),
        (Some(o), Some(i)) if apart(&i) && !apart(&o) => (Direction::Receiving, i),
        (Some(_), Some(_)) => {
            let mut all = out.clone();
            all.extend_from_slice(&inn);
            (Direction::Both, Spread::of(&all)?)
        }
        (Some(s), None) => (Direction::Sending, s),
        (None, Some(s)) => (Direction::Receiving, s),
        (None, None) => return None,
    };
    Some(Suspect {
        rank: c,
        direction,
        mine,
        others,
    })
}

/// How many pairs rank `c` takes part in, leaving out those with `excluded` ranks.
fn own_pairs(pairs: &[PairBw], c: usize, excluded: &[usize]) -> usize {
    pairs
        .iter()
        .filter(|p| p.src == c || p.dst == c)
        .filter(|p| !excluded.contains(&p.src) && !excluded.contains(&p.dst))
        .count()
}

/// The slow ranks among `n`, worst first. `margin` is a fraction (0.6 = a rank is named when
/// the median of its pairs in a direction is below 60% of the median of the pairs without it).
/// Needs at least three ranks: with two, every pair involves both.
pub fn locate(n: usize, pairs: &[PairBw], margin: f64) -> Vec<Suspect> {
    let mut named: Vec<Suspect> = Vec::new();
    if n < 3 {
        return named;
    }
    loop {
        let excluded: Vec<usize> = named.iter().map(|s| s.rank).collect();
        let worst = (0..n)
            .filter(|c| !excluded.contains(c))
            .filter_map(|c| judge(pairs, c, &excluded, margin))
            // A further suspect needs a reference larger than its own pairs: with four
            // nodes and one named, the two pairs left without a candidate shared rounds with
            // the named node and are no healthy level. And its pairs must stand apart from
            // that reference: the pairs left were measured in rounds beside the named node's,
            // and on a shared host they run faster or slower with it (eight simulated nodes,
            // two throttled to 1% of the rest: healthy nodes' receiving medians at 56-57% of
            // the pairs left, their pairs overlapping them).
            .filter(|s| {
                excluded.is_empty()
                    || (s.others.count > own_pairs(pairs, s.rank, &excluded) && s.stands_apart())
            })
            .min_by(|a, b| a.ratio().total_cmp(&b.ratio()));
        match worst {
            Some(s) => named.push(s),
            None => return named,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_within_half_and_twice_the_median_are_comparable() {
        // The diagonal (a rank's own bytes) and empty cells do not count.
        assert!(comparable_sizes(&[
            [900, 100, 150],
            [0, 1, 200],
            [80, 100, 5]
        ]));
        assert!(!comparable_sizes(&[
            [0, 100, 100],
            [100, 0, 300],
            [100, 100, 0]
        ]));
        assert!(!comparable_sizes(&[
            [0, 100, 100],
            [100, 0, 40],
            [100, 100, 0]
        ]));
        assert!(!comparable_sizes(&[[7, 0], [0, 7]]));
    }

    /// Every ordered pair of `n` at `healthy` Gbps times a deterministic noise in
    /// [1 − noise, 1 + noise], with `f(src, dst)` applied on top.
    fn matrix(n: usize, healthy: f64, noise: f64, f: impl Fn(usize, usize) -> f64) -> Vec<PairBw> {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut out = Vec::new();
        for src in 0..n {
            for dst in (0..n).filter(|&d| d != src) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let u = (seed % 10_000) as f64 / 10_000.0; // [0, 1)
                let g = healthy * (1.0 - noise + 2.0 * noise * u) * f(src, dst);
                out.push(PairBw { src, dst, gbps: g });
            }
        }
        out
    }

    fn ranks(s: &[Suspect]) -> Vec<usize> {
        let mut r: Vec<usize> = s.iter().map(|s| s.rank).collect();
        r.sort();
        r
    }

    const MARGIN: f64 = 0.6;

    #[test]
    fn one_slow_node_of_three_is_named_although_it_dominates_the_median() {
        // The case a global median misses: four of six pairs involve the slow node.
        let slow = 2;
        let m = matrix(
            3,
            4.0,
            0.1,
            |s, d| if s == slow || d == slow { 0.1 } else { 1.0 },
        );
        let got = locate(3, &m, MARGIN);
        assert_eq!(ranks(&got), vec![slow], "{got:?}");
        assert_eq!(got[0].direction, Direction::Both);
        assert_eq!(got[0].mine.count, 4);
        assert_eq!(got[0].others.count, 2);
        let e = got[0].evidence();
        assert!(
            e.starts_with("its 4 pairs sending and receiving at 0."),
            "{e}"
        );
        assert!(e.contains("the 2 pairs without it at median 3."), "{e}");
    }

    #[test]
    fn one_slow_node_of_four() {
        for slow in 0..4 {
            let m = matrix(4, 10.0, 0.15, |s, d| {
                if s == slow || d == slow {
                    0.1
                } else {
                    1.0
                }
            });
            let got = locate(4, &m, MARGIN);
            assert_eq!(ranks(&got), vec![slow], "{got:?}");
            assert_eq!(got[0].direction, Direction::Both);
        }
    }

    #[test]
    fn two_slow_nodes_of_eight() {
        let bad = [1, 6];
        let m = matrix(8, 90.0, 0.15, |s, d| {
            if bad.contains(&s) || bad.contains(&d) {
                0.3
            } else {
                1.0
            }
        });
        let got = locate(8, &m, MARGIN);
        assert_eq!(ranks(&got), bad.to_vec(), "{got:?}");
    }

    #[test]
    fn two_slow_nodes_of_eight_at_different_speeds() {
        let m = matrix(8, 90.0, 0.1, |s, d| {
            let f = |r| match r {
                3 => 0.5,
                5 => 0.1,
                _ => 1.0,
            };
            f(s) * f(d)
        });
        let got = locate(8, &m, MARGIN);
        assert_eq!(ranks(&got), vec![3, 5], "{got:?}");
        assert_eq!(got[0].rank, 5, "the worst comes first: {got:?}");
    }

    #[test]
    fn one_direction_is_told_apart() {
        for n in [3, 4, 8] {
            let m = matrix(n, 10.0, 0.1, |s, _| if s == 1 { 0.1 } else { 1.0 });
            let got = locate(n, &m, MARGIN);
            assert_eq!(ranks(&got), vec![1], "n={n}: {got:?}");
            assert_eq!(got[0].direction, Direction::Sending, "n={n}");
            assert_eq!(got[0].mine.count, n - 1);

            let m = matrix(n, 10.0, 0.1, |_, d| if d == 0 { 0.2 } else { 1.0 });
            let got = locate(n, &m, MARGIN);
            assert_eq!(ranks(&got), vec![0], "n={n}: {got:?}");
            assert_eq!(got[0].direction, Direction::Receiving, "n={n}");
        }
    }

    #[test]
    fn one_direction_stays_one_when_the_other_only_dips_under_the_margin() {
        // Measured on a busy 2-core host, one pair at a time, rank 3's egress at 100 Mbit/s:
        // the pairs it receives fell to a median of 44% of the rest, but overlap them.
        let rows = [
            [0.0, 48.57, 49.80, 13.31],
            [15.16, 0.0, 56.13, 55.25],
            [53.64, 26.39, 0.0, 21.48],
            [0.0965, 0.0966, 0.0962, 0.0],
        ];
        let m: Vec<PairBw> = (0..4)
            .flat_map(|src| {
                (0..4)
                    .filter(move |&dst| dst != src)
                    .map(move |dst| PairBw {
                        src,
                        dst,
                        gbps: rows[src][dst],
                    })
            })
            .collect();
        let got = locate(4, &m, MARGIN);
        assert_eq!(ranks(&got), vec![3], "{got:?}");
        assert_eq!(got[0].direction, Direction::Sending, "{got:?}");
        assert_eq!(got[0].mine.count, 3);
    }

    #[test]
    fn half_speed_node_is_named_at_the_default_margin() {
        // One rail of two down, or a link trained at half its speed.
        let m = matrix(
            4,
            100.0,
            0.1,
            |s, d| if s == 3 || d == 3 { 0.45 } else { 1.0 },
        );
        assert_eq!(ranks(&locate(4, &m, MARGIN)), vec![3]);
    }

    #[test]
    fn after_one_of_four_a_small_reference_names_nobody_else() {
        // Rank 0 slow; pairs 1 <-> 3 happen to be fast, so rank 2's remaining pairs look slow
        // against a reference of two pairs.
        let m = matrix(4, 1.0, 0.0, |s, d| {
            if s == 0 || d == 0 {
                0.05
            } else if (s, d) == (1, 3) || (s, d) == (3, 1) {
                3.0
            } else {
                1.0
            }
        });
        assert_eq!(ranks(&locate(4, &m, 0.6)), vec![0]);
    }

    #[test]
    fn healthy_clusters_name_nobody() {
        // ±25% noise on every pair (more than measured between healthy simulated nodes).
        for n in 3..=16 {
            let m = matrix(n, 4.0, 0.25, |_, _| 1.0);
            let got = locate(n, &m, MARGIN);
            assert!(got.is_empty(), "n={n}: {got:?}");
        }
    }

    #[test]
    fn a_single_bad_pair_names_no_node() {
        // One slow cable between two nodes is a pair outlier, not a node.
        let m = matrix(
            8,
            10.0,
            0.1,
            |s, d| if (s, d) == (2, 5) { 0.05 } else { 1.0 },
        );
        assert!(locate(8, &m, MARGIN).is_empty());
    }

    #[test]
    fn small_bandwidths_keep_three_digits() {
        assert_eq!(gbps_text(0.0123), "0.0123");
        assert_eq!(gbps_text(0.4), "0.400");
        assert_eq!(gbps_text(4.1), "4.10");
        assert_eq!(gbps_text(0.0), "0.00");
    }

    #[test]
    fn too_few_ranks_or_pairs_name_nobody() {
        let m = matrix(2, 1.0, 0.0, |s, _| if s == 0 { 0.01 } else { 1.0 });
        assert!(locate(2, &m, MARGIN).is_empty());
        assert!(locate(5, &[], MARGIN).is_empty());
    }

    #[test]
    fn partial_matrices_from_cheaper_schedules_still_localize() {
        // A ring schedule: each rank sends only to r+1 and r-1.
        let n = 8;
        let m: Vec<PairBw> = matrix(
            n,
            10.0,
            0.1,
            |s, d| if s == 4 || d == 4 { 0.1 } else { 1.0 },
        )
        .into_iter()
        .filter(|p| p.dst == (p.src + 1) % n || p.src == (p.dst + 1) % n)
        .collect();
        assert_eq!(ranks(&locate(n, &m, MARGIN)), vec![4]);
    }

    /// `matrix_gbps[src][dst]` as ordered pairs (zeros and the diagonal left out).
    fn from_rows(rows: &[[f64; 4]; 4]) -> Vec<PairBw> {
        let mut v = Vec::new();
        for (src, row) in rows.iter().enumerate() {
            for (dst, &gbps) in row.iter().enumerate() {
                if src != dst && gbps > 0.0 {
                    v.push(PairBw { src, dst, gbps });
                }
            }
        }
        v
    }

    #[test]
    fn after_two_slow_nodes_a_node_whose_pairs_overlap_the_rest_is_not_named() {
        // Two nodes at 1%; node 2 receives from the five others at 0.38-1.21 (median 0.55)
        // while the pairs left sit around 1.0: its median is under the line, its pairs are not
        // apart from the rest (CI, eight simulated nodes on two cores).
        let bad = [1, 6];
        let mut m = matrix(8, 1.0, 0.1, |s, d| {
            if bad.contains(&s) || bad.contains(&d) {
                0.01
            } else {
                1.0
            }
        });
        let spread = [0.38, 0.5, 0.55, 1.0, 1.21];
        let mut k = 0;
        for p in m.iter_mut().filter(|p| p.dst == 2 && !bad.contains(&p.src)) {
            p.gbps = spread[k];
            k += 1;
        }
        assert_eq!(k, 5);
        let got = locate(8, &m, MARGIN);
        assert_eq!(ranks(&got), bad.to_vec(), "{got:?}");
    }

    #[test]
    fn arrival_matrices_name_the_probes_node_where_the_loop_has_it_under_the_margin() {
        // The loop's matrix of four ranks sharing two cores, node3 (rank 2) throttled to
        // 20 Mbit/s, 64 KiB chunks: the start drift put rank 1's sending median at 52% of the
        // rest, and the median rule ranks it first.
        let looped = from_rows(&[
            [0.0, 0.0323, 0.0132, 0.0127],
            [0.0096, 0.0, 0.0049, 0.0066],
            [0.0074, 0.0042, 0.0, 0.0085],
            [6.6275, 9.0106, 0.0156, 0.0],
        ]);
        assert_eq!(locate(4, &looped, MARGIN)[0].rank, 1);
        // The probes of the same point: rank 2's pairs at 1% of the rest.
        let probed = from_rows(&[
            [0.0, 1.9, 0.0101, 2.2],
            [1.7, 0.0, 0.0096, 1.1],
            [0.0065, 0.0223, 0.0, 0.0093],
            [1.03, 0.8, 0.011, 0.0],
        ]);
        // Rank 2's sending pairs are under the margin in the loop as well (0.0074 against a
        // line of 0.6 x 0.0225): the probes' node is named, with the loop's figures for it.
        match arrival_suspect(4, &looped, &probed, MARGIN) {
            ArrivalVerdict::Named { looped, probed } => {
                assert_eq!((looped.rank, probed.rank), (2, 2));
                assert_eq!(looped.direction, Direction::Sending);
            }
            v => panic!("{v:?}"),
        }
        // A loop where only rank 1 is slow and rank 2 is at the level of the rest: the probes'
        // rank 2 is not confirmed, and rank 1 not by the probes: unclear.
        let other = matrix(4, 3.0, 0.1, |s, d| if s == 1 || d == 1 { 0.1 } else { 1.0 });
        match arrival_suspect(4, &other, &probed, MARGIN) {
            ArrivalVerdict::Unclear { looped, probed } => {
                assert_eq!(looped.rank, 1);
                assert_eq!(probed.map(|s| s.rank), Some(2));
            }
            v => panic!("{v:?}"),
        }
        // Probes that name nobody leave the loop's suspect unconfirmed.
        let quiet = matrix(4, 2.0, 0.1, |_, _| 1.0);
        assert!(matches!(
            arrival_suspect(4, &looped, &quiet, MARGIN),
            ArrivalVerdict::Unclear { probed: None, .. }
        ));
        // Where the loop's drift is smaller than the throttle's cost, both name rank 2.
        let clear = from_rows(&[
            [0.0, 0.0323, 0.0012, 0.0127],
            [0.0096, 0.0, 0.0009, 0.0166],
            [0.0014, 0.0011, 0.0, 0.0015],
            [6.6275, 9.0106, 0.0016, 0.0],
        ]);
        match arrival_suspect(4, &clear, &probed, MARGIN) {
            ArrivalVerdict::Named { looped, probed } => {
                assert_eq!((looped.rank, probed.rank), (2, 2));
                assert_eq!(looped.direction, Direction::Both);
            }
            v => panic!("{v:?}"),
        }
        // A healthy loop names nobody, whatever the probes say; records without probes: the
        // loop alone.
        let healthy = matrix(4, 3.0, 0.2, |_, _| 1.0);
        assert_eq!(
            arrival_suspect(4, &healthy, &probed, MARGIN),
            ArrivalVerdict::Nobody
        );
        assert!(matches!(
            arrival_suspect(4, &clear, &[], MARGIN),
            ArrivalVerdict::Named { .. }
        ));
    }
}
