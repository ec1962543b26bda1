//! `efabench queue`: the GPU->CPU command queue of a GPU-initiated proxy, measured.
//!
//! GPU-initiated networking over EFA (DeepEP-style MoE, NVSHMEM's proxy, UCCL, MSCCL++) hands
//! each network operation from GPU threads to a CPU proxy through a ring of commands, so the
//! ring's rate and round trip bound what such a kernel can issue. This benchmark drives the rings
//! of `efabench_gpu::queue` (`pinned`, `managed`, `gdr`, `hybrid` and Libefaxx's Vyukov ring for
//! a ratio in the same run) with producers from one GPU thread to the whole GPU and 1..8 CPU
//! consumers pinned to the GPU's NUMA node, in `nbi` (push many, one quiet) and `blocking`
//! (quiet after each push) modes. Every command is verified (producer, sequence, pattern): the
//! record's `errors` counts commands lost, duplicated, torn or out of range.
//!
//! One record per (ring, producers, consumers, mode): `msg_rate_mops` (commands received per
//! second over the GPU-clock span of the run), `lat_us` (GPU `%globaltimer`: blocking = round trip
//! per command, nbi = time a push held its warp), `bw_gbps` = commands x 16 bytes. The summary
//! states the best rate per shape, the lowest of those over the shapes (nbi), the smallest ratio
//! of the best ring to the Libefaxx ring, and the one-thread blocking round trip.

//!
//! Files: [`args`] the options and their checks, [`shape`] producer shapes, [`measure`](mod@measure) one
//! point on the GPU (consumer threads, kernel launch, verification), [`record`] the typed record
//! fields and the summary; this file is the sweep on the shared harness.

pub mod args;
pub mod measure;
pub mod record;
pub mod shape;

use std::sync::Arc;
use std::time::Duration;

use efabench_gpu::queue::{Floor, Mode, Release, RingKind, TailPoll};
use efabench_gpu::Gpu;
use efabench_record::Record;

use crate::error::BenchError;
use crate::harness::{Benchmark, BuildInfo, Ctx, Measured, Needs, Point, RunFacts, TimedBy};
pub use args::QueueArgs;
use measure::{measure, measure_floor, numa_cpus, unavailable, QueueConfig, QueueMeasurement};
pub use record::summarize;
use record::{lat_us, QueueDetail, QueueFacts};
pub use shape::ProducerShape;

/// Bytes of one command (two 64-bit words).
pub const COMMAND_BYTES: u64 = 16;
/// The `ring` of the bare round-trip probe's records.
pub const FLOOR: &str = "floor";
/// The `ring` of the probe that adds a push's claim and ordering.
pub const FLOOR_CLAIM: &str = "floor+claim";

/// One point.
#[derive(Clone, Debug)]
pub struct QueueSpec {
    /// A round-trip probe this machine's blocking rings are measured against, not a ring
    /// (`measure::measure_floor`; its records say `ring: floor` or `ring: floor+claim`).
    floor: Option<Floor>,
    ring: RingKind,
    shape: ProducerShape,
    consumers: u32,
    mode: Mode,
}

impl QueueSpec {
    fn ring_name(&self) -> &'static str {
        match self.floor {
            Some(f) => f.name(),
            None => self.ring.name(),
        }
    }

    fn variant(&self) -> String {
        format!(
            "{}/{}/{}/c{}",
            self.ring_name(),
            self.mode,
            self.shape,
            self.consumers
        )
    }
}

/// The benchmark: its parsed options and, after setup, the GPU and the consumers' CPUs.
pub struct Queue {
    rings: Vec<RingKind>,
    shapes: Vec<ProducerShape>,
    consumers: Vec<u32>,
    modes: Vec<Mode>,
    tail_poll: TailPoll,
    args: QueueArgs,
    gpu: Option<Arc<Gpu>>,
    cpus: Vec<usize>,
    skipped: Vec<RingKind>,
    salt: u64,
    /// The last point's measurement, for its record.
    last: Option<QueueMeasurement>,
}

impl Queue {
    /// Checks every option before anything touches the GPU.
    pub fn new(args: &QueueArgs) -> Result<Queue, BenchError> {
        if args.job.no_check {
            return Err(BenchError::usage(
                "queue verifies every command (it is what the ring is measured for): drop --no-check",
            ));
        }
        if args.tail_poll == TailPoll::Cached && args.poll_sleep_ns > 0 {
            return Err(BenchError::usage(format!(
                "--poll-sleep-ns {} applies to --tail-poll direct only (cached producers do not sleep between reads); add --tail-poll direct or drop --poll-sleep-ns",
                args.poll_sleep_ns
            )));
        }
        if args.batch > 0 && !args.mode.contains(&Mode::Nbi) {
            return Err(BenchError::usage(format!(
                "--batch {} applies to nbi points only (a blocking point pushes one command per claim); add nbi to --mode or drop --batch",
                args.batch
            )));
        }
        if args.no_floor && !args.mode.contains(&Mode::Blocking) {
            return Err(BenchError::usage(
                "--no-floor skips the round trip that blocking points are compared with, and --mode has no blocking point; drop --no-floor",
            ));
        }
        let shapes = ProducerShape::parse_list(&args.producers).map_err(BenchError::usage)?;
        Ok(Queue {
            tail_poll: args.tail_poll,
            rings: args.ring.clone(),
            shapes,
            consumers: args.consumers.clone(),
            modes: args.mode.clone(),
            args: args.clone(),
            gpu: None,
            cpus: Vec::new(),
            skipped: Vec::new(),
            salt: 0,
            last: None,
        })
    }

    fn config(&self, spec: &QueueSpec) -> QueueConfig {
        let mut cfg = QueueConfig::new(spec.ring, spec.shape, spec.consumers, spec.mode);
        cfg.commands = match spec.mode {
            Mode::Nbi => self.args.commands,
            Mode::Blocking => (self.args.commands / 32).max(1),
        };
        if matches!(spec.ring, RingKind::Libefaxx | RingKind::Managed) {
            // Page migration makes these rings 100-10000x slower: fewer commands, same budget.
            cfg.commands = cfg.commands.min(1 << 16);
        }
        cfg.batch = self.args.batch as u32;
        cfg.release = self.args.ordering();
        cfg.budget = Duration::from_secs_f64(self.args.budget);
        cfg.hang = self.args.job.timeout();
        cfg.salt = self.salt;
        cfg.tail_poll = self.tail_poll;
        cfg.poll_sleep_ns = self.args.poll_sleep_ns as u32;
        cfg.cpus = self.cpus.clone();
        cfg
    }
}

impl Benchmark for Queue {
    type Spec = QueueSpec;

    fn name(&self) -> &'static str {
        "queue"
    }

    fn needs(&self) -> Needs {
        Needs::LOCAL
    }

    fn timed_by(&self) -> TimedBy {
        TimedBy::Launch
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let ordinal = efabench_gpu::resolve(self.args.gpu, ctx.local_rank)?;
        let gpu = Gpu::open(ordinal)?;
        // Consumers on the GPU's NUMA node; the first CPU of the node last (it often takes
        // interrupts and this process's main thread).
        let node = numa_cpus(&gpu);
        self.cpus = node
            .iter()
            .copied()
            .skip(1)
            .chain(node.iter().copied().take(1))
            .collect();
        let ordering = match self.args.ordering() {
            Release::Fence => "commands ordered by a system-scope fence per batch",
            Release::Store => "commands ordered by a release store (a fence per batch of several)",
            Release::None => "commands not ordered after their payload (--release none)",
        };
        let mut header = vec![format!(
            "# queue on GPU {} ({}, {} SMs, bus {}); consumers pinned to CPUs {}; {ordering}",
            gpu.ordinal,
            gpu.name,
            gpu.sm_count,
            gpu.pci_bus_id,
            if self.cpus.is_empty() {
                "(unpinned)".to_string()
            } else {
                format!("{:?}", self.cpus)
            }
        )];
        for &r in &self.rings {
            if let Some(why) = unavailable(&gpu, r) {
                eprintln!("efabench: {why}");
                header.push(format!("# {why}"));
                self.skipped.push(r);
            }
        }
        if self.skipped.len() == self.rings.len() {
            return Err(BenchError::usage(format!(
                "no ring can run on this machine ({}): choose another --ring",
                self.skipped
                    .iter()
                    .map(|r| r.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        self.gpu = Some(gpu.clone());
        let facts = QueueFacts {
            gpu: gpu.name.clone(),
            gpu_bus_id: gpu.pci_bus_id.clone(),
            sm_count: gpu.sm_count,
            release: self.args.ordering().orders(),
            ordering: self.args.ordering(),
            skipped_rings: self.skipped.iter().map(|r| r.name().into()).collect(),
        };
        Ok(RunFacts {
            provider: "none".into(),
            fabric: "none".into(),
            mem: "queue".into(),
            header,
            ..RunFacts::default()
        }
        .detail(facts))
    }

    fn points(&self, _ctx: &Ctx) -> Result<Vec<QueueSpec>, BenchError> {
        let mut v = Vec::new();
        // Blocking points are judged against the round-trip probes, measured first: the bare
        // one, then with a push's claim and this run's ordering.
        if self.modes.contains(&Mode::Blocking) && !self.args.no_floor {
            for probe in [Floor::Bare, Floor::Claimed(self.args.ordering())] {
                v.push(QueueSpec {
                    floor: Some(probe),
                    ring: RingKind::Pinned,
                    shape: ProducerShape::one(),
                    consumers: 1,
                    mode: Mode::Blocking,
                });
            }
        }
        for &ring in self.rings.iter().filter(|r| !self.skipped.contains(r)) {
            for &mode in &self.modes {
                for &shape in &self.shapes {
                    for &consumers in &self.consumers {
                        v.push(QueueSpec {
                            floor: None,
                            ring,
                            shape,
                            consumers,
                            mode,
                        });
                    }
                }
            }
        }
        Ok(v)
    }

    fn label(&self, spec: &QueueSpec) -> String {
        spec.variant()
    }

    fn measure(&mut self, ctx: &Ctx, spec: &QueueSpec) -> Result<Measured, BenchError> {
        let gpu = self
            .gpu
            .clone()
            .ok_or_else(|| BenchError::failed("queue: setup did not run"))?;
        self.salt += 1;
        let cfg = self.config(spec);
        let m = ctx.run_launch(|| match spec.floor {
            Some(probe) => measure_floor(&gpu, &cfg, probe),
            None => measure(&gpu, &cfg),
        })?;
        let errors = m.errors.total();
        self.last = Some(m);
        Ok(Measured {
            samples_ns: Vec::new(),
            errors,
            detail: Default::default(),
        })
    }

    fn point(&self, _ctx: &Ctx, spec: &QueueSpec, _all: &[Measured]) -> Point {
        let Some(m) = &self.last else {
            return Point::default();
        };
        let sm = self.gpu.as_ref().map_or(0, |g| g.sm_count);
        let detail = QueueDetail::new(
            spec.ring_name(),
            spec.shape.to_string(),
            spec.shape.resolve(sm),
            spec.consumers,
            spec.mode.name(),
            m,
        );
        let mops = m.msg_rate_mops;
        Point {
            variant: spec.variant(),
            size_bytes: COMMAND_BYTES,
            iters: m.received,
            warmup: 0,
            lat_us: lat_us(&m.latency),
            bw_gbps: mops * 1e6 * COMMAND_BYTES as f64 * 8.0 / 1e9,
            msg_rate_mops: mops,
            ..Point::default()
        }
        .detail(detail)
    }

    fn summary(&self, records: &[Record]) -> Vec<String> {
        summarize(records)
    }
}

/// `efabench queue`.
pub fn run_queue(args: &QueueArgs, build: &BuildInfo) -> Result<crate::Verdict, BenchError> {
    let mut b = Queue::new(args)?;
    crate::harness::run(&mut b, args, build)
}
