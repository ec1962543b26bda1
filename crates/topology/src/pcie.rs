//! PCIe links and AER error counters of the GPUs, the EFA NICs and the bridge ports above them,
//! read from sysfs under a [`Root`].
//!
//! Why: every byte between host memory, a GPU and an EFA crosses these links. A link that trained
//! at half its width or a lower generation (a reseated riser, a bad slot, a retimer fault) halves
//! GPUDirect RDMA and host↔GPU copies without any error anywhere else, and rising AER counts are
//! the first sign of a link going bad. The kernel exposes both per PCI function:
//! `current_link_speed` / `current_link_width` (what the link trained at), `max_link_speed` /
//! `max_link_width` (what the function can do) and, with AER enabled, `aer_dev_correctable`,
//! `aer_dev_nonfatal`, `aer_dev_fatal` (one `Name count` line per error kind, then a
//! `TOTAL_ERR_*` line).
//!
//! A link has two ends that both report it: a GPU and the switch downstream port directly above
//! it read the same speed and width. Ports are listed once, with the devices below them.

use crate::root::Root;
use crate::topo::Topology;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// One side of a PCIe link as the function reports it; each field `None` when unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PcieLink {
    /// Trained speed per lane, GT/s.
    pub current_gts: Option<f64>,
    /// Trained lanes.
    pub current_width: Option<u32>,
    /// Highest speed the function supports, GT/s.
    pub max_gts: Option<f64>,
    /// Most lanes the function supports.
    pub max_width: Option<u32>,
}

impl PcieLink {
    /// The link files of the function at `sys_path` (a system path such as
    /// `/sys/devices/pci0000:44/.../0000:53:00.0`); `None` when none is readable.
    pub fn read(root: &Root, sys_path: &str) -> Option<PcieLink> {
        let read = |f: &str| root.read_trim(format!("{sys_path}/{f}"));
        let link = PcieLink {
            current_gts: read("current_link_speed").and_then(|s| parse_speed_gts(&s)),
            current_width: read("current_link_width").and_then(|s| parse_width(&s)),
            max_gts: read("max_link_speed").and_then(|s| parse_speed_gts(&s)),
            max_width: read("max_link_width").and_then(|s| parse_width(&s)),
        };
        (link.current_gts.is_some()
            || link.current_width.is_some()
            || link.max_gts.is_some()
            || link.max_width.is_some())
        .then_some(link)
    }

    /// Trained speed below the maximum (both known).
    pub fn speed_below_max(&self) -> bool {
        matches!((self.current_gts, self.max_gts), (Some(c), Some(m)) if c + 0.05 < m)
    }

    /// Trained width below the maximum (both known).
    pub fn width_below_max(&self) -> bool {
        matches!((self.current_width, self.max_width), (Some(c), Some(m)) if c < m)
    }

    /// `16.0 GT/s x8` (the trained link).
    pub fn current_text(&self) -> String {
        speed_width_text(self.current_gts, self.current_width)
    }

    /// `32.0 GT/s x16` (what the function can do).
    pub fn max_text(&self) -> String {
        speed_width_text(self.max_gts, self.max_width)
    }

    /// Data rate of the trained link per direction, GB/s (10^9 B/s), before protocol overhead.
    pub fn current_gbytes_per_s(&self) -> Option<f64> {
        Some(link_gbytes_per_s(self.current_gts?, self.current_width?))
    }
}

fn speed_width_text(gts: Option<f64>, width: Option<u32>) -> String {
    let s = gts.map_or("? GT/s".to_string(), |g| format!("{g:.1} GT/s"));
    let w = width.map_or("x?".to_string(), |w| format!("x{w}"));
    format!("{s} {w}")
}

/// `32.0 GT/s PCIe`, `8 GT/s`, `2.5 GT/s` → GT/s; `Unknown` (no link) and other text → `None`.
pub fn parse_speed_gts(text: &str) -> Option<f64> {
    let mut it = text.split_whitespace();
    let v: f64 = it.next()?.parse().ok()?;
    (it.next() == Some("GT/s") && v.is_finite() && v > 0.0).then_some(v)
}

/// `16` → 16; `0` (link down) and other text → `None`.
pub fn parse_width(text: &str) -> Option<u32> {
    text.trim().parse::<u32>().ok().filter(|w| *w > 0)
}

/// PCIe generation of a per-lane speed (2.5 → 1, 5 → 2, 8 → 3, 16 → 4, 32 → 5, 64 → 6).
pub fn generation(gts: f64) -> Option<u8> {
    [
        (2.5, 1),
        (5.0, 2),
        (8.0, 3),
        (16.0, 4),
        (32.0, 5),
        (64.0, 6),
    ]
    .iter()
    .find(|(s, _)| (gts - s).abs() < 0.05)
    .map(|(_, g)| *g)
}

/// Raw data rate per direction in GB/s: GT/s × lanes × line-code efficiency / 8 bits. Gen1/2 use
/// 8b/10b, Gen3–5 128b/130b; Gen6 (PAM4 with FLIT mode) is counted at 242/256.
pub fn link_gbytes_per_s(gts: f64, width: u32) -> f64 {
    let code = if gts < 7.9 {
        8.0 / 10.0
    } else if gts < 63.0 {
        128.0 / 130.0
    } else {
        242.0 / 256.0
    };
    gts * f64::from(width) * code / 8.0
}

/// What owns a link reading.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LinkOwner {
    Gpu {
        index: usize,
    },
    Efa {
        name: String,
    },
    /// A bridge port (root port or switch port) between the host bridge and GPUs/EFAs.
    Port {
        /// The GPUs/EFAs below it (`GPU 3`, `EFA rdmap165s0`).
        below: Vec<String>,
        /// The GPUs/EFAs directly below it: the port reads their own link (a downstream port
        /// and the device under it are the two ends of one link).
        direct: Vec<String>,
    },
}

/// One function's link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkReading {
    pub owner: LinkOwner,
    pub bdf: String,
    pub link: PcieLink,
    /// For a GPU or EFA: the port directly above it, the other end of the same link. Its maximum
    /// caps what the link can train at (a Gen5 card in a Gen4 slot trains at Gen4).
    pub partner: Option<PcieLink>,
}

impl LinkReading {
    /// `GPU 3 0000:86:00.0`, `EFA rdmap165s0 0000:a5:00.0`, `switch port 0000:79:01.4 (above GPU 3)`.
    pub fn label(&self) -> String {
        match &self.owner {
            LinkOwner::Gpu { index } => format!("GPU {index} {}", self.bdf),
            LinkOwner::Efa { name } => format!("EFA {name} {}", self.bdf),
            LinkOwner::Port { below, .. } => {
                let b = if below.len() > 3 {
                    format!("{}, ... ({} devices)", below[..3].join(", "), below.len())
                } else {
                    below.join(", ")
                };
                format!("port {} (above {b})", self.bdf)
            }
        }
    }

    /// The most the link can train at: the lower maximum of its two ends, speed and width
    /// separately (`None` where neither end says).
    pub fn capable(&self) -> (Option<f64>, Option<u32>) {
        let p = self.partner.as_ref();
        let gts = match (self.link.max_gts, p.and_then(|p| p.max_gts)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let width = match (self.link.max_width, p.and_then(|p| p.max_width)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (gts, width)
    }

    /// Trained speed below [`capable`](Self::capable).
    pub fn speed_short(&self) -> bool {
        matches!((self.link.current_gts, self.capable().0), (Some(c), Some(m)) if c + 0.05 < m)
    }

    /// Trained width below [`capable`](Self::capable).
    pub fn width_short(&self) -> bool {
        matches!((self.link.current_width, self.capable().1), (Some(c), Some(m)) if c < m)
    }

    /// `32.0 GT/s x16`: what the link can train at.
    pub fn capable_text(&self) -> String {
        let (g, w) = self.capable();
        speed_width_text(g, w)
    }
}

/// A PCI function's name in a sysfs path component (`0000:53:00.0`).
fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10].contains(&i) || c.is_ascii_hexdigit())
}

/// The bridge functions above `sys_path`, nearest first (`/sys/devices/pci0000:44/A/B/C/dev` →
/// `[(C, path), (B, path), (A, path)]`).
fn ports_above(sys_path: &str) -> Vec<(String, String)> {
    let p = Path::new(sys_path);
    p.ancestors()
        .skip(1)
        .filter_map(|a| {
            let name = a.file_name()?.to_str()?;
            is_bdf(name).then(|| (name.to_string(), a.to_string_lossy().into_owned()))
        })
        .collect()
}

/// The link of every GPU, every EFA and every bridge port above them: GPUs first (index order),
/// then EFAs (bus order), then ports (bus order). Functions without link files are left out.
pub fn links(root: &Root, topo: &Topology) -> Vec<LinkReading> {
    struct PortSeen {
        path: String,
        below: Vec<String>,
        direct: Vec<String>,
    }
    let devices: Vec<(LinkOwner, String, &str, String)> = topo
        .gpus
        .iter()
        .map(|g| {
            let owner = LinkOwner::Gpu { index: g.index };
            (
                owner,
                g.pci_bus_id.clone(),
                g.sys_path.as_str(),
                format!("GPU {}", g.index),
            )
        })
        .chain(topo.nics.iter().map(|n| {
            let owner = LinkOwner::Efa {
                name: n.name.clone(),
            };
            (
                owner,
                n.pci_bus_id.clone(),
                n.sys_path.as_str(),
                format!("EFA {}", n.name),
            )
        }))
        .collect();
    let mut ports: BTreeMap<String, PortSeen> = BTreeMap::new();
    let mut out = Vec::new();
    for (owner, bdf, sys_path, who) in devices {
        let above = ports_above(sys_path);
        for (i, (port, path)) in above.iter().enumerate() {
            let e = ports.entry(port.clone()).or_insert_with(|| PortSeen {
                path: path.clone(),
                below: Vec::new(),
                direct: Vec::new(),
            });
            e.below.push(who.clone());
            if i == 0 {
                e.direct.push(who.clone());
            }
        }
        if let Some(link) = PcieLink::read(root, sys_path) {
            out.push(LinkReading {
                owner,
                bdf,
                link,
                partner: above.first().and_then(|(_, p)| PcieLink::read(root, p)),
            });
        }
    }
    for (bdf, p) in ports {
        if let Some(link) = PcieLink::read(root, &p.path) {
            out.push(LinkReading {
                owner: LinkOwner::Port {
                    below: p.below,
                    direct: p.direct,
                },
                bdf,
                link,
                partner: None,
            });
        }
    }
    out
}

/// AER totals of one function since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct AerCounts {
    pub correctable: Option<u64>,
    pub nonfatal: Option<u64>,
    pub fatal: Option<u64>,
}

/// The total of an `aer_dev_*` file: its `TOTAL_ERR_*` line, else the sum of its lines.
pub fn parse_aer_total(text: &str) -> Option<u64> {
    let mut sum: Option<u64> = None;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(name), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(v) = v.parse::<u64>() else { continue };
        if name.starts_with("TOTAL_ERR") {
            return Some(v);
        }
        sum = Some(sum.unwrap_or(0).saturating_add(v));
    }
    sum
}

/// AER counts of every function [`links`] lists, at one instant.
#[derive(Debug, Clone)]
pub struct AerSnapshot {
    pub at: Instant,
    /// By PCI address: the function's label and its counts. Functions without AER files are
    /// left out (AER disabled, or a VM that hides it).
    pub devices: BTreeMap<String, (String, AerCounts)>,
}

/// One AER counter that rose between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AerRise {
    pub label: String,
    /// `correctable`, `nonfatal` or `fatal`.
    pub kind: &'static str,
    pub before: u64,
    pub after: u64,
}

impl AerSnapshot {
    /// Read the AER files of `readings`' functions.
    pub fn read(root: &Root, topo: &Topology, readings: &[LinkReading]) -> AerSnapshot {
        let mut paths: BTreeMap<&str, &str> = BTreeMap::new();
        for g in &topo.gpus {
            paths.insert(&g.pci_bus_id, &g.sys_path);
        }
        for n in &topo.nics {
            paths.insert(&n.pci_bus_id, &n.sys_path);
        }
        let mut port_paths: BTreeMap<String, String> = BTreeMap::new();
        for p in paths.values() {
            for (bdf, path) in ports_above(p) {
                port_paths.insert(bdf, path);
            }
        }
        let mut devices = BTreeMap::new();
        for r in readings {
            let path = paths
                .get(r.bdf.as_str())
                .map(|p| p.to_string())
                .or_else(|| port_paths.get(&r.bdf).cloned());
            let Some(path) = path else { continue };
            let read = |f: &str| {
                root.read(format!("{path}/{f}"))
                    .ok()
                    .and_then(|t| parse_aer_total(&t))
            };
            let c = AerCounts {
                correctable: read("aer_dev_correctable"),
                nonfatal: read("aer_dev_nonfatal"),
                fatal: read("aer_dev_fatal"),
            };
            if c != AerCounts::default() {
                devices.insert(r.bdf.clone(), (r.label(), c));
            }
        }
        AerSnapshot {
            at: Instant::now(),
            devices,
        }
    }

    /// Counters higher in `after` than here, in address order.
    pub fn rises(&self, after: &AerSnapshot) -> Vec<AerRise> {
        let mut out = Vec::new();
        for (bdf, (label, b)) in &self.devices {
            let Some((_, a)) = after.devices.get(bdf) else {
                continue;
            };
            for (kind, x, y) in [
                ("correctable", b.correctable, a.correctable),
                ("nonfatal", b.nonfatal, a.nonfatal),
                ("fatal", b.fatal, a.fatal),
            ] {
                if let (Some(x), Some(y)) = (x, y) {
                    if y > x {
                        out.push(AerRise {
                            label: label.clone(),
                            kind,
                            before: x,
                            after: y,
                        });
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_text_parses_across_kernel_formats() {
        assert_eq!(parse_speed_gts("32.0 GT/s PCIe"), Some(32.0));
        assert_eq!(parse_speed_gts("8 GT/s"), Some(8.0));
        assert_eq!(parse_speed_gts("2.5 GT/s PCIe"), Some(2.5));
        assert_eq!(parse_speed_gts("Unknown"), None);
        assert_eq!(parse_speed_gts("Unknown speed"), None);
        assert_eq!(parse_speed_gts(""), None);
        assert_eq!(parse_width("16\n"), Some(16));
        assert_eq!(parse_width("0"), None);
        assert_eq!(parse_width("x16"), None);
    }

    #[test]
    fn link_rates_follow_the_line_code() {
        // Gen5 x16: 32 × 16 × 128/130 / 8 = 63.0 GB/s.
        assert!((link_gbytes_per_s(32.0, 16) - 63.015).abs() < 0.01);
        // Gen4 x8 is a quarter of that.
        assert!((link_gbytes_per_s(16.0, 8) - 63.015 / 4.0).abs() < 0.01);
        // Gen2 x16: 5 × 16 × 0.8 / 8 = 8.
        assert!((link_gbytes_per_s(5.0, 16) - 8.0).abs() < 1e-9);
        assert_eq!(generation(32.0), Some(5));
        assert_eq!(generation(2.5), Some(1));
        assert_eq!(generation(3.0), None);
    }

    #[test]
    fn below_max_needs_both_ends() {
        let l = PcieLink {
            current_gts: Some(16.0),
            current_width: Some(8),
            max_gts: Some(32.0),
            max_width: Some(16),
        };
        assert!(l.speed_below_max() && l.width_below_max());
        assert_eq!(l.current_text(), "16.0 GT/s x8");
        assert_eq!(l.max_text(), "32.0 GT/s x16");
        let unknown = PcieLink {
            current_gts: None,
            current_width: Some(8),
            max_gts: Some(32.0),
            max_width: None,
        };
        assert!(!unknown.speed_below_max() && !unknown.width_below_max());
        assert_eq!(unknown.current_text(), "? GT/s x8");
    }

    #[test]
    fn aer_totals_prefer_the_total_line() {
        assert_eq!(
            parse_aer_total("RxErr 2\nBadTLP 1\nTOTAL_ERR_COR 7\n"),
            Some(7)
        );
        assert_eq!(parse_aer_total("RxErr 2\nBadTLP 1\n"), Some(3));
        assert_eq!(parse_aer_total("garbage\n"), None);
        assert_eq!(parse_aer_total(""), None);
    }

    #[test]
    fn ports_above_a_device_nearest_first() {
        let p = ports_above(
            "/sys/devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.4/0000:53:00.0",
        );
        let names: Vec<&str> = p.iter().map(|(b, _)| b.as_str()).collect();
        assert_eq!(names, ["0000:46:01.4", "0000:45:00.0", "0000:44:00.0"]);
        assert!(ports_above("/sys/devices/pci0000:10/0000:10:1c.0").is_empty());
        assert!(!is_bdf("pci0000:44"));
    }
}
