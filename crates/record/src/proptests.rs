//! Property tests of the JSONL reader and writer (bounded cases; `PROPTEST_CASES` overrides).
//!
//! The reader takes files that other tools, full disks and killed processes wrote, so it is
//! driven with arbitrary bytes (never a panic, at most one warning, errors one short line) and
//! with real records cut or corrupted at arbitrary places (a torn last line loses only itself; a
//! bad line in the middle is an error naming that line). The writer/reader pair must give back
//! exactly what was written, floats to the last bit.

use crate::jsonl::{parse_records_from, JsonlWriter};
use crate::record::Record;
use crate::testing::{sample, tempdir};
use crate::{read_records, Format, Sink};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// A record with arbitrary (finite) numbers and arbitrary text where the schema allows text.
fn arb_record() -> impl Strategy<Value = Record> {
    (
        (any::<String>(), any::<String>(), any::<u64>(), any::<u64>()),
        (
            proptest::option::of(any::<u32>()),
            any::<String>(),
            proptest::collection::vec(any::<String>(), 0..3),
        ),
        (
            proptest::num::f64::NORMAL | proptest::num::f64::ZERO | proptest::num::f64::SUBNORMAL,
            proptest::num::f64::NORMAL | proptest::num::f64::ZERO,
            proptest::option::of(proptest::num::f64::NORMAL),
        ),
        (
            any::<u64>(),
            any::<bool>(),
            proptest::option::of(any::<String>()),
        ),
    )
        .prop_map(
            |(
                (bench, variant, size, iters),
                (peer, host, domains),
                (bw, p50, link),
                (errors, verified, extra),
            )| {
                let mut r = sample("sendrecv", "stream", 64, 1.0, 1.0);
                r.bench = bench;
                r.variant = variant;
                r.size_bytes = size;
                r.iters = iters;
                r.peer = peer;
                r.host = host;
                r.domains = domains;
                r.bw_gbps = bw;
                r.lat_us.p50 = p50;
                r.lat_us.mean = -p50;
                r.link_gbps = link;
                r.errors = errors;
                r.verified = verified;
                if let Some(x) = extra {
                    r.extra.insert("strategy".into(), serde_json::json!(x));
                    r.extra.insert(
                        "per_rail".into(),
                        serde_json::json!([{"rail": 0, "bytes": size}]),
                    );
                }
                r
            },
        )
}

fn line_of(r: &Record) -> String {
    serde_json::to_string(r).unwrap()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn reader_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let lines = bytes.split(|b| *b == b'\n').count();
        match parse_records_from(&bytes[..], "f.jsonl") {
            Ok(read) => {
                prop_assert!(read.records.len() <= lines);
                prop_assert!(read.warnings.len() <= 1);
            }
            Err(e) => {
                let m = e.to_string();
                prop_assert!(m.starts_with("f.jsonl:"), "{}", m);
                prop_assert!(!m.contains('\n') && m.chars().count() < 500, "{}", m);
            }
        }
    }

    #[test]
    fn reader_never_panics_on_json_like_lines(
        lines in proptest::collection::vec("[{}\\[\\]\":,a-z0-9 .-]{0,60}|\\{\"schema\":\"efabench.v1\"[ -~]{0,40}", 0..20)
    ) {
        let text = lines.join("\n");
        if let Err(e) = parse_records_from(text.as_bytes(), "j") {
            prop_assert!(!e.to_string().contains('\n'));
        }
    }

    /// A torn last line (any proper prefix of a record, with or without a newline) costs only
    /// itself; the records before it are read, with one warning naming the line.
    #[test]
    fn a_torn_last_line_costs_only_itself(
        records in proptest::collection::vec(arb_record(), 1..6),
        cut in any::<proptest::sample::Index>(),
        newline in any::<bool>(),
    ) {
        let lines: Vec<String> = records.iter().map(line_of).collect();
        let last = lines.last().unwrap();
        let at = cut.index(last.len());
        // Cut on a byte boundary, even inside a multi-byte character, as a full disk would.
        let mut bytes = Vec::new();
        for l in &lines[..lines.len() - 1] {
            bytes.extend_from_slice(l.as_bytes());
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(&last.as_bytes()[..at]);
        if newline {
            bytes.push(b'\n');
        }
        let read = parse_records_from(&bytes[..], "t.jsonl").unwrap();
        prop_assert_eq!(&read.records[..], &records[..records.len() - 1]);
        if at == 0 {
            prop_assert!(read.warnings.is_empty());
        } else {
            prop_assert_eq!(read.warnings.len(), 1);
            let expected = format!("t.jsonl:{}: ignoring the torn last line", lines.len());
            prop_assert!(read.warnings[0].starts_with(&expected), "{}", &read.warnings[0]);
        }
    }

    /// A bad line anywhere but last is an error that names it; nothing is silently dropped.
    #[test]
    fn a_bad_line_in_the_middle_is_an_error_naming_it(
        records in proptest::collection::vec(arb_record(), 2..6),
        pos in any::<proptest::sample::Index>(),
        bad in "[^\n{]{1,40}|\\{[^\n]{0,40}",
    ) {
        prop_assume!(!bad.trim().is_empty());
        let mut lines: Vec<String> = records.iter().map(line_of).collect();
        let at = pos.index(lines.len() - 1); // before the last record
        lines.insert(at, bad);
        let text = lines.join("\n") + "\n";
        let e = parse_records_from(text.as_bytes(), "m.jsonl").unwrap_err().to_string();
        let expected = format!("m.jsonl:{}: ", at + 1);
        prop_assert!(e.starts_with(&expected), "{}", e);
    }

    /// What the writer wrote, the reader gives back exactly; the sink prints it in every format.
    #[test]
    fn writer_and_reader_round_trip(records in proptest::collection::vec(arb_record(), 1..5)) {
        let dir = tempdir("prop-rt");
        let path = dir.join("r.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut w = JsonlWriter::open(&path).unwrap();
        for r in &records {
            w.push(r).unwrap();
        }
        prop_assert_eq!(read_records(&path).unwrap(), records.clone());
        for format in [Format::Table, Format::Json, Format::Csv] {
            let mut sink = Sink::new(format, Vec::new());
            for r in &records {
                sink.push(r).unwrap();
            }
            let out = String::from_utf8(sink.finish().unwrap()).unwrap();
            if format == Format::Csv {
                let mut rdr = csv::Reader::from_reader(out.as_bytes());
                let width = rdr.headers().unwrap().len();
                let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
                prop_assert_eq!(rows.len(), records.len());
                prop_assert!(rows.iter().all(|r| r.len() == width));
            }
        }
    }
}
