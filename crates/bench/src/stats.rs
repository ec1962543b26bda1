//! Timed samples to the `lat_us` distribution: the one definition every benchmark uses lives in
//! [`efabench_record::stats`] (nearest-rank percentiles), which `compare` shares; this module
//! re-exports it under the name the benchmarks use.

pub use efabench_record::stats::{
    block_medians_us, gbps, median, median_ci95, median_of, mops, nearest_rank, Samples,
    BLOCK_MEDIANS_FIELD,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::measure::LatencyNs;

    /// The same samples through every path that fills a record's latency: the CPU-timed
    /// harness (`Samples::summary_us`), the GPU-timed `queue` (ns on the device, `lat_us` on the
    /// record) and the `proxy` stage percentiles.
    #[test]
    fn every_path_gives_the_same_lat_us() {
        let sets: [Vec<u32>; 4] = [
            (1..=100).map(|i| i * 37 % 1009).collect(),
            vec![5, 3, 9],
            vec![42],
            (0..1000).map(|i| (i * i) % 7919 + 1).collect(),
        ];
        for ns in sets {
            let mut cpu = Samples::from_vec(ns.iter().map(|&x| u64::from(x)).collect());
            let cpu = cpu.summary_us(1.0);

            let gpu = crate::queue::record::lat_us(&LatencyNs::from_samples(ns.clone()));
            assert_eq!(cpu, gpu, "queue's lat_us differs for {} samples", ns.len());

            let proxy = crate::proxy::pct(ns.iter().map(|&x| i64::from(x)).collect());
            assert_eq!(proxy.map(|p| p.p50_us), Some(cpu.p50));
            assert_eq!(proxy.map(|p| p.p99_us), Some(cpu.p99));
        }
    }
}
