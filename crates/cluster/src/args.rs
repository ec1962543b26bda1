//! The options of `efabench cluster`, and the word lists that start its benchmark stages.
//!
//! The `pairs` and `alltoall` stages are the benchmarks themselves, configured the way a user
//! would configure them: their options are built as command-line words and parsed by the
//! benchmarks' own clap definitions, so every bound and message of theirs applies unchanged.

use std::path::PathBuf;

use clap::Parser;
use efabench_bench::alltoall::AlltoallArgs;
use efabench_bench::error::OptionWords;
use efabench_bench::harness::LaunchArgs;
use efabench_bench::pairs::{PairsArgs, Plan};
use efabench_bench::BenchError;

/// Longest stage budget, seconds.
const MAX_BUDGET_S: f64 = 86_400.0;

/// From this many ranks up, `--pairs auto` measures random partners instead of every pair: all
/// pairs take n - 1 rounds, and at 64 ranks on a real cluster the pairs stage's 60 s budget
/// leaves under half a second per pair.
pub const AUTO_RANDOM_FROM: u32 = 64;

/// Partners each way per rank under `--pairs auto` from [`AUTO_RANDOM_FROM`] ranks up: 8 shifts
/// plus the 2 retest rounds that pair each suspect with ranks not named, 10 rounds at any size.
/// Sixteen pairs per node (eight each way) put a node at 80% of its peers outside the pair
/// noise of a NIC-bound cluster (docs/verdict-accuracy.md measures it).
pub const AUTO_PARTNERS: u32 = 8;

fn secs(s: &str, what: &str, lo: f64, hi: f64, example: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= lo && v <= hi => Ok(v),
        _ => Err(format!(
            "{what} '{}' is not a number of seconds from {lo} to {hi}; pass e.g. {what} {example}",
            efabench_bench::size::clip(s)
        )),
    }
}

fn budget_arg(s: &str) -> Result<f64, String> {
    secs(s, "--stage-budget", 1.0, MAX_BUDGET_S, "60")
}

fn timeout_arg(s: &str) -> Result<f64, String> {
    secs(s, "--timeout", 0.1, 86_400.0, "30")
}

fn interval_arg(s: &str) -> Result<f64, String> {
    secs(s, "--interval", 0.0, 3600.0, "1")
}

fn pct(s: &str, what: &str, example: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(format!(
            "{what} '{}' is not a percentage above 0 and at most 100; pass e.g. {what} {example}",
            efabench_bench::size::clip(s)
        )),
    }
}

fn isolate_arg(s: &str) -> Result<f64, String> {
    pct(s, "--isolate-below", "85")
}

fn warn_arg(s: &str) -> Result<f64, String> {
    pct(s, "--warn-below", "95")
}

fn alpha_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v < 0.5 => Ok(v),
        _ => Err(format!(
            "--alpha '{}' is not a probability above 0 and below 0.5; pass e.g. --alpha 0.01",
            efabench_bench::size::clip(s)
        )),
    }
}

fn fraction_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!(
            "--min-link-fraction '{}' is not a fraction above 0 and at most 1; pass e.g. --min-link-fraction 0.5",
            efabench_bench::size::clip(s)
        )),
    }
}

fn gbps_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e7 => Ok(v),
        _ => Err(format!(
            "--min-pair-gbps '{}' is not a bandwidth in Gbps above 0; pass e.g. --min-pair-gbps 80",
            efabench_bench::size::clip(s)
        )),
    }
}

/// Largest message of a benchmark stage: a stage allocates a few buffers of this size per rank.
const MAX_STAGE_SIZE: u64 = 1 << 30;

fn stage_size(s: &str, what: &str) -> Result<String, String> {
    let bytes = efabench_bench::size::parse_size(s).map_err(|e| format!("{what}: {e}"))?;
    if bytes == 0 || bytes > MAX_STAGE_SIZE {
        return Err(format!(
            "{what} '{}' is not a size from 1 byte to 1G; pass e.g. {what} 1M",
            efabench_bench::size::clip(s)
        ));
    }
    Ok(s.trim().to_string())
}

fn pairs_size_arg(s: &str) -> Result<String, String> {
    stage_size(s, "--pairs-size")
}

fn alltoall_size_arg(s: &str) -> Result<String, String> {
    stage_size(s, "--alltoall-size")
}

/// A stage `--skip` can leave out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Stage {
    /// The doctor's checks on every node, and the consistency across nodes.
    Checks,
    /// Every ordered pair of ranks, slow nodes localized.
    Pairs,
    /// All-to-all across every rank.
    Alltoall,
}

/// Options of `efabench cluster`.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Write the verdicts, checks, pair figures and stage timings as JSON to this file
    /// (docs/cluster.md has the schema); refused before anything runs when it cannot be written.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Write the verdicts and pair figures in the Prometheus text format to this file
    /// (node_exporter's textfile collector), `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub prometheus: Option<PathBuf>,
    /// Compare this run's pairs with a baseline file saved from an earlier healthy run
    /// (`--save-baseline`, `efabench baseline`), matched by rank: a cluster whose every node is
    /// equally slow is a cluster-wide finding (exit 3 below --isolate-below of it).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// After the run, write its pairs and alltoall records to this baseline file; a run of the
    /// same context (libfabric, provider, NICs) is appended to the runs already there.
    #[arg(long, value_name = "FILE")]
    pub save_baseline: Option<PathBuf>,
    /// Append the JSON Lines records of every measurement (pairs, alltoall) to this file.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Time budget of each stage, seconds: the benchmarks' --max-time is derived from it.
    #[arg(long, default_value = "60", value_parser = budget_arg, allow_hyphen_values = true)]
    pub stage_budget: f64,
    /// Budget of the checks stage (default: --stage-budget); the counter interval fits in it.
    #[arg(long, value_parser = budget_arg, allow_hyphen_values = true)]
    pub checks_budget: Option<f64>,
    /// Budget of the pairs stage (default: --stage-budget).
    #[arg(long, value_parser = budget_arg, allow_hyphen_values = true)]
    pub pairs_budget: Option<f64>,
    /// Budget of the alltoall stage (default: --stage-budget).
    #[arg(long, value_parser = budget_arg, allow_hyphen_values = true)]
    pub alltoall_budget: Option<f64>,
    /// Stages to leave out (comma-separated): checks, pairs, alltoall.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub skip: Vec<Stage>,
    /// Which pairs the pairs stage measures: auto (all below 64 ranks, else random:8 with
    /// retests, so the rounds stop growing with the cluster), all, ring or `random:K[:SEED]`
    /// (as `pairs --pairs`).
    #[arg(long = "pairs", default_value = "auto")]
    pub schedule: String,
    /// Message size of the pairs stage.
    #[arg(long, default_value = "1M", value_parser = pairs_size_arg, allow_hyphen_values = true)]
    pub pairs_size: String,
    /// Message size of the alltoall stage (bytes each rank sends in all).
    #[arg(long, default_value = "1M", value_parser = alltoall_size_arg, allow_hyphen_values = true)]
    pub alltoall_size: String,
    /// ISOLATE a node whose pairs (sending, receiving, or one rail's) are confidently below this
    /// percentage of the pairs without it (docs/cluster.md says how the confidence is
    /// measured). `--suspect-below` is the old name.
    #[arg(long, visible_alias = "suspect-below", default_value = "85", value_parser = isolate_arg, allow_hyphen_values = true)]
    pub isolate_below: f64,
    /// WARN about a node whose pairs are confidently below this percentage of its peers.
    #[arg(long, default_value = "95", value_parser = warn_arg, allow_hyphen_values = true)]
    pub warn_below: f64,
    /// The chance, over the whole run, that a healthy cluster gets any node named (the
    /// decision's family-wise error rate; Bonferroni over the nodes judged).
    #[arg(long, default_value = "0.01", value_parser = alpha_arg, allow_hyphen_values = true)]
    pub alpha: f64,
    /// ISOLATE a node whose pairs' median is below this many Gbps (default: --min-link-fraction
    /// of the link speed of the cluster's instance type, where efabench knows it).
    #[arg(long, value_parser = gbps_arg, allow_hyphen_values = true)]
    pub min_pair_gbps: Option<f64>,
    /// Fraction of the link of the nodes' instance type (the NICs a pair drove) below which a
    /// node's pairs ISOLATE it, and the median node's fail the cluster as a whole.
    #[arg(long, default_value = "0.5", value_parser = fraction_arg, allow_hyphen_values = true)]
    pub min_link_fraction: f64,
    /// Checks to leave out of the verdicts (comma-separated ids, as `efabench doctor` prints
    /// them), e.g. `efa-devices,memlock` when testing over tcp on hosts without EFA; they are
    /// still run and reported.
    #[arg(long, value_delimiter = ',', value_name = "CHECK")]
    pub ignore_check: Vec<String>,
    /// Seconds between the two counter snapshots of the node checks (error counters rising).
    #[arg(long, default_value = "1", value_parser = interval_arg, allow_hyphen_values = true)]
    pub interval: f64,
    /// libfabric provider of the pairs and alltoall stages (default: efa when present).
    #[arg(short = 'p', long)]
    pub provider: Option<String>,
    /// libfabric domain (NIC) of the benchmark stages.
    #[arg(long)]
    pub domain: Option<String>,
    /// NICs (rails) per rank in the benchmark stages: a number, all, or auto (all when every
    /// node has EFA devices and the provider is efa, else 1): a rank alone on its node drives
    /// every NIC of it, a rank per GPU the NICs of its GPU.
    #[arg(long, default_value = "auto")]
    pub rails: String,
    /// Buffer memory of the benchmark stages: host, huge, pinned, cuda or managed.
    #[arg(long, default_value = "host")]
    pub mem: String,
    /// Do not verify payloads.
    #[arg(long = "no-check")]
    pub no_check: bool,
    /// Longest any wait may go without progress, seconds; a node that has not joined by then is
    /// named.
    #[arg(long, default_value = "30", value_parser = timeout_arg, allow_hyphen_values = true)]
    pub timeout: f64,
    /// Also print the stages' own tables: a row per ordered pair (n(n-1) of them), the pairs'
    /// suspect lines and the all-to-all table. Without it the verdict table is the output; the
    /// records of every measurement go to `-o` either way.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    #[command(flatten)]
    pub launch: LaunchArgs,
}

impl ClusterArgs {
    /// `--rails` as the benchmarks take it (`auto` not resolved yet counts as 1).
    fn rails_word(&self) -> &str {
        if self.rails == "auto" {
            "1"
        } else {
            &self.rails
        }
    }

    /// `--rails auto` resolved: `all` when every node has EFA devices and the provider is efa
    /// (or left to the default, which is efa where present), else 1; other values as given.
    pub fn resolve_rails(&self, every_node_has_efa: bool) -> String {
        if self.rails != "auto" {
            return self.rails.clone();
        }
        let efa = self
            .provider
            .as_deref()
            .is_none_or(|p| p.starts_with("efa"));
        if efa && every_node_has_efa {
            "all".into()
        } else {
            "1".into()
        }
    }

    pub fn budget(&self, stage: Stage) -> f64 {
        match stage {
            Stage::Checks => self.checks_budget,
            Stage::Pairs => self.pairs_budget,
            Stage::Alltoall => self.alltoall_budget,
        }
        .unwrap_or(self.stage_budget)
    }

    pub fn runs(&self, stage: Stage) -> bool {
        !self.skip.contains(&stage)
    }

    /// Words shared by both benchmark stages.
    fn common_words(&self, size: &str, max_time: f64) -> Vec<String> {
        let mut w: Vec<String> = vec![
            "-b".into(),
            size.into(),
            "-e".into(),
            size.into(),
            "--max-time".into(),
            format!("{max_time:.3}"),
            "--rails".into(),
            self.rails_word().to_string(),
            "--mem".into(),
            self.mem.clone(),
            "--timeout".into(),
            self.timeout.to_string(),
        ];
        if let Some(p) = &self.provider {
            w.extend(["-p".into(), p.clone()]);
        }
        if let Some(d) = &self.domain {
            w.extend(["--domain".into(), d.clone()]);
        }
        if let Some(o) = &self.output {
            w.extend(["-o".into(), o.display().to_string()]);
        }
        if self.no_check {
            w.push("--no-check".into());
        }
        w
    }

    /// Checks every option against a job of `world` ranks, in the cluster's own option names,
    /// before any stage runs: the stages' benchmarks would otherwise refuse a value only when
    /// their stage starts, in options the user never typed.
    pub fn validate(&self, world: u32) -> Result<(), BenchError> {
        if self.warn_below < self.isolate_below {
            return Err(BenchError::usage(format!(
                "--warn-below {} is below --isolate-below {}: the WARN line must be at or above \
                 the ISOLATE line; pass e.g. --isolate-below 85 --warn-below 95",
                self.warn_below, self.isolate_below
            )));
        }
        if self.baseline.is_some() && !self.runs(Stage::Pairs) {
            return Err(BenchError::usage(
                "--baseline compares the pairs stage with the baseline's, and --skip pairs leaves it out; drop one of them",
            ));
        }
        let pairs = self.pairs_args(world)?;
        pairs.groups.sweep.sizes().map_err(|e| {
            BenchError::usage(format!(
                "--pairs-size '{}': {e}",
                efabench_bench::size::clip(&self.pairs_size)
            ))
        })?;
        let alltoall = self.alltoall_args()?;
        let size = alltoall.groups.sweep.max_bytes;
        let least = u64::from(world.max(1)) * efabench_bench::alltoall::CHUNK_ALIGN;
        if self.runs(Stage::Alltoall) && world > 1 && size < least {
            return Err(BenchError::usage(format!(
                "--alltoall-size {} is too small for {world} ranks: each rank sends size / {world} \
                 bytes to every rank, rounded down to {} B, which is 0; pass --alltoall-size {} or \
                 more",
                self.alltoall_size,
                efabench_bench::alltoall::CHUNK_ALIGN,
                efabench_bench::size::human(least)
            )));
        }
        Ok(())
    }

    /// The pairs stage's options for `world` ranks: `--max-time` per pair is the stage budget
    /// shared by the rounds of the schedule (each rail alone too when there are several).
    pub fn pairs_args(&self, world: u32) -> Result<PairsArgs, BenchError> {
        let probe = self.parse_pairs(world, 1.0)?;
        let rounds = Plan::Rounds(probe.schedule).cost(world.max(2)).0.max(1) as f64;
        let rails = if self.rails_word().trim() == "1" {
            1.0
        } else {
            2.0
        };
        // 0.5: opening the mesh, connecting and the barriers between rounds take the rest;
        // 1.1: warm-up.
        let max_time =
            (self.budget(Stage::Pairs) * 0.5 / (rounds * rails * 1.1)).clamp(0.001, 3600.0);
        self.parse_pairs(world, max_time)
    }

    /// The `--pairs` schedule for `world` ranks, `auto` resolved.
    pub fn schedule_for(&self, world: u32) -> String {
        if self.schedule.trim() != "auto" {
            return self.schedule.clone();
        }
        if world >= AUTO_RANDOM_FROM {
            format!("random:{AUTO_PARTNERS}")
        } else {
            "all".into()
        }
    }

    fn parse_pairs(&self, world: u32, max_time: f64) -> Result<PairsArgs, BenchError> {
        #[derive(Parser)]
        struct Words {
            #[command(flatten)]
            args: PairsArgs,
        }
        let mut w = vec!["pairs".to_string()];
        w.extend(self.common_words(&self.pairs_size, max_time));
        w.extend(["--pairs".into(), self.schedule_for(world)]);
        Words::try_parse_from(&w)
            .map(|p| p.args)
            .map_err(|e| BenchError::context("pairs stage", BenchError::Options(OptionWords(e))))
    }

    /// The alltoall stage's options: one size, `--max-time` a share of the stage budget.
    pub fn alltoall_args(&self) -> Result<AlltoallArgs, BenchError> {
        #[derive(Parser)]
        struct Words {
            #[command(flatten)]
            args: AlltoallArgs,
        }
        let max_time = (self.budget(Stage::Alltoall) * 0.6).clamp(0.001, 3600.0);
        let mut w = vec!["alltoall".to_string()];
        w.extend(self.common_words(&self.alltoall_size, max_time));
        Words::try_parse_from(&w)
            .map(|p| p.args)
            .map_err(|e| BenchError::context("alltoall stage", BenchError::Options(OptionWords(e))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: ClusterArgs,
    }

    fn args(words: &[&str]) -> ClusterArgs {
        let mut w = vec!["cluster"];
        w.extend_from_slice(words);
        Cli::try_parse_from(w).unwrap().a
    }

    #[test]
    fn the_pairs_budget_is_shared_by_the_rounds() {
        let a = args(&["--pairs-budget", "11", "-p", "tcp", "--pairs-size", "64K"]);
        let p = a.pairs_args(4).unwrap();
        // all pairs of 4 ranks: 3 rounds; 11 s x 0.5 / (3 x 1.1).
        assert!(
            (p.max_time - 11.0 * 0.5 / 3.3).abs() < 0.002,
            "{}",
            p.max_time
        );
        assert_eq!(p.groups.sweep.min_bytes, 64 << 10);
        assert_eq!(p.groups.fabric.provider.as_deref(), Some("tcp"));
        assert_eq!(p.suspect_below, 60.0);
        // auto: every NIC where every node has EFA and the provider is efa; else one.
        assert_eq!(a.resolve_rails(true), "1", "-p tcp");
        assert_eq!(args(&[]).resolve_rails(true), "all");
        assert_eq!(args(&[]).resolve_rails(false), "1");
        assert_eq!(args(&["--rails", "2"]).resolve_rails(false), "2");
        let t = a.alltoall_args().unwrap();
        assert!((t.max_time - 36.0).abs() < 1e-9, "{}", t.max_time);
        assert_eq!(t.groups.sweep.max_bytes, 1 << 20);
    }

    #[test]
    fn the_default_schedule_stops_growing_at_64_ranks() {
        use efabench_bench::pairs::Schedule;
        let a = args(&[]);
        assert_eq!(a.schedule_for(63), "all");
        assert_eq!(a.schedule_for(64), "random:8");
        let rounds = |n: u32| {
            let p = a.pairs_args(n).unwrap();
            (Plan::Rounds(p.schedule).cost(n).0, p.max_time)
        };
        assert_eq!(rounds(63).0, 62);
        // 8 random shifts and 2 retest rounds, whatever the size; each pair gets 60 x 0.5 / 11.
        for n in [64, 256, 1024] {
            let (r, t) = rounds(n);
            assert_eq!(r, 10, "{n} ranks");
            assert!((t - 30.0 / 11.0).abs() < 1e-3, "{t}");
        }
        assert!(matches!(
            a.pairs_args(64).unwrap().schedule,
            Schedule::Random { k: 8, .. }
        ));
        // An explicit schedule is kept at any size.
        assert_eq!(args(&["--pairs", "all"]).schedule_for(1024), "all");
        assert_eq!(args(&["--pairs", "ring"]).schedule_for(8), "ring");
    }

    #[test]
    fn sizes_are_refused_in_the_clusters_own_words_before_any_stage() {
        for (opt, bad) in [
            ("--pairs-size", "0"),
            ("--pairs-size", "2G"),
            ("--alltoall-size", "0"),
            ("--alltoall-size", "1X"),
        ] {
            let e = Cli::try_parse_from(["cluster", opt, bad])
                .err()
                .unwrap_or_else(|| panic!("{opt} {bad} accepted"))
                .to_string();
            assert!(e.contains(opt), "{opt} {bad}: {e}");
            assert!(!e.contains("--min-bytes") && !e.contains("-b/"), "{e}");
        }
        // The alltoall size must give every rank a chunk of at least 16 bytes.
        let a = args(&["--alltoall-size", "256"]);
        a.validate(16).unwrap();
        let e = a.validate(32).unwrap_err();
        assert!(e.is_usage());
        let msg = e.to_string();
        assert!(
            msg.contains("--alltoall-size 256 is too small for 32 ranks")
                && msg.contains("--alltoall-size 512"),
            "{msg}"
        );
        // Skipped, the alltoall stage cannot refuse anything.
        args(&["--alltoall-size", "256", "--skip", "alltoall"])
            .validate(32)
            .unwrap();
        args(&[]).validate(1024).unwrap();
        // The old option name sets the ISOLATE line; the WARN line may not be under it.
        assert_eq!(args(&["--suspect-below", "70"]).isolate_below, 70.0);
        let e = args(&["--isolate-below", "90", "--warn-below", "80"])
            .validate(4)
            .unwrap_err();
        assert!(
            e.is_usage() && e.to_string().contains("--warn-below 80"),
            "{e}"
        );
        // A baseline compares the pairs stage: not with it skipped.
        let e = args(&["--baseline", "b.json", "--skip", "pairs"])
            .validate(4)
            .unwrap_err();
        assert!(
            e.is_usage() && e.to_string().contains("--skip pairs"),
            "{e}"
        );
        args(&["--baseline", "b.json", "--skip", "alltoall"])
            .validate(4)
            .unwrap();
    }

    #[test]
    fn bad_stage_options_are_refused_with_the_benchmarks_own_message() {
        let a = args(&["--pairs", "sideways"]);
        let e = a.pairs_args(4).unwrap_err();
        assert!(e.is_usage());
        assert!(
            e.to_string()
                .contains("--pairs 'sideways' is not a schedule"),
            "{e}"
        );
        let a = args(&["--mem", "floppy"]);
        assert!(a
            .alltoall_args()
            .unwrap_err()
            .to_string()
            .contains("floppy"));
        let mut w = vec!["cluster", "--stage-budget", "0"];
        assert!(Cli::try_parse_from(&w).is_err());
        for bad in [
            ["--rank", "-1"],
            ["--world", "0"],
            ["--suspect-below", "0"],
            ["--warn-below", "101"],
            ["--alpha", "0.7"],
        ] {
            let mut w = vec!["cluster"];
            w.extend(bad);
            assert!(Cli::try_parse_from(&w).is_err(), "{bad:?}");
        }
        w = vec!["cluster", "--skip", "pairs,alltoall"];
        let a = Cli::try_parse_from(&w).unwrap().a;
        assert!(!a.runs(Stage::Pairs) && a.runs(Stage::Checks));
    }
}
