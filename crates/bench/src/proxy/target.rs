//! Rank 1's part of a point: every put's CQ data counted over all rails (with the arrival of
//! its last stripe), the bytes settled in memory ("landed") and verified, then the barrier that
//! lets rank 0 rewrite its source. The iterations run on the harness's device-timed loop, in
//! step with rank 0's; this rank times none of them.

use std::time::Duration;

use efabench_bootstrap::{Bootstrap, BootstrapError};
use efabench_gpu::proxy::realtime_ns;

use super::report::TargetStamps;
use super::{
    check_puts, engine, health_of, kept_iters, ProxyArgs, ProxySpec, Setup, INITIATOR, TARGET,
};
use crate::error::BenchError;
use crate::harness::{Clock, Ctx, DeviceRounds, Loop, Measured};

/// Rank 1's iterations of a point on the harness's device-timed loop (it times nothing: the
/// "landed" stamps go to rank 0, which times each iteration up to them). In an iteration, every
/// put's CQ data is counted over all rails (with the arrival of its last stripe) and the bytes
/// settled; after it, untimed, they are verified and the barrier lets rank 0 rewrite its source.
struct Arrivals<'a> {
    bs: &'a Bootstrap,
    s: &'a ProxySpec,
    setup: &'a Setup,
    stripes: Vec<u32>,
    health: &'a dyn Fn() -> Result<(), BootstrapError>,
    timeout: Duration,
    verify: bool,
    kept_from: u64,
    /// Per put of the current iteration: the arrival of its last stripe.
    arrive: Vec<u64>,
    /// CQ data of the current iteration that no put of it expected.
    stray: u64,
    /// Per put of the kept iterations: its arrival.
    arrive_all: Vec<u64>,
    /// Per timed iteration: when its bytes were in place.
    landed: Vec<u64>,
}

impl DeviceRounds for Arrivals<'_> {
    fn run(&mut self, it: u64) -> Result<Option<u64>, BenchError> {
        self.arrive.fill(0);
        self.stray = engine::await_puts(
            &self.setup.target_rails,
            &self.stripes,
            INITIATOR as u16,
            &mut self.arrive,
            self.timeout,
            self.health,
        )?;
        // Every CQ data is in; the bytes are in place once this process's GPU copies drained
        // (shm's CUDA IPC path copies on the target with a device-to-device cudaMemcpy that
        // returns, and reports the write, before the copy ran; a no-op for host memory).
        self.setup.dst.settle()?;
        if it >= self.s.warmup {
            self.landed.push(realtime_ns());
        }
        Ok(None)
    }

    fn check(&mut self, it: u64) -> Result<u64, BenchError> {
        let mut errors = self.stray;
        if self.verify {
            errors += check_puts(&**self.setup.dst, it, self.s.puts, self.s.size)?;
        }
        if it >= self.kept_from {
            self.arrive_all.extend_from_slice(&self.arrive);
        }
        self.bs.barrier()?;
        Ok(errors)
    }
}

pub(super) fn measure(
    ctx: &Ctx,
    args: &ProxyArgs,
    setup: &mut Setup,
    s: &ProxySpec,
) -> Result<Measured, BenchError> {
    let nrails = setup.target_rails.len();
    let strategy = args.groups.fabric.strategy();
    let sched = engine::schedule(s.puts, s.size, nrails, strategy, TARGET as u16);
    let health = health_of(ctx);
    let kept = kept_iters(s);
    let mut arrivals = Arrivals {
        bs: ctx.bs,
        s,
        setup,
        stripes: sched.iter().map(|p| p.len() as u32).collect(),
        health: &health,
        timeout: args.groups.job.timeout().max(Duration::from_secs(1)),
        verify: args.groups.job.verify(),
        kept_from: s.warmup + s.iters - kept,
        arrive: vec![0; s.puts as usize],
        stray: 0,
        arrive_all: Vec::with_capacity(kept as usize * s.puts as usize),
        landed: Vec::with_capacity(s.iters as usize),
    };
    let lp = Loop {
        warmup: s.warmup,
        iters: s.iters,
        timed: false,
        clock: Clock::Iteration,
    };
    let measured = ctx.run_device_rounds(lp, &mut arrivals)?;
    Ok(measured.detail(&TargetStamps {
        arrive_ns: arrivals.arrive_all,
        landed_ns: arrivals.landed,
    }))
}

/// An idle rank's iterations (ranks past the target): only the barrier that ends each.
pub(super) struct Idle<'a>(pub(super) &'a Bootstrap);

impl DeviceRounds for Idle<'_> {
    fn run(&mut self, _it: u64) -> Result<Option<u64>, BenchError> {
        Ok(None)
    }

    fn check(&mut self, _it: u64) -> Result<u64, BenchError> {
        self.0.barrier()?;
        Ok(0)
    }
}
