//! The options of `efabench queue` and their checks: every value is parsed and bounded here,
//! before anything touches the GPU. Of the shared groups the queue takes only the job's: a ring
//! has no message sizes, no network and places its own memory, so clap refuses `-b`, `-p` or
//! `--mem` for it.

use crate::harness::{bounded, gpu_arg, JobArgs};
use efabench_gpu::queue::{Mode, Release, RingKind, TailPoll, MAX_CONSUMERS};
use efabench_gpu::GpuChoice;

use super::shape::ProducerShape;

/// Options of `efabench queue`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct QueueArgs {
    /// Rings, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "pinned,managed,gdr,hybrid,libefaxx"
    )]
    pub ring: Vec<RingKind>,
    /// Producer shapes, BLOCKSxTHREADS comma-separated; SM = the GPU's SM count.
    #[arg(long, default_value = ProducerShape::DEFAULT_LIST)]
    pub producers: String,
    /// Consumer threads, comma-separated, each 1 to 8.
    #[arg(long, value_delimiter = ',', default_value = "1,4", value_parser = consumers_arg, allow_hyphen_values = true)]
    pub consumers: Vec<u32>,
    /// Modes, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "nbi,blocking"
    )]
    pub mode: Vec<Mode>,
    /// Commands per nbi point (blocking points take a 32nd, at least one per producer).
    #[arg(long, default_value = "4194304", value_parser = commands_arg, allow_hyphen_values = true)]
    pub commands: u64,
    /// nbi commands per lane per claim (0: enough for 512 commands per warp claim).
    #[arg(long, default_value = "0", value_parser = batch_arg, allow_hyphen_values = true)]
    pub batch: u64,
    /// How a command is ordered after the producer's earlier writes (its payload): `fence` (a
    /// system-scope fence before every batch), `store` (the slot's store of a one-command claim
    /// is a system-scope release; a batch of several takes a fence), `none` (what the ring
    /// costs without a payload to publish).
    #[arg(long, value_enum, default_value = "fence")]
    pub release: Release,
    /// The same as `--release none`.
    #[arg(long, hide = true, conflicts_with = "release")]
    pub no_release: bool,
    /// Skip the bare GPU -> CPU -> GPU round trip that blocking points are compared with (by
    /// default measured first whenever a blocking point is, as `ring: floor`).
    #[arg(long)]
    pub no_floor: bool,
    /// Seconds a point may push before its producers are told to stop (slow rings then report
    /// what they did in that time, marked `truncated`).
    #[arg(long, default_value = "1.5", value_parser = budget_arg, allow_hyphen_values = true)]
    pub budget: f64,
    /// How producers wait for the consumers' tails.
    #[arg(long, value_enum, default_value = "cached")]
    pub tail_poll: TailPoll,
    /// With direct polling: nanoseconds a producer sleeps between two reads of a tail.
    #[arg(long, default_value = "0", value_parser = sleep_arg, allow_hyphen_values = true)]
    pub poll_sleep_ns: u64,
    /// The GPU: an index, or auto (= local rank).
    #[arg(long, default_value = "auto", value_parser = gpu_arg)]
    pub gpu: GpuChoice,
    #[command(flatten)]
    pub job: JobArgs,
}

crate::impl_options!(QueueArgs);

impl QueueArgs {
    /// The ordering the producers use (`--no-release` is `--release none`).
    pub fn ordering(&self) -> Release {
        if self.no_release {
            Release::None
        } else {
            self.release
        }
    }
}

fn consumers_arg(s: &str) -> Result<u32, String> {
    bounded(s, "--consumers", 1, MAX_CONSUMERS as u64, "1,4").map(|n| n as u32)
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
