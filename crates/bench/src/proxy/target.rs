//! Rank 1's part of a point: every put's CQ data counted over all rails (with the arrival of
//! its last stripe), the bytes settled in memory ("landed") and verified, then the barrier that
//! lets rank 0 rewrite its source.

use std::time::Duration;

use efabench_gpu::proxy::realtime_ns;

use super::report::TargetStamps;
use super::{
    check_puts, engine, health_of, kept_iters, ProxyArgs, ProxySpec, Setup, INITIATOR, TARGET,
};
use crate::error::BenchError;
use crate::harness::{Ctx, Measured};

pub(super) fn measure(
    ctx: &Ctx,
    args: &ProxyArgs,
    setup: &mut Setup,
    s: &ProxySpec,
) -> Result<Measured, BenchError> {
    let nrails = setup.target_rails.len();
    let strategy = args.groups.fabric.strategy();
    let sched = engine::schedule(s.puts, s.size, nrails, strategy, TARGET as u16);
    let stripes: Vec<u32> = sched.iter().map(|p| p.len() as u32).collect();
    let health = health_of(ctx);
    let mut arrive_all = Vec::with_capacity(kept_iters(s) as usize * s.puts as usize);
    let mut landed = Vec::with_capacity(s.iters as usize);
    let mut errors = 0u64;
    for it in 0..s.warmup + s.iters {
        let mut arrive = vec![0u64; s.puts as usize];
        errors += engine::await_puts(
            &setup.target_rails,
            &stripes,
            INITIATOR as u16,
            &mut arrive,
            args.groups.job.timeout().max(Duration::from_secs(1)),
            &health,
        )?;
        // Every CQ data is in; the bytes are in place once this process's GPU copies drained
        // (shm's CUDA IPC path copies on the target with a device-to-device cudaMemcpy that
        // returns, and reports the write, before the copy ran; a no-op for host memory).
        setup.dst.settle()?;
        if it >= s.warmup {
            landed.push(realtime_ns());
        }
        if args.groups.job.verify() {
            errors += check_puts(&**setup.dst, it, s.puts, s.size)?;
        }
        if it >= s.warmup + s.iters - kept_iters(s) {
            arrive_all.extend(arrive);
        }
        ctx.bs.barrier()?;
    }
    Ok(Measured {
        errors,
        ..Measured::default()
    }
    .detail(&TargetStamps {
        arrive_ns: arrive_all,
        landed_ns: landed,
    }))
}
