//! `efabench sendrecv|write|read`: thin glue over `efabench_bench::p2p`.

use crate::error::CliError;
pub use efabench_bench::p2p::P2pArgs;
use efabench_bench::{p2p, BenchError, P2pKind};

pub fn run(kind: P2pKind, args: P2pArgs) -> Result<i32, CliError> {
    let build = p2p::BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        git: Some(env!("EFABENCH_GIT").to_string()).filter(|g| !g.is_empty()),
    };
    p2p::run_p2p(kind, args, build).map_err(from_bench)
}

/// Bad input stays exit 2, a failed run exit 1.
pub fn from_bench(e: BenchError) -> CliError {
    match e {
        BenchError::Usage(m) => CliError::Usage(m),
        BenchError::Failed(m) => CliError::Failed(m),
    }
}
