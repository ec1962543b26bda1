//! `write`: RDMA write with remote CQ data. The target learns that a message landed from the
//! CQ data of *that* message (its window, or iteration, and position in 32 bits: EFA's CQ data
//! is 4 bytes), counted stripe by stripe; never from the last write, since EFA does not order
//! RMA, so "the last write arrived" proves nothing about the others.

use super::link::{write_data, Ctx as Op, Link};
use super::rounds::{self, Message};
use super::{Protocol, Step, Variant};
use crate::error::BenchError;
use crate::harness::{Ctx, Measured};
use crate::mesh::ITER_MOD;

/// RDMA write with remote CQ data.
pub struct Write;

impl Protocol for Write {
    const NAME: &'static str = "write";

    fn measure(
        link: &mut Link,
        ctx: &Ctx,
        s: Step,
        variant: Variant,
        sender: bool,
    ) -> Result<Measured, BenchError> {
        rounds::measure::<Self>(link, ctx, s, variant, sender)
    }
}

impl Message for Write {
    fn post(link: &mut Link, i: u64, pos: usize, size: usize, _: bool) -> Result<(), BenchError> {
        link.post(Op::Write(pos), size, Some(write_data(i, pos)))
    }

    fn own(pos: usize) -> Op {
        Op::Write(pos)
    }

    /// Every stripe of the answer carries the same CQ data: count them all.
    fn arrive(link: &mut Link, i: u64, slot: usize, size: usize) -> Result<(), BenchError> {
        link.wait_data(write_data(i, slot), size)
    }

    /// Every stripe's CQ data of every write of the window, each position exactly once.
    fn collect(
        link: &mut Link,
        win: u64,
        size: usize,
        seen: &mut [usize],
    ) -> Result<u64, BenchError> {
        let stripes = link.mesh.stripe_count(size);
        for _ in 0..seen.len() * stripes {
            let data = link.wait_remote_data()?;
            let (w, pos) = ((data >> 16) % ITER_MOD, (data & 0xFFFF) as usize);
            if w != win % ITER_MOD || pos >= seen.len() || seen[pos] == stripes {
                return Err(BenchError::failed(format!(
                    "window {win}: unexpected remote CQ data {data:#x} (window {w}, position \
                     {pos}); a write was duplicated, lost or belongs to another window"
                )));
            }
            seen[pos] += 1;
        }
        Ok(0)
    }
}
