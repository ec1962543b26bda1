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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use efabench_gpu::queue::{
    measure, numa_cpus, unavailable, LatencyNs, Mode, ProducerShape, QueueConfig, RingKind,
    TailPoll,
};
use efabench_gpu::Gpu;
use efabench_record::{LatencySummary, Record};
use serde_json::{json, Map, Value};

use crate::error::BenchError;
use crate::harness::Benchmark;
use crate::harness::{
    bounded, BuildInfo, CommonArgs, Ctx, Measured, Needs, Point, Rails, RunFacts,
};
use efabench_gpu::MemKind;

/// Bytes of one command (two 64-bit words).
pub const COMMAND_BYTES: u64 = 16;

/// Options of `efabench queue`.
#[derive(clap::Args, Debug, Clone)]
pub struct QueueArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Rings, comma-separated: pinned, managed, gdr, hybrid, libefaxx.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pinned,managed,gdr,hybrid,libefaxx"
    )]
    pub ring: Vec<String>,
    /// Producer shapes, BLOCKSxTHREADS comma-separated; SM = the GPU's SM count.
    #[arg(long, default_value = ProducerShape::DEFAULT_LIST)]
    pub producers: String,
    /// Consumer threads, comma-separated, each 1 to 8.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub consumers: Vec<String>,
    /// Modes, comma-separated: nbi, blocking.
    #[arg(long, value_delimiter = ',', default_value = "nbi,blocking")]
    pub mode: Vec<String>,
    /// Commands per nbi point (blocking points take a 32nd, at least one per producer).
    #[arg(long, default_value = "4194304", value_parser = commands_arg, allow_hyphen_values = true)]
    pub commands: u64,
    /// nbi commands per lane per claim (0: enough for 512 commands per warp claim).
    #[arg(long, default_value = "0", value_parser = batch_arg, allow_hyphen_values = true)]
    pub batch: u64,
    /// Publish without the system-scope fence a real proxy needs before each batch.
    #[arg(long)]
    pub no_release: bool,
    /// Seconds a point may push before its producers are told to stop (slow rings then report
    /// what they did in that time, marked `truncated`).
    #[arg(long, default_value = "1.5", value_parser = budget_arg, allow_hyphen_values = true)]
    pub budget: f64,
    /// How producers wait for the consumers' tails: cached (a device-memory copy that one warp
    /// at a time refreshes) or direct (read them where they live).
    #[arg(long, default_value = "cached")]
    pub tail_poll: String,
    /// With direct polling: nanoseconds a producer sleeps between two reads of a tail.
    #[arg(long, default_value = "0", value_parser = sleep_arg, allow_hyphen_values = true)]
    pub poll_sleep_ns: u64,
}

fn sleep_arg(s: &str) -> Result<u64, String> {
    bounded(s, "--poll-sleep-ns", 0, 1_000_000, "200")
}

fn commands_arg(s: &str) -> Result<u64, String> {
    bounded(s, "--commands", 1, 1 << 26, "4194304")
}

fn batch_arg(s: &str) -> Result<u64, String> {
    bounded(s, "--batch", 0, 4096, "16")
}

fn budget_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t > 0.0 && t <= 600.0 => Ok(t),
        _ => Err(format!(
            "--budget '{}' is not a number of seconds above 0 and at most 600; pass e.g. --budget 1.5",
            crate::size::clip(s)
        )),
    }
}

/// One point.
#[derive(Clone, Debug)]
pub struct QueueSpec {
    ring: RingKind,
    shape: ProducerShape,
    consumers: u32,
    mode: Mode,
}

impl QueueSpec {
    fn variant(&self) -> String {
        format!(
            "{}/{}/{}/c{}",
            self.ring, self.mode, self.shape, self.consumers
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
}

fn list<T>(
    what: &str,
    v: &[String],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, BenchError> {
    let out: Result<Vec<T>, String> = v
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| parse(s))
        .collect();
    let out = out.map_err(BenchError::usage)?;
    if out.is_empty() {
        return Err(BenchError::usage(format!(
            "{what} is empty: give at least one value"
        )));
    }
    Ok(out)
}

impl Queue {
    /// Checks every option before anything touches the GPU.
    pub fn new(args: &QueueArgs) -> Result<Queue, BenchError> {
        let rings = list("--ring", &args.ring, |s| s.parse::<RingKind>())?;
        let shapes = ProducerShape::parse_list(&args.producers).map_err(BenchError::usage)?;
        let consumers = list("--consumers", &args.consumers, |s| {
            bounded(
                s,
                "--consumers",
                1,
                efabench_gpu::queue::MAX_CONSUMERS as u64,
                "1,4",
            )
            .map(|n| n as u32)
        })?;
        let modes = list("--mode", &args.mode, |s| s.parse::<Mode>())?;
        let tail_poll = args
            .tail_poll
            .parse::<TailPoll>()
            .map_err(BenchError::usage)?;
        refuse_unused(&args.common)?;
        Ok(Queue {
            tail_poll,
            rings,
            shapes,
            consumers,
            modes,
            args: args.clone(),
            gpu: None,
            cpus: Vec::new(),
            skipped: Vec::new(),
            salt: 0,
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
        cfg.release = !self.args.no_release;
        cfg.budget = Duration::from_secs_f64(self.args.budget);
        cfg.hang = self.args.common.timeout();
        cfg.salt = self.salt;
        cfg.tail_poll = self.tail_poll;
        cfg.poll_sleep_ns = self.args.poll_sleep_ns as u32;
        cfg.cpus = self.cpus.clone();
        cfg
    }
}

/// The shared options that mean nothing for a command ring are refused, not ignored.
fn refuse_unused(c: &CommonArgs) -> Result<(), BenchError> {
    let mut bad = Vec::new();
    if c.iters.is_some() || c.warmup.is_some() {
        bad.push("-n/-w (use --commands)");
    }
    if c.min_bytes != 8 || c.max_bytes != 1 << 20 {
        bad.push("-b/-e (commands are 16 bytes)");
    }
    if c.provider.is_some() || c.domain.is_some() || c.per_rail || c.rails != Rails::Count(1) {
        bad.push("-p/--domain/--rails/--per-rail (no network is used)");
    }
    if c.mem != MemKind::Host {
        bad.push("--mem (each ring places its own memory; use --ring)");
    }
    if c.no_check {
        bad.push("--no-check (every command is always verified)");
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(BenchError::usage(format!(
            "queue does not take {}: drop them",
            bad.join(", ")
        )))
    }
}

impl Benchmark for Queue {
    type Spec = QueueSpec;

    fn name(&self) -> &'static str {
        "queue"
    }

    fn needs(&self) -> Needs {
        Needs {
            fabric: false,
            min_world: 1,
            how_to_launch: "queue runs in one process: `efabench queue`",
        }
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let ordinal = efabench_gpu::resolve(self.args.common.gpu, ctx.local_rank)?;
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
        let mut header = vec![format!(
            "# queue on GPU {} ({}, {} SMs, bus {}); consumers pinned to CPUs {}",
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
        let mut extra = Map::new();
        extra.insert("gpu".into(), json!(gpu.name));
        extra.insert("gpu_bus_id".into(), json!(gpu.pci_bus_id));
        extra.insert("sm_count".into(), json!(gpu.sm_count));
        extra.insert("release".into(), json!(!self.args.no_release));
        extra.insert(
            "skipped_rings".into(),
            json!(self.skipped.iter().map(|r| r.name()).collect::<Vec<_>>()),
        );
        Ok(RunFacts {
            provider: "none".into(),
            fabric: "none".into(),
            mem: "queue".into(),
            header,
            extra,
            ..RunFacts::default()
        })
    }

    fn points(&self, _ctx: &Ctx) -> Result<Vec<QueueSpec>, BenchError> {
        let mut v = Vec::new();
        for &ring in self.rings.iter().filter(|r| !self.skipped.contains(r)) {
            for &mode in &self.modes {
                for &shape in &self.shapes {
                    for &consumers in &self.consumers {
                        v.push(QueueSpec {
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

    fn measure(&mut self, _ctx: &Ctx, spec: &QueueSpec) -> Result<Measured, BenchError> {
        let gpu = self
            .gpu
            .clone()
            .ok_or_else(|| BenchError::failed("queue: setup did not run"))?;
        self.salt += 1;
        let cfg = self.config(spec);
        let m = measure(&gpu, &cfg)?;
        let shape = spec.shape.resolve(gpu.sm_count);
        let mut extra = Map::new();
        extra.insert("ring".into(), json!(spec.ring.name()));
        extra.insert("producers".into(), json!(spec.shape.to_string()));
        extra.insert("producer_grid".into(), json!(shape.grid));
        extra.insert("producer_block".into(), json!(shape.block));
        extra.insert("producer_threads".into(), json!(m.producers));
        extra.insert("consumers".into(), json!(spec.consumers));
        extra.insert("mode".into(), json!(spec.mode.name()));
        extra.insert("commands".into(), json!(m.received));
        extra.insert("pushed".into(), json!(m.pushed));
        extra.insert("per_producer".into(), json!(m.per_producer));
        extra.insert("truncated".into(), json!(m.truncated));
        extra.insert("elapsed_ns".into(), json!(m.elapsed_ns));
        extra.insert("msg_rate_mops".into(), json!(m.msg_rate_mops));
        extra.insert("lat_kind".into(), json!(m.lat_kind));
        extra.insert("lat_samples".into(), json!(m.latency.samples));
        extra.insert("lat_ns".into(), lat_ns_json(&m.latency));
        extra.insert("lost".into(), json!(m.errors.lost));
        extra.insert("duplicated".into(), json!(m.errors.duplicated));
        extra.insert("torn".into(), json!(m.errors.torn));
        extra.insert(
            "out_of_range".into(),
            json!(m.errors.out_of_range + m.errors.phantom),
        );
        extra.insert("per_consumer".into(), json!(m.per_consumer));
        extra.insert("batch".into(), json!(m.batch));
        extra.insert("tail_poll".into(), json!(m.tail_poll));
        extra.insert("timer_step_ns".into(), json!(m.timer_step_ns));
        Ok(Measured {
            samples_ns: Vec::new(),
            errors: m.errors.total(),
            extra,
        })
    }

    fn point(&self, _ctx: &Ctx, spec: &QueueSpec, all: &[Measured]) -> Point {
        let m = all.first().cloned().unwrap_or_default();
        let f = |k: &str| m.extra.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let lat_us = lat_us_of(m.extra.get("lat_ns").unwrap_or(&Value::Null));
        let mops = f("msg_rate_mops");
        let mut extra = m.extra.clone();
        extra.remove("msg_rate_mops");
        extra.remove("lat_ns");
        Point {
            variant: spec.variant(),
            size_bytes: COMMAND_BYTES,
            iters: f("commands") as u64,
            warmup: 0,
            lat_us,
            bw_gbps: mops * 1e6 * COMMAND_BYTES as f64 * 8.0 / 1e9,
            msg_rate_mops: mops,
            extra,
            ..Point::default()
        }
    }

    fn summary(&self, records: &[Record]) -> Vec<String> {
        summarize(records)
    }
}

/// The GPU-clock distribution as the `lat_ns` object a measurement carries to its point.
pub(crate) fn lat_ns_json(l: &LatencyNs) -> Value {
    json!({"min": l.min, "p50": l.p50, "p99": l.p99, "max": l.max, "mean": l.mean})
}

/// `lat_ns` (as written by [`lat_ns_json`]) in microseconds, the record's `lat_us`.
pub(crate) fn lat_us_of(lat_ns: &Value) -> LatencySummary {
    let l = |k: &str| lat_ns.get(k).and_then(Value::as_f64).unwrap_or(0.0) / 1e3;
    LatencySummary {
        min: l("min"),
        p50: l("p50"),
        p99: l("p99"),
        max: l("max"),
        mean: l("mean"),
    }
}

fn field<'a>(r: &'a Record, k: &str) -> Option<&'a Value> {
    r.extra.get(k)
}

fn s(r: &Record, k: &str) -> String {
    field(r, k)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// What the run shows, from its records: the best rate per shape and mode, the slowest shape's
/// best nbi rate, the smallest ratio to the Libefaxx ring, and the one-thread round trip.
pub fn summarize(records: &[Record]) -> Vec<String> {
    let mut out = Vec::new();
    // Best nbi rate per shape (any ring but libefaxx, any consumer count) and libefaxx's.
    let mut best: BTreeMap<(String, String), (f64, String)> = BTreeMap::new();
    let mut lib: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in records
        .iter()
        .filter(|r| r.bench == "queue" && r.errors == 0)
    {
        let (ring, mode, shape) = (s(r, "ring"), s(r, "mode"), s(r, "producers"));
        if !order.contains(&shape) {
            order.push(shape.clone());
        }
        let key = (mode.clone(), shape.clone());
        if ring == "libefaxx" {
            let e = lib.entry(key).or_insert(0.0);
            *e = e.max(r.msg_rate_mops);
        } else {
            let e = best.entry(key).or_insert((0.0, String::new()));
            if r.msg_rate_mops > e.0 {
                *e = (
                    r.msg_rate_mops,
                    format!(
                        "{ring} c{}",
                        field(r, "consumers").and_then(Value::as_u64).unwrap_or(0)
                    ),
                );
            }
        }
    }
    for mode in ["nbi", "blocking"] {
        let mut parts = Vec::new();
        for shape in &order {
            let key = (mode.to_string(), shape.clone());
            if let Some((b, who)) = best.get(&key) {
                let ratio = lib
                    .get(&key)
                    .filter(|l| **l > 0.0)
                    .map(|l| format!(", {:.0}x libefaxx", b / l))
                    .unwrap_or_default();
                parts.push(format!("{shape} {b:.1} ({who}{ratio})"));
            }
        }
        if !parts.is_empty() {
            out.push(format!("# best {mode} M ops/s: {}", parts.join("; ")));
        }
    }
    // The slowest shape's best nbi rate: the floor a kernel of any shape can count on.
    let floor = order
        .iter()
        .filter_map(|sh| Some((sh, best.get(&("nbi".to_string(), sh.clone()))?)))
        .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
    if let Some((sh, (b, who))) = floor {
        out.push(format!(
            "# lowest best nbi rate over the shapes: {b:.1} M ops/s at {sh} ({who})"
        ));
    }
    let ratio = order
        .iter()
        .flat_map(|sh| ["nbi", "blocking"].map(|m| (m, sh)))
        .filter_map(|(m, sh)| {
            let k = (m.to_string(), sh.clone());
            match (best.get(&k), lib.get(&k)) {
                (Some(b), Some(l)) if *l > 0.0 => Some((b.0 / l, format!("{m} {sh}"))),
                _ => None,
            }
        })
        .min_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((r, at)) = ratio {
        out.push(format!(
            "# smallest ratio of the best ring to libefaxx: {r:.0}x at {at}"
        ));
    }
    // The one-thread round trip of the ring with the lowest p99 (the tail is the harder half).
    let one = records
        .iter()
        .filter(|r| {
            r.bench == "queue"
                && s(r, "mode") == "blocking"
                && s(r, "producers") == "1x1"
                && s(r, "ring") != "libefaxx"
                && r.errors == 0
        })
        .min_by(|a, b| a.lat_us.p99.total_cmp(&b.lat_us.p99));
    if let Some(r) = one {
        out.push(format!(
            "# blocking 1x1 round trip (ring with the lowest p99): p50 {:.2} us, p99 {:.2} us on {} c{}",
            r.lat_us.p50,
            r.lat_us.p99,
            s(r, "ring"),
            field(r, "consumers").and_then(Value::as_u64).unwrap_or(0)
        ));
    }
    out
}

/// `efabench queue`.
pub fn run_queue(args: &QueueArgs, build: &BuildInfo) -> Result<i32, BenchError> {
    let mut b = Queue::new(args)?;
    crate::harness::run(&mut b, &args.common, build)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ring: &str, mode: &str, shape: &str, c: u64, mops: f64, p50: f64, p99: f64) -> Record {
        let line = json!({
            "schema": "efabench/1", "bench": "queue", "variant": format!("{ring}/{mode}/{shape}/c{c}"),
            "size_bytes": 16, "iters": 1, "warmup": 0, "world": 1, "peer": null, "provider": "none",
            "fabric": "none", "domains": [], "libfabric": null, "rails": 0, "mem": "queue",
            "lat_us": {"min": p50, "p50": p50, "p99": p99, "max": p99, "mean": p50},
            "bw_gbps": 0.0, "busbw_gbps": null, "msg_rate_mops": mops, "link_gbps": null,
            "util_pct": null, "errors": 0, "verified": true, "counters": null, "host": "h",
            "timestamp": "2026-11-23T00:00:00Z", "version": "0", "git": null,
            "ring": ring, "mode": mode, "producers": shape, "consumers": c
        });
        serde_json::from_value(line).expect("record")
    }

    #[test]
    fn the_summary_states_the_floor_the_ratio_and_the_round_trip() {
        let rs = vec![
            rec("pinned", "nbi", "1x1", 1, 7.5, 60.0, 61.0),
            rec("pinned", "nbi", "1x32", 4, 150.0, 3.0, 8.0),
            rec("libefaxx", "nbi", "1x1", 1, 0.084, 5.0, 500.0),
            rec("libefaxx", "nbi", "1x32", 1, 0.018, 28.0, 700.0),
            rec("pinned", "blocking", "1x1", 1, 0.3, 3.1, 3.2),
            rec("managed", "blocking", "1x1", 1, 0.03, 3.0, 775.0),
        ];
        let out = summarize(&rs).join("\n");
        assert!(
            out.contains("# lowest best nbi rate over the shapes: 7.5 M ops/s at 1x1 (pinned c1)"),
            "{out}"
        );
        assert!(
            out.contains("# smallest ratio of the best ring to libefaxx: 89x at nbi 1x1"),
            "{out}"
        );
        assert!(
            out.contains(
                "round trip (ring with the lowest p99): p50 3.10 us, p99 3.20 us on pinned c1"
            ),
            "{out}"
        );
        assert!(!out.contains("target") && !out.contains("met"), "{out}");
        let out = summarize(&rs[1..2]).join("\n");
        assert!(out.contains("at 1x32 (pinned c4)"), "{out}");
        assert!(!out.contains("libefaxx:"), "{out}");
    }
}
