//! `efabench ipc`: GPU-to-GPU bandwidth over NVLink through CUDA IPC, one rank per GPU.
//!
//! Libefaxx's ipc experiment used 4-byte stores, a host synchronisation after every iteration
//! (~22% lost), only rank 0 as a writer, no copy-engine or read baseline, and a constant fill
//! value. Here:
//!
//! * each rank allocates a receive and a source buffer with `cuMemAlloc`, exports both as CUDA
//!   IPC handles, and the handles travel through the bootstrap's all-gather; every rank maps
//!   every peer's buffers;
//! * variants, each its own record: `copy-engine` (`cuMemcpyDtoDAsync` from the sender's source
//!   buffer into the IPC-mapped receive buffer), `push-GxB` (16-byte stores computed from the
//!   pattern, written into the peer), `pull-GxB` (the receiver loads the peer's buffer 16 bytes at
//!   a time and checks every word in registers), `tma-GxB` (sm_90: pattern chunks in shared
//!   memory sent with `cp.async.bulk` into the peer); launch shapes 1×256, 16×256, 128×256 and
//!   one block of 512 per SM by default (`--shapes`);
//! * timing: CUDA events around `--samples` batches of launches queued back to back, with no
//!   host synchronisation inside the timed region; the bandwidth is from the median batch (as
//!   nvbandwidth reports its median) and `lat_us` is the per-iteration time of the batches;
//! * verification (on the receiving GPU): push/tma write the seed of their own iteration
//!   (`pattern::seed(iteration, src, dst, 0)`) over the whole buffer, which the receiver poisons
//!   first; after the timed loop the receiver checks every word against the last iteration's
//!   seed, so a missing, partial or stale final iteration fails. Earlier iterations are not
//!   checked one by one. copy-engine copies a source filled with one seed per point and is
//!   checked the same way. pull compares every word of every iteration on the receiving GPU;
//!
//! * with more than two ranks (or `--matrix`), an N×N matrix of copy-engine and push at the
//!   largest size, one pair at a time;
//! * `--nvbw`: nvbandwidth's device-to-device testcases (copy engine and SM, read and write, one
//!   way and both ways, the local copy and the pointer-chase latency) on every ordered GPU pair,
//!   with nvbandwidth's names and definitions ([`nvbw`]). The local copy and the latency against
//!   the GPU's own memory also run with one rank.

pub mod nvbw;

use crate::harness::{
    gpu_arg, Benchmark, BuildInfo, Ctx, JobArgs, Measured, Needs, Point, RunFacts, SweepArgs,
};
use crate::pattern;
use crate::queue::record::{fields, read};
use crate::size::sweep;
use crate::stats::Samples;
use crate::BenchError;
use efabench_bootstrap::Bootstrap;
use efabench_gpu::buffer::{count_mismatches, fill, Counter};
use efabench_gpu::ipc::{export, IpcKernels, IpcMapping, IPC_HANDLE_LEN};
use efabench_gpu::kernels::{kernel, Source};
use efabench_gpu::{DeviceBuffer, Event, Gpu, GpuChoice, GpuError, Shape, Stream};
use efabench_record::Record;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Options of `efabench ipc`: the kernels' own, the GPU, the size sweep and the job. It uses
/// no libfabric and places its own device memory, so clap refuses the fabric and memory options.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct IpcArgs {
    /// Timed batches per point; each is bracketed by CUDA events, none by a host sync.
    #[arg(long, default_value = "5", value_parser = samples_arg, allow_hyphen_values = true)]
    pub samples: u64,
    /// Variants, comma-separated: copy-engine, push, pull, tma [default: all four, or none
    /// when --nvbw is given].
    #[arg(long, value_delimiter = ',')]
    pub variant: Option<Vec<String>>,
    /// Launch shapes of push and pull, GRIDxBLOCK; `smxB` means one block per SM.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1x256,16x256,128x256,smx512"
    )]
    pub shapes: Vec<String>,
    /// Grids of the tma variant (256 threads a block): smK = K blocks per SM, or a block count.
    #[arg(long, value_delimiter = ',', default_value = "sm2")]
    pub tma_grids: Vec<String>,
    /// Also measure every ordered GPU pair at the largest size (automatic above 2 GPUs).
    #[arg(long)]
    pub matrix: bool,
    /// nvbandwidth's device-to-device testcases, comma-separated, or `all`: every ordered GPU
    /// pair at every size (device_to_device_memcpy_{read,write}_{ce,sm},
    /// device_to_device_bidirectional_memcpy_{read,write}_{ce,sm}, device_local_copy,
    /// device_to_device_latency_sm).
    #[arg(long, value_delimiter = ',')]
    pub nvbw: Vec<String>,
    /// This rank's GPU: an index, or auto (= local rank).
    #[arg(long, default_value = "auto", value_parser = gpu_arg)]
    pub gpu: GpuChoice,
    #[command(flatten)]
    pub sweep: SweepArgs,
    #[command(flatten)]
    pub job: JobArgs,
}

crate::impl_options!(IpcArgs: sweep);

/// The variants `--variant` selects: the given list, else all four unless `--nvbw` is given.
pub fn variants(args: &IpcArgs) -> Vec<String> {
    match &args.variant {
        Some(v) => v.clone(),
        None if args.nvbw.is_empty() => ["copy-engine", "push", "pull", "tma"]
            .map(String::from)
            .to_vec(),
        None => Vec::new(),
    }
}

fn samples_arg(s: &str) -> Result<u64, String> {
    crate::harness::bounded(s, "--samples", 1, 4096, "5")
}

/// Defaults of the shared options that differ for ipc (applied with clap's `mut_arg`): NVLink
/// needs large messages to reach its peak, and the kernels move 16-byte vectors.
pub const IPC_DEFAULTS: [(&str, &str); 4] = [
    ("min_bytes", "4K"),
    ("max_bytes", "1G"),
    ("warmup", "10"),
    ("timeout", "60"),
];

/// How many blocks: a number, or a multiple of the SM count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grid {
    Blocks(u32),
    PerSm(u32),
}

/// A launch shape as the user wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeSpec {
    pub grid: Grid,
    pub block: u32,
}

impl ShapeSpec {
    pub fn resolve(self, sm_count: u32) -> Shape {
        Shape {
            grid: match self.grid {
                Grid::Blocks(b) => b,
                Grid::PerSm(k) => k * sm_count.max(1),
            },
            block: self.block,
        }
    }
    /// `128x256`, or `sm132x512` for a grid sized from the SM count.
    pub fn label(self, sm_count: u32) -> String {
        let s = self.resolve(sm_count);
        match self.grid {
            Grid::Blocks(_) => format!("{}x{}", s.grid, s.block),
            Grid::PerSm(_) => format!("sm{}x{}", s.grid, s.block),
        }
    }
}

/// Parses `GxB`, `smxB` or `smKxB` (K blocks per SM).
pub fn parse_shape(s: &str) -> Result<ShapeSpec, String> {
    let bad = || {
        format!(
            "invalid launch shape {s:?}: write GRIDxBLOCK (128x256) or smxBLOCK (one block per SM), \
             BLOCK a multiple of 32 up to 1024"
        )
    };
    let t = s.trim().to_ascii_lowercase();
    let (g, b) = t.split_once('x').ok_or_else(bad)?;
    let block: u32 = b.parse().map_err(|_| bad())?;
    if block == 0 || block > 1024 || block % 32 != 0 {
        return Err(bad());
    }
    let grid = if let Some(k) = g.strip_prefix("sm") {
        let k: u32 = if k.is_empty() {
            1
        } else {
            k.parse().map_err(|_| bad())?
        };
        if k == 0 || k > 64 {
            return Err(bad());
        }
        Grid::PerSm(k)
    } else {
        let n: u32 = g.parse().map_err(|_| bad())?;
        if n == 0 || n > 1 << 20 {
            return Err(bad());
        }
        Grid::Blocks(n)
    };
    Ok(ShapeSpec { grid, block })
}

/// What one point runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    CopyEngine,
    Push(ShapeSpec),
    Pull(ShapeSpec),
    /// Bulk copy, 256 threads a block (fixed by the kernel).
    Tma(ShapeSpec),
}

impl Method {
    pub fn shape(self, sm_count: u32) -> Option<Shape> {
        match self {
            Method::CopyEngine => None,
            Method::Push(s) | Method::Pull(s) | Method::Tma(s) => Some(s.resolve(sm_count)),
        }
    }
    /// The record's variant name.
    pub fn name(self, sm_count: u32) -> String {
        match self {
            Method::CopyEngine => "copy-engine".to_string(),
            Method::Push(s) => format!("push-{}", s.label(sm_count)),
            Method::Pull(s) => format!("pull-{}", s.label(sm_count)),
            Method::Tma(s) => format!("tma-{}", s.label(sm_count)),
        }
    }
}

/// The methods of `--variant` × `--shapes` (`--tma-grids` for tma), in the order given.
pub fn methods(
    variants: &[String],
    shapes: &[String],
    tma_grids: &[String],
) -> Result<Vec<Method>, String> {
    let specs = shapes
        .iter()
        .map(|s| parse_shape(s))
        .collect::<Result<Vec<_>, _>>()?;
    let tma = tma_grids
        .iter()
        .map(|g| parse_shape(&format!("{}x256", g.trim())))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            format!("invalid --tma-grids {tma_grids:?}: use smK (K blocks per SM) or a block count, e.g. sm2,132")
        })?;
    let mut out = Vec::new();
    for v in variants {
        match v.trim().to_ascii_lowercase().as_str() {
            "copy-engine" | "ce" => out.push(Method::CopyEngine),
            "push" => out.extend(specs.iter().map(|s| Method::Push(*s))),
            "pull" => out.extend(specs.iter().map(|s| Method::Pull(*s))),
            "tma" => out.extend(tma.iter().map(|s| Method::Tma(*s))),
            other => {
                return Err(format!(
                    "unknown ipc variant {other:?}: use copy-engine, push, pull or tma (--variant)"
                ))
            }
        }
    }
    out.dedup();
    Ok(out)
}

/// The sizes, each a positive multiple of 16 bytes (the kernels move 16-byte vectors).
pub fn ipc_sizes(min: u64, max: u64, factor: u64) -> Result<Vec<u64>, BenchError> {
    let sizes = sweep(min, max, factor)?;
    if let Some(s) = sizes.iter().find(|s| **s < 16 || **s % 16 != 0) {
        return Err(BenchError::usage(format!(
            "ipc size {s} is not a multiple of 16 bytes: pick -b/-e/-f so every size is (e.g. -b 4K)"
        )));
    }
    Ok(sizes)
}

/// Iterations for one size: enough to move 4 GiB, between 20 and 2000.
pub fn default_iters(size: u64) -> u64 {
    (4u64 << 30).div_ceil(size.max(1)).clamp(20, 2000)
}

/// Splits `iters` into `samples` batches as evenly as possible (no empty batch).
pub fn batches(iters: u64, samples: u64) -> Vec<u64> {
    let n = samples.clamp(1, iters.max(1));
    (0..n)
        .map(|i| iters / n + u64::from(i < iters % n))
        .collect()
}

/// Smallest size at which a variant reaches `frac` of its own peak bandwidth.
pub fn size_at_fraction(points: &[(u64, f64)], frac: f64) -> Option<(u64, f64)> {
    let peak = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
    if peak <= 0.0 {
        return None;
    }
    let mut sorted = points.to_vec();
    sorted.sort_by_key(|p| p.0);
    sorted
        .into_iter()
        .find(|p| p.1 >= frac * peak)
        .map(|p| (p.0, peak))
}

/// One point: a method at a size, from GPU rank `a` to GPU rank `b`.
#[derive(Clone, Copy, Debug)]
pub struct IpcSpec {
    m: Method,
    size: u64,
    a: usize,
    b: usize,
    iters: u64,
    warmup: u64,
    /// Part of the all-pairs matrix (recorded with `matrix: true`).
    matrix: bool,
    /// Unique per point: seeds differ between points.
    index: u64,
}

/// One point of `efabench ipc`: a variant of the sweep or matrix, or an nvbandwidth cell.
#[derive(Clone, Copy, Debug)]
pub enum IpcPoint {
    Variant(IpcSpec),
    Nvbw(nvbw::NvbwSpec),
}

/// `efabench ipc` on the shared harness.
pub struct Ipc<'a> {
    args: &'a IpcArgs,
    sizes: Vec<u64>,
    methods: Vec<Method>,
    tests: Vec<nvbw::Test>,
    rank: Option<Rank>,
    /// PCI bus id of every rank's GPU.
    buses: Vec<String>,
    inventory: Option<Vec<efabench_gpu::nvml::NvmlGpuInfo>>,
}

impl<'a> Ipc<'a> {
    /// Checks every option, then that a CUDA driver is there (before any bootstrap).
    pub fn new(args: &'a IpcArgs) -> Result<Self, BenchError> {
        let c = &args.sweep;
        let sizes = ipc_sizes(c.min_bytes, c.max_bytes, c.step_factor)?;
        let methods =
            methods(&variants(args), &args.shapes, &args.tma_grids).map_err(BenchError::usage)?;
        let tests = nvbw::parse_tests(&args.nvbw).map_err(BenchError::usage)?;
        if methods.is_empty() && tests.is_empty() {
            return Err(BenchError::usage(
                "nothing to measure: pass --variant copy-engine,push,pull,tma or --nvbw all",
            ));
        }
        efabench_gpu::driver()?;
        Ok(Ipc {
            args,
            sizes,
            methods,
            tests,
            rank: None,
            buses: Vec::new(),
            inventory: None,
        })
    }

    fn link(&self, a: usize, b: usize) -> Option<f64> {
        self.inventory.as_ref().and_then(|inv| {
            efabench_gpu::nvml::nvlink_gbps_between(inv, self.buses.get(a)?, self.buses.get(b)?)
        })
    }

    fn iterations(&self, size: u64) -> (u64, u64) {
        let c = &self.args.sweep;
        let iters = c.iters.unwrap_or_else(|| default_iters(size));
        (iters, c.warmup.unwrap_or(10))
    }
}

impl Benchmark for Ipc<'_> {
    type Spec = IpcPoint;

    fn name(&self) -> &'static str {
        "ipc"
    }

    fn needs(&self) -> Needs {
        Needs {
            fabric: false,
            min_world: 1,
            how_to_launch: "ipc runs one rank per GPU: `efabench launch -n <GPUs> -- ipc ...`",
        }
    }

    fn fingerprint(&self) -> String {
        let a = self.args;
        format!(
            "--samples {} --variant {} --shapes {} --tma-grids {} --matrix {} --nvbw {}",
            a.samples,
            variants(a).join(","),
            a.shapes.join(","),
            a.tma_grids.join(","),
            a.matrix,
            a.nvbw.join(",")
        )
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let bs = ctx.bs;
        let (me, world) = (ctx.rank, ctx.world);
        let ordinal = efabench_gpu::resolve(self.args.gpu, ctx.local_rank)?;
        let gpu = Gpu::open(ordinal)?;
        let mut max = *self.sizes.iter().max().unwrap_or(&16) as usize;
        if self.tests.contains(&nvbw::Test::Latency) {
            max = max.max(nvbw::LATENCY_BYTES as usize);
        }

        // Everyone must be on a different GPU.
        let buses: Vec<String> = bs
            .all_gather(gpu.pci_bus_id.as_bytes())?
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        for (i, a) in buses.iter().enumerate() {
            if let Some(j) = buses.iter().skip(i + 1).position(|b| b == a) {
                return Err(BenchError::usage(format!(
                    "ranks {i} and {} share GPU {a}: run one rank per GPU (launch -n <GPUs>) or give each a different --gpu",
                    i + 1 + j
                )));
            }
        }

        let mut rank = setup(&gpu, max)?;
        rank.peer_recv = (0..world).map(|_| None).collect();
        rank.peer_src = (0..world).map(|_| None).collect();
        let mut blob = export(&rank.recv)?.to_vec();
        blob.extend_from_slice(&export(&rank.src)?);
        let blobs = bs.all_gather(&blob)?;
        for (r, b) in blobs.iter().enumerate() {
            if r as u32 == me {
                continue;
            }
            if b.len() != 2 * IPC_HANDLE_LEN {
                return Err(BenchError::failed(format!(
                    "rank {r} sent {} bytes of IPC handles, expected {}",
                    b.len(),
                    2 * IPC_HANDLE_LEN
                )));
            }
            let map = |h: &[u8]| {
                // Every rank allocated the same size (check_same compared the options).
                IpcMapping::open(&gpu, h, max).map_err(|e| {
                    BenchError::failed(format!(
                        "could not map rank {r}'s GPU buffer ({e}): GPUs {} and {} must reach each other peer-to-peer (NVLink or PCIe P2P) and run on one host",
                        gpu.pci_bus_id, buses[r]
                    ))
                })
            };
            rank.peer_recv[r] = Some(map(&b[..IPC_HANDLE_LEN])?);
            rank.peer_src[r] = Some(map(&b[IPC_HANDLE_LEN..])?);
        }

        // NVLink bandwidth between the measured GPUs (rank 0 → rank 1 for the sweep; an
        // nvbandwidth-only run gives each record its own pair's).
        match efabench_gpu::nvml::inventory() {
            Ok(inv) => self.inventory = Some(inv),
            Err(e) if me == 0 => eprintln!("efabench: {e}; link_gbps and util_pct stay empty"),
            Err(_) => {}
        }
        self.buses = buses.clone();
        let link_gbps = if self.methods.is_empty() {
            None
        } else {
            self.link(0, 1)
        };
        if me == 0 {
            let what = match buses.get(1) {
                Some(b1) if !self.methods.is_empty() => {
                    format!("sweep GPU {} -> GPU {b1}", buses[0])
                }
                _ => format!("GPUs {}", buses.join(", ")),
            };
            eprintln!(
                "efabench: ipc on {world} GPU(s) ({}, {} SMs); {what}, NVLink {}",
                gpu.name,
                gpu.sm_count,
                self.link(0, 1)
                    .map(|g| format!("{g:.0} Gbps per direction"))
                    .unwrap_or_else(|| "speed unknown".into())
            );
            if !rank.kernels.has_tma() && self.methods.iter().any(|m| matches!(m, Method::Tma(_))) {
                eprintln!(
                    "efabench: tma needs compute capability 9.0; skipping it on {}",
                    gpu.name
                );
            }
        }
        let has_tma = rank.kernels.has_tma();
        self.methods
            .retain(|m| !matches!(m, Method::Tma(_)) || has_tma);
        self.rank = Some(rank);
        Ok(RunFacts {
            provider: "cuda-ipc".into(),
            fabric: "nvlink".into(),
            domains: buses,
            libfabric: None,
            rails: 1,
            mem: "cuda".into(),
            link_gbps,
            ..RunFacts::default()
        })
    }

    fn points(&self, ctx: &Ctx) -> Result<Vec<IpcPoint>, BenchError> {
        let mut out = self.variant_points(ctx)?;
        let index = out.len() as u64;
        let c = &self.args.sweep;
        out.extend(
            nvbw::specs(
                &self.tests,
                &self.sizes,
                ctx.world as usize,
                c.iters,
                c.warmup.unwrap_or(10),
                self.args.samples,
                index,
            )
            .into_iter()
            .map(IpcPoint::Nvbw),
        );
        if out.is_empty() {
            return Err(BenchError::usage(format!(
                "nothing to measure with {} rank(s): with one GPU only --nvbw device_local_copy,device_to_device_latency_sm run; \
                 start one rank per GPU with `efabench launch -n <GPUs> -- ipc ...`",
                ctx.world
            )));
        }
        Ok(out)
    }

    fn label(&self, p: &IpcPoint) -> String {
        let sm = self.rank.as_ref().map_or(0, |r| r.gpu.sm_count);
        match p {
            IpcPoint::Variant(s) => format!(
                "{} {} {}->{}",
                s.m.name(sm),
                crate::size::human(s.size),
                s.a,
                s.b
            ),
            IpcPoint::Nvbw(s) => format!(
                "{} {} {},{}",
                s.test.name(),
                crate::size::human(s.size),
                s.row,
                s.col
            ),
        }
    }

    fn measure(&mut self, ctx: &Ctx, p: &IpcPoint) -> Result<Measured, BenchError> {
        let rank = self
            .rank
            .as_mut()
            .ok_or_else(|| BenchError::failed("measure before setup"))?;
        let s = match p {
            IpcPoint::Variant(s) => s,
            IpcPoint::Nvbw(s) => {
                return nvbw::measure(rank, ctx.bs, s, self.args.samples, self.args.job.verify())
            }
        };
        let o = measure(rank, ctx.bs, s, self.args)?;
        Ok(Measured {
            samples_ns: o
                .batch_ms
                .iter()
                .map(|ms| (ms * 1e6).round().max(1.0) as u64)
                .collect(),
            errors: o.errors,
            ..Measured::default()
        })
    }

    fn point(&self, _ctx: &Ctx, p: &IpcPoint, all: &[Measured]) -> Point {
        let s = match p {
            IpcPoint::Variant(s) => s,
            IpcPoint::Nvbw(s) => {
                return nvbw::point(s, all, self.args.samples, self.link(s.row, s.col))
            }
        };
        let sm = self.rank.as_ref().map_or(0, |r| r.gpu.sm_count);
        let exec = &all[exec_rank(s.m, s.a, s.b)];
        let mut p = point(
            s.m,
            sm,
            s.size,
            s.iters,
            s.warmup,
            self.args.samples,
            &exec.samples_ns,
            s.a,
            s.b,
            s.matrix,
        );
        if s.matrix {
            p.link_gbps = self.link(s.a, s.b);
        }
        p
    }

    fn summary(&self, records: &[Record]) -> Vec<String> {
        let mut lines = summary(records);
        lines.extend(matrix_lines(records));
        lines.extend(nvbw::matrix_lines(records));
        lines
    }
}

impl Ipc<'_> {
    /// The points of `--variant`: the sweep GPU 0 → GPU 1, then the matrix.
    fn variant_points(&self, ctx: &Ctx) -> Result<Vec<IpcPoint>, BenchError> {
        let mut out = Vec::new();
        let mut index = 0u64;
        if self.methods.is_empty() {
            return Ok(out);
        }
        if ctx.world < 2 {
            return Err(BenchError::usage(format!(
                "ipc --variant {} needs two GPUs (one rank each): start them with `efabench launch -n 2 -- ipc ...`, \
                 or on one GPU run --nvbw device_local_copy,device_to_device_latency_sm",
                variants(self.args).join(",")
            )));
        }
        for &m in &self.methods {
            for &size in &self.sizes {
                index += 1;
                let (iters, warmup) = self.iterations(size);
                out.push(IpcPoint::Variant(IpcSpec {
                    m,
                    size,
                    a: 0,
                    b: 1,
                    iters,
                    warmup,
                    matrix: false,
                    index,
                }));
            }
        }
        if ctx.world > 2 || self.args.matrix {
            let size = *self.sizes.iter().max().unwrap_or(&16);
            let (iters, warmup) = self.iterations(size);
            let best_push = self
                .methods
                .iter()
                .copied()
                .rfind(|m| matches!(m, Method::Push(_)));
            for m in [Some(Method::CopyEngine), best_push].into_iter().flatten() {
                for a in 0..ctx.world as usize {
                    for b in (0..ctx.world as usize).filter(|b| *b != a) {
                        index += 1;
                        out.push(IpcPoint::Variant(IpcSpec {
                            m,
                            size,
                            a,
                            b,
                            iters,
                            warmup,
                            matrix: true,
                            index,
                        }));
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Runs one rank of `efabench ipc`.
pub fn run_ipc(args: &IpcArgs, build: &BuildInfo) -> Result<i32, BenchError> {
    let mut b = Ipc::new(args)?;
    crate::harness::run(&mut b, args, build)
}

/// What one rank holds: its GPU, buffers and every peer's mapped buffers.
struct Rank {
    gpu: Arc<Gpu>,
    stream: Stream,
    recv: DeviceBuffer,
    src: DeviceBuffer,
    counter: Counter,
    /// Peer r's receive / source buffer mapped here (None for this rank).
    peer_recv: Vec<Option<IpcMapping>>,
    peer_src: Vec<Option<IpcMapping>>,
    kernels: IpcKernels,
}

/// One measured point on this rank.
#[derive(Debug, Default, Clone, PartialEq)]
struct Outcome {
    errors: u64,
    /// Milliseconds per iteration of each timed batch (executor only).
    batch_ms: Vec<f64>,
}

const POISON_SLOT: u32 = 0xFFFF;

/// The GPU-pair matrices of copy-engine and push at the largest size, GB/s.
fn matrix_lines(records: &[Record]) -> Vec<String> {
    let cells: Vec<(&Record, IpcDetail)> = records
        .iter()
        .filter_map(|r| Some((r, sweep_detail(r)?)))
        .filter(|(_, d)| d.matrix)
        .collect();
    let mut lines = Vec::new();
    let mut variants: Vec<&str> = Vec::new();
    for (r, _) in &cells {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    let world = records.first().map_or(0, |r| r.world as usize);
    for v in variants {
        let size = cells
            .iter()
            .find(|(r, _)| r.variant == v)
            .map_or(0, |(r, _)| r.size_bytes);
        lines.push(format!(
            "# {v} matrix at {size} B, GB/s (row = source GPU rank, column = destination)"
        ));
        let head: String = (0..world).map(|b| format!("{b:>9}")).collect();
        lines.push(format!("#      {head}"));
        for a in 0..world {
            let cols: String = (0..world)
                .map(|b| {
                    cells
                        .iter()
                        .find(|(r, d)| r.variant == v && d.src == a && d.dst == b)
                        .map_or(format!("{:>9}", "-"), |(r, _)| {
                            format!("{:>9.1}", r.bw_gbps / 8.0)
                        })
                })
                .collect();
            lines.push(format!("# {a:>4} {cols}"));
        }
    }
    lines
}

/// The typed fields of a record of the sweep or the matrix; `None` for nvbandwidth's records
/// (they carry `suite`, and their own fields: [`nvbw::NvbwDetail`]) and records of other shapes.
fn sweep_detail(r: &Record) -> Option<IpcDetail> {
    if r.bench != "ipc" || read::<nvbw::NvbwDetail>(r).is_some() {
        return None;
    }
    read(r)
}

/// The rank whose stream runs (and times) a method for the pair `a → b`.
fn exec_rank(m: Method, a: usize, b: usize) -> usize {
    match m {
        Method::Pull(_) => b,
        _ => a,
    }
}

fn setup(gpu: &Arc<Gpu>, max: usize) -> Result<Rank, BenchError> {
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
fn peer(v: &[Option<IpcMapping>], i: usize) -> Result<&IpcMapping, GpuError> {
    v.get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| GpuError::Invalid(format!("rank {i}'s buffer is not mapped here")))
}

/// Runs one point on this rank (all ranks call it in step; the harness gathers the outcomes).
fn measure(
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

/// The record fields of one point of the sweep or the matrix, beyond the common ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IpcDetail {
    /// `bw_gbps` in GB/s.
    #[serde(rename = "bw_GBps")]
    pub bw_gbytes: f64,
    /// Source and destination GPU ranks.
    pub src: usize,
    pub dst: usize,
    pub samples: u64,
    pub lat_kind: String,
    pub timing: String,
    /// The kernel's launch shape (absent for copy-engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<u32>,
    pub check: String,
    /// `true` on the cells of the all-pairs matrix; absent on the sweep.
    #[serde(default, skip_serializing_if = "is_false")]
    pub matrix: bool,
}

fn is_false(b: &bool) -> bool {
    !b
}

/// The record fields of one point (errors are summed by the harness).
#[allow(clippy::too_many_arguments)]
fn point(
    m: Method,
    sm: u32,
    size: u64,
    iters: u64,
    warmup: u64,
    samples: u64,
    batch_ns: &[u64],
    a: usize,
    b: usize,
    matrix: bool,
) -> Point {
    let mut s = Samples::from_vec(batch_ns.to_vec());
    let lat = s.summary_us(1.0);
    let bw_gbps = if lat.p50 > 0.0 {
        size as f64 * 8.0 / (lat.p50 * 1e3)
    } else {
        0.0
    };
    let shape = m.shape(sm);
    let detail = IpcDetail {
        bw_gbytes: bw_gbps / 8.0,
        src: a,
        dst: b,
        samples,
        lat_kind: "one-way".into(),
        timing: "CUDA events around batches of back-to-back launches; bw from the median batch"
            .into(),
        grid: shape.map(|s| s.grid),
        block: shape.map(|s| s.block),
        check: match m {
            Method::Pull(_) => "every word of every iteration compared on the receiving GPU",
            Method::CopyEngine => "receiver poisoned, then every word checked after the timed loop",
            _ => "receiver poisoned, per-iteration seed, every word checked against the last iteration's seed",
        }
        .into(),
        matrix,
    };
    Point {
        variant: m.name(sm),
        size_bytes: size,
        iters,
        warmup,
        peer: Some(b as u32),
        lat_us: lat,
        bw_gbps,
        busbw_gbps: None,
        msg_rate_mops: if lat.p50 > 0.0 { 1.0 / lat.p50 } else { 0.0 },
        extra: fields(&detail),
        ..Point::default()
    }
}

/// Summary lines: each variant's peak and the size where it reaches 90% of it, and the best
/// kernel against the copy engine at ≥ 64 MiB.
pub fn summary(records: &[Record]) -> Vec<String> {
    // The sweep's records: not the matrix's, not nvbandwidth's (those print as matrices).
    let sweep = |r: &&Record| sweep_detail(r).is_some_and(|d| !d.matrix);
    let mut variants: Vec<&str> = Vec::new();
    for r in records.iter().filter(sweep) {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    let mut lines = Vec::new();
    let gbs = |r: &Record| r.bw_gbps / 8.0;
    for v in &variants {
        let pts: Vec<(u64, f64)> = records
            .iter()
            .filter(sweep)
            .filter(|r| r.variant == *v)
            .map(|r| (r.size_bytes, gbs(r)))
            .collect();
        if let Some((s90, peak)) = size_at_fraction(&pts, 0.9) {
            lines.push(format!(
                "# {v}: peak {peak:.1} GB/s ({:.0} Gbps); 90% of peak from {} B",
                peak * 8.0,
                s90
            ));
        }
    }
    let big = |r: &&Record| r.size_bytes >= 64 << 20 && sweep(r);
    let ce = records
        .iter()
        .filter(big)
        .filter(|r| r.variant == "copy-engine")
        .map(gbs)
        .fold(0.0_f64, f64::max);
    let best = records
        .iter()
        .filter(big)
        .filter(|r| r.variant != "copy-engine")
        .max_by(|x, y| gbs(x).total_cmp(&gbs(y)));
    if let (Some(b), true) = (best, ce > 0.0) {
        lines.push(format!(
            "# best kernel at >= 64 MiB: {} {:.1} GB/s at {} B = {:.3} x copy-engine ({ce:.1} GB/s)",
            b.variant,
            gbs(b),
            b.size_bytes,
            gbs(b) / ce
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};

    /// A record as the harness writes it: the point's fields, then `wall_s` and `gpu_sharing`.
    pub(crate) fn harness_record(run: &RunInfo, mut p: Point) -> Record {
        p.extra.insert("wall_s".into(), json!(0.25));
        let mut r = run.record(p);
        r.extra
            .insert(efabench_record::GPU_SHARING.into(), Value::Null);
        r
    }

    /// The union of the field names of `records` against `tests/golden/<file>`.
    pub(crate) fn assert_golden(records: &[Record], golden_file: &str) {
        let got = records
            .iter()
            .flat_map(|r| crate::golden::key_paths(&serde_json::to_value(r).unwrap()))
            .collect();
        let want = crate::golden::golden(golden_file);
        assert_eq!(crate::golden::differs(&want, &got), None);
    }

    #[test]
    fn records_keep_their_golden_keys_and_read_back_typed() {
        let run = test_run(Some(3600.0));
        let ns = vec![1_000_000u64; 5];
        let push = Method::Push(parse_shape("128x256").unwrap());
        let recs: Vec<Record> = [(Method::CopyEngine, true), (push, false)]
            .into_iter()
            .map(|(m, matrix)| {
                harness_record(&run, point(m, 132, 1 << 20, 20, 2, 5, &ns, 0, 1, matrix))
            })
            .collect();
        assert_golden(&recs, include_str!("../../efabench/tests/golden/ipc.keys"));
        let ce = sweep_detail(&recs[0]).expect("typed");
        assert!(ce.matrix && ce.grid.is_none());
        let p = sweep_detail(&recs[1]).expect("typed");
        assert!(!p.matrix && p.grid == Some(128) && p.block == Some(256));
        assert!(
            recs[1].extra.get("matrix").is_none(),
            "the sweep has no matrix field"
        );
    }

    #[test]
    fn clap_refuses_the_groups_ipc_does_not_take() {
        for bad in [
            ["x", "-p", "tcp"],
            ["x", "--rails", "1"],
            ["x", "--mem", "host"],
        ] {
            assert!(IpcArgsParser::try_parse_from(bad).is_err(), "{bad:?}");
        }
        let a = IpcArgsParser::try_parse_from(["x", "-b", "4K", "--gpu", "1"]).unwrap();
        assert_eq!(a.a.sweep.min_bytes, 4096);
    }

    /// The run facts of an ipc test record: two GPUs over NVLink.
    pub(crate) fn test_run(link_gbps: Option<f64>) -> RunInfo {
        RunInfo {
            bench: "ipc".into(),
            world: 2,
            provider: "cuda-ipc".into(),
            fabric: "nvlink".into(),
            domains: vec![],
            libfabric: None,
            rails: 1,
            mem: "cuda".into(),
            link_gbps,
            verified: true,
            host: "h".into(),
            version: "0".into(),
            git: None,
            extra: Map::new(),
        }
    }

    #[test]
    fn shapes_parse_and_name() {
        let s = parse_shape("128x256").unwrap();
        assert_eq!(
            s.resolve(132),
            Shape {
                grid: 128,
                block: 256
            }
        );
        assert_eq!(s.label(132), "128x256");
        let s = parse_shape("smx512").unwrap();
        assert_eq!(
            s.resolve(132),
            Shape {
                grid: 132,
                block: 512
            }
        );
        assert_eq!(Method::Pull(s).name(132), "pull-sm132x512");
        assert_eq!(parse_shape("sm2x256").unwrap().resolve(132).grid, 264);
        for bad in [
            "128", "0x256", "1x0", "1x100", "1x2048", "smx", "axb", "sm0x256",
        ] {
            let e = parse_shape(bad).unwrap_err();
            assert!(e.contains("GRIDxBLOCK"), "{bad}: {e}");
        }
        let t = parse_shape("sm2x256").unwrap();
        assert_eq!(Method::Tma(t).name(132), "tma-sm264x256");
        assert_eq!(Method::CopyEngine.name(132), "copy-engine");
    }

    #[test]
    fn default_method_list_is_ce_four_pushes_four_pulls_and_tma() {
        let a = IpcArgsParser::parse_from(["x"]).a;
        let m = methods(&variants(&a), &a.shapes, &a.tma_grids).unwrap();
        assert_eq!(m.len(), 10);
        assert_eq!(m[0], Method::CopyEngine);
        assert_eq!(m[9].name(132), "tma-sm264x256");
        assert!(methods(&["tma".into()], &a.shapes, &["sm3".into(), "64".into()]).is_ok());
        let e = methods(&["tma".into()], &a.shapes, &["x".into()]).unwrap_err();
        assert!(e.contains("--tma-grids"), "{e}");
        let names: Vec<String> = m.iter().map(|m| m.name(132)).collect();
        assert!(names.contains(&"push-1x256".to_string()));
        assert!(names.contains(&"push-16x256".to_string()));
        assert!(names.contains(&"push-128x256".to_string()));
        assert!(names.contains(&"pull-sm132x512".to_string()));
        let e = methods(&["store".into()], &a.shapes, &a.tma_grids).unwrap_err();
        assert!(e.contains("copy-engine, push, pull or tma"), "{e}");
    }

    #[test]
    fn nvbw_replaces_the_default_variants_unless_they_are_named() {
        let parse = |v: &[&str]| IpcArgsParser::parse_from(v.iter().copied()).a;
        let a = parse(&["x"]);
        assert_eq!(variants(&a), ["copy-engine", "push", "pull", "tma"]);
        assert!(a.nvbw.is_empty());
        let a = parse(&["x", "--nvbw", "all"]);
        assert!(variants(&a).is_empty());
        assert_eq!(nvbw::parse_tests(&a.nvbw).unwrap().len(), 10);
        let a = parse(&[
            "x",
            "--nvbw",
            "device_local_copy,device_to_device_latency_sm",
            "--variant",
            "copy-engine",
        ]);
        assert_eq!(variants(&a), ["copy-engine"]);
        assert_eq!(
            nvbw::parse_tests(&a.nvbw).unwrap(),
            [nvbw::Test::LocalCopy, nvbw::Test::Latency]
        );
        let m = methods(&variants(&a), &a.shapes, &a.tma_grids).unwrap();
        assert_eq!(m, [Method::CopyEngine]);
    }

    #[derive(clap::Parser)]
    struct IpcArgsParser {
        #[command(flatten)]
        a: IpcArgs,
    }
    use crate::harness::RunInfo;
    use clap::Parser;

    #[test]
    fn sizes_must_be_multiples_of_16() {
        assert_eq!(ipc_sizes(4096, 16384, 2).unwrap(), vec![4096, 8192, 16384]);
        let e = ipc_sizes(8, 64, 2).unwrap_err();
        assert!(e.to_string().contains("multiple of 16"), "{e}");
        assert!(
            ipc_sizes(16, 100, 2).is_err(),
            "100 is not a multiple of 16"
        );
    }

    #[test]
    fn batches_split_evenly_and_iterations_scale() {
        assert_eq!(batches(10, 3), vec![4, 3, 3]);
        assert_eq!(batches(2, 5), vec![1, 1]);
        assert_eq!(batches(20, 5).iter().sum::<u64>(), 20);
        assert_eq!(default_iters(1 << 30), 20);
        assert_eq!(default_iters(4096), 2000);
        assert_eq!(default_iters(64 << 20), 64);
    }

    #[test]
    fn ninety_percent_size_and_summary() {
        let pts = [
            (4096, 10.0),
            (1 << 20, 300.0),
            (64 << 20, 370.0),
            (1 << 30, 380.0),
        ];
        assert_eq!(size_at_fraction(&pts, 0.9), Some((64 << 20, 380.0)));
        assert_eq!(size_at_fraction(&[], 0.9), None);

        let run = test_run(Some(3825.0));
        let mk = |m: Method, size: u64, ms: f64| {
            let ns = vec![(ms * 1e6) as u64; 5];
            run.record(point(m, 132, size, 20, 2, 5, &ns, 0, 1, false))
        };
        let push = Method::Push(parse_shape("128x256").unwrap());
        // 64 MiB in 0.2 ms = 335.5 GB/s; 1 GiB in 2.7 ms = 397.7 GB/s.
        let recs = vec![
            mk(Method::CopyEngine, 64 << 20, 0.2),
            mk(Method::CopyEngine, 1 << 30, 2.7),
            mk(push, 64 << 20, 0.25),
            mk(push, 1 << 30, 2.8),
        ];
        let r = &recs[1];
        assert_eq!(r.variant, "copy-engine");
        assert_eq!(r.peer, Some(1));
        let gbps = (1u64 << 30) as f64 * 8.0 / 2.7e6;
        assert!((r.bw_gbps - gbps).abs() < 1e-6 * gbps, "{}", r.bw_gbps);
        let gb = r.extra["bw_GBps"].as_f64().unwrap();
        assert!((gb * 8.0 - r.bw_gbps).abs() < 1e-9);
        assert!(r.util_pct.is_some());
        assert!(r.check().is_ok());
        assert_eq!(recs[2].extra["grid"], json!(128));
        let lines = summary(&recs);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("# copy-engine: peak"), "{}", lines[0]);
        assert!(lines[2].contains("push-128x256"), "{}", lines[2]);
        assert!(
            lines[2].contains(&format!("{:.3} x copy-engine", 2.7 / 2.8)),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn without_a_driver_ipc_is_a_usage_error() {
        if driver_present() {
            println!("skipped: a CUDA driver is present (this test is for machines without one)");
            return;
        }
        let a = IpcArgsParser::parse_from(["x", "-b", "4K"]).a;
        let e = run_ipc(&a, &BuildInfo::default()).unwrap_err();
        assert!(e.is_usage(), "{e}");
        assert!(e.to_string().contains("no CUDA driver was found"), "{e}");
    }

    /// Whether a CUDA driver is loadable here.
    fn driver_present() -> bool {
        efabench_gpu::driver().is_ok()
    }
}
