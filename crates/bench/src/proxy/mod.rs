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
//! interpolated, because `%globaltimer` drifts against the host clock (~8 ppm seen on an H100).
//! Remote arrival is on the target host's clock, so that stage is only meaningful when both ranks
//! share a host (`arrival_clock`).
//!
//! # Files
//! - `mod.rs`: the benchmark on the harness — options checked, rails, buffers and rings set up,
//!   the points, and each rank's part of a point handed to its file; the payload of every put;
//! - `args.rs`: the options and their parsers;
//! - `initiator.rs`: rank 0's part of a point — the proxy threads, the producer (GPU or host)
//!   and the per-put stamps that become the latency breakdown;
//! - `target.rs`: rank 1's part — every put's arrival counted, the bytes settled and verified;
//! - `report.rs`: both ranks' stamps → the record (time to landed, `stages`), and the summary;
//! - `engine.rs`: the proxy thread, the host producer and the target's wait, in safe code over
//!   rails and rings (tests drive it without a GPU).

mod args;
pub mod engine;
mod error;
mod initiator;
mod report;
mod target;

use std::sync::Arc;

use efabench_bootstrap::BootstrapError;
use efabench_fabric::Rail;
use efabench_gpu::proxy::{GpuProducer, RingMemory, MAX_RINGS};
use efabench_gpu::queue::RingKind;
use efabench_gpu::{GpuBuffer, MemKind};

use self::engine::Target;
use crate::error::BenchError;
use crate::harness::{self, Benchmark, Ctx, Measured, Needs, Point, RunDetail, RunFacts, TimedBy};
use crate::mesh::connect_mesh;

pub use args::{Mode, PayloadFence, Producer, ProxyArgs, ProxyThreads};
pub use error::ProxyError;
#[cfg(test)]
pub(crate) use report::pct;
pub use report::{InitiatorStamps, Pct, ProxyDetail, ProxyFacts, Stages, TargetStamps};

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
        let sizes = args.groups.sweep.sizes()?;
        if sizes.iter().any(|&s| s > u32::MAX as u64) {
            return Err(BenchError::usage(
                "efabench proxy: a put carries a 32-bit length; lower -e to 2G or less",
            ));
        }
        if args.groups.fabric.per_rail {
            return Err(BenchError::usage(
                "--per-rail does not apply to proxy: its records break each put down by stage, not by rail; drop --per-rail",
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

/// The seed of put `p` of iteration `iter` (rank 0 to rank 1).
fn put_seed(iter: u64, p: u32) -> u64 {
    crate::pattern::seed(iter, INITIATOR, TARGET, p)
}

/// Writes every put's payload of iteration `iter` into `buf` (put `p` at `p * size`, the
/// pattern of (iteration, 0, 1, p)): the fill kernel on the GPU for device memory, a host copy
/// for host-accessible kinds. Untimed, once per iteration, never per push.
pub fn fill_puts(buf: &dyn GpuBuffer, iter: u64, puts: u32, size: u64) -> Result<(), ProxyError> {
    for p in 0..puts {
        buf.fill_range((p as u64 * size) as usize, size as usize, put_seed(iter, p))
            .map_err(|source| ProxyError::Fill { put: p, source })?;
    }
    Ok(())
}

/// Counts the 8-byte words of every put of iteration `iter` in `buf` that differ from their
/// pattern (on the GPU for device memory). A put that is missing, stale (an earlier
/// iteration's) or landed at another put's offset differs.
pub fn check_puts(buf: &dyn GpuBuffer, iter: u64, puts: u32, size: u64) -> Result<u64, ProxyError> {
    // Device memory: libfabric's own copies into it (shm's CUDA IPC path) run on its stream of
    // this process's context; wait for them before looking.
    buf.settle().map_err(ProxyError::Settle)?;
    let mut bad = 0u64;
    for p in 0..puts {
        bad += buf
            .mismatches_in((p as u64 * size) as usize, size as usize, put_seed(iter, p))
            .map_err(|source| ProxyError::Check { put: p, source })?;
    }
    Ok(bad)
}

impl<'a> Benchmark for Proxy<'a> {
    type Spec = ProxySpec;

    fn name(&self) -> &'static str {
        "proxy"
    }

    fn needs(&self) -> Needs {
        Needs::fabric(2)
    }

    fn timed_by(&self) -> TimedBy {
        TimedBy::DeviceRounds
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let g = &self.args.groups;
        let (fabric, mem) = (&g.fabric, &g.mem);
        let plan = ctx.plan()?;
        if plan.rails.len() > MAX_RINGS {
            return Err(BenchError::usage(format!(
                "efabench proxy drives at most {MAX_RINGS} rails; lower --rails"
            )));
        }
        let len = self.buf_bytes() as usize;
        let (src, dst) = crate::mesh::alloc(mem.mem, len, len, ctx.device)?;
        // Connected like every benchmark's mesh (src is the mesh's send region, dst its receive
        // region); then each proxy thread owns a rail and its completion queue.
        let mesh = connect_mesh(ctx, (src.clone(), dst.clone()), fabric.strategy())?;
        let max_msg = mesh.group().rail(0).info().max_msg_size;
        if let Some(&big) = self.sizes.iter().find(|&&s| s > max_msg) {
            return Err(BenchError::usage(format!(
                "puts of {big} bytes exceed what provider {} writes at once ({max_msg} bytes); lower -e",
                plan.provider
            )));
        }
        let mr = mesh.mr_path_detail();
        let nrails = mesh.rails();
        let mut init = None;
        let mut target_rails = Vec::new();
        if ctx.rank == INITIATOR {
            let lane = mesh.lane(TARGET)?;
            let targets = (0..nrails)
                .map(|r| {
                    lane.rail(r).map(|l| Target {
                        peer: l.addr,
                        dst_rank: TARGET as u16,
                        my_rank: INITIATOR as u16,
                        region: l.send,
                        remote: l.peer_recv,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
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
                rails: mesh.into_rails(),
                targets,
                rings,
                gpu,
                clock,
                next: vec![0; nrails],
            });
        } else {
            // Only rank 0 writes: the target keeps its rails to count the arrivals.
            target_rails = mesh.into_rails();
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
                MemKind::Huge => "FI_HMEM_SYSTEM (host memory on huge pages)",
            }
            .into(),
        };
        let header = vec![format!(
            "# proxy: rank 0 -> rank 1 | producer {} | rails {}{} | strategy {} | proxy threads per {} | ring {} {} slots | batch {} | mem {} ({})",
            facts.producer,
            nrails,
            if plan.virtual_rails { " virtual" } else { "" },
            fabric.strategy().name(),
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
            detail: RunDetail {
                virtual_rails: Some(plan.virtual_rails),
                strategy: Some(fabric.strategy().name()),
                mr: Some(mr.to_string()),
                ..RunDetail::default()
            },
        }
        .detail(facts))
    }

    fn points(&self, _ctx: &Ctx) -> Result<Vec<ProxySpec>, BenchError> {
        let mut out = Vec::new();
        for &mode in &self.args.modes {
            for &size in &self.sizes {
                let puts = self.puts_at(size);
                let (iters, warmup) = self.args.groups.sweep.iterations(size, puts as u64);
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
            INITIATOR => initiator::measure(ctx, args, setup, spec),
            TARGET => target::measure(ctx, args, setup, spec),
            _ => {
                // Idle ranks take part in the per-iteration barriers.
                let lp = harness::Loop {
                    warmup: spec.warmup,
                    iters: spec.iters,
                    timed: false,
                    clock: harness::Clock::Iteration,
                };
                ctx.run_device_rounds(lp, &mut target::Idle(ctx.bs))
            }
        }
    }

    fn point(&self, ctx: &Ctx, s: &ProxySpec, all: &[Measured]) -> Point {
        report::point(ctx, s, all)
    }

    fn summary(&self, records: &[efabench_record::Record]) -> Vec<String> {
        report::summary(&self.sizes, records)
    }
}

/// Splits a setup blob into (group address, region descriptor).
fn health_of(ctx: &Ctx) -> impl Fn() -> Result<(), BootstrapError> + Send + Sync + Clone {
    let h = ctx.bs.health();
    move || h.check()
}

/// Runs one rank of `efabench proxy`.
pub fn run_proxy(
    args: &ProxyArgs,
    build: &harness::BuildInfo,
) -> Result<crate::Verdict, BenchError> {
    let mut b = Proxy::new(args)?;
    harness::run(&mut b, args, build)
}

#[cfg(test)]
mod tests {
    use super::*;

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
