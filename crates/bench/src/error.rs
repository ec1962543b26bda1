//! Benchmark errors, split the way the CLI needs them: bad input (exit 2) versus a run that
//! failed (exit 1).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BenchError {
    /// Bad input or a missing prerequisite; the message says what is wrong and how to fix it.
    Usage(String),
    /// The run itself failed: a peer died, a completion errored, payloads did not verify.
    Failed(String),
}

impl BenchError {
    pub fn usage(m: impl Into<String>) -> Self {
        BenchError::Usage(m.into())
    }
    pub fn failed(m: impl Into<String>) -> Self {
        BenchError::Failed(m.into())
    }
    pub fn is_usage(&self) -> bool {
        matches!(self, BenchError::Usage(_))
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Usage(m) | BenchError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for BenchError {}
