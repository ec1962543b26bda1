//! Rank 0's part of a point: the proxy threads serve the rails while the producer (the GPU
//! kernel, a host thread, or for `cpu` the go signal) issues every iteration's puts; what comes
//! back is each iteration's span and, for the last iterations, every put's stamps (push, pop,
//! post, completion, quiet) on the host clock, the GPU's moved onto it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use efabench_fabric::Rail;
use efabench_gpu::proxy::{realtime_ns, CommandRing, PutPlan};

use super::engine::{self, Feed, Lane, ProxyConfig, RailLog};
use super::report::{pct, InitiatorStamps, Stages};
use super::{
    fill_puts, health_of, kept_iters, Mode, PayloadFence, ProxyArgs, ProxyError, ProxySpec,
    ProxyThreads, Setup, TARGET,
};
use crate::error::BenchError;
use crate::harness::{Ctx, Measured, Strategy};

/// A proxy thread hands its rails back (with their indices) with what it did on each.
type ThreadOutcome = (Vec<(usize, Rail)>, Result<Vec<RailLog>, ProxyError>);

pub(super) fn measure(
    ctx: &Ctx,
    args: &ProxyArgs,
    setup: &mut Setup,
    s: &ProxySpec,
) -> Result<Measured, BenchError> {
    let init = setup
        .init
        .as_mut()
        .ok_or_else(|| BenchError::failed("initiator not set up"))?;
    let nrails = init.rails.len();
    let strategy = args.groups.fabric.strategy();
    let sched = engine::schedule(s.puts, s.size, nrails, strategy, TARGET as u16);
    let mut per_rail: Vec<Vec<efabench_gpu::proxy::Command>> = vec![Vec::new(); nrails];
    for put in &sched {
        for (r, c) in put {
            per_rail[*r].push(*c);
        }
    }
    let total_iters = s.warmup + s.iters;
    let kept = kept_iters(s);
    let log2 = args.ring_slots.trailing_zeros();
    let cfg = ProxyConfig {
        batch: args.batch,
        max_in_flight: 4096,
        idle_timeout: args.groups.job.timeout(),
    };
    let failed_flag = AtomicBool::new(false);
    let go = AtomicU64::new(0);
    let health = health_of(ctx);
    let rails = std::mem::take(&mut init.rails);
    let starts = init.next.clone();
    let mut samples = Vec::with_capacity(s.iters as usize);
    // Per timed iteration, on the host clock: first push (or go) and last quiet returned.
    let mut iter_t0 = Vec::with_capacity(s.iters as usize);
    let mut iter_t1 = Vec::with_capacity(s.iters as usize);
    // Per recorded put: push, quiet (host clock), iteration index.
    let mut push_ns = Vec::new();
    let mut quiet_ns = Vec::new();
    let rings_mem = &init.rings;
    let rings: Vec<CommandRing> = (0..nrails).map(|r| rings_mem.ring(r, log2)).collect();
    // %globaltimer drifts against CLOCK_REALTIME (about 8 ppm on an H100: the offset measured
    // once at setup was 170 us off twenty seconds later), so the offset is measured again
    // before and after every point and interpolated in between.
    let clock_before = match &init.gpu {
        Some(g) if s.mode != Mode::Cpu => Some(
            g.clock_offset(16)
                .map_err(|e| BenchError::context("clock alignment", e))?,
        ),
        _ => None,
    };
    let mut heads = starts.clone();
    // The rails, grouped by the thread that serves them.
    let groups: Vec<Vec<(usize, Rail)>> = match args.proxy_threads {
        ProxyThreads::Rail => rails.into_iter().enumerate().map(|x| vec![x]).collect(),
        ProxyThreads::Gpu => vec![rails.into_iter().enumerate().collect()],
    };
    let (outcomes, main): (Vec<ThreadOutcome>, Result<(), BenchError>) =
        std::thread::scope(|scope| {
            let handles: Vec<_> = groups
                .into_iter()
                .map(|group| {
                    let (rings, per_rail, go, targets) = (&rings, &per_rail, &go, &init.targets);
                    let (failed_flag, health, starts, cfg) =
                        (&failed_flag, health.clone(), &starts, &cfg);
                    scope.spawn(move || {
                        let res = {
                            let lanes: Vec<Lane> = group
                                .iter()
                                .map(|(r, rail)| Lane {
                                    index: *r,
                                    rail,
                                    ring: rings[*r],
                                    feed: match s.mode {
                                        Mode::Cpu => Feed::Direct {
                                            per_iter: &per_rail[*r],
                                            go,
                                        },
                                        _ => Feed::Ring,
                                    },
                                    start: starts[*r],
                                    expected: per_rail[*r].len() as u64 * total_iters,
                                    keep_from: per_rail[*r].len() as u64 * (total_iters - kept),
                                    tgt: &targets[*r],
                                })
                                .collect();
                            engine::serve(&lanes, cfg, failed_flag, &health)
                        };
                        (group, res)
                    })
                })
                .collect();
            let main = (|| -> Result<(), BenchError> {
                for it in 0..total_iters {
                    if args.groups.job.verify() || it == 0 {
                        fill_puts(&**setup.src, it, s.puts, s.size)?;
                    }
                    let (t_ns, span, push, quiet) = match s.mode {
                        Mode::Cpu => {
                            let t0 = realtime_ns();
                            go.store(it + 1, Ordering::Release);
                            let mut spins = 0u64;
                            for (r, ring) in rings.iter().enumerate() {
                                let want = starts[r] + per_rail[r].len() as u64 * (it + 1);
                                while ring.done() < want {
                                    spins += 1;
                                    if spins % 1024 == 0 {
                                        if failed_flag.load(Ordering::Acquire) {
                                            return Err(ProxyError::ThreadFailed.into());
                                        }
                                        health().map_err(ProxyError::Job)?;
                                    }
                                    std::hint::spin_loop();
                                }
                            }
                            let t1 = realtime_ns();
                            (
                                t1 - t0,
                                (t0, t1),
                                vec![t0; s.puts as usize],
                                vec![t1; s.puts as usize],
                            )
                        }
                        Mode::Blocking | Mode::Nbi => {
                            let blocking = s.mode == Mode::Blocking;
                            match &init.gpu {
                                Some(g) => {
                                    let r = g
                                        .run(
                                            rings_mem,
                                            log2,
                                            &PutPlan {
                                                puts: s.puts,
                                                size: s.size,
                                                dst: TARGET as u16,
                                                rails: nrails as u32,
                                                split: strategy == Strategy::Split,
                                                first_rail: 0,
                                                blocking,
                                                poll_ns: args.quiet_poll_ns,
                                                fence_each: args.payload_fence
                                                    == PayloadFence::PerPut,
                                            },
                                        )
                                        .map_err(|e| BenchError::context("the GPU producer", e))?;
                                    for (r, ring) in heads.iter_mut().enumerate() {
                                        *ring += per_rail[r].len() as u64;
                                    }
                                    let off = clock_before.map(|c| c.0).unwrap_or(0);
                                    let host = |t: u64| (t as i64 - off) as u64;
                                    (
                                        r.t1.saturating_sub(r.t0),
                                        (host(r.t0), host(r.t1)),
                                        r.push.iter().map(|&t| host(t)).collect(),
                                        r.quiet.iter().map(|&t| host(t)).collect(),
                                    )
                                }
                                None => {
                                    let h = engine::host_iteration(
                                        &rings,
                                        &mut heads,
                                        &sched,
                                        blocking,
                                        &failed_flag,
                                        &health,
                                    )?;
                                    (h.t1 - h.t0, (h.t0, h.t1), h.push, h.quiet)
                                }
                            }
                        }
                    };
                    if it >= s.warmup {
                        samples.push(t_ns);
                        iter_t0.push(span.0);
                        iter_t1.push(span.1);
                    }
                    if it >= total_iters - kept {
                        push_ns.extend(push);
                        quiet_ns.extend(quiet);
                    }
                    // The target verified this iteration: the source may be rewritten.
                    ctx.bs.barrier()?;
                }
                Ok(())
            })();
            if main.is_err() {
                failed_flag.store(true, Ordering::Release);
            }
            let outcomes = handles
                .into_iter()
                .map(|h| h.join().expect("a proxy thread panicked"))
                .collect();
            (outcomes, main)
        });
    let mut errs = Vec::new();
    let mut back: Vec<Option<(Rail, RailLog)>> = (0..nrails).map(|_| None).collect();
    let mut rails_back: Vec<Option<Rail>> = (0..nrails).map(|_| None).collect();
    for (group, res) in outcomes {
        match res {
            Ok(logs) => {
                for ((r, rail), log) in group.into_iter().zip(logs) {
                    back[r] = Some((rail, log));
                }
            }
            Err(e) => {
                errs.push(e);
                for (r, rail) in group {
                    rails_back[r] = Some(rail);
                }
            }
        }
    }
    let mut rail_logs = Vec::with_capacity(nrails);
    for (r, b) in back.into_iter().enumerate() {
        match (b, rails_back[r].take()) {
            (Some((rail, log)), _) => {
                init.rails.push(rail);
                rail_logs.push(log);
            }
            (None, Some(rail)) => init.rails.push(rail),
            (None, None) => errs.push(ProxyError::NotHandedBack(r)),
        }
    }
    // A proxy's own error is the cause; the others only noticed it.
    errs.sort_by_key(|e| matches!(e, ProxyError::Stopped));
    if let Some(e) = errs.into_iter().next() {
        return Err(e.into());
    }
    main?;
    if s.mode == Mode::Cpu {
        // The baseline used the control words but no slots: rewind them, because the lap parity
        // needs every position of the ring to be written in turn.
        for (r, ring) in rings.iter().enumerate() {
            ring.publish_tail(init.next[r]);
            ring.publish_done(init.next[r]);
        }
    } else {
        for (r, n) in init.next.iter_mut().enumerate() {
            *n += per_rail[r].len() as u64 * total_iters;
        }
    }
    if let (Some(g), Some(b)) = (&init.gpu, clock_before) {
        let a = g
            .clock_offset(16)
            .map_err(|e| BenchError::context("clock alignment", e))?;
        // The stamps were moved with the offset before the point; correct each by the drift
        // up to its own time (linear between the two measurements).
        let span = a.2.saturating_sub(b.2).max(1) as f64;
        let drift = (a.0 - b.0) as f64;
        let fix = |t: &mut u64| {
            let frac = (t.saturating_sub(b.2) as f64 / span).clamp(0.0, 1.0);
            *t = (*t as i64 - (drift * frac) as i64) as u64;
        };
        push_ns.iter_mut().for_each(fix);
        quiet_ns.iter_mut().for_each(fix);
        iter_t0.iter_mut().for_each(fix);
        iter_t1.iter_mut().for_each(fix);
        init.clock = Some(a);
    }
    // Per recorded put: pop and post of its first stripe, completion of its last.
    let per_put_rec = kept as usize * s.puts as usize;
    let mut pop = vec![u64::MAX; per_put_rec];
    let mut post = vec![u64::MAX; per_put_rec];
    let mut done = vec![0u64; per_put_rec];
    let mut commands = 0u64;
    let mut batches = 0u64;
    let mut fence_drains = 0u64;
    let mut max_in_flight = 0u64;
    for (r, log) in rail_logs.iter().enumerate() {
        commands += log.commands;
        batches += log.batches;
        fence_drains += log.fence_drains;
        max_in_flight = max_in_flight.max(log.max_in_flight);
        let n = per_rail[r].len().max(1);
        for (i, t) in log.times.iter().enumerate() {
            // Iteration among the kept ones.
            let it = (log.keep_from as usize + i) / n - (total_iters - kept) as usize;
            let k = it * s.puts as usize + t.signal as usize;
            if k < per_put_rec {
                pop[k] = pop[k].min(t.pop);
                post[k] = post[k].min(t.post);
                done[k] = done[k].max(t.done);
            }
        }
    }
    let diff = |a: &[u64], b: &[u64]| -> Vec<i64> {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| y as i64 - x as i64)
            .collect()
    };
    let stages = Stages {
        push_to_pop: if s.mode != Mode::Cpu {
            pct(diff(&push_ns, &pop))
        } else {
            None
        },
        pop_to_post: pct(diff(&pop, &post)),
        post_to_completion: pct(diff(&post, &done)),
        completion_to_quiet: pct(diff(&done, &quiet_ns)),
        push_to_quiet: pct(diff(&push_ns, &quiet_ns)),
        post_to_arrival: None,
        arrival_to_quiet: None,
    };
    let stamps = InitiatorStamps {
        stages,
        batch_mean: if batches > 0 {
            commands as f64 / batches as f64
        } else {
            0.0
        },
        commands,
        fence_drains,
        max_in_flight,
        arrival_clock: if setup.one_host {
            "same host"
        } else {
            "target host (not aligned)"
        }
        .into(),
        clock_offset_ns: init.clock.map(|(off, _, _)| off),
        clock_rtt_ns: init.clock.map(|(_, rtt, _)| rtt),
        post_ns: post,
        quiet_ns,
        iter_t0_ns: iter_t0,
        iter_t1_ns: iter_t1,
    };
    Ok(Measured {
        samples_ns: samples,
        ..Measured::default()
    }
    .detail(&stamps))
}
