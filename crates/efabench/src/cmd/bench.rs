//! Every benchmark subcommand: thin glue over `efabench_bench::BenchCommand`, which declares
//! them (one line each) and runs them on the shared harness.

use crate::error::CliError;
use efabench_bench::{BenchCommand, BenchError, BuildInfo};

pub fn run(cmd: BenchCommand) -> Result<i32, CliError> {
    // Ranks started by `efabench launch` die with it (SIGKILL/SIGHUP of launch included).
    efabench_bootstrap::launcher::die_with_launcher();
    let build = BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        git: option_env!("EFABENCH_GIT")
            .map(str::to_string)
            .filter(|g| !g.is_empty()),
    };
    cmd.run(&build).map_err(from_bench)
}

/// Bad input stays exit 2, a failed run exit 1.
pub fn from_bench(e: BenchError) -> CliError {
    match e {
        BenchError::Usage(m) => CliError::Usage(m),
        BenchError::Failed(m) => CliError::Failed(m),
    }
}
