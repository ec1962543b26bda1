//! Rank 0's part of a point: the proxy threads serve the rails while the producer (the GPU
//! kernel, a host thread, or for `cpu` the go signal) issues every iteration's puts; what comes
//! back is each iteration's span and, for the last iterations, every put's stamps (push, pop,
//! post, completion, quiet) on the host clock, the GPU's moved onto it. The producer times each
//! iteration itself, so the iterations run on the harness's device-timed loop ([`Puts`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use efabench_bootstrap::{Bootstrap, BootstrapError};
use efabench_fabric::Rail;
use efabench_gpu::proxy::{realtime_ns, Command, CommandRing, GpuProducer, PutPlan, RingMemory};
use efabench_gpu::GpuBuffer;

use super::engine::{self, Feed, Lane, ProxyConfig, RailLog};
use super::report::{pct, InitiatorStamps, Stages};
use super::{
    fill_puts, health_of, kept_iters, Mode, PayloadFence, ProxyArgs, ProxyError, ProxySpec,
    ProxyThreads, Setup, TARGET,
};
use crate::error::BenchError;
use crate::harness::{Clock, Ctx, DeviceRounds, Loop, Measured, Strategy};

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
    let mut puts = Puts {
        bs: ctx.bs,
        s,
        verify: args.groups.job.verify(),
        src: &**setup.src,
        rings: &rings,
        rings_mem,
        log2,
        per_rail: &per_rail,
        sched: &sched,
        starts: &starts,
        heads: starts.clone(),
        go: &go,
        failed: &failed_flag,
        health: &health,
        gpu: init.gpu.as_ref(),
        plan: PutPlan {
            puts: s.puts,
            size: s.size,
            dst: TARGET as u16,
            rails: nrails as u32,
            split: strategy == Strategy::Split,
            first_rail: 0,
            blocking: s.mode == Mode::Blocking,
            poll_ns: args.quiet_poll_ns,
            fence_each: args.payload_fence == PayloadFence::PerPut,
        },
        clock_offset: clock_before.map(|c| c.0).unwrap_or(0),
        keep_from: total_iters - kept,
        iter_t0: Vec::with_capacity(s.iters as usize),
        iter_t1: Vec::with_capacity(s.iters as usize),
        push_ns: Vec::new(),
        quiet_ns: Vec::new(),
    };
    let lp = Loop {
        warmup: s.warmup,
        iters: s.iters,
        timed: true,
        clock: Clock::Iteration,
    };
    // The rails, grouped by the thread that serves them.
    let groups: Vec<Vec<(usize, Rail)>> = match args.proxy_threads {
        ProxyThreads::Rail => rails.into_iter().enumerate().map(|x| vec![x]).collect(),
        ProxyThreads::Gpu => vec![rails.into_iter().enumerate().collect()],
    };
    let (outcomes, main): (Vec<ThreadOutcome>, Result<Measured, BenchError>) =
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
            let main = ctx.run_device_rounds(lp, &mut puts);
            if main.is_err() {
                failed_flag.store(true, Ordering::Release);
            }
            let outcomes = handles
                .into_iter()
                .map(|h| h.join().expect("a proxy thread panicked"))
                .collect();
            (outcomes, main)
        });
    let Puts {
        mut iter_t0,
        mut iter_t1,
        mut push_ns,
        mut quiet_ns,
        ..
    } = puts;
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
    let measured = main?;
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
    Ok(measured.detail(&stamps))
}

/// Rank 0's iterations of a point on the harness's device-timed loop. Untimed before each: the
/// payload of every put (each iteration when verifying, else once). Timed by the producer
/// itself: the iteration's puts from the first push (for `cpu`, the go signal) to the last quiet
/// returned, on `%globaltimer` for the GPU producer and on the host clock for `cpu` and the host
/// producer; the span (moved onto the host clock) and, for the last iterations, every put's
/// push and quiet stamps are kept. Untimed after: the barrier, past which the target has
/// verified the iteration and the source may be rewritten.
struct Puts<'a> {
    bs: &'a Bootstrap,
    s: &'a ProxySpec,
    verify: bool,
    src: &'a dyn GpuBuffer,
    rings: &'a [CommandRing<'a>],
    rings_mem: &'a RingMemory,
    log2: u32,
    /// Per rail, the commands of one iteration.
    per_rail: &'a [Vec<Command>],
    /// Per put, its stripes (rail, command).
    sched: &'a [Vec<(usize, Command)>],
    /// Ring positions per rail when the point began.
    starts: &'a [u64],
    /// The host producer's next ring position per rail.
    heads: Vec<u64>,
    go: &'a AtomicU64,
    failed: &'a AtomicBool,
    health: &'a (dyn Fn() -> Result<(), BootstrapError> + Sync),
    gpu: Option<&'a GpuProducer>,
    plan: PutPlan,
    /// `%globaltimer` minus the host clock, measured before the point.
    clock_offset: i64,
    /// First iteration whose per-put stamps are kept.
    keep_from: u64,
    /// Per timed iteration, on the host clock: first push (or go) and last quiet returned.
    iter_t0: Vec<u64>,
    iter_t1: Vec<u64>,
    /// Per kept put: push and quiet returned, on the host clock.
    push_ns: Vec<u64>,
    quiet_ns: Vec<u64>,
}

impl Puts<'_> {
    /// Keeps iteration `it`'s span (host clock) when it is timed.
    fn span(&mut self, it: u64, t0: u64, t1: u64) {
        if it >= self.s.warmup {
            self.iter_t0.push(t0);
            self.iter_t1.push(t1);
        }
    }

    /// `cpu`: the go signal, then every rail's proxy has completed the iteration's writes.
    fn direct(&mut self, it: u64) -> Result<(u64, u64), BenchError> {
        let t0 = realtime_ns();
        self.go.store(it + 1, Ordering::Release);
        let mut spins = 0u64;
        for (r, ring) in self.rings.iter().enumerate() {
            let want = self.starts[r] + self.per_rail[r].len() as u64 * (it + 1);
            while ring.done() < want {
                spins += 1;
                if spins % 1024 == 0 {
                    if self.failed.load(Ordering::Acquire) {
                        return Err(ProxyError::ThreadFailed.into());
                    }
                    (self.health)().map_err(ProxyError::Job)?;
                }
                std::hint::spin_loop();
            }
        }
        Ok((t0, realtime_ns()))
    }
}

impl DeviceRounds for Puts<'_> {
    fn prepare(&mut self, it: u64) -> Result<(), BenchError> {
        if self.verify || it == 0 {
            fill_puts(self.src, it, self.s.puts, self.s.size)?;
        }
        Ok(())
    }

    fn run(&mut self, it: u64) -> Result<Option<u64>, BenchError> {
        let kept = it >= self.keep_from;
        let puts = self.s.puts as usize;
        let t_ns = match (self.s.mode, self.gpu) {
            (Mode::Cpu, _) => {
                let (t0, t1) = self.direct(it)?;
                self.span(it, t0, t1);
                if kept {
                    self.push_ns.extend(std::iter::repeat_n(t0, puts));
                    self.quiet_ns.extend(std::iter::repeat_n(t1, puts));
                }
                t1 - t0
            }
            (Mode::Blocking | Mode::Nbi, Some(g)) => {
                let r = g
                    .run(self.rings_mem, self.log2, &self.plan)
                    .map_err(|e| BenchError::context("the GPU producer", e))?;
                for (head, cmds) in self.heads.iter_mut().zip(self.per_rail) {
                    *head += cmds.len() as u64;
                }
                let off = self.clock_offset;
                let host = |t: u64| (t as i64 - off) as u64;
                self.span(it, host(r.t0), host(r.t1));
                if kept {
                    self.push_ns.extend(r.push.iter().map(|&t| host(t)));
                    self.quiet_ns.extend(r.quiet.iter().map(|&t| host(t)));
                }
                r.t1.saturating_sub(r.t0)
            }
            (Mode::Blocking | Mode::Nbi, None) => {
                let h = engine::host_iteration(
                    self.rings,
                    &mut self.heads,
                    self.sched,
                    self.plan.blocking,
                    self.failed,
                    self.health,
                )?;
                self.span(it, h.t0, h.t1);
                if kept {
                    self.push_ns.extend(h.push);
                    self.quiet_ns.extend(h.quiet);
                }
                h.t1 - h.t0
            }
        };
        Ok(Some(t_ns))
    }

    fn check(&mut self, _it: u64) -> Result<u64, BenchError> {
        // The target verified this iteration: the source may be rewritten.
        self.bs.barrier()?;
        Ok(0)
    }
}
