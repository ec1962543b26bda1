//! The protocols of `sendrecv`, `write` and `read`, one iteration at a time: the harness's timed
//! loop ([`crate::harness::time_loop`]) runs them, timing `body` on the sender (rank 0) and
//! running the responder's side untimed. What each times and verifies is in the module docs of
//! [`crate::p2p`]; `prepare` and `check` hold everything that must stay outside the clock.

use super::link::{unexpected, write_data, Completion, Ctx as Op, Link};
use crate::error::BenchError;
use crate::harness::Rounds;
use crate::mesh::{Kind, ITER_MOD};
use crate::pattern;
use crate::P2pKind;

/// The numbers that identify a measurement to both sides.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub size: usize,
    pub iters: u64,
    pub warmup: u64,
    /// Messages per window (stream) or reads per round (read pingpong).
    pub window: usize,
    /// Buffer slots in use (≤ window): position `pos` of a window uses slot `pos % slots`, and
    /// a slot carries the pattern of `(iteration, slot)` (the bounded footprint).
    pub slots: usize,
    pub verify: bool,
    /// Ranks of the sender (rank 0) and the responder.
    pub sender: u32,
    pub responder: u32,
}

impl Step {
    fn to_responder(self, iter: u64, slot: usize) -> u64 {
        pattern::seed(iter, self.sender, self.responder, slot as u32)
    }
    fn to_sender(self, iter: u64, slot: usize) -> u64 {
        pattern::seed(iter, self.responder, self.sender, slot as u32)
    }
    /// Seed of what this side sends, and of what it receives.
    fn seeds(self, sender: bool, iter: u64, slot: usize) -> (u64, u64) {
        let (a, b) = (self.to_responder(iter, slot), self.to_sender(iter, slot));
        if sender {
            (a, b)
        } else {
            (b, a)
        }
    }
    /// Rounds of `window` slots the read protocols run: one per iteration for a stream, the
    /// reads of a pingpong spread over them.
    pub fn read_rounds(&self, stream: bool) -> u64 {
        let n = self.warmup + self.iters;
        if stream {
            n
        } else {
            n.div_ceil(self.window as u64)
        }
    }
}

/// Ping-pong of send/recv or write: one message each way per iteration, on two alternating
/// slots, so each side verifies the message it just received while the next is on the wire.
pub struct Pingpong<'a> {
    link: &'a mut Link,
    s: Step,
    kind: P2pKind,
    sender: bool,
    /// Small sends go by `fi_inject` (no completion to reap), as fi_pingpong does.
    inject: bool,
}

impl<'a> Pingpong<'a> {
    pub fn new(
        link: &'a mut Link,
        s: Step,
        kind: P2pKind,
        sender: bool,
    ) -> Result<Self, BenchError> {
        let inject = kind == P2pKind::SendRecv && link.can_inject(s.size);
        if s.verify {
            link.fill_out(0, s.seeds(sender, 0, 0).0)?;
        }
        if kind == P2pKind::SendRecv && !sender {
            link.post(Op::Recv(0), s.size, None)?;
        }
        Ok(Pingpong {
            link,
            s,
            kind,
            sender,
            inject,
        })
    }

    /// Sends (or writes) slot `slot` of iteration `i` to the peer.
    fn send(&mut self, i: u64, slot: usize) -> Result<(), BenchError> {
        match self.kind {
            P2pKind::Write => {
                self.link
                    .post(Op::Write(slot), self.s.size, Some(write_data(i, slot)))
            }
            _ if self.inject => self.link.inject(slot, self.s.size),
            _ => self.link.post(Op::Send(slot), self.s.size, None),
        }
    }

    /// Reaps our own send's (or write's) completion.
    fn reap(&mut self, slot: usize) -> Result<(), BenchError> {
        match self.kind {
            P2pKind::Write => self.link.wait_for(Op::Write(slot)),
            _ if self.inject => Ok(()),
            _ => self.link.wait_for(Op::Send(slot)),
        }
    }

    /// Waits for the peer's message of iteration `i` in slot `slot`.
    fn receive(&mut self, i: u64, slot: usize) -> Result<(), BenchError> {
        match self.kind {
            // Every stripe of a write carries the same CQ data: count them all.
            P2pKind::Write => self.link.wait_data(write_data(i, slot), self.s.size),
            _ => self.link.wait_for(Op::Recv(slot)),
        }?;
        self.link.mesh.settle()
    }
}

impl Rounds for Pingpong<'_> {
    fn prepare(&mut self, i: u64) -> Result<(), BenchError> {
        let slot = (i % 2) as usize;
        if self.sender && self.kind == P2pKind::SendRecv {
            self.link.post(Op::Recv(slot), self.s.size, None)?;
        }
        Ok(())
    }

    fn body(&mut self, i: u64) -> Result<(), BenchError> {
        let slot = (i % 2) as usize;
        if self.sender {
            // The reply proves the message arrived: the round trip ends there. Our own send
            // completion is bookkeeping (on shm it can wait for the peer's next CQ poll, after
            // the peer's verification), so `check` reaps it, outside the clock.
            self.send(i, slot)?;
            return self.receive(i, slot);
        }
        self.receive(i, slot)?;
        let next = 1 - slot;
        if self.kind == P2pKind::SendRecv && i + 1 < self.s.warmup + self.s.iters {
            // The next receive goes up before the reply, so the sender's next message never
            // arrives unexpected.
            self.link.post(Op::Recv(next), self.s.size, None)?;
        }
        self.send(i, slot)?;
        // Verify only once the reply has left (on shm: once the sender pulled it), so our
        // verification never competes with the reply's copy inside the sender's timing.
        self.reap(slot)
    }

    fn check(&mut self, i: u64) -> Result<u64, BenchError> {
        let slot = (i % 2) as usize;
        if self.sender {
            self.reap(slot)?;
        }
        if !self.s.verify {
            return Ok(0);
        }
        let errors = (self.link).check_inbox(slot, self.s.seeds(self.sender, i, slot).1);
        let next = 1 - slot;
        (self.link).fill_out(next, self.s.seeds(self.sender, i + 1, next).0)?;
        Ok(errors)
    }

    fn timed_from_here(&mut self) {
        self.link.mesh.count_from_now(true);
    }
}

/// Stream of send/recv or write: the sender times a window from its first post until the
/// responder's ACK says every message landed; filling, READY and verification are untimed.
pub struct Stream<'a> {
    link: &'a mut Link,
    s: Step,
    kind: P2pKind,
    sender: bool,
    /// Per window position: completions (stripes for writes) seen this window.
    seen: Vec<usize>,
    /// Receives of the wrong length this window.
    short: u64,
}

impl<'a> Stream<'a> {
    pub fn new(link: &'a mut Link, s: Step, kind: P2pKind, sender: bool) -> Self {
        let seen = vec![0; s.window];
        Stream {
            link,
            s,
            kind,
            sender,
            seen,
            short: 0,
        }
    }

    /// The responder's side of the window's data: every receive, or every stripe's CQ data of
    /// every write, each position exactly once (in whatever order the rails deliver).
    fn collect(&mut self, win: u64) -> Result<(), BenchError> {
        self.seen.fill(0);
        let (window, size) = (self.s.window, self.s.size);
        if self.kind == P2pKind::SendRecv {
            for _ in 0..window {
                match self.link.wait()? {
                    Completion {
                        ctx: Op::Recv(p),
                        len,
                    } if p < window && self.seen[p] == 0 => {
                        self.seen[p] = 1;
                        self.short += u64::from(len != size);
                    }
                    other => return Err(unexpected(other, "a receive of the window")),
                }
            }
            return Ok(());
        }
        let stripes = self.link.stripes(size);
        for _ in 0..window * stripes {
            let data = self.link.wait_remote_data()?;
            let (w, pos) = ((data >> 16) % ITER_MOD, (data & 0xFFFF) as usize);
            if w != win % ITER_MOD || pos >= window || self.seen[pos] == stripes {
                return Err(BenchError::failed(format!(
                    "window {win}: unexpected remote CQ data {data:#x} (window {w}, position {pos}); \
                     a write was duplicated, lost or belongs to another window"
                )));
            }
            self.seen[pos] += 1;
        }
        Ok(())
    }
}

impl Rounds for Stream<'_> {
    fn prepare(&mut self, win: u64) -> Result<(), BenchError> {
        if !self.sender {
            return Ok(());
        }
        if self.s.verify {
            for slot in 0..self.s.slots {
                (self.link).fill_out(slot, self.s.to_responder(win, slot))?;
            }
        }
        self.link.expect_ctrl(Kind::Ready, win)
    }

    fn body(&mut self, win: u64) -> Result<(), BenchError> {
        let (size, window) = (self.s.size, self.s.window);
        if self.sender {
            for slot in 0..window {
                match self.kind {
                    P2pKind::Write => {
                        self.link
                            .post(Op::Write(slot), size, Some(write_data(win, slot)))
                    }
                    _ => self.link.post(Op::Send(slot), size, None),
                }?;
            }
            match self.kind {
                P2pKind::Write => self.link.wait_all(window, Op::Write(0)),
                _ => self.link.wait_all(window, Op::Send(0)),
            }?;
            return self.link.expect_ctrl(Kind::Ack, win);
        }
        if self.kind == P2pKind::SendRecv {
            for slot in 0..window {
                self.link.post(Op::Recv(slot), size, None)?;
            }
        }
        self.link.send_ctrl(Kind::Ready, win)?;
        self.collect(win)?;
        // The ACK ends the sender's clock: the data must be in place, not queued.
        self.link.mesh.settle()?;
        self.link.send_ctrl(Kind::Ack, win)
    }

    fn check(&mut self, win: u64) -> Result<u64, BenchError> {
        let mut errors = std::mem::take(&mut self.short);
        if self.s.verify && !self.sender {
            for slot in 0..self.s.slots {
                errors += (self.link).check_inbox(slot, self.s.to_responder(win, slot));
            }
        }
        Ok(errors)
    }

    fn timed_from_here(&mut self) {
        self.link.mesh.count_from_now(true);
    }
}

/// Read, both variants, on the reader (rank 0): the responder exposes `window` slots of fresh
/// data per round; the reader reads them one at a time (pingpong: an iteration is one read) or
/// all at once (stream: an iteration is a round).
pub struct ReadSender<'a> {
    pub link: &'a mut Link,
    pub s: Step,
    pub stream: bool,
}

impl ReadSender<'_> {
    /// Round of iteration `i`, and its position in the round.
    fn at(&self, i: u64) -> (u64, usize) {
        if self.stream {
            (i, 0)
        } else {
            (
                i / self.s.window as u64,
                (i % self.s.window as u64) as usize,
            )
        }
    }
}

impl Rounds for ReadSender<'_> {
    fn prepare(&mut self, i: u64) -> Result<(), BenchError> {
        match self.at(i) {
            (round, 0) => self.link.expect_ctrl(Kind::Ready, round),
            _ => Ok(()),
        }
    }

    fn body(&mut self, i: u64) -> Result<(), BenchError> {
        let size = self.s.size;
        if self.stream {
            for slot in 0..self.s.window {
                self.link.post(Op::Read(slot), size, None)?;
            }
            self.link.wait_all(self.s.window, Op::Read(0))?;
        } else {
            let slot = self.at(i).1;
            self.link.post(Op::Read(slot), size, None)?;
            self.link.wait_for(Op::Read(slot))?;
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
                errors += (self.link).check_inbox(slot, self.s.to_sender(round, slot));
            }
        }
        self.link.send_ctrl(Kind::Ack, round)?;
        Ok(errors)
    }

    fn timed_from_here(&mut self) {
        self.link.mesh.count_from_now(true);
    }
}

/// Read, the responder's side: an iteration is a round (fresh data, READY, wait for DONE).
pub struct ReadResponder<'a> {
    pub link: &'a mut Link,
    pub s: Step,
}

impl Rounds for ReadResponder<'_> {
    fn prepare(&mut self, round: u64) -> Result<(), BenchError> {
        if self.s.verify {
            for slot in 0..self.s.slots {
                (self.link).fill_out(slot, self.s.to_sender(round, slot))?;
            }
        }
        Ok(())
    }

    fn body(&mut self, round: u64) -> Result<(), BenchError> {
        self.link.send_ctrl(Kind::Ready, round)?;
        self.link.expect_ctrl(Kind::Ack, round)
    }
}
