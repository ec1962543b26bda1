//! The tracked pair ([`Link`]): a [`Mesh`] used as a pair, one peer at a time, as the
//! point-to-point benchmarks use it (the lean ping-pong's view is [`super::LeanStep`]). The mesh
//! owns the rails, the registered buffers (`send` is what this rank sends, writes or exposes for
//! reads; `recv` is where receives, peers' writes and our reads land),
//! tracked messages ([`Done`]), control words and every wait (health, `--timeout`); a [`Link`]
//! adds the peer of the step, window slots and routes by message number.
//!
//! Payload buffers are cut into `slots` slots of the current message size; message `pos` of a
//! window uses slot `pos % slots` on both sides, so both know where every payload must be without
//! telling each other, and the buffer footprint stays bounded however large the window
//! (`--footprint`): slots reused within a window carry the same pattern, so verification stays
//! exact. Both sides derive the route of a message from its number ([`Mesh::route_nth`]): the
//! k-th send a rank posts meets the k-th receive its peer posts (both count per step), a
//! write's or read's route is the poster's own count.

use super::{Completion, Done, Kind, Lane, Mesh, Remote, Request, Route, Verb, MAX_INDEX};
use crate::error::BenchError;

/// The mesh, the peer of the current step, and the step's slots and message counters.
pub struct Link {
    pub mesh: Mesh,
    /// The step's peer, resolved once per step.
    lane: Lane,
    /// The route of every message of the step when it does not depend on the message's number
    /// (one rail), built once per step.
    fixed: Option<Route>,
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
            lane: Lane::default(),
            fixed: None,
            size: 0,
            slots: 1,
            sends: 0,
            recvs: 0,
            rmas: 0,
        }
    }

    /// Starts a step against `peer`: message size, buffer slots in use, fresh route counters.
    /// What stays the same for every post of the step is checked here, once: the peer is
    /// connected (its addresses and regions on every rail), and every slot fits both buffers.
    pub fn begin_step(&mut self, peer: u32, size: usize, slots: usize) -> Result<(), BenchError> {
        let slots = slots.max(1);
        let room = self.mesh.send_bytes().min(self.mesh.recv_bytes());
        if slots.checked_mul(size).is_none_or(|b| b > room) {
            return Err(BenchError::failed(format!(
                "{slots} slots of {size} bytes do not fit the {room}-byte buffers"
            )));
        }
        self.lane = self.mesh.lane(peer)?;
        self.fixed = (self.mesh.rails() == 1).then(|| self.mesh.route_nth(0, size));
        (self.size, self.slots) = (size, slots);
        (self.sends, self.recvs, self.rmas) = (0, 0, 0);
        self.mesh.count_from_now(false);
        Ok(())
    }

    /// The step's peer.
    fn peer(&self) -> u32 {
        self.lane.rank()
    }

    /// Posts operation `op` of the step's size at position `pos`'s slot, on both sides, tracked
    /// as (`op`, `pos`); every stripe of a write carries `data` as remote CQ data when given.
    #[inline(always)]
    pub fn post(&mut self, op: Verb, pos: usize, data: Option<u64>) -> Result<(), BenchError> {
        self.post_as(op, pos, data, Completion::Tracked(pos))
    }

    /// Sends position `pos` of `send` by `fi_inject`: no completion follows.
    // Apart from `post`, so that each call site knows at compile time whether it injects (a
    // run-time flag cost about 30 instructions per 8-byte inject: the tracking and the flags no
    // longer folded away).
    #[inline(always)]
    pub fn inject(&mut self, pos: usize) -> Result<(), BenchError> {
        self.post_as(Verb::Send, pos, None, Completion::Inject)
    }

    #[inline(always)]
    fn post_as(
        &mut self,
        op: Verb,
        pos: usize,
        data: Option<u64>,
        completion: Completion,
    ) -> Result<(), BenchError> {
        if pos >= MAX_INDEX {
            return Err(beyond(pos));
        }
        // In both buffers for any position: `begin_step` checked that every slot fits.
        let base = (pos % self.slots) * self.size;
        let counter = match op {
            Verb::Send => &mut self.sends,
            Verb::Recv => &mut self.recvs,
            Verb::Write | Verb::Read | Verb::Signal => &mut self.rmas,
        };
        let n = std::mem::replace(counter, *counter + 1);
        let numbered;
        let route = match &self.fixed {
            Some(r) => r,
            None => {
                numbered = self.mesh.route_nth(n, self.size);
                &numbered
            }
        };
        self.mesh.submit(Request {
            op,
            peer: Remote::Lane(&self.lane),
            local: base,
            remote: base,
            route: route.stripes(),
            data,
            completion,
        })
    }

    /// Writes the pattern of `seed` into buffer slot `slot` of `send`.
    pub fn fill_out(&mut self, slot: usize, seed: u64) -> Result<(), BenchError> {
        self.mesh.fill_send(slot * self.size, self.size, seed)
    }

    /// Words of buffer slot `slot` of `recv` that differ from the pattern of `seed`.
    pub fn check_inbox(&mut self, slot: usize, seed: u64) -> u64 {
        self.mesh.check_recv(slot * self.size, self.size, seed)
    }

    /// The step's message size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Stripes a message of the step is cut into.
    pub fn stripes(&self) -> usize {
        self.mesh.stripe_count(self.size)
    }

    // The mesh's control words and waits, with the step's peer.

    pub fn send_ctrl(&mut self, kind: Kind, window: u64) -> Result<(), BenchError> {
        self.mesh.send_signal(self.peer(), kind, window)
    }

    pub fn expect_ctrl(&mut self, kind: Kind, window: u64) -> Result<(), BenchError> {
        self.mesh.expect_signal(self.peer(), kind, window)
    }

    pub fn wait(&mut self) -> Result<Done, BenchError> {
        self.mesh.next_op(self.peer())
    }

    pub fn wait_for(&mut self, op: Verb, index: usize) -> Result<(), BenchError> {
        self.mesh.wait_op(op, index, self.peer())
    }

    pub fn wait_all(&mut self, n: usize, op: Verb) -> Result<(), BenchError> {
        self.mesh.wait_ops(n, op, self.peer())
    }

    pub fn wait_remote_data(&mut self) -> Result<u64, BenchError> {
        self.mesh.wait_payload(self.peer())
    }

    /// The peer's whole answer (every stripe) must carry `data`.
    pub fn wait_data(&mut self, data: u64) -> Result<(), BenchError> {
        let stripes = self.stripes();
        self.mesh.expect_payload(self.peer(), data, stripes)
    }
}

#[cold]
fn beyond(pos: usize) -> BenchError {
    BenchError::failed(format!("window position {pos} is beyond {MAX_INDEX}"))
}
