//! efabench-bench: the shared benchmark harness and one module per benchmark (being written).

/// Which point-to-point benchmark to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2pKind {
    SendRecv,
    Write,
    Read,
}

pub mod pattern;
