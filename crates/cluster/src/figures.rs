//! Per-node figures from the pair matrices of `pairs` (one record per ordered pair) and
//! `alltoall` (its per-peer chunk rates, `matrix_gbps`): what the node sends, what it receives,
//! and the pairs that involve neither end on it (the reference its own pairs are judged
//! against, as [`efabench_bench::locate`] judges ranks).

use efabench_bench::collective::report::matrix_pairs;
use efabench_bench::locate::PairBw;
use efabench_record::Record;
use serde::{Deserialize, Serialize};

/// count, min, median and max of some pairs' Gbps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub count: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(v: &[f64]) -> Option<Stats> {
        let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return None;
        }
        s.sort_by(f64::total_cmp);
        let l = s.len();
        let median = efabench_bench::stats::median(&s)?;
        Some(Stats {
            count: l,
            min: s[0],
            median,
            max: s[l - 1],
        })
    }
}

/// The fields of a `pairs` record the matrix reads (`efabench_bench::pairs::PairsDetail`
/// writes them).
#[derive(Deserialize)]
struct PairSeen {
    src: u64,
    src_nic: Option<String>,
    dst_nic: Option<String>,
    window_gbps: Option<Vec<f64>>,
    rail_gbps: Option<Vec<f64>>,
}

/// The per-peer chunk rates of an `alltoall` record.
#[derive(Deserialize)]
struct MatricesSeen {
    matrix_gbps: Option<Vec<Vec<f64>>>,
    probe_matrix_gbps: Option<Vec<Vec<f64>>>,
}

/// One node's pairs at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairFigures {
    pub size_bytes: u64,
    /// Pairs from a rank of this node to a rank of another node.
    pub send: Option<Stats>,
    /// Pairs from another node to this one.
    pub recv: Option<Stats>,
    /// Pairs between two other nodes.
    pub reference: Option<Stats>,
    /// The lower of the send and receive medians over the reference median.
    pub ratio: Option<f64>,
    /// The decision's estimate of its share of its peers' speed, with its interval (the
    /// slower direction; [`crate::decide`]); absent where it could not be judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<crate::decide::Estimate>,
    /// The send and receive medians against the link of the nodes' instance type
    /// ([`crate::expected`]); absent where the type is unknown, or differs between nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<crate::expected::Expected>,
}

/// A pair matrix of one size, by rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Matrix {
    pub size_bytes: u64,
    pub pairs: Vec<PairBw>,
    /// Per pair (same index as `pairs`, or empty): its timed windows' Gbps.
    pub windows: Vec<Vec<f64>>,
    /// Per pair (same index, or empty): each rail alone, Gbps.
    pub rails: Vec<Vec<f64>>,
    /// Each rank's NICs (libfabric domains) in rail order, where the records name them.
    pub nics: std::collections::BTreeMap<usize, Vec<String>>,
    /// `alltoall`: the per-peer chunk rates after a barrier (`probe_matrix_gbps`), beside
    /// `pairs`, those of the timed loop.
    pub probe: Vec<PairBw>,
    /// Rails each rank drove (the records' `rails`; 0 when unknown): a rank's link capacity
    /// where the records do not name its NICs.
    pub drove: usize,
}

impl Matrix {
    /// The figures of `host`, where `rank_host[r]` is rank r's host.
    pub fn figures(&self, rank_host: &[String], host: &str) -> PairFigures {
        let on = |r: usize| rank_host.get(r).is_some_and(|h| h == host);
        let pick = |f: &dyn Fn(&PairBw) -> bool| -> Vec<f64> {
            self.pairs.iter().filter(|p| f(p)).map(|p| p.gbps).collect()
        };
        let send = Stats::of(&pick(&|p| on(p.src) && !on(p.dst)));
        let recv = Stats::of(&pick(&|p| !on(p.src) && on(p.dst)));
        let reference = Stats::of(&pick(&|p| !on(p.src) && !on(p.dst)));
        let own = match (send, recv) {
            (Some(s), Some(r)) => Some(s.median.min(r.median)),
            (Some(s), None) => Some(s.median),
            (None, Some(r)) => Some(r.median),
            (None, None) => None,
        };
        let ratio = match (own, reference) {
            (Some(o), Some(r)) if r.median > 0.0 => Some(o / r.median),
            _ => None,
        };
        PairFigures {
            size_bytes: self.size_bytes,
            send,
            recv,
            reference,
            ratio,
            estimate: None,
            expected: None,
        }
    }

    /// The `pairs` records' matrix at their largest size.
    pub fn from_pairs(records: &[Record]) -> Option<Matrix> {
        let size = records
            .iter()
            .filter(|r| r.bench == "pairs")
            .map(|r| r.size_bytes)
            .max()?;
        let mut m = Matrix {
            size_bytes: size,
            ..Matrix::default()
        };
        for r in records
            .iter()
            .filter(|r| r.bench == "pairs" && r.size_bytes == size)
        {
            m.drove = m.drove.max(r.rails as usize);
            let (Ok(pair), Some(dst)) = (r.fields::<PairSeen>(), r.peer) else {
                continue;
            };
            let src = pair.src;
            m.pairs.push(PairBw {
                src: src as usize,
                dst: dst as usize,
                gbps: r.bw_gbps,
            });
            m.windows.push(pair.window_gbps.unwrap_or_default());
            for (rank, nic) in [(src as usize, pair.src_nic), (dst as usize, pair.dst_nic)] {
                if let Some(n) = nic {
                    m.nics
                        .entry(rank)
                        .or_insert_with(|| n.split(',').map(str::to_string).collect());
                }
            }
            m.rails.push(pair.rail_gbps.unwrap_or_default());
        }
        Some(m)
    }

    /// The per-peer chunk rates (`matrix_gbps`, and `probe_matrix_gbps` where the record has
    /// it) of the `alltoall` record of the largest size.
    pub fn from_alltoall(records: &[Record]) -> Option<Matrix> {
        let (r, seen) = records
            .iter()
            .filter(|r| r.bench == "alltoall")
            .filter_map(|r| Some((r, r.fields::<MatricesSeen>().ok()?)))
            .filter(|(_, m)| m.matrix_gbps.is_some())
            .max_by_key(|(r, _)| r.size_bytes)?;
        Some(Matrix {
            size_bytes: r.size_bytes,
            pairs: matrix_pairs(&seen.matrix_gbps.unwrap_or_default()),
            probe: matrix_pairs(&seen.probe_matrix_gbps.unwrap_or_default()),
            drove: r.rails as usize,
            ..Matrix::default()
        })
    }

    /// The matrix between hosts for the decision ([`crate::decide`]): each ordered pair of
    /// distinct hosts, its figure the median of the rank pairs between them, its windows all
    /// of theirs, its rails the per-rail medians (when every rank pair has the same rails).
    pub fn cells(&self, rank_host: &[String]) -> (Vec<String>, Vec<crate::decide::Cell>) {
        let (hosts, by) = self.by_host(rank_host);
        let index = |r: usize| {
            rank_host
                .get(r)
                .and_then(|h| hosts.iter().position(|x| x == h))
        };
        type Parts = (Vec<f64>, Vec<Vec<f64>>);
        let mut parts: std::collections::BTreeMap<(usize, usize), Parts> =
            std::collections::BTreeMap::new();
        for (i, p) in self.pairs.iter().enumerate() {
            if let (Some(a), Some(b)) = (index(p.src), index(p.dst)) {
                let e = parts.entry((a, b)).or_default();
                e.0.extend(self.windows.get(i).into_iter().flatten());
                e.1.push(self.rails.get(i).cloned().unwrap_or_default());
            }
        }
        let cells = by
            .into_iter()
            .map(|p| {
                let (windows, rails) = parts.remove(&(p.src, p.dst)).unwrap_or_default();
                let count = rails.first().map_or(0, Vec::len);
                let rails = if count > 1 && rails.iter().all(|r| r.len() == count) {
                    (0..count)
                        .map(|j| {
                            let v: Vec<f64> = rails.iter().map(|r| r[j]).collect();
                            Stats::of(&v).map_or(f64::NAN, |s| s.median)
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                crate::decide::Cell {
                    src: p.src,
                    dst: p.dst,
                    gbps: p.gbps,
                    windows,
                    rails,
                }
            })
            .collect();
        (hosts, cells)
    }

    /// The matrix between hosts: each ordered pair of distinct hosts gets the median of the
    /// rank pairs between them (pairs inside one host are left out). Returns the hosts in order
    /// of their first rank and the pairs by host index, so a node is judged as one, whatever
    /// its ranks per node.
    pub fn by_host(&self, rank_host: &[String]) -> (Vec<String>, Vec<PairBw>) {
        let mut hosts: Vec<String> = Vec::new();
        for h in rank_host {
            if !hosts.contains(h) {
                hosts.push(h.clone());
            }
        }
        let index = |r: usize| {
            rank_host
                .get(r)
                .and_then(|h| hosts.iter().position(|x| x == h))
        };
        let mut cells: std::collections::BTreeMap<(usize, usize), Vec<f64>> =
            std::collections::BTreeMap::new();
        for p in &self.pairs {
            if let (Some(a), Some(b)) = (index(p.src), index(p.dst)) {
                if a != b {
                    cells.entry((a, b)).or_default().push(p.gbps);
                }
            }
        }
        let pairs = cells
            .into_iter()
            .filter_map(|((src, dst), v)| {
                Stats::of(&v).map(|s| PairBw {
                    src,
                    dst,
                    gbps: s.median,
                })
            })
            .collect();
        (hosts, pairs)
    }
}

/// Gbps with two decimals, three significant digits below 1.
pub fn gbps(v: f64) -> String {
    if v >= 1.0 || v == 0.0 {
        format!("{v:.2}")
    } else {
        let digits = (2 - v.log10().floor() as i32).clamp(2, 9) as usize;
        format!("{v:.digits$}")
    }
}

/// Every ordered pair of `n` one-rank nodes at `f(src, dst)` Gbps, at 1 MiB (for tests).
#[cfg(test)]
pub(crate) fn full(n: usize, f: impl Fn(usize, usize) -> f64) -> Matrix {
    let mut pairs = Vec::new();
    for s in 0..n {
        for d in (0..n).filter(|&d| d != s) {
            pairs.push(PairBw {
                src: s,
                dst: d,
                gbps: f(s, d),
            });
        }
    }
    Matrix {
        size_bytes: 1 << 20,
        pairs,
        ..Matrix::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("node{i}")).collect()
    }

    #[test]
    fn a_throttled_node_has_a_low_ratio_and_the_others_do_not() {
        let m = full(4, |s, d| if s == 2 || d == 2 { 0.5 } else { 4.0 });
        let h = hosts(4);
        let slow = m.figures(&h, "node3");
        assert_eq!(slow.send.unwrap().count, 3);
        assert_eq!(slow.recv.unwrap().median, 0.5);
        assert_eq!(slow.reference.unwrap().median, 4.0);
        assert_eq!(slow.ratio, Some(0.125));
        let ok = m.figures(&h, "node1");
        // node1's pairs with node3 are slow too, but its median stays healthy.
        assert_eq!(ok.send.unwrap().median, 4.0);
        assert!(ok.ratio.unwrap() > 1.0, "{ok:?}");
    }

    #[test]
    fn ranks_of_one_host_count_as_one_node() {
        // Two ranks per host: ranks 0,1 on a; 2,3 on b; 4,5 on c.
        let h: Vec<String> = ["a", "a", "b", "b", "c", "c"].map(String::from).to_vec();
        let m = full(6, |_, _| 2.0);
        let f = m.figures(&h, "a");
        // Pairs inside host a (0<->1) are neither its sends nor its reference.
        assert_eq!(f.send.unwrap().count, 8);
        assert_eq!(f.recv.unwrap().count, 8);
        assert_eq!(f.reference.unwrap().count, 12);
        // By host: 3 hosts, 6 ordered pairs, each the median of its 4 rank pairs.
        let (hs, pairs) = m.by_host(&h);
        assert_eq!(hs, ["a", "b", "c"]);
        assert_eq!(pairs.len(), 6);
        assert!(pairs.iter().all(|p| p.gbps == 2.0 && p.src != p.dst));
    }

    #[test]
    fn stats_and_gbps_formatting() {
        assert_eq!(Stats::of(&[]), None);
        let s = Stats::of(&[3.0, 1.0, f64::NAN, 2.0, 10.0]).unwrap();
        // The median of an even count is the lower middle value (the one definition, p50).
        assert_eq!((s.count, s.min, s.median, s.max), (4, 1.0, 2.0, 10.0));
        assert_eq!(gbps(12.5), "12.50");
        assert_eq!(gbps(0.012345), "0.0123");
    }
}
