//! CUDA IPC: export a device buffer as a 64-byte handle, map a peer process's buffer.
//!
//! The handle travels through the bootstrap (any byte transport); the mapping is opened with
//! `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`, so kernels and the copy engine of this GPU can address
//! the peer's memory directly over NVLink (or PCIe peer-to-peer).

use crate::buffer::DeviceBuffer;
use crate::driver::{check, Gpu};
use crate::error::GpuError;
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
}

// SAFETY: the mapping is owned by the value and usable from any thread with its context current.
unsafe impl Send for IpcMapping {}
// SAFETY: as above.
unsafe impl Sync for IpcMapping {}

impl IpcMapping {
    /// Opens a handle made by [`export`] in another process.
    pub fn open(gpu: &Arc<Gpu>, handle: &[u8]) -> Result<IpcMapping, GpuError> {
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
        })
    }
    /// The peer buffer's address in this GPU's context.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: ptr came from cuIpcOpenMemHandle and is closed once.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
        }
    }
}
