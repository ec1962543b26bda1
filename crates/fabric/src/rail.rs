//! A rail: one NIC's fabric, domain, address vector, completion queue and RDM endpoint, plus the
//! memory registered on it and the table of operations in flight.
//!
//! Both ways of driving operations share one completion-dispatch mechanism. Every posted operation
//! owns a *slot*; its `op_context` is that slot's `fi_context2`, so a CQ entry maps back to the
//! slot by pointer arithmetic (no hash map, no allocation). A slot is either
//! * **raw**: posted with a caller-chosen `u64` context by `post_*`; its completion is handed back
//!   by [`Rail::poll`] as a [`Completion`] (the cheapest path, for latency benchmarks), or
//! * **async**: posted by an [`Op`] future; the completion is parked in the slot until the future
//!   is polled again by an [`crate::Executor`].
//!
//! Memory safety: registered memory is owned by the rail (an `Arc` of the buffer), each region
//! counts the operations in flight on it, [`Rail::deregister`] refuses a busy region, a dropped
//! future leaves its slot *orphaned* (cancelled, its region still pinned) until the completion
//! arrives, and dropping the rail closes the endpoint (which ends all DMA) before any region.
//! `-FI_EAGAIN` on post is answered by progressing the CQ and retrying, bounded by
//! [`RailConfig::post_timeout`] so that a dead peer becomes an error, not a hang.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use efabench_fabric_sys as sys;

use crate::error::{Error, Result};
use crate::info::ProviderInfo;
use crate::memory::{path_name, Hmem, MemoryBuffer, MrPath};
use crate::raw::{CqRead, RawMr, RawOp, RawRail};

/// How a rail is opened.
#[derive(Clone, Debug)]
pub struct RailConfig {
    /// CQ depth (0 = provider default).
    pub cq_size: usize,
    /// Most operations in flight at once (slots in the context table).
    pub max_in_flight: usize,
    /// Longest a `post_*` keeps retrying on `-FI_EAGAIN` (or a full slot table) before failing.
    pub post_timeout: Duration,
}

impl Default for RailConfig {
    fn default() -> Self {
        RailConfig {
            cq_size: 0,
            max_in_flight: 1024,
            post_timeout: Duration::from_secs(30),
        }
    }
}

/// A peer's address in this rail's address vector (`fi_addr_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer(pub u64);

/// A memory region registered on one rail: the rail, the region's slot in the rail's table and
/// the slot's generation. Deregistering bumps the generation, so an id kept after
/// [`Rail::deregister`] never reaches a later registration that reuses the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegionId {
    rail: u32,
    index: u32,
    gen: u32,
}

/// What a peer needs to target one of our regions with RMA: the remote address (a virtual
/// address under `FI_MR_VIRT_ADDR`, else 0, the start of a 0-based offset range), the key and the
/// length. Exchange it with [`RemoteRegion::to_bytes`] / [`RemoteRegion::from_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    pub addr: u64,
    pub key: u64,
    pub len: u64,
}

impl RemoteRegion {
    /// Size of the serialised form.
    pub const BYTES: usize = 24;

    /// Little-endian `addr, key, len`.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.key.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Parses [`RemoteRegion::to_bytes`] output; any other length is an error.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        if b.len() != Self::BYTES {
            return Err(Error::Usage(format!(
                "a remote region descriptor is {} bytes, got {} (peer running another efabench version?)",
                Self::BYTES,
                b.len()
            )));
        }
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(RemoteRegion {
            addr: u(0),
            key: u(8),
            len: u(16),
        })
    }
}

/// One completion returned by [`Rail::poll`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The context given to `post_*`, or [`Completion::REMOTE_CQ_DATA`].
    pub context: u64,
    /// libfabric completion flags (`FI_SEND`, `FI_RECV`, `FI_RMA`, `FI_REMOTE_CQ_DATA`, …).
    pub flags: u64,
    /// Bytes received (receives; 0 or the length for others, provider-dependent).
    pub len: usize,
    /// Remote CQ data, valid when `flags` has `FI_REMOTE_CQ_DATA`.
    pub data: u64,
}

impl Completion {
    /// Context of a completion that no local operation posted: a peer's `write_data` (or
    /// `send_data` consumed by no receive) delivering remote CQ data.
    pub const REMOTE_CQ_DATA: u64 = u64::MAX;

    /// The remote CQ data, when the completion carries some.
    pub fn remote_data(&self) -> Option<u64> {
        (self.flags & sys::FI_REMOTE_CQ_DATA != 0).then_some(self.data)
    }
}

/// The convention efabench uses for remote CQ data: the sender's rank (`source`) and a `tag`
/// packed into the low 32 bits, which every provider carries (EFA's `cq_data_size` is 4 bytes).
/// [`Rail::wait_remote_data_from`] and [`Rail::wait_remote_count`] select on `source`.
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

/// What an async operation returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpResult {
    /// Bytes transferred as the CQ reports them (receives: bytes received).
    pub len: usize,
    /// Remote CQ data carried by a receive completion (`send_data`).
    pub data: Option<u64>,
}

const NO_REGION: u32 = u32::MAX;

#[derive(Debug)]
enum Slot {
    Free,
    Raw {
        ctx: u64,
        region: u32,
        op: &'static str,
    },
    Async {
        region: u32,
        op: &'static str,
        done: Option<Result<OpResult>>,
    },
    Orphan {
        region: u32,
    },
}

struct Region {
    mr: RawMr,
    inflight: u32,
    remote: RemoteRegion,
    /// "dmabuf", "va" or "host": how the registration was made.
    path: &'static str,
}

/// One entry of the region table: the registration (if any) and the generation of the slot.
#[derive(Default)]
struct RegionSlot {
    gen: u32,
    region: Option<Region>,
}

impl RegionSlot {
    fn get(&self) -> Option<&Region> {
        self.region.as_ref()
    }
}

struct State {
    slots: Vec<Slot>,
    free: Vec<u32>,
    regions: Vec<RegionSlot>,
    /// Raw completions read while nobody was polling (e.g. during EAGAIN progress).
    ready: VecDeque<Completion>,
    /// Completions without a local operation (remote CQ data).
    remote: VecDeque<Completion>,
    /// Errors of raw operations, reported by the next `poll`.
    errors: VecDeque<Error>,
    next_key: u64,
}

static NEXT_RAIL: AtomicU32 = AtomicU32::new(1);

/// One NIC's endpoint with its CQ, AV and registered memory. Not `Sync`: drive a rail from one
/// thread (open one rail per thread and NIC).
pub struct Rail {
    raw: RawRail,
    id: u32,
    info: ProviderInfo,
    cfg: RailConfig,
    state: RefCell<State>,
}

impl std::fmt::Debug for Rail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rail")
            .field("id", &self.id)
            .field("provider", &self.info.provider)
            .field("domain", &self.info.domain)
            .finish()
    }
}

impl Drop for Rail {
    fn drop(&mut self) {
        // Closing the endpoint first ends every transfer, so closing the regions and dropping
        // their buffers afterwards is safe even with operations still in flight.
        self.raw.close_endpoint();
        self.state.get_mut().regions.clear();
    }
}

enum Posted {
    Slot(u32),
    Again,
}

impl Rail {
    /// Opens fabric, domain, CQ, AV and an enabled endpoint for `info`.
    pub fn open(info: &ProviderInfo, cfg: &RailConfig) -> Result<Rail> {
        let n = cfg.max_in_flight.clamp(1, 1 << 20);
        let raw = RawRail::open(&info.raw, cfg.cq_size, n)?;
        Ok(Rail {
            raw,
            id: NEXT_RAIL.fetch_add(1, Ordering::Relaxed),
            info: info.clone(),
            cfg: cfg.clone(),
            state: RefCell::new(State {
                slots: (0..n).map(|_| Slot::Free).collect(),
                free: (0..n as u32).rev().collect(),
                regions: Vec::new(),
                ready: VecDeque::new(),
                remote: VecDeque::new(),
                errors: VecDeque::new(),
                next_key: 1,
            }),
        })
    }

    /// The provider entry this rail was opened from.
    pub fn info(&self) -> &ProviderInfo {
        &self.info
    }

    /// This endpoint's address (`fi_getname`), to give to peers.
    pub fn address(&self) -> Result<Vec<u8>> {
        self.raw.name()
    }

    /// Inserts a peer's address (from its [`Rail::address`]) into the address vector.
    pub fn insert_peer(&self, addr: &[u8]) -> Result<Peer> {
        let own = self.raw.name()?;
        if addr.len() != own.len() {
            return Err(Error::Usage(format!(
                "peer address is {} bytes but {} addresses are {} bytes (peer on another provider?)",
                addr.len(),
                self.info.provider,
                own.len()
            )));
        }
        Ok(Peer(self.raw.av_insert(addr)?))
    }

    /// Registers `buf` for send/recv and local/remote read/write, following the provider's
    /// `mr_mode` (local descriptors, virtual-address vs offset RMA, provider vs requested keys,
    /// endpoint binding, `FI_HMEM_CUDA` with the device id) and [`MrPath::Auto`] (dmabuf on efa
    /// when the buffer has one). The rail keeps `buf` alive while registered.
    pub fn register<B: MemoryBuffer + 'static>(&self, buf: Arc<B>) -> Result<RegionId> {
        self.register_with(buf, MrPath::Auto)
    }

    /// Whether registering `buf` on this rail with `path` goes through its dmabuf; a usage error
    /// when `path` is [`MrPath::Dmabuf`] and that is impossible.
    fn use_dmabuf(&self, buf: &dyn MemoryBuffer, path: MrPath) -> Result<bool> {
        let has = buf.dmabuf().is_some();
        let lib_ok = self.info.dmabuf;
        Ok(match path {
            MrPath::Va => false,
            MrPath::Auto => has && lib_ok && self.info.provider.starts_with("efa"),
            MrPath::Dmabuf => {
                if !has {
                    return Err(Error::Usage(
                        "--mr-path dmabuf: the buffer has no dmabuf export (host memory, or the CUDA driver refused cuMemGetHandleForAddressRange); use --mr-path auto or va".into(),
                    ));
                }
                if !lib_ok {
                    return Err(Error::Usage(format!(
                        "--mr-path dmabuf: provider {} (domain {}) cannot register a dmabuf (needs FI_HMEM and libfabric API >= 1.20); use --mr-path va or a newer libfabric",
                        self.info.provider, self.info.domain
                    )));
                }
                true
            }
        })
    }

    /// Like [`Rail::register`], with an explicit registration path (see [`MrPath`]).
    pub fn register_with<B: MemoryBuffer + 'static>(
        &self,
        buf: Arc<B>,
        path: MrPath,
    ) -> Result<RegionId> {
        if let Hmem::Cuda { device } = buf.hmem() {
            if !self.info.hmem {
                return Err(Error::Usage(format!(
                    "cannot register CUDA memory of GPU {device}: provider {} (domain {}) was not opened with FI_HMEM; ask for hmem in the hints, on a provider that supports GPU memory (efa)",
                    self.info.provider, self.info.domain
                )));
            }
        }
        if buf.is_empty() {
            return Err(Error::Usage("cannot register an empty buffer".into()));
        }
        let dmabuf = self.use_dmabuf(&*buf, path)?;
        let hmem = buf.hmem();
        let mut st = self.state.borrow_mut();
        let key = if self.raw.mr_mode & sys::FI_MR_PROV_KEY != 0 {
            0
        } else {
            st.next_key += 1;
            st.next_key - 1
        };
        let ptr = buf.as_ptr() as u64;
        let len = buf.len() as u64;
        let mr = self.raw.register(buf, key, dmabuf)?;
        let remote = RemoteRegion {
            addr: if self.raw.mr_mode & sys::FI_MR_VIRT_ADDR != 0 {
                ptr
            } else {
                0
            },
            key: mr.key,
            len,
        };
        let region = Region {
            mr,
            inflight: 0,
            remote,
            path: path_name(dmabuf, hmem),
        };
        let index = match st.regions.iter().position(|s| s.region.is_none()) {
            Some(i) => i,
            None => {
                st.regions.push(RegionSlot::default());
                st.regions.len() - 1
            }
        };
        let slot = &mut st.regions[index];
        slot.region = Some(region);
        Ok(RegionId {
            rail: self.id,
            index: index as u32,
            gen: slot.gen,
        })
    }

    /// The slot index of a live region `id` of this rail.
    fn check_region(&self, st: &State, id: RegionId) -> Result<u32> {
        if id.rail != self.id {
            return Err(Error::Usage(
                "memory region belongs to another rail; register the buffer on this rail too"
                    .into(),
            ));
        }
        match st.regions.get(id.index as usize) {
            Some(s) if s.gen == id.gen && s.region.is_some() => Ok(id.index),
            _ => Err(Error::Usage("memory region was deregistered".into())),
        }
    }

    /// The descriptor a peer needs to read or write region `id`.
    pub fn remote_region(&self, id: RegionId) -> Result<RemoteRegion> {
        let st = self.state.borrow();
        let i = self.check_region(&st, id)?;
        Ok(st.regions[i as usize].get().expect("checked").remote)
    }

    /// How region `id` was registered: `"dmabuf"`, `"va"` (GPU memory by address) or `"host"`.
    pub fn region_path(&self, id: RegionId) -> Result<&'static str> {
        let st = self.state.borrow();
        let i = self.check_region(&st, id)?;
        Ok(st.regions[i as usize].get().expect("checked").path)
    }

    /// Deregisters region `id`; fails while operations on it are in flight.
    pub fn deregister(&self, id: RegionId) -> Result<()> {
        let mut st = self.state.borrow_mut();
        let i = self.check_region(&st, id).map_err(|e| match e {
            Error::Usage(m) if m == "memory region was deregistered" => {
                Error::Usage("memory region was already deregistered".into())
            }
            e => e,
        })? as usize;
        let slot = &mut st.regions[i];
        let inflight = slot.get().map_or(0, |r| r.inflight);
        if inflight > 0 {
            return Err(Error::Usage(format!(
                "memory region has {inflight} operations in flight; wait for them before deregistering"
            )));
        }
        slot.region = None;
        slot.gen = slot.gen.wrapping_add(1);
        Ok(())
    }

    /// Posts once. `Posted::Again` means `-FI_EAGAIN` or no free slot: progress and retry.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn try_post(
        &self,
        st: &mut State,
        op: RawOp,
        name: &'static str,
        region: RegionId,
        off: usize,
        len: usize,
        peer: u64,
        raw_ctx: Option<u64>,
    ) -> Result<Posted> {
        let ri = self.check_region(st, region)?;
        let inject = matches!(op, RawOp::Inject | RawOp::InjectWrite { .. });
        let slot = if inject {
            0
        } else {
            match st.free.pop() {
                Some(s) => s,
                None => return Ok(Posted::Again),
            }
        };
        let r = match st.regions.get(ri as usize).and_then(RegionSlot::get) {
            Some(r) => r,
            _ => {
                if !inject {
                    st.free.push(slot);
                }
                return Err(Error::Usage("memory region was deregistered".into()));
            }
        };
        let ret = match self.raw.post(op, &r.mr, off, len, peer, slot) {
            Ok(ret) => ret,
            Err(e) => {
                if !inject {
                    st.free.push(slot);
                }
                return Err(e);
            }
        };
        if ret == 0 {
            if !inject {
                st.slots[slot as usize] = match raw_ctx {
                    Some(ctx) => Slot::Raw {
                        ctx,
                        region: ri,
                        op: name,
                    },
                    None => Slot::Async {
                        region: ri,
                        op: name,
                        done: None,
                    },
                };
                if let Some(r) = st
                    .regions
                    .get_mut(ri as usize)
                    .and_then(|s| s.region.as_mut())
                {
                    r.inflight += 1;
                }
            }
            return Ok(Posted::Slot(slot));
        }
        if !inject {
            st.free.push(slot);
        }
        if ret == -(sys::FI_EAGAIN as i64) {
            return Ok(Posted::Again);
        }
        let errno = (-ret) as i32;
        Err(Error::Call {
            call: name,
            errno,
            text: self.raw.lib.strerror(errno),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn post_raw(
        &self,
        op: RawOp,
        name: &'static str,
        region: RegionId,
        off: usize,
        len: usize,
        peer: u64,
        ctx: u64,
    ) -> Result<()> {
        let mut spins = 0u32;
        let mut start: Option<Instant> = None;
        loop {
            {
                let mut st = self.state.borrow_mut();
                if let Posted::Slot(_) =
                    self.try_post(&mut st, op, name, region, off, len, peer, Some(ctx))?
                {
                    return Ok(());
                }
            }
            self.progress()?;
            spins = spins.wrapping_add(1);
            if spins % 128 == 0 {
                let s = *start.get_or_insert_with(Instant::now);
                if s.elapsed() > self.cfg.post_timeout {
                    return Err(Error::Timeout {
                        what: format!("{name} to be accepted (provider kept answering EAGAIN or {} operations stayed in flight)", self.cfg.max_in_flight),
                        secs: self.cfg.post_timeout.as_secs_f64(),
                    });
                }
            }
        }
    }

    fn rma(remote: &RemoteRegion, remote_off: u64, len: usize) -> Result<(u64, u64)> {
        match remote_off.checked_add(len as u64) {
            Some(end) if end <= remote.len => Ok((remote.addr + remote_off, remote.key)),
            _ => Err(Error::Usage(format!(
                "remote range {remote_off}+{len} is outside the peer's region of {} bytes",
                remote.len
            ))),
        }
    }

    // ----- low-level path: post with a u64 context, collect with poll -----

    /// Posts a send of `len` bytes at `off` of `region` to `peer`; `ctx` comes back in its
    /// [`Completion`].
    pub fn post_send(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        ctx: u64,
    ) -> Result<()> {
        self.post_raw(RawOp::Send, "fi_send", region, off, len, peer.0, ctx)
    }

    /// Posts a send that also delivers `data` as remote CQ data with the receive completion.
    pub fn post_send_data(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        data: u64,
        ctx: u64,
    ) -> Result<()> {
        self.post_raw(
            RawOp::SendData(data),
            "fi_senddata",
            region,
            off,
            len,
            peer.0,
            ctx,
        )
    }

    /// Posts a receive into `len` bytes at `off` of `region`, from any peer.
    pub fn post_recv(&self, region: RegionId, off: usize, len: usize, ctx: u64) -> Result<()> {
        self.post_raw(
            RawOp::Recv,
            "fi_recv",
            region,
            off,
            len,
            sys::FI_ADDR_UNSPEC,
            ctx,
        )
    }

    /// Posts an RMA write of local `[off, off+len)` to `remote` at `remote_off`.
    #[allow(clippy::too_many_arguments)]
    pub fn post_write(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        remote: &RemoteRegion,
        remote_off: u64,
        ctx: u64,
    ) -> Result<()> {
        let (addr, key) = Self::rma(remote, remote_off, len)?;
        self.post_raw(
            RawOp::Write { addr, key },
            "fi_write",
            region,
            off,
            len,
            peer.0,
            ctx,
        )
    }

    /// Posts an RMA write that also gives the target a completion carrying `data`.
    #[allow(clippy::too_many_arguments)]
    pub fn post_write_data(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        remote: &RemoteRegion,
        remote_off: u64,
        data: u64,
        ctx: u64,
    ) -> Result<()> {
        let (addr, key) = Self::rma(remote, remote_off, len)?;
        self.post_raw(
            RawOp::WriteData { addr, key, data },
            "fi_writedata",
            region,
            off,
            len,
            peer.0,
            ctx,
        )
    }

    /// Like [`Rail::post_write_data`] through `fi_writemsg`: `more` sets `FI_MORE` (more writes
    /// follow at once, so the provider may batch them and ring the doorbell once; the last write
    /// of a batch must pass `false`), and `delivery` sets `FI_DELIVERY_COMPLETE` (the local
    /// completion then means the data is placed in the target's memory, not only sent). A
    /// provider that does not support a flag fails the post with its own error.
    #[allow(clippy::too_many_arguments)]
    pub fn post_write_data_more(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        remote: &RemoteRegion,
        remote_off: u64,
        data: u64,
        ctx: u64,
        more: bool,
        delivery: bool,
    ) -> Result<()> {
        let (addr, key) = Self::rma(remote, remote_off, len)?;
        let flags = if more { sys::FI_MORE } else { 0 }
            | if delivery {
                sys::FI_DELIVERY_COMPLETE
            } else {
                0
            };
        self.post_raw(
            RawOp::WriteMsg {
                addr,
                key,
                data,
                flags,
            },
            "fi_writemsg",
            region,
            off,
            len,
            peer.0,
            ctx,
        )
    }

    /// Posts an RMA read of `remote` at `remote_off` into local `[off, off+len)`.
    #[allow(clippy::too_many_arguments)]
    pub fn post_read(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        remote: &RemoteRegion,
        remote_off: u64,
        ctx: u64,
    ) -> Result<()> {
        let (addr, key) = Self::rma(remote, remote_off, len)?;
        self.post_raw(
            RawOp::Read { addr, key },
            "fi_read",
            region,
            off,
            len,
            peer.0,
            ctx,
        )
    }

    /// `fi_inject`: sends `len ≤ info().inject_size` bytes; the buffer is reusable on return and
    /// no completion is generated.
    pub fn inject(&self, peer: Peer, region: RegionId, off: usize, len: usize) -> Result<()> {
        if len as u64 > self.info.inject_size {
            return Err(Error::Usage(format!(
                "inject of {len} bytes exceeds the provider's inject_size {}",
                self.info.inject_size
            )));
        }
        self.post_raw(RawOp::Inject, "fi_inject", region, off, len, peer.0, 0)
    }

    /// `fi_inject_write`: like [`Rail::inject`] for an RMA write.
    pub fn inject_write(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        remote: &RemoteRegion,
        remote_off: u64,
    ) -> Result<()> {
        if len as u64 > self.info.inject_size {
            return Err(Error::Usage(format!(
                "inject of {len} bytes exceeds the provider's inject_size {}",
                self.info.inject_size
            )));
        }
        let (addr, key) = Self::rma(remote, remote_off, len)?;
        self.post_raw(
            RawOp::InjectWrite { addr, key },
            "fi_inject_write",
            region,
            off,
            len,
            peer.0,
            0,
        )
    }

    /// Reads completions of raw operations (and remote CQ data, with context
    /// [`Completion::REMOTE_CQ_DATA`]) into `out`; returns how many. Never blocks. Completions of
    /// async operations are parked for their futures. A failed raw operation is returned as
    /// `Err` (the provider's text and errno), once.
    #[inline]
    pub fn poll(&self, out: &mut [Completion]) -> Result<usize> {
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

    /// Reads the CQ once and dispatches what it finds (async slots, orphans, the ready queue).
    /// This is what executors call; errors of raw operations are queued for [`Rail::poll`], and
    /// only errors no operation can take (a CQ failure) are returned.
    #[inline]
    pub fn progress(&self) -> Result<()> {
        self.read_cq(&mut []).map(|_| ())
    }

    #[inline(always)]
    fn read_cq(&self, out: &mut [Completion]) -> Result<usize> {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        let mut n = 0;
        let res = self.raw.cq_read(|c| {
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
                    if n < out.len() {
                        out[n] = comp;
                        n += 1;
                    } else {
                        st.ready.push_back(comp);
                    }
                    st.free.push(s);
                    region
                }
                Slot::Async { region, op, .. } => {
                    st.slots[s as usize] = Slot::Async {
                        region,
                        op,
                        done: Some(Ok(OpResult {
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
                Slot::Free => NO_REGION,
            };
            release(st, region);
        });
        match res {
            CqRead::Empty | CqRead::Entries => Ok(n),
            CqRead::Error(e) => {
                let Some(s) = e.slot else {
                    return Err(Error::Completion {
                        op: "an operation without context",
                        errno: e.errno,
                        prov_errno: e.prov_errno,
                        text: e.text,
                    });
                };
                let mk = |op| Error::Completion {
                    op,
                    errno: e.errno,
                    prov_errno: e.prov_errno,
                    text: e.text.clone(),
                };
                let region = match std::mem::replace(&mut st.slots[s as usize], Slot::Free) {
                    Slot::Raw { region, op, .. } => {
                        st.free.push(s);
                        st.errors.push_back(mk(op));
                        region
                    }
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
                    Slot::Free => NO_REGION,
                };
                release(st, region);
                if out.is_empty() {
                    Ok(0)
                } else {
                    // poll(): report a raw error now.
                    match st.errors.pop_front() {
                        Some(e) => Err(e),
                        None => Ok(0),
                    }
                }
            }
        }
    }

    // ----- async path -----

    fn op(
        &self,
        op: Result<(RawOp, &'static str)>,
        region: RegionId,
        off: usize,
        len: usize,
        peer: u64,
    ) -> Op<'_> {
        Op {
            rail: self,
            state: match op {
                Ok((op, name)) => OpState::Unposted {
                    op,
                    name,
                    region,
                    off,
                    len,
                    peer,
                },
                Err(e) => OpState::Failed(Some(e)),
            },
        }
    }

    /// Async send (see [`Rail::post_send`]).
    pub fn send(&self, peer: Peer, region: RegionId, off: usize, len: usize) -> Op<'_> {
        self.op(Ok((RawOp::Send, "fi_send")), region, off, len, peer.0)
    }

    /// Async send with remote CQ data.
    pub fn send_data(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        data: u64,
    ) -> Op<'_> {
        self.op(
            Ok((RawOp::SendData(data), "fi_senddata")),
            region,
            off,
            len,
            peer.0,
        )
    }

    /// Async receive; the result's `len` is the number of bytes received.
    pub fn recv(&self, region: RegionId, off: usize, len: usize) -> Op<'_> {
        self.op(
            Ok((RawOp::Recv, "fi_recv")),
            region,
            off,
            len,
            sys::FI_ADDR_UNSPEC,
        )
    }

    /// Async RMA write.
    pub fn write(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        remote: &RemoteRegion,
        remote_off: u64,
    ) -> Op<'_> {
        let op = Self::rma(remote, remote_off, len)
            .map(|(addr, key)| (RawOp::Write { addr, key }, "fi_write"));
        self.op(op, region, off, len, peer.0)
    }

    /// Async RMA write with remote CQ data for the target.
    #[allow(clippy::too_many_arguments)]
    pub fn write_data(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        remote: &RemoteRegion,
        remote_off: u64,
        data: u64,
    ) -> Op<'_> {
        let op = Self::rma(remote, remote_off, len)
            .map(|(addr, key)| (RawOp::WriteData { addr, key, data }, "fi_writedata"));
        self.op(op, region, off, len, peer.0)
    }

    /// Async RMA read.
    pub fn read(
        &self,
        peer: Peer,
        region: RegionId,
        off: usize,
        len: usize,
        remote: &RemoteRegion,
        remote_off: u64,
    ) -> Op<'_> {
        let op = Self::rma(remote, remote_off, len)
            .map(|(addr, key)| (RawOp::Read { addr, key }, "fi_read"));
        self.op(op, region, off, len, peer.0)
    }

    /// A future that resolves to the next completion carrying remote CQ data (a peer's
    /// `write_data`), in arrival order.
    pub fn remote_data(&self) -> RemoteData<'_> {
        RemoteData { rail: self }
    }

    /// The next remote CQ data completion whose data has source field `source` (see
    /// [`CqData`]), leaving completions from other sources queued in their order. Lets a rank
    /// that writes to several peers tell their notifications apart without relying on arrival
    /// order (EFA's SRD delivers unordered). Looks through the queued completions, so the cost is
    /// the queue's length.
    pub fn wait_remote_data_from(&self, source: u16) -> impl Future<Output = Completion> + use<'_> {
        futures_lite::future::poll_fn(move |_| {
            let mut st = self.state.borrow_mut();
            match st
                .remote
                .iter()
                .position(|c| CqData::from_u64(c.data).source == source)
            {
                Some(i) => Poll::Ready(st.remote.remove(i).expect("index from position")),
                None => Poll::Pending,
            }
        })
    }

    /// Resolves once `n` remote CQ data completions from `source` have arrived, consuming
    /// them; like pplx-garden's `ImmCounter::wait`, it counts instead of matching one by one,
    /// so several notifications of one transfer (e.g. one per stripe) may arrive in any order.
    /// Resolves to the completions' tags in arrival order.
    pub fn wait_remote_count(
        &self,
        source: u16,
        n: usize,
    ) -> impl Future<Output = Vec<u16>> + use<'_> {
        self.count_remote(n, move |d| d.source == source)
    }

    /// Resolves once `n` remote CQ data completions carrying exactly `data` (source and tag)
    /// have arrived, consuming them: pplx-garden's `ImmCounter` keyed by the whole value, for
    /// protocols that number their steps in the tag and must not take step *s+1*'s notification
    /// for step *s*'s.
    pub fn wait_remote_exact(&self, data: CqData, n: usize) -> impl Future<Output = ()> + use<'_> {
        let count = self.count_remote(n, move |d| d == data);
        async move {
            count.await;
        }
    }

    fn count_remote<M: FnMut(CqData) -> bool>(
        &self,
        n: usize,
        mut matches: M,
    ) -> impl Future<Output = Vec<u16>> + use<'_, M> {
        let mut tags = Vec::with_capacity(n);
        futures_lite::future::poll_fn(move |_| {
            let mut st = self.state.borrow_mut();
            let mut i = 0;
            while tags.len() < n && i < st.remote.len() {
                let d = CqData::from_u64(st.remote[i].data);
                if matches(d) {
                    st.remote.remove(i);
                    tags.push(d.tag);
                } else {
                    i += 1;
                }
            }
            if tags.len() == n {
                Poll::Ready(std::mem::take(&mut tags))
            } else {
                Poll::Pending
            }
        })
    }

    fn take_done(&self, slot: u32) -> Option<Result<OpResult>> {
        let mut st = self.state.borrow_mut();
        let s = &mut st.slots[slot as usize];
        if let Slot::Async { done, .. } = s {
            if done.is_some() {
                let r = done.take();
                *s = Slot::Free;
                st.free.push(slot);
                return r;
            }
        }
        None
    }

    fn abandon(&self, slot: u32) {
        let pending = {
            let mut st = self.state.borrow_mut();
            match &st.slots[slot as usize] {
                Slot::Async { done: Some(_), .. } => {
                    st.slots[slot as usize] = Slot::Free;
                    st.free.push(slot);
                    false
                }
                Slot::Async { region, .. } => {
                    let region = *region;
                    st.slots[slot as usize] = Slot::Orphan { region };
                    true
                }
                _ => false,
            }
        };
        if pending {
            self.raw.cancel(slot);
        }
    }
}

#[inline(always)]
fn release(st: &mut State, region: u32) {
    if let Some(r) = st
        .regions
        .get_mut(region as usize)
        .and_then(|s| s.region.as_mut())
    {
        r.inflight = r.inflight.saturating_sub(1);
    }
}

enum OpState {
    Unposted {
        op: RawOp,
        name: &'static str,
        region: RegionId,
        off: usize,
        len: usize,
        peer: u64,
    },
    InFlight(u32),
    Failed(Option<Error>),
    Done,
}

/// An operation as a future. It is posted on its first poll (retried on `-FI_EAGAIN`) and
/// completes when an [`crate::Executor`] (or anyone calling [`Rail::progress`]) has read its
/// completion. Dropping it before completion cancels it; its memory stays registered until the
/// provider is done with it.
#[must_use = "an Op does nothing until it is polled"]
pub struct Op<'r> {
    rail: &'r Rail,
    state: OpState,
}

impl Future for Op<'_> {
    type Output = Result<OpResult>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                OpState::InFlight(slot) => {
                    return match this.rail.take_done(*slot) {
                        Some(r) => {
                            this.state = OpState::Done;
                            Poll::Ready(r)
                        }
                        None => Poll::Pending,
                    };
                }
                OpState::Unposted {
                    op,
                    name,
                    region,
                    off,
                    len,
                    peer,
                } => {
                    let res = {
                        let mut st = this.rail.state.borrow_mut();
                        this.rail
                            .try_post(&mut st, *op, name, *region, *off, *len, *peer, None)
                    };
                    match res {
                        Ok(Posted::Slot(s)) => this.state = OpState::InFlight(s),
                        Ok(Posted::Again) => return Poll::Pending,
                        Err(e) => {
                            this.state = OpState::Done;
                            return Poll::Ready(Err(e));
                        }
                    }
                }
                OpState::Failed(e) => {
                    let e = e
                        .take()
                        .unwrap_or_else(|| Error::Usage("operation polled after it failed".into()));
                    this.state = OpState::Done;
                    return Poll::Ready(Err(e));
                }
                OpState::Done => {
                    return Poll::Ready(Err(Error::Usage(
                        "operation polled after it completed".into(),
                    )))
                }
            }
        }
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if let OpState::InFlight(slot) = self.state {
            self.rail.abandon(slot);
        }
    }
}

/// Future returned by [`Rail::remote_data`].
#[must_use = "a future does nothing until it is polled"]
pub struct RemoteData<'r> {
    rail: &'r Rail,
}

impl Future for RemoteData<'_> {
    type Output = Completion;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Completion> {
        match self.rail.state.borrow_mut().remote.pop_front() {
            Some(c) => Poll::Ready(c),
            None => Poll::Pending,
        }
    }
}
