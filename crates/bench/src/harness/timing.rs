//! How a benchmark is timed, and the only way its rounds reach a timed loop.
//!
//! Every benchmark declares one [`TimedBy`] ([`super::Benchmark::timed_by`]) and, in `measure`,
//! hands its rounds to the harness through the [`Ctx`] method of that name: [`Ctx::run_rounds`],
//! [`Ctx::run_budgeted`], [`Ctx::run_device_rounds`] or [`Ctx::run_launch`]. The loops behind
//! them are private to the harness, so warm-up, the clock, the samples, the job's health and
//! progress are written once and no benchmark can time a point its own way; the declaration
//! lets the harness say how a run was timed without looking at the benchmark's code, and a
//! benchmark that hands over rounds of another kind fails at once instead of measuring
//! something other than it says.

use super::budget::{budget_loop, Budget, Budgeted, Span, Spent};
use super::device::{device_loop, launch_once, DeviceRounds};
use super::timed::{time_loop, Loop, Rounds};
use super::{Ctx, Measured};
use crate::error::BenchError;

/// How a benchmark's points are timed; each names the [`Ctx`] method that runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimedBy {
    /// `-w` then `-n` iterations, each timed by the host's clock around its body, or the whole
    /// timed part at once ([`super::Clock`]): [`Ctx::run_rounds`] over a [`Rounds`] value.
    Rounds,
    /// Iterations that end on `-n` or a `--max-time` budget, whichever comes first, every rank
    /// on the same one: [`Ctx::run_budgeted`] over a [`Budgeted`] value.
    Budgeted,
    /// Iterations each timed where the work runs (CUDA events, `%globaltimer`, a stage clock),
    /// which hand their sample to the loop: [`Ctx::run_device_rounds`] over a [`DeviceRounds`]
    /// value.
    DeviceRounds,
    /// One kernel launch per point, whose kernel stamps every command it times:
    /// [`Ctx::run_launch`].
    Launch,
}

impl TimedBy {
    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            TimedBy::Rounds => "host-timed rounds",
            TimedBy::Budgeted => "budgeted rounds",
            TimedBy::DeviceRounds => "device-timed rounds",
            TimedBy::Launch => "one kernel-stamped launch",
        }
    }
}

impl Ctx<'_> {
    /// Runs `lp.warmup + lp.iters` iterations of `r`, timed by the host; one sample per timed
    /// iteration when `lp.timed` (see [`super::timed`]).
    pub fn run_rounds(&self, lp: Loop, r: &mut impl Rounds) -> Result<Measured, BenchError> {
        self.declared(TimedBy::Rounds)?;
        time_loop(self, lp, r)
    }

    /// Runs the warm-up and the timed part of `r` within `b`, taking samples of `span` (see
    /// [`super::budget`]).
    pub fn run_budgeted(
        &self,
        b: Budget,
        span: Span,
        r: &mut impl Budgeted,
    ) -> Result<Spent, BenchError> {
        self.declared(TimedBy::Budgeted)?;
        budget_loop(b, span, r)
    }

    /// Runs `lp.warmup + lp.iters` iterations of `r`, each timed on the device; one sample per
    /// timed iteration when `lp.timed` (see [`super::device`]).
    pub fn run_device_rounds(
        &self,
        lp: Loop,
        r: &mut impl DeviceRounds,
    ) -> Result<Measured, BenchError> {
        self.declared(TimedBy::DeviceRounds)?;
        device_loop(self, lp, r)
    }

    /// Runs `launch`, one kernel launch that times its own commands and returns what it
    /// measured (see [`super::device`]).
    pub fn run_launch<T, E>(&self, launch: impl FnOnce() -> Result<T, E>) -> Result<T, BenchError>
    where
        BenchError: From<E>,
    {
        self.declared(TimedBy::Launch)?;
        launch_once(self, launch)
    }

    /// `Err` when the benchmark hands over rounds of another kind than it declared.
    fn declared(&self, used: TimedBy) -> Result<(), BenchError> {
        if used == self.timed_by {
            return Ok(());
        }
        Err(BenchError::failed(format!(
            "{} declares {} but handed the harness {}",
            self.bench,
            self.timed_by.name(),
            used.name()
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use efabench_bootstrap::{Bootstrap, RankInfo};

    use super::*;
    use crate::harness::{defaults, Clock, Groups};

    fn ctx<'a>(bs: &'a Bootstrap, opts: &'a Groups, timed_by: TimedBy) -> Ctx<'a> {
        Ctx {
            bs,
            opts,
            rank: 0,
            world: 1,
            local_rank: 0,
            host: "h".into(),
            hosts: vec!["h".into()],
            fabric: None,
            device: None,
            bench: "fake",
            timed_by,
        }
    }

    struct Count(u64);

    impl Rounds for Count {
        fn body(&mut self, _: u64) -> Result<(), BenchError> {
            self.0 += 1;
            Ok(())
        }
    }

    impl DeviceRounds for Count {
        fn run(&mut self, i: u64) -> Result<Option<u64>, BenchError> {
            self.0 += 1;
            Ok(Some(i))
        }
    }

    #[test]
    fn the_declared_kind_runs_and_any_other_is_refused() {
        let bs = Bootstrap::connect(&RankInfo::single(), Duration::from_secs(5)).unwrap();
        let opts = Groups {
            job: defaults(),
            sweep: None,
            fabric: None,
            mem: None,
        };
        let lp = Loop {
            warmup: 1,
            iters: 3,
            timed: true,
            clock: Clock::Iteration,
        };
        let c = ctx(&bs, &opts, TimedBy::DeviceRounds);
        let mut n = Count(0);
        let m = c.run_device_rounds(lp, &mut n).unwrap();
        assert_eq!((m.samples_ns, n.0), (vec![1, 2, 3], 4));
        let e = c.run_rounds(lp, &mut n).unwrap_err().to_string();
        assert_eq!(
            e,
            "fake declares device-timed rounds but handed the harness host-timed rounds"
        );
        assert_eq!(n.0, 4, "a refused loop runs nothing");
        let e = c.run_launch(|| Ok::<_, BenchError>(())).unwrap_err();
        assert!(e.to_string().contains("one kernel-stamped launch"), "{e}");

        let c = ctx(&bs, &opts, TimedBy::Launch);
        assert_eq!(c.run_launch(|| Ok::<_, BenchError>(7)).unwrap(), 7);
        let before = bs.progress().count();
        let e = c
            .run_launch(|| Err::<u32, _>(BenchError::failed("ring hung")))
            .unwrap_err();
        assert!(e.to_string().contains("ring hung"), "{e}");
        assert_eq!(
            bs.progress().count(),
            before,
            "a failed launch made no progress"
        );
    }
}
