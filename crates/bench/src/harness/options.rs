//! Options every benchmark shares, parsed once into typed values. Names follow nccl-tests and
//! fabtests where one exists (`-b -e -f -n -w`), so users can carry their muscle memory over.
//!
//! Every numeric option has explicit bounds, chosen so that the arithmetic that follows cannot
//! overflow and no allocation can be absurd: `-n` at most 10^7 samples (80 MB of timings), sizes
//! at most 64 GiB, `--timeout` at most a day (so `Instant + timeout` never overflows). A value
//! outside its bounds is refused by clap's value parser with a message that names the bound and a
//! fix, and the CLI turns it into one line and exit status 2. Numeric options accept a leading `-`
//! so that `-n -1` reaches this check instead of clap's "unexpected argument".

use std::path::PathBuf;
use std::time::Duration;

use efabench_gpu::{GpuChoice, MemKind};
use efabench_record::Format;

use crate::error::BenchError;
use crate::size::sweep;

pub use super::values::{
    bounded, bounded_size, gpu_arg, iters_arg, name_of, warmup_arg, MAX_ITERS, MAX_RAILS, MAX_SIZE,
};
use super::values::{factor_arg, rails_arg, rank_arg, size_arg, timeout_arg, world_arg};

/// How many NICs (rails) a rank drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rails {
    Count(u32),
    All,
}

impl std::fmt::Display for Rails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rails::Count(n) => write!(f, "{n}"),
            Rails::All => f.write_str("all"),
        }
    }
}

/// How a multi-rail transfer is spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    /// Each message is cut into stripes, one per rail (128-byte aligned, rotating first rail).
    Split,
    /// Whole messages go to the rails in turn.
    RoundRobin,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Split => "split",
            Strategy::RoundRobin => "round-robin",
        }
    }
}

/// How device memory is registered (`--mr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MrChoice {
    /// dmabuf where the provider needs it (efa), plain virtual-address registration otherwise.
    Auto,
    /// Always register through a dmabuf export (`FI_MR_DMABUF`).
    Dmabuf,
    /// Always register the virtual address with `FI_HMEM_CUDA`.
    Va,
}

impl MrChoice {
    /// The registration path the fabric layer takes for this choice.
    pub fn path(self) -> efabench_fabric::MrPath {
        match self {
            MrChoice::Auto => efabench_fabric::MrPath::Auto,
            MrChoice::Dmabuf => efabench_fabric::MrPath::Dmabuf,
            MrChoice::Va => efabench_fabric::MrPath::Va,
        }
    }
}

/// `--format`: the spellings of [`Format`], which lives in the record crate; `text` and `jsonl`
/// are kept as the historical spellings of table and json.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum FormatChoice {
    #[value(alias = "text")]
    Table,
    #[value(alias = "jsonl")]
    Json,
    Csv,
}

impl From<FormatChoice> for Format {
    fn from(c: FormatChoice) -> Format {
        match c {
            FormatChoice::Table => Format::Table,
            FormatChoice::Json => Format::Json,
            FormatChoice::Csv => Format::Csv,
        }
    }
}

fn format_parser() -> impl clap::builder::TypedValueParser<Value = Format> {
    use clap::builder::TypedValueParser;
    clap::builder::EnumValueParser::<FormatChoice>::new().map(Format::from)
}

/// The size sweep: `-b -e -f -n -w`, as nccl-tests and fabtests name them.
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(next_help_heading = "Sweep options")]
pub struct SweepArgs {
    /// Smallest message size (8, 4K, 1M, 1G; powers of 1024; at most 64G).
    #[arg(short = 'b', long = "min-bytes", default_value = "8", value_parser = size_arg, allow_hyphen_values = true)]
    pub min_bytes: u64,
    /// Largest message size.
    #[arg(short = 'e', long = "max-bytes", default_value = "1M", value_parser = size_arg, allow_hyphen_values = true)]
    pub max_bytes: u64,
    /// Multiply the size by this factor at each step (2 to 1024).
    #[arg(short = 'f', long = "step-factor", default_value = "2", value_parser = factor_arg, allow_hyphen_values = true)]
    pub step_factor: u64,
    /// Timed iterations per size (default: scaled with the size, as fabtests does).
    #[arg(short = 'n', long = "iters", value_parser = iters_arg, allow_hyphen_values = true)]
    pub iters: Option<u64>,
    /// Untimed warm-up iterations per size (default: a tenth of the iterations, 2 to 100).
    #[arg(short = 'w', long = "warmup", value_parser = warmup_arg, allow_hyphen_values = true)]
    pub warmup: Option<u64>,
}

/// The fabric: provider, NICs (rails), how messages spread over them, registration.
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(next_help_heading = "Fabric options")]
pub struct FabricArgs {
    /// libfabric provider (default: efa when present, else shm on one host, else tcp).
    #[arg(short = 'p', long)]
    pub provider: Option<String>,
    /// libfabric domain (NIC), e.g. rdmap16s27 or lo (default: the rank's paired NICs, else the first).
    #[arg(long)]
    pub domain: Option<String>,
    /// NICs (rails) to drive per rank: a number or all.
    #[arg(long, default_value = "1", value_parser = rails_arg)]
    pub rails: Rails,
    /// How messages are spread over several rails (default split).
    #[arg(long, value_enum)]
    pub strategy: Option<Strategy>,
    /// Add a row per rail to the table (bytes and operations each rail carried).
    #[arg(long)]
    pub per_rail: bool,
    /// Device-memory registration.
    #[arg(long, value_enum, default_value_t = MrChoice::Auto)]
    pub mr: MrChoice,
    /// Path of libfabric.so.1 to load (default: /opt/amazon/efa, then the system's).
    #[arg(long, env = "EFABENCH_LIBFABRIC")]
    pub libfabric: Option<PathBuf>,
}

/// Where the buffers live: `--mem` and `--gpu`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(next_help_heading = "Memory options")]
pub struct MemArgs {
    /// Buffer memory.
    #[arg(long, value_enum, default_value_t = MemKind::Host)]
    pub mem: MemKind,
    /// GPU for --mem cuda|pinned|managed: an index, or auto (= local rank).
    #[arg(long, default_value = "auto", value_parser = gpu_arg)]
    pub gpu: GpuChoice,
}

/// The job: who this rank is, where it meets the others, how long it may wait, what it writes
/// and whether payloads are verified.
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(next_help_heading = "Job options")]
pub struct JobArgs {
    /// Verify every payload (the default).
    #[arg(long, overrides_with = "no_check")]
    pub check: bool,
    /// Do not verify payloads.
    #[arg(long = "no-check", overrides_with = "check")]
    pub no_check: bool,
    /// Append JSON Lines records to this file (rank 0 writes).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Standard output format.
    #[arg(long, default_value = "table", value_parser = format_parser())]
    pub format: Format,
    /// Longest any wait may go without progress, in seconds, before the whole job aborts.
    #[arg(long, default_value = "30", value_parser = timeout_arg, allow_hyphen_values = true)]
    pub timeout: f64,
    #[command(flatten)]
    pub launch: LaunchArgs,
}

/// Who this rank is and where it meets the others, for runs started by hand (a launcher, Slurm,
/// MPI or torchrun say it in their variables instead). Part of [`JobArgs`]; `efabench cluster`
/// takes it too.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct LaunchArgs {
    /// Rendezvous HOST:PORT served by rank 0 (manual multi-host runs).
    #[arg(long)]
    pub rdzv: Option<String>,
    /// This process's rank (manual runs, with --world and --rdzv).
    #[arg(long, value_parser = rank_arg, allow_hyphen_values = true)]
    pub rank: Option<u32>,
    /// Number of ranks (manual runs).
    #[arg(long, value_parser = world_arg, allow_hyphen_values = true)]
    pub world: Option<u32>,
}

impl LaunchArgs {
    /// What the bootstrap reads besides the environment, waiting at most `timeout`.
    pub fn flags(&self, timeout: Duration) -> efabench_bootstrap::LaunchFlags {
        efabench_bootstrap::LaunchFlags {
            rank: self.rank,
            world: self.world,
            rdzv: self.rdzv.clone(),
            timeout,
        }
    }
}

/// A group's values when the command line gave none (what its defaults say).
pub fn defaults<T: clap::Args>() -> T {
    #[derive(clap::Parser)]
    struct Only<T: clap::Args> {
        #[command(flatten)]
        t: T,
    }
    // Every option of every group has a default or is optional, so an empty command line
    // parses; the groups' own unit tests hold this.
    <Only<T> as clap::Parser>::try_parse_from(["efabench"])
        .map(|o| o.t)
        .expect("every option of a group has a default")
}

impl SweepArgs {
    /// The sizes to measure, after checking -b, -e and -f together.
    pub fn sizes(&self) -> Result<Vec<u64>, BenchError> {
        sweep(self.min_bytes, self.max_bytes, self.step_factor)
    }

    /// Iterations and warm-up for one size. `per_window` messages make one iteration of a
    /// streaming variant, so the message count, not the window count, follows fabtests' scale.
    pub fn iterations(&self, size: u64, per_window: u64) -> (u64, u64) {
        let iters = self
            .iters
            .unwrap_or_else(|| default_iters(size, per_window));
        let warmup = self.warmup.unwrap_or_else(|| (iters / 10).clamp(2, 100));
        (iters, warmup)
    }

    fn fingerprint(&self) -> String {
        let opt = |o: Option<u64>| o.map_or("default".to_string(), |v| v.to_string());
        format!(
            "-b {} -e {} -f {} -n {} -w {}",
            self.min_bytes,
            self.max_bytes,
            self.step_factor,
            opt(self.iters),
            opt(self.warmup)
        )
    }
}

impl FabricArgs {
    /// How messages are spread over several rails: `--strategy`, split when not given.
    pub fn strategy(&self) -> Strategy {
        self.strategy.unwrap_or(Strategy::Split)
    }
    fn fingerprint(&self) -> String {
        format!(
            "-p {} --mr {:?} --rails {} --strategy {}",
            self.provider.as_deref().unwrap_or("default"),
            self.mr,
            self.rails,
            self.strategy().name()
        )
    }
}

impl MemArgs {
    fn fingerprint(&self) -> String {
        format!("--mem {}", self.mem)
    }
}

impl JobArgs {
    /// Whether payloads are verified.
    pub fn verify(&self) -> bool {
        !self.no_check
    }

    /// The `--timeout` as a duration (bounded by the parser, so this never panics).
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout)
    }

    fn fingerprint(&self) -> String {
        format!(
            "{} --timeout {} --world {}",
            if self.verify() {
                "--check"
            } else {
                "--no-check"
            },
            self.timeout,
            self.launch
                .world
                .map_or("default".to_string(), |w| w.to_string()),
        )
    }
}

/// The option groups a benchmark honours. A benchmark's clap `Args` flattens the groups it
/// uses and implements this trait to hand them to [`crate::harness::run`]; a group it leaves
/// out is refused by clap (`queue -p tcp`: "unexpected argument"), and the harness skips what
/// that group would set up.
pub trait Options {
    /// Every benchmark has a job (rank, rendezvous, timeout, output, verification).
    fn job(&self) -> &JobArgs;
    fn sweep(&self) -> Option<&SweepArgs> {
        None
    }
    fn fabric(&self) -> Option<&FabricArgs> {
        None
    }
    fn mem(&self) -> Option<&MemArgs> {
        None
    }
}

/// Every group, for a benchmark that honours them all (a sweep of sizes over the fabric):
/// flattened as one field, it gives the same options, headings and help as the four groups
/// flattened one by one.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct AllGroups {
    #[command(flatten)]
    pub sweep: SweepArgs,
    #[command(flatten)]
    pub fabric: FabricArgs,
    #[command(flatten)]
    pub mem: MemArgs,
    #[command(flatten)]
    pub job: JobArgs,
}

/// Implements [`Options`] for a benchmark's arguments from the names of the groups it flattens
/// (fields named after their group; `job` always): `impl_options!(EpArgs: fabric, mem);`, or
/// from its [`AllGroups`] field: `impl_options!(P2pArgs => groups);`.
#[macro_export]
macro_rules! impl_options {
    ($t:ty => $all:ident) => {
        impl $crate::harness::Options for $t {
            fn job(&self) -> &$crate::harness::JobArgs {
                &self.$all.job
            }
            fn sweep(&self) -> Option<&$crate::harness::SweepArgs> {
                Some(&self.$all.sweep)
            }
            fn fabric(&self) -> Option<&$crate::harness::FabricArgs> {
                Some(&self.$all.fabric)
            }
            fn mem(&self) -> Option<&$crate::harness::MemArgs> {
                Some(&self.$all.mem)
            }
        }
    };
    ($t:ty $(: $($group:ident),*)?) => {
        impl $crate::harness::Options for $t {
            fn job(&self) -> &$crate::harness::JobArgs {
                &self.job
            }
            $($($crate::impl_options!(@ $group);)*)?
        }
    };
    (@ sweep) => {
        fn sweep(&self) -> Option<&$crate::harness::SweepArgs> {
            Some(&self.sweep)
        }
    };
    (@ fabric) => {
        fn fabric(&self) -> Option<&$crate::harness::FabricArgs> {
            Some(&self.fabric)
        }
    };
    (@ mem) => {
        fn mem(&self) -> Option<&$crate::harness::MemArgs> {
            Some(&self.mem)
        }
    };
}

/// The groups of one run, as the harness keeps them ([`crate::harness::Ctx::opts`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Groups {
    pub job: JobArgs,
    pub sweep: Option<SweepArgs>,
    pub fabric: Option<FabricArgs>,
    pub mem: Option<MemArgs>,
}

impl Groups {
    pub fn of(o: &(impl Options + ?Sized)) -> Groups {
        Groups {
            job: o.job().clone(),
            sweep: o.sweep().cloned(),
            fabric: o.fabric().cloned(),
            mem: o.mem().cloned(),
        }
    }

    /// The memory kind of the buffers: host memory when the benchmark takes no `--mem`.
    pub fn mem_kind(&self) -> MemKind {
        self.mem.as_ref().map_or(MemKind::Host, |m| m.mem)
    }

    /// What must be equal on every rank of a job, as command-line words (so a difference reads
    /// `--no-check` vs `--check`): every option that changes what is measured; not the ones that
    /// place this process or may differ per host (`--rank`, `--rdzv`, `-o`, `--libfabric`,
    /// `--domain`, `--gpu`, `--format`, `--per-rail`).
    pub fn fingerprint(&self) -> String {
        let mut words = Vec::new();
        if let Some(s) = &self.sweep {
            words.push(s.fingerprint());
        }
        if let Some(f) = &self.fabric {
            words.push(f.fingerprint());
        }
        if let Some(m) = &self.mem {
            words.push(m.fingerprint());
        }
        words.push(self.job.fingerprint());
        words.join(" ").to_ascii_lowercase()
    }
}

impl Options for Groups {
    fn job(&self) -> &JobArgs {
        &self.job
    }
    fn sweep(&self) -> Option<&SweepArgs> {
        self.sweep.as_ref()
    }
    fn fabric(&self) -> Option<&FabricArgs> {
        self.fabric.as_ref()
    }
    fn mem(&self) -> Option<&MemArgs> {
        self.mem.as_ref()
    }
}

/// fabtests scales iterations down as messages grow so a sweep ends in reasonable time
/// (`size_to_count`): 10 000 below 64 KiB, 1 000 from 64 KiB, 100 from 1 MiB, twice that for a
/// bandwidth test. A streaming iteration moves a whole window, so the message budget is divided
/// by the window (at least 10 windows, so a stream still has a distribution).
pub fn default_iters(size: u64, per_window: u64) -> u64 {
    let messages: u64 = if size < 64 << 10 {
        10_000
    } else if size < 1 << 20 {
        1_000
    } else {
        100
    };
    if per_window <= 1 {
        messages
    } else {
        (messages * 2).div_ceil(per_window).max(10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn default_iterations_follow_fabtests_tiers() {
        // fabtests' size_to_count: the tier changes AT 64 KiB and AT 1 MiB.
        assert_eq!(default_iters((64 << 10) - 1, 1), 10_000);
        assert_eq!(default_iters(64 << 10, 1), 1_000);
        assert_eq!(default_iters((1 << 20) - 1, 1), 1_000);
        assert_eq!(default_iters(1 << 20, 1), 100);
        // Streams: twice the messages (fabtests' bandwidth tests), in windows, at least 10.
        assert_eq!(default_iters(4096, 64), 313);
        assert_eq!(default_iters(1 << 20, 64), 10);
        assert_eq!(default_iters(1 << 20, 16), 13);
    }

    /// Every group at once, as a benchmark that honours them all takes them.
    #[derive(Parser, Debug)]
    struct T {
        #[command(flatten)]
        sweep: SweepArgs,
        #[command(flatten)]
        fabric: FabricArgs,
        #[command(flatten)]
        mem: MemArgs,
        #[command(flatten)]
        job: JobArgs,
    }

    crate::impl_options!(T: sweep, fabric, mem);

    fn parse(args: &[&str]) -> Result<T, String> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        // The tests assert on the message the user reads: the string is the point.
        T::try_parse_from(v).map_err(|e| e.to_string())
    }

    impl T {
        fn fingerprint(&self) -> String {
            Groups::of(self).fingerprint()
        }
    }

    #[test]
    fn defaults_are_sane() {
        let c = parse(&[]).unwrap();
        let s = &c.sweep;
        assert_eq!((s.min_bytes, s.max_bytes, s.step_factor), (8, 1 << 20, 2));
        assert!(c.job.verify());
        assert_eq!(c.job.format, Format::Table);
        assert_eq!(c.mem.mem, MemKind::Host);
        assert_eq!(c.mem.gpu, GpuChoice::Auto);
        assert_eq!(c.fabric.rails, Rails::Count(1));
        assert_eq!(s.iterations(8, 1), (10_000, 100));
        assert_eq!(s.iterations(4 << 20, 1), (100, 10));
        assert_eq!(s.iterations(8, 64), (313, 31));
    }

    #[test]
    fn bad_values_are_rejected_with_a_fix() {
        let e = parse(&["-b", "1X"]).unwrap_err();
        assert!(e.contains("K, M or G"), "{e}");
        assert!(parse(&["-n", "0"]).unwrap_err().contains("1 to 10000000"));
        assert!(parse(&["--mem", "gpu"])
            .unwrap_err()
            .contains("host, huge, pinned, cuda, managed"));
        assert!(parse(&["--format", "xml"]).unwrap_err().contains("table"));
        assert!(parse(&["--timeout", "0"]).unwrap_err().contains("above 0"));
        assert!(parse(&["--rails", "0"])
            .unwrap_err()
            .contains("--rails all"));
        assert!(parse(&["--gpu", "abc"]).unwrap_err().contains("GPU index"));
        let c = parse(&["-b", "1M", "-e", "8"]).unwrap();
        assert!(c.sweep.sizes().unwrap_err().is_usage());
    }

    #[test]
    fn extremes_are_refused_before_any_arithmetic() {
        for (args, needle) in [
            (vec!["-n", "18446744073709551615"], "out of range"),
            (vec!["-n", "4000000000"], "out of range"),
            (vec!["-n", "99999999999999999999999"], "too large"),
            (vec!["-n", "-1"], "negative"),
            (vec!["-w", "18446744073709551615"], "out of range"),
            (vec!["--timeout", "1e300"], "at most"),
            (vec!["--timeout", "-1"], "above 0"),
            (vec!["--timeout", "NaN"], "above 0"),
            (vec!["--timeout", "inf"], "above 0"),
            (vec!["-f", "1"], "2 to 1024"),
            (vec!["-f", "-3"], "negative"),
            (vec!["-e", "100G"], "64G"),
            (vec!["--rails", "100000"], "out of range"),
            (vec!["--rank", "-2"], "negative"),
        ] {
            let e = parse(&args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        // A long value is not echoed whole by our own message (clap's echo is capped by the
        // CLI's one-line rewriting).
        let long = "9".repeat(100_000);
        let e = iters_arg(&long).unwrap_err();
        assert!(e.len() < 200, "{} bytes", e.len());
        let e = size_arg(&format!("{long}X")).unwrap_err();
        assert!(e.len() < 200, "{} bytes", e.len());
    }

    #[test]
    fn bounded_sizes_and_set_names() {
        assert!(bounded_size("0", "--footprint", 1, "1M").is_err());
        assert!(bounded_size("65G", "--footprint", 1, "1M").is_err());
        assert!(bounded_size("1x", "--footprint", 1, "1M").is_err());
        assert_eq!(bounded_size("1M", "--footprint", 1, "1M"), Ok(1 << 20));
        assert_eq!(name_of(&Strategy::RoundRobin), Strategy::RoundRobin.name());
    }

    #[test]
    fn format_choices_are_the_formats_names() {
        use clap::ValueEnum;
        for c in FormatChoice::value_variants() {
            assert_eq!(name_of(c), Format::from(*c).to_string());
        }
        for (word, f) in [
            ("text", Format::Table),
            ("jsonl", Format::Json),
            ("csv", Format::Csv),
        ] {
            assert_eq!(parse(&["--format", word]).unwrap().job.format, f);
        }
        assert!(parse(&["--format", "JSON"]).is_err());
    }

    #[test]
    fn no_check_turns_verification_off() {
        assert!(!parse(&["--no-check"]).unwrap().job.verify());
        assert!(parse(&["--no-check", "--check"]).unwrap().job.verify());
    }

    #[test]
    fn fingerprint_ignores_placement_but_not_measurement() {
        let a = parse(&["--rank", "0", "-o", "/tmp/x"]).unwrap();
        let b = parse(&["--rank", "1"]).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let c = parse(&["--no-check"]).unwrap();
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert!(
            c.fingerprint().contains("--no-check"),
            "{}",
            c.fingerprint()
        );
        // Per-host options may differ.
        let d = parse(&["--gpu", "1", "--domain", "eth0"]).unwrap();
        assert_eq!(a.fingerprint(), d.fingerprint());
    }

    #[test]
    fn every_group_has_defaults() {
        let g = Groups {
            job: defaults(),
            sweep: Some(defaults()),
            fabric: Some(defaults()),
            mem: Some(defaults()),
        };
        let all = parse(&[]).unwrap();
        assert_eq!(Groups::of(&all), g);
        assert_eq!(g.fingerprint(), all.fingerprint());
        assert_eq!(g.mem_kind(), MemKind::Host);
    }

    /// The four groups as one [`AllGroups`] field.
    #[derive(Parser, Debug)]
    struct All {
        #[command(flatten)]
        groups: AllGroups,
    }

    crate::impl_options!(All => groups);

    #[test]
    fn all_groups_read_as_the_four_groups() {
        use clap::CommandFactory;
        // The same options under the same headings, whatever the command's name and about.
        let help = |c: clap::Command| {
            let mut c = c.name("t").about(None::<&str>).long_about(None::<&str>);
            c.render_long_help().to_string()
        };
        assert_eq!(help(All::command()), help(T::command()));
        let words = [
            "t",
            "-b",
            "64",
            "-p",
            "tcp",
            "--mem",
            "huge",
            "--no-check",
            "--rank",
            "1",
        ];
        let all = All::try_parse_from(words).unwrap();
        assert_eq!(Groups::of(&all), Groups::of(&parse(&words[1..]).unwrap()));
    }

    /// A benchmark that takes only the job group: clap itself refuses the other groups' flags.
    #[derive(Parser, Debug)]
    struct JobOnly {
        #[command(flatten)]
        job: JobArgs,
    }

    crate::impl_options!(JobOnly);

    #[test]
    fn a_group_left_out_is_refused_by_clap() {
        for args in [["t", "-p", "tcp"], ["t", "-b", "8"], ["t", "--mem", "cuda"]] {
            let e = JobOnly::try_parse_from(args).unwrap_err().to_string();
            assert!(e.contains("unexpected argument"), "{args:?}: {e}");
        }
        let j = JobOnly::try_parse_from(["t", "--no-check", "--format", "jsonl"]).unwrap();
        let g = Groups::of(&j);
        assert!(g.sweep.is_none() && g.fabric.is_none() && g.mem.is_none());
        assert_eq!(g.job.format, Format::Json);
        // The fingerprint names only what the benchmark takes.
        assert!(!g.fingerprint().contains("-p "), "{}", g.fingerprint());
        assert!(g.fingerprint().contains("--no-check"));
    }
}
