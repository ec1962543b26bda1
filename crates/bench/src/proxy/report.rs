//! From both ranks' outcomes to the record of a point — the iteration time to landed (or to
//! the last quiet), `quiet_bw_gbps`, and the per-put latency breakdown `stages` — and the
//! summary of modes against the `cpu` baseline.

use serde_json::{json, Value};

use super::{ProxySpec, INITIATOR, TARGET};
use crate::harness::{Ctx, Measured, Point};
use crate::stats::{gbps, mops, nearest_rank, Samples};

/// Fields every record of a proxy run repeats: how the run was set up.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProxyFacts {
    pub strategy: String,
    pub virtual_rails: bool,
    pub mr: String,
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

/// The record of one point from every rank's outcome (rank 0 the initiator, rank 1 the target).
pub(super) fn point(ctx: &Ctx, s: &ProxySpec, all: &[Measured]) -> Point {
    let init = &all[INITIATOR as usize];
    let tgt = &all[TARGET as usize];
    let arrays = |m: &Measured, k: &str| -> Vec<u64> {
        m.extra
            .get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default()
    };
    let mut extra = init.extra.clone();
    for k in ["post_ns", "quiet_ns", "iter_t0_ns", "iter_t1_ns"] {
        extra.remove(k);
    }
    // An iteration ends when its bytes are in the target's memory: the later of the last
    // quiet and the target's "landed" stamp (all CQ data in, its GPU copies drained). Both
    // are on one clock only when the ranks share a host; elsewhere the initiator's quiet is
    // the end (a provider's delivery-complete is then trusted).
    let (t0, t1, landed) = (
        arrays(init, "iter_t0_ns"),
        arrays(init, "iter_t1_ns"),
        arrays(tgt, "landed_ns"),
    );
    let aligned = ctx.one_host()
        && !t0.is_empty()
        && t0.len() == init.samples_ns.len()
        && t1.len() == t0.len()
        && landed.len() == t0.len();
    let quiet_total: u64 = init.samples_ns.iter().sum();
    let times = if aligned {
        let lag: Vec<i64> = landed
            .iter()
            .zip(&t1)
            .map(|(&l, &q)| l as i64 - q as i64)
            .collect();
        extra.insert("landed_after_quiet".into(), pct(lag));
        t0.iter()
            .zip(t1.iter().zip(&landed))
            .map(|(&a, (&q, &l))| q.max(l).saturating_sub(a))
            .collect()
    } else {
        init.samples_ns.clone()
    };
    extra.insert(
        "time_to".into(),
        json!(if aligned {
            "landed (later of the last quiet and the target's bytes in memory, one host clock)"
        } else {
            "quiet (initiator; the provider's delivery-complete trusted)"
        }),
    );
    let mut samples = Samples::from_vec(times);
    let n = samples.len() as u64;
    let total = samples.total_ns();
    let puts = n * s.puts as u64;
    let lat_us = samples.summary_us(s.puts as f64);
    // What the producer saw: first push to last quiet.
    extra.insert(
        "quiet_bw_gbps".into(),
        json!(gbps(s.size * puts, quiet_total.max(1))),
    );
    // Remote arrival: the target's stamp of each put's last stripe, against its first post.
    let post = arrays(init, "post_ns");
    let quiet = arrays(init, "quiet_ns");
    let arrive = arrays(tgt, "arrive_ns");
    if post.len() == arrive.len() && !post.is_empty() {
        let d: Vec<i64> = post
            .iter()
            .zip(&arrive)
            .map(|(&p, &a)| a as i64 - p as i64)
            .collect();
        let q: Vec<i64> = arrive
            .iter()
            .zip(&quiet)
            .map(|(&a, &q)| q as i64 - a as i64)
            .collect();
        if let Some(Value::Object(st)) = extra.get_mut("stages") {
            st.insert("post_to_arrival".into(), pct(d));
            st.insert("arrival_to_quiet".into(), pct(q));
        }
    }
    extra.insert("puts_per_iter".into(), json!(s.puts));
    extra.insert("lat_kind".into(), json!("per put (iteration time / puts)"));
    extra.insert("bw_GBps".into(), json!(gbps(s.size * puts, total) / 8.0));
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
        ..Point::with_extra(extra)
    }
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

pub(crate) fn pct(mut v: Vec<i64>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_unstable();
    let q = |f: f64| nearest_rank(&v, f).unwrap_or(0) as f64 / 1000.0;
    json!({"p50_us": q(0.5), "p99_us": q(0.99)})
}
