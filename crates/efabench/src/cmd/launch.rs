//! `efabench launch -n N [--timeout S] [--] <command> [options]`: N local ranks of this binary.
//!
//! The work is in `efabench_bootstrap::launcher` (so its multi-process tests can drive it); this
//! file turns the command line into launch options. The ranks run `efabench <command> [options]`
//! (this same executable) and find their rank, world size and rendezvous through the
//! `EFABENCH_*` variables the launcher sets, which take precedence over Slurm/MPI variables of an
//! enclosing allocation.
use std::ffi::OsString;
use std::time::Duration;

use efabench_bootstrap::launcher::{self, LaunchOptions, MAX_LOCAL_RANKS};

use crate::error::CliError;
use crate::exit::Exit;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of local ranks to start.
    #[arg(
        short = 'n',
        long = "ranks",
        value_name = "N",
        allow_negative_numbers = true
    )]
    ranks: u32,
    /// Once a rank has failed, seconds the others get to notice and exit with their own message
    /// before launch stops them (SIGTERM, then SIGKILL 2 s later).
    #[arg(
        long,
        value_name = "SECS",
        default_value = "10",
        allow_negative_numbers = true
    )]
    timeout: f64,
    /// The efabench command every rank runs, with its options (e.g. `sendrecv -b 8 -e 1M`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    if args.ranks == 0 || args.ranks > MAX_LOCAL_RANKS {
        return Err(CliError::usage(format!(
            "-n {} is out of range: launch starts 1 to {MAX_LOCAL_RANKS} local ranks",
            args.ranks
        )));
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout <= 86_400.0) {
        return Err(CliError::usage(format!(
            "--timeout {} is not a number of seconds between 0 and 86400",
            args.timeout
        )));
    }
    // Only benchmarks (and `cluster`, which runs them), without --rank/--world/--rdzv: launch
    // places every rank itself.
    let mut ranked = efabench_bench::BENCHMARKS.to_vec();
    ranked.push("cluster");
    launcher::check_rank_command(&args.command, &ranked)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let program = std::env::current_exe().map_err(|e| {
        CliError::failed(format!(
            "cannot find the efabench executable to start the ranks: {e}"
        ))
    })?;
    let opts = LaunchOptions {
        ranks: args.ranks,
        program,
        args: args.command,
        grace: Duration::from_secs_f64(args.timeout),
        env: Vec::new(),
    };
    launcher::launch(&opts)
        .map(Exit::Child)
        .map_err(CliError::Launch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        Cli::try_parse_from(std::iter::once("launch").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn the_command_keeps_its_own_options() {
        let a = parse(&["-n", "4", "sendrecv", "-n", "100", "--rdzv", "x:1"]).unwrap();
        assert_eq!(a.ranks, 4);
        assert_eq!(a.timeout, 10.0);
        assert_eq!(a.command, ["sendrecv", "-n", "100", "--rdzv", "x:1"]);
        let a = parse(&["-n", "2", "--timeout", "3", "--", "write", "--check"]).unwrap();
        assert_eq!((a.ranks, a.timeout), (2, 3.0));
        assert_eq!(a.command, ["write", "--check"]);
    }

    #[test]
    fn bad_command_lines_are_usage_errors() {
        assert!(parse(&["-n", "2"]).is_err(), "the command is required");
        assert!(parse(&["sendrecv"]).is_err(), "-n is required");
        for (argv, words) in [
            (&["-n", "0", "sendrecv"][..], "-n 0 is out of range"),
            (
                &["-n", "2", "launch", "-n", "2"][..],
                "`launch` is not a benchmark",
            ),
            (
                &["-n", "2", "plot", "x.jsonl"][..],
                "`plot` is not a benchmark",
            ),
            (
                &["-n", "2", "sendrecv", "--rank=1"][..],
                "must not have --rank",
            ),
            (
                &["-n", "2", "--", "write", "--rdzv", "h:1"][..],
                "must not have --rdzv",
            ),
            (
                &["-n", "2", "--timeout", "0", "sendrecv"][..],
                "--timeout 0",
            ),
        ] {
            match run(parse(argv).unwrap()) {
                Err(CliError::Usage(m)) => assert!(m.contains(words), "{m}"),
                other => panic!("{argv:?}: expected a usage error, got {other:?}"),
            }
        }
    }
}
