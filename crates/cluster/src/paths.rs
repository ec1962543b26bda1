//! Why a file `efabench cluster` writes (`--summary`, `--prometheus`, `--save-baseline`) or reads
//! (`--baseline`) was refused before any stage. Rank 0 checks them; its message goes to every
//! rank as text (the bootstrap carries bytes), so each variant's message is complete on its own
//! and names the option, the path and the fix.

use efabench_record::error::io_reason;
use efabench_report::compare::BASELINE_SCHEMA;

/// A refused `--summary`, `--prometheus`, `--save-baseline` or `--baseline` path.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("{flag} needs a file name, e.g. {flag} {example}", example = example(flag))]
    NoName { flag: &'static str },
    #[error("{flag} {path}: it is a directory; give a file path, e.g. {flag} {path}/{example}", example = example(flag))]
    Directory { flag: &'static str, path: String },
    #[error(
        "{flag} {path}: cannot create files in {dir} ({}); give a path in a writable directory",
        io_reason(source)
    )]
    DirNotWritable {
        flag: &'static str,
        path: String,
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{flag} {path}: the file exists and cannot be written ({}); remove it or give another path",
        io_reason(source)
    )]
    NotWritable {
        flag: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--save-baseline {path}: the file exists and is not an {BASELINE_SCHEMA} file; remove it or give another path")]
    NotABaselineToReplace { path: String },
    #[error("--baseline {path}: cannot read it ({}); pass a file written by --save-baseline or efabench baseline", io_reason(source))]
    BaselineUnreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--baseline {path}: not an {BASELINE_SCHEMA} file; pass a file written by --save-baseline or efabench baseline")]
    NotABaseline { path: String },
    /// The file says it is a baseline and does not parse (the message names the file).
    #[error("--baseline {0}")]
    BaselineBroken(#[source] efabench_record::Error),
    #[error("--baseline {path}: it holds no pairs point ({points} point(s) of other benchmarks); save one from a cluster run with --save-baseline")]
    NoPairsPoint { path: String, points: usize },
}

/// A file name to show in a hint for `flag`.
fn example(flag: &str) -> &'static str {
    match flag {
        "--prometheus" => "metrics.prom",
        "--save-baseline" => "baseline.json",
        _ => "summary.json",
    }
}
