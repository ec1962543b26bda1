//! Per-iteration timings turned into the distribution a record carries.
//!
//! Every timed iteration is kept (a few hundred KiB at most), then sorted once per size: exact
//! percentiles with no histogram bucketing error, and the mean comes along for comparisons with
//! tools that print only a mean.

use efabench_record::LatencySummary;

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

    /// Samples measured elsewhere (another rank's, gathered by the harness).
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
        if self.ns.is_empty() {
            return LatencySummary::default();
        }
        self.ns.sort_unstable();
        let us = |ns: u64| ns as f64 / 1000.0 / divisor;
        let n = self.ns.len();
        let rank = |q: f64| {
            // Nearest-rank percentile: the smallest sample with at least q of the data at or below it.
            let r = (q * n as f64).ceil() as usize;
            self.ns[r.clamp(1, n) - 1]
        };
        LatencySummary {
            min: us(self.ns[0]),
            p50: us(rank(0.50)),
            p99: us(rank(0.99)),
            max: us(self.ns[n - 1]),
            mean: self.total_ns() as f64 / n as f64 / 1000.0 / divisor,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
