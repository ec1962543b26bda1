//! `efabench plot` and `efabench compare` as users run them: exit codes (0 ok, 1 regression,
//! 2 bad input), one-line errors, and the files they write. Records are written by hand here so
//! the tests do not depend on a fabric being available.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn efabench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_efabench"))
        .args(args)
        .output()
        .expect("run efabench")
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("efabench-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One `efabench.v1` record as a JSON line.
fn record(variant: &str, size: u64, bw: f64, p50: f64, errors: u64) -> String {
    format!(
        concat!(
            r#"{{"schema":"efabench.v1","bench":"sendrecv","variant":"{}","size_bytes":{},"#,
            r#""iters":1000,"warmup":100,"world":2,"peer":1,"provider":"efa","fabric":"efa","#,
            r#""domains":["rdmap16s27-rdm"],"libfabric":"2.1.0","rails":1,"mem":"host","#,
            r#""lat_us":{{"min":{p50},"p50":{p50},"p99":{p50},"max":{p50},"mean":{p50}}},"#,
            r#""bw_gbps":{},"busbw_gbps":null,"msg_rate_mops":1.0,"link_gbps":100.0,"#,
            r#""util_pct":{},"errors":{},"verified":true,"counters":null,"host":"h","#,
            r#""timestamp":"2026-11-22T03:00:00.000Z","version":"0.1.0","git":null}}"#
        ),
        variant,
        size,
        bw,
        bw,
        errors,
        p50 = p50
    )
}

fn write_sweep(path: &Path, scale: f64, errors_at: Option<u64>) {
    let mut text = String::new();
    for e in 3..=22 {
        let size = 1u64 << e;
        let bw = 97.0 * size as f64 / (size as f64 + 32768.0) * scale;
        let errors = u64::from(errors_at == Some(size));
        text.push_str(&record(
            "stream",
            size,
            bw,
            15.0 + size as f64 / 12_000.0,
            errors,
        ));
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

fn stderr_line(o: &Output) -> String {
    let s = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(s.trim_end().lines().count(), 1, "expected one line: {s}");
    s
}

#[test]
fn plot_writes_png_and_svg() {
    let d = tempdir("plot");
    let (a, b) = (d.join("a.jsonl"), d.join("b.jsonl"));
    write_sweep(&a, 1.0, None);
    write_sweep(&b, 0.5, None);
    let png = d.join("bw.png");
    let o = efabench(&[
        "plot",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        png.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("2 series, 40 points"), "{out}");
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");

    let svg = d.join("lat.svg");
    let o = efabench(&[
        "plot",
        a.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
        "--y",
        "lat_p99",
        "--log-y",
        "--title",
        "p99 latency",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("p99 latency") && text.contains("latency p99 (us)"));
}

#[test]
fn plot_bad_input_exits_2_with_one_line() {
    let d = tempdir("plotbad");
    let a = d.join("a.jsonl");
    write_sweep(&a, 1.0, None);
    let a = a.to_str().unwrap();
    let png = d.join("x.png");
    let png = png.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["plot", a, "-o", png, "--y", "bandwidth"],
            "unknown field `bandwidth` for --y",
        ),
        (&["plot", a, "-o", "x.jpg"], "FILE.png or FILE.svg"),
        (
            &["plot", a, "-o", png, "--y", "busbw_gbps"],
            "no record has a value for busbw_gbps",
        ),
        (
            &["plot", "/nonexistent/r.jsonl", "-o", png],
            "No such file or directory",
        ),
    ];
    for (args, needle) in cases {
        let o = efabench(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = stderr_line(&o);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    let empty = d.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let o = efabench(&["plot", empty.to_str().unwrap(), "-o", png]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr_line(&o).contains("holds no records"));
    let bad = d.join("bad.jsonl");
    std::fs::write(
        &bad,
        format!(
            "{}\n{{\"schema\":\"efabench.v1\"}}\n",
            record("stream", 8, 1.0, 1.0, 0)
        ),
    )
    .unwrap();
    let o = efabench(&["plot", bad.to_str().unwrap(), "-o", png]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr_line(&o).contains("bad.jsonl:2: missing required fields"));
}

#[test]
fn compare_exit_codes_follow_the_tolerance() {
    let d = tempdir("compare");
    let (base, same, slower, broken) = (
        d.join("base.jsonl"),
        d.join("same.jsonl"),
        d.join("slower.jsonl"),
        d.join("broken.jsonl"),
    );
    write_sweep(&base, 1.0, None);
    write_sweep(&same, 0.97, None); // 3 % lower: within 5 %
    write_sweep(&slower, 0.90, None); // 10 % lower
    write_sweep(&broken, 1.0, Some(4096)); // one verification error
    let p = |x: &PathBuf| x.to_str().unwrap().to_string();

    let o = efabench(&["compare", &p(&base), &p(&same)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("# Result: OK"));

    let o = efabench(&["compare", &p(&base), &p(&slower)]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("REGRESSION(bw)"), "{out}");
    assert!(
        out.contains("# Result: FAILED (20 regression(s) beyond 5%)"),
        "{out}"
    );

    let o = efabench(&["compare", &p(&base), &p(&slower), "--tolerance", "15"]);
    assert_eq!(o.status.code(), Some(0));

    let o = efabench(&[
        "compare",
        &p(&base),
        &p(&broken),
        "--tolerance",
        "50",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("\"result\":\"regression\"") && out.contains("\"regressions\":1"),
        "{out}"
    );
    assert_eq!(out.trim_end().lines().count(), 1);
}

/// Issue 14: a candidate that lacks most of the baseline's points (a run that crashed after a few
/// sizes) used to exit 0 with "Result: OK". It fails now unless `--allow-missing`.
#[test]
fn compare_fails_when_the_candidate_lacks_baseline_points() {
    let d = tempdir("comparemissing");
    let (base, crashed) = (d.join("base.jsonl"), d.join("crashed.jsonl"));
    write_sweep(&base, 1.0, None);
    // The first 3 of the 20 sizes, identical to the baseline: no regression, 17 points missing.
    let text: String = std::fs::read_to_string(&base)
        .unwrap()
        .lines()
        .take(3)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&crashed, text).unwrap();
    let p = |x: &PathBuf| x.to_str().unwrap().to_string();

    let o = efabench(&["compare", &p(&base), &p(&crashed)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("3 matched, 0 regression(s), 0 improvement(s), 17 missing from the candidate"),
        "{out}"
    );
    assert!(
        out.contains("# Result: FAILED (17 baseline point(s) missing from the candidate"),
        "{out}"
    );

    let o = efabench(&["compare", &p(&base), &p(&crashed), "--format", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (j["result"].as_str(), j["missing"].as_u64()),
        (Some("missing"), Some(17))
    );

    let o = efabench(&["compare", &p(&base), &p(&crashed), "--allow-missing"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("17 missing from the candidate (allowed)"),
        "{out}"
    );
    assert!(out.contains("# Result: OK"), "{out}");

    // Points only the candidate has (a longer sweep) do not fail.
    let o = efabench(&["compare", &p(&crashed), &p(&base)]);
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn compare_bad_input_exits_2() {
    let d = tempdir("comparebad");
    let base = d.join("base.jsonl");
    write_sweep(&base, 1.0, None);
    let other = d.join("other.jsonl");
    std::fs::write(&other, record("pingpong", 3, 1.0, 1.0, 0) + "\n").unwrap();
    let b = base.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["compare", b, "/nonexistent/c.jsonl"],
            "cannot read records from /nonexistent/c.jsonl",
        ),
        (&["compare", b, other.to_str().unwrap()], "no record of"),
        (&["compare", b, b, "--format", "xml"], "use table or json"),
        (&["compare", b, b, "--tolerance=-3"], "--tolerance"),
    ];
    for (args, needle) in cases {
        let o = efabench(args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let e = stderr_line(&o);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
}
