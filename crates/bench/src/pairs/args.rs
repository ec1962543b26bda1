//! The options of `pairs` and their parsers: each refuses a bad value with the option's name
//! and an example of a good one.

use super::schedule::{Schedule, DEFAULT_SEED};
use crate::harness::{self, AllGroups};

/// Options of `pairs`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct PairsArgs {
    /// Writes in flight per window, 1 to 4096.
    #[arg(long, default_value = "16", value_parser = window_arg, allow_hyphen_values = true)]
    pub window: u64,
    /// Measure one pair at a time instead of a ring shift (all pairs of a round at once).
    #[arg(long)]
    pub one_at_a_time: bool,
    /// Name pairs below this percentage of the median bandwidth of their size (1 to 100).
    #[arg(long, default_value = "80", value_parser = pct_arg, allow_hyphen_values = true)]
    pub outlier: f64,
    /// Name a rank as suspect when the median of its pairs (sending or receiving) is below this
    /// percentage of the median of the pairs without it (1 to 100).
    #[arg(long, default_value = "60", value_parser = suspect_arg, allow_hyphen_values = true)]
    pub suspect_below: f64,
    /// Longest timed part of one pair's measurement, in seconds: it stops after -n windows or
    /// this, whichever comes first (warm-up is bounded by a tenth of it).
    #[arg(long, default_value = "1", value_parser = harness::max_time_arg, allow_hyphen_values = true)]
    pub max_time: f64,
    /// Which pairs: all (every ordered pair, n-1 rounds), ring (each rank with its two
    /// neighbours), or `random:K[:SEED]` (K partners each way per rank from a shared seed); ring and
    /// random are followed by 2 retest rounds that pair the suspects with ranks not named.
    #[arg(long = "pairs", default_value = "all", value_parser = schedule_arg)]
    pub schedule: Schedule,
    /// Exit 1 when any pair is below this bandwidth in Gbps (a cluster acceptance gate).
    #[arg(long, value_parser = min_bw_arg, allow_hyphen_values = true)]
    pub min_bw: Option<f64>,
    #[command(flatten)]
    pub groups: AllGroups,
    /// When the whole run must end (set by `cluster` for its pairs stage, not an option): the
    /// time per pair is then what setup left of it, shared by the rounds, and `max_time` only
    /// bounds it.
    #[arg(skip)]
    pub deadline: Option<std::time::Instant>,
}

crate::impl_options!(PairsArgs => groups);

fn window_arg(s: &str) -> Result<u64, String> {
    harness::bounded(s, "--window", 1, 4096, "16")
}

fn pct(s: &str, what: &str, example: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(format!(
            "{what} '{}' is not a percentage above 0 and at most 100; pass e.g. {what} {example}",
            crate::size::clip(s)
        )),
    }
}

fn pct_arg(s: &str) -> Result<f64, String> {
    pct(s, "--outlier", "80")
}

fn suspect_arg(s: &str) -> Result<f64, String> {
    pct(s, "--suspect-below", "60")
}

fn schedule_arg(s: &str) -> Result<Schedule, String> {
    let bad = || {
        format!(
            "--pairs '{}' is not a schedule; pass --pairs all, --pairs ring or --pairs random:K \
             (K partners per rank, 1 to 65535, optionally random:K:SEED)",
            crate::size::clip(s)
        )
    };
    let t = s.trim();
    match t {
        "all" => return Ok(Schedule::All),
        "ring" => return Ok(Schedule::Ring),
        _ => {}
    }
    let rest = t.strip_prefix("random:").ok_or_else(bad)?;
    let mut parts = rest.split(':');
    let k = parts
        .next()
        .and_then(|k| k.parse::<u32>().ok())
        .filter(|k| (1..=65535).contains(k))
        .ok_or_else(bad)?;
    let seed = match parts.next() {
        None => DEFAULT_SEED,
        Some(x) => x.parse::<u64>().map_err(|_| bad())?,
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(Schedule::Random { k, seed })
}

fn min_bw_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() && v < 1e7 => Ok(v),
        _ => Err(format!(
            "--min-bw '{}' is not a bandwidth in Gbps (0 or more); pass e.g. --min-bw 90",
            crate::size::clip(s)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_reject_with_a_hint() {
        assert_eq!(schedule_arg("all"), Ok(Schedule::All));
        assert_eq!(schedule_arg("ring"), Ok(Schedule::Ring));
        assert_eq!(
            schedule_arg("random:8"),
            Ok(Schedule::Random { k: 8, seed: 1 })
        );
        assert_eq!(
            schedule_arg("random:3:77"),
            Ok(Schedule::Random { k: 3, seed: 77 })
        );
        for bad in [
            "",
            "random",
            "random:0",
            "random:x",
            "random:2:y",
            "random:2:3:4",
            "star",
        ] {
            let e = schedule_arg(bad).unwrap_err();
            assert!(e.contains("pass --pairs all"), "{bad}: {e}");
        }
    }
}
