//! One `ep` iteration as the harness's [`DeviceRounds`]: the harness runs the loop (warm-up,
//! the job's health, progress) and `ep` only says what one iteration is.
//!
//! An iteration times itself: each phase is clocked where its writes are posted and arrive
//! (the stage clock of [`super::exchange`]), not around the host's call, which includes the
//! barriers, the untimed experts and the checks. The sample handed to the loop is the dispatch
//! phase's total; the combine phase's times and the arrivals of both phases are kept here, per
//! timed iteration, for the records ([`RankLog`]). Payload words that failed are counted in the
//! iteration and handed over in `check`.

use super::args::Initiator;
use super::exchange::PhaseTimes;
use super::metrics::RankLog;
use super::State;
use crate::error::BenchError;
use crate::harness::{Ctx, DeviceRounds};

/// The iterations of one initiator's point on this rank.
pub(super) struct EpRounds<'a> {
    st: &'a mut State,
    ctx: &'a Ctx<'a>,
    initiator: Initiator,
    verify: bool,
    /// The run's iteration number (payload patterns change with it across points).
    next_iter: &'a mut u64,
    /// The timed iterations' phases and arrivals.
    pub log: RankLog,
    timed: bool,
    errors: u64,
}

impl<'a> EpRounds<'a> {
    pub fn new(
        st: &'a mut State,
        ctx: &'a Ctx<'a>,
        initiator: Initiator,
        verify: bool,
        next_iter: &'a mut u64,
        iters: u64,
    ) -> Self {
        let n = iters as usize;
        EpRounds {
            st,
            ctx,
            initiator,
            verify,
            next_iter,
            log: RankLog {
                dispatch: Vec::with_capacity(n),
                combine: Vec::with_capacity(n),
                dest_bytes: Vec::new(),
                arrival_ns: [Vec::with_capacity(n), Vec::with_capacity(n)],
            },
            timed: false,
            errors: 0,
        }
    }

    fn keep(&mut self, d: PhaseTimes, c: PhaseTimes) {
        self.log.dispatch.push(d);
        self.log.combine.push(c);
        for (all, last) in self.log.arrival_ns.iter_mut().zip(&self.st.arrival_ns) {
            all.push(last.clone());
        }
    }
}

impl DeviceRounds for EpRounds<'_> {
    fn run(&mut self, _i: u64) -> Result<Option<u64>, BenchError> {
        let iter = *self.next_iter;
        *self.next_iter += 1;
        let (d, c, e) = self
            .st
            .iteration(self.ctx, self.initiator, iter, self.verify)?;
        self.errors = e;
        let ns = d.total_ns;
        if self.timed {
            self.keep(d, c);
        }
        Ok(Some(ns))
    }

    fn check(&mut self, _i: u64) -> Result<u64, BenchError> {
        Ok(std::mem::take(&mut self.errors))
    }

    fn timed_from_here(&mut self) -> Result<(), BenchError> {
        self.timed = true;
        Ok(())
    }
}
