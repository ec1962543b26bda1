//! The checks that compare two readings taken `--interval` apart: EFA error counters, PCIe AER
//! counters, and the GPU readings (PCIe replays, NVLink errors).
//!
//! Why one place: every "rising" check shares a single wait, so `--interval 1` costs one second
//! however many sources there are, and every pair of readings spans the same time.

use crate::{Check, Inputs, NvmlInput, Status};
use efabench_topology::counters::{is_error_counter, Snapshot};
use efabench_topology::pcie::{AerSnapshot, LinkReading};
use efabench_topology::Topology;

/// The verdicts of the rising checks.
pub(crate) struct Rising {
    pub efa: Check,
    pub aer: Check,
    /// The GPU health checks (none when NVML was not asked).
    pub gpu: Vec<Check>,
}

/// Reads every source, waits `--interval` once (when any source answered), reads again.
pub(crate) fn read(inputs: &Inputs, topo: &Topology, links: &[LinkReading]) -> Rising {
    let root = &inputs.root;
    let efa_before = Snapshot::read(root);
    let aer_before = AerSnapshot::read(root, topo, links);
    let gpu_before = match &inputs.nvml {
        NvmlInput::Source(s) => Some(s.snapshot()),
        _ => None,
    };
    let started = std::time::Instant::now();
    let waits =
        efa_before.is_some() || !aer_before.devices.is_empty() || matches!(gpu_before, Some(Ok(_)));
    if !inputs.interval.is_zero() && waits {
        std::thread::sleep(inputs.interval);
    }
    let efa_after = efa_before.as_ref().map(|_| Snapshot::read(root));
    let aer_after = AerSnapshot::read(root, topo, links);
    let gpu = match (&inputs.nvml, gpu_before) {
        (NvmlInput::NotQueried, _) | (NvmlInput::Source(_), None) => Vec::new(),
        (NvmlInput::Unavailable(why), _) => vec![crate::gpu_health::unavailable(why)],
        (NvmlInput::Source(s), Some(Ok(before))) => {
            let after = s.snapshot().unwrap_or_else(|_| before.clone());
            crate::gpu_health::checks(
                &before,
                &after,
                &s.xids(),
                &s.describe(),
                started.elapsed().as_secs_f64(),
            )
        }
        (NvmlInput::Source(_), Some(Err(e))) => vec![crate::gpu_health::unavailable(&e.0)],
    };
    Rising {
        efa: efa_counters(efa_before, efa_after),
        aer: crate::pcie::check_aer(&aer_before, &aer_after),
        gpu,
    }
}

/// `after` is `None` when there was no first snapshot, `Some(None)` when the second read failed.
fn efa_counters(before: Option<Snapshot>, after: Option<Option<Snapshot>>) -> Check {
    let (Some(a), Some(after)) = (before, after) else {
        return Check::new("efa-counters", Status::Skip, "no readable EFA hw_counters");
    };
    match after {
        Some(b) => check_counters(&a, &b),
        None => Check::new(
            "efa-counters",
            Status::Fail,
            "EFA hw_counters disappeared between two reads",
        )
        .fix("the driver was unloaded or the device reset; check `dmesg | grep -i efa`"),
    }
}

/// The error-counter verdict from two snapshots: rising → fail, non-zero but steady → warn.
pub fn check_counters(before: &Snapshot, after: &Snapshot) -> Check {
    let id = "efa-counters";
    let secs = after.at.saturating_duration_since(before.at).as_secs_f64();
    let mut rising = Vec::new();
    let mut subjects = Vec::new();
    for d in before.delta(after) {
        let errs = d.errors();
        if !errs.is_empty() {
            subjects.push(d.name.clone());
            for (k, v) in errs {
                rising.push(format!("{}:{k}+{v}", d.name));
            }
        }
    }
    if !rising.is_empty() {
        return Check::new(id, Status::Fail, format!(
            "error counters rising over {secs:.1}s: {}", rising.join(", ")))
            .fix("cmds_err/no_completion_cmds: device or driver trouble (dmesg, reload, stop/start); reg_mr_err: GPUDirect/memlock; rx_drops/retrans_*/unresponsive_remote_events: peer, security group or fabric trouble — run a two-node `efabench sendrecv`")
            .subjects(subjects);
    }
    let mut stale = Vec::new();
    let mut stale_nics = Vec::new();
    for n in &after.nics {
        let mut any = false;
        for (k, v) in n.device.iter().chain(n.port.iter()) {
            if is_error_counter(k) && *v > 0 {
                let s = format!("{}:{k}={v}", n.name);
                if !stale.contains(&s) {
                    stale.push(s);
                }
                any = true;
            }
        }
        if any {
            stale_nics.push(n.name.clone());
        }
    }
    let how = if secs >= 0.05 {
        format!("not rising over {secs:.1}s")
    } else {
        "one snapshot only: --interval 0".to_string()
    };
    if !stale.is_empty() {
        return Check::new(id, Status::Warn, format!(
            "error counters non-zero since driver load, {how}: {}", stale.join(", ")))
            .fix("counters are cumulative; rerun with a longer --interval (or around a workload with `efabench counters -- CMD`) to see whether they still rise")
            .subjects(stale_nics);
    }
    Check::new(
        id,
        Status::Pass,
        format!(
            "all error counters zero on {} EFA device(s) ({how})",
            after.nics.len()
        ),
    )
}
