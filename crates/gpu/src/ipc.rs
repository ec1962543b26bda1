//! CUDA IPC: export a device buffer as a 64-byte handle, map a peer process's buffer.
//!
//! The handle travels through the bootstrap (any byte transport); the mapping is opened with
//! `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`, so kernels and the copy engine of this GPU can address
//! the peer's memory directly over NVLink (or PCIe peer-to-peer).

use crate::buffer::{Counter, DeviceBuffer};
use crate::driver::{check, Gpu, Kernel, Shape, Stream};
use crate::error::GpuError;
use crate::kernels::{kernel, Source};
use cudarc::driver::sys;
use std::sync::Arc;

/// Size of a `CUipcMemHandle`.
pub const IPC_HANDLE_LEN: usize = 64;

/// Exports `buf` for other processes on this host.
pub fn export(buf: &DeviceBuffer) -> Result<[u8; IPC_HANDLE_LEN], GpuError> {
    buf.gpu().bind()?;
    let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
    // SAFETY: h is a valid out struct; ptr is the base of a live cuMemAlloc allocation.
    check("cuIpcGetMemHandle", unsafe {
        sys::cuIpcGetMemHandle(&mut h, buf.ptr())
    })?;
    let mut out = [0u8; IPC_HANDLE_LEN];
    for (o, c) in out.iter_mut().zip(h.reserved.iter()) {
        *o = *c as u8;
    }
    Ok(out)
}

/// A peer process's buffer mapped into this GPU's address space; unmapped on drop.
pub struct IpcMapping {
    gpu: Arc<Gpu>,
    ptr: u64,
    len: usize,
}

// SAFETY: the mapping is owned by the value and usable from any thread with its context current.
unsafe impl Send for IpcMapping {}
// SAFETY: as above.
unsafe impl Sync for IpcMapping {}

impl IpcMapping {
    /// Opens a handle made by [`export`] in another process, of a buffer of `len` bytes (what
    /// the peer allocated; the launches below never go past it).
    pub fn open(gpu: &Arc<Gpu>, handle: &[u8], len: usize) -> Result<IpcMapping, GpuError> {
        if handle.len() != IPC_HANDLE_LEN {
            return Err(GpuError::Invalid(format!(
                "a CUDA IPC handle has {IPC_HANDLE_LEN} bytes, got {}: the peer runs another efabench version",
                handle.len()
            )));
        }
        gpu.bind()?;
        let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
        for (d, s) in h.reserved.iter_mut().zip(handle) {
            *d = *s as std::ffi::c_char;
        }
        let mut ptr = 0u64;
        // SAFETY: ptr is a valid out pointer; h is passed by value; the context is current.
        check("cuIpcOpenMemHandle", unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                h,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        })?;
        Ok(IpcMapping {
            gpu: gpu.clone(),
            ptr,
            len,
        })
    }
    /// The peer buffer's address in this GPU's context.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    /// Bytes of the mapped buffer.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for an empty mapping.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        // Work queued on the mapping must finish before it goes away: the safe launches below
        // borrow the mapping only for the call, so the drop is where the kernels are waited for.
        if self.gpu.bind().is_ok() && self.gpu.synchronize().is_ok() {
            // SAFETY: ptr came from cuIpcOpenMemHandle and is closed once.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
        }
    }
}

/// The NVLink kernels of `efabench ipc` behind typed, checked, safe launches: the callers name
/// buffers, not addresses, and every length is checked against the buffers it touches. The only
/// `unsafe` of a launch is here, next to the argument list it must match.
///
/// Why safe is sound: a launch borrows its buffers only for the call, but kernels run on after
/// it; every buffer type of this crate ([`DeviceBuffer`], [`IpcMapping`], [`Counter`])
/// synchronises its GPU before it frees its memory, so no queued kernel outlives what it uses.
pub struct IpcKernels {
    push: Kernel,
    pull: Kernel,
    tma: Option<Kernel>,
}

fn check_launch(what: &str, len: usize, caps: &[(&str, usize)]) -> Result<(), GpuError> {
    if len == 0 || len % 16 != 0 {
        return Err(GpuError::Invalid(format!(
            "{what}: {len} bytes is not a positive multiple of 16 (the kernels move 16-byte vectors)"
        )));
    }
    for (name, cap) in caps {
        if len > *cap {
            return Err(GpuError::Invalid(format!(
                "{what}: {len} bytes do not fit the {cap}-byte {name}"
            )));
        }
    }
    Ok(())
}

fn same_gpu(what: &str, stream: &Stream, gpu: &Gpu) -> Result<(), GpuError> {
    if stream.gpu().ordinal != gpu.ordinal {
        return Err(GpuError::Invalid(format!(
            "{what}: the stream is on GPU {} but the buffer on GPU {}",
            stream.gpu().ordinal,
            gpu.ordinal
        )));
    }
    Ok(())
}

impl IpcKernels {
    /// Compiles (or takes from the cache) the kernels for `gpu`; `tma` only from sm_90.
    pub fn load(gpu: &Arc<Gpu>) -> Result<IpcKernels, GpuError> {
        let tma = if gpu.cc >= Source::IpcTma.min_cc() {
            Some(kernel(gpu, Source::IpcTma, "efa_tma_push")?)
        } else {
            None
        };
        Ok(IpcKernels {
            push: kernel(gpu, Source::Ipc, "efa_push")?,
            pull: kernel(gpu, Source::Ipc, "efa_pull")?,
            tma,
        })
    }

    /// Whether the bulk-copy (TMA) kernel is available on this GPU.
    pub fn has_tma(&self) -> bool {
        self.tma.is_some()
    }

    /// Copy-engine copy of `len` bytes of `src` into the peer's buffer, ordered on `stream`.
    pub fn copy(
        stream: &Stream,
        dst: &IpcMapping,
        src: &DeviceBuffer,
        len: usize,
    ) -> Result<(), GpuError> {
        check_launch(
            "copy-engine",
            len,
            &[
                ("peer buffer", dst.len),
                ("source", efabench_fabric::MemoryBuffer::len(src)),
            ],
        )?;
        same_gpu("copy-engine", stream, src.gpu())?;
        // SAFETY: both ranges hold len bytes (checked) and stay allocated until the copy is
        // done (their drops synchronise the GPU first).
        unsafe { stream.copy_async(dst.ptr, src.ptr(), len) }
    }

    /// Pushes the pattern of `seed` into the peer's buffer with 16-byte stores.
    pub fn push(
        &self,
        stream: &Stream,
        shape: Shape,
        dst: &IpcMapping,
        len: usize,
        seed: u64,
    ) -> Result<(), GpuError> {
        check_launch("push", len, &[("peer buffer", dst.len)])?;
        same_gpu("push", stream, &dst.gpu)?;
        // SAFETY: efa_push(ulonglong2* dst, u64 n16, u64 seed): dst holds len bytes (checked),
        // mapped until the mapping's drop waits for the GPU.
        unsafe {
            self.push
                .launch(stream, shape, &[dst.ptr, (len / 16) as u64, seed])
        }
    }

    /// Loads the peer's buffer and adds the words that differ from the pattern of `seed` to
    /// `counter`.
    pub fn pull(
        &self,
        stream: &Stream,
        shape: Shape,
        src: &IpcMapping,
        len: usize,
        seed: u64,
        counter: &Counter,
    ) -> Result<(), GpuError> {
        check_launch("pull", len, &[("peer buffer", src.len)])?;
        same_gpu("pull", stream, &src.gpu)?;
        same_gpu("pull counter", stream, counter.gpu())?;
        // SAFETY: efa_pull(const ulonglong2*, u64 n16, u64 seed, u64* counter): src holds len
        // bytes (checked); counter is a live device u64 of this GPU; both outlive the kernel.
        unsafe {
            self.pull.launch(
                stream,
                shape,
                &[src.ptr, (len / 16) as u64, seed, counter.ptr()],
            )
        }
    }

    /// Bulk-copy (TMA) push of the pattern of `seed` into the peer's buffer (sm_90 and newer).
    pub fn tma_push(
        &self,
        stream: &Stream,
        shape: Shape,
        dst: &IpcMapping,
        len: usize,
        seed: u64,
    ) -> Result<(), GpuError> {
        let k = self
            .tma
            .as_ref()
            .ok_or_else(|| GpuError::Invalid("tma needs compute capability 9.0".into()))?;
        check_launch("tma", len, &[("peer buffer", dst.len)])?;
        same_gpu("tma", stream, &dst.gpu)?;
        // SAFETY: efa_tma_push(unsigned char*, u64 len, u64 seed): dst holds len bytes, a
        // multiple of 16 (checked), mapped until the mapping's drop waits for the GPU.
        unsafe { k.launch(stream, shape, &[dst.ptr, len as u64, seed]) }
    }
}
