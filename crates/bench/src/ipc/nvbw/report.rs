//! The record of one nvbandwidth cell (bandwidth from the median sample, both parts of a
//! bidirectional cell, the latency per dependent load) and the matrices printed as nvbandwidth
//! prints them.

use efabench_record::Record;
use serde::{Deserialize, Serialize};

use super::{Engine, NvbwSpec, Test};
use crate::harness::{Measured, Point};
use crate::queue::record::read;
use crate::stats::Samples;

/// The record fields of one cell (rank 0; `all` indexed by rank). `link_gbps` is the NVLink
/// speed of the pair per direction, when known.
pub fn point(s: &NvbwSpec, all: &[Measured], samples: u64, link_gbps: Option<f64>) -> Point {
    let mut d = NvbwDetail {
        suite: "nvbandwidth".into(),
        row: s.row,
        col: s.col,
        samples,
        meaning: s.test.meaning().into(),
        src: s.col,
        dst: s.row,
        lat_ns: None,
        lat_kind: None,
        bw_gbytes: None,
        engine: None,
        bw1_gbytes: None,
        bw2_gbytes: None,
        parts: None,
        timing: String::new(),
        check: String::new(),
    };
    let empty = Measured::default();
    let of = |rank: usize| all.get(rank).unwrap_or(&empty);
    if s.test == Test::Latency {
        let mut smp = Samples::from_vec(of(s.row).samples_ns.clone());
        let lat = smp.summary_us(s.iters.max(1) as f64);
        d.lat_ns = Some(lat.p50 * 1e3);
        d.lat_kind = Some("per dependent load".into());
        d.timing = "CUDA events around each launch of one chasing thread; latency = time / loads, median launch".into();
        d.check = "every launch must stop on the node the list predicts".into();
        return Point {
            variant: s.test.name().into(),
            size_bytes: s.size,
            iters: s.iters,
            warmup: s.warmup,
            peer: Some(s.col as u32),
            lat_us: lat,
            bw_gbps: 0.0,
            msg_rate_mops: if lat.p50 > 0.0 { 1.0 / lat.p50 } else { 0.0 },
            ..Point::default()
        }
        .detail(d);
    }
    let ts = s.test.transfers(s.row, s.col);
    let mut parts = Vec::new();
    let mut first = None;
    for t in &ts {
        let mut smp = Samples::from_vec(of(t.exec).samples_ns.clone());
        let lat = smp.summary_us(s.iters.max(1) as f64);
        // bytes / ns = GB/s
        let gbs = if lat.p50 > 0.0 {
            s.size as f64 / (lat.p50 * 1e3)
        } else {
            0.0
        };
        parts.push(gbs);
        first.get_or_insert(lat);
    }
    let lat = first.unwrap_or_default();
    let total: f64 = parts.iter().sum();
    let (src, dst) = match ts.as_slice() {
        [t] => (t.src, t.dst),
        _ => (s.row, s.col),
    };
    d.src = src;
    d.dst = dst;
    d.bw_gbytes = Some(total);
    d.engine = Some(
        match s.test.engine() {
            Engine::Ce => "copy-engine",
            Engine::Sm => "sm",
        }
        .into(),
    );
    if s.test.is_bidirectional() {
        d.bw1_gbytes = Some(parts[0]);
        d.bw2_gbytes = Some(parts.get(1).copied().unwrap_or(0.0));
        d.parts = Some(s.test.parts().map(String::from).to_vec());
    }
    d.timing = "CUDA events around each sample of back-to-back copies on the issuing GPU's stream; bw = size x iters / median sample; bidirectional: sum of the two copies' bandwidths".into();
    d.check = "per sample: source filled with a new seed, destination poisoned, every word checked after the sample".into();
    let link = if s.row == s.col {
        None
    } else if s.test.is_bidirectional() {
        link_gbps.map(|l| 2.0 * l)
    } else {
        link_gbps
    };
    Point {
        variant: s.test.name().into(),
        size_bytes: s.size,
        iters: s.iters,
        warmup: s.warmup,
        peer: Some(s.col as u32),
        lat_us: lat,
        bw_gbps: total * 8.0,
        msg_rate_mops: if lat.p50 > 0.0 { 1.0 / lat.p50 } else { 0.0 },
        link_gbps: link,
        ..Point::default()
    }
    .detail(d)
}

/// The record fields of one nvbandwidth cell, beyond the common ones. Latency cells carry
/// `lat_ns`/`lat_kind`; bandwidth cells `bw_GBps`/`engine`, and bidirectional ones each copy's
/// bandwidth (`bw1_GBps`, `bw2_GBps`) and names (`parts`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvbwDetail {
    /// Always `nvbandwidth`: marks these records apart from the sweep's.
    pub suite: String,
    /// nvbandwidth's matrix cell (row, column GPU ranks).
    pub row: usize,
    pub col: usize,
    pub samples: u64,
    pub meaning: String,
    /// Where the data comes from and goes to.
    pub src: usize,
    pub dst: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_kind: Option<String>,
    #[serde(rename = "bw_GBps", default, skip_serializing_if = "Option::is_none")]
    pub bw_gbytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(rename = "bw1_GBps", default, skip_serializing_if = "Option::is_none")]
    pub bw1_gbytes: Option<f64>,
    #[serde(rename = "bw2_GBps", default, skip_serializing_if = "Option::is_none")]
    pub bw2_gbytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<String>>,
    pub timing: String,
    pub check: String,
}

/// The nvbandwidth fields of a record, or `None` for another record.
pub fn detail(r: &Record) -> Option<NvbwDetail> {
    read::<NvbwDetail>(r).filter(|d| d.suite == "nvbandwidth")
}

/// nvbandwidth-style matrices of the `--nvbw` records: one per test (three for a bidirectional
/// test: part 1, part 2, total) at the test's largest size; `N/A` where a cell was not measured.
pub fn matrix_lines(records: &[Record]) -> Vec<String> {
    let nv: Vec<(&Record, NvbwDetail)> = records
        .iter()
        .filter_map(|r| Some((r, detail(r)?)))
        .collect();
    let world = records.first().map_or(0, |r| r.world as usize);
    let mut lines = Vec::new();
    for test in Test::ALL {
        let cells: Vec<&(&Record, NvbwDetail)> = nv
            .iter()
            .filter(|(r, _)| r.variant == test.name())
            .collect();
        let Some(size) = cells.iter().map(|(r, _)| r.size_bytes).max() else {
            continue;
        };
        let at = |row: usize, col: usize| {
            cells
                .iter()
                .find(|(r, d)| r.size_bytes == size && d.row == row && d.col == col)
        };
        // (suffix, record field) of each matrix of the test.
        type Field = fn(&NvbwDetail) -> Option<f64>;
        let tables: Vec<(String, Field)> = if test == Test::Latency {
            vec![(String::new(), |d| d.lat_ns)]
        } else if test.is_bidirectional() {
            let [p1, p2] = test.parts();
            vec![
                (format!(" {p1}"), |d| d.bw1_gbytes),
                (format!(" {p2}"), |d| d.bw2_gbytes),
                (" total".into(), |d| d.bw_gbytes),
            ]
        } else {
            vec![(String::new(), |d| d.bw_gbytes)]
        };
        for (part, key) in &tables {
            lines.push(format!(
                "# {}{part}: {} at {size} B; {}",
                test.name(),
                test.title(),
                test.meaning()
            ));
            let head: String = (0..world).map(|c| format!("{c:>10}")).collect();
            lines.push(format!("# {:>4}{head}", ""));
            let rows: Vec<usize> = if test == Test::LocalCopy {
                vec![0]
            } else {
                (0..world).collect()
            };
            for row in rows {
                let cols: String = (0..world)
                    .map(|col| {
                        let cell = if test == Test::LocalCopy {
                            at(col, col)
                        } else {
                            at(row, col)
                        };
                        cell.and_then(|(_, d)| key(d))
                            .map_or(format!("{:>10}", "N/A"), |v| format!("{v:>10.2}"))
                    })
                    .collect();
                lines.push(format!("# {row:>4}{cols}"));
            }
            // nvbandwidth's closing line: the sum of the matrix's cells.
            let sum: f64 = cells
                .iter()
                .filter(|(r, _)| r.size_bytes == size)
                .filter_map(|(_, d)| key(d))
                .sum();
            lines.push(format!(
                "# SUM {}{} {sum:.2}",
                test.name(),
                part.replace(' ', "_")
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::super::LATENCY_BYTES;
    use super::*;
    use serde_json::json;

    fn measured(ns: &[u64]) -> Measured {
        Measured {
            samples_ns: ns.to_vec(),
            ..Measured::default()
        }
    }

    #[test]
    fn bidirectional_bandwidth_is_the_sum_of_each_sides_median() {
        let s = NvbwSpec {
            test: Test::BidirReadCe,
            size: 1 << 30,
            row: 0,
            col: 1,
            iters: 16,
            warmup: 4,
            index: 1,
        };
        // Rank 0: 16 copies of 1 GiB in 64 ms (median) = 268.4 GB/s; rank 1 in 80 ms.
        let all = [
            measured(&[70_000_000, 64_000_000, 60_000_000]),
            measured(&[80_000_000, 80_000_000, 90_000_000]),
        ];
        let p = point(&s, &all, 3, Some(3600.0));
        let one = (1u64 << 30) as f64 * 16.0 / 64e6;
        let two = (1u64 << 30) as f64 * 16.0 / 80e6;
        let b1 = p.fields()["bw1_GBps"].as_f64().unwrap();
        let b2 = p.fields()["bw2_GBps"].as_f64().unwrap();
        assert!((b1 - one).abs() < 1e-6 * one, "{b1} {one}");
        assert!((b2 - two).abs() < 1e-6 * two, "{b2} {two}");
        assert!((p.bw_gbps - (one + two) * 8.0).abs() < 1e-6 * p.bw_gbps);
        assert_eq!(p.fields()["parts"], json!(["read1", "read2"]));
        assert_eq!(p.link_gbps, Some(7200.0), "both directions of the link");
        assert_eq!(p.variant, "device_to_device_bidirectional_memcpy_read_ce");
        // Per-copy latency of the first side: 64 ms / 16.
        assert!((p.lat_us.p50 - 4000.0).abs() < 1e-9, "{}", p.lat_us.p50);

        let u = NvbwSpec {
            test: Test::ReadSm,
            ..s
        };
        let p = point(&u, &all, 3, Some(3600.0));
        assert!((p.bw_gbps - one * 8.0).abs() < 1e-6 * p.bw_gbps);
        assert_eq!(
            p.fields()["src"],
            json!(1),
            "read: data from the column GPU"
        );
        assert_eq!(p.fields()["dst"], json!(0));
        assert_eq!(p.link_gbps, Some(3600.0));
        assert!(p.fields().get("bw1_GBps").is_none());
    }

    #[test]
    fn records_keep_their_golden_keys_and_read_back_typed() {
        let run = crate::ipc::tests::test_run(Some(3600.0));
        let mk = |test: Test| {
            let s = NvbwSpec {
                test,
                size: 1 << 20,
                row: 0,
                col: 1,
                iters: 16,
                warmup: 4,
                index: 1,
            };
            let all = [measured(&[1_000_000]), measured(&[2_000_000])];
            crate::ipc::tests::harness_record(&run, point(&s, &all, 1, Some(3600.0)))
        };
        let recs: Vec<Record> = [Test::Latency, Test::WriteCe, Test::BidirReadSm]
            .into_iter()
            .map(mk)
            .collect();
        crate::ipc::tests::assert_golden(
            &recs,
            include_str!("../../../../efabench/tests/golden/ipc-nvbw.keys"),
        );
        let lat = detail(&recs[0]).expect("typed");
        assert!(lat.lat_ns.is_some() && lat.bw_gbytes.is_none());
        let bi = detail(&recs[2]).expect("typed");
        assert_eq!(
            bi.parts,
            Some(vec!["read1".to_string(), "read2".to_string()])
        );
        assert!(recs.iter().all(|r| crate::ipc::sweep_detail(r).is_none()));
    }

    #[test]
    fn latency_is_time_per_dependent_load() {
        let s = NvbwSpec {
            test: Test::Latency,
            size: LATENCY_BYTES,
            row: 1,
            col: 0,
            iters: 200_000,
            warmup: 16384,
            index: 9,
        };
        // 200,000 loads in 150 ms = 750 ns each (median of three launches).
        let all = [
            Measured::default(),
            measured(&[150_000_000, 149_000_000, 170_000_000]),
        ];
        let p = point(&s, &all, 3, None);
        let ns = p.fields()["lat_ns"].as_f64().unwrap();
        assert!((ns - 750.0).abs() < 1e-6, "{ns}");
        assert_eq!(p.bw_gbps, 0.0);
        assert_eq!(
            p.fields()["src"],
            json!(0),
            "the list lives on the column GPU"
        );
        assert_eq!(p.fields()["dst"], json!(1));
    }

    #[test]
    fn matrices_print_like_nvbandwidth() {
        let run = crate::ipc::tests::test_run(None);
        let mk = |test: Test, size: u64, row: usize, col: usize, ns: u64| {
            let s = NvbwSpec {
                test,
                size,
                row,
                col,
                iters: 16,
                warmup: 4,
                index: 1,
            };
            let mut all = vec![Measured::default(), Measured::default()];
            for t in test.transfers(row, col) {
                all[t.exec] = measured(&[ns]);
            }
            run.record(point(&s, &all, 1, None))
        };
        let recs = vec![
            mk(Test::WriteCe, 1 << 20, 0, 1, 1_000_000),
            mk(Test::WriteCe, 1 << 30, 0, 1, 64_000_000),
            mk(Test::WriteCe, 1 << 30, 1, 0, 128_000_000),
            mk(Test::BidirWriteCe, 1 << 30, 0, 1, 64_000_000),
            mk(Test::LocalCopy, 1 << 30, 1, 1, 32_000_000),
        ];
        let lines = matrix_lines(&recs);
        let text = lines.join("\n");
        assert!(
            lines[0].starts_with("# device_to_device_memcpy_write_ce: memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s) at 1073741824 B"),
            "{text}"
        );
        // Largest size only; diagonal and missing cells are N/A.
        let gb = |ms: f64| format!("{:.2}", (1u64 << 30) as f64 * 16.0 / (ms * 1e6));
        assert!(
            lines[2].contains("N/A") && lines[2].contains(&gb(64.0)),
            "{text}"
        );
        assert!(lines[3].contains(&gb(128.0)), "{text}");
        // Bidirectional: write1, write2, total.
        assert!(text.contains("device_to_device_bidirectional_memcpy_write_ce write1:"));
        assert!(text.contains("device_to_device_bidirectional_memcpy_write_ce total:"));
        let total = format!("{:.2}", 2.0 * (1u64 << 30) as f64 * 16.0 / 64e6);
        assert!(text.contains(&total), "{text}");
        // Local copy: one row, the GPU's own column.
        let local = lines
            .iter()
            .position(|l| l.starts_with("# device_local_copy"))
            .unwrap();
        assert!(lines[local + 2].contains("N/A"), "{text}");
        assert!(lines[local + 2].contains(&gb(32.0)), "{text}");
        assert_eq!(lines.len(), 5 + 3 * 5 + 4, "{text}");
        let sum = format!(
            "{:.2}",
            (1u64 << 30) as f64 * 16.0 * (1.0 / 64e6 + 1.0 / 128e6)
        );
        assert!(
            text.contains(&format!("# SUM device_to_device_memcpy_write_ce {sum}")),
            "{text}"
        );
        assert!(text.contains("# SUM device_to_device_bidirectional_memcpy_write_ce_total "));
    }
}
