//! `efabench alltoallv`: an all-to-all whose per-(source, destination) byte counts differ, with
//! nccl-tests' `alltoallv_perf` semantics.
//!
//! * `--counts` gives the matrix ([`counts`]): `uniform`, `zipf:S` (hot destinations),
//!   `moe:T,H,K,E` (a token routing, seeded by `--seed`) or `file:PATH` (a traffic matrix in
//!   nccl-tests' format). For `uniform` and `zipf` each size of the `-b/-e` sweep is one rank's
//!   whole send buffer, shared out by the shape; `moe` and `file` fix every byte, so `-b` must
//!   equal `-e` and cover the largest bytes a rank sends or receives (nccl-tests' rule).
//! * `bw_gbps` = algbw = the busiest rank's bytes (the largest of every rank's bytes sent and
//!   received, own chunk included) / time, `busbw_gbps` = algbw × (n−1)/n, where time is the
//!   slowest rank's mean time per iteration: nccl-tests' alltoallv definitions.
//! * `size_bytes` is the sweep's size (one rank's send buffer, as `-b/-e` say);
//!   `counts_bytes[src][dst]` the matrix; `matrix_gbps[src][dst]` each cell over its mean arrival
//!   time at `dst` in the timed loop, `probe_matrix_gbps` over its median arrival time in the
//!   barrier-started probes after it; `slowest_rank`, `rank_lat_us` and `rank_bytes` every rank's share.
//!
//! The exchange is `alltoall`'s ([`collective::exchange`]): RDMA writes with remote CQ data, every chunk
//! (stripe) filled with the pattern of (iteration, source, destination, stripe) and checked in
//! every warm-up iteration and once after the timed loop; a cell of 0 bytes is announced by an
//! 8-byte signal, so every rank still hears from every rank in every iteration.
//! * `--window` and `--bind` are the all-to-all layer's ([`collective::window`],
//!   [`collective::placement`]); `--window auto` judges a point by the largest chunk this rank
//!   sends in it, and the default window is all (auto measured within noise of it for zipf
//!   matrices). Records carry `window` and `bind`.
//! * `--notify` is the all-to-all layer's too ([`collective::notify`]); the record's `notify`
//!   says whether the point's chunks carried CQ data, were signalled, or both (`mixed`).

pub mod counts;

use efabench_record::Record;
use serde::Serialize;

use crate::collective::exchange::{Op, Plan};
use crate::collective::notify::Notify;
use crate::collective::placement::{Bind, Placement};
use crate::collective::report::{self, Outcome};
use crate::collective::window::{window_arg, Window};
use crate::collective::{self, setup};
use crate::error::BenchError;
use crate::harness::{
    self, name_of, AllGroups, Benchmark, Ctx, Measured, Needs, Point, RunFacts, TimedBy,
};
use crate::mesh::{open_mesh, run_on_mesh, Mesh};
use counts::{Counts, CountsSpec};

/// Options of `alltoallv`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct AlltoallvArgs {
    /// Per-(source, destination) bytes: uniform, zipf:S (destination d gets a share
    /// ∝ 1/(d+1)^S), moe:T,H,K,E (T tokens of H bf16 elements per rank, each to K of E experts;
    /// a token goes once to each rank hosting one of its experts) or file:PATH (a square
    /// whitespace-separated matrix of bytes, row = source, as nccl-tests' alltoallv_perf reads).
    #[arg(long, default_value = "uniform", value_parser = counts_arg)]
    pub counts: CountsSpec,
    /// Seed of the moe routing.
    #[arg(long, default_value = "1", value_parser = seed_arg)]
    pub seed: u64,
    /// Print the per-peer bandwidth matrix (Gbps, source row → destination column) of each size.
    #[arg(long)]
    pub matrix: bool,
    /// Where each rank's data-path thread runs: auto (a core by its place among the host's
    /// ranks, over shm on small host pages with at most two ranks per core; else where the
    /// scheduler puts it), core (always bound) or none.
    #[arg(long, value_enum, default_value_t = Bind::Auto)]
    pub bind: Bind,
    /// Chunks in flight per rank: all (the default: every chunk posted at once), auto (2 over
    /// shm with a core per rank when the point's largest chunk is 16 KiB or more on small host
    /// pages and receivers copy it, --notify data; else all) or a number (1-65536). With
    /// zipf:1.1 at 8 and 16 ranks on a 16-core host, auto and all measured within noise of each
    /// other, so the default stays all.
    #[arg(long, default_value = "all", value_parser = window_arg)]
    pub window: Window,
    /// How a receiver learns a chunk arrived: auto (signal over shm with a core per rank on
    /// small host pages for chunks above the inject size, else data), data (every write carries
    /// remote CQ data) or signal (shm only: writes without CQ data, then one signal per chunk).
    #[arg(long, value_enum, default_value_t = Notify::Auto)]
    pub notify: Notify,
    /// Longest timed part of one size, in seconds: it stops after -n iterations or this,
    /// whichever comes first, on every rank at the same iteration (warm-up: a tenth of it).
    #[arg(long, default_value = "1", value_parser = harness::max_time_arg, allow_hyphen_values = true)]
    pub max_time: f64,
    #[command(flatten)]
    pub groups: AllGroups,
}

crate::impl_options!(AlltoallvArgs => groups);

fn counts_arg(s: &str) -> Result<CountsSpec, String> {
    s.parse()
}

fn seed_arg(s: &str) -> Result<u64, String> {
    harness::bounded(s, "--seed", 0, u64::MAX, "1")
}

/// One point: a size and its matrix.
#[derive(Clone, Debug)]
pub struct AlltoallvSpec {
    size: u64,
    counts: Counts,
    iters: u64,
    warmup: u64,
}

/// `alltoallv` on the shared harness.
pub struct Alltoallv<'a> {
    args: &'a AlltoallvArgs,
    sizes: Vec<u64>,
    /// The text of `file:`, read before anything opens (a missing file is bad input).
    file: Option<String>,
    mesh: Option<Mesh>,
    /// One matrix per size, made in `setup` (when the world size is known).
    matrices: Vec<(u64, Counts)>,
    placement: Placement,
    /// What the `auto` options resolve to on this run's mesh.
    tuning: setup::Tuning,
}

/// Bytes one rank sends and receives per iteration.
#[derive(Clone, Debug, Serialize)]
pub struct RankBytes {
    rank: usize,
    sent: u64,
    received: u64,
}

/// The record fields of `alltoallv` beyond the common ones.
#[derive(Clone, Debug, Serialize)]
pub struct AlltoallvDetail {
    counts_bytes: Vec<Vec<u64>>,
    busiest_bytes: u64,
    rank_bytes: Vec<RankBytes>,
    recv_imbalance: f64,
    bind: &'static str,
    window: usize,
    notify: &'static str,
}

/// The record fields every point of a run repeats.
#[derive(Clone, Debug, Serialize)]
pub struct AlltoallvRun {
    counts: String,
    seed: u64,
}

impl<'a> Alltoallv<'a> {
    /// The chunks this rank keeps in flight at a point of `counts`, judged by the largest chunk
    /// it sends there.
    fn window(&self, ctx: &Ctx, counts: &Counts) -> usize {
        let me = ctx.rank as usize;
        let n = ctx.world as usize;
        let largest = (0..n).filter(|&d| d != me).map(|d| counts.get(me, d)).max();
        self.tuning
            .in_flight(self.args.window, largest.unwrap_or(0) as usize, n)
    }

    pub fn new(args: &'a AlltoallvArgs) -> Result<Self, BenchError> {
        let sizes = args.groups.sweep.sizes()?;
        let file = match &args.counts {
            CountsSpec::File(p) => Some(counts::read_text(p)?),
            _ => None,
        };
        if !args.counts.is_shape() && sizes.len() != 1 {
            return Err(BenchError::usage(format!(
                "--counts {} sets every byte count itself: give -b and -e the same size (one \
                 rank's buffer, at least the largest bytes a rank sends or receives), e.g. -b 64M -e 64M",
                args.counts
            )));
        }
        Ok(Alltoallv {
            args,
            sizes,
            file,
            mesh: None,
            matrices: Vec::new(),
            placement: Placement::new(args.bind),
            tuning: setup::Tuning::default(),
        })
    }

    /// Every size's matrix for `n` ranks.
    fn matrices(&self, n: usize) -> Result<Vec<(u64, Counts)>, BenchError> {
        let fixed = match (&self.args.counts, &self.file) {
            (CountsSpec::File(p), Some(text)) => {
                Some(counts::parse_matrix(text, n).map_err(|e| {
                    BenchError::usage(format!("--counts file:{}: {e}", p.display()))
                })?)
            }
            (
                &CountsSpec::Moe {
                    tokens,
                    hidden,
                    topk,
                    experts,
                },
                _,
            ) => Some(counts::moe(
                n,
                tokens,
                hidden,
                topk,
                experts,
                self.args.seed,
            )?),
            _ => None,
        };
        if let Some(c) = fixed {
            let size = self.sizes[0];
            let (sent, received) = c.max_sent_received();
            let need = sent.max(received);
            if need > size {
                return Err(BenchError::usage(format!(
                    "--counts {}: a rank sends or receives {need} bytes, more than -e {size}; use -b {need} -e {need} or more",
                    self.args.counts
                )));
            }
            if need == 0 {
                return Err(BenchError::usage(format!(
                    "--counts {}: every cell is 0 bytes (values are rounded down to 16); nothing to measure",
                    self.args.counts
                )));
            }
            return Ok(vec![(size, c)]);
        }
        let mut out = Vec::new();
        for &size in &self.sizes {
            let c = counts::shape(&self.args.counts, n, size);
            if c.busiest() == 0 {
                eprintln!(
                    "efabench: skipping size {size}: every cell of --counts {} rounds down to 0 bytes for {n} ranks",
                    self.args.counts
                );
                continue;
            }
            out.push((size, c));
        }
        if out.is_empty() {
            return Err(BenchError::usage(format!(
                "every size is too small for {n} ranks (cells are rounded down to 16 B); use -e {} or more",
                n as u64 * counts::ALIGN
            )));
        }
        Ok(out)
    }
}

impl<'a> Benchmark for Alltoallv<'a> {
    type Spec = AlltoallvSpec;

    fn name(&self) -> &'static str {
        "alltoallv"
    }

    fn needs(&self) -> Needs {
        Needs::fabric(2).launch_with(4)
    }

    fn timed_by(&self) -> TimedBy {
        TimedBy::Budgeted
    }

    fn fingerprint(&self) -> String {
        // Two hosts may keep the same matrix under different paths: compare its text.
        let counts = match (&self.args.counts, &self.file) {
            (CountsSpec::File(_), Some(t)) => format!("file#{:016x}", counts::text_digest(t)),
            (c, _) => c.to_string(),
        };
        format!(
            "--counts {counts} --seed {} --max-time {} --bind {} --window {} --notify {}",
            self.args.seed,
            self.args.max_time,
            name_of(&self.args.bind),
            self.args.window.name(),
            name_of(&self.args.notify)
        )
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let matrices = self.matrices(ctx.world as usize)?;
        let send = matrices.iter().map(|(_, c)| c.max_sent_received().0).max();
        let half = matrices.iter().map(|(_, c)| c.max_sent_received().1).max();
        let (send, half) = (send.unwrap_or(0) as usize, half.unwrap_or(0) as usize);
        let largest = matrices
            .iter()
            .flat_map(|(_, c)| c.rows().into_iter().flatten())
            .max()
            .unwrap_or(0);
        let (m, facts) = open_mesh(ctx, send, 2 * half)?;
        setup::check_chunk(&m, largest, &facts.provider)?;
        let mut facts = facts.detail(AlltoallvRun {
            counts: self.args.counts.to_string(),
            seed: self.args.seed,
        });
        facts.header.push(format!(
            "# alltoallv --counts {}: size = one rank's send buffer (-b/-e); time = the slowest rank's \
             mean per iteration; bw = algbw = the busiest rank's bytes (sent or received, own chunk \
             included) / time; busbw = algbw x (n-1)/n (nccl-tests alltoallv)",
            self.args.counts
        ));
        facts
            .header
            .push(setup::budget_line(self.args.max_time, matrices.len()));
        self.tuning = setup::Tuning::resolve(
            ctx,
            &mut facts,
            self.args.groups.mem.mem,
            &m,
            self.args.notify,
            self.args.window,
            &mut self.placement,
        )?;
        self.matrices = matrices;
        self.mesh = Some(m);
        Ok(facts)
    }

    fn points(&self, ctx: &Ctx) -> Result<Vec<AlltoallvSpec>, BenchError> {
        let n = ctx.world as u64;
        Ok(self
            .matrices
            .iter()
            .map(|(size, c)| {
                let (iters, warmup) = self
                    .args
                    .groups
                    .sweep
                    .iterations(*size, n.saturating_sub(1).max(1));
                AlltoallvSpec {
                    size: *size,
                    counts: c.clone(),
                    iters,
                    warmup,
                }
            })
            .collect())
    }

    fn label(&self, spec: &AlltoallvSpec) -> String {
        format!("size {}", crate::size::human(spec.size))
    }

    fn measure(&mut self, ctx: &Ctx, spec: &AlltoallvSpec) -> Result<Measured, BenchError> {
        let half = self
            .matrices
            .iter()
            .map(|(_, c)| c.max_sent_received().1)
            .max()
            .unwrap_or(0) as usize;
        self.placement.place()?;
        let plan = Plan {
            window: self.window(ctx, &spec.counts),
            signal_above: self.tuning.signal_above,
            ..spec.counts.plan(ctx.rank as usize, half)
        };
        collective::measure(
            ctx,
            self.mesh.as_mut(),
            &plan,
            Op::Write,
            (spec.iters, spec.warmup),
            self.args.max_time,
        )
    }

    fn point(&self, ctx: &Ctx, spec: &AlltoallvSpec, all: &[Measured]) -> Point {
        let n = ctx.world as usize;
        let c = &spec.counts;
        let busiest = c.busiest();
        let detail = AlltoallvDetail {
            counts_bytes: c.rows(),
            busiest_bytes: busiest,
            rank_bytes: (0..n)
                .map(|r| RankBytes {
                    rank: r,
                    sent: c.sent(r),
                    received: c.received(r),
                })
                .collect(),
            recv_imbalance: (c.recv_imbalance() * 1e4).round() / 1e4,
            bind: self.placement.name(),
            window: self.window(ctx, c),
            notify: Notify::record(
                self.tuning.signal_above,
                (0..n).flat_map(|s| {
                    (0..n)
                        .filter(move |&d| d != s)
                        .map(move |d| c.get(s, d) as usize)
                }),
            ),
        };
        let messages = (0..n)
            .flat_map(|s| (0..n).map(move |d| (s, d)))
            .filter(|&(s, d)| s != d && c.get(s, d) > 0)
            .count() as f64;
        Outcome::of(ctx, all, spec.warmup).point(
            n,
            (variant(&self.args.counts), spec.size),
            (
                busiest,
                "the busiest rank's bytes sent or received / time of the slowest rank (nccl-tests alltoallv)",
            ),
            |s, d| c.get(s, d),
            // Chunks with bytes per rank per µs, as alltoall's (n-1) per iteration.
            messages / n as f64,
            detail,
        )
    }

    fn summary(&self, records: &[Record]) -> Vec<String> {
        // The per-peer rates name a slow node only when the chunks are alike in size.
        let comparable = self.args.counts == CountsSpec::Uniform
            || records.iter().all(|r| {
                #[derive(serde::Deserialize)]
                struct Counts {
                    #[serde(default)]
                    counts_bytes: Vec<Vec<u64>>,
                }
                let rows = r.fields::<Counts>().map(|c| c.counts_bytes);
                crate::locate::comparable_sizes(&rows.unwrap_or_default())
            });
        let mut out = report::summary(records, comparable, self.args.matrix);
        for r in records {
            if let Ok(s) = r.fields::<Shares>() {
                out.push(format!(
                    "# {} B: the busiest rank moves {} B per iteration; receive imbalance (max/mean) {:.2}",
                    r.size_bytes, s.busiest_bytes, s.recv_imbalance
                ));
            }
        }
        out
    }
}

/// The fields of a record the summary reads.
#[derive(serde::Deserialize)]
struct Shares {
    busiest_bytes: u64,
    recv_imbalance: f64,
}

/// The record's `variant`: the kind of counts (a file's path stays out of it).
fn variant(c: &CountsSpec) -> String {
    match c {
        CountsSpec::File(_) => "file".into(),
        c => c.to_string(),
    }
}

/// Runs one rank of `alltoallv`.
pub fn run_alltoallv(
    args: &AlltoallvArgs,
    build: &harness::BuildInfo,
) -> Result<crate::Verdict, BenchError> {
    run_on_mesh(&mut Alltoallv::new(args)?, args, build, |b| b.mesh.take())
}
