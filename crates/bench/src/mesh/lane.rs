//! A peer resolved once for many posts ([`Lane`]): its fabric address and registered regions on
//! every rail, with this rank's own region ids, looked up and checked when a protocol's step
//! begins ([`Mesh::lane`]) instead of on every post. The point-to-point benchmarks post every
//! message of a step through one lane ([`super::Remote::Lane`]); a request to a bare rank
//! resolves the same [`LaneRail`] on every stripe ([`Mesh::lane_rail`]). What a post through a
//! lane still checks is what can change while the step runs: the rail's own checks (the region
//! is still registered, a context slot is free, the provider takes the operation), the
//! completion accounting and the per-rail statistics.

use efabench_fabric::{Peer, RegionId, RemoteRegion};

use super::{Mesh, MeshResult};
use crate::error::BenchError;

/// One peer's addresses and regions on every rail, and ours; valid until the mesh connects
/// again (a mesh connects once, before any step).
#[derive(Debug, Default)]
pub struct Lane {
    rank: u32,
    rails: Vec<LaneRail>,
}

/// One rail of a [`Lane`].
#[derive(Clone, Copy, Debug)]
pub struct LaneRail {
    /// The peer's address in the rail's address vector.
    pub addr: Peer,
    /// Our `send` and `recv` on the rail.
    pub send: RegionId,
    pub recv: RegionId,
    /// The peer's `send` (what we read) and `recv` (where we write).
    pub peer_send: RemoteRegion,
    pub peer_recv: RemoteRegion,
    /// Our `ctrl` and the peer's, the two ends of a control word.
    pub ctrl: RegionId,
    pub peer_ctrl: RemoteRegion,
}

impl Lane {
    /// The peer's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Rail `rail` of the lane.
    #[inline(always)]
    pub fn rail(&self, rail: usize) -> MeshResult<&LaneRail> {
        self.rails.get(rail).ok_or_else(|| no_rail(self.rank, rail))
    }
}

#[cold]
fn no_rail(rank: u32, rail: usize) -> BenchError {
    BenchError::failed(format!(
        "no rail {rail} to rank {rank} (a stripe beyond the mesh's rails, or a post before the \
         step began)"
    ))
}

impl Mesh {
    /// `peer` resolved on every rail: fails if it is not connected to this rank.
    pub fn lane(&self, peer: u32) -> MeshResult<Lane> {
        let rails = (0..self.group.len())
            .map(|r| self.lane_rail(peer, r))
            .collect::<MeshResult<_>>()?;
        Ok(Lane { rank: peer, rails })
    }

    /// Rail `rail` of `peer`: fails if the peer is not connected or the mesh has no such rail.
    #[inline]
    pub fn lane_rail(&self, peer: u32, rail: usize) -> MeshResult<LaneRail> {
        let p = self.peer(peer)?;
        if rail >= self.group.len() {
            return Err(no_rail(peer, rail));
        }
        Ok(LaneRail {
            addr: p.peer.rail(rail),
            send: self.send_reg.id(rail),
            recv: self.recv_reg.id(rail),
            peer_send: *p.send.rail(rail),
            peer_recv: *p.recv.rail(rail),
            ctrl: self.ctrl_reg.id(rail),
            peer_ctrl: *p.ctrl.rail(rail),
        })
    }
}
