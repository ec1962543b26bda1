//! From every rank's [`Measured`] to what an all-to-all record says, shared by `alltoall` and
//! `alltoallv`: each rank's times, the slowest rank (whose mean time per iteration sets the
//! bandwidth), the per-peer arrival matrix, per-rail bytes; and the summary lines under the
//! table (slowest rank per size, the node behind a slow exchange, `--matrix`).

use efabench_record::{LatencySummary, Record};
use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::harness::{Ctx, Detail, Measured, Point};
use crate::stats::Samples;

/// One rank's outcome of a point beyond its samples (travels in [`Measured::detail`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankOutcome {
    /// Per-rail bytes and operations of the timed part.
    pub per_rail: Vec<RailBytes>,
    /// Warm-up iterations run.
    pub warmup_done: u64,
    /// What ended the timed loop: `count` or `time`.
    pub stopped_by: String,
    /// Mean arrival time of each source's chunk after this rank started the iteration, in the
    /// timed loop, ns.
    pub src_delay_ns: Vec<u64>,
    /// Median arrival time of each source's chunk in the barrier-started probes, ns.
    #[serde(default)]
    pub src_probe_ns: Vec<u64>,
}

/// Bytes and operations one rail carried (`per_rail` of the records), as the mesh counts them.
pub type RailBytes = crate::mesh::RailLoad;

/// One rank's time per iteration, µs.
#[derive(Clone, Debug, Serialize)]
pub struct RankTime {
    pub rank: usize,
    pub host: Option<String>,
    pub p50: f64,
    pub mean: f64,
    pub max: f64,
}

/// What every rank's outcome of one point adds up to.
pub struct Outcome {
    pub ranks: Vec<RankTime>,
    pub slowest: usize,
    pub slowest_host: Option<String>,
    /// The slowest rank's mean time per iteration, ns.
    pub time_ns: f64,
    /// The slowest rank's distribution.
    pub lat_us: LatencySummary,
    /// Timed and warm-up iterations (every rank stops at the same iteration).
    pub timed: u64,
    pub warm: u64,
    pub stopped_by: String,
    /// Every rank's per-rail counts, summed by rail.
    pub per_rail: Vec<RailBytes>,
    /// `delay_ns[dst][src]`: mean arrival time at `dst` of `src`'s chunk in the timed loop;
    /// `probe_ns[dst][src]` its median in the probes.
    delay_ns: Vec<Vec<u64>>,
    probe_ns: Vec<Vec<u64>>,
}

impl Outcome {
    pub fn of(ctx: &Ctx, all: &[Measured], warmup: u64) -> Outcome {
        // A rank that sent no outcome counts as an empty one.
        let outs: Vec<RankOutcome> = all
            .iter()
            .map(|m| m.part::<RankOutcome>().cloned().unwrap_or_default())
            .collect();
        let mut ranks = Vec::new();
        let mut slowest = (0usize, 0f64);
        let mut slow_samples = Vec::new();
        for (r, m) in all.iter().enumerate() {
            let sum = Samples::from_vec(m.samples_ns.clone()).summary_us(1.0);
            if sum.mean >= slowest.1 {
                slowest = (r, sum.mean);
                slow_samples = m.samples_ns.clone();
            }
            ranks.push(RankTime {
                rank: r,
                host: ctx.hosts.get(r).cloned(),
                p50: sum.p50,
                mean: sum.mean,
                max: sum.max,
            });
        }
        let mut per_rail: Vec<RailBytes> = Vec::new();
        for o in &outs {
            for (i, x) in o.per_rail.iter().enumerate() {
                if per_rail.len() <= i {
                    per_rail.push(RailBytes {
                        rail: i,
                        domain: x.domain.clone(),
                        ..RailBytes::default()
                    });
                }
                per_rail[i].bytes += x.bytes;
                per_rail[i].ops += x.ops;
            }
        }
        let first = outs.first().cloned().unwrap_or_default();
        Outcome {
            slowest: slowest.0,
            slowest_host: ctx.hosts.get(slowest.0).cloned(),
            time_ns: slowest.1 * 1000.0,
            lat_us: Samples::from_vec(slow_samples).summary_us(1.0),
            timed: all.first().map(|m| m.samples_ns.len() as u64).unwrap_or(0),
            warm: if outs.is_empty() {
                warmup
            } else {
                first.warmup_done
            },
            stopped_by: first.stopped_by,
            ranks,
            per_rail,
            probe_ns: outs.iter().map(|o| o.src_probe_ns.clone()).collect(),
            delay_ns: outs.into_iter().map(|o| o.src_delay_ns).collect(),
        }
    }

    /// `bytes` over the slowest rank's time, Gbps (0 without a time).
    pub fn gbps(&self, bytes: u64) -> f64 {
        if self.time_ns > 0.0 {
            bytes as f64 * 8.0 / self.time_ns
        } else {
            0.0
        }
    }

    /// `matrix[src][dst]`: the bytes `src` sent `dst` (`bytes(src, dst)`) over their arrival
    /// time at `dst` (`delay_ns[dst][src]`), Gbps; 0 on the diagonal and where nothing was timed.
    fn matrix(&self, delay_ns: &[Vec<u64>], bytes: impl Fn(usize, usize) -> u64) -> Vec<Vec<f64>> {
        let n = self.ranks.len();
        let mut m = vec![vec![0f64; n]; n];
        for (dst, d) in delay_ns.iter().enumerate().take(n) {
            for (src, &ns) in d.iter().enumerate().take(n) {
                if src != dst && ns > 0 {
                    m[src][dst] = (bytes(src, dst) as f64 * 8.0 / ns as f64 * 1e4).round() / 1e4;
                }
            }
        }
        m
    }

    /// The record of a point of `n` ranks: algbw = `bytes` (what the benchmark counts; `algbw`
    /// says so in words, for `busbw_def`) over the slowest rank's time, busbw = algbw × (n−1)/n,
    /// `cell(src, dst)` the bytes of each chunk for the arrival matrix, `messages` the chunks
    /// one rank sends per iteration; `own` the benchmark's own fields, beside the fields every
    /// all-to-all record has (`lat_kind`, `busbw_def`, `stopped_by`, the slowest rank, `rank_lat_us`,
    /// `matrix_gbps`, `probe_matrix_gbps`, `per_rail`, `bw_GBps`).
    pub fn point<T>(
        &self,
        n: usize,
        (variant, size_bytes): (String, u64),
        (bytes, algbw): (u64, &str),
        cell: impl Fn(usize, usize) -> u64,
        messages: f64,
        own: T,
    ) -> Point
    where
        Exchange<T>: Into<Detail>,
    {
        let bw = self.gbps(bytes);
        let fields = ExchangeFields {
            lat_kind: "time per iteration of the slowest rank",
            busbw_def: format!("algbw x (n-1)/n with n = {n}; algbw = {algbw}, Gbps"),
            stopped_by: self.stopped_by.clone(),
            slowest_rank: self.slowest,
            slowest_host: self.slowest_host.clone(),
            rank_lat_us: self.ranks.clone(),
            matrix_gbps: self.matrix(&self.delay_ns, &cell),
            probe_matrix_gbps: self.matrix(&self.probe_ns, &cell),
            per_rail: self.per_rail.clone(),
            bw_gbytes_per_s: bw / 8.0,
        };
        Point {
            variant,
            size_bytes,
            iters: self.timed,
            warmup: self.warm,
            peer: None,
            lat_us: self.lat_us,
            bw_gbps: bw,
            busbw_gbps: Some(bw * (n as f64 - 1.0) / n as f64),
            msg_rate_mops: if self.time_ns > 0.0 {
                messages * 1000.0 / self.time_ns
            } else {
                0.0
            },
            ..Point::default()
        }
        .detail(Exchange { own, fields })
    }
}

/// The fields of an all-to-all record beyond the common ones: the benchmark's own (`T`) and
/// those every all-to-all has (where both name a field, the latter's is written).
#[derive(Clone, Debug, Serialize)]
pub struct Exchange<T> {
    #[serde(flatten)]
    own: T,
    #[serde(flatten)]
    fields: ExchangeFields,
}

/// The record fields every all-to-all point has, beyond the common ones and the benchmark's own.
#[derive(Clone, Debug, Serialize)]
pub struct ExchangeFields {
    lat_kind: &'static str,
    busbw_def: String,
    stopped_by: String,
    slowest_rank: usize,
    slowest_host: Option<String>,
    rank_lat_us: Vec<RankTime>,
    matrix_gbps: Vec<Vec<f64>>,
    probe_matrix_gbps: Vec<Vec<f64>>,
    per_rail: Vec<RailBytes>,
    #[serde(rename = "bw_GBps")]
    bw_gbytes_per_s: f64,
}

/// The fields of a record these summaries read.
#[derive(Deserialize)]
struct Seen {
    slowest_rank: usize,
    slowest_host: Option<String>,
    matrix_gbps: Vec<Vec<f64>>,
    #[serde(default)]
    probe_matrix_gbps: Vec<Vec<f64>>,
    rank_lat_us: Vec<SeenRank>,
}

#[derive(Deserialize)]
struct SeenRank {
    host: Option<String>,
}

fn seen(r: &Record) -> Result<Seen, BenchError> {
    r.fields()
        .map_err(|e| BenchError::failed(format!("an all-to-all record lacks its own fields: {e}")))
}

/// Margin of [`slowest_node`], percent (as `pairs --suspect-below`'s default).
const SUSPECT_BELOW_PCT: f64 = 60.0;

/// The lines under the table: the slowest rank per size, the node behind a slow exchange (when
/// `suspects`: only equal chunks make the per-peer rates comparable), and (`matrix`) every
/// size's per-peer bandwidth matrix.
pub fn summary(records: &[Record], suspects: bool, matrix: bool) -> Vec<String> {
    let all: Vec<(&Record, Seen)> = records
        .iter()
        .filter_map(|r| seen(r).ok().map(|s| (r, s)))
        .collect();
    let mut out =
        vec!["# slowest rank per size (its mean time per iteration sets bw):".to_string()];
    for (r, s) in &all {
        out.push(format!(
            "#   {:>12} B  rank {} on {}  ({:.2} us)",
            r.size_bytes,
            s.slowest_rank,
            s.slowest_host.as_deref().unwrap_or("?"),
            r.lat_us.mean
        ));
    }
    // The node behind a slow all-to-all: every rank waits for the slowest chunk, so the
    // ranks' times are alike; the per-peer arrival matrix shows whose chunks are late.
    for (r, s) in all.iter().filter(|_| suspects) {
        out.extend(slowest_node(r.size_bytes, s));
    }
    if matrix {
        for (r, s) in &all {
            out.push(format!(
                "# per-peer bandwidth at {} B, Gbps; row = source, column = destination:",
                r.size_bytes
            ));
            let n = s.matrix_gbps.len();
            let mut head = format!("# {:>6}", "src\\dst");
            for d in 0..n {
                head.push_str(&format!(" {d:>9}"));
            }
            out.push(head);
            for (src, row) in s.matrix_gbps.iter().enumerate() {
                let mut line = format!("# {src:>7}");
                for (d, c) in row.iter().enumerate() {
                    if d == src {
                        line.push_str(&format!(" {:>9}", "-"));
                    } else {
                        line.push_str(&format!(" {c:>9.2}"));
                    }
                }
                out.push(line);
            }
        }
    }
    out
}

/// Ordered pairs of a `[src][dst]` Gbps matrix (the diagonal and zeros left out).
pub fn matrix_pairs(m: &[Vec<f64>]) -> Vec<crate::locate::PairBw> {
    let mut pairs = Vec::new();
    for (src, row) in m.iter().enumerate() {
        for (dst, &gbps) in row.iter().enumerate() {
            if src != dst && gbps > 0.0 {
                pairs.push(crate::locate::PairBw { src, dst, gbps });
            }
        }
    }
    pairs
}

/// The slowest node of one record from its two arrival matrices (`matrix_gbps`, the timed
/// loop's; `probe_matrix_gbps`, the barrier-started probes'), judged as `pairs` judges its
/// pair matrix and named where both agree ([`crate::locate::arrival_suspect`]).
fn slowest_node(size: u64, s: &Seen) -> Vec<String> {
    use crate::locate::{arrival_suspect, ArrivalVerdict, Suspect};
    let n = s.matrix_gbps.len();
    let host = |rank: usize| {
        s.rank_lat_us
            .get(rank)
            .and_then(|x| x.host.clone())
            .unwrap_or_else(|| "?".into())
    };
    let looped = matrix_pairs(&s.matrix_gbps);
    let probed = matrix_pairs(&s.probe_matrix_gbps);
    let named = |x: &Suspect| {
        format!(
            "rank {} on {} ({})",
            x.rank,
            host(x.rank),
            x.direction.describe()
        )
    };
    // Only the worst: once its chunks are late every rank's next iteration starts late, so the
    // arrival rates of the others are not clean pair measurements (`pairs` judges further nodes).
    match arrival_suspect(n, &looped, &probed, SUSPECT_BELOW_PCT / 100.0) {
        ArrivalVerdict::Nobody if n >= 3 => vec![format!(
            "# no suspect at {size} B: every rank's chunks (sent and received) arrive at \
             {SUSPECT_BELOW_PCT}% or more of the per-peer rate of the pairs without it"
        )],
        ArrivalVerdict::Nobody => Vec::new(),
        ArrivalVerdict::Named { looped, probed } => vec![format!(
            "# slowest node at {size} B: {}, per-peer chunk rate: {}; after a barrier: {:.0}%",
            named(&looped),
            looped.evidence(),
            probed.ratio() * 100.0
        )],
        ArrivalVerdict::Unclear { looped, probed } => vec![format!(
            "# no clear suspect at {size} B: the timed loop's arrivals point at {} at {:.0}%, \
             those after a barrier at {}; run `pairs` to measure each node alone",
            named(&looped),
            looped.ratio() * 100.0,
            probed.as_ref().map_or("nobody".to_string(), |x| format!(
                "{} at {:.0}%",
                named(x),
                x.ratio() * 100.0
            ))
        )],
    }
}
