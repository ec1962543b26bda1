//! Small helpers every record writer needs: a UTC timestamp, the host name, a whole-file write
//! (`write_atomically`, for files other programs read while we rewrite them), and sizes in the
//! `8 / 4K / 1M / 1G` notation (powers of 1024) that the tables and plots print. (Parsing sizes
//! from the command line is the benchmark options' job: `efabench_bench::size`.)
//!
//! They live with the record because every record carries a timestamp and a host, and because
//! the tables and plots print sizes the same way. No `chrono` and no `libc`: the timestamp is computed from `SystemTime` with the civil-from-days
//! algorithm, and the host name is read from procfs.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current time as RFC 3339 in UTC with millisecond precision, e.g.
/// `2026-11-22T03:18:29.123Z`. A clock set before 1970 yields the epoch.
pub fn now_rfc3339() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339_from_unix(d.as_secs() as i64, d.subsec_millis())
}

/// Formats seconds since the Unix epoch (plus milliseconds) as RFC 3339 UTC.
pub fn rfc3339_from_unix(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        millis.min(999)
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The host name as the kernel knows it (`/proc/sys/kernel/hostname`), falling back to
/// `/etc/hostname`, then `$HOSTNAME`, then `"unknown"`. Never empty, never panics.
pub fn hostname() -> String {
    let from_file = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    from_file("/proc/sys/kernel/hostname")
        .or_else(|| from_file("/etc/hostname"))
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

// The suffixes the size options accept (`efabench_bench::size::parse_size`).
const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];

/// A byte count as efabench prints every size (labels, headers, plot axes, error hints): the
/// largest power-of-1024 unit that divides it exactly, else the plain count — `8`, `1000`, `4K`,
/// `1536`, `1M`, `1536K`, `1G`. Always exact, and always a form the size options accept
/// (`-b 1536K`), so a printed size can be typed back and never hides a rounding.
pub fn human_size(bytes: u64) -> String {
    for (unit, suffix) in UNITS {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Writes `text` to `path` so that a reader sees the old file or the new one, never a part: a
/// temporary file in the same directory (named `.<name>.<pid>.tmp`, so a collector that reads
/// only `*.prom` or `*.json` skips it), flushed to disk, then renamed over `path`.
pub fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339_from_unix(0, 0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (leap day in a century leap year) 12:34:56.789
        assert_eq!(
            rfc3339_from_unix(951_827_696, 789),
            "2000-02-29T12:34:56.789Z"
        );
        // 2024-12-31T23:59:59
        assert_eq!(
            rfc3339_from_unix(1_735_689_599, 0),
            "2024-12-31T23:59:59.000Z"
        );
        // 2100-03-01 (2100 is not a leap year)
        assert_eq!(
            rfc3339_from_unix(4_107_542_400, 5),
            "2100-03-01T00:00:00.005Z"
        );
        assert_eq!(rfc3339_from_unix(-1, 0), "1969-12-31T23:59:59.000Z");
    }

    #[test]
    fn now_is_well_formed() {
        let s = now_rfc3339();
        assert_eq!(s.len(), 24, "{s}");
        assert!(
            s.ends_with('Z') && &s[4..5] == "-" && &s[10..11] == "T",
            "{s}"
        );
        assert!(s.as_str() >= "2024-01-01", "{s}");
    }

    #[test]
    fn hostname_is_not_empty() {
        let h = hostname();
        assert!(!h.is_empty() && !h.contains('\n'));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(0), "0");
        assert_eq!(human_size(8), "8");
        assert_eq!(human_size(1000), "1000");
        assert_eq!(human_size(1023), "1023");
        assert_eq!(human_size(1024), "1K");
        assert_eq!(human_size(4096), "4K");
        assert_eq!(human_size(1536), "1536");
        assert_eq!(human_size(1 << 20), "1M");
        assert_eq!(human_size(3 << 19), "1536K");
        assert_eq!(human_size(3 << 20), "3M");
        assert_eq!(human_size(1 << 30), "1G");
        assert_eq!(human_size(1 << 40), "1024G");
        assert_eq!(human_size(u64::MAX), "18446744073709551615");
    }
}
