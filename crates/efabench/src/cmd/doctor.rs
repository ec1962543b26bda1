//! `efabench doctor`: health and configuration checks; exit 1 when any check fails.
//!
//! This file only gathers the inputs of `efabench_doctor::run` — the root, this process's
//! environment and `RLIMIT_MEMLOCK`, what libfabric says about itself ([`libfabric_input`]), the
//! GPU health readings (NVML or `--nvml-fixture`), the counter interval and an optional NCCL log —
//! and prints the report.

use crate::cmd::topo::{emit, open_root};
use crate::error::CliError;
use crate::exit::Exit;
use efabench_doctor::{
    memlock_from_limits, memlock_of_this_process, Inputs, LibfabricInput, NvmlInput, Report, Status,
};
use efabench_topology::gpu_health::FixtureSource;
use efabench_topology::libfabric::{libfabric_files, read_fi_info_file};
use efabench_topology::Root;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print JSON ({"checks":[...],"fails":n,"warns":n}) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Directory that stands for / (a fixture tree or a copy of another node's files).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Seconds between the two hw_counters snapshots used to see whether error counters rise.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 1.0,
        allow_hyphen_values = true
    )]
    pub interval: f64,
    /// An NCCL_DEBUG=INFO log to check: did NCCL use aws-ofi-nccl on the efa provider? The
    /// log alone is judged (exit 1 only when it fails) unless --all asks for the node checks too.
    #[arg(long, value_name = "FILE")]
    pub nccl_log: Option<PathBuf>,
    /// With --nccl-log: run this node's checks as well, in one report and exit status.
    #[arg(long)]
    pub all: bool,
    /// Captured output of `fi_info --version; fi_info -p efa` (instead of running fi_info; needed
    /// to check libfabric with --root).
    #[arg(long, value_name = "FILE")]
    pub fi_info: Option<PathBuf>,
    /// Also check readiness for GPU-initiated networking (NCCL's GIN over EFA: proxy mode and
    /// EFA-GDA on p5en, p6-b200, p6-b300).
    #[arg(long)]
    pub gin: bool,
    /// GPU health readings from a JSON file instead of NVML (the shape of
    /// `efabench_topology::gpu_health::FixtureFile`; docs/doctor-paths.md). Without it NVML is
    /// asked on the live system and nothing with --root.
    #[arg(long, value_name = "FILE")]
    pub nvml_fixture: Option<PathBuf>,
}

/// The GPU health readings: `--nvml-fixture FILE`, else NVML on the live system, else none.
fn nvml_input(root: &Root, fixture: Option<&Path>) -> Result<NvmlInput, CliError> {
    if let Some(f) = fixture {
        let src = FixtureSource::open(f).map_err(|e| {
            CliError::usage(format!(
                "--nvml-fixture {e}; give a JSON file with \"snapshots\" and \"xids\" (docs/doctor-paths.md)"
            ))
        })?;
        return Ok(NvmlInput::Source(Arc::new(src)));
    }
    Ok(live_nvml(root))
}

/// NVML on the live system (or why it did not answer); nothing for a fixture root, which NVML
/// does not describe.
pub fn live_nvml(root: &Root) -> NvmlInput {
    if !root.is_system() {
        return NvmlInput::NotQueried;
    }
    match efabench_gpu::health::NvmlHealth::open() {
        Ok(h) => NvmlInput::Source(Arc::new(h)),
        Err(e) => NvmlInput::Unavailable(e.0),
    }
}

/// What libfabric says about itself: a captured fi_info file, else `fi_info` on the live system,
/// else the `libfabric.so.1.N.0` files under the root. The fabric layer can replace this with a
/// direct query (`LibfabricInput::Found`).
pub fn libfabric_input(root: &Root, fi_info: Option<&Path>) -> Result<LibfabricInput, CliError> {
    if let Some(f) = fi_info {
        // Checked, not only parsed: any text would otherwise read as "libfabric found".
        let info = read_fi_info_file(f).map_err(|e| {
            CliError::usage(format!(
                "--fi-info {e}; give a file holding `fi_info --version; fi_info -p efa` output"
            ))
        })?;
        return Ok(LibfabricInput::from_fi_info(f.display().to_string(), &info));
    }
    let mut why = String::from("--root without --fi-info FILE");
    if root.is_system() {
        // Ask the library the benchmarks would load (EFABENCH_LIBFABRIC, /opt/amazon/efa, the
        // system's), not whichever fi_info is first on PATH.
        match super::libfabric::query() {
            Ok(q) => {
                return Ok(LibfabricInput::Found {
                    source: super::libfabric::library_file(&q.path),
                    version: Some(q.version),
                    domains: Some(q.efa_domains),
                })
            }
            Err(e) => why = e,
        }
    }
    let files = libfabric_files(root);
    if let Some((path, version)) = files.iter().find(|(_, v)| v.is_some()).or(files.first()) {
        return Ok(LibfabricInput::Found {
            source: path.clone(),
            version: version.clone(),
            domains: None,
        });
    }
    Ok(LibfabricInput::NotFound {
        looked: format!(
            "{why}; no libfabric.so.1.* in /opt/amazon/efa/lib64 or /opt/amazon/efa/lib"
        ),
    })
}

/// The largest `--nccl-log` read: NCCL prints what the check looks at (plugin, provider,
/// channels) at start-up, so a bigger file is cut with `head -c` rather than read whole (and
/// `/dev/zero` is refused instead of filling memory).
const NCCL_LOG_MAX_BYTES: u64 = 256 << 20;

/// Reads at most `max` bytes of `path`; a longer file or a directory is an error saying so.
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let reason = |e: std::io::Error| {
        let s = e.to_string();
        s.split(" (os error").next().unwrap_or_default().to_string()
    };
    let file = std::fs::File::open(path).map_err(reason)?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err("it is a directory".into());
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(reason)?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "larger than {} MiB; pass its beginning (e.g. `head -c 100M LOG > start.log`), where NCCL prints its set-up",
            max >> 20
        ));
    }
    Ok(bytes)
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    let root = open_root(&args.root)?;
    if !args.interval.is_finite() || args.interval < 0.0 || args.interval > 3600.0 {
        return Err(CliError::usage(format!(
            "--interval {}: give seconds between 0 and 3600 (0 = one counter snapshot)",
            super::topo::shown(&args.interval.to_string())
        )));
    }
    let nccl_log = match &args.nccl_log {
        None => None,
        Some(f) => {
            let bytes = read_bounded(f, NCCL_LOG_MAX_BYTES).map_err(|e| {
                CliError::usage(format!(
                    "--nccl-log {}: {e}; give the log of a run with NCCL_DEBUG=INFO",
                    f.display()
                ))
            })?;
            Some((
                f.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ))
        }
    };
    if args.all && nccl_log.is_none() {
        return Err(CliError::usage(
            "--all goes with --nccl-log FILE (the node checks always run without it); leave --all out or add --nccl-log",
        ));
    }
    if let (Some((name, text)), false) = (&nccl_log, args.all) {
        return Ok(report(
            &efabench_doctor::run_nccl_log_only(name, text),
            args.json,
        ));
    }
    let libfabric = libfabric_input(&root, args.fi_info.as_deref())?;
    let nvml = nvml_input(&root, args.nvml_fixture.as_deref())?;
    let memlock = if root.is_system() {
        memlock_of_this_process()
    } else {
        root.read("/proc/self/limits")
            .ok()
            .and_then(|t| memlock_from_limits(&t))
    };
    let inputs = Inputs {
        root,
        env: std::env::vars().collect(),
        libfabric,
        memlock,
        interval: Duration::from_secs_f64(args.interval),
        nccl_log,
        gin: args.gin,
        nvml,
    };
    Ok(report(&efabench_doctor::run(&inputs), args.json))
}

/// Prints the report; the process fails when a check failed.
fn report(report: &Report, json: bool) -> Exit {
    if json {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
        ));
    } else {
        emit(&render(report));
    }
    Exit::failed_unless(report.passed())
}

/// The human-readable report.
pub fn render(r: &Report) -> String {
    let w = r.checks.iter().map(|c| c.id.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in &r.checks {
        out.push_str(&format!(
            "{:<4}  {:<w$}  {}\n",
            c.status.as_str().to_ascii_uppercase(),
            c.id,
            c.summary
        ));
        if c.status != Status::Pass {
            let pad = " ".repeat(w + 8);
            if !c.fix.is_empty() {
                out.push_str(&format!("{pad}fix: {}\n", c.fix));
            }
            if !c.subjects.is_empty() {
                let mut s: Vec<String> = c.subjects.iter().take(8).cloned().collect();
                if c.subjects.len() > 8 {
                    s.push(format!("... ({} in all)", c.subjects.len()));
                }
                out.push_str(&format!("{pad}subjects: {}\n", s.join(", ")));
            }
        }
    }
    out.push_str(&format!(
        "\n{} checks: {} pass, {} warn, {} fail, {} skip\n",
        r.checks.len(),
        r.count(Status::Pass),
        r.warns(),
        r.fails(),
        r.count(Status::Skip)
    ));
    out
}
