//! `write`: RDMA write with remote CQ data. The target learns that a message landed from the
//! CQ data of *that* message (its window, or iteration, and position in 32 bits: EFA's CQ data
//! is 4 bytes), counted stripe by stripe; never from the last write, since EFA does not order
//! RMA, so "the last write arrived" proves nothing about the others.

use super::rounds::Message;
use crate::error::BenchError;
use crate::mesh::Link;
use crate::mesh::{cq_data, parse_cq_data, Kind, Verb, ITER_MOD};

/// RDMA write with remote CQ data.
pub struct Write;

/// The CQ data of a write of window position `pos` in window (or iteration) `i`.
fn data(i: u64, pos: usize) -> u64 {
    cq_data(Kind::Payload, i, pos as u32)
}

impl Message for Write {
    const NAME: &'static str = "write";
    const OWN: Verb = Verb::Write;

    fn post(link: &mut Link, i: u64, pos: usize, _: bool) -> Result<(), BenchError> {
        link.post(Verb::Write, pos, Some(data(i, pos)))
    }

    /// Every stripe of the answer carries the same CQ data: count them all.
    fn arrive(link: &mut Link, i: u64, slot: usize) -> Result<(), BenchError> {
        link.wait_data(data(i, slot))
    }

    /// Every stripe's CQ data of every write of the window, each position exactly once.
    fn collect(link: &mut Link, win: u64, seen: &mut [usize]) -> Result<u64, BenchError> {
        let stripes = link.stripes();
        for _ in 0..seen.len() * stripes {
            let d = link.wait_remote_data()?;
            let (w, pos) = parse_cq_data(d).map_or((u64::MAX, 0), |(_, w, p)| (w, p as usize));
            if w != win % ITER_MOD || pos >= seen.len() || seen[pos] == stripes {
                return Err(BenchError::failed(format!(
                    "window {win}: unexpected remote CQ data {d:#x} (window {w}, position \
                     {pos}); a write was duplicated, lost or belongs to another window"
                )));
            }
            seen[pos] += 1;
        }
        Ok(0)
    }
}
