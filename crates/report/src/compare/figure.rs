//! The figures `compare` gates on, read from one record, each with how far it could have moved
//! by chance within that run.
//!
//! - Latency: `lat_us.p50`. The minimum is too optimistic and the p99 too noisy to gate on.
//! - Bandwidth: the median of the per-window (per-iteration) figures where the record carries
//!   its blocks (`lat_p50_blocks_us`, written by the point-to-point benchmarks and `pairs`,
//!   whose `bw_gbps` is the size over the *mean* time): `bw_gbps × lat_mean / lat_p50`, the
//!   size over the median time. A single 12 ms stall moves the mean, so the record's `bw_gbps`
//!   can drop 99% between two identical runs; the median does not move. Other records (the
//!   collectives, `ipc`) keep their own figure.
//!
//! The noise of a figure within its run, as a relative standard error (`docs/compare.md`):
//! from the spread of the run's block medians where recorded (consecutive iterations share the
//! machine's state, so blocks show drift that single iterations hide), else from the quantiles
//! (σ of ln(latency) taken as ln(p99 / p50) / 2.326, the median's error 1.2533 σ / √n). A
//! bandwidth figure that is a mean also carries what one stall can move it: the slowest
//! iteration's excess over the median, spread over all iterations.

use efabench_record::{GpuSharing, Record};
use serde::{Deserialize, Serialize};

/// Where a figure's within-run noise came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Noise {
    /// The spread of the medians of consecutive blocks of iterations.
    Blocks,
    /// The record's quantiles (older records, benchmarks without blocks).
    Quantiles,
    /// Nothing to estimate it from (`--timing run`, a single iteration, zero figures).
    None,
}

/// How a bandwidth figure was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BwFigure {
    /// Size over the median iteration's time (`bw_gbps × lat_mean / lat_p50`).
    MedianWindow,
    /// The record's `bw_gbps` as written.
    Record,
}

/// One figure of one run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Obs {
    pub value: f64,
    /// Standard error of the figure within its run, relative to it (0.01 = 1%).
    pub rel_se: f64,
    pub noise: Noise,
}

/// What one record contributes to a side of the comparison.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunPoint {
    pub lat_p50_us: Obs,
    pub bw_gbps: Obs,
    pub bw_figure: BwFigure,
    pub errors: u64,
    pub verified: bool,
    /// `not shared`, `shared under MPS`, `time-sliced`; null when the record predates the field.
    pub gpu_sharing: Option<String>,
    /// The GPUs that time-sliced between ranks (`ranks 0,1 on GPU 0 of h`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub time_sliced: Vec<String>,
}

/// σ of ln(latency) per unit of ln(p99 / p50) when latency is log-normal: 1 / z(0.99).
const P99_Z: f64 = 2.326_348;
/// The median's standard error over the population σ for a normal sample: √(π / 2).
const MEDIAN_SE: f64 = 1.253_314;

fn finite_pos(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// Relative standard error of a mean of logs: sd(ln b) / √B.
fn blocks_rel_se(blocks: &[f64]) -> Option<f64> {
    if blocks.len() < 2 || !blocks.iter().all(|b| finite_pos(*b)) {
        return None;
    }
    let logs: Vec<f64> = blocks.iter().map(|b| b.ln()).collect();
    let n = logs.len() as f64;
    let mean = logs.iter().sum::<f64>() / n;
    let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((var / n).sqrt())
}

fn quantiles_rel_se(r: &Record) -> Option<f64> {
    let l = &r.lat_us;
    if !(finite_pos(l.p50) && finite_pos(l.p99) && l.p99 >= l.p50 && r.iters > 0) {
        return None;
    }
    let sigma = (l.p99 / l.p50).ln() / P99_Z;
    Some(MEDIAN_SE * sigma / (r.iters as f64).sqrt())
}

fn sharing_state(s: &GpuSharing) -> Option<&'static str> {
    match s {
        GpuSharing::Unknown => None,
        GpuSharing::NotShared => Some("not shared"),
        GpuSharing::Shared(_) if s.is_time_sliced() => Some("time-sliced"),
        GpuSharing::Shared(_) => Some("shared under MPS"),
    }
}

impl RunPoint {
    pub fn of(r: &Record) -> Self {
        let common = r.common();
        let timed_once = common.timing.as_deref() == Some("run");
        let blocks = common.blocks_us;
        let from_blocks = if timed_once {
            None
        } else {
            blocks.as_deref().and_then(blocks_rel_se)
        };
        let (lat_se, lat_noise) = match (from_blocks, quantiles_rel_se(r)) {
            _ if timed_once => (0.0, Noise::None),
            (Some(s), _) => (s, Noise::Blocks),
            (None, Some(s)) => (s, Noise::Quantiles),
            (None, None) => (0.0, Noise::None),
        };
        let l = &r.lat_us;
        let lat = Obs {
            value: l.p50,
            rel_se: lat_se,
            noise: lat_noise,
        };
        let median_window = from_blocks.is_some() && finite_pos(l.p50) && finite_pos(l.mean);
        let (bw, bw_figure) = if median_window {
            let v = r.bw_gbps * l.mean / l.p50;
            (
                Obs {
                    value: if v.is_finite() { v } else { r.bw_gbps },
                    ..lat
                },
                BwFigure::MedianWindow,
            )
        } else {
            // A mean: add what the slowest iteration alone moved it by.
            let stall = if finite_pos(l.mean) && r.iters > 0 && l.max >= l.p50 {
                (l.max - l.p50) / (r.iters as f64 * l.mean)
            } else {
                0.0
            };
            let se = if stall.is_finite() {
                lat_se.max(stall)
            } else {
                lat_se
            };
            let noise = if se > lat_se {
                Noise::Quantiles
            } else {
                lat_noise
            };
            (
                Obs {
                    value: r.bw_gbps,
                    rel_se: se,
                    noise,
                },
                BwFigure::Record,
            )
        };
        let sharing = r.gpu_sharing();
        RunPoint {
            lat_p50_us: lat,
            bw_gbps: bw,
            bw_figure,
            errors: r.errors,
            verified: r.verified,
            gpu_sharing: sharing_state(&sharing).map(str::to_string),
            time_sliced: sharing.time_sliced().iter().map(|g| g.describe()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efabench_record::stats::BLOCK_MEDIANS_FIELD;
    use efabench_record::testing::sample;
    use serde_json::json;

    #[test]
    fn bandwidth_is_the_median_window_where_blocks_are_recorded() {
        // One stall: the mean is 3x the median, the record's bw a third of the median's.
        let mut r = sample("sendrecv", "stream", 8, 1.0, 1.0);
        r.lat_us.mean = 3.0;
        let p = RunPoint::of(&r);
        assert_eq!(p.bw_figure, BwFigure::Record);
        assert_eq!(p.bw_gbps.value, 1.0);
        assert_eq!(p.lat_p50_us.noise, Noise::Quantiles);
        r.extra.insert(
            BLOCK_MEDIANS_FIELD.into(),
            json!([1.0, 1.1, 0.9, 1.0, 1.0, 1.05, 0.95, 1.0, 1.0, 1.0]),
        );
        let p = RunPoint::of(&r);
        assert_eq!(p.bw_figure, BwFigure::MedianWindow);
        assert!((p.bw_gbps.value - 3.0).abs() < 1e-12);
        assert_eq!(p.lat_p50_us.noise, Noise::Blocks);
        // sd of the logs of those blocks over √10: about 1.6%.
        assert!((p.lat_p50_us.rel_se - 0.0165).abs() < 0.001, "{p:?}");
        // Timed once around the loop: no spread to speak of.
        r.extra.insert("timing".into(), json!("run"));
        let p = RunPoint::of(&r);
        assert_eq!(
            (p.lat_p50_us.noise, p.lat_p50_us.rel_se),
            (Noise::None, 0.0)
        );
        assert_eq!(p.bw_figure, BwFigure::Record);
    }

    #[test]
    fn a_mean_carries_what_one_stall_moved_it() {
        let mut r = sample("alltoall", "write", 1 << 20, 10.0, 100.0);
        r.iters = 10;
        r.lat_us.max = 1100.0;
        r.lat_us.mean = 200.0;
        let p = RunPoint::of(&r);
        // (1100 - 100) / (10 × 200) = 0.5.
        assert!((p.bw_gbps.rel_se - 0.5).abs() < 1e-12);
        assert!(p.lat_p50_us.rel_se < 0.5);
    }
}
