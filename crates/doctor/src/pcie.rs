//! PCIe checks from sysfs: trained link speed and width against what each link can do, for the
//! GPUs, the EFAs and the bridge ports above them, and AER error counters rising over
//! `--interval`.
//!
//! Why separate checks per kind: a GPU lowers its own link speed when idle (power saving), so a
//! GPU link below its maximum *speed* alone is a warning to recheck under load, while a width
//! below the maximum, or any EFA or upstream port below its maximum, is a fault that halves the
//! bandwidth of everything behind it. A downstream port and the device under it are the two ends
//! of one link; that link is judged once, at the device.

use crate::{Check, Status};
use efabench_topology::pcie::{AerSnapshot, LinkOwner, LinkReading};

const FIX_LINK: &str = "a link trains below its maximum after a bad seat, riser or retimer: stop and start the instance (on EC2 that moves it to other hardware) or, on your own hardware, reseat the card; if it persists, drain the node and report the instance id and the device";

fn shortfall(r: &LinkReading) -> String {
    format!(
        "{}: PCIe {}, capable of {}",
        r.label(),
        r.link.current_text(),
        r.capable_text()
    )
}

/// `pcie-gpu-links`: width short → fail; speed short alone → warn (idle GPUs lower it).
pub(crate) fn gpu_links(readings: &[LinkReading], gpus: usize) -> Check {
    let id = "pcie-gpu-links";
    let mine: Vec<&LinkReading> = readings
        .iter()
        .filter(|r| matches!(r.owner, LinkOwner::Gpu { .. }))
        .collect();
    if gpus == 0 {
        return Check::new(id, Status::Skip, "no NVIDIA GPU in sysfs");
    }
    if mine.is_empty() {
        return Check::new(id, Status::Skip, format!(
            "{gpus} GPU(s) but no PCIe link files (current_link_speed, max_link_width, ...) under their sysfs devices"))
            .fix("a VM may hide them; `nvidia-smi -q -d PCI` shows the link NVML sees");
    }
    let narrow: Vec<&&LinkReading> = mine.iter().filter(|r| r.width_short()).collect();
    if !narrow.is_empty() {
        return Check::new(
            id,
            Status::Fail,
            narrow
                .iter()
                .map(|r| shortfall(r))
                .collect::<Vec<_>>()
                .join("; "),
        )
        .fix(FIX_LINK)
        .subjects(narrow.iter().map(|r| r.bdf.clone()));
    }
    let slow: Vec<&&LinkReading> = mine.iter().filter(|r| r.speed_short()).collect();
    if !slow.is_empty() {
        return Check::new(id, Status::Warn, format!(
            "{} (full width; an idle GPU lowers its link speed by itself)",
            slow.iter().map(|r| shortfall(r)).collect::<Vec<_>>().join("; ")))
            .fix("rerun while the GPUs are busy (e.g. during `efabench h2d`); a GPU still below its speed under load has a link fault: stop and start the instance or reseat the card")
            .subjects(slow.iter().map(|r| r.bdf.clone()));
    }
    all_full(id, &mine, "GPU")
}

/// `pcie-efa-links`: speed or width short → fail.
pub(crate) fn efa_links(readings: &[LinkReading], nics: usize) -> Check {
    let id = "pcie-efa-links";
    let mine: Vec<&LinkReading> = readings
        .iter()
        .filter(|r| matches!(r.owner, LinkOwner::Efa { .. }))
        .collect();
    if nics == 0 {
        return Check::new(id, Status::Skip, "no EFA device in sysfs");
    }
    if mine.is_empty() {
        return Check::new(
            id,
            Status::Skip,
            format!("{nics} EFA device(s) but no PCIe link files under their sysfs devices"),
        );
    }
    short_is_fail(id, &mine, "EFA")
}

/// `pcie-port-links`: the links between root ports and switches (ports with no GPU or EFA
/// directly below; the others read the device's own link, judged above).
pub(crate) fn port_links(readings: &[LinkReading]) -> Check {
    let id = "pcie-port-links";
    let mine: Vec<&LinkReading> = readings
        .iter()
        .filter(|r| matches!(&r.owner, LinkOwner::Port { direct, .. } if direct.is_empty()))
        .collect();
    if mine.is_empty() {
        return Check::new(
            id,
            Status::Skip,
            "no bridge port between the host bridge and the GPUs/EFAs shows link files",
        );
    }
    short_is_fail(id, &mine, "upstream port")
}

fn short_is_fail(id: &str, mine: &[&LinkReading], what: &str) -> Check {
    let short: Vec<&&LinkReading> = mine
        .iter()
        .filter(|r| r.width_short() || r.speed_short())
        .collect();
    if short.is_empty() {
        return all_full(id, mine, what);
    }
    Check::new(
        id,
        Status::Fail,
        short
            .iter()
            .map(|r| shortfall(r))
            .collect::<Vec<_>>()
            .join("; "),
    )
    .fix(FIX_LINK)
    .subjects(short.iter().map(|r| r.bdf.clone()))
}

fn all_full(id: &str, mine: &[&LinkReading], what: &str) -> Check {
    let mut kinds: Vec<String> = mine.iter().map(|r| r.link.current_text()).collect();
    kinds.sort();
    kinds.dedup();
    Check::new(
        id,
        Status::Pass,
        format!(
            "{} {what} link(s) at their maximum ({})",
            mine.len(),
            kinds.join(", ")
        ),
    )
}

/// `pcie-aer`: fatal/non-fatal rising → fail; correctable rising, or fatal/non-fatal non-zero
/// but steady → warn.
pub fn check_aer(before: &AerSnapshot, after: &AerSnapshot) -> Check {
    let id = "pcie-aer";
    if after.devices.is_empty() {
        return Check::new(id, Status::Skip,
            "no AER counters (aer_dev_correctable/_nonfatal/_fatal) on the GPUs, EFAs or ports: AER is off or hidden by the hypervisor");
    }
    let secs = after.at.saturating_duration_since(before.at).as_secs_f64();
    let rises = before.rises(after);
    let text = |v: &[&efabench_topology::pcie::AerRise]| {
        v.iter()
            .map(|r| format!("{} {} {}→{}", r.label, r.kind, r.before, r.after))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let bad: Vec<_> = rises.iter().filter(|r| r.kind != "correctable").collect();
    if !bad.is_empty() {
        return Check::new(id, Status::Fail, format!("uncorrectable PCIe errors rising over {secs:.1}s: {}", text(&bad)))
            .fix("uncorrectable errors corrupt or drop transactions: drain the node, check `dmesg | grep -i aer` for the device, stop and start the instance (or reseat/replace the card)")
            .subjects(bad.iter().map(|r| r.label.clone()));
    }
    if !rises.is_empty() {
        let all: Vec<_> = rises.iter().collect();
        return Check::new(id, Status::Warn, format!("correctable PCIe errors rising over {secs:.1}s: {}", text(&all)))
            .fix("correctable errors are retried by the link and cost bandwidth; a steady stream means a marginal link: watch `dmesg | grep -i aer`, rerun with a longer --interval under load, and replace the node if they keep rising")
            .subjects(all.iter().map(|r| r.label.clone()));
    }
    let stale: Vec<String> = after
        .devices
        .values()
        .filter(|(_, c)| c.fatal.unwrap_or(0) + c.nonfatal.unwrap_or(0) > 0)
        .map(|(l, c)| {
            format!(
                "{l} nonfatal={} fatal={}",
                c.nonfatal.unwrap_or(0),
                c.fatal.unwrap_or(0)
            )
        })
        .collect();
    let how = if secs >= 0.05 {
        format!("not rising over {secs:.1}s")
    } else {
        "one snapshot only: --interval 0".to_string()
    };
    if !stale.is_empty() {
        return Check::new(id, Status::Warn, format!("uncorrectable PCIe errors since boot, {how}: {}", stale.join("; ")))
            .fix("counts are cumulative since boot; find when they happened in `dmesg | grep -i aer` and rerun with a longer --interval under load")
            .subjects(stale);
    }
    let corr: u64 = after
        .devices
        .values()
        .map(|(_, c)| c.correctable.unwrap_or(0))
        .sum();
    Check::new(
        id,
        Status::Pass,
        format!(
            "no uncorrectable PCIe errors on {} function(s), {corr} correctable since boot ({how})",
            after.devices.len()
        ),
    )
}
