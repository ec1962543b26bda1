//! Discovery of GPUs, EFA NICs, NUMA nodes and GPU↔NIC pairing from sysfs under a [`Root`].
//!
//! Why sysfs and not NVML/libfabric: it works without GPU drivers, without libfabric and on fixture
//! trees, so `topo` and `doctor` always have something to say. NVML names and NVLink peers, and
//! libfabric domains, are optional extras merged in by the CLI ([`Topology::merge_nvml`],
//! [`Topology::set_libfabric_domains`]).
//!
//! Pairing rule: a GPU is paired with the NICs whose sysfs device path
//! shares the longest prefix with its own, provided they share at least the PCIe root complex
//! (`pci0000:XX`). That groups one EFA with two GPUs per root on p4d and four EFAs with one GPU per
//! PCIe switch on p5. When no NIC shares a root complex the NICs on the same NUMA node are used.

use crate::libfabric::LibfabricDomain;
use crate::pcie::PcieLink;
use crate::root::Root;
use serde::Serialize;
use std::path::{Component, Path};

/// PCI vendor ids.
pub const VENDOR_NVIDIA: &str = "0x10de";
pub const VENDOR_AMAZON: &str = "0x1d0f";

/// One PCI function as sysfs shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PciDevice {
    pub bdf: String,
    pub vendor: String,
    pub device: String,
    pub class: String,
    pub numa_node: Option<i64>,
    pub local_cpulist: Option<String>,
    pub driver: Option<String>,
    /// Canonical sysfs path (`/sys/devices/pci0000:44/.../0000:53:00.0`).
    pub sys_path: String,
}

/// How a GPU's NICs were chosen.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Pairing {
    /// Same PCIe complex (longest common sysfs prefix, at least the root complex).
    Pcie,
    /// No NIC on the GPU's root complex; NICs of the same NUMA node.
    Numa,
    /// Neither.
    None,
}

/// One NVLink connection as NVML reports it (filled by [`Topology::merge_nvml`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NvLink {
    /// Bus id of the peer (a GPU, or an NVSwitch on p5).
    pub peer_pci_bus_id: String,
    /// Number of links to that peer.
    pub links: u32,
    /// Speed of one link in Gb/s, when NVML reports it.
    pub gbps_per_link: Option<f64>,
}

/// What NVML knows about one GPU; the gpu layer produces these and the CLI merges them.
#[derive(Debug, Clone, PartialEq)]
pub struct NvmlGpu {
    /// Any spelling NVML uses (`00000000:53:00.0` or `0000:53:00.0`).
    pub pci_bus_id: String,
    pub name: String,
    pub nvlinks: Vec<NvLink>,
    /// NVML's NUMA node for the GPU; used when sysfs says none (`numa_node` -1, as in some VMs).
    pub numa_node: Option<i64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Gpu {
    /// Position in PCI bus order (NVML's and `CUDA_DEVICE_ORDER=PCI_BUS_ID` order).
    pub index: usize,
    pub name: Option<String>,
    /// `nvml`, `pci-id` (from the PCI device id table) or null.
    pub name_source: Option<&'static str>,
    pub pci_bus_id: String,
    pub device_id: String,
    pub numa_node: Option<i64>,
    pub local_cpulist: Option<String>,
    /// NIC names paired with this GPU.
    pub nics: Vec<String>,
    /// Sum of the paired NICs' link speeds, Gb/s (what one GPU can drive off-node).
    pub link_gbps: Option<f64>,
    pub pairing: Pairing,
    pub nvlinks: Vec<NvLink>,
    /// The GPU's PCIe link (trained and maximum speed/width), when sysfs shows it.
    pub pcie: Option<PcieLink>,
    pub sys_path: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Port {
    pub port: u32,
    /// `ACTIVE`, `DOWN`, ... (the text after `N: ` in `ports/N/state`).
    pub state: Option<String>,
    pub phys_state: Option<String>,
    /// Raw `rate` text, e.g. `100 Gb/sec (4X EDR)`.
    pub rate: Option<String>,
    pub gbps: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Nic {
    /// RDMA device name (`rdmap79s0` or `efa_0`).
    pub name: String,
    pub pci_bus_id: String,
    pub device_id: String,
    pub numa_node: Option<i64>,
    pub local_cpulist: Option<String>,
    /// Speed of port 1 (the only port of an EFA) in Gb/s.
    pub link_gbps: Option<f64>,
    /// State of port 1.
    pub state: Option<String>,
    pub ports: Vec<Port>,
    /// Indices of GPUs paired with this NIC.
    pub gpus: Vec<usize>,
    /// Content of the PCI device's `p2p` file (amzn driver ≥ 2.6.0), when present.
    pub p2p: Option<String>,
    /// Content of the PCI device's `gdr` file (amzn driver 1.9–2.5), when present.
    pub gdr: Option<String>,
    pub driver: Option<String>,
    /// The NIC's PCIe link (trained and maximum speed/width), when sysfs shows it.
    pub pcie: Option<PcieLink>,
    pub sys_path: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NumaNode {
    pub node: u32,
    pub cpulist: String,
}

/// Everything `efabench topo` prints.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Topology {
    pub instance_type: Option<String>,
    pub sys_vendor: Option<String>,
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    pub numa: Vec<NumaNode>,
    /// Sum of the link speeds of all EFA ports, Gb/s.
    pub aggregate_link_gbps: f64,
    /// EFA PCI functions (vendor 0x1d0f, device 0xefaN) with no RDMA device: driver not bound.
    pub efa_pci_without_rdma_device: Vec<String>,
    /// libfabric `efa` domains when libfabric was queried, else null.
    pub libfabric_domains: Option<Vec<LibfabricDomain>>,
}

impl Topology {
    /// Read the topology under `root`. Never fails: what cannot be read is left out.
    pub fn discover(root: &Root) -> Topology {
        let pci = pci_devices(root);
        let mut gpus: Vec<Gpu> = pci
            .iter()
            .filter(|d| d.vendor == VENDOR_NVIDIA && d.class.starts_with("0x03"))
            .enumerate()
            .map(|(index, d)| {
                let name = gpu_name_from_pci_id(&d.device).map(str::to_string);
                Gpu {
                    index,
                    name_source: name.as_ref().map(|_| "pci-id"),
                    name,
                    pci_bus_id: d.bdf.clone(),
                    device_id: d.device.clone(),
                    numa_node: d.numa_node,
                    local_cpulist: d.local_cpulist.clone(),
                    nics: Vec::new(),
                    link_gbps: None,
                    pairing: Pairing::None,
                    nvlinks: Vec::new(),
                    pcie: PcieLink::read(root, &d.sys_path),
                    sys_path: d.sys_path.clone(),
                }
            })
            .collect();
        let mut nics = efa_nics(root);
        let bound: Vec<&str> = nics.iter().map(|n| n.pci_bus_id.as_str()).collect();
        let efa_pci_without_rdma_device = pci
            .iter()
            .filter(|d| d.vendor == VENDOR_AMAZON && is_efa_device_id(&d.device))
            .filter(|d| !bound.contains(&d.bdf.as_str()))
            .map(|d| d.bdf.clone())
            .collect();
        pair(&mut gpus, &mut nics);
        let aggregate_link_gbps = nics
            .iter()
            .flat_map(|n| n.ports.iter())
            .filter_map(|p| p.gbps)
            .fold(0.0, |a, b| a + b);
        Topology {
            instance_type: root
                .read_trim("/sys/devices/virtual/dmi/id/product_name")
                .filter(|s| !s.is_empty()),
            sys_vendor: root
                .read_trim("/sys/devices/virtual/dmi/id/sys_vendor")
                .filter(|s| !s.is_empty()),
            gpus,
            nics,
            numa: numa_nodes(root),
            aggregate_link_gbps,
            efa_pci_without_rdma_device,
            libfabric_domains: None,
        }
    }

    /// Merge NVML's names, NVLink peers and NUMA node (where sysfs has none) into the GPUs with
    /// the same PCI bus id. GPUs NVML does
    /// not know keep their sysfs data; NVML GPUs not in sysfs are ignored.
    pub fn merge_nvml(&mut self, nvml: Vec<NvmlGpu>) {
        for n in nvml {
            let id = normalize_bus_id(&n.pci_bus_id);
            if let Some(g) = self.gpus.iter_mut().find(|g| g.pci_bus_id == id) {
                if !n.name.trim().is_empty() {
                    g.name = Some(n.name.trim().to_string());
                    g.name_source = Some("nvml");
                }
                if g.numa_node.is_none() {
                    g.numa_node = n.numa_node;
                }
                g.nvlinks = n
                    .nvlinks
                    .into_iter()
                    .map(|l| NvLink {
                        peer_pci_bus_id: normalize_bus_id(&l.peer_pci_bus_id),
                        ..l
                    })
                    .collect();
            }
        }
    }

    /// Record the libfabric domains (from the fabric layer or `fi_info`).
    pub fn set_libfabric_domains(&mut self, domains: Vec<LibfabricDomain>) {
        self.libfabric_domains = Some(domains);
    }

    /// The NIC with this RDMA device name.
    pub fn nic(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.name == name)
    }

    /// The JSON of `topo --json` (the shape in `docs/json.md`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        let profile = self.instance_type.as_deref().and_then(instance_profile);
        if let (Some(p), Some(map)) = (profile, v.as_object_mut()) {
            map.insert(
                "expected".into(),
                serde_json::json!({
                    "accelerators": p.accelerators,
                    "gpus": p.gpus,
                    "efa_devices": p.efa_devices,
                    "gbps_per_efa": p.gbps_per_efa,
                    "evidence": p.evidence.name(),
                    "source": p.source,
                }),
            );
        }
        v
    }
}

/// `00000000:53:00.0` / `0000:53:00.0` / `53:00.0` → `0000:53:00.0`, lower case.
pub fn normalize_bus_id(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    let parts: Vec<&str> = id.split(':').collect();
    match parts.as_slice() {
        [dom, bus, devfn] => {
            let dom = u32::from_str_radix(dom, 16).map(|d| format!("{d:04x}"));
            match dom {
                Ok(d) => format!("{d}:{bus}:{devfn}"),
                Err(_) => id.clone(),
            }
        }
        [bus, devfn] => format!("0000:{bus}:{devfn}"),
        _ => id.clone(),
    }
}

/// EFA PCI device ids (`0xefa0`…`0xefa4`).
pub fn is_efa_device_id(device: &str) -> bool {
    let d = device.trim().to_ascii_lowercase();
    d.len() == 6 && d.starts_with("0xefa") && d.as_bytes()[5].is_ascii_hexdigit()
}

/// Marketing names of the data-centre GPUs found on EFA instances, by PCI device id. Used only
/// when NVML is not available; NVML's name wins.
pub fn gpu_name_from_pci_id(device: &str) -> Option<&'static str> {
    Some(match device.trim().to_ascii_lowercase().as_str() {
        "0x20b0" => "NVIDIA A100-SXM4-40GB",
        "0x20b2" => "NVIDIA A100-SXM4-80GB",
        "0x2330" => "NVIDIA H100 80GB HBM3",
        "0x2335" => "NVIDIA H200",
        "0x2901" => "NVIDIA B200",
        "0x1db1" => "Tesla V100-SXM2-16GB",
        "0x1db5" => "Tesla V100-SXM2-32GB",
        "0x2236" => "NVIDIA A10G",
        "0x27b8" => "NVIDIA L4",
        "0x26b9" => "NVIDIA L40S",
        _ => return None,
    })
}

/// Parse a port `rate` file (`100 Gb/sec (4X EDR)`, `2.5 Gb/sec (1X SDR)`) to Gb/s.
pub fn parse_rate_gbps(rate: &str) -> Option<f64> {
    let first = rate.split_whitespace().next()?;
    let v: f64 = first.parse().ok()?;
    (v.is_finite() && v >= 0.0 && rate.contains("Gb/sec")).then_some(v)
}

/// `4: ACTIVE` → `ACTIVE`; text without a number is returned as is.
pub fn state_name(raw: &str) -> String {
    match raw.split_once(':') {
        Some((num, name)) if num.trim().parse::<u32>().is_ok() => name.trim().to_string(),
        _ => raw.trim().to_string(),
    }
}

fn pci_devices(root: &Root) -> Vec<PciDevice> {
    let mut out: Vec<PciDevice> = root
        .list("/sys/bus/pci/devices")
        .into_iter()
        .filter_map(|bdf| pci_device(root, &format!("/sys/bus/pci/devices/{bdf}")))
        .collect();
    out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    out
}

fn pci_device(root: &Root, path: &str) -> Option<PciDevice> {
    let sys = root.resolve(path)?;
    let bdf = sys.file_name()?.to_str()?.to_string();
    let read = |f: &str| root.read_trim(format!("{path}/{f}"));
    Some(PciDevice {
        bdf: normalize_bus_id(&bdf),
        vendor: read("vendor")?.to_ascii_lowercase(),
        device: read("device").unwrap_or_default().to_ascii_lowercase(),
        class: read("class").unwrap_or_default().to_ascii_lowercase(),
        numa_node: read("numa_node")
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|n| *n >= 0),
        local_cpulist: read("local_cpulist").filter(|s| !s.is_empty()),
        driver: root.link_basename(format!("{path}/driver")),
        sys_path: sys.to_string_lossy().into_owned(),
    })
}

fn efa_nics(root: &Root) -> Vec<Nic> {
    let mut nics = Vec::new();
    for name in root.list("/sys/class/infiniband") {
        let base = format!("/sys/class/infiniband/{name}");
        let Some(dev) = pci_device(root, &format!("{base}/device")) else {
            continue;
        };
        if dev.vendor != VENDOR_AMAZON {
            continue;
        }
        let mut ports: Vec<Port> = root
            .list(format!("{base}/ports"))
            .into_iter()
            .filter_map(|p| p.parse::<u32>().ok())
            .map(|port| {
                let pdir = format!("{base}/ports/{port}");
                let rate = root
                    .read_trim(format!("{pdir}/rate"))
                    .filter(|s| !s.is_empty());
                Port {
                    port,
                    state: root
                        .read_trim(format!("{pdir}/state"))
                        .map(|s| state_name(&s)),
                    phys_state: root
                        .read_trim(format!("{pdir}/phys_state"))
                        .map(|s| state_name(&s)),
                    gbps: rate.as_deref().and_then(parse_rate_gbps),
                    rate,
                }
            })
            .collect();
        ports.sort_by_key(|p| p.port);
        let first = ports.first();
        nics.push(Nic {
            link_gbps: first.and_then(|p| p.gbps),
            state: first.and_then(|p| p.state.clone()),
            p2p: root
                .read(format!("{base}/device/p2p"))
                .ok()
                .map(|s| s.trim().to_string()),
            gdr: root
                .read(format!("{base}/device/gdr"))
                .ok()
                .map(|s| s.trim().to_string()),
            name,
            pci_bus_id: dev.bdf,
            device_id: dev.device,
            numa_node: dev.numa_node,
            local_cpulist: dev.local_cpulist,
            ports,
            gpus: Vec::new(),
            driver: dev.driver,
            pcie: PcieLink::read(root, &dev.sys_path),
            sys_path: dev.sys_path,
        });
    }
    nics.sort_by(|a, b| a.pci_bus_id.cmp(&b.pci_bus_id).then(a.name.cmp(&b.name)));
    nics
}

fn numa_nodes(root: &Root) -> Vec<NumaNode> {
    let mut out: Vec<NumaNode> = root
        .list("/sys/devices/system/node")
        .into_iter()
        .filter_map(|n| {
            let node: u32 = n.strip_prefix("node")?.parse().ok()?;
            let cpulist = root.read_trim(format!("/sys/devices/system/node/{n}/cpulist"))?;
            Some(NumaNode { node, cpulist })
        })
        .collect();
    out.sort_by_key(|n| n.node);
    out
}

fn components(p: &str) -> Vec<String> {
    Path::new(p)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str().map(str::to_string),
            _ => None,
        })
        .collect()
}

/// Number of leading path components two sysfs paths share, counted only when they share the
/// PCIe root complex (`sys/devices/pci*`); 0 otherwise.
fn shared_complex_depth(a: &[String], b: &[String]) -> usize {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let shares_root = common >= 3 && a[0] == "sys" && a[1] == "devices" && a[2].starts_with("pci");
    if shares_root {
        common
    } else {
        0
    }
}

fn pair(gpus: &mut [Gpu], nics: &mut [Nic]) {
    let nic_paths: Vec<Vec<String>> = nics.iter().map(|n| components(&n.sys_path)).collect();
    for g in gpus.iter_mut() {
        let gp = components(&g.sys_path);
        let depths: Vec<usize> = nic_paths
            .iter()
            .map(|np| shared_complex_depth(&gp, np))
            .collect();
        let best = depths.iter().copied().max().unwrap_or(0);
        let chosen: Vec<usize> = if best > 0 {
            g.pairing = Pairing::Pcie;
            (0..nics.len()).filter(|&i| depths[i] == best).collect()
        } else if let Some(node) = g.numa_node {
            let same: Vec<usize> = (0..nics.len())
                .filter(|&i| nics[i].numa_node == Some(node))
                .collect();
            g.pairing = if same.is_empty() {
                Pairing::None
            } else {
                Pairing::Numa
            };
            same
        } else {
            g.pairing = Pairing::None;
            Vec::new()
        };
        let mut gbps: Option<f64> = None;
        for i in chosen {
            g.nics.push(nics[i].name.clone());
            nics[i].gpus.push(g.index);
            if let Some(l) = nics[i].link_gbps {
                gbps = Some(gbps.unwrap_or(0.0) + l);
            }
        }
        g.link_gbps = gbps;
    }
}

pub use crate::profiles::{instance_profile, InstanceProfile};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_tolerate_odd_text() {
        assert_eq!(parse_rate_gbps("100 Gb/sec (4X EDR)"), Some(100.0));
        assert_eq!(parse_rate_gbps("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(parse_rate_gbps("garbage"), None);
        assert_eq!(parse_rate_gbps(""), None);
        assert_eq!(state_name("4: ACTIVE"), "ACTIVE");
        assert_eq!(state_name("1: DOWN"), "DOWN");
        assert_eq!(state_name("weird"), "weird");
        assert_eq!(normalize_bus_id("00000000:53:00.0"), "0000:53:00.0");
        assert_eq!(normalize_bus_id("0000:A8:00.0"), "0000:a8:00.0");
        assert_eq!(normalize_bus_id("53:00.0"), "0000:53:00.0");
        assert!(is_efa_device_id("0xefa1"));
        assert!(!is_efa_device_id("0xec20"));
    }
}
