//! `efabench cluster`: node checks, consistency, pairs and alltoall of a whole cluster in one
//! job, one verdict per node; exit 1 when any node is ISOLATE, 3 when the cluster fails as a
//! whole.
//!
//! The stages and the verdicts live in `efabench_cluster`; this file gives them the node checks
//! (the doctor's, on this host) and writes `--prometheus`.

use crate::cmd::cluster_prometheus;
use crate::cmd::doctor::libfabric_input;
use crate::cmd::topo::open_root;
use crate::error::CliError;
use crate::exit::Exit;
use efabench_bench::BuildInfo;
use efabench_cluster::node::{CheckStatus, NodeCheck, NodeFacts, NodeReport};
use efabench_cluster::ClusterArgs;
use efabench_doctor::{memlock_of_this_process, Inputs, LibfabricInput, Status};
use efabench_topology::installed::{EfaDriver, Installed};
use efabench_topology::{Root, Topology};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Directory that stands for / in the node checks (a fixture tree).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Captured output of `fi_info --version; fi_info -p efa` for the node checks (instead of
    /// asking libfabric).
    #[arg(long, value_name = "FILE")]
    pub fi_info: Option<PathBuf>,
}

/// The doctor's checks of this host and the facts compared across nodes.
fn node_report(root: &Root, libfabric: &LibfabricInput, interval: f64) -> NodeReport {
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let inputs = Inputs {
        root: root.clone(),
        env: env.clone(),
        libfabric: libfabric.clone(),
        memlock: memlock_of_this_process(),
        interval: Duration::from_secs_f64(interval.max(0.0)),
        nccl_log: None,
        gin: false,
        nvml: crate::cmd::doctor::live_nvml(root),
    };
    let report = efabench_doctor::run(&inputs);
    let checks = report
        .checks
        .iter()
        .map(|c| NodeCheck {
            id: c.id.clone(),
            status: match c.status {
                Status::Pass => CheckStatus::Pass,
                Status::Warn => CheckStatus::Warn,
                Status::Fail => CheckStatus::Fail,
                Status::Skip => CheckStatus::Skip,
            },
            summary: c.summary.clone(),
            fix: c.fix.clone(),
        })
        .collect();
    let topo = Topology::discover(root);
    let installed = Installed::scan(root, &env);
    let version = |f: &[efabench_topology::installed::Found]| {
        Installed::best(f).and_then(|x| x.version.clone())
    };
    let hugepages = root.read("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("HugePages_Total:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    });
    let facts = NodeFacts {
        instance_type: topo.instance_type.clone(),
        efa_devices: topo.nics.len(),
        gpus: topo.gpus.len(),
        link_gbps: topo.aggregate_link_gbps,
        libfabric: match libfabric {
            LibfabricInput::Found { version, .. } => version.clone(),
            _ => None,
        }
        .or_else(|| version(&installed.libfabric)),
        efa_driver: match &installed.efa_driver {
            EfaDriver::Amzn { version } => Some(version.clone()),
            EfaDriver::InTree { .. } => Some("in-tree".into()),
            EfaDriver::NotLoaded => None,
        },
        aws_ofi_nccl: version(&installed.aws_ofi_nccl),
        nccl: version(&installed.nccl),
        nvidia_driver: installed.nvidia_driver.as_ref().map(|d| d.version.clone()),
        cuda: installed.cuda.as_ref().and_then(|c| c.version.clone()),
        hugepages,
        kernel: installed.kernel.clone(),
    };
    NodeReport {
        host: efabench_cluster::node::this_host(),
        checks,
        facts,
    }
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    // Ranks started by `efabench launch` die with it.
    efabench_bootstrap::launcher::die_with_launcher();
    let root = open_root(&args.root)?;
    let libfabric = libfabric_input(&root, args.fi_info.as_deref())?;
    let build = BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        git: option_env!("EFABENCH_GIT")
            .map(str::to_string)
            .filter(|g| !g.is_empty()),
    };
    let check = |interval: f64| node_report(&root, &libfabric, interval);
    let outcome =
        efabench_cluster::run(&args.cluster, &build, &check).map_err(|source| CliError::Bench {
            command: "cluster",
            source,
        })?;
    if let (Some(s), Some(path)) = (&outcome.summary, &args.cluster.prometheus) {
        let text = cluster_prometheus::render(s);
        if path.as_os_str() == "-" {
            super::topo::emit(&text);
        } else {
            super::prometheus::write_atomically(path, &text).map_err(|e| {
                CliError::failed(format!("cannot write --prometheus {}: {e}", path.display()))
            })?;
        }
    }
    Ok(Exit::from(outcome.ending))
}
