//! `efabench compare`: match the records of a baseline and a candidate and flag regressions
//! beyond the tolerance *and* the noise (p50 latency up, median-window bandwidth down, or new
//! verification errors), baseline points the candidate lacks (a run that crashed half-way must
//! not pass) and, with `--strict-context`, a change of libfabric, provider, host, git or NICs.
//! Exit 0 when none, 1 on any, 2 on bad input, so it can gate a nightly job. Each side may be
//! several runs: `compare A B`, or `compare --baseline A1 --baseline A2 B1 B2`, or a baseline
//! file from `efabench baseline` / `--save`. The logic lives in `efabench_report::compare`;
//! `docs/compare.md` is the manual.

use crate::error::CliError;
use crate::exit::Exit;
use efabench_report::compare::{compare_sides, Baseline, Options, Side};
use efabench_report::read_files;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// BASELINE CANDIDATE (two record files), or, with --baseline, the candidate's files (one
    /// or more runs of the same sweep).
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// A baseline run (JSONL written with -o) or baseline file (efabench baseline); repeat for
    /// several runs. Then every FILE is a candidate run.
    #[arg(long = "baseline", short = 'B', value_name = "FILE")]
    pub baseline: Vec<PathBuf>,
    /// Allowed change in percent before a figure can count as a regression.
    #[arg(
        long,
        default_value_t = 5.0,
        value_name = "PCT",
        allow_hyphen_values = true
    )]
    pub tolerance: f64,
    /// How sure a regression must be, in percent, over the whole comparison (each of its tests
    /// gets an equal share of the rest).
    #[arg(
        long,
        default_value_t = 95.0,
        value_name = "PCT",
        allow_hyphen_values = true
    )]
    pub confidence: f64,
    /// Output: table (human) or json (one object).
    #[arg(long, default_value = "table", value_name = "table|json")]
    pub format: String,
    /// Accept baseline points the candidate lacks (a deliberately smaller sweep); they are still
    /// listed. Without it a missing point fails the comparison (exit 1).
    #[arg(long)]
    pub allow_missing: bool,
    /// Fail (exit 1) when libfabric, provider, host, git, efabench version or NICs differ
    /// between the sides; without it the differences are printed only.
    #[arg(long)]
    pub strict_context: bool,
    /// Also write the candidate's runs as a baseline file (whatever the verdict).
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
}

/// One side read from its files: record files, or a single baseline file.
pub(crate) fn read_side(paths: &[PathBuf]) -> Result<Side, CliError> {
    let mut record_files = Vec::new();
    let mut baselines = Vec::new();
    for p in paths {
        match read_baseline(p)? {
            Some(b) => baselines.push((p.clone(), b)),
            None => record_files.push(p.clone()),
        }
    }
    match (baselines.len(), record_files.is_empty()) {
        (0, _) => {
            let files = read_files(&record_files)?;
            Ok(Side::from_records(
                files
                    .iter()
                    .map(|(p, r)| (p.display().to_string(), &r[..])),
            ))
        }
        (1, true) => Ok(baselines[0].1.side(&baselines[0].0.display().to_string())),
        _ => Err(CliError::usage(format!(
            "{} is a baseline file: pass it alone for its side, or merge the runs with efabench baseline",
            baselines[0].0.display()
        ))),
    }
}

/// The file as a baseline file, `None` when it is a records file.
fn read_baseline(p: &Path) -> Result<Option<Baseline>, CliError> {
    let text = match std::fs::read_to_string(p) {
        Ok(t) => t,
        // The records reader names the problem in its own words (missing file, not UTF-8).
        Err(_) => return Ok(None),
    };
    Ok(Baseline::parse(p, &text)?)
}

pub fn run(args: Args) -> Result<Exit, CliError> {
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
    let (base_paths, cand_paths) = if args.baseline.is_empty() {
        match &args.files[..] {
            [b, c] => (vec![b.clone()], vec![c.clone()]),
            _ => {
                return Err(CliError::usage(format!(
                    "compare takes BASELINE CANDIDATE, got {} file(s); for several runs per side pass --baseline FILE for each baseline run and the candidate runs as FILEs",
                    args.files.len()
                )))
            }
        }
    } else if args.files.is_empty() {
        return Err(CliError::usage(
            "no candidate file: pass the candidate's records after the --baseline options",
        ));
    } else {
        (args.baseline.clone(), args.files.clone())
    };
    let base = read_side(&base_paths)?;
    let cand = read_side(&cand_paths)?;
    let options = Options {
        tolerance_pct: args.tolerance,
        confidence: args.confidence / 100.0,
        allow_missing: args.allow_missing,
        strict_context: args.strict_context,
    };
    let c = compare_sides(&base, &cand, &options)?;
    let (bn, cn) = c.side_names();
    if c.rows.is_empty() {
        return Err(CliError::usage(format!(
            "no record of {cn} matches one of {bn} by bench, variant, size, world, peer, mem, provider, rails and settings (src, window, ...); compare runs of the same benchmark sweep"
        )));
    }
    if let Some(path) = &args.save {
        Baseline::of(&cand).save(path)?;
    }
    let text = if json {
        format!("{}\n", c.to_json(&bn, &cn))
    } else {
        c.render_table(&bn, &cn)
    };
    print_stdout(&text)?;
    Ok(Exit::failed_unless(!c.failed()))
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
