//! The records and the summary of `efabench h2d`: per point the total and each GPU's figure,
//! each direction's part, where the host pages were, and the figure against the GPU's link.

use std::collections::BTreeMap;

use efabench_gpu::h2d::{Dir, Engine, Timing};
use efabench_gpu::Gpu;
use serde::Serialize;

use super::args::{Placement, Scope};
use super::expect::{Expectation, FLAG_BELOW};
use super::{GpuSide, H2dSpec};
use crate::harness::Point;
use crate::stats::Samples;

/// Fields every record of the run repeats.
#[derive(Clone, Debug, Serialize)]
pub struct H2dFacts {
    /// GPUs the run drove.
    #[serde(rename = "h2d_gpus")]
    pub gpus: usize,
    pub numa_nodes: usize,
    /// The fraction of the raw link rate the expectation assumes.
    pub practical_efficiency: f64,
    /// Samples per point (the median is kept).
    pub samples: u64,
}

/// One GPU's share of a point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuFigure {
    pub gpu: usize,
    pub gpu_bus_id: String,
    /// GB/s host→device (median sample), when measured.
    #[serde(rename = "h2d_GBps")]
    pub h2d: Option<f64>,
    /// GB/s device→host (median sample), when measured.
    #[serde(rename = "d2h_GBps")]
    pub d2h: Option<f64>,
    pub gpu_node: Option<u32>,
    /// The node the placement asked for, and where the pages are.
    pub wanted_node: Option<u32>,
    pub host_node: Option<u32>,
    /// The link's expectation, when sysfs shows the GPU's link.
    pub expect: Option<Expectation>,
    /// (h2d + d2h) / (expected × directions).
    pub of_expected: Option<f64>,
    /// Per-copy time of the first measured direction, from the samples.
    #[serde(skip)]
    pub per_copy: Option<efabench_record::LatencySummary>,
}

impl GpuFigure {
    pub fn total(&self) -> f64 {
        self.h2d.unwrap_or(0.0) + self.d2h.unwrap_or(0.0)
    }
    /// The pages are not where the placement asked.
    pub fn misplaced(&self) -> bool {
        matches!((self.wanted_node, self.host_node), (Some(w), Some(h)) if w != h)
    }
}

/// What one point measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub gpus: Vec<GpuFigure>,
}

impl Outcome {
    pub fn total(&self) -> f64 {
        self.gpus.iter().map(GpuFigure::total).sum()
    }
}

/// GB/s of one direction from its samples: bytes = size × copies; bytes/ns = GB/s.
fn gbytes(size: u64, iters: u64, ms: &[f64]) -> Option<(f64, efabench_record::LatencySummary)> {
    if ms.is_empty() {
        return None;
    }
    let ns: Vec<u64> = ms
        .iter()
        .map(|m| (m * 1e6).round().max(1.0) as u64)
        .collect();
    let mut smp = Samples::from_vec(ns);
    let lat = smp.summary_us(iters.max(1) as f64);
    // lat.p50 is µs per copy.
    let g = if lat.p50 > 0.0 {
        size as f64 / (lat.p50 * 1e3)
    } else {
        0.0
    };
    Some((g, lat))
}

/// Each GPU's figures from its samples.
pub(crate) fn outcome(
    s: &H2dSpec,
    times: &BTreeMap<usize, Vec<Timing>>,
    gpus: &BTreeMap<usize, GpuSide>,
) -> Outcome {
    let mut out = Vec::new();
    for (g, ts) in times {
        let up: Vec<f64> = ts.iter().filter_map(|t| t.h2d_ms).collect();
        let down: Vec<f64> = ts.iter().filter_map(|t| t.d2h_ms).collect();
        let h2d = gbytes(s.size, s.iters, &up);
        let d2h = gbytes(s.size, s.iters, &down);
        let side = gpus.get(g);
        let expect = side.and_then(|x| x.expect.clone());
        let mut f = GpuFigure {
            gpu: *g,
            gpu_bus_id: side.map(|x| x.gpu.pci_bus_id.clone()).unwrap_or_default(),
            h2d: h2d.map(|x| x.0),
            d2h: d2h.map(|x| x.0),
            gpu_node: side.and_then(|x| x.numa),
            wanted_node: side.and_then(|x| x.node.get(&s.placement).copied()),
            host_node: side
                .and_then(|x| x.lanes.get(&s.placement))
                .and_then(|l| l.host_node),
            expect: None,
            of_expected: None,
            per_copy: h2d.or(d2h).map(|x| x.1),
        };
        let dirs = u32::from(f.h2d.is_some()) + u32::from(f.d2h.is_some());
        f.of_expected = expect.as_ref().map(|e| e.fraction(f.total(), dirs));
        f.expect = expect;
        out.push(f);
    }
    Outcome { gpus: out }
}

/// The record's own fields.
#[derive(Clone, Debug, Serialize)]
pub struct H2dDetail {
    /// Always `h2d`.
    pub suite: &'static str,
    /// `copy-engine` or `sm`.
    pub engine: &'static str,
    /// `h2d`, `d2h` or `both`.
    pub direction: &'static str,
    /// `each` (one GPU alone) or `all` (every GPU at once).
    pub scope: &'static str,
    /// `near` (the GPU's NUMA node) or `far`.
    pub placement: &'static str,
    /// The GPU of an `each` point.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<usize>,
    /// Total GB/s: every GPU, both directions.
    #[serde(rename = "bw_GBps")]
    pub total: f64,
    /// Sum over GPUs of each direction.
    #[serde(rename = "h2d_GBps", skip_serializing_if = "Option::is_none")]
    pub h2d: Option<f64>,
    #[serde(rename = "d2h_GBps", skip_serializing_if = "Option::is_none")]
    pub d2h: Option<f64>,
    /// Every GPU's figures, expectation and placement.
    pub per_gpu: Vec<GpuFigure>,
    /// Lowest `of_expected` among the GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of_expected: Option<f64>,
    /// Any GPU's host pages away from the node the placement asked for.
    pub misplaced: bool,
    pub timing: &'static str,
    pub check: &'static str,
}

fn names(s: &H2dSpec) -> (&'static str, &'static str, &'static str) {
    (
        match s.engine {
            Engine::Ce => "copy-engine",
            Engine::Sm => "sm",
        },
        match s.dir {
            Dir::H2d => "h2d",
            Dir::D2h => "d2h",
            Dir::Both => "both",
        },
        match s.scope {
            Scope::Each => "each",
            Scope::All => "all",
        },
    )
}

fn sum(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    v.fold(None, |a, x| match x {
        Some(x) => Some(a.unwrap_or(0.0) + x),
        None => a,
    })
}

/// The record of one point.
pub(crate) fn point(s: &H2dSpec, o: &Outcome) -> Point {
    let (engine, direction, scope) = names(s);
    let dirs = if s.dir == Dir::Both { 2.0 } else { 1.0 };
    let link: Option<f64> = o
        .gpus
        .iter()
        .map(|g| g.expect.as_ref().map(|e| e.raw_gbytes * 8.0 * dirs))
        .sum();
    let d = H2dDetail {
        suite: "h2d",
        engine,
        direction,
        scope,
        placement: s.placement.name(),
        gpu: s.gpu,
        total: o.total(),
        h2d: sum(o.gpus.iter().map(|g| g.h2d)),
        d2h: sum(o.gpus.iter().map(|g| g.d2h)),
        per_gpu: o.gpus.clone(),
        of_expected: o
            .gpus
            .iter()
            .filter_map(|g| g.of_expected)
            .reduce(f64::min),
        misplaced: o.gpus.iter().any(GpuFigure::misplaced),
        timing: "CUDA events around each sample of back-to-back copies on the GPU's stream (one stream per direction); GB/s = size x copies / median sample; all GPUs: one thread each, released together, figures summed",
        check: "per sample: sources filled with a new seed, destinations poisoned, every word checked after the sample",
    };
    let lat = o.gpus.first().and_then(|g| g.per_copy).unwrap_or_default();
    Point {
        variant: s.variant(),
        size_bytes: s.size,
        iters: s.iters,
        warmup: s.warmup,
        lat_us: lat,
        bw_gbps: o.total() * 8.0,
        msg_rate_mops: if lat.p50 > 0.0 { 1.0 / lat.p50 } else { 0.0 },
        link_gbps: link,
        ..Point::default()
    }
    .detail(d)
}

/// The header line of one GPU.
pub(crate) fn gpu_line(gpu: &Gpu, numa: Option<u32>, e: Option<&Expectation>) -> String {
    format!(
        "# GPU {} {} ({}), NUMA node {}, link {}",
        gpu.ordinal,
        gpu.pci_bus_id,
        gpu.name,
        numa.map_or("unknown".into(), |n| n.to_string()),
        match e {
            Some(e) => format!(
                "{}{}: {:.1} GB/s raw per direction, {:.1} GB/s expected",
                e.link,
                e.trained_below
                    .as_ref()
                    .map(|t| format!(", trained at {t}"))
                    .unwrap_or_default(),
                e.raw_gbytes,
                e.expected_gbytes
            ),
            None => "unknown (no link files in sysfs)".into(),
        }
    )
}

/// The table after the run: each GPU's best figure per case (largest size), against its link,
/// and the findings: figures below the expectation, far placements, wrong placements.
pub fn summary(done: &[(H2dSpec, Outcome)]) -> Vec<String> {
    // The largest size of each case.
    let mut best: BTreeMap<(String, Option<usize>, Placement), (u64, &Outcome)> = BTreeMap::new();
    for (s, o) in done {
        let k = (s.variant(), s.gpu, s.placement);
        if best.get(&k).is_none_or(|(size, _)| s.size >= *size) {
            best.insert(k, (s.size, o));
        }
    }
    if best.is_empty() {
        return Vec::new();
    }
    let mut out = vec![format!(
        "# {:<38} {:>4} {:>5} {:>9} {:>9} {:>9} {:>7}",
        "case (largest size)", "gpu", "host", "h2d GB/s", "d2h GB/s", "expected", "of exp"
    )];
    let mut findings = Vec::new();
    for ((variant, _, placement), (size, o)) in &best {
        for g in &o.gpus {
            let f = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.1}"));
            out.push(format!(
                "# {:<38} {:>4} {:>5} {:>9} {:>9} {:>9} {:>7}",
                format!("{variant} {}", crate::size::human(*size)),
                g.gpu,
                placement.name(),
                f(g.h2d),
                f(g.d2h),
                f(g.expect.as_ref().map(|e| e.expected_gbytes)),
                g.of_expected
                    .map_or("-".into(), |x| format!("{:.0}%", x * 100.0))
            ));
            if *placement == Placement::Near && g.of_expected.is_some_and(|x| x < FLAG_BELOW) {
                findings.push(format!(
                    "# below expectation: GPU {} {variant} {:.1} GB/s is {:.0}% of the {:.1} GB/s its link should carry{}",
                    g.gpu,
                    g.total(),
                    g.of_expected.unwrap_or(0.0) * 100.0,
                    g.expect.as_ref().map_or(0.0, |e| e.expected_gbytes),
                    g.expect
                        .as_ref()
                        .and_then(|e| e.trained_below.as_ref())
                        .map(|t| format!(" (the link trained at {t}: see `efabench doctor`)"))
                        .unwrap_or_default()
                ));
            }
            if g.misplaced() {
                findings.push(format!(
                    "# wrong placement: GPU {} {} host pages on node {} instead of {}",
                    g.gpu,
                    placement.name(),
                    g.host_node.unwrap_or(0),
                    g.wanted_node.unwrap_or(0)
                ));
            }
        }
    }
    // Far against near, per GPU and case.
    for ((variant, gpu, placement), (_, far)) in &best {
        if *placement != Placement::Far {
            continue;
        }
        if let Some((_, near)) = best.get(&(variant.clone(), *gpu, Placement::Near)) {
            let (n, f) = (near.total(), far.total());
            if n > 0.0 {
                findings.push(format!(
                    "# far placement: {variant} {} {:.1} GB/s, {:+.0}% against near ({:.1} GB/s)",
                    gpu.map_or("all GPUs".into(), |g| format!("GPU {g}")),
                    f,
                    (f / n - 1.0) * 100.0,
                    n
                ));
            }
        }
    }
    out.extend(findings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use efabench_topology::pcie::PcieLink;

    fn spec(dir: Dir, gpu: Option<usize>, placement: Placement) -> H2dSpec {
        H2dSpec {
            engine: Engine::Ce,
            dir,
            scope: if gpu.is_some() {
                Scope::Each
            } else {
                Scope::All
            },
            gpu,
            placement,
            size: 64 << 20,
            iters: 16,
            warmup: 2,
            index: 1,
        }
    }

    fn figure(gpu: usize, h2d: Option<f64>, d2h: Option<f64>, wanted: u32, host: u32) -> GpuFigure {
        let e = Expectation::of(&PcieLink {
            current_gts: Some(32.0),
            current_width: Some(16),
            max_gts: Some(32.0),
            max_width: Some(16),
        });
        let dirs = u32::from(h2d.is_some()) + u32::from(d2h.is_some());
        let total = h2d.unwrap_or(0.0) + d2h.unwrap_or(0.0);
        GpuFigure {
            gpu,
            gpu_bus_id: format!("0000:{:02x}:00.0", 0x18 + gpu),
            h2d,
            d2h,
            gpu_node: Some(0),
            wanted_node: Some(wanted),
            host_node: Some(host),
            of_expected: e.as_ref().map(|e| e.fraction(total, dirs)),
            expect: e,
            per_copy: None,
        }
    }

    #[test]
    fn records_carry_each_direction_and_the_link() {
        let s = spec(Dir::Both, Some(0), Placement::Near);
        let o = Outcome {
            gpus: vec![figure(0, Some(50.0), Some(48.0), 0, 0)],
        };
        let p = point(&s, &o);
        let f = p.fields();
        assert_eq!(p.variant, "host_device_bidirectional_memcpy_ce");
        assert!((p.bw_gbps - 98.0 * 8.0).abs() < 1e-9);
        // Both directions of a Gen5 x16 link.
        assert!((p.link_gbps.unwrap() - 2.0 * 63.015 * 8.0).abs() < 0.2);
        assert_eq!(f["h2d_GBps"], 50.0);
        assert_eq!(f["d2h_GBps"], 48.0);
        assert_eq!(f["direction"], "both");
        assert_eq!(f["misplaced"], false);
        let of = f["of_expected"].as_f64().unwrap();
        assert!((of - 98.0 / (2.0 * 54.82)).abs() < 0.001, "{of}");
        assert_eq!(f["per_gpu"][0]["gpu_bus_id"], "0000:18:00.0");
    }

    #[test]
    fn summary_flags_slow_links_far_placements_and_misplaced_pages() {
        let done = vec![
            (
                spec(Dir::H2d, Some(0), Placement::Near),
                Outcome {
                    gpus: vec![figure(0, Some(30.0), None, 0, 0)],
                },
            ),
            (
                spec(Dir::H2d, Some(0), Placement::Far),
                Outcome {
                    gpus: vec![figure(0, Some(24.0), None, 1, 0)],
                },
            ),
            (
                spec(Dir::H2d, Some(1), Placement::Near),
                Outcome {
                    gpus: vec![figure(1, Some(51.0), None, 0, 0)],
                },
            ),
        ];
        let lines = summary(&done);
        let text = lines.join("\n");
        assert!(lines[0].contains("h2d GB/s"), "{text}");
        assert!(text.contains("host_to_device_memcpy_ce 64M"), "{text}");
        assert!(
            text.contains("below expectation: GPU 0 host_to_device_memcpy_ce 30.0 GB/s is 55%"),
            "{text}"
        );
        assert!(!text.contains("below expectation: GPU 1"), "{text}");
        assert!(
            text.contains("wrong placement: GPU 0 far host pages on node 0 instead of 1"),
            "{text}"
        );
        assert!(text.contains("far placement: host_to_device_memcpy_ce GPU 0 24.0 GB/s, -20% against near (30.0 GB/s)"), "{text}");
        assert!(summary(&[]).is_empty());
    }
}
