//! The `efabench.v1` record.

use serde::{Deserialize, Serialize};

/// Schema tag carried by every record.
pub const SCHEMA: &str = "efabench.v1";

/// Latency distribution over the timed iterations, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// One measured point: benchmark × variant × size (× peer).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub schema: String,
    pub bench: String,
    pub variant: String,
    pub size_bytes: u64,
    pub iters: u64,
    pub warmup: u64,
    pub world: u32,
    /// Point-to-point benchmarks: the rank measured against rank 0.
    pub peer: Option<u32>,
    pub provider: String,
    pub fabric: String,
    pub domains: Vec<String>,
    /// Version string of the libfabric actually loaded (null for benchmarks that do not use it).
    pub libfabric: Option<String>,
    pub rails: u32,
    pub mem: String,
    pub lat_us: LatencySummary,
    /// Payload bits in one direction per second, 10^9 bit/s.
    pub bw_gbps: f64,
    /// Bus bandwidth where a collective defines one (nccl-tests factors).
    pub busbw_gbps: Option<f64>,
    /// Messages per second, in millions.
    pub msg_rate_mops: f64,
    /// Sum of the link speeds used, when known.
    pub link_gbps: Option<f64>,
    /// bw_gbps / link_gbps × 100, when link_gbps is known.
    pub util_pct: Option<f64>,
    /// Verification failures; 0 when clean.
    pub errors: u64,
    /// Whether the payload was verified (false under --no-check).
    pub verified: bool,
    /// Per-NIC hardware-counter deltas when EFA counters are readable, else null.
    pub counters: Option<serde_json::Value>,
    pub host: String,
    /// RFC 3339, UTC.
    pub timestamp: String,
    pub version: String,
    pub git: Option<String>,
    /// Extra, benchmark-specific fields (allowed by the schema).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Every top-level key a record must carry (`docs/records.md`). Nullable fields (`peer`,
/// `libfabric`, `busbw_gbps`, `link_gbps`, `util_pct`, `counters`, `git`) must be present as
/// `null` rather than left out, so a reader can tell "unknown" from "written by an older tool".
pub const REQUIRED_FIELDS: &[&str] = &[
    "schema",
    "bench",
    "variant",
    "size_bytes",
    "iters",
    "warmup",
    "world",
    "peer",
    "provider",
    "fabric",
    "domains",
    "libfabric",
    "rails",
    "mem",
    "lat_us",
    "bw_gbps",
    "busbw_gbps",
    "msg_rate_mops",
    "link_gbps",
    "util_pct",
    "errors",
    "verified",
    "counters",
    "host",
    "timestamp",
    "version",
    "git",
];

/// The keys of `lat_us`.
pub const LATENCY_FIELDS: &[&str] = &["min", "p50", "p99", "max", "mean"];

impl Record {
    /// What the latency columns mean for this record: the benchmark sets
    /// `extra["lat_kind"]` (e.g. `one-way`, `round-trip/2`, `post-to-completion`). Records
    /// without it fall back on `docs/metrics.md`: a `read` is post-to-completion, `sendrecv`/`write`
    /// report one-way latency, anything else the time of one operation.
    pub fn lat_kind(&self) -> &str {
        match self.extra.get("lat_kind").and_then(|v| v.as_str()) {
            Some(k) => k,
            None => match self.bench.as_str() {
                "read" => "post-to-completion",
                "sendrecv" | "write" => "one-way",
                _ => "time per operation",
            },
        }
    }

    /// `extra["busbw_def"]` if the benchmark describes its bus-bandwidth definition itself.
    pub fn busbw_def(&self) -> Option<&str> {
        self.extra.get("busbw_def").and_then(|v| v.as_str())
    }

    /// Checks what serde cannot: the schema tag and that every float is finite (serde_json
    /// writes NaN and infinity as `null`, which would make the record unreadable later).
    /// The error names the record and the field.
    pub fn check(&self) -> Result<(), String> {
        if self.schema != SCHEMA {
            return Err(format!(
                "{}: schema is \"{}\", expected \"{SCHEMA}\"",
                self.describe(),
                self.schema
            ));
        }
        let floats = [
            ("lat_us.min", Some(self.lat_us.min)),
            ("lat_us.p50", Some(self.lat_us.p50)),
            ("lat_us.p99", Some(self.lat_us.p99)),
            ("lat_us.max", Some(self.lat_us.max)),
            ("lat_us.mean", Some(self.lat_us.mean)),
            ("bw_gbps", Some(self.bw_gbps)),
            ("busbw_gbps", self.busbw_gbps),
            ("msg_rate_mops", Some(self.msg_rate_mops)),
            ("link_gbps", self.link_gbps),
            ("util_pct", self.util_pct),
        ];
        for (name, v) in floats {
            if let Some(v) = v {
                if !v.is_finite() {
                    return Err(format!(
                        "{}: {name} is {v}, not a finite number",
                        self.describe()
                    ));
                }
            }
        }
        Ok(())
    }

    /// `bench/variant size B` (plus the peer when there is one), for messages.
    pub fn describe(&self) -> String {
        let peer = self.peer.map(|p| format!(" peer {p}")).unwrap_or_default();
        format!(
            "record {}/{} {} B{peer}",
            self.bench, self.variant, self.size_bytes
        )
    }
}
