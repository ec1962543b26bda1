//! The options of `efabench queue` and their checks: every value is parsed and bounded here,
//! before anything touches the GPU.

use crate::error::BenchError;
use crate::harness::{bounded, CommonArgs, Rails};
use efabench_gpu::MemKind;

use super::shape::ProducerShape;

/// Options of `efabench queue`.
#[derive(clap::Args, Debug, Clone)]
pub struct QueueArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Rings, comma-separated: pinned, managed, gdr, hybrid, libefaxx.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pinned,managed,gdr,hybrid,libefaxx"
    )]
    pub ring: Vec<String>,
    /// Producer shapes, BLOCKSxTHREADS comma-separated; SM = the GPU's SM count.
    #[arg(long, default_value = ProducerShape::DEFAULT_LIST)]
    pub producers: String,
    /// Consumer threads, comma-separated, each 1 to 8.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub consumers: Vec<String>,
    /// Modes, comma-separated: nbi, blocking.
    #[arg(long, value_delimiter = ',', default_value = "nbi,blocking")]
    pub mode: Vec<String>,
    /// Commands per nbi point (blocking points take a 32nd, at least one per producer).
    #[arg(long, default_value = "4194304", value_parser = commands_arg, allow_hyphen_values = true)]
    pub commands: u64,
    /// nbi commands per lane per claim (0: enough for 512 commands per warp claim).
    #[arg(long, default_value = "0", value_parser = batch_arg, allow_hyphen_values = true)]
    pub batch: u64,
    /// Publish without the system-scope fence a real proxy needs before each batch.
    #[arg(long)]
    pub no_release: bool,
    /// Seconds a point may push before its producers are told to stop (slow rings then report
    /// what they did in that time, marked `truncated`).
    #[arg(long, default_value = "1.5", value_parser = budget_arg, allow_hyphen_values = true)]
    pub budget: f64,
    /// How producers wait for the consumers' tails: cached (a device-memory copy that one warp
    /// at a time refreshes) or direct (read them where they live).
    #[arg(long, default_value = "cached")]
    pub tail_poll: String,
    /// With direct polling: nanoseconds a producer sleeps between two reads of a tail.
    #[arg(long, default_value = "0", value_parser = sleep_arg, allow_hyphen_values = true)]
    pub poll_sleep_ns: u64,
}

fn sleep_arg(s: &str) -> Result<u64, String> {
    bounded(s, "--poll-sleep-ns", 0, 1_000_000, "200")
}

fn commands_arg(s: &str) -> Result<u64, String> {
    bounded(s, "--commands", 1, 1 << 26, "4194304")
}

fn batch_arg(s: &str) -> Result<u64, String> {
    bounded(s, "--batch", 0, 4096, "16")
}

fn budget_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t > 0.0 && t <= 600.0 => Ok(t),
        _ => Err(format!(
            "--budget '{}' is not a number of seconds above 0 and at most 600; pass e.g. --budget 1.5",
            crate::size::clip(s)
        )),
    }
}

pub(super) fn list<T>(
    what: &str,
    v: &[String],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, BenchError> {
    let out: Result<Vec<T>, String> = v
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| parse(s))
        .collect();
    let out = out.map_err(BenchError::usage)?;
    if out.is_empty() {
        return Err(BenchError::usage(format!(
            "{what} is empty: give at least one value"
        )));
    }
    Ok(out)
}

/// The shared options that mean nothing for a command ring are refused, not ignored.
pub(super) fn refuse_unused(c: &CommonArgs) -> Result<(), BenchError> {
    let mut bad = Vec::new();
    if c.iters.is_some() || c.warmup.is_some() {
        bad.push("-n/-w (use --commands)");
    }
    if c.min_bytes != 8 || c.max_bytes != 1 << 20 {
        bad.push("-b/-e (commands are 16 bytes)");
    }
    if c.provider.is_some() || c.domain.is_some() || c.per_rail || c.rails != Rails::Count(1) {
        bad.push("-p/--domain/--rails/--per-rail (no network is used)");
    }
    if c.mem != MemKind::Host {
        bad.push("--mem (each ring places its own memory; use --ring)");
    }
    if c.no_check {
        bad.push("--no-check (every command is always verified)");
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(BenchError::usage(format!(
            "queue does not take {}: drop them",
            bad.join(", ")
        )))
    }
}
