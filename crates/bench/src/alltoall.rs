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
//!   its mean arrival time at `dst` after `dst` started the iteration (`--matrix` prints it),
//!   `probe_matrix_gbps` the same over its median in the probes (three iterations after the
//!   timed loop, each started after a barrier); the slowest node is named where both agree
//!   ([`crate::locate::arrival_suspect`]).
//!
//! # Timing and verification
//! Per point: a bootstrap barrier, then the warm-up iterations, **each verified**: the sender
//! fills every chunk (stripe by stripe) with the pattern of `(iteration, source, destination,
//! stripe)`, and the receiver checks every chunk it got once the iteration completed. Then the
//! timed iterations run **back to back**, as nccl-tests and `MPI_Alltoall` loops do: no barrier
//! and no fill or check between them; an iteration ends on a rank when every stripe of every
//! peer's chunk for *that* iteration has arrived and its own writes completed. Then three probe
//! iterations, each after a barrier, time every chunk's arrival from a common start; the last
//! of them is verified, so the buffers are shown to carry correct data after the timed loop. As
//! in nccl-tests, the payload of each *timed* iteration is not checked (that would put a fill and
//! a check of the whole buffer inside the loop); its arrival is, stripe by stripe. The exchange
//! itself (and why back to back is safe) is the all-to-all engine `alltoall` shares with
//! `alltoallv`, [`collective::exchange`]; this file holds what is `alltoall`'s own: equal chunks,
//! `--op`, the record.
//!
//! # Time budget
//! Each size stops after `-n` timed iterations or `--max-time` seconds, whichever comes first
//! (warm-up: `-w` or a tenth of it), so a node 100 times slower than the others yields its
//! numbers within the budget instead of failing the job; every rank stops at the same iteration
//! (see [`collective::exchange`]). The record gives the iterations actually run and `stopped_by`.
//!
//! # The loop
//! The harness's budgeted loop ([`harness::Ctx::run_budgeted`]) runs the warm-up and the timed
//! part: it decides when this rank's budget ran out, and the exchange marks that iteration's
//! chunks so every rank ends on it. A sample spans the end of one timed iteration to the end of
//! the next (one clock read per iteration). The exchange adds the barriers around the warm-up
//! and before each probe.
//!
//! # Posting window and placement
//! `--window` (how many chunks each rank keeps in flight) and `--bind` (where its data-path
//! thread runs) are the all-to-all layer's: [`collective::window`] and [`collective::placement`]
//! say what their `auto` does and why. The record's `window` is the number in flight at that
//! point, `bind` whether the thread was bound. `--notify` ([`collective::notify`]) chooses
//! between CQ data on every write and one signal per chunk; the record's `notify` says which.
//!
//! # Transfers
//! `--op write` (default): RDMA write with remote CQ data into the peer's receive buffer at the
//! chunk's place. `--op sendrecv`: send with CQ data into receives posted in advance.
//! `--rails`/`--strategy` route every chunk (see [`crate::mesh`]); `--mem` picks the memory.
//!
//! # Libefaxx's five columns
//! All with `-b 4M -e 128M`, one rank per node. Libefaxx printed per-peer bandwidth (chunk /
//! time): multiply by n − 1 to compare with efabench's `busbw_gbps`, by n for `bw_gbps`.
//! * SingleDMA: `alltoall --mem cuda --rails 1`
//! * MultiDMA: `alltoall --mem cuda --rails all --strategy split`
//! * RoundRobinDMA: `alltoall --mem cuda --rails all --strategy round-robin`
//! * SinglePin: `alltoall --mem pinned --rails 1`
//! * MultiPin: `alltoall --mem pinned --rails all --strategy split`

use efabench_record::Record;
use serde::Serialize;

use crate::collective::notify::Notify;
use crate::collective::placement::{Bind, Placement};
use crate::collective::report::{self, Outcome};
use crate::collective::window::{window_arg, Window};
use crate::collective::{self, exchange, setup};
use crate::error::BenchError;
use crate::harness::{
    self, name_of, AllGroups, Benchmark, Ctx, Measured, Needs, Point, RunFacts, TimedBy,
};
use crate::mesh::{open_mesh, run_on_mesh, Mesh};
pub use exchange::Op;
use exchange::Plan;

/// Options of `alltoall`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct AlltoallArgs {
    /// Transfer: write (RDMA write with remote CQ data) or sendrecv.
    #[arg(long, value_enum, default_value_t = Op::Write)]
    pub op: Op,
    /// Print the per-peer bandwidth matrix (Gbps, source row → destination column) of each size.
    #[arg(long)]
    pub matrix: bool,
    /// Chunks in flight per rank: auto (2 over shm with a core per rank for chunks of 16 KiB or
    /// more on small host pages when receivers copy them, --notify data; else all), all, or a
    /// number (1-65536).
    #[arg(long, default_value = "auto", value_parser = window_arg)]
    pub window: Window,
    /// Where each rank's data-path thread runs: auto (a core by its place among the host's
    /// ranks, over shm on small host pages with at most two ranks per core; else where the
    /// scheduler puts it), core (always bound) or none.
    #[arg(long, value_enum, default_value_t = Bind::Auto)]
    pub bind: Bind,
    /// How a receiver learns a chunk arrived (--op write): auto (signal over shm with a core per
    /// rank on small host pages for chunks above the inject size, else data), data (every write
    /// carries remote CQ data) or signal (shm only: writes without CQ data, which shm's sender
    /// copies in the call, then one 8-byte signal per chunk).
    #[arg(long, value_enum, default_value_t = Notify::Auto)]
    pub notify: Notify,
    /// Longest timed part of one size, in seconds: it stops after -n iterations or this,
    /// whichever comes first, on every rank at the same iteration (warm-up: a tenth of it).
    #[arg(long, default_value = "1", value_parser = harness::max_time_arg, allow_hyphen_values = true)]
    pub max_time: f64,
    #[command(flatten)]
    pub groups: AllGroups,
}

crate::impl_options!(AlltoallArgs => groups);

/// Chunk alignment (nccl-tests rounds counts to whole elements; 16 bytes keeps chunks aligned).
pub const CHUNK_ALIGN: u64 = 16;

/// One point: a chunk size.
#[derive(Clone, Debug)]
pub struct AlltoallSpec {
    chunk: usize,
    iters: u64,
    warmup: u64,
}

/// `alltoall` on the shared harness.
pub struct Alltoall<'a> {
    args: &'a AlltoallArgs,
    sizes: Vec<u64>,
    mesh: Option<Mesh>,
    placement: Placement,
    /// What the `auto` options resolve to on this run's mesh.
    tuning: setup::Tuning,
}

/// The record fields of `alltoall` beyond the common ones and those of every all-to-all.
#[derive(Clone, Debug, Serialize)]
pub struct AlltoallDetail {
    op: &'static str,
    chunk_bytes: usize,
    window: usize,
    bind: &'static str,
    notify: &'static str,
}

/// The record fields every point of a run repeats.
#[derive(Clone, Debug, Serialize)]
pub struct AlltoallRun {
    op: &'static str,
}

impl<'a> Alltoall<'a> {
    pub fn new(args: &'a AlltoallArgs) -> Result<Self, BenchError> {
        Ok(Alltoall {
            args,
            sizes: args.groups.sweep.sizes()?,
            mesh: None,
            placement: Placement::new(args.bind),
            tuning: setup::Tuning::default(),
        })
    }

    /// The chunks in flight per rank at a point with chunks of `chunk` bytes among `n` ranks.
    fn window(&self, chunk: usize, n: usize) -> usize {
        self.tuning.in_flight(self.args.window, chunk, n)
    }
}

impl<'a> Benchmark for Alltoall<'a> {
    type Spec = AlltoallSpec;

    fn name(&self) -> &'static str {
        "alltoall"
    }

    fn needs(&self) -> Needs {
        Needs::fabric(2).launch_with(4)
    }

    fn timed_by(&self) -> TimedBy {
        TimedBy::Budgeted
    }

    fn fingerprint(&self) -> String {
        format!(
            "--op {} --max-time {} --window {} --bind {} --notify {}",
            self.args.op.name(),
            self.args.max_time,
            self.args.window.name(),
            name_of(&self.args.bind),
            name_of(&self.args.notify)
        )
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let max = *self
            .sizes
            .iter()
            .max()
            .expect("a sweep has at least one size") as usize;
        let chunk = max as u64 / ctx.world as u64;
        let (m, facts) = open_mesh(ctx, max, 2 * max)?;
        setup::check_chunk(&m, chunk, &facts.provider)?;
        let op = self.args.op.name();
        let mut facts = facts.detail(AlltoallRun { op });
        facts.header.push(format!(
            "# alltoall --op {op}: size = one rank's whole send buffer (n = {} chunks, its own included); \
             time = the slowest rank's mean per iteration; bw = algbw = size / time; busbw = algbw x (n-1)/n",
            ctx.world
        ));
        facts
            .header
            .push(setup::budget_line(self.args.max_time, self.sizes.len()));
        let notify = match (self.args.op, self.args.notify) {
            (Op::Sendrecv, Notify::Signal) => {
                return Err(BenchError::usage(
                    "--notify signal applies to --op write (a send always carries its CQ data); drop one of them",
                ))
            }
            (Op::Sendrecv, _) => Notify::Data,
            (Op::Write, notify) => notify,
        };
        self.tuning = setup::Tuning::resolve(
            ctx,
            &mut facts,
            self.args.groups.mem.mem,
            &m,
            notify,
            self.args.window,
            &mut self.placement,
        )?;
        facts.header.extend(setup::shm_lock_note(
            &facts.provider,
            facts.libfabric.as_deref(),
            ctx.world,
        ));
        self.mesh = Some(m);
        Ok(facts)
    }

    fn points(&self, ctx: &Ctx) -> Result<Vec<AlltoallSpec>, BenchError> {
        let (n, sweep) = (ctx.world as u64, &self.args.groups.sweep);
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
            let (iters, warmup) = sweep.iterations(size, n.saturating_sub(1).max(1));
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
        self.placement.place()?;
        let plan = Plan {
            window: self.window(spec.chunk, ctx.world as usize),
            signal_above: self.tuning.signal_above,
            ..Plan::uniform(ctx.rank, ctx.world, spec.chunk)
        };
        collective::measure(
            ctx,
            self.mesh.as_mut(),
            &plan,
            self.args.op,
            (spec.iters, spec.warmup),
            self.args.max_time,
        )
    }

    fn point(&self, ctx: &Ctx, spec: &AlltoallSpec, all: &[Measured]) -> Point {
        let n = ctx.world as usize;
        let size = (spec.chunk * n) as u64;
        let detail = AlltoallDetail {
            op: self.args.op.name(),
            chunk_bytes: spec.chunk,
            window: self.window(spec.chunk, n),
            bind: self.placement.name(),
            notify: Notify::record(self.tuning.signal_above, std::iter::once(spec.chunk)),
        };
        Outcome::of(ctx, all, spec.warmup).point(
            n,
            (self.args.op.name().to_string(), size),
            (
                size,
                "size / time of the slowest rank (nccl-tests all-to-all)",
            ),
            |_, _| spec.chunk as u64,
            n as f64 - 1.0,
            detail,
        )
    }

    fn summary(&self, records: &[Record]) -> Vec<String> {
        report::summary(records, true, self.args.matrix)
    }
}

/// Runs one rank of `alltoall`.
pub fn run_alltoall(
    args: &AlltoallArgs,
    build: &harness::BuildInfo,
) -> Result<crate::Verdict, BenchError> {
    run_on_mesh(&mut Alltoall::new(args)?, args, build, |b| b.mesh.take())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        a: AlltoallArgs,
    }

    #[test]
    fn bind_values() {
        let bind = |v: &str| Cli::try_parse_from(["t", "--bind", v]).map(|c| c.a.bind);
        assert_eq!(bind("auto").unwrap(), Bind::Auto);
        assert_eq!(bind("none").unwrap(), Bind::None);
        assert!(bind("socket").is_err());
    }
}
