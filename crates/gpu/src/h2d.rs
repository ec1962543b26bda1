//! Host↔GPU copies for `efabench h2d`: one [`HostLane`] per GPU holds pinned host buffers placed
//! on a chosen NUMA node, device buffers, one stream per direction and their events, and runs
//! copy-engine (`cuMemcpyHtoDAsync` / `cuMemcpyDtoHAsync`) or SM copies (the `efa_copy` kernel
//! reading or writing the pinned pages through their device mapping), timed with CUDA events.
//!
//! Why a lane per GPU with its own streams: "all GPUs at once" is one thread per lane started
//! together, and "both directions at once" is the two streams of one lane running side by side,
//! each timed on its own, as nvbandwidth's bidirectional host tests do.
//!
//! Placement: the pinned pages are allocated and first touched by a thread bound to the CPUs of
//! the wanted NUMA node, so the kernel's local policy puts them there; [`page_node`] then asks
//! the kernel where they really are, and the benchmark reports a mismatch as a finding.

use crate::buffer::{count_mismatches, fill, Counter, DeviceBuffer, GpuBuffer, PinnedBuffer};
use crate::driver::{check, Event, Gpu, Kernel, Shape, Stream};
use crate::error::GpuError;
use crate::kernels::{kernel, Source};
use crate::pattern;
use cudarc::driver::sys;
use efabench_fabric::MemoryBuffer;
use std::ffi::c_void;
use std::sync::Arc;

/// Threads per block of the SM copy (as nvbandwidth's host tests).
pub const SM_BLOCK: u32 = 512;

/// Who moves the bytes (`--engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// The copy engine (cuMemcpyHtoDAsync, cuMemcpyDtoHAsync).
    Ce,
    /// A copy kernel on every SM over the mapped pinned pages.
    Sm,
}

/// Which way (`--dir`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Dir {
    /// Host to device.
    H2d,
    /// Device to host.
    D2h,
    /// Both at once, on two streams.
    Both,
}

impl Dir {
    pub fn h2d(self) -> bool {
        matches!(self, Dir::H2d | Dir::Both)
    }
    pub fn d2h(self) -> bool {
        matches!(self, Dir::D2h | Dir::Both)
    }
}

/// Milliseconds each direction of one sample took (events on its own stream).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timing {
    pub h2d_ms: Option<f64>,
    pub d2h_ms: Option<f64>,
}

/// The NUMA node holding the page at `addr`, from `get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`.
pub fn page_node(addr: usize) -> Option<u32> {
    const MPOL_F_NODE: libc::c_ulong = 1;
    const MPOL_F_ADDR: libc::c_ulong = 2;
    let mut node: libc::c_int = -1;
    // SAFETY: get_mempolicy writes one int into `node`; with a null nodemask and maxnode 0 it
    // writes nothing else; `addr` is only looked up, never dereferenced.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr as *const libc::c_void,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    (r == 0 && node >= 0).then_some(node as u32)
}

/// The node of a buffer's first, middle and last pages when they agree.
fn buffer_node(b: &PinnedBuffer) -> Option<u32> {
    let p = b.as_ptr() as usize;
    let n = b.len();
    let nodes: Vec<Option<u32>> = [0, n / 2, n.saturating_sub(1)]
        .map(|o| page_node(p + o))
        .into();
    (nodes.iter().all(|x| *x == nodes[0]))
        .then_some(nodes[0])
        .flatten()
}

/// One GPU's buffers, streams and events.
pub struct HostLane {
    gpu: Arc<Gpu>,
    up: Stream,
    down: Stream,
    /// Receives host→device copies.
    dev_in: DeviceBuffer,
    /// Source of device→host copies.
    dev_out: DeviceBuffer,
    /// Source of host→device copies.
    host_src: PinnedBuffer,
    /// Receives device→host copies.
    host_dst: PinnedBuffer,
    counter: Counter,
    copy: Kernel,
    events: [Event; 4],
    /// Where the pinned pages are (both buffers), `None` when the kernel cannot say or they
    /// are split across nodes.
    pub host_node: Option<u32>,
}

impl HostLane {
    /// Buffers of `len` bytes; the pinned ones allocated by a thread bound to `cpus` (empty:
    /// unbound, where the calling thread runs).
    pub fn new(gpu: &Arc<Gpu>, len: usize, cpus: &[usize]) -> Result<HostLane, GpuError> {
        let (host_src, host_dst) = std::thread::scope(|s| {
            s.spawn(|| {
                if !cpus.is_empty() {
                    crate::affinity::bind_current_thread(cpus).map_err(|e| {
                        GpuError::Invalid(format!(
                            "cannot bind to CPUs of the host buffer's node: {e}"
                        ))
                    })?;
                }
                Ok::<_, GpuError>((PinnedBuffer::new(gpu, len)?, PinnedBuffer::new(gpu, len)?))
            })
            .join()
            .map_err(|_| GpuError::Invalid("the allocating thread panicked".into()))?
        })?;
        let a = buffer_node(&host_src);
        let host_node = if a == buffer_node(&host_dst) { a } else { None };
        Ok(HostLane {
            up: Stream::new(gpu)?,
            down: Stream::new(gpu)?,
            dev_in: DeviceBuffer::new(gpu, len)?,
            dev_out: DeviceBuffer::new(gpu, len)?,
            counter: Counter::new(gpu)?,
            copy: kernel(gpu, Source::Ipc, "efa_copy")?,
            events: [
                Event::new(gpu)?,
                Event::new(gpu)?,
                Event::new(gpu)?,
                Event::new(gpu)?,
            ],
            gpu: gpu.clone(),
            host_src,
            host_dst,
            host_node,
        })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn check_len(&self, len: usize) -> Result<(), GpuError> {
        if len == 0 || len > self.host_src.len() || len % 16 != 0 {
            return Err(GpuError::Invalid(format!(
                "h2d copy of {len} bytes: sizes are multiples of 16 up to the {} bytes allocated",
                self.host_src.len()
            )));
        }
        Ok(())
    }

    /// Fills the sources of `dir` with the pattern of `seed` and poisons the destinations with
    /// `poison`; returns when done.
    pub fn prepare(
        &mut self,
        dir: Dir,
        len: usize,
        seed: u64,
        poison: u64,
    ) -> Result<(), GpuError> {
        self.check_len(len)?;
        if dir.h2d() {
            // SAFETY: no copy is in flight (every run ends synchronised); len is inside the
            // allocation (checked); &mut self is the only access.
            let s = unsafe { std::slice::from_raw_parts_mut(self.host_src.as_ptr(), len) };
            pattern::fill(s, seed);
            fill(&self.up, &self.dev_in, len, poison)?;
        }
        if dir.d2h() {
            fill(&self.down, &self.dev_out, len, seed ^ 0x5a5a_5a5a)?;
            // SAFETY: as above, for the other pinned buffer.
            let s = unsafe { std::slice::from_raw_parts_mut(self.host_dst.as_ptr(), len) };
            pattern::fill(s, poison);
        }
        self.up.synchronize()?;
        self.down.synchronize()
    }

    fn queue(&self, engine: Engine, up: bool, len: usize) -> Result<(), GpuError> {
        let stream = if up { &self.up } else { &self.down };
        let mapped = |b: &PinnedBuffer| {
            b.device_ptr().ok_or_else(|| {
                GpuError::Invalid("pinned host buffer without a device mapping".into())
            })
        };
        let (dst, src) = if up {
            (self.dev_in.ptr(), mapped(&self.host_src)?)
        } else {
            (mapped(&self.host_dst)?, self.dev_out.ptr())
        };
        match engine {
            // SAFETY: both ranges hold len bytes (checked by every caller) of live buffers this
            // lane owns; they are freed only after their drops synchronise the GPU.
            Engine::Ce if up => unsafe {
                stream.copy_htod_async(self.dev_in.ptr(), self.host_src.as_ptr(), len)
            },
            // SAFETY: as above.
            Engine::Ce => unsafe {
                stream.copy_dtoh_async(self.host_dst.as_ptr(), self.dev_out.ptr(), len)
            },
            // SAFETY: efa_copy(ulonglong2* dst, const ulonglong2* src, u64 n16): both ranges
            // hold len bytes (a multiple of 16, checked) addressable by this GPU (the pinned
            // buffers are DEVICEMAP allocations of this context).
            Engine::Sm => unsafe {
                self.copy.launch(
                    stream,
                    Shape {
                        grid: self.gpu.sm_count.max(1),
                        block: SM_BLOCK,
                    },
                    &[dst, src, (len / 16) as u64],
                )
            },
        }
    }

    /// `warmup` untimed copies, then `iters` copies between two events, per direction of `dir`;
    /// returns when every copy is done.
    pub fn run(
        &self,
        engine: Engine,
        dir: Dir,
        len: usize,
        warmup: u64,
        iters: u64,
    ) -> Result<Timing, GpuError> {
        self.check_len(len)?;
        for (on, up) in [(dir.h2d(), true), (dir.d2h(), false)] {
            if on {
                for _ in 0..warmup {
                    self.queue(engine, up, len)?;
                }
            }
        }
        // Start both directions as close together as the host can queue them.
        if dir.h2d() {
            self.events[0].record(&self.up)?;
        }
        if dir.d2h() {
            self.events[2].record(&self.down)?;
        }
        for _ in 0..iters {
            if dir.h2d() {
                self.queue(engine, true, len)?;
            }
            if dir.d2h() {
                self.queue(engine, false, len)?;
            }
        }
        let mut t = Timing::default();
        if dir.h2d() {
            self.events[1].record(&self.up)?;
        }
        if dir.d2h() {
            self.events[3].record(&self.down)?;
        }
        if dir.h2d() {
            self.events[1].synchronize()?;
            t.h2d_ms = Some(self.events[0].elapsed_ms(&self.events[1])?);
        }
        if dir.d2h() {
            self.events[3].synchronize()?;
            t.d2h_ms = Some(self.events[2].elapsed_ms(&self.events[3])?);
        }
        Ok(t)
    }

    /// Words of the destinations of `dir` that differ from what [`prepare`](Self::prepare)
    /// put in the sources.
    pub fn verify(&self, dir: Dir, len: usize, seed: u64) -> Result<u64, GpuError> {
        self.check_len(len)?;
        let mut bad = 0;
        if dir.h2d() {
            self.counter.reset()?;
            count_mismatches(&self.up, &self.dev_in, len, seed, &self.counter)?;
            self.up.synchronize()?;
            bad += self.counter.read()?;
        }
        if dir.d2h() {
            self.down.synchronize()?;
            // SAFETY: the down stream is idle (synchronised), so nothing writes the pages.
            let s = unsafe { std::slice::from_raw_parts(self.host_dst.as_ptr(), len) };
            bad += pattern::mismatches(s, seed ^ 0x5a5a_5a5a);
        }
        Ok(bad)
    }
}

impl Stream {
    /// Queues a host→device copy on this stream.
    ///
    /// # Safety
    /// `dst..dst+len` must be device memory of this stream's context and `src..src+len` pinned
    /// host memory, both live until the copy completes.
    pub unsafe fn copy_htod_async(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        self.gpu().bind()?;
        // SAFETY: the caller guarantees both ranges; the stream is live.
        check("cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, len, self.raw())
        })
    }

    /// Queues a device→host copy on this stream.
    ///
    /// # Safety
    /// As for [`copy_htod_async`](Self::copy_htod_async), the other way.
    pub unsafe fn copy_dtoh_async(
        &self,
        dst: *mut u8,
        src: u64,
        len: usize,
    ) -> Result<(), GpuError> {
        self.gpu().bind()?;
        // SAFETY: the caller guarantees both ranges; the stream is live.
        check("cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, len, self.raw())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_cover_both_ways() {
        assert!(Dir::H2d.h2d() && !Dir::H2d.d2h());
        assert!(!Dir::D2h.h2d() && Dir::D2h.d2h());
        assert!(Dir::Both.h2d() && Dir::Both.d2h());
    }

    #[test]
    fn this_process_pages_have_a_node() {
        let v = vec![1u8; 1 << 16];
        // The kernel answers for any mapped page of this process (node 0 on a one-node VM).
        assert!(page_node(v.as_ptr() as usize).is_some());
    }
}
