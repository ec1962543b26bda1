//! What every benchmark shares once it has numbers: turning a measured point into a record,
//! and showing progress.
//!
//! A benchmark module measures; this module stamps the result with where it was measured
//! (provider, domains, library version, host, commit) so that records from different runs and
//! machines can be compared without guessing.

use std::io::IsTerminal;

use efabench_record::{LatencySummary, Record, SCHEMA};
use serde::Serialize;
use serde_json::{Map, Value};

use super::detail::{Detail, RunDetail};
use crate::stats::{block_medians_us, gbps, mops, Samples};

/// Facts about a run that every record of it repeats.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub bench: String,
    pub world: u32,
    pub provider: String,
    pub fabric: String,
    pub domains: Vec<String>,
    pub libfabric: Option<String>,
    pub rails: u32,
    pub mem: String,
    /// Sum of the link speeds of the NICs (or NVLinks) this run drives, Gbps.
    pub link_gbps: Option<f64>,
    pub verified: bool,
    pub host: String,
    pub version: String,
    pub git: Option<String>,
    /// Fields every record of the run repeats beyond these.
    pub detail: RunDetail,
}

/// One measured point of a benchmark.
#[derive(Clone, Debug, Default)]
pub struct Point {
    pub variant: String,
    pub size_bytes: u64,
    pub iters: u64,
    pub warmup: u64,
    pub peer: Option<u32>,
    pub lat_us: LatencySummary,
    pub bw_gbps: f64,
    pub busbw_gbps: Option<f64>,
    pub msg_rate_mops: f64,
    pub errors: u64,
    pub counters: Option<Value>,
    /// The links this point drove, when they differ from the run's (one GPU pair of a matrix).
    pub link_gbps: Option<f64>,
    /// The benchmark's own fields.
    pub detail: Detail,
    /// Medians of consecutive blocks of the timed iterations, µs (`lat_p50_blocks_us`, for
    /// `compare`): the points of [`Point::timed`].
    pub blocks_us: Option<Vec<f64>>,
    /// The point's wall time on rank 0, s (`wall_s`): the harness sets it.
    pub wall_s: Option<f64>,
    /// A threshold the user set on this point's metrics (`--min-bw`); not part of the record.
    pub gate: Option<Gate>,
}

/// A user-chosen threshold on a metric (`--min-bw 10`): the harness names every point that
/// misses it, and the run exits 1.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    /// The option and its unit, as the user wrote it (`--min-bw 10 GB/s`).
    pub what: String,
    pub value: f64,
    pub min: f64,
}

impl Gate {
    pub fn passed(&self) -> bool {
        self.value >= self.min
    }
}

/// The fields of a record beyond the common ones, flat: the run's, the point's (a point's field
/// of a name the run has too replaces it), the block medians and the wall time.
#[derive(Serialize)]
struct Fields<'a> {
    #[serde(flatten)]
    run: &'a RunDetail,
    #[serde(flatten)]
    point: &'a Detail,
    /// `stats::BLOCK_MEDIANS_FIELD`.
    #[serde(skip_serializing_if = "Option::is_none")]
    lat_p50_blocks_us: Option<&'a [f64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wall_s: Option<f64>,
}

impl<'a> Fields<'a> {
    /// The fields of `p`'s record in a run of `run`.
    fn of(run: &'a RunDetail, p: &'a Point) -> Fields<'a> {
        Fields {
            run,
            point: &p.detail,
            lat_p50_blocks_us: p.blocks_us.as_deref(),
            wall_s: p.wall_s,
        }
    }

    /// The record's `extra`: every field a key (serde names, `rename`, `skip_serializing_if`
    /// apply).
    fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        }
    }
}

impl Point {
    /// Sets the benchmark's own fields.
    pub fn detail(mut self, detail: impl Into<Detail>) -> Self {
        self.detail = detail.into();
        self
    }

    /// The fields this point adds to its record beyond the common ones (without the run's).
    #[cfg(test)]
    pub(crate) fn fields(&self) -> Value {
        Value::Object(Fields::of(&RunDetail::default(), self).to_map())
    }

    /// The figures of timed iterations that each move `ops` operations of `size` bytes, one
    /// operation's own time being an iteration's over `divisor`: 2 for a round trip (one way),
    /// the window for a window of messages in flight. `lat_us` is that per-operation time;
    /// bandwidth and message rate count the operations over their own time (the iterations'
    /// total × `ops` / `divisor`: a stream's whole time, a ping-pong's one-way halves). `lat_p50_blocks_us`
    /// keeps the medians of consecutive blocks for `compare` (empty with under 20 iterations).
    pub fn timed(samples_ns: &[u64], size: u64, ops: u64, divisor: u64) -> Self {
        let mut samples = Samples::from_vec(samples_ns.to_vec());
        let divisor = divisor.max(1);
        let busy_ns =
            (u128::from(samples.total_ns()) * u128::from(ops) / u128::from(divisor)) as u64;
        let total_ops = samples.len() as u64 * ops;
        Point {
            size_bytes: size,
            lat_us: samples.summary_us(divisor as f64),
            bw_gbps: gbps(size * total_ops, busy_ns),
            msg_rate_mops: mops(total_ops, busy_ns),
            // Empty when too few iterations to cut into blocks: the field is always there.
            blocks_us: Some(block_medians_us(samples_ns, divisor as f64)),
            ..Point::default()
        }
    }
}

impl RunInfo {
    /// The record of one point, with utilisation computed against the links this run drives.
    pub fn record(&self, p: Point) -> Record {
        let link_gbps = p.link_gbps.or(self.link_gbps);
        let util_pct = link_gbps
            .filter(|l| *l > 0.0)
            .map(|l| (p.bw_gbps / l * 100.0 * 100.0).round() / 100.0);
        let extra = Fields::of(&self.detail, &p).to_map();
        Record {
            schema: SCHEMA.to_string(),
            bench: self.bench.clone(),
            variant: p.variant,
            size_bytes: p.size_bytes,
            iters: p.iters,
            warmup: p.warmup,
            world: self.world,
            peer: p.peer,
            provider: self.provider.clone(),
            fabric: self.fabric.clone(),
            domains: self.domains.clone(),
            libfabric: self.libfabric.clone(),
            rails: self.rails,
            mem: self.mem.clone(),
            lat_us: p.lat_us,
            bw_gbps: p.bw_gbps,
            busbw_gbps: p.busbw_gbps,
            msg_rate_mops: p.msg_rate_mops,
            link_gbps,
            util_pct,
            errors: p.errors,
            verified: self.verified,
            counters: p.counters,
            host: self.host.clone(),
            timestamp: efabench_record::now_rfc3339(),
            version: self.version.clone(),
            git: self.git.clone(),
            extra,
        }
    }
}

/// A progress bar on stderr, shown only when stderr is a terminal (never in logs or CI).
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    pub fn new(enabled: bool, steps: u64, what: &str) -> Self {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(steps);
            b.set_style(
                indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                    .expect("static template")
                    .progress_chars("=> "),
            );
            b.set_prefix(what.to_string());
            b
        });
        Progress { bar }
    }

    pub fn step(&self, msg: String) {
        if let Some(b) = &self.bar {
            b.set_message(msg);
            b.inc(1);
        }
    }

    /// Print a line without tearing the bar.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(link: Option<f64>) -> RunInfo {
        RunInfo {
            bench: "sendrecv".into(),
            world: 2,
            provider: "tcp".into(),
            fabric: "127.0.0.0/8".into(),
            domains: vec!["lo".into()],
            libfabric: Some("1.17.0".into()),
            rails: 1,
            mem: "host".into(),
            link_gbps: link,
            verified: true,
            host: "h".into(),
            version: "0.1.0".into(),
            git: None,
            detail: RunDetail::default(),
        }
    }

    #[test]
    fn record_carries_the_run_and_computes_utilisation() {
        let r = info(Some(100.0)).record(Point {
            variant: "stream".into(),
            size_bytes: 4096,
            bw_gbps: 25.0,
            peer: Some(1),
            ..Point::default()
        });
        assert_eq!(r.schema, SCHEMA);
        assert_eq!(r.util_pct, Some(25.0));
        assert_eq!(r.peer, Some(1));
        assert_eq!(r.libfabric.as_deref(), Some("1.17.0"));
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains("\"util_pct\":25.0"), "{line}");
    }

    #[test]
    fn unknown_link_speed_leaves_utilisation_null() {
        let r = info(None).record(Point::default());
        assert_eq!((r.link_gbps, r.util_pct), (None, None));
        let v: Value = serde_json::to_value(&r).unwrap();
        assert!(v["util_pct"].is_null() && v["counters"].is_null());
    }

    #[test]
    fn typed_details_become_record_fields_point_over_run() {
        let mut run = info(None);
        run.detail = RunDetail {
            strategy: Some("split"),
            mr: Some("host".into()),
            own: crate::pairs::PairsFacts {
                schedule: "ring".into(),
            }
            .into(),
            ..RunDetail::default()
        };
        let p = Point {
            wall_s: Some(0.5),
            ..Point::timed(&[1000; 40], 8, 1, 1)
        };
        let r = run.record(p.clone());
        let keys: Vec<&str> = r.extra.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                crate::stats::BLOCK_MEDIANS_FIELD,
                "mr",
                "schedule",
                "strategy",
                "wall_s"
            ]
        );
        assert_eq!(r.extra["wall_s"], Value::from(0.5));
        assert_eq!(
            r.extra["lat_p50_blocks_us"],
            serde_json::json!(block_medians_us(&[1000; 40], 1.0))
        );
        // The run's fields are not the point's.
        let own = p.fields();
        let own: Vec<&String> = own.as_object().unwrap().keys().collect();
        assert_eq!(own, ["lat_p50_blocks_us", "wall_s"]);
        assert_eq!(Point::default().fields(), serde_json::json!({}));
    }

    #[test]
    fn timed_points_count_operations_over_their_own_time() {
        // Round trips of 2 and 4 µs moving 1000 bytes each way: one-way 1 and 2 µs.
        let p = Point::timed(&[2000, 4000], 1000, 1, 2);
        assert_eq!((p.size_bytes, p.lat_us.min, p.lat_us.max), (1000, 1.0, 2.0));
        assert_eq!(p.bw_gbps, 2.0 * 8000.0 / 3000.0);
        assert_eq!(p.msg_rate_mops, 2.0 * 1000.0 / 3000.0);
        // Two windows of 4 messages in 8 and 16 µs: per message 2 and 4 µs, 8 in 24 µs.
        let s = Point::timed(&[8000, 16000], 1000, 4, 4);
        assert_eq!((s.lat_us.min, s.lat_us.max), (2.0, 4.0));
        assert_eq!(s.bw_gbps, 8.0 * 8000.0 / 24000.0);
        assert_eq!(s.msg_rate_mops, 8.0 * 1000.0 / 24000.0);
        let none = Point::timed(&[], 8, 1, 1);
        assert_eq!((none.bw_gbps, none.msg_rate_mops), (0.0, 0.0));
    }

    #[test]
    fn a_gate_passes_at_its_minimum_and_not_below() {
        let g = |value| Gate {
            what: "--min-bw 10 GB/s".into(),
            value,
            min: 10.0,
        };
        assert!(g(10.0).passed() && g(11.0).passed());
        assert!(!g(9.99).passed() && !g(f64::NAN).passed());
    }
}
