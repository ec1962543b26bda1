//! The GPU-initiated networking group (`doctor --gin`): is this node ready for NCCL's GIN over EFA?
//!
//! Two modes exist. In proxy mode a CPU thread helps the GPU's queued operations along; it needs
//! aws-ofi-nccl >= 1.21, NCCL >= 2.31.2 and GDRCopy >= 2.5 (library and `gdrdrv`). EFA-GDA, where
//! the kernel rings the NIC itself, needs in addition an instance type that supports it (p5en,
//! p6-b200, p6-b300), EFA driver >= 3.3.0, rdma-core >= 64.0amzn0 and libfabric >= 2.6 (all in
//! EFA installer >= 1.50), and the NVIDIA driver loaded with `PeerMappingOverride=1`. The group
//! ends with one `gin` verdict naming the modes that are ready and what each lacks.

use crate::{Check, Status};
use efabench_topology::gin::GinStack;
use efabench_topology::installed::{version_lt, EfaDriver, Found, Installed};

/// Instance families whose EFA supports EFA-GDA.
pub const EFA_GDA_FAMILIES: &[&str] = &["p5en", "p6-b200", "p6-b300"];

pub const MIN_AWS_OFI_NCCL: &str = "1.21.0";
pub const MIN_NCCL: &str = "2.31.2";
pub const MIN_GDRCOPY: &str = "2.5";
pub const MIN_EFA_DRIVER: &str = "3.3.0";
pub const MIN_RDMA_CORE: &str = "64.0";
pub const MIN_LIBFABRIC: &str = "2.6";

const INSTALLER_FIX: &str = "install EFA installer >= 1.50.0 (efa_installer.sh), which brings EFA driver 3.3.0, rdma-core 64.0amzn0, libfabric 2.6 and aws-ofi-nccl 1.21";

/// What the group looks at; gathered by the doctor from the same scan as the other checks.
pub(crate) struct GinFacts<'a> {
    pub instance_type: Option<&'a str>,
    pub installed: &'a Installed,
    pub stack: GinStack,
    pub libfabric_version: Option<&'a str>,
}

/// Whether an instance type can use EFA-GDA at all (`None`: unknown instance type).
pub fn efa_gda_capable(instance_type: Option<&str>) -> Option<bool> {
    let family = instance_type?.split('.').next().unwrap_or_default();
    Some(EFA_GDA_FAMILIES.contains(&family))
}

fn best(found: &[Found]) -> Option<String> {
    Installed::best(found).and_then(|f| f.version.clone())
}

/// A component with a floor: pass / fail "older" / fail "not found".
fn versioned(
    id: &str,
    what: &str,
    version: Option<&str>,
    min: &str,
    subjects: Vec<String>,
    fix: &str,
) -> Check {
    match version {
        None => Check::new(
            id,
            Status::Fail,
            format!("{what} not found (GIN needs >= {min})"),
        )
        .fix(fix)
        .subjects(subjects),
        Some(v) if version_lt(v, min) => {
            Check::new(id, Status::Fail, format!("{what} {v} is older than {min}"))
                .fix(fix)
                .subjects(subjects)
        }
        Some(v) => {
            Check::new(id, Status::Pass, format!("{what} {v} (>= {min})")).subjects(subjects)
        }
    }
}

pub(crate) fn checks(f: &GinFacts) -> Vec<Check> {
    let gda = efa_gda_capable(f.instance_type);
    let instance = f.instance_type.unwrap_or("unknown instance type");
    let families = EFA_GDA_FAMILIES.join(", ");
    let mut out = Vec::new();

    out.push(match gda {
        Some(true) => Check::new("gin-instance", Status::Pass, format!(
            "{instance} supports EFA-GDA (GPU-initiated networking without a CPU proxy; EFA-GDA runs on {families})")),
        Some(false) => Check::new("gin-instance", Status::Warn, format!(
            "{instance} cannot use EFA-GDA (only {families} can); GIN runs in proxy mode here"))
            .fix("use a p5en, p6-b200 or p6-b300 instance for EFA-GDA (NCCL_GIN_TYPE=5); proxy mode needs only the common requirements"),
        None => Check::new("gin-instance", Status::Warn, format!(
            "instance type unknown: EFA-GDA runs only on {families}"))
            .fix("run on the instance itself (DMI product_name) or pass --root of a tree that has it"),
    });

    // Common to both modes.
    let ofi = best(&f.installed.aws_ofi_nccl);
    out.push(versioned(
        "gin-aws-ofi-nccl",
        "aws-ofi-nccl",
        ofi.as_deref(),
        MIN_AWS_OFI_NCCL,
        f.installed.aws_ofi_nccl.iter().map(|x| x.path.clone()).collect(),
        "install aws-ofi-nccl >= 1.21 (EFA installer >= 1.50 ships 1.21.1); GIN support starts there",
    ));
    let nccl = best(&f.installed.nccl);
    out.push(versioned(
        "gin-nccl",
        "NCCL",
        nccl.as_deref(),
        MIN_NCCL,
        f.installed.nccl.iter().map(|x| x.path.clone()).collect(),
        "use NCCL >= 2.31.2 (aws-ofi-nccl's GIN support requires it)",
    ));
    out.push(gdrcopy(&f.stack));

    // EFA-GDA only.
    let gda_checks = vec![
        efa_driver(f),
        rdma_core(&f.stack),
        libfabric(f),
        peer_mapping(&f.stack),
    ];
    if gda == Some(false) {
        for c in gda_checks {
            out.push(Check::new(
                &c.id,
                Status::Skip,
                format!("EFA-GDA only ({instance} cannot use it): {}", c.summary),
            ));
        }
    } else {
        out.extend(gda_checks);
    }
    out.push(verdict(&out, gda, instance));
    out
}

fn gdrcopy(s: &GinStack) -> Check {
    let id = "gin-gdrcopy";
    let lib = Installed::best(&s.gdrapi).and_then(|f| f.version.clone());
    let lib_paths: Vec<String> = s.gdrapi.iter().map(|f| f.path.clone()).collect();
    let fix = "install GDRCopy >= 2.5 (library libgdrapi and kernel module gdrdrv, e.g. the gdrcopy packages or `make install` + `insmod.sh`) and load it: `sudo modprobe gdrdrv`";
    let mut missing = Vec::new();
    match &lib {
        None if s.gdrapi.is_empty() => missing.push("libgdrapi.so not found".to_string()),
        None => missing.push("libgdrapi.so has no version in its file name".to_string()),
        Some(v) if version_lt(v, MIN_GDRCOPY) => {
            missing.push(format!("libgdrapi {v} older than {MIN_GDRCOPY}"))
        }
        Some(_) => {}
    }
    match &s.gdrdrv {
        None => missing.push("gdrdrv not loaded".to_string()),
        Some(Some(v)) if version_lt(v, MIN_GDRCOPY) => {
            missing.push(format!("gdrdrv {v} older than {MIN_GDRCOPY}"))
        }
        Some(_) => {}
    }
    let mut subjects = lib_paths;
    subjects.push("/sys/module/gdrdrv".into());
    if !missing.is_empty() {
        return Check::new(id, Status::Fail, format!("GDRCopy: {}", missing.join("; ")))
            .fix(fix)
            .subjects(subjects);
    }
    let drv = match &s.gdrdrv {
        Some(Some(v)) => format!("gdrdrv {v} loaded"),
        _ => "gdrdrv loaded (no version file)".to_string(),
    };
    Check::new(
        id,
        Status::Pass,
        format!("GDRCopy: libgdrapi {} and {drv}", lib.unwrap_or_default()),
    )
    .subjects(subjects)
}

fn efa_driver(f: &GinFacts) -> Check {
    let id = "gin-efa-driver";
    let fix = INSTALLER_FIX;
    match &f.installed.efa_driver {
        EfaDriver::Amzn { version } => versioned(
            id,
            "EFA driver",
            Some(version),
            MIN_EFA_DRIVER,
            vec!["/sys/module/efa/version".into()],
            fix,
        ),
        EfaDriver::InTree { .. } => Check::new(
            id,
            Status::Fail,
            "in-tree EFA driver: EFA-GDA needs the amzn driver >= 3.3.0",
        )
        .fix(fix)
        .subjects(["/sys/module/efa"]),
        EfaDriver::NotLoaded => Check::new(id, Status::Fail, "the efa kernel module is not loaded")
            .fix(fix)
            .subjects(["/sys/module/efa"]),
    }
}

fn rdma_core(s: &GinStack) -> Check {
    let found = s.rdma_core.as_ref();
    versioned(
        "gin-rdma-core",
        "rdma-core",
        found.and_then(|f| f.version.as_deref()),
        MIN_RDMA_CORE,
        found.map(|f| vec![f.path.clone()]).unwrap_or_default(),
        "EFA-GDA needs rdma-core 64.0amzn0 or later: install EFA installer >= 1.50.0",
    )
}

fn libfabric(f: &GinFacts) -> Check {
    let paths: Vec<String> = f
        .installed
        .libfabric
        .iter()
        .map(|x| x.path.clone())
        .collect();
    versioned(
        "gin-libfabric",
        "libfabric",
        f.libfabric_version,
        MIN_LIBFABRIC,
        paths,
        "EFA-GDA needs libfabric >= 2.6 (FI_EFA_GDA_OPS): install EFA installer >= 1.50.0",
    )
}

fn peer_mapping(s: &GinStack) -> Check {
    let id = "gin-peer-mapping";
    let key = "PeerMappingOverride";
    let conf = s.dword_configured(key);
    let fix_write = "add `options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1\"` to a file in /etc/modprobe.d/ (e.g. nvidia-gdaki.conf), then reload the NVIDIA driver or reboot";
    let Some(live) = s.registry_dwords.as_deref() else {
        return Check::new(id, Status::Fail,
            "no /proc/driver/nvidia/params: the NVIDIA driver is not loaded, so PeerMappingOverride cannot be seen")
            .fix(fix_write)
            .subjects(["/proc/driver/nvidia/params"]);
    };
    if s.dword_on(key) {
        return Check::new(
            id,
            Status::Pass,
            format!(
                "the NVIDIA driver runs with PeerMappingOverride=1 (RegistryDwords \"{live}\")"
            ),
        )
        .subjects(["/proc/driver/nvidia/params"]);
    }
    if !conf.is_empty() {
        return Check::new(id, Status::Fail, format!(
            "PeerMappingOverride=1 is set in {} but the loaded driver runs without it (RegistryDwords \"{live}\"): the driver was not reloaded since",
            conf.join(", ")))
            .fix("reload the NVIDIA driver (stop GPU processes; `sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia`; rebuild the initramfs if it loads from there) or reboot")
            .subjects(conf.iter().map(|s| s.to_string()).chain(["/proc/driver/nvidia/params".to_string()]).collect::<Vec<_>>());
    }
    Check::new(id, Status::Fail, format!(
        "the NVIDIA driver runs without PeerMappingOverride=1 (RegistryDwords \"{live}\"): it refuses to map EFA's doorbells into the GPU"))
        .fix(fix_write)
        .subjects(["/proc/driver/nvidia/params", "/etc/modprobe.d"])
}

fn verdict(checks: &[Check], gda: Option<bool>, instance: &str) -> Check {
    let failed = |ids: &[&str]| -> Vec<String> {
        checks
            .iter()
            .filter(|c| ids.contains(&c.id.as_str()) && c.status == Status::Fail)
            .map(|c| c.summary.clone())
            .collect()
    };
    let common = failed(&["gin-aws-ofi-nccl", "gin-nccl", "gin-gdrcopy"]);
    let gda_only = failed(&[
        "gin-efa-driver",
        "gin-rdma-core",
        "gin-libfabric",
        "gin-peer-mapping",
    ]);
    let families = EFA_GDA_FAMILIES.join(", ");
    let id = "gin";
    if !common.is_empty() {
        let mut all = common.clone();
        all.extend(gda_only);
        return Check::new(
            id,
            Status::Fail,
            format!(
                "GPU-initiated networking not ready ({} missing): {}",
                all.len(),
                all.join("; ")
            ),
        )
        .fix(format!(
            "see the gin-* checks above; EFA-GDA runs only on {families}"
        ));
    }
    match gda {
        Some(true) if gda_only.is_empty() => Check::new(id, Status::Pass, format!(
            "GPU-initiated networking ready on {instance}: EFA-GDA (NCCL_GIN_TYPE=5 NCCL_SYM_GIN_KERNELS_ENABLE=0) and proxy mode")),
        Some(false) => Check::new(id, Status::Pass, format!(
            "GPU-initiated networking ready in proxy mode; EFA-GDA is not available on {instance} (only {families})")),
        None if gda_only.is_empty() => Check::new(id, Status::Warn, format!(
            "GPU-initiated networking ready in proxy mode, and for EFA-GDA if this is one of {families} (instance type unknown)")),
        _ => Check::new(id, Status::Fail, format!(
            "GIN proxy mode ready; EFA-GDA not ready ({} missing): {}", gda_only.len(), gda_only.join("; ")))
            .fix(format!("see the gin-* checks above ({}); EFA-GDA runs only on {families}", INSTALLER_FIX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_families() {
        assert_eq!(efa_gda_capable(Some("p5en.48xlarge")), Some(true));
        assert_eq!(efa_gda_capable(Some("p6-b200.48xlarge")), Some(true));
        assert_eq!(efa_gda_capable(Some("p6-b300.48xlarge")), Some(true));
        assert_eq!(efa_gda_capable(Some("p5.48xlarge")), Some(false));
        assert_eq!(efa_gda_capable(Some("p5e.48xlarge")), Some(false));
        assert_eq!(efa_gda_capable(None), None);
    }
}
