//! `efabench pairs`: the bandwidth of every ordered pair of ranks, to find the slow node, NIC or
//! cable of a cluster (a per-pair version of nccl-tests' `MIN_BW` acceptance gate).
//!
//! Each pair runs the point-to-point write stream: a window of `--window` RDMA writes with remote
//! CQ data, timed at the sender from the first post until the receiver's acknowledgement says
//! every stripe of every message arrived (counted by CQ data, never by the last write), then
//! verified by the receiver (untimed) before it tells the sender to start the next window.
//!
//! # Schedule
//! Pairs run in rounds of shifts: round k (1 ≤ k < n) has every rank r write to (r + k) mod n
//! while it receives from (r − k) mod n, so all n pairs of a round run at once — what the cluster
//! sees under load, every NIC sending and receiving. `--pairs` picks the shifts:
//! - `all` (default): every shift, n − 1 rounds, all n(n−1) ordered pairs;
//! - `ring`: shifts 1 and n − 1, each rank with its two neighbours (2 rounds);
//! - `random:K[:SEED]`: K shifts drawn from a seed every rank shares (the seed is part of the
//!   option, so ranks started with the same options agree), K partners each way per rank.
//!
//! After a `ring` or `random` first stage, [`RETEST_ROUNDS`] retest rounds follow at each size:
//! rank 0 names the suspects of the partial matrix ([`crate::locate`]) and picks, for each retest
//! round, a shift not measured yet that pairs every suspect with ranks that are not suspects
//! themselves (both ways), and tells every rank. A suspect's fault then shows against known-good
//! partners, and a healthy neighbour of a slow node gets pairs without it. The cost is
//! (shifts + 2) rounds of n pairs: with K = log2 n, O(n log n) pair measurements.
//! `--one-at-a-time` measures one pair at a time instead (n(n−1) steps, an idle fabric around
//! it; `--pairs all` only).
//!
//! # Time budget
//! Each pair stops after `-w` + `-n` windows or `--max-time` seconds of timed windows (warm-up
//! at most a tenth of it), whichever comes first, so a link 100 times slower than the others
//! still yields its number, and the header states the budget of the whole run. Every poll that
//! finds a completion counts as progress for the bootstrap, so `--timeout` means "nothing moved",
//! never "slow".
//!
//! # Output
//! One record per pair (`peer` = destination, `src` in the record, `stopped_by` count or time),
//! an n × n table of Gbps after the sweep, the pairs below `--outlier PCT` of the median of their
//! size named with host and NIC of both ends, and the suspect ranks with the direction of the
//! fault and one line of evidence each: a rank's pairs are compared with the pairs that do not
//! involve it ([`crate::locate`]), below `--suspect-below PCT`. `--min-bw GBPS` makes the run
//! exit 1 when any pair is below it.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use efabench_record::Record;
use serde_json::{json, Map, Value};

use crate::alltoall::open_mesh;
use crate::error::BenchError;
use crate::harness::{
    self, Benchmark, Ctx, FabricArgs, Gate, JobArgs, Measured, MemArgs, Needs, Point, RunFacts,
    SweepArgs,
};
use crate::locate::{self, PairBw};
use crate::mesh::{cq_data, parse_cq_data, Kind, Mesh, ITER_MOD};
use crate::pattern;
use crate::stats::{gbps, Samples};

/// Most bytes a pair's window touches per buffer (slots beyond it are reused).
const FOOTPRINT: u64 = 1 << 20;

/// Options of `pairs`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct PairsArgs {
    /// Writes in flight per window, 1 to 4096.
    #[arg(long, default_value = "16", value_parser = window_arg, allow_hyphen_values = true)]
    pub window: u64,
    /// Measure one pair at a time instead of a ring shift (all pairs of a round at once).
    #[arg(long)]
    pub one_at_a_time: bool,
    /// Name pairs below this percentage of the median bandwidth of their size (1 to 100).
    #[arg(long, default_value = "80", value_parser = pct_arg, allow_hyphen_values = true)]
    pub outlier: f64,
    /// Name a rank as suspect when the median of its pairs (sending or receiving) is below this
    /// percentage of the median of the pairs without it (1 to 100).
    #[arg(long, default_value = "60", value_parser = suspect_arg, allow_hyphen_values = true)]
    pub suspect_below: f64,
    /// Longest timed part of one pair's measurement, in seconds: it stops after -n windows or
    /// this, whichever comes first (warm-up is bounded by a tenth of it).
    #[arg(long, default_value = "1", value_parser = max_time_arg, allow_hyphen_values = true)]
    pub max_time: f64,
    /// Which pairs: all (every ordered pair, n-1 rounds), ring (each rank with its two
    /// neighbours), or `random:K[:SEED]` (K partners each way per rank from a shared seed); ring and
    /// random are followed by 2 retest rounds that pair the suspects with ranks not named.
    #[arg(long = "pairs", default_value = "all", value_parser = schedule_arg)]
    pub schedule: Schedule,
    /// Exit 1 when any pair is below this bandwidth in Gbps (a cluster acceptance gate).
    #[arg(long, value_parser = min_bw_arg, allow_hyphen_values = true)]
    pub min_bw: Option<f64>,
    #[command(flatten)]
    pub sweep: SweepArgs,
    #[command(flatten)]
    pub fabric: FabricArgs,
    #[command(flatten)]
    pub mem: MemArgs,
    #[command(flatten)]
    pub job: JobArgs,
}

crate::impl_options!(PairsArgs: sweep, fabric, mem);

fn window_arg(s: &str) -> Result<u64, String> {
    harness::bounded(s, "--window", 1, 4096, "16")
}

fn pct(s: &str, what: &str, example: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(format!(
            "{what} '{}' is not a percentage above 0 and at most 100; pass e.g. {what} {example}",
            crate::size::clip(s)
        )),
    }
}

fn pct_arg(s: &str) -> Result<f64, String> {
    pct(s, "--outlier", "80")
}

fn suspect_arg(s: &str) -> Result<f64, String> {
    pct(s, "--suspect-below", "60")
}

/// Longest `--max-time`, seconds (an hour per pair).
const MAX_PAIR_TIME_S: f64 = 3600.0;

pub(crate) fn max_time_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.001..=MAX_PAIR_TIME_S).contains(&v) => Ok(v),
        _ => Err(format!(
            "--max-time '{}' is not a number of seconds from 0.001 to {MAX_PAIR_TIME_S}; pass e.g. --max-time 1",
            crate::size::clip(s)
        )),
    }
}

/// Rounds after a `ring` or `random` stage that pair each suspect with ranks not named.
pub const RETEST_ROUNDS: u32 = 2;

/// Seed of `random:K` when none is given.
const DEFAULT_SEED: u64 = 1;

/// Which shifts the first stage measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Every shift 1..n.
    All,
    /// Shifts 1 and n − 1.
    Ring,
    /// `k` shifts drawn from `seed`.
    Random { k: u32, seed: u64 },
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Schedule::All => write!(f, "all"),
            Schedule::Ring => write!(f, "ring"),
            Schedule::Random { k, seed } => write!(f, "random:{k}:{seed}"),
        }
    }
}

impl Schedule {
    /// The first stage's shifts among `n` ranks, ascending.
    pub fn shifts(self, n: u32) -> Vec<u32> {
        if n < 2 {
            return Vec::new();
        }
        let mut v: Vec<u32> = match self {
            Schedule::All => (1..n).collect(),
            Schedule::Ring => vec![1, n - 1],
            Schedule::Random { k, seed } => {
                let mut all = shuffled(n, seed);
                all.truncate(k as usize);
                all
            }
        };
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether retest rounds follow (the first stage left pairs out).
    pub fn retests(self, n: u32) -> bool {
        self != Schedule::All && (self.shifts(n).len() as u32) < n.saturating_sub(1)
    }
}

/// Shifts 1..n in an order drawn from `seed` (Fisher–Yates on SplitMix64).
fn shuffled(n: u32, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (1..n).collect();
    let mut state = seed;
    for i in (1..v.len()).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let j = (pattern::mix(state) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

fn schedule_arg(s: &str) -> Result<Schedule, String> {
    let bad = || {
        format!(
            "--pairs '{}' is not a schedule; pass --pairs all, --pairs ring or --pairs random:K \
             (K partners per rank, 1 to 65535, optionally random:K:SEED)",
            crate::size::clip(s)
        )
    };
    let t = s.trim();
    match t {
        "all" => return Ok(Schedule::All),
        "ring" => return Ok(Schedule::Ring),
        _ => {}
    }
    let rest = t.strip_prefix("random:").ok_or_else(bad)?;
    let mut parts = rest.split(':');
    let k = parts
        .next()
        .and_then(|k| k.parse::<u32>().ok())
        .filter(|k| (1..=65535).contains(k))
        .ok_or_else(bad)?;
    let seed = match parts.next() {
        None => DEFAULT_SEED,
        Some(x) => x.parse::<u64>().map_err(|_| bad())?,
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(Schedule::Random { k, seed })
}

fn min_bw_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() && v < 1e7 => Ok(v),
        _ => Err(format!(
            "--min-bw '{}' is not a bandwidth in Gbps (0 or more); pass e.g. --min-bw 90",
            crate::size::clip(s)
        )),
    }
}

/// One point: a size and one pair (the record), measured in a round (ring shift) or alone.
#[derive(Clone, Debug)]
pub struct PairsSpec {
    size: usize,
    iters: u64,
    warmup: u64,
    /// Time bound of the timed part (warm-up: a tenth of it).
    max_time: Duration,
    slots: usize,
    /// Messages per window.
    window: u64,
    /// Ring shift k (every rank r → r + k), or the one pair measured alone.
    round: Round,
    /// The pair this record is about.
    src: u32,
    dst: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    Shift(u32),
    Alone,
    /// Retest round j of a size: its shift is chosen by rank 0 from the first stage's suspects.
    Retest(u32),
}

/// `pairs` on the shared harness.
pub struct Pairs<'a> {
    args: &'a PairsArgs,
    sizes: Vec<u64>,
    mesh: Option<Mesh>,
    /// Every rank's NIC(s), for naming outliers.
    nics: Vec<String>,
    /// This rank's outcome of the current round (returned for every record of the round).
    cached: Option<Measured>,
    slow: Option<Duration>,
    /// Rank 0: the pairs measured so far (size, pair), for choosing retest shifts.
    seen: RefCell<Vec<(u64, PairBw)>>,
    /// The shifts measured at the current size (first stage and retests chosen so far).
    used: Vec<(u64, u32)>,
    /// The shift of the retest round being measured.
    retest_shift: u32,
}

impl<'a> Pairs<'a> {
    pub fn new(args: &'a PairsArgs) -> Result<Self, BenchError> {
        let sizes = args.sweep.sizes()?;
        if args.one_at_a_time && args.schedule != Schedule::All {
            return Err(BenchError::usage(format!(
                "--one-at-a-time measures every ordered pair, so it goes with --pairs all, not \
                 --pairs {}; drop one of them",
                args.schedule
            )));
        }
        Ok(Pairs {
            args,
            sizes,
            mesh: None,
            nics: Vec::new(),
            cached: None,
            slow: None,
            seen: RefCell::new(Vec::new()),
            used: Vec::new(),
            retest_shift: 0,
        })
    }

    fn slots(&self, size: u64) -> usize {
        (FOOTPRINT / size.max(1)).clamp(1, self.args.window) as usize
    }

    /// Rank 0: the shift of retest round `j` at `size` (see the module docs).
    fn choose_retest(&self, n: u32, size: u64, j: u32) -> u32 {
        let pairs: Vec<PairBw> = self
            .seen
            .borrow()
            .iter()
            .filter(|(s, _)| *s == size)
            .map(|(_, p)| *p)
            .collect();
        let named: Vec<u32> = locate::locate(n as usize, &pairs, self.args.suspect_below / 100.0)
            .iter()
            .map(|s| s.rank as u32)
            .collect();
        let used = |k: u32| self.used.iter().any(|&(s, u)| s == size && u == k);
        let good = |k: u32| {
            named
                .iter()
                .all(|&s| !named.contains(&((s + k) % n)) && !named.contains(&((s + n - k) % n)))
        };
        let seed = match self.args.schedule {
            Schedule::Random { seed, .. } => seed,
            _ => DEFAULT_SEED,
        };
        let order = shuffled(n, pattern::mix(seed ^ size ^ ((j as u64) << 40)));
        order
            .iter()
            .copied()
            .find(|&k| !used(k) && good(k))
            .or_else(|| order.iter().copied().find(|&k| good(k)))
            .or_else(|| order.iter().copied().find(|&k| !used(k)))
            .unwrap_or(1)
    }
}

impl<'a> Benchmark for Pairs<'a> {
    type Spec = PairsSpec;

    fn name(&self) -> &'static str {
        "pairs"
    }

    fn needs(&self) -> Needs {
        Needs {
            fabric: true,
            min_world: 2,
            how_to_launch: "run `efabench launch -n 4 -- pairs ...`, or start it under \
                            srun/mpirun, or by hand with --rank/--world/--rdzv",
        }
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let buf = self
            .sizes
            .iter()
            .map(|&s| s as usize * self.slots(s))
            .max()
            .unwrap_or(1);
        let (m, mut facts) = open_mesh(ctx, buf, buf)?;
        let mine = m.group().domains();
        let mut mine_d = mine.clone();
        mine_d.dedup();
        let all = ctx.bs.all_gather(mine_d.join(",").as_bytes())?;
        self.nics = all
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        self.slow = crate::test_hooks::slow_rank_delay(ctx.rank);
        facts.extra.insert(
            "schedule".into(),
            json!(if self.args.one_at_a_time {
                "one-at-a-time".to_string()
            } else {
                self.args.schedule.to_string()
            }),
        );
        facts.header.push(format!(
            "# pairs: write stream, window {}; bw per ordered pair (peer = destination, src in the record)",
            self.args.window,
        ));
        facts.header.extend(budget_lines(
            ctx.world,
            &self.sizes,
            if self.args.one_at_a_time {
                Plan::OneAtATime
            } else {
                Plan::Rounds(self.args.schedule)
            },
            self.args.max_time,
            |size| ctx.args.iterations(size, self.args.window),
        ));
        if m.rails() > 1 {
            facts.header.push(format!(
                "# rails: after each round's striped stream, each of the {} rails alone for 1/{} of \
                 --max-time (rail_gbps in the records; a slow NIC is named by rail and domain): \
                 each round takes up to twice its budget",
                m.rails(),
                m.rails()
            ));
        }
        self.mesh = Some(m);
        Ok(facts)
    }

    fn points(&self, ctx: &Ctx) -> Result<Vec<PairsSpec>, BenchError> {
        let n = ctx.world;
        let mut out = Vec::new();
        for &size in &self.sizes {
            let (iters, warmup) = ctx.args.iterations(size, self.args.window);
            let base = PairsSpec {
                size: size as usize,
                iters,
                warmup,
                max_time: Duration::from_secs_f64(self.args.max_time),
                slots: self.slots(size),
                window: self.args.window,
                round: Round::Alone,
                src: 0,
                dst: 0,
            };
            if self.args.one_at_a_time {
                for src in 0..n {
                    for dst in (0..n).filter(|&d| d != src) {
                        out.push(PairsSpec {
                            src,
                            dst,
                            ..base.clone()
                        });
                    }
                }
            } else {
                for k in self.args.schedule.shifts(n) {
                    for src in 0..n {
                        out.push(PairsSpec {
                            round: Round::Shift(k),
                            src,
                            dst: (src + k) % n,
                            ..base.clone()
                        });
                    }
                }
                if self.args.schedule.retests(n) {
                    for j in 0..RETEST_ROUNDS {
                        for src in 0..n {
                            // The destination is known once rank 0 chose the round's shift.
                            out.push(PairsSpec {
                                round: Round::Retest(j),
                                src,
                                dst: src,
                                ..base.clone()
                            });
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    fn label(&self, spec: &PairsSpec) -> String {
        match spec.round {
            Round::Retest(j) => format!(
                "{} retest {} from {}",
                crate::size::human(spec.size as u64),
                j + 1,
                spec.src
            ),
            _ => format!(
                "{} {} -> {}",
                crate::size::human(spec.size as u64),
                spec.src,
                spec.dst
            ),
        }
    }

    fn fingerprint(&self) -> String {
        format!(
            "--pairs {} --window {} --max-time {} --suspect-below {}{}",
            self.args.schedule,
            self.args.window,
            self.args.max_time,
            self.args.suspect_below,
            if self.args.one_at_a_time {
                " --one-at-a-time"
            } else {
                ""
            }
        )
    }

    fn measure(&mut self, ctx: &Ctx, spec: &PairsSpec) -> Result<Measured, BenchError> {
        // A round is measured once, at its first record; its other records reuse the outcome.
        if let (Round::Shift(_) | Round::Retest(_), Some(m)) = (spec.round, &self.cached) {
            if spec.src != 0 {
                return Ok(m.clone());
            }
        }
        let (me, n) = (ctx.rank, ctx.world);
        let size = spec.size as u64;
        if let Round::Shift(k) = spec.round {
            if spec.src == 0 {
                self.used.push((size, k));
            }
        }
        if let Round::Retest(j) = spec.round {
            // Rank 0 chooses from what it has seen; every rank takes its word.
            let mine = if me == 0 {
                self.choose_retest(n, size, j).to_le_bytes().to_vec()
            } else {
                Vec::new()
            };
            let all = ctx.bs.all_gather(&mine)?;
            let k = all
                .first()
                .and_then(|b| <[u8; 4]>::try_from(b.as_slice()).ok())
                .map(u32::from_le_bytes)
                .filter(|k| (1..n).contains(k))
                .ok_or_else(|| BenchError::failed("rank 0 sent no valid retest shift"))?;
            self.retest_shift = k;
            self.used.push((size, k));
        }
        let (to, from) = match spec.round {
            Round::Shift(k) => (Some((me + k) % n), Some((me + n - k) % n)),
            Round::Retest(_) => {
                let k = self.retest_shift;
                (Some((me + k) % n), Some((me + n - k) % n))
            }
            Round::Alone => (
                (me == spec.src).then_some(spec.dst),
                (me == spec.dst).then_some(spec.src),
            ),
        };
        let verify = ctx.args.verify();
        let slow = self.slow;
        let mesh = self
            .mesh
            .as_mut()
            .ok_or_else(|| BenchError::failed("measure before setup"))?;
        ctx.bs.barrier()?;
        if crate::test_hooks::crash_rank(me) {
            // As a provider's bad access inside a call would.
            efabench_fabric::crash::raise_segv();
        }
        let mut m = stream(mesh, spec, to, from, verify, slow, None)?;
        let rails = mesh.rails();
        if rails > 1 {
            // Each rail alone, for a share of the pair's budget: a slow NIC of a node shows as
            // its rail's column, where the striped stream only shows the node.
            let share = PairsSpec {
                max_time: spec.max_time / rails as u32,
                iters: spec.iters.div_ceil(rails as u64).max(1),
                warmup: spec.warmup.div_ceil(rails as u64),
                ..spec.clone()
            };
            let mut per = Vec::with_capacity(rails);
            for rail in 0..rails {
                ctx.bs.barrier()?;
                let r = stream(mesh, &share, to, from, verify, slow, Some(rail))?;
                m.errors += r.errors;
                let s = Samples::from_vec(r.samples_ns);
                per.push(gbps(
                    spec.size as u64 * s.len() as u64 * spec.window,
                    s.total_ns(),
                ));
            }
            m.extra.insert("rail_gbps".into(), json!(per));
        }
        self.cached = Some(m.clone());
        Ok(m)
    }

    fn point(&self, ctx: &Ctx, spec: &PairsSpec, all: &[Measured]) -> Point {
        let mut spec = spec.clone();
        if let Round::Retest(_) = spec.round {
            spec.dst = (spec.src + self.retest_shift) % ctx.world;
        }
        let spec = &spec;
        let m = &all[spec.src as usize];
        let mut extra_stop = None;
        // Warm-up windows actually sent (fewer than -w when a tenth of --max-time ran out).
        let warmup = m
            .extra
            .get("warmup_done")
            .and_then(Value::as_u64)
            .unwrap_or(spec.warmup);
        let mut s = Samples::from_vec(m.samples_ns.clone());
        let window = self.args.window;
        if let Some(why) = m.extra.get("stopped_by") {
            extra_stop = Some(why.clone());
        }
        let messages = s.len() as u64 * window;
        let bw = gbps(spec.size as u64 * messages, s.total_ns());
        self.seen.borrow_mut().push((
            spec.size as u64,
            PairBw {
                src: spec.src as usize,
                dst: spec.dst as usize,
                gbps: bw,
            },
        ));
        let lat_us = s.summary_us(window as f64);
        let detail = PairsDetail {
            src: spec.src,
            src_host: ctx.hosts.get(spec.src as usize).cloned(),
            dst_host: ctx.hosts.get(spec.dst as usize).cloned(),
            src_nic: self.nics.get(spec.src as usize).cloned(),
            dst_nic: self.nics.get(spec.dst as usize).cloned(),
            window,
            stopped_by: extra_stop.and_then(|v| v.as_str().map(String::from)),
            lat_kind: "per message (window time / window)".into(),
            round: match spec.round {
                Round::Shift(k) => Some(k),
                Round::Retest(_) => Some(self.retest_shift),
                Round::Alone => None,
            },
            stage: match spec.round {
                Round::Retest(_) => "retest",
                _ => "first",
            }
            .into(),
            per_rail: m.extra.get("per_rail").cloned(),
            rail_gbps: m
                .extra
                .get("rail_gbps")
                .and_then(|v| serde_json::from_value(v.clone()).ok()),
        };
        let extra = crate::queue::record::fields(&detail);
        Point {
            variant: "write-stream".into(),
            size_bytes: spec.size as u64,
            // Windows actually timed: fewer than -n when --max-time ran out first.
            iters: s.len() as u64,
            warmup,
            peer: Some(spec.dst),
            lat_us,
            bw_gbps: bw,
            busbw_gbps: None,
            msg_rate_mops: crate::stats::mops(messages, s.total_ns()),
            gate: self.args.min_bw.map(|min| Gate {
                what: format!("--min-bw {min} Gbps"),
                value: bw,
                min,
            }),
            ..Point::with_extra(extra)
        }
    }

    fn summary(&self, records: &[Record]) -> Vec<String> {
        summarize(
            records,
            self.args.outlier,
            self.args.suspect_below,
            self.args.min_bw,
        )
    }
}

/// The n × n tables, the outliers, the suspects and the `--min-bw` verdict (rank 0).
pub fn summarize(
    records: &[Record],
    outlier: f64,
    suspect_below: f64,
    min_bw: Option<f64>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut sizes: Vec<u64> = records.iter().map(|r| r.size_bytes).collect();
    sizes.dedup();
    let n = records.first().map(|r| r.world as usize).unwrap_or(0);
    let src_of = |r: &Record| PairsDetail::of(r).map_or(0, |d| d.src as usize);
    let text = |r: &Record, k: fn(&PairsDetail) -> &Option<String>| {
        PairsDetail::of(r)
            .and_then(|d| k(&d).clone())
            .unwrap_or_else(|| "?".into())
    };
    for size in sizes {
        let rs: Vec<&Record> = records.iter().filter(|r| r.size_bytes == size).collect();
        let mut grid = vec![vec![None; n]; n];
        for r in &rs {
            let (s, d) = (src_of(r), r.peer.unwrap_or(0) as usize);
            if s < n && d < n {
                grid[s][d] = Some(r.bw_gbps);
            }
        }
        out.push(format!(
            "# pairs at {size} B: Gbps, row = source rank, column = destination rank"
        ));
        let mut head = format!("# {:>7}", "src\\dst");
        for d in 0..n {
            head.push_str(&format!(" {d:>9}"));
        }
        out.push(head);
        for (s, row) in grid.iter().enumerate() {
            let mut line = format!("# {s:>7}");
            for c in row {
                match c {
                    Some(v) => line.push_str(&format!(" {v:>9.2}")),
                    None => line.push_str(&format!(" {:>9}", "-")),
                }
            }
            out.push(line);
        }
        let mut bws: Vec<f64> = rs.iter().map(|r| r.bw_gbps).collect();
        bws.sort_by(f64::total_cmp);
        let median = match bws.len() {
            0 => 0.0,
            l if l % 2 == 1 => bws[l / 2],
            l => (bws[l / 2 - 1] + bws[l / 2]) / 2.0,
        };
        let limit = median * outlier / 100.0;
        let mut outliers = 0;
        for r in &rs {
            if r.bw_gbps < limit {
                outliers += 1;
                let (s, d) = (src_of(r), r.peer.unwrap_or(0) as usize);
                out.push(format!(
                    "# outlier at {size} B: {s} -> {d}: {:.2} Gbps ({:.0}% of the median {:.2}); \
                     src rank {s} on {} NIC {}, dst rank {d} on {} NIC {}",
                    r.bw_gbps,
                    r.bw_gbps / median.max(f64::MIN_POSITIVE) * 100.0,
                    median,
                    text(r, |d| &d.src_host),
                    text(r, |d| &d.src_nic),
                    text(r, |d| &d.dst_host),
                    text(r, |d| &d.dst_nic),
                ));
            }
        }
        if outliers == 0 {
            out.push(format!(
                "# no pair at {size} B below {outlier}% of the median {median:.2} Gbps"
            ));
        }
        // A slow node is judged against the pairs without it (see `locate`): with three
        // nodes, four of six pairs involve a slow one and a global median is its own number.
        if n >= 3 {
            let pairs: Vec<PairBw> = rs
                .iter()
                .map(|r| PairBw {
                    src: src_of(r),
                    dst: r.peer.unwrap_or(0) as usize,
                    gbps: r.bw_gbps,
                })
                .collect();
            let found = locate::locate(n, &pairs, suspect_below / 100.0);
            if found.is_empty() {
                out.push(format!(
                    "# no suspect at {size} B: every rank's pairs (sending and receiving) are at \
                     {suspect_below}% or more of the median of the pairs without it"
                ));
            }
            for s in found {
                let place = rs
                    .iter()
                    .find(|x| src_of(x) == s.rank)
                    .map(|x| {
                        format!(
                            "{} NIC {}",
                            text(x, |d| &d.src_host),
                            text(x, |d| &d.src_nic)
                        )
                    })
                    .unwrap_or_else(|| "?".into());
                out.push(format!(
                    "# suspect at {size} B: rank {} on {place} ({}): {}",
                    s.rank,
                    s.direction.describe(),
                    s.evidence()
                ));
            }
            out.extend(rail_suspects(&rs, n, size, suspect_below));
        }
    }
    if let Some(min) = min_bw {
        let below: Vec<String> = records
            .iter()
            .filter(|r| r.bw_gbps < min)
            .map(|r| {
                format!(
                    "{} -> {} at {} B ({:.2} Gbps)",
                    src_of(r),
                    r.peer.unwrap_or(0),
                    r.size_bytes,
                    r.bw_gbps
                )
            })
            .collect();
        if below.is_empty() {
            out.push(format!("# --min-bw {min}: every pair passed"));
        } else {
            out.push(format!(
                "# --min-bw {min}: FAILED, {} pair(s) below: {}",
                below.len(),
                below.join(", ")
            ));
        }
    }
    out
}

/// Per-rail suspects of one size from the records' `rail_gbps` (each rail measured alone):
/// the suspect NIC of a node, named by rail and domain.
fn rail_suspects(rs: &[&Record], n: usize, size: u64, suspect_below: f64) -> Vec<String> {
    let src_of = |r: &Record| PairsDetail::of(r).map_or(0, |d| d.src as usize);
    let per = |r: &Record| -> Vec<f64> {
        PairsDetail::of(r)
            .and_then(|d| d.rail_gbps)
            .unwrap_or_default()
    };
    let rails = rs.iter().map(|r| per(r).len()).max().unwrap_or(0);
    let mut out = Vec::new();
    if rails < 2 {
        return out;
    }
    for rail in 0..rails {
        let pairs: Vec<PairBw> = rs
            .iter()
            .filter_map(|r| {
                per(r).get(rail).map(|&g| PairBw {
                    src: src_of(r),
                    dst: r.peer.unwrap_or(0) as usize,
                    gbps: g,
                })
            })
            .collect();
        for s in locate::locate(n, &pairs, suspect_below / 100.0) {
            let rec = rs.iter().find(|x| src_of(x) == s.rank);
            let detail = rec.and_then(|x| PairsDetail::of(x));
            let host = detail
                .as_ref()
                .and_then(|d| d.src_host.as_deref())
                .unwrap_or("?");
            let domain = detail
                .as_ref()
                .and_then(|d| d.per_rail.as_ref())
                .and_then(Value::as_array)
                .and_then(|a| a.get(rail))
                .and_then(|v| v.get("domain"))
                .and_then(Value::as_str)
                .unwrap_or("?");
            out.push(format!(
                "# suspect NIC at {size} B: rank {} on {host} rail {rail} (domain {domain}) ({}), \
                 each rail measured alone: {}",
                s.rank,
                s.direction.describe(),
                s.evidence()
            ));
        }
    }
    out
}

/// How the pairs of a run are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    OneAtATime,
    Rounds(Schedule),
}

impl Plan {
    /// Steps per size (pairs one at a time, or rounds of n pairs at once) and pair measurements
    /// per size among `n` ranks.
    pub fn cost(self, n: u32) -> (u64, u64) {
        let n64 = n as u64;
        match self {
            Plan::OneAtATime => {
                let p = n64 * n64.saturating_sub(1);
                (p, p)
            }
            Plan::Rounds(s) => {
                let rounds = s.shifts(n).len() as u64
                    + if s.retests(n) {
                        RETEST_ROUNDS as u64
                    } else {
                        0
                    };
                (rounds, rounds * n64)
            }
        }
    }
}

/// The header lines that say how pairs are scheduled and how long the whole run may measure.
fn budget_lines(
    n: u32,
    sizes: &[u64],
    plan: Plan,
    max_time: f64,
    iterations: impl Fn(u64) -> (u64, u64),
) -> Vec<String> {
    let (steps, pairs) = plan.cost(n);
    let plural = |c: u64| if c == 1 { "" } else { "s" };
    let how = match plan {
        Plan::OneAtATime => format!("one pair at a time, {steps} steps"),
        Plan::Rounds(s) => {
            let shifts = s.shifts(n);
            let first = shifts.len() as u64;
            let what = match s {
                Schedule::All => "all ordered pairs".to_string(),
                Schedule::Ring => "ring, each rank with its two neighbours".to_string(),
                Schedule::Random { k, seed } => {
                    format!(
                        "random, {k} partner{} each way per rank (seed {seed})",
                        plural(k as u64)
                    )
                }
            };
            let list = if first <= 8 {
                format!(
                    ", shift{} {}",
                    plural(first),
                    shifts
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                String::new()
            };
            let mut t = format!(
                "{what}: {first} round{} of {n} pairs at once{list} (round k: every rank r sends to \
                 r+k and receives from r-k)",
                plural(first)
            );
            if s.retests(n) {
                t.push_str(&format!(
                    ", then {RETEST_ROUNDS} retest rounds whose shifts pair each suspect of the \
                     first stage with ranks not named"
                ));
            }
            t
        }
    };
    let per_size: Vec<String> = sizes
        .iter()
        .map(|&s| {
            let (iters, warmup) = iterations(s);
            format!("{warmup}+{iters} at {}", crate::size::human(s))
        })
        .collect();
    let budget = steps as f64 * sizes.len() as f64 * max_time * 1.1;
    vec![
        format!(
            "# schedule: {how}; {} size{} = {} pair measurements",
            sizes.len(),
            plural(sizes.len() as u64),
            pairs * sizes.len() as u64
        ),
        format!(
            "# time budget: each pair stops after its warm-up+timed windows ({}) or {max_time} s \
             timed (warm-up at most {:.3} s), whichever comes first: at most {budget:.1} s of \
             measurement in all, plus one window per pair",
            per_size.join(", "),
            max_time / 10.0
        ),
    ]
}

/// How the sender ended a pair's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopReason {
    /// `-n` timed windows were sent.
    Count,
    /// `--max-time` ran out first.
    Time,
}

impl StopReason {
    fn name(self) -> &'static str {
        match self {
            StopReason::Count => "count",
            StopReason::Time => "time",
        }
    }
}

/// This rank's part of one round: a write stream to `to` and/or from `from`, at once.
///
/// The sender decides how long its pair runs: warm-up ends after `-w` windows or a tenth of
/// `--max-time`, and the timed part after `-n` windows or `--max-time`, whichever comes first
/// (at least one timed window). It says so with a STOP in place of the window the receiver's
/// READY asked for, so both ends finish with nothing in flight and a link 100 times slower than
/// the others still yields its number within the budget.
fn stream(
    mesh: &mut Mesh,
    spec: &PairsSpec,
    to: Option<u32>,
    from: Option<u32>,
    verify: bool,
    slow: Option<Duration>,
    only_rail: Option<usize>,
) -> Result<Measured, BenchError> {
    let me = mesh.me();
    let size = spec.size;
    let win = spec.slots.max(1);
    let per_window = spec.window;
    let warm_budget = spec.max_time / 10;
    // Sender state.
    let mut samples = Samples::with_capacity(spec.iters.min(1 << 16) as usize);
    let mut sw = 0u64; // window being sent
    let mut in_flight: Option<Instant> = None;
    let mut readies = 0u64; // READY words received (the next one expected is for window `readies`)
    let mut acks = 0u64;
    let mut started: Option<Instant> = None; // first window posted
    let mut timed: Option<(u64, Instant)> = None; // first timed window and when it started
    let mut stopped: Option<StopReason> = None;
    // One rail alone carries whole messages when a rail is measured by itself.
    let routes = |mesh: &Mesh, a: u32, b: u32| match only_rail {
        Some(rail) => vec![efabench_fabric::Stripe {
            rail,
            off: 0,
            len: size,
        }],
        None => mesh.route(a, b, size, false),
    };
    let send_routes = to.map(|d| routes(mesh, me, d));
    let recv_routes = from.map(|s| routes(mesh, s, me));
    // Receiver state.
    let mut rw = 0u64;
    let mut got = 0u64;
    let mut rstopped = false;
    let expect = recv_routes
        .as_ref()
        .map(|r| r.len() as u64 * per_window)
        .unwrap_or(0);
    let mut errors = 0u64;
    if let Some(s) = from {
        mesh.signal(s, cq_data(Kind::Ready, 0, me))?;
    }
    let mut filled = u64::MAX;
    loop {
        // Sort what arrived.
        while let Some(d) = mesh.arrivals.pop_front() {
            let (kind, it, src) = parse_cq_data(d).ok_or_else(|| {
                BenchError::failed(format!("rank {me} got CQ data {d:#x} no pairs peer sends"))
            })?;
            match kind {
                Kind::Payload if Some(src) == from && it == rw % ITER_MOD && !rstopped => got += 1,
                Kind::Stop if Some(src) == from && it == rw % ITER_MOD && got == 0 => {
                    rstopped = true
                }
                Kind::Ready if Some(src) == to && it == readies % ITER_MOD => readies += 1,
                Kind::Ack if Some(src) == to && it == acks % ITER_MOD => acks += 1,
                _ => {
                    return Err(BenchError::failed(format!(
                        "rank {me} got {kind:?} for window {it} from rank {src}, out of step \
                         (expected payload of window {rw} from {from:?}, ready {readies} / ack {acks} from {to:?})"
                    )))
                }
            }
        }
        let mut moved = false;
        // Sender: fill, wait for READY, post the window (or STOP), wait for the ACK.
        if let (Some(dst), Some(routes)) = (to, send_routes.as_ref()) {
            if stopped.is_none() {
                if in_flight.is_none() && filled != sw && verify {
                    mesh.drain_local()?;
                    for slot in 0..win {
                        for (i, st) in routes.iter().enumerate() {
                            mesh.fill_send(
                                slot * size + st.off,
                                st.len,
                                pattern::seed(sw, me, dst, (slot as u32) << 8 | i as u32),
                            )?;
                        }
                    }
                    filled = sw;
                    moved = true;
                }
                if in_flight.is_none() && readies > sw {
                    let now = Instant::now();
                    let began = *started.get_or_insert(now);
                    if timed.is_none()
                        && (sw >= spec.warmup || now.duration_since(began) >= warm_budget)
                    {
                        timed = Some((sw, now));
                        mesh.count_from_now(true);
                    }
                    let stop = timed.and_then(|(first, at)| {
                        if sw >= first + spec.iters {
                            Some(StopReason::Count)
                        } else if sw > first && now.duration_since(at) >= spec.max_time {
                            Some(StopReason::Time)
                        } else {
                            None
                        }
                    });
                    if let Some(why) = stop {
                        mesh.count_from_now(false);
                        mesh.signal(dst, cq_data(Kind::Stop, sw, me))?;
                        stopped = Some(why);
                    } else {
                        let t0 = Instant::now();
                        if let Some(d) = slow {
                            std::thread::sleep(d);
                        }
                        let data = cq_data(Kind::Payload, sw, me);
                        for pos in 0..per_window as usize {
                            let slot = pos % win;
                            for st in routes {
                                let off = slot * size + st.off;
                                mesh.write(dst, st.rail, off, st.len, off, data)?;
                            }
                        }
                        in_flight = Some(t0);
                    }
                    moved = true;
                }
                if let Some(t0) = in_flight {
                    if acks > sw {
                        let dt = t0.elapsed().as_nanos() as u64;
                        if timed.is_some() {
                            samples.push(dt);
                        }
                        in_flight = None;
                        sw += 1;
                        moved = true;
                    }
                }
            }
        }
        // Receiver: count, ACK, check, READY.
        if let (Some(src), Some(routes)) = (from, recv_routes.as_ref()) {
            if !rstopped && got >= expect {
                if got > expect {
                    return Err(BenchError::failed(format!(
                        "rank {me} got {got} stripes from rank {src} in window {rw}, expected {expect}"
                    )));
                }
                mesh.signal(src, cq_data(Kind::Ack, rw, me))?;
                if verify {
                    for slot in 0..win.min(per_window as usize) {
                        for (i, st) in routes.iter().enumerate() {
                            errors += mesh.check_recv(
                                slot * size + st.off,
                                st.len,
                                pattern::seed(rw, src, me, (slot as u32) << 8 | i as u32),
                            );
                        }
                    }
                }
                rw += 1;
                got = 0;
                mesh.signal(src, cq_data(Kind::Ready, rw, me))?;
                moved = true;
            }
        }
        if (to.is_none() || stopped.is_some()) && (from.is_none() || rstopped) {
            break;
        }
        if !moved {
            let (rw_, sw_, rdone, sdone) = (rw, sw, rstopped, stopped.is_some());
            mesh.wait_progress(move |_| {
                let mut parts = Vec::new();
                if let Some(s) = from {
                    if !rdone {
                        parts.push(format!("window {rw_} from rank {s}"));
                    }
                }
                if let Some(d) = to {
                    if !sdone {
                        parts.push(format!("rank {d} to acknowledge window {sw_}"));
                    }
                }
                parts.join(" and ")
            })?;
        }
    }
    mesh.drain_local()?;
    let mut extra = Map::new();
    extra.insert("per_rail".into(), mesh.per_rail());
    if let Some(why) = stopped {
        extra.insert("stopped_by".into(), json!(why.name()));
    }
    if let Some((first, _)) = timed {
        extra.insert("warmup_done".into(), json!(first));
    }
    Ok(Measured {
        samples_ns: samples.into_vec(),
        errors,
        extra,
    })
}

/// The record fields of one pair, beyond the common ones.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PairsDetail {
    /// The sending rank (`peer` is the receiving one), its host and NIC, and the receiver's.
    pub src: u32,
    pub src_host: Option<String>,
    pub dst_host: Option<String>,
    pub src_nic: Option<String>,
    pub dst_nic: Option<String>,
    pub window: u64,
    /// Why the pair stopped before `-n` windows (`--max-time`); absent when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    pub lat_kind: String,
    /// The ring shift of the round (null with `--one-at-a-time`).
    pub round: Option<u32>,
    /// `first` or `retest`.
    pub stage: String,
    /// The sender's bytes and operations per rail, as the mesh counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_rail: Option<Value>,
    /// Each rail measured alone, Gbps (two rails or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail_gbps: Option<Vec<f64>>,
}

impl PairsDetail {
    /// The typed fields of a pairs record (`None` for another record).
    pub fn of(r: &Record) -> Option<PairsDetail> {
        crate::queue::record::read(r)
    }
}

/// Runs one rank of `pairs`; exit 1 (on rank 0) when a pair is below `--min-bw` (each such
/// pair's record carries a [`Gate`], which the harness checks and names).
pub fn run_pairs(args: &PairsArgs, build: &harness::BuildInfo) -> Result<i32, BenchError> {
    let mut b = Pairs::new(args)?;
    let run = harness::run(&mut b, args, build);
    if run.is_err() {
        // A failed run can leave writes posted to a peer that stopped reading (or reads too
        // slowly); libfabric 1.17's tcp provider (ofi_rxm) crashes with SIGSEGV when such an
        // endpoint and its registrations are closed. The process exits next and the kernel
        // releases the sockets and memory, so the fabric is not torn down here.
        std::mem::forget(b.mesh.take());
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_reject_with_a_hint() {
        assert_eq!(schedule_arg("all"), Ok(Schedule::All));
        assert_eq!(schedule_arg("ring"), Ok(Schedule::Ring));
        assert_eq!(
            schedule_arg("random:8"),
            Ok(Schedule::Random { k: 8, seed: 1 })
        );
        assert_eq!(
            schedule_arg("random:3:77"),
            Ok(Schedule::Random { k: 3, seed: 77 })
        );
        for bad in [
            "",
            "random",
            "random:0",
            "random:x",
            "random:2:y",
            "random:2:3:4",
            "star",
        ] {
            let e = schedule_arg(bad).unwrap_err();
            assert!(e.contains("pass --pairs all"), "{bad}: {e}");
        }
    }

    #[test]
    fn shifts_per_schedule() {
        assert_eq!(Schedule::All.shifts(5), vec![1, 2, 3, 4]);
        assert_eq!(Schedule::Ring.shifts(16), vec![1, 15]);
        assert_eq!(Schedule::Ring.shifts(2), vec![1]);
        let r = Schedule::Random { k: 4, seed: 9 }.shifts(64);
        assert_eq!(r.len(), 4);
        assert!(r.iter().all(|&k| (1..64).contains(&k)));
        // The same seed gives the same shifts on every rank; another seed other ones.
        assert_eq!(r, Schedule::Random { k: 4, seed: 9 }.shifts(64));
        assert_ne!(r, Schedule::Random { k: 4, seed: 10 }.shifts(64));
        // More partners than ranks: every shift, and no retest.
        let all = Schedule::Random { k: 50, seed: 1 };
        assert_eq!(all.shifts(8), (1..8).collect::<Vec<_>>());
        assert!(!all.retests(8));
        assert!(Schedule::Ring.retests(16));
        assert!(!Schedule::Ring.retests(3));
    }

    #[test]
    fn cost_is_rounds_times_ranks() {
        assert_eq!(Plan::Rounds(Schedule::All).cost(64), (63, 63 * 64));
        assert_eq!(Plan::Rounds(Schedule::Ring).cost(1024), (4, 4 * 1024));
        assert_eq!(
            Plan::Rounds(Schedule::Random { k: 10, seed: 1 }).cost(1024),
            (12, 12 * 1024)
        );
        assert_eq!(Plan::OneAtATime.cost(4), (12, 12));
    }

    #[test]
    fn retest_shift_pairs_the_suspect_with_ranks_not_named() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            pairs: PairsArgs,
        }
        let args = <Cli as clap::Parser>::parse_from(["x", "--pairs", "ring"]).pairs;
        let b = Pairs::new(&args).unwrap();
        let n = 16u32;
        // A ring where the pairs of ranks 5 and 9 are a tenth of the others.
        let slow = [5u32, 9];
        for k in [1, n - 1] {
            for s in 0..n {
                let d = (s + k) % n;
                let gbps = if slow.contains(&s) || slow.contains(&d) {
                    0.1
                } else {
                    1.0
                };
                b.seen.borrow_mut().push((
                    4096,
                    PairBw {
                        src: s as usize,
                        dst: d as usize,
                        gbps,
                    },
                ));
            }
        }
        let mut b = b;
        b.used = vec![(4096, 1), (4096, n - 1)];
        for j in 0..RETEST_ROUNDS {
            let k = b.choose_retest(n, 4096, j);
            assert!(!b.used.contains(&(4096, k)), "{k} was measured already");
            for s in slow {
                assert!(
                    !slow.contains(&((s + k) % n)),
                    "shift {k}: {s} sends to a suspect"
                );
                assert!(
                    !slow.contains(&((s + n - k) % n)),
                    "shift {k}: {s} hears a suspect"
                );
            }
            b.used.push((4096, k));
        }
    }
}
