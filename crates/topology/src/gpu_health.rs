//! What the NVIDIA driver says about each GPU's health: PCIe link and replay counter, NVLink
//! state and error counters, ECC, row remapping, throttle reasons, persistence mode, and XID
//! events from the kernel log.
//!
//! Why a trait: the doctor's GPU checks must run in CI, where there is no GPU. [`GpuHealthSource`]
//! has two implementations with the same types: the real one over NVML (in the gpu crate) and
//! [`FixtureSource`], which reads the same readings from a JSON file. Each reading is a
//! [`Reading`], so "this GPU does not support it" (NVLink on a one-GPU machine, row remapping on
//! an older GPU) is kept apart from a value and from an error, and the checks can skip it.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One value from the driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading<T> {
    Value(T),
    /// The driver answered "not supported" for this GPU.
    NotSupported,
    /// The query failed; the text says how.
    Error(String),
}

impl<T> Reading<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            Reading::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// PCIe link as NVML reports it (generation, not GT/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlPcie {
    pub gen_current: u32,
    pub gen_max: u32,
    pub width_current: u32,
    pub width_max: u32,
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvlinkLink {
    pub link: u32,
    pub active: bool,
    /// Error counters since the driver loaded; `None` where the driver gave none.
    pub crc_flit: Option<u64>,
    pub crc_data: Option<u64>,
    pub replay: Option<u64>,
    pub recovery: Option<u64>,
}

/// Row remapping (HBM GPUs since A100).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    /// A remap waits for a GPU reset.
    pub pending: bool,
    /// A remap failed: no spare row was left.
    pub failure: bool,
}

/// The clock-throttle reasons that mean the hardware is holding the GPU back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throttle {
    pub hw_slowdown: bool,
    pub hw_thermal: bool,
    pub sw_thermal: bool,
    pub hw_power_brake: bool,
}

/// One GPU at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuHealth {
    pub index: u32,
    /// `0000:53:00.0`.
    pub pci_bus_id: String,
    pub name: String,
    pub pcie: Reading<NvmlPcie>,
    /// PCIe replay counter (link-level retransmissions) since the driver loaded.
    pub pcie_replay: Reading<u64>,
    pub nvlinks: Reading<Vec<NvlinkLink>>,
    /// Volatile (since the driver loaded) uncorrected ECC errors, all memory locations.
    pub ecc_uncorrected_volatile: Reading<u64>,
    pub remapped_rows: Reading<RemappedRows>,
    pub throttle: Reading<Throttle>,
    pub persistence_mode: Reading<bool>,
}

/// One `NVRM: Xid` line of the kernel log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    /// `0000:53:00.0` as the driver printed it, normalised.
    pub pci_bus_id: String,
    pub xid: u32,
    /// The rest of the line.
    pub text: String,
}

/// Why the driver could not be asked at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

/// Where the GPU readings come from.
pub trait GpuHealthSource {
    /// A snapshot of every GPU. Called twice, `--interval` apart, to see counters rise.
    fn snapshot(&self) -> Result<Vec<GpuHealth>, Unavailable>;
    /// XID events since the driver loaded (the kernel log), or why they cannot be read.
    fn xids(&self) -> Reading<Vec<XidEvent>>;
    /// Where the readings came from (`NVML 570.133.20`, `fixture FILE`).
    fn describe(&self) -> String;
}

/// The readings of [`FixtureSource`]'s JSON file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixtureFile {
    /// Snapshots in order; the last repeats once they run out (one snapshot = nothing rises).
    pub snapshots: Vec<Vec<GpuHealth>>,
    pub xids: Reading<Vec<XidEvent>>,
}

/// Readings from a JSON file (`doctor --nvml-fixture FILE`), for tests and for replaying another
/// node's readings.
#[derive(Debug)]
pub struct FixtureSource {
    file: FixtureFile,
    path: String,
    next: AtomicUsize,
}

/// A fixture file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a GPU health fixture: {source}")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: no snapshot in \"snapshots\"")]
    Empty { path: String },
}

impl FixtureSource {
    pub fn open(path: &Path) -> Result<FixtureSource, FixtureError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| FixtureError::Read {
            path: p.clone(),
            source,
        })?;
        let file: FixtureFile =
            serde_json::from_str(&text).map_err(|source| FixtureError::Parse {
                path: p.clone(),
                source,
            })?;
        if file.snapshots.is_empty() {
            return Err(FixtureError::Empty { path: p });
        }
        Ok(FixtureSource {
            file,
            path: p,
            next: AtomicUsize::new(0),
        })
    }
}

impl GpuHealthSource for FixtureSource {
    fn snapshot(&self) -> Result<Vec<GpuHealth>, Unavailable> {
        let i = self
            .next
            .fetch_add(1, Ordering::Relaxed)
            .min(self.file.snapshots.len() - 1);
        Ok(self.file.snapshots[i].clone())
    }
    fn xids(&self) -> Reading<Vec<XidEvent>> {
        self.file.xids.clone()
    }
    fn describe(&self) -> String {
        format!("fixture {}", self.path)
    }
}

/// The XID events in kernel log text: lines such as
/// `NVRM: Xid (PCI:0000:53:00): 79, pid=1234, name=python, GPU has fallen off the bus.`
/// (optionally behind a `/dev/kmsg` or `dmesg` prefix).
pub fn parse_xids(log: &str) -> Vec<XidEvent> {
    let mut out = Vec::new();
    for line in log.lines() {
        let Some(at) = line.find("NVRM: Xid (PCI:") else {
            continue;
        };
        let rest = &line[at + "NVRM: Xid (PCI:".len()..];
        let Some((bus, rest)) = rest.split_once("):") else {
            continue;
        };
        let rest = rest.trim_start();
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let Ok(xid) = digits.parse::<u32>() else {
            continue;
        };
        let text = rest[digits.len()..]
            .trim_start_matches(',')
            .trim()
            .to_string();
        // The driver prints `0000:53:00` (no function); the GPU is function 0.
        let bus = bus.trim().to_ascii_lowercase();
        let bus = if bus.matches(':').count() == 1 {
            format!("{bus}.0")
        } else if bus.contains('.') {
            bus
        } else {
            format!("{bus}.0")
        };
        out.push(XidEvent {
            pci_bus_id: crate::topo::normalize_bus_id(&bus),
            xid,
            text,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_lines_parse_with_and_without_prefixes() {
        let log = "\
[  812.412] NVRM: Xid (PCI:0000:53:00): 79, pid=1234, name=python, GPU has fallen off the bus.
4,1234,99887766,-;NVRM: Xid (PCI:0000:a8:00): 13, pid=77, Graphics Exception
NVRM: GPU at PCI:0000:53:00: GPU-1234
NVRM: Xid (PCI:0000:53:00): x, broken
";
        let x = parse_xids(log);
        assert_eq!(x.len(), 2);
        assert_eq!(x[0].pci_bus_id, "0000:53:00.0");
        assert_eq!(x[0].xid, 79);
        assert!(x[0].text.starts_with("pid=1234"));
        assert_eq!(x[1].pci_bus_id, "0000:a8:00.0");
        assert_eq!(x[1].xid, 13);
    }

    #[test]
    fn readings_round_trip_through_json() {
        let r: Reading<u64> = serde_json::from_str(r#"{"value":3}"#).unwrap();
        assert_eq!(r, Reading::Value(3));
        let r: Reading<u64> = serde_json::from_str(r#""not_supported""#).unwrap();
        assert_eq!(r, Reading::NotSupported);
        let r: Reading<u64> = serde_json::from_str(r#"{"error":"x"}"#).unwrap();
        assert_eq!(r, Reading::Error("x".into()));
    }
}
