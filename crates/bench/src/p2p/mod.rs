//! Point-to-point benchmarks: `sendrecv`, `write`, `read`, each with a `pingpong` (latency, one
//! message in flight) and a `stream` (bandwidth, a window of messages in flight) variant.
//!
//! Rank 0 measures every other rank in turn; the measured rank is the record's `peer`. Every
//! (variant, size, peer) step is bracketed by a bootstrap barrier so idle ranks never wait longer
//! than one step, and a dead rank is noticed by the bootstrap's heartbeats.
//!
//! # What is timed, and what is verified
//!
//! * **pingpong** times each round trip and reports half of it (one-way latency), except `read`,
//!   whose latency is the post-to-completion time of one read (a read is a round trip by nature).
//!   Payloads alternate between two slots so each side verifies the message it just received
//!   while the next one is already on the wire: verification never sits inside the timed path.
//! * **stream** times a window of `--window` messages (default 64) from the first post until the
//!   receiver says every message of the window landed (an acknowledgement message for send/recv
//!   and write; the local completions for read). The receiver then verifies every slot, and only
//!   then tells the sender it may start the next window (untimed). Window time / window is the
//!   per-message time in `lat_us`.
//! * Every payload carries the pattern of `(iteration, source, destination, slot)`; see
//!   [`crate::pattern`]. A write's target learns that a message landed from the remote CQ data of
//!   *that* message, never from the last one (see [`Write`]).
//!
//! # One file per benchmark
//! A benchmark is a [`Protocol`] in its own file ([`SendRecv`], [`Write`], [`Read`]) plus one
//! line in the crate's list of subcommands. A message-moving one only says how one message
//! moves (`rounds::Message`); `rounds.rs` runs its ping-pong and stream. This module is the
//! driver they share (options, points, records) on the harness; they post through the mesh as
//! a pair ([`crate::mesh::Link`]), and `lean.rs` is sendrecv's fabtests-style ping-pong
//! (`--loop lean`, on [`crate::mesh::LeanStep`]).
//!
//! # Rails and footprint
//! `--rails N|all` and `--strategy split|round-robin` come from the harness's rail plan; the
//! record carries `rails`, `strategy`, `virtual_rails` and `per_rail` (bytes and operations each
//! rail carried in the timed part). `--footprint` bounds the distinct bytes a stream touches per
//! buffer (default 1 MiB): with 64 messages of 1 MiB in flight, efabench measures the NIC and not
//! DRAM bandwidth. `--footprint 1` puts every message of a window on one slot, as `fi_rdm_bw` does;
//! `fi_rma_bw` gives each message of a window its own bytes (64 × size).

mod lean;
mod read;
mod rounds;
mod sendrecv;
mod write;

use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

pub use self::lean::PingLoop;
pub use self::read::Read;
pub use self::sendrecv::SendRecv;
pub use self::write::Write;

use crate::error::BenchError;
use crate::harness::{
    self, name_of, AllGroups, Benchmark, Clock, Ctx, Loop, Measured, Needs, Point, RunFacts,
    TimedBy,
};
use crate::mesh::Link;
use crate::mesh::{self, RailLoad};
use crate::pattern;

/// Options of the point-to-point benchmarks: their own, then the groups they honour (every one).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct P2pArgs {
    /// Messages in flight in the stream variant (and reads per round of read pingpong), 1 to 4096.
    #[arg(long, default_value = "64", value_parser = window_arg, allow_hyphen_values = true)]
    pub window: usize,
    /// Distinct bytes a stream window touches per buffer (messages beyond it reuse slots).
    #[arg(long, default_value = "1M", value_parser = footprint_arg, allow_hyphen_values = true)]
    pub footprint: u64,
    /// Variants to run, comma-separated.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [Variant::Pingpong, Variant::Stream])]
    pub variant: Vec<Variant>,
    /// Where the sender reads the clock: `iteration` (around each iteration: percentiles) or
    /// `run` (around the whole timed loop, as fabtests: no percentiles, every lat_us figure is
    /// the mean, and the untimed fill/check of verification counts; add --no-check for
    /// fabtests' loop).
    #[arg(long, value_enum, default_value_t = Clock::Iteration)]
    pub timing: Clock,
    /// sendrecv's ping-pong loop: `lean` (fabtests' loop: one rail, messages that fit
    /// fi_inject, --variant pingpong), `tracked` (every completion tracked, any number of
    /// rails), or `auto`: lean for every step it applies to, tracked for the rest (the
    /// header and each record's `loop` say which ran).
    #[arg(long = "loop", value_enum, default_value_t = PingLoop::Auto)]
    pub ping_loop: PingLoop,
    #[command(flatten)]
    pub groups: AllGroups,
}

crate::impl_options!(P2pArgs => groups);

/// `pingpong` (latency) or `stream` (bandwidth).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    Pingpong,
    Stream,
}

fn window_arg(s: &str) -> Result<usize, String> {
    harness::bounded(s, "--window", 1, mesh::MAX_INDEX as u64, "64").map(|n| n as usize)
}

fn footprint_arg(s: &str) -> Result<u64, String> {
    harness::bounded_size(s, "--footprint", 1, "1M")
}

/// Fields every record of a run repeats besides the mesh's (`virtual_rails`, `strategy`, `mr`,
/// which says `+device-only` too).
#[derive(Clone, Debug, Serialize)]
pub struct P2pRun {
    timing: &'static str,
}

/// What the sender measured besides its samples (the record carries it as it is).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SenderDetail {
    per_rail: Vec<RailLoad>,
}

/// The point-to-point fields of a record (`docs/records.md`).
#[derive(Clone, Debug, Serialize)]
pub struct PointDetail {
    lat_kind: &'static str,
    /// The loop this point ran (`--loop auto` resolved).
    #[serde(rename = "loop")]
    ping_loop: &'static str,
    window: usize,
    footprint_bytes: u64,
    #[serde(rename = "bw_GBps")]
    bw_gbytes: f64,
    #[serde(flatten)]
    sender: Option<SenderDetail>,
}

/// One point-to-point benchmark: its name, what its ping-pong times, and one step of it on
/// this rank (the sender times; the responder answers).
pub trait Protocol {
    /// The subcommand, and the records' `bench`.
    const NAME: &'static str;
    /// A ping-pong iteration is a round trip (the latency is half of it, on two slots); `false`:
    /// it is one operation timed from post to completion, over a window of slots (read).
    const ROUND_TRIP: bool = true;

    fn measure(link: &mut Link, ctx: &Ctx, s: Step) -> Result<Measured, BenchError>;
}

/// One point, the same on both sides: a variant at a size, measured against one peer.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub variant: Variant,
    pub size: usize,
    pub iters: u64,
    pub warmup: u64,
    /// Messages per window (stream) or reads per round (read pingpong).
    pub window: usize,
    /// Buffer slots in use (≤ window): position `pos` of a window uses slot `pos % slots`, and
    /// a slot carries the pattern of `(iteration, slot)` (the bounded footprint).
    pub slots: usize,
    pub verify: bool,
    pub clock: Clock,
    pub ping_loop: PingLoop,
    /// Ranks of the sender (rank 0) and the responder.
    pub sender: u32,
    pub responder: u32,
}

impl Step {
    /// Whether this rank is the sender (the side that times).
    fn sends(self, ctx: &Ctx) -> bool {
        ctx.rank == self.sender
    }
    fn to_responder(self, iter: u64, slot: usize) -> u64 {
        pattern::seed(iter, self.sender, self.responder, slot as u32)
    }
    fn to_sender(self, iter: u64, slot: usize) -> u64 {
        pattern::seed(iter, self.responder, self.sender, slot as u32)
    }
    /// Seed of what this side sends, and of what it receives.
    fn seeds(self, sender: bool, iter: u64, slot: usize) -> (u64, u64) {
        let (a, b) = (self.to_responder(iter, slot), self.to_sender(iter, slot));
        if sender {
            (a, b)
        } else {
            (b, a)
        }
    }
    /// The step's iterations, timed on the sender.
    fn looped(self, timed: bool) -> Loop {
        let (warmup, iters) = (self.warmup, self.iters);
        Loop {
            warmup,
            iters,
            timed,
            clock: self.clock,
        }
    }
}

/// A point-to-point benchmark on the shared harness.
pub struct P2p<'a, P> {
    args: &'a P2pArgs,
    sizes: Vec<u64>,
    buf_bytes: u64,
    link: Option<Link>,
    /// The largest ping-pong message `--loop auto` runs on the lean loop (set up in `setup`).
    lean_up_to: Option<u64>,
    protocol: PhantomData<P>,
}

impl<'a, P: Protocol> P2p<'a, P> {
    /// Checks the options (before anything touches hardware).
    pub fn new(args: &'a P2pArgs) -> Result<Self, BenchError> {
        let sizes = args.groups.sweep.sizes()?;
        let max = *sizes.iter().max().expect("a sweep has at least one size");
        // Pingpong alternates two slots; a stream uses up to `window` slots within the footprint.
        let buf_bytes = (2 * max).max(args.footprint.min((args.window as u64).saturating_mul(max)));
        if buf_bytes > harness::MAX_SIZE {
            return Err(BenchError::usage(format!(
                "buffers of {buf_bytes} bytes exceed 64G; lower -e or --footprint"
            )));
        }
        Ok(P2p {
            args,
            sizes,
            buf_bytes,
            link: None,
            lean_up_to: None,
            protocol: PhantomData,
        })
    }

    /// Buffer slots a point of `size` with `window` messages uses.
    fn slots(&self, size: u64, window: usize) -> usize {
        let fit = (self.args.footprint / size.max(1)).max(1) as usize;
        let cap = (self.buf_bytes / size.max(1)).max(1) as usize;
        fit.min(window).min(cap).max(1)
    }
}

impl<P: Protocol> Benchmark for P2p<'_, P> {
    type Spec = Step;

    fn name(&self) -> &'static str {
        P::NAME
    }

    fn needs(&self) -> Needs {
        Needs::fabric(2)
    }

    fn timed_by(&self) -> TimedBy {
        TimedBy::Rounds
    }

    fn fingerprint(&self) -> String {
        let variants: Vec<String> = self.args.variant.iter().map(name_of).collect();
        let a = self.args;
        format!(
            "--window {} --footprint {} --variant {} --loop {}",
            a.window,
            a.footprint,
            variants.join(","),
            name_of(&a.ping_loop)
        )
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let (plan, strategy) = (ctx.plan()?, self.args.groups.fabric.strategy());
        plan.check_message(*self.sizes.iter().max().unwrap_or(&0), strategy)?;
        let (ping_loop, variants) = (self.args.ping_loop, &self.args.variant);
        let max = *self.sizes.iter().max().unwrap_or(&0);
        lean::check(ping_loop, P::NAME, variants, plan, max)?;
        self.lean_up_to = lean::lean_up_to(P::NAME, plan);
        let len = self.buf_bytes as usize;
        let (m, mut facts) = crate::mesh::open_mesh(ctx, len, len)?;
        let link = Link::new(m);
        let mr = link.mesh.mr_path_detail();
        facts.header = vec![format!(
            "# rails: {} | strategy: {} | footprint: {} per buffer | window: {} | mr: {mr}",
            plan.rails_line(),
            strategy.name(),
            crate::size::human(self.args.footprint),
            self.args.window,
        )];
        if self.args.timing == Clock::Run {
            facts.header.push(
                "# timing: one clock read before and after the timed loop (--timing run, as fabtests): \
                 lat_us min/p50/p99/max are the mean, and prepare/check work is inside it"
                    .to_string(),
            );
        }
        facts
            .header
            .extend(lean::header(ping_loop, P::NAME, variants, self.lean_up_to));
        self.link = Some(link);
        facts.detail.mr = Some(mr);
        let timing = self.args.timing.name();
        Ok(facts.detail(P2pRun { timing }))
    }

    fn points(&self, ctx: &Ctx) -> Result<Vec<Step>, BenchError> {
        let (sweep, job) = (&self.args.groups.sweep, &self.args.groups.job);
        let mut out = Vec::new();
        for &variant in &self.args.variant {
            for &size in &self.sizes {
                let w = self.args.window;
                let (window, slots, per_iter) = match (variant, P::ROUND_TRIP) {
                    (Variant::Pingpong, true) => (2, 2, 1),
                    (Variant::Pingpong, false) => (w, self.slots(size, w), 1),
                    (Variant::Stream, _) => (w, self.slots(size, w), w),
                };
                let (iters, warmup) = sweep.iterations(size, per_iter as u64);
                out.extend((1..ctx.world).map(|peer| Step {
                    variant,
                    size: size as usize,
                    iters,
                    warmup,
                    window,
                    slots,
                    verify: job.verify(),
                    clock: self.args.timing,
                    ping_loop: self.args.ping_loop.resolve(variant, size, self.lean_up_to),
                    sender: 0,
                    responder: peer,
                }));
            }
        }
        Ok(out)
    }

    fn label(&self, s: &Step) -> String {
        format!(
            "{} {} peer {}",
            name_of(&s.variant),
            crate::size::human(s.size as u64),
            s.responder
        )
    }

    fn measure(&mut self, ctx: &Ctx, s: &Step) -> Result<Measured, BenchError> {
        let link = self
            .link
            .as_mut()
            .ok_or_else(|| BenchError::failed("measure before setup"))?;
        let (s, sender) = (*s, s.sends(ctx));
        if !sender && ctx.rank != s.responder {
            return Ok(Measured::default());
        }
        link.begin_step(if sender { s.responder } else { s.sender }, s.size, s.slots)?;
        let measured = P::measure(link, ctx, s)?;
        let per_rail = link.mesh.rail_loads();
        Ok(match sender {
            true => measured.detail(SenderDetail { per_rail }),
            false => measured,
        })
    }

    fn point(&self, _ctx: &Ctx, s: &Step, all: &[Measured]) -> Point {
        let timer = &all[s.sender as usize];
        let (lat_kind, ops, divisor) = match (s.variant, P::ROUND_TRIP) {
            (Variant::Pingpong, false) => ("post-to-completion", 1, 1),
            (Variant::Pingpong, true) => ("one-way (round trip / 2)", 1, 2),
            (Variant::Stream, _) => ("per message (window time / window)", s.window, s.window),
        };
        let p = Point::timed(&timer.samples_ns, s.size as u64, ops as u64, divisor as u64);
        let detail = PointDetail {
            lat_kind,
            ping_loop: s.ping_loop.name(),
            window: s.window,
            footprint_bytes: (s.slots * s.size) as u64,
            bw_gbytes: p.bw_gbps / 8.0,
            sender: timer.part().cloned(),
        };
        Point {
            variant: name_of(&s.variant),
            iters: s.iters,
            warmup: s.warmup,
            peer: Some(s.responder),
            ..p
        }
        .detail(detail)
    }
}

/// Runs one rank of point-to-point benchmark `P`.
pub fn run<P: Protocol>(
    args: &P2pArgs,
    build: &harness::BuildInfo,
) -> Result<crate::Verdict, BenchError> {
    harness::run(&mut P2p::<P>::new(args)?, args, build)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_bounded() {
        assert!(window_arg("0").is_err());
        assert!(window_arg("x").is_err());
        assert!(window_arg("-1").unwrap_err().contains("negative"));
        assert_eq!(window_arg("64"), Ok(64));
    }
}
