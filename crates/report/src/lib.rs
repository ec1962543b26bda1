//! efabench-report: what is done with records after a run: plots and run comparison.
//!
//! The record itself, its JSONL file and the stdout sink live in `efabench-record` (so benchmarks
//! do not link plotting); everything there is re-exported here under the same names, so code
//! written against `efabench_report::{Record, JsonlWriter, Sink, ...}` keeps compiling.
//!
//! The `plot` and `compare` commands are [`plot::plot_files`] (with `--stages`,
//! [`stages::plot_stage_files`]) and [`compare::compare`]. Plotting fails with a
//! [`ReportError`], which keeps a drawing backend's or a malformed record's cause.

#![forbid(unsafe_code)]

pub mod compare;
pub mod fault;
pub mod plot;
pub mod stages;

pub use fault::ReportError;

pub use efabench_record::{error, jsonl, output, record, util};
pub use efabench_record::{hostname, human_size, now_rfc3339, rfc3339_from_unix, write_atomically};
pub use efabench_record::{
    parse_records, parse_records_from, read_files, read_records, read_records_with_warnings,
    validate_line, JsonlWriter, RecordsRead, MAX_LINE_BYTES,
};
pub use efabench_record::{Error, ErrorKind};
pub use efabench_record::{Format, Sink};
pub use efabench_record::{
    GpuSharing, LatencySummary, Record, SharedGpu, GPU_SHARING, LATENCY_FIELDS, REQUIRED_FIELDS,
    SCHEMA,
};
