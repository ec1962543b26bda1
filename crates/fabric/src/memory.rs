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
    /// Whether the memory is reachable only by the device (`cuMemAlloc` memory, not managed or
    /// host memory). Registered with `FI_HMEM_DEVICE_ONLY`, which is what lets libfabric's `shm`
    /// move it with CUDA IPC (one device-to-device copy) instead of 32 KiB host bounce buffers,
    /// as fabtests do for every device buffer.
    fn device_only(&self) -> bool {
        false
    }
}

/// How a buffer is registered.
///
/// GPU memory can be registered two ways: through a dmabuf export of the buffer
/// (`FI_MR_DMABUF`, what EFA needs for GPUDirect RDMA without the nvidia-peermem module), or by
/// its device virtual address with `iface = FI_HMEM_CUDA` and the device ordinal (what providers
/// with their own CUDA support, e.g. shm, expect). Which one works depends on the provider, the
/// kernel and the library version, so the choice is explicit and the path actually taken is
/// reported back ([`crate::Rail::region_path`], [`crate::GroupRegion::path_taken`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MrPath {
    /// dmabuf where the provider needs it (efa) and the buffer has one and the negotiated API
    /// allows it; otherwise plain VA registration.
    #[default]
    Auto,
    /// Require a dmabuf: a buffer without one, or a library/provider that cannot take one, is a
    /// usage error.
    Dmabuf,
    /// Never dmabuf: plain VA registration (`FI_HMEM_CUDA` + device for GPU memory).
    Va,
}

impl MrPath {
    /// Every path, in the order the CLI lists them.
    pub const ALL: [MrPath; 3] = [MrPath::Auto, MrPath::Dmabuf, MrPath::Va];

    /// The CLI name: `auto`, `dmabuf`, `va`.
    pub fn name(&self) -> &'static str {
        match self {
            MrPath::Auto => "auto",
            MrPath::Dmabuf => "dmabuf",
            MrPath::Va => "va",
        }
    }
}

impl std::fmt::Display for MrPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for MrPath {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MrPath::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                crate::Error::Usage(format!(
                    "unknown memory registration path {s:?}; use one of auto, dmabuf, va"
                ))
            })
    }
}

/// What a registration actually used: `"dmabuf"` (`FI_MR_DMABUF`), `"va"` (GPU memory by device
/// virtual address with `FI_HMEM_CUDA`) or `"host"` (host memory by virtual address).
pub(crate) fn path_name(dmabuf: bool, hmem: Hmem) -> &'static str {
    match (dmabuf, hmem) {
        (true, _) => "dmabuf",
        (false, Hmem::Cuda { .. }) => "va",
        (false, Hmem::System) => "host",
    }
}
