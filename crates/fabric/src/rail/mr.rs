//! Memory registered on a rail: registering a buffer the way the provider's `mr_mode` asks,
//! describing it to peers ([`RemoteRegion`]) and deregistering it.
//!
//! Regions live in a table of slots with a generation each: deregistering bumps the generation,
//! so a [`RegionId`] kept after [`Rail::deregister`] is refused instead of reaching a later
//! registration that reuses the slot. Each region counts the operations in flight on it (raised
//! by a post, lowered by its completion), and a busy region cannot be deregistered: that count is
//! what keeps the memory alive while the NIC may still touch it.

use std::sync::Arc;

use efabench_fabric_sys as sys;

use super::{Rail, State};
use crate::error::{Error, Result};
use crate::memory::{path_name, Hmem, MemoryBuffer, MrPath};
use crate::raw::RawMr;

/// A memory region registered on one rail: the rail, the region's slot in the rail's table and
/// the slot's generation.
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

/// One registration.
pub(super) struct Region {
    pub(super) mr: RawMr,
    /// Operations posted on this region whose completion has not been read yet.
    pub(super) inflight: u32,
    remote: RemoteRegion,
    /// "dmabuf", "va" or "host": how the registration was made.
    path: &'static str,
}

/// One entry of the region table: the registration (if any) and the generation of the slot.
#[derive(Default)]
pub(super) struct RegionSlot {
    gen: u32,
    region: Option<Region>,
}

impl RegionSlot {
    pub(super) fn get(&self) -> Option<&Region> {
        self.region.as_ref()
    }
}

impl State {
    /// One operation on region `index` has been posted.
    #[inline(always)]
    pub(super) fn acquire(&mut self, index: u32) {
        if let Some(r) = self.region_mut(index) {
            r.inflight += 1;
        }
    }

    /// One operation on region `index` (or [`super::NO_REGION`]) has completed.
    #[inline(always)]
    pub(super) fn release(&mut self, index: u32) {
        if let Some(r) = self.region_mut(index) {
            r.inflight = r.inflight.saturating_sub(1);
        }
    }

    #[inline(always)]
    fn region_mut(&mut self, index: u32) -> Option<&mut Region> {
        self.regions
            .get_mut(index as usize)
            .and_then(|s| s.region.as_mut())
    }
}

impl Rail {
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
    #[inline(always)]
    pub(super) fn check_region(&self, st: &State, id: RegionId) -> Result<u32> {
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
}
