//! Memory both the host and a running kernel reach, where command rings and their control words
//! live: mapped pinned host memory, managed memory, or device memory the host reaches through a
//! GDRCopy mapping (write-combined: the host's stores need a fence to leave promptly). The queue
//! benchmark measures ring designs over these placements; the proxy places its rings the same
//! way (`--ring`).

use crate::buffer::{DeviceBuffer, ManagedBuffer, PinnedBuffer};
use crate::driver::Gpu;
use crate::error::GpuError;
use crate::gdr::{Gdr, GdrMapping};
use efabench_fabric::MemoryBuffer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Memory the host reaches through a pointer: pinned, managed or GDR-mapped.
pub(crate) enum HostMem {
    Pinned(PinnedBuffer),
    Managed(ManagedBuffer),
    Gdr(GdrMapping),
}

impl HostMem {
    pub(crate) fn host(&self) -> *mut u8 {
        match self {
            HostMem::Pinned(b) => b.as_ptr(),
            HostMem::Managed(b) => b.as_ptr(),
            HostMem::Gdr(m) => m.host(),
        }
    }
    /// The address a kernel uses.
    pub(crate) fn device(&self) -> u64 {
        use crate::buffer::GpuBuffer;
        match self {
            HostMem::Pinned(b) => b.device_ptr().unwrap_or(0),
            HostMem::Managed(b) => b.device_ptr().unwrap_or(0),
            HostMem::Gdr(m) => m.device(),
        }
    }
    pub(crate) fn len(&self) -> usize {
        match self {
            HostMem::Pinned(b) => b.len(),
            HostMem::Managed(b) => b.len(),
            HostMem::Gdr(m) => m.len(),
        }
    }
    /// Device memory behind a write-combined mapping: a host store needs a fence to be seen.
    pub(crate) fn write_combined(&self) -> bool {
        matches!(self, HostMem::Gdr(_))
    }
    /// The memory as u64 atomics.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        // SAFETY: the allocation is at least len bytes, 8-byte aligned (page-aligned allocations
        // from the driver), lives as long as self, and is only ever accessed through atomics by
        // the host (the GPU's concurrent writes are outside Rust's memory model, as for any
        // memory shared with a device).
        unsafe { std::slice::from_raw_parts(self.host() as *const AtomicU64, self.len() / 8) }
    }
    pub(crate) fn zero(&self) {
        for w in self.words() {
            w.store(0, Ordering::Relaxed);
        }
        if self.write_combined() {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }
}

pub(crate) fn pinned(gpu: &Arc<Gpu>, len: usize) -> Result<HostMem, GpuError> {
    Ok(HostMem::Pinned(PinnedBuffer::new(gpu, len)?))
}
pub(crate) fn managed(gpu: &Arc<Gpu>, len: usize) -> Result<HostMem, GpuError> {
    Ok(HostMem::Managed(ManagedBuffer::new(gpu, len)?))
}
pub(crate) fn gdr_mapped(gpu: &Arc<Gpu>, len: usize) -> Result<HostMem, GpuError> {
    let g = Gdr::open()?;
    let buf = Arc::new(DeviceBuffer::new(gpu, len)?);
    Ok(HostMem::Gdr(g.map(buf, len)?))
}
