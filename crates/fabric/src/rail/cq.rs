//! Reading the completion queue: [`Rail::poll`] hands back the completions of posted operations
//! (with the context they were posted with) and remote CQ data from peers; [`Rail::poll_wait`]
//! spins with a deadline and a health check; [`Rail::progress`] only dispatches (for waits that
//! collect nothing themselves, such as the EAGAIN retry of a post).
//!
//! One read of the CQ dispatches every entry to its slot: the entry's `op_context` is the slot's
//! `fi_context2`, so the slot, its context and its region are found without a lookup. Completions
//! nobody is polling for yet wait in the rail's queues; an error entry becomes an
//! [`Error::Completion`] naming the call that posted the operation.

use efabench_fabric_sys as sys;
use std::time::Instant;

use super::{Rail, Slot, State, NO_REGION};
use crate::error::{Error, Result};
use crate::raw::{CqRead, RawCompletion, RawCqError};

/// One completion returned by [`Rail::poll`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The context the operation was posted with, or [`Completion::REMOTE_CQ_DATA`].
    pub context: u64,
    /// libfabric completion flags (`FI_SEND`, `FI_RECV`, `FI_RMA`, `FI_REMOTE_CQ_DATA`, …).
    pub flags: u64,
    /// Bytes received (receives; 0 or the length for others, provider-dependent).
    pub len: usize,
    /// Remote CQ data, valid when `flags` has `FI_REMOTE_CQ_DATA`.
    pub data: u64,
}

impl Completion {
    /// Context of a completion that no local operation posted: a peer's write with data (or a
    /// send with data consumed by no receive) delivering remote CQ data.
    pub const REMOTE_CQ_DATA: u64 = u64::MAX;

    /// The remote CQ data, when the completion carries some.
    pub fn remote_data(&self) -> Option<u64> {
        (self.flags & sys::FI_REMOTE_CQ_DATA != 0).then_some(self.data)
    }
}

/// The convention efabench uses for remote CQ data: the sender's rank (`source`) and a `tag`
/// packed into the low 32 bits, which every provider carries (EFA's `cq_data_size` is 4 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqData {
    pub source: u16,
    pub tag: u16,
}

impl CqData {
    /// `source << 16 | tag`.
    pub fn to_u64(self) -> u64 {
        (self.source as u64) << 16 | self.tag as u64
    }
    /// The inverse of [`CqData::to_u64`] (bits above 32 are ignored).
    pub fn from_u64(d: u64) -> Self {
        CqData {
            source: (d >> 16) as u16,
            tag: d as u16,
        }
    }
}

impl Rail {
    /// Reads completions of posted operations (and remote CQ data, with context
    /// [`Completion::REMOTE_CQ_DATA`]) into `out`; returns how many. Never blocks. A failed
    /// operation is returned as `Err` (the provider's text and errno), once. Inlined into the
    /// caller's spin loop: an empty poll is then the provider's call and a few instructions.
    #[inline(always)]
    pub fn poll(&self, out: &mut [Completion]) -> Result<usize> {
        // Nothing queued (the usual case: the queues fill only during an EAGAIN retry or when a
        // read returns more than `out` holds): straight to the CQ. A spinning wait calls this
        // millions of times a second, and every instruction of an empty poll is time between a
        // completion's arrival and its discovery.
        if self.state.borrow().queued() == 0 {
            return self.read_cq(out);
        }
        let mut n = 0;
        {
            let mut st = self.state.borrow_mut();
            if let Some(e) = st.errors.pop_front() {
                return Err(e);
            }
            while n < out.len() {
                match st.ready.pop_front().or_else(|| st.remote.pop_front()) {
                    Some(c) => {
                        out[n] = c;
                        n += 1;
                    }
                    None => break,
                }
            }
        }
        if n == 0 {
            n = self.read_cq(out)?;
        }
        Ok(n)
    }

    /// Like [`Rail::poll`], but spins until at least one completion is in `out`, `deadline`
    /// passes, or `check` (called about every thousand empty polls; e.g. "is the peer's control
    /// connection still up?") returns an error.
    pub fn poll_wait(
        &self,
        out: &mut [Completion],
        deadline: Instant,
        mut check: impl FnMut() -> Result<()>,
    ) -> Result<usize> {
        let mut spins = 0u32;
        let mut first: Option<Instant> = None;
        loop {
            let n = self.poll(out)?;
            if n > 0 || out.is_empty() {
                return Ok(n);
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                let now = Instant::now();
                let start = *first.get_or_insert(now);
                if now >= deadline {
                    return Err(Error::Timeout {
                        what: "a completion".into(),
                        secs: now.duration_since(start).as_secs_f64(),
                    });
                }
                check()?;
            }
        }
    }

    /// Reads the CQ once and dispatches what it finds; completions and errors of posted
    /// operations are queued for [`Rail::poll`], and only errors no operation can take (a CQ
    /// failure) are returned.
    #[inline]
    pub fn progress(&self) -> Result<()> {
        self.read_cq(&mut []).map(|_| ())
    }

    #[inline(always)]
    fn read_cq(&self, out: &mut [Completion]) -> Result<usize> {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        let mut n = 0;
        let res = self.raw.cq_read(|c| st.take(c, out, &mut n));
        match res {
            CqRead::Empty | CqRead::Entries => Ok(n),
            CqRead::Error(e) => {
                st.take_error(e, &self.info.provider)?;
                if out.is_empty() {
                    Ok(0)
                } else {
                    // poll(): report the error now.
                    match st.errors.pop_front() {
                        Some(e) => Err(e),
                        None => Ok(0),
                    }
                }
            }
        }
    }
}

impl State {
    /// Dispatches one CQ entry to its slot: the completion goes to `out` (at `n`, while there
    /// is room) or to the queues [`Rail::poll`] empties later, and the slot is freed.
    #[inline(always)]
    pub(super) fn take(&mut self, c: RawCompletion, out: &mut [Completion], n: &mut usize) {
        let st = self;
        let Some(s) = c.slot else {
            st.remote.push_back(Completion {
                context: Completion::REMOTE_CQ_DATA,
                flags: c.flags,
                len: c.len,
                data: c.data,
            });
            return;
        };
        let region = match std::mem::replace(&mut st.slots[s as usize], Slot::Free) {
            Slot::Raw { ctx, region, .. } => {
                let comp = Completion {
                    context: ctx,
                    flags: c.flags,
                    len: c.len,
                    data: c.data,
                };
                if *n < out.len() {
                    out[*n] = comp;
                    *n += 1;
                } else {
                    st.ready.push_back(comp);
                }
                st.free.push(s);
                region
            }
            #[cfg(feature = "async")]
            Slot::Async { region, op, .. } => {
                st.slots[s as usize] = Slot::Async {
                    region,
                    op,
                    done: Some(Ok(super::OpResult {
                        len: c.len,
                        data: (c.flags & sys::FI_REMOTE_CQ_DATA != 0).then_some(c.data),
                    })),
                };
                region
            }
            Slot::Orphan { region } => {
                st.free.push(s);
                region
            }
            // A ping-pong's receive: only its `PingPong` reads the CQ while it holds the slot
            // (it borrows the rail exclusively), so this is never reached; the slot stays held.
            Slot::Held => {
                st.slots[s as usize] = Slot::Held;
                NO_REGION
            }
            Slot::Free => NO_REGION,
        };
        st.release(region);
    }

    /// Dispatches one CQ error entry: the error of a posted operation is queued for
    /// [`Rail::poll`] and its slot freed; an error without an operation is returned.
    #[cold]
    pub(super) fn take_error(&mut self, e: RawCqError, provider: &str) -> Result<()> {
        let st = self;
        let provider = Some(provider.to_string());
        let Some(s) = e.slot else {
            return Err(Error::Completion {
                op: "an operation without context",
                errno: e.errno,
                prov_errno: e.prov_errno,
                text: e.text,
                provider,
            });
        };
        let mk = |op| Error::Completion {
            op,
            errno: e.errno,
            prov_errno: e.prov_errno,
            text: e.text.clone(),
            provider: provider.clone(),
        };
        let region = match std::mem::replace(&mut st.slots[s as usize], Slot::Free) {
            Slot::Raw { region, op, .. } => {
                st.free.push(s);
                st.errors.push_back(mk(op));
                region
            }
            #[cfg(feature = "async")]
            Slot::Async { region, op, .. } => {
                st.slots[s as usize] = Slot::Async {
                    region,
                    op,
                    done: Some(Err(mk(op))),
                };
                region
            }
            Slot::Orphan { region } => {
                st.free.push(s);
                region
            }
            Slot::Held => {
                st.slots[s as usize] = Slot::Held;
                NO_REGION
            }
            Slot::Free => NO_REGION,
        };
        st.release(region);
        Ok(())
    }
}
