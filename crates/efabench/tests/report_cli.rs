//! `efabench plot` and `efabench compare` as users run them: exit codes (0 ok, 1 regression,
//! 2 bad input), one-line errors, and the files they write. Records are written by hand here so
//! the tests do not depend on a fabric being available.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_exit, run, tmp};

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
    let d = tmp("plot");
    let (a, b) = (d.join("a.jsonl"), d.join("b.jsonl"));
    write_sweep(&a, 1.0, None);
    write_sweep(&b, 0.5, None);
    let png = d.join("bw.png");
    let o = run(&[
        "plot",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        png.to_str().unwrap(),
    ]);
    assert_exit(&o, 0);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("2 series, 40 points"), "{out}");
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");

    let svg = d.join("lat.svg");
    let o = run(&[
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
    assert_exit(&o, 0);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("p99 latency") && text.contains("latency p99 (us)"));
}

#[test]
fn plot_bad_input_exits_2_with_one_line() {
    let d = tmp("plotbad");
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
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = stderr_line(&o);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    let empty = d.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let o = run(&["plot", empty.to_str().unwrap(), "-o", png]);
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
    let o = run(&["plot", bad.to_str().unwrap(), "-o", png]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr_line(&o).contains("bad.jsonl:2: missing required fields"));
}

#[test]
fn compare_exit_codes_follow_the_tolerance() {
    let d = tmp("compare");
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

    let o = run(&["compare", &p(&base), &p(&same)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("# Result: OK"));

    let o = run(&["compare", &p(&base), &p(&slower)]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("REGRESSION(bw)"), "{out}");
    assert!(
        out.contains("# Result: FAILED (20 regression(s) beyond 5% and the noise)"),
        "{out}"
    );

    let o = run(&["compare", &p(&base), &p(&slower), "--tolerance", "15"]);
    assert_eq!(o.status.code(), Some(0));

    let o = run(&[
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

/// Records of a run whose two ranks shared GPU 0 without MPS say so in `gpu_sharing`; compare
/// warns about them and plot marks their series.
#[test]
fn time_sliced_records_are_flagged_by_compare_and_plot() {
    let d = tmp("timesliced");
    let (base, cand) = (d.join("two-gpus.jsonl"), d.join("one-gpu.jsonl"));
    write_sweep(&base, 1.0, None);
    write_sweep(&cand, 1.0, None);
    let sliced: String = std::fs::read_to_string(&cand)
        .unwrap()
        .lines()
        .map(|l| {
            let l = l.strip_suffix('}').unwrap();
            format!(r#"{l},"gpu_sharing":[{{"host":"h","gpu":0,"ranks":[0,1],"mps":false}}]}}"#)
                + "\n"
        })
        .collect();
    std::fs::write(&cand, sliced).unwrap();
    let o = run(&["compare", base.to_str().unwrap(), cand.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "a warning, not a failure: {out}");
    assert!(
        out.contains("# warning: 20 candidate record(s) were measured on a GPU shared without NVIDIA MPS (ranks 0,1 on GPU 0 of h)"),
        "{out}"
    );
    let svg = d.join("p.svg");
    let o = run(&[
        "plot",
        base.to_str().unwrap(),
        cand.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr_line(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("2 series, 40 points; 1 series measured on a GPU shared without NVIDIA MPS (time-sliced), marked (GPU time-sliced, no MPS) in the legend"),
        "{out}"
    );
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("sendrecv/stream [one-gpu.jsonl] (GPU time-sliced, no MPS)"));
    let _ = std::fs::remove_dir_all(&d);
}

/// A candidate that lacks most of the baseline's points (a run that crashed after a few
/// sizes) used to exit 0 with "Result: OK". It fails now unless `--allow-missing`.
#[test]
fn compare_fails_when_the_candidate_lacks_baseline_points() {
    let d = tmp("comparemissing");
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

    let o = run(&["compare", &p(&base), &p(&crashed)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("3 matched, 0 regression(s), 0 beyond the tolerance but within the noise, 0 improvement(s), 17 missing from the candidate"),
        "{out}"
    );
    assert!(
        out.contains("# Result: FAILED (17 baseline point(s) missing from the candidate"),
        "{out}"
    );

    let o = run(&["compare", &p(&base), &p(&crashed), "--format", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (j["result"].as_str(), j["missing"].as_u64()),
        (Some("missing"), Some(17))
    );

    let o = run(&["compare", &p(&base), &p(&crashed), "--allow-missing"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("17 missing from the candidate (allowed)"),
        "{out}"
    );
    assert!(out.contains("# Result: OK"), "{out}");

    // Points only the candidate has (a longer sweep) do not fail.
    let o = run(&["compare", &p(&crashed), &p(&base)]);
    assert_eq!(o.status.code(), Some(0));
}

/// A full disk or a killed writer leaves a torn last line, which `compare` and `plot`
/// used to reject (exit 2), losing every record of the run. The records before it are read now,
/// with one warning naming the file and line; a corrupt line in the middle is still an error.
#[test]
fn a_torn_last_line_is_a_warning_not_a_lost_run() {
    let d = tmp("torn");
    let (base, torn, middle) = (
        d.join("base.jsonl"),
        d.join("torn.jsonl"),
        d.join("middle.jsonl"),
    );
    write_sweep(&base, 1.0, None);
    let full = std::fs::read_to_string(&base).unwrap();
    let last = full.lines().last().unwrap();
    // Disk full half-way through the 20th record: no newline, half a line.
    let cut = full.len() - 1 - last.len() / 2;
    std::fs::write(&torn, &full[..cut]).unwrap();
    let p = |x: &PathBuf| x.to_str().unwrap().to_string();

    let o = run(&["compare", &p(&base), &p(&torn), "--allow-missing"]);
    assert_exit(&o, 0);
    let e = stderr_line(&o);
    assert!(
        e.starts_with(&format!(
            "efabench: warning: {}:20: ignoring the torn last line",
            p(&torn)
        )) && e.contains("the 19 record(s) before it are read"),
        "{e}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("19 matched"));

    let png = d.join("t.png");
    let o = run(&["plot", &p(&torn), "-o", png.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr_line(&o).contains("torn.jsonl:20: ignoring the torn last line"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("19 points"));

    // The same cut line followed by more records is corruption: exit 2 naming the line.
    let mut text = full[..cut].to_string();
    text.push('\n');
    text.push_str(full.lines().next().unwrap());
    text.push('\n');
    std::fs::write(&middle, text).unwrap();
    let o = run(&["compare", &p(&base), &p(&middle)]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr_line(&o);
    assert!(e.contains("middle.jsonl:20: not valid JSON"), "{e}");
}

#[test]
fn compare_bad_input_exits_2() {
    let d = tmp("comparebad");
    let base = d.join("base.jsonl");
    write_sweep(&base, 1.0, None);
    let other = d.join("other.jsonl");
    std::fs::write(&other, record("pingpong", 3, 1.0, 1.0, 0) + "\n").unwrap();
    let b = base.to_str().unwrap();
    let long = "a".repeat(100_000);
    let cases: &[(&[&str], &str)] = &[
        (
            &["compare", b, "/nonexistent/c.jsonl"],
            "cannot read records from /nonexistent/c.jsonl",
        ),
        (&["compare", b, other.to_str().unwrap()], "no record of"),
        (&["compare", b, b, "--format", "xml"], "use table or json"),
        (&["compare", b, b, "--tolerance=-3"], "--tolerance"),
        // A negative number reaches the option's own check (it used to read
        // "unexpected argument '-3' found"), and long values are not echoed whole.
        (
            &["compare", b, b, "--tolerance", "-3"],
            "tolerance -3 is not a percentage",
        ),
        (&["compare", b, b, "--tolerance", "1e400"], "--tolerance"),
        (
            &["compare", b, b, "--format", &long],
            "unknown format `aaaa",
        ),
        (
            &["plot", b, "-o", "x.png", "--width", "-5"],
            "'--width <WIDTH>'",
        ),
        (
            &["plot", b, "-o", "x.png", "--y", &long],
            "unknown field `aaaa",
        ),
    ];
    for (args, needle) in cases {
        let o = run(args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let e = stderr_line(&o);
        assert!(e.contains(needle), "{args:?}: {e}");
        assert!(
            e.len() < 400,
            "{args:?}: the message echoes too much: {} bytes",
            e.len()
        );
    }
}

/// Records written into an `-o` file deleted mid-run used to vanish with exit 0. A real
/// two-rank run over tcp loopback: the file is deleted as soon as its first record lands, and the
/// run must end non-zero naming the file.
#[test]
fn a_records_file_deleted_mid_run_fails_the_run() {
    let d = tmp("deleted");
    let out = d.join("r.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_efabench"))
        .args(["launch", "-n", "2", "--", "sendrecv", "-p", "tcp"])
        .args(["-b", "8", "-e", "64K", "-n", "3000", "-o"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start efabench launch");
    let start = std::time::Instant::now();
    let mut deleted = false;
    while start.elapsed() < std::time::Duration::from_secs(60) {
        if std::fs::metadata(&out).is_ok_and(|m| m.len() > 0) {
            std::fs::remove_file(&out).unwrap();
            deleted = true;
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        deleted,
        "the run ended before its first record was written: {err}"
    );
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("r.jsonl was deleted during the run"), "{err}");
}

/// Several runs per side, a baseline file made of them, `--save`, and a context change that
/// `--strict-context` turns into a failure.
#[test]
fn compare_reads_runs_and_baseline_files_and_checks_the_context() {
    let guard = tmp("comparebaseline");
    let d = guard.to_path_buf();
    let p = |x: &PathBuf| x.to_str().unwrap().to_string();
    let runs: Vec<PathBuf> = [1.0, 1.01, 0.99]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let f = d.join(format!("a{i}.jsonl"));
            write_sweep(&f, *s, None);
            f
        })
        .collect();
    let base = d.join("base.json");
    let o = run(&[
        "baseline",
        &p(&runs[0]),
        &p(&runs[1]),
        &p(&runs[2]),
        "-o",
        &p(&base),
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    assert_eq!(j["schema"], "efabench.baseline.v1");
    assert_eq!(j["points"].as_array().unwrap().len(), 20);
    assert_eq!(j["points"][0]["runs"].as_array().unwrap().len(), 3);

    // The same candidate against the file and against the three runs: the same rows.
    let cand = d.join("cand.jsonl");
    write_sweep(&cand, 0.5, None);
    let saved = d.join("saved.json");
    let via_file = run(&["compare", "-B", &p(&base), &p(&cand), "--format", "json"]);
    let via_runs = run(&[
        "compare",
        "-B",
        &p(&runs[0]),
        "-B",
        &p(&runs[1]),
        "-B",
        &p(&runs[2]),
        &p(&cand),
        "--format",
        "json",
        "--save",
        &p(&saved),
    ]);
    assert_eq!(
        (via_file.status.code(), via_runs.status.code()),
        (Some(1), Some(1))
    );
    let rows = |o: &Output| -> serde_json::Value {
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["rows"].clone()
    };
    assert_eq!(rows(&via_file), rows(&via_runs));
    assert_eq!(rows(&via_file)[0]["lat_p50_us"]["baseline_runs"], 3);
    assert!(saved.exists());

    // Another host: printed, and a failure only under --strict-context.
    let moved = d.join("moved.jsonl");
    let text = std::fs::read_to_string(&runs[0]).unwrap();
    std::fs::write(&moved, text.replace(r#""host":"h""#, r#""host":"h2""#)).unwrap();
    let o = run(&["compare", "-B", &p(&base), &p(&moved)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("# context changed: host: h -> h2"), "{out}");
    let o = run(&["compare", "-B", &p(&base), &p(&moved), "--strict-context"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("# Result: FAILED (context changed (host) under --strict-context)"),
        "{out}"
    );
}
