//! The one error type every command returns, and how it becomes an exit status.
//!
//! DESIGN.md: bad input is one line naming the problem and the fix, exit status 2, never a panic
//! or a backtrace. A run that measured or checked something and found it wrong exits 1.

use std::fmt;

#[derive(Debug)]
pub enum CliError {
    /// Bad input or a missing prerequisite (library, provider, driver): exit 2.
    Usage(String),
    /// The command ran and failed (verification errors, a dead peer, an I/O error): exit 1.
    Failed(String),
}

impl CliError {
    pub fn usage(msg: impl Into<String>) -> Self {
        CliError::Usage(msg.into())
    }
    pub fn failed(msg: impl Into<String>) -> Self {
        CliError::Failed(msg.into())
    }
    pub fn exit(self) -> ! {
        let code = match &self {
            CliError::Usage(_) => 2,
            CliError::Failed(_) => 1,
        };
        eprintln!("efabench: {self}");
        std::process::exit(code)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(m) | CliError::Failed(m) => f.write_str(m.lines().next().unwrap_or("")),
        }
    }
}

/// clap's own errors are several lines long; keep the first one and point at `--help`.
pub fn exit_on_clap_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        _ => {
            let rendered = e.render().to_string();
            let first = one_line(&rendered);
            eprintln!("efabench: {first} (run with --help for the options)");
            std::process::exit(2)
        }
    }
}

/// The first line of a clap error, with the indented lines that complete it when it ends with a
/// colon ("the following required arguments were not provided:\n  --foo <FOO>").
fn one_line(rendered: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn clap_errors_become_one_line_with_their_list() {
        let r = "error: the following required arguments were not provided:\n  --output <FILE>\n  <RESULTS>...\n\nUsage: efabench plot\n";
        assert_eq!(
            one_line(r),
            "the following required arguments were not provided: --output <FILE>, <RESULTS>..."
        );
        assert_eq!(
            one_line("error: unexpected argument '--x' found\n\n  tip: ...\n"),
            "unexpected argument '--x' found"
        );
    }
}
