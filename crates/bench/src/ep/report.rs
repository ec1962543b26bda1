//! What every rank's logs of a point become: the record of one part (dispatch, combine or both),
//! and the summary lines under the table (the stage breakdown, GPU- against CPU-initiated).

use super::*;
use serde::Deserialize;

use super::metrics::Stages;

impl Ep<'_> {
    /// The record of `spec`'s part from every rank's logs.
    pub(super) fn record_point(&self, ctx: &Ctx, spec: &EpSpec, all: &[Measured]) -> Point {
        let a = self.args;
        let logs: Vec<RankLog> = all
            .iter()
            .map(|m| m.part::<RankLog>().cloned().unwrap_or_default())
            .collect();
        let part = spec.part;
        let per_iter = metrics::slowest_per_iter(&logs, part);
        let mut samples = Samples::from_vec(per_iter.iter().map(|x| x.1.total_ns).collect());
        let lat_us = samples.summary_us(1.0);
        let means = metrics::rank_means(&logs, part);
        let slowest = means
            .iter()
            .enumerate()
            .fold(
                (0usize, f64::MIN),
                |b, (r, m)| if *m > b.1 { (r, *m) } else { b },
            )
            .0;
        let plan_msg = (verify::HEADER + verify::payload_bytes(a.dtype, a.hidden as usize)) as u64;
        let out_msg = 2 * a.hidden as u64;
        let selections = a.tokens as u64 * a.topk as u64;
        let mean_us = lat_us.mean;
        let mut dest_bytes = vec![0u64; ctx.world as usize];
        for l in &logs {
            for (d, b) in l.dest_bytes.iter().enumerate() {
                if d < dest_bytes.len() {
                    dest_bytes[d] += b;
                }
            }
        }
        // Messages per rank: every selection in `ll` (DeepEP's count); one per (token,
        // destination rank) in `per-rank` (what that layout sends), averaged over the ranks.
        let msgs = dest_bytes.iter().sum::<u64>() / plan_msg / ctx.world.max(1) as u64;
        let bytes = match part {
            Part::Dispatch => msgs * plan_msg,
            Part::Combine => msgs * out_msg,
            Part::Total => msgs * (plan_msg + out_msg),
        };
        let routing = self.routing.as_ref();
        let ci =
            crate::stats::median_ci95(&per_iter.iter().map(|x| x.1.total_ns).collect::<Vec<_>>());
        let detail = EpDetail {
            phase: part.name(),
            lat_p50_ci95_us: ci.map(|(lo, hi)| [lo as f64 / 1000.0, hi as f64 / 1000.0]),
            initiator: spec.initiator.name(),
            producer: self.producer_name(spec.initiator),
            proxy_merge: (spec.initiator == Initiator::Gpu).then_some(!a.no_merge),
            layout: a.layout.name(),
            dtype: a.dtype.name(),
            tokens: a.tokens,
            hidden: a.hidden,
            topk: a.topk,
            experts: a.experts,
            local_experts: a.experts / ctx.world.max(1),
            routing: a.routing.to_string(),
            reduce_on: self.state.as_ref().map_or("cpu", |s| s.reducer.name()),
            dispatch_msg_bytes: plan_msg,
            combine_msg_bytes: out_msg,
            selections,
            ep_bytes: bytes,
            ep_gbps: (metrics::ep_gbps(bytes, mean_us) * 1000.0).round() / 1000.0,
            bw_def: metrics::BW_DEF,
            tokens_per_s: if mean_us > 0.0 {
                a.tokens as f64 / mean_us * 1e6
            } else {
                0.0
            },
            job_tokens_per_s: if mean_us > 0.0 {
                a.tokens as f64 * ctx.world as f64 / mean_us * 1e6
            } else {
                0.0
            },
            slowest_rank: slowest,
            slowest_host: ctx.hosts.get(slowest).cloned(),
            rank_mean_us: means
                .iter()
                .map(|m| (m * 1000.0).round() / 1000.0)
                .collect(),
            ep_stages: logs
                .get(slowest)
                .map(|l| metrics::median_stages(l, part))
                .unwrap_or_default(),
            writes_per_iter: logs
                .get(slowest)
                .and_then(|l| l.dispatch.first().zip(l.combine.first()))
                .map(|(d, c)| match part {
                    Part::Dispatch => d.writes,
                    Part::Combine => c.writes,
                    Part::Total => d.writes + c.writes,
                })
                .unwrap_or(0),
            rank_imbalance: imbalance(&dest_bytes),
            slow_node: match part {
                Part::Dispatch | Part::Combine => {
                    let phase = (part == Part::Combine) as usize;
                    let pairs = metrics::pair_rates(&logs, phase, plan_msg, out_msg);
                    let bytes: Vec<&[u64]> = logs.iter().map(|l| &l.dest_bytes[..]).collect();
                    let iters = logs.iter().map(|l| l.dispatch.len()).min().unwrap_or(0);
                    if iters >= metrics::JUDGE_FROM_ITERS && crate::locate::comparable_sizes(&bytes)
                    {
                        metrics::slow_node(&pairs, logs.len(), &ctx.hosts)
                    } else {
                        metrics::SlowNode::default()
                    }
                }
                Part::Total => metrics::SlowNode::default(),
            },
            dest_bytes,
            expert_imbalance: routing.map_or(0.0, |r| imbalance(&r.pairs_per_expert())),
            lat_kind: "time of the slowest rank per iteration",
        };
        let ns = mean_us * 1000.0;
        Point {
            variant: format!(
                "{}/{}",
                part.name(),
                match self.producer_name(spec.initiator) {
                    Some(p) => format!("gpu-{p}"),
                    None => "cpu".to_string(),
                }
            ),
            size_bytes: bytes,
            iters: per_iter.len() as u64,
            warmup: self.args.iterations().1,
            peer: None,
            lat_us,
            bw_gbps: if ns > 0.0 {
                bytes as f64 * 8.0 / ns
            } else {
                0.0
            },
            busbw_gbps: None,
            msg_rate_mops: if ns > 0.0 {
                selections as f64 * 1000.0 / ns
            } else {
                0.0
            },
            ..Point::default()
        }
        .detail(detail)
    }

    pub(super) fn summary_lines(&self, records: &[Record]) -> Vec<String> {
        let seen = |r: &Record| r.fields::<EpSeen>().unwrap_or_default();
        let mut out = vec![
            "# ep: p50 of the slowest rank per iteration with its 95% bootstrap interval; stages of the slowest rank's median iteration (us), which add up to its time: launch / post / copy / feed / quiet / network / arrival / settle / reduce (= total); push: the producer's span, overlapping them".to_string(),
        ];
        for r in records {
            let e = seen(r);
            let s = e.ep_stages.unwrap_or_default();
            out.push(format!(
                "#   {:<26} p50 {:>10.2} us {:<22} p99 {:>10.2} us  {:>8.3} GB/s  {:>12.0} tokens/s  stages {:.1} / {:.1} / {:.1} / {:.1} / {:.1} / {:.1} / {:.1} / {:.1} / {:.1} (= {:.1})  push {:.1}  writes {}  merged {}  slowest rank {}",
                r.variant,
                r.lat_us.p50,
                e.lat_p50_ci95_us
                    .map(|[lo, hi]| format!("[95% {lo:.1}-{hi:.1}]"))
                    .unwrap_or_default(),
                r.lat_us.p99,
                e.ep_gbps.unwrap_or(0.0),
                e.tokens_per_s.unwrap_or(0.0),
                s.launch_us,
                s.post_us,
                s.copy_us,
                s.feed_us,
                s.quiet_us,
                s.network_us,
                s.arrival_us,
                s.settle_us,
                s.reduce_us,
                s.total_us,
                s.push_us,
                shown(e.writes_per_iter),
                s.merged,
                shown(e.slowest_rank)
            ));
        }
        for r in records {
            let e = seen(r);
            if let Some(rank) = e.slow_rank {
                out.push(format!(
                    "# slowest node in {}: rank {rank} on {} ({}): {}",
                    r.variant,
                    e.slow_host.as_deref().unwrap_or("?"),
                    e.slow_direction.as_deref().unwrap_or("?"),
                    e.slow_evidence.as_deref().unwrap_or("")
                ));
            }
        }
        // The GPU-initiated against the CPU-initiated run of the same job.
        for part in [Part::Dispatch, Part::Combine, Part::Total] {
            let find = |init: &str| {
                records.iter().find(|r| {
                    let e = seen(r);
                    e.phase.as_deref() == Some(part.name()) && e.initiator.as_deref() == Some(init)
                })
            };
            if let (Some(g), Some(c)) = (find("gpu"), find("cpu")) {
                if c.lat_us.p50 > 0.0 {
                    out.push(format!(
                        "# {}: gpu-initiated / cpu-initiated p50 = {:.2}",
                        part.name(),
                        g.lat_us.p50 / c.lat_us.p50
                    ));
                }
            }
        }
        out
    }
}

/// What the summary reads of an `ep` record ([`EpDetail`] writes it).
#[derive(Default, Deserialize)]
#[serde(default)]
struct EpSeen {
    phase: Option<String>,
    initiator: Option<String>,
    lat_p50_ci95_us: Option<[f64; 2]>,
    #[serde(rename = "ep_GBps")]
    ep_gbps: Option<f64>,
    tokens_per_s: Option<f64>,
    ep_stages: Option<Stages>,
    writes_per_iter: Option<u64>,
    slowest_rank: Option<usize>,
    slow_rank: Option<usize>,
    slow_host: Option<String>,
    slow_direction: Option<String>,
    slow_evidence: Option<String>,
}

/// A count for the summary line, `null` when the record lacks it.
fn shown(v: Option<impl std::fmt::Display>) -> String {
    v.map_or_else(|| "null".to_string(), |v| v.to_string())
}
