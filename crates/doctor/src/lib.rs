//! efabench-doctor: health and configuration checks of the EFA/libfabric/NCCL/GPU stack on one
//! node.
//!
//! Why a library: the checks are pure functions of what they are given — a [`Root`] (the live
//! system or a fixture tree), the environment, what libfabric said about itself
//! ([`LibfabricInput`]: `fi_info` text, a direct query by the fabric layer, or nothing), the
//! process's `RLIMIT_MEMLOCK` and an optional NCCL log — so every verdict can be tested against
//! fixtures, and the CLI only gathers these inputs. Each [`Check`] says pass/warn/fail/skip, one
//! line of summary, the fix, and the NICs/GPUs/files concerned. Checks that cannot be made from one
//! node (security group self-rule, placement group) are reported as `skip` with how to check them.

#![forbid(unsafe_code)]

mod checks;
pub mod env;
pub mod gin;
mod gpu_health;
mod host;
pub mod minimums;
pub mod nccl_log;
mod pcie;
mod rising;

use efabench_topology::libfabric::{FiInfo, LibfabricDomain};
use efabench_topology::Root;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

pub use gpu_health::{NvmlInput, FATAL_XIDS};
pub use pcie::check_aer;
pub use rising::check_counters;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    Skip,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// One verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub id: String,
    pub status: Status,
    pub summary: String,
    /// What to do about it (empty when nothing needs doing).
    pub fix: String,
    /// NICs, GPUs, files or variables concerned.
    pub subjects: Vec<String>,
}

impl Check {
    pub fn new(id: &str, status: Status, summary: impl Into<String>) -> Check {
        Check {
            id: id.to_string(),
            status,
            summary: summary.into(),
            fix: String::new(),
            subjects: Vec::new(),
        }
    }
    pub fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = fix.into();
        self
    }
    pub fn subjects<S: Into<String>>(mut self, s: impl IntoIterator<Item = S>) -> Check {
        self.subjects = s.into_iter().map(Into::into).collect();
        self
    }
}

/// All verdicts of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    pub fn count(&self, s: Status) -> usize {
        self.checks.iter().filter(|c| c.status == s).count()
    }
    pub fn fails(&self) -> usize {
        self.count(Status::Fail)
    }
    pub fn warns(&self) -> usize {
        self.count(Status::Warn)
    }
    /// True when no check failed (warnings and skips pass).
    pub fn passed(&self) -> bool {
        self.fails() == 0
    }
    pub fn get(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }
    /// `{"checks":[...],"fails":n,"warns":n}`.
    pub fn to_json(&self) -> serde_json::Value {
        json!({ "checks": self.checks, "fails": self.fails(), "warns": self.warns() })
    }
}

/// What libfabric said about itself.
#[derive(Debug, Clone, PartialEq)]
pub enum LibfabricInput {
    /// libfabric was found. `domains` are its `efa` provider entries (`Some(vec![])`: the
    /// provider is absent), or `None` when providers were not queried (only a library file was
    /// seen).
    Found {
        source: String,
        version: Option<String>,
        domains: Option<Vec<LibfabricDomain>>,
    },
    /// Looked for and not found; the text says where.
    NotFound { looked: String },
    /// Not looked for (e.g. a fixture root without a captured `fi_info`); the text says why.
    NotChecked { why: String },
}

impl LibfabricInput {
    /// From parsed `fi_info` text (see [`efabench_topology::libfabric::parse_fi_info`]).
    pub fn from_fi_info(source: impl Into<String>, info: &FiInfo) -> LibfabricInput {
        LibfabricInput::Found {
            source: source.into(),
            version: info.version(),
            domains: Some(info.efa().cloned().collect()),
        }
    }
}

/// `RLIMIT_MEMLOCK` (soft limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memlock {
    Unlimited,
    Bytes(u64),
}

/// Parse the `Max locked memory` line of `/proc/<pid>/limits`.
pub fn memlock_from_limits(text: &str) -> Option<Memlock> {
    let line = text.lines().find(|l| l.starts_with("Max locked memory"))?;
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(Memlock::Unlimited)
    } else {
        soft.parse().ok().map(Memlock::Bytes)
    }
}

/// This process's soft `RLIMIT_MEMLOCK` (through `rustix`, which wraps the system call safely).
/// `Option` for the callers' sake: the call itself cannot fail for a valid resource.
pub fn memlock_of_this_process() -> Option<Memlock> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Memlock);
    Some(match limit.current {
        None => Memlock::Unlimited,
        Some(bytes) => Memlock::Bytes(bytes),
    })
}

/// Everything the checks look at.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub root: Root,
    /// The environment the workload will run with (normally `std::env::vars()`).
    pub env: BTreeMap<String, String>,
    pub libfabric: LibfabricInput,
    pub memlock: Option<Memlock>,
    /// Time between the two counter snapshots (0 in tests: only stale errors are seen).
    pub interval: Duration,
    /// `(file name, text)` of an `NCCL_DEBUG=INFO` log.
    pub nccl_log: Option<(String, String)>,
    /// Add the GPU-initiated networking group (`gin-*` checks and the `gin` verdict).
    pub gin: bool,
    /// The driver's GPU health readings (`gpu-*` checks).
    pub nvml: NvmlInput,
}

impl Inputs {
    /// Inputs for `root` with an empty environment and nothing known about libfabric/memlock.
    pub fn new(root: Root) -> Inputs {
        Inputs {
            root,
            env: BTreeMap::new(),
            libfabric: LibfabricInput::NotChecked {
                why: "not queried".into(),
            },
            memlock: None,
            interval: Duration::ZERO,
            nccl_log: None,
            gin: false,
            nvml: NvmlInput::NotQueried,
        }
    }
}

/// Judge an `NCCL_DEBUG=INFO` log alone (`doctor --nccl-log` without `--all`): the exit status
/// then says whether that job used EFA, not whether this node's other checks pass.
pub fn run_nccl_log_only(name: &str, text: &str) -> Report {
    Report {
        checks: vec![nccl_log::check(name, text)],
    }
}

/// Run every check.
pub fn run(inputs: &Inputs) -> Report {
    Report {
        checks: checks::all(inputs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The system call (through rustix) and the kernel's own text agree on this process's limit.
    #[test]
    fn memlock_of_this_process_matches_proc_self_limits() {
        let text = std::fs::read_to_string("/proc/self/limits").unwrap();
        assert_eq!(memlock_of_this_process(), memlock_from_limits(&text));
    }

    #[test]
    fn memlock_lines_parse() {
        let l = "Limit                     Soft Limit           Hard Limit           Units     \nMax locked memory         8388608              8388608              bytes     \n";
        assert_eq!(memlock_from_limits(l), Some(Memlock::Bytes(8 << 20)));
        let u = "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(memlock_from_limits(u), Some(Memlock::Unlimited));
        assert_eq!(
            memlock_from_limits("Max open files 1024 1024 files\n"),
            None
        );
        assert_eq!(memlock_from_limits("Max locked memory  lots\n"), None);
    }
}
