//! Placeholder: being written.
use crate::error::CliError;

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> Result<i32, CliError> {
    Err(CliError::usage("this command is not built yet"))
}
