//! efabench-bench: the shared benchmark harness and one module per benchmark.
//!
//! The harness (options, sizes, statistics, records, progress, the payload pattern) is what
//! nccl-tests calls `common.cu`: every benchmark uses it, so adding a benchmark means one new
//! file that only knows how to move bytes and time them.

pub mod error;
pub mod harness;
pub mod ipc;
pub mod options;
pub mod p2p;
pub mod pattern;
pub mod size;
pub mod stats;

pub use error::BenchError;
pub use options::CommonArgs;

/// Which point-to-point benchmark to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2pKind {
    SendRecv,
    Write,
    Read,
}
