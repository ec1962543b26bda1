//! The doctor's GPU health readings from NVML ([`NvmlHealth`], the live implementation of
//! [`GpuHealthSource`]), and XID events from the kernel log.
//!
//! Every query is mapped to a [`Reading`]: NVML's `NOT_SUPPORTED` (NVLink on a one-GPU machine,
//! row remapping on a GPU without it) becomes [`Reading::NotSupported`], which the checks skip,
//! and any other failure [`Reading::Error`] with NVML's words. Nothing here panics without a
//! driver: [`NvmlHealth::open`] returns the reason instead.

use crate::nvml::normalize_bus_id;
use efabench_topology::gpu_health::{
    parse_xids, GpuHealth, GpuHealthSource, NvlinkLink, NvmlPcie, Reading, RemappedRows, Throttle,
    Unavailable, XidEvent,
};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_REMAPPED_COR, NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_REMAPPED_PENDING,
    NVML_FI_DEV_REMAPPED_UNC,
};
use nvml_wrapper::{Device, Nvml};

/// `NVML_NVLINK_MAX_LINKS`.
const MAX_LINKS: u32 = 18;

/// NVML, loaded once for the doctor's two snapshots.
pub struct NvmlHealth {
    nvml: Nvml,
}

impl NvmlHealth {
    /// Load NVML; the error is the one-line reason (no driver, driver/library mismatch, ...).
    pub fn open() -> Result<NvmlHealth, Unavailable> {
        Nvml::init()
            .map(|nvml| NvmlHealth { nvml })
            .map_err(|e| Unavailable(format!("libnvidia-ml.so.1: {e}")))
    }
}

fn reading<T>(r: Result<T, NvmlError>) -> Reading<T> {
    match r {
        Ok(v) => Reading::Value(v),
        Err(NvmlError::NotSupported) => Reading::NotSupported,
        Err(e) => Reading::Error(e.to_string()),
    }
}

fn sample_u64(v: &SampleValue) -> Option<u64> {
    match v {
        SampleValue::U32(x) => Some(u64::from(*x)),
        SampleValue::U64(x) => Some(*x),
        SampleValue::I64(x) => u64::try_from(*x).ok(),
        SampleValue::F64(_) => None,
    }
}

fn remapped_rows(d: &Device) -> Reading<RemappedRows> {
    let ids = [
        NVML_FI_DEV_REMAPPED_COR,
        NVML_FI_DEV_REMAPPED_UNC,
        NVML_FI_DEV_REMAPPED_PENDING,
        NVML_FI_DEV_REMAPPED_FAILURE,
    ]
    .map(FieldId);
    let samples = match d.field_values_for(&ids) {
        Ok(s) => s,
        Err(e) => return reading(Err(e)),
    };
    let mut vals = [0u64; 4];
    for (i, s) in samples.into_iter().enumerate().take(4) {
        let v = match s {
            Ok(s) => s.value,
            Err(e) => return reading(Err(e)),
        };
        match v.as_ref().ok().and_then(sample_u64) {
            Some(x) => vals[i] = x,
            None => {
                return match v {
                    Err(NvmlError::NotSupported) => Reading::NotSupported,
                    Err(e) => Reading::Error(e.to_string()),
                    Ok(_) => Reading::Error("row remapping field is not an integer".into()),
                }
            }
        }
    }
    Reading::Value(RemappedRows {
        correctable: u32::try_from(vals[0]).unwrap_or(u32::MAX),
        uncorrectable: u32::try_from(vals[1]).unwrap_or(u32::MAX),
        pending: vals[2] != 0,
        failure: vals[3] != 0,
    })
}

fn nvlinks(d: &Device) -> Reading<Vec<NvlinkLink>> {
    let mut links = Vec::new();
    for l in 0..MAX_LINKS {
        let w = d.link_wrapper_for(l);
        match w.is_active() {
            Ok(active) => {
                let count = |c| w.error_counter(c).ok();
                links.push(NvlinkLink {
                    link: l,
                    active,
                    crc_flit: count(ErrorCounter::DlCrcFlit),
                    crc_data: count(ErrorCounter::DlCrcData),
                    replay: count(ErrorCounter::DlReplay),
                    recovery: count(ErrorCounter::DlRecovery),
                });
            }
            // Link numbers past the GPU's last link answer NOT_SUPPORTED / INVALID_ARG.
            Err(NvmlError::NotSupported) | Err(NvmlError::InvalidArg) => {}
            Err(e) if links.is_empty() && l == 0 => return Reading::Error(e.to_string()),
            Err(_) => {}
        }
    }
    if links.is_empty() {
        Reading::NotSupported
    } else {
        Reading::Value(links)
    }
}

fn one(i: u32, d: &Device) -> GpuHealth {
    let pci_bus_id = d
        .pci_info()
        .map(|p| normalize_bus_id(&p.bus_id))
        .unwrap_or_default();
    let pcie = (|| {
        Ok(NvmlPcie {
            gen_current: d.current_pcie_link_gen()?,
            gen_max: d.max_pcie_link_gen()?,
            width_current: d.current_pcie_link_width()?,
            width_max: d.max_pcie_link_width()?,
        })
    })();
    GpuHealth {
        index: d.index().unwrap_or(i),
        pci_bus_id,
        name: d.name().unwrap_or_default(),
        pcie: reading(pcie),
        pcie_replay: reading(d.pcie_replay_counter().map(u64::from)),
        nvlinks: nvlinks(d),
        ecc_uncorrected_volatile: reading(
            d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        ),
        remapped_rows: remapped_rows(d),
        throttle: reading(d.current_throttle_reasons().map(|t| Throttle {
            hw_slowdown: t.contains(ThrottleReasons::HW_SLOWDOWN),
            hw_thermal: t.contains(ThrottleReasons::HW_THERMAL_SLOWDOWN),
            sw_thermal: t.contains(ThrottleReasons::SW_THERMAL_SLOWDOWN),
            hw_power_brake: t.contains(ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN),
        })),
        persistence_mode: reading(d.is_in_persistent_mode()),
    }
}

impl GpuHealthSource for NvmlHealth {
    fn snapshot(&self) -> Result<Vec<GpuHealth>, Unavailable> {
        let n = self
            .nvml
            .device_count()
            .map_err(|e| Unavailable(format!("NVML device count: {e}")))?;
        let mut out = Vec::new();
        for i in 0..n {
            let d = self
                .nvml
                .device_by_index(i)
                .map_err(|e| Unavailable(format!("NVML device {i}: {e}")))?;
            out.push(one(i, &d));
        }
        Ok(out)
    }

    fn xids(&self) -> Reading<Vec<XidEvent>> {
        match read_kmsg() {
            Ok(text) => Reading::Value(parse_xids(&text)),
            Err(e) => Reading::Error(e),
        }
    }

    fn describe(&self) -> String {
        match self.nvml.sys_driver_version() {
            Ok(v) => format!("NVML, driver {v}"),
            Err(_) => "NVML".into(),
        }
    }
}

/// Everything the kernel log still holds (`/dev/kmsg`, one record per read, opened
/// non-blocking so the read stops at the end instead of waiting for new records).
fn read_kmsg() -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .map_err(|e| format!("/dev/kmsg: {e}"))?;
    let mut out = String::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.push_str(&String::from_utf8_lossy(&buf[..n]));
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // A record overwritten while reading: carry on with the next one.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) => return Err(format!("/dev/kmsg: {e}")),
        }
    }
    Ok(out)
}
