//! Property tests of what `compare` and `plot` do with the records they are given (bounded
//! cases; `PROPTEST_CASES` overrides). Their inputs are files from other runs, machines and
//! versions, so any schema-valid record must be handled: extreme and zero numbers, sizes up to
//! 2^64 − 1, any number of peers, keys in one run and not the other. No panic, and the verdict
//! must follow its definition: a regression or (without `--allow-missing`) a missing baseline
//! point fails, and the summary says so.

use efabench_record::testing::{sample, tempdir};
use efabench_record::Record;
use efabench_report::compare::{compare, Key};
use efabench_report::plot::{build_series, plot_files, Field, PlotOptions, FIELD_NAMES};
use efabench_report::ErrorKind;
use proptest::prelude::*;
use std::collections::HashSet;
use std::path::PathBuf;

fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// Finite numbers from every corner: zero, subnormal, huge, negative.
fn num() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        Just(-1.0),
        0.0f64..1e6,
        proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO,
    ]
}

/// Records whose keys come from small sets, so that runs overlap, repeat and miss points.
fn arb_record() -> impl Strategy<Value = Record> {
    (
        prop::sample::select(vec!["sendrecv", "write", "read", "alltoall"]),
        prop::sample::select(vec!["pingpong", "stream"]),
        prop_oneof![
            Just(0u64),
            Just(u64::MAX),
            (0u32..24).prop_map(|e| 1u64 << e)
        ],
        proptest::option::of(0u32..4),
        (num(), num(), num(), proptest::option::of(num())),
        (any::<u64>(), any::<bool>(), 1u32..4),
    )
        .prop_map(
            |(bench, variant, size, peer, (bw, p50, mean, busbw), (errors, verified, rails))| {
                let mut r = sample(bench, variant, size, 1.0, 1.0);
                r.peer = peer;
                r.bw_gbps = bw;
                r.lat_us.p50 = p50;
                r.lat_us.mean = mean;
                r.busbw_gbps = busbw;
                // Mostly small counts, sometimes near u64::MAX (sums must not wrap).
                r.errors = if errors % 7 == 0 {
                    u64::MAX - errors % 4
                } else {
                    errors % 4
                };
                r.verified = verified;
                r.rails = rails;
                r
            },
        )
}

fn records(max: usize) -> impl Strategy<Value = Vec<Record>> {
    proptest::collection::vec(arb_record(), 1..max)
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn compare_verdict_follows_its_definition(
        base in records(12),
        cand in records(12),
        tol in prop_oneof![Just(0.0), 0.0f64..1000.0, Just(f64::MAX)],
        allow_missing in any::<bool>(),
    ) {
        let c = compare(&base, &cand, tol, allow_missing).unwrap();
        let cand_keys: HashSet<Key> = cand.iter().map(Key::of).collect();
        let base_keys: HashSet<Key> = base.iter().map(Key::of).collect();
        let missing = base_keys.iter().filter(|k| !cand_keys.contains(*k)).count();
        prop_assert_eq!(c.missing(), missing);
        prop_assert_eq!(c.rows.len(), base_keys.len() - missing);
        prop_assert_eq!(c.failed(), c.regressions() > 0 || (!allow_missing && missing > 0));
        let t = c.render_table("a.jsonl", "b.jsonl");
        let result: Vec<&str> = t.lines().filter(|l| l.starts_with("# Result: ")).collect();
        prop_assert_eq!(result.len(), 1);
        prop_assert_eq!(result[0] == "# Result: OK", !c.failed());
        let counted = format!("{missing} missing from the candidate");
        prop_assert!(t.contains(&counted));
        let j = c.to_json("a", "b");
        prop_assert_eq!(j["missing"].as_u64(), Some(missing as u64));
        prop_assert_eq!(j["result"] == "ok", !c.failed());
        // A run compared with itself never fails.
        prop_assert!(!compare(&base, &base, tol, false).unwrap().failed());
    }

    #[test]
    fn compare_refuses_a_tolerance_that_is_not_a_percentage(
        base in records(4),
        tol in prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            -1e9f64..-1e-9
        ],
    ) {
        let e = compare(&base, &base, tol, false).unwrap_err();
        prop_assert_eq!(e.kind(), ErrorKind::BadInput);
    }

    #[test]
    fn series_building_never_panics(
        files in proptest::collection::vec(records(10), 1..4),
        y in prop::sample::select(FIELD_NAMES.to_vec()),
        x in prop::sample::select(vec!["size", "world", "rails", "bw_gbps"]),
        log_y in any::<bool>(),
        log_x in proptest::option::of(any::<bool>()),
    ) {
        let inputs: Vec<(PathBuf, Vec<Record>)> = files
            .into_iter()
            .enumerate()
            .map(|(i, r)| (PathBuf::from(format!("f{i}.jsonl")), r))
            .collect();
        let total: usize = inputs.iter().map(|(_, r)| r.len()).sum();
        let opts = PlotOptions {
            x: x.parse::<Field>().unwrap(),
            y: y.parse::<Field>().unwrap(),
            log_x,
            log_y,
            ..PlotOptions::default()
        };
        let (series, skipped) = build_series(&inputs, &opts);
        let points: usize = series.iter().map(|s| s.points.len()).sum();
        prop_assert!(points + skipped <= total);
    }
}

proptest! {
    // Drawing costs milliseconds per case: fewer cases.
    #![proptest_config(config(12))]

    #[test]
    fn drawing_never_panics(
        recs in records(8),
        y in prop::sample::select(FIELD_NAMES.to_vec()),
        log_y in any::<bool>(),
        svg in any::<bool>(),
    ) {
        let dir = tempdir("prop-plot");
        let out = dir.join(if svg { "p.svg" } else { "p.png" });
        let opts = PlotOptions {
            y: y.parse::<Field>().unwrap(),
            log_y,
            width: 320,
            height: 200,
            ..PlotOptions::default()
        };
        match plot_files(&[(PathBuf::from("r.jsonl"), recs)], &opts, &out) {
            Ok(s) => prop_assert!(s.points > 0 && out.exists()),
            Err(e) => prop_assert!(!e.to_string().contains('\n')),
        }
    }
}
