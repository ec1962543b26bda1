//! The shared benchmark harness: what nccl-tests calls `common.cu`.
//!
//! A benchmark implements [`Benchmark`] — its setup, the list of points it measures, one measured
//! point on this rank, and how the ranks' outcomes turn into a record (latency, `bw`, `busbw`) —
//! and [`run`] does everything else, identically for every benchmark:
//!
//! 1. options are already typed and bounded by clap. They come in groups — [`SweepArgs`]
//!    (`-b -e -f -n -w`), [`FabricArgs`] (`-p --domain --rails --strategy --per-rail --mr
//!    --libfabric`), [`MemArgs`] (`--mem --gpu`) and [`JobArgs`] (`--timeout --rdzv --rank
//!    --world -o --format --check/--no-check`) — and a benchmark's clap `Args` flattens only
//!    the groups it honours and says which through [`Options`] (`impl_options!`), so clap
//!    refuses the others and the harness sets up only what they ask for. The benchmark's own
//!    options are checked by its constructor, before anything touches hardware;
//! 2. find this process's rank (flags, `efabench launch`, Slurm, MPI, torchrun variables),
//!    refuse too few ranks with the command that starts enough ([`Needs`]), and connect the
//!    bootstrap;
//! 3. check that every rank runs the same options (a fingerprint all-gathered once), open `-o`
//!    on rank 0, choose the provider, the domain(s) and the rails (when the benchmark needs the
//!    fabric), and resolve the GPU of `--gpu` (when `--mem` needs one);
//! 4. `setup`, then for every point: counter snapshot, `measure` on every rank, a gather of every
//!    rank's [`Measured`] to rank 0 (which doubles as the fence between points), the record(s)
//!    ([`Benchmark::points_of`]: one by default, several for a round that measures several
//!    things), the table/JSON/CSV row and the JSONL line (flushed per record, so a later failure
//!    never loses what was measured), and every [`Gate`] a point missed;
//! 5. the summary, a final barrier, and the exit status: 0 clean, 1 when payloads failed
//!    verification or the run failed, 2 for bad input.
//!
//! # The timed loops
//! The harness runs every timed loop; a benchmark declares how its points are timed
//! ([`Benchmark::timed_by`], a [`TimedBy`]) and its `measure` hands its rounds to the [`Ctx`]
//! method of that name. The loops themselves are private to the harness (see [`timing`]'s
//! docs for why):
//!
//! * [`Ctx::run_rounds`] — CPU-timed iterations ([`Rounds`]: `prepare(i)` untimed, `body(i)`
//!   timed with [`std::time::Instant`] on the rank that times, `check(i)` untimed, returning the
//!   payload words that failed). The loop does warm-up, the samples, the job's health and
//!   progress (see [`timed`]'s docs for what it keeps out of the hot path).
//! * [`Ctx::run_budgeted`] — iterations that stop on `-n` *or* a `--max-time` budget
//!   (`alltoall`, `alltoallv`, `pairs`; [`Budgeted`]): the same three parts, with the body told
//!   when this rank ends a phase and saying when a peer did, so every rank stops on the same
//!   iteration (see [`budget`]'s docs).
//! * [`Ctx::run_device_rounds`] — iterations timed on the device (CUDA events, `%globaltimer`,
//!   `ep`'s stage clock: `ipc`, `proxy`, `ep`, `h2d`; [`DeviceRounds`]): the same three parts,
//!   with the middle one returning the sample the device took (or leaving it to be read after
//!   the last iteration, when launches are queued without a host synchronisation between them);
//!   see [`device`]'s docs.
//! * [`Ctx::run_launch`] — one launch per point whose kernel loops by itself and stamps each
//!   command (`queue`: producers on the GPU, the host's consumer threads answering).
//!
//! # Typed records
//! The common fields are [`Point`]'s; a benchmark's own fields are a `#[derive(Serialize)]`
//! struct, a variant of [`Detail`] set with [`Point::detail`] (and of [`RunOwn`] with
//! [`RunFacts::detail`]), each field one key of the record; what a rank sends rank 0 beyond its
//! samples is a variant of [`RankDetail`] ([`Measured::detail`], [`Measured::part`]). See
//! [`detail`]'s docs.
//!
//! Any error on any rank after the bootstrap connected is broadcast as an abort, so every rank
//! stops with the same one-line reason instead of waiting for a rank that already gave up.

pub mod budget;
pub mod detail;
pub mod device;
mod options;
mod placement;
mod point;
mod select;
pub mod timed;
pub mod timing;
mod values;

use std::time::Instant;

use efabench_bootstrap::Bootstrap;
use efabench_record::{JsonlWriter, Record, Sink};
use serde::{Deserialize, Serialize};

pub use budget::{max_time_arg, Budget, Budgeted, Phase, Span, Spent, Stop};
pub use detail::{Detail, RankDetail, RankPart, RunDetail, RunOwn};
pub use device::DeviceRounds;
pub use options::{
    bounded, bounded_size, default_iters, defaults, gpu_arg, iters_arg, name_of, warmup_arg,
    AllGroups, FabricArgs, Groups, JobArgs, LaunchArgs, MemArgs, MrChoice, Options, Rails,
    Strategy, SweepArgs, MAX_ITERS, MAX_RAILS, MAX_SIZE,
};
pub use point::{Gate, Point, Progress, RunInfo};
pub use select::{choose_provider, FabricPlan};
pub use timed::{Clock, Loop, Rounds, CHECK_EVERY};
pub use timing::TimedBy;

use crate::error::BenchError;

/// Version and commit of the binary, stamped into every record.
#[derive(Clone, Debug, Default)]
pub struct BuildInfo {
    pub version: String,
    pub git: Option<String>,
}

/// What a benchmark needs the harness to set up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Needs {
    /// Open libfabric and choose provider, domain and rails.
    pub fabric: bool,
    /// Fewest ranks the benchmark runs with.
    pub min_world: u32,
    /// Ranks the error for too few suggests to `efabench launch -n` (the fewest that show what
    /// the benchmark is about: an all-to-all of two ranks is a pair).
    pub launch_n: u32,
}

impl Needs {
    /// No fabric, any number of ranks (one process is a job).
    pub const LOCAL: Needs = Needs {
        fabric: false,
        min_world: 1,
        launch_n: 1,
    };

    /// The fabric between `min_world` ranks at least.
    pub const fn fabric(min_world: u32) -> Needs {
        Needs {
            fabric: true,
            min_world,
            launch_n: min_world,
        }
    }

    /// Suggests `n` ranks when there are too few.
    pub const fn launch_with(self, n: u32) -> Needs {
        Needs {
            launch_n: n,
            ..self
        }
    }

    /// The usage error of benchmark `name` started with `world` ranks, when they are too few:
    /// how to start it with enough.
    pub fn check_world(&self, name: &str, world: u32) -> Result<(), BenchError> {
        if world >= self.min_world {
            return Ok(());
        }
        Err(BenchError::usage(format!(
            "{name} needs at least {} ranks; run `efabench launch -n {} -- {name} ...`, or start \
             it under srun/mpirun, or by hand with --rank/--world/--rdzv",
            self.min_world, self.launch_n
        )))
    }
}

/// Facts a benchmark learns in `setup` that every record repeats.
#[derive(Clone, Debug, Default)]
pub struct RunFacts {
    pub provider: String,
    pub fabric: String,
    pub domains: Vec<String>,
    pub libfabric: Option<String>,
    pub rails: u32,
    pub mem: String,
    pub link_gbps: Option<f64>,
    /// Lines rank 0 prints above the table (`# rails: 2 virtual on lo, strategy split, ...`).
    pub header: Vec<String>,
    /// Fields every record of the run repeats beyond these (`strategy`, `virtual_rails`, ...).
    pub detail: RunDetail,
}

impl RunFacts {
    /// Sets the benchmark's own fields that every record of the run repeats.
    pub fn detail(mut self, own: impl Into<RunOwn>) -> Self {
        self.detail.own = own.into();
        self
    }
}

/// The `FI_*` variables among `vars`, sorted: libfabric reads its provider settings (protocol
/// thresholds, `FI_SHM_DISABLE_CMA`, `FI_EFA_*`) from the environment, and they can move a
/// figure as much as the code does, so a record says which were set.
pub fn fi_env(
    vars: impl Iterator<Item = (String, String)>,
) -> std::collections::BTreeMap<String, String> {
    vars.filter(|(k, _)| k.starts_with("FI_")).collect()
}

/// One rank's outcome of one point, as it travels to rank 0.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Measured {
    /// This rank's timed samples in nanoseconds (empty on ranks that do not time this point).
    pub samples_ns: Vec<u64>,
    /// Payload words (or commands) that failed verification on this rank.
    pub errors: u64,
    /// Benchmark-specific facts (per-rail bytes, per-peer times, ...).
    pub detail: RankDetail,
}

/// How long a rank may stay alive after the bootstrap learned the job failed (the normal way
/// out takes milliseconds, an abort message up to 2 s).
const WATCHDOG_GRACE: std::time::Duration = std::time::Duration::from_secs(4);

/// How long a failed rank waits for the bootstrap to name the cause (a frozen or dead peer is
/// noticed within a couple of heartbeats).
const FAILURE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Largest serialised [`Measured`] a rank accepts from another (bounded decoding).
const MAX_MEASURED: usize = 48 << 20;

impl Measured {
    /// Sets the benchmark-specific facts.
    pub fn detail(mut self, detail: impl Into<RankDetail>) -> Self {
        self.detail = detail.into();
        self
    }

    /// The facts a rank set with [`Measured::detail`], when they are a `T`.
    pub fn part<T: RankPart>(&self) -> Option<&T> {
        T::of(&self.detail)
    }

    fn encode(&self) -> Result<Vec<u8>, BenchError> {
        serde_json::to_vec(self)
            .map_err(|e| BenchError::failed(format!("cannot encode a measured point: {e}")))
    }

    fn decode(rank: usize, b: &[u8]) -> Result<Measured, BenchError> {
        if b.len() > MAX_MEASURED {
            return Err(BenchError::failed(format!(
                "rank {rank} sent a result of {} bytes (limit {MAX_MEASURED}); all ranks must run the same efabench",
                b.len()
            )));
        }
        serde_json::from_slice(b).map_err(|e| {
            BenchError::failed(format!(
                "rank {rank} sent a malformed result ({e}); all ranks must run the same efabench version"
            ))
        })
    }
}

/// What `setup`, `measure` and `point` see of the run.
pub struct Ctx<'a> {
    pub bs: &'a Bootstrap,
    /// The option groups the benchmark honours.
    pub opts: &'a Groups,
    pub rank: u32,
    pub world: u32,
    pub local_rank: u32,
    /// This host's name, and every rank's.
    pub host: String,
    pub hosts: Vec<String>,
    /// Provider, domains and rails, when the benchmark needs the fabric.
    pub fabric: Option<FabricPlan>,
    /// CUDA ordinal of this rank when `--mem` needs a GPU.
    pub device: Option<i32>,
    /// The benchmark's name, and how it declared its points are timed.
    bench: &'static str,
    timed_by: TimedBy,
}

impl Ctx<'_> {
    /// Whether every rank is on this host.
    pub fn one_host(&self) -> bool {
        self.hosts.iter().all(|h| *h == self.host)
    }

    /// The fabric plan; a benchmark that declared `Needs::fabric` always has one.
    pub fn plan(&self) -> Result<&FabricPlan, BenchError> {
        self.fabric
            .as_ref()
            .ok_or_else(|| BenchError::failed("the fabric was not set up for this benchmark"))
    }

    /// `Err` once the job has failed anywhere (a peer died, a rank aborted): call it while
    /// waiting, about every millisecond.
    pub fn health(&self) -> Result<(), BenchError> {
        Ok(self.bs.check()?)
    }
}

/// A benchmark on the shared harness (the nccl-tests `testColl` shape).
pub trait Benchmark {
    /// What one point is (variant, size, peer, ...): the same list on every rank.
    type Spec: Clone;

    /// The `bench` field of the records.
    fn name(&self) -> &'static str;

    /// What the harness must set up.
    fn needs(&self) -> Needs;

    /// Once per run, on every rank, after the bootstrap connected and the fabric plan was made:
    /// buffers, endpoints, connections. Returns what every record repeats.
    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError>;

    /// The points to measure, in order. Must be identical on every rank.
    fn points(&self, ctx: &Ctx) -> Result<Vec<Self::Spec>, BenchError>;

    /// A short label of a point for the progress bar.
    fn label(&self, spec: &Self::Spec) -> String;

    /// How every point is timed: `measure` hands its rounds to the [`Ctx`] method this names
    /// ([`Ctx::run_rounds`], [`Ctx::run_budgeted`], [`Ctx::run_device_rounds`],
    /// [`Ctx::run_launch`]), the only way to run a timed loop.
    fn timed_by(&self) -> TimedBy;

    /// Measures one point on this rank (every rank is called for every point), handing its
    /// rounds to the harness as [`Benchmark::timed_by`] declares.
    fn measure(&mut self, ctx: &Ctx, spec: &Self::Spec) -> Result<Measured, BenchError>;

    /// On rank 0: every rank's outcome (indexed by rank) → the record's numbers. `bw_gbps` and
    /// `busbw_gbps` are the benchmark's definition (`docs/metrics.md`).
    fn point(&self, ctx: &Ctx, spec: &Self::Spec, all: &[Measured]) -> Point;

    /// On rank 0: the records of one point — one by default ([`Benchmark::point`]); a round
    /// that measures several things at once (every pair of a ring shift) returns one each. With
    /// one record the harness sets its `errors` to every rank's sum; with several, each keeps
    /// the `errors` the benchmark gave it.
    fn points_of(&self, ctx: &Ctx, spec: &Self::Spec, all: &[Measured]) -> Vec<Point> {
        vec![self.point(ctx, spec, all)]
    }

    /// The benchmark's own options that every rank must share, as command-line words
    /// (`--window 64 --variant pingpong,stream`); the harness adds the shared ones.
    fn fingerprint(&self) -> String {
        String::new()
    }

    /// Lines printed on rank 0 after the table (per-benchmark conclusions).
    fn summary(&self, _records: &[Record]) -> Vec<String> {
        Vec::new()
    }
}

/// What a run that ended without an error found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every payload verified and every point met its gates.
    Clean,
    /// The run ended, but payload words failed verification or a point missed a gate; the
    /// records and the lines on stderr say where.
    Failed,
}

/// Runs one rank of `bench`. Returns what the run found; errors are bad input or a failed run
/// ([`BenchError::is_usage`] says which).
pub fn run<B: Benchmark>(
    bench: &mut B,
    opts: &(impl Options + ?Sized),
    build: &BuildInfo,
) -> Result<Verdict, BenchError> {
    let groups = Groups::of(opts);
    let args = &groups.job;
    let flags = args.launch.flags(args.timeout());
    let info = efabench_bootstrap::detect_from_process_env(&flags)?;
    bench.needs().check_world(bench.name(), info.world)?;
    let bs = Bootstrap::connect(&info, args.timeout())?;
    // A rank stuck inside a provider call (shm's spin lock after a peer died) never returns to
    // check the bootstrap: the watchdog ends it with the job's reason.
    bs.arm_watchdog(WATCHDOG_GRACE);
    run_on(bench, opts, build, &bs, Echo::Tables).map(|(verdict, _)| verdict)
}

/// What rank 0 prints of a run on stdout and stderr besides progress and failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Echo {
    /// The header, the table (or JSON Lines, CSV) and the benchmark's summary lines.
    Tables,
    /// Nothing: the caller prints its own digest of the records (`efabench cluster`, whose
    /// pairs table has n(n-1) rows). The records still go to the `-o` file.
    Quiet,
}

/// Runs one rank of `bench` on a bootstrap the caller connected (and keeps: several benchmarks
/// of one job run one after the other on it, as `efabench cluster` does). The caller arms the
/// watchdog. Returns the run's verdict and, on rank 0, its records. An error is broadcast
/// as an abort, as in [`run`].
pub fn run_on<B: Benchmark>(
    bench: &mut B,
    opts: &(impl Options + ?Sized),
    build: &BuildInfo,
    bs: &Bootstrap,
    echo: Echo,
) -> Result<(Verdict, Vec<Record>), BenchError> {
    let groups = Groups::of(opts);
    let args = &groups.job;
    bench.needs().check_world(bench.name(), bs.world())?;
    match run_connected(bench, &groups, build, bs, echo) {
        Ok(done) => Ok(done),
        Err(e) => {
            // A data-path timeout ("waited 30 s for a completion") is usually a peer that froze
            // or died: the bootstrap learns which within a heartbeat or two, and that is the
            // message every rank should print.
            let e = if e.is_usage() {
                e
            } else {
                bs.failure_within(args.timeout().min(FAILURE_WAIT))
                    .map(BenchError::from)
                    .unwrap_or(e)
            };
            // Tell every rank why, so nobody waits for a rank that already gave up.
            bs.abort(&e.message());
            Err(e.on_rank(bs.rank()))
        }
    }
}

fn run_connected<B: Benchmark>(
    bench: &mut B,
    groups: &Groups,
    build: &BuildInfo,
    bs: &Bootstrap,
    echo: Echo,
) -> Result<(Verdict, Vec<Record>), BenchError> {
    let (rank, world) = (bs.rank(), bs.world());
    let shows = rank == 0 && echo == Echo::Tables;
    let args = &groups.job;
    let fp = format!(
        "{} {} {}",
        bench.name(),
        groups.fingerprint(),
        bench.fingerprint()
    );
    bs.check_same("options", fp.trim())?;

    let mut jsonl = match (&args.output, rank) {
        (Some(path), 0) => Some(JsonlWriter::open(path)?),
        _ => None,
    };
    let host = efabench_record::hostname();
    let hosts: Vec<String> = bs
        .all_gather(host.as_bytes())?
        .iter()
        .map(|h| String::from_utf8_lossy(h).into_owned())
        .collect();
    let device = match &groups.mem {
        Some(mem) if mem.mem.needs_gpu() => {
            let d = efabench_gpu::resolve(mem.gpu, bs.local_rank()).map_err(|e| {
                let m = format!("--mem {}: {e}", mem.mem);
                if e.is_no_driver() {
                    BenchError::usage(format!("{m}; use --mem host on machines without a GPU"))
                } else {
                    BenchError::usage(m)
                }
            })?;
            Some(d)
        }
        _ => None,
    };
    let mut ctx = Ctx {
        bs,
        opts: groups,
        rank,
        world,
        local_rank: bs.local_rank(),
        host: host.clone(),
        hosts,
        fabric: None,
        device,
        bench: bench.name(),
        timed_by: bench.timed_by(),
    };
    if bench.needs().fabric {
        let plan = select::plan(&ctx)?;
        if rank == 0 {
            eprintln!("efabench: {}", plan.describe());
        }
        ctx.fabric = Some(plan);
    }

    let mut facts = bench.setup(&ctx)?;
    // Providers may install their own crash handlers when their endpoints open: replace them
    // now, so a crash inside a provider call is reported by signal at once.
    let _crash_watch = CrashGuard::start(bs, rank, &ctx.host);
    // Every record says whether ranks shared a GPU (`gpu_sharing`, null when none did).
    facts.detail.gpu_sharing = Some(Vec::new());
    if let Some(d) = ctx.device {
        // Placement decides GPU latency (two ranks on one GPU are time-sliced unless MPS serves
        // them): say where each rank's buffers were, and whether its host runs MPS.
        let mine = placement::encode(d, placement::mps_running());
        let all = bs.all_gather(&mine)?;
        let placed: Vec<Option<(i32, bool)>> = all.iter().map(|b| placement::decode(b)).collect();
        let gpus: Vec<Option<i32>> = placed.iter().map(|p| p.map(|(g, _)| g)).collect();
        let ordinals: Vec<i32> = placed.iter().map(|p| p.map_or(-1, |(g, _)| g)).collect();
        let mps: Vec<bool> = placed.iter().map(|p| p.is_some_and(|(_, m)| m)).collect();
        let groups = placement::shared_gpus(&ordinals, &ctx.hosts, &mps);
        if let Some(note) = placement::shared_gpu_note(&groups) {
            facts.header.push(note);
        }
        facts.detail.gpus = Some(gpus);
        facts.detail.gpu_sharing = Some(groups);
    }
    if facts.libfabric.is_some() {
        let env = fi_env(std::env::vars());
        if !env.is_empty() {
            let line: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            facts.header.push(format!(
                "# libfabric environment (provider settings this run used): {}",
                line.join(" ")
            ));
            facts.detail.fi_env = Some(env);
        }
    }
    let specs = bench.points(&ctx)?;
    let run = RunInfo {
        bench: bench.name().to_string(),
        world,
        provider: facts.provider.clone(),
        fabric: facts.fabric.clone(),
        domains: facts.domains.clone(),
        libfabric: facts.libfabric.clone(),
        rails: facts.rails,
        mem: facts.mem.clone(),
        link_gbps: facts.link_gbps,
        verified: args.verify(),
        host,
        version: build.version.clone(),
        git: build.git.clone(),
        detail: facts.detail.clone(),
    };
    let mut sink = shows.then(|| Sink::stdout(args.format).with_preface(facts.header.clone()));
    let progress = Progress::new(rank == 0, specs.len() as u64, bench.name());
    let counters_root = efabench_topology::Root::system();
    let mut records = Vec::new();
    let mut total_errors = 0u64;
    let mut missed = Vec::new();
    let progress_handle = bs.progress();

    for spec in &specs {
        let before = (rank == 0)
            .then(|| efabench_topology::Snapshot::read(&counters_root))
            .flatten();
        let started = Instant::now();
        let mine = bench.measure(&ctx, spec)?;
        progress_handle.tick();
        let gathered = bs.gather(&mine.encode()?)?;
        let Some(blobs) = gathered else { continue };
        let mut all = Vec::with_capacity(blobs.len());
        let mut mine = Some(mine);
        for (r, b) in blobs.iter().enumerate() {
            if r == 0 {
                all.push(mine.take().unwrap_or_default());
            } else {
                all.push(Measured::decode(r, b)?);
            }
        }
        let errors: u64 = all.iter().map(|m| m.errors).sum();
        total_errors += errors;
        let wall_s = (started.elapsed().as_secs_f64() * 1e6).round() / 1e6;
        let counters = before.and_then(|b| {
            efabench_topology::Snapshot::read(&counters_root).map(|a| b.delta_json(&a))
        });
        let points = bench.points_of(&ctx, spec, &all);
        let one = points.len() == 1;
        for mut p in points {
            if one {
                p.errors = errors;
            }
            p.counters = counters.clone();
            p.wall_s = Some(wall_s);
            if let Some(g) = p.gate.take().filter(|g| !g.passed()) {
                missed.push(format!(
                    "efabench: {} {}: {} measured {:.3}, below the gate",
                    p.variant,
                    bench.label(spec),
                    g.what,
                    g.value
                ));
            }
            let rec = run.record(p);
            if let Some(w) = jsonl.as_mut() {
                w.push(&rec)?;
            }
            if let Some(s) = sink.as_mut() {
                s.push(&rec)?;
                if groups.fabric.as_ref().is_some_and(|f| f.per_rail) {
                    for line in per_rail_rows(&rec) {
                        println!("{line}");
                    }
                }
            }
            records.push(rec);
        }
        progress.step(bench.label(spec));
    }
    progress.finish();
    if let Some(s) = sink {
        s.finish()?;
        for line in bench.summary(&records) {
            eprintln!("{line}");
        }
    }
    bs.barrier()?;
    for line in &missed {
        eprintln!("{line}");
    }
    if total_errors > 0 {
        eprintln!(
            "efabench: {total_errors} payload words failed verification; the records' `errors` field says where"
        );
        return Ok((Verdict::Failed, records));
    }
    if !missed.is_empty() {
        return Ok((Verdict::Failed, records));
    }
    Ok((Verdict::Clean, records))
}

/// Reports a crash of this rank (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) to the whole job
/// before the process ends by that signal; see `efabench_fabric::crash`. Dropping it stops the
/// watching thread.
struct CrashGuard(Option<efabench_fabric::crash::CrashStop>);

impl CrashGuard {
    fn start(bs: &Bootstrap, rank: u32, host: &str) -> CrashGuard {
        let Ok((mut watch, stop)) = efabench_fabric::crash::install() else {
            // Without the handler a crash still ends the process; the job learns it when the
            // connection closes.
            return CrashGuard(None);
        };
        let abort = bs.abort_handle();
        let host = host.to_string();
        let spawned = std::thread::Builder::new()
            .name("efabench-crash".into())
            .stack_size(128 << 10)
            .spawn(move || {
                if let Some(sig) = watch.wait() {
                    let name = efabench_bootstrap::launcher::signal_name(sig);
                    eprintln!("efabench: rank {rank} on {host} died on signal {sig} ({name})");
                    abort.abort(&format!("it died on signal {sig} ({name}) on {host}"));
                    watch.ack();
                }
            });
        CrashGuard(spawned.ok().map(|_| stop))
    }
}

impl Drop for CrashGuard {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.stop();
        }
    }
}

/// `--per-rail`: one line per rail under a record's row.
fn per_rail_rows(r: &Record) -> Vec<String> {
    #[derive(Deserialize)]
    struct PerRail {
        per_rail: Option<Vec<crate::collective::report::RailBytes>>,
    }
    let Some(rails) = r.fields::<PerRail>().ok().and_then(|p| p.per_rail) else {
        return Vec::new();
    };
    let total: f64 = rails.iter().map(|x| x.bytes as f64).sum();
    rails
        .iter()
        .map(|x| {
            format!(
                "#   rail {:>2} {:<16} {:>14} B {:>10} ops {:>6.1}%",
                x.rail,
                x.domain.as_deref().unwrap_or("?"),
                x.bytes,
                x.ops,
                if total > 0.0 {
                    x.bytes as f64 / total * 100.0
                } else {
                    0.0
                }
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fi_env_keeps_only_libfabric_variables_sorted() {
        let vars = [
            ("PATH", "/bin"),
            ("FI_SHM_DISABLE_CMA", "1"),
            ("NCCL_DEBUG", "INFO"),
            ("FI_EFA_USE_DEVICE_RDMA", "1"),
            ("XFI_NOT", "0"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let env = fi_env(vars.into_iter());
        assert_eq!(
            env.into_iter().collect::<Vec<_>>(),
            [
                ("FI_EFA_USE_DEVICE_RDMA".to_string(), "1".to_string()),
                ("FI_SHM_DISABLE_CMA".to_string(), "1".to_string())
            ]
        );
    }

    #[test]
    fn too_few_ranks_are_told_how_to_launch_the_benchmark() {
        let needs = Needs::fabric(2).launch_with(4);
        assert!(needs.check_world("alltoall", 2).is_ok());
        let e = needs.check_world("alltoall", 1).unwrap_err();
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "alltoall needs at least 2 ranks; run `efabench launch -n 4 -- alltoall ...`, or \
             start it under srun/mpirun, or by hand with --rank/--world/--rdzv"
        );
        let e = Needs::fabric(2).check_world("write", 1).unwrap_err();
        assert!(
            e.to_string()
                .contains("`efabench launch -n 2 -- write ...`"),
            "{e}"
        );
        assert!(Needs::LOCAL.check_world("queue", 1).is_ok());
    }

    #[test]
    fn measured_round_trips_and_refuses_junk() {
        let m = Measured {
            samples_ns: vec![1, 2, 3],
            errors: 4,
            ..Measured::default()
        }
        .detail(crate::pairs::RoundFacts {
            warmup_done: Some(5),
            ..Default::default()
        });
        let b = m.encode().unwrap();
        assert_eq!(Measured::decode(1, &b).unwrap(), m);
        let e = Measured::decode(3, b"{not json").unwrap_err();
        assert!(e.to_string().contains("rank 3"), "{e}");
    }
}
