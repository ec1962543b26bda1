//! GPU inventory through NVML: names, PCI bus ids, NUMA nodes, CPU affinity and NVLink peers.
//!
//! `efabench topo` shows this next to the NICs, and `efabench ipc` uses the NVLink link count ×
//! per-link speed between two GPUs as the `link_gbps` of its records. NVML is loaded at run time
//! (`libnvidia-ml.so.1`); without it [`inventory`] returns an error and callers carry on.

use crate::error::GpuError;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::Nvml;

/// `NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON`: the speed all active links run at, MB/s.
const FI_NVLINK_SPEED_COMMON: u32 = 90;
/// `NVML_FI_DEV_NVLINK_GET_SPEED`: NVLink speed in MB/s (newer drivers).
const FI_NVLINK_GET_SPEED: u32 = 164;
/// `NVML_NVLINK_MAX_LINKS`.
const MAX_LINKS: u32 = 18;

/// NVLinks from one GPU to one peer.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct NvlinkPeer {
    /// Index of the peer GPU, when the remote end is a GPU of this host; `None` for an NVSwitch
    /// (or another device NVML cannot match to a GPU).
    pub gpu: Option<u32>,
    /// PCI bus id of the remote end (normalised, see [`normalize_bus_id`]).
    pub pci_bus_id: String,
    /// Active links to this peer.
    pub links: u32,
    /// Per-link speed in GB/s (10^9 B/s) per direction, when NVML reports it.
    pub link_gbytes_per_s: Option<f64>,
}

impl NvlinkPeer {
    /// links × speed × 8, in Gbps per direction.
    pub fn total_gbps(&self) -> Option<f64> {
        self.link_gbytes_per_s
            .map(|s| s * 8.0 * f64::from(self.links))
    }
}

/// One GPU as NVML sees it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct NvmlGpuInfo {
    pub index: u32,
    pub name: String,
    /// Normalised `0000:18:00.0`.
    pub pci_bus_id: String,
    pub numa_node: Option<u32>,
    /// CPUs close to the GPU, as a cpulist (`0-47,96-143`).
    pub cpulist: Option<String>,
    pub nvlink: Vec<NvlinkPeer>,
}

/// Lower-case `dddd:bb:dd.f` (NVML prints an 8-digit domain, CUDA a 4-digit one).
pub fn normalize_bus_id(s: &str) -> String {
    let s = s.trim().trim_end_matches('\0').to_ascii_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => {
            let d = dom.trim_start_matches('0');
            format!("{:0>4}:{rest}", d)
        }
        _ => s,
    }
}

/// Turns an NVML CPU bitmask (64-bit words, lowest CPU in word 0 bit 0) into a cpulist.
pub fn cpulist_from_mask(words: &[u64]) -> String {
    let mut cpus = Vec::new();
    for (w, bits) in words.iter().enumerate() {
        for b in 0..64 {
            if bits >> b & 1 == 1 {
                cpus.push(w * 64 + b);
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

fn mbps_from(sample: &Result<FieldValueSample, nvml_wrapper::error::NvmlError>) -> Option<f64> {
    let v = sample.as_ref().ok()?.value.as_ref().ok()?;
    let mbps = match v {
        SampleValue::U32(x) => f64::from(*x),
        SampleValue::U64(x) => *x as f64,
        SampleValue::I64(x) => *x as f64,
        SampleValue::F64(x) => *x,
    };
    (mbps > 0.0).then_some(mbps / 1000.0)
}

/// The NUMA node the kernel gives a PCI device (`/sys/bus/pci/devices/<bus id>/numa_node`), for
/// drivers or VMs where NVML has no answer; `None` for -1 (no affinity) or no file.
pub fn sysfs_numa_node(bus_id: &str) -> Option<u32> {
    let path = format!(
        "/sys/bus/pci/devices/{}/numa_node",
        normalize_bus_id(bus_id)
    );
    parse_numa_node(&std::fs::read_to_string(path).ok()?)
}

fn parse_numa_node(text: &str) -> Option<u32> {
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// Every GPU NVML sees, with NVLink peers grouped by remote device.
pub fn inventory() -> Result<Vec<NvmlGpuInfo>, GpuError> {
    let nvml = Nvml::init().map_err(|e| GpuError::Nvml {
        what: "could not load NVML (libnvidia-ml.so.1)".into(),
        source: std::sync::Arc::new(e),
        hint: "; install the NVIDIA driver or add its directory to LD_LIBRARY_PATH",
    })?;
    let n = nvml
        .device_count()
        .map_err(|e| GpuError::nvml("device count", e))?;
    let mut gpus = Vec::new();
    let mut raw_peers: Vec<Vec<(String, Option<f64>)>> = Vec::new();
    for i in 0..n {
        let d = nvml
            .device_by_index(i)
            .map_err(|e| GpuError::nvml("device by index", e))?;
        let name = d.name().unwrap_or_else(|_| "unknown".to_string());
        let pci_bus_id = d
            .pci_info()
            .map(|p| normalize_bus_id(&p.bus_id))
            .map_err(|e| GpuError::nvml("PCI info", e))?;
        let numa_node = d
            .numa_node_id()
            .ok()
            .or_else(|| sysfs_numa_node(&pci_bus_id));
        let cpus = std::thread::available_parallelism().map_or(1024, |c| c.get());
        let words = cpus.div_ceil(64).max(16);
        let cpulist = d
            .cpu_affinity(words)
            .ok()
            .map(|m| cpulist_from_mask(&m))
            .filter(|s| !s.is_empty());
        let speed = d
            .field_values_for(&[
                FieldId(FI_NVLINK_SPEED_COMMON),
                FieldId(FI_NVLINK_GET_SPEED),
            ])
            .ok()
            .and_then(|v| v.iter().find_map(mbps_from));
        let mut links = Vec::new();
        for l in 0..MAX_LINKS {
            let w = d.link_wrapper_for(l);
            if w.is_active().unwrap_or(false) {
                if let Ok(r) = w.remote_pci_info() {
                    links.push((normalize_bus_id(&r.bus_id), speed));
                }
            }
        }
        raw_peers.push(links);
        gpus.push(NvmlGpuInfo {
            index: d.index().unwrap_or(i),
            name,
            pci_bus_id,
            numa_node,
            cpulist,
            nvlink: Vec::new(),
        });
    }
    let ids: Vec<(u32, String)> = gpus
        .iter()
        .map(|g| (g.index, g.pci_bus_id.clone()))
        .collect();
    for (g, links) in gpus.iter_mut().zip(raw_peers) {
        g.nvlink = group_links(&links, &ids);
    }
    Ok(gpus)
}

/// Groups active links by remote bus id and names the remote GPU when it is one of `gpus`.
pub fn group_links(links: &[(String, Option<f64>)], gpus: &[(u32, String)]) -> Vec<NvlinkPeer> {
    let mut out: Vec<NvlinkPeer> = Vec::new();
    for (bus, speed) in links {
        match out.iter_mut().find(|p| &p.pci_bus_id == bus) {
            Some(p) => p.links += 1,
            None => out.push(NvlinkPeer {
                gpu: gpus.iter().find(|(_, b)| b == bus).map(|(i, _)| *i),
                pci_bus_id: bus.clone(),
                links: 1,
                link_gbytes_per_s: *speed,
            }),
        }
    }
    out
}

/// NVLink bandwidth per direction between the GPUs with these PCI bus ids (any format), in Gbps.
///
/// Links that end on the other GPU count directly. On NVSwitch boards (HGX H100/H200: every link
/// ends on a switch, whose PCI id NVML often cannot name, e.g. `ffffffff:ff:ff.0` in a VM) any two
/// GPUs reach each other through all of their switch links, so those count when there is no
/// direct link.
pub fn nvlink_gbps_between(inv: &[NvmlGpuInfo], a_bus: &str, b_bus: &str) -> Option<f64> {
    let (a, b) = (normalize_bus_id(a_bus), normalize_bus_id(b_bus));
    let g = inv.iter().find(|g| g.pci_bus_id == a)?;
    let direct: Vec<&NvlinkPeer> = g.nvlink.iter().filter(|p| p.pci_bus_id == b).collect();
    let chosen: Vec<&NvlinkPeer> = if direct.is_empty() {
        // Through switches only to a GPU of this host.
        inv.iter().find(|g| g.pci_bus_id == b)?;
        g.nvlink.iter().filter(|p| p.gpu.is_none()).collect()
    } else {
        direct
    };
    let sum: Option<f64> = chosen.iter().map(|p| p.total_gbps()).sum();
    sum.filter(|v| *v > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_are_normalised() {
        assert_eq!(normalize_bus_id("00000000:18:00.0"), "0000:18:00.0");
        assert_eq!(normalize_bus_id("0000:AB:00.0"), "0000:ab:00.0");
        assert_eq!(normalize_bus_id("00000001:18:00.0"), "0001:18:00.0");
    }

    #[test]
    fn numa_nodes_from_sysfs_text() {
        assert_eq!(parse_numa_node("1\n"), Some(1));
        assert_eq!(parse_numa_node("-1\n"), None);
        assert_eq!(parse_numa_node("x"), None);
    }

    #[test]
    fn cpulists_compress_ranges() {
        assert_eq!(cpulist_from_mask(&[0b1011]), "0-1,3");
        assert_eq!(cpulist_from_mask(&[u64::MAX, 1]), "0-64");
        assert_eq!(cpulist_from_mask(&[0]), "");
    }

    #[test]
    fn links_are_grouped_per_peer_and_summed() {
        let gpus = vec![
            (0, "0000:18:00.0".to_string()),
            (1, "0000:2a:00.0".to_string()),
        ];
        let mut links = vec![("0000:2a:00.0".to_string(), Some(26.5625)); 18];
        links.push(("0000:99:00.0".to_string(), Some(26.5625)));
        let peers = group_links(&links, &gpus);
        assert_eq!(peers.len(), 2);
        assert_eq!(peers[0].gpu, Some(1));
        assert_eq!(peers[0].links, 18);
        assert_eq!(peers[1].gpu, None);
        let inv = vec![NvmlGpuInfo {
            index: 0,
            name: "H200".into(),
            pci_bus_id: "0000:18:00.0".into(),
            numa_node: Some(0),
            cpulist: None,
            nvlink: peers,
        }];
        let g = nvlink_gbps_between(&inv, "00000000:18:00.0", "0000:2A:00.0").unwrap_or(0.0);
        assert!((g - 18.0 * 26.5625 * 8.0).abs() < 1e-9, "{g}");
        assert_eq!(
            nvlink_gbps_between(&inv, "0000:18:00.0", "0000:77:00.0"),
            None
        );
    }
}
