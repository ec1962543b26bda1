//! Byte sizes as users type them: `8`, `4K`, `1M`, `1G` (powers of 1024, as in nccl-tests and
//! fabtests), and the sweep of sizes a benchmark walks.

use crate::error::BenchError;

/// Parse `8`, `4K`, `4k`, `4KiB`, `1M`, `1G` into bytes (powers of 1024).
pub fn parse_size(input: &str) -> Result<u64, String> {
    // Messages echo the input clipped, so a 100 KB argument is not printed whole.
    let shown = clip(input);
    let s = shown.as_str();
    let t = input.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "invalid size '{s}': expected a number with an optional K, M or G suffix, like 8, 4K, 1M"
        ));
    }
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => {
            return Err(format!(
                "invalid size '{s}': unknown suffix '{}'; use K, M or G (powers of 1024), like 4K or 1M",
                clip(suffix)
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid size '{s}': the number is too large"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size '{s}': larger than 2^64 bytes"))
}

/// Sizes from `min` to `max`, multiplying by `factor`; `max` is always included (as Libefaxx and
/// nccl-tests do when the steps overshoot it).
pub fn sweep(min: u64, max: u64, factor: u64) -> Result<Vec<u64>, BenchError> {
    if min == 0 {
        return Err(BenchError::usage(
            "-b/--min-bytes must be at least 1; pass e.g. -b 8",
        ));
    }
    if min > max {
        return Err(BenchError::usage(format!(
            "-b/--min-bytes ({min}) is larger than -e/--max-bytes ({max}); pass a smaller -b or a larger -e"
        )));
    }
    if factor < 2 {
        return Err(BenchError::usage(format!(
            "-f/--step-factor must be 2 or more (got {factor}); pass e.g. -f 2"
        )));
    }
    let mut sizes = Vec::new();
    let mut s = min;
    while s <= max {
        sizes.push(s);
        match s.checked_mul(factor) {
            Some(n) => s = n,
            None => break,
        }
    }
    if sizes.last() != Some(&max) {
        sizes.push(max);
    }
    Ok(sizes)
}

/// User input as it may be echoed in a one-line error: at most 40 characters, with an ellipsis.
pub fn clip(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        return s.to_string();
    }
    let head: String = s.chars().take(MAX).collect();
    format!("{head}...")
}

/// Sizes print with the one formatter every crate uses ([`efabench_record::human_size`]: `8`,
/// `4K`, `1536`, `1M`), which [`parse_size`] reads back.
pub use efabench_record::human_size as human;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
    }

    #[test]
    fn rejects_bad_sizes_with_a_hint() {
        let e = parse_size("1X").unwrap_err();
        assert!(e.contains("'1X'") && e.contains("K, M or G"), "{e}");
        assert!(parse_size("").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn sweep_includes_max_and_rejects_inverted_ranges() {
        assert_eq!(sweep(8, 64, 2).unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(sweep(8, 100, 4).unwrap(), vec![8, 32, 100]);
        assert_eq!(sweep(5, 5, 2).unwrap(), vec![5]);
        assert!(sweep(64, 8, 2).unwrap_err().is_usage());
        assert!(sweep(8, 64, 1).unwrap_err().is_usage());
        assert!(sweep(0, 64, 2).unwrap_err().is_usage());
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(8), "8");
        assert_eq!(human(4096), "4K");
        assert_eq!(human(3 << 20), "3M");
        assert_eq!(human(1000), "1000");
    }
}
