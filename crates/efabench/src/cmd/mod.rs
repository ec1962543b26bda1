//! One module per subcommand: a clap `Args` struct and `run(args) -> Result<exit code, CliError>`.
pub mod baseline;
pub mod bench;
pub mod cluster;
pub mod cluster_prometheus;
pub mod compare;
pub mod counters;
pub mod doctor;
pub mod launch;
pub mod libfabric;
pub mod plot;
pub mod prometheus;
pub mod topo;
