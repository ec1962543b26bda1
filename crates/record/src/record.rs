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

/// The extra field that says which ranks put their GPU buffers on one GPU (`docs/records.md`).
pub const GPU_SHARING: &str = "gpu_sharing";

/// Ranks of one host whose GPU buffers are on the same GPU: one element of `gpu_sharing`.
///
/// Two processes on one GPU do not run at once unless NVIDIA MPS gives them one shared context:
/// without it the GPU time-slices between them, and GPU-side timings include waiting for the
/// other's slice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedGpu {
    /// Host name of the ranks.
    pub host: String,
    /// The GPU's index on that host.
    pub gpu: i32,
    /// The ranks on it, ascending (at least two).
    pub ranks: Vec<u32>,
    /// Whether an NVIDIA MPS control daemon served the ranks (false: time-sliced).
    pub mps: bool,
}

impl SharedGpu {
    /// `ranks 0,1 on GPU 0 of host-a`.
    pub fn describe(&self) -> String {
        let ranks: Vec<String> = self.ranks.iter().map(|r| r.to_string()).collect();
        format!(
            "ranks {} on GPU {} of {}",
            ranks.join(","),
            self.gpu,
            self.host
        )
    }
}

/// What a record says about ranks sharing a GPU (`gpu_sharing`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuSharing {
    /// The record has no `gpu_sharing` field (written before efabench recorded it).
    Unknown,
    /// `null`: no two ranks of one host used one GPU (or the run used no GPU memory).
    NotShared,
    /// These GPUs each served several ranks.
    Shared(Vec<SharedGpu>),
}

impl GpuSharing {
    /// The field's value for a run: `null` when no group shares a GPU.
    pub fn to_value(groups: &[SharedGpu]) -> serde_json::Value {
        if groups.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::to_value(groups).unwrap_or(serde_json::Value::Null)
        }
    }

    /// The groups sharing a GPU without MPS (their GPU work was time-sliced).
    pub fn time_sliced(&self) -> Vec<&SharedGpu> {
        match self {
            GpuSharing::Shared(g) => g.iter().filter(|g| !g.mps).collect(),
            _ => Vec::new(),
        }
    }

    /// True when some ranks shared a GPU without MPS.
    pub fn is_time_sliced(&self) -> bool {
        !self.time_sliced().is_empty()
    }
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
    /// What the latency columns mean for this record: the benchmark sets `lat_kind`
    /// (e.g. `one-way`, `round-trip/2`, `post-to-completion`). Records without it fall back on
    /// `docs/metrics.md`: a `read` is post-to-completion, `sendrecv`/`write` report one-way
    /// latency, anything else the time of one operation.
    pub fn lat_kind(&self) -> String {
        match self.common().lat_kind {
            Some(k) => k,
            None => match self.bench.as_str() {
                "read" => "post-to-completion",
                "sendrecv" | "write" => "one-way",
                _ => "time per operation",
            }
            .to_string(),
        }
    }

    /// `busbw_def` if the benchmark describes its bus-bandwidth definition itself.
    pub fn busbw_def(&self) -> Option<String> {
        self.common().busbw_def
    }

    /// The record's `gpu_sharing` field, typed. A value of the wrong shape reads as
    /// [`GpuSharing::Unknown`]; [`Record::check`] refuses such a record.
    pub fn gpu_sharing(&self) -> GpuSharing {
        self.sharing().unwrap_or(GpuSharing::Unknown)
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
        if let Err(e) = self.sharing() {
            return Err(format!(
                "{}: {GPU_SHARING} is not null or a list of {{host, gpu, ranks, mps}}: {e}",
                self.describe()
            ));
        }
        if let Err(e) = self.fields::<crate::fields::Common>() {
            // The error of the whole map does not say which field; the field alone does.
            return Err(match crate::fields::Common::bad_field(&self.extra) {
                Some((k, e)) => format!("{}: {k}: {e}", self.describe()),
                None => format!("{}: {e}", self.describe()),
            });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::sample;
    use serde_json::json;

    #[test]
    fn gpu_sharing_reads_every_state() {
        let mut r = sample("proxy", "nbi", 1024, 1.0, 1.0);
        assert_eq!(r.gpu_sharing(), GpuSharing::Unknown, "an older record");
        r.extra.insert(GPU_SHARING.into(), json!(null));
        assert_eq!(r.gpu_sharing(), GpuSharing::NotShared);
        assert!(!r.gpu_sharing().is_time_sliced());
        let groups = vec![
            SharedGpu {
                host: "a".into(),
                gpu: 0,
                ranks: vec![0, 2],
                mps: false,
            },
            SharedGpu {
                host: "a".into(),
                gpu: 1,
                ranks: vec![1, 3],
                mps: true,
            },
        ];
        let v = GpuSharing::to_value(&groups);
        assert_eq!(
            v,
            json!([{"host": "a", "gpu": 0, "ranks": [0, 2], "mps": false},
                   {"host": "a", "gpu": 1, "ranks": [1, 3], "mps": true}])
        );
        assert_eq!(GpuSharing::to_value(&[]), json!(null));
        r.extra.insert(GPU_SHARING.into(), v);
        let s = r.gpu_sharing();
        assert_eq!(s, GpuSharing::Shared(groups.clone()));
        assert_eq!(s.time_sliced(), vec![&groups[0]]);
        assert_eq!(groups[0].describe(), "ranks 0,2 on GPU 0 of a");
        assert!(r.check().is_ok());
        // Through JSON and back, as a reader sees it.
        let back: Record = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.gpu_sharing(), GpuSharing::Shared(groups));
    }

    #[test]
    fn a_malformed_gpu_sharing_is_refused() {
        let mut r = sample("proxy", "nbi", 1024, 1.0, 1.0);
        r.extra
            .insert(GPU_SHARING.into(), json!("ranks 0,1 on GPU 0"));
        assert_eq!(r.gpu_sharing(), GpuSharing::Unknown);
        let e = r.check().unwrap_err();
        assert!(e.contains("gpu_sharing is not null or a list"), "{e}");
        r.extra
            .insert(GPU_SHARING.into(), json!([{"gpu": 0, "ranks": [0, 1]}]));
        assert!(r.check().is_err());
    }
}
