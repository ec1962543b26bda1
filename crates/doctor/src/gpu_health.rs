//! GPU checks from the driver's readings ([`GpuHealthSource`]: NVML on a live node, a JSON
//! fixture in tests): PCIe generation and width, the PCIe replay counter and NVLink error
//! counters rising over `--interval`, NVLinks down, XID events, uncorrected ECC, row remapping,
//! throttle reasons and persistence mode.
//!
//! Why these rules: they follow what cluster operators drain nodes for. A GPU fault (uncorrected
//! ECC, a failed row remap, a fatal XID, an NVLink down or recovering) takes the node out; what
//! the hardware retries on its own (PCIe replays, NVLink CRC/replay) or what a reset or a setting
//! fixes (pending remap, throttling, persistence off) is a warning. "Not supported" is never a
//! failure: a one-GPU machine has no NVLink, an older GPU no row remapping.

use crate::{Check, Status};
use efabench_topology::gpu_health::{GpuHealth, GpuHealthSource, Reading, XidEvent};

/// Where the GPU readings come from, as the doctor is given it.
#[derive(Clone)]
pub enum NvmlInput {
    /// Not asked (a fixture root without `--nvml-fixture`): no GPU health checks at all.
    NotQueried,
    /// Asked and no driver answered; the text says why.
    Unavailable(String),
    Source(std::sync::Arc<dyn GpuHealthSource + Send + Sync>),
}

impl std::fmt::Debug for NvmlInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlInput::NotQueried => f.write_str("NotQueried"),
            NvmlInput::Unavailable(w) => write!(f, "Unavailable({w:?})"),
            NvmlInput::Source(s) => write!(f, "Source({})", s.describe()),
        }
    }
}

/// XIDs that mean the GPU (not the application) failed: double-bit/uncontained ECC (48, 95),
/// PMU/falcon halts (61, 62), row remap failure (64), NVLink error (74), fallen off the bus (79),
/// GSP errors (119, 120), unrecovered ECC (140), reset required (154).
pub const FATAL_XIDS: &[u32] = &[48, 61, 62, 64, 74, 79, 95, 119, 120, 140, 154];

fn gpu(g: &GpuHealth) -> String {
    format!("GPU {} {}", g.index, g.pci_bus_id)
}

/// The checks for two snapshots taken `--interval` apart (the same one twice when the interval
/// is 0) and the XID events.
pub(crate) fn checks(
    before: &[GpuHealth],
    after: &[GpuHealth],
    xids: &Reading<Vec<XidEvent>>,
    source: &str,
    secs: f64,
) -> Vec<Check> {
    vec![
        pcie(after, source),
        pcie_replay(before, after, secs),
        nvlink_state(after),
        nvlink_errors(before, after, secs),
        xid(xids, after),
        ecc(after),
        row_remap(after),
        throttle(after),
        persistence(after),
    ]
}

/// The check for a driver that did not answer: one skip, the rest left out.
pub(crate) fn unavailable(why: &str) -> Check {
    Check::new(
        "gpu-nvml",
        Status::Skip,
        format!("no NVIDIA driver ({why})"),
    )
    .fix("install the NVIDIA driver (libnvidia-ml.so.1) to check GPU health; on a node without GPUs nothing is needed")
}

/// Readings of one kind across GPUs: values, and the GPUs that do not support it / failed.
fn split<'a, T>(
    gpus: &'a [GpuHealth],
    get: impl Fn(&'a GpuHealth) -> &'a Reading<T>,
) -> (Vec<(&'a GpuHealth, &'a T)>, Vec<String>) {
    let mut vals = Vec::new();
    let mut other = Vec::new();
    for g in gpus {
        match get(g) {
            Reading::Value(v) => vals.push((g, v)),
            Reading::NotSupported => other.push(format!("{}: not supported", gpu(g))),
            Reading::Error(e) => other.push(format!("{}: {e}", gpu(g))),
        }
    }
    (vals, other)
}

fn skip_all(id: &str, what: &str, other: &[String]) -> Check {
    Check::new(
        id,
        Status::Skip,
        format!("{what} not readable: {}", other.join("; ")),
    )
}

fn pcie(after: &[GpuHealth], source: &str) -> Check {
    let id = "gpu-pcie-nvml";
    let (vals, other) = split(after, |g| &g.pcie);
    if vals.is_empty() {
        return skip_all(id, "PCIe link", &other);
    }
    let text = |g: &GpuHealth, p: &efabench_topology::gpu_health::NvmlPcie| {
        format!(
            "{}: PCIe Gen{} x{}, capable of Gen{} x{}",
            gpu(g),
            p.gen_current,
            p.width_current,
            p.gen_max,
            p.width_max
        )
    };
    let narrow: Vec<String> = vals
        .iter()
        .filter(|(_, p)| p.width_current < p.width_max)
        .map(|(g, p)| text(g, p))
        .collect();
    if !narrow.is_empty() {
        return Check::new(id, Status::Fail, narrow.join("; "))
            .fix("the GPU's link trained at fewer lanes than it has: stop and start the instance (other hardware) or reseat the card; drain the node until then");
    }
    let slow: Vec<String> = vals
        .iter()
        .filter(|(_, p)| p.gen_current < p.gen_max)
        .map(|(g, p)| text(g, p))
        .collect();
    if !slow.is_empty() {
        return Check::new(id, Status::Warn, format!("{} (full width; an idle GPU lowers its link generation by itself)", slow.join("; ")))
            .fix("rerun while the GPUs are busy (e.g. during `efabench h2d`); a GPU still below its generation under load has a link fault");
    }
    Check::new(
        id,
        Status::Pass,
        format!(
            "{} GPU(s) at their maximum PCIe generation and width ({source})",
            vals.len()
        ),
    )
}

fn by_bus<'a>(gpus: &'a [GpuHealth], g: &GpuHealth) -> Option<&'a GpuHealth> {
    gpus.iter().find(|x| x.pci_bus_id == g.pci_bus_id)
}

fn how(secs: f64) -> String {
    if secs >= 0.05 {
        format!("over {secs:.1}s")
    } else {
        "between two back-to-back reads (--interval 0)".into()
    }
}

fn pcie_replay(before: &[GpuHealth], after: &[GpuHealth], secs: f64) -> Check {
    let id = "gpu-pcie-replay";
    let (vals, other) = split(after, |g| &g.pcie_replay);
    if vals.is_empty() {
        return skip_all(id, "PCIe replay counter", &other);
    }
    let mut rising = Vec::new();
    for (g, a) in &vals {
        if let Some(Reading::Value(b)) = by_bus(before, g).map(|x| &x.pcie_replay) {
            if a > &b {
                rising.push(format!("{} {b}→{a}", gpu(g)));
            }
        }
    }
    if !rising.is_empty() {
        return Check::new(id, Status::Warn, format!("PCIe replays rising {}: {}", how(secs), rising.join("; ")))
            .fix("replays are link-level retransmissions: a marginal GPU link; rerun under load with a longer --interval and check `pcie-aer`; replace the node if they keep rising");
    }
    let total: u64 = vals.iter().map(|(_, v)| **v).sum();
    Check::new(
        id,
        Status::Pass,
        format!(
            "PCIe replay counters not rising ({}; {total} since the driver loaded)",
            how(secs)
        ),
    )
}

fn nvlink_state(after: &[GpuHealth]) -> Check {
    let id = "gpu-nvlink";
    let (vals, other) = split(after, |g| &g.nvlinks);
    let vals: Vec<_> = vals.into_iter().filter(|(_, l)| !l.is_empty()).collect();
    if vals.is_empty() {
        return Check::new(
            id,
            Status::Skip,
            format!(
                "NVLink not supported here ({}): a one-GPU machine or GPUs without NVLink",
                if other.is_empty() {
                    "no links reported".to_string()
                } else {
                    other.join("; ")
                }
            ),
        );
    }
    let most = vals
        .iter()
        .map(|(_, l)| l.iter().filter(|x| x.active).count())
        .max()
        .unwrap_or(0);
    let mut down = Vec::new();
    for (g, links) in &vals {
        let up = links.iter().filter(|x| x.active).count();
        if up < most || up < links.len() {
            let which: Vec<String> = links
                .iter()
                .filter(|x| !x.active)
                .map(|x| x.link.to_string())
                .collect();
            down.push(format!(
                "{}: {up} of {} links up (down: {})",
                gpu(g),
                links.len(),
                which.join(",")
            ));
        }
    }
    if !down.is_empty() {
        return Check::new(id, Status::Fail, down.join("; "))
            .fix("an NVLink is down: check `nvidia-smi nvlink -s` and the fabric manager (`systemctl status nvidia-fabricmanager`); reset the GPUs or reboot, and drain the node if a link stays down");
    }
    Check::new(
        id,
        Status::Pass,
        format!("{} GPU(s), all {most} NVLinks up on each", vals.len()),
    )
}

fn nvlink_errors(before: &[GpuHealth], after: &[GpuHealth], secs: f64) -> Check {
    let id = "gpu-nvlink-errors";
    let (vals, _) = split(after, |g| &g.nvlinks);
    let vals: Vec<_> = vals.into_iter().filter(|(_, l)| !l.is_empty()).collect();
    if vals.is_empty() {
        return Check::new(
            id,
            Status::Skip,
            "NVLink not supported here: no error counters",
        );
    }
    let mut warn = Vec::new();
    let mut fail = Vec::new();
    for (g, links) in &vals {
        let Some(Reading::Value(prev)) = by_bus(before, g).map(|x| &x.nvlinks) else {
            continue;
        };
        for l in links.iter() {
            let Some(p) = prev.iter().find(|p| p.link == l.link) else {
                continue;
            };
            for (name, a, b) in [
                ("crc_flit", l.crc_flit, p.crc_flit),
                ("crc_data", l.crc_data, p.crc_data),
                ("replay", l.replay, p.replay),
                ("recovery", l.recovery, p.recovery),
            ] {
                if let (Some(a), Some(b)) = (a, b) {
                    if a > b {
                        let s = format!("{} link {} {name} {b}→{a}", gpu(g), l.link);
                        if name == "recovery" {
                            fail.push(s)
                        } else {
                            warn.push(s)
                        }
                    }
                }
            }
        }
    }
    if !fail.is_empty() {
        fail.extend(warn);
        return Check::new(id, Status::Fail, format!("NVLink recoveries {}: {}", how(secs), fail.join("; ")))
            .fix("a link that goes through recovery stalls every transfer on it: reset the GPUs or reboot; drain the node if recoveries continue");
    }
    if !warn.is_empty() {
        return Check::new(id, Status::Warn, format!("NVLink errors rising {}: {}", how(secs), warn.join("; ")))
            .fix("CRC errors and replays are retried by the link and cost bandwidth; rerun under NVLink load (`efabench ipc`) with a longer --interval; replace the node if they keep rising");
    }
    Check::new(
        id,
        Status::Pass,
        format!("NVLink error counters not rising ({})", how(secs)),
    )
}

fn xid(xids: &Reading<Vec<XidEvent>>, after: &[GpuHealth]) -> Check {
    let id = "gpu-xid";
    let events = match xids {
        Reading::Value(v) => v,
        Reading::NotSupported => return Check::new(id, Status::Skip, "XID events not readable here"),
        Reading::Error(e) => {
            return Check::new(id, Status::Skip, format!("XID events not readable: {e}"))
                .fix("run as root (the kernel log, /dev/kmsg, holds the driver's `NVRM: Xid` lines), or read `dmesg | grep -i xid`")
        }
    };
    let name = |e: &XidEvent| {
        after
            .iter()
            .find(|g| g.pci_bus_id == e.pci_bus_id)
            .map(gpu)
            .unwrap_or_else(|| e.pci_bus_id.clone())
    };
    let mut seen: Vec<String> = Vec::new();
    let mut fatal = false;
    for e in events {
        let s = format!("{} Xid {}", name(e), e.xid);
        if !seen.contains(&s) {
            seen.push(s);
        }
        fatal |= FATAL_XIDS.contains(&e.xid);
    }
    if fatal {
        return Check::new(id, Status::Fail, format!("GPU fault XIDs since the driver loaded: {}", seen.join(", ")))
            .fix("these XIDs are hardware faults (ECC, fallen off the bus, NVLink, GSP): drain the node, reset the GPU or reboot, and replace the instance if they return");
    }
    if !seen.is_empty() {
        return Check::new(id, Status::Warn, format!("XIDs since the driver loaded: {}", seen.join(", ")))
            .fix("these XIDs are usually application faults (illegal address, MMU fault, engine exception); check the job that ran at that time in `dmesg -T | grep -i xid`");
    }
    Check::new(id, Status::Pass, "no XID event since the driver loaded")
}

fn ecc(after: &[GpuHealth]) -> Check {
    let id = "gpu-ecc";
    let (vals, other) = split(after, |g| &g.ecc_uncorrected_volatile);
    if vals.is_empty() {
        return skip_all(id, "ECC counters", &other);
    }
    let bad: Vec<String> = vals
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(g, v)| format!("{}: {v} uncorrected", gpu(g)))
        .collect();
    if !bad.is_empty() {
        return Check::new(id, Status::Fail, format!("uncorrected ECC errors since the driver loaded: {}", bad.join("; ")))
            .fix("uncorrected memory errors kill the job that hit them: drain the node, reset the GPU (`nvidia-smi -r`) or reboot so row remapping can take effect, and replace the instance if they return");
    }
    Check::new(
        id,
        Status::Pass,
        format!("no uncorrected ECC error on {} GPU(s)", vals.len()),
    )
}

fn row_remap(after: &[GpuHealth]) -> Check {
    let id = "gpu-row-remap";
    let (vals, other) = split(after, |g| &g.remapped_rows);
    if vals.is_empty() {
        return skip_all(id, "row remapping", &other);
    }
    let failed: Vec<String> = vals
        .iter()
        .filter(|(_, r)| r.failure)
        .map(|(g, r)| {
            format!(
                "{}: remap failed ({} rows remapped for uncorrectable errors)",
                gpu(g),
                r.uncorrectable
            )
        })
        .collect();
    if !failed.is_empty() {
        return Check::new(id, Status::Fail, failed.join("; "))
            .fix("no spare row was left: the GPU's memory is worn out; drain the node and replace the instance");
    }
    let pending: Vec<String> = vals
        .iter()
        .filter(|(_, r)| r.pending)
        .map(|(g, _)| format!("{}: remap pending", gpu(g)))
        .collect();
    if !pending.is_empty() {
        return Check::new(id, Status::Warn, pending.join("; ")).fix(
            "a remapped row takes effect at the next GPU reset: `nvidia-smi -r` (no process on the GPU) or reboot",
        );
    }
    let rows: u32 = vals
        .iter()
        .map(|(_, r)| r.correctable + r.uncorrectable)
        .sum();
    Check::new(
        id,
        Status::Pass,
        format!(
            "no row remap pending or failed on {} GPU(s) ({rows} rows remapped)",
            vals.len()
        ),
    )
}

fn throttle(after: &[GpuHealth]) -> Check {
    let id = "gpu-throttle";
    let (vals, other) = split(after, |g| &g.throttle);
    if vals.is_empty() {
        return skip_all(id, "throttle reasons", &other);
    }
    let mut held = Vec::new();
    for (g, t) in &vals {
        let mut r = Vec::new();
        for (on, name) in [
            (t.hw_slowdown, "HW slowdown"),
            (t.hw_thermal, "HW thermal"),
            (t.sw_thermal, "SW thermal"),
            (t.hw_power_brake, "HW power brake"),
        ] {
            if on {
                r.push(name);
            }
        }
        if !r.is_empty() {
            held.push(format!("{}: {}", gpu(g), r.join(", ")));
        }
    }
    if !held.is_empty() {
        return Check::new(id, Status::Warn, format!("clocks held back: {}", held.join("; ")))
            .fix("thermal: check cooling and `nvidia-smi -q -d TEMPERATURE`; HW slowdown or power brake: the board's power or thermal sensors asserted it (a hardware fault when the GPU is idle): stop and start the instance");
    }
    Check::new(
        id,
        Status::Pass,
        format!(
            "no HW slowdown, thermal or power-brake throttling on {} GPU(s)",
            vals.len()
        ),
    )
}

fn persistence(after: &[GpuHealth]) -> Check {
    let id = "gpu-persistence";
    let (vals, other) = split(after, |g| &g.persistence_mode);
    if vals.is_empty() {
        return skip_all(id, "persistence mode", &other);
    }
    let off: Vec<String> = vals
        .iter()
        .filter(|(_, on)| !**on)
        .map(|(g, _)| gpu(g))
        .collect();
    if !off.is_empty() {
        return Check::new(id, Status::Warn, format!("persistence mode off: {}", off.join(", ")))
            .fix("enable it (`sudo nvidia-smi -pm 1`, or run nvidia-persistenced): without it the driver tears the GPU down between jobs and every job start pays seconds of initialisation");
    }
    Check::new(
        id,
        Status::Pass,
        format!("persistence mode on for {} GPU(s)", vals.len()),
    )
}
