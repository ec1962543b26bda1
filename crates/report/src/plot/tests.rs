//! Tests of series building, scales and drawing.

use super::*;
use efabench_record::testing::{sample, tempdir};

fn sweep(bench: &str, variant: &str, scale: f64) -> Vec<Record> {
    (3..=20)
        .map(|e| {
            let size = 1u64 << e;
            let bw = scale * 100.0 * (size as f64 / (size as f64 + 16384.0));
            sample(bench, variant, size, bw, 2.0 + size as f64 / 12_500.0)
        })
        .collect()
}

#[test]
fn fields_parse_and_reject() {
    assert_eq!("lat_p50".parse::<Field>(), Ok(Field::LatP50));
    assert_eq!("lat_us.p99".parse::<Field>(), Ok(Field::LatP99));
    assert_eq!("busbw_gbps".parse::<Field>(), Ok(Field::BusbwGbps));
    let e = "bandwidth".parse::<Field>().unwrap_err();
    assert!(
        e.starts_with("unknown field `bandwidth`: use one of size, bw_gbps"),
        "{e}"
    );
    for n in FIELD_NAMES {
        assert_eq!(n.parse::<Field>().unwrap().name(), *n);
    }
}

#[test]
fn image_format_from_extension() {
    assert_eq!(
        ImageFormat::from_path(Path::new("a.PNG")),
        Ok(ImageFormat::Png)
    );
    assert_eq!(
        ImageFormat::from_path(Path::new("a.svg")),
        Ok(ImageFormat::Svg)
    );
    let e = ImageFormat::from_path(Path::new("a.jpg")).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::BadInput);
    assert!(e.to_string().contains("FILE.png or FILE.svg"));
}

#[test]
fn series_group_label_and_split_runs() {
    let mut file_a = sweep("sendrecv", "stream", 1.0);
    file_a.extend(sweep("sendrecv", "pingpong", 0.1));
    // The same configuration appended a second time: a second run.
    file_a.extend(sweep("sendrecv", "stream", 0.9));
    let inputs = vec![(PathBuf::from("/tmp/a.jsonl"), file_a)];
    let (series, skipped) = build_series(&inputs, &PlotOptions::default());
    assert_eq!(skipped, 0);
    let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "sendrecv/stream run 1",
            "sendrecv/pingpong run 1",
            "sendrecv/stream run 2"
        ]
    );
    assert!(series.iter().all(|s| s.points.len() == 18));
    assert!(series[0].points.windows(2).all(|w| w[0].0 < w[1].0));

    let mut other = sweep("sendrecv", "stream", 1.0);
    other.iter_mut().for_each(|r| r.mem = "cuda".into());
    let inputs = vec![
        (PathBuf::from("a.jsonl"), sweep("sendrecv", "stream", 1.0)),
        (PathBuf::from("b.jsonl"), other),
    ];
    let opts = PlotOptions {
        variant: Some("stream".into()),
        ..Default::default()
    };
    let (series, _) = build_series(&inputs, &opts);
    let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
    // mem tells the series apart, so the file is not named.
    assert_eq!(
        labels,
        ["sendrecv/stream mem=host", "sendrecv/stream mem=cuda"]
    );

    // The same configuration in two files (before/after): the file names tell them apart.
    let inputs = vec![
        (
            PathBuf::from("before.jsonl"),
            sweep("sendrecv", "stream", 1.0),
        ),
        (
            PathBuf::from("after.jsonl"),
            sweep("sendrecv", "stream", 0.9),
        ),
    ];
    let (series, _) = build_series(&inputs, &PlotOptions::default());
    let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "sendrecv/stream [before.jsonl]",
            "sendrecv/stream [after.jsonl]"
        ]
    );
}

#[test]
fn other_x_axes_draw_one_line_per_size() {
    let mut recs = Vec::new();
    for world in [2u32, 4, 8] {
        for size in [1u64 << 20, 4 << 20] {
            let mut r = sample("alltoall", "default", size, 10.0 * world as f64, 5.0);
            r.world = world;
            r.peer = None;
            recs.push(r);
        }
    }
    let inputs = vec![(PathBuf::from("a.jsonl"), recs)];
    let opts = PlotOptions {
        x: Field::World,
        ..Default::default()
    };
    let (series, _) = build_series(&inputs, &opts);
    let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["alltoall/default 1MB", "alltoall/default 4MB"]);
    assert_eq!(series[0].points, [(2.0, 20.0), (4.0, 40.0), (8.0, 80.0)]);
}

#[test]
fn log2_ticks_are_whole_powers_with_size_labels() {
    let (lo, hi, ticks) = Scale::Log2Size.range_and_ticks(3.0, 30.0, false);
    assert!(lo < 3.0 && hi > 30.0);
    assert!(
        ticks.len() <= 15 && ticks.iter().all(|t| t.fract() == 0.0),
        "{ticks:?}"
    );
    let labels: Vec<String> = ticks.iter().map(|t| Scale::Log2Size.label(*t)).collect();
    assert!(labels.contains(&"1G".to_string()), "{labels:?}");
    assert_eq!(Scale::Log2Size.label(3.0), "8");
    assert_eq!(Scale::Log2Size.label(10.0), "1K");
    assert_eq!(Scale::Log2Size.label(20.0), "1M");
    let (_, _, ticks) = Scale::Log2Size.range_and_ticks(10.0, 10.0, false);
    assert_eq!(ticks, [9.0, 10.0, 11.0]);
    let (lo, hi, ticks) = Scale::Linear.range_and_ticks(3.0, 97.0, true);
    assert_eq!(lo, 0.0);
    assert!(
        hi > 97.0 && ticks.contains(&20.0) && ticks.contains(&100.0),
        "{ticks:?}"
    );
    // 2 us .. 500 us: ticks at 1-2-5 steps inside the padded range.
    let (lo, hi, ticks) = Scale::Log10.range_and_ticks(2f64.log10(), 500f64.log10(), true);
    assert!(lo < 2f64.log10() && hi > 500f64.log10() && hi < 3.0);
    let labels: Vec<String> = ticks.iter().map(|t| Scale::Log10.label(*t)).collect();
    assert_eq!(labels, ["2", "5", "10", "20", "50", "100", "200", "500"]);
    let (_, _, ticks) = Scale::Log10.range_and_ticks(-1.0, 5.0, true);
    let labels: Vec<String> = ticks.iter().map(|t| Scale::Log10.label(*t)).collect();
    assert_eq!(labels, ["0.1", "1", "10", "100", "1000", "10000", "100000"]);
    assert_eq!(fmt_num(0.30000000000000004), "0.3");
    assert_eq!(fmt_num(12.5), "12.5");
}

#[test]
fn writes_png_and_svg() {
    let dir = tempdir("plot");
    let mut b = sweep("write", "stream", 0.8);
    b.iter_mut().for_each(|r| r.provider = "tcp".into());
    let inputs = vec![
        (dir.join("a.jsonl"), sweep("sendrecv", "stream", 1.0)),
        (dir.join("b.jsonl"), b),
    ];
    let png = dir.join("bw.png");
    let s = plot_files(&inputs, &PlotOptions::default(), &png).unwrap();
    assert_eq!((s.series, s.points, s.format), (2, 36, ImageFormat::Png));
    assert_eq!(s.stage_records, 0);
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    assert_eq!(&bytes[1..4], b"PNG");

    let svg = dir.join("lat.svg");
    let opts = PlotOptions {
        y: Field::LatP50,
        log_y: true,
        title: Some("latency".into()),
        ..Default::default()
    };
    plot_files(&inputs, &opts, &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"));
    for needle in [
        "latency p50 (us)",
        "message size (bytes)",
        "1K",
        "sendrecv/stream",
        "write/stream",
    ] {
        assert!(text.contains(needle), "{needle} missing from the SVG");
    }
}

#[test]
fn time_sliced_records_are_marked_in_the_legend() {
    let sliced = |mut v: Vec<Record>, mps: bool| {
        for r in &mut v {
            r.extra.insert(
                efabench_record::GPU_SHARING.into(),
                serde_json::json!([{"host": "h", "gpu": 0, "ranks": [0, 1], "mps": mps}]),
            );
        }
        v
    };
    // One file: a run on one GPU without MPS, then one under MPS (shared, not time-sliced)
    // and one that predates the field. The time-sliced run is its own series.
    let mut recs = sliced(sweep("proxy", "nbi", 0.01), false);
    recs.extend(sliced(sweep("proxy", "nbi", 1.0), true));
    let inputs = vec![(PathBuf::from("one-gpu.jsonl"), recs)];
    let (series, _) = build_series(&inputs, &PlotOptions::default());
    let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        ["proxy/nbi (GPU time-sliced, no MPS)", "proxy/nbi"],
        "no 'run 2': the time-sliced records are another series"
    );
    assert_eq!(
        series.iter().map(|s| s.time_sliced).collect::<Vec<_>>(),
        [true, false]
    );
    // Before/after files that differ only in that: the file names and the mark.
    let inputs = vec![
        (
            PathBuf::from("shared.jsonl"),
            sliced(sweep("proxy", "nbi", 0.01), false),
        ),
        (PathBuf::from("two-gpus.jsonl"), sweep("proxy", "nbi", 1.0)),
    ];
    let (series, _) = build_series(&inputs, &PlotOptions::default());
    let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "proxy/nbi [shared.jsonl] (GPU time-sliced, no MPS)",
            "proxy/nbi [two-gpus.jsonl]"
        ]
    );
    // Drawn into the legend, and counted in the summary.
    let dir = tempdir("plotsliced");
    let svg = dir.join("p.svg");
    let s = plot_files(&inputs, &PlotOptions::default(), &svg).unwrap();
    assert_eq!((s.series, s.time_sliced), (2, 1));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("(GPU time-sliced, no MPS)"),
        "legend mark missing"
    );
}

#[test]
fn bad_inputs_are_one_line_bad_input_errors() {
    let dir = tempdir("plotbad");
    let inputs = vec![(dir.join("a.jsonl"), sweep("sendrecv", "stream", 1.0))];
    let opts = PlotOptions::default();
    let check = |r: Result<PlotSummary, crate::ReportError>, needle: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadInput, "{e}");
        assert!(e.to_string().contains(needle), "{e}");
        assert!(!e.to_string().contains('\n'));
    };
    check(
        plot_files(&inputs, &opts, &dir.join("x.gif")),
        "FILE.png or FILE.svg",
    );
    check(
        plot_files(&[], &opts, &dir.join("x.png")),
        "no records to plot",
    );
    let busbw = PlotOptions {
        y: Field::BusbwGbps,
        ..Default::default()
    };
    check(
        plot_files(&inputs, &busbw, &dir.join("x.png")),
        "no record has a value for busbw_gbps (only collective",
    );
    let filt = PlotOptions {
        bench: Some("read".into()),
        ..Default::default()
    };
    check(
        plot_files(&inputs, &filt, &dir.join("x.png")),
        "no record matches --bench read: the inputs hold sendrecv/stream",
    );
    check(
        plot_files(&inputs, &opts, Path::new("/nonexistent/x.png")),
        "cannot write the plot to /nonexistent/x.png: No such file or directory",
    );
    let tiny = PlotOptions {
        width: 10,
        ..Default::default()
    };
    check(
        plot_files(&inputs, &tiny, &dir.join("x.png")),
        "out of range",
    );
    check(
        plot_paths(&[dir.join("missing.jsonl")], &opts, &dir.join("x.png")),
        "missing.jsonl: No such file or directory",
    );
}
