//! `efabench baseline RUN.jsonl... -o BASELINE.json`: keep several runs of a sweep, with their
//! spread, as the reference a nightly `compare --baseline BASELINE.json` judges against. One
//! run tells little about a machine's noise; five tell how far a figure moves by chance.

use crate::error::CliError;
use crate::exit::Exit;
use efabench_report::compare::Baseline;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Record files of repeated runs of the same sweep (JSONL written with -o).
    #[arg(value_name = "RUN.jsonl", required = true)]
    pub runs: Vec<PathBuf>,
    /// The baseline file to write (replaced atomically).
    #[arg(short = 'o', long = "output", value_name = "BASELINE.json")]
    pub output: PathBuf,
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    let side = super::compare::read_side(&args.runs)?;
    let b = Baseline::of(&side);
    b.save(&args.output)?;
    let runs = side.max_runs();
    super::compare::print_stdout(&format!(
        "efabench baseline: {} point(s), up to {runs} run(s) each, from {} file(s) -> {}\n",
        b.points.len(),
        side.files.len(),
        args.output.display()
    ))?;
    Ok(Exit::Ok)
}
