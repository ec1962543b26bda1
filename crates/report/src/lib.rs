//! efabench-report: the record every benchmark writes, and the ways records are shown and used
//! (human tables, JSON Lines, CSV, plots, run comparison).
//!
//! The record is the contract in DESIGN.md ("Records"): one JSON object per benchmark × variant ×
//! size, written by rank 0. Fields may be added; removing or renaming one needs a new `schema`.

pub mod record;

pub use record::{LatencySummary, Record, SCHEMA};
