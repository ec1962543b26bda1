//! The six point-to-point protocols (send/recv, write, read × pingpong, stream), each as a pair:
//! what rank 0 (the sender, who times) does and what the measured peer (the responder) does.
//!
//! Everything here talks to a [`Link`]: one endpoint pair with an `out` buffer (what this rank
//! sends, writes, or exposes for reads) and an `inbox` (where receives, remote writes and read
//! results land), both split into slots of the current message size.

use std::time::Instant;

use super::link::{unexpected, Completion, Ctx, Link};
use crate::pattern;
use crate::stats::Samples;
use crate::BenchError;

/// What one side of a protocol produced.
#[derive(Debug, Default)]
pub struct Outcome {
    /// One sample per timed iteration (empty on the responder).
    pub samples: Samples,
    /// Payload words that failed verification on this side.
    pub errors: u64,
}

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
    fn seed_to_responder(&self, iter: u64, slot: usize) -> u64 {
        pattern::seed(iter, self.sender, self.responder, slot as u32)
    }
    fn seed_to_sender(&self, iter: u64, slot: usize) -> u64 {
        pattern::seed(iter, self.responder, self.sender, slot as u32)
    }
}

/// Control words: which window they belong to and what they say.
const READY: u64 = 1 << 62;
const ACK: u64 = 2 << 62;
const DONE: u64 = 3 << 62;

fn expect_ctrl(link: &mut Link, tag: u64, window: u64) -> Result<(), BenchError> {
    let w = link.wait_ctrl()?;
    if w != tag | window {
        return Err(BenchError::failed(format!(
            "expected control word {:#x} for window {window}, got {w:#x}; the peer is out of step \
             (are both ranks running the same efabench version and options?)",
            tag | window
        )));
    }
    Ok(())
}

/// CQ data of a write: window and slot in 32 bits (EFA's CQ data is 4 bytes wide).
fn write_data(window: u64, slot: usize) -> u64 {
    ((window & 0xFFFF) << 16) | (slot as u64 & 0xFFFF)
}

// ---------------------------------------------------------------- send/recv

pub fn sendrecv_pingpong_sender(link: &mut Link, s: &Step) -> Result<Outcome, BenchError> {
    let mut out = Outcome {
        samples: Samples::with_capacity(s.iters as usize),
        errors: 0,
    };
    let total = s.warmup + s.iters;
    let inject = link.can_inject(s.size);
    if s.verify {
        link.fill_out(0, s.size, s.seed_to_responder(0, 0));
    }
    for i in 0..total {
        if i == s.warmup {
            link.mark_timed();
        }
        let slot = (i % 2) as usize;
        link.post_recv(slot, s.size, Ctx::Recv(slot))?;
        let t0 = Instant::now();
        if inject {
            link.inject(slot, s.size)?;
            link.wait_for(&[Ctx::Recv(slot)])?;
        } else {
            link.post_send(slot, s.size, Ctx::Send(slot))?;
            link.wait_for(&[Ctx::Recv(slot)])?;
        }
        link.settle()?;
        // The reply proves the message arrived: the round trip ends here. Our own send
        // completion is bookkeeping (on shm it can wait for the peer's next CQ poll, which comes
        // after the peer's verification), so it is reaped outside the timed interval.
        let dt = t0.elapsed().as_nanos() as u64;
        if !inject {
            link.wait_for(&[Ctx::Send(slot)])?;
        }
        if i >= s.warmup {
            out.samples.push(dt);
        }
        if s.verify {
            out.errors += link.check_inbox(slot, s.size, s.seed_to_sender(i, slot));
            let next = ((i + 1) % 2) as usize;
            link.fill_out(next, s.size, s.seed_to_responder(i + 1, next));
        }
    }
    Ok(out)
}

pub fn sendrecv_pingpong_responder(link: &mut Link, s: &Step) -> Result<Outcome, BenchError> {
    let mut out = Outcome::default();
    let total = s.warmup + s.iters;
    let inject = link.can_inject(s.size);
    if s.verify {
        link.fill_out(0, s.size, s.seed_to_sender(0, 0));
    }
    link.post_recv(0, s.size, Ctx::Recv(0))?;
    for i in 0..total {
        let slot = (i % 2) as usize;
        link.wait_for(&[Ctx::Recv(slot)])?;
        link.settle()?;
        let next = ((i + 1) % 2) as usize;
        if i + 1 < total {
            // Post the next receive before replying, so the sender's next message never arrives
            // unexpected.
            link.post_recv(next, s.size, Ctx::Recv(next))?;
        }
        if inject {
            link.inject(slot, s.size)?;
        } else {
            link.post_send(slot, s.size, Ctx::Send(slot))?;
            // Verify only once the reply has left (on shm: once the sender has pulled it), so
            // our verification never competes with the reply's copy inside the sender's timing.
            link.wait_for(&[Ctx::Send(slot)])?;
        }
        if s.verify {
            out.errors += link.check_inbox(slot, s.size, s.seed_to_responder(i, slot));
            link.fill_out(next, s.size, s.seed_to_sender(i + 1, next));
        }
    }
    Ok(out)
}

/// Stream, sender side, for both send/recv and write: fill the window (untimed), wait for the
/// responder's READY, then time from the first post until its ACK says every message landed.
fn stream_sender(
    link: &mut Link,
    s: &Step,
    mut post: impl FnMut(&mut Link, u64, usize) -> Result<(), BenchError>,
    wait_local: impl Fn(&mut Link, usize) -> Result<(), BenchError>,
) -> Result<Outcome, BenchError> {
    let mut out = Outcome {
        samples: Samples::with_capacity(s.iters as usize),
        errors: 0,
    };
    for win in 0..s.warmup + s.iters {
        if win == s.warmup {
            link.mark_timed();
        }
        if s.verify {
            for slot in 0..s.slots {
                link.fill_out(slot, s.size, s.seed_to_responder(win, slot));
            }
        }
        link.post_ctrl_recv()?;
        expect_ctrl(link, READY, win)?;
        link.post_ctrl_recv()?;
        let t0 = Instant::now();
        for slot in 0..s.window {
            post(link, win, slot)?;
        }
        wait_local(link, s.window)?;
        expect_ctrl(link, ACK, win)?;
        let dt = t0.elapsed().as_nanos() as u64;
        if win >= s.warmup {
            out.samples.push(dt);
        }
    }
    Ok(out)
}

pub fn sendrecv_stream_sender(link: &mut Link, s: &Step) -> Result<Outcome, BenchError> {
    stream_sender(
        link,
        s,
        |l, _, slot| l.post_send(slot, s.size, Ctx::Send(slot)),
        |l, n| l.wait_all_sends(n),
    )
}

pub fn sendrecv_stream_responder(link: &mut Link, s: &Step) -> Result<Outcome, BenchError> {
    let mut out = Outcome::default();
    for win in 0..s.warmup + s.iters {
        for slot in 0..s.window {
            link.post_recv(slot, s.size, Ctx::Recv(slot))?;
        }
        link.send_ctrl(READY | win)?;
        let mut seen = vec![false; s.window];
        for _ in 0..s.window {
            match link.wait()? {
                Completion {
                    ctx: Ctx::Recv(slot),
                    len,
                    ..
                } if slot < s.window && !seen[slot] => {
                    seen[slot] = true;
                    if len != s.size {
                        out.errors += 1;
                    }
                }
                other => return Err(unexpected(other, "a receive of the window")),
            }
        }
        // The ACK ends the sender's clock: the data must be in place, not queued.
        link.settle()?;
        link.send_ctrl(ACK | win)?;
        if s.verify {
            for slot in 0..s.slots {
                out.errors += link.check_inbox(slot, s.size, s.seed_to_responder(win, slot));
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------- write

pub fn write_pingpong_sender(link: &mut Link, s: &Step) -> Result<Outcome, BenchError> {
    let mut out = Outcome {
        samples: Samples::with_capacity(s.iters as usize),
        errors: 0,
    };
    let total = s.warmup + s.iters;
    if s.verify {
        link.fill_out(0, s.size, s.seed_to_responder(0, 0));
    }
    for i in 0..total {
        if i == s.warmup {
            link.mark_timed();
        }
        let slot = (i % 2) as usize;
        let t0 = Instant::now();
        link.post_write(slot, s.size, Some(write_data(i, slot)), Ctx::Write(slot))?;
        // The peer's answer ends the round trip; our write's local completion is reaped after.
        link.wait_data(write_data(i, slot), s.size)?;
        link.settle()?;
        let dt = t0.elapsed().as_nanos() as u64;
        link.wait_for(&[Ctx::Write(slot)])?;
        if i >= s.warmup {
            out.samples.push(dt);
        }
        if s.verify {
            out.errors += link.check_inbox(slot, s.size, s.seed_to_sender(i, slot));
            let next = ((i + 1) % 2) as usize;
            link.fill_out(next, s.size, s.seed_to_responder(i + 1, next));
        }
    }
    Ok(out)
}

pub fn write_pingpong_responder(link: &mut Link, s: &Step) -> Result<Outcome, BenchError> {
    let mut out = Outcome::default();
    let total = s.warmup + s.iters;
    if s.verify {
        link.fill_out(0, s.size, s.seed_to_sender(0, 0));
    }
    for i in 0..total {
        let slot = (i % 2) as usize;
        // Every stripe of the write carries the same CQ data: count them all.
        for _ in 0..link.stripes(s.size) {
            let data = link.wait_remote_data()?;
            if data != write_data(i, slot) {
                return Err(BenchError::failed(format!(
                    "write {i}: remote CQ data {data:#x}, expected {:#x}; a write was lost or reordered",
                    write_data(i, slot)
                )));
            }
        }
        link.settle()?;
        link.post_write(slot, s.size, Some(write_data(i, slot)), Ctx::Write(slot))?;
        // As in send/recv: verify once our answer is on its way, not while it is being copied.
        link.wait_for(&[Ctx::Write(slot)])?;
        if s.verify {
            out.errors += link.check_inbox(slot, s.size, s.seed_to_responder(i, slot));
            let next = ((i + 1) % 2) as usize;
            link.fill_out(next, s.size, s.seed_to_sender(i + 1, next));
        }
    }
    Ok(out)
}

pub fn write_stream_sender(link: &mut Link, s: &Step) -> Result<Outcome, BenchError> {
    stream_sender(
        link,
        s,
        |l, win, slot| l.post_write(slot, s.size, Some(write_data(win, slot)), Ctx::Write(slot)),
        |l, n| l.wait_all_writes(n),
    )
}

pub fn write_stream_responder(link: &mut Link, s: &Step) -> Result<Outcome, BenchError> {
    let mut out = Outcome::default();
    for win in 0..s.warmup + s.iters {
        link.send_ctrl(READY | win)?;
        // Count the remote CQ data of every stripe of every write of the window: each
        // position exactly `stripes` times, whatever order the rails deliver them in.
        let stripes = link.stripes(s.size);
        let mut seen = vec![0usize; s.window];
        for _ in 0..s.window * stripes {
            let data = link.wait_remote_data()?;
            let (w, pos) = (data >> 16, (data & 0xFFFF) as usize);
            if w != win & 0xFFFF || pos >= s.window || seen[pos] == stripes {
                return Err(BenchError::failed(format!(
                    "window {win}: unexpected remote CQ data {data:#x} (window {w}, position {pos}); \
                     a write was duplicated, lost or belongs to another window"
                )));
            }
            seen[pos] += 1;
        }
        // The ACK ends the sender's clock: the data must be in place, not queued.
        link.settle()?;
        link.send_ctrl(ACK | win)?;
        if s.verify {
            for slot in 0..s.slots {
                out.errors += link.check_inbox(slot, s.size, s.seed_to_responder(win, slot));
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------- read

/// Read, both variants: the responder exposes `window` slots of fresh data per round; the sender
/// reads them one at a time (pingpong, each read timed) or all at once (stream, the round timed).
pub fn read_sender(link: &mut Link, s: &Step, stream: bool) -> Result<Outcome, BenchError> {
    let mut out = Outcome {
        samples: Samples::with_capacity(s.iters as usize),
        errors: 0,
    };
    let rounds = read_rounds(s, stream);
    let mut timed_left = s.iters;
    let mut warm_left = s.warmup;
    let mut marked = false;
    let mut mark = |link: &mut Link, warm_left: u64| {
        if warm_left == 0 && !marked {
            marked = true;
            link.mark_timed();
        }
    };
    for round in 0..rounds {
        link.post_ctrl_recv()?;
        expect_ctrl(link, READY, round)?;
        // Slots of this round that were read (all of them, except in pingpong's last round).
        let mut used = s.window;
        if stream {
            mark(link, warm_left);
            let t0 = Instant::now();
            for slot in 0..s.window {
                link.post_read(slot, s.size, Ctx::Read(slot))?;
            }
            link.wait_all_reads(s.window)?;
            link.settle()?;
            let dt = t0.elapsed().as_nanos() as u64;
            if warm_left > 0 {
                warm_left -= 1;
            } else {
                out.samples.push(dt);
            }
        } else {
            for slot in 0..s.window {
                if warm_left == 0 && timed_left == 0 {
                    used = slot;
                    break;
                }
                mark(link, warm_left);
                let t0 = Instant::now();
                link.post_read(slot, s.size, Ctx::Read(slot))?;
                link.wait_for(&[Ctx::Read(slot)])?;
                link.settle()?;
                let dt = t0.elapsed().as_nanos() as u64;
                if warm_left > 0 {
                    warm_left -= 1;
                } else {
                    out.samples.push(dt);
                    timed_left -= 1;
                }
            }
        }
        if s.verify {
            for slot in 0..used.min(s.slots) {
                out.errors += link.check_inbox(slot, s.size, s.seed_to_sender(round, slot));
            }
        }
        link.send_ctrl(DONE | round)?;
    }
    Ok(out)
}

pub fn read_responder(link: &mut Link, s: &Step, stream: bool) -> Result<Outcome, BenchError> {
    for round in 0..read_rounds(s, stream) {
        if s.verify {
            for slot in 0..s.slots {
                link.fill_out(slot, s.size, s.seed_to_sender(round, slot));
            }
        }
        link.post_ctrl_recv()?;
        link.send_ctrl(READY | round)?;
        expect_ctrl(link, DONE, round)?;
    }
    Ok(Outcome::default())
}

/// Rounds of `window` slots: stream rounds are iterations; pingpong spreads its reads over them.
fn read_rounds(s: &Step, stream: bool) -> u64 {
    if stream {
        s.warmup + s.iters
    } else {
        (s.warmup + s.iters).div_ceil(s.window as u64)
    }
}
