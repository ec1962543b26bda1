//! `efabench ipc`: NVLink bandwidth between the GPUs of one host (one rank per GPU), thin glue
//! over `efabench_bench::ipc`.

use crate::error::CliError;
use efabench_bench::{ipc, BenchError};

/// Options of `efabench ipc` (see `efabench_bench::ipc::IpcArgs`).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub ipc: ipc::IpcArgs,
}

pub fn run(args: Args) -> Result<i32, CliError> {
    let build = ipc::BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        git: option_env!("EFABENCH_GIT")
            .map(str::to_string)
            .filter(|g| !g.is_empty()),
    };
    ipc::run_ipc(args.ipc, build).map_err(|e| match e {
        BenchError::Usage(m) => CliError::usage(m),
        BenchError::Failed(m) => CliError::failed(m),
    })
}
