//! The lean ping-pong ([`LeanStep`]): fabtests' `fi_pingpong` loop on a mesh of one rail, for
//! `sendrecv --loop lean`. The step's peer, buffers, descriptors and the two receive contexts are
//! resolved once ([`efabench_fabric::PingPong`]); per message what is left is the libfabric call,
//! and per poll `fi_cq_read` and a comparison of the entry's context with the waited slot's.
//!
//! It is the one way onto the rails that does not go through [`Mesh::submit`]: the loop exists to
//! measure what the fabric costs without the mesh's per-request work. What tracked requests
//! ([`super::Completion::Tracked`]) and [`Mesh::wait_op`] add, and this loop does without: the route by message number, the tag and the per-tag stripe count of every posted
//! receive, sorting each completion by its context kind into the done queue and finding the
//! waited message there, the per-rail byte counts per post (counted here once per step: one
//! inject per iteration) and the progress tick per completion (the timed loop ticks every
//! [`crate::harness::CHECK_EVERY`] iterations).
//!
//! What it keeps: every wait checks the job's health and `--timeout` after [`EMPTY_POLLS`] empty
//! polls, as [`Mesh::wait_until`] does (a dead or frozen peer ends it, named); an error
//! completion fails the step with its cause; a receive of the wrong length fails it; payloads
//! are filled and verified with the same pattern, outside the timed body.

use std::time::{Duration, Instant};

use efabench_bootstrap::Health;
use efabench_fabric::PingPong;

use super::buffers::{fill, mismatches};
use super::wait::idle_check;
use super::{Lane, Mesh, MeshResult, Payload, RailStats, EMPTY_POLLS};
use crate::error::BenchError;
use crate::pattern;

/// One step of the lean ping-pong with one peer: `size`-byte messages alternating between
/// slots 0 and 1 (bytes `0..size` and `size..2*size` of both buffers). Borrows the mesh.
pub struct LeanStep<'m> {
    pair: PingPong<'m>,
    health: &'m Health,
    timeout: Duration,
    me: u32,
    peer: u32,
    size: usize,
    /// The receive buffer is GPU memory whose copies may still be queued (see [`Mesh::settle`]).
    settle: bool,
    send: &'m Payload,
    recv: &'m Payload,
    scratch: &'m mut Vec<u8>,
    stream: &'m mut pattern::Stream,
    corrupt_once: &'m mut bool,
}

impl Mesh {
    /// The lean ping-pong with `lane`'s peer at `size` bytes. Fails on more than one rail, and
    /// where the rail refuses the pair (a message above the provider's `inject_size`, slots
    /// outside the buffers).
    pub fn lean_step(&mut self, lane: &Lane, size: usize) -> MeshResult<LeanStep<'_>> {
        if self.group.len() != 1 {
            return Err(BenchError::usage(format!(
                "the lean ping-pong posts on one rail and this mesh has {}: use --rails 1",
                self.group.len()
            )));
        }
        let l = *lane.rail(0)?;
        let settle = !self.recv.kind().is_host();
        let Mesh {
            group,
            health,
            timeout,
            me,
            send,
            recv,
            scratch,
            stream,
            corrupt_once,
            ..
        } = self;
        let pair = group
            .rail_mut(0)
            .ping_pong(l.addr, (l.send, l.recv), [0, size], size)?;
        Ok(LeanStep {
            pair,
            health,
            timeout: *timeout,
            me: *me,
            peer: lane.rank(),
            size,
            settle,
            send,
            recv,
            scratch,
            stream,
            corrupt_once,
        })
    }

    /// Per-rail statistics of a timed part that sent `ops` messages of `size` bytes on `rail`
    /// (what [`Mesh::submit`] would have counted message by message).
    pub fn count_timed(&mut self, rail: usize, ops: u64, size: usize) {
        self.count_from_now(true);
        if let Some(s) = self.stats.get_mut(rail) {
            *s = RailStats {
                bytes: ops * size as u64,
                ops,
            };
        }
    }
}

impl LeanStep<'_> {
    /// Posts the receive of the peer's next message into `slot`.
    #[inline(always)]
    pub fn expect(&mut self, slot: usize) -> MeshResult<()> {
        Ok(self.pair.post_recv(slot)?)
    }

    /// Sends `slot` of `send` by `fi_inject`.
    #[inline(always)]
    pub fn inject(&mut self, slot: usize) -> MeshResult<()> {
        Ok(self.pair.inject(slot)?)
    }

    /// Polls until the receive of `slot` completed, with the failure rules of
    /// [`Mesh::wait_until`]: the job's health and `--timeout` are looked at once every
    /// [`EMPTY_POLLS`] empty polls. Fails when the message is not of the step's size.
    #[inline(always)]
    pub fn arrive(&mut self, slot: usize) -> MeshResult<()> {
        let mut spins = 0u32;
        let mut since: Option<Instant> = None;
        let len = loop {
            if let Some(len) = self.pair.poll(slot)? {
                break len;
            }
            spins = spins.wrapping_add(1);
            if spins % EMPTY_POLLS == 0 {
                self.idle(&mut since, slot)?;
            }
        };
        if len != self.size {
            return Err(self.wrong_length(len));
        }
        if self.settle {
            self.recv.settle().map_err(|e| {
                BenchError::failed(format!("waiting for the GPU copies to land: {e}"))
            })?;
        }
        Ok(())
    }

    /// A wait that found nothing for [`EMPTY_POLLS`] polls: the job's health, then the clock.
    fn idle(&self, since: &mut Option<Instant>, slot: usize) -> MeshResult<()> {
        let what = || {
            format!(
                "the message of rank {} (lean ping-pong, slot {slot})",
                self.peer
            )
        };
        idle_check(self.health, since, self.timeout, self.me, what)
    }

    #[cold]
    fn wrong_length(&self, len: usize) -> BenchError {
        BenchError::failed(format!(
            "a message of {len} bytes arrived from rank {} where the step sends {} bytes",
            self.peer, self.size
        ))
    }

    /// Writes the pattern of `seed` into `slot` of `send`.
    pub fn fill(&mut self, slot: usize, seed: u64) -> MeshResult<()> {
        let at = (slot * self.size, self.size);
        fill(self.send, self.scratch, self.stream, at, seed)
    }

    /// Words of `slot` of `recv` that differ from the pattern of `seed`.
    pub fn check(&mut self, slot: usize, seed: u64) -> u64 {
        let at = (slot * self.size, self.size);
        let verify = (
            &mut *self.scratch,
            &mut *self.stream,
            &mut *self.corrupt_once,
        );
        mismatches(self.recv, verify, at, seed)
    }
}
