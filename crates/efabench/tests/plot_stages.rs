//! `efabench plot --stages` as users run it, on the committed H100 `ep` records: one stacked
//! bar per configuration with the stage legend, one per run with --each-run, the hint a plain
//! `plot` of them prints, and the one-line refusal (exit 2) of records that have no `ep_stages`.

mod common;

use std::path::Path;

use common::{assert_exit, run, tmp};

/// Three rounds of GPU- and CPU-initiated dispatch, combine and both, measured on an H100.
fn h100_records() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../results/nvidia-h100-x1/ep/2026-11-27-gpu-producer/ep-1gpu-mps.jsonl")
        .to_str()
        .unwrap()
        .to_string()
}

const STAGES: [&str; 9] = [
    "launch", "post", "copy", "feed", "quiet", "network", "arrival", "settle", "reduce",
];

/// The text lines of an SVG (plotters writes each text on its own line).
fn svg_texts(svg: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(svg).unwrap();
    assert!(text.starts_with("<svg"), "not an SVG");
    text.lines().map(|l| l.trim().to_string()).collect()
}

#[test]
fn stages_of_the_committed_ep_records_draw_one_bar_per_configuration() {
    let d = tmp("svg");
    let svg = d.join("stages.svg");
    let o = run(&[
        "plot",
        "--stages",
        &h100_records(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_exit(&o, 0);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("6 bars from 18 records"), "{out}");
    let lines = svg_texts(&svg);
    for stage in STAGES {
        assert!(lines.iter().any(|l| l == stage), "legend lacks {stage}");
    }
    // Grouped by phase, GPU next to CPU initiator, top to bottom (the SVG lists the axis labels
    // from the bottom up).
    let bars: Vec<&str> = lines
        .iter()
        .filter(|l| l.ends_with("(median of 3 runs)"))
        .map(|l| l.as_str())
        .rev()
        .collect();
    assert_eq!(
        bars,
        [
            "dispatch/gpu-gpu (median of 3 runs)",
            "dispatch/cpu (median of 3 runs)",
            "combine/gpu-gpu (median of 3 runs)",
            "combine/cpu (median of 3 runs)",
            "dispatch+combine/gpu-gpu (median of 3 runs)",
            "dispatch+combine/cpu (median of 3 runs)",
        ]
    );
    // The runs' dispatch/gpu-gpu totals are 4875.092, 4932.66 and 4958.326 µs: the median one.
    assert!(lines.iter().any(|l| l == "4933 µs"), "median total missing");

    let o = run(&[
        "plot",
        "--stages",
        "--each-run",
        &h100_records(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let lines = svg_texts(&svg);
    let runs = lines
        .iter()
        .filter(|l| ["run 1", "run 2", "run 3"].iter().any(|r| l.ends_with(r)))
        .count();
    assert_eq!(runs, 18, "one bar per record");
    let totals = lines.iter().filter(|l| l.ends_with(" µs")).count();
    assert_eq!(totals, 18, "one total per bar");

    // Without --stages the records still plot against size, and the summary points to --stages.
    let o = run(&["plot", &h100_records(), "-o", svg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(
            "; 18 ep record(s) hold one message size each: --stages draws where their time goes"
        ),
        "{out}"
    );
}

#[test]
fn records_without_stages_are_refused_with_one_line_exit_2() {
    let d = tmp("refuse");
    let p2p = d.join("p2p.jsonl");
    std::fs::write(
        &p2p,
        concat!(
            r#"{"schema":"efabench.v1","bench":"sendrecv","variant":"stream","size_bytes":8,"#,
            r#""iters":10,"warmup":1,"world":2,"peer":1,"provider":"tcp","fabric":"tcp","#,
            r#""domains":["lo"],"libfabric":"2.1.0","rails":1,"mem":"host","#,
            r#""lat_us":{"min":1.0,"p50":1.0,"p99":1.0,"max":1.0,"mean":1.0},"#,
            r#""bw_gbps":1.0,"busbw_gbps":null,"msg_rate_mops":1.0,"link_gbps":null,"#,
            r#""util_pct":null,"errors":0,"verified":true,"counters":null,"host":"h","#,
            r#""timestamp":"2026-11-22T03:00:00.000Z","version":"0.1.0","git":null}"#,
            "\n"
        ),
    )
    .unwrap();
    let svg = d.join("x.svg");
    let o = run(&[
        "plot",
        "--stages",
        p2p.to_str().unwrap(),
        &h100_records(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for needle in [
        "lack: p2p.jsonl (1: sendrecv/stream)",
        "only these records have them: ep-1gpu-mps.jsonl (18: dispatch/gpu-gpu",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(!svg.exists(), "nothing drawn");

    // --stages replaces the axes; --each-run needs it.
    for args in [
        &["plot", "--stages", "--y", "lat_p50"][..],
        &["plot", "--each-run"][..],
    ] {
        let mut args = args.to_vec();
        let recs = h100_records();
        args.extend([recs.as_str(), "-o", svg.to_str().unwrap()]);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}
