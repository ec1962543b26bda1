//! Minimum versions per instance family.
//!
//! Why two tables: AWS effectively publishes one for P5 (installer 1.26.1 fixed RDMA writedata on
//! P5, NCCL 2.18.5 fixed NVLS, plugin 1.7.3 fixed LL/LL128), assembled from pcluster, adt and
//! aws-ofi-nccl; for P4d and everything else there is only a practical floor (installer 1.14.1
//! enables GPUDirect by default; plugin 1.7.0 + libfabric 1.18 no longer need
//! `FI_EFA_USE_DEVICE_RDMA=1`). Components without a documented floor have `None`.

/// Floors for one family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Minimums {
    pub family: &'static str,
    pub efa_installer: Option<&'static str>,
    pub efa_driver: Option<&'static str>,
    pub libfabric: Option<&'static str>,
    pub aws_ofi_nccl: Option<&'static str>,
    pub nccl: Option<&'static str>,
    pub nvidia_driver: Option<&'static str>,
    pub cuda: Option<&'static str>,
}

pub const P5: Minimums = Minimums {
    family: "P5/P5e/P5en/P6",
    efa_installer: Some("1.26.1"),
    efa_driver: Some("2.5.0"),
    libfabric: Some("1.18.2"),
    aws_ofi_nccl: Some("1.7.3"),
    nccl: Some("2.18.5"),
    nvidia_driver: Some("535.54.03"),
    cuda: Some("12.2"),
};

pub const GENERAL: Minimums = Minimums {
    family: "P4d/P4de and other EFA instances",
    efa_installer: Some("1.14.1"),
    efa_driver: Some("1.14.2"),
    libfabric: Some("1.18.0"),
    aws_ofi_nccl: Some("1.7.0"),
    nccl: None,
    nvidia_driver: None,
    cuda: None,
};

/// The table for an instance type (`GENERAL` when unknown).
pub fn for_instance(instance_type: Option<&str>) -> Minimums {
    match instance_type {
        Some(t) if t.starts_with("p5") || t.starts_with("p6") => P5,
        _ => GENERAL,
    }
}

/// Instance families whose EFA has no RDMA read (`FI_EFA_USE_DEVICE_RDMA=1` aborts there).
pub fn has_rdma_read(instance_type: &str) -> Option<bool> {
    let family = instance_type.split('.').next().unwrap_or("");
    const WITH: &[&str] = &[
        "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "trn1", "trn1n", "trn2", "g7e",
    ];
    const WITHOUT: &[&str] = &[
        "p3dn", "c5n", "m5n", "m5dn", "r5n", "r5dn", "g4dn", "i3en", "inf1", "c6gn", "m5zn",
    ];
    if WITH.contains(&family) {
        Some(true)
    } else if WITHOUT.contains(&family) {
        Some(false)
    } else {
        None
    }
}
