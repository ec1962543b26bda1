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
//!   host synchronisation inside the timed region (the harness's device-timed loop, one
//!   iteration per batch, the events read after the last); the bandwidth is from the median batch (as
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
//!
//! # Files
//! - `mod.rs`: the benchmark on the harness — the GPUs and their IPC mappings set up, the points
//!   (sweep, matrix, nvbandwidth cells), each handed to its measurement and record;
//! - `args.rs`: the options, launch shapes, methods and sizes;
//! - `measure.rs`: what one rank holds (GPU, buffers, peers' mappings) and one point of the
//!   sweep or matrix on it: poison, fill, timed batches between CUDA events, verification;
//! - `report.rs`: the record of a sweep or matrix point, the summary and the matrices;
//! - `nvbw/`: nvbandwidth's testcases, measured (`mod.rs`) and recorded (`report.rs`).

mod args;
mod measure;
pub mod nvbw;
mod report;

use efabench_gpu::ipc::{export, IpcMapping, IPC_HANDLE_LEN};
use efabench_gpu::Gpu;
use efabench_record::Record;

use crate::harness::{Benchmark, BuildInfo, Ctx, Measured, Needs, Point, RunFacts, TimedBy};
use crate::BenchError;

pub use args::{
    comma_list, default_iters, ipc_sizes, methods, parse_shape, variant_list, variants, Grid,
    IpcArgs, Method, ShapeSpec, Variant, IPC_DEFAULTS,
};
pub use measure::batches;
pub use report::{size_at_fraction, summary, IpcDetail};

use measure::{exec_rank, peer, setup, Rank, POISON_SLOT};
#[cfg(test)]
use report::sweep_detail;
use report::{matrix_lines, point};

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
        let methods = methods(&variants(args), &args.shapes, &args.tma_grids);
        let tests = nvbw::tests(&args.nvbw);
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
        Needs::LOCAL
    }

    fn timed_by(&self) -> TimedBy {
        TimedBy::DeviceRounds
    }

    fn fingerprint(&self) -> String {
        let a = self.args;
        format!(
            "--samples {} --variant {} --shapes {} --tma-grids {} --matrix {} --nvbw {}",
            a.samples,
            variant_list(&variants(a)),
            comma_list(&a.shapes),
            comma_list(&a.tma_grids),
            a.matrix,
            comma_list(&a.nvbw)
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
                return nvbw::measure(rank, ctx, s, self.args.samples, self.args.job.verify())
            }
        };
        measure::measure(rank, ctx, s, self.args)
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
                variant_list(&variants(self.args))
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
pub fn run_ipc(args: &IpcArgs, build: &BuildInfo) -> Result<crate::Verdict, BenchError> {
    let mut b = Ipc::new(args)?;
    crate::harness::run(&mut b, args, build)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{RunDetail, RunInfo};
    use clap::Parser;

    /// A record as the harness writes it: the point's fields, then `wall_s` and `gpu_sharing`.
    pub(crate) fn harness_record(run: &RunInfo, mut p: Point) -> Record {
        p.wall_s = Some(0.25);
        let mut run = run.clone();
        run.detail.gpu_sharing = Some(Vec::new());
        run.record(p)
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
            detail: RunDetail::default(),
        }
    }

    #[derive(clap::Parser, Debug)]
    pub(crate) struct IpcArgsParser {
        #[command(flatten)]
        pub(crate) a: IpcArgs,
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
