//! `efabench cluster` on loopback (`launch`) and across simulated nodes (ranks started by hand):
//! every stage runs and the summary and Prometheus file say so; a summary that cannot be
//! written is refused before anything runs; a node that dies during a stage is named and the
//! stages before it are kept. The runs under real Slurm and mpirun are in `slurm.rs` and
//! `launchers.rs`. Small sizes and budgets keep each run to seconds.

mod common;

#[path = "../src/cmd/exposition_check.rs"]
mod exposition_check;

use common::netns::Cluster;
use common::{json_file, text, tmp, words, BIN};
use serde_json::Value;
use std::process::Command;

/// Options that keep a cluster run short on a 2-core host.
pub const QUICK: &[&str] = &[
    "-p",
    "tcp",
    // No EFA device and a low memlock limit on every simulated node: known, not the verdict.
    "--ignore-check",
    "efa-devices,memlock",
    "--interval",
    "0",
    "--pairs-size",
    "256K",
    "--alltoall-size",
    "256K",
    "--pairs-budget",
    "3",
    "--alltoall-budget",
    "2",
    "--timeout",
    "20",
];

/// `efabench launch -n N -- cluster ARGS`, `args` written as a command line.
fn launched(n: u32, args: &str) -> Command {
    let mut c = Command::new(BIN);
    c.args(["launch", "-n", &n.to_string(), "--", "cluster"])
        .args(words(args));
    c
}

fn stage<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .unwrap_or_else(|| panic!("no stage {name} in {s}"))
}

/// Checks that node3's verdict is `want` and every other node's PASS; node3's entry.
fn node3_alone<'a>(s: &'a Value, want: &str) -> &'a Value {
    let nodes = s["nodes"].as_array().unwrap();
    for n in nodes {
        let want = if n["host"] == "node3" { want } else { "PASS" };
        assert_eq!(n["verdict"], want, "{n}");
    }
    nodes.iter().find(|n| n["host"] == "node3").unwrap()
}

#[test]
fn a_summary_that_cannot_be_written_is_refused_before_anything_runs() {
    let d = tmp("cluster-refuse");
    for bad in [d.join("missing/summary.json"), d.to_path_buf()] {
        let o = Command::new(BIN)
            .args(["cluster", "--summary"])
            .arg(&bad)
            .args(["-o"])
            .arg(d.join("r.jsonl"))
            .env_remove("SLURM_JOB_ID")
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("--summary"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!d.join("r.jsonl").exists(), "nothing may run: {err}");
    }
    // In a job, rank 0's refusal is every rank's: nothing runs, every rank exits 2 at once.
    let o = launched(2, "-p tcp --summary")
        .arg(d.join("missing/summary.json"))
        .args(["-o"])
        .arg(d.join("r.jsonl"))
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot create files in"), "{err}");
    assert!(!err.contains("[1/4]"), "no stage may start: {err}");
    assert!(!d.join("r.jsonl").exists(), "nothing may run: {err}");
    let o = Command::new(BIN)
        .args(["cluster", "--pairs", "sideways"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("not a schedule"),
        "{}",
        text(&o.stderr)
    );
    // Sizes are refused in the cluster's own option names, before the checks stage.
    let o = Command::new(BIN)
        .args(["cluster", "--pairs-size", "0"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("--pairs-size '0'"), "{err}");
    assert!(!err.contains("--min-bytes"), "{err}");
    // What depends on the job's size is refused by every rank as soon as the size is known.
    let o = launched(3, "-p tcp --alltoall-size 32 -o")
        .arg(d.join("r.jsonl"))
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--alltoall-size 32 is too small for 3 ranks"),
        "{err}"
    );
    assert!(!err.contains("[1/4]"), "no stage may start: {err}");
    assert!(!d.join("r.jsonl").exists(), "nothing may run: {err}");
}

/// `-v` prints the stages' own tables too: the pairs table with a row per ordered pair.
#[test]
fn verbose_adds_the_stage_tables() {
    let o = launched(3, "--skip checks,alltoall -v")
        .args(QUICK)
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("# efabench pairs"), "{out}");
    let rows = out
        .lines()
        .filter(|l| !l.starts_with('#') && l.trim_start().starts_with("262144"))
        .count();
    assert_eq!(rows, 6, "a row per ordered pair of 3 ranks:\n{out}");
    assert!(out.contains("# verdict: no node to isolate"), "{out}");
}

#[test]
fn launch_runs_every_stage_and_writes_summary_records_and_prometheus() {
    let d = tmp("cluster-launch");
    let (sum, prom, rec) = (d.join("s.json"), d.join("c.prom"), d.join("r.jsonl"));
    let o = launched(3, "")
        .args(QUICK)
        .arg("--summary")
        .arg(&sum)
        .arg("--prometheus")
        .arg(&prom)
        .arg("-o")
        .arg(&rec)
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    for n in 1..=4 {
        assert!(
            err.contains(&format!("[{n}/4]")),
            "progress line {n}: {err}"
        );
    }
    assert!(out.contains("# verdict: no node to isolate"), "{out}");
    // The verdict table is the output: no row per pair, no stage table (the records have them).
    assert!(!out.contains("# efabench pairs"), "{out}");
    assert!(!out.contains("size(B)"), "{out}");
    let s = json_file(&sum);
    assert_eq!(s["schema"], "efabench-cluster/1");
    assert_eq!(s["world"], 3);
    assert_eq!(s["complete"], true);
    assert_eq!(s["exit_code"], 0);
    for st in ["checks", "consistency", "pairs", "alltoall"] {
        assert_eq!(stage(&s, st)["status"], "ok", "{st}: {s}");
    }
    // One host: one node, with its checks and facts.
    let nodes = s["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{s}");
    assert_eq!(nodes[0]["ranks"], serde_json::json!([0, 1, 2]));
    assert!(!nodes[0]["checks"].as_array().unwrap().is_empty());
    assert!(nodes[0]["facts"]["kernel"].is_string(), "{s}");
    let recs = std::fs::read_to_string(&rec).unwrap();
    let benches: Vec<Value> = recs
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["bench"].clone())
        .collect();
    assert_eq!(
        benches.iter().filter(|b| *b == "pairs").count(),
        6,
        "{recs}"
    );
    assert_eq!(benches.iter().filter(|b| *b == "alltoall").count(), 1);
    let p = std::fs::read_to_string(&prom).unwrap();
    let samples = exposition_check::check_exposition(&p).unwrap_or_else(|e| panic!("{e}\n{p}"));
    assert!(samples
        .iter()
        .any(|(n, l, v)| n == "efabench_cluster_node_verdict"
            && l.iter().any(|(k, x)| k == "verdict" && x == "PASS")
            && *v == 1.0));
}

/// A check that fails on every node (here no EFA device under an empty --root) fails the run
/// as a whole: FAIL: cluster-wide, exit 3, in the table, the summary and Prometheus, while no
/// node is to be isolated for it.
#[test]
fn a_check_failing_on_every_node_fails_the_cluster_with_exit_3() {
    let d = tmp("cluster-wide");
    let root = d.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let (sum, prom) = (d.join("s.json"), d.join("c.prom"));
    let o = launched(2, "-p tcp --interval 0 --skip pairs,alltoall --root")
        .arg(&root)
        .arg("--summary")
        .arg(&sum)
        .arg("--prometheus")
        .arg(&prom)
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(3), "{out}\n{err}");
    assert!(
        out.contains(
            "# cluster verdict: FAIL: cluster-wide (check efa-devices fails on 1 of 1 nodes"
        ),
        "{out}"
    );
    // The conclusion comes right after the header, before the findings and the nodes.
    let verdict = out.lines().position(|l| l.starts_with("# verdict: "));
    assert_eq!(verdict, Some(2), "{out}");
    assert!(
        out.contains("# verdict: no node to isolate (1 PASS, 0 WARN); exit 3"),
        "{out}"
    );
    let s = json_file(&sum);
    assert_eq!(s["verdict"], "FAIL", "{s}");
    assert_eq!(s["exit_code"], 3, "{s}");
    assert_eq!(s["cluster_verdict"], "FAIL", "{s}");
    assert!(s["cluster_failures"][0]
        .as_str()
        .unwrap()
        .contains("efa-devices"));
    assert_eq!(s["nodes"][0]["verdict"], "PASS", "{s}");
    let p = std::fs::read_to_string(&prom).unwrap();
    let samples = exposition_check::check_exposition(&p).unwrap_or_else(|e| panic!("{e}\n{p}"));
    let get = |name: &str| {
        samples
            .iter()
            .find(|(n, l, _)| {
                n == name && (l.is_empty() || l.iter().any(|(k, v)| k == "verdict" && v == "FAIL"))
            })
            .map(|x| x.2)
    };
    assert_eq!(get("efabench_cluster_exit_code"), Some(3.0), "{p}");
    assert_eq!(get("efabench_cluster_verdict"), Some(1.0), "{p}");
    // Left out by name, the same check fails nothing.
    let skip = "--skip pairs,alltoall --ignore-check efa-devices,memlock";
    let o = launched(2, &format!("-p tcp --interval 0 {skip} --root"))
        .arg(&root)
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    assert!(
        out.contains("left out of the verdicts (--ignore-check)"),
        "{out}"
    );
}

/// A rank that dies in the pairs stage (a crash inside the data path, node3) is named with
/// its host; the checks and consistency stages are kept in the summary, alltoall is skipped.
#[test]
fn a_node_that_dies_during_pairs_is_named_and_the_earlier_stages_are_kept() {
    let Some(mut c) = Cluster::new(4) else { return };
    let d = tmp("cluster-dies");
    let sum = d.join("s.json");
    let mut args: Vec<&str> = vec!["cluster"];
    args.extend_from_slice(QUICK);
    let s = sum.to_str().unwrap().to_string();
    args.extend(["--summary", &s]);
    let outs = c.job(&args, |r| {
        if r == 2 {
            vec![("EFABENCH_TEST_CRASH_RANK".into(), "2".into())]
        } else {
            Vec::new()
        }
    });
    let (out, err) = (text(&outs[0].stdout), text(&outs[0].stderr));
    assert_eq!(outs[0].status.code(), Some(1), "{out}\n{err}");
    let s = json_file(&sum);
    assert_eq!(stage(&s, "checks")["status"], "ok", "{s}");
    assert_eq!(stage(&s, "consistency")["status"], "ok", "{s}");
    assert_eq!(stage(&s, "pairs")["status"], "failed", "{s}");
    assert_eq!(stage(&s, "alltoall")["status"], "skipped", "{s}");
    let nodes = s["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4, "{s}");
    for n in nodes {
        assert!(
            !n["checks"].as_array().unwrap().is_empty(),
            "checks kept: {n}"
        );
    }
    let n3 = node3_alone(&s, "ISOLATE");
    assert_eq!(n3["reasons"][0]["stage"], "pairs", "{n3}");
    assert!(out.contains("# verdict: ISOLATE node3"), "{out}");
}

/// A node whose software differs from the majority's (here node3 sees an NCCL the others do
/// not, through its LD_LIBRARY_PATH) is WARN with both values; WARN alone exits 0.
#[test]
fn a_node_with_another_nccl_than_the_majority_is_warned_about() {
    let Some(mut c) = Cluster::new(3) else { return };
    let d = tmp("cluster-nccl");
    let lib = d.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("libnccl.so.2.99.1"), b"").unwrap();
    let sum = d.join("s.json");
    let s = sum.to_str().unwrap().to_string();
    let mut args: Vec<&str> = vec!["cluster"];
    args.extend_from_slice(QUICK);
    args.extend(["--skip", "pairs,alltoall", "--summary", &s]);
    let ld = lib.to_str().unwrap().to_string();
    let outs = c.job(&args, |r| {
        if r == 2 {
            vec![("LD_LIBRARY_PATH".into(), ld.clone())]
        } else {
            vec![("LD_LIBRARY_PATH".into(), String::new())]
        }
    });
    let (out, err) = (text(&outs[0].stdout), text(&outs[0].stderr));
    assert_eq!(outs[0].status.code(), Some(0), "{out}\n{err}");
    let s = json_file(&sum);
    assert_eq!(stage(&s, "pairs")["status"], "skipped", "{s}");
    let n3 = node3_alone(&s, "WARN");
    assert_eq!(n3["reasons"][0]["stage"], "consistency", "{n3}");
    assert_eq!(
        n3["reasons"][0]["evidence"], "nccl is 2.99.1 here, none on 2 of 3 nodes",
        "{n3}"
    );
    assert_eq!(n3["facts"]["nccl"], "2.99.1", "{n3}");
}

/// A node whose GPU and EFA links trained below their maximum (the degraded p5en tree as its
/// root, the others the same node healthy) is ISOLATEd by the node checks, with the links named.
#[test]
fn a_node_with_a_degraded_pcie_link_is_isolated() {
    let Some(mut c) = Cluster::new(3) else { return };
    let d = tmp("cluster-pcie");
    let sum = d.join("s.json");
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/");
    let port = common::free_port();
    let kids: Vec<_> = (0..3)
        .map(|r| {
            let tree = if r == 2 {
                "p5en.48xlarge-pcie-degraded"
            } else {
                "p5en.48xlarge-gin-ready"
            };
            let mut a: Vec<String> = vec!["cluster".into()];
            a.extend(QUICK.iter().map(|s| s.to_string()));
            a.extend(
                [
                    "--skip",
                    "pairs,alltoall",
                    "--summary",
                    sum.to_str().unwrap(),
                    "--root",
                    &format!("{fixtures}{tree}"),
                    "--fi-info",
                    &format!("{fixtures}{tree}/fi_info.txt"),
                    "--rank",
                    &r.to_string(),
                    "--world",
                    "3",
                    "--rdzv",
                    &c.rdzv(0, port),
                ]
                .map(String::from),
            );
            let env = [("EFABENCH_JOB_TOKEN".to_string(), format!("sim-{port}"))];
            c.spawn(r, &a, &env)
        })
        .collect();
    let outs: Vec<_> = kids.into_iter().map(|k| c.reap(k)).collect();
    let (out, err) = (text(&outs[0].stdout), text(&outs[0].stderr));
    assert_eq!(outs[0].status.code(), Some(1), "{out}\n{err}");
    let s = json_file(&sum);
    let n3 = node3_alone(&s, "ISOLATE");
    let reasons = n3["reasons"].as_array().unwrap();
    let evidence = |id: &str| {
        reasons
            .iter()
            .find(|r| r["reason"].as_str().unwrap_or("").contains(id))
            .unwrap_or_else(|| panic!("no {id} reason: {n3}"))["evidence"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        evidence("pcie-gpu-links")
            .starts_with("GPU 3 0000:86:00.0: PCIe 16.0 GT/s x8, capable of 32.0 GT/s x16"),
        "{n3}"
    );
    assert!(
        evidence("pcie-efa-links").starts_with("EFA rdmap165s0 0000:a5:00.0: PCIe 32.0 GT/s x8"),
        "{n3}"
    );
    assert!(out.contains("# verdict: ISOLATE node3"), "{out}");
}

/// Simulated nodes that report an instance type efabench knows (the p5en fixture tree as every
/// node's root) get each pair figure against that type's link: 200 Gbps for the one NIC each
/// rank drives over tcp, in the summary, the table and Prometheus; the cluster fails as a
/// whole exactly when the median node is below half of it. What tcp between namespaces
/// reaches is not asserted: the rule is checked against the figures the run reports. No EFA
/// here, so no run measures a real link against its profile.
#[test]
fn nodes_of_a_known_type_are_judged_against_its_link() {
    let Some(mut c) = Cluster::new(3) else { return };
    let d = tmp("cluster-expected");
    let (sum, prom) = (d.join("s.json"), d.join("c.prom"));
    let tree = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/p5en.48xlarge-gin-ready"
    );
    let fi_info = format!("{tree}/fi_info.txt");
    let (s, p) = (sum.to_str().unwrap(), prom.to_str().unwrap());
    let mut args: Vec<&str> = vec!["cluster"];
    args.extend_from_slice(QUICK);
    args.extend(["--root", tree, "--fi-info", &fi_info]);
    args.extend(["--summary", s, "--prometheus", p]);
    let outs = c.job(&args, |_| Vec::new());
    let (out, err) = (text(&outs[0].stdout), text(&outs[0].stderr));
    let s = json_file(&sum);
    assert_eq!(s["link_profile"]["instance_type"], "p5en.48xlarge", "{s}");
    assert_eq!(s["link_profile"]["evidence"], "source", "{s}");
    assert!(
        out.contains("# expected: p5en.48xlarge, 16 x 200 Gbps per node (read in "),
        "{out}"
    );
    assert!(out.contains("of link"), "{out}");
    let mut lowest = Vec::new();
    for n in s["nodes"].as_array().unwrap() {
        for dir in ["send", "recv"] {
            let e = &n["pairs"]["expected"][dir];
            assert_eq!(e["expected_gbps"], 200.0, "{n}");
            let median = n["pairs"][dir]["median"].as_f64().unwrap();
            let pct = e["pct_of_expected"].as_f64().unwrap();
            assert!((pct - median / 2.0).abs() < 1e-9, "{n}");
            // alltoall: each rank's 200 Gbps shared by its two remote peers.
            assert_eq!(
                n["alltoall"]["expected"][dir]["expected_gbps"], 100.0,
                "{n}"
            );
        }
        let pct = |dir: &str| {
            n["pairs"]["expected"][dir]["pct_of_expected"]
                .as_f64()
                .unwrap()
        };
        lowest.push(pct("send").min(pct("recv")));
    }
    lowest.sort_by(f64::total_cmp);
    // The median of three is the middle one.
    let fails = lowest[1] < 50.0;
    let wide = s["cluster_failures"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f.as_str().unwrap().contains("of the link of p5en.48xlarge"));
    assert_eq!(wide, fails, "{lowest:?} {s}");
    if fails {
        assert_eq!(outs[0].status.code(), Some(3), "{out}\n{err}");
        assert_eq!(s["cluster_verdict"], "FAIL", "{s}");
        assert!(out.contains("# cluster-wide: pairs at a median "), "{out}");
    }
    let p = std::fs::read_to_string(&prom).unwrap();
    let samples = exposition_check::check_exposition(&p).unwrap_or_else(|e| panic!("{e}\n{p}"));
    let pcts = samples
        .iter()
        .filter(|(n, _, _)| n == "efabench_cluster_pairs_pct_of_expected")
        .count();
    assert_eq!(pcts, 6, "{p}");
}

/// Multiplies every bandwidth of a baseline file by `factor` (its runs and their summary).
fn scale_baseline(path: &std::path::Path, factor: f64) {
    use efabench_report::compare::Baseline;
    let text = std::fs::read_to_string(path).unwrap();
    let mut b = Baseline::parse(path, &text).unwrap().unwrap();
    for p in &mut b.points {
        p.bw_gbps.value *= factor;
        for r in &mut p.runs {
            r.bw_gbps.value *= factor;
        }
    }
    b.save(path).unwrap();
}

/// `--save-baseline` writes this run as a baseline file; against a copy whose bandwidths are
/// 10,000 times this machine's the next run is a cluster slow alike: FAIL: cluster-wide, exit 3,
/// which the per-node decision cannot see (every rank is equally slow). This checks the path
/// from the file to the exit status; how small a drop is detected is the unit tests' job
/// (`baseline_tests.rs`). The drop is that large because the two runs share two cores with the
/// other tests of this file: in one CI run the six pairs' ratios scattered by a factor of 7 per
/// standard deviation (pairs at 0.9% [0.0-106%] of a baseline 100 times too high), and with six
/// pairs the interval is `± 4.8 × 1.25 s / √6` in log units. At 10,000 times the upper end stays
/// below 85% until that scatter reaches a factor of about 40. A bad baseline file stops the job
/// before any stage.
#[test]
fn a_cluster_below_its_baseline_fails_as_a_whole_and_a_bad_baseline_is_refused() {
    let d = tmp("cluster-baseline");
    let (base, sum) = (d.join("b.json"), d.join("s.json"));
    let quick = || launched(3, "--skip checks");
    let o = quick()
        .args(QUICK)
        .arg("--save-baseline")
        .arg(&base)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "--save-baseline {}: wrote this run (7 point(s), 1 run)",
            base.display()
        )),
        "{err}"
    );
    scale_baseline(&base, 1e4);
    let o = quick()
        .args(QUICK)
        .arg("--baseline")
        .arg(&base)
        .arg("--summary")
        .arg(&sum)
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(3), "{out}\n{err}");
    let wide: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("# cluster-wide: pairs at "))
        .collect();
    assert_eq!(wide.len(), 1, "{out}");
    assert!(wide[0].contains("confidently below 85%"), "{out}");
    assert!(
        out.contains("6 of 6 pair point(s) matched by rank (src, peer), 1 alltoall"),
        "{out}"
    );
    let s = json_file(&sum);
    assert_eq!(s["cluster_verdict"], "FAIL");
    assert_eq!(s["baseline"]["finding"], "FAIL");
    let high = s["baseline"]["cluster"]["high"].as_f64().unwrap();
    assert!(high < 0.85, "{s}");
    // A file that is not a baseline: exit 2, one line naming it, before any stage.
    let bad = d.join("bad.json");
    std::fs::write(
        &bad,
        "{\"schema\": \"efabench.baseline.v1\", \"points\": 1}\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["cluster", "-p", "tcp", "--baseline"])
        .arg(&bad)
        .env_remove("SLURM_JOB_ID")
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("--baseline {}", bad.display())),
        "{err}"
    );
    assert!(err.contains("does not parse"), "{err}");
    let o = quick()
        .args(["-p", "tcp", "--baseline"])
        .arg(d.join("missing.json"))
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("missing.json: cannot read it"), "{err}");
    assert!(
        !err.contains("[1/4]") && !err.contains("[3/4]"),
        "no stage may start: {err}"
    );
}
