//! Posting: one stripe of any operation, counted in [`Mesh::outstanding`] ([`Mesh::post`]), the
//! collectives' shorthands, control signals, and the routes of a message over the rails (by the
//! mesh's [`Router`]).

use efabench_fabric::{Flags, Op, Stripe};

use super::route::{Message, Route, Router};
use super::{Mesh, MeshResult, CTX_CTRL, CTX_RECV, CTX_SEND, CTX_TRACK, CTX_WRITE};
use crate::harness::Strategy;

/// One stripe to post: what, from and to which bytes of the registered buffers.
#[derive(Clone, Copy, Debug)]
pub enum Post {
    /// `send[off..off+len]` into `peer`'s `recv` at `remote_off`.
    Write {
        peer: u32,
        off: usize,
        len: usize,
        remote_off: usize,
        data: Option<u64>,
    },
    /// `peer`'s `send` at `remote_off` into our `recv[off..off+len]`.
    Read {
        peer: u32,
        off: usize,
        len: usize,
        remote_off: usize,
    },
    /// `send[off..off+len]` to `peer`.
    Send {
        peer: u32,
        off: usize,
        len: usize,
        data: Option<u64>,
    },
    /// A receive into `recv[off..off+len]` (numbered `index` when accounted as outstanding).
    Recv {
        index: usize,
        off: usize,
        len: usize,
    },
}

impl Mesh {
    /// The router of this mesh's rails and `--strategy`.
    #[inline]
    pub fn router(&self) -> Router {
        Router::new(self.strategy, self.group.len())
    }

    /// The stripes of a `len`-byte message between `a` and `b` (symmetric in the two ranks, so
    /// the receiver computes the sender's route). `sends` starts every split at rail 0.
    pub fn route(&self, a: u32, b: u32, len: usize, sends: bool) -> Vec<Stripe> {
        let from_zero = sends && self.strategy == Strategy::Split;
        let pair = if from_zero { (0, 0) } else { (a, b) };
        let m = Message {
            n: 0,
            pair,
            size: len,
        };
        self.router().route(m).stripes().to_vec()
    }

    /// Posts one stripe on `rail`; its local completion counts in [`Mesh::outstanding`] (a
    /// receive's in [`Mesh::received`]). Every operation but a receive counts towards the rail's
    /// bytes and operations.
    #[inline(always)]
    pub fn post(&mut self, rail: usize, op: Post) -> MeshResult<()> {
        let (ctx, flags) = match op {
            Post::Write { .. } | Post::Read { .. } => (CTX_WRITE, Flags::NONE),
            Post::Send { .. } => (CTX_SEND, Flags::NONE),
            Post::Recv { index, .. } => (CTX_RECV | index as u64, Flags::NONE),
        };
        let counted = match op {
            Post::Write {
                peer,
                off,
                len,
                remote_off,
                data,
            } => {
                let p = self.peer(peer)?;
                let (peer, remote) = (p.peer.rail(rail), *p.recv.rail(rail));
                self.group.rail(rail).post(Op::Write {
                    peer,
                    local: self.send_reg.id(rail).range(off, len),
                    remote: remote.at(remote_off as u64),
                    data,
                    flags,
                    ctx,
                })?;
                len
            }
            Post::Read {
                peer,
                off,
                len,
                remote_off,
            } => {
                let p = self.peer(peer)?;
                let (peer, remote) = (p.peer.rail(rail), *p.send.rail(rail));
                self.group.rail(rail).post(Op::Read {
                    peer,
                    local: self.recv_reg.id(rail).range(off, len),
                    remote: remote.at(remote_off as u64),
                    ctx,
                })?;
                len
            }
            Post::Send {
                peer,
                off,
                len,
                data,
            } => {
                let peer = self.peer(peer)?.peer.rail(rail);
                self.group.rail(rail).post(Op::Send {
                    peer,
                    local: self.send_reg.id(rail).range(off, len),
                    data,
                    flags,
                    ctx,
                })?;
                len
            }
            Post::Recv { off, len, .. } => {
                self.group.rail(rail).post(Op::Recv {
                    local: self.recv_reg.id(rail).range(off, len),
                    ctx,
                })?;
                return Ok(());
            }
        };
        self.outstanding += 1;
        self.count(rail, counted);
        Ok(())
    }

    /// RDMA-writes `send[off..off+len]` to `peer`'s `recv` at `remote_off`, with CQ data.
    pub fn write(
        &mut self,
        peer: u32,
        rail: usize,
        off: usize,
        len: usize,
        remote_off: usize,
        data: u64,
    ) -> MeshResult<()> {
        let data = Some(data);
        let op = Post::Write {
            peer,
            off,
            len,
            remote_off,
            data,
        };
        self.post(rail, op)
    }

    /// RDMA-writes `send[off..off+len]` to `peer`'s `recv` at `remote_off` without CQ data, as
    /// one stripe of tracked message `tag` ([`Mesh::track`] first): the message lands in
    /// [`Mesh::take_done`] once all its stripes completed, and is not counted in `outstanding`.
    pub fn write_tracked(
        &mut self,
        peer: u32,
        rail: usize,
        (off, len): (usize, usize),
        remote_off: usize,
        tag: u32,
    ) -> MeshResult<()> {
        let p = self.peer(peer)?;
        let (fi_peer, remote) = (p.peer.rail(rail), *p.recv.rail(rail));
        self.group.rail(rail).post(Op::Write {
            peer: fi_peer,
            local: self.send_reg.id(rail).range(off, len),
            remote: remote.at(remote_off as u64),
            data: None,
            flags: Flags::NONE,
            ctx: CTX_TRACK | u64::from(tag),
        })?;
        self.count(rail, len);
        Ok(())
    }

    /// Sends `send[off..off+len]` to `peer` on `rail`, with CQ data.
    pub fn send(
        &mut self,
        peer: u32,
        rail: usize,
        off: usize,
        len: usize,
        data: u64,
    ) -> MeshResult<()> {
        let data = Some(data);
        let op = Post::Send {
            peer,
            off,
            len,
            data,
        };
        self.post(rail, op)
    }

    /// Posts receive number `index` into `recv[off..off+len]` on `rail`.
    pub fn post_recv(
        &mut self,
        index: usize,
        rail: usize,
        off: usize,
        len: usize,
    ) -> MeshResult<()> {
        let op = Post::Recv { index, off, len };
        self.post(rail, op)
    }

    /// Expects `stripes` more stripe completions of tracked message `tag` (call before posting
    /// them with context `CTX_TRACK | tag`, as [`Mesh::post_op`] does); the message is done, into [`Mesh::take_done`], once every
    /// stripe has completed.
    #[inline]
    pub fn track(&mut self, tag: u32, stripes: usize) {
        let i = tag as usize;
        if i >= self.pending.len() {
            self.pending.resize(i + 1, (0, 0));
        }
        self.pending[i].0 += stripes as u32;
    }

    /// An 8-byte write into `peer`'s control region carrying `data` (ACK/READY), on rail 0.
    pub fn signal(&mut self, peer: u32, data: u64) -> MeshResult<()> {
        let p = self.peer(peer)?;
        let (fi_peer, remote) = (p.peer.rail(0), *p.ctrl.rail(0));
        self.group.rail(0).post(Op::Write {
            peer: fi_peer,
            local: self.ctrl_reg.id(0).range(0, 8),
            remote: remote.at(8),
            data: Some(data),
            flags: Flags::NONE,
            ctx: CTX_CTRL,
        })?;
        self.outstanding += 1;
        Ok(())
    }

    /// The stripes of message number `n` of `size` bytes in a stream of messages to one peer
    /// (the point-to-point benchmarks): the first rail rotates with `n`, so both ends derive
    /// the route from the message's number.
    #[inline]
    pub fn route_nth(&self, n: u64, size: usize) -> Route {
        let m = Message {
            n,
            pair: (0, 0),
            size,
        };
        self.router().route(m)
    }

    /// Stripes a message of `size` bytes is cut into by [`Mesh::route_nth`] (1 for round-robin).
    pub fn stripe_count(&self, size: usize) -> usize {
        self.router().stripe_count(size)
    }

    /// Whether a message of `size` bytes can go by `fi_inject` (no completion to reap; the buffer is reusable as soon as the call returns).
    pub fn can_inject(&self, size: usize) -> bool {
        let g = &self.group;
        self.stripe_count(size) == 1
            && (0..g.len()).all(|r| size as u64 <= g.rail(r).info().inject_size)
    }
}
