//! EFA hardware counters: snapshots, deltas and rates.
//!
//! Why listing and not a fixed table: the counter set depends on the driver (14 names on 2019
//! drivers, 35 on r2.17+, and before r1.14 the same list appears at device *and* port scope —), so every file of `hw_counters/` and `ports/N/hw_counters/` is read
//! and nothing is assumed. `lifespan` is the driver's cache time in ms, not a counter, and is left
//! out. Values are cumulative since driver load, so everything useful is a difference between two
//! snapshots. Note that reading port counters makes the driver issue admin commands, so
//! `submitted_cmds`/`completed_cmds` rise merely because we looked.
//!
//! [`Snapshot::read`] is cheap (a few small reads per counter) and meant to be called around every
//! benchmark size; [`Snapshot::delta_json`] is what goes into a record's `counters` field.

use crate::root::Root;
use crate::topo::VENDOR_AMAZON;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Instant;

/// Counters of one EFA device at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NicCounters {
    pub name: String,
    /// The port whose counters are in `port` (EFA has only port 1).
    pub port_num: Option<u32>,
    pub port: BTreeMap<String, u64>,
    pub device: BTreeMap<String, u64>,
}

/// All EFA devices' counters at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub at: Instant,
    pub nics: Vec<NicCounters>,
}

/// The change of one NIC's counters between two snapshots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NicDelta {
    pub name: String,
    pub seconds: f64,
    pub port: BTreeMap<String, u64>,
    pub device: BTreeMap<String, u64>,
    /// Counters that went backwards (driver reload or device reset): their delta is unknown and
    /// they are left out of `port`/`device`.
    pub reset: Vec<String>,
}

/// Live rates of one NIC over a delta.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rates {
    pub tx_gbps: f64,
    pub rx_gbps: f64,
    pub tx_pps: f64,
    pub rx_pps: f64,
    pub rx_drops: u64,
    pub retrans_pkts: u64,
    /// Sum of all error-class counters (see [`is_error_counter`]).
    pub errors: u64,
}

/// Counters whose increase means trouble.
pub fn is_error_counter(name: &str) -> bool {
    name.ends_with("_err")
        || name == "rx_drops"
        || name == "no_completion_cmds"
        || name.starts_with("retrans_")
        || name == "unresponsive_remote_events"
        || name == "impaired_remote_conn_events"
}

fn read_dir_counters(root: &Root, dir: &str) -> Option<BTreeMap<String, u64>> {
    if !root.is_dir(dir) {
        return None;
    }
    let mut out = BTreeMap::new();
    for (name, host) in root.list_files(dir) {
        if name == "lifespan" {
            continue;
        }
        // Odd content (empty, text, EIO on read) is skipped, never fatal.
        if let Some(v) = std::fs::read(&host)
            .ok()
            .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<u64>().ok())
        {
            out.insert(name, v);
        }
    }
    Some(out)
}

/// Names of the EFA RDMA devices (PCI vendor 0x1d0f) under `/sys/class/infiniband`.
/// Sorted by PCI address (the order `topo` uses), then name.
pub fn efa_device_names(root: &Root) -> Vec<String> {
    let mut v: Vec<(String, String)> = root
        .list("/sys/class/infiniband")
        .into_iter()
        .filter(|n| {
            root.read_trim(format!("/sys/class/infiniband/{n}/device/vendor"))
                .map(|v| v.eq_ignore_ascii_case(VENDOR_AMAZON))
                .unwrap_or(false)
        })
        .map(|n| {
            let bdf = root
                .resolve(format!("/sys/class/infiniband/{n}/device"))
                .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
                .unwrap_or_default();
            (bdf, n)
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

impl NicCounters {
    /// A counter by name, port scope first.
    pub fn get(&self, counter: &str) -> Option<u64> {
        self.port
            .get(counter)
            .or_else(|| self.device.get(counter))
            .copied()
    }
}

impl Snapshot {
    /// Read every counter of every EFA device. `None` when no EFA device has a readable
    /// `hw_counters` directory (no EFA, or a driver older than r1.4.0).
    pub fn read(root: &Root) -> Option<Snapshot> {
        let at = Instant::now();
        let mut nics = Vec::new();
        for name in efa_device_names(root) {
            let base = format!("/sys/class/infiniband/{name}");
            let device = read_dir_counters(root, &format!("{base}/hw_counters"));
            let mut port = None;
            let mut port_num = None;
            for p in root.list(format!("{base}/ports")) {
                let Ok(n) = p.parse::<u32>() else { continue };
                if let Some(c) = read_dir_counters(root, &format!("{base}/ports/{p}/hw_counters")) {
                    port = Some(c);
                    port_num = Some(n);
                    break;
                }
            }
            if device.is_none() && port.is_none() {
                continue;
            }
            nics.push(NicCounters {
                name,
                port_num,
                port: port.unwrap_or_default(),
                device: device.unwrap_or_default(),
            });
        }
        if nics.is_empty() {
            None
        } else {
            Some(Snapshot { at, nics })
        }
    }

    /// `{"nics":[{"name","port":{..},"device":{..}}]}` (the `counters --json` shape).
    pub fn to_json(&self) -> Value {
        json!({ "nics": self.nics.iter().map(|n| json!({
            "name": n.name, "port": n.port, "device": n.device,
        })).collect::<Vec<_>>() })
    }

    /// Per-NIC changes from `self` to `later`; NICs missing from either snapshot are left out.
    pub fn delta(&self, later: &Snapshot) -> Vec<NicDelta> {
        let seconds = later.at.saturating_duration_since(self.at).as_secs_f64();
        let mut out = Vec::new();
        for b in &later.nics {
            let Some(a) = self.nics.iter().find(|n| n.name == b.name) else {
                continue;
            };
            let mut reset = Vec::new();
            let mut diff = |x: &BTreeMap<String, u64>, y: &BTreeMap<String, u64>| {
                let mut d = BTreeMap::new();
                for (k, &v1) in y {
                    let Some(&v0) = x.get(k) else { continue };
                    if v1 >= v0 {
                        d.insert(k.clone(), v1 - v0);
                    } else if !reset.contains(k) {
                        reset.push(k.clone());
                    }
                }
                d
            };
            let port = diff(&a.port, &b.port);
            let device = diff(&a.device, &b.device);
            out.push(NicDelta {
                name: b.name.clone(),
                seconds,
                port,
                device,
                reset,
            });
        }
        out
    }

    /// Per-NIC deltas of the counters that changed, for a benchmark record's `counters` field:
    /// `{"rdmap79s0": {"tx_bytes": 123, "tx_pkts": 4}, ...}`. Port counters win over device
    /// counters of the same name (old drivers list both). NICs with no change are left out, so an
    /// idle node gives `{}`.
    pub fn delta_json(&self, later: &Snapshot) -> Value {
        let mut nics = Map::new();
        for d in self.delta(later) {
            let mut m = Map::new();
            for (k, v) in d.device.iter().chain(d.port.iter()) {
                if *v > 0 {
                    m.insert(k.clone(), json!(v));
                }
            }
            if !m.is_empty() {
                nics.insert(d.name, Value::Object(m));
            }
        }
        Value::Object(nics)
    }
}

impl NicDelta {
    /// A counter's delta, port scope first; 0 when the driver does not have it.
    pub fn get(&self, counter: &str) -> u64 {
        self.port
            .get(counter)
            .or_else(|| self.device.get(counter))
            .copied()
            .unwrap_or(0)
    }

    /// Error-class counters that increased, with their increase.
    pub fn errors(&self) -> BTreeMap<String, u64> {
        self.device
            .iter()
            .chain(self.port.iter())
            .filter(|(k, v)| is_error_counter(k) && **v > 0)
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Bytes that crossed the NIC in either direction.
    pub fn traffic_bytes(&self) -> u64 {
        self.get("tx_bytes").saturating_add(self.get("rx_bytes"))
    }

    /// Rates over the delta's interval (0 when the interval is 0).
    pub fn rates(&self) -> Rates {
        let per_s = |v: u64| {
            if self.seconds > 0.0 {
                v as f64 / self.seconds
            } else {
                0.0
            }
        };
        Rates {
            tx_gbps: per_s(self.get("tx_bytes")) * 8.0 / 1e9,
            rx_gbps: per_s(self.get("rx_bytes")) * 8.0 / 1e9,
            tx_pps: per_s(self.get("tx_pkts")),
            rx_pps: per_s(self.get("rx_pkts")),
            rx_drops: self.get("rx_drops"),
            retrans_pkts: self.get("retrans_pkts"),
            errors: self
                .errors()
                .values()
                .fold(0u64, |a, b| a.saturating_add(*b)),
        }
    }

    /// `{counter: delta}` of all counters (both scopes, port winning).
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        let mut m = self.device.clone();
        m.extend(self.port.iter().map(|(k, v)| (k.clone(), *v)));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(name: &str, port: &[(&str, u64)], device: &[(&str, u64)]) -> NicCounters {
        NicCounters {
            name: name.into(),
            port_num: Some(1),
            port: port.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            device: device.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn deltas_rates_and_resets() {
        let t0 = Instant::now();
        let a = Snapshot {
            at: t0,
            nics: vec![nic(
                "a",
                &[("tx_bytes", 100), ("rx_drops", 5)],
                &[("cmds_err", 9)],
            )],
        };
        let b = Snapshot {
            at: t0 + std::time::Duration::from_secs(2),
            nics: vec![nic(
                "a",
                &[("tx_bytes", 2_000_000_100), ("rx_drops", 7)],
                &[("cmds_err", 1)],
            )],
        };
        let d = &a.delta(&b)[0];
        assert_eq!(d.get("tx_bytes"), 2_000_000_000);
        assert_eq!(d.reset, vec!["cmds_err".to_string()]);
        let r = d.rates();
        assert!((r.tx_gbps - 8.0).abs() < 1e-9);
        assert_eq!(r.rx_drops, 2);
        assert_eq!(r.errors, 2);
        let j = a.delta_json(&b);
        assert_eq!(j["a"]["tx_bytes"], 2_000_000_000u64);
        assert!(j["a"].get("cmds_err").is_none());
        assert_eq!(a.delta_json(&a), json!({}));
    }

    #[test]
    fn error_classes() {
        for c in [
            "cmds_err",
            "rx_drops",
            "retrans_pkts",
            "no_completion_cmds",
            "rdma_read_wr_err",
        ] {
            assert!(is_error_counter(c), "{c}");
        }
        for c in ["tx_bytes", "keep_alive_rcvd", "submitted_cmds"] {
            assert!(!is_error_counter(c), "{c}");
        }
    }
}
