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
//! # The loop
//! The sender's windows run in the harness's budgeted loop ([`harness::Ctx::run_budgeted`]): it
//! owns the warm-up, the clock (one sample per window, from its post to the receiver's
//! acknowledgement) and the stop decision; `stream.rs` says what one window is (fill and wait for
//! READY, untimed; post and wait for ACK, timed). The receiver learns of the stop in band: the
//! sender's last timed window carries `Stop` in its CQ data in place of `Payload`, and the
//! receiver sends no READY after it, so the number of windows is known only at the end and
//! differs between the pairs of a round. Every rank of a ring shift sends and receives at once:
//! while its sender waits, its receiver side moves (count, ACK, check, READY), and after its
//! sender's last window it runs until its own source's last window; a receiver alone
//! (`--one-at-a-time`) times nothing and only does that.
//!
//! The job's health is still checked while it waits ([`Mesh::wait_progress`]), every poll that
//! moves counts as progress, and each round is one point of the harness: it measures every pair
//! of a ring shift at once and [`Benchmark::points_of`] turns it into a record per pair.
//!
//! # Output
//! One record per pair (`peer` = destination, `src` in the record, `stopped_by` count or time),
//! an n × n table of Gbps after the sweep, the pairs below `--outlier PCT` of the median of their
//! size named with host and NIC of both ends, and the suspect ranks with the direction of the
//! fault and one line of evidence each: a rank's pairs are compared with the pairs that do not
//! involve it ([`crate::locate`]), below `--suspect-below PCT`. `--min-bw GBPS` makes the run
//! exit 1 when any pair is below it.
//!
//! # Files
//! - `mod.rs`: the benchmark on the harness — the points of a run (a round each: a ring shift,
//!   a retest round or one pair alone), one measured round per rank, and the record of each
//!   pair of the round;
//! - `args.rs`: the options and their parsers;
//! - `schedule.rs`: which shifts a run measures, the retest shifts chosen from the suspects, and
//!   the header that states the schedule and the time budget;
//! - `stream.rs`: the write stream one rank runs in a round (sender and receiver at once);
//! - `summary.rs`: what rank 0 prints after the sweep (matrix, outliers, suspects, `--min-bw`).

mod args;
mod schedule;
mod stream;
mod summary;

use std::cell::RefCell;
use std::time::Duration;

use efabench_record::Record;

use crate::error::BenchError;
use crate::harness::{
    self, Benchmark, Budget, Ctx, Gate, Measured, Needs, Point, RunFacts, TimedBy,
};
use crate::locate::PairBw;
use crate::mesh::{open_mesh, run_on_mesh, Mesh};
use crate::stats::{gbps, Samples};

pub use args::PairsArgs;
pub use schedule::{Plan, Schedule, RETEST_ROUNDS};
pub use summary::summarize;

use schedule::budget_lines;
use stream::stream;
pub use stream::RoundFacts;

/// Most bytes a pair's window touches per buffer (slots beyond it are reused).
const FOOTPRINT: u64 = 1 << 20;

/// One point: a size and a round, measured at once: every pair of a ring shift (a record each),
/// or one pair alone.
#[derive(Clone, Debug)]
pub struct PairsSpec {
    size: usize,
    /// Windows and time of the sender's warm-up and timed part.
    budget: Budget,
    slots: usize,
    /// Messages per window.
    window: u64,
    /// Ring shift k (every rank r → r + k), or the one pair measured alone.
    round: Round,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    Shift(u32),
    Alone {
        src: u32,
        dst: u32,
    },
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
    slow: Option<Duration>,
    /// Rank 0: the pairs measured so far (size, pair), for choosing retest shifts.
    seen: RefCell<Vec<(u64, PairBw)>>,
    /// The shifts measured at the current size (first stage and retests chosen so far).
    used: Vec<(u64, u32)>,
    /// The shift of the retest round being measured.
    retest_shift: u32,
    /// Longest timed part of one pair, seconds: `--max-time`, or less where a deadline leaves
    /// less (decided by rank 0 at the end of setup, see [`PairsArgs::deadline`]).
    max_time: f64,
}

impl<'a> Pairs<'a> {
    pub fn new(args: &'a PairsArgs) -> Result<Self, BenchError> {
        let sizes = args.groups.sweep.sizes()?;
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
            slow: None,
            seen: RefCell::new(Vec::new()),
            used: Vec::new(),
            retest_shift: 0,
            max_time: args.max_time,
        })
    }

    fn slots(&self, size: u64) -> usize {
        (FOOTPRINT / size.max(1)).clamp(1, self.args.window) as usize
    }

    /// With a deadline: rank 0 shares what setup left of it among the rounds (each rail alone
    /// too on several rails, warm-up included) and every rank takes its figure, so the pairs
    /// of a round stop together. Returns the header line that says so.
    fn fit_deadline(
        &mut self,
        ctx: &Ctx,
        deadline: std::time::Instant,
        plan: Plan,
        rails: usize,
    ) -> Result<String, BenchError> {
        let left = deadline
            .saturating_duration_since(std::time::Instant::now())
            .as_secs_f64();
        let steps = plan.cost(ctx.world).0.max(1) * self.sizes.len().max(1) as u64;
        let rails = if rails > 1 { 2.0 } else { 1.0 };
        let max = self.args.max_time;
        let t = from_rank0(ctx, || {
            let fit = left * DEADLINE_SHARE / (steps as f64 * rails * 1.1);
            fit.clamp(MIN_PAIR_TIME_S, max).to_le_bytes().to_vec()
        })?;
        let t = <[u8; 8]>::try_from(t.as_slice())
            .ok()
            .map(f64::from_le_bytes)
            .filter(|t| t.is_finite() && *t > 0.0)
            .ok_or_else(|| BenchError::failed("rank 0 sent no valid time per pair"))?;
        self.max_time = t;
        Ok(format!(
            "# deadline: {left:.1} s left after setup for {steps} step(s); {:.0}% of it shared by \
             the pairs: at most {t:.3} s timed per pair (--max-time {} bounds it)",
            DEADLINE_SHARE * 100.0,
            self.args.max_time
        ))
    }
}

/// What rank 0 decides (`decide` runs there only), as every rank receives it.
fn from_rank0(ctx: &Ctx, decide: impl FnOnce() -> Vec<u8>) -> Result<Vec<u8>, BenchError> {
    let mine = if ctx.rank == 0 { decide() } else { Vec::new() };
    Ok(ctx
        .bs
        .all_gather(&mine)?
        .into_iter()
        .next()
        .unwrap_or_default())
}

/// Share of what is left after setup that the pairs' timed parts and warm-ups get; the rest
/// covers each round's barrier, its last window and the records.
const DEADLINE_SHARE: f64 = 0.7;

/// Shortest timed part per pair under a deadline, seconds: below it a pair's figure is one
/// window's.
const MIN_PAIR_TIME_S: f64 = 0.01;

impl<'a> Benchmark for Pairs<'a> {
    type Spec = PairsSpec;

    fn name(&self) -> &'static str {
        "pairs"
    }

    fn needs(&self) -> Needs {
        Needs::fabric(2).launch_with(4)
    }

    fn timed_by(&self) -> TimedBy {
        TimedBy::Budgeted
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let buf = self
            .sizes
            .iter()
            .map(|&s| s as usize * self.slots(s))
            .max()
            .unwrap_or(1);
        let (m, facts) = open_mesh(ctx, buf, buf)?;
        let mine = m.group().domains();
        let mut mine_d = mine.clone();
        mine_d.dedup();
        let all = ctx.bs.all_gather(mine_d.join(",").as_bytes())?;
        self.nics = all
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        self.slow = crate::test_hooks::slow_rank_delay(ctx.rank);
        let plan = if self.args.one_at_a_time {
            Plan::OneAtATime
        } else {
            Plan::Rounds(self.args.schedule)
        };
        let deadline_line = match self.args.deadline {
            Some(d) => Some(self.fit_deadline(ctx, d, plan, m.rails())?),
            None => None,
        };
        let mut facts = facts.detail(PairsFacts {
            schedule: if self.args.one_at_a_time {
                "one-at-a-time".to_string()
            } else {
                self.args.schedule.to_string()
            },
        });
        facts.header.push(format!(
            "# pairs: write stream, window {}; bw per ordered pair (peer = destination, src in the record)",
            self.args.window,
        ));
        facts.header.extend(budget_lines(
            ctx.world,
            &self.sizes,
            plan,
            self.max_time,
            |size| self.args.groups.sweep.iterations(size, self.args.window),
        ));
        facts.header.extend(deadline_line);
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
            let (iters, warmup) = self.args.groups.sweep.iterations(size, self.args.window);
            // Under a deadline one warm-up window: over a slow link two would take a round's
            // share alone (the first window has connected and touched every buffer).
            let warmup = if self.args.deadline.is_some() {
                warmup.min(1)
            } else {
                warmup
            };
            let spec = |round| PairsSpec {
                size: size as usize,
                budget: Budget {
                    iters,
                    warmup,
                    max_time: Duration::from_secs_f64(self.max_time),
                },
                slots: self.slots(size),
                window: self.args.window,
                round,
            };
            let rounds: Vec<Round> = if self.args.one_at_a_time {
                (0..n)
                    .flat_map(|src| {
                        (0..n)
                            .filter(move |&dst| dst != src)
                            .map(move |dst| Round::Alone { src, dst })
                    })
                    .collect()
            } else {
                let mut r: Vec<Round> = self
                    .args
                    .schedule
                    .shifts(n)
                    .into_iter()
                    .map(Round::Shift)
                    .collect();
                if self.args.schedule.retests(n) {
                    r.extend((0..RETEST_ROUNDS).map(Round::Retest));
                }
                r
            };
            out.extend(rounds.into_iter().map(spec));
        }
        Ok(out)
    }

    fn label(&self, spec: &PairsSpec) -> String {
        let size = crate::size::human(spec.size as u64);
        match spec.round {
            Round::Shift(k) => format!("{size} shift {k}"),
            Round::Retest(j) => format!("{size} retest {}", j + 1),
            Round::Alone { src, dst } => format!("{size} {src} -> {dst}"),
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
        let (me, n) = (ctx.rank, ctx.world);
        let size = spec.size as u64;
        if let Round::Shift(k) = spec.round {
            self.used.push((size, k));
        }
        if let Round::Retest(j) = spec.round {
            // Rank 0 chooses from what it has seen; every rank takes its word.
            let k = from_rank0(ctx, || {
                self.choose_retest(n, size, j).to_le_bytes().to_vec()
            })?;
            let k = <[u8; 4]>::try_from(k.as_slice())
                .ok()
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
            Round::Alone { src, dst } => ((me == src).then_some(dst), (me == dst).then_some(src)),
        };
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
        let (mut m, mut facts) = stream(ctx, mesh, spec, to, from, slow, None)?;
        let rails = mesh.rails();
        if rails > 1 {
            // Each rail alone, for a share of the pair's budget: a slow NIC of a node shows as
            // its rail's column, where the striped stream only shows the node.
            let b = spec.budget;
            let share = PairsSpec {
                budget: Budget {
                    max_time: b.max_time / rails as u32,
                    iters: b.iters.div_ceil(rails as u64).max(1),
                    warmup: b.warmup.div_ceil(rails as u64),
                },
                ..spec.clone()
            };
            let mut per = Vec::with_capacity(rails);
            for rail in 0..rails {
                ctx.bs.barrier()?;
                let (r, _) = stream(ctx, mesh, &share, to, from, slow, Some(rail))?;
                m.errors += r.errors;
                let s = Samples::from_vec(r.samples_ns);
                per.push(gbps(
                    spec.size as u64 * s.len() as u64 * spec.window,
                    s.total_ns(),
                ));
            }
            facts.rail_gbps = Some(per);
        }
        Ok(m.detail(facts))
    }

    /// The record of the round's first pair; the harness asks [`Benchmark::points_of`], which
    /// gives one per pair (a pair alone: its only record, with every rank's errors summed).
    fn point(&self, ctx: &Ctx, spec: &PairsSpec, all: &[Measured]) -> Point {
        let (src, dst) = match spec.round {
            Round::Alone { src, dst } => (src, dst),
            Round::Shift(k) => (0, k % ctx.world),
            Round::Retest(_) => (0, self.retest_shift % ctx.world),
        };
        self.pair_point(ctx, spec, all, src, dst)
    }

    /// A record per pair of the round: the sender's samples, the receiver's errors (it verified
    /// what it got from this sender only).
    fn points_of(&self, ctx: &Ctx, spec: &PairsSpec, all: &[Measured]) -> Vec<Point> {
        let n = ctx.world;
        let k = match spec.round {
            Round::Alone { .. } => return vec![self.point(ctx, spec, all)],
            Round::Shift(k) => k,
            Round::Retest(_) => self.retest_shift,
        };
        (0..n)
            .map(|src| {
                let dst = (src + k) % n;
                let mut p = self.pair_point(ctx, spec, all, src, dst);
                p.errors = all.get(dst as usize).map_or(0, |m| m.errors);
                p
            })
            .collect()
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

impl Pairs<'_> {
    /// The record of pair `src` → `dst` of a round: what the sender timed and said.
    fn pair_point(
        &self,
        ctx: &Ctx,
        spec: &PairsSpec,
        all: &[Measured],
        src: u32,
        dst: u32,
    ) -> Point {
        let empty = Measured::default();
        let m = all.get(src as usize).unwrap_or(&empty);
        let facts: RoundFacts = m.part().cloned().unwrap_or_default();
        // Warm-up windows actually sent (fewer than -w when a tenth of --max-time ran out).
        let warmup = facts.warmup_done.unwrap_or(spec.budget.warmup);
        let window = self.args.window;
        let p = Point::timed(&m.samples_ns, spec.size as u64, window, window);
        let bw = p.bw_gbps;
        self.seen.borrow_mut().push((
            spec.size as u64,
            PairBw {
                src: src as usize,
                dst: dst as usize,
                gbps: bw,
            },
        ));
        let detail = PairsDetail {
            src,
            src_host: ctx.hosts.get(src as usize).cloned(),
            dst_host: ctx.hosts.get(dst as usize).cloned(),
            src_nic: self.nics.get(src as usize).cloned(),
            dst_nic: self.nics.get(dst as usize).cloned(),
            window,
            stopped_by: facts.stopped_by.map(|w| w.name().to_string()),
            lat_kind: "per message (window time / window)".into(),
            round: match spec.round {
                Round::Shift(k) => Some(k),
                Round::Retest(_) => Some(self.retest_shift),
                Round::Alone { .. } => None,
            },
            stage: match spec.round {
                Round::Retest(_) => "retest",
                _ => "first",
            }
            .into(),
            per_rail: facts.per_rail,
            rail_gbps: facts.rail_gbps,
            window_gbps: window_gbps(&m.samples_ns, spec.size as u64 * window),
        };
        Point {
            variant: "write-stream".into(),
            // Windows actually timed: fewer than -n when --max-time ran out first.
            iters: m.samples_ns.len() as u64,
            warmup,
            peer: Some(dst),
            gate: self.args.min_bw.map(|min| Gate {
                what: format!("pair {src} -> {dst}, --min-bw {min} Gbps"),
                value: bw,
                min,
            }),
            ..p
        }
        .detail(detail)
    }
}

/// Fields every record of a pairs run repeats.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PairsFacts {
    /// `--pairs` as a schedule (`all`, `ring`, `random:K:SEED`) or `one-at-a-time`.
    pub schedule: String,
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
    pub per_rail: Option<Vec<crate::mesh::RailLoad>>,
    /// Each rail measured alone, Gbps (two rails or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail_gbps: Option<Vec<f64>>,
    /// Gbps of the timed windows, in order (at most [`MAX_WINDOWS`], evenly spread when there
    /// were more): the pair's own spread, which the cluster verdict uses as noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_gbps: Option<Vec<f64>>,
}

/// Most window figures a pair's record carries.
pub const MAX_WINDOWS: usize = 32;

/// Gbps of each timed window of `bytes` (at most [`MAX_WINDOWS`] of them, evenly spread),
/// four significant digits; none for no window.
fn window_gbps(samples_ns: &[u64], bytes: u64) -> Option<Vec<f64>> {
    if samples_ns.is_empty() {
        return None;
    }
    let n = samples_ns.len();
    let picks = n.min(MAX_WINDOWS);
    Some(
        (0..picks)
            .map(|i| samples_ns[i * n / picks])
            .map(|ns| {
                let g = gbps(bytes, ns.max(1));
                let digits = (3 - g.abs().max(1e-9).log10().floor() as i32).clamp(0, 12);
                let f = 10f64.powi(digits);
                (g * f).round() / f
            })
            .collect(),
    )
}

impl PairsDetail {
    /// The typed fields of a pairs record (`None` for another record).
    pub fn of(r: &Record) -> Option<PairsDetail> {
        crate::queue::record::read(r)
    }
}

/// Runs one rank of `pairs`; exit 1 (on rank 0) when a pair is below `--min-bw` (each such
/// pair's record carries a [`Gate`], which the harness checks and names).
pub fn run_pairs(
    args: &PairsArgs,
    build: &harness::BuildInfo,
) -> Result<crate::Verdict, BenchError> {
    run_on_mesh(&mut Pairs::new(args)?, args, build, |b| b.mesh.take())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_figures_are_capped_and_evenly_spread() {
        assert_eq!(window_gbps(&[], 1000), None);
        // 1 MB in 1 ms is 8 Gbps; in 2 ms, 4.
        let w = window_gbps(&[1_000_000, 2_000_000], 1_000_000).unwrap();
        assert_eq!(w, [8.0, 4.0]);
        let many: Vec<u64> = (1..=100).map(|i| i * 1_000_000).collect();
        let w = window_gbps(&many, 1_000_000).unwrap();
        assert_eq!(w.len(), MAX_WINDOWS);
        // The first window and then every 100/32-th: 8/1, 8/4 (index 3), ...
        assert_eq!((w[0], w[1]), (8.0, 2.0));
        // Four significant digits.
        assert_eq!(window_gbps(&[3_000_000], 1_000_000).unwrap(), [2.667]);
    }
}
