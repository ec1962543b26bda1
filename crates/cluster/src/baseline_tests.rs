//! The comparison with a baseline on synthetic runs: a healthy run, a cluster slow alike, one
//! slow node, a baseline of another job shape, a baseline too noisy to conclude; and the file
//! written, appended to and refused.
use super::*;
use crate::consistency::Consistency;
use crate::figures::Matrix;
use crate::verdict::{self, Ending, Inputs, Verdict};
use efabench_record::testing::sample;
use efabench_report::compare::Side;
use serde_json::json;

/// A `pairs` run on `n` ranks, one per host, each pair at `f(src, dst)` Gbps with a little
/// spread (`salt` moves it, so two runs are not identical).
fn run(n: usize, salt: usize, f: impl Fn(usize, usize) -> f64) -> Vec<Record> {
    let mut out = Vec::new();
    for s in 0..n {
        for d in (0..n).filter(|&d| d != s) {
            let jitter = 1.0 + ((s * 7 + d * 3 + salt) % 5) as f64 * 0.01;
            let bw = f(s, d) * jitter;
            let mut r = sample(
                "pairs",
                "write",
                1 << 20,
                bw,
                8.0 * (1 << 20) as f64 / bw / 1e3,
            );
            r.world = n as u32;
            r.peer = Some(d as u32);
            r.host = format!("old{}", s + 1);
            r.extra.insert("src".into(), json!(s));
            out.push(r);
        }
    }
    out
}

fn baseline_of(runs: &[Vec<Record>]) -> Loaded {
    let files = runs
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("run{i}"), &r[..]));
    Loaded {
        file: "base.json".into(),
        baseline: Baseline::of(&Side::from_records(files)),
    }
}

fn hosts(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node{i}")).collect()
}

/// The relative verdicts on `records`, then the baseline's.
fn judged(n: usize, records: &[Record], b: &Loaded) -> (Judgement, Comparison) {
    judged_with(n, records, b, &Thresholds::default())
}

fn judged_with(
    n: usize,
    records: &[Record],
    b: &Loaded,
    t: &Thresholds,
) -> (Judgement, Comparison) {
    let h = hosts(n);
    let m = Matrix::from_pairs(records);
    let mut j = verdict::judge(&Inputs {
        rank_host: &h,
        reports: &[],
        consistency: &Consistency::default(),
        pairs: m.as_ref(),
        alltoall: None,
        lost: &[],
        thresholds: t,
    });
    let c = judge(&mut j, &h, records, b, t);
    (j, c)
}

#[test]
fn a_healthy_run_matches_its_baseline() {
    let b = baseline_of(&[run(4, 0, |_, _| 10.0)]);
    let (j, c) = judged(4, &run(4, 2, |_, _| 10.0), &b);
    assert_eq!((c.matched_pairs, c.run_pairs), (12, 12));
    assert_eq!(c.finding, Finding::Pass);
    let r = c.cluster.unwrap();
    assert!((r.ratio - 1.0).abs() < 0.03, "{r:?}");
    assert!(r.low < 1.0 && r.high > 1.0, "{r:?}");
    assert_eq!(c.nodes.len(), 4);
    assert!(
        j.cluster_failures.is_empty() && j.cluster.is_empty(),
        "{j:?}"
    );
    assert!(c.message.is_none());
    let line = c.describe();
    assert!(
        line.contains("12 of 12 pair point(s) matched by rank"),
        "{line}"
    );
    assert!(
        line.contains("hosts old1,old2,old3,old4 -> node1,node2,node3,node4"),
        "{line}"
    );
    assert!(line.contains("libfabric 2.1.0 (same)"), "{line}");
    assert!(line.contains("; pairs at 10"), "{line}");
    assert!(line.contains("(PASS over every matched pair)"), "{line}");
}

#[test]
fn a_cluster_slow_alike_fails_as_a_whole() {
    let b = baseline_of(&[run(4, 0, |_, _| 10.0)]);
    // A fallback to another provider is measured against the baseline, not left unmatched.
    let mut slow = run(4, 2, |_, _| 7.0);
    for r in &mut slow {
        r.provider = "tcp".into();
    }
    let (j, c) = judged(4, &slow, &b);
    assert!(
        c.describe().contains("provider efa -> tcp"),
        "{}",
        c.describe()
    );
    // Relative to each other the nodes are fine: no node is named.
    assert!(j.nodes.iter().all(|n| n.verdict == Verdict::Pass), "{j:?}");
    assert_eq!(c.finding, Finding::Fail);
    let r = c.cluster.unwrap();
    assert!((r.ratio - 0.7).abs() < 0.03 && r.high < 0.85, "{r:?}");
    assert_eq!(j.ending(), Ending::ClusterFailed);
    assert_eq!(j.cluster_failures.len(), 1);
    let f = &j.cluster_failures[0];
    assert!(f.starts_with("pairs at 70% ["), "{f}");
    assert!(
        f.contains("of the baseline base.json over 12 matched pair(s)"),
        "{f}"
    );
    // Between the lines: a WARN, not a failure.
    let (j, c) = judged(4, &run(4, 2, |_, _| 9.0), &b);
    assert_eq!(c.finding, Finding::Warn);
    assert!(j.cluster_failures.is_empty());
    assert_eq!(j.cluster.len(), 1, "{j:?}");
    assert!(
        j.cluster[0].contains("confidently below 95%"),
        "{}",
        j.cluster[0]
    );
    // Every node under an absolute floor: the cluster's state, still measured whole.
    let floor = Thresholds {
        min_pair_gbps: Some(8.0),
        ..Thresholds::default()
    };
    let (j, c) = judged_with(4, &run(4, 2, |_, _| 7.0), &b, &floor);
    assert!(
        j.nodes.iter().all(|n| n.verdict == Verdict::Isolate),
        "{j:?}"
    );
    assert!(c.left_out.is_empty(), "{c:?}");
    assert_eq!(c.finding, Finding::Fail);
}

#[test]
fn one_slow_node_gets_its_ratio_as_evidence_and_no_cluster_finding() {
    let b = baseline_of(&[run(4, 0, |_, _| 10.0)]);
    let slow = |s: usize, d: usize| if s == 2 || d == 2 { 6.0 } else { 10.0 };
    let (j, c) = judged(4, &run(4, 2, slow), &b);
    assert_eq!(c.left_out, ["node3"]);
    assert_eq!(c.finding, Finding::Pass, "{c:?}");
    assert!(
        j.cluster_failures.is_empty() && j.cluster.is_empty(),
        "{j:?}"
    );
    // The others' pairs are as the baseline's.
    assert!((c.cluster.unwrap().ratio - 1.0).abs() < 0.03, "{c:?}");
    let n3 = j.nodes.iter().find(|n| n.host == "node3").unwrap();
    assert_eq!(n3.verdict, Verdict::Isolate);
    let e = &n3
        .reasons
        .iter()
        .find(|r| r.stage == "pairs")
        .unwrap()
        .evidence;
    assert!(e.contains("; vs baseline: 6"), "{e}");
    assert!(e.ends_with("over 6 pair(s)"), "{e}");
}

#[test]
fn a_baseline_of_another_job_shape_matches_nothing_and_says_so() {
    let b = baseline_of(&[run(4, 0, |_, _| 10.0)]);
    let (j, c) = judged(3, &run(3, 0, |_, _| 5.0), &b);
    assert_eq!((c.matched_pairs, c.run_pairs), (0, 6));
    assert_eq!((c.finding, c.cluster), (Finding::Pass, None));
    assert!(j.cluster.is_empty());
    let line = c.describe();
    assert_eq!(line.lines().count(), 1);
    assert!(
        line.contains("none of this run's 6 pair point(s) matches one of its 12"),
        "{line}"
    );
}

#[test]
fn a_baseline_too_noisy_to_tell_gives_no_finding() {
    // Two runs a factor 2 apart: the run-to-run spread dwarfs a drop to 70% of their mean.
    let b = baseline_of(&[run(4, 0, |_, _| 7.0), run(4, 1, |_, _| 14.0)]);
    let (j, c) = judged(4, &run(4, 2, |_, _| 7.0), &b);
    let r = c.cluster.unwrap();
    assert!((r.ratio - 0.7).abs() < 0.05, "{r:?}");
    assert!(r.high > 0.95, "{r:?}");
    assert_eq!(c.finding, Finding::Pass);
    assert!(j.cluster.is_empty(), "{j:?}");
    // The same drop against runs that agree is a finding.
    let b = baseline_of(&[run(4, 0, |_, _| 10.0), run(4, 1, |_, _| 10.0)]);
    let (_, c) = judged(4, &run(4, 2, |_, _| 7.0), &b);
    assert_eq!(c.finding, Finding::Fail, "{c:?}");
}

/// A directory removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!(
            "efabench-cluster-baseline-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn saving_appends_runs_of_the_same_context_and_replaces_others() {
    let d = Dir::new("save");
    let p = d.0.join("b.json");
    assert!(check_save_path(&p).is_ok());
    let line = save(&p, &run(3, 0, |_, _| 10.0), "run 1").unwrap();
    assert!(
        line.ends_with("wrote this run (6 point(s), 1 run)"),
        "{line}"
    );
    let line = save(&p, &run(3, 1, |_, _| 10.0), "run 2").unwrap();
    assert!(
        line.ends_with("appended this run (6 point(s), up to 2 run(s) each)"),
        "{line}"
    );
    let b = load(&p).unwrap().baseline;
    assert!(b
        .points
        .iter()
        .all(|p| p.runs.len() == 2 && p.bw_gbps.runs == 2));
    assert_eq!(b.sources, ["run 1", "run 2"]);
    // Another libfabric: not the same expectation.
    let mut other = run(3, 0, |_, _| 10.0);
    for r in &mut other {
        r.libfabric = Some("1.22.0".into());
    }
    let line = save(&p, &other, "run 3").unwrap();
    assert!(line.contains("replaced it with this run (6 point(s)): its context differed (libfabric: 2.1.0 -> 1.22.0)"), "{line}");
    assert!(load(&p)
        .unwrap()
        .baseline
        .points
        .iter()
        .all(|p| p.runs.len() == 1));
    let e = save(&p, &[], "none").unwrap_err();
    assert!(matches!(e, SaveError::NothingToSave { .. }), "{e:?}");
    assert!(e.to_string().contains("no pairs or alltoall record"), "{e}");
}

#[test]
fn bad_baseline_files_and_paths_are_refused_in_one_line() {
    let d = Dir::new("bad");
    let missing = d.0.join("missing.json");
    let e = load(&missing).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("--baseline {}: cannot read it", missing.display())),
        "{e}"
    );
    let rec = d.0.join("r.jsonl");
    std::fs::write(&rec, "{\"schema\":\"efabench.record.v1\"}\n").unwrap();
    let e = load(&rec).unwrap_err().to_string();
    assert!(e.contains("not an efabench.baseline.v1 file"), "{e}");
    let broken = d.0.join("broken.json");
    std::fs::write(
        &broken,
        "{\"schema\": \"efabench.baseline.v1\", \"points\": 3}",
    )
    .unwrap();
    let e = load(&broken).unwrap_err().to_string();
    assert!(e.contains("does not parse"), "{e}");
    for e in [load(&missing).unwrap_err().to_string(), e] {
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    // A baseline with no pairs point.
    let a2a = d.0.join("a2a.json");
    let recs = [sample("alltoall", "write", 1 << 20, 10.0, 100.0)];
    Baseline::of(&Side::from_records([("a".to_string(), &recs[..])]))
        .save(&a2a)
        .unwrap();
    assert!(load(&a2a)
        .unwrap_err()
        .to_string()
        .contains("holds no pairs point"));
    // Saving over a file that is not a baseline, or into a missing directory, is refused.
    let e = check_save_path(&rec).unwrap_err().to_string();
    assert!(
        e.contains("exists and is not an efabench.baseline.v1 file"),
        "{e}"
    );
    let e = check_save_path(&d.0.join("no/b.json"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--save-baseline"), "{e}");
    assert!(check_save_path(&a2a).is_ok());
}
