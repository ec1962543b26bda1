//! From every rank's per-iteration times to a record: the slowest rank per iteration, p50/p99
//! over iterations (the one percentile definition of `efabench_record::stats`), bandwidth as
//! DeepEP and UCCL-EP count it, tokens/s and the stage breakdown.
//!
//! # Bandwidth
//! DeepEP's `tests/test_low_latency.py` (which UCCL-EP's benchmark reuses) counts, per rank,
//! every (token, expert) selection, local experts included: dispatch bytes = selections ×
//! `(hidden + hidden/128·4 + 16)` (its FP8 message: payload, scales, 16-byte header), combine
//! bytes = selections × `hidden·2` (bf16), and prints `bytes / 1e9 / t` GB/s with `t` the mean
//! time of the phase. Here the dispatch message is the one of `--dtype` (bf16: `2·hidden + 16`),
//! and `t` is the mean over iterations of the slowest rank's time in that iteration.

use serde::{Deserialize, Serialize};

use crate::ep::exchange::PhaseTimes;

/// One rank's log of one initiator's timed iterations (travels to rank 0 in `Measured`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RankLog {
    pub dispatch: Vec<PhaseTimes>,
    pub combine: Vec<PhaseTimes>,
    /// Dispatch bytes this rank sends each rank per iteration (its own included).
    pub dest_bytes: Vec<u64>,
    /// Per phase (dispatch, combine), per timed iteration, per source: the time from the
    /// phase's start to that source's last write arriving here (ns).
    pub arrival_ns: [Vec<Vec<u64>>; 2],
}

/// Which numbers a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Dispatch,
    Combine,
    /// Dispatch + combine of the same iteration.
    Total,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Dispatch => "dispatch",
            Part::Combine => "combine",
            Part::Total => "dispatch+combine",
        }
    }

    fn of(self, log: &RankLog, i: usize) -> PhaseTimes {
        let d = log.dispatch.get(i).copied().unwrap_or_default();
        let c = log.combine.get(i).copied().unwrap_or_default();
        match self {
            Part::Dispatch => d,
            Part::Combine => c,
            Part::Total => PhaseTimes {
                total_ns: d.total_ns + c.total_ns,
                push_ns: d.push_ns + c.push_ns,
                launch_ns: d.launch_ns + c.launch_ns,
                post_ns: d.post_ns + c.post_ns,
                copy_ns: d.copy_ns + c.copy_ns,
                feed_ns: d.feed_ns + c.feed_ns,
                quiet_ns: d.quiet_ns + c.quiet_ns,
                network_ns: d.network_ns + c.network_ns,
                arrival_ns: d.arrival_ns + c.arrival_ns,
                settle_ns: d.settle_ns + c.settle_ns,
                reduce_ns: c.reduce_ns,
                writes: d.writes + c.writes,
                merged: d.merged + c.merged,
                errors: d.errors + c.errors,
            },
        }
    }
}

/// The stages of one iteration of the slowest rank (its median one), µs: `launch` to `settle`
/// plus `reduce` add up to `total_us`; `push_us` overlaps them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Stages {
    /// The iteration's time on that rank (its p50 over the iterations).
    pub total_us: f64,
    /// The producer's first push to its last (0 for the CPU initiator); not part of the sum.
    pub push_us: f64,
    /// Phase start (launch or producer start) to the first command the proxy reads.
    pub launch_us: f64,
    /// Inside the post calls.
    pub post_us: f64,
    /// Copies of this rank's messages to itself.
    pub copy_us: f64,
    /// The rest of the posting: polls between posts, waiting for the producer's next put.
    pub feed_us: f64,
    /// Every put read, waiting for the producer's signals.
    pub quiet_us: f64,
    /// Everything posted to the last local completion.
    pub network_us: f64,
    /// Last local completion to the last arrival from the peers.
    pub arrival_us: f64,
    /// Queued device copies landing.
    pub settle_us: f64,
    /// The combine's weighted sum.
    pub reduce_us: f64,
    /// Ring commands the proxy merged into an earlier write in that iteration.
    pub merged: u64,
}

/// The typed detail of an `ep` record (flattened into the record's extra fields).
#[derive(Clone, Debug, Serialize)]
pub struct EpDetail {
    pub phase: &'static str,
    /// 95% bootstrap interval of `lat_us.p50` (the slowest rank per iteration), µs.
    pub lat_p50_ci95_us: Option<[f64; 2]>,
    pub initiator: &'static str,
    /// What stood behind `gpu`: `gpu` (a kernel) or `host` (a CPU thread); null for `cpu`.
    pub producer: Option<&'static str>,
    /// `gpu` records: whether the proxy merged contiguous ring commands (`--no-merge`: false);
    /// null for `cpu`.
    pub proxy_merge: Option<bool>,
    pub layout: &'static str,
    pub dtype: &'static str,
    pub tokens: u32,
    pub hidden: u32,
    pub topk: u32,
    pub experts: u32,
    pub local_experts: u32,
    pub routing: String,
    /// Where combine's weighted sum ran: `gpu` or `cpu`.
    pub reduce_on: &'static str,
    /// Bytes of one dispatch message (header + payload) and of one combine message.
    pub dispatch_msg_bytes: u64,
    pub combine_msg_bytes: u64,
    /// (token, expert) pairs per rank.
    pub selections: u64,
    /// DeepEP's byte count of this part per rank (`ll`: selections x message; `per-rank`: the
    /// messages that layout sends, averaged over the ranks), and `bytes / 1e9 / mean time`.
    pub ep_bytes: u64,
    #[serde(rename = "ep_GBps")]
    pub ep_gbps: f64,
    pub bw_def: &'static str,
    /// Tokens per second per rank (`tokens / mean time`) and for the whole job.
    pub tokens_per_s: f64,
    pub job_tokens_per_s: f64,
    /// The rank slowest on average, its host, every rank's mean (µs).
    pub slowest_rank: usize,
    pub slowest_host: Option<String>,
    pub rank_mean_us: Vec<f64>,
    pub ep_stages: Stages,
    /// Writes the slowest rank posted per iteration (merged puts and signals; 0: all local).
    pub writes_per_iter: u64,
    /// Dispatch bytes each rank receives per iteration over the whole job, and its max/mean.
    pub dest_bytes: Vec<u64>,
    pub rank_imbalance: f64,
    /// The node whose writes of this phase arrive late (dispatch and combine records; nulls
    /// when nobody stands out, with fewer than three ranks, and on `dispatch+combine`).
    #[serde(flatten)]
    pub slow_node: SlowNode,
    /// max/mean of the (token, expert) pairs per expert.
    pub expert_imbalance: f64,
    pub lat_kind: &'static str,
}

/// A node whose writes arrive (or are received) late, judged from every rank's per-source
/// arrival times as `pairs` judges its pair matrix ([`crate::locate`]). Every field is null when
/// nobody stands out, so the record's keys do not depend on the verdict.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SlowNode {
    pub slow_rank: Option<usize>,
    pub slow_host: Option<String>,
    /// `sending`, `receiving` or `sending and receiving`.
    pub slow_direction: Option<&'static str>,
    pub slow_evidence: Option<String>,
}

/// Below this share of the pairs without it, a rank's per-pair arrival rates name it, and only
/// when both what it sends and what it receives are that slow. Stricter than `pairs` and
/// `alltoall` (60%, either direction): within one phase a rank notices arrivals only between
/// its own posts, so a rank with more to send looks slow at receiving, and its peers' arrival
/// order carries the order in which they post their destinations and, with more ranks than
/// cores, the scheduler's. A node whose link is down to a fraction stands out in both
/// directions; `pairs` measures the finer and one-way cases.
pub const SLOW_BELOW: f64 = 0.25;

/// Fewer timed iterations than this name nobody: the median of a handful of phases still
/// carries the scheduler's noise (seen with four ranks on two busy cores).
pub const JUDGE_FROM_ITERS: usize = 10;

/// The per-pair arrival rates of a phase: bytes `src` sends `dst` in it over the median time
/// from the phase's start to their arrival at `dst`, in Gbps. Dispatch bytes come from every
/// rank's `dest_bytes`; combine returns one `out_msg` per dispatch message of `msg` bytes, so
/// its bytes from `d` to `r` are `r`'s dispatch bytes to `d` scaled by `out_msg / msg`.
pub fn pair_rates(
    logs: &[RankLog],
    phase: usize,
    msg: u64,
    out_msg: u64,
) -> Vec<crate::locate::PairBw> {
    let n = logs.len();
    // The median over the iterations: one iteration the scheduler delayed names nobody.
    let median = |l: &RankLog, src: usize| {
        let mut v: Vec<u64> = l.arrival_ns[phase]
            .iter()
            .filter_map(|it| it.get(src).copied())
            .collect();
        v.sort_unstable();
        crate::stats::median(&v).unwrap_or(0) as f64
    };
    let mut pairs = Vec::new();
    for dst in 0..n {
        for src in 0..n {
            if src == dst {
                continue;
            }
            let bytes = if phase == 0 {
                logs[src].dest_bytes.get(dst).copied().unwrap_or(0)
            } else {
                logs[dst].dest_bytes.get(src).copied().unwrap_or(0) / msg.max(1) * out_msg
            };
            let ns = median(&logs[dst], src);
            if bytes > 0 && ns > 0.0 {
                pairs.push(crate::locate::PairBw {
                    src,
                    dst,
                    gbps: bytes as f64 * 8.0 / ns,
                });
            }
        }
    }
    pairs
}

/// The worst slow node of a phase, if any (see [`SlowNode`]). Callers judge only runs of at
/// least [`JUDGE_FROM_ITERS`] timed iterations.
pub fn slow_node(pairs: &[crate::locate::PairBw], n: usize, hosts: &[String]) -> SlowNode {
    crate::locate::locate(n, pairs, SLOW_BELOW)
        .iter()
        .find(|s| s.direction == crate::locate::Direction::Both)
        .map(|s| SlowNode {
            slow_rank: Some(s.rank),
            slow_host: hosts.get(s.rank).cloned(),
            slow_direction: Some(s.direction.describe()),
            slow_evidence: Some(s.evidence()),
        })
        .unwrap_or_default()
}

pub const BW_DEF: &str = "DeepEP/UCCL-EP: bytes = selections x message bytes (dispatch: header 16 + payload; combine: 2 x hidden), GB/s = bytes / 1e9 / mean time of the slowest rank per iteration";

/// Per iteration, the slowest rank's times (and that rank): index = iteration.
pub fn slowest_per_iter(logs: &[RankLog], part: Part) -> Vec<(usize, PhaseTimes)> {
    let n = logs.iter().map(|l| l.dispatch.len()).min().unwrap_or(0);
    (0..n)
        .map(|i| {
            logs.iter()
                .enumerate()
                .map(|(r, l)| (r, part.of(l, i)))
                .max_by_key(|(_, t)| t.total_ns)
                .unwrap_or_default()
        })
        .collect()
}

/// Mean time of each rank over its iterations, µs.
pub fn rank_means(logs: &[RankLog], part: Part) -> Vec<f64> {
    logs.iter()
        .map(|l| {
            let n = l.dispatch.len().max(1);
            (0..l.dispatch.len())
                .map(|i| part.of(l, i).total_ns as f64)
                .sum::<f64>()
                / n as f64
                / 1000.0
        })
        .collect()
}

/// The stages of one rank's median iteration (by total time; [`crate::stats::median`]), µs: unlike per-stage percentiles, they add up to the time they explain.
pub fn median_stages(log: &RankLog, part: Part) -> Stages {
    let n = log.dispatch.len();
    if n == 0 {
        return Stages::default();
    }
    let mut order: Vec<PhaseTimes> = (0..n).map(|i| part.of(log, i)).collect();
    order.sort_by_key(|t| t.total_ns);
    let t = crate::stats::median(&order).unwrap_or_default();
    let us = |ns: u64| ns as f64 / 1000.0;
    Stages {
        total_us: us(t.total_ns),
        push_us: us(t.push_ns),
        launch_us: us(t.launch_ns),
        post_us: us(t.post_ns),
        copy_us: us(t.copy_ns),
        feed_us: us(t.feed_ns),
        quiet_us: us(t.quiet_ns),
        network_us: us(t.network_ns),
        arrival_us: us(t.arrival_ns),
        settle_us: us(t.settle_ns),
        reduce_us: us(t.reduce_ns),
        merged: t.merged,
    }
}

/// GB/s as DeepEP prints it: bytes / 1e9 / seconds.
pub fn ep_gbps(bytes: u64, mean_us: f64) -> f64 {
    if mean_us <= 0.0 {
        return 0.0;
    }
    bytes as f64 / 1e3 / mean_us
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four ranks, 1 MB to every peer per iteration, three timed iterations; `slow` sends and
    /// receives at a tenth of the others' speed.
    fn four_ranks(slow: Option<usize>) -> Vec<RankLog> {
        (0..4)
            .map(|dst| {
                let arrival: Vec<u64> = (0..4)
                    .map(|src| {
                        let late = slow == Some(src) || slow == Some(dst);
                        // 1 ms, a little spread; 10 ms when late.
                        if late {
                            10_000_000
                        } else {
                            1_000_000 + 10_000 * src as u64
                        }
                    })
                    .collect();
                // In one iteration the scheduler held everything back 20 times as long: the
                // median over the iterations ignores it.
                let stalled: Vec<u64> = arrival.iter().map(|a| a * 20).collect();
                let its = vec![arrival.clone(), stalled, arrival];
                RankLog {
                    dispatch: vec![t(1); 3],
                    combine: vec![t(1); 3],
                    dest_bytes: vec![1_000_000; 4],
                    arrival_ns: [its.clone(), its],
                }
            })
            .collect()
    }

    #[test]
    fn a_rank_slow_one_way_only_is_left_to_pairs() {
        let hosts: Vec<String> = (1..=4).map(|i| format!("node{i}")).collect();
        let mut logs = four_ranks(None);
        // Everything rank 1 receives is late, what it sends is not.
        for it in &mut logs[1].arrival_ns[0] {
            for (src, a) in it.iter_mut().enumerate() {
                if src != 1 {
                    *a *= 10;
                }
            }
        }
        assert_eq!(
            slow_node(&pair_rates(&logs, 0, 1000, 1000), 4, &hosts),
            SlowNode::default()
        );
    }

    #[test]
    fn late_arrivals_from_and_to_one_rank_name_it() {
        let hosts: Vec<String> = (1..=4).map(|i| format!("node{i}")).collect();
        let logs = four_ranks(Some(2));
        for phase in [0, 1] {
            let pairs = pair_rates(&logs, phase, 1000, 1000);
            assert_eq!(pairs.len(), 12);
            // 1 MB in 1 ms is 8 Gbps.
            assert!(
                pairs.iter().any(|p| (p.gbps - 8.0).abs() < 0.1),
                "{pairs:?}"
            );
            let s = slow_node(&pairs, 4, &hosts);
            assert_eq!(
                (s.slow_rank, s.slow_host.as_deref()),
                (Some(2), Some("node3"))
            );
            assert_eq!(s.slow_direction, Some("sending and receiving"));
        }
        let healthy = four_ranks(None);
        assert_eq!(
            slow_node(&pair_rates(&healthy, 0, 1000, 1000), 4, &hosts),
            SlowNode::default()
        );
        // No traffic, no time: no pair, nobody named.
        let mut silent = healthy;
        for l in &mut silent {
            l.dest_bytes = vec![0; 4];
        }
        assert!(pair_rates(&silent, 0, 1000, 1000).is_empty());
    }

    fn t(ns: u64) -> PhaseTimes {
        PhaseTimes {
            total_ns: ns,
            post_ns: ns / 2,
            ..PhaseTimes::default()
        }
    }

    #[test]
    fn the_slowest_rank_of_each_iteration_sets_the_time() {
        let a = RankLog {
            dispatch: vec![t(10), t(50), t(10)],
            combine: vec![t(5), t(5), t(5)],
            ..RankLog::default()
        };
        let b = RankLog {
            dispatch: vec![t(20), t(10), t(30)],
            combine: vec![t(1), t(1), t(1)],
            ..RankLog::default()
        };
        let s = slowest_per_iter(&[a.clone(), b.clone()], Part::Dispatch);
        assert_eq!(
            s.iter().map(|x| (x.0, x.1.total_ns)).collect::<Vec<_>>(),
            vec![(1, 20), (0, 50), (1, 30)]
        );
        let s = slowest_per_iter(&[a.clone(), b], Part::Total);
        assert_eq!(
            s[1],
            (
                0,
                PhaseTimes {
                    total_ns: 55,
                    post_ns: 27,
                    ..PhaseTimes::default()
                }
            )
        );
        // The median iteration of a (10, 50, 10 ns): one of the 10s, post 5 ns.
        let m = median_stages(&a, Part::Dispatch);
        assert_eq!((m.total_us, m.post_us), (0.01, 0.005));
    }

    #[test]
    fn deepep_bandwidth_is_bytes_over_1e9_over_seconds() {
        // 128 tokens x top-8, fp8 7168: 1024 x 7408 bytes in 226 us is 33.6 GB/s.
        let bytes = 1024 * (7168 + 7168 / 128 * 4 + 16);
        assert!((ep_gbps(bytes, 226.0) - 33.57).abs() < 0.01);
        assert_eq!(ep_gbps(1, 0.0), 0.0);
    }
}
