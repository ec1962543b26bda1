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
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The memory kinds of `--mem`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemKind {
    Host,
    /// Host memory on transparent huge pages.
    Huge,
    Pinned,
    Cuda,
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

impl FromStr for MemKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let l = s.trim().to_ascii_lowercase();
        MemKind::ALL
            .into_iter()
            .find(|k| k.name() == l)
            .ok_or_else(|| {
                format!("unknown memory kind {s:?}: use one of host, huge, pinned, cuda, managed (--mem)")
            })
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
fn host_only(kind: MemKind) -> Result<(), GpuError> {
    if kind == MemKind::Cuda {
        return Err(GpuError::Invalid(
            "device memory is copied with cuMemcpy, not through its pointer".to_string(),
        ));
    }
    Ok(())
}

fn check_range(what: &str, len: usize, off: usize, n: usize) -> Result<(), GpuError> {
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
fn host_write(
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

fn copy(
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
fn overlap(
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
fn host_read(
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
fn host_mismatches<B: GpuBuffer + ?Sized>(b: &B, seed: u64) -> Result<u64, GpuError> {
    let mut copy = vec![0u8; b.len()];
    b.read_at(0, &mut copy)?;
    Ok(pattern::mismatches(&copy, seed))
}

fn nonzero(len: usize) -> Result<(), GpuError> {
    if len == 0 {
        Err(GpuError::Invalid(
            "a buffer needs at least 1 byte: pass a size of 1 or more".to_string(),
        ))
    } else {
        Ok(())
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

/// Page-aligned host memory from `posix_memalign`, zeroed.
struct AlignedHost {
    ptr: *mut u8,
    cap: usize,
}

impl AlignedHost {
    fn new(len: usize) -> Result<AlignedHost, GpuError> {
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
    gpu: Arc<Gpu>,
    host: *mut u8,
    dev: u64,
    len: usize,
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
    gpu: Arc<Gpu>,
    mem: AlignedHost,
    dev: u64,
    len: usize,
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

/// Device memory from `cuMemAlloc` (`--mem cuda`), with a dmabuf export when supported.
pub struct DeviceBuffer {
    gpu: Arc<Gpu>,
    ptr: u64,
    len: usize,
    cap: usize,
    dmabuf: Option<DmabufHandle>,
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
const DEVICE_GRANULE: usize = 2 << 20;

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

    fn export_dmabuf(&self) -> Result<DmabufHandle, GpuError> {
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
    gpu: Arc<Gpu>,
    ptr: u64,
    len: usize,
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

/// `CU_STREAM_PER_THREAD` of cuda.h: the calling thread's implicit stream (cudarc has no
/// constant for it).
fn per_thread_stream() -> sys::CUstream {
    std::ptr::without_provenance_mut(0x2)
}

fn fill_zero(gpu: &Arc<Gpu>, ptr: u64, len: usize) -> Result<(), GpuError> {
    gpu.bind()?;
    // SAFETY: ptr..ptr+len is an allocation of this context.
    check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(ptr, 0, len) })?;
    gpu.synchronize()
}

/// Launch shape for the pattern kernels: enough blocks to cover the GPU, never more than needed.
pub fn pattern_shape(gpu: &Gpu, len: usize) -> Shape {
    let words = (len as u64).div_ceil(8).max(1);
    let max_blocks = u64::from(gpu.sm_count.max(1)) * 8;
    Shape {
        grid: words.div_ceil(256).clamp(1, max_blocks) as u32,
        block: 256,
    }
}

/// Queues a fill of `ptr..ptr+len` with the pattern of `seed` on `stream`.
///
/// # Safety
/// `ptr..ptr+len` must be device-accessible memory of the stream's GPU (or mapped into it),
/// valid until the fill completes.
pub unsafe fn fill_async(stream: &Stream, ptr: u64, len: usize, seed: u64) -> Result<(), GpuError> {
    let k = kernel(stream.gpu(), Source::Buffer, "efa_fill")?;
    // SAFETY: efa_fill(unsigned char*, u64, u64); the caller guarantees the range.
    unsafe {
        k.launch(
            stream,
            pattern_shape(stream.gpu(), len),
            &[ptr, len as u64, seed],
        )
    }
}

/// Queues a count of the words of `ptr..ptr+len` that differ from the pattern of `seed`, added
/// to the 8-byte device counter at `count`.
///
/// # Safety
/// As [`fill_async`] for the range (read only), and `count` must be a device-accessible u64.
pub unsafe fn mismatches_async(
    stream: &Stream,
    ptr: u64,
    len: usize,
    seed: u64,
    count: u64,
) -> Result<(), GpuError> {
    let k = kernel(stream.gpu(), Source::Buffer, "efa_mismatches")?;
    // SAFETY: efa_mismatches(const unsigned char*, u64, u64, u64*); the caller guarantees both.
    unsafe {
        k.launch(
            stream,
            pattern_shape(stream.gpu(), len),
            &[ptr, len as u64, seed, count],
        )
    }
}

fn fill_on_gpu(gpu: &Arc<Gpu>, ptr: u64, len: usize, seed: u64) -> Result<(), GpuError> {
    let s = Stream::new(gpu)?;
    // SAFETY: ptr..ptr+len is an allocation of this GPU owned by the caller's buffer.
    unsafe { fill_async(&s, ptr, len, seed)? };
    s.synchronize()
}

fn mismatches_on_gpu(gpu: &Arc<Gpu>, ptr: u64, len: usize, seed: u64) -> Result<u64, GpuError> {
    let s = Stream::new(gpu)?;
    let counter = Counter::new(gpu)?;
    // SAFETY: the range is the caller's buffer; counter is a live 8-byte device allocation.
    unsafe { mismatches_async(&s, ptr, len, seed, counter.ptr())? };
    s.synchronize()?;
    counter.read()
}

/// One u64 in device memory (mismatch and error counters).
pub struct Counter {
    gpu: Arc<Gpu>,
    ptr: u64,
}

impl Counter {
    pub fn new(gpu: &Arc<Gpu>) -> Result<Counter, GpuError> {
        gpu.bind()?;
        let mut ptr = 0u64;
        // SAFETY: valid out pointer; the context is current.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, 8) })?;
        let c = Counter {
            gpu: gpu.clone(),
            ptr,
        };
        c.reset()?;
        Ok(c)
    }
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    pub fn reset(&self) -> Result<(), GpuError> {
        self.gpu.bind()?;
        // SAFETY: ptr is a live 8-byte allocation.
        check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(self.ptr, 0, 8) })?;
        // The memset runs on the legacy stream, which the benchmarks' non-blocking streams do
        // not wait for: finish it before any kernel adds to the counter.
        self.gpu.synchronize()
    }
    /// Reads the value (synchronous copy: waits for the work that updates it on the legacy
    /// stream semantics of cuMemcpyDtoH; callers synchronise their stream first).
    pub fn read(&self) -> Result<u64, GpuError> {
        let b = copy_to_host(&self.gpu, self.ptr, 8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(&b);
        Ok(u64::from_le_bytes(w))
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // Kernels queued by the safe launches may still use the counter: wait for them.
        if self.gpu.bind().is_ok() && self.gpu.synchronize().is_ok() {
            // SAFETY: ptr came from cuMemAlloc and is freed once.
            let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
        }
    }
}

/// Queues a fill of the first `len` bytes of `buf` with the pattern of `seed` on `stream` (the
/// safe, checked form of [`fill_async`]; `buf`'s drop waits for the GPU, so the fill cannot
/// outlive it).
pub fn fill(stream: &Stream, buf: &DeviceBuffer, len: usize, seed: u64) -> Result<(), GpuError> {
    check_range("cuda", buf.len(), 0, len)?;
    same_device(stream, &buf.gpu)?;
    // SAFETY: len bytes of buf are a live allocation of the stream's GPU (checked above).
    unsafe { fill_async(stream, buf.ptr(), len, seed) }
}

/// Queues a count of the words of the first `len` bytes of `buf` that differ from the pattern
/// of `seed`, added to `counter` (the safe form of [`mismatches_async`]).
pub fn count_mismatches(
    stream: &Stream,
    buf: &DeviceBuffer,
    len: usize,
    seed: u64,
    counter: &Counter,
) -> Result<(), GpuError> {
    check_range("cuda", buf.len(), 0, len)?;
    same_device(stream, &buf.gpu)?;
    same_device(stream, &counter.gpu)?;
    // SAFETY: len bytes of buf are live memory of this GPU (checked); counter is a live u64 of
    // it; both are freed only after their drops synchronise the GPU.
    unsafe { mismatches_async(stream, buf.ptr(), len, seed, counter.ptr()) }
}

fn same_device(stream: &Stream, gpu: &Gpu) -> Result<(), GpuError> {
    if stream.gpu().ordinal != gpu.ordinal {
        return Err(GpuError::Invalid(format!(
            "the stream is on GPU {} but the memory on GPU {}",
            stream.gpu().ordinal,
            gpu.ordinal
        )));
    }
    Ok(())
}

impl Counter {
    /// The GPU of the counter.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

/// Copies `len` bytes at device address `ptr` into a new host vector.
pub fn copy_to_host(gpu: &Arc<Gpu>, ptr: u64, len: usize) -> Result<Vec<u8>, GpuError> {
    gpu.bind()?;
    let mut v = vec![0u8; len];
    // SAFETY: v has len bytes; the caller names a device range of at least len bytes.
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, ptr, len)
    })?;
    Ok(v)
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
            Box::new(HostBuffer::new(len).map_err(|e| GpuError::Invalid(e.to_string()))?)
        }
        MemKind::Huge => {
            nonzero(len)?;
            Box::new(HostBuffer::new_huge(len).map_err(|e| GpuError::Invalid(e.to_string()))?)
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

#[cfg(test)]
mod range_tests {
    use super::*;

    #[test]
    fn host_ranges_copy_in_and_out_and_refuse_overruns() {
        let b = HostBuffer::new(64).unwrap();
        b.write_at(8, &[1, 2, 3]).unwrap();
        let mut got = [0u8; 5];
        b.read_at(7, &mut got).unwrap();
        assert_eq!(got, [0, 1, 2, 3, 0]);
        let e = GpuBuffer::write_at(&b, 62, &[0; 4])
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside the 64-byte host buffer"), "{e}");
        // The buffer's own copy refuses the same range.
        assert!(b.write_at(62, &[0; 4]).is_err());
        assert!(b.read_at(usize::MAX, &mut got).is_err());
    }

    #[test]
    fn pattern_ranges_fill_and_check_one_slice_each() {
        let b = HostBuffer::new(100).unwrap();
        b.fill_range(0, 40, 11).unwrap();
        b.fill_range(40, 60, 12).unwrap();
        assert_eq!(b.mismatches_in(0, 40, 11).unwrap(), 0);
        assert_eq!(b.mismatches_in(40, 60, 12).unwrap(), 0);
        // The pattern starts again at each range: the second slice is not seed 11 continued.
        assert!(b.mismatches_in(40, 60, 11).unwrap() > 0);
        let mut one = [0u8; 60];
        b.read_at(40, &mut one).unwrap();
        assert_eq!(pattern::mismatches(&one, 12), 0);
        b.write_at(44, &[0xff]).unwrap();
        assert_eq!(b.mismatches_in(40, 60, 12).unwrap(), 1);
        assert!(b.fill_range(90, 11, 1).is_err());
    }

    #[test]
    fn word_atomic_copies_keep_neighbouring_bytes_at_every_alignment() {
        // Partial words at both ends (compare-exchange) and whole words in the middle.
        let b = HostBuffer::new(61).unwrap();
        let mut want = vec![0u8; 61];
        for (off, n) in [(0, 61), (3, 1), (5, 11), (7, 17), (16, 8), (60, 1), (1, 0)] {
            let src: Vec<u8> = (0..n).map(|i| (off * 31 + i * 7 + 1) as u8).collect();
            b.write_at(off, &src).unwrap();
            want[off..off + n].copy_from_slice(&src);
            let mut got = vec![0u8; 61];
            b.read_at(0, &mut got).unwrap();
            assert_eq!(got, want, "after writing {n} bytes at {off}");
            let mut part = vec![0u8; n];
            b.read_at(off, &mut part).unwrap();
            assert_eq!(part, src);
        }
    }

    #[test]
    fn threads_share_a_buffer_through_copies_only() {
        // Sync is sound because shared access is word-atomic copies: threads writing disjoint
        // bytes that share words (odd offsets) must never lose each other's bytes.
        let b = std::sync::Arc::new(HostBuffer::new(4096).unwrap());
        let writers: Vec<_> = (0..4u8)
            .map(|t| {
                let b = b.clone();
                std::thread::spawn(move || {
                    for round in 0..200u8 {
                        for k in 0..1024 {
                            // byte k*4+t belongs to thread t alone; its word has 3 other owners.
                            b.write_at(k * 4 + t as usize, &[round ^ t]).unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let mut got = vec![0u8; 4096];
        b.read_at(0, &mut got).unwrap();
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v, 199 ^ (i % 4) as u8, "byte {i}");
        }
    }

    #[test]
    fn host_copies_move_exact_ranges_and_treat_overlap_as_memmove() {
        let a = HostBuffer::new(4096).unwrap();
        let b = HostBuffer::new(4096).unwrap();
        let src: Vec<u8> = (0..4096).map(|i| (i * 13 + 5) as u8).collect();
        a.write_at(0, &src).unwrap();
        // Whole words between two buffers (the fast path), then an odd range (byte copies).
        for (from, to, len) in [(8, 1024, 2048), (0, 0, 8), (3, 4001, 91)] {
            copy_between(&a, from, &b, to, len).unwrap();
            let mut got = vec![0u8; len];
            b.read_at(to, &mut got).unwrap();
            assert_eq!(
                got,
                src[from..from + len],
                "{len} bytes from {from} to {to}"
            );
        }
        // Neighbours of a copied range keep their bytes.
        let mut edge = [0u8; 2];
        b.read_at(1023, &mut edge[..1]).unwrap();
        b.read_at(3072, &mut edge[1..]).unwrap();
        assert_eq!(edge, [0, 0]);
        // Overlapping ranges of one buffer copy as memmove, in both directions.
        for (from, to) in [(0usize, 64usize), (64, 0)] {
            a.write_at(0, &src).unwrap();
            copy_between(&a, from, &a, to, 512).unwrap();
            let mut got = vec![0u8; 512];
            a.read_at(to, &mut got).unwrap();
            assert_eq!(got, src[from..from + 512], "overlap {from} -> {to}");
        }
        assert!(copy_between(&a, 4000, &b, 0, 200).is_err());
    }

    #[test]
    fn pattern_checks_of_host_memory_read_a_copy() {
        let mut b = HostBuffer::new(1000).unwrap();
        b.fill_pattern(3).unwrap();
        assert_eq!(b.mismatches(3), Ok(0));
        b.write_at(500, &[0xFF]).unwrap();
        assert_eq!(b.mismatches(3), Ok(1));
    }
}
