//! The one error type every command returns, and how it becomes an exit status.
//!
//! Bad input is one line naming the problem and the fix, exit status 2, never a panic
//! or a backtrace. A run that measured or checked something and found it wrong exits 1.

use crate::exit::Exit;
use efabench_bench::BenchError;
use efabench_bootstrap::BootstrapError;
use std::ffi::OsString;

/// What a command failed with. The variants keep the lower layers' errors whole; [`CliError::exit`]
/// prints any of them as a line on stderr and ends with its [`Exit`].
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input or a missing prerequisite (library, provider, driver): exit 2.
    #[error("{0}")]
    Usage(String),
    /// The command ran and failed (verification errors, a dead peer, an I/O error): exit 1.
    #[error("{0}")]
    Failed(String),
    /// A benchmark (`command`) failed; its error says whether the input or the run was at fault.
    #[error("{command}: {source}")]
    Bench {
        command: &'static str,
        #[source]
        source: BenchError,
    },
    /// Starting or running the job's ranks failed (`efabench launch`).
    #[error("launch: {0}")]
    Launch(#[source] BootstrapError),
    /// Reading, comparing or drawing records failed.
    #[error(transparent)]
    Record(#[from] efabench_report::Error),
    /// Drawing a plot failed, or a record to plot did not read.
    #[error(transparent)]
    Report(#[from] efabench_report::ReportError),
}

impl CliError {
    pub fn usage(msg: impl Into<String>) -> Self {
        CliError::Usage(msg.into())
    }
    pub fn failed(msg: impl Into<String>) -> Self {
        CliError::Failed(msg.into())
    }

    /// True for bad input or a missing prerequisite, asking the cause where there is one.
    pub fn is_usage(&self) -> bool {
        match self {
            CliError::Usage(_) => true,
            CliError::Failed(_) => false,
            CliError::Bench { source, .. } => source.is_usage(),
            CliError::Launch(e) => e.is_usage(),
            CliError::Record(e) => e.kind() == efabench_report::ErrorKind::BadInput,
            CliError::Report(e) => e.kind() == efabench_report::ErrorKind::BadInput,
        }
    }

    /// The line printed on stderr: `efabench: ` and the error with its causes (`efabench write:
    /// rank 1: fabric: fi_writemsg failed: ...` for a benchmark). Bad input is printed without
    /// the layers it passed through: the user needs what is wrong and how to fix it, not where.
    pub fn line(&self) -> String {
        let (prefix, err): (String, &(dyn std::error::Error + 'static)) = match self {
            CliError::Bench { command, source } => (format!("efabench {command}"), source),
            CliError::Launch(e) if !e.is_usage() => ("efabench launch".into(), e),
            CliError::Launch(e) => ("efabench".into(), e),
            other => ("efabench".into(), other),
        };
        let mut text = efabench_report::error::chain(err);
        if self.is_usage() {
            // "gpu: no CUDA driver ..." reads as "no CUDA driver ...": drop the layer names a
            // usage error picked up on its way out.
            for layer in ["fabric: ", "gpu: "] {
                if let Some(rest) = text.strip_prefix(layer) {
                    text = rest.to_string();
                }
            }
        }
        cap(&format!("{prefix}: {text}"), LINE_MAX)
    }

    pub fn exit(self) -> ! {
        eprintln!("{}", self.line());
        Exit::from(&self).exit()
    }
}

/// Longest piece of user input echoed back in an error (longer input is cut, with "...").
const ECHO_MAX: usize = 80;
/// Longest error line at all.
const LINE_MAX: usize = 1000;

/// The one-line message for a clap error of the command line `argv` parsed into `T`.
///
/// A negative number after an option (`--timeout -1`) looks like an option to clap, which then
/// says "unexpected argument '-1' found" without naming the option. So the number is joined to
/// the option before it (`--timeout=-1`) and the line parsed once more: the value then reaches
/// the option's own check, whose message names the option and says what it expects. (Options
/// that set `allow_negative_numbers = true` never get here.)
fn message<T: clap::Parser>(e: &clap::Error, argv: &[OsString]) -> String {
    if is_negative_number_error(e) {
        if let Some(joined) = join_negative_values(argv) {
            match T::try_parse_from(&joined) {
                Err(again) if !is_negative_number_error(&again) => return one_line(&again),
                Ok(_) => {
                    let (opt, arg) = negative_after(argv).unwrap_or_default();
                    return cap_quoted(
                        &format!(
                            "'{arg}' after '{opt}' reads as an option; write a negative value \
                             as '{opt}={arg}'"
                        ),
                        ECHO_MAX,
                    );
                }
                Err(_) => {}
            }
        }
    }
    one_line(e)
}

/// The first option followed by a negative number, and that number.
fn negative_after(argv: &[OsString]) -> Option<(String, String)> {
    argv.windows(2).find_map(|w| {
        let (p, a) = (w[0].to_str()?, w[1].to_str()?);
        (p.starts_with('-') && !looks_negative(p) && looks_negative(a))
            .then(|| (p.to_string(), a.to_string()))
    })
}

fn looks_negative(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('-') else {
        return false;
    };
    rest.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        || ["inf", "infinity", "nan"].contains(&rest.to_ascii_lowercase().as_str())
}

fn is_negative_number_error(e: &clap::Error) -> bool {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    e.kind() == ErrorKind::UnknownArgument
        && matches!(e.get(ContextKind::InvalidArg), Some(ContextValue::String(a)) if looks_negative(a))
}

/// `--opt -1` becomes `--opt=-1` (and `-n -1` becomes `-n=-1`); `None` when nothing changed.
fn join_negative_values(argv: &[OsString]) -> Option<Vec<OsString>> {
    let mut out: Vec<OsString> = Vec::with_capacity(argv.len());
    let mut changed = false;
    let mut options_done = false;
    for a in argv {
        let s = a.to_str().unwrap_or("");
        if !options_done && looks_negative(s) {
            if let Some(prev) = out.last_mut() {
                let p = prev.to_str().unwrap_or("");
                let option =
                    p.starts_with('-') && p != "--" && !p.contains('=') && !looks_negative(p);
                if option {
                    let joined = format!("{p}={s}");
                    *prev = joined.into();
                    changed = true;
                    continue;
                }
            }
        }
        if s == "--" {
            options_done = true;
        }
        out.push(a.clone());
    }
    changed.then_some(out)
}

/// clap's own errors are several lines long; keep the one line that matters and point at
/// `--help`. Help and version requests print as clap does.
pub fn exit_on_clap_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        _ => {
            let argv: Vec<OsString> = std::env::args_os().collect();
            let line = message::<crate::Cli>(&e, &argv);
            eprintln!("efabench: {line} (run with --help for the options)");
            Exit::Usage.exit()
        }
    }
}

/// One line from a clap error: its first line (with the list that completes it when it ends
/// with a colon), then clap's valid values and "did you mean" from the error's context, with
/// echoed input cut to [`ECHO_MAX`] characters.
pub fn one_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let mut line = first_line(&e.render().to_string());
    let mut add = |text: String| {
        line.push_str("; ");
        line.push_str(&text);
    };
    let named = |v: &ContextValue| -> Vec<String> {
        match v {
            ContextValue::String(s) => vec![s.clone()],
            ContextValue::Strings(v) => v.clone(),
            _ => Vec::new(),
        }
    };
    if let Some(v) = e.get(ContextKind::ValidValue) {
        let values = named(v);
        if !values.is_empty() {
            let shown: Vec<String> = values.iter().take(20).cloned().collect();
            let more = if values.len() > shown.len() {
                ", ..."
            } else {
                ""
            };
            add(format!("possible values: {}{more}", shown.join(", ")));
        }
    }
    for kind in [
        ContextKind::SuggestedValue,
        ContextKind::SuggestedArg,
        ContextKind::SuggestedSubcommand,
    ] {
        if let Some(v) = e.get(kind) {
            let names = named(v);
            if !names.is_empty() {
                let quoted: Vec<String> = names.iter().take(3).map(|n| format!("'{n}'")).collect();
                add(format!("did you mean {}?", quoted.join(" or ")));
            }
        }
    }
    if is_negative_number_error(e) {
        let arg = match e.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(a)) => a.clone(),
            _ => String::new(),
        };
        line = format!(
            "{arg} is not an option, and no option here takes a negative number; give the \
             value to its option with `=` (e.g. --timeout=5) if one was meant"
        );
    }
    cap(&cap_quoted(&line, ECHO_MAX), LINE_MAX)
}

/// The first line of a clap error, with the indented lines that complete it when it ends with a
/// colon (`the following required arguments were not provided:\n  --foo <FOO>`).
fn first_line(rendered: &str) -> String {
    let mut lines = rendered.lines().filter(|l| !l.trim().is_empty());
    let mut first = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .to_string();
    if first.ends_with(':') {
        let more: Vec<&str> = lines
            .take_while(|l| l.starts_with(' ') && !l.trim_start().starts_with("Usage"))
            .map(str::trim)
            .collect();
        first.push(' ');
        first.push_str(&more.join(", "));
    }
    first
}

/// Cut every '...'-quoted piece longer than `max` characters (clap quotes what the user typed).
fn cap_quoted(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(4 * LINE_MAX));
    let mut inside = false;
    let mut run = 0usize;
    for c in s.chars() {
        if c == '\'' {
            inside = !inside;
            run = 0;
            out.push(c);
            continue;
        }
        if inside {
            run += 1;
            if run == max + 1 {
                out.push_str("...");
            }
            if run > max {
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// At most `max` characters, control characters dropped.
fn cap(s: &str, max: usize) -> String {
    let mut out: String = s.chars().filter(|c| !c.is_control()).take(max).collect();
    if s.chars().filter(|c| !c.is_control()).nth(max).is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::ValueEnum, Clone, Debug, PartialEq)]
    enum Variant {
        Pingpong,
        Stream,
    }

    fn secs(s: &str) -> Result<f64, String> {
        match s.parse::<f64>() {
            Ok(v) if v > 0.0 => Ok(v),
            _ => Err(format!(
                "'{s}' is not a positive number of seconds; pass e.g. 30"
            )),
        }
    }

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        cmd: Sub,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Sub {
        Sendrecv {
            #[arg(long, value_parser = secs)]
            timeout: Option<f64>,
            #[arg(short = 'n', long)]
            iters: Option<u64>,
            #[arg(long, value_enum)]
            variant: Option<Variant>,
            #[arg(long)]
            check: bool,
            #[arg(long, required = false)]
            output: Option<String>,
        },
        Plot {
            #[arg(long)]
            output: String,
        },
    }

    fn err(argv: &[&str]) -> String {
        let argv: Vec<OsString> = std::iter::once("efabench")
            .chain(argv.iter().copied())
            .map(OsString::from)
            .collect();
        message::<Cli>(&Cli::try_parse_from(&argv).unwrap_err(), &argv)
    }

    #[test]
    fn negative_numbers_reach_the_options_own_check() {
        assert_eq!(
            err(&["sendrecv", "--timeout", "-1"]),
            "invalid value '-1' for '--timeout <TIMEOUT>': '-1' is not a positive number of \
             seconds; pass e.g. 30"
        );
        let m = err(&["sendrecv", "-n", "-5"]);
        assert!(
            m.starts_with("invalid value '-5' for '--iters <ITERS>'"),
            "{m}"
        );
        // A flag cannot take it: the message still names the number, not a random tip.
        let m = err(&["sendrecv", "--check", "-1"]);
        assert!(m.contains("'-1'") && m.contains("--check"), "{m}");
        let m = err(&["sendrecv", "-1"]);
        assert!(m.starts_with("-1 is not an option"), "{m}");
        // An option that would take it: say how to write it.
        assert_eq!(
            err(&["sendrecv", "--output", "-1"]),
            "'-1' after '--output' reads as an option; write a negative value as '--output=-1'"
        );
    }

    #[test]
    fn valid_values_and_suggestions_stay_in_the_line() {
        assert_eq!(
            err(&["sendrecv", "--variant", "pingpng"]),
            "invalid value 'pingpng' for '--variant <VARIANT>'; possible values: pingpong, \
             stream; did you mean 'pingpong'?"
        );
        assert_eq!(
            err(&["sendrecv", "--varient", "stream"]),
            "unexpected argument '--varient' found; did you mean '--variant'?"
        );
        let m = err(&["sendrec"]);
        assert!(m.contains("did you mean 'sendrecv'?"), "{m}");
    }

    #[test]
    fn echoed_input_is_capped() {
        let huge = "x".repeat(100_000);
        for argv in [
            vec!["sendrecv", "--variant", huge.as_str()],
            vec!["sendrecv", "--timeout", huge.as_str()],
            vec!["sendrecv", huge.as_str()],
        ] {
            let m = err(&argv);
            assert!(m.len() < 400, "{} chars: {}", m.len(), &m[..200]);
            assert!(m.contains("..."), "{m}");
            assert!(!m.contains('\n'));
        }
    }

    #[test]
    fn one_line_with_the_cause_chain_and_the_exit_code() {
        let fab = efabench_fabric::Error::Call {
            call: "fi_writemsg",
            errno: 11,
            text: "Resource temporarily unavailable".into(),
            provider: Some("efa".into()),
        };
        let e = CliError::Bench {
            command: "write",
            source: BenchError::from(fab).on_rank(1),
        };
        assert_eq!(
            e.line(),
            "efabench write: rank 1: fabric: fi_writemsg: -FI_EAGAIN (Resource temporarily \
             unavailable), provider efa"
        );
        assert_eq!(Exit::from(&e), Exit::Failed);
        let e = CliError::Bench {
            command: "ipc",
            source: BenchError::from(efabench_gpu::GpuError::NoDriver).on_rank(0),
        };
        assert_eq!(Exit::from(&e), Exit::Usage);
        assert!(
            e.line().starts_with("efabench ipc: no CUDA driver"),
            "{}",
            e.line()
        );
        let e = CliError::usage("bad\nsecond line");
        assert_eq!(
            (e.line().as_str(), Exit::from(&e)),
            ("efabench: bad", Exit::Usage)
        );
        let e = CliError::from(efabench_report::Error::failed("disk full"));
        assert_eq!(
            (e.line().as_str(), Exit::from(&e)),
            ("efabench: disk full", Exit::Failed)
        );
    }

    #[test]
    fn clap_errors_become_one_line_with_their_list() {
        assert_eq!(
            err(&["plot"]),
            "the following required arguments were not provided: --output <OUTPUT>"
        );
        let r = "error: the following required arguments were not provided:\n  --output <FILE>\n  <RESULTS>...\n\nUsage: efabench plot\n";
        assert_eq!(
            first_line(r),
            "the following required arguments were not provided: --output <FILE>, <RESULTS>..."
        );
    }
}
