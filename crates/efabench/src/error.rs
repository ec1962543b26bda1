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
            let first = rendered
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ")
                .to_string();
            eprintln!("efabench: {first} (run with --help for the options)");
            std::process::exit(2)
        }
    }
}
