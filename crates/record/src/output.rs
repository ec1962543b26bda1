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
//! defined, because Libefaxx's unlabeled numbers were misread. The latency columns include the
//! mean (`lat_mean`), and the header says which statistic the bandwidth follows from (the
//! point-to-point benchmarks divide the bytes by the total time, so `bw = size / lat_mean`, not
//! `size / lat_p50`): without it a reader checks bw against p50 and finds it "wrong". The summary
//! counts sizes per peer and names the peer, since rank 0 measures each peer in turn.
//!
//! CSV columns are derived from the records (see [`csv_columns`]), so a field a benchmark adds
//! shows up without a change here.
//!
//! A new header block starts whenever the configuration of the incoming record differs from the
//! previous one (bench, variant, provider, domains, memory, peer, ...), so a sink can be fed a
//! whole multi-benchmark run. A closed stdout (`efabench ... | head`) stops the printing but not
//! the run: the records still go to the `-o` file.

use crate::error::{io_reason, Error};
use crate::record::{Record, LATENCY_FIELDS, REQUIRED_FIELDS};
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

/// The CSV columns of a run, derived from its first record rather than from a hand-kept list,
/// so a field a benchmark adds (`strategy`, `rails`, `per_rail`, `mr`, `footprint_bytes`, ...)
/// gets its column without a change here: the schema's fields in their order, with
/// `lat_us` flattened to `lat_us.min` … `lat_us.mean` and `lat_kind` right after `mem` (filled
/// from [`Record::lat_kind`] when the record does not carry it), then the record's extra fields,
/// then a last column `extra` that
/// holds, as a JSON object, any field a later record has and the first did not (the header is
/// written once, so a CSV stays one rectangular table and no field is dropped).
pub fn csv_columns(first: &Record) -> Vec<String> {
    let mut cols = Vec::new();
    // The fixed fields in the order of the schema (a JSON map may be sorted by key).
    for &k in REQUIRED_FIELDS {
        if k == "lat_us" {
            cols.extend(LATENCY_FIELDS.iter().map(|f| format!("lat_us.{f}")));
        } else {
            cols.push(k.to_string());
        }
        if k == "mem" {
            cols.push("lat_kind".into());
        }
    }
    cols.extend(
        first
            .extra
            .keys()
            .filter(|k| *k != "lat_kind" && !REQUIRED_FIELDS.contains(&k.as_str()))
            .cloned(),
    );
    cols.push(CSV_LEFTOVER.into());
    cols
}

/// The last CSV column: fields that are not in the header, as one JSON object.
pub const CSV_LEFTOVER: &str = "extra";

/// The record as its JSON object: the fixed fields in struct order, then the extra fields.
fn record_object(r: &Record) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(r) {
        Ok(serde_json::Value::Object(m)) => m,
        // A Record always serializes to an object (a struct with a flattened map).
        _ => serde_json::Map::new(),
    }
}

/// One JSON value as CSV text: strings as they are, numbers as Rust prints them (shortest
/// round-trip form: `2`, `1.5`), null as empty, a list of strings `;`-joined (`domains`), any
/// other list or object as compact JSON text (`per_rail`, `counters`).
fn csv_cell(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (None, Some(i), _) => i.to_string(),
            (None, None, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(";"),
        other => other.to_string(),
    }
}

/// One record as CSV fields under `columns` (from [`csv_columns`]). A column the record lacks
/// is empty; fields of the record that have no column go, as a JSON object, to the last one.
pub fn csv_fields(r: &Record, columns: &[String]) -> Vec<String> {
    let mut obj = record_object(r);
    let lat = match obj.remove("lat_us") {
        Some(serde_json::Value::Object(lat)) => lat,
        _ => serde_json::Map::new(),
    };
    obj.remove("lat_kind");
    let mut out = Vec::with_capacity(columns.len());
    for c in columns {
        let cell = if c == "lat_kind" {
            r.lat_kind().to_string()
        } else if c == CSV_LEFTOVER {
            continue;
        } else if let Some(f) = c.strip_prefix("lat_us.") {
            lat.get(f).map(csv_cell).unwrap_or_default()
        } else {
            obj.remove(c.as_str())
                .map(|v| csv_cell(&v))
                .unwrap_or_default()
        };
        out.push(cell);
    }
    if columns.iter().any(|c| c == CSV_LEFTOVER) {
        let leftover: serde_json::Map<String, serde_json::Value> = lat
            .into_iter()
            .filter(|(f, _)| !columns.iter().any(|c| *c == format!("lat_us.{f}")))
            .map(|(f, v)| (format!("lat_us.{f}"), v))
            .chain(obj)
            .collect();
        out.push(if leftover.is_empty() {
            String::new()
        } else {
            serde_json::Value::Object(leftover).to_string()
        });
    }
    out
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
    /// Rows are ordered pairs (the record names its source in `src`), not peers of rank 0.
    pairs: bool,
    /// Rows name a peer of rank 0 (point-to-point benchmarks); collectives and GPU-local
    /// benchmarks have none.
    peer: bool,
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
            pairs: r.extra.contains_key("src"),
            peer: r.peer.is_some(),
        }
    }
}

/// Running totals of the current table, for its summary lines.
#[derive(Default)]
struct GroupStats {
    /// The highest bus bandwidth and its size (a collective's records).
    peak_busbw: Option<(f64, u64)>,
    errors: u64,
    /// One entry per peer (`None` for records without one), in the order the peers appeared:
    /// rank 0 measures each peer in turn, and an average over several peers' sizes would count
    /// every size once per peer and blur a slow peer into the others.
    peers: Vec<(Option<u32>, PeerStats)>,
}

/// Summary totals of one peer's rows.
#[derive(Default)]
struct PeerStats {
    rows: u64,
    /// Distinct sizes among the rows.
    sizes: Vec<u64>,
    /// Every row's bandwidth with its size (pairs: one row per ordered pair and size).
    bws: Vec<(u64, f64)>,
    peak_bw: f64,
    peak_at: u64,
    best_p50: Option<(f64, u64)>,
    errors: u64,
}

impl GroupStats {
    fn add(&mut self, r: &Record) {
        if let Some(b) = r.busbw_gbps {
            if self.peak_busbw.is_none_or(|(p, _)| b > p) {
                self.peak_busbw = Some((b, r.size_bytes));
            }
        }
        self.errors = self.errors.saturating_add(r.errors);
        let i = match self.peers.iter().position(|(p, _)| *p == r.peer) {
            Some(i) => i,
            None => {
                self.peers.push((r.peer, PeerStats::default()));
                self.peers.len() - 1
            }
        };
        let st = &mut self.peers[i].1;
        st.rows += 1;
        if !st.sizes.contains(&r.size_bytes) {
            st.sizes.push(r.size_bytes);
        }
        st.bws.push((r.size_bytes, r.bw_gbps));
        if st.rows == 1 || r.bw_gbps > st.peak_bw {
            st.peak_bw = r.bw_gbps;
            st.peak_at = r.size_bytes;
        }
        if st.best_p50.is_none_or(|(p, _)| r.lat_us.p50 < p) {
            st.best_p50 = Some((r.lat_us.p50, r.size_bytes));
        }
        st.errors = st.errors.saturating_add(r.errors);
    }
}

/// Which latency statistic the record's bandwidth was computed from, when it is one of them:
/// `bw = size / lat_mean` (the total time of the timed iterations, as the point-to-point
/// benchmarks do) or `size / lat_p50` (the median, as `ipc` does). `None` when neither holds
/// (a collective whose time is the slowest rank's, a zero latency).
fn bw_basis(r: &Record) -> Option<&'static str> {
    let matches = |lat_us: f64| {
        if lat_us.is_nan() || lat_us <= 0.0 || r.size_bytes == 0 {
            return false;
        }
        let implied = r.size_bytes as f64 * 8.0 / (lat_us * 1e3);
        (implied - r.bw_gbps).abs() <= 1e-6 * implied.max(r.bw_gbps)
    };
    if matches(r.lat_us.mean) {
        Some("lat_mean")
    } else if matches(r.lat_us.p50) {
        Some("lat_p50")
    } else {
        None
    }
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
        "{:>W_SIZE$} {:>W_PEER$} {:>W_WARM$} {:>W_ITERS$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_BW$}",
        "size(B)", "peer", "warmup", "iters", "lat_min(us)", "lat_p50(us)", "lat_p99(us)", "lat_max(us)", "lat_mean(us)", "bw(Gbps)"
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
        "{:>W_SIZE$} {:>W_PEER$} {:>W_WARM$} {:>W_ITERS$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_BW$}",
        r.size_bytes,
        r.peer.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
        r.warmup,
        r.iters,
        num(r.lat_us.min, 2),
        num(r.lat_us.p50, 2),
        num(r.lat_us.p99, 2),
        num(r.lat_us.max, 2),
        num(r.lat_us.mean, 2),
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
    format!("# latency: {what}; min/p50/p99/max/mean over the timed iterations, in us")
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
    h.push(if key.pairs {
        format!(
            "# one row per ordered pair: column \"peer\" is the destination, the source is the record's src (the pair table below names both); untimed and timed windows in columns \"warmup\" and \"iters\"; verification {}",
            if r.verified { "on" } else { "off (errors N/A)" }
        )
    } else if key.peer {
        format!(
            "# rank 0 measures each peer in turn (column \"peer\"); untimed and timed iterations per size in columns \"warmup\" and \"iters\"; verification {}",
            if r.verified { "on" } else { "off (errors N/A)" }
        )
    } else {
        format!(
            "# untimed and timed iterations per size in columns \"warmup\" and \"iters\"; verification {}",
            if r.verified { "on" } else { "off (errors N/A)" }
        )
    });
    h.push(latency_line(&key.lat_kind));
    if key.busbw {
        h.push(if r.bench == "alltoallv" {
            "# bw: algbw = the busiest rank's bytes sent or received per iteration (own chunk included) / time of the slowest rank, in Gbps (10^9 bit/s); msg_rate in 10^6 messages/s"
        } else {
            "# bw: algbw = size (one rank's whole send buffer, its own chunk included) / time of the slowest rank, in Gbps (10^9 bit/s); msg_rate in 10^6 messages/s"
        }
        .to_string());
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
    match bw_basis(r) {
        Some("lat_mean") => h.push(
            "# bw = size / lat_mean: the total time of the timed iterations, not the median (lat_p50)"
                .into(),
        ),
        Some(basis) => h.push(format!(
            "# bw = size / {basis}: from the median time of the timed iterations, not the mean"
        )),
        None => {}
    }
    h.push("# util: bw / sum of the link speeds used (- when the link speed is unknown)".into());
    h.push("#".into());
    h.push(column_line(key.busbw));
    h
}

/// The table's closing lines: per peer, the peak bandwidth with its size and the lowest p50
/// latency (`peer 1: ...`; records without a peer, e.g. a collective, get no label); for pairs
/// the median pair per size; then the peak bus bandwidth and the error total. No figure is
/// averaged over sizes: an 8-byte row and a 1 MiB row measure different things.
fn summary_block(key: &GroupKey, st: &GroupStats) -> Vec<String> {
    let mut s = Vec::new();
    if st.peers.is_empty() {
        return s;
    }
    if key.pairs {
        // Rows of every source to one destination: a summary per "peer" would mix sources.
        let mut sizes: Vec<u64> = st
            .peers
            .iter()
            .flat_map(|(_, ps)| ps.sizes.clone())
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for size in sizes {
            let bws = st
                .peers
                .iter()
                .flat_map(|(_, ps)| ps.bws.iter())
                .filter(|(at, _)| *at == size)
                .map(|(_, bw)| *bw);
            let n = bws.clone().count();
            if let Some(median) = crate::stats::median_of(bws) {
                s.push(format!(
                    "# Median pair bw at {size} B: {median:.2} Gbps over {n} ordered pair{} (the pair table and suspects follow)",
                    if n == 1 { "" } else { "s" },
                ));
            }
        }
    }
    for (peer, ps) in st.peers.iter().filter(|_| !key.pairs) {
        let who = peer.map(|p| format!(" with peer {p}")).unwrap_or_default();
        s.push(format!(
            "# Peak bw{who}: {:.2} Gbps at {} B",
            ps.peak_bw, ps.peak_at
        ));
        if let Some((p50, at)) = ps.best_p50 {
            s.push(format!("# Lowest lat_p50{who}: {p50:.2} us at {at} B"));
        }
    }
    if let Some((busbw, at)) = st.peak_busbw {
        s.push(format!("# Peak busbw: {busbw:.2} Gbps at {at} B"));
    }
    if key.verified {
        let by_peer: Vec<String> = st
            .peers
            .iter()
            .filter(|(p, ps)| p.is_some() && ps.errors > 0)
            .map(|(p, ps)| format!("peer {}: {}", p.unwrap_or_default(), ps.errors))
            .collect();
        s.push(format!(
            "# Errors: {} {}{}",
            st.errors,
            if st.errors == 0 { "OK" } else { "FAILED" },
            if by_peer.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_peer.join(", "))
            }
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
///     sink.finish()?; // the closing summary (`# Peak bw`, `# Errors: 0 OK`)
///     Ok(())
/// }
/// # show(&[]).unwrap();
/// ```
pub struct Sink<W: Write> {
    format: Format,
    out: W,
    closed: bool,
    /// The CSV header once written (derived from the first record).
    csv_columns: Option<Vec<String>>,
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
            csv_columns: None,
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
        // Saturating: a record file may claim any count (u64::MAX errors), and a sum must not wrap
        // into "0 OK" or panic.
        self.errors = self.errors.saturating_add(r.errors);
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
                let columns = match &self.csv_columns {
                    Some(c) => c,
                    None => {
                        let c = csv_columns(r);
                        bytes.extend(csv_line(&c)?);
                        self.csv_columns.insert(c)
                    }
                };
                bytes.extend(csv_line(&csv_fields(r, columns))?);
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
                st.add(r);
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
            "lat_mean(us)",
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
        assert_eq!(rows[0][8], "2.75"); // lat_mean
        assert_eq!(rows[0][9], "0.0300"); // small values keep 3 significant digits
        assert_eq!(rows[0][11], "0.0"); // util 0.03 %
        assert_eq!(rows[1][0], "1048576");
        assert_eq!(rows[1][9], "97.25");
        assert_eq!(rows[1][11], "-"); // unknown link speed
        assert_eq!(rows[1][12], "0");
        // Columns line up: every row as long as the column line.
        assert_eq!(lines.iter().filter(|l| l.len() == col.len()).count(), 3);
        assert!(
            out.contains("# Peak bw with peer 1: 97.25 Gbps at 1048576 B"),
            "{out}"
        );
        assert!(!out.contains("Avg"), "no average over sizes: {out}");
        assert!(out.contains("# Lowest lat_p50 with peer 1: 2.50 us at 8 B"));
        assert!(out.contains("# Errors: 0 OK"));
        // These hand-made records' bw follows from neither mean nor p50: no claim is made.
        assert!(!out.contains("# bw = size /"), "{out}");
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

    #[test]
    fn pair_rows_are_summed_as_pairs_not_as_sizes_of_a_peer() {
        // Three sources to one destination at one size: not "over 3 sizes".
        let rs: Vec<Record> = (0..3u32)
            .map(|src| {
                let mut r = sample("pairs", "write-stream", 1 << 20, 1.0 + src as f64, 9.0);
                r.peer = Some(3);
                r.extra.insert("src".into(), serde_json::json!(src));
                r
            })
            .collect();
        let out = render(Format::Table, &rs);
        assert!(
            out.contains("# Median pair bw at 1048576 B: 2.00 Gbps over 3 ordered pairs"),
            "{out}"
        );
        assert!(!out.contains("over 3 sizes"), "{out}");
        assert!(out.contains("# one row per ordered pair"), "{out}");
        assert!(!out.contains("measures each peer in turn"), "{out}");
    }

    #[test]
    fn records_without_a_peer_do_not_claim_rank_0_measures_peers() {
        let rs: Vec<Record> = (0..2)
            .map(|i| {
                let mut r = sample("queue", "pinned/nbi/1x32/c3", 8 << i, 1.0, 9.0);
                r.peer = None;
                r
            })
            .collect();
        let out = render(Format::Table, &rs);
        assert!(!out.contains("measures each peer in turn"), "{out}");
        assert!(
            out.contains("# untimed and timed iterations per size in columns"),
            "{out}"
        );
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
    fn rows_of_several_peers_stay_in_one_table_and_are_summed_per_peer() {
        let a = sample("write", "stream", 8, 1.0, 2.0);
        let mut a2 = sample("write", "stream", 16, 3.0, 2.5);
        a2.errors = 2;
        let mut b = a.clone();
        b.peer = Some(2);
        b.warmup += 7;
        b.bw_gbps = 0.5;
        let out = render(Format::Table, &[a, a2, b]);
        assert_eq!(
            out.lines().filter(|l| l.starts_with("# efabench ")).count(),
            1,
            "{out}"
        );
        assert!(
            out.contains("# Peak bw with peer 1: 3.00 Gbps at 16 B"),
            "{out}"
        );
        assert!(
            out.contains("# Peak bw with peer 2: 0.50 Gbps at 8 B"),
            "{out}"
        );
        assert!(out.contains("# Lowest lat_p50 with peer 2: 2.00 us at 8 B"));
        assert!(out.contains("# Errors: 2 FAILED (peer 1: 2)"), "{out}");
    }

    #[test]
    fn header_says_which_latency_the_bandwidth_follows_from() {
        // Point-to-point: bw = size / mean time per message.
        let mut r = sample("sendrecv", "stream", 1 << 20, 0.0, 100.0);
        r.lat_us.mean = 110.0;
        r.bw_gbps = (1u64 << 20) as f64 * 8.0 / (110.0 * 1e3);
        let out = render(Format::Table, std::slice::from_ref(&r));
        assert!(
            out.contains("# bw = size / lat_mean: the total time of the timed iterations"),
            "{out}"
        );
        // ipc: bw = size / median.
        r.bw_gbps = (1u64 << 20) as f64 * 8.0 / (100.0 * 1e3);
        let out = render(Format::Table, &[r]);
        assert!(
            out.contains("# bw = size / lat_p50: from the median"),
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
        assert!(out.contains("# bw: algbw = size (one rank's whole send buffer"));
        assert!(
            out.contains("# Peak busbw: 70.00 Gbps at 1048576 B"),
            "{out}"
        );
        let row = out.lines().find(|l| !l.starts_with('#')).unwrap();
        assert_eq!(
            row.split_whitespace().nth(1),
            Some("-"),
            "no peer in a collective: {row}"
        );
        assert!(out.contains("# latency: time per operation"), "{out}");
        assert_eq!(row.split_whitespace().nth(10), Some("70.00"));
        assert!(out.contains("# Peak bw: 80.00 Gbps at 1048576 B"), "{out}");
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
        let out = render(Format::Csv, &[a.clone(), b]);
        let mut rdr = csv::Reader::from_reader(out.as_bytes());
        let headers = rdr.headers().unwrap().clone();
        assert_eq!(headers.len(), csv_columns(&a).len());
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

    /// Every record field has a CSV column, extra fields included, derived from the
    /// records so that a new field needs no change to the CSV code.
    #[test]
    fn csv_columns_cover_every_field_of_the_record() {
        let mut r = sample("write", "stream", 1 << 20, 90.0, 100.0);
        r.rails = 2;
        r.counters = Some(serde_json::json!({"rdmap16s27": {"tx_bytes": 5}}));
        let per_rail = serde_json::json!([
            {"rail": 0, "domain": "a", "bytes": 10, "ops": 1},
            {"rail": 1, "domain": "b", "bytes": 10, "ops": 1}
        ]);
        for (k, v) in [
            (
                "lat_kind",
                serde_json::json!("per message (window time / window)"),
            ),
            ("window", serde_json::json!(64)),
            ("bw_GBps", serde_json::json!(11.25)),
            ("wall_s", serde_json::json!(0.123456)),
            ("strategy", serde_json::json!("split")),
            ("per_rail", per_rail.clone()),
            ("virtual_rails", serde_json::json!(true)),
            ("footprint_bytes", serde_json::json!(8u64 << 20)),
            ("mr", serde_json::json!("local")),
        ] {
            r.extra.insert(k.into(), v);
        }
        let out = render(Format::Csv, std::slice::from_ref(&r));
        let mut rdr = csv::Reader::from_reader(out.as_bytes());
        let headers: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
        let row = rdr.records().next().unwrap().unwrap();
        let cell = |n: &str| {
            let i = headers
                .iter()
                .position(|h| h == n)
                .unwrap_or_else(|| panic!("no column {n}: {headers:?}"));
            row[i].to_string()
        };
        // Every top-level field of the record's JSON has its column (lat_us flattened).
        let obj = serde_json::to_value(&r).unwrap();
        for k in obj.as_object().unwrap().keys() {
            if k == "lat_us" {
                for f in LATENCY_FIELDS {
                    cell(&format!("lat_us.{f}"));
                }
            } else {
                cell(k);
            }
        }
        assert_eq!(headers.iter().filter(|h| *h == "lat_kind").count(), 1);
        assert_eq!(cell("strategy"), "split");
        assert_eq!(cell("rails"), "2");
        assert_eq!(cell("footprint_bytes"), (8u64 << 20).to_string());
        assert_eq!(cell("wall_s"), "0.123456");
        assert_eq!(cell("mr"), "local");
        assert_eq!(cell("virtual_rails"), "true");
        assert_eq!(cell("lat_kind"), "per message (window time / window)");
        let pr: serde_json::Value = serde_json::from_str(&cell("per_rail")).unwrap();
        assert_eq!(pr, per_rail);
        assert_eq!(cell("counters"), "{\"rdmap16s27\":{\"tx_bytes\":5}}");
        assert_eq!(cell("domains"), "rdmap16s27-rdm");
        assert_eq!(cell("lat_us.mean"), "110.00000000000001");
        assert_eq!(cell("peer"), "1");
        assert_eq!(cell("git"), "");
        assert_eq!(cell("extra"), "", "nothing left over");
        // A later record with a field the first lacked: the header stays, the field goes to
        // the last column as JSON; a field it lacks is empty.
        let mut later = r.clone();
        later.extra.remove("mr");
        later.extra.insert("ring".into(), serde_json::json!(4096));
        let out = render(Format::Csv, &[r, later]);
        let mut rdr = csv::Reader::from_reader(out.as_bytes());
        let h = rdr.headers().unwrap().clone();
        let rows: Vec<csv::StringRecord> = rdr.records().map(|x| x.unwrap()).collect();
        let i = |n: &str| h.iter().position(|c| c == n).unwrap();
        assert_eq!(&rows[1][i("mr")], "");
        assert_eq!(&rows[1][i("extra")], "{\"ring\":4096}");
        assert!(rows.iter().all(|row| row.len() == h.len()));
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
