//! The one place where timed samples become the `lat_us` distribution of a record.
//!
//! Every benchmark, CPU-timed (`sendrecv`, `alltoall`, `pairs`, `proxy`) or GPU-timed (`ipc`
//! with CUDA events, `queue` with `%globaltimer` stamps), turns its samples into a
//! [`LatencySummary`] here, so `lat_us.p99` means the same thing in every record.
//!
//! Percentiles are **nearest rank**: for `n` sorted samples `x[1] <= ... <= x[n]`, the
//! q-th quantile is `x[k]` with `k = max(1, ceil(q * n))` — the smallest sample with at least a
//! fraction `q` of the samples at or below it. It is always a measured value (no interpolation)
//! and needs no histogram; `docs/metrics.md` states the same formula.
//!
//! The module lives in `efabench-record`, beside the [`LatencySummary`] it fills, because both
//! `efabench-gpu` (the GPU-timed queue measurement) and `efabench-bench` (everything else) need
//! it: `efabench-record` depends on no other efabench crate, so both can depend on it without a
//! cycle. `efabench-bench` re-exports this module as `efabench_bench::stats`.
//!
//! Every timed iteration is kept (a few hundred KiB at most), then sorted once per point: exact
//! percentiles with no bucketing error, and the mean comes along for comparisons with tools that
//! print only a mean.

use crate::record::LatencySummary;

/// The nearest-rank `q`-quantile (`0 < q <= 1`) of samples sorted in ascending order:
/// `sorted[max(1, ceil(q * n)) - 1]`. `None` when there are no samples.
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let k = (q * n as f64).ceil() as usize;
    Some(sorted[k.clamp(1, n) - 1])
}

/// The median of samples sorted in ascending order: the nearest-rank 0.5-quantile,
/// `sorted[ceil(n / 2) - 1]` — the middle sample for an odd count, the lower of the two middle
/// ones for an even count. Like every percentile here it is a measured value, never the mean of
/// two, so a median iteration can still be split into the stages that add up to it. `None`
/// when there are no samples.
pub fn median<T: Copy>(sorted: &[T]) -> Option<T> {
    nearest_rank(sorted, 0.5)
}

/// The sample median of an estimator (sorts `v` in place): the middle value for an odd count,
/// the mean of the two middle ones for an even count. It is for statistics computed *from*
/// figures (a node's share of its peers' speed, the scatter of a sweep's changes, the median run
/// of a side), where the two-middle mean is the unbiased choice over a few values and no stage
/// breakdown has to add up to it; a reported figure's p50 is [`median`], a measured sample.
/// `None` for no values.
pub fn sample_median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// 1.4826 × the median absolute deviation from the [`sample_median`]: the standard deviation of
/// normally distributed values, robust to a few wild ones. `None` for no values.
pub fn robust_sd(v: &[f64]) -> Option<f64> {
    let m = sample_median(&mut v.to_vec())?;
    let mut d: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    sample_median(&mut d).map(|mad| 1.4826 * mad)
}

/// The median of finite values in any order (see [`median`]); non-finite values are left out.
pub fn median_of(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    median(&v)
}

/// Collects one duration per timed iteration, in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    ns: Vec<u64>,
}

impl Samples {
    pub fn with_capacity(n: usize) -> Self {
        Samples {
            ns: Vec::with_capacity(n),
        }
    }

    /// Samples measured elsewhere (another rank's, gathered by the harness, or read back from
    /// the GPU).
    pub fn from_vec(ns: Vec<u64>) -> Self {
        Samples { ns }
    }

    /// The raw samples, in nanoseconds.
    pub fn into_vec(self) -> Vec<u64> {
        self.ns
    }

    #[inline]
    pub fn push(&mut self, ns: u64) {
        self.ns.push(ns);
    }

    pub fn len(&self) -> usize {
        self.ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ns.is_empty()
    }

    /// Sum of all samples in nanoseconds.
    pub fn total_ns(&self) -> u64 {
        self.ns.iter().sum()
    }

    /// The distribution in microseconds, each sample first divided by `divisor` (2 for a
    /// round trip reported as one-way latency, the window for per-message time).
    pub fn summary_us(&mut self, divisor: f64) -> LatencySummary {
        self.summary_in(1000.0 * divisor)
    }

    /// The distribution in nanoseconds (for records that also keep the raw unit, e.g. `queue`'s
    /// `lat_ns`). Dividing each field by 1000 gives exactly [`Samples::summary_us`]`(1.0)`.
    pub fn summary_ns(&mut self) -> LatencySummary {
        self.summary_in(1.0)
    }

    /// Every field is `ns / unit`; all zero when there are no samples.
    fn summary_in(&mut self, unit: f64) -> LatencySummary {
        if self.ns.is_empty() {
            return LatencySummary::default();
        }
        self.ns.sort_unstable();
        let n = self.ns.len();
        let at = |q: f64| nearest_rank(&self.ns, q).unwrap_or(0) as f64 / unit;
        LatencySummary {
            min: self.ns[0] as f64 / unit,
            p50: at(0.50),
            p99: at(0.99),
            max: self.ns[n - 1] as f64 / unit,
            mean: self.total_ns() as f64 / n as f64 / unit,
        }
    }
}

/// How many consecutive blocks [`block_medians_us`] cuts a run's iterations into.
pub const BLOCKS: usize = 10;

/// The record field holding [`block_medians_us`] (`docs/records.md`).
pub const BLOCK_MEDIANS_FIELD: &str = "lat_p50_blocks_us";

/// The median (nearest rank) of each of [`BLOCKS`] consecutive blocks of `ns`, given in the
/// order the iterations ran, in microseconds after dividing each sample by `divisor`.
///
/// `compare` estimates how far a run's median could move by chance from the spread of these:
/// iterations next to each other share the machine's state (other processes, frequency, cache),
/// so blocks in time order show drift within a run that the spread of single iterations hides.
/// Empty when there are fewer than two samples per block.
pub fn block_medians_us(ns: &[u64], divisor: f64) -> Vec<f64> {
    let n = ns.len();
    if n < 2 * BLOCKS {
        return Vec::new();
    }
    (0..BLOCKS)
        .map(|b| {
            let mut block = ns[b * n / BLOCKS..(b + 1) * n / BLOCKS].to_vec();
            block.sort_unstable();
            median(&block).unwrap_or(0) as f64 / (1000.0 * divisor)
        })
        .collect()
}

/// Payload bits in one direction per second, in Gbps (10^9 bit/s).
pub fn gbps(bytes: u64, ns: u64) -> f64 {
    if ns == 0 {
        return 0.0;
    }
    bytes as f64 * 8.0 / ns as f64
}

/// Messages per second in millions.
pub fn mops(messages: u64, ns: u64) -> f64 {
    if ns == 0 {
        return 0.0;
    }
    messages as f64 * 1000.0 / ns as f64
}

/// Resamples of [`median_ci95`].
pub const BOOTSTRAP_RESAMPLES: usize = 1000;

/// The 95% bootstrap interval of the median of `samples` (any order): the nearest-rank 2.5% and
/// 97.5% quantiles of the medians of [`BOOTSTRAP_RESAMPLES`] resamples drawn with replacement
/// (a fixed-seed generator, so the same samples give the same interval). AWS's comparison of EP
/// backends reports its median this way. `None` with fewer than two samples.
pub fn median_ci95(samples: &[u64]) -> Option<(u64, u64)> {
    let n = samples.len();
    if n < 2 {
        return None;
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
    let mut next = move || {
        // xorshift64*: enough for picking indices.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut draw = vec![0u64; n];
    let mut medians: Vec<u64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| {
            for d in draw.iter_mut() {
                *d = samples[(next() % n as u64) as usize];
            }
            draw.sort_unstable();
            median(&draw).unwrap_or(0)
        })
        .collect();
    medians.sort_unstable();
    Some((
        nearest_rank(&medians, 0.025)?,
        nearest_rank(&medians, 0.975)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_median_averages_the_two_middle_values_and_p50_does_not() {
        assert_eq!(sample_median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(sample_median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, 2.0, 3.0, 4.0]), Some(2.0));
        assert_eq!(sample_median(&mut []), None);
    }

    #[test]
    fn the_robust_sd_ignores_a_wild_value() {
        // Deviations from the median 3: 2, 1, 0, 1, 97 -> median 1.
        let sd = robust_sd(&[1.0, 2.0, 3.0, 4.0, 100.0]).unwrap();
        assert!((sd - 1.4826).abs() < 1e-12, "{sd}");
        assert_eq!(robust_sd(&[]), None);
        assert_eq!(robust_sd(&[5.0, 5.0]), Some(0.0));
    }

    #[test]
    fn the_median_is_the_nearest_rank_half_quantile() {
        assert_eq!(median::<u64>(&[]), None);
        assert_eq!(median(&[7]), Some(7));
        assert_eq!(median(&[1, 2, 3]), Some(2));
        // Even count: the lower middle sample, not the mean of the two.
        assert_eq!(median(&[1, 2, 3, 4]), Some(2));
        assert_eq!(median_of([4.0, f64::NAN, 1.0, 3.0, 2.0]), Some(2.0));
        assert_eq!(median_of([f64::INFINITY]), None);
        let mut s = Samples::from_vec(vec![4000, 1000, 3000, 2000]);
        assert_eq!(s.summary_us(1.0).p50, 2.0, "p50 and the median agree");
    }

    #[test]
    fn block_medians_follow_time_order() {
        // 20 samples: the first half 1 µs, the second 3 µs; two per block.
        let mut ns = vec![1000u64; 10];
        ns.extend([3000u64; 10]);
        let b = block_medians_us(&ns, 1.0);
        assert_eq!(b, [1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0, 3.0]);
        // Divided like the record's latency (a round trip halved).
        assert_eq!(block_medians_us(&ns, 2.0)[9], 1.5);
        assert!(block_medians_us(&ns[..19], 1.0).is_empty());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut s = Samples::default();
        for v in 1..=100u64 {
            s.push(v * 1000);
        }
        let l = s.summary_us(1.0);
        assert_eq!((l.min, l.p50, l.p99, l.max), (1.0, 50.0, 99.0, 100.0));
        assert!((l.mean - 50.5).abs() < 1e-9);
    }

    #[test]
    fn nearest_rank_picks_a_sample_never_interpolates() {
        // n = 10: p50 is the 5th sample, p99 the 10th (ceil(9.9) = 10); round(q (n-1)) would
        // have given the 6th for p50 (round(4.5) = 5, zero-based).
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(5));
        assert_eq!(nearest_rank(&v, 0.99), Some(10));
        assert_eq!(nearest_rank(&v, 0.0), Some(1));
        assert_eq!(nearest_rank(&[7i64], 0.99), Some(7));
        assert_eq!(nearest_rank::<u64>(&[], 0.5), None);
        let neg = [-3i64, -1, 2];
        assert_eq!(nearest_rank(&neg, 0.5), Some(-1));
    }

    #[test]
    fn ns_and_us_agree() {
        let mut s = Samples::from_vec(vec![1234, 5, 99_999, 42, 7_777]);
        let ns = s.summary_ns();
        let us = s.summary_us(1.0);
        assert_eq!(ns.p50 / 1000.0, us.p50);
        assert_eq!(ns.p99 / 1000.0, us.p99);
        assert_eq!(ns.min / 1000.0, us.min);
        assert_eq!(ns.max / 1000.0, us.max);
        assert_eq!(ns.mean / 1000.0, us.mean);
    }

    #[test]
    fn divisor_halves_round_trips() {
        let mut s = Samples::default();
        s.push(10_000);
        assert_eq!(s.summary_us(2.0).p50, 5.0);
    }

    #[test]
    fn empty_is_zero_and_units_are_decimal() {
        assert_eq!(
            Samples::default().summary_us(1.0),
            LatencySummary::default()
        );
        // 1 GB in one second is 8 Gbps.
        assert_eq!(gbps(1_000_000_000, 1_000_000_000), 8.0);
        assert_eq!(mops(1_000_000, 1_000_000_000), 1.0);
        assert_eq!(gbps(1, 0), 0.0);
    }

    #[test]
    fn the_medians_bootstrap_interval_holds_it_and_narrows_with_more_samples() {
        let few: Vec<u64> = (0..20).map(|i| 1000 + (i * 7919 % 200)).collect();
        let many: Vec<u64> = (0..2000).map(|i| 1000 + (i * 7919 % 200)).collect();
        let (lo, hi) = median_ci95(&few).unwrap();
        let mut sorted = few.clone();
        sorted.sort_unstable();
        let m = median(&sorted).unwrap();
        assert!(lo <= m && m <= hi, "{lo} {m} {hi}");
        let (lo2, hi2) = median_ci95(&many).unwrap();
        assert!(hi2 - lo2 < hi - lo, "{lo2}-{hi2} against {lo}-{hi}");
        assert_eq!(median_ci95(&few), median_ci95(&few), "seeded");
        assert_eq!(median_ci95(&[5]), None);
        assert_eq!(median_ci95(&[7, 7, 7]), Some((7, 7)));
    }
}
