//! The record of a point of the sweep or the matrix (bandwidth from the median batch, the
//! launch shape, how it was checked), and what rank 0 prints after the run: each variant's
//! peak and the size where it reaches 90% of it, the best kernel against the copy engine, and
//! the GPU-pair matrices.

use efabench_record::Record;
use serde::{Deserialize, Serialize};

use super::{nvbw, Method};
use crate::harness::Point;
use crate::queue::record::read;
use crate::stats::Samples;

/// Smallest size at which a variant reaches `frac` of its own peak bandwidth.
pub fn size_at_fraction(points: &[(u64, f64)], frac: f64) -> Option<(u64, f64)> {
    let peak = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
    if peak <= 0.0 {
        return None;
    }
    let mut sorted = points.to_vec();
    sorted.sort_by_key(|p| p.0);
    sorted
        .into_iter()
        .find(|p| p.1 >= frac * peak)
        .map(|p| (p.0, peak))
}

/// The GPU-pair matrices of copy-engine and push at the largest size, GB/s.
pub(super) fn matrix_lines(records: &[Record]) -> Vec<String> {
    let cells: Vec<(&Record, IpcDetail)> = records
        .iter()
        .filter_map(|r| Some((r, sweep_detail(r)?)))
        .filter(|(_, d)| d.matrix)
        .collect();
    let mut lines = Vec::new();
    let mut variants: Vec<&str> = Vec::new();
    for (r, _) in &cells {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    let world = records.first().map_or(0, |r| r.world as usize);
    for v in variants {
        let size = cells
            .iter()
            .find(|(r, _)| r.variant == v)
            .map_or(0, |(r, _)| r.size_bytes);
        lines.push(format!(
            "# {v} matrix at {size} B, GB/s (row = source GPU rank, column = destination)"
        ));
        let head: String = (0..world).map(|b| format!("{b:>9}")).collect();
        lines.push(format!("#      {head}"));
        for a in 0..world {
            let cols: String = (0..world)
                .map(|b| {
                    cells
                        .iter()
                        .find(|(r, d)| r.variant == v && d.src == a && d.dst == b)
                        .map_or(format!("{:>9}", "-"), |(r, _)| {
                            format!("{:>9.1}", r.bw_gbps / 8.0)
                        })
                })
                .collect();
            lines.push(format!("# {a:>4} {cols}"));
        }
    }
    lines
}

/// The typed fields of a record of the sweep or the matrix; `None` for nvbandwidth's records
/// (they carry `suite`, and their own fields: [`nvbw::NvbwDetail`]) and records of other shapes.
pub(super) fn sweep_detail(r: &Record) -> Option<IpcDetail> {
    if r.bench != "ipc" || read::<nvbw::NvbwDetail>(r).is_some() {
        return None;
    }
    read(r)
}

/// The record fields of one point of the sweep or the matrix, beyond the common ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IpcDetail {
    /// `bw_gbps` in GB/s.
    #[serde(rename = "bw_GBps")]
    pub bw_gbytes: f64,
    /// Source and destination GPU ranks.
    pub src: usize,
    pub dst: usize,
    pub samples: u64,
    pub lat_kind: String,
    pub timing: String,
    /// The kernel's launch shape (absent for copy-engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<u32>,
    pub check: String,
    /// `true` on the cells of the all-pairs matrix; absent on the sweep.
    #[serde(default, skip_serializing_if = "is_false")]
    pub matrix: bool,
}

fn is_false(b: &bool) -> bool {
    !b
}

/// The record fields of one point (errors are summed by the harness).
#[allow(clippy::too_many_arguments)]
pub(super) fn point(
    m: Method,
    sm: u32,
    size: u64,
    iters: u64,
    warmup: u64,
    samples: u64,
    batch_ns: &[u64],
    a: usize,
    b: usize,
    matrix: bool,
) -> Point {
    let mut s = Samples::from_vec(batch_ns.to_vec());
    let lat = s.summary_us(1.0);
    let bw_gbps = if lat.p50 > 0.0 {
        size as f64 * 8.0 / (lat.p50 * 1e3)
    } else {
        0.0
    };
    let shape = m.shape(sm);
    let detail = IpcDetail {
        bw_gbytes: bw_gbps / 8.0,
        src: a,
        dst: b,
        samples,
        lat_kind: "one-way".into(),
        timing: "CUDA events around batches of back-to-back launches; bw from the median batch"
            .into(),
        grid: shape.map(|s| s.grid),
        block: shape.map(|s| s.block),
        check: match m {
            Method::Pull(_) => "every word of every iteration compared on the receiving GPU",
            Method::CopyEngine => "receiver poisoned, then every word checked after the timed loop",
            _ => "receiver poisoned, per-iteration seed, every word checked against the last iteration's seed",
        }
        .into(),
        matrix,
    };
    Point {
        variant: m.name(sm),
        size_bytes: size,
        iters,
        warmup,
        peer: Some(b as u32),
        lat_us: lat,
        bw_gbps,
        busbw_gbps: None,
        msg_rate_mops: if lat.p50 > 0.0 { 1.0 / lat.p50 } else { 0.0 },
        ..Point::default()
    }
    .detail(detail)
}

/// Summary lines: each variant's peak and the size where it reaches 90% of it, and the best
/// kernel against the copy engine at ≥ 64 MiB.
pub fn summary(records: &[Record]) -> Vec<String> {
    // The sweep's records: not the matrix's, not nvbandwidth's (those print as matrices).
    let sweep = |r: &&Record| sweep_detail(r).is_some_and(|d| !d.matrix);
    let mut variants: Vec<&str> = Vec::new();
    for r in records.iter().filter(sweep) {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    let mut lines = Vec::new();
    let gbs = |r: &Record| r.bw_gbps / 8.0;
    for v in &variants {
        let pts: Vec<(u64, f64)> = records
            .iter()
            .filter(sweep)
            .filter(|r| r.variant == *v)
            .map(|r| (r.size_bytes, gbs(r)))
            .collect();
        if let Some((s90, peak)) = size_at_fraction(&pts, 0.9) {
            lines.push(format!(
                "# {v}: peak {peak:.1} GB/s ({:.0} Gbps); 90% of peak from {} B",
                peak * 8.0,
                s90
            ));
        }
    }
    let big = |r: &&Record| r.size_bytes >= 64 << 20 && sweep(r);
    let ce = records
        .iter()
        .filter(big)
        .filter(|r| r.variant == "copy-engine")
        .map(gbs)
        .fold(0.0_f64, f64::max);
    let best = records
        .iter()
        .filter(big)
        .filter(|r| r.variant != "copy-engine")
        .max_by(|x, y| gbs(x).total_cmp(&gbs(y)));
    if let (Some(b), true) = (best, ce > 0.0) {
        lines.push(format!(
            "# best kernel at >= 64 MiB: {} {:.1} GB/s at {} B = {:.3} x copy-engine ({ce:.1} GB/s)",
            b.variant,
            gbs(b),
            b.size_bytes,
            gbs(b) / ce
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::parse_shape;
    use crate::ipc::tests::{assert_golden, harness_record, test_run};
    use serde_json::json;

    #[test]
    fn records_keep_their_golden_keys_and_read_back_typed() {
        let run = test_run(Some(3600.0));
        let ns = vec![1_000_000u64; 5];
        let push = Method::Push(parse_shape("128x256").unwrap());
        let recs: Vec<Record> = [(Method::CopyEngine, true), (push, false)]
            .into_iter()
            .map(|(m, matrix)| {
                harness_record(&run, point(m, 132, 1 << 20, 20, 2, 5, &ns, 0, 1, matrix))
            })
            .collect();
        assert_golden(
            &recs,
            include_str!("../../../efabench/tests/golden/ipc.keys"),
        );
        let ce = sweep_detail(&recs[0]).expect("typed");
        assert!(ce.matrix && ce.grid.is_none());
        let p = sweep_detail(&recs[1]).expect("typed");
        assert!(!p.matrix && p.grid == Some(128) && p.block == Some(256));
        assert!(
            recs[1].extra.get("matrix").is_none(),
            "the sweep has no matrix field"
        );
    }

    #[test]
    fn ninety_percent_size_and_summary() {
        let pts = [
            (4096, 10.0),
            (1 << 20, 300.0),
            (64 << 20, 370.0),
            (1 << 30, 380.0),
        ];
        assert_eq!(size_at_fraction(&pts, 0.9), Some((64 << 20, 380.0)));
        assert_eq!(size_at_fraction(&[], 0.9), None);

        let run = test_run(Some(3825.0));
        let mk = |m: Method, size: u64, ms: f64| {
            let ns = vec![(ms * 1e6) as u64; 5];
            run.record(point(m, 132, size, 20, 2, 5, &ns, 0, 1, false))
        };
        let push = Method::Push(parse_shape("128x256").unwrap());
        // 64 MiB in 0.2 ms = 335.5 GB/s; 1 GiB in 2.7 ms = 397.7 GB/s.
        let recs = vec![
            mk(Method::CopyEngine, 64 << 20, 0.2),
            mk(Method::CopyEngine, 1 << 30, 2.7),
            mk(push, 64 << 20, 0.25),
            mk(push, 1 << 30, 2.8),
        ];
        let r = &recs[1];
        assert_eq!(r.variant, "copy-engine");
        assert_eq!(r.peer, Some(1));
        let gbps = (1u64 << 30) as f64 * 8.0 / 2.7e6;
        assert!((r.bw_gbps - gbps).abs() < 1e-6 * gbps, "{}", r.bw_gbps);
        let gb = r.extra["bw_GBps"].as_f64().unwrap();
        assert!((gb * 8.0 - r.bw_gbps).abs() < 1e-9);
        assert!(r.util_pct.is_some());
        assert!(r.check().is_ok());
        assert_eq!(recs[2].extra["grid"], json!(128));
        let lines = summary(&recs);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("# copy-engine: peak"), "{}", lines[0]);
        assert!(lines[2].contains("push-128x256"), "{}", lines[2]);
        assert!(
            lines[2].contains(&format!("{:.3} x copy-engine", 2.7 / 2.8)),
            "{}",
            lines[2]
        );
    }
}
