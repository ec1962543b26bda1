//! The loop of benchmarks whose samples are timed where the work runs, not around the host's
//! call: CUDA events around launches queued back to back, `%globaltimer` stamps a kernel takes,
//! or the stamps a producer thread takes when it stands in for the GPU. A benchmark hands it its
//! rounds with [`Ctx::run_device_rounds`].
//!
//! Such an iteration cannot be timed by the host-timed loop's two clock reads ([`super::timed`]):
//! a launch returns before its work ran, and the host's own queueing would be counted in it.
//! Everything else the harness loop does still applies — warm-up, the job's health, progress,
//! one [`Measured`] shape — so the iteration times itself and hands its sample to the loop.
//!
//! Per iteration `i` (warm-up ones first) the loop calls `prepare(i)` (untimed: fill a payload,
//! poison the receiver, the barrier that starts the iteration), `run(i)`, which does the
//! iteration and returns its device-timed sample in nanoseconds, and `check(i)` (untimed: verify,
//! the barrier that ends the iteration), which returns the payload words that failed. `run`
//! returns `None` on a rank that does not time, and for an iteration whose time is known only
//! later: a benchmark that queues its timed iterations without waiting for them (no host
//! synchronisation between CUDA events) reads them in `finish`, after the last iteration,
//! which appends their samples in order. Samples of warm-up iterations are dropped, and a rank
//! that times ends with exactly one sample per timed iteration. Nothing else happens per
//! iteration: no allocation (the samples are reserved up front), no lock, no shared counter.
//! Every [`CHECK_EVERY`] iterations the loop checks the job's health and tells the bootstrap
//! this rank still moves, as the host-timed loop does.
//!
//! # One launch
//! A benchmark whose kernel loops by itself (`queue`: producers on the GPU stamp each command
//! while the host's consumer threads answer) has no iteration to hand over: the whole point is
//! one launch, and its samples are the kernel's stamps. It hands the launch to
//! [`Ctx::run_launch`], which checks the job's health before it and counts the progress after.

use super::{Ctx, Loop, Measured, CHECK_EVERY};
use crate::error::BenchError;

/// One iteration of a device-timed benchmark on this rank (see the module docs).
pub trait DeviceRounds {
    /// Untimed work before iteration `i`.
    fn prepare(&mut self, _i: u64) -> Result<(), BenchError> {
        Ok(())
    }

    /// Iteration `i`: its device-timed sample in nanoseconds, or `None` when this rank does not
    /// time it, when its time is read in [`DeviceRounds::finish`], or when the benchmark keeps
    /// its samples itself (`h2d`: one per GPU of a sample; its loop is not `timed`).
    fn run(&mut self, i: u64) -> Result<Option<u64>, BenchError>;

    /// Untimed work after iteration `i`: payload words that failed verification.
    fn check(&mut self, _i: u64) -> Result<u64, BenchError> {
        Ok(0)
    }

    /// Called once, before the first timed iteration (after the warm-up).
    fn timed_from_here(&mut self) -> Result<(), BenchError> {
        Ok(())
    }

    /// Called once after the last iteration on a rank that times: appends the samples of the
    /// timed iterations whose `run` returned `None`, in order.
    fn finish(&mut self, _samples: &mut Vec<u64>) -> Result<(), BenchError> {
        Ok(())
    }
}

/// Runs `lp.warmup + lp.iters` iterations of `r`; when `lp.timed`, one device-timed sample per
/// timed iteration. `lp.clock` does not apply: the device times every iteration.
pub(super) fn device_loop(
    ctx: &Ctx,
    lp: Loop,
    r: &mut impl DeviceRounds,
) -> Result<Measured, BenchError> {
    let progress = ctx.bs.progress();
    rounds(lp, r, || {
        ctx.bs.check()?;
        progress.tick();
        Ok(())
    })
}

/// Runs one launch that times itself (see the module docs): the job's health is checked before
/// it, and the progress counted after.
pub(super) fn launch_once<T, E>(
    ctx: &Ctx,
    launch: impl FnOnce() -> Result<T, E>,
) -> Result<T, BenchError>
where
    BenchError: From<E>,
{
    ctx.bs.check()?;
    let out = launch()?;
    ctx.bs.progress().tick();
    Ok(out)
}

/// The loop of [`device_loop`], with the job's health check passed in.
fn rounds(
    lp: Loop,
    r: &mut impl DeviceRounds,
    mut health: impl FnMut() -> Result<(), BenchError>,
) -> Result<Measured, BenchError> {
    let mut samples = Vec::with_capacity(if lp.timed { lp.iters as usize } else { 0 });
    let mut errors = 0;
    for i in 0..lp.warmup + lp.iters {
        if i == lp.warmup {
            r.timed_from_here()?;
        }
        if i % CHECK_EVERY == CHECK_EVERY - 1 {
            health()?;
        }
        r.prepare(i)?;
        let sample = r.run(i)?;
        if let (Some(ns), true) = (sample, lp.timed && i >= lp.warmup) {
            samples.push(ns);
        }
        errors += r.check(i)?;
    }
    if lp.timed {
        r.finish(&mut samples)?;
        if samples.len() as u64 != lp.iters {
            return Err(BenchError::failed(format!(
                "the device-timed loop took {} samples of {} timed iterations",
                samples.len(),
                lp.iters
            )));
        }
    }
    Ok(Measured {
        samples_ns: samples,
        errors,
        ..Measured::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Clock;

    /// Iterations that time themselves at once (`Now`) or queue and are read at the end
    /// (`later`), failing `bad_each` payload words each, with a record of every call.
    struct Fake {
        later: bool,
        warmup: u64,
        calls: Vec<String>,
        queued: Vec<u64>,
        bad_each: u64,
    }

    impl Fake {
        fn new(later: bool, warmup: u64) -> Fake {
            Fake {
                later,
                warmup,
                calls: Vec::new(),
                queued: Vec::new(),
                bad_each: 0,
            }
        }
    }

    impl DeviceRounds for Fake {
        fn prepare(&mut self, i: u64) -> Result<(), BenchError> {
            self.calls.push(format!("prepare {i}"));
            Ok(())
        }

        fn run(&mut self, i: u64) -> Result<Option<u64>, BenchError> {
            self.calls.push(format!("run {i}"));
            let ns = 1000 + i;
            if self.later {
                if i >= self.warmup {
                    self.queued.push(ns);
                }
                return Ok(None);
            }
            Ok(Some(ns))
        }

        fn check(&mut self, i: u64) -> Result<u64, BenchError> {
            self.calls.push(format!("check {i}"));
            Ok(self.bad_each)
        }

        fn timed_from_here(&mut self) -> Result<(), BenchError> {
            self.calls.push("timed".into());
            Ok(())
        }

        fn finish(&mut self, samples: &mut Vec<u64>) -> Result<(), BenchError> {
            self.calls.push("finish".into());
            samples.extend(&self.queued);
            Ok(())
        }
    }

    fn lp(warmup: u64, iters: u64, timed: bool) -> Loop {
        Loop {
            warmup,
            iters,
            timed,
            clock: Clock::Iteration,
        }
    }

    #[test]
    fn warm_up_samples_are_dropped_and_the_parts_run_in_order() {
        let mut f = Fake::new(false, 2);
        f.bad_each = 2;
        let m = rounds(lp(2, 3, true), &mut f, || Ok(())).unwrap();
        assert_eq!(m.samples_ns, [1002, 1003, 1004]);
        assert_eq!(m.errors, 10);
        assert_eq!(
            f.calls[..8],
            [
                "prepare 0",
                "run 0",
                "check 0",
                "prepare 1",
                "run 1",
                "check 1",
                "timed",
                "prepare 2"
            ]
        );
        assert_eq!(f.calls.last().map(String::as_str), Some("finish"));
    }

    #[test]
    fn samples_read_after_the_last_iteration_are_kept_in_order() {
        let mut f = Fake::new(true, 1);
        let m = rounds(lp(1, 4, true), &mut f, || Ok(())).unwrap();
        assert_eq!(m.samples_ns, [1001, 1002, 1003, 1004]);
        assert_eq!(m.errors, 0);
    }

    #[test]
    fn a_rank_that_does_not_time_keeps_no_samples_and_is_not_asked_for_them() {
        let mut f = Fake::new(false, 1);
        let m = rounds(lp(1, 3, false), &mut f, || Ok(())).unwrap();
        assert!(m.samples_ns.is_empty());
        assert!(!f.calls.iter().any(|c| c == "finish"));
    }

    #[test]
    fn a_missing_sample_is_an_error() {
        struct Silent;
        impl DeviceRounds for Silent {
            fn run(&mut self, _: u64) -> Result<Option<u64>, BenchError> {
                Ok(None)
            }
        }
        let e = rounds(lp(0, 3, true), &mut Silent, || Ok(())).unwrap_err();
        assert!(e.to_string().contains("0 samples of 3"), "{e}");
    }

    #[test]
    fn health_is_checked_every_check_every_iterations_and_stops_the_loop() {
        let mut f = Fake::new(false, 0);
        let mut checks = 0;
        let n = 3 * CHECK_EVERY;
        rounds(lp(0, n, true), &mut f, || {
            checks += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(checks, 3);
        let mut f = Fake::new(false, 0);
        let e = rounds(lp(0, n, true), &mut f, || {
            Err(BenchError::failed("rank 1 died"))
        })
        .unwrap_err();
        assert!(e.to_string().contains("rank 1 died"), "{e}");
        // "timed", then every part of the iterations before the failed check.
        assert_eq!(f.calls.len() as u64, 1 + 3 * (CHECK_EVERY - 1));
    }
}
