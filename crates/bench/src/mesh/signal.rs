//! Control words: what the 32 bits of CQ data of a write or a signal announce (a stripe of
//! payload, ACK, READY, STOP), for which iteration (or window) and from which rank
//! ([`cq_data`]), and the waits that check them. A signal is an 8-byte write into the peer's
//! `ctrl` region ([`Mesh::signal`]), so it never meets a posted payload receive; a rank
//! learns what arrived from the CQ data alone, so every check here compares whole words and
//! names both when they differ.

use super::cqdata::{self, CqKind, CqWord};
use super::{Mesh, MeshResult};
use crate::error::BenchError;

/// What a 32-bit CQ data word announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A stripe of payload.
    Payload = 0,
    /// "Every stripe of your window arrived" (pairs).
    Ack = 1,
    /// "You may start the next window" (pairs).
    Ready = 2,
    /// "No more windows: the count or the time budget of this pair is spent" (pairs; sent by
    /// the sender in place of the window the READY asked for).
    Stop = 3,
}

impl CqKind for Kind {
    const ALL: [Kind; 4] = [Kind::Payload, Kind::Ack, Kind::Ready, Kind::Stop];
    #[inline]
    fn code(self) -> u64 {
        self as u64
    }
}

/// Iterations are carried modulo this (14 bits); a peer is never more than one ahead.
pub const ITER_MOD: u64 = cqdata::MESH.iter_mod();

/// The CQ data of a message: kind, iteration (mod 2^14) and source rank, in 32 bits.
#[inline]
pub fn cq_data(kind: Kind, iter: u64, src: u32) -> u64 {
    cqdata::MESH.encode(kind, iter, src, 0)
}

/// Splits CQ data into (kind, iteration mod 2^14, source).
#[inline]
pub fn parse_cq_data(d: u64) -> Option<(Kind, u64, u32)> {
    cqdata::MESH
        .decode(d)
        .map(|w: CqWord<Kind>| (w.kind, w.iter, w.src))
}

impl Mesh {
    /// Sends control word `kind` of iteration `iter` to `peer` (the word names this rank).
    pub fn send_signal(&mut self, peer: u32, kind: Kind, iter: u64) -> MeshResult<()> {
        self.signal(peer, cq_data(kind, iter, self.me))
    }

    /// Waits for the next control word, which must be `kind` of iteration `iter` from `peer`
    /// (for ranks that talk as a pair: any other word means the two are out of step).
    pub fn expect_signal(&mut self, peer: u32, kind: Kind, iter: u64) -> MeshResult<()> {
        let is_ctrl = |d| !matches!(parse_cq_data(d), Some((Kind::Payload, ..)));
        let got = self.wait_arrival(is_ctrl, |_| format!("a control message from rank {peer}"))?;
        let want = cq_data(kind, iter, peer);
        if got != want {
            return Err(BenchError::failed(format!(
                "expected control word {want:#x} ({kind:?} of window {iter} from rank {peer}), got \
                 {got:#x}; the peer is out of step (are both ranks running the same efabench \
                 version and options?)"
            )));
        }
        Ok(())
    }

    /// The CQ data of the next stripe of payload written into `recv` (by `peer`, named when
    /// the wait fails).
    pub fn wait_payload(&mut self, peer: u32) -> MeshResult<u64> {
        let is_payload = |d| matches!(parse_cq_data(d), Some((Kind::Payload, ..)));
        self.wait_arrival(is_payload, |_| format!("a write from rank {peer}"))
    }

    /// Waits for the `stripes` stripes of one write from `peer`, each of which must carry
    /// `data` (anything else is a write lost or reordered).
    pub fn expect_payload(&mut self, peer: u32, data: u64, stripes: usize) -> MeshResult<()> {
        for _ in 0..stripes {
            let got = self.wait_payload(peer)?;
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
    fn cq_data_round_trips_in_32_bits() {
        for (k, it, src) in [
            (Kind::Payload, 0u64, 0u32),
            (Kind::Ack, 16_383, 65_535),
            (Kind::Ready, 16_384 + 5, 7),
            (Kind::Stop, 9, 3),
        ] {
            let d = cq_data(k, it, src);
            assert!(d < 1 << 32);
            assert_eq!(parse_cq_data(d), Some((k, it % ITER_MOD, src)));
        }
        assert_eq!(parse_cq_data(1 << 32), None);
        assert_eq!(parse_cq_data(u64::MAX), None);
    }
}
