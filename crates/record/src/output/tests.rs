//! Tests of the table, JSON Lines and CSV output.

use super::*;
use crate::testing::sample;

fn render(format: Format, records: &[Record]) -> String {
    let mut sink = Sink::new(format, Vec::new());
    for r in records {
        sink.push(r).unwrap();
    }
    String::from_utf8(sink.finish().unwrap()).unwrap()
}

#[test]
fn format_parses_with_a_helpful_error() {
    assert_eq!("table".parse::<Format>(), Ok(Format::Table));
    assert_eq!("JSON".parse::<Format>(), Ok(Format::Json));
    assert_eq!("csv".parse::<Format>(), Ok(Format::Csv));
    assert_eq!(
        "xml".parse::<Format>().unwrap_err(),
        "unknown output format `xml`: use table, json or csv"
    );
    assert_eq!(Format::Csv.to_string(), "csv");
}

#[test]
fn table_has_header_rows_and_summary() {
    let mut a = sample("sendrecv", "pingpong", 8, 0.03, 2.5);
    a.extra
        .insert("lat_kind".into(), serde_json::json!("round-trip/2"));
    let mut b = a.clone();
    b.size_bytes = 1 << 20;
    b.bw_gbps = 97.25;
    b.lat_us.p50 = 90.0;
    b.link_gbps = None;
    b.util_pct = None;
    let out = render(Format::Table, &[a, b]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "# efabench sendrecv / pingpong");
    assert!(out.contains("# provider efa  fabric efa  domains rdmap16s27-rdm  libfabric 2.1.0"));
    assert!(out.contains("# mem host  rails 1  world 2  host"));
    assert!(col_has_peer(&out));
    assert!(out.contains("verification on"));
    assert!(out.contains("# latency: one-way = ping-pong round-trip / 2"));
    assert!(out.contains("Gbps (10^9 bit/s)"));
    assert!(!out.contains("GiB") && !out.contains("GB/s"));
    let col = lines.iter().find(|l| l.contains("size(B)")).unwrap();
    assert!(col.starts_with('#'));
    for c in [
        "iters",
        "lat_min(us)",
        "lat_p50(us)",
        "lat_p99(us)",
        "lat_max(us)",
        "lat_mean(us)",
        "bw(Gbps)",
        "msg_rate(Mops)",
        "util(%)",
        "errors",
    ] {
        assert!(col.contains(c), "{c} missing from {col}");
    }
    assert!(!col.contains("busbw"));
    let rows: Vec<Vec<&str>> = lines
        .iter()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0][0], "8");
    assert_eq!(rows[0][1], "1"); // peer
    assert_eq!(rows[0][3], "1000");
    assert_eq!(rows[0][5], "2.50");
    assert_eq!(rows[0][8], "2.75"); // lat_mean
    assert_eq!(rows[0][9], "0.0300"); // small values keep 3 significant digits
    assert_eq!(rows[0][11], "0.0"); // util 0.03 %
    assert_eq!(rows[1][0], "1048576");
    assert_eq!(rows[1][9], "97.25");
    assert_eq!(rows[1][11], "-"); // unknown link speed
    assert_eq!(rows[1][12], "0");
    // Columns line up: every row as long as the column line.
    assert_eq!(lines.iter().filter(|l| l.len() == col.len()).count(), 3);
    assert!(
        out.contains("# Peak bw with peer 1: 97.25 Gbps at 1048576 B"),
        "{out}"
    );
    assert!(!out.contains("Avg"), "no average over sizes: {out}");
    assert!(out.contains("# Lowest lat_p50 with peer 1: 2.50 us at 8 B"));
    assert!(out.contains("# Errors: 0 OK"));
    // These hand-made records' bw follows from neither mean nor p50: no claim is made.
    assert!(!out.contains("# bw = size /"), "{out}");
}

#[test]
fn numbers_keep_three_significant_digits() {
    assert_eq!(num(0.0, 2), "0.00");
    assert_eq!(num(0.00412, 2), "0.00412");
    assert_eq!(num(0.0412, 2), "0.0412");
    assert_eq!(num(0.412, 2), "0.412");
    assert_eq!(num(4.12, 2), "4.12");
    assert_eq!(num(97.254, 2), "97.25");
    assert_eq!(num(1e-9, 2), "0.000000");
    assert_eq!(num(0.0123, 3), "0.0123");
    assert_eq!(num(7.8125, 3), "7.812");
}

#[test]
fn read_latency_is_labelled_post_to_completion() {
    let r = sample("read", "pingpong", 64, 0.1, 5.0);
    let out = render(Format::Table, std::slice::from_ref(&r));
    assert!(out.contains("# latency: post-to-completion"), "{out}");
    let mut r2 = r;
    r2.bench = "custom".into();
    r2.extra
        .insert("lat_kind".into(), serde_json::json!("post-to-completion"));
    assert!(render(Format::Table, &[r2]).contains("# latency: post-to-completion"));
}

#[test]
fn new_group_starts_a_new_header_and_errors_fail() {
    let a = sample("sendrecv", "stream", 4096, 40.0, 3.0);
    let mut b = sample("write", "stream", 4096, 42.0, 3.0);
    b.errors = 3;
    let mut c = sample("write", "stream", 8192, 44.0, 3.0);
    c.verified = false;
    let out = render(Format::Table, &[a, b, c]);
    assert_eq!(out.matches("# efabench ").count(), 3, "{out}");
    assert!(out.contains("# Errors: 0 OK"));
    assert!(out.contains("# Errors: 3 FAILED"));
    assert!(out.contains("# Errors: N/A (verification off)"));
    assert!(out.contains("verification off"));
    let last_row = out.lines().rfind(|l| !l.starts_with('#')).unwrap();
    assert!(last_row.ends_with("N/A"), "{last_row}");
}

#[test]
fn a_later_table_repeats_only_the_header_lines_that_changed() {
    let a = sample("sendrecv", "pingpong", 8, 0.1, 3.0);
    let b = sample("sendrecv", "stream", 8, 0.5, 1.0);
    let out = render(Format::Table, &[a.clone(), b]);
    let provider = out.lines().find(|l| l.starts_with("# provider")).unwrap();
    assert_eq!(out.matches(provider).count(), 1, "{out}");
    assert_eq!(out.matches("# util: ").count(), 1, "{out}");
    // Each table keeps its title and its column line.
    assert_eq!(out.matches("# efabench sendrecv / ").count(), 2, "{out}");
    assert_eq!(out.matches("#    size(B)").count(), 2, "{out}");
    // A line that differs is printed again: another host.
    let mut c = a;
    c.host = "other".into();
    c.variant = "stream".into();
    let out = render(
        Format::Table,
        &[sample("sendrecv", "pingpong", 8, 0.1, 3.0), c],
    );
    assert!(out.contains("host other"), "{out}");
}

#[test]
fn the_run_header_is_printed_once_under_the_first_title_and_context() {
    let preface = vec!["# rails: 1 on lo".to_string(), "# loop: lean".to_string()];
    let mut sink = Sink::new(Format::Table, Vec::new()).with_preface(preface.clone());
    sink.push(&sample("sendrecv", "pingpong", 8, 0.1, 3.0))
        .unwrap();
    sink.push(&sample("sendrecv", "stream", 8, 0.5, 1.0))
        .unwrap();
    let out = String::from_utf8(sink.finish().unwrap()).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("# efabench sendrecv / pingpong"),
        "{out}"
    );
    let mem = lines.iter().position(|l| l.starts_with("# mem ")).unwrap();
    assert_eq!(
        lines[mem + 1..mem + 3],
        [&preface[0][..], &preface[1][..]],
        "{out}"
    );
    assert_eq!(out.matches("# rails: 1 on lo").count(), 1, "{out}");
    // A run without records still says what it set up; JSON Lines carry no header.
    let sink = Sink::new(Format::Table, Vec::new()).with_preface(preface.clone());
    assert_eq!(
        String::from_utf8(sink.finish().unwrap()).unwrap(),
        "# rails: 1 on lo\n# loop: lean\n"
    );
    let mut sink = Sink::new(Format::Json, Vec::new()).with_preface(preface);
    sink.push(&sample("sendrecv", "pingpong", 8, 0.1, 3.0))
        .unwrap();
    assert!(!String::from_utf8(sink.finish().unwrap())
        .unwrap()
        .contains("# rails"));
}

#[test]
fn pair_rows_are_summed_as_pairs_not_as_sizes_of_a_peer() {
    // Three sources to one destination at one size: not "over 3 sizes".
    let rs: Vec<Record> = (0..3u32)
        .map(|src| {
            let mut r = sample("pairs", "write-stream", 1 << 20, 1.0 + src as f64, 9.0);
            r.peer = Some(3);
            r.extra.insert("src".into(), serde_json::json!(src));
            r
        })
        .collect();
    let out = render(Format::Table, &rs);
    assert!(
        out.contains("# Median pair bw at 1048576 B: 2.00 Gbps over 3 ordered pairs"),
        "{out}"
    );
    assert!(!out.contains("over 3 sizes"), "{out}");
    assert!(out.contains("# one row per ordered pair"), "{out}");
    assert!(!out.contains("measures each peer in turn"), "{out}");
}

#[test]
fn records_without_a_peer_do_not_claim_rank_0_measures_peers() {
    let rs: Vec<Record> = (0..2)
        .map(|i| {
            let mut r = sample("queue", "pinned/nbi/1x32/c3", 8 << i, 1.0, 9.0);
            r.peer = None;
            r
        })
        .collect();
    let out = render(Format::Table, &rs);
    assert!(!out.contains("measures each peer in turn"), "{out}");
    assert!(
        out.contains("# untimed and timed iterations per size in columns"),
        "{out}"
    );
}

fn col_has_peer(out: &str) -> bool {
    out.lines().any(|l| {
        l.starts_with('#') && l.contains("size(B)") && l.contains("peer") && l.contains("warmup")
    })
}

#[test]
fn rows_of_several_peers_stay_in_one_table_and_are_summed_per_peer() {
    let a = sample("write", "stream", 8, 1.0, 2.0);
    let mut a2 = sample("write", "stream", 16, 3.0, 2.5);
    a2.errors = 2;
    let mut b = a.clone();
    b.peer = Some(2);
    b.warmup += 7;
    b.bw_gbps = 0.5;
    let out = render(Format::Table, &[a, a2, b]);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("# efabench ")).count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("# Peak bw with peer 1: 3.00 Gbps at 16 B"),
        "{out}"
    );
    assert!(
        out.contains("# Peak bw with peer 2: 0.50 Gbps at 8 B"),
        "{out}"
    );
    assert!(out.contains("# Lowest lat_p50 with peer 2: 2.00 us at 8 B"));
    assert!(out.contains("# Errors: 2 FAILED (peer 1: 2)"), "{out}");
}

#[test]
fn header_says_which_latency_the_bandwidth_follows_from() {
    // Point-to-point: bw = size / mean time per message.
    let mut r = sample("sendrecv", "stream", 1 << 20, 0.0, 100.0);
    r.lat_us.mean = 110.0;
    r.bw_gbps = (1u64 << 20) as f64 * 8.0 / (110.0 * 1e3);
    let out = render(Format::Table, std::slice::from_ref(&r));
    assert!(
        out.contains("# bw = size / lat_mean: the total time of the timed iterations"),
        "{out}"
    );
    // ipc: bw = size / median.
    r.bw_gbps = (1u64 << 20) as f64 * 8.0 / (100.0 * 1e3);
    let out = render(Format::Table, &[r]);
    assert!(
        out.contains("# bw = size / lat_p50: from the median"),
        "{out}"
    );
}

#[test]
fn alltoall_shows_busbw_and_its_definition() {
    let mut r = sample("alltoall", "default", 1 << 20, 80.0, 100.0);
    r.world = 8;
    r.peer = None;
    r.busbw_gbps = Some(70.0);
    let out = render(Format::Table, &[r]);
    assert!(out.contains("busbw(Gbps)"), "{out}");
    assert!(out.contains("# busbw: bw x (n-1)/n with n = world = 8"));
    assert!(out.contains("# bw: algbw = size (one rank's whole send buffer"));
    assert!(
        out.contains("# Peak busbw: 70.00 Gbps at 1048576 B"),
        "{out}"
    );
    let row = out.lines().find(|l| !l.starts_with('#')).unwrap();
    assert_eq!(
        row.split_whitespace().nth(1),
        Some("-"),
        "no peer in a collective: {row}"
    );
    assert!(out.contains("# latency: time per operation"), "{out}");
    assert_eq!(row.split_whitespace().nth(10), Some("70.00"));
    assert!(out.contains("# Peak bw: 80.00 Gbps at 1048576 B"), "{out}");
}

#[test]
fn json_lines_are_records() {
    let a = sample("sendrecv", "stream", 64, 1.0, 1.0);
    let out = render(Format::Json, &[a.clone(), a.clone()]);
    assert_eq!(out.lines().count(), 2);
    for l in out.lines() {
        assert_eq!(crate::validate_line(l).unwrap(), a);
    }
}

#[test]
fn csv_has_one_header_and_flattened_latency() {
    let mut a = sample("sendrecv", "stream", 64, 1.5, 2.0);
    a.domains.push("rdmap32s27-rdm".into());
    let mut b = a.clone();
    b.size_bytes = 128;
    b.util_pct = None;
    b.link_gbps = None;
    b.extra.insert("window".into(), serde_json::json!(64));
    let out = render(Format::Csv, &[a.clone(), b]);
    let mut rdr = ::csv::Reader::from_reader(out.as_bytes());
    let headers = rdr.headers().unwrap().clone();
    assert_eq!(headers.len(), csv_columns(&a).len());
    let col = |n: &str| headers.iter().position(|h| h == n).unwrap();
    let rows: Vec<::csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(&rows[0][col("lat_us.p50")], "2");
    assert_eq!(&rows[0][col("bw_gbps")], "1.5");
    assert_eq!(&rows[0][col("domains")], "rdmap16s27-rdm;rdmap32s27-rdm");
    assert_eq!(&rows[0][col("util_pct")], "1.5");
    assert_eq!(&rows[1][col("size_bytes")], "128");
    assert_eq!(&rows[1][col("util_pct")], "");
    assert_eq!(&rows[1][col("link_gbps")], "");
    assert_eq!(&rows[1][col("busbw_gbps")], "");
    assert_eq!(&rows[1][col("extra")], "{\"window\":64}");
    assert_eq!(out.matches("schema,bench").count(), 1);
}

/// Every record field has a CSV column, extra fields included, derived from the
/// records so that a new field needs no change to the CSV code.
#[test]
fn csv_columns_cover_every_field_of_the_record() {
    let mut r = sample("write", "stream", 1 << 20, 90.0, 100.0);
    r.rails = 2;
    r.counters = Some(serde_json::json!({"rdmap16s27": {"tx_bytes": 5}}));
    let per_rail = serde_json::json!([
        {"rail": 0, "domain": "a", "bytes": 10, "ops": 1},
        {"rail": 1, "domain": "b", "bytes": 10, "ops": 1}
    ]);
    for (k, v) in [
        (
            "lat_kind",
            serde_json::json!("per message (window time / window)"),
        ),
        ("window", serde_json::json!(64)),
        ("bw_GBps", serde_json::json!(11.25)),
        ("wall_s", serde_json::json!(0.123456)),
        ("strategy", serde_json::json!("split")),
        ("per_rail", per_rail.clone()),
        ("virtual_rails", serde_json::json!(true)),
        ("footprint_bytes", serde_json::json!(8u64 << 20)),
        ("mr", serde_json::json!("local")),
    ] {
        r.extra.insert(k.into(), v);
    }
    let out = render(Format::Csv, std::slice::from_ref(&r));
    let mut rdr = ::csv::Reader::from_reader(out.as_bytes());
    let headers: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
    let row = rdr.records().next().unwrap().unwrap();
    let cell = |n: &str| {
        let i = headers
            .iter()
            .position(|h| h == n)
            .unwrap_or_else(|| panic!("no column {n}: {headers:?}"));
        row[i].to_string()
    };
    // Every top-level field of the record's JSON has its column (lat_us flattened).
    let obj = serde_json::to_value(&r).unwrap();
    for k in obj.as_object().unwrap().keys() {
        if k == "lat_us" {
            for f in LATENCY_FIELDS {
                cell(&format!("lat_us.{f}"));
            }
        } else {
            cell(k);
        }
    }
    assert_eq!(headers.iter().filter(|h| *h == "lat_kind").count(), 1);
    assert_eq!(cell("strategy"), "split");
    assert_eq!(cell("rails"), "2");
    assert_eq!(cell("footprint_bytes"), (8u64 << 20).to_string());
    assert_eq!(cell("wall_s"), "0.123456");
    assert_eq!(cell("mr"), "local");
    assert_eq!(cell("virtual_rails"), "true");
    assert_eq!(cell("lat_kind"), "per message (window time / window)");
    let pr: serde_json::Value = serde_json::from_str(&cell("per_rail")).unwrap();
    assert_eq!(pr, per_rail);
    assert_eq!(cell("counters"), "{\"rdmap16s27\":{\"tx_bytes\":5}}");
    assert_eq!(cell("domains"), "rdmap16s27-rdm");
    assert_eq!(cell("lat_us.mean"), "110.00000000000001");
    assert_eq!(cell("peer"), "1");
    assert_eq!(cell("git"), "");
    assert_eq!(cell("extra"), "", "nothing left over");
    // A later record with a field the first lacked: the header stays, the field goes to
    // the last column as JSON; a field it lacks is empty.
    let mut later = r.clone();
    later.extra.remove("mr");
    later.extra.insert("ring".into(), serde_json::json!(4096));
    let out = render(Format::Csv, &[r, later]);
    let mut rdr = ::csv::Reader::from_reader(out.as_bytes());
    let h = rdr.headers().unwrap().clone();
    let rows: Vec<::csv::StringRecord> = rdr.records().map(|x| x.unwrap()).collect();
    let i = |n: &str| h.iter().position(|c| c == n).unwrap();
    assert_eq!(&rows[1][i("mr")], "");
    assert_eq!(&rows[1][i("extra")], "{\"ring\":4096}");
    assert!(rows.iter().all(|row| row.len() == h.len()));
}

#[test]
fn closed_pipe_stops_printing_without_failing() {
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut s = Sink::new(Format::Table, Closed);
    s.push(&sample("sendrecv", "stream", 64, 1.0, 1.0)).unwrap();
    assert_eq!(s.totals(), (1, 0));
    assert!(s.finish().is_ok());

    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut s = Sink::new(Format::Json, Full);
    let e = s
        .push(&sample("sendrecv", "stream", 64, 1.0, 1.0))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot print results: No space left on device"
    );
}
