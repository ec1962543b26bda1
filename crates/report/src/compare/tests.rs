//! The comparison's behaviour on small, hand-made sides: the tolerance boundary, errors,
//! GPU sharing, unmatched and repeated points, the table, the noise, identity and context.

use super::*;
use efabench_record::testing::sample;
use efabench_record::Record;

#[test]
fn boundary_is_not_a_regression_just_beyond_is() {
    let base = vec![
        sample("sendrecv", "stream", 4096, 100.0, 10.0),
        sample("sendrecv", "stream", 8192, 100.0, 10.0),
        sample("sendrecv", "pingpong", 8, 1.0, 2.0),
    ];
    let mut cand = base.clone();
    cand[0].bw_gbps = 95.0; // exactly -5 %: ok
    cand[0].lat_us.p50 = 10.5; // exactly +5 %: ok
    cand[1].bw_gbps = 94.99; // just beyond: regression
    cand[2].lat_us.p50 = 1.0; // much better
    let c = compare(&base, &cand, 5.0, false).unwrap();
    assert_eq!(c.rows.len(), 3);
    assert_eq!(c.rows[0].verdict, Verdict::Ok);
    assert_eq!(c.rows[0].bw_gbps.change_pct, Some(-5.0));
    assert_eq!(c.rows[1].verdict, Verdict::Regression);
    assert_eq!(c.rows[1].regressed, ["bw"]);
    assert_eq!(c.rows[2].verdict, Verdict::Better);
    assert_eq!(c.regressions(), 1);
    assert_eq!(c.improvements(), 1);

    // Latency just beyond the tolerance.
    let mut cand2 = base.clone();
    cand2[0].lat_us.p50 = 10.51;
    let c = compare(&base, &cand2, 5.0, false).unwrap();
    assert_eq!(c.rows[0].regressed, ["lat"]);

    // With a wider tolerance the same candidate passes.
    assert_eq!(compare(&base, &cand, 10.0, false).unwrap().regressions(), 0);
}

#[test]
fn new_errors_regress_whatever_the_tolerance() {
    let base = vec![sample("write", "stream", 64, 10.0, 3.0)];
    let mut cand = base.clone();
    cand[0].errors = 1;
    let c = compare(&base, &cand, 1000.0, false).unwrap();
    assert_eq!(c.rows[0].regressed, ["errors"]);
    assert_eq!(c.unverified_candidate, 0);
    // An unverified candidate cannot show errors: said in a note, not hidden.
    let mut unverified = base.clone();
    unverified[0].verified = false;
    let c = compare(&base, &unverified, 5.0, false).unwrap();
    assert_eq!(c.unverified_candidate, 1);
    assert!(c
        .render_table("a", "b")
        .contains("1 candidate record(s) were run without verification"));
    // Fewer errors than the baseline is not a regression.
    let c = compare(&cand, &base, 0.0, false).unwrap();
    assert_eq!(c.regressions(), 0);
}

fn shared(r: &mut Record, mps: Option<bool>) {
    let v = match mps {
        None => serde_json::Value::Null,
        Some(mps) => serde_json::json!([{"host": "h", "gpu": 0, "ranks": [0, 1], "mps": mps}]),
    };
    r.extra.insert(efabench_record::GPU_SHARING.into(), v);
}

#[test]
fn time_sliced_gpus_are_warned_about() {
    let sweep = |mps: Option<bool>| {
        let mut v = vec![
            sample("proxy", "nbi", 1024, 10.0, 3.0),
            sample("proxy", "nbi", 2048, 10.0, 3.0),
        ];
        v.iter_mut().for_each(|r| shared(r, mps));
        v
    };
    let warnings = |c: &Comparison| -> Vec<String> {
        c.render_table("a", "b")
            .lines()
            .filter(|l| l.starts_with("# warning:"))
            .map(str::to_string)
            .collect()
    };
    // Neither side shared a GPU, or the records predate the field: no warning.
    let c = compare(&sweep(None), &sweep(None), 5.0, false).unwrap();
    assert!(warnings(&c).is_empty());
    let old = vec![
        sample("proxy", "nbi", 1024, 10.0, 3.0),
        sample("proxy", "nbi", 2048, 10.0, 3.0),
    ];
    let c = compare(&old, &sweep(None), 5.0, false).unwrap();
    assert!(warnings(&c).is_empty());
    assert_eq!(c.gpu_sharing_differs, 0);

    // Both time-sliced: one line per side, naming the GPU; the states agree.
    let c = compare(&sweep(Some(false)), &sweep(Some(false)), 5.0, false).unwrap();
    let w = warnings(&c);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].starts_with("# warning: 2 baseline record(s) were measured on a GPU shared without NVIDIA MPS (ranks 0,1 on GPU 0 of h): their GPU work was time-sliced"),
        "{w:?}"
    );
    assert!(
        w[1].starts_with("# warning: 2 candidate record(s)"),
        "{w:?}"
    );
    assert_eq!(c.gpu_sharing_differs, 0);

    // Baseline under MPS, candidate time-sliced: the candidate's line and the difference.
    let c = compare(&sweep(Some(true)), &sweep(Some(false)), 5.0, false).unwrap();
    let w = warnings(&c);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].starts_with("# warning: 2 candidate record(s)"),
        "{w:?}"
    );
    assert!(
        w[1].starts_with("# warning: 2 matched pair(s) differ in GPU sharing"),
        "{w:?}"
    );
    // Not shared against shared under MPS differs too, with nothing time-sliced.
    let c = compare(&sweep(None), &sweep(Some(true)), 5.0, false).unwrap();
    assert_eq!(warnings(&c).len(), 1);
    assert_eq!(c.gpu_sharing_differs, 2);
    // In the JSON.
    let c = compare(&sweep(Some(false)), &sweep(None), 5.0, false).unwrap();
    let j = c.to_json("a", "b");
    assert_eq!(j["time_sliced_baseline"]["records"], 2);
    assert_eq!(
        j["time_sliced_baseline"]["gpus"][0],
        "ranks 0,1 on GPU 0 of h"
    );
    assert_eq!(j["time_sliced_candidate"]["records"], 0);
    assert_eq!(j["gpu_sharing_differs"], 2);
    // A warning, not a failure.
    assert!(!c.failed());
}

#[test]
fn unmatched_and_repeated_keys_are_reported() {
    let base = vec![
        sample("sendrecv", "stream", 64, 10.0, 3.0),
        sample("sendrecv", "stream", 128, 10.0, 3.0),
    ];
    let mut cand = vec![
        sample("sendrecv", "stream", 64, 1.0, 3.0),
        sample("sendrecv", "stream", 64, 10.0, 3.0), // later run: this one counts
        sample("sendrecv", "stream", 256, 10.0, 3.0),
    ];
    cand[2].mem = "cuda".into();
    let c = compare(&base, &cand, 5.0, false).unwrap();
    assert_eq!(c.rows.len(), 1);
    assert_eq!(c.regressions(), 0);
    assert_eq!(c.repeated_candidate, 1);
    assert_eq!(c.only_baseline.len(), 1);
    assert_eq!(c.only_baseline[0].size_bytes, 128);
    assert_eq!(c.only_candidate[0].mem, "cuda");

    // The 128 B point of the baseline is missing from the candidate: a failure.
    assert_eq!(c.missing(), 1);
    assert!(c.failed());
    let t = c.render_table("base.jsonl", "cand.jsonl");
    assert!(
        t.contains("# 1 key(s) only in the baseline (missing from the candidate: a failure):"),
        "{t}"
    );
    assert!(t.contains("#   sendrecv/stream 128 B peer 1 mem host provider efa rails 1 world 2"));
    assert!(t.contains("appear more than once in one candidate file"));
    assert!(
        t.contains("# 1 matched, 0 regression(s), 1 beyond the tolerance but within the noise, 0 improvement(s), 1 missing from the candidate, 1 only in candidate"),
        "{t}"
    );
    assert!(
        t.contains("# Result: FAILED (1 baseline point(s) missing from the candidate; pass --allow-missing"),
        "{t}"
    );
    let j = c.to_json("a", "b");
    assert_eq!(j["result"], "missing");
    assert_eq!(j["missing"], 1);

    // --allow-missing: listed and counted, not a failure.
    let c = compare(&base, &cand, 5.0, true).unwrap();
    assert!(!c.failed());
    let t = c.render_table("base.jsonl", "cand.jsonl");
    assert!(t.contains("1 missing from the candidate (allowed)"), "{t}");
    assert!(t.contains("allowed by --allow-missing"), "{t}");
    assert!(t.contains("# Result: OK"), "{t}");
    assert_eq!(c.to_json("a", "b")["result"], "ok");

    // A point only the candidate has never fails.
    let c = compare(&base[..1], &cand, 5.0, false).unwrap();
    assert_eq!((c.missing(), c.only_candidate.len()), (0, 1));
    assert!(!c.failed());
}

#[test]
fn table_and_json_show_the_regression() {
    let base = vec![sample("sendrecv", "stream", 1 << 20, 97.0, 90.0)];
    let mut cand = base.clone();
    cand[0].bw_gbps = 48.5;
    cand[0].lat_us.p50 = 180.0;
    let c = compare(&base, &cand, 5.0, false).unwrap();
    let t = c.render_table("a", "b");
    let row = t.lines().find(|l| !l.starts_with('#')).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "sendrecv",
            "stream",
            "1048576",
            "1",
            "host",
            "efa",
            "1",
            "1/1",
            "97.00",
            "48.50",
            "-50.0",
            "90.00",
            "180.00",
            "+100.0",
            "0.7",
            ">99.99",
            "0->0",
            "REGRESSION(bw,lat)",
            "-",
            "(bw:",
            "record's)"
        ]
    );
    assert!(t.contains("# Result: FAILED (1 regression(s) beyond 5% and the noise)"));
    let header = t.lines().find(|l| l.contains("bw_base")).unwrap();
    assert!(header.starts_with("# bench"));

    let j = c.to_json("a", "b");
    assert_eq!(j["result"], "regression");
    assert_eq!(j["regressions"], 1);
    assert_eq!(j["rows"][0]["verdict"], "regression");
    assert_eq!(j["rows"][0]["bw_gbps"]["change_pct"], -50.0);
    assert_eq!(j["rows"][0]["key"]["size_bytes"], 1 << 20);
}

#[test]
fn zero_baseline_and_bad_tolerance() {
    let mut base = vec![sample("sendrecv", "stream", 64, 0.0, 3.0)];
    base[0].bw_gbps = 0.0;
    let cand = base.clone();
    let c = compare(&base, &cand, 5.0, false).unwrap();
    assert_eq!(c.rows[0].bw_gbps.change_pct, None);
    assert_eq!(c.rows[0].verdict, Verdict::Ok);
    for t in [-1.0, f64::NAN, f64::INFINITY] {
        let e = compare(&base, &cand, t, false).unwrap_err();
        assert_eq!(e.kind(), efabench_record::ErrorKind::BadInput);
        assert!(e.to_string().contains("--tolerance"));
    }
}

/// A point-to-point record whose blocks scatter by about `spread` (relative) around `p50`.
fn with_blocks(size: u64, p50: f64, spread: f64) -> Record {
    let mut r = sample(
        "sendrecv",
        "stream",
        size,
        8.0 * size as f64 / p50 / 1e3,
        p50,
    );
    r.lat_us.mean = p50;
    let blocks: Vec<f64> = (0..10)
        .map(|i| p50 * (1.0 + spread * if i % 2 == 0 { 1.0 } else { -1.0 }))
        .collect();
    r.extra.insert(
        efabench_record::stats::BLOCK_MEDIANS_FIELD.into(),
        serde_json::json!(blocks),
    );
    r
}

/// The same records, 30% slower: latency × 1.3, bandwidth / 1.3.
fn slowed(records: &[Record]) -> Vec<Record> {
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            for v in [
                &mut r.lat_us.min,
                &mut r.lat_us.p50,
                &mut r.lat_us.p99,
                &mut r.lat_us.max,
                &mut r.lat_us.mean,
            ] {
                *v *= 1.3;
            }
            r.bw_gbps /= 1.3;
            if let Some(b) = r.extra.get_mut(efabench_record::stats::BLOCK_MEDIANS_FIELD) {
                let v: Vec<f64> = serde_json::from_value(b.clone()).unwrap();
                *b = serde_json::json!(v.iter().map(|x| x * 1.3).collect::<Vec<_>>());
            }
            r
        })
        .collect()
}

#[test]
fn noise_within_a_run_hides_a_change_beyond_the_tolerance() {
    // Blocks scattering ±30%: the run's median is known to about ±9.5%, so a 10% change is
    // beyond the 5% tolerance but not beyond the noise.
    let base = vec![with_blocks(4096, 10.0, 0.3)];
    let mut cand = base.clone();
    cand[0].lat_us.p50 = 11.0;
    let c = compare(&base, &cand, 5.0, false).unwrap();
    assert_eq!(c.rows[0].verdict, Verdict::Noise);
    assert!(!c.failed());
    let t = c.render_table("a", "b");
    assert!(
        t.contains("1 beyond the tolerance but within the noise"),
        "{t}"
    );
    // Quiet blocks (±1%): the same change is a regression, and says how sure.
    let base = vec![with_blocks(4096, 10.0, 0.01)];
    let mut cand = base.clone();
    cand[0].lat_us.p50 = 11.0;
    let c = compare(&base, &cand, 5.0, false).unwrap();
    assert_eq!(c.rows[0].regressed, ["bw", "lat"]);
    assert!(c.rows[0].sure_worse_pct > 99.9);
}

#[test]
fn a_planted_slowdown_is_found_and_a_rerun_is_not() {
    let run = |jitter: f64| -> Vec<Record> {
        [8u64, 64, 512, 4096, 65536]
            .iter()
            .map(|&s| with_blocks(s, (1.0 + s as f64 / 1e4) * jitter, 0.05))
            .collect()
    };
    let (a, b) = (run(1.0), run(1.03));
    let c = compare(&a, &b, 5.0, false).unwrap();
    assert_eq!(c.regressions(), 0, "{}", c.render_table("a", "b"));
    let c = compare(&a, &slowed(&b), 5.0, false).unwrap();
    assert_eq!(c.regressions(), 5, "{}", c.render_table("a", "b"));
}

#[test]
fn a_stall_in_the_mean_does_not_fail_the_bandwidth() {
    // Same median, one 12 ms iteration in the candidate: its mean-based bw_gbps drops 99%.
    let base = vec![with_blocks(8, 1.0, 0.02)];
    let mut cand = base.clone();
    cand[0].lat_us.max = 12_000.0;
    cand[0].lat_us.mean = 1.0 + 12_000.0 / 1000.0;
    cand[0].bw_gbps = base[0].bw_gbps / cand[0].lat_us.mean;
    let c = compare(&base, &cand, 5.0, false).unwrap();
    assert_eq!(c.rows[0].bw_figure, BwFigure::MedianWindow);
    assert_eq!(c.rows[0].bw_gbps.change_pct, Some(0.0));
    assert!(!c.failed());
}

#[test]
fn pairs_keep_their_identity() {
    // 3 ranks in a ring: 6 ordered pairs, each (src, peer) once.
    let mut recs = Vec::new();
    for src in 0..3u32 {
        for dst in (0..3u32).filter(|d| *d != src) {
            let mut r = sample("pairs", "stream", 65536, 10.0 + f64::from(src), 50.0);
            r.world = 3;
            r.peer = Some(dst);
            r.extra.insert("src".into(), serde_json::json!(src));
            recs.push(r);
        }
    }
    let c = compare(&recs, &recs, 5.0, false).unwrap();
    assert_eq!(c.rows.len(), 6);
    assert_eq!((c.repeated_baseline, c.repeated_candidate), (0, 0));
    assert!(c.rows.iter().all(|r| r.lat_p50_us.baseline_runs == 1));
    let t = c.render_table("a", "b");
    assert!(t.contains("src=2"), "{t}");
}

#[test]
fn a_context_change_is_printed_and_fails_when_strict() {
    let base = vec![sample("sendrecv", "stream", 64, 10.0, 3.0)];
    let mut cand = base.clone();
    cand[0].libfabric = Some("1.22.0".into());
    cand[0].host = "node-b".into();
    let c = compare(&base, &cand, 5.0, false).unwrap();
    assert!(!c.failed());
    let t = c.render_table("a", "b");
    assert!(
        t.contains("# context changed: libfabric: 2.1.0 -> 1.22.0"),
        "{t}"
    );
    assert!(
        t.contains("# context changed: host: node-a -> node-b"),
        "{t}"
    );
    assert!(t.contains("# Result: OK"), "{t}");
    let (b, c2) = (
        Side::from_records([("a".to_string(), &base[..])]),
        Side::from_records([("b".to_string(), &cand[..])]),
    );
    let strict = Options {
        strict_context: true,
        ..Options::with_tolerance(5.0)
    };
    let c = compare_sides(&b, &c2, &strict).unwrap();
    assert!(c.failed());
    let t = c.render_table("a", "b");
    assert!(
        t.contains("# Result: FAILED (context changed (libfabric, host) under --strict-context)"),
        "{t}"
    );
    assert_eq!(c.to_json("a", "b")["result"], "context");
    // The same context passes strict.
    let same = compare_sides(&b, &b, &strict).unwrap();
    assert!(!same.failed());
}

#[test]
fn repeated_runs_and_a_baseline_file_judge_alike() {
    let runs: Vec<Vec<Record>> = [1.0, 1.02, 0.98]
        .iter()
        .map(|j| vec![with_blocks(4096, 10.0 * j, 0.01)])
        .collect();
    let files: Vec<(String, &[Record])> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("a{i}.jsonl"), &r[..]))
        .collect();
    let base = Side::from_records(files);
    let slow = slowed(&runs[0]);
    let cand = Side::from_records([("b.jsonl".to_string(), &slow[..])]);
    let o = Options::with_tolerance(5.0);
    let direct = compare_sides(&base, &cand, &o).unwrap();
    assert_eq!(direct.rows[0].lat_p50_us.baseline_runs, 3);
    assert_eq!(direct.regressions(), 1);
    // Through a baseline file and back.
    let d = efabench_record::testing::tempdir("baselinefile");
    let path = d.join("base.json");
    Baseline::of(&base).save(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let read = Baseline::parse(&path, &text)
        .unwrap()
        .expect("a baseline file");
    assert_eq!(read.points[0].runs.len(), 3);
    assert_eq!(read.points[0].lat_p50_us.runs, 3);
    let via_file = compare_sides(&read.side("base.json"), &cand, &o).unwrap();
    assert_eq!(via_file.rows, direct.rows);
    // Its keys rewritten in sorted order (`schema` no longer first): still one.
    let sorted = serde_json::from_str::<serde_json::Value>(&text)
        .unwrap()
        .to_string();
    assert!(!sorted.starts_with("{\"schema\""), "{sorted}");
    assert!(Baseline::parse(&path, &sorted).unwrap().is_some());
    // A records file is not a baseline file.
    let line = serde_json::to_string(&runs[0][0]).unwrap();
    assert!(Baseline::parse(&path, &line).unwrap().is_none());
}

#[test]
fn single_runs_take_the_sweeps_scatter_as_noise() {
    // 12 points whose blocks are steady (±1%), rerun with each point moved by up to ±40%:
    // the moves are between runs, which one run's blocks cannot show.
    let moves = [
        0.6, 1.4, 0.8, 1.2, 0.7, 1.3, 0.9, 1.1, 0.75, 1.25, 0.85, 1.15,
    ];
    let base: Vec<Record> = (0..12)
        .map(|i| with_blocks(8 << i, 1.0 + f64::from(i), 0.01))
        .collect();
    let rerun: Vec<Record> = base
        .iter()
        .zip(moves)
        .map(|(r, m)| with_blocks(r.size_bytes, r.lat_us.p50 * m, 0.01))
        .collect();
    let c = compare(&base, &rerun, 5.0, false).unwrap();
    assert!(c.sweep_noise_pct.unwrap() > 20.0, "{:?}", c.sweep_noise_pct);
    assert_eq!(c.regressions(), 0, "{}", c.render_table("a", "b"));
    assert!(c
        .render_table("a", "b")
        .contains("# single runs: the points' changes scatter by"));
    // A steady rerun slowed by 30% everywhere: the scatter stays small, every point is found.
    let steady: Vec<Record> = base
        .iter()
        .zip(moves)
        .map(|(r, m)| with_blocks(r.size_bytes, r.lat_us.p50 * (1.0 + (m - 1.0) / 20.0), 0.01))
        .collect();
    let c = compare(&base, &slowed(&steady), 5.0, false).unwrap();
    assert!(c.sweep_noise_pct.unwrap() < 3.0);
    assert_eq!(c.regressions(), 12, "{}", c.render_table("a", "b"));
}

/// Three runs a side whose points scatter by ±20% between runs, differently at each point, so
/// that no single point can show a 15% slowdown but whole runs agree within a few percent: the
/// whole-sweep shift finds it, and the same runs without it pass.
#[test]
fn a_slowdown_no_point_can_show_is_found_in_the_whole_sweep() {
    let sizes: Vec<u64> = (0..12).map(|i| 8u64 << i).collect();
    let run = |j: usize, factor: f64| -> Vec<Record> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let wobble = [0.2, -0.2, 0.1, -0.1, 0.0, 0.15][(i + 2 * j) % 6];
                let mut r = with_blocks(s, (1.0 + s as f64 / 1e4) * factor * (1.0 + wobble), 0.01);
                r.lat_us.mean = r.lat_us.p50;
                r
            })
            .collect()
    };
    let base: Vec<Vec<Record>> = (0..3).map(|j| run(j, 1.0)).collect();
    let side = |runs: &[Vec<Record>], name: &str| {
        Side::from_records(
            runs.iter()
                .enumerate()
                .map(|(j, r)| (format!("{name}{j}"), r.as_slice())),
        )
    };
    let o = Options::with_tolerance(5.0);
    let slow: Vec<Vec<Record>> = (0..3).map(|j| run(j + 1, 1.15)).collect();
    let c = compare_sides(&side(&base, "a"), &side(&slow, "b"), &o).unwrap();
    let t = c.render_table("a", "b");
    assert_eq!(c.regressions(), 0, "{t}");
    assert!(c.shifted(), "{t}");
    assert!(c.failed(), "{t}");
    assert!(
        t.contains("whole sweep (the median run's p50 over 12 points, 3/3 runs)"),
        "{t}"
    );
    assert!(t.contains("FAILED (the whole sweep is"), "{t}");
    let j = c.to_json("a", "b");
    assert_eq!(
        (j["shifted"].as_bool(), j["result"].as_str()),
        (Some(true), Some("regression"))
    );
    // The points' tests take half the error the user allows when the shift is judged.
    assert!((c.per_test_confidence - (1.0 - 0.025 / c.tests as f64)).abs() < 1e-12);

    let same: Vec<Vec<Record>> = (0..3).map(|j| run(j + 1, 1.0)).collect();
    let c = compare_sides(&side(&base, "a"), &side(&same, "b"), &o).unwrap();
    assert!(!c.shifted() && !c.failed(), "{}", c.render_table("a", "b"));
    // One run a side: not judged, and said so.
    let c = compare(&base[0], &slow[0], 5.0, false).unwrap();
    assert!(c.shift.is_none());
    assert!(c.render_table("a", "b").contains("whole sweep: not judged"));
}
