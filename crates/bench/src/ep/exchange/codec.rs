//! The 32 bits of remote CQ data every ep write carries: kind, iteration mod 16, source, channel.

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

/// Most ranks the 10-bit source field carries.
pub const MAX_RANKS: u32 = 1024;

/// CQ data: kind (2 bits) | iteration mod 16 (4) | source rank (10) | channel (16).
pub fn cq_data(kind: Kind, iter: u64, src: u32, index: u16) -> u64 {
    ((kind as u64) << 30) | ((iter & 0xF) << 26) | ((src as u64 & 0x3FF) << 16) | index as u64
}

/// Splits CQ data into (kind, iteration mod 16, source, channel).
pub fn parse_cq_data(d: u64) -> Option<(Kind, u64, u32, u16)> {
    if d >> 32 != 0 {
        return None;
    }
    let kind = match d >> 30 {
        0 => Kind::DispatchMsg,
        1 => Kind::DispatchSignal,
        2 => Kind::CombineMsg,
        _ => Kind::CombineSignal,
    };
    Some((kind, (d >> 26) & 0xF, ((d >> 16) & 0x3FF) as u32, d as u16))
}
