//! A ping-pong's posts resolved once: [`PingPong`] holds what fabtests' `fi_pingpong` loop holds
//! (the endpoint, the peer's address, the two buffers' addresses and descriptors, the receives'
//! contexts), so that each post is the libfabric call and one check, and a poll is `fi_cq_read`
//! and a comparison of its context.
//!
//! What [`Rail::post`] does on every operation is done here once, when the pair is made: the
//! regions are checked (live, of this rail), the ranges checked against them, the message
//! checked against the provider's `inject_size`, and two context slots taken for the receives.
//! What keeps it sound afterwards: the pair borrows the rail exclusively (nobody else posts or
//! reads the CQ meanwhile, and the rail cannot be dropped), pins both regions (their in-flight
//! count: neither can be deregistered) and holds its context slots out of the free list. A
//! receive is never posted twice on a slot whose completion has not been read. Dropped with a
//! receive still posted (a failed step), the pair cancels it and leaves its slot to the rail as
//! an orphan, freed when its completion (or cancellation) arrives.
//!
//! The sends are injects: no completion, no context. A CQ entry that is not one of the pair's
//! receives (an operation posted before the pair was made) is dispatched as [`Rail::poll`]
//! would and waits in the rail's queues; an error entry fails the pair's poll with its cause.

use std::time::Instant;

use efabench_fabric_sys as sys;

use super::post::too_big;
use super::{Peer, Rail, RegionId, Slot};
use crate::error::{Error, Result};
use crate::raw::{CqRead, RawCqError, RawPair};

/// Two receives and two injects between two registered regions, alternating on slots 0 and 1
/// (see the module docs). Made by [`Rail::ping_pong`].
pub struct PingPong<'r> {
    rail: &'r mut Rail,
    raw: RawPair,
    /// The context slots of the two receives.
    slots: [u32; 2],
    /// The pinned regions: `send` (what the injects read) and `recv` (what the receives fill).
    send: u32,
    recv: u32,
    /// Per slot: a receive is posted and its completion not read yet.
    posted: [bool; 2],
    /// Per slot: the length of a receive whose completion was read but not taken by `poll`.
    done: [Option<usize>; 2],
}

impl std::fmt::Debug for PingPong<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PingPong")
            .field("rail", &self.rail)
            .field("posted", &self.posted)
            .finish()
    }
}

impl Rail {
    /// A ping-pong with `peer`: slot `i` (0 or 1) injects `len` bytes at `offs[i]` of `send`
    /// and receives `len` bytes into `offs[i]` of `recv`. Fails when a region is not a live one
    /// of this rail, a range lies outside its region, `len` exceeds the provider's
    /// `inject_size`, or fewer than two context slots are free.
    pub fn ping_pong(
        &mut self,
        peer: Peer,
        (send, recv): (RegionId, RegionId),
        offs: [usize; 2],
        len: usize,
    ) -> Result<PingPong<'_>> {
        if len as u64 > self.info.inject_size {
            return Err(too_big(len, self.info.inject_size));
        }
        let (si, ri) = {
            let st = self.state.borrow();
            (self.check_region(&st, send)?, self.check_region(&st, recv)?)
        };
        let st = self.state.get_mut();
        let mr = |i: u32| st.regions[i as usize].get().map(|r| &r.mr);
        let (Some(smr), Some(rmr)) = (mr(si), mr(ri)) else {
            return Err(Error::Usage("memory region was deregistered".into()));
        };
        if st.free.len() < 2 {
            return Err(Error::Usage(format!(
                "a ping-pong needs two free operation slots, and {} operations are in flight",
                self.cfg.max_in_flight.saturating_sub(st.free.len())
            )));
        }
        let n = st.free.len();
        let slots = [st.free[n - 1], st.free[n - 2]];
        let raw = self.raw.pair((smr, rmr), offs, len, peer.0, slots)?;
        st.free.truncate(n - 2);
        for s in slots {
            st.slots[s as usize] = Slot::Held;
        }
        st.acquire(si);
        st.acquire(ri);
        Ok(PingPong {
            rail: self,
            raw,
            slots,
            send: si,
            recv: ri,
            posted: [false; 2],
            done: [None; 2],
        })
    }
}

impl PingPong<'_> {
    /// Posts the receive of slot `i & 1`. Its completion is taken by [`PingPong::poll`]. A
    /// usage error while that slot's last receive has not completed.
    #[inline(always)]
    pub fn post_recv(&mut self, i: usize) -> Result<()> {
        let i = i & 1;
        if self.posted[i] {
            return Err(posted_twice(i));
        }
        self.done[i] = None;
        let ret = self.raw.recv(i);
        if ret != 0 {
            return self.again(i, false, ret);
        }
        self.posted[i] = true;
        Ok(())
    }

    /// Injects slot `i & 1`'s bytes to the peer (the buffer is reusable on return).
    #[inline(always)]
    pub fn inject(&mut self, i: usize) -> Result<()> {
        let ret = self.raw.inject(i);
        if ret != 0 {
            return self.again(i, true, ret);
        }
        Ok(())
    }

    /// Reads the CQ once; the length received if slot `i & 1`'s receive has completed (now or
    /// in an earlier read). An error completion fails with its cause.
    #[inline(always)]
    pub fn poll(&mut self, i: usize) -> Result<Option<usize>> {
        self.read()?;
        Ok(self.done[i & 1].take())
    }

    /// Whether slot `i & 1` has a receive posted whose completion was not read yet.
    pub fn posted(&self, i: usize) -> bool {
        self.posted[i & 1]
    }

    /// One `fi_cq_read`: the pair's receives are noted, any other entry dispatched as
    /// [`Rail::poll`] would.
    #[inline(always)]
    fn read(&mut self) -> Result<()> {
        let Rail { raw, state, .. } = &mut *self.rail;
        let st = state.get_mut();
        let (slots, posted, done) = (self.slots, &mut self.posted, &mut self.done);
        let res = raw.cq_read(|c| match c.slot {
            Some(s) if s == slots[0] => {
                posted[0] = false;
                done[0] = Some(c.len);
            }
            Some(s) if s == slots[1] => {
                posted[1] = false;
                done[1] = Some(c.len);
            }
            _ => st.take(c, &mut [], &mut 0),
        });
        match res {
            CqRead::Empty | CqRead::Entries => Ok(()),
            CqRead::Error(e) => self.failed(e),
        }
    }

    /// The error of an error entry: one of our receives (its slot is ours again), or another
    /// operation's (dispatched, and returned too).
    #[cold]
    #[inline(never)]
    fn failed(&mut self, e: RawCqError) -> Result<()> {
        let provider = self.rail.info.provider.clone();
        if let Some(j) = self.slots.iter().position(|&s| Some(s) == e.slot) {
            self.posted[j] = false;
            return Err(Error::Completion {
                op: "fi_recv",
                errno: e.errno,
                prov_errno: e.prov_errno,
                text: e.text,
                provider: Some(provider),
            });
        }
        let st = self.rail.state.get_mut();
        st.take_error(e, &provider)?;
        match st.errors.pop_front() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// A post the provider did not take at once: on `-FI_EAGAIN`, reads the CQ and posts
    /// again, for at most the rail's post timeout; any other answer is the call's error.
    #[cold]
    #[inline(never)]
    fn again(&mut self, i: usize, inject: bool, mut ret: isize) -> Result<()> {
        let name = if inject { "fi_inject" } else { "fi_recv" };
        let mut spins = 0u32;
        let mut start: Option<Instant> = None;
        while ret == -(sys::FI_EAGAIN as isize) {
            self.read()?;
            spins = spins.wrapping_add(1);
            // As in `Rail::post_lowered`: the peer this waits for may need this core.
            if spins > 16 {
                std::thread::yield_now();
            }
            if spins % 128 == 0 {
                let s = *start.get_or_insert_with(Instant::now);
                if s.elapsed() > self.rail.cfg.post_timeout {
                    return Err(Error::Timeout {
                        what: format!("{name} to be accepted (provider kept answering EAGAIN)"),
                        secs: self.rail.cfg.post_timeout.as_secs_f64(),
                    });
                }
            }
            ret = if inject {
                self.raw.inject(i)
            } else {
                self.raw.recv(i)
            };
        }
        if ret != 0 {
            return Err(self.rail.raw.err(name, ret as i64));
        }
        if !inject {
            self.posted[i & 1] = true;
        }
        Ok(())
    }
}

impl Drop for PingPong<'_> {
    fn drop(&mut self) {
        let Rail { raw, state, .. } = &mut *self.rail;
        let st = state.get_mut();
        for (j, &s) in self.slots.iter().enumerate() {
            if self.posted[j] {
                // Still the provider's: cancelled, and freed when its completion arrives.
                raw.cancel(s);
                st.slots[s as usize] = Slot::Orphan { region: self.recv };
                st.acquire(self.recv);
            } else {
                st.slots[s as usize] = Slot::Free;
                st.free.push(s);
            }
        }
        st.release(self.send);
        st.release(self.recv);
    }
}

#[cold]
fn posted_twice(i: usize) -> Error {
    Error::Usage(format!(
        "the receive of ping-pong slot {i} is still posted: poll it to completion before posting \
         it again"
    ))
}
