//! efabench-record: the record every benchmark writes, its durable JSON Lines file, and what a
//! benchmark prints on stdout while it runs (table, JSON, CSV).
//!
//! This crate is everything a benchmark needs to produce results and nothing more: it has no
//! plotting and no comparison, so the benchmarks do not compile or link them. `efabench-report`
//! builds `plot` and `compare` on top of it and re-exports everything here.
//!
//! The record is the contract in `docs/records.md`: one JSON object per benchmark × variant ×
//! size, written by rank 0. Fields may be added; removing or renaming one needs a new `schema`.
//!
//! What the benchmark harness calls:
//! - [`JsonlWriter::open`] on `-o FILE.jsonl` before measuring, then [`JsonlWriter::push`] per record;
//! - [`Sink::stdout`] with the `--format` ([`Format`]), [`Sink::push`] per record, [`Sink::finish`];
//! - [`now_rfc3339`], [`hostname`], [`human_size`] to fill and label records;
//! - [`stats::Samples`] to turn timed samples into a record's `lat_us` (one percentile definition).

#![forbid(unsafe_code)]

pub mod error;
pub mod fields;
pub mod jsonl;
pub mod output;
#[cfg(test)]
mod proptests;
pub mod record;
pub mod stats;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod util;

pub use error::{chain, Error, ErrorKind};
pub use fields::Common;
pub use jsonl::{
    parse_records, parse_records_from, read_files, read_records, read_records_with_warnings,
    validate_line, JsonlWriter, RecordsRead, MAX_LINE_BYTES,
};
pub use output::{Format, Sink};
pub use record::{
    GpuSharing, LatencySummary, Record, SharedGpu, GPU_SHARING, LATENCY_FIELDS, REQUIRED_FIELDS,
    SCHEMA,
};
pub use util::{hostname, human_size, now_rfc3339, rfc3339_from_unix, write_atomically};
