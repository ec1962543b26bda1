//! Placeholder: being written.
use crate::error::CliError;

#[derive(clap::Args, Debug)]
pub struct P2pArgs {}

pub fn run(_kind: efabench_bench::P2pKind, _args: P2pArgs) -> Result<i32, CliError> {
    Err(CliError::usage("this command is not built yet"))
}
