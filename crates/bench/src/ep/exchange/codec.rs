//! The 32 bits of remote CQ data every ep write carries: kind, iteration mod 16, source, channel,
//! in the layout [`cqdata::EP`] of the mesh's one codec.

use crate::mesh::cqdata::{self, CqKind, CqWord};

/// What a CQ data word announces (2 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    DispatchMsg = 0,
    DispatchSignal = 1,
    CombineMsg = 2,
    CombineSignal = 3,
}

/// Which phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Dispatch,
    Combine,
}

impl Phase {
    pub(super) fn kinds(self) -> (Kind, Kind) {
        match self {
            Phase::Dispatch => (Kind::DispatchMsg, Kind::DispatchSignal),
            Phase::Combine => (Kind::CombineMsg, Kind::CombineSignal),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Phase::Dispatch => "dispatch",
            Phase::Combine => "combine",
        }
    }
}

impl CqKind for Kind {
    const ALL: [Kind; 4] = [
        Kind::DispatchMsg,
        Kind::DispatchSignal,
        Kind::CombineMsg,
        Kind::CombineSignal,
    ];
    #[inline]
    fn code(self) -> u64 {
        self as u64
    }
}

/// Most ranks the 10-bit source field carries.
pub const MAX_RANKS: u32 = cqdata::EP.max_ranks();

/// CQ data: kind (2 bits) | iteration mod 16 (4) | source rank (10) | channel (16).
#[inline]
pub fn cq_data(kind: Kind, iter: u64, src: u32, index: u16) -> u64 {
    cqdata::EP.encode(kind, iter, src, index)
}

/// Splits CQ data into (kind, iteration mod 16, source, channel).
#[inline]
pub fn parse_cq_data(d: u64) -> Option<(Kind, u64, u32, u16)> {
    cqdata::EP
        .decode(d)
        .map(|w: CqWord<Kind>| (w.kind, w.iter, w.src, w.index))
}
