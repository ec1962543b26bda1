//! Tracked messages by what they are: an [`Op`] (send, receive, write or read) and its index
//! (a window position) make the tag of a message whose stripes are counted one by one
//! ([`Mesh::track`]), so that a protocol that keeps several messages in flight to one peer
//! posts whole messages and waits for a given one, or for any of a kind, without raw tags.

use efabench_fabric::{Flags, Op as FiOp, Stripe};

use super::{Lane, Mesh, MeshResult, Route, CTX_TRACK};
use crate::error::BenchError;

/// A tracked operation and its index, below [`MAX_INDEX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Send(usize),
    Recv(usize),
    Write(usize),
    Read(usize),
}

/// Most indices an operation may carry (the point-to-point benchmarks' largest `--window`).
pub const MAX_INDEX: usize = 4096;

impl Op {
    /// The tag of this operation: its kind and its index.
    #[inline]
    pub fn tag(self) -> u32 {
        let (k, i) = match self {
            Op::Send(i) => (0, i),
            Op::Recv(i) => (1, i),
            Op::Write(i) => (2, i),
            Op::Read(i) => (3, i),
        };
        (k * MAX_INDEX + i % MAX_INDEX) as u32
    }

    pub fn from_tag(t: u32) -> Op {
        let (k, i) = (t as usize / MAX_INDEX, t as usize % MAX_INDEX);
        [Op::Send, Op::Recv, Op::Write, Op::Read][k.min(3)](i)
    }

    pub fn index(self) -> usize {
        match self {
            Op::Send(i) | Op::Recv(i) | Op::Write(i) | Op::Read(i) => i,
        }
    }
}

/// A tracked message whose every stripe completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpDone {
    pub op: Op,
    pub len: usize,
}

impl OpDone {
    /// The error for a completion the protocol did not expect at this point.
    pub fn unexpected(self, wanted: &str) -> BenchError {
        BenchError::failed(format!(
            "expected {wanted}, got a completion of {:?} ({} bytes)",
            self.op, self.len
        ))
    }
}

impl Mesh {
    /// Posts message `op` to or from the peer of `lane` over `route`, every stripe at byte
    /// `base` of the stripe's offset on both sides (a write lands at the same place of the
    /// peer's `recv`, a read reads the same place of its `send`); every stripe of a write
    /// carries `data` as remote CQ data. With `inject` (a send that fits `fi_inject`) nothing is
    /// tracked: no completion follows. Every operation but a receive counts towards its rail's
    /// bytes and operations.
    // Inlined into each call site, where the operation is known: the matches on it fold away
    // (a run-time dispatch per post showed in the 8-byte ping-pong). The peer and the regions
    // come from the lane, resolved when the step began.
    #[inline(always)]
    pub fn post_op(
        &mut self,
        lane: &Lane,
        op: Op,
        base: usize,
        route: &Route,
        data: Option<u64>,
        inject: bool,
    ) -> MeshResult<()> {
        let (ctx, flags) = if inject {
            (0, Flags::INJECT)
        } else {
            self.track(op.tag(), route.stripes().len());
            (CTX_TRACK | u64::from(op.tag()), Flags::NONE)
        };
        for &Stripe { rail, off: o, len } in route.stripes() {
            let (l, off) = (lane.rail(rail)?, base + o);
            let post = match op {
                Op::Send(_) => FiOp::Send {
                    peer: l.addr,
                    local: l.send.range(off, len),
                    data: None,
                    flags,
                    ctx,
                },
                Op::Recv(_) => FiOp::Recv {
                    local: l.recv.range(off, len),
                    ctx,
                },
                Op::Write(_) => FiOp::Write {
                    peer: l.addr,
                    local: l.send.range(off, len),
                    remote: l.peer_recv.at(off as u64),
                    data,
                    flags,
                    ctx,
                },
                Op::Read(_) => FiOp::Read {
                    peer: l.addr,
                    local: l.recv.range(off, len),
                    remote: l.peer_send.at(off as u64),
                    ctx,
                },
            };
            self.group.rail(rail).post(post)?;
            if !matches!(op, Op::Recv(_)) {
                self.count(rail, len);
            }
        }
        Ok(())
    }

    /// The next tracked message to complete, whatever it is (`peer` is named if the wait fails).
    pub fn next_op(&mut self, peer: u32) -> MeshResult<OpDone> {
        let d = self.wait_done(|_| true, |_| format!("a completion from rank {peer}"))?;
        Ok(OpDone {
            op: Op::from_tag(d.tag),
            len: d.len,
        })
    }

    /// Waits until message `op` has completed.
    pub fn wait_op(&mut self, op: Op, peer: u32) -> MeshResult<()> {
        let (tag, what) = (op.tag(), |_: &Mesh| {
            format!("{op:?} with rank {peer} to complete")
        });
        self.wait_done(|t| t == tag, what).map(drop)
    }

    /// Waits until `n` messages of the kind of `op` (any index) have completed.
    pub fn wait_ops(&mut self, n: usize, op: Op, peer: u32) -> MeshResult<()> {
        let kind = op.tag() as usize / MAX_INDEX;
        for done in 0..n {
            let what = |_: &Mesh| format!("{} of {n} operations with rank {peer}", n - done);
            self.wait_done(|t| t as usize / MAX_INDEX == kind, what)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for op in [Op::Send(0), Op::Recv(63), Op::Write(7), Op::Read(4095)] {
            assert_eq!(Op::from_tag(op.tag()), op);
        }
        assert_ne!(Op::Send(1).tag(), Op::Recv(1).tag());
    }
}
