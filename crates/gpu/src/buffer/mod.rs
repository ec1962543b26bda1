//! Buffers of each memory kind, registrable with libfabric and checkable against the pattern.
//!
//! | kind | allocation | libfabric sees |
//! |---|---|---|
//! | `host` | page-aligned `posix_memalign` (no CUDA needed) | system memory |
//! | `pinned` | `cuMemHostAlloc(PORTABLE \| DEVICEMAP)` | system memory (GPU maps it) |
//! | registered | page-aligned host memory + `cuMemHostRegister(PORTABLE \| DEVICEMAP)` | system memory |
//! | `cuda` | `cuMemAlloc` (not the stream-ordered pool, which NICs cannot register), plus a dmabuf export when the device supports it | `FI_HMEM_CUDA`, or `FI_MR_DMABUF` |
//! | `managed` | `cuMemAllocManaged(GLOBAL)`, refused when larger than the device's free memory (asking for more can hang the GPU) | `FI_HMEM_CUDA` |
//!
//! Device-resident kinds are filled and checked by kernels on their own GPU (`buffer.cu`);
//! host kinds by the CPU with the same pattern code the benchmarks use.
//!
//! ## Why every `cuda` buffer has `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` set
//! A synchronous `cudaMemcpy` between two device buffers returns before the copy has run (the
//! CUDA runtime only queues it). libfabric's `shm` provider moves device memory between
//! processes with exactly such a copy, made by the *peer* process through a CUDA IPC mapping,
//! and then reports the transfer complete: the completion can precede the bytes by tens of
//! microseconds, so bandwidth is measured on queued copies and a check made on completion sees
//! old bytes. With the attribute set on an allocation, synchronous copies touching it finish
//! before they return, so completion means the bytes are there. fabtests sets it on its CUDA
//! buffers and the `efa` provider sets it on every device buffer it is handed; we set it at
//! allocation so every provider sees the same semantics. Measured on an H200 pair
//! (`results/README.md`): without it, `write --mem cuda` over shm read 2.3 TB/s at 16 MiB on one
//! GPU and `read` saw stale words at 128 B.
//!
//! ## Why no `&[u8]` of a buffer is ever handed out through `&self`
//! A buffer is shared (`Arc`) between the benchmark and the rail that registered it, and its
//! bytes change behind any shared reference: [`GpuBuffer::write_at`] writes through `&self`, and
//! the NIC (or the shm provider's copy) writes into registered memory at any time. A `&[u8]` over
//! such memory promises Rust that the bytes do not change while it lives, so handing one out
//! would be undefined behaviour reachable from safe code. Instead:
//! * shared access (`&self`) only ever copies, with [`GpuBuffer::write_at`] / [`GpuBuffer::read_at`],
//!   and host-accessible copies are made of relaxed atomic 8-byte loads and stores on aligned
//!   words (a partial word at either end is updated with a compare-exchange of the whole word),
//!   so two threads writing the same bytes at once leave unspecified bytes but no data race
//!   (a copy between two host buffers is one `rep movsb` on x86-64, whose byte accesses the
//!   hardware makes atomic: the same guarantee, at memcpy speed);
//! * a slice exists only through `&mut self` ([`HostBuffer::as_mut_slice`], `fill_pattern`),
//!   which the borrow checker keeps apart from every `&self` copy and from registration (a rail
//!   holds an `Arc` clone, so no `&mut` can be had while it is registered).
//!
//! Host-accessible allocations are rounded up to whole 8-byte words for this reason.

use crate::driver::{check, driver, Gpu, Shape, Stream};
use crate::error::GpuError;
use crate::kernels::{kernel, Source};
use crate::pattern;
use cudarc::driver::sys;
use efabench_fabric::{DmabufHandle, Hmem, MemoryBuffer};
use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod device;
mod host;
mod on_gpu;
#[cfg(test)]
mod range_tests;

pub use device::*;
pub use host::*;
pub use on_gpu::*;

/// The memory kinds of `--mem` (a clap value set: its names are the command-line spellings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum MemKind {
    /// Host memory on ordinary pages.
    Host,
    /// Host memory on transparent huge pages.
    Huge,
    /// Page-locked host memory mapped into the GPU.
    Pinned,
    /// GPU device memory.
    Cuda,
    /// CUDA managed memory.
    Managed,
}

impl MemKind {
    pub const ALL: [MemKind; 5] = [
        MemKind::Host,
        MemKind::Huge,
        MemKind::Pinned,
        MemKind::Cuda,
        MemKind::Managed,
    ];
    pub fn name(self) -> &'static str {
        match self {
            MemKind::Host => "host",
            MemKind::Huge => "huge",
            MemKind::Pinned => "pinned",
            MemKind::Cuda => "cuda",
            MemKind::Managed => "managed",
        }
    }
    /// Whether the kind needs a CUDA driver.
    pub fn needs_gpu(self) -> bool {
        !self.is_host()
    }
    /// Plain host memory, on small or huge pages (no CUDA involved).
    pub fn is_host(self) -> bool {
        matches!(self, MemKind::Host | MemKind::Huge)
    }
}

impl fmt::Display for MemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A buffer the benchmarks can register, fill and check, whatever its kind.
pub trait GpuBuffer: MemoryBuffer {
    fn kind(&self) -> MemKind;
    /// Writes the pattern of `seed` over the whole buffer (crates/bench/src/pattern.rs).
    fn fill_pattern(&mut self, seed: u64) -> Result<(), GpuError>;
    /// Number of 8-byte words that differ from the pattern of `seed`.
    fn mismatches(&self, seed: u64) -> Result<u64, GpuError>;
    /// The address a kernel uses (device pointer or device mapping), `None` for plain host memory.
    fn device_ptr(&self) -> Option<u64>;
    /// Copies `src` into the buffer at byte `off`. This default is for host-accessible kinds
    /// (host, pinned, registered, managed): a memory copy. Device memory overrides it with
    /// `cuMemcpyHtoD`. This is how the point-to-point benchmarks fill one window slot.
    fn write_at(&self, off: usize, src: &[u8]) -> Result<(), GpuError> {
        host_only(self.kind())?;
        host_write(self.kind().name(), self.as_ptr(), self.len(), off, src)
    }
    /// Copies the bytes at `off` into `dst` (device memory overrides it with `cuMemcpyDtoH`).
    fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<(), GpuError> {
        host_only(self.kind())?;
        host_read(self.kind().name(), self.as_ptr(), self.len(), off, dst)
    }
    /// Waits until every copy this process has queued on the buffer's GPU has finished — the
    /// benchmark's own and libfabric's: the shm provider's CUDA IPC path (and its bounce-buffer
    /// path) copies device memory with `cudaMemcpy` on the legacy stream of the same primary
    /// context, and a device-to-device `cudaMemcpy` returns (and libfabric reports the
    /// completion) before the bytes have landed. A benchmark that stops its clock at a completion
    /// must call this first, or it times the queueing of copies, not the copies. Host kinds have
    /// nothing queued: a no-op.
    fn settle(&self) -> Result<(), GpuError> {
        Ok(())
    }
    /// Writes the pattern of `seed` over `off..off + len` (word 0 of the pattern at `off`, as
    /// [`pattern::fill`] of that slice). Host kinds copy a pattern made on the host; device
    /// memory runs the fill kernel on its GPU, so a benchmark that rewrites its payload every
    /// iteration does not send it over PCIe each time. Returns once the bytes are in place.
    fn fill_range(&self, off: usize, len: usize, seed: u64) -> Result<(), GpuError> {
        let mut v = vec![0u8; len];
        pattern::fill(&mut v, seed);
        self.write_at(off, &v)
    }
    /// Number of 8-byte words of `off..off + len` that differ from the pattern of `seed`
    /// (as [`pattern::mismatches`] of that slice); on the GPU for device memory.
    fn mismatches_in(&self, off: usize, len: usize, seed: u64) -> Result<u64, GpuError> {
        let mut v = vec![0u8; len];
        self.read_at(off, &mut v)?;
        Ok(pattern::mismatches(&v, seed))
    }
}

/// The default `write_at`/`read_at` copy through the pointer: never for device memory.
pub(super) fn host_only(kind: MemKind) -> Result<(), GpuError> {
    if kind == MemKind::Cuda {
        return Err(GpuError::Invalid(
            "device memory is copied with cuMemcpy, not through its pointer".to_string(),
        ));
    }
    Ok(())
}

pub(super) fn check_range(what: &str, len: usize, off: usize, n: usize) -> Result<(), GpuError> {
    match off.checked_add(n) {
        Some(end) if end <= len => Ok(()),
        _ => Err(GpuError::Invalid(format!(
            "range {off}+{n} is outside the {len}-byte {what} buffer"
        ))),
    }
}

/// Copy into host-accessible memory (pageable, pinned, registered or managed) at `base + off`.
///
/// `base` must be 8-byte aligned and the allocation rounded up to whole words (every buffer
/// kind here is), so the aligned word around any byte of `..len` is inside it.
pub(super) fn host_write(
    what: &str,
    base: *mut u8,
    len: usize,
    off: usize,
    src: &[u8],
) -> Result<(), GpuError> {
    check_range(what, len, off, src.len())?;
    let mut pos = off;
    let mut rest = src;
    while !rest.is_empty() {
        let word_start = pos & !7;
        let skip = pos - word_start;
        let take = (8 - skip).min(rest.len());
        // SAFETY: base is 8-aligned and the allocation covers whole words, so word_start..+8 lies
        // in it; every shared access to these bytes is an 8-byte atomic on the same aligned word
        // (no mixed sizes, no non-atomic access while a `&self` exists), so there is no data race.
        let word = unsafe { AtomicU64::from_ptr(base.add(word_start) as *mut u64) };
        if take == 8 {
            let mut w = [0u8; 8];
            w.copy_from_slice(&rest[..8]);
            word.store(u64::from_ne_bytes(w), Ordering::Relaxed);
        } else {
            let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                let mut w = old.to_ne_bytes();
                w[skip..skip + take].copy_from_slice(&rest[..take]);
                Some(u64::from_ne_bytes(w))
            });
        }
        pos += take;
        rest = &rest[take..];
    }
    Ok(())
}

/// Copies `len` bytes from `src` at `src_off` into `dst` at `dst_off`, in one pass: device to
/// device with `cuMemcpyDtoD` when both are device memory, word by word (aligned atomics, as
/// `host_write`) when both are host-accessible and the offsets and length are whole words, else
/// through a host copy. What an all-to-all does with a rank's own chunk, inside its timed loop.
pub fn copy_between(
    src: &dyn GpuBuffer,
    src_off: usize,
    dst: &dyn GpuBuffer,
    dst_off: usize,
    len: usize,
) -> Result<(), GpuError> {
    copy(src, src_off, dst, dst_off, len, false)
}

/// As [`copy_between`], except that a copy between two device buffers is only queued (on the
/// calling thread's stream): it has landed once [`GpuBuffer::settle`] of either buffer returns.
/// A loop that copies many messages to itself pays one synchronisation instead of one per copy
/// (about 14 µs each under MPS on an H100). Other kinds copy at once.
pub fn queue_copy_between(
    src: &dyn GpuBuffer,
    src_off: usize,
    dst: &dyn GpuBuffer,
    dst_off: usize,
    len: usize,
) -> Result<(), GpuError> {
    copy(src, src_off, dst, dst_off, len, true)
}

pub(super) fn copy(
    src: &dyn GpuBuffer,
    src_off: usize,
    dst: &dyn GpuBuffer,
    dst_off: usize,
    len: usize,
    queued: bool,
) -> Result<(), GpuError> {
    check_range(src.kind().name(), src.len(), src_off, len)?;
    check_range(dst.kind().name(), dst.len(), dst_off, len)?;
    match (src.kind(), dst.kind()) {
        (MemKind::Cuda, MemKind::Cuda) => {
            let (s, d) = (src.device_ptr(), dst.device_ptr());
            let (Some(s), Some(d)) = (s, d) else {
                return Err(GpuError::Invalid(
                    "device buffer without a device address".into(),
                ));
            };
            let (s, d) = (s + src_off as u64, d + dst_off as u64);
            driver()?;
            if queued {
                // SAFETY: both ranges lie inside live device allocations (checked above). The
                // buffers outlive the copy: their settle (a context synchronisation) waits for
                // it, and dropping a device buffer synchronises the context before freeing it.
                check("cuMemcpyDtoDAsync", unsafe {
                    sys::cuMemcpyDtoDAsync_v2(d, s, len, per_thread_stream())
                })
            } else {
                // SAFETY: both ranges lie inside live device allocations (checked above; the
                // buffers are borrowed for the call) and the copy is synchronous.
                check("cuMemcpyDtoD", unsafe { sys::cuMemcpyDtoD_v2(d, s, len) })
            }
        }
        (MemKind::Cuda, _) | (_, MemKind::Cuda) => {
            let mut tmp = vec![0u8; len];
            src.read_at(src_off, &mut tmp)?;
            dst.write_at(dst_off, &tmp)
        }
        _ if (src_off | dst_off | len) % 8 == 0 && !overlap(src, src_off, dst, dst_off, len) => {
            // SAFETY: both buffers are 8-aligned allocations covering whole words (every
            // host-accessible kind here), both ranges lie inside them (checked above) and they
            // do not overlap (checked in the guard).
            unsafe { copy_host_words(src.as_ptr().add(src_off), dst.as_ptr().add(dst_off), len) };
            Ok(())
        }
        _ => {
            let mut tmp = vec![0u8; len];
            src.read_at(src_off, &mut tmp)?;
            dst.write_at(dst_off, &tmp)
        }
    }
}

/// Whether `len` bytes at `src_off` of `src` and at `dst_off` of `dst` share an address.
pub(super) fn overlap(
    src: &dyn GpuBuffer,
    src_off: usize,
    dst: &dyn GpuBuffer,
    dst_off: usize,
    len: usize,
) -> bool {
    let s = src.as_ptr() as usize + src_off;
    let d = dst.as_ptr() as usize + dst_off;
    s < d + len && d < s + len
}

/// Copies `len` bytes (a multiple of 8) from `src` to `dst`, host memory that other threads may
/// access at the same time under the word rules of [`host_write`].
///
/// On x86-64 this is one `rep movsb` (a few times faster than a loop of 8-byte atomics, which
/// the compiler cannot widen: 16 KiB in about 0.2 µs against 0.8 µs), elsewhere that loop.
///
/// # Safety
/// `src..src+len` and `dst..dst+len` lie inside live allocations, are 8-byte aligned and do not
/// overlap.
#[inline]
unsafe fn copy_host_words(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the ranges are valid and disjoint (the caller's contract). The block is opaque to
    // the compiler, which must assume it reads and writes exactly those bytes; its loads and
    // stores are the hardware's, and x86-64 makes each byte access single-copy atomic, so this
    // behaves as a copy of relaxed atomic bytes: a concurrent atomic word access from another
    // thread can leave unspecified bytes, as two racing `host_write`s can, but is no data race.
    // `rep movsb` copies forward (the ABI keeps the direction flag clear) and touches no stack.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    for w in (0..len).step_by(8) {
        // SAFETY: aligned words inside the ranges (the caller's contract); shared accesses to
        // them are 8-byte atomics, as in host_write/host_read.
        let (a, b) = unsafe {
            (
                AtomicU64::from_ptr(src.add(w) as *mut u64),
                AtomicU64::from_ptr(dst.add(w) as *mut u64),
            )
        };
        b.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Copy out of host-accessible memory at `base + off` (same word rules as [`host_write`]).
pub(super) fn host_read(
    what: &str,
    base: *const u8,
    len: usize,
    off: usize,
    dst: &mut [u8],
) -> Result<(), GpuError> {
    check_range(what, len, off, dst.len())?;
    let mut pos = off;
    let mut done = 0;
    while done < dst.len() {
        let word_start = pos & !7;
        let skip = pos - word_start;
        let take = (8 - skip).min(dst.len() - done);
        // SAFETY: as in host_write: an aligned word inside the allocation, only ever accessed
        // atomically while shared.
        let word = unsafe { AtomicU64::from_ptr(base.add(word_start) as *mut u64) };
        let w = word.load(Ordering::Relaxed).to_ne_bytes();
        dst[done..done + take].copy_from_slice(&w[skip..skip + take]);
        pos += take;
        done += take;
    }
    Ok(())
}

/// Pattern check of a host-accessible buffer from a copy (never a slice of shared memory).
pub(super) fn host_mismatches<B: GpuBuffer + ?Sized>(b: &B, seed: u64) -> Result<u64, GpuError> {
    let mut copy = vec![0u8; b.len()];
    b.read_at(0, &mut copy)?;
    Ok(pattern::mismatches(&copy, seed))
}

pub(super) fn nonzero(len: usize) -> Result<(), GpuError> {
    if len == 0 {
        Err(GpuError::Invalid(
            "a buffer needs at least 1 byte: pass a size of 1 or more".to_string(),
        ))
    } else {
        Ok(())
    }
}

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

pub(super) fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

// SAFETY: every method delegates to the boxed buffer, which upholds the contract itself; the
// box keeps it at the same address for as long as the box lives.
unsafe impl MemoryBuffer for Box<dyn GpuBuffer> {
    fn as_ptr(&self) -> *mut u8 {
        (**self).as_ptr()
    }
    fn len(&self) -> usize {
        (**self).len()
    }
    fn hmem(&self) -> Hmem {
        (**self).hmem()
    }
    fn dmabuf(&self) -> Option<DmabufHandle> {
        (**self).dmabuf()
    }
    fn device_only(&self) -> bool {
        (**self).device_only()
    }
}

/// Allocates a buffer of `kind` and `len` bytes on GPU `device` (ignored for `host`, which
/// needs no CUDA driver).
pub fn alloc(kind: MemKind, len: usize, device: i32) -> Result<Box<dyn GpuBuffer>, GpuError> {
    let gpu = || -> Result<Arc<Gpu>, GpuError> {
        driver()?;
        Gpu::open(device)
    };
    Ok(match kind {
        MemKind::Host => {
            nonzero(len)?;
            Box::new(HostBuffer::new(len).map_err(GpuError::HostAlloc)?)
        }
        MemKind::Huge => {
            nonzero(len)?;
            Box::new(HostBuffer::new_huge(len).map_err(GpuError::HostAlloc)?)
        }
        MemKind::Pinned => Box::new(PinnedBuffer::new(&gpu()?, len)?),
        MemKind::Cuda => Box::new(DeviceBuffer::new(&gpu()?, len)?),
        MemKind::Managed => Box::new(ManagedBuffer::new(&gpu()?, len)?),
    })
}

/// Host memory registered with CUDA (`cuMemHostRegister`), for callers that want that kind.
pub fn alloc_registered(len: usize, device: i32) -> Result<RegisteredBuffer, GpuError> {
    driver()?;
    RegisteredBuffer::new(&Gpu::open(device)?, len)
}
