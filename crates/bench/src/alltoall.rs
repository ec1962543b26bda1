//! `efabench alltoall`: every rank sends one chunk to every rank, with nccl-tests' semantics.
//!
//! * `-b/-e` is one rank's whole send buffer: `n` chunks, its own included; chunk = size / n
//!   rounded down to 16 bytes (sizes whose chunk would be 0 are skipped with a note). The record's
//!   `size_bytes` is `chunk × n`, the bytes one rank actually sends (own chunk included).
//! * `bw_gbps` = algbw = size / time and `busbw_gbps` = algbw × (n−1)/n, where time is the
//!   *slowest* rank's mean time per iteration; `rank_lat_us` keeps every rank's p50/mean/max and
//!   the record names the slowest rank and its host. Libefaxx printed per-peer bandwidth under a
//!   "BusBW" label: its numbers × n are algbw, × (n−1) busbw.
//! * One send buffer (the largest size) and one receive buffer (twice the largest size: two
//!   halves) per rank, registered once per run on every rail.
//! * `lat_us` is the slowest rank's time per iteration (each sample: from the end of one timed
//!   iteration to the end of the next on that rank); `matrix_gbps[src][dst]` is the chunk over
//!   its mean arrival time at `dst` after `dst` started the iteration (`--matrix` prints it).
//!
//! # Timing and verification
//! Per point: a bootstrap barrier, then the warm-up iterations, **each verified**: the sender
//! fills every chunk (stripe by stripe) with the pattern of `(iteration, source, destination,
//! stripe)`, and the receiver checks every chunk it got once the iteration completed. Then the
//! timed iterations run **back to back**, as nccl-tests and `MPI_Alltoall` loops do: no barrier
//! and no fill or check between them; an iteration ends on a rank when every stripe of every
//! peer's chunk for *that* iteration has arrived (counted by the remote CQ data each stripe
//! carries: kind, iteration, source) and its own writes completed. Then one more verified
//! iteration checks that the buffers still carry correct data after the timed loop. As in
//! nccl-tests, the payload of each *timed* iteration is not checked (that would put a fill and a
//! check of the whole buffer inside the loop); its arrival is, stripe by stripe.
//!
//! Back to back is safe: a rank finishes iteration i only after every peer's chunk of i arrived,
//! which each peer posts only after finishing i−1 (including its checks), so a peer is never more
//! than one iteration ahead. Checked warm-up iterations alternate receive halves, so the half a
//! peer one iteration ahead writes was already checked; the timed iterations all land in half 0
//! (MPI's footprint); the final check uses half 1, where no late write of the timed loop lands.
//!
//! # Time budget
//! Each size stops after `-n` timed iterations or `--max-time` seconds, whichever comes first
//! (warm-up: `-w` or a tenth of it), so a node 100 times slower than the others yields its
//! numbers within the budget instead of failing the job. Ranks agree on where to stop without a
//! round trip: a rank whose clock ran out marks the chunks of its next iteration (CQ data kind
//! `Stop` in place of `Payload`), and since every rank receives a chunk from every rank in every
//! iteration, all of them see the mark at the end of the same iteration and leave the loop
//! there. The record gives the iterations actually run and `stopped_by` (count or time).
//!
//! # Transfers
//! `--op write` (default): RDMA write with remote CQ data into the peer's receive buffer at the
//! chunk's place. `--op sendrecv`: send with CQ data into receives posted in advance (two
//! iterations' worth); receives match in arrival order (this fabric layer has no directed
//! receives), so a chunk lands in one of the receive slots of its rail and the CQ data names its
//! source, which the check uses. `--rails`/`--strategy` route every chunk (see [`crate::mesh`]);
//! `--mem` picks the memory.
//!
//! # Libefaxx's five columns
//! All with `-b 4M -e 128M`, one rank per node. Libefaxx printed per-peer bandwidth (chunk /
//! time): multiply by n − 1 to compare with efabench's `busbw_gbps`, by n for `bw_gbps`.
//! * SingleDMA: `alltoall --mem cuda --rails 1`
//! * MultiDMA: `alltoall --mem cuda --rails all --strategy split`
//! * RoundRobinDMA: `alltoall --mem cuda --rails all --strategy round-robin`
//! * SinglePin: `alltoall --mem pinned --rails 1`
//! * MultiPin: `alltoall --mem pinned --rails all --strategy split`

use std::time::{Duration, Instant};

use efabench_fabric::{MrPath, RailConfig};
use efabench_record::Record;
use serde_json::{json, Map, Value};

use crate::error::BenchError;
use crate::harness::{
    self, Benchmark, CommonArgs, Ctx, Measured, MrChoice, Needs, Point, RunFacts,
};
use crate::mesh::{self, cq_data, parse_cq_data, Kind, Mesh, ITER_MOD};
use crate::pattern;
use crate::stats::Samples;

/// The transfer an all-to-all uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    /// RDMA write with remote CQ data.
    Write,
    /// Two-sided send/recv with CQ data.
    Sendrecv,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Sendrecv => "sendrecv",
        }
    }
}

/// Options of `alltoall`.
#[derive(clap::Args, Debug, Clone)]
pub struct AlltoallArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Transfer: write (RDMA write with remote CQ data) or sendrecv.
    #[arg(long, value_enum, default_value_t = Op::Write)]
    pub op: Op,
    /// Print the per-peer bandwidth matrix (Gbps, source row → destination column) of each size.
    #[arg(long)]
    pub matrix: bool,
    /// Longest timed part of one size, in seconds: it stops after -n iterations or this,
    /// whichever comes first, on every rank at the same iteration (warm-up: a tenth of it).
    #[arg(long, default_value = "1", value_parser = crate::pairs::max_time_arg, allow_hyphen_values = true)]
    pub max_time: f64,
}

/// Chunk alignment (nccl-tests rounds counts to whole elements; 16 bytes keeps chunks aligned).
pub const CHUNK_ALIGN: u64 = 16;

/// One point: a size.
#[derive(Clone, Debug)]
pub struct AlltoallSpec {
    chunk: usize,
    iters: u64,
    warmup: u64,
}

impl AlltoallSpec {
    fn size(&self, n: u32) -> usize {
        self.chunk * n as usize
    }
}

/// A receive posted for `--op sendrecv`: where it lands and which stripe of a chunk it takes.
#[derive(Clone, Copy, Debug)]
struct RecvSlot {
    rail: usize,
    off: usize,
    len: usize,
    stripe: u32,
}

/// `alltoall` on the shared harness.
pub struct Alltoall<'a> {
    args: &'a AlltoallArgs,
    sizes: Vec<u64>,
    max: u64,
    mesh: Option<Mesh>,
}

impl Alltoall<'_> {
    /// Forgets the mesh without closing it (a failed run, just before the process exits).
    fn leak_fabric(&mut self) {
        std::mem::forget(self.mesh.take());
    }
}

impl<'a> Alltoall<'a> {
    pub fn new(args: &'a AlltoallArgs) -> Result<Self, BenchError> {
        let sizes = args.common.sizes()?;
        let max = *sizes.iter().max().expect("a sweep has at least one size");
        Ok(Alltoall {
            args,
            sizes,
            max,
            mesh: None,
        })
    }
}

fn mr_path(c: MrChoice) -> MrPath {
    match c {
        MrChoice::Auto => MrPath::Auto,
        MrChoice::Dmabuf => MrPath::Dmabuf,
        MrChoice::Va => MrPath::Va,
    }
}

/// Opens the rails of the plan and connects every rank (shared with `pairs`).
pub(crate) fn open_mesh(
    ctx: &Ctx,
    send: usize,
    recv: usize,
) -> Result<(Mesh, RunFacts), BenchError> {
    let c = ctx.args;
    let plan = ctx.plan()?;
    let group = plan.open(&RailConfig {
        post_timeout: c.timeout(),
        max_in_flight: 8192,
        ..RailConfig::default()
    })?;
    let bufs = mesh::alloc(c.mem, send, recv, ctx.device)?;
    let mut m = Mesh::new(
        group,
        c.strategy,
        bufs,
        mr_path(c.mr),
        ctx.rank,
        ctx.world,
        c.timeout(),
        ctx.bs.health(),
    )?;
    m.set_ranks_on_host(ctx.hosts.iter().filter(|h| **h == ctx.host).count());
    m.set_progress(ctx.bs.progress());
    let blob = m.local_blob()?;
    let blobs = ctx.bs.all_gather(&blob)?;
    m.connect(&blobs)?;
    let rails = plan.rails.len() as u32;
    let domains = plan.domains();
    let mut extra = Map::new();
    extra.insert("strategy".into(), json!(c.strategy.name()));
    extra.insert("virtual_rails".into(), json!(plan.virtual_rails));
    extra.insert("mr".into(), json!(m.mr_path()));
    let mut distinct = domains.clone();
    distinct.dedup();
    let header = vec![format!(
        "# rails: {rails}{} on {} | strategy: {} | mr: {}",
        if plan.virtual_rails {
            " virtual (endpoints of one domain, not separate NICs)"
        } else {
            ""
        },
        distinct.join(","),
        c.strategy.name(),
        m.mr_path()
    )];
    let link_gbps = if plan.virtual_rails {
        None
    } else {
        mesh::link_speed(&plan.rails)
    };
    Ok((
        m,
        RunFacts {
            provider: plan.provider.clone(),
            fabric: plan.rails[0].fabric.clone(),
            domains,
            libfabric: Some(plan.libfabric.clone()),
            rails,
            mem: c.mem.to_string(),
            link_gbps,
            header,
            extra,
        },
    ))
}

impl<'a> Benchmark for Alltoall<'a> {
    type Spec = AlltoallSpec;

    fn name(&self) -> &'static str {
        "alltoall"
    }

    fn needs(&self) -> Needs {
        Needs {
            fabric: true,
            min_world: 2,
            how_to_launch: "run `efabench launch -n 4 -- alltoall ...`, or start it under \
                            srun/mpirun, or by hand with --rank/--world/--rdzv",
        }
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let max = self.max as usize;
        let (m, mut facts) = open_mesh(ctx, max, 2 * max)?;
        let max_msg = m.group().rail(0).info().max_msg_size;
        let chunk = self.max / ctx.world as u64;
        if chunk > max_msg {
            return Err(BenchError::usage(format!(
                "chunks of {chunk} bytes exceed what provider {} can send in one message ({max_msg} bytes); lower -e",
                facts.provider
            )));
        }
        facts.extra.insert("op".into(), json!(self.args.op.name()));
        facts.header.push(format!(
            "# alltoall --op {}: size = one rank's whole send buffer (n = {} chunks, its own included); \
             time = the slowest rank's mean per iteration; bw = algbw = size / time; busbw = algbw x (n-1)/n",
            self.args.op.name(),
            ctx.world
        ));
        facts.header.push(format!(
            "# time budget: each size stops after its -n timed iterations or {} s, whichever comes \
             first (warm-up: -w or {:.3} s), every rank at the same iteration: at most {:.1} s of \
             measurement in all, plus one iteration per size",
            self.args.max_time,
            self.args.max_time / 10.0,
            self.args.max_time * 1.1 * self.sizes.len() as f64
        ));
        self.mesh = Some(m);
        Ok(facts)
    }

    fn points(&self, ctx: &Ctx) -> Result<Vec<AlltoallSpec>, BenchError> {
        let n = ctx.world as u64;
        let mut out = Vec::new();
        for &size in &self.sizes {
            let chunk = size / n / CHUNK_ALIGN * CHUNK_ALIGN;
            if chunk == 0 {
                if ctx.rank == 0 {
                    eprintln!(
                        "efabench: skipping size {size}: its chunk (size / {n} ranks, rounded down to {CHUNK_ALIGN} B) is 0; use -b {} or more",
                        n * CHUNK_ALIGN
                    );
                }
                continue;
            }
            let (iters, warmup) = ctx.args.iterations(size, n.saturating_sub(1).max(1));
            out.push(AlltoallSpec {
                chunk: chunk as usize,
                iters,
                warmup,
            });
        }
        if out.is_empty() {
            return Err(BenchError::usage(format!(
                "every size is too small for {n} ranks (chunk = size / n rounded down to {CHUNK_ALIGN} B is 0); use -e {} or more",
                n * CHUNK_ALIGN
            )));
        }
        Ok(out)
    }

    fn label(&self, spec: &AlltoallSpec) -> String {
        format!("chunk {}", crate::size::human(spec.chunk as u64))
    }

    fn measure(&mut self, ctx: &Ctx, spec: &AlltoallSpec) -> Result<Measured, BenchError> {
        let verify = ctx.args.verify();
        let op = self.args.op;
        let mesh = self
            .mesh
            .as_mut()
            .ok_or_else(|| BenchError::failed("measure before setup"))?;
        let mut run = Run::new(mesh, spec, op, verify);
        // Nobody writes the new layout while a peer still checks the previous point.
        ctx.bs.barrier()?;
        run.start()?;
        let mut errors = 0;
        // Receive halves: checked warm-up iterations alternate (a peer one iteration ahead must
        // not overwrite what we still check); timed iterations check nothing and all use half 0,
        // touching no more memory than MPI_Alltoall's one receive buffer; the final check uses
        // half 1, where no late write of a timed iteration can land (EFA orders no writes).
        let budget = Duration::from_secs_f64(self.args.max_time);
        let began = Instant::now();
        let mut warm = 0;
        while warm < spec.warmup {
            let ask = warm > 0 && began.elapsed() >= budget / 10;
            // After the warm-up: the timed iterations and the final check.
            let (e, stop) =
                run.iteration(verify, (warm % 2) as usize, None, ask, spec.iters + 1)?;
            errors += e;
            warm += 1;
            if stop {
                break;
            }
        }
        ctx.bs.barrier()?;
        run.mesh.count_from_now(true);
        let mut samples = Samples::with_capacity(spec.iters.min(1 << 16) as usize);
        let mut delays = vec![0u128; ctx.world as usize];
        let mut last = Instant::now();
        let first = last;
        let mut stopped_by = "count";
        for i in 0..spec.iters {
            let ask = i > 0 && first.elapsed() >= budget;
            let (_, stop) = run.iteration(false, 0, Some(&mut delays), ask, 1)?;
            let now = Instant::now();
            samples.push((now - last).as_nanos() as u64);
            last = now;
            if stop && i + 1 < spec.iters {
                stopped_by = "time";
                break;
            }
        }
        run.mesh.count_from_now(false);
        let per_rail = run.mesh.per_rail();
        errors += run.iteration(verify, 1, None, false, 0)?.0;
        run.finish()?;
        let mut extra = Map::new();
        extra.insert("per_rail".into(), per_rail);
        extra.insert("warmup_done".into(), json!(warm));
        extra.insert("stopped_by".into(), json!(stopped_by));
        // Mean arrival time of each source's chunk after the iteration started, ns.
        let iters = samples.len().max(1) as u128;
        extra.insert(
            "src_delay_ns".into(),
            Value::Array(delays.iter().map(|d| json!((d / iters) as u64)).collect()),
        );
        Ok(Measured {
            samples_ns: samples.into_vec(),
            errors,
            extra,
        })
    }

    fn point(&self, ctx: &Ctx, spec: &AlltoallSpec, all: &[Measured]) -> Point {
        let n = ctx.world;
        let size = spec.size(n) as u64;
        let mut ranks = Vec::new();
        let mut slowest = (0usize, 0f64);
        // Every rank stops at the same iteration; rank 0's counts are everyone's.
        let timed = all.first().map(|m| m.samples_ns.len() as u64).unwrap_or(0);
        let warm = all
            .first()
            .and_then(|m| m.extra.get("warmup_done"))
            .and_then(Value::as_u64)
            .unwrap_or(spec.warmup);
        let stopped_by = all
            .first()
            .and_then(|m| m.extra.get("stopped_by"))
            .cloned()
            .unwrap_or(Value::Null);
        let mut slow_samples = Vec::new();
        for (r, m) in all.iter().enumerate() {
            let mut s = Samples::from_vec(m.samples_ns.clone());
            let sum = s.summary_us(1.0);
            if sum.mean >= slowest.1 {
                slowest = (r, sum.mean);
                slow_samples = m.samples_ns.clone();
            }
            ranks.push(json!({
                "rank": r,
                "host": ctx.hosts.get(r),
                "p50": sum.p50,
                "mean": sum.mean,
                "max": sum.max,
            }));
        }
        let time_ns = slowest.1 * 1000.0;
        let algbw = if time_ns > 0.0 {
            size as f64 * 8.0 / time_ns
        } else {
            0.0
        };
        let busbw = algbw * (n as f64 - 1.0) / n as f64;
        let lat_us = Samples::from_vec(slow_samples).summary_us(1.0);
        // matrix[src][dst]: the chunk src sent dst / its mean arrival time at dst.
        let mut matrix = vec![vec![0f64; n as usize]; n as usize];
        for (dst, m) in all.iter().enumerate() {
            if let Some(Value::Array(d)) = m.extra.get("src_delay_ns") {
                for (src, v) in d.iter().enumerate() {
                    let ns = v.as_f64().unwrap_or(0.0);
                    if src != dst && ns > 0.0 && src < n as usize {
                        matrix[src][dst] = (spec.chunk as f64 * 8.0 / ns * 1e4).round() / 1e4;
                    }
                }
            }
        }
        // Per-NIC bytes: every rank's per-rail counts, summed by rail.
        let mut rails: Vec<(Value, u64, u64)> = Vec::new();
        for m in all {
            if let Some(Value::Array(pr)) = m.extra.get("per_rail") {
                for (i, x) in pr.iter().enumerate() {
                    if rails.len() <= i {
                        rails.push((x.get("domain").cloned().unwrap_or(Value::Null), 0, 0));
                    }
                    rails[i].1 += x.get("bytes").and_then(Value::as_u64).unwrap_or(0);
                    rails[i].2 += x.get("ops").and_then(Value::as_u64).unwrap_or(0);
                }
            }
        }
        let per_rail: Vec<Value> = rails
            .into_iter()
            .enumerate()
            .map(|(i, (d, b, o))| json!({"rail": i, "domain": d, "bytes": b, "ops": o}))
            .collect();
        let mut extra = Map::new();
        extra.insert("op".into(), json!(self.args.op.name()));
        extra.insert("chunk_bytes".into(), json!(spec.chunk));
        extra.insert(
            "lat_kind".into(),
            json!("time per iteration of the slowest rank"),
        );
        extra.insert(
            "busbw_def".into(),
            json!(format!(
                "algbw x (n-1)/n with n = {n}; algbw = size / time of the slowest rank (nccl-tests all-to-all), Gbps"
            )),
        );
        extra.insert("stopped_by".into(), stopped_by);
        extra.insert("slowest_rank".into(), json!(slowest.0));
        extra.insert("slowest_host".into(), json!(ctx.hosts.get(slowest.0)));
        extra.insert("rank_lat_us".into(), Value::Array(ranks));
        extra.insert("matrix_gbps".into(), json!(matrix));
        extra.insert("per_rail".into(), Value::Array(per_rail));
        extra.insert("bw_GBps".into(), json!(algbw / 8.0));
        Point {
            variant: self.args.op.name().to_string(),
            size_bytes: size,
            iters: timed,
            warmup: warm,
            peer: None,
            lat_us,
            bw_gbps: algbw,
            busbw_gbps: Some(busbw),
            msg_rate_mops: if time_ns > 0.0 {
                (n as f64 - 1.0) * 1000.0 / time_ns
            } else {
                0.0
            },
            ..Point::with_extra(extra)
        }
    }

    fn summary(&self, records: &[Record]) -> Vec<String> {
        let mut out =
            vec!["# slowest rank per size (its mean time per iteration sets bw):".to_string()];
        for r in records {
            out.push(format!(
                "#   {:>12} B  rank {} on {}  ({:.2} us)",
                r.size_bytes,
                r.extra
                    .get("slowest_rank")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                r.extra
                    .get("slowest_host")
                    .and_then(Value::as_str)
                    .unwrap_or("?"),
                r.lat_us.mean
            ));
        }
        // The node behind a slow all-to-all: every rank waits for the slowest chunk, so the
        // ranks' times are alike; the per-peer arrival matrix shows whose chunks are late.
        for r in records {
            out.extend(matrix_suspects(r));
        }
        if self.args.matrix {
            for r in records {
                out.push(format!(
                    "# per-peer bandwidth at {} B (chunk {} B), Gbps; row = source, column = destination:",
                    r.size_bytes,
                    r.extra.get("chunk_bytes").and_then(Value::as_u64).unwrap_or(0)
                ));
                if let Some(Value::Array(rows)) = r.extra.get("matrix_gbps") {
                    let n = rows.len();
                    let mut head = format!("# {:>6}", "src\\dst");
                    for d in 0..n {
                        head.push_str(&format!(" {d:>9}"));
                    }
                    out.push(head);
                    for (s, row) in rows.iter().enumerate() {
                        let mut line = format!("# {s:>7}");
                        if let Value::Array(cells) = row {
                            for (d, c) in cells.iter().enumerate() {
                                if d == s {
                                    line.push_str(&format!(" {:>9}", "-"));
                                } else {
                                    line.push_str(&format!(" {:>9.2}", c.as_f64().unwrap_or(0.0)));
                                }
                            }
                        }
                        out.push(line);
                    }
                }
            }
        }
        out
    }
}

/// Margin of [`matrix_suspects`], percent (as `pairs --suspect-below`'s default).
const SUSPECT_BELOW_PCT: f64 = 60.0;

/// Suspect ranks of one record from its `matrix_gbps` (chunk / mean arrival time per ordered
/// pair), judged as `pairs` judges its pair matrix ([`crate::locate`]).
fn matrix_suspects(r: &Record) -> Vec<String> {
    let Some(Value::Array(rows)) = r.extra.get("matrix_gbps") else {
        return Vec::new();
    };
    let n = rows.len();
    let mut pairs = Vec::new();
    for (src, row) in rows.iter().enumerate() {
        if let Value::Array(cells) = row {
            for (dst, c) in cells.iter().enumerate() {
                let g = c.as_f64().unwrap_or(0.0);
                if src != dst && g > 0.0 {
                    pairs.push(crate::locate::PairBw { src, dst, gbps: g });
                }
            }
        }
    }
    let host = |rank: usize| -> String {
        r.extra
            .get("rank_lat_us")
            .and_then(Value::as_array)
            .and_then(|a| a.get(rank))
            .and_then(|x| x.get("host"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    let found = crate::locate::locate(n, &pairs, SUSPECT_BELOW_PCT / 100.0);
    if found.is_empty() && n >= 3 {
        return vec![format!(
            "# no suspect at {} B: every rank's chunks (sent and received) arrive at {SUSPECT_BELOW_PCT}% \
             or more of the per-peer rate of the pairs without it",
            r.size_bytes
        )];
    }
    // Only the worst: once its chunks are late every rank's next iteration starts late, so the
    // arrival rates of the others are not clean pair measurements (`pairs` judges further nodes).
    found
        .first()
        .map(|s| {
            format!(
                "# slowest node at {} B: rank {} on {} ({}), per-peer chunk rate: {}",
                r.size_bytes,
                s.rank,
                host(s.rank),
                s.direction.describe(),
                s.evidence()
            )
        })
        .into_iter()
        .collect()
}

/// One point's state on this rank: the global iteration number, the arrival counts of the
/// current and the next iteration, and (send/recv) the receive slots.
struct Run<'m> {
    mesh: &'m mut Mesh,
    op: Op,
    chunk: usize,
    size: usize,
    n: u32,
    me: u32,
    /// Global iteration number within this point.
    g: u64,
    /// Stripes expected per iteration from each peer, and the routes (by source) into us.
    stripes_in: Vec<Vec<efabench_fabric::Stripe>>,
    /// The routes of our chunk to each peer.
    stripes_out: Vec<Vec<efabench_fabric::Stripe>>,
    expected: u64,
    /// Arrivals by iteration parity, total and per source.
    got: [u64; 2],
    got_from: [Vec<u32>; 2],
    /// A chunk of the iteration (by parity) carried the stop mark.
    stop: [bool; 2],
    /// send/recv: the receive slots, which iteration's data each holds, and how many receives
    /// this point still has to post.
    slots: Vec<RecvSlot>,
    landed: Vec<(usize, u64, u32)>,
    to_post: u64,
}

impl<'m> Run<'m> {
    fn new(mesh: &'m mut Mesh, spec: &AlltoallSpec, op: Op, _verify: bool) -> Self {
        let n = mesh.world();
        let me = mesh.me();
        let chunk = spec.chunk;
        let sends = op == Op::Sendrecv;
        let stripes_in: Vec<_> = (0..n).map(|s| mesh.route(s, me, chunk, sends)).collect();
        let stripes_out: Vec<_> = (0..n).map(|p| mesh.route(me, p, chunk, sends)).collect();
        let expected: u64 = (0..n)
            .filter(|&s| s != me)
            .map(|s| stripes_in[s as usize].len() as u64)
            .sum();
        let size = chunk * n as usize;
        let mut slots = Vec::new();
        if sends {
            for half in 0..2 {
                for s in (0..n).filter(|&s| s != me) {
                    for (i, st) in stripes_in[s as usize].iter().enumerate() {
                        slots.push(RecvSlot {
                            rail: st.rail,
                            off: half * size + s as usize * chunk + st.off,
                            len: st.len,
                            stripe: i as u32,
                        });
                    }
                }
            }
        }
        let total_iters = spec.warmup + spec.iters + 1;
        Run {
            mesh,
            op,
            chunk,
            size,
            n,
            me,
            g: 0,
            stripes_in,
            stripes_out,
            expected,
            got: [0, 0],
            got_from: [vec![0; n as usize], vec![0; n as usize]],
            stop: [false, false],
            slots,
            landed: Vec::new(),
            to_post: expected * total_iters,
        }
    }

    /// Posts the first receives (send/recv).
    fn start(&mut self) -> Result<(), BenchError> {
        if self.op == Op::Sendrecv {
            for i in 0..self.slots.len() {
                self.post_slot(i)?;
            }
        }
        Ok(())
    }

    fn post_slot(&mut self, i: usize) -> Result<(), BenchError> {
        if self.to_post == 0 {
            return Ok(());
        }
        self.to_post -= 1;
        let s = self.slots[i];
        self.mesh.post_recv(i, s.rail, s.off, s.len)
    }

    /// Every receive of the point was consumed and every local operation completed.
    fn finish(&mut self) -> Result<(), BenchError> {
        self.mesh.drain_local()
    }

    /// Counts one arrival of `data` (kind, iteration, source).
    fn count(&mut self, data: u64, at: Option<(&mut [u128], Instant)>) -> Result<u64, BenchError> {
        let (kind, it, src) = parse_cq_data(data)
            .filter(|(k, _, s)| {
                matches!(k, Kind::Payload | Kind::Stop) && *s < self.n && *s != self.me
            })
            .ok_or_else(|| {
                BenchError::failed(format!(
                    "rank {} got CQ data {data:#x} that no all-to-all peer sends; are all ranks running the same efabench?",
                    self.me
                ))
            })?;
        let cur = self.g % ITER_MOD;
        let next = (self.g + 1) % ITER_MOD;
        let g = if it == cur {
            self.g
        } else if it == next {
            self.g + 1
        } else {
            return Err(BenchError::failed(format!(
                "rank {} at iteration {} got a chunk of iteration {it} (mod {ITER_MOD}) from rank {src}; the ranks are out of step",
                self.me, self.g
            )));
        };
        let p = (g % 2) as usize;
        self.got[p] += 1;
        self.stop[p] |= kind == Kind::Stop;
        self.got_from[p][src as usize] += 1;
        if g == self.g {
            if let Some((delays, t0)) = at {
                if self.got_from[p][src as usize] as usize == self.stripes_in[src as usize].len() {
                    delays[src as usize] += t0.elapsed().as_nanos();
                }
            }
        }
        Ok(g)
    }

    /// One iteration: fill (when checking), post every chunk, wait for every arrival of this
    /// iteration and every local completion, check (when checking). Returns the errors found
    /// and whether any rank (this one when `ask`) marked the iteration as its last of the loop.
    /// `half` is the receive half the chunks land in (see [`Alltoall::measure`]); `after` is
    /// how many iterations this point runs after this one when the loop stops here.
    fn iteration(
        &mut self,
        check: bool,
        half: usize,
        mut delays: Option<&mut Vec<u128>>,
        ask: bool,
        after: u64,
    ) -> Result<(u64, bool), BenchError> {
        let g = self.g;
        let parity = (g % 2) as usize;
        let (chunk, size, n, me) = (self.chunk, self.size, self.n, self.me);
        if check {
            for p in 0..n {
                if p == me {
                    self.mesh
                        .fill_send(me as usize * chunk, chunk, pattern::seed(g, me, me, 0))?;
                    continue;
                }
                for (i, st) in self.stripes_out[p as usize].clone().iter().enumerate() {
                    self.mesh.fill_send(
                        p as usize * chunk + st.off,
                        st.len,
                        pattern::seed(g, me, p, i as u32),
                    )?;
                }
            }
        }
        let t0 = Instant::now();
        let data = cq_data(if ask { Kind::Stop } else { Kind::Payload }, g, me);
        for k in 1..n {
            let p = (me + k) % n;
            for j in 0..self.stripes_out[p as usize].len() {
                let st = self.stripes_out[p as usize][j];
                let off = p as usize * chunk + st.off;
                match self.op {
                    Op::Write => self.mesh.write(
                        p,
                        st.rail,
                        off,
                        st.len,
                        half * size + me as usize * chunk + st.off,
                        data,
                    )?,
                    Op::Sendrecv => self.mesh.send(p, st.rail, off, st.len, data)?,
                }
            }
        }
        self.mesh.copy_local(
            me as usize * chunk,
            half * size + me as usize * chunk,
            chunk,
        )?;
        // Wait for this iteration's arrivals and our completions.
        let p = parity;
        loop {
            while let Some(d) = self.mesh.arrivals.pop_front() {
                self.count(d, delays.as_deref_mut().map(|v| (v.as_mut_slice(), t0)))?;
            }
            while let Some(r) = self.mesh.received.pop_front() {
                let slot = self.slots.get(r.index).copied().ok_or_else(|| {
                    BenchError::failed(format!("a receive completed for unknown slot {}", r.index))
                })?;
                if r.len != slot.len {
                    return Err(BenchError::failed(format!(
                        "rank {me} received {} bytes into a {}-byte slot; are all ranks running the same options?",
                        r.len, slot.len
                    )));
                }
                let it = self.count(
                    r.data,
                    delays.as_deref_mut().map(|v| (v.as_mut_slice(), t0)),
                )?;
                let src = (r.data & 0xFFFF) as u32;
                // Reposted once its iteration is over (and checked), so a later message cannot
                // overwrite it first.
                self.landed.push((r.index, it, src));
            }
            if self.got[p] >= self.expected && self.mesh.outstanding == 0 {
                break;
            }
            let want = self.expected;
            let got_from = &self.got_from[p];
            let stripes = &self.stripes_in;
            self.mesh.wait_progress(move |m| {
                let missing: Vec<String> = (0..n)
                    .filter(|&s| {
                        s != me && (got_from[s as usize] as usize) < stripes[s as usize].len()
                    })
                    .map(|s| s.to_string())
                    .collect();
                if missing.is_empty() {
                    format!("{} local completions (iteration {g})", m.outstanding)
                } else {
                    format!(
                        "the chunks of iteration {g} from {} {} ({want} stripes expected in all)",
                        if missing.len() == 1 { "rank" } else { "ranks" },
                        missing.join(", ")
                    )
                }
            })?;
        }
        if self.got[p] > self.expected {
            return Err(BenchError::failed(format!(
                "rank {me} got {} stripes in iteration {g}, expected {}; a chunk arrived twice",
                self.got[p], self.expected
            )));
        }
        let stop = ask || self.stop[p];
        if stop && self.op == Op::Sendrecv {
            // The next iteration's receives are posted already; post only what the `after`
            // iterations still need, so none is left posted into the next point.
            self.to_post = after.saturating_sub(1) * self.expected;
        }
        let mut errors = 0;
        if check {
            // Our own chunk, then every peer's, stripe by stripe.
            errors += self.mesh.check_recv(
                half * size + me as usize * chunk,
                chunk,
                pattern::seed(g, me, me, 0),
            );
            match self.op {
                Op::Write => {
                    for s in (0..n).filter(|&s| s != me) {
                        for (i, st) in self.stripes_in[s as usize].clone().iter().enumerate() {
                            errors += self.mesh.check_recv(
                                half * size + s as usize * chunk + st.off,
                                st.len,
                                pattern::seed(g, s, me, i as u32),
                            );
                        }
                    }
                }
                Op::Sendrecv => {
                    let mut keep = Vec::new();
                    for (idx, it, src) in std::mem::take(&mut self.landed) {
                        if it != g {
                            keep.push((idx, it, src));
                            continue;
                        }
                        let s = self.slots[idx];
                        errors +=
                            self.mesh
                                .check_recv(s.off, s.len, pattern::seed(g, src, me, s.stripe));
                        self.post_slot(idx)?;
                    }
                    self.landed = keep;
                }
            }
            // Every peer delivered exactly its stripes.
            for s in (0..n).filter(|&s| s != me) {
                let want = self.stripes_in[s as usize].len() as u32;
                if self.got_from[p][s as usize] != want {
                    return Err(BenchError::failed(format!(
                        "rank {me} got {} stripes from rank {s} in iteration {g}, expected {want}",
                        self.got_from[p][s as usize]
                    )));
                }
            }
        } else if self.op == Op::Sendrecv {
            // This iteration's receive slots are free again.
            let mut keep = Vec::new();
            for (idx, it, src) in std::mem::take(&mut self.landed) {
                if it == g {
                    self.post_slot(idx)?;
                } else {
                    keep.push((idx, it, src));
                }
            }
            self.landed = keep;
        }
        self.got[p] = 0;
        self.stop[p] = false;
        self.got_from[p].iter_mut().for_each(|c| *c = 0);
        self.g += 1;
        Ok((errors, stop))
    }
}

/// Runs one rank of `alltoall`.
pub fn run_alltoall(args: &AlltoallArgs, build: &harness::BuildInfo) -> Result<i32, BenchError> {
    let mut b = Alltoall::new(args)?;
    let run = harness::run(&mut b, &args.common, build);
    if run.is_err() {
        // As in `pairs`: no fabric teardown with operations possibly still posted (libfabric
        // 1.17's tcp provider crashes closing such endpoints); the process exits next.
        b.leak_fabric();
    }
    run
}
