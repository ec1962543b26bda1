//! What every rank's logs of a point become: the record of one part (dispatch, combine or both),
//! and the summary lines under the table (the stage breakdown, GPU- against CPU-initiated).

use super::*;

impl Ep<'_> {
    /// The record of `spec`'s part from every rank's logs.
    pub(super) fn record_point(&self, ctx: &Ctx, spec: &EpSpec, all: &[Measured]) -> Point {
        let a = self.args;
        let logs: Vec<RankLog> = all
            .iter()
            .map(|m| {
                m.extra
                    .get("ep")
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default()
            })
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
        .detail(&detail)
    }

    pub(super) fn summary_lines(&self, records: &[Record]) -> Vec<String> {
        let get = |r: &Record, k: &str| r.extra.get(k).cloned().unwrap_or(Value::Null);
        let mut out = vec![
            "# ep: p50 of the slowest rank per iteration with its 95% bootstrap interval; stages of the slowest rank's median iteration (us), which add up to its time: launch / post / copy / feed / quiet / network / arrival / settle / reduce (= total); push: the producer's span, overlapping them".to_string(),
        ];
        for r in records {
            let s = get(r, "ep_stages");
            let f = |k: &str| s.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            out.push(format!(
                "#   {:<26} p50 {:>10.2} us {:<22} p99 {:>10.2} us  {:>8.3} GB/s  {:>12.0} tokens/s  stages {:.1} / {:.1} / {:.1} / {:.1} / {:.1} / {:.1} / {:.1} / {:.1} / {:.1} (= {:.1})  push {:.1}  writes {}  merged {}  slowest rank {}",
                r.variant,
                r.lat_us.p50,
                get(r, "lat_p50_ci95_us")
                    .as_array()
                    .and_then(|v| Some(format!("[95% {:.1}-{:.1}]", v.first()?.as_f64()?, v.get(1)?.as_f64()?)))
                    .unwrap_or_default(),
                r.lat_us.p99,
                get(r, "ep_GBps").as_f64().unwrap_or(0.0),
                get(r, "tokens_per_s").as_f64().unwrap_or(0.0),
                f("launch_us"),
                f("post_us"),
                f("copy_us"),
                f("feed_us"),
                f("quiet_us"),
                f("network_us"),
                f("arrival_us"),
                f("settle_us"),
                f("reduce_us"),
                f("total_us"),
                f("push_us"),
                get(r, "writes_per_iter"),
                s.get("merged").and_then(Value::as_u64).unwrap_or(0),
                get(r, "slowest_rank")
            ));
        }
        for r in records {
            if let Some(rank) = get(r, "slow_rank").as_u64() {
                out.push(format!(
                    "# slowest node in {}: rank {rank} on {} ({}): {}",
                    r.variant,
                    get(r, "slow_host").as_str().unwrap_or("?"),
                    get(r, "slow_direction").as_str().unwrap_or("?"),
                    get(r, "slow_evidence").as_str().unwrap_or("")
                ));
            }
        }
        // The GPU-initiated against the CPU-initiated run of the same job.
        for part in [Part::Dispatch, Part::Combine, Part::Total] {
            let find = |init: &str| {
                records.iter().find(|r| {
                    get(r, "phase").as_str() == Some(part.name())
                        && get(r, "initiator").as_str() == Some(init)
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
