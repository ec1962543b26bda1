//! The value parsers of the shared options: each number in its bounds, each refusal one line that
//! names the bound and a fix (clap's value parsers call these; the CLI turns the message into exit
//! status 2). The bounds are chosen so that the arithmetic that follows cannot overflow and no
//! allocation can be absurd.

use efabench_gpu::GpuChoice;

use crate::size::parse_size;

use super::options::Rails;

/// Largest message or buffer size any option accepts: 64 GiB.
pub const MAX_SIZE: u64 = 64 << 30;
/// Most timed iterations per point (each keeps an 8-byte sample).
pub const MAX_ITERS: u64 = 10_000_000;
/// Most warm-up iterations per point.
pub const MAX_WARMUP: u64 = 1_000_000;
/// Longest `--timeout`, seconds.
pub const MAX_TIMEOUT_S: f64 = 86_400.0;
/// Most rails a rank may ask for.
pub const MAX_RAILS: u32 = 64;

/// Parses a whole number in `lo..=hi`; `what` names the option in the message.
pub fn bounded(s: &str, what: &str, lo: u64, hi: u64, example: &str) -> Result<u64, String> {
    let t = s.trim();
    match t.parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "{what} {n} is out of range: use {lo} to {hi}, e.g. {what} {example}"
        )),
        Err(_) if t.starts_with('-') && t[1..].chars().all(|c| c.is_ascii_digit()) => Err(format!(
            "{what} {t} is negative: use {lo} to {hi}, e.g. {what} {example}"
        )),
        Err(_) if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) => Err(format!(
            "{what} {} is too large: use {lo} to {hi}",
            crate::size::clip(t)
        )),
        Err(_) => Err(format!(
            "{what} '{}' is not a whole number: use {lo} to {hi}, e.g. {what} {example}",
            crate::size::clip(t)
        )),
    }
}

pub(super) fn size_arg(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n > MAX_SIZE {
        return Err(format!(
            "size {} is larger than the 64G efabench accepts; pass at most 64G",
            crate::size::clip(s)
        ));
    }
    Ok(n)
}

/// Parses a size (8, 4K, 1M, as `-b`) in `lo` to 64G; `what` names the option in the message.
pub fn bounded_size(s: &str, what: &str, lo: u64, example: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n < lo || n > MAX_SIZE {
        return Err(format!(
            "{what} {} is out of range: use {lo} to 64G, e.g. {what} {example}",
            crate::size::clip(s)
        ));
    }
    Ok(n)
}

/// The command-line spelling of a value of an option that picks from a set (`pingpong`).
pub fn name_of(v: &impl clap::ValueEnum) -> String {
    v.to_possible_value()
        .map_or_else(String::new, |p| p.get_name().to_string())
}

pub(super) fn factor_arg(s: &str) -> Result<u64, String> {
    bounded(s, "-f/--step-factor", 2, 1024, "2")
}

/// `-n/--iters`, bounded.
pub fn iters_arg(s: &str) -> Result<u64, String> {
    bounded(s, "-n/--iters", 1, MAX_ITERS, "1000")
}

/// `-w/--warmup`, bounded.
pub fn warmup_arg(s: &str) -> Result<u64, String> {
    bounded(s, "-w/--warmup", 0, MAX_WARMUP, "10")
}

pub(super) fn timeout_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t > 0.0 && t <= MAX_TIMEOUT_S => Ok(t),
        _ => Err(format!(
            "--timeout '{}' is not a number of seconds above 0 and at most {MAX_TIMEOUT_S}; pass e.g. --timeout 30",
            crate::size::clip(s)
        )),
    }
}

pub fn gpu_arg(s: &str) -> Result<GpuChoice, String> {
    s.parse().map_err(|_| {
        format!(
            "invalid --gpu '{}': use a GPU index (0, 1, ...) or auto",
            crate::size::clip(s)
        )
    })
}

pub(super) fn rails_arg(s: &str) -> Result<Rails, String> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(Rails::All);
    }
    bounded(s, "--rails", 1, MAX_RAILS as u64, "2 or --rails all").map(|n| Rails::Count(n as u32))
}

pub(super) fn rank_arg(s: &str) -> Result<u32, String> {
    bounded(s, "--rank", 0, 65_535, "0").map(|n| n as u32)
}

pub(super) fn world_arg(s: &str) -> Result<u32, String> {
    bounded(s, "--world", 1, 65_536, "2").map(|n| n as u32)
}
