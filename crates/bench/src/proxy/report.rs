//! From both ranks' outcomes to the record of a point — the iteration time to landed (or to
//! the last quiet), `quiet_bw_gbps`, and the per-put latency breakdown `stages` — and the
//! summary of modes against the `cpu` baseline.

use serde::{Deserialize, Serialize};

use super::{ProxySpec, INITIATOR, TARGET};
use crate::harness::{Ctx, Measured, Point, RankDetail, RankPart};
use crate::stats::{gbps, mops, nearest_rank, Samples};

/// Fields every record of a proxy run repeats: how the run was set up (beside `strategy`,
/// `virtual_rails` and `mr`, which other benchmarks' records have too).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProxyFacts {
    /// `gpu` or `host` (a CPU thread standing in for the GPU).
    pub producer: String,
    /// Where the command rings live (`heap` when no GPU pushes).
    pub ring: String,
    pub ring_slots: u64,
    pub quiet_poll_ns: u32,
    pub payload_fence: String,
    pub proxy_threads: String,
    pub payload_fill: String,
    pub batch_max: usize,
    pub completion: String,
    pub hmem: String,
}

/// p50 and p99 of a stage's per-put times, µs (nearest rank, as every latency of the project).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pct {
    pub p50_us: f64,
    pub p99_us: f64,
}

/// The per-put latency breakdown of a point (record field `stages`); `null` where no put was
/// stamped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stages {
    /// Producer push to the proxy's pop (absent for `cpu`, which pushes nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_to_pop: Option<Pct>,
    pub pop_to_post: Option<Pct>,
    pub post_to_completion: Option<Pct>,
    pub completion_to_quiet: Option<Pct>,
    pub push_to_quiet: Option<Pct>,
    /// Post to the target's CQ data of the put's last stripe, and from there to the quiet
    /// (absent when the target stamped no put).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_to_arrival: Option<Pct>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_to_quiet: Option<Pct>,
}

/// What the initiator (rank 0) sends to rank 0's report of a point: its proxies' counts, the
/// stages it can time alone, and the stamps the target's are matched with (host clock, ns).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InitiatorStamps {
    pub stages: Stages,
    pub batch_mean: f64,
    pub commands: u64,
    pub fence_drains: u64,
    pub max_in_flight: u64,
    pub arrival_clock: String,
    pub clock_offset_ns: Option<i64>,
    pub clock_rtt_ns: Option<u64>,
    /// Per recorded put: post of its first stripe, and the quiet that covered it.
    pub post_ns: Vec<u64>,
    pub quiet_ns: Vec<u64>,
    /// Per timed iteration: first push (or go) and last quiet returned.
    pub iter_t0_ns: Vec<u64>,
    pub iter_t1_ns: Vec<u64>,
}

/// What the target (rank 1) sends: per recorded put the arrival of its last stripe, per timed
/// iteration when its bytes were in memory (host clock, ns).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetStamps {
    pub arrive_ns: Vec<u64>,
    pub landed_ns: Vec<u64>,
}

/// The record fields of one point, beyond the common ones and [`ProxyFacts`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProxyDetail {
    pub stages: Stages,
    /// Commands per `FI_MORE` batch, mean.
    pub batch_mean: f64,
    pub commands: u64,
    pub fence_drains: u64,
    pub max_in_flight: u64,
    /// Whose clock stamps the remote arrival (`same host` or `target host (not aligned)`).
    pub arrival_clock: String,
    /// The GPU clock's offset to the host's and the round trip that bounds it (GPU producer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_rtt_ns: Option<u64>,
    /// The target's bytes in memory after the last quiet (one host clock only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed_after_quiet: Option<Pct>,
    /// Where an iteration's time ends.
    pub time_to: String,
    /// First push to last quiet: the producer's own view.
    pub quiet_bw_gbps: f64,
    pub puts_per_iter: u32,
    pub lat_kind: String,
    /// `bw_gbps` in GB/s.
    #[serde(rename = "bw_GBps")]
    pub bw_gbytes: f64,
}

/// The initiator's and the target's stamps as they send them (copies: each keeps its own).
impl From<&InitiatorStamps> for RankDetail {
    fn from(s: &InitiatorStamps) -> RankDetail {
        RankDetail::from(s.clone())
    }
}

impl From<&TargetStamps> for RankDetail {
    fn from(s: &TargetStamps) -> RankDetail {
        RankDetail::from(s.clone())
    }
}

/// A rank's typed part of a point (the default when it sent none: an idle rank).
fn stamps<T: RankPart + Clone + Default>(m: &Measured) -> T {
    m.part::<T>().cloned().unwrap_or_default()
}

/// The record of one point from every rank's outcome (rank 0 the initiator, rank 1 the target).
pub(super) fn point(ctx: &Ctx, s: &ProxySpec, all: &[Measured]) -> Point {
    let init = &all[INITIATOR as usize];
    let mine: InitiatorStamps = stamps(init);
    let tgt: TargetStamps = stamps(&all[TARGET as usize]);
    // An iteration ends when its bytes are in the target's memory: the later of the last
    // quiet and the target's "landed" stamp (all CQ data in, its GPU copies drained). Both
    // are on one clock only when the ranks share a host; elsewhere the initiator's quiet is
    // the end (a provider's delivery-complete is then trusted).
    let (t0, t1, landed) = (&mine.iter_t0_ns, &mine.iter_t1_ns, &tgt.landed_ns);
    let aligned = ctx.one_host()
        && !t0.is_empty()
        && t0.len() == init.samples_ns.len()
        && t1.len() == t0.len()
        && landed.len() == t0.len();
    let quiet_total: u64 = init.samples_ns.iter().sum();
    let mut landed_after_quiet = None;
    let times = if aligned {
        let lag: Vec<i64> = landed
            .iter()
            .zip(t1)
            .map(|(&l, &q)| l as i64 - q as i64)
            .collect();
        landed_after_quiet = pct(lag);
        t0.iter()
            .zip(t1.iter().zip(landed))
            .map(|(&a, (&q, &l))| q.max(l).saturating_sub(a))
            .collect()
    } else {
        init.samples_ns.clone()
    };
    let mut samples = Samples::from_vec(times);
    let n = samples.len() as u64;
    let total = samples.total_ns();
    let puts = n * s.puts as u64;
    let lat_us = samples.summary_us(s.puts as f64);
    // Remote arrival: the target's stamp of each put's last stripe, against its first post.
    let mut stages = mine.stages;
    let (post, quiet, arrive) = (&mine.post_ns, &mine.quiet_ns, &tgt.arrive_ns);
    if post.len() == arrive.len() && !post.is_empty() {
        let d: Vec<i64> = post
            .iter()
            .zip(arrive)
            .map(|(&p, &a)| a as i64 - p as i64)
            .collect();
        let q: Vec<i64> = arrive
            .iter()
            .zip(quiet)
            .map(|(&a, &q)| q as i64 - a as i64)
            .collect();
        stages.post_to_arrival = pct(d);
        stages.arrival_to_quiet = pct(q);
    }
    let detail = ProxyDetail {
        stages,
        batch_mean: mine.batch_mean,
        commands: mine.commands,
        fence_drains: mine.fence_drains,
        max_in_flight: mine.max_in_flight,
        arrival_clock: mine.arrival_clock,
        clock_offset_ns: mine.clock_offset_ns,
        clock_rtt_ns: mine.clock_rtt_ns,
        landed_after_quiet,
        time_to: if aligned {
            "landed (later of the last quiet and the target's bytes in memory, one host clock)"
        } else {
            "quiet (initiator; the provider's delivery-complete trusted)"
        }
        .into(),
        // What the producer saw: first push to last quiet.
        quiet_bw_gbps: gbps(s.size * puts, quiet_total.max(1)),
        puts_per_iter: s.puts,
        lat_kind: "per put (iteration time / puts)".into(),
        bw_gbytes: gbps(s.size * puts, total) / 8.0,
    };
    Point {
        variant: s.mode.name().to_string(),
        size_bytes: s.size,
        iters: s.iters,
        warmup: s.warmup,
        peer: Some(TARGET),
        lat_us,
        bw_gbps: gbps(s.size * puts, total),
        busbw_gbps: None,
        msg_rate_mops: mops(puts, total),
        ..Point::default()
    }
    .detail(detail)
}

/// Each mode's bandwidth against the `cpu` baseline, per size.
pub(super) fn summary(sizes: &[u64], records: &[efabench_record::Record]) -> Vec<String> {
    let mut out = Vec::new();
    let bw = |mode: &str, size: u64| {
        records
            .iter()
            .find(|r| r.variant == mode && r.size_bytes == size)
            .map(|r| r.bw_gbps)
    };
    for &size in sizes {
        let Some(cpu) = bw("cpu", size).filter(|b| *b > 0.0) else {
            continue;
        };
        let mut parts = Vec::new();
        for m in ["nbi", "blocking"] {
            if let Some(b) = bw(m, size) {
                parts.push(format!("{m}/cpu {:.3}", b / cpu));
            }
        }
        if !parts.is_empty() {
            out.push(format!(
                "# {}: {}",
                crate::size::human(size),
                parts.join(", ")
            ));
        }
    }
    out
}

/// p50 and p99 of `v` (ns) in µs; `None` when nothing was stamped.
pub(crate) fn pct(mut v: Vec<i64>) -> Option<Pct> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let q = |f: f64| nearest_rank(&v, f).unwrap_or(0) as f64 / 1000.0;
    Some(Pct {
        p50_us: q(0.5),
        p99_us: q(0.99),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_travel_typed_and_the_record_keeps_its_names() {
        let mine = InitiatorStamps {
            stages: Stages {
                pop_to_post: pct(vec![1000, 3000]),
                ..Stages::default()
            },
            clock_offset_ns: Some(-5),
            clock_rtt_ns: Some(700),
            post_ns: vec![10, 20],
            ..InitiatorStamps::default()
        };
        let m = Measured::default().detail(mine.clone());
        assert_eq!(stamps::<InitiatorStamps>(&m), mine);
        // An idle rank sent nothing: empty stamps, not a failure.
        assert_eq!(
            stamps::<TargetStamps>(&Measured::default()).arrive_ns.len(),
            0
        );
        let detail = ProxyDetail {
            stages: mine.stages.clone(),
            batch_mean: 1.0,
            commands: 2,
            fence_drains: 0,
            max_in_flight: 2,
            arrival_clock: "same host".into(),
            clock_offset_ns: mine.clock_offset_ns,
            clock_rtt_ns: mine.clock_rtt_ns,
            landed_after_quiet: None,
            time_to: "quiet".into(),
            quiet_bw_gbps: 1.0,
            puts_per_iter: 4,
            lat_kind: "per put".into(),
            bw_gbytes: 0.125,
        };
        let f = Point::default().detail(detail).fields();
        for k in ["clock_offset_ns", "clock_rtt_ns", "bw_GBps", "stages"] {
            assert!(f.get(k).is_some(), "{k} missing: {f:?}");
        }
        assert!(f.get("landed_after_quiet").is_none());
        let st = f["stages"].as_object().unwrap();
        assert_eq!(st["pop_to_post"]["p99_us"].as_f64(), Some(3.0));
        assert!(st["push_to_quiet"].is_null() && !st.contains_key("push_to_pop"));
    }
}
