//! `efabench proxy`: GPU-initiated RDMA writes through a CPU proxy, against the same writes
//! posted by the CPU, with the time of every put broken down.
//!
//! Rank 0 issues puts to rank 1 (other ranks idle). Modes, measured in one run:
//! * `cpu`: the baseline — each rail's proxy thread posts the iteration's writes itself, no ring;
//! * `blocking`: the producer pushes a put and waits in `quiet` before the next;
//! * `nbi`: the producer pushes every put of the iteration, then one `quiet`.
//!
//! The producer is the GPU (`--producer gpu`, kernel `efa_proxy_puts` in
//! `crates/gpu/kernels/proxy.cu`: `efa_put_nbi`, `efa_quiet`, `efa_fence`) or, where there is no
//! GPU, a CPU thread that pushes the same commands into the same rings (`--producer host`, how CI
//! tests the proxy). One proxy thread per rail ([`engine::serve`]) pops its ring and posts
//! `fi_writemsg` with `FI_MORE` batching and `FI_DELIVERY_COMPLETE`; `quiet` waits on the done
//! counts the proxies publish in mapped pinned memory (why delivery-complete: see
//! [`engine`]). Libefaxx's confounders are avoided: each put's payload is written once per
//! iteration before timing (by a host copy into the source buffer, of any `--mem` kind), the
//! proxy honours every command's offsets and length and keeps many writes in flight, warm-up
//! iterations are not timed, and the rings' control words live in pinned, not managed, memory.
//!
//! An iteration is `--puts` puts of one size (fewer when `--footprint` would be exceeded), put
//! `p` from and to offset `p * size`, carrying the pattern of (iteration, 0, 1, p); the target
//! counts each put's CQ data on every rail, waits for its own GPU copies to drain ("landed"),
//! verifies every put's bytes, and a bootstrap barrier ends the iteration (untimed).
//!
//! Timed: from the first push (for `cpu`, the go signal) to the later of the last `quiet` and
//! the target's "landed" stamp, on the host clock both ranks share when they share a host
//! (`time_to` in the record). Why not the quiet alone: shm's CUDA IPC path copies on the target
//! with a device-to-device `cudaMemcpy`, which returns before the copy ran, and shm then reports
//! the write (CQ data, and delivery-complete to the initiator): a quiet-to-quiet clock read
//! 3.8 TB/s for a same-GPU copy of 64 MiB on an H100, above what HBM moves. `quiet_bw_gbps` keeps
//! the producer's own view (first push to last quiet) and `landed_after_quiet` the gap. Across
//! hosts the clocks differ and the quiet is the end (EFA's delivery-complete is trusted).
//!
//! Latency breakdown per put (record field `stages`, p50/p99 in µs): push → pop (producer to
//! proxy), pop → post, post → local completion, post → remote arrival (the target's CQ data of
//! the put's last stripe), completion → quiet returned, and push → quiet returned. Host stamps
//! are `CLOCK_REALTIME` (one base for every process of a host); GPU stamps (`%globaltimer`) are
//! moved onto it by an offset estimated from 16 ping exchanges through mapped pinned memory
//! (the GPU's stamp taken as the midpoint of the host's send/receive, shortest round trip wins;
//! `clock_rtt_ns` in the record bounds the error), measured before and after every point and
//! interpolated, because `%globaltimer` drifts against the host clock (~8 ppm seen on an H100). Remote arrival is on the target
//! host's clock, so that stage is only meaningful when both ranks share a host (`arrival_clock`).

pub mod engine;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use efabench_fabric::{GroupAddress, MrPath, Rail, RailConfig, RegionDescriptor};
use efabench_gpu::proxy::{realtime_ns, CommandRing, GpuProducer, PutPlan, RingMemory, MAX_RINGS};
use efabench_gpu::queue::RingKind;
use efabench_gpu::{GpuBuffer, MemKind};
use serde_json::{json, Map, Value};

use self::engine::{Feed, Lane, ProxyConfig, RailLog, Target};
use crate::error::BenchError;
use crate::harness::{
    self, Benchmark, Ctx, FabricArgs, JobArgs, Measured, MemArgs, MrChoice, Needs, Point, RunFacts,
    Strategy, SweepArgs,
};
use crate::stats::{gbps, mops, nearest_rank, Samples};

/// Fields every record of a proxy run repeats: how the run was set up.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProxyFacts {
    pub strategy: String,
    pub virtual_rails: bool,
    pub mr: String,
    /// `gpu` or `host` (a CPU thread standing in for the GPU).
    pub producer: String,
    /// Where the command rings live (`heap` when no GPU pushes).
    pub ring: String,
    pub ring_slots: u64,
    pub quiet_poll_ns: u32,
    pub payload_fence: String,
    pub proxy_threads: String,
    pub payload_fill: String,
    pub batch_max: usize,
    pub completion: String,
    pub hmem: String,
}

/// Options of `efabench proxy`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct ProxyArgs {
    /// Modes to run, comma-separated: cpu (CPU-posted baseline), blocking, nbi.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [Mode::Cpu, Mode::Blocking, Mode::Nbi])]
    pub modes: Vec<Mode>,
    /// Who pushes the puts: the GPU, or a CPU thread standing in for it (machines without one).
    #[arg(long, value_enum, default_value = "gpu")]
    pub producer: Producer,
    /// Puts per iteration, 1 to 4096 (fewer when --footprint would be exceeded).
    #[arg(long, default_value = "64", value_parser = puts_arg, allow_hyphen_values = true)]
    pub puts: u32,
    /// Bytes an iteration touches per buffer at most (puts beyond it are dropped, at least one).
    #[arg(long, default_value = "64M", value_parser = footprint_arg, allow_hyphen_values = true)]
    pub footprint: u64,
    /// Where the GPU producer's command rings live: pinned (host memory, the default), managed,
    /// gdr (slots in device memory, read through GDRCopy), hybrid (tail and done counts in device
    /// memory, written through GDRCopy, so the GPU polls its own memory). [default: pinned]
    #[arg(long, value_parser = ring_arg)]
    pub ring: Option<RingKind>,
    /// Slots per ring (power of two, 16 to 65536).
    #[arg(long, default_value = "1024", value_parser = slots_arg, allow_hyphen_values = true)]
    pub ring_slots: u64,
    /// Most commands a proxy posts as one FI_MORE batch, 1 to 256.
    #[arg(long, default_value = "32", value_parser = batch_arg, allow_hyphen_values = true)]
    pub batch: usize,
    /// Proxy threads: one per rail, or one per GPU serving every rail of the GPU in turn.
    #[arg(long, value_enum, default_value = "rail")]
    pub proxy_threads: ProxyThreads,
    /// Nanoseconds the GPU pauses between two reads of the proxy's counts in quiet and while
    /// waiting for ring credits, 0 (spin) to 10000.
    #[arg(long, default_value = "0", value_parser = poll_arg, allow_hyphen_values = true)]
    pub quiet_poll_ns: u32,
    /// System-scope fence in the kernel: before every put (the safe default for payloads a
    /// kernel writes just before putting them) or once before the first put of an iteration
    /// (enough here: every payload is written before the launch).
    #[arg(long, value_enum, default_value = "per-put")]
    pub payload_fence: PayloadFence,
    #[command(flatten)]
    pub sweep: SweepArgs,
    #[command(flatten)]
    pub fabric: FabricArgs,
    #[command(flatten)]
    pub mem: MemArgs,
    #[command(flatten)]
    pub job: JobArgs,
}

crate::impl_options!(ProxyArgs: sweep, fabric, mem);

/// Where the GPU producer fences its payload stores before the commands that name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PayloadFence {
    PerPut,
    Once,
}

impl PayloadFence {
    pub fn name(self) -> &'static str {
        match self {
            PayloadFence::PerPut => "per-put",
            PayloadFence::Once => "once",
        }
    }
}

/// How many proxy threads serve the rails of the initiating GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProxyThreads {
    /// One thread per rail, each owning its rail's completion queue.
    Rail,
    /// One thread for the GPU, owning every rail's completion queue.
    Gpu,
}

impl ProxyThreads {
    pub fn name(self) -> &'static str {
        match self {
            ProxyThreads::Rail => "rail",
            ProxyThreads::Gpu => "gpu",
        }
    }
}

/// A mode of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Cpu,
    Blocking,
    Nbi,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Blocking => "blocking",
            Mode::Nbi => "nbi",
        }
    }
}

/// Who pushes the commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Producer {
    Gpu,
    Host,
}

fn ring_arg(s: &str) -> Result<RingKind, String> {
    const USE: &str = "use pinned, managed, gdr or hybrid";
    match s.parse::<RingKind>() {
        Ok(RingKind::Libefaxx) => Err(format!(
            "libefaxx (the queue's CAS ring) cannot carry a 32-byte put: {USE}"
        )),
        Ok(k) => Ok(k),
        Err(_) => Err(format!("unknown ring: {USE}")),
    }
}

fn puts_arg(s: &str) -> Result<u32, String> {
    harness::bounded(s, "--puts", 1, 4096, "64").map(|n| n as u32)
}
fn poll_arg(s: &str) -> Result<u32, String> {
    harness::bounded(s, "--quiet-poll-ns", 0, 10_000, "200").map(|n| n as u32)
}
fn batch_arg(s: &str) -> Result<usize, String> {
    harness::bounded(s, "--batch", 1, 256, "32").map(|n| n as usize)
}
fn slots_arg(s: &str) -> Result<u64, String> {
    let n = harness::bounded(s, "--ring-slots", 16, 65536, "1024")?;
    if !n.is_power_of_two() {
        return Err(format!(
            "--ring-slots {n} is not a power of two: use e.g. 1024"
        ));
    }
    Ok(n)
}
fn footprint_arg(s: &str) -> Result<u64, String> {
    let n = crate::size::parse_size(s)?;
    if n == 0 || n > harness::MAX_SIZE {
        return Err(format!(
            "--footprint {} is out of range: use 1 to 64G, e.g. --footprint 64M",
            crate::size::clip(s)
        ));
    }
    Ok(n)
}

/// One point: a mode at a size.
#[derive(Clone, Debug)]
pub struct ProxySpec {
    mode: Mode,
    size: u64,
    puts: u32,
    iters: u64,
    warmup: u64,
}

struct Initiator {
    rails: Vec<Rail>,
    targets: Vec<Target>,
    rings: RingMemory,
    gpu: Option<GpuProducer>,
    clock: Option<(i64, u64, u64)>,
    /// Next ring position per rail (heads = tails = done between points).
    next: Vec<u64>,
}

struct Setup {
    src: Arc<Box<dyn GpuBuffer>>,
    dst: Arc<Box<dyn GpuBuffer>>,
    init: Option<Initiator>,
    /// The target's rails (rank 1).
    target_rails: Vec<Rail>,
    one_host: bool,
}

/// `efabench proxy` on the shared harness.
pub struct Proxy<'a> {
    args: &'a ProxyArgs,
    sizes: Vec<u64>,
    setup: Option<Setup>,
}

/// The latency breakdown covers at most this many puts (the last iterations of a point), so
/// memory stays bounded whatever `--iters` is.
const STAGE_PUTS: u64 = 1 << 16;

/// Timed iterations whose per-put stamps are kept (the last ones).
fn kept_iters(s: &ProxySpec) -> u64 {
    s.iters.min((STAGE_PUTS / s.puts as u64).max(1))
}

/// Ranks: rank 0 issues the puts, rank 1 is their target.
const INITIATOR: u32 = 0;
const TARGET: u32 = 1;

impl<'a> Proxy<'a> {
    /// Checks the options before anything touches hardware; the GPU producer needs a driver.
    pub fn new(args: &'a ProxyArgs) -> Result<Self, BenchError> {
        let sizes = args.sweep.sizes()?;
        if sizes.iter().any(|&s| s > u32::MAX as u64) {
            return Err(BenchError::usage(
                "efabench proxy: a put carries a 32-bit length; lower -e to 2G or less",
            ));
        }
        let gpu_modes = args.modes.iter().any(|m| *m != Mode::Cpu);
        if let (Some(ring), false) = (args.ring, args.producer == Producer::Gpu && gpu_modes) {
            return Err(BenchError::usage(format!(
                "efabench proxy: --ring {ring} places the GPU producer's rings, and this run has none \
                 (--producer host pushes into plain memory, --modes cpu pushes nothing); drop --ring"
            )));
        }
        if args.producer == Producer::Gpu && gpu_modes {
            if let Err(e) = efabench_gpu::driver() {
                return Err(BenchError::usage(if e.is_no_driver() {
                    "efabench proxy: no CUDA driver was found, and the GPU producer needs one; \
                     use --producer host (a CPU thread pushes the puts) or --modes cpu"
                        .to_string()
                } else {
                    format!("efabench proxy: {e}")
                }));
            }
        }
        Ok(Proxy {
            args,
            sizes,
            setup: None,
        })
    }

    /// `--ring`, or the default placement.
    fn ring_kind(&self) -> RingKind {
        self.args.ring.unwrap_or(RingKind::Pinned)
    }

    fn puts_at(&self, size: u64) -> u32 {
        let fit = (self.args.footprint / size.max(1)).clamp(1, 4096) as u32;
        self.args.puts.min(fit)
    }

    fn buf_bytes(&self) -> u64 {
        self.sizes
            .iter()
            .map(|&s| s * self.puts_at(s) as u64)
            .max()
            .unwrap_or(1)
            .max(64)
    }
}

fn mr_path(c: MrChoice) -> MrPath {
    match c {
        MrChoice::Auto => MrPath::Auto,
        MrChoice::Dmabuf => MrPath::Dmabuf,
        MrChoice::Va => MrPath::Va,
    }
}

fn alloc(
    mem: MemKind,
    len: usize,
    device: Option<i32>,
) -> Result<Arc<Box<dyn GpuBuffer>>, BenchError> {
    efabench_gpu::alloc(mem, len, device.unwrap_or(0))
        .map(Arc::new)
        .map_err(|e| {
            let m = format!("--mem {mem}: {e}");
            if e.is_no_driver() {
                BenchError::usage(format!("{m}; use --mem host on machines without a GPU"))
            } else {
                BenchError::usage(m)
            }
        })
}

/// The seed of put `p` of iteration `iter` (rank 0 to rank 1).
fn put_seed(iter: u64, p: u32) -> u64 {
    crate::pattern::seed(iter, INITIATOR, TARGET, p)
}

/// Writes every put's payload of iteration `iter` into `buf` (put `p` at `p * size`, the
/// pattern of (iteration, 0, 1, p)): the fill kernel on the GPU for device memory, a host copy
/// for host-accessible kinds. Untimed, once per iteration, never per push.
pub fn fill_puts(buf: &dyn GpuBuffer, iter: u64, puts: u32, size: u64) -> Result<(), String> {
    for p in 0..puts {
        buf.fill_range((p as u64 * size) as usize, size as usize, put_seed(iter, p))
            .map_err(|e| format!("writing the payload of put {p}: {e}"))?;
    }
    Ok(())
}

/// Counts the 8-byte words of every put of iteration `iter` in `buf` that differ from their
/// pattern (on the GPU for device memory). A put that is missing, stale (an earlier
/// iteration's) or landed at another put's offset differs.
pub fn check_puts(buf: &dyn GpuBuffer, iter: u64, puts: u32, size: u64) -> Result<u64, String> {
    // Device memory: libfabric's own copies into it (shm's CUDA IPC path) run on its stream of
    // this process's context; wait for them before looking.
    buf.settle().map_err(|e| e.to_string())?;
    let mut bad = 0u64;
    for p in 0..puts {
        bad += buf
            .mismatches_in((p as u64 * size) as usize, size as usize, put_seed(iter, p))
            .map_err(|e| format!("checking put {p}: {e}"))?;
    }
    Ok(bad)
}

impl<'a> Benchmark for Proxy<'a> {
    type Spec = ProxySpec;

    fn name(&self) -> &'static str {
        "proxy"
    }

    fn needs(&self) -> Needs {
        Needs {
            fabric: true,
            min_world: 2,
            how_to_launch: "run `efabench launch -n 2 -- proxy ...`, or start it under \
                            srun/mpirun, or by hand with --rank/--world/--rdzv",
        }
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let (fabric, mem, job) = (&self.args.fabric, &self.args.mem, &self.args.job);
        let plan = ctx.plan()?;
        if plan.rails.len() > MAX_RINGS {
            return Err(BenchError::usage(format!(
                "efabench proxy drives at most {MAX_RINGS} rails; lower --rails"
            )));
        }
        let group = plan.open(&RailConfig {
            post_timeout: job.timeout(),
            max_in_flight: 8192,
            ..RailConfig::default()
        })?;
        let max_msg = group.rail(0).info().max_msg_size;
        if let Some(&big) = self.sizes.iter().find(|&&s| s > max_msg) {
            return Err(BenchError::usage(format!(
                "puts of {big} bytes exceed what provider {} writes at once ({max_msg} bytes); lower -e",
                plan.provider
            )));
        }
        let len = self.buf_bytes() as usize;
        let src = alloc(mem.mem, len, ctx.device)?;
        let dst = alloc(mem.mem, len, ctx.device)?;
        let path = mr_path(fabric.mr);
        let src_reg = group.register(src.clone(), path)?;
        let dst_reg = group.register(dst.clone(), path)?;
        let mr = if efabench_fabric::MemoryBuffer::device_only(&**src) {
            format!("{}+device-only", src_reg.path_taken())
        } else {
            src_reg.path_taken().to_string()
        };
        // u32 address length, the group address, the target region's descriptor.
        let a = group.address()?.to_bytes();
        let mut blob = (a.len() as u32).to_le_bytes().to_vec();
        blob.extend_from_slice(&a);
        blob.extend_from_slice(&group.descriptor(&dst_reg)?.to_bytes());
        let blobs = ctx.bs.all_gather(&blob)?;
        let nrails = group.len();
        let mut init = None;
        let mut target_rails = Vec::new();
        if ctx.rank == INITIATOR {
            let b = &blobs[TARGET as usize];
            let bad = || {
                BenchError::failed(
                    "rank 1 sent a malformed address blob; all ranks must run the same efabench",
                )
            };
            let (addr_part, desc_part) = split_blob(b).ok_or_else(bad)?;
            let addr = GroupAddress::from_bytes(addr_part)?;
            let desc = RegionDescriptor::from_bytes(desc_part)?;
            let peer = group.insert_peer(&addr)?;
            let targets = (0..nrails)
                .map(|r| Target {
                    peer: peer.rail(r),
                    dst_rank: TARGET as u16,
                    my_rank: INITIATOR as u16,
                    region: src_reg.id(r),
                    remote: *desc.rail(r),
                })
                .collect();
            let log2 = self.args.ring_slots.trailing_zeros();
            let gpu_modes = self.args.modes.iter().any(|m| *m != Mode::Cpu);
            let (rings, gpu, clock) = if self.args.producer == Producer::Gpu && gpu_modes {
                let ordinal = match ctx.device {
                    Some(d) => d,
                    None => efabench_gpu::resolve(mem.gpu, ctx.local_rank)
                        .map_err(|e| BenchError::usage(format!("the GPU producer: {e}")))?,
                };
                let g = efabench_gpu::Gpu::open(ordinal)?;
                let rings = RingMemory::new(&g, self.ring_kind(), nrails, log2)
                    .map_err(|e| BenchError::usage(format!("efabench proxy: {e}")))?;
                let prod = GpuProducer::new(&g, self.args.puts as usize)
                    .map_err(|e| BenchError::context("the GPU producer", e))?;
                let clock = prod
                    .clock_offset(32)
                    .map_err(|e| BenchError::context("clock alignment", e))?;
                (rings, Some(prod), Some(clock))
            } else {
                (RingMemory::heap(nrails, log2), None, None)
            };
            init = Some(Initiator {
                rails: group.into_rails(),
                targets,
                rings,
                gpu,
                clock,
                next: vec![0; nrails],
            });
        } else {
            // Every rank inserts nobody: only rank 0 writes. The target keeps its rails.
            target_rails = group.into_rails();
        }
        self.setup = Some(Setup {
            src,
            dst,
            init,
            target_rails,
            one_host: ctx.one_host(),
        });
        let gpu_modes = self.args.modes.iter().any(|m| *m != Mode::Cpu);
        let facts = ProxyFacts {
            strategy: fabric.strategy.name().into(),
            virtual_rails: plan.virtual_rails,
            mr: mr.to_string(),
            producer: match self.args.producer {
                Producer::Gpu => "gpu",
                Producer::Host => "host",
            }
            .into(),
            ring: if self.args.producer == Producer::Gpu && gpu_modes {
                self.ring_kind().name()
            } else {
                "heap"
            }
            .into(),
            ring_slots: self.args.ring_slots,
            quiet_poll_ns: self.args.quiet_poll_ns,
            payload_fence: self.args.payload_fence.name().into(),
            proxy_threads: self.args.proxy_threads.name().into(),
            payload_fill: if mem.mem == MemKind::Cuda {
                "GPU fill kernel, once per iteration before timing"
            } else {
                "host copy, once per iteration before timing"
            }
            .into(),
            batch_max: self.args.batch,
            completion: "FI_DELIVERY_COMPLETE (quiet = local completion of every earlier write)"
                .into(),
            hmem: match mem.mem {
                MemKind::Cuda => "FI_HMEM_CUDA (device memory)",
                MemKind::Pinned => "FI_HMEM_SYSTEM (pinned host memory)",
                MemKind::Managed => "FI_HMEM_CUDA (managed memory)",
                MemKind::Host => "FI_HMEM_SYSTEM (pageable host memory)",
            }
            .into(),
        };
        let header = vec![format!(
            "# proxy: rank 0 -> rank 1 | producer {} | rails {}{} | strategy {} | proxy threads per {} | ring {} {} slots | batch {} | mem {} ({})",
            facts.producer,
            nrails,
            if plan.virtual_rails { " virtual" } else { "" },
            fabric.strategy.name(),
            self.args.proxy_threads.name(),
            facts.ring,
            self.args.ring_slots,
            self.args.batch,
            mem.mem,
            mr
        ),
        if ctx.one_host() {
            "# time: first push (cpu: go) to the later of the last quiet and the bytes landed at the target (one host clock); quiet_bw_gbps in the records is the producer's own view".to_string()
        } else {
            "# time: first push (cpu: go) to the last quiet (ranks on different hosts: the provider's delivery-complete is trusted)".to_string()
        }];
        Ok(RunFacts {
            provider: plan.provider.clone(),
            fabric: plan.rails[0].fabric.clone(),
            domains: plan.domains(),
            libfabric: Some(plan.libfabric.clone()),
            rails: nrails as u32,
            mem: mem.mem.to_string(),
            link_gbps: None,
            header,
            extra: crate::queue::record::fields(&facts),
        })
    }

    fn points(&self, _ctx: &Ctx) -> Result<Vec<ProxySpec>, BenchError> {
        let mut out = Vec::new();
        for &mode in &self.args.modes {
            for &size in &self.sizes {
                let puts = self.puts_at(size);
                let (iters, warmup) = self.args.sweep.iterations(size, puts as u64);
                out.push(ProxySpec {
                    mode,
                    size,
                    puts,
                    iters,
                    warmup,
                });
            }
        }
        Ok(out)
    }

    fn label(&self, s: &ProxySpec) -> String {
        format!("{} {}", s.mode.name(), crate::size::human(s.size))
    }

    fn measure(&mut self, ctx: &Ctx, spec: &ProxySpec) -> Result<Measured, BenchError> {
        let args = self.args;
        let setup = self
            .setup
            .as_mut()
            .ok_or_else(|| BenchError::failed("measure before setup"))?;
        match ctx.rank {
            INITIATOR => measure_initiator(ctx, args, setup, spec),
            TARGET => measure_target(ctx, args, setup, spec),
            _ => {
                // Idle ranks take part in the per-iteration barriers.
                for _ in 0..spec.warmup + spec.iters {
                    ctx.bs.barrier()?;
                }
                Ok(Measured::default())
            }
        }
    }

    fn point(&self, ctx: &Ctx, s: &ProxySpec, all: &[Measured]) -> Point {
        let init = &all[INITIATOR as usize];
        let tgt = &all[TARGET as usize];
        let arrays = |m: &Measured, k: &str| -> Vec<u64> {
            m.extra
                .get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default()
        };
        let mut extra = init.extra.clone();
        for k in ["post_ns", "quiet_ns", "iter_t0_ns", "iter_t1_ns"] {
            extra.remove(k);
        }
        // An iteration ends when its bytes are in the target's memory: the later of the last
        // quiet and the target's "landed" stamp (all CQ data in, its GPU copies drained). Both
        // are on one clock only when the ranks share a host; elsewhere the initiator's quiet is
        // the end (a provider's delivery-complete is then trusted).
        let (t0, t1, landed) = (
            arrays(init, "iter_t0_ns"),
            arrays(init, "iter_t1_ns"),
            arrays(tgt, "landed_ns"),
        );
        let aligned = ctx.one_host()
            && !t0.is_empty()
            && t0.len() == init.samples_ns.len()
            && t1.len() == t0.len()
            && landed.len() == t0.len();
        let quiet_total: u64 = init.samples_ns.iter().sum();
        let times = if aligned {
            let lag: Vec<i64> = landed
                .iter()
                .zip(&t1)
                .map(|(&l, &q)| l as i64 - q as i64)
                .collect();
            extra.insert("landed_after_quiet".into(), pct(lag));
            t0.iter()
                .zip(t1.iter().zip(&landed))
                .map(|(&a, (&q, &l))| q.max(l).saturating_sub(a))
                .collect()
        } else {
            init.samples_ns.clone()
        };
        extra.insert(
            "time_to".into(),
            json!(if aligned {
                "landed (later of the last quiet and the target's bytes in memory, one host clock)"
            } else {
                "quiet (initiator; the provider's delivery-complete trusted)"
            }),
        );
        let mut samples = Samples::from_vec(times);
        let n = samples.len() as u64;
        let total = samples.total_ns();
        let puts = n * s.puts as u64;
        let lat_us = samples.summary_us(s.puts as f64);
        // What the producer saw: first push to last quiet.
        extra.insert(
            "quiet_bw_gbps".into(),
            json!(gbps(s.size * puts, quiet_total.max(1))),
        );
        // Remote arrival: the target's stamp of each put's last stripe, against its first post.
        let post = arrays(init, "post_ns");
        let quiet = arrays(init, "quiet_ns");
        let arrive = arrays(tgt, "arrive_ns");
        if post.len() == arrive.len() && !post.is_empty() {
            let d: Vec<i64> = post
                .iter()
                .zip(&arrive)
                .map(|(&p, &a)| a as i64 - p as i64)
                .collect();
            let q: Vec<i64> = arrive
                .iter()
                .zip(&quiet)
                .map(|(&a, &q)| q as i64 - a as i64)
                .collect();
            if let Some(Value::Object(st)) = extra.get_mut("stages") {
                st.insert("post_to_arrival".into(), pct(d));
                st.insert("arrival_to_quiet".into(), pct(q));
            }
        }
        extra.insert("puts_per_iter".into(), json!(s.puts));
        extra.insert("lat_kind".into(), json!("per put (iteration time / puts)"));
        extra.insert("bw_GBps".into(), json!(gbps(s.size * puts, total) / 8.0));
        Point {
            variant: s.mode.name().to_string(),
            size_bytes: s.size,
            iters: s.iters,
            warmup: s.warmup,
            peer: Some(TARGET),
            lat_us,
            bw_gbps: gbps(s.size * puts, total),
            busbw_gbps: None,
            msg_rate_mops: mops(puts, total),
            ..Point::with_extra(extra)
        }
    }

    fn summary(&self, records: &[efabench_record::Record]) -> Vec<String> {
        let mut out = Vec::new();
        let bw = |mode: &str, size: u64| {
            records
                .iter()
                .find(|r| r.variant == mode && r.size_bytes == size)
                .map(|r| r.bw_gbps)
        };
        for &size in &self.sizes {
            let Some(cpu) = bw("cpu", size).filter(|b| *b > 0.0) else {
                continue;
            };
            let mut parts = Vec::new();
            for m in ["nbi", "blocking"] {
                if let Some(b) = bw(m, size) {
                    parts.push(format!("{m}/cpu {:.3}", b / cpu));
                }
            }
            if !parts.is_empty() {
                out.push(format!(
                    "# {}: {}",
                    crate::size::human(size),
                    parts.join(", ")
                ));
            }
        }
        out
    }
}

/// Splits a setup blob into (group address, region descriptor).
fn split_blob(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let l = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(l)?;
    Some((b.get(4..end)?, b.get(end..)?))
}

pub(crate) fn pct(mut v: Vec<i64>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_unstable();
    let q = |f: f64| nearest_rank(&v, f).unwrap_or(0) as f64 / 1000.0;
    json!({"p50_us": q(0.5), "p99_us": q(0.99)})
}

fn health_of(ctx: &Ctx) -> impl Fn() -> Result<(), String> + Send + Sync + Clone {
    let h = ctx.bs.health();
    move || h.check().map_err(|e| e.to_string())
}

/// A proxy thread hands its rails back (with their indices) with what it did on each.
type ThreadOutcome = (Vec<(usize, Rail)>, Result<Vec<RailLog>, String>);

fn measure_initiator(
    ctx: &Ctx,
    args: &ProxyArgs,
    setup: &mut Setup,
    s: &ProxySpec,
) -> Result<Measured, BenchError> {
    let init = setup
        .init
        .as_mut()
        .ok_or_else(|| BenchError::failed("initiator not set up"))?;
    let nrails = init.rails.len();
    let sched = engine::schedule(s.puts, s.size, nrails, args.fabric.strategy, TARGET as u16);
    let mut per_rail: Vec<Vec<efabench_gpu::proxy::Command>> = vec![Vec::new(); nrails];
    for put in &sched {
        for (r, c) in put {
            per_rail[*r].push(*c);
        }
    }
    let total_iters = s.warmup + s.iters;
    let kept = kept_iters(s);
    let log2 = args.ring_slots.trailing_zeros();
    let cfg = ProxyConfig {
        batch: args.batch,
        max_in_flight: 4096,
        idle_timeout: args.job.timeout(),
    };
    let failed_flag = AtomicBool::new(false);
    let go = AtomicU64::new(0);
    let health = health_of(ctx);
    let rails = std::mem::take(&mut init.rails);
    let starts = init.next.clone();
    let mut samples = Vec::with_capacity(s.iters as usize);
    // Per timed iteration, on the host clock: first push (or go) and last quiet returned.
    let mut iter_t0 = Vec::with_capacity(s.iters as usize);
    let mut iter_t1 = Vec::with_capacity(s.iters as usize);
    // Per recorded put: push, quiet (host clock), iteration index.
    let mut push_ns = Vec::new();
    let mut quiet_ns = Vec::new();
    let rings_mem = &init.rings;
    let rings: Vec<CommandRing> = (0..nrails).map(|r| rings_mem.ring(r, log2)).collect();
    // %globaltimer drifts against CLOCK_REALTIME (about 8 ppm on an H100: the offset measured
    // once at setup was 170 us off twenty seconds later), so the offset is measured again
    // before and after every point and interpolated in between.
    let clock_before = match &init.gpu {
        Some(g) if s.mode != Mode::Cpu => Some(
            g.clock_offset(16)
                .map_err(|e| BenchError::context("clock alignment", e))?,
        ),
        _ => None,
    };
    let mut heads = starts.clone();
    // The rails, grouped by the thread that serves them.
    let groups: Vec<Vec<(usize, Rail)>> = match args.proxy_threads {
        ProxyThreads::Rail => rails.into_iter().enumerate().map(|x| vec![x]).collect(),
        ProxyThreads::Gpu => vec![rails.into_iter().enumerate().collect()],
    };
    let (outcomes, main): (Vec<ThreadOutcome>, Result<(), BenchError>) =
        std::thread::scope(|scope| {
            let handles: Vec<_> = groups
                .into_iter()
                .map(|group| {
                    let (rings, per_rail, go, targets) = (&rings, &per_rail, &go, &init.targets);
                    let (failed_flag, health, starts, cfg) =
                        (&failed_flag, health.clone(), &starts, &cfg);
                    scope.spawn(move || {
                        let res = {
                            let lanes: Vec<Lane> = group
                                .iter()
                                .map(|(r, rail)| Lane {
                                    index: *r,
                                    rail,
                                    ring: rings[*r],
                                    feed: match s.mode {
                                        Mode::Cpu => Feed::Direct {
                                            per_iter: &per_rail[*r],
                                            go,
                                        },
                                        _ => Feed::Ring,
                                    },
                                    start: starts[*r],
                                    expected: per_rail[*r].len() as u64 * total_iters,
                                    keep_from: per_rail[*r].len() as u64 * (total_iters - kept),
                                    tgt: &targets[*r],
                                })
                                .collect();
                            engine::serve(&lanes, cfg, failed_flag, &health)
                        };
                        (group, res)
                    })
                })
                .collect();
            let main = (|| -> Result<(), BenchError> {
                for it in 0..total_iters {
                    if args.job.verify() || it == 0 {
                        fill_puts(&**setup.src, it, s.puts, s.size).map_err(BenchError::failed)?;
                    }
                    let (t_ns, span, push, quiet) = match s.mode {
                        Mode::Cpu => {
                            let t0 = realtime_ns();
                            go.store(it + 1, Ordering::Release);
                            let mut spins = 0u64;
                            for (r, ring) in rings.iter().enumerate() {
                                let want = starts[r] + per_rail[r].len() as u64 * (it + 1);
                                while ring.done() < want {
                                    spins += 1;
                                    if spins % 1024 == 0 {
                                        if failed_flag.load(Ordering::Acquire) {
                                            return Err(BenchError::failed(
                                                "a proxy thread failed",
                                            ));
                                        }
                                        health().map_err(BenchError::failed)?;
                                    }
                                    std::hint::spin_loop();
                                }
                            }
                            let t1 = realtime_ns();
                            (
                                t1 - t0,
                                (t0, t1),
                                vec![t0; s.puts as usize],
                                vec![t1; s.puts as usize],
                            )
                        }
                        Mode::Blocking | Mode::Nbi => {
                            let blocking = s.mode == Mode::Blocking;
                            match &init.gpu {
                                Some(g) => {
                                    let r = g
                                        .run(
                                            rings_mem,
                                            log2,
                                            &PutPlan {
                                                puts: s.puts,
                                                size: s.size,
                                                dst: TARGET as u16,
                                                rails: nrails as u32,
                                                split: args.fabric.strategy == Strategy::Split,
                                                first_rail: 0,
                                                blocking,
                                                poll_ns: args.quiet_poll_ns,
                                                fence_each: args.payload_fence
                                                    == PayloadFence::PerPut,
                                            },
                                        )
                                        .map_err(|e| BenchError::context("the GPU producer", e))?;
                                    for (r, ring) in heads.iter_mut().enumerate() {
                                        *ring += per_rail[r].len() as u64;
                                    }
                                    let off = clock_before.map(|c| c.0).unwrap_or(0);
                                    let host = |t: u64| (t as i64 - off) as u64;
                                    (
                                        r.t1.saturating_sub(r.t0),
                                        (host(r.t0), host(r.t1)),
                                        r.push.iter().map(|&t| host(t)).collect(),
                                        r.quiet.iter().map(|&t| host(t)).collect(),
                                    )
                                }
                                None => {
                                    let h = engine::host_iteration(
                                        &rings,
                                        &mut heads,
                                        &sched,
                                        blocking,
                                        &failed_flag,
                                        &health,
                                    )
                                    .map_err(BenchError::failed)?;
                                    (h.t1 - h.t0, (h.t0, h.t1), h.push, h.quiet)
                                }
                            }
                        }
                    };
                    if it >= s.warmup {
                        samples.push(t_ns);
                        iter_t0.push(span.0);
                        iter_t1.push(span.1);
                    }
                    if it >= total_iters - kept {
                        push_ns.extend(push);
                        quiet_ns.extend(quiet);
                    }
                    // The target verified this iteration: the source may be rewritten.
                    ctx.bs.barrier()?;
                }
                Ok(())
            })();
            if main.is_err() {
                failed_flag.store(true, Ordering::Release);
            }
            let outcomes = handles
                .into_iter()
                .map(|h| h.join().expect("a proxy thread panicked"))
                .collect();
            (outcomes, main)
        });
    let mut errs = Vec::new();
    let mut back: Vec<Option<(Rail, RailLog)>> = (0..nrails).map(|_| None).collect();
    let mut rails_back: Vec<Option<Rail>> = (0..nrails).map(|_| None).collect();
    for (group, res) in outcomes {
        match res {
            Ok(logs) => {
                for ((r, rail), log) in group.into_iter().zip(logs) {
                    back[r] = Some((rail, log));
                }
            }
            Err(e) => {
                errs.push(e);
                for (r, rail) in group {
                    rails_back[r] = Some(rail);
                }
            }
        }
    }
    let mut rail_logs = Vec::with_capacity(nrails);
    for (r, b) in back.into_iter().enumerate() {
        match (b, rails_back[r].take()) {
            (Some((rail, log)), _) => {
                init.rails.push(rail);
                rail_logs.push(log);
            }
            (None, Some(rail)) => init.rails.push(rail),
            (None, None) => errs.push(format!("rail {r} was not handed back")),
        }
    }
    // A proxy's own error is the cause; the others only noticed it.
    errs.sort_by_key(|e| e.contains("another thread failed"));
    if let Some(e) = errs.into_iter().next() {
        return Err(BenchError::failed(e));
    }
    main?;
    if s.mode == Mode::Cpu {
        // The baseline used the control words but no slots: rewind them, because the lap parity
        // needs every position of the ring to be written in turn.
        for (r, ring) in rings.iter().enumerate() {
            ring.publish_tail(init.next[r]);
            ring.publish_done(init.next[r]);
        }
    } else {
        for (r, n) in init.next.iter_mut().enumerate() {
            *n += per_rail[r].len() as u64 * total_iters;
        }
    }
    if let (Some(g), Some(b)) = (&init.gpu, clock_before) {
        let a = g
            .clock_offset(16)
            .map_err(|e| BenchError::context("clock alignment", e))?;
        // The stamps were moved with the offset before the point; correct each by the drift
        // up to its own time (linear between the two measurements).
        let span = a.2.saturating_sub(b.2).max(1) as f64;
        let drift = (a.0 - b.0) as f64;
        let fix = |t: &mut u64| {
            let frac = (t.saturating_sub(b.2) as f64 / span).clamp(0.0, 1.0);
            *t = (*t as i64 - (drift * frac) as i64) as u64;
        };
        push_ns.iter_mut().for_each(fix);
        quiet_ns.iter_mut().for_each(fix);
        iter_t0.iter_mut().for_each(fix);
        iter_t1.iter_mut().for_each(fix);
        init.clock = Some(a);
    }
    // Per recorded put: pop and post of its first stripe, completion of its last.
    let per_put_rec = kept as usize * s.puts as usize;
    let mut pop = vec![u64::MAX; per_put_rec];
    let mut post = vec![u64::MAX; per_put_rec];
    let mut done = vec![0u64; per_put_rec];
    let mut commands = 0u64;
    let mut batches = 0u64;
    let mut fence_drains = 0u64;
    let mut max_in_flight = 0u64;
    for (r, log) in rail_logs.iter().enumerate() {
        commands += log.commands;
        batches += log.batches;
        fence_drains += log.fence_drains;
        max_in_flight = max_in_flight.max(log.max_in_flight);
        let n = per_rail[r].len().max(1);
        for (i, t) in log.times.iter().enumerate() {
            // Iteration among the kept ones.
            let it = (log.keep_from as usize + i) / n - (total_iters - kept) as usize;
            let k = it * s.puts as usize + t.signal as usize;
            if k < per_put_rec {
                pop[k] = pop[k].min(t.pop);
                post[k] = post[k].min(t.post);
                done[k] = done[k].max(t.done);
            }
        }
    }
    let diff = |a: &[u64], b: &[u64]| -> Vec<i64> {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| y as i64 - x as i64)
            .collect()
    };
    let mut stages = Map::new();
    if s.mode != Mode::Cpu {
        stages.insert("push_to_pop".into(), pct(diff(&push_ns, &pop)));
    }
    stages.insert("pop_to_post".into(), pct(diff(&pop, &post)));
    stages.insert("post_to_completion".into(), pct(diff(&post, &done)));
    stages.insert("completion_to_quiet".into(), pct(diff(&done, &quiet_ns)));
    stages.insert("push_to_quiet".into(), pct(diff(&push_ns, &quiet_ns)));
    let mut extra = Map::new();
    extra.insert("stages".into(), Value::Object(stages));
    extra.insert(
        "batch_mean".into(),
        json!(if batches > 0 {
            commands as f64 / batches as f64
        } else {
            0.0
        }),
    );
    extra.insert("commands".into(), json!(commands));
    extra.insert("fence_drains".into(), json!(fence_drains));
    extra.insert("max_in_flight".into(), json!(max_in_flight));
    extra.insert(
        "arrival_clock".into(),
        json!(if setup.one_host {
            "same host"
        } else {
            "target host (not aligned)"
        }),
    );
    if let Some((off, rtt, _)) = init.clock {
        extra.insert("clock_offset_ns".into(), json!(off));
        extra.insert("clock_rtt_ns".into(), json!(rtt));
    }
    extra.insert("post_ns".into(), json!(post));
    extra.insert("quiet_ns".into(), json!(quiet_ns));
    extra.insert("iter_t0_ns".into(), json!(iter_t0));
    extra.insert("iter_t1_ns".into(), json!(iter_t1));
    Ok(Measured {
        samples_ns: samples,
        errors: 0,
        extra,
    })
}

fn measure_target(
    ctx: &Ctx,
    args: &ProxyArgs,
    setup: &mut Setup,
    s: &ProxySpec,
) -> Result<Measured, BenchError> {
    let nrails = setup.target_rails.len();
    let sched = engine::schedule(s.puts, s.size, nrails, args.fabric.strategy, TARGET as u16);
    let stripes: Vec<u32> = sched.iter().map(|p| p.len() as u32).collect();
    let health = health_of(ctx);
    let mut arrive_all = Vec::with_capacity(kept_iters(s) as usize * s.puts as usize);
    let mut landed = Vec::with_capacity(s.iters as usize);
    let mut errors = 0u64;
    for it in 0..s.warmup + s.iters {
        let mut arrive = vec![0u64; s.puts as usize];
        errors += engine::await_puts(
            &setup.target_rails,
            &stripes,
            INITIATOR as u16,
            &mut arrive,
            args.job.timeout().max(Duration::from_secs(1)),
            &health,
        )
        .map_err(BenchError::failed)?;
        // Every CQ data is in; the bytes are in place once this process's GPU copies drained
        // (shm's CUDA IPC path copies on the target with a device-to-device cudaMemcpy that
        // returns, and reports the write, before the copy ran; a no-op for host memory).
        setup.dst.settle()?;
        if it >= s.warmup {
            landed.push(realtime_ns());
        }
        if args.job.verify() {
            errors += check_puts(&**setup.dst, it, s.puts, s.size).map_err(BenchError::failed)?;
        }
        if it >= s.warmup + s.iters - kept_iters(s) {
            arrive_all.extend(arrive);
        }
        ctx.bs.barrier()?;
    }
    let mut extra = Map::new();
    extra.insert("arrive_ns".into(), json!(arrive_all));
    extra.insert("landed_ns".into(), json!(landed));
    Ok(Measured {
        samples_ns: Vec::new(),
        errors,
        extra,
    })
}

/// Runs one rank of `efabench proxy`.
pub fn run_proxy(args: &ProxyArgs, build: &harness::BuildInfo) -> Result<i32, BenchError> {
    let mut b = Proxy::new(args)?;
    harness::run(&mut b, args, build)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_bounded() {
        assert!(puts_arg("0").is_err());
        assert!(puts_arg("5000").is_err());
        assert_eq!(puts_arg("64"), Ok(64));
        assert!(slots_arg("1000").unwrap_err().contains("power of two"));
        assert_eq!(slots_arg("1024"), Ok(1024));
        assert!(batch_arg("0").is_err());
        assert!(footprint_arg("0").is_err());
    }

    #[test]
    fn put_payloads_change_per_iteration_and_put_and_are_checked() {
        let b = efabench_gpu::buffer::HostBuffer::new(3 * 40).unwrap();
        fill_puts(&b, 5, 3, 40).unwrap();
        assert_eq!(check_puts(&b, 5, 3, 40).unwrap(), 0);
        // A stale buffer (the previous iteration's) fails every word.
        assert_eq!(check_puts(&b, 6, 3, 40).unwrap(), 15);
        // Two puts landed at each other's offsets.
        let mut v = vec![0u8; 120];
        b.read_at(0, &mut v).unwrap();
        let (first, second) = (v[..40].to_vec(), v[40..80].to_vec());
        b.write_at(0, &second).unwrap();
        b.write_at(40, &first).unwrap();
        assert_eq!(check_puts(&b, 5, 3, 40).unwrap(), 10);
    }
}
