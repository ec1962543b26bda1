//! The point-to-point benchmarks' view of the endpoints: a [`Mesh`] used as a pair, one peer at
//! a time. The mesh owns the rails, the registered buffers (`send` is what this rank sends,
//! writes or exposes for reads; `recv` is where receives, peers' writes and our reads land),
//! completion accounting and every wait (health, `--timeout`); a [`Link`] adds only what the
//! point-to-point protocols need on top: window slots, routes by message number, and control
//! words.
//!
//! Payload buffers are cut into `slots` slots of the current message size; message `pos` of a
//! window uses slot `pos % slots` on both sides, so both know where every payload must be without
//! telling each other, and the buffer footprint stays bounded however large the window
//! (`--footprint`): slots reused within a window carry the same pattern, so verification stays
//! exact.
//!
//! # Routes and control words
//! Both sides derive the route of a message from its number ([`Mesh::route_nth`]): the k-th
//! send a rank posts meets the k-th receive its peer posts (both count per step), a write's or
//! read's route is the poster's own count. A message completes once every stripe has (the mesh
//! tracks it). Control words are the mesh's signals (an 8-byte write with CQ data into the
//! peer's control region), so they never meet a posted payload receive.

use crate::error::BenchError;
use crate::mesh::{cq_data, parse_cq_data, Account, Done, Kind, Mesh, Post};

// `ep` and the collectives' setup name the payload type through this path.
pub use crate::mesh::Payload;

/// Which operation a completion belongs to, and on which window position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    Send(usize),
    Recv(usize),
    Write(usize),
    Read(usize),
}

/// Most positions a context may name (the largest `--window`).
pub const MAX_POS: usize = 4096;

impl Ctx {
    /// The mesh's tag of this operation: kind and position.
    #[inline]
    fn tag(self) -> u32 {
        let (k, pos) = match self {
            Ctx::Send(p) => (0, p),
            Ctx::Recv(p) => (1, p),
            Ctx::Write(p) => (2, p),
            Ctx::Read(p) => (3, p),
        };
        (k * MAX_POS + pos % MAX_POS) as u32
    }

    fn from_tag(t: u32) -> Ctx {
        let (k, pos) = (t as usize / MAX_POS, t as usize % MAX_POS);
        [Ctx::Send, Ctx::Recv, Ctx::Write, Ctx::Read][k.min(3)](pos)
    }

    fn pos(self) -> usize {
        match self {
            Ctx::Send(p) | Ctx::Recv(p) | Ctx::Write(p) | Ctx::Read(p) => p,
        }
    }
}

/// A local completion the protocols care about (every stripe of the message completed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub ctx: Ctx,
    pub len: usize,
}

/// A completion that the protocol did not expect at this point.
pub fn unexpected(c: Completion, wanted: &str) -> BenchError {
    BenchError::failed(format!(
        "expected {wanted}, got a completion of {:?} ({} bytes)",
        c.ctx, c.len
    ))
}

/// The CQ data of a write of window position `pos` in window `window`.
pub fn write_data(window: u64, pos: usize) -> u64 {
    cq_data(Kind::Payload, window, pos as u32)
}

/// The mesh, the peer of the current step, and the step's slots and message counters.
pub struct Link {
    pub mesh: Mesh,
    peer: u32,
    /// Current message size and the number of buffer slots in use.
    size: usize,
    slots: usize,
    /// Messages posted this step, per direction: the route of the next one.
    sends: u64,
    recvs: u64,
    rmas: u64,
}

impl Link {
    /// A pair on `mesh`; its waits spin (a latency benchmark keeps its core).
    pub fn new(mut mesh: Mesh) -> Self {
        mesh.set_spin(true);
        Link {
            mesh,
            peer: 0,
            size: 0,
            slots: 1,
            sends: 0,
            recvs: 0,
            rmas: 0,
        }
    }

    /// Starts a step against `peer`: message size, buffer slots in use, fresh route counters.
    pub fn begin_step(&mut self, peer: u32, size: usize, slots: usize) {
        (self.peer, self.size, self.slots) = (peer, size, slots.max(1));
        (self.sends, self.recvs, self.rmas) = (0, 0, 0);
        self.mesh.count_from_now(false);
    }

    /// Byte offset of window position `pos` (slot `pos % slots`).
    #[inline]
    fn offset(&self, pos: usize, size: usize) -> Result<usize, BenchError> {
        let off = (pos % self.slots) * size;
        if off + size > self.mesh.send_bytes() || pos >= MAX_POS {
            return Err(BenchError::failed(format!(
                "position {pos} (slot {} of {size} bytes) is outside the {}-byte buffer or \
                 beyond window {MAX_POS}",
                pos % self.slots,
                self.mesh.send_bytes()
            )));
        }
        Ok(off)
    }

    /// Posts operation `ctx` of `size` bytes at its position's slot, on both sides (a write
    /// lands at the same slot of the peer's `recv`, a read reads the same slot of its `send`);
    /// every stripe of a write carries `data` as remote CQ data when given.
    #[inline(always)]
    pub fn post(&mut self, ctx: Ctx, size: usize, data: Option<u64>) -> Result<(), BenchError> {
        self.post_as(ctx, size, data, false)
    }

    /// Sends position `pos` of `send` by `fi_inject`: no completion follows.
    #[inline(always)]
    pub fn inject(&mut self, pos: usize, size: usize) -> Result<(), BenchError> {
        self.post_as(Ctx::Send(pos), size, None, true)
    }

    // Inlined into each call site, where the operation is known: the matches on it fold away
    // (a run-time dispatch per post showed in the 8-byte ping-pong).
    #[inline(always)]
    fn post_as(
        &mut self,
        ctx: Ctx,
        size: usize,
        data: Option<u64>,
        inject: bool,
    ) -> Result<(), BenchError> {
        let base = self.offset(ctx.pos(), size)?;
        let counter = match ctx {
            Ctx::Send(_) => &mut self.sends,
            Ctx::Recv(_) => &mut self.recvs,
            Ctx::Write(_) | Ctx::Read(_) => &mut self.rmas,
        };
        let n = std::mem::replace(counter, *counter + 1);
        let route = self.mesh.route_nth(n, size);
        let acct = if inject {
            Account::Inject
        } else {
            self.mesh.track(ctx.tag(), route.stripes().len());
            Account::Tag(ctx.tag())
        };
        let peer = self.peer;
        for &(rail, o, len) in route.stripes() {
            let (off, remote_off) = (base + o, base + o);
            let op = match ctx {
                Ctx::Send(_) => Post::Send {
                    peer,
                    off,
                    len,
                    data: None,
                },
                Ctx::Recv(_) => Post::Recv { index: 0, off, len },
                Ctx::Write(_) => Post::Write {
                    peer,
                    off,
                    len,
                    remote_off,
                    data,
                },
                Ctx::Read(_) => Post::Read {
                    peer,
                    off,
                    len,
                    remote_off,
                },
            };
            self.mesh.post(rail, op, acct)?;
        }
        Ok(())
    }

    /// Writes the pattern of `seed` into buffer slot `slot` of `send`.
    pub fn fill_out(&mut self, slot: usize, seed: u64) -> Result<(), BenchError> {
        self.mesh.fill_send(slot * self.size, self.size, seed)
    }

    /// Words of buffer slot `slot` of `recv` that differ from the pattern of `seed`.
    pub fn check_inbox(&mut self, slot: usize, seed: u64) -> u64 {
        self.mesh.check_recv(slot * self.size, self.size, seed)
    }

    // ----------------------------------------------------------------- control words

    /// Sends control word `kind` of window `window` to the peer.
    pub fn send_ctrl(&mut self, kind: Kind, window: u64) -> Result<(), BenchError> {
        let word = cq_data(kind, window, self.mesh.me());
        self.mesh.signal(self.peer, word)
    }

    /// Waits for the peer's control word, which must be `kind` of window `window`.
    pub fn expect_ctrl(&mut self, kind: Kind, window: u64) -> Result<(), BenchError> {
        let is_ctrl = |d| !matches!(parse_cq_data(d), Some((Kind::Payload, ..)));
        let got = self.wait_arrival(is_ctrl, "a control message")?;
        let want = cq_data(kind, window, self.peer);
        if got != want {
            return Err(BenchError::failed(format!(
                "expected control word {want:#x} ({kind:?} of window {window} from rank {}), got \
                 {got:#x}; the peer is out of step (are both ranks running the same efabench \
                 version and options?)",
                self.peer
            )));
        }
        Ok(())
    }

    // ----------------------------------------------------------------- waiting

    fn wait_done(&mut self, is: impl Fn(u32) -> bool, what: &str) -> Result<Done, BenchError> {
        let peer = self.peer;
        (self.mesh).wait_done(is, |_| format!("{what} from rank {peer}"))
    }

    fn wait_arrival(&mut self, is: impl Fn(u64) -> bool, what: &str) -> Result<u64, BenchError> {
        let peer = self.peer;
        (self.mesh).wait_arrival(is, |_| format!("{what} from rank {peer}"))
    }

    /// The next local completion of a whole message.
    pub fn wait(&mut self) -> Result<Completion, BenchError> {
        let d = self.wait_done(|_| true, "a completion")?;
        let ctx = Ctx::from_tag(d.tag);
        Ok(Completion { ctx, len: d.len })
    }

    /// Waits until operation `ctx` has completed.
    pub fn wait_for(&mut self, ctx: Ctx) -> Result<(), BenchError> {
        let tag = ctx.tag();
        self.wait_done(|t| t == tag, "an operation to complete")
            .map(drop)
    }

    /// Waits until `n` operations of the kind of `ctx` (any position) have completed.
    pub fn wait_all(&mut self, n: usize, ctx: Ctx) -> Result<(), BenchError> {
        let kind = ctx.tag() as usize / MAX_POS;
        for _ in 0..n {
            self.wait_done(|t| t as usize / MAX_POS == kind, "operations of the window")?;
        }
        Ok(())
    }

    /// The next remote CQ data of a payload write (a stripe of a peer's write landed in `recv`).
    pub fn wait_remote_data(&mut self) -> Result<u64, BenchError> {
        let is_payload = |d| matches!(parse_cq_data(d), Some((Kind::Payload, ..)));
        self.wait_arrival(is_payload, "a write")
    }

    /// The peer's whole answer (every stripe of one message of `size` bytes) must carry `data`
    /// (write ping-pong).
    pub fn wait_data(&mut self, data: u64, size: usize) -> Result<(), BenchError> {
        for _ in 0..self.mesh.stripe_count(size) {
            let got = self.wait_remote_data()?;
            if got != data {
                return Err(BenchError::failed(format!(
                    "the peer's answer carried CQ data {got:#x}, expected {data:#x}; a write was lost or reordered"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for c in [Ctx::Send(0), Ctx::Recv(63), Ctx::Write(7), Ctx::Read(4095)] {
            assert_eq!(Ctx::from_tag(c.tag()), c);
        }
        assert_ne!(Ctx::Send(1).tag(), Ctx::Recv(1).tag());
    }
}
