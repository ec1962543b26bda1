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
//! A new table starts whenever the configuration of the incoming record differs from the
//! previous one (bench, variant, provider, domains, memory, peer, ...), so a sink can be fed a
//! whole multi-benchmark run; the run's header is printed once, and a later table repeats only
//! its title, the header lines that differ from what was printed, and its column line. A closed stdout (`efabench ... | head`) stops the printing but not
//! the run: the records still go to the `-o` file.

use crate::error::{io_reason, Error};
use crate::record::{Record, LATENCY_FIELDS, REQUIRED_FIELDS};
use std::fmt;
use std::io::Write;
use std::str::FromStr;

mod csv;
mod table;
#[cfg(test)]
mod tests;

use self::csv::*;
pub use self::csv::{csv_columns, csv_fields, CSV_LEFTOVER};
use self::table::*;

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
    /// The header lines printed so far in this run: a later table repeats only its title, the
    /// lines that differ and its column line.
    said: Vec<String>,
    /// The run's own header lines (rails, options, the benchmark's facts), printed once in the
    /// first table's header block, after its title and context lines.
    preface: Vec<String>,
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
            said: Vec::new(),
            preface: Vec::new(),
            records: 0,
            errors: 0,
        }
    }

    /// Lines the table prints once, under the first table's title and context lines (nothing
    /// for JSON and CSV); printed at [`Sink::finish`] when no record came.
    pub fn with_preface(mut self, lines: Vec<String>) -> Self {
        self.preface = lines;
        self
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
                    let block = header_block(r, &key);
                    let last = block.len().saturating_sub(2);
                    for (i, l) in block.into_iter().enumerate() {
                        // The title, the blank `#` and the column line always; the rest once.
                        if i == 0 || i >= last || !self.said.contains(&l) {
                            if i != 0 && i < last {
                                self.said.push(l.clone());
                            }
                            let context = l.starts_with("# mem ");
                            lines.push(l);
                            if context {
                                lines.append(&mut self.preface);
                            }
                        }
                    }
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
            let preface = std::mem::take(&mut self.preface);
            self.emit_lines(&preface)?;
            if let Some((k, st)) = self.group.take() {
                let lines = summary_block(&k, &st);
                self.emit_lines(&lines)?;
            }
        }
        Ok(self.out)
    }
}
