//! What the records of every collective (`alltoall`, `alltoallv`, `ep`) must show alike: a time
//! for every rank, the record's time set by the slowest rank, busbw = algbw × (n−1)/n, and the
//! slowest ranks and the matrix on rank 0's stderr. Each benchmark's test adds what is its own.

use efabench_report::Record;

/// Every rank's mean time (µs) in a collective's record, one per rank of the job:
/// `rank_lat_us[].mean`, or `rank_mean_us[]` where the record has that (`ep`).
pub fn rank_means(r: &Record, world: u32, what: &str) -> Vec<f64> {
    let means: Vec<f64> = match r.extra.get("rank_lat_us").and_then(|v| v.as_array()) {
        Some(ranks) => ranks.iter().map(|x| x["mean"].as_f64().unwrap()).collect(),
        None => r.extra["rank_mean_us"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: neither rank_lat_us nor rank_mean_us"))
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect(),
    };
    assert_eq!(means.len(), world as usize, "{what}: every rank's time");
    means
}

/// The largest of `means`.
pub fn worst(means: &[f64]) -> f64 {
    means.iter().copied().fold(0.0, f64::max)
}

/// The slowest rank's mean time; the record's `slowest_rank` must be the rank that has it.
pub fn slowest_mean(r: &Record, world: u32, what: &str) -> f64 {
    let means = rank_means(r, world, what);
    let worst = worst(&means);
    let slowest = r.extra["slowest_rank"].as_u64().unwrap() as usize;
    assert!(
        (means[slowest] - worst).abs() < 1e-9,
        "{what}: slowest_rank {slowest} is not the slowest of {means:?}"
    );
    worst
}

/// busbw = algbw × (n−1)/n, to rounding.
pub fn assert_busbw(r: &Record, world: u32, what: &str) {
    let n = world as f64;
    let busbw = r.busbw_gbps.expect("busbw");
    assert!(
        (busbw - r.bw_gbps * (n - 1.0) / n).abs() <= 1e-9 * r.bw_gbps.max(1.0),
        "{what}: busbw {busbw} != bw {} x (n-1)/n",
        r.bw_gbps
    );
}

/// Rank 0's stderr after a `--matrix` run names the slowest rank per size and prints the matrix.
pub fn assert_slowest_and_matrix_said(err: &str) {
    assert!(err.contains("slowest rank per size"), "{err}");
    assert!(err.contains("row = source"), "--matrix: {err}");
}
