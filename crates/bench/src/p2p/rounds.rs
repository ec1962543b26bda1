//! The ping-pong and the stream that every message-moving point-to-point benchmark shares
//! (`sendrecv`, `write`), one iteration at a time: the harness's timed loop
//! ([`Ctx::run_rounds`]) runs them, timing `body` on the sender (rank 0) and running
//! the responder's side untimed. A benchmark says only how one message moves ([`Message`]).
//! What each times and verifies is in the module docs of [`crate::p2p`]; `prepare` and `check`
//! hold everything that must stay outside the clock.

use std::marker::PhantomData;

use super::{PingLoop, Protocol, Step, Variant};
use crate::error::BenchError;
use crate::harness::{Ctx, Measured, Rounds};
use crate::mesh::Link;
use crate::mesh::{Kind, Verb};

/// How one message of a ping-pong or a stream moves between the two ranks; such a benchmark
/// is a [`Protocol`] run by this module. Messages are of the step's size, at window position
/// `pos` (see [`Link`]).
pub trait Message {
    /// The subcommand, and the records' `bench`.
    const NAME: &'static str;
    /// Small messages may go by `fi_inject` (no completion to reap), as fi_pingpong does.
    const INJECT: bool = false;
    /// Its ping-pong can run fabtests' loop (`--loop lean`, [`super::lean`]).
    const LEAN: bool = false;
    /// The verb of the local operation `post` completes as (tracked at its position).
    const OWN: Verb;
    /// Makes window position `pos` ready for the peer's next message (a receive, for send/recv).
    fn expect(_link: &mut Link, _pos: usize) -> Result<(), BenchError> {
        Ok(())
    }
    /// Posts the message of iteration (or window) `i` from window position `pos`.
    fn post(link: &mut Link, i: u64, pos: usize, inject: bool) -> Result<(), BenchError>;
    /// Waits until the peer's message of iteration `i` landed in `slot` (a ping-pong's answer).
    fn arrive(link: &mut Link, i: u64, slot: usize) -> Result<(), BenchError>;
    /// Waits until every message of window `win` landed, each position once (`seen`, zeroed,
    /// counts per position); returns how many had the wrong length.
    fn collect(link: &mut Link, win: u64, seen: &mut [usize]) -> Result<u64, BenchError>;
}

/// One step of `M` on this rank: the sender times, the responder answers.
impl<M: Message> Protocol for M {
    const NAME: &'static str = <M as Message>::NAME;

    fn measure(link: &mut Link, ctx: &Ctx, s: Step) -> Result<Measured, BenchError> {
        if s.ping_loop == PingLoop::Lean {
            // `setup` refused --loop lean for every other benchmark and for the stream.
            return match M::LEAN && s.variant == Variant::Pingpong {
                true => super::lean::measure(link, ctx, s),
                false => Err(BenchError::usage(format!(
                    "--loop lean does not apply to {} {}",
                    M::NAME,
                    crate::harness::name_of(&s.variant)
                ))),
            };
        }
        let sender = s.sends(ctx);
        ctx.run_rounds(s.looped(sender), &mut Side::<M>::new(link, s, sender)?)
    }
}

/// This rank's side of a step of `M`, either variant.
///
/// * Ping-pong: one message each way per iteration, on two alternating slots, so each side
///   verifies the message it just received while the next is on the wire.
/// * Stream: the sender times a window from its first post until the responder's ACK says every
///   message landed; filling, READY and verification are untimed.
struct Side<'a, M> {
    link: &'a mut Link,
    s: Step,
    sender: bool,
    /// Ping-pong: the messages go by `fi_inject`.
    inject: bool,
    /// Stream: per window position, completions (stripes for writes) seen this window.
    seen: Vec<usize>,
    /// Stream: messages of the wrong length this window.
    short: u64,
    message: PhantomData<M>,
}

impl<'a, M: Message> Side<'a, M> {
    fn new(link: &'a mut Link, s: Step, sender: bool) -> Result<Self, BenchError> {
        let pingpong = s.variant == Variant::Pingpong;
        let inject = pingpong && M::INJECT && link.mesh.can_inject(s.size);
        if pingpong && s.verify {
            link.fill_out(0, s.seeds(sender, 0, 0).0)?;
        }
        if pingpong && !sender {
            M::expect(link, 0)?;
        }
        let seen = vec![0; if pingpong { 0 } else { s.window }];
        Ok(Side {
            link,
            s,
            sender,
            inject,
            seen,
            short: 0,
            message: PhantomData,
        })
    }

    /// Reaps our own ping-pong message's completion (none for an inject).
    fn reap(&mut self, slot: usize) -> Result<(), BenchError> {
        match self.inject {
            true => Ok(()),
            false => self.link.wait_for(M::OWN, slot),
        }
    }

    fn receive(&mut self, i: u64, slot: usize) -> Result<(), BenchError> {
        M::arrive(self.link, i, slot)?;
        self.link.mesh.settle()
    }

    fn pingpong(&mut self, i: u64) -> Result<(), BenchError> {
        let slot = (i % 2) as usize;
        if self.sender {
            // The reply proves the message arrived: the round trip ends there. Our own send
            // completion is bookkeeping (on shm it can wait for the peer's next CQ poll, after
            // the peer's verification), so `check` reaps it, outside the clock.
            M::post(self.link, i, slot, self.inject)?;
            return self.receive(i, slot);
        }
        self.receive(i, slot)?;
        if i + 1 < self.s.warmup + self.s.iters {
            // The next receive goes up before the reply, so the sender's next message never
            // arrives unexpected.
            M::expect(self.link, 1 - slot)?;
        }
        M::post(self.link, i, slot, self.inject)?;
        // Verify only once the reply has left (on shm: once the sender pulled it), so our
        // verification never competes with the reply's copy inside the sender's timing.
        self.reap(slot)
    }

    fn pingpong_check(&mut self, i: u64) -> Result<u64, BenchError> {
        let (slot, s) = ((i % 2) as usize, self.s);
        if self.sender {
            self.reap(slot)?;
        }
        if !s.verify {
            return Ok(0);
        }
        let errors = self.link.check_inbox(slot, s.seeds(self.sender, i, slot).1);
        let next = 1 - slot;
        self.link
            .fill_out(next, s.seeds(self.sender, i + 1, next).0)?;
        Ok(errors)
    }

    fn stream(&mut self, win: u64) -> Result<(), BenchError> {
        let window = self.s.window;
        if self.sender {
            for pos in 0..window {
                M::post(self.link, win, pos, false)?;
            }
            self.link.wait_all(window, M::OWN)?;
            return self.link.expect_ctrl(Kind::Ack, win);
        }
        for pos in 0..window {
            M::expect(self.link, pos)?;
        }
        self.link.send_ctrl(Kind::Ready, win)?;
        self.seen.fill(0);
        self.short += M::collect(self.link, win, &mut self.seen)?;
        // The ACK ends the sender's clock: the data must be in place, not queued.
        self.link.mesh.settle()?;
        self.link.send_ctrl(Kind::Ack, win)
    }
}

impl<M: Message> Rounds for Side<'_, M> {
    fn prepare(&mut self, i: u64) -> Result<(), BenchError> {
        match (self.sender, self.s.variant) {
            (false, _) => Ok(()),
            (true, Variant::Pingpong) => M::expect(self.link, (i % 2) as usize),
            (true, Variant::Stream) => {
                if self.s.verify {
                    for slot in 0..self.s.slots {
                        self.link.fill_out(slot, self.s.to_responder(i, slot))?;
                    }
                }
                self.link.expect_ctrl(Kind::Ready, i)
            }
        }
    }

    fn body(&mut self, i: u64) -> Result<(), BenchError> {
        match self.s.variant {
            Variant::Pingpong => self.pingpong(i),
            Variant::Stream => self.stream(i),
        }
    }

    fn check(&mut self, i: u64) -> Result<u64, BenchError> {
        if self.s.variant == Variant::Pingpong {
            return self.pingpong_check(i);
        }
        let mut errors = std::mem::take(&mut self.short);
        if self.s.verify && !self.sender {
            for slot in 0..self.s.slots {
                errors += self.link.check_inbox(slot, self.s.to_responder(i, slot));
            }
        }
        Ok(errors)
    }

    fn timed_from_here(&mut self) {
        self.link.mesh.count_from_now(true);
    }
}
