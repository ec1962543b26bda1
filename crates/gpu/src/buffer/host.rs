//! Host-memory kinds: page-aligned `host`, `pinned` (`cuMemHostAlloc`) and registered host memory.

use super::*;

/// Page-aligned host memory from `posix_memalign`, zeroed.
pub(super) struct AlignedHost {
    pub(super) ptr: *mut u8,
    pub(super) cap: usize,
}

impl AlignedHost {
    pub(super) fn new(len: usize) -> Result<AlignedHost, GpuError> {
        let cap = round_up(len.max(1), page_size());
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: p is a valid out pointer; alignment is a power of two multiple of pointer size.
        let rc = unsafe { libc::posix_memalign(&mut p, page_size(), cap) };
        if rc != 0 || p.is_null() {
            return Err(GpuError::Invalid(format!(
                "could not allocate {cap} bytes of host memory: use a smaller size"
            )));
        }
        // SAFETY: p points at cap freshly allocated bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, cap) };
        Ok(AlignedHost {
            ptr: p as *mut u8,
            cap,
        })
    }
}

impl Drop for AlignedHost {
    fn drop(&mut self) {
        // SAFETY: ptr came from posix_memalign and is freed once.
        unsafe { libc::free(self.ptr as *mut c_void) }
    }
}

/// Plain page-aligned host memory (`--mem host`), needing no CUDA: the fabric crate's
/// [`HostBuffer`] (one host buffer type for the whole workspace), with the pattern methods of
/// [`GpuBuffer`] here.
pub use efabench_fabric::HostBuffer;

impl GpuBuffer for HostBuffer {
    fn kind(&self) -> MemKind {
        if self.is_huge() {
            MemKind::Huge
        } else {
            MemKind::Host
        }
    }
    fn fill_pattern(&mut self, seed: u64) -> Result<(), GpuError> {
        pattern::fill(self.as_mut_slice(), seed);
        Ok(())
    }
    fn mismatches(&self, seed: u64) -> Result<u64, GpuError> {
        host_mismatches(self, seed)
    }
    fn device_ptr(&self) -> Option<u64> {
        None
    }
}

/// Pinned host memory from `cuMemHostAlloc(PORTABLE | DEVICEMAP)` (`--mem pinned`).
pub struct PinnedBuffer {
    pub(super) gpu: Arc<Gpu>,
    pub(super) host: *mut u8,
    pub(super) dev: u64,
    pub(super) len: usize,
}

// SAFETY: the allocation is owned by the value and freed once (after binding its portable
// context, which any thread may do); it is not tied to the allocating thread.
unsafe impl Send for PinnedBuffer {}
// SAFETY: as for HostBuffer: `&self` only copies with word-sized atomics; the NIC's and the
// GPU's writes into the pinned pages are never seen through a Rust reference.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    pub fn new(gpu: &Arc<Gpu>, len: usize) -> Result<PinnedBuffer, GpuError> {
        nonzero(len)?;
        gpu.bind()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // Whole words: the atomic copies touch the aligned word around every byte.
        let cap = round_up(len, 8);
        // SAFETY: p is a valid out pointer; the context is current.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(
                &mut p,
                cap,
                sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP,
            )
        })?;
        // SAFETY: p points at cap bytes of pinned memory just allocated (page aligned).
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, cap) };
        let mut dev: u64 = 0;
        // SAFETY: p was allocated with DEVICEMAP; dev is a valid out pointer.
        let r = check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dev, p, 0)
        });
        let b = PinnedBuffer {
            gpu: gpu.clone(),
            host: p as *mut u8,
            dev,
            len,
        };
        r.map(|_| b)
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: host came from cuMemHostAlloc and is freed once.
            let _ = unsafe { sys::cuMemFreeHost(self.host as *mut c_void) };
        }
    }
}

// SAFETY: host..host+len is one live pinned allocation owned by self; libfabric sees system memory.
unsafe impl MemoryBuffer for PinnedBuffer {
    fn as_ptr(&self) -> *mut u8 {
        self.host
    }
    fn len(&self) -> usize {
        self.len
    }
    fn hmem(&self) -> Hmem {
        Hmem::System
    }
}

impl GpuBuffer for PinnedBuffer {
    fn kind(&self) -> MemKind {
        MemKind::Pinned
    }
    fn fill_pattern(&mut self, seed: u64) -> Result<(), GpuError> {
        // SAFETY: exclusive access through &mut self to len owned bytes.
        let s = unsafe { std::slice::from_raw_parts_mut(self.host, self.len) };
        pattern::fill(s, seed);
        Ok(())
    }
    fn mismatches(&self, seed: u64) -> Result<u64, GpuError> {
        host_mismatches(self, seed)
    }
    fn device_ptr(&self) -> Option<u64> {
        Some(self.dev)
    }
}

/// Page-aligned host memory registered with `cuMemHostRegister(PORTABLE | DEVICEMAP)`.
pub struct RegisteredBuffer {
    pub(super) gpu: Arc<Gpu>,
    pub(super) mem: AlignedHost,
    pub(super) dev: u64,
    pub(super) len: usize,
}

// SAFETY: as for PinnedBuffer: owned, freed once, not tied to the allocating thread.
unsafe impl Send for RegisteredBuffer {}
// SAFETY: as for HostBuffer: `&self` only copies with word-sized atomics.
unsafe impl Sync for RegisteredBuffer {}

impl RegisteredBuffer {
    pub fn new(gpu: &Arc<Gpu>, len: usize) -> Result<RegisteredBuffer, GpuError> {
        nonzero(len)?;
        gpu.bind()?;
        let mem = AlignedHost::new(len)?;
        // SAFETY: mem.ptr..+cap is a live page-aligned allocation that outlives the registration
        // (unregistered in Drop before AlignedHost frees it).
        check("cuMemHostRegister", unsafe {
            sys::cuMemHostRegister_v2(
                mem.ptr as *mut c_void,
                mem.cap,
                sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP,
            )
        })?;
        let mut dev: u64 = 0;
        // SAFETY: the range is registered with DEVICEMAP; dev is a valid out pointer.
        let r = check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dev, mem.ptr as *mut c_void, 0)
        });
        let b = RegisteredBuffer {
            gpu: gpu.clone(),
            mem,
            dev,
            len,
        };
        r.map(|_| b)
    }
}

impl Drop for RegisteredBuffer {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: the range was registered in new(); AlignedHost frees it after this.
            let _ = unsafe { sys::cuMemHostUnregister(self.mem.ptr as *mut c_void) };
        }
    }
}

// SAFETY: one live host allocation owned by self; libfabric sees system memory.
unsafe impl MemoryBuffer for RegisteredBuffer {
    fn as_ptr(&self) -> *mut u8 {
        self.mem.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn hmem(&self) -> Hmem {
        Hmem::System
    }
}

impl GpuBuffer for RegisteredBuffer {
    fn kind(&self) -> MemKind {
        // Host memory as far as --mem is concerned; it differs only in being GPU-mapped.
        MemKind::Host
    }
    fn fill_pattern(&mut self, seed: u64) -> Result<(), GpuError> {
        // SAFETY: exclusive access through &mut self to len owned bytes.
        let s = unsafe { std::slice::from_raw_parts_mut(self.mem.ptr, self.len) };
        pattern::fill(s, seed);
        Ok(())
    }
    fn mismatches(&self, seed: u64) -> Result<u64, GpuError> {
        host_mismatches(self, seed)
    }
    fn device_ptr(&self) -> Option<u64> {
        Some(self.dev)
    }
}
