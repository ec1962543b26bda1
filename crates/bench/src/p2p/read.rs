//! `read`: RDMA read. The responder exposes `window` slots of fresh data per round and says
//! READY; the reader (rank 0) reads them one at a time (pingpong: an iteration is one read, timed
//! from post to completion, as a read is a round trip by nature) or all at once (stream: an
//! iteration is a round), verifies what it read, and says DONE (untimed).

use super::{Protocol, Step, Variant};
use crate::error::BenchError;
use crate::harness::{Ctx, Loop, Measured, Rounds};
use crate::mesh::Link;
use crate::mesh::{Kind, Verb};

/// RDMA read.
pub struct Read;

/// DONE: the reader read and verified the round.
const DONE: Kind = Kind::Ack;

impl Protocol for Read {
    const NAME: &'static str = "read";
    const ROUND_TRIP: bool = false;

    fn measure(link: &mut Link, ctx: &Ctx, s: Step) -> Result<Measured, BenchError> {
        let stream = s.variant == Variant::Stream;
        if s.sends(ctx) {
            return ctx.run_rounds(s.looped(true), &mut Reader { link, s, stream });
        }
        // Rounds of `window` slots: one per iteration for a stream, the reads of a pingpong
        // spread over them.
        let n = s.warmup + s.iters;
        let iters = if stream {
            n
        } else {
            n.div_ceil(s.window as u64)
        };
        let rounds = Loop {
            warmup: 0,
            iters,
            ..s.looped(false)
        };
        ctx.run_rounds(rounds, &mut Exposer { link, s })
    }
}

/// The reader's side, both variants.
struct Reader<'a> {
    link: &'a mut Link,
    s: Step,
    stream: bool,
}

impl Reader<'_> {
    /// Round of iteration `i`, and its position in the round.
    fn at(&self, i: u64) -> (u64, usize) {
        let w = self.s.window as u64;
        match self.stream {
            true => (i, 0),
            false => (i / w, (i % w) as usize),
        }
    }
}

impl Rounds for Reader<'_> {
    fn prepare(&mut self, i: u64) -> Result<(), BenchError> {
        match self.at(i) {
            (round, 0) => self.link.expect_ctrl(Kind::Ready, round),
            _ => Ok(()),
        }
    }

    fn body(&mut self, i: u64) -> Result<(), BenchError> {
        if self.stream {
            for slot in 0..self.s.window {
                self.link.post(Verb::Read, slot, None)?;
            }
            self.link.wait_all(self.s.window, Verb::Read)?;
        } else {
            let slot = self.at(i).1;
            self.link.post(Verb::Read, slot, None)?;
            self.link.wait_for(Verb::Read, slot)?;
        }
        self.link.mesh.settle()
    }

    fn check(&mut self, i: u64) -> Result<u64, BenchError> {
        let (round, pos) = self.at(i);
        let last = i + 1 == self.s.warmup + self.s.iters;
        if !self.stream && pos + 1 < self.s.window && !last {
            return Ok(0);
        }
        // Slots of this round that were read (all, except in a pingpong's short last round).
        let used = if self.stream { self.s.window } else { pos + 1 };
        let mut errors = 0;
        if self.s.verify {
            for slot in 0..used.min(self.s.slots) {
                errors += self.link.check_inbox(slot, self.s.to_sender(round, slot));
            }
        }
        self.link.send_ctrl(DONE, round)?;
        Ok(errors)
    }

    fn timed_from_here(&mut self) {
        self.link.mesh.count_from_now(true);
    }
}

/// The responder's side: an iteration is a round (fresh data, READY, wait for DONE).
struct Exposer<'a> {
    link: &'a mut Link,
    s: Step,
}

impl Rounds for Exposer<'_> {
    fn prepare(&mut self, round: u64) -> Result<(), BenchError> {
        if self.s.verify {
            for slot in 0..self.s.slots {
                self.link.fill_out(slot, self.s.to_sender(round, slot))?;
            }
        }
        Ok(())
    }

    fn body(&mut self, round: u64) -> Result<(), BenchError> {
        self.link.send_ctrl(Kind::Ready, round)?;
        self.link.expect_ctrl(DONE, round)
    }
}
