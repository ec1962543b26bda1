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
    copy: Kernel,
    chase_init: Kernel,
    chase: Kernel,
    tma: Option<Kernel>,
}

/// Device memory a launch on one GPU can address: a buffer of that GPU or a peer's buffer
/// mapped into it.
#[derive(Clone, Copy)]
pub enum Mem<'a> {
    Local(&'a DeviceBuffer),
    Peer(&'a IpcMapping),
}

impl Mem<'_> {
    /// The address in the context of [`Mem::gpu`].
    pub fn ptr(&self) -> u64 {
        match self {
            Mem::Local(b) => b.ptr(),
            Mem::Peer(m) => m.ptr,
        }
    }
    /// Bytes addressable from `ptr`.
    pub fn len(&self) -> usize {
        match self {
            Mem::Local(b) => efabench_fabric::MemoryBuffer::len(*b),
            Mem::Peer(m) => m.len,
        }
    }
    /// True when nothing is addressable.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The GPU whose context the address belongs to.
    pub fn gpu(&self) -> &Gpu {
        match self {
            Mem::Local(b) => b.gpu(),
            Mem::Peer(m) => &m.gpu,
        }
    }
}

/// Bytes of one node of the pointer-chase list (one device pointer).
pub const CHASE_NODE: u64 = 8;

/// The node where a chase of `hops` loads from node 0 stops, in a list of `nodes` nodes where
/// node i points at node (i + stride) % nodes.
pub fn chase_end(nodes: u64, stride: u64, hops: u64) -> u64 {
    if nodes == 0 {
        return 0;
    }
    ((u128::from(hops) * u128::from(stride)) % u128::from(nodes)) as u64
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
            copy: kernel(gpu, Source::Ipc, "efa_copy")?,
            chase_init: kernel(gpu, Source::Ipc, "efa_chase_init")?,
            chase: kernel(gpu, Source::Ipc, "efa_chase")?,
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

impl IpcKernels {
    /// Copy-engine copy of `len` bytes from `src` to `dst` (each local or peer-mapped), ordered
    /// on `stream`, whose GPU must be the one both addresses belong to.
    pub fn memcpy(stream: &Stream, dst: Mem, src: Mem, len: usize) -> Result<(), GpuError> {
        check_launch(
            "copy-engine",
            len,
            &[("destination", dst.len()), ("source", src.len())],
        )?;
        same_gpu("copy-engine destination", stream, dst.gpu())?;
        same_gpu("copy-engine source", stream, src.gpu())?;
        // SAFETY: both ranges hold len bytes (checked) and stay allocated until the copy is
        // done (DeviceBuffer and IpcMapping synchronise their GPU before they go away).
        unsafe { stream.copy_async(dst.ptr(), src.ptr(), len) }
    }

    /// SM copy of `len` bytes from `src` to `dst` with 16-byte loads and stores (`efa_copy`).
    pub fn sm_copy(
        &self,
        stream: &Stream,
        shape: Shape,
        dst: Mem,
        src: Mem,
        len: usize,
    ) -> Result<(), GpuError> {
        check_launch(
            "sm copy",
            len,
            &[("destination", dst.len()), ("source", src.len())],
        )?;
        same_gpu("sm copy destination", stream, dst.gpu())?;
        same_gpu("sm copy source", stream, src.gpu())?;
        // SAFETY: efa_copy(ulonglong2* dst, const ulonglong2* src, u64 n16): both hold len bytes
        // (checked) and are freed only after their drops synchronise the GPU.
        unsafe {
            self.copy
                .launch(stream, shape, &[dst.ptr(), src.ptr(), (len / 16) as u64])
        }
    }

    /// Writes the pointer-chase list of `nodes` 8-byte nodes into `list` (node i points at node
    /// (i + stride) % nodes), with addresses of the stream's GPU.
    pub fn chase_init(
        &self,
        stream: &Stream,
        list: Mem,
        nodes: u64,
        stride: u64,
    ) -> Result<(), GpuError> {
        chase_checks(stream, list, nodes)?;
        let shape = Shape {
            grid: nodes.div_ceil(256).clamp(1, 1024) as u32,
            block: 256,
        };
        // SAFETY: efa_chase_init(efa_node*, u64 n, u64 stride): list holds nodes * 8 bytes
        // (checked); the mapping or buffer outlives the kernel (drops synchronise).
        unsafe {
            self.chase_init
                .launch(stream, shape, &[list.ptr(), nodes, stride])
        }
    }

    /// Follows `hops` dependent loads through a list made by [`IpcKernels::chase_init`] on the
    /// same GPU, in one thread of block `target` of a grid of one block per SM; the address of
    /// the last node lands in `end`.
    pub fn chase(
        &self,
        stream: &Stream,
        list: Mem,
        nodes: u64,
        hops: u64,
        target: u32,
        end: &Counter,
    ) -> Result<(), GpuError> {
        chase_checks(stream, list, nodes)?;
        same_gpu("chase result", stream, end.gpu())?;
        let grid = stream.gpu().sm_count.max(1);
        if target >= grid {
            return Err(GpuError::Invalid(format!(
                "chase: block {target} does not exist in a grid of {grid}"
            )));
        }
        // SAFETY: efa_chase(efa_node*, u64 hops, u64 target, u64* end): the list holds nodes *
        // 8 bytes (checked) and end is a live u64 of this GPU, both outliving the kernel (drops
        // synchronise). The kernel only loads through the list and stores to end: a list that
        // chase_init did not build makes it fault (a CUDA error), never write elsewhere.
        unsafe {
            self.chase.launch(
                stream,
                Shape { grid, block: 1 },
                &[list.ptr(), hops, u64::from(target), end.ptr()],
            )
        }
    }
}

fn chase_checks(stream: &Stream, list: Mem, nodes: u64) -> Result<(), GpuError> {
    if nodes == 0 || nodes.saturating_mul(CHASE_NODE) > list.len() as u64 {
        return Err(GpuError::Invalid(format!(
            "chase: {nodes} nodes of {CHASE_NODE} bytes do not fit the {}-byte buffer",
            list.len()
        )));
    }
    same_gpu("chase", stream, list.gpu())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chase_ends_where_the_stride_arithmetic_says() {
        // 2 MiB of 8-byte nodes, 16 apart: the cycle from node 0 has 16384 nodes.
        let n = 262_144;
        assert_eq!(chase_end(n, 16, 0), 0);
        assert_eq!(chase_end(n, 16, 1), 16);
        assert_eq!(chase_end(n, 16, 16384), 0);
        assert_eq!(chase_end(n, 16, 16385), 16);
        // Walk it step by step for a small list with wrap-around.
        let (nodes, stride) = (10u64, 3u64);
        let mut i = 0;
        for hops in 0..40 {
            assert_eq!(chase_end(nodes, stride, hops), i, "{hops}");
            i = (i + stride) % nodes;
        }
        assert_eq!(chase_end(0, 16, 5), 0);
        assert_eq!(
            chase_end(n, 16, u64::MAX),
            (u64::MAX as u128 * 16 % n as u128) as u64
        );
    }
}
