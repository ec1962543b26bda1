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
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
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
    /// Every put read, waiting for the producer's signals (its quiet on the puts).
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
    /// max/mean of the (token, expert) pairs per expert.
    pub expert_imbalance: f64,
    pub lat_kind: &'static str,
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

/// The stages of one rank's median iteration (by total time; the lower median for an even
/// count), µs: unlike per-stage percentiles, they add up to the time they explain.
pub fn median_stages(log: &RankLog, part: Part) -> Stages {
    let n = log.dispatch.len();
    if n == 0 {
        return Stages::default();
    }
    let mut order: Vec<PhaseTimes> = (0..n).map(|i| part.of(log, i)).collect();
    order.sort_by_key(|t| t.total_ns);
    let t = order[(n - 1) / 2];
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
            dest_bytes: vec![],
        };
        let b = RankLog {
            dispatch: vec![t(20), t(10), t(30)],
            combine: vec![t(1), t(1), t(1)],
            dest_bytes: vec![],
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
