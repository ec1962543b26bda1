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
