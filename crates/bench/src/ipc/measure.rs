//! One point of the sweep or the matrix on this rank, timed on the GPU: the receiver poisons
//! what it will check, the source fills what is copied or pulled, the executing rank queues
//! warm-up and `--samples` batches of launches between CUDA events (no host synchronisation
//! inside), and the receiving GPU checks every word. Also what a rank holds for every point:
//! its GPU, stream, buffers and every peer's buffers mapped through CUDA IPC.

use std::sync::Arc;

use efabench_bootstrap::Bootstrap;
use efabench_gpu::buffer::{count_mismatches, fill, Counter};
use efabench_gpu::ipc::{IpcKernels, IpcMapping};
use efabench_gpu::kernels::{kernel, Source};
use efabench_gpu::{DeviceBuffer, Event, Gpu, GpuError, Stream};

use super::{IpcArgs, IpcSpec, Method};
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

/// One measured point on this rank.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Outcome {
    pub(super) errors: u64,
    /// Milliseconds per iteration of each timed batch (executor only).
    pub(super) batch_ms: Vec<f64>,
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

/// Runs one point on this rank (all ranks call it in step; the harness gathers the outcomes).
pub(super) fn measure(
    r: &mut Rank,
    bs: &Bootstrap,
    s: &IpcSpec,
    args: &IpcArgs,
) -> Result<Outcome, BenchError> {
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

    let mut out = Outcome::default();
    if me == exec {
        let seed_of = |k: u64| match m {
            Method::Push(_) | Method::Tma(_) => iter_seed(k),
            _ => data_seed,
        };
        for k in 0..warmup {
            launch(r, m, len, a, b, seed_of(k))?;
        }
        let parts = batches(iters, args.samples);
        let events = (0..=parts.len())
            .map(|_| Event::new(&r.gpu))
            .collect::<Result<Vec<_>, _>>()?;
        // Warm-up must not overlap the first timed batch.
        r.stream.synchronize()?;
        events[0].record(&r.stream)?;
        let mut k = warmup;
        for (i, n) in parts.iter().enumerate() {
            for _ in 0..*n {
                launch(r, m, len, a, b, seed_of(k))?;
                k += 1;
            }
            events[i + 1].record(&r.stream)?;
        }
        events[parts.len()].synchronize()?;
        for i in 0..parts.len() {
            out.batch_ms.push(events[i].elapsed_ms(&events[i + 1])?);
        }
        out.batch_ms = out
            .batch_ms
            .iter()
            .zip(&parts)
            .map(|(ms, n)| ms / *n as f64)
            .collect();
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
