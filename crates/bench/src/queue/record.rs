//! What a queue record holds beyond the common fields, as types: the run's GPU and options
//! ([`QueueFacts`]) and one point's counts and timings ([`QueueDetail`]). Records are written
//! from these structs and the summary reads them back as these structs, so a field cannot be
//! written under one name and read under another; `tests/golden/queue.keys` holds the names.

use std::collections::BTreeMap;

use efabench_gpu::queue::Release;
use efabench_gpu::Shape;
use efabench_record::{LatencySummary, Record};
use serde::{Deserialize, Serialize};

use super::measure::{LatencyNs, QueueMeasurement};

/// The record's detail fields read back as `T`; `None` for a record of another shape.
pub(crate) fn read<T: for<'de> Deserialize<'de>>(r: &Record) -> Option<T> {
    r.fields().ok()
}

/// Fields every record of a queue run repeats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueFacts {
    pub gpu: String,
    pub gpu_bus_id: String,
    pub sm_count: u32,
    /// Producers order each command after their earlier writes (`--release none` turns it off).
    pub release: bool,
    /// How they order it: `fence` (a system-scope fence before each batch), `store` (the slot's
    /// store is a system-scope release) or `none`.
    pub ordering: Release,
    /// Rings this machine cannot run (no GDRCopy, no concurrent managed access).
    pub skipped_rings: Vec<String>,
}

/// One point's own fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueDetail {
    pub ring: String,
    /// The shape as given (`SMx256`).
    pub producers: String,
    pub producer_grid: u32,
    pub producer_block: u32,
    pub producer_threads: u64,
    pub consumers: u32,
    pub mode: String,
    /// Distinct commands the consumers received.
    pub commands: u64,
    /// Commands the producers pushed.
    pub pushed: u64,
    pub per_producer: u64,
    /// The time budget ran out before every command was pushed.
    pub truncated: bool,
    /// First push to last quiet, GPU clock.
    pub elapsed_ns: u64,
    /// `round_trip` (blocking) or `push` (nbi).
    pub lat_kind: String,
    pub lat_samples: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub torn: u64,
    /// Out of range, or received although its producer never pushed it.
    pub out_of_range: u64,
    pub per_consumer: Vec<u64>,
    pub batch: u32,
    pub tail_poll: String,
    /// The smallest step of `%globaltimer` seen (FIFO rings; null for libefaxx).
    pub timer_step_ns: Option<u64>,
}

impl QueueDetail {
    /// The fields of a point of `ring` with producers `shape` (as given and as launched).
    pub fn new(
        ring: &str,
        shape: String,
        launched: Shape,
        consumers: u32,
        mode: &str,
        m: &QueueMeasurement,
    ) -> Self {
        QueueDetail {
            ring: ring.into(),
            producers: shape,
            producer_grid: launched.grid,
            producer_block: launched.block,
            producer_threads: m.producers,
            consumers,
            mode: mode.into(),
            commands: m.received,
            pushed: m.pushed,
            per_producer: m.per_producer,
            truncated: m.truncated,
            elapsed_ns: m.elapsed_ns,
            lat_kind: m.lat_kind.into(),
            lat_samples: m.latency.samples,
            lost: m.errors.lost,
            duplicated: m.errors.duplicated,
            torn: m.errors.torn,
            out_of_range: m.errors.out_of_range + m.errors.phantom,
            per_consumer: m.per_consumer.clone(),
            batch: m.batch,
            tail_poll: m.tail_poll.into(),
            timer_step_ns: m.timer_step_ns,
        }
    }
}

/// The GPU-clock distribution in microseconds, the record's `lat_us`.
pub fn lat_us(l: &LatencyNs) -> LatencySummary {
    LatencySummary {
        min: l.min / 1e3,
        p50: l.p50 / 1e3,
        p99: l.p99 / 1e3,
        max: l.max / 1e3,
        mean: l.mean / 1e3,
    }
}

/// What the run shows, from its records: the best rate per shape and mode, the slowest shape's
/// best nbi rate, the smallest ratio to the Libefaxx ring, and the one-thread round trip.
pub fn summarize(records: &[Record]) -> Vec<String> {
    let rows: Vec<(&Record, QueueDetail)> = records
        .iter()
        .filter(|r| r.bench == "queue" && r.errors == 0)
        .filter_map(|r| Some((r, read::<QueueDetail>(r)?)))
        .collect();
    let probe = |name: &str| {
        rows.iter()
            .find(|(_, d)| d.ring == name)
            .map(|(r, _)| r.lat_us.p50)
            .filter(|f| *f > 0.0)
    };
    let (bare, claimed) = (probe(super::FLOOR), probe(super::FLOOR_CLAIM));
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|(_, d)| d.ring != super::FLOOR && d.ring != super::FLOOR_CLAIM)
        .collect();
    let mut out = Vec::new();
    // Best nbi rate per shape (any ring but libefaxx, any consumer count) and libefaxx's.
    let mut best: BTreeMap<(String, String), (f64, String)> = BTreeMap::new();
    let mut lib: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for (r, d) in &rows {
        if !order.contains(&d.producers) {
            order.push(d.producers.clone());
        }
        let key = (d.mode.clone(), d.producers.clone());
        if d.ring == "libefaxx" {
            let e = lib.entry(key).or_insert(0.0);
            *e = e.max(r.msg_rate_mops);
        } else {
            let e = best.entry(key).or_insert((0.0, String::new()));
            if r.msg_rate_mops > e.0 {
                *e = (r.msg_rate_mops, format!("{} c{}", d.ring, d.consumers));
            }
        }
    }
    for mode in ["nbi", "blocking"] {
        let mut parts = Vec::new();
        for shape in &order {
            let key = (mode.to_string(), shape.clone());
            if let Some((b, who)) = best.get(&key) {
                let ratio = lib
                    .get(&key)
                    .filter(|l| **l > 0.0)
                    .map(|l| format!(", {:.0}x libefaxx", b / l))
                    .unwrap_or_default();
                parts.push(format!("{shape} {b:.1} ({who}{ratio})"));
            }
        }
        if !parts.is_empty() {
            out.push(format!("# best {mode} M ops/s: {}", parts.join("; ")));
        }
    }
    // The slowest shape's best nbi rate: the floor a kernel of any shape can count on.
    let floor = order
        .iter()
        .filter_map(|sh| Some((sh, best.get(&("nbi".to_string(), sh.clone()))?)))
        .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
    if let Some((sh, (b, who))) = floor {
        out.push(format!(
            "# lowest best nbi rate over the shapes: {b:.1} M ops/s at {sh} ({who})"
        ));
    }
    let ratio = order
        .iter()
        .flat_map(|sh| ["nbi", "blocking"].map(|m| (m, sh)))
        .filter_map(|(m, sh)| {
            let k = (m.to_string(), sh.clone());
            match (best.get(&k), lib.get(&k)) {
                (Some(b), Some(l)) if *l > 0.0 => Some((b.0 / l, format!("{m} {sh}"))),
                _ => None,
            }
        })
        .min_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((r, at)) = ratio {
        out.push(format!(
            "# smallest ratio of the best ring to libefaxx: {r:.0}x at {at}"
        ));
    }
    // The one-thread round trip of the ring with the lowest p99 (the tail is the harder half).
    let one = rows
        .iter()
        .filter(|(_, d)| d.mode == "blocking" && d.producers == "1x1" && d.ring != "libefaxx")
        .min_by(|a, b| a.0.lat_us.p99.total_cmp(&b.0.lat_us.p99));
    if let Some((r, d)) = one {
        out.push(format!(
            "# blocking 1x1 round trip (ring with the lowest p99): p50 {:.2} us, p99 {:.2} us on {} c{}",
            r.lat_us.p50, r.lat_us.p99, d.ring, d.consumers
        ));
    }
    // Every one-thread blocking ring against the round-trip probes of the same run.
    let over = |f: f64| {
        let mut parts: Vec<(f64, String)> = rows
            .iter()
            .filter(|(_, d)| d.mode == "blocking" && d.producers == "1x1")
            .map(|(r, d)| {
                let x = r.lat_us.p50 / f;
                (x, format!("{} c{} {x:.2}x", d.ring, d.consumers))
            })
            .collect();
        parts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let list: Vec<String> = parts.into_iter().map(|p| p.1).collect();
        if list.is_empty() {
            "no blocking 1x1 point".to_string()
        } else {
            list.join(", ")
        }
    };
    if let Some(f) = bare {
        out.push(format!(
            "# bare GPU -> CPU -> GPU round trip (the floor): p50 {f:.2} us; blocking 1x1 p50 over it: {}",
            over(f)
        ));
    }
    if let Some(c) = claimed {
        let of_floor = bare.map_or(String::new(), |f| format!(" ({:.2}x the floor)", c / f));
        out.push(format!(
            "# with a push's claim and ordering (floor+claim): p50 {c:.2} us{of_floor}; blocking 1x1 p50 over it: {}",
            over(c)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{Point, RunDetail, RunInfo};
    use efabench_gpu::queue::Errors;

    fn run(facts: &QueueFacts) -> RunInfo {
        RunInfo {
            bench: "queue".into(),
            world: 1,
            provider: "none".into(),
            fabric: "none".into(),
            domains: vec![],
            libfabric: None,
            rails: 0,
            mem: "queue".into(),
            link_gbps: None,
            verified: true,
            host: "h".into(),
            version: "0".into(),
            git: None,
            detail: RunDetail {
                own: facts.clone().into(),
                // The harness sets it for every run.
                gpu_sharing: Some(Vec::new()),
                ..RunDetail::default()
            },
        }
    }

    fn measurement(mops: f64, p50_ns: f64, p99_ns: f64) -> QueueMeasurement {
        QueueMeasurement {
            producers: 32,
            per_producer: 4,
            pushed: 128,
            received: 128,
            elapsed_ns: 1000,
            msg_rate_mops: mops,
            latency: LatencyNs {
                samples: 128,
                min: p50_ns,
                mean: p50_ns,
                p50: p50_ns,
                p99: p99_ns,
                max: p99_ns,
            },
            lat_kind: "push",
            errors: Errors::default(),
            truncated: false,
            timer_step_ns: Some(32),
            per_consumer: vec![64, 64],
            batch: 16,
            tail_poll: "cached",
        }
    }

    fn rec(ring: &str, mode: &str, shape: &str, c: u32, mops: f64, p50: f64, p99: f64) -> Record {
        let facts = QueueFacts {
            gpu: "H100".into(),
            gpu_bus_id: "0000:53:00.0".into(),
            sm_count: 132,
            release: true,
            ordering: Release::Fence,
            skipped_rings: vec!["gdr".into()],
        };
        let m = measurement(mops, p50 * 1e3, p99 * 1e3);
        let launched = shape
            .parse::<super::super::ProducerShape>()
            .unwrap()
            .resolve(132);
        let d = QueueDetail::new(ring, shape.into(), launched, c, mode, &m);
        run(&facts).record(Point {
            variant: format!("{ring}/{mode}/{shape}/c{c}"),
            size_bytes: 16,
            lat_us: lat_us(&m.latency),
            msg_rate_mops: mops,
            detail: d.into(),
            wall_s: Some(0.5),
            ..Point::default()
        })
    }

    #[test]
    fn records_keep_their_golden_keys() {
        let r = rec("pinned", "nbi", "SMx256", 2, 10.0, 1.0, 2.0);
        let got = crate::golden::key_paths(&serde_json::to_value(&r).unwrap());
        crate::golden::assert_golden_keys("queue", &got);
        let back: QueueDetail = read(&r).expect("the detail reads back");
        assert_eq!((back.producer_grid, back.producer_block), (132, 256));
        assert_eq!(back.timer_step_ns, Some(32));
    }

    #[test]
    fn the_summary_states_the_floor_the_ratio_and_the_round_trip() {
        let rs = vec![
            rec("pinned", "nbi", "1x1", 1, 7.5, 60.0, 61.0),
            rec("pinned", "nbi", "1x32", 4, 150.0, 3.0, 8.0),
            rec("libefaxx", "nbi", "1x1", 1, 0.084, 5.0, 500.0),
            rec("libefaxx", "nbi", "1x32", 1, 0.018, 28.0, 700.0),
            rec("pinned", "blocking", "1x1", 1, 0.3, 3.1, 3.2),
            rec("managed", "blocking", "1x1", 1, 0.03, 3.0, 775.0),
        ];
        let out = summarize(&rs).join("\n");
        assert!(
            out.contains("# lowest best nbi rate over the shapes: 7.5 M ops/s at 1x1 (pinned c1)"),
            "{out}"
        );
        assert!(
            out.contains("# smallest ratio of the best ring to libefaxx: 89x at nbi 1x1"),
            "{out}"
        );
        assert!(
            out.contains(
                "round trip (ring with the lowest p99): p50 3.10 us, p99 3.20 us on pinned c1"
            ),
            "{out}"
        );
        assert!(!out.contains("target") && !out.contains("met"), "{out}");
        assert!(!out.contains("the floor"), "{out}");
        // The bare round trip, when measured, is no ring: every blocking 1x1 ring over it.
        let mut with_floor = rs.clone();
        with_floor.push(rec("floor", "blocking", "1x1", 1, 0.5, 2.0, 2.4));
        let out = summarize(&with_floor).join("\n");
        assert!(
            out.contains("(the floor): p50 2.00 us; blocking 1x1 p50 over it: managed c1 1.50x, pinned c1 1.55x"),
            "{out}"
        );
        assert!(out.contains("on pinned c1"), "{out}");
        assert!(!out.contains("floor+claim"), "{out}");
        // The claimed probe is no ring either: the rings over it, and it over the bare one.
        with_floor.push(rec("floor+claim", "blocking", "1x1", 1, 0.4, 2.5, 2.9));
        let out = summarize(&with_floor).join("\n");
        assert!(
            out.contains("(floor+claim): p50 2.50 us (1.25x the floor); blocking 1x1 p50 over it: managed c1 1.20x, pinned c1 1.24x"),
            "{out}"
        );
        assert!(
            out.contains("(the floor): p50 2.00 us; blocking 1x1 p50 over it: managed c1 1.50x, pinned c1 1.55x"),
            "{out}"
        );
        let out = summarize(&rs[1..2]).join("\n");
        assert!(out.contains("at 1x32 (pinned c4)"), "{out}");
        assert!(!out.contains("libefaxx:"), "{out}");
    }
}
