//! `efabench`: the thin binary on top of the workspace.
//!
//! Each subcommand lives in `cmd/<name>.rs` as a clap `Args` struct plus a `run` function; the
//! work itself lives in the library crates (fabric, bootstrap, bench, topology, doctor, gpu,
//! report). This file only parses the command line and ends the process with the command's
//! [`exit::Exit`] or its error's.

#![forbid(unsafe_code)]

mod cmd;
mod error;
mod exit;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "efabench", version = env!("EFABENCH_VERSION_LONG"), about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Health and configuration checks of the EFA/GPU stack; exit 1 if any check fails.
    Doctor(cmd::doctor::Args),
    /// GPUs, EFA NICs, NUMA nodes, GPU<->NIC pairing, NVLink, libfabric domains.
    Topo(cmd::topo::Args),
    /// EFA hardware counters: snapshot, live rates (--watch), or deltas around a command.
    Counters(cmd::counters::Args),
    /// Check a whole cluster: node checks, consistency, pairs and alltoall, one verdict per
    /// node (PASS, WARN, ISOLATE); exit 1 when any node is ISOLATE.
    Cluster(Box<cmd::cluster::Args>),
    /// Start N local ranks of an efabench command on this host.
    Launch(cmd::launch::Args),
    /// The benchmarks (sendrecv, write, read, ipc, ...), declared in `efabench_bench`.
    #[command(flatten)]
    Bench(efabench_bench::BenchCommand),
    /// Plot JSONL records to PNG or SVG.
    Plot(cmd::plot::Args),
    /// Compare a baseline with a candidate (one or several runs each); exit 1 on a regression
    /// beyond the tolerance and the noise.
    Compare(cmd::compare::Args),
    /// Keep several runs of a sweep, with their spread, as a baseline file for compare.
    Baseline(cmd::baseline::Args),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => error::exit_on_clap_error(e),
    };
    let result = match cli.command {
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::Topo(a) => cmd::topo::run(a),
        Command::Counters(a) => cmd::counters::run(a),
        Command::Launch(a) => cmd::launch::run(a),
        Command::Cluster(a) => cmd::cluster::run(*a),
        Command::Bench(b) => cmd::bench::run(b),
        Command::Plot(a) => cmd::plot::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Baseline(a) => cmd::baseline::run(a),
    };
    match result {
        Ok(exit) => exit.exit(),
        Err(e) => {
            // A run that failed leaves its fabric open rather than close endpoints with writes
            // still posted (libfabric 1.17's tcp provider crashes then), so the shm provider
            // never removes this process's regions from /dev/shm: 16 MiB each, until reboot.
            efabench_bootstrap::launcher::remove_shm_files_of(
                std::process::id(),
                std::path::Path::new("/dev/shm"),
            );
            e.exit()
        }
    }
}
