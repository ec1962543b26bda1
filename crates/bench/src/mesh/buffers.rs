//! The payload buffers of a mesh: allocation of any `--mem` kind, the verification pattern
//! written and checked in place, and the settling of device copies.

use std::sync::Arc;

use efabench_gpu::{GpuBuffer, MemKind};

use super::{Mesh, MeshResult};
use crate::error::BenchError;

/// A payload buffer of any `--mem` kind, shared with the rails that registered it.
pub type Payload = Arc<Box<dyn GpuBuffer>>;

impl Mesh {
    /// Fills `len` bytes of `send` at `off` with the pattern of `seed`.
    pub fn fill_send(&mut self, off: usize, len: usize, seed: u64) -> MeshResult<()> {
        self.scratch.resize(len, 0);
        self.stream.fill(&mut self.scratch, seed);
        self.send
            .write_at(off, &self.scratch)
            .map_err(|e| BenchError::failed(format!("filling the send buffer: {e}")))
    }

    /// Words of `recv[off..off+len]` that differ from the pattern of `seed`.
    pub fn check_recv(&mut self, off: usize, len: usize, seed: u64) -> u64 {
        self.scratch.resize(len, 0);
        if self.recv.read_at(off, &mut self.scratch).is_err() {
            return len.div_ceil(8) as u64;
        }
        if self.corrupt_once && len > 0 {
            self.corrupt_once = false;
            self.scratch[len / 2] ^= 0x5A;
        }
        self.stream.mismatches(&self.scratch, seed)
    }

    /// Waits until data that completions reported has really landed in `recv`. On shm's CUDA
    /// IPC path the receiving process only *queues* a device-to-device copy and reports the
    /// completion at once, so a clock stopped at the completion times the queueing (it once
    /// read 1624 GB/s over a 450 GB/s NVLink). A no-op for host memory.
    pub fn settle(&self) -> MeshResult<()> {
        self.recv
            .settle()
            .map_err(|e| BenchError::failed(format!("waiting for the GPU copies to land: {e}")))
    }

    /// Copies `len` bytes of `send` at `from` into `recv` at `to` (this rank's own chunk).
    pub fn copy_local(&mut self, from: usize, to: usize, len: usize) -> MeshResult<()> {
        efabench_gpu::buffer::copy_between(&**self.send, from, &**self.recv, to, len)
            .map_err(|e| BenchError::failed(format!("copying the own chunk: {e}")))
    }
}

/// The send and receive buffers of a mesh: `send` and `recv` bytes of the `--mem` kind.
pub fn alloc(
    mem: MemKind,
    send: usize,
    recv: usize,
    device: Option<i32>,
) -> MeshResult<(Payload, Payload)> {
    let one = |len: usize| {
        efabench_gpu::alloc(mem, len.max(64), device.unwrap_or(0))
            .map(Arc::new)
            .map_err(|e| {
                let m = format!("--mem {mem}: {e}");
                if e.is_no_driver() {
                    BenchError::usage(format!("{m}; use --mem host on machines without a GPU"))
                } else {
                    BenchError::usage(m)
                }
            })
    };
    Ok((one(send)?, one(recv)?))
}
