//! One point of the sweep or the matrix on this rank, timed on the GPU: the receiver poisons
//! what it will check, the source fills what is copied or pulled, the executing rank queues
//! warm-up and `--samples` batches of launches between CUDA events (no host synchronisation
//! inside; one iteration of the harness's device-timed loop per batch), and the receiving GPU
//! checks every word. Also what a rank holds for every point:
//! its GPU, stream, buffers and every peer's buffers mapped through CUDA IPC.

use std::sync::Arc;

use efabench_gpu::buffer::{count_mismatches, fill, Counter};
use efabench_gpu::ipc::{IpcKernels, IpcMapping};
use efabench_gpu::kernels::{kernel, Source};
use efabench_gpu::{DeviceBuffer, Event, Gpu, GpuError, Stream};

use super::{IpcArgs, IpcSpec, Method};
use crate::harness::{Clock, Ctx, DeviceRounds, Loop, Measured};
use crate::pattern;
use crate::BenchError;

/// Splits `iters` into `samples` batches as evenly as possible (no empty batch).
pub fn batches(iters: u64, samples: u64) -> Vec<u64> {
    let n = samples.clamp(1, iters.max(1));
    (0..n)
        .map(|i| iters / n + u64::from(i < iters % n))
        .collect()
}

/// What one rank holds: its GPU, buffers and every peer's mapped buffers.
pub(super) struct Rank {
    pub(super) gpu: Arc<Gpu>,
    pub(super) stream: Stream,
    pub(super) recv: DeviceBuffer,
    pub(super) src: DeviceBuffer,
    pub(super) counter: Counter,
    /// Peer r's receive / source buffer mapped here (None for this rank).
    pub(super) peer_recv: Vec<Option<IpcMapping>>,
    pub(super) peer_src: Vec<Option<IpcMapping>>,
    pub(super) kernels: IpcKernels,
}

pub(super) const POISON_SLOT: u32 = 0xFFFF;

/// The rank whose stream runs (and times) a method for the pair `a → b`.
pub(super) fn exec_rank(m: Method, a: usize, b: usize) -> usize {
    match m {
        Method::Pull(_) => b,
        _ => a,
    }
}

pub(super) fn setup(gpu: &Arc<Gpu>, max: usize) -> Result<Rank, BenchError> {
    let stream = Stream::new(gpu)?;
    let recv = DeviceBuffer::new(gpu, max)?;
    let src = DeviceBuffer::new(gpu, max)?;
    let counter = Counter::new(gpu)?;
    let kernels = IpcKernels::load(gpu)?;
    // Also compiles the pattern kernels now, outside any timed region.
    kernel(gpu, Source::Buffer, "efa_fill")?;
    kernel(gpu, Source::Buffer, "efa_mismatches")?;
    Ok(Rank {
        gpu: gpu.clone(),
        stream,
        recv,
        src,
        counter,
        peer_recv: Vec::new(),
        peer_src: Vec::new(),
        kernels,
    })
}

/// Queues one iteration of `m` from this rank for the pair `a → b` (typed, checked launches).
fn launch(r: &Rank, m: Method, len: usize, a: usize, b: usize, seed: u64) -> Result<(), GpuError> {
    let sm = r.gpu.sm_count;
    match m {
        Method::CopyEngine => IpcKernels::copy(&r.stream, peer(&r.peer_recv, b)?, &r.src, len),
        Method::Push(s) => {
            r.kernels
                .push(&r.stream, s.resolve(sm), peer(&r.peer_recv, b)?, len, seed)
        }
        Method::Pull(s) => r.kernels.pull(
            &r.stream,
            s.resolve(sm),
            peer(&r.peer_src, a)?,
            len,
            seed,
            &r.counter,
        ),
        Method::Tma(s) => {
            r.kernels
                .tma_push(&r.stream, s.resolve(sm), peer(&r.peer_recv, b)?, len, seed)
        }
    }
}

/// Rank `i`'s buffer as mapped here.
pub(super) fn peer(v: &[Option<IpcMapping>], i: usize) -> Result<&IpcMapping, GpuError> {
    v.get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| GpuError::Invalid(format!("rank {i}'s buffer is not mapped here")))
}

/// The executing rank's iterations of one point: a warm-up round of `warmup` launches, then one
/// round per batch of `--samples`, each closed by a CUDA event. No host synchronisation sits
/// between the batches: the events are read in `finish`, once the last batch ran, and a sample
/// is its batch's time per launch.
struct Batches<'a> {
    r: &'a Rank,
    m: Method,
    len: usize,
    a: usize,
    b: usize,
    warmup: u64,
    parts: Vec<u64>,
    /// `parts.len() + 1` events: the first before the first batch, one after each.
    events: Vec<Event>,
    /// Point index shifted into the seeds' high bits.
    base: u64,
    data_seed: u64,
    /// Launches queued so far (each push carries its own seed).
    k: u64,
}

impl Batches<'_> {
    fn seed_of(&self, k: u64) -> u64 {
        match self.m {
            Method::Push(_) | Method::Tma(_) => {
                pattern::seed(self.base + k, self.a as u32, self.b as u32, 0)
            }
            _ => self.data_seed,
        }
    }

    fn launch_next(&mut self) -> Result<(), GpuError> {
        launch(
            self.r,
            self.m,
            self.len,
            self.a,
            self.b,
            self.seed_of(self.k),
        )?;
        self.k += 1;
        Ok(())
    }
}

impl DeviceRounds for Batches<'_> {
    fn run(&mut self, i: u64) -> Result<Option<u64>, BenchError> {
        let n = match i {
            0 => self.warmup,
            _ => self.parts[i as usize - 1],
        };
        for _ in 0..n {
            self.launch_next()?;
        }
        if i > 0 {
            self.events[i as usize].record(&self.r.stream)?;
        }
        Ok(None)
    }

    fn timed_from_here(&mut self) -> Result<(), BenchError> {
        // Warm-up must not overlap the first timed batch.
        self.r.stream.synchronize()?;
        self.events[0].record(&self.r.stream)?;
        Ok(())
    }

    fn finish(&mut self, samples: &mut Vec<u64>) -> Result<(), BenchError> {
        self.events[self.parts.len()].synchronize()?;
        for (i, n) in self.parts.iter().enumerate() {
            let ms = self.events[i].elapsed_ms(&self.events[i + 1])? / *n as f64;
            samples.push((ms * 1e6).round().max(1.0) as u64);
        }
        Ok(())
    }
}

/// Runs one point on this rank (all ranks call it in step; the harness gathers the outcomes):
/// on the executing rank one sample per batch, ns per launch.
pub(super) fn measure(
    r: &mut Rank,
    ctx: &Ctx,
    s: &IpcSpec,
    args: &IpcArgs,
) -> Result<Measured, BenchError> {
    let bs = ctx.bs;
    let (m, len, a, b, iters, warmup) = (s.m, s.size as usize, s.a, s.b, s.iters, s.warmup);
    let point_index = s.index;
    let me = bs.rank() as usize;
    let verify = args.job.verify();
    let exec = exec_rank(m, a, b);
    let base = point_index << 24;
    let iter_seed = |k: u64| pattern::seed(base + k, a as u32, b as u32, 0);
    let data_seed = pattern::seed(base, a as u32, b as u32, 1);

    // Prepare: the receiver poisons what it will check, the source fills what is copied/pulled.
    if me == b && !matches!(m, Method::Pull(_)) {
        let poison = pattern::seed(base, a as u32, b as u32, POISON_SLOT);
        fill(&r.stream, &r.recv, len, poison)?;
    }
    if me == a && matches!(m, Method::CopyEngine | Method::Pull(_)) {
        fill(&r.stream, &r.src, len, data_seed)?;
    }
    if me == b {
        r.counter.reset()?;
    }
    r.stream.synchronize()?;
    bs.barrier()?;

    let mut out = Measured::default();
    if me == exec {
        let parts = batches(iters, args.samples);
        let events = (0..=parts.len())
            .map(|_| Event::new(&r.gpu))
            .collect::<Result<Vec<_>, _>>()?;
        let lp = Loop {
            warmup: 1,
            iters: parts.len() as u64,
            timed: true,
            clock: Clock::Iteration,
        };
        let mut rounds = Batches {
            r,
            m,
            len,
            a,
            b,
            warmup,
            parts,
            events,
            base,
            data_seed,
            k: 0,
        };
        out = ctx.run_device_rounds(lp, &mut rounds)?;
    }
    bs.barrier()?;

    // Check on the receiving GPU.
    if me == b && verify {
        match m {
            Method::Pull(_) => {}
            _ => {
                let expect = match m {
                    Method::CopyEngine => data_seed,
                    _ => iter_seed(warmup + iters - 1),
                };
                count_mismatches(&r.stream, &r.recv, len, expect, &r.counter)?;
            }
        }
        r.stream.synchronize()?;
        out.errors = r.counter.read()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::default_iters;

    #[test]
    fn batches_split_evenly_and_iterations_scale() {
        assert_eq!(batches(10, 3), vec![4, 3, 3]);
        assert_eq!(batches(2, 5), vec![1, 1]);
        assert_eq!(batches(20, 5).iter().sum::<u64>(), 20);
        assert_eq!(default_iters(1 << 30), 20);
        assert_eq!(default_iters(4096), 2000);
        assert_eq!(default_iters(64 << 20), 64);
    }
}
