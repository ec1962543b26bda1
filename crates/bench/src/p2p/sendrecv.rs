//! `sendrecv`: two-sided send/recv. A ping-pong's small messages go by `fi_inject`, as
//! fi_pingpong's do; the receiver of a stream posts one receive per window position before it
//! tells the sender to start, so no message of the window arrives unexpected. Its ping-pong can
//! also run as fabtests' loop (`--loop lean`, see `lean.rs`).

use super::rounds::Message;
use crate::error::BenchError;
use crate::mesh::Link;
use crate::mesh::{Done, Verb};

/// Two-sided send/recv.
pub struct SendRecv;

impl Message for SendRecv {
    const NAME: &'static str = "sendrecv";
    const INJECT: bool = true;
    const LEAN: bool = true;
    const OWN: Verb = Verb::Send;

    fn expect(link: &mut Link, pos: usize) -> Result<(), BenchError> {
        link.post(Verb::Recv, pos, None)
    }

    fn post(link: &mut Link, _i: u64, pos: usize, inject: bool) -> Result<(), BenchError> {
        match inject {
            true => link.inject(pos),
            false => link.post(Verb::Send, pos, None),
        }
    }

    fn arrive(link: &mut Link, _i: u64, slot: usize) -> Result<(), BenchError> {
        link.wait_for(Verb::Recv, slot)
    }

    /// Every receive of the window, in whatever order the rails deliver them.
    fn collect(link: &mut Link, _win: u64, seen: &mut [usize]) -> Result<u64, BenchError> {
        let (mut short, size) = (0, link.size());
        for _ in 0..seen.len() {
            match link.wait()? {
                Done {
                    op: Verb::Recv,
                    index: p,
                    len,
                } if p < seen.len() && seen[p] == 0 => {
                    seen[p] = 1;
                    short += u64::from(len != size);
                }
                other => return Err(other.unexpected("a receive of the window")),
            }
        }
        Ok(short)
    }
}
