//! `--summary FILE`: the run's verdicts as one JSON document (schema in `docs/cluster.md`),
//! written by rank 0 after every stage (so a run cut short keeps what it measured) and at the
//! end, each time whole or not at all (a temporary file renamed over the path).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::baseline::Comparison;
use crate::expected::LinkProfile;
use crate::paths::PathError;
use crate::verdict::{ClusterVerdict, Ending, NodeVerdict, RunVerdict, Thresholds};

/// The `schema` field of the summary.
pub const SCHEMA: &str = "efabench-cluster/1";

/// How a stage ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    /// Ran to its end.
    Ok,
    /// Ended by an error (the detail says which, and names the node when one was lost).
    Failed,
    /// Not run (the detail says why).
    Skipped,
    /// Still running when this summary was written.
    Running,
    /// Not started yet.
    Pending,
}

/// One stage's timing and outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    pub name: String,
    pub status: StageStatus,
    /// The stage's time budget, seconds (null where the stage has none).
    pub budget_s: Option<f64>,
    /// Seconds the stage took (0 when it did not run).
    pub elapsed_s: f64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl Summary {
    /// How the run this document describes ends (a failed stage aside, which the document
    /// records among its stages).
    pub fn ending(&self) -> Ending {
        self.verdict.ending()
    }
}

/// The `exit_code` the document records for a run that ends `ending`: the status
/// `efabench cluster` exits with (its exit module maps [`Ending`] to the same numbers and checks
/// that they agree), so that a script reading the summary need not know the mapping.
pub fn exit_code(ending: Ending) -> i32 {
    match ending {
        Ending::Healthy => 0,
        Ending::NodesFailed => 1,
        Ending::ClusterFailed => 3,
    }
}

/// The whole document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub schema: String,
    pub version: String,
    pub git: Option<String>,
    /// RFC 3339, UTC: when rank 0 started, and when this document was written.
    pub started: String,
    pub written: String,
    /// Ranks of the job and hosts among them.
    pub world: u32,
    pub hosts: usize,
    /// The run's verdict: FAIL when the cluster fails as a whole, else the worst node verdict;
    /// and the exit status of the run (3 when the cluster fails as a whole, else 1 when any
    /// node is ISOLATE, else 0).
    pub verdict: RunVerdict,
    pub exit_code: i32,
    /// The verdict on the cluster as a whole (PASS or FAIL), beside the per-node ones.
    #[serde(default)]
    pub cluster_verdict: ClusterVerdict,
    /// The cluster-wide findings that make `cluster_verdict` FAIL.
    #[serde(default)]
    pub cluster_failures: Vec<String>,
    /// Whether every stage has ended (false in the summaries written between stages).
    pub complete: bool,
    pub thresholds: Thresholds,
    pub stages: Vec<StageReport>,
    /// Findings about the cluster as a whole (a check failing on most nodes, a fact with no
    /// majority value).
    pub cluster: Vec<String>,
    /// The instance type's link the figures' `expected` are judged against (absent where the
    /// nodes' type is unknown or differs between them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_profile: Option<LinkProfile>,
    pub nodes: Vec<NodeVerdict>,
    /// This run against `--baseline` (absent without it, or before the pairs stage ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Comparison>,
}

/// Refuses a path that `flag` (`--summary`, `--prometheus`, `--save-baseline`) would write and
/// cannot, before anything runs: a directory, a missing or read-only directory, a read-only file.
pub fn check_writable(path: &Path, flag: &'static str) -> Result<(), PathError> {
    let shown = path.display().to_string();
    if path.as_os_str().is_empty() {
        return Err(PathError::NoName { flag });
    }
    if path.is_dir() {
        return Err(PathError::Directory { flag, path: shown });
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    // The file is replaced by a rename from this directory, so the directory must take a new
    // file; an existing file must also be writable (it is not touched here).
    let probe = dir.join(format!(".efabench-summary-probe.{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|source| PathError::DirNotWritable {
        flag,
        path: shown.clone(),
        dir: dir.display().to_string(),
        source,
    })?;
    let _ = std::fs::remove_file(&probe);
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|source| PathError::NotWritable {
                flag,
                path: shown,
                source,
            })?;
    }
    Ok(())
}

/// Writes `summary` to `path` whole: a reader never sees half a file.
pub fn write(path: &Path, summary: &Summary) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(summary).map_err(std::io::Error::other)? + "\n";
    efabench_record::write_atomically(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "efabench-summary-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn unwritable_paths_are_refused_with_the_reason() {
        let d = dir();
        assert!(check_writable(&d.join("s.json"), "--summary").is_ok());
        let e = check_writable(&d, "--summary").unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = check_writable(&d.join("missing/s.json"), "--prometheus")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--prometheus "), "{e}");
        assert!(e.contains("cannot create files in"), "{e}");
        let e = check_writable(Path::new(""), "--prometheus").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--prometheus needs a file name, e.g. --prometheus metrics.prom"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_summary_round_trips_and_keeps_its_keys() {
        let d = dir();
        let s = Summary {
            schema: SCHEMA.into(),
            version: "0.1.0".into(),
            git: None,
            started: "2026-01-01T00:00:00Z".into(),
            written: "2026-01-01T00:00:09Z".into(),
            world: 4,
            hosts: 4,
            verdict: RunVerdict::Pass,
            exit_code: 0,
            cluster_verdict: ClusterVerdict::Pass,
            cluster_failures: Vec::new(),
            complete: true,
            thresholds: Thresholds::default(),
            stages: vec![StageReport {
                name: "pairs".into(),
                status: StageStatus::Ok,
                budget_s: Some(20.0),
                elapsed_s: 3.5,
                detail: String::new(),
            }],
            cluster: Vec::new(),
            link_profile: Some(LinkProfile {
                instance_type: "p5en.48xlarge".into(),
                efa_devices: 16,
                gbps_per_efa: 200.0,
                evidence: efabench_topology::profiles::Evidence::Source,
                provenance: "read in a profile".into(),
            }),
            nodes: Vec::new(),
            baseline: None,
        };
        let p = d.join("summary.json");
        write(&p, &s).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for k in [
            "schema",
            "version",
            "world",
            "hosts",
            "verdict",
            "exit_code",
            "cluster_verdict",
            "cluster_failures",
            "complete",
            "thresholds",
            "stages",
            "cluster",
            "nodes",
        ] {
            assert!(v.get(k).is_some(), "{k} missing in {text}");
        }
        for k in [
            "instance_type",
            "efa_devices",
            "gbps_per_efa",
            "evidence",
            "provenance",
        ] {
            assert!(v["link_profile"].get(k).is_some(), "{k} missing in {text}");
        }
        assert_eq!(v["link_profile"]["evidence"], "source");
        assert_eq!(v["stages"][0]["status"], "ok");
        assert_eq!(v["verdict"], "PASS");
        let back: Summary = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
        let _ = std::fs::remove_dir_all(&d);
    }
}
