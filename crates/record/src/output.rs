//! What a benchmark prints on stdout while it runs: a human table, JSON Lines or CSV.
//!
//! The table follows nccl-tests, the format GPU-cluster users already read: a `#` header block
//! with the run's configuration, a `#` column line with units, one row per message size printed
//! as soon as that size is measured (runs of large sweeps take minutes; users watch the rows
//! arrive), and a `#` summary. Every line that is not data starts with `#`, so
//! `grep -v '^#'` leaves only rows. Units never change inside the tool: bytes, microseconds,
//! Gbps = 10^9 bit/s (EFA is sold in Gbps; GiB/s and GB/s are never mixed in), and millions of
//! messages per second. The header says what the latency is (one-way, round-trip/2, or
//! post-to-completion for reads, which are round trips by nature) and how bus bandwidth is
//! defined, because Libefaxx's unlabeled numbers were misread.
//!
//! A new header block starts whenever the configuration of the incoming record differs from the
//! previous one (bench, variant, provider, domains, memory, peer, ...), so a sink can be fed a
//! whole multi-benchmark run. A closed stdout (`efabench ... | head`) stops the printing but not
//! the run: the records still go to the `-o` file.

use crate::error::{io_reason, Error};
use crate::record::Record;
use std::fmt;
use std::io::Write;
use std::str::FromStr;

/// Output format for stdout (`--format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// nccl-tests-style human table.
    #[default]
    Table,
    /// One JSON record per line (same as the `-o` file).
    Json,
    /// CSV with a header line; `lat_us` flattened to `lat_us.min` … `lat_us.mean`.
    Csv,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "table" | "text" => Ok(Format::Table),
            "json" | "jsonl" => Ok(Format::Json),
            "csv" => Ok(Format::Csv),
            _ => Err(format!(
                "unknown output format `{s}`: use table, json or csv"
            )),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Csv => "csv",
        })
    }
}

/// The CSV columns, in order. `counters` and `extra` are JSON text; `domains` is `;`-joined.
pub const CSV_COLUMNS: &[&str] = &[
    "schema",
    "bench",
    "variant",
    "size_bytes",
    "iters",
    "warmup",
    "world",
    "peer",
    "provider",
    "fabric",
    "domains",
    "libfabric",
    "rails",
    "mem",
    "lat_kind",
    "lat_us.min",
    "lat_us.p50",
    "lat_us.p99",
    "lat_us.max",
    "lat_us.mean",
    "bw_gbps",
    "busbw_gbps",
    "msg_rate_mops",
    "link_gbps",
    "util_pct",
    "errors",
    "verified",
    "host",
    "timestamp",
    "version",
    "git",
    "counters",
    "extra",
];

fn opt_num(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// One record as CSV fields, matching [`CSV_COLUMNS`]. Unknown values are empty.
pub fn csv_fields(r: &Record) -> Vec<String> {
    vec![
        r.schema.clone(),
        r.bench.clone(),
        r.variant.clone(),
        r.size_bytes.to_string(),
        r.iters.to_string(),
        r.warmup.to_string(),
        r.world.to_string(),
        r.peer.map(|p| p.to_string()).unwrap_or_default(),
        r.provider.clone(),
        r.fabric.clone(),
        r.domains.join(";"),
        r.libfabric.clone().unwrap_or_default(),
        r.rails.to_string(),
        r.mem.clone(),
        r.lat_kind().to_string(),
        r.lat_us.min.to_string(),
        r.lat_us.p50.to_string(),
        r.lat_us.p99.to_string(),
        r.lat_us.max.to_string(),
        r.lat_us.mean.to_string(),
        r.bw_gbps.to_string(),
        opt_num(r.busbw_gbps),
        r.msg_rate_mops.to_string(),
        opt_num(r.link_gbps),
        opt_num(r.util_pct),
        r.errors.to_string(),
        r.verified.to_string(),
        r.host.clone(),
        r.timestamp.clone(),
        r.version.clone(),
        r.git.clone().unwrap_or_default(),
        r.counters
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
        if r.extra.is_empty() {
            String::new()
        } else {
            serde_json::Value::Object(r.extra.clone()).to_string()
        },
    ]
}

fn csv_line(fields: &[String]) -> Result<Vec<u8>, Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(fields)
        .map_err(|e| Error::failed(format!("cannot format a CSV row: {e}")))?;
    w.into_inner()
        .map_err(|e| Error::failed(format!("cannot format a CSV row: {e}")))
}

/// What makes two records belong to the same table (one header block).
#[derive(Clone, Debug, PartialEq)]
struct GroupKey {
    bench: String,
    variant: String,
    provider: String,
    fabric: String,
    domains: Vec<String>,
    libfabric: Option<String>,
    mem: String,
    rails: u32,
    world: u32,
    verified: bool,
    lat_kind: String,
    busbw: bool,
    busbw_def: Option<String>,
    host: String,
}

impl GroupKey {
    fn of(r: &Record) -> Self {
        GroupKey {
            bench: r.bench.clone(),
            variant: r.variant.clone(),
            provider: r.provider.clone(),
            fabric: r.fabric.clone(),
            domains: r.domains.clone(),
            libfabric: r.libfabric.clone(),
            mem: r.mem.clone(),
            rails: r.rails,
            world: r.world,
            verified: r.verified,
            lat_kind: r.lat_kind().to_string(),
            busbw: r.busbw_gbps.is_some(),
            busbw_def: r.busbw_def().map(str::to_string),
            host: r.host.clone(),
        }
    }
}

/// Running totals of the current table, for its summary lines.
#[derive(Default)]
struct GroupStats {
    rows: u64,
    bw_sum: f64,
    busbw_sum: f64,
    busbw_rows: u64,
    peak_bw: f64,
    peak_at: u64,
    best_p50: Option<(f64, u64)>,
    errors: u64,
}

// Column widths of the table (data rows are right-aligned under the `#` header line).
const W_SIZE: usize = 12;
const W_ITERS: usize = 8;
const W_PEER: usize = 4;
const W_WARM: usize = 6;
const W_LAT: usize = 12;
const W_BW: usize = 10;
const W_BUSBW: usize = 12;
const W_RATE: usize = 15;
const W_UTIL: usize = 8;
const W_ERR: usize = 7;

/// At least `min_decimals`, and enough decimals to show 3 significant digits of small values
/// (a 8-byte ping-pong's 0.00412 Gbps must not print as 0.00), at most 6.
fn num(v: f64, min_decimals: usize) -> String {
    let decimals = if v == 0.0 || !v.is_finite() {
        min_decimals
    } else {
        let mag = v.abs().log10().floor() as i32; // 0.0041 -> -3
        (2 - mag).clamp(min_decimals as i32, 6) as usize
    };
    format!("{v:.decimals$}")
}

fn dash_or(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) => format!("{v:.decimals$}"),
        None => "-".to_string(),
    }
}

/// The table's column line (with units), starting with `#`.
fn column_line(busbw: bool) -> String {
    let mut s = format!(
        "{:>W_SIZE$} {:>W_PEER$} {:>W_WARM$} {:>W_ITERS$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_BW$}",
        "size(B)", "peer", "warmup", "iters", "lat_min(us)", "lat_p50(us)", "lat_p99(us)", "lat_max(us)", "bw(Gbps)"
    );
    if busbw {
        s.push_str(&format!(" {:>W_BUSBW$}", "busbw(Gbps)"));
    }
    s.push_str(&format!(
        " {:>W_RATE$} {:>W_UTIL$} {:>W_ERR$}",
        "msg_rate(Mops)", "util(%)", "errors"
    ));
    s.replace_range(0..1, "#");
    s
}

/// One data row of the table.
fn table_row(r: &Record, busbw: bool) -> String {
    let mut s = format!(
        "{:>W_SIZE$} {:>W_PEER$} {:>W_WARM$} {:>W_ITERS$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_BW$}",
        r.size_bytes,
        r.peer.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
        r.warmup,
        r.iters,
        num(r.lat_us.min, 2),
        num(r.lat_us.p50, 2),
        num(r.lat_us.p99, 2),
        num(r.lat_us.max, 2),
        num(r.bw_gbps, 2)
    );
    if busbw {
        let b = r
            .busbw_gbps
            .map(|b| num(b, 2))
            .unwrap_or_else(|| "-".into());
        s.push_str(&format!(" {b:>W_BUSBW$}"));
    }
    let errors = if r.verified {
        r.errors.to_string()
    } else {
        "N/A".to_string()
    };
    s.push_str(&format!(
        " {:>W_RATE$} {:>W_UTIL$} {:>W_ERR$}",
        num(r.msg_rate_mops, 3),
        dash_or(r.util_pct, 1),
        errors
    ));
    s
}

fn latency_line(kind: &str) -> String {
    let what = match kind {
        "post-to-completion" => "post-to-completion (time from posting the operation to its completion; a read is a round trip, so this is not comparable with one-way latency)",
        "round-trip/2" => "one-way = ping-pong round-trip / 2",
        "one-way" => "one-way",
        other => other,
    };
    format!("# latency: {what}; min/p50/p99/max over the timed iterations, in us")
}

/// The `#` header block printed before the first row of a table.
fn header_block(r: &Record, key: &GroupKey) -> Vec<String> {
    let mut h = Vec::new();
    h.push(format!("# efabench {} / {}", r.bench, r.variant));
    h.push(format!(
        "# provider {}  fabric {}  domains {}  libfabric {}",
        r.provider,
        r.fabric,
        if r.domains.is_empty() {
            "-".to_string()
        } else {
            r.domains.join(",")
        },
        r.libfabric.as_deref().unwrap_or("-")
    ));
    h.push(format!(
        "# mem {}  rails {}  world {}  host {}",
        r.mem, r.rails, r.world, r.host
    ));
    h.push(format!(
        "# rank 0 measures each peer in turn (column \"peer\"); untimed and timed iterations per size in columns \"warmup\" and \"iters\"; verification {}",
        if r.verified { "on" } else { "off (errors N/A)" }
    ));
    h.push(latency_line(&key.lat_kind));
    if key.busbw {
        h.push(
            "# bw: per-rank bandwidth = bytes this rank sends to all peers / time, in Gbps (10^9 bit/s); msg_rate in 10^6 messages/s"
                .to_string(),
        );
        h.push(match &key.busbw_def {
            Some(d) => format!("# busbw: {d}"),
            None => format!(
                "# busbw: bw x (n-1)/n with n = world = {} (nccl-tests all-to-all bus bandwidth), in Gbps",
                r.world
            ),
        });
    } else {
        h.push(
            "# bw: payload bits in one direction / elapsed time, in Gbps (10^9 bit/s); msg_rate in 10^6 messages/s"
                .to_string(),
        );
    }
    h.push("# util: bw / sum of the link speeds used (- when the link speed is unknown)".into());
    h.push("#".into());
    h.push(column_line(key.busbw));
    h
}

fn summary_block(key: &GroupKey, st: &GroupStats) -> Vec<String> {
    let mut s = Vec::new();
    if st.rows == 0 {
        return s;
    }
    s.push(format!(
        "# Avg bw: {:.2} Gbps over {} sizes (peak {:.2} Gbps at {} B)",
        st.bw_sum / st.rows as f64,
        st.rows,
        st.peak_bw,
        st.peak_at
    ));
    if st.busbw_rows > 0 {
        s.push(format!(
            "# Avg busbw: {:.2} Gbps",
            st.busbw_sum / st.busbw_rows as f64
        ));
    }
    if let Some((p50, at)) = st.best_p50 {
        s.push(format!("# Lowest lat_p50: {p50:.2} us at {at} B"));
    }
    if key.verified {
        s.push(format!(
            "# Errors: {} {}",
            st.errors,
            if st.errors == 0 { "OK" } else { "FAILED" }
        ));
    } else {
        s.push("# Errors: N/A (verification off)".into());
    }
    s.push("#".into());
    s
}

/// Streams records to a writer (stdout in the CLI) in one [`Format`].
///
/// ```
/// use efabench_record::{Error, Format, Record, Sink};
///
/// fn show(records: &[Record]) -> Result<(), Error> {
///     let mut sink = Sink::stdout(Format::Table);
///     for r in records {
///         sink.push(r)?; // header block before the first row, then one row per record
///     }
///     sink.finish()?; // the closing summary (`# Avg bw`, `# Errors: 0 OK`)
///     Ok(())
/// }
/// # show(&[]).unwrap();
/// ```
pub struct Sink<W: Write> {
    format: Format,
    out: W,
    closed: bool,
    csv_header_done: bool,
    group: Option<(GroupKey, GroupStats)>,
    records: u64,
    errors: u64,
}

impl Sink<std::io::Stdout> {
    /// A sink on stdout.
    pub fn stdout(format: Format) -> Self {
        Sink::new(format, std::io::stdout())
    }
}

impl<W: Write> Sink<W> {
    pub fn new(format: Format, out: W) -> Self {
        Sink {
            format,
            out,
            closed: false,
            csv_header_done: false,
            group: None,
            records: 0,
            errors: 0,
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Records pushed so far and the sum of their `errors`.
    pub fn totals(&self) -> (u64, u64) {
        (self.records, self.errors)
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<(), Error> {
        if self.closed {
            return Ok(());
        }
        match self.out.write_all(bytes).and_then(|_| self.out.flush()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                // The reader went away (`| head`): stop printing, keep measuring.
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(Error::failed(format!(
                "cannot print results: {}",
                io_reason(&e)
            ))),
        }
    }

    fn emit_lines(&mut self, lines: &[String]) -> Result<(), Error> {
        let mut text = lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        self.emit(text.as_bytes())
    }

    /// Prints one record (a table row, a JSON line or a CSV row) and flushes.
    pub fn push(&mut self, r: &Record) -> Result<(), Error> {
        self.records += 1;
        self.errors += r.errors;
        match self.format {
            Format::Json => {
                let mut line = serde_json::to_string(r).map_err(|e| {
                    Error::failed(format!("cannot encode {} as JSON: {e}", r.describe()))
                })?;
                line.push('\n');
                self.emit(line.as_bytes())
            }
            Format::Csv => {
                let mut bytes = Vec::new();
                if !self.csv_header_done {
                    let header: Vec<String> = CSV_COLUMNS.iter().map(|s| s.to_string()).collect();
                    bytes.extend(csv_line(&header)?);
                    self.csv_header_done = true;
                }
                bytes.extend(csv_line(&csv_fields(r))?);
                self.emit(&bytes)
            }
            Format::Table => {
                let key = GroupKey::of(r);
                let mut lines = Vec::new();
                let same = matches!(&self.group, Some((k, _)) if *k == key);
                if !same {
                    if let Some((k, st)) = self.group.take() {
                        lines.extend(summary_block(&k, &st));
                    }
                    lines.extend(header_block(r, &key));
                    self.group = Some((key, GroupStats::default()));
                }
                let (key, st) = self.group.as_mut().expect("group was set just above");
                st.rows += 1;
                st.bw_sum += r.bw_gbps;
                if let Some(b) = r.busbw_gbps {
                    st.busbw_sum += b;
                    st.busbw_rows += 1;
                }
                if st.rows == 1 || r.bw_gbps > st.peak_bw {
                    st.peak_bw = r.bw_gbps;
                    st.peak_at = r.size_bytes;
                }
                if st.best_p50.is_none_or(|(p, _)| r.lat_us.p50 < p) {
                    st.best_p50 = Some((r.lat_us.p50, r.size_bytes));
                }
                st.errors += r.errors;
                lines.push(table_row(r, key.busbw));
                self.emit_lines(&lines)
            }
        }
    }

    /// Prints the closing summary of the table (nothing for JSON and CSV) and returns the
    /// writer.
    pub fn finish(mut self) -> Result<W, Error> {
        if self.format == Format::Table {
            if let Some((k, st)) = self.group.take() {
                let lines = summary_block(&k, &st);
                self.emit_lines(&lines)?;
            }
        }
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::sample;

    fn render(format: Format, records: &[Record]) -> String {
        let mut sink = Sink::new(format, Vec::new());
        for r in records {
            sink.push(r).unwrap();
        }
        String::from_utf8(sink.finish().unwrap()).unwrap()
    }

    #[test]
    fn format_parses_with_a_helpful_error() {
        assert_eq!("table".parse::<Format>(), Ok(Format::Table));
        assert_eq!("JSON".parse::<Format>(), Ok(Format::Json));
        assert_eq!("csv".parse::<Format>(), Ok(Format::Csv));
        assert_eq!(
            "xml".parse::<Format>().unwrap_err(),
            "unknown output format `xml`: use table, json or csv"
        );
        assert_eq!(Format::Csv.to_string(), "csv");
    }

    #[test]
    fn table_has_header_rows_and_summary() {
        let mut a = sample("sendrecv", "pingpong", 8, 0.03, 2.5);
        a.extra
            .insert("lat_kind".into(), serde_json::json!("round-trip/2"));
        let mut b = a.clone();
        b.size_bytes = 1 << 20;
        b.bw_gbps = 97.25;
        b.lat_us.p50 = 90.0;
        b.link_gbps = None;
        b.util_pct = None;
        let out = render(Format::Table, &[a, b]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "# efabench sendrecv / pingpong");
        assert!(out.contains("# provider efa  fabric efa  domains rdmap16s27-rdm  libfabric 2.1.0"));
        assert!(out.contains("# mem host  rails 1  world 2  host"));
        assert!(col_has_peer(&out));
        assert!(out.contains("verification on"));
        assert!(out.contains("# latency: one-way = ping-pong round-trip / 2"));
        assert!(out.contains("Gbps (10^9 bit/s)"));
        assert!(!out.contains("GiB") && !out.contains("GB/s"));
        let col = lines.iter().find(|l| l.contains("size(B)")).unwrap();
        assert!(col.starts_with('#'));
        for c in [
            "iters",
            "lat_min(us)",
            "lat_p50(us)",
            "lat_p99(us)",
            "lat_max(us)",
            "bw(Gbps)",
            "msg_rate(Mops)",
            "util(%)",
            "errors",
        ] {
            assert!(col.contains(c), "{c} missing from {col}");
        }
        assert!(!col.contains("busbw"));
        let rows: Vec<Vec<&str>> = lines
            .iter()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0][0], "8");
        assert_eq!(rows[0][1], "1"); // peer
        assert_eq!(rows[0][3], "1000");
        assert_eq!(rows[0][5], "2.50");
        assert_eq!(rows[0][8], "0.0300"); // small values keep 3 significant digits
        assert_eq!(rows[0][10], "0.0"); // util 0.03 %
        assert_eq!(rows[1][0], "1048576");
        assert_eq!(rows[1][8], "97.25");
        assert_eq!(rows[1][10], "-"); // unknown link speed
        assert_eq!(rows[1][11], "0");
        // Columns line up: every row as long as the column line.
        assert_eq!(lines.iter().filter(|l| l.len() == col.len()).count(), 3);
        assert!(out.contains("# Avg bw: 48.64 Gbps over 2 sizes (peak 97.25 Gbps at 1048576 B)"));
        assert!(out.contains("# Lowest lat_p50: 2.50 us at 8 B"));
        assert!(out.contains("# Errors: 0 OK"));
    }

    #[test]
    fn numbers_keep_three_significant_digits() {
        assert_eq!(num(0.0, 2), "0.00");
        assert_eq!(num(0.00412, 2), "0.00412");
        assert_eq!(num(0.0412, 2), "0.0412");
        assert_eq!(num(0.412, 2), "0.412");
        assert_eq!(num(4.12, 2), "4.12");
        assert_eq!(num(97.254, 2), "97.25");
        assert_eq!(num(1e-9, 2), "0.000000");
        assert_eq!(num(0.0123, 3), "0.0123");
        assert_eq!(num(7.8125, 3), "7.812");
    }

    #[test]
    fn read_latency_is_labelled_post_to_completion() {
        let r = sample("read", "pingpong", 64, 0.1, 5.0);
        let out = render(Format::Table, std::slice::from_ref(&r));
        assert!(out.contains("# latency: post-to-completion"), "{out}");
        let mut r2 = r;
        r2.bench = "custom".into();
        r2.extra
            .insert("lat_kind".into(), serde_json::json!("post-to-completion"));
        assert!(render(Format::Table, &[r2]).contains("# latency: post-to-completion"));
    }

    #[test]
    fn new_group_starts_a_new_header_and_errors_fail() {
        let a = sample("sendrecv", "stream", 4096, 40.0, 3.0);
        let mut b = sample("write", "stream", 4096, 42.0, 3.0);
        b.errors = 3;
        let mut c = sample("write", "stream", 8192, 44.0, 3.0);
        c.verified = false;
        let out = render(Format::Table, &[a, b, c]);
        assert_eq!(out.matches("# efabench ").count(), 3, "{out}");
        assert!(out.contains("# Errors: 0 OK"));
        assert!(out.contains("# Errors: 3 FAILED"));
        assert!(out.contains("# Errors: N/A (verification off)"));
        assert!(out.contains("verification off"));
        let last_row = out.lines().rfind(|l| !l.starts_with('#')).unwrap();
        assert!(last_row.ends_with("N/A"), "{last_row}");
    }

    fn col_has_peer(out: &str) -> bool {
        out.lines().any(|l| {
            l.starts_with('#')
                && l.contains("size(B)")
                && l.contains("peer")
                && l.contains("warmup")
        })
    }

    #[test]
    fn rows_of_several_peers_stay_in_one_table() {
        let a = sample("write", "stream", 8, 1.0, 2.0);
        let mut b = a.clone();
        b.peer = Some(2);
        b.warmup += 7;
        let out = render(Format::Table, &[a, b]);
        assert_eq!(
            out.lines().filter(|l| l.starts_with("# efabench ")).count(),
            1,
            "{out}"
        );
    }

    #[test]
    fn alltoall_shows_busbw_and_its_definition() {
        let mut r = sample("alltoall", "default", 1 << 20, 80.0, 100.0);
        r.world = 8;
        r.peer = None;
        r.busbw_gbps = Some(70.0);
        let out = render(Format::Table, &[r]);
        assert!(out.contains("busbw(Gbps)"), "{out}");
        assert!(out.contains("# busbw: bw x (n-1)/n with n = world = 8"));
        assert!(out.contains("# bw: per-rank bandwidth = bytes this rank sends to all peers"));
        assert!(out.contains("# Avg busbw: 70.00 Gbps"));
        let row = out.lines().find(|l| !l.starts_with('#')).unwrap();
        assert_eq!(
            row.split_whitespace().nth(1),
            Some("-"),
            "no peer in a collective: {row}"
        );
        assert!(out.contains("# latency: time per operation"), "{out}");
        assert_eq!(row.split_whitespace().nth(9), Some("70.00"));
    }

    #[test]
    fn json_lines_are_records() {
        let a = sample("sendrecv", "stream", 64, 1.0, 1.0);
        let out = render(Format::Json, &[a.clone(), a.clone()]);
        assert_eq!(out.lines().count(), 2);
        for l in out.lines() {
            assert_eq!(crate::validate_line(l).unwrap(), a);
        }
    }

    #[test]
    fn csv_has_one_header_and_flattened_latency() {
        let mut a = sample("sendrecv", "stream", 64, 1.5, 2.0);
        a.domains.push("rdmap32s27-rdm".into());
        let mut b = a.clone();
        b.size_bytes = 128;
        b.util_pct = None;
        b.link_gbps = None;
        b.extra.insert("window".into(), serde_json::json!(64));
        let out = render(Format::Csv, &[a, b]);
        let mut rdr = csv::Reader::from_reader(out.as_bytes());
        let headers = rdr.headers().unwrap().clone();
        assert_eq!(headers.len(), CSV_COLUMNS.len());
        let col = |n: &str| headers.iter().position(|h| h == n).unwrap();
        let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(&rows[0][col("lat_us.p50")], "2");
        assert_eq!(&rows[0][col("bw_gbps")], "1.5");
        assert_eq!(&rows[0][col("domains")], "rdmap16s27-rdm;rdmap32s27-rdm");
        assert_eq!(&rows[0][col("util_pct")], "1.5");
        assert_eq!(&rows[1][col("size_bytes")], "128");
        assert_eq!(&rows[1][col("util_pct")], "");
        assert_eq!(&rows[1][col("link_gbps")], "");
        assert_eq!(&rows[1][col("busbw_gbps")], "");
        assert_eq!(&rows[1][col("extra")], "{\"window\":64}");
        assert_eq!(out.matches("schema,bench").count(), 1);
    }

    #[test]
    fn closed_pipe_stops_printing_without_failing() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut s = Sink::new(Format::Table, Closed);
        s.push(&sample("sendrecv", "stream", 64, 1.0, 1.0)).unwrap();
        assert_eq!(s.totals(), (1, 0));
        assert!(s.finish().is_ok());

        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from_raw_os_error(28))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut s = Sink::new(Format::Json, Full);
        let e = s
            .push(&sample("sendrecv", "stream", 64, 1.0, 1.0))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot print results: No space left on device"
        );
    }
}
