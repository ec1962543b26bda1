//! `efabench topo`: GPUs, EFA NICs, NUMA nodes, GPU↔NIC pairing, link speeds and libfabric
//! domains of this node (or of a fixture tree with `--root`).
//!
//! The discovery itself is `efabench_topology::Topology::discover` (sysfs only). Two optional
//! sources are merged here: libfabric domains ([`libfabric_domains`]: a captured `fi_info` file,
//! or `fi_info -p efa` on the live system) and NVML names/NVLinks (`Topology::merge_nvml`, fed by
//! the gpu layer).

use crate::error::CliError;
use crate::exit::Exit;
use efabench_topology::libfabric::{read_fi_info_file, LibfabricDomain};
use efabench_topology::{Root, Topology};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print JSON (shape in docs/json.md) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Directory that stands for / (a fixture tree or a copy of another node's files).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Captured output of `fi_info -p efa` to list libfabric domains from (instead of running
    /// fi_info; needed with --root).
    #[arg(long, value_name = "FILE")]
    pub fi_info: Option<PathBuf>,
}

/// Write to stdout; `false` when stdout is gone (e.g. piped into `head`), so callers stop
/// quietly instead of panicking like `println!` would.
pub fn emit(text: &str) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).is_ok() && out.flush().is_ok()
}

/// A user-given value as an error message quotes it: at most 40 characters (a 100 KB argument
/// must not come back whole) with control characters escaped.
pub fn shown(value: &str) -> String {
    let mut s: String = value
        .chars()
        .take(40)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if value.chars().nth(40).is_some() {
        s.push('…');
    }
    s
}

/// Open `--root`, or a one-line usage error.
pub fn open_root(dir: &std::path::Path) -> Result<Root, CliError> {
    Root::new(dir).map_err(|e| CliError::usage(e.to_string()))
}

/// libfabric's efa domains: from `--fi-info FILE`, else by running `fi_info -p efa` when the root
/// is the live system. `Ok(None)` when libfabric could not be asked.
pub fn libfabric_domains(
    root: &Root,
    fi_info: Option<&std::path::Path>,
) -> Result<Option<Vec<LibfabricDomain>>, CliError> {
    if let Some(f) = fi_info {
        // Checked, not only parsed: any text would otherwise read as libfabric's answer.
        let info = read_fi_info_file(f).map_err(|e| {
            CliError::usage(format!(
                "--fi-info {e}; give a file holding `fi_info -p efa` output"
            ))
        })?;
        return Ok(Some(info.efa().cloned().collect()));
    }
    if !root.is_system() {
        return Ok(None);
    }
    // The library itself, as the benchmarks load it; nothing to list when none loads.
    Ok(super::libfabric::query().ok().map(|q| q.efa_domains))
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    let root = open_root(&args.root)?;
    let mut topo = Topology::discover(&root);
    if let Some(d) = libfabric_domains(&root, args.fi_info.as_deref())? {
        topo.set_libfabric_domains(d);
    }
    // On the live system, what else libfabric offers: the providers a run falls back to.
    let queried = (root.is_system() && args.fi_info.is_none())
        .then(super::libfabric::query)
        .and_then(Result::ok);
    if root.is_system() {
        // NVML describes this machine, never a fixture root; without a driver the sysfs view stays.
        if let Ok(gpus) = efabench_gpu::nvml::inventory() {
            topo.merge_nvml(gpus.into_iter().map(nvml_to_topology).collect());
        }
    }
    if args.json {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&topo.to_json()).unwrap_or_default()
        ));
    } else {
        let mut text = render(&topo, &root);
        if let Some(q) = &queried {
            text.push_str(&render_providers(q));
        }
        emit(&text);
    }
    Ok(Exit::Ok)
}

/// The library and every provider that works, with its domains.
fn render_providers(q: &super::libfabric::Queried) -> String {
    let mut out = format!("{}\n", q.describe());
    if q.providers.is_empty() {
        out.push_str("libfabric providers: none answered fi_getinfo\n");
        return out;
    }
    let mut rows = vec![vec!["PROVIDER".to_string(), "DOMAINS".into()]];
    for (p, d) in &q.providers {
        rows.push(vec![p.clone(), d.join(" ")]);
    }
    out.push_str("libfabric providers that work here (fi_getinfo):\n");
    out.push_str(&table(&rows));
    out
}

/// NVML's view of one GPU in the topology layer's terms (link speed GB/s → Gb/s).
fn nvml_to_topology(g: efabench_gpu::nvml::NvmlGpuInfo) -> efabench_topology::NvmlGpu {
    efabench_topology::NvmlGpu {
        pci_bus_id: g.pci_bus_id,
        name: g.name,
        numa_node: g.numa_node.map(i64::from),
        nvlinks: g
            .nvlink
            .into_iter()
            .map(|l| efabench_topology::NvLink {
                peer_pci_bus_id: l.pci_bus_id,
                links: l.links,
                gbps_per_link: l.link_gbytes_per_s.map(|gb| gb * 8.0),
            })
            .collect(),
    }
}

fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map(|s| s.chars().count()).unwrap_or(0))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if i + 1 == r.len() {
                    s.clone()
                } else {
                    format!("{s:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map(|x| x.to_string())
        .unwrap_or_else(|| "-".into())
}

/// A link as the tables show it: `32.0 GT/s x16`, or `16.0 GT/s x8 (max 32.0 GT/s x16)` when it
/// trained below what the function can do; `-` when sysfs has no link files.
fn pcie_text(link: Option<&efabench_topology::pcie::PcieLink>) -> String {
    match link {
        None => "-".into(),
        Some(l) if l.speed_below_max() || l.width_below_max() => {
            format!("{} (max {})", l.current_text(), l.max_text())
        }
        Some(l) => l.current_text(),
    }
}

/// The human-readable tables (shared with the README examples).
pub fn render(t: &Topology, root: &Root) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "instance type: {}{}\n",
        t.instance_type
            .as_deref()
            .unwrap_or("unknown (no DMI product_name)"),
        t.sys_vendor
            .as_deref()
            .map(|v| format!(" ({v})"))
            .unwrap_or_default()
    ));
    if let Some(p) = t
        .instance_type
        .as_deref()
        .and_then(efabench_topology::profiles::instance_profile)
    {
        out.push_str(&format!(
            "expected: {}, {} EFA x {} Gb/s; {}\n",
            p.accelerators,
            p.efa_devices,
            p.gbps_per_efa,
            p.provenance()
        ));
    }
    if !root.is_system() {
        out.push_str(&format!("root: {}\n", root.dir().display()));
    }
    out.push_str(&format!(
        "EFA: {} device(s), {} Gb/s aggregate link speed\n",
        t.nics.len(),
        t.aggregate_link_gbps
    ));
    if !t.efa_pci_without_rdma_device.is_empty() {
        out.push_str(&format!(
            "EFA PCI functions without an RDMA device (driver not bound): {}\n",
            t.efa_pci_without_rdma_device.join(", ")
        ));
    }
    out.push('\n');
    if t.gpus.is_empty() {
        out.push_str("GPUs: none (no PCI device with vendor 0x10de and a display class)\n");
    } else {
        let nvlink = t.gpus.iter().any(|g| !g.nvlinks.is_empty());
        let mut rows = vec![vec![
            "GPU".into(),
            "NAME".into(),
            "PCI".into(),
            "NUMA".into(),
            "PCIE".into(),
            "PAIRING".into(),
            "NIC Gb/s".into(),
        ]];
        if nvlink {
            rows[0].push("NVLINKS".into());
        }
        rows[0].push("NICS".into());
        for g in &t.gpus {
            let mut r = vec![
                g.index.to_string(),
                opt(&g.name),
                g.pci_bus_id.clone(),
                opt(&g.numa_node),
                pcie_text(g.pcie.as_ref()),
                serde_json::to_value(g.pairing)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                opt(&g.link_gbps),
            ];
            if nvlink {
                let links: u32 = g.nvlinks.iter().map(|l| l.links).sum();
                r.push(links.to_string());
            }
            r.push(if g.nics.is_empty() {
                "-".into()
            } else {
                g.nics.join(",")
            });
            rows.push(r);
        }
        out.push_str(&table(&rows));
    }
    out.push('\n');
    if t.nics.is_empty() {
        out.push_str(
            "EFA NICs: none (no RDMA device with PCI vendor 0x1d0f under /sys/class/infiniband)\n",
        );
    } else {
        let mut rows = vec![vec![
            "NIC".to_string(),
            "PCI".into(),
            "NUMA".into(),
            "PCIE".into(),
            "STATE".into(),
            "Gb/s".into(),
            "GPUDIRECT".into(),
            "GPUS".into(),
        ]];
        for n in &t.nics {
            let gdr = match (&n.p2p, &n.gdr) {
                (Some(p), _) if !p.is_empty() => format!("p2p={p}"),
                (Some(_), _) => "p2p=(empty)".into(),
                (None, Some(g)) => format!("gdr={g}"),
                (None, None) => "-".into(),
            };
            rows.push(vec![
                n.name.clone(),
                n.pci_bus_id.clone(),
                opt(&n.numa_node),
                pcie_text(n.pcie.as_ref()),
                opt(&n.state),
                opt(&n.link_gbps),
                gdr,
                if n.gpus.is_empty() {
                    "-".into()
                } else {
                    n.gpus
                        .iter()
                        .map(|g| g.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                },
            ]);
        }
        out.push_str(&table(&rows));
    }
    out.push('\n');
    if t.numa.is_empty() {
        out.push_str("NUMA: no /sys/devices/system/node\n");
    } else {
        let mut rows = vec![vec!["NUMA".to_string(), "CPUS".into()]];
        for n in &t.numa {
            rows.push(vec![n.node.to_string(), n.cpulist.clone()]);
        }
        out.push_str(&table(&rows));
    }
    out.push('\n');
    match &t.libfabric_domains {
        None => out.push_str(
            "libfabric domains: not queried (fi_info not found, or --root without --fi-info FILE)\n",
        ),
        Some(d) if d.is_empty() => {
            out.push_str("libfabric efa domains: none (the efa provider is not available)\n")
        }
        Some(d) => {
            // One row per RDMA device: its entries (fabric/endpoint type) in fi_info order.
            let mut rows = vec![vec!["DEVICE".to_string(), "ENTRIES (fabric/type)".into()]];
            for x in d {
                let dev = x
                    .domain
                    .trim_end_matches("-rdm")
                    .trim_end_matches("-dgrm")
                    .to_string();
                let ty = x.ep_type.as_deref().unwrap_or("?");
                let entry = format!("{}/{}", x.fabric, ty.trim_start_matches("FI_EP_"));
                match rows.iter_mut().skip(1).find(|r| r[0] == dev) {
                    Some(r) => r[1] = format!("{} {entry}", r[1]),
                    None => rows.push(vec![dev, entry]),
                }
            }
            out.push_str(&format!(
                "libfabric efa provider: {} entries on {} device(s)\n",
                d.len(),
                rows.len() - 1
            ));
            out.push_str(&table(&rows));
        }
    }
    out
}
