//! Tests of `stages`.

use super::*;
use efabench_record::testing::{sample, tempdir};
use serde_json::json;

/// An ep record of `variant` whose stages are `k` times a fixed split.
fn ep(variant: &str, k: f64) -> Record {
    let mut r = sample("ep", variant, 14 << 20, 20.0, 1000.0 * k);
    r.peer = None;
    let st = [10.0, 50.0, 200.0, 100.0, 60.0, 400.0, 150.0, 5.0, 25.0].map(|v| v * k);
    let total: f64 = st.iter().sum();
    r.extra.insert(
        "ep_stages".into(),
        json!({"launch_us": st[0], "post_us": st[1], "copy_us": st[2], "feed_us": st[3],
               "quiet_us": st[4], "network_us": st[5], "arrival_us": st[6],
               "settle_us": st[7], "reduce_us": st[8], "total_us": total,
               "push_us": 3.0, "merged": 7}),
    );
    let (phase, init) = variant.split_once('/').unwrap();
    r.extra.insert("phase".into(), json!(phase));
    r.extra.insert("initiator".into(), json!(init));
    r.extra.insert("dtype".into(), json!("bf16"));
    r.extra.insert(
        "proxy_merge".into(),
        if init == "cpu" {
            json!(null)
        } else {
            json!(true)
        },
    );
    r
}

fn round(k: f64) -> Vec<Record> {
    [
        "dispatch/gpu-gpu",
        "combine/gpu-gpu",
        "dispatch/cpu",
        "combine/cpu",
    ]
    .iter()
    .map(|v| ep(v, k))
    .collect()
}

#[test]
fn median_run_per_configuration_grouped_by_phase() {
    let mut recs = round(1.0);
    recs.extend(round(3.0));
    recs.extend(round(2.0));
    let inputs = vec![(PathBuf::from("ep.jsonl"), recs)];
    let bars = stage_bars(&inputs, &StagesOptions::default()).unwrap();
    let labels: Vec<&str> = bars.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "dispatch/gpu-gpu (median of 3 runs)",
            "dispatch/cpu (median of 3 runs)",
            "combine/gpu-gpu (median of 3 runs)",
            "combine/cpu (median of 3 runs)",
        ]
    );
    // The run of median total, whole: its stages still add up to its total.
    for b in &bars {
        assert_eq!(b.stages.launch_us, 20.0);
        assert_eq!(b.stages.stages().iter().sum::<f64>(), b.stages.total_us);
        assert_eq!(b.runs, 3);
    }

    let each = StagesOptions {
        each_run: true,
        ..Default::default()
    };
    let bars = stage_bars(&inputs, &each).unwrap();
    assert_eq!(bars.len(), 12);
    assert_eq!(bars[0].label, "dispatch/gpu-gpu run 1");
    assert_eq!(bars[2].label, "dispatch/gpu-gpu run 3");
    assert_eq!(bars[2].stages.launch_us, 20.0);
    assert_eq!(bars[3].label, "dispatch/cpu run 1");
}

#[test]
fn labels_name_what_differs_and_the_file_only_when_needed() {
    let mut fp8 = round(1.0);
    for r in &mut fp8 {
        r.extra.insert("dtype".into(), json!("fp8"));
    }
    let inputs = vec![
        (PathBuf::from("bf16.jsonl"), round(1.0)),
        (PathBuf::from("fp8.jsonl"), fp8),
    ];
    let bars = stage_bars(&inputs, &StagesOptions::default()).unwrap();
    assert_eq!(bars[0].label, "dispatch/gpu-gpu bf16");
    assert_eq!(bars[1].label, "dispatch/cpu bf16");
    assert_eq!(bars[2].label, "dispatch/gpu-gpu fp8");

    let mut nomerge = vec![ep("dispatch/gpu-gpu", 4.0)];
    nomerge[0].extra.insert("proxy_merge".into(), json!(false));
    let inputs = vec![
        (PathBuf::from("before.jsonl"), round(1.0)),
        (PathBuf::from("after.jsonl"), round(0.5)),
        (PathBuf::from("nomerge.jsonl"), nomerge),
    ];
    let bars = stage_bars(&inputs, &StagesOptions::default()).unwrap();
    let labels: Vec<&str> = bars.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(
        &labels[..4],
        [
            "dispatch/gpu-gpu merge [before.jsonl]",
            "dispatch/cpu [before.jsonl]",
            "dispatch/gpu-gpu merge [after.jsonl]",
            "dispatch/cpu [after.jsonl]",
        ]
    );
    assert_eq!(labels[4], "dispatch/gpu-gpu no merge");
}

#[test]
fn records_without_stages_are_refused_in_one_line() {
    let mixed = vec![
        (
            PathBuf::from("/r/p2p.jsonl"),
            vec![sample("sendrecv", "stream", 8, 1.0, 2.0)],
        ),
        (PathBuf::from("/r/ep.jsonl"), round(1.0)),
    ];
    let e = stage_bars(&mixed, &StagesOptions::default()).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::BadInput);
    let m = e.to_string();
    assert!(!m.contains('\n'), "{m}");
    assert!(
        m.contains("which 1 record(s) lack: p2p.jsonl (1: sendrecv/stream)"),
        "{m}"
    );
    assert!(
        m.contains("only these records have them: ep.jsonl (4: dispatch/gpu-gpu, combine/gpu-gpu, dispatch/cpu, combine/cpu)"),
        "{m}"
    );
    // Filtering to the ep records draws them.
    let ep_only = StagesOptions {
        bench: Some("ep".into()),
        ..Default::default()
    };
    assert_eq!(stage_bars(&mixed, &ep_only).unwrap().len(), 4);

    let none = vec![(
        PathBuf::from("p2p.jsonl"),
        vec![sample("sendrecv", "stream", 8, 1.0, 2.0)],
    )];
    let m = stage_bars(&none, &StagesOptions::default())
        .unwrap_err()
        .to_string();
    assert!(m.contains("no input record has them"), "{m}");

    let mut bad = round(1.0);
    bad[1]
        .extra
        .insert("ep_stages".into(), json!({"total_us": 1.0}));
    let m = stage_bars(
        &[(PathBuf::from("b.jsonl"), bad)],
        &StagesOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        m.starts_with("record 2 of b.jsonl has a malformed ep_stages (missing field `launch_us`"),
        "{m}"
    );
    let filt = StagesOptions {
        variant: Some("nope".into()),
        ..Default::default()
    };
    let m = stage_bars(&[(PathBuf::from("e.jsonl"), round(1.0))], &filt)
        .unwrap_err()
        .to_string();
    assert!(
        m.starts_with("no record matches --variant nope: the inputs hold ep/dispatch/gpu-gpu"),
        "{m}"
    );
}

#[test]
fn draws_svg_and_png() {
    let dir = tempdir("stages");
    let mut recs = round(1.0);
    recs.extend(round(2.0));
    let inputs = vec![(dir.join("ep.jsonl"), recs)];
    let svg = dir.join("s.svg");
    let s = plot_stage_files(&inputs, &StagesOptions::default(), &svg).unwrap();
    assert_eq!((s.bars, s.records, s.format), (4, 8, ImageFormat::Svg));
    let text = std::fs::read_to_string(&svg).unwrap();
    for needle in STAGE_NAMES.iter().copied().chain([
        "µs per iteration",
        "dispatch/cpu (median of 2 runs)",
        "1000 µs",
    ]) {
        assert!(text.contains(needle), "{needle} missing from the SVG");
    }
    let png = dir.join("s.png");
    plot_stage_files(&inputs, &StagesOptions::default(), &png).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    let e = plot_stage_files(&inputs, &StagesOptions::default(), &dir.join("s.gif")).unwrap_err();
    assert!(e.to_string().contains("FILE.png or FILE.svg"), "{e}");
}
