//! Options every benchmark shares. Names follow nccl-tests and fabtests where one exists
//! (`-b -e -f -n -w`), so users can carry their muscle memory over.
//!
//! Parsers here return one-line messages that say what is wrong and how to fix it; the CLI turns
//! them into exit status 2.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::BenchError;
use crate::size::{parse_size, sweep};

/// Memory kinds a benchmark buffer may live in (`--mem`).
pub const MEM_KINDS: [&str; 4] = ["host", "pinned", "cuda", "managed"];
/// Output formats of stdout (`--format`).
pub const FORMATS: [&str; 3] = ["table", "json", "csv"];

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
}

fn count_arg(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number; pass e.g. 1000")),
    }
}

fn warmup_arg(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .map_err(|_| format!("'{s}' is not a whole number; pass e.g. 10"))
}

fn mem_arg(s: &str) -> Result<String, String> {
    let k = s.trim().to_ascii_lowercase();
    if MEM_KINDS.contains(&k.as_str()) {
        Ok(k)
    } else {
        Err(format!(
            "unknown memory kind '{s}'; use one of {}",
            MEM_KINDS.join(", ")
        ))
    }
}

fn format_arg(s: &str) -> Result<String, String> {
    let k = s.trim().to_ascii_lowercase();
    if FORMATS.contains(&k.as_str()) {
        Ok(k)
    } else {
        Err(format!(
            "unknown format '{s}'; use one of {}",
            FORMATS.join(", ")
        ))
    }
}

fn timeout_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t > 0.0 && t.is_finite() => Ok(t),
        _ => Err(format!(
            "'{s}' is not a positive number of seconds; pass e.g. 30"
        )),
    }
}

fn rails_arg(s: &str) -> Result<Rails, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Rails::All);
    }
    match s.trim().parse::<u32>() {
        Ok(0) | Err(_) => Err(format!(
            "'{s}' is not a rail count; pass a number ≥ 1 or 'all'"
        )),
        Ok(n) => Ok(Rails::Count(n)),
    }
}

/// How many NICs (rails) a rank drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rails {
    Count(u32),
    All,
}

/// How a multi-rail transfer is spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    /// Each message is cut into one slice per rail.
    Split,
    /// Whole messages go to the rails in turn.
    RoundRobin,
}

/// The shared benchmark options (DESIGN.md "Benchmark options shared by all").
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Smallest message size (8, 4K, 1M, 1G; powers of 1024).
    #[arg(short = 'b', long = "min-bytes", default_value = "8", value_parser = size_arg)]
    pub min_bytes: u64,
    /// Largest message size.
    #[arg(short = 'e', long = "max-bytes", default_value = "1M", value_parser = size_arg)]
    pub max_bytes: u64,
    /// Multiply the size by this factor at each step.
    #[arg(short = 'f', long = "step-factor", default_value_t = 2)]
    pub step_factor: u64,
    /// Timed iterations per size (default: scaled with the size, as fabtests does).
    #[arg(short = 'n', long = "iters", value_parser = count_arg)]
    pub iters: Option<u64>,
    /// Untimed warm-up iterations per size (default: a tenth of the iterations, 2 to 100).
    #[arg(short = 'w', long = "warmup", value_parser = warmup_arg)]
    pub warmup: Option<u64>,
    /// libfabric provider (default: efa when present, else shm on one host, else tcp).
    #[arg(short = 'p', long)]
    pub provider: Option<String>,
    /// libfabric domain (NIC), e.g. rdmap16s27 (default: the first the provider lists).
    #[arg(long)]
    pub domain: Option<String>,
    /// Buffer memory: host, pinned, cuda or managed.
    #[arg(long, default_value = "host", value_parser = mem_arg)]
    pub mem: String,
    /// GPU for --mem cuda|pinned|managed: an index, or auto (= local rank).
    #[arg(long, default_value = "auto")]
    pub gpu: String,
    /// NICs to drive per rank: a number or all.
    #[arg(long, default_value = "1", value_parser = rails_arg)]
    pub rails: Rails,
    /// How messages are spread over several rails.
    #[arg(long, value_enum, default_value_t = Strategy::Split)]
    pub strategy: Strategy,
    /// Verify every payload (the default).
    #[arg(long, overrides_with = "no_check")]
    pub check: bool,
    /// Do not verify payloads.
    #[arg(long = "no-check", overrides_with = "check")]
    pub no_check: bool,
    /// Append JSON Lines records to this file (rank 0 writes).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Standard output format: table, json or csv.
    #[arg(long, default_value = "table", value_parser = format_arg)]
    pub format: String,
    /// Longest any wait may last, in seconds, before the whole job aborts.
    #[arg(long, default_value = "30", value_parser = timeout_arg)]
    pub timeout: f64,
    /// Rendezvous HOST:PORT served by rank 0 (manual multi-host runs).
    #[arg(long)]
    pub rdzv: Option<String>,
    /// This process's rank (manual runs, with --world and --rdzv).
    #[arg(long)]
    pub rank: Option<u32>,
    /// Number of ranks (manual runs).
    #[arg(long)]
    pub world: Option<u32>,
    /// Path of libfabric.so.1 to load (default: /opt/amazon/efa, then the system's).
    #[arg(long, env = "EFABENCH_LIBFABRIC")]
    pub libfabric: Option<PathBuf>,
}

impl CommonArgs {
    /// Whether payloads are verified.
    pub fn verify(&self) -> bool {
        !self.no_check
    }

    /// The `--timeout` as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout)
    }

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
}

/// fabtests scales iterations down as messages grow so a sweep ends in reasonable time:
/// 10 000 below 64 KiB, 1 000 up to 1 MiB, 100 above. A streaming iteration moves a whole window,
/// so the message budget is divided by the window.
pub fn default_iters(size: u64, per_window: u64) -> u64 {
    let messages: u64 = if size < 64 << 10 {
        10_000
    } else if size <= 1 << 20 {
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

    #[derive(Parser, Debug)]
    struct T {
        #[command(flatten)]
        c: CommonArgs,
    }

    fn parse(args: &[&str]) -> Result<CommonArgs, String> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        T::try_parse_from(v).map(|t| t.c).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_sane() {
        let c = parse(&[]).unwrap();
        assert_eq!((c.min_bytes, c.max_bytes, c.step_factor), (8, 1 << 20, 2));
        assert!(c.verify());
        assert_eq!(c.format, "table");
        assert_eq!(c.rails, Rails::Count(1));
        assert_eq!(c.iterations(8, 1), (10_000, 100));
        assert_eq!(c.iterations(4 << 20, 1), (100, 10));
        assert_eq!(c.iterations(8, 64), (313, 31));
    }

    #[test]
    fn bad_values_are_rejected_with_a_fix() {
        let e = parse(&["-b", "1X"]).unwrap_err();
        assert!(e.contains("K, M or G"), "{e}");
        assert!(parse(&["-n", "0"]).unwrap_err().contains("at least 1"));
        assert!(parse(&["--mem", "gpu"])
            .unwrap_err()
            .contains("host, pinned, cuda, managed"));
        assert!(parse(&["--format", "xml"])
            .unwrap_err()
            .contains("table, json, csv"));
        assert!(parse(&["--timeout", "0"]).unwrap_err().contains("positive"));
        assert!(parse(&["--rails", "0"]).unwrap_err().contains("'all'"));
        let c = parse(&["-b", "1M", "-e", "8"]).unwrap();
        assert!(c.sizes().unwrap_err().is_usage());
    }

    #[test]
    fn no_check_turns_verification_off() {
        assert!(!parse(&["--no-check"]).unwrap().verify());
        assert!(parse(&["--no-check", "--check"]).unwrap().verify());
    }
}
