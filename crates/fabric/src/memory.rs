//! Memory that libfabric may read and write, whoever allocated it.
//!
//! The fabric layer registers host buffers it allocates itself; the gpu layer implements
//! [`MemoryBuffer`] for CUDA device, pinned, registered and managed buffers, so the fabric crate
//! never depends on CUDA and the gpu crate never calls libfabric.

use std::os::fd::RawFd;

/// Where the memory lives, as libfabric's `enum fi_hmem_iface` sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hmem {
    /// Host memory (pageable, pinned or CUDA-registered host memory all count as system memory).
    System,
    /// CUDA device memory of the given device ordinal (`FI_HMEM_CUDA`, `device.cuda`).
    Cuda { device: i32 },
}

/// A dmabuf export of a buffer (`cuMemGetHandleForAddressRange`), for `FI_MR_DMABUF` registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmabufHandle {
    pub fd: RawFd,
    /// Offset of the buffer's first byte inside the dmabuf.
    pub offset: u64,
}

/// Memory that may be registered with a domain.
///
/// # Safety
/// Implementors promise that `as_ptr()..as_ptr()+len()` is one allocation of the kind `hmem()`
/// names, valid (not freed, not moved) for as long as the value lives, and that `dmabuf()`, when
/// `Some`, describes that same range.
pub unsafe trait MemoryBuffer: Send + Sync {
    /// Base address (a host virtual address, or a CUDA device pointer).
    fn as_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True when the buffer has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Where the memory lives.
    fn hmem(&self) -> Hmem;
    /// A dmabuf export of the buffer, when one was made.
    fn dmabuf(&self) -> Option<DmabufHandle> {
        None
    }
}
