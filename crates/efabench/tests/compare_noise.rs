//! `compare` on real runs of this machine (the small version of `scripts/compare-noise.py`):
//! two identical sweeps back to back keep every point's identity and context; a copy of a run
//! slowed by 30% is a regression wherever the run's own noise is well below 30%; and the verdict
//! of the rerun follows the decision rule (no regression without a change beyond both the
//! tolerance and the noise). Whether the rerun passes depends on this machine's load, which a
//! test cannot control: `scripts/compare-noise.py` counts that over 20 pairs.

mod common;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn efabench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_efabench"))
        .args(args)
        .output()
        .expect("run efabench")
}

fn sweep(out: &Path) {
    let o = efabench(&[
        "launch",
        "-n",
        "2",
        "--",
        "sendrecv",
        "-b",
        "8",
        "-e",
        "32",
        "-n",
        "400",
        "-w",
        "20",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
}

/// Every latency figure (and block median) × 1.3, every bandwidth / 1.3.
fn slowed(from: &Path, to: &Path) {
    let mut out = String::new();
    for line in std::fs::read_to_string(from).unwrap().lines() {
        let mut r: Value = serde_json::from_str(line).unwrap();
        for v in r["lat_us"].as_object_mut().unwrap().values_mut() {
            *v = Value::from(v.as_f64().unwrap() * 1.3);
        }
        r["bw_gbps"] = Value::from(r["bw_gbps"].as_f64().unwrap() / 1.3);
        let blocks: Vec<f64> = r["lat_p50_blocks_us"]
            .as_array()
            .expect("point-to-point records keep their block medians")
            .iter()
            .map(|b| b.as_f64().unwrap() * 1.3)
            .collect();
        r["lat_p50_blocks_us"] = Value::from(blocks);
        out.push_str(&format!("{r}\n"));
    }
    std::fs::write(to, out).unwrap();
}

fn compare_json(base: &Path, cand: &Path) -> (i32, Value) {
    let o = efabench(&[
        "compare",
        base.to_str().unwrap(),
        cand.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let code = o.status.code().expect("exited");
    assert!(code == 0 || code == 1, "{o:?}");
    (code, serde_json::from_slice(&o.stdout).unwrap())
}

#[test]
fn real_reruns_keep_identity_and_a_planted_slowdown_is_found() {
    let d = common::tmp("comparenoise");
    let (a, b, slow) = (d.join("a.jsonl"), d.join("b.jsonl"), d.join("s.jsonl"));
    sweep(&a);
    sweep(&b);
    slowed(&b, &slow);

    // The rerun: 3 sizes × 2 variants, all matched, same context.
    let (code, j) = compare_json(&a, &b);
    let rows = j["rows"].as_array().unwrap();
    assert_eq!((rows.len(), j["missing"].as_u64()), (6, Some(0)), "{j}");
    assert_eq!(j["context_changes"].as_array().unwrap().len(), 0, "{j}");
    assert_eq!(code == 1, j["regressions"].as_u64().unwrap() > 0);
    let per_test = j["per_test_confidence"].as_f64().unwrap() * 100.0;
    for r in rows {
        if r["verdict"] == "regression" {
            // Only beyond the tolerance and that sure.
            let lat = &r["lat_p50_us"];
            let bw = &r["bw_gbps"];
            let beyond = |m: &Value, worse: f64| {
                m["change_pct"].as_f64().unwrap() * worse > 5.0
                    && m["sure_worse_pct"].as_f64().unwrap() >= per_test
            };
            assert!(beyond(lat, 1.0) || beyond(bw, -1.0), "{r}");
        }
    }

    // The same run slowed by 30%: found wherever the run's own noise leaves room.
    let (code, j) = compare_json(&b, &slow);
    let rows = j["rows"].as_array().unwrap();
    let quiet: Vec<&Value> = rows
        .iter()
        .filter(|r| r["lat_p50_us"]["noise_pct"].as_f64().unwrap() < 5.0)
        .collect();
    assert!(!quiet.is_empty(), "every point noisier than 5%: {j}");
    for r in &quiet {
        assert_eq!(r["verdict"], "regression", "{r}");
        assert!(r["sure_worse_pct"].as_f64().unwrap() >= per_test, "{r}");
    }
    assert_eq!(code, 1);
}
