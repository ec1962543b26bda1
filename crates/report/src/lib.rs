//! efabench-report: the record every benchmark writes, and the ways records are shown and used
//! (human tables, JSON Lines, CSV, plots, run comparison).
//!
//! The record is the contract in DESIGN.md ("Records"): one JSON object per benchmark × variant ×
//! size, written by rank 0. Fields may be added; removing or renaming one needs a new `schema`.
//!
//! What the benchmark harness calls:
//! - [`JsonlWriter::open`] on `-o FILE.jsonl` before measuring, then [`JsonlWriter::push`] per record;
//! - [`Sink::stdout`] with the `--format` ([`Format`]), [`Sink::push`] per record, [`Sink::finish`];
//! - [`now_rfc3339`], [`hostname`], [`human_size`], [`parse_size`] to fill and label records.
//!
//! The `plot` and `compare` commands are [`plot::plot_files`] and [`compare::compare`].

pub mod compare;
pub mod error;
pub mod jsonl;
pub mod output;
pub mod plot;
pub mod record;
pub mod util;

pub use error::{Error, ErrorKind};
pub use jsonl::{parse_records, read_files, read_records, validate_line, JsonlWriter};
pub use output::{Format, Sink};
pub use record::{LatencySummary, Record, LATENCY_FIELDS, REQUIRED_FIELDS, SCHEMA};
pub use util::{hostname, human_size, now_rfc3339, parse_size, rfc3339_from_unix};
