//! Tracked messages by what they are: a request's [`Verb`] and its index (a window position)
//! make the tag of a message whose stripes are counted one by one ([`Completion::Tracked`]), so
//! that a protocol that keeps several messages in flight to one peer posts whole messages and
//! waits for a given one, or for any of a kind, without raw tags.
//!
//! [`Completion::Tracked`]: super::Completion::Tracked

use super::{Mesh, MeshResult, Verb};
use crate::error::BenchError;

/// Most indices a tracked message may carry (the point-to-point benchmarks' largest
/// `--window`); larger ones wrap.
pub const MAX_INDEX: usize = 4096;

/// Verbs in the order of their tags.
const VERBS: [Verb; 5] = [
    Verb::Send,
    Verb::Recv,
    Verb::Write,
    Verb::Read,
    Verb::Signal,
];

/// The tag of tracked message (`op`, `index`): its verb and its index modulo [`MAX_INDEX`].
#[inline]
pub(super) fn tag(op: Verb, index: usize) -> u32 {
    let k = match op {
        Verb::Send => 0,
        Verb::Recv => 1,
        Verb::Write => 2,
        Verb::Read => 3,
        Verb::Signal => 4,
    };
    (k * MAX_INDEX + index % MAX_INDEX) as u32
}

/// A tracked message whose every stripe completed: what it was, and the bytes its completions
/// reported (a receive's length; libfabric reports none for the other verbs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub op: Verb,
    pub index: usize,
    pub len: usize,
}

impl Done {
    /// The message of tag `t` (made by [`tag`]) that moved `len` bytes.
    #[inline]
    pub(super) fn from_tag(t: u32, len: usize) -> Done {
        let (k, index) = (t as usize / MAX_INDEX, t as usize % MAX_INDEX);
        let op = VERBS[k.min(VERBS.len() - 1)];
        Done { op, index, len }
    }

    /// The error for a completion the protocol did not expect at this point.
    pub fn unexpected(self, wanted: &str) -> BenchError {
        BenchError::failed(format!(
            "expected {wanted}, got a completion of {:?}({}) ({} bytes)",
            self.op, self.index, self.len
        ))
    }
}

impl Mesh {
    /// Expects `stripes` more stripe completions of tracked message `tag` (before posting them
    /// with context `CTX_TRACK | tag`); the message is done, into [`Mesh::take_done`] and the waits, once every
    /// stripe has completed.
    #[inline]
    pub(super) fn track(&mut self, tag: u32, stripes: usize) {
        let i = tag as usize;
        if i >= self.pending.len() {
            self.pending.resize(i + 1, (0, 0));
        }
        self.pending[i].0 += stripes as u32;
    }

    /// The next tracked message to complete, whatever it is (`peer` is named if the wait fails).
    pub fn next_op(&mut self, peer: u32) -> MeshResult<Done> {
        self.wait_done(|_| true, |_| format!("a completion from rank {peer}"))
    }

    /// Waits until message (`op`, `index`) has completed.
    pub fn wait_op(&mut self, op: Verb, index: usize, peer: u32) -> MeshResult<()> {
        let (t, what) = (tag(op, index), |_: &Mesh| {
            format!("{op:?}({index}) with rank {peer} to complete")
        });
        self.wait_done(|x| x == t, what).map(drop)
    }

    /// Waits until `n` messages of verb `op` (any index) have completed.
    pub fn wait_ops(&mut self, n: usize, op: Verb, peer: u32) -> MeshResult<()> {
        let kind = tag(op, 0) as usize / MAX_INDEX;
        for done in 0..n {
            let what = |_: &Mesh| format!("{} of {n} operations with rank {peer}", n - done);
            self.wait_done(|x| x as usize / MAX_INDEX == kind, what)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for (op, i) in [
            (Verb::Send, 0),
            (Verb::Recv, 63),
            (Verb::Write, 7),
            (Verb::Read, 4095),
            (Verb::Signal, 12),
        ] {
            let d = Done::from_tag(tag(op, i), 5);
            assert_eq!((d.op, d.index, d.len), (op, i, 5));
            assert_eq!(tag(op, i), tag(op, i + MAX_INDEX));
        }
        assert_ne!(tag(Verb::Send, 1), tag(Verb::Recv, 1));
    }
}
