//! The timed loop every CPU-timed benchmark shares: warm-up, the clock, samples, the job's
//! health and progress. A benchmark says what one iteration is ([`Rounds`]) and hands it to the
//! harness with [`Ctx::run_rounds`], whose loop runs `warmup + iters` of them on this rank and
//! returns the [`Measured`] the harness gathers.
//!
//! Per iteration `i` the loop calls `prepare(i)` (untimed: fill a payload, post a receive, wait
//! for the peer's go-ahead), then `body(i)` between two reads of the clock (only on the rank
//! that times; the others read no clock), then `check(i)` (untimed: reap bookkeeping
//! completions, verify what arrived, get the next payload ready), which returns the payload words
//! that failed. Nothing else happens per iteration: no allocation (the samples are reserved up
//! front), no lock, no shared counter. Every [`CHECK_EVERY`] iterations the loop checks the
//! job's health (a peer that died or froze, an abort from another rank) and tells the bootstrap
//! this rank still moves; the waits inside a body check the health themselves while they wait.
//!
//! With [`Clock::Run`] the timing rank reads the clock only around the whole timed loop, as
//! fabtests do: two clock reads per iteration cost tens of nanoseconds, which is visible in an
//! 8-byte round trip of half a microsecond, and this mode trades the percentiles for them.
//!
//! Benchmarks whose iterations are timed on the device (CUDA events, `%globaltimer`) hand their
//! rounds to [`Ctx::run_device_rounds`] instead ([`super::device`]): the same warm-up, health
//! checks and [`Measured`] shape, with each iteration returning the sample the device took,
//! because a host clock around a launch does not time the work it queued.

use std::time::Instant;

use super::{Ctx, Measured};
use crate::error::BenchError;

/// One iteration of a benchmark on this rank, in three parts (see the module docs).
pub trait Rounds {
    /// Untimed work before iteration `i`.
    fn prepare(&mut self, _i: u64) -> Result<(), BenchError> {
        Ok(())
    }

    /// The timed part of iteration `i`.
    fn body(&mut self, i: u64) -> Result<(), BenchError>;

    /// Untimed work after iteration `i`: payload words that failed verification.
    fn check(&mut self, _i: u64) -> Result<u64, BenchError> {
        Ok(0)
    }

    /// Called once, before the first timed iteration (after the warm-up).
    fn timed_from_here(&mut self) {}
}

/// How many iterations, and whether this rank keeps their times.
#[derive(Clone, Copy, Debug)]
pub struct Loop {
    pub warmup: u64,
    pub iters: u64,
    /// The loop keeps this rank's samples: it times the body (the others only take part, or
    /// keep samples the loop has no place for).
    pub timed: bool,
    pub clock: Clock,
}

/// Where the timing rank reads the clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Clock {
    /// Around each body: one sample per iteration, so percentiles (two clock reads per
    /// iteration; prepare and check stay outside the clock).
    #[default]
    Iteration,
    /// Once before the first timed iteration and once after the last, as fabtests do: the
    /// whole loop is timed, prepare and check included, and every sample is the mean (no
    /// percentiles). With `--no-check` this is fabtests' loop.
    Run,
}

impl Clock {
    pub fn name(self) -> &'static str {
        match self {
            Clock::Iteration => "iteration",
            Clock::Run => "run",
        }
    }
}

/// Iterations between two checks of the job's health.
pub const CHECK_EVERY: u64 = 1024;

/// Runs `lp.warmup + lp.iters` iterations of `r`; one sample per timed iteration when `lp.timed`.
pub(super) fn time_loop(ctx: &Ctx, lp: Loop, r: &mut impl Rounds) -> Result<Measured, BenchError> {
    let progress = ctx.bs.progress();
    let per_iteration = lp.timed && lp.clock == Clock::Iteration;
    let mut samples = Vec::with_capacity(if lp.timed { lp.iters as usize } else { 0 });
    let mut errors = 0;
    let mut run_start = None;
    for i in 0..lp.warmup + lp.iters {
        if i == lp.warmup {
            r.timed_from_here();
            run_start = Some(Instant::now());
        }
        if i % CHECK_EVERY == CHECK_EVERY - 1 {
            ctx.bs.check()?;
            progress.tick();
        }
        r.prepare(i)?;
        if per_iteration {
            let t0 = Instant::now();
            r.body(i)?;
            let dt = t0.elapsed().as_nanos() as u64;
            if i >= lp.warmup {
                samples.push(dt);
            }
        } else {
            r.body(i)?;
        }
        errors += r.check(i)?;
    }
    if lp.timed && lp.clock == Clock::Run && lp.iters > 0 {
        let total = run_start.map_or(0, |t| t.elapsed().as_nanos() as u64);
        samples.resize(lp.iters as usize, total / lp.iters);
    }
    Ok(Measured {
        samples_ns: samples,
        errors,
        ..Measured::default()
    })
}
