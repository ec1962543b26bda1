//! Starting operations: one value, [`Op`], says what to do (send, receive, RMA write or read),
//! on which local bytes ([`Local`]), to which peer and remote bytes ([`RemoteAt`]), with which
//! remote CQ data and [`Flags`]; one call, [`Rail::post`], posts it.
//!
//! Why one call: every operation needs the same steps (check the region and the ranges, take a
//! context slot, call libfabric, retry on `-FI_EAGAIN` while progressing the CQ, count the region
//! busy), and a value with named fields reads better at the call site than a function with ten
//! positional arguments. The value is `Copy` and [`Rail::post`] is always inlined, so the choice
//! of the libfabric call folds away where the operation is written (the kind is a constant there)
//! and only the shared retry loop is a call: the hot path costs what a dedicated method per kind
//! did, with no allocation and no dynamic dispatch. Left to the compiler's judgement the match was
//! not inlined and cost about fifty instructions per post; the error paths are `#[cold]` functions
//! so that the inlined body stays small.
//!
//! Which libfabric call an [`Op`] becomes:
//!
//! | operation | data | flags | call |
//! |---|---|---|---|
//! | `Send` | none | none | `fi_send` |
//! | `Send` | some | none | `fi_senddata` |
//! | `Send` | none | `INJECT` | `fi_inject` (no completion) |
//! | `Recv` | | | `fi_recv` |
//! | `Write` | none | none | `fi_write` |
//! | `Write` | some | none | `fi_writedata` |
//! | `Write` | either | `MORE` and/or `DELIVERY_COMPLETE` | `fi_writemsg` |
//! | `Write` | none | `INJECT` | `fi_inject_write` (no completion) |
//! | `Read` | | | `fi_read` |
//!
//! Other combinations are usage errors, not silently dropped flags.
//!
//! ```no_run
//! # use efabench_fabric::*;
//! # fn f(rail: &Rail, peer: Peer, region: RegionId, remote: RemoteRegion) -> Result<()> {
//! // 4 KiB from the start of `region` to byte 8192 of the peer's region; the peer's completion
//! // carries 7, ours comes back from `poll` with context 1.
//! rail.post(Op::Write {
//!     peer,
//!     local: region.range(0, 4096),
//!     remote: remote.at(8192),
//!     data: Some(7),
//!     flags: Flags::NONE,
//!     ctx: 1,
//! })?;
//! # Ok(())
//! # }
//! ```

use std::ops::BitOr;
use std::time::Instant;

use efabench_fabric_sys as sys;

use super::mr::{RegionId, RemoteRegion};
use super::{Peer, Rail, Slot, State};
use crate::error::{Error, Result};
use crate::raw::RawOp;

/// Local bytes of an operation: `len` bytes at `off` of a region registered on the rail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Local {
    pub region: RegionId,
    pub off: usize,
    pub len: usize,
}

impl RegionId {
    /// `len` bytes at `off` of this region, as the local side of an [`Op`].
    #[inline(always)]
    pub fn range(self, off: usize, len: usize) -> Local {
        Local {
            region: self,
            off,
            len,
        }
    }
}

/// Remote bytes of an RMA operation: a peer's region and an offset into it (the length is the
/// local side's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAt {
    pub region: RemoteRegion,
    pub off: u64,
}

impl RemoteRegion {
    /// This region at byte `off`, as the remote side of an RMA [`Op`].
    #[inline(always)]
    pub fn at(&self, off: u64) -> RemoteAt {
        RemoteAt { region: *self, off }
    }
}

/// Modifiers of a send or write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    /// Nothing special.
    pub const NONE: Flags = Flags(0);
    /// Copy the bytes out during the call (at most `info().inject_size`): the buffer is reusable
    /// on return and no completion is generated, so the context is unused.
    pub const INJECT: Flags = Flags(1);
    /// `FI_MORE`: more writes follow at once, so the provider may batch them and ring the
    /// doorbell once; the last write of a batch must not have it.
    pub const MORE: Flags = Flags(2);
    /// `FI_DELIVERY_COMPLETE`: the local completion means the data is placed in the target's
    /// memory, not only sent.
    pub const DELIVERY_COMPLETE: Flags = Flags(4);

    /// Whether every flag of `other` is set.
    #[inline(always)]
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags plus [`Flags::MORE`] when `more` (the usual way to mark all but the last
    /// write of a batch).
    #[inline(always)]
    pub const fn more_if(self, more: bool) -> Flags {
        if more {
            Flags(self.0 | Flags::MORE.0)
        } else {
            self
        }
    }

    /// libfabric's `fi_writemsg` flags for `MORE` and `DELIVERY_COMPLETE`.
    #[inline(always)]
    fn msg_flags(self) -> u64 {
        (if self.contains(Flags::MORE) {
            sys::FI_MORE
        } else {
            0
        }) | if self.contains(Flags::DELIVERY_COMPLETE) {
            sys::FI_DELIVERY_COMPLETE
        } else {
            0
        }
    }
}

impl BitOr for Flags {
    type Output = Flags;
    #[inline(always)]
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

/// One operation to post. `ctx` is any value the caller chooses; it comes back as
/// [`crate::Completion::context`] (operations with [`Flags::INJECT`] have no completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Send `local` to `peer`; `data` is delivered as remote CQ data with the receive.
    Send {
        peer: Peer,
        local: Local,
        data: Option<u64>,
        flags: Flags,
        ctx: u64,
    },
    /// Receive one message from any peer into `local`.
    Recv { local: Local, ctx: u64 },
    /// RDMA-write `local` into `remote` of `peer`; `data` gives the target a completion carrying
    /// it.
    Write {
        peer: Peer,
        local: Local,
        remote: RemoteAt,
        data: Option<u64>,
        flags: Flags,
        ctx: u64,
    },
    /// RDMA-read `remote` of `peer` into `local`.
    Read {
        peer: Peer,
        local: Local,
        remote: RemoteAt,
        ctx: u64,
    },
}

/// An [`Op`] reduced to one libfabric call.
#[derive(Clone, Copy)]
pub(super) struct Lowered {
    pub(super) raw: RawOp,
    pub(super) name: &'static str,
    pub(super) local: Local,
    pub(super) peer: u64,
    pub(super) ctx: u64,
}

/// What one attempt to post gave.
#[cfg_attr(not(feature = "async"), allow(dead_code))] // the slot matters to futures only
pub(super) enum Posted {
    /// Posted, in this context slot (slot 0 and no slot taken for injects).
    Slot(u32),
    /// `-FI_EAGAIN` or no free slot: progress and retry.
    Again,
}

impl Rail {
    /// Posts `op`. Its completion (unless it is an inject) comes back from [`Rail::poll`] with
    /// `op`'s context; a failed operation comes back from [`Rail::poll`] as an error. While the
    /// provider answers `-FI_EAGAIN` or every context slot is in flight, the CQ is progressed and
    /// the post retried, for at most [`super::RailConfig::post_timeout`].
    ///
    /// Bad ranges (outside the local region or the peer's), a region of another rail or a
    /// deregistered one, an inject larger than the provider's `inject_size`, and flag
    /// combinations no libfabric call takes are usage errors.
    #[inline(always)]
    pub fn post(&self, op: Op) -> Result<()> {
        let l = self.lower(op)?;
        // The first attempt is inlined where the operation is written; only a refused one (EAGAIN,
        // every slot in flight) goes to the retry loop. With the attempt inside the loop's
        // function, every post paid the loop's set-up (about a hundred instructions on the
        // 8-byte ping-pong's path) for a retry that almost never happens.
        let first = self.try_post(&mut self.state.borrow_mut(), &l, Some(l.ctx))?;
        match first {
            Posted::Slot(_) => Ok(()),
            Posted::Again => self.post_lowered(l),
        }
    }

    /// Which libfabric call `op` is, with its arguments checked.
    #[inline(always)]
    pub(super) fn lower(&self, op: Op) -> Result<Lowered> {
        let any = sys::FI_ADDR_UNSPEC;
        let (raw, name, local, peer, ctx) = match op {
            Op::Send {
                peer,
                local,
                data,
                flags,
                ctx,
            } => match (data, flags) {
                (None, Flags::NONE) => (RawOp::Send, "fi_send", local, peer.0, ctx),
                (Some(d), Flags::NONE) => (RawOp::SendData(d), "fi_senddata", local, peer.0, ctx),
                (None, Flags::INJECT) => {
                    self.check_inject(local.len)?;
                    (RawOp::Inject, "fi_inject", local, peer.0, 0)
                }
                _ => return Err(unsupported("send", data, flags)),
            },
            Op::Recv { local, ctx } => (RawOp::Recv, "fi_recv", local, any, ctx),
            Op::Write {
                peer,
                local,
                remote,
                data,
                flags,
                ctx,
            } => {
                let (addr, key) = rma(remote, local.len)?;
                match (data, flags) {
                    (None, Flags::NONE) => {
                        (RawOp::Write { addr, key }, "fi_write", local, peer.0, ctx)
                    }
                    (Some(data), Flags::NONE) => (
                        RawOp::WriteData { addr, key, data },
                        "fi_writedata",
                        local,
                        peer.0,
                        ctx,
                    ),
                    (None, Flags::INJECT) => {
                        self.check_inject(local.len)?;
                        (
                            RawOp::InjectWrite { addr, key },
                            "fi_inject_write",
                            local,
                            peer.0,
                            0,
                        )
                    }
                    (data, f) if !f.contains(Flags::INJECT) => (
                        RawOp::WriteMsg {
                            addr,
                            key,
                            data,
                            flags: f.msg_flags(),
                        },
                        "fi_writemsg",
                        local,
                        peer.0,
                        ctx,
                    ),
                    _ => return Err(unsupported("write", data, flags)),
                }
            }
            Op::Read {
                peer,
                local,
                remote,
                ctx,
            } => {
                let (addr, key) = rma(remote, local.len)?;
                (RawOp::Read { addr, key }, "fi_read", local, peer.0, ctx)
            }
        };
        Ok(Lowered {
            raw,
            name,
            local,
            peer,
            ctx,
        })
    }

    // Inlined with the rest of `lower` (a call of its own cost a dozen instructions per inject).
    #[inline(always)]
    fn check_inject(&self, len: usize) -> Result<()> {
        match len as u64 > self.info.inject_size {
            true => Err(too_big(len, self.info.inject_size)),
            false => Ok(()),
        }
    }

    /// Progresses the CQ and posts again until the provider takes an operation it refused (or
    /// the post timeout passes).
    #[cold]
    #[inline(never)]
    fn post_lowered(&self, l: Lowered) -> Result<()> {
        let mut spins = 0u32;
        let mut start: Option<Instant> = None;
        loop {
            self.progress()?;
            {
                let mut st = self.state.borrow_mut();
                if let Posted::Slot(_) = self.try_post(&mut st, &l, Some(l.ctx))? {
                    return Ok(());
                }
            }
            spins = spins.wrapping_add(1);
            // The provider waits for something outside this process (a peer's progress, a
            // connection being accepted): where ranks outnumber cores that peer needs this
            // core, so give it up between tries (with a core to itself this returns at once).
            if spins > 16 {
                std::thread::yield_now();
            }
            if spins % 128 == 0 {
                let s = *start.get_or_insert_with(Instant::now);
                if s.elapsed() > self.cfg.post_timeout {
                    return Err(Error::Timeout {
                        what: format!("{} to be accepted (provider kept answering EAGAIN or {} operations stayed in flight)", l.name, self.cfg.max_in_flight),
                        secs: self.cfg.post_timeout.as_secs_f64(),
                    });
                }
            }
        }
    }

    /// Posts once. `raw_ctx` is the caller's context for [`Rail::poll`]; `None` parks the
    /// completion in the slot for a future.
    #[inline(always)]
    pub(super) fn try_post(
        &self,
        st: &mut State,
        l: &Lowered,
        raw_ctx: Option<u64>,
    ) -> Result<Posted> {
        let ri = self.check_region(st, l.local.region)?;
        let inject = matches!(l.raw, RawOp::Inject | RawOp::InjectWrite { .. });
        let slot = if inject {
            0
        } else {
            match st.free.pop() {
                Some(s) => s,
                None => return Ok(Posted::Again),
            }
        };
        let give_back = |st: &mut State| {
            if !inject {
                st.free.push(slot);
            }
        };
        let Some(r) = st.regions.get(ri as usize).and_then(|s| s.get()) else {
            give_back(st);
            return Err(Error::Usage("memory region was deregistered".into()));
        };
        let ret = match self
            .raw
            .post(l.raw, &r.mr, l.local.off, l.local.len, l.peer, slot)
        {
            Ok(ret) => ret,
            Err(e) => {
                give_back(st);
                return Err(e);
            }
        };
        if ret == 0 {
            if !inject {
                st.slots[slot as usize] = new_slot(raw_ctx, ri, l.name);
                st.acquire(ri);
            }
            return Ok(Posted::Slot(slot));
        }
        give_back(st);
        if ret == -(sys::FI_EAGAIN as i64) {
            return Ok(Posted::Again);
        }
        Err(self.raw.err(l.name, ret))
    }
}

#[inline(always)]
fn new_slot(raw_ctx: Option<u64>, region: u32, op: &'static str) -> Slot {
    match raw_ctx {
        Some(ctx) => Slot::Raw { ctx, region, op },
        #[cfg(feature = "async")]
        None => Slot::Async {
            region,
            op,
            done: None,
        },
        #[cfg(not(feature = "async"))]
        None => Slot::Raw { ctx: 0, region, op },
    }
}

/// The peer's address and key for `len` bytes at `remote`, checked against the peer's region.
#[inline(always)]
fn rma(remote: RemoteAt, len: usize) -> Result<(u64, u64)> {
    let r = remote.region;
    match remote.off.checked_add(len as u64) {
        Some(end) if end <= r.len => Ok((r.addr + remote.off, r.key)),
        _ => Err(outside(remote, len)),
    }
}

#[cold]
fn outside(remote: RemoteAt, len: usize) -> Error {
    Error::Usage(format!(
        "remote range {}+{len} is outside the peer's region of {} bytes",
        remote.off, remote.region.len
    ))
}

#[cold]
pub(super) fn too_big(len: usize, inject_size: u64) -> Error {
    Error::Usage(format!(
        "inject of {len} bytes exceeds the provider's inject_size {inject_size}"
    ))
}

#[cold]
fn unsupported(what: &str, data: Option<u64>, flags: Flags) -> Error {
    let data = if data.is_some() {
        "with remote CQ data"
    } else {
        "without remote CQ data"
    };
    Error::Usage(format!(
        "a {what} {data} cannot take flags {flags:?}: INJECT goes alone and without data, MORE and DELIVERY_COMPLETE only on writes"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine() {
        let f = Flags::DELIVERY_COMPLETE.more_if(true);
        assert!(f.contains(Flags::MORE) && f.contains(Flags::DELIVERY_COMPLETE));
        assert_eq!(
            Flags::DELIVERY_COMPLETE.more_if(false),
            Flags::DELIVERY_COMPLETE
        );
        assert_eq!(f, Flags::MORE | Flags::DELIVERY_COMPLETE);
        assert_eq!(f.msg_flags(), sys::FI_MORE | sys::FI_DELIVERY_COMPLETE);
        assert_eq!(Flags::NONE.msg_flags(), 0);
        assert!(Flags::NONE.contains(Flags::NONE));
        assert!(!Flags::INJECT.contains(Flags::MORE));
    }

    #[test]
    fn remote_ranges_are_bounded() {
        let r = RemoteRegion {
            addr: 1000,
            key: 7,
            len: 64,
        };
        assert_eq!(rma(r.at(8), 56).unwrap(), (1008, 7));
        assert!(rma(r.at(8), 57).is_err());
        assert!(rma(r.at(u64::MAX), 1).is_err());
    }
}
