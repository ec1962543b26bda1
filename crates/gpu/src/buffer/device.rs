//! Device-resident kinds: `cuda` (`cuMemAlloc`, with a dmabuf export) and `managed`.

use super::*;

/// Device memory from `cuMemAlloc` (`--mem cuda`), with a dmabuf export when supported.
pub struct DeviceBuffer {
    pub(super) gpu: Arc<Gpu>,
    pub(super) ptr: u64,
    pub(super) len: usize,
    pub(super) cap: usize,
    pub(super) dmabuf: Option<DmabufHandle>,
}

// SAFETY: device memory and the dmabuf fd are owned by the value and freed once; CUDA device
// pointers and fds are valid from any thread.
unsafe impl Send for DeviceBuffer {}
// SAFETY: `&self` never makes a Rust reference to the memory (it is not host memory): it only
// queues cuMemcpy to or from it, which the driver orders; concurrent copies to the same bytes
// leave unspecified device bytes, not undefined behaviour in this process.
unsafe impl Sync for DeviceBuffer {}

/// Device allocations are rounded up to this, so each starts on its own 2 MiB page (what a
/// dmabuf export and GPUDirect RDMA pinning want).
pub(super) const DEVICE_GRANULE: usize = 2 << 20;

impl DeviceBuffer {
    pub fn new(gpu: &Arc<Gpu>, len: usize) -> Result<DeviceBuffer, GpuError> {
        nonzero(len)?;
        gpu.bind()?;
        let cap = round_up(len, DEVICE_GRANULE);
        let mut ptr: u64 = 0;
        // SAFETY: ptr is a valid out pointer; the context is current.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, cap) })?;
        let mut b = DeviceBuffer {
            gpu: gpu.clone(),
            ptr,
            len,
            cap,
            dmabuf: None,
        };
        // SAFETY: ptr..ptr+cap is the allocation just made; the context is current.
        check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(ptr, 0, cap) })?;
        // Synchronous copies touching this allocation finish before they return (module doc).
        let on: u32 = 1;
        // SAFETY: the value points to a live u32, the size this attribute reads; ptr is the
        // base of the allocation just made in the current context.
        check("cuPointerSetAttribute(SYNC_MEMOPS)", unsafe {
            sys::cuPointerSetAttribute(
                &on as *const u32 as *const c_void,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                ptr,
            )
        })?;
        // Finished before non-blocking streams (which do not wait for the legacy one) use it.
        gpu.synchronize()?;
        if gpu.dmabuf_supported {
            b.dmabuf = b.export_dmabuf().ok();
        }
        Ok(b)
    }

    pub(super) fn export_dmabuf(&self) -> Result<DmabufHandle, GpuError> {
        let mut fd: i32 = -1;
        // SAFETY: the range is one whole cuMemAlloc allocation (2 MiB aligned and sized); fd is
        // a valid out pointer of the int the DMA_BUF_FD handle type writes.
        check("cuMemGetHandleForAddressRange", unsafe {
            sys::cuMemGetHandleForAddressRange(
                &mut fd as *mut i32 as *mut c_void,
                self.ptr,
                self.cap,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        Ok(DmabufHandle { fd, offset: 0 })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    /// Copies the buffer to host memory (for checks in tests).
    pub fn to_host(&self) -> Result<Vec<u8>, GpuError> {
        copy_to_host(&self.gpu, self.ptr, self.len)
    }
    /// Whether synchronous copies touching this allocation finish before they return
    /// (`CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`, set at allocation; see the module doc).
    pub fn sync_memops(&self) -> Result<bool, GpuError> {
        self.gpu.bind()?;
        let mut v: u32 = 0;
        // SAFETY: v is a live u32, the size this attribute writes; ptr is a live allocation.
        check("cuPointerGetAttribute(SYNC_MEMOPS)", unsafe {
            sys::cuPointerGetAttribute(
                &mut v as *mut u32 as *mut c_void,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                self.ptr,
            )
        })?;
        Ok(v != 0)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Some(d) = self.dmabuf {
            // SAFETY: fd was returned by the driver for this buffer and is closed once.
            unsafe { libc::close(d.fd) };
        }
        // Kernels and copies queued by the safe launches may still use the buffer: wait first.
        if self.gpu.bind().is_ok() && self.gpu.synchronize().is_ok() {
            // SAFETY: ptr came from cuMemAlloc and is freed once.
            let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
        }
    }
}

// SAFETY: ptr..ptr+len lies in one live cuMemAlloc allocation of this device; the dmabuf, when
// present, exports that allocation from offset 0.
unsafe impl MemoryBuffer for DeviceBuffer {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
    fn len(&self) -> usize {
        self.len
    }
    fn hmem(&self) -> Hmem {
        Hmem::Cuda {
            device: self.gpu.ordinal,
        }
    }
    fn dmabuf(&self) -> Option<DmabufHandle> {
        self.dmabuf
    }
    fn device_only(&self) -> bool {
        true
    }
}

impl GpuBuffer for DeviceBuffer {
    fn kind(&self) -> MemKind {
        MemKind::Cuda
    }
    fn fill_pattern(&mut self, seed: u64) -> Result<(), GpuError> {
        fill_on_gpu(&self.gpu, self.ptr, self.len, seed)
    }
    fn mismatches(&self, seed: u64) -> Result<u64, GpuError> {
        mismatches_on_gpu(&self.gpu, self.ptr, self.len, seed)
    }
    /// A copy on this thread's implicit stream, then a synchronisation of that stream: from
    /// pageable memory a plain `cuMemcpyHtoD` returns once the bytes are staged, before they
    /// reach device memory, and another process (a peer reading through CUDA IPC, as shm does)
    /// or the NIC (GPUDirect RDMA) would read stale bytes. The per-thread stream orders after
    /// the legacy stream (libfabric's copies) but not after the non-blocking streams of running
    /// kernels: a proxy thread rewriting a buffer while a kernel spins waiting for that proxy
    /// must not wait for the kernel, as a context synchronisation would.
    fn write_at(&self, off: usize, src: &[u8]) -> Result<(), GpuError> {
        check_range("cuda", self.len, off, src.len())?;
        self.gpu.bind()?;
        // SAFETY: the device range ptr+off..+src.len() lies inside this live allocation (checked);
        // src is a host slice of that length, borrowed until the stream synchronisation below
        // has seen the copy complete.
        check("cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                self.ptr + off as u64,
                src.as_ptr() as *const c_void,
                src.len(),
                per_thread_stream(),
            )
        })?;
        // SAFETY: the per-thread stream handle is valid in any thread with a current context.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(per_thread_stream())
        })
    }
    fn settle(&self) -> Result<(), GpuError> {
        self.gpu.synchronize()
    }
    fn fill_range(&self, off: usize, len: usize, seed: u64) -> Result<(), GpuError> {
        check_range("cuda", self.len, off, len)?;
        // The fill kernel's writes are device memory the caller owns through &self, exactly as
        // write_at's copy is: no Rust reference covers device memory.
        fill_on_gpu(&self.gpu, self.ptr + off as u64, len, seed)
    }
    fn mismatches_in(&self, off: usize, len: usize, seed: u64) -> Result<u64, GpuError> {
        check_range("cuda", self.len, off, len)?;
        mismatches_on_gpu(&self.gpu, self.ptr + off as u64, len, seed)
    }
    fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<(), GpuError> {
        check_range("cuda", self.len, off, dst.len())?;
        self.gpu.bind()?;
        // SAFETY: as in write_at; dst is a host slice of the copied length.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(
                dst.as_mut_ptr() as *mut c_void,
                self.ptr + off as u64,
                dst.len(),
            )
        })
    }
    fn device_ptr(&self) -> Option<u64> {
        Some(self.ptr)
    }
}

/// Managed memory from `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)` (`--mem managed`).
pub struct ManagedBuffer {
    pub(super) gpu: Arc<Gpu>,
    pub(super) ptr: u64,
    pub(super) len: usize,
}

// SAFETY: memory owned by the value and freed once; the pointer is valid on any host thread.
unsafe impl Send for ManagedBuffer {}
// SAFETY: `&self` touches the host view only through the word-atomic copies of write_at/read_at
// (the allocation is rounded up to whole words) and the GPU through kernels; no Rust reference
// to the memory is ever made.
unsafe impl Sync for ManagedBuffer {}

impl ManagedBuffer {
    pub fn new(gpu: &Arc<Gpu>, len: usize) -> Result<ManagedBuffer, GpuError> {
        nonzero(len)?;
        let (free, _) = gpu.mem_info()?;
        if len > free {
            return Err(GpuError::Invalid(format!(
                "managed buffer of {len} bytes is larger than GPU {}'s free memory ({free} bytes): \
                 use a smaller size (oversubscribing managed memory can hang the GPU)",
                gpu.ordinal
            )));
        }
        let mut ptr: u64 = 0;
        // SAFETY: ptr is a valid out pointer; the context is current (mem_info bound it).
        check("cuMemAllocManaged", unsafe {
            sys::cuMemAllocManaged(
                &mut ptr,
                // Whole words for the atomic host copies (see the module docs).
                round_up(len, 8),
                sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
            )
        })?;
        let b = ManagedBuffer {
            gpu: gpu.clone(),
            ptr,
            len,
        };
        fill_zero(&b.gpu, ptr, len)?;
        Ok(b)
    }
}

impl Drop for ManagedBuffer {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: ptr came from cuMemAllocManaged and is freed once.
            let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
        }
    }
}

// SAFETY: one live managed allocation owned by self; libfabric treats it as CUDA memory.
unsafe impl MemoryBuffer for ManagedBuffer {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
    fn len(&self) -> usize {
        self.len
    }
    fn hmem(&self) -> Hmem {
        Hmem::Cuda {
            device: self.gpu.ordinal,
        }
    }
}

impl GpuBuffer for ManagedBuffer {
    fn kind(&self) -> MemKind {
        MemKind::Managed
    }
    fn fill_pattern(&mut self, seed: u64) -> Result<(), GpuError> {
        fill_on_gpu(&self.gpu, self.ptr, self.len, seed)
    }
    fn mismatches(&self, seed: u64) -> Result<u64, GpuError> {
        mismatches_on_gpu(&self.gpu, self.ptr, self.len, seed)
    }
    fn device_ptr(&self) -> Option<u64> {
        Some(self.ptr)
    }
    fn settle(&self) -> Result<(), GpuError> {
        self.gpu.synchronize()
    }
}
