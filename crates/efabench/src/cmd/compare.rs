//! `efabench compare BASELINE.jsonl CANDIDATE.jsonl [--tolerance PCT] [--allow-missing]`: match
//! records of two runs and flag regressions (bandwidth down, p50 latency up by more than the
//! tolerance, or new verification errors) and baseline points the candidate lacks (a run that
//! crashed half-way must not pass). Exit 0 when none, 1 on a regression or a missing point, 2 on
//! bad input — so it can gate CI or a node-acceptance script. The logic lives in
//! `efabench_report::compare`.

use crate::error::CliError;
use efabench_report::{compare::compare, read_files};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Results of the reference run (JSONL written with -o).
    #[arg(value_name = "BASELINE.jsonl")]
    pub baseline: PathBuf,
    /// Results of the run under test.
    #[arg(value_name = "CANDIDATE.jsonl")]
    pub candidate: PathBuf,
    /// Allowed change in percent before a metric counts as a regression.
    #[arg(
        long,
        default_value_t = 5.0,
        value_name = "PCT",
        allow_hyphen_values = true
    )]
    pub tolerance: f64,
    /// Output: table (human) or json (one object).
    #[arg(long, default_value = "table", value_name = "table|json")]
    pub format: String,
    /// Accept baseline points the candidate lacks (a deliberately smaller sweep); they are still
    /// listed. Without it a missing point fails the comparison (exit 1).
    #[arg(long)]
    pub allow_missing: bool,
}

pub fn run(args: Args) -> Result<i32, CliError> {
    let json = match args.format.trim().to_ascii_lowercase().as_str() {
        "table" => false,
        "json" => true,
        other => {
            return Err(CliError::usage(format!(
                "unknown format `{}` for compare: use table or json",
                super::topo::shown(other)
            )))
        }
    };
    let files = read_files(&[&args.baseline, &args.candidate])?;
    let (base, cand) = (&files[0].1, &files[1].1);
    let c = compare(base, cand, args.tolerance, args.allow_missing)?;
    let (bn, cn) = (
        args.baseline.display().to_string(),
        args.candidate.display().to_string(),
    );
    if c.rows.is_empty() {
        return Err(CliError::usage(format!(
            "no record of {cn} matches one of {bn} by bench, variant, size, peer, mem, provider and rails; compare runs of the same benchmark sweep"
        )));
    }
    let text = if json {
        format!("{}\n", c.to_json(&bn, &cn))
    } else {
        c.render_table(&bn, &cn)
    };
    print_stdout(&text)?;
    Ok(if c.failed() { 1 } else { 0 })
}

/// Prints without `println!`'s panic when stdout is closed (`efabench compare ... | head`):
/// a closed pipe is the reader's choice, the exit code still tells the verdict.
pub(crate) fn print_stdout(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failed(format!("cannot print to stdout: {e}"))),
    }
}
