//! Every benchmark subcommand: thin glue over `efabench_bench::BenchCommand`, which declares
//! them (one line each) and runs them on the shared harness.

use crate::error::CliError;
use crate::exit::Exit;
use efabench_bench::{BenchCommand, BuildInfo};

pub fn run(cmd: BenchCommand) -> Result<Exit, CliError> {
    // Ranks started by `efabench launch` die with it (SIGKILL/SIGHUP of launch included).
    efabench_bootstrap::launcher::die_with_launcher();
    let build = BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        git: option_env!("EFABENCH_GIT")
            .map(str::to_string)
            .filter(|g| !g.is_empty()),
    };
    cmd.run(&build)
        .map(Exit::from)
        .map_err(|source| CliError::Bench {
            command: cmd.name(),
            source,
        })
}
