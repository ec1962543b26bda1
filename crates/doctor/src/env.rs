//! Environment lint: variables that silently push NCCL/MPI onto TCP, make libfabric abort, or are
//! leftovers from old EFA guides (each rule below says why it matters). The environment is passed in, so tests inject it.

use crate::{Check, Status};
use efabench_topology::installed::version_lt;
use std::collections::BTreeMap;

/// What the lint needs to know about the node.
#[derive(Debug, Clone, Default)]
pub struct EnvContext {
    pub instance_type: Option<String>,
    pub libfabric: Option<String>,
    pub aws_ofi_nccl: Option<String>,
    pub efa_installer: Option<String>,
    pub nccl: Option<String>,
    /// The EFA driver is the in-tree one (GPUDirect only through dmabuf).
    pub in_tree_driver: bool,
}

fn c(var: &str, status: Status, summary: String, fix: &str) -> Check {
    Check::new(&format!("env:{var}"), status, summary)
        .fix(fix)
        .subjects([var])
}

/// One check per problematic variable; a single `env` pass when there is none.
pub fn lint(env: &BTreeMap<String, String>, cx: &EnvContext) -> Vec<Check> {
    let mut out = Vec::new();
    let get = |k: &str| env.get(k).map(|s| s.as_str());
    let lf_ge = |v: &str| cx.libfabric.as_deref().map(|l| !version_lt(l, v));

    if let Some(v) = get("FI_PROVIDER") {
        let provs: Vec<&str> = v.split(',').map(str::trim).collect();
        if v.starts_with('^') || !provs.contains(&"efa") {
            out.push(c("FI_PROVIDER", Status::Fail,
                format!("FI_PROVIDER={v} keeps libfabric off the efa provider: NCCL/MPI traffic goes over TCP"),
                "unset FI_PROVIDER (or set FI_PROVIDER=efa)"));
        }
    }
    if let Some(v) = get("FI_EFA_USE_DEVICE_RDMA") {
        let rdma_read = cx
            .instance_type
            .as_deref()
            .and_then(crate::minimums::has_rdma_read);
        let old_plugin = cx.aws_ofi_nccl.as_deref().map(|p| version_lt(p, "1.7.0"));
        match (v, rdma_read) {
            ("1", Some(false)) => out.push(c("FI_EFA_USE_DEVICE_RDMA", Status::Fail,
                format!("FI_EFA_USE_DEVICE_RDMA=1 on {} whose EFA has no RDMA read: libfabric aborts", cx.instance_type.as_deref().unwrap_or("?")),
                "unset FI_EFA_USE_DEVICE_RDMA")),
            ("1", None) => out.push(c("FI_EFA_USE_DEVICE_RDMA", Status::Warn,
                "FI_EFA_USE_DEVICE_RDMA=1 on an unknown instance type: libfabric aborts if the EFA has no RDMA read".into(),
                "unset FI_EFA_USE_DEVICE_RDMA (libfabric >= 1.18 enables RDMA by itself where the hardware has it)")),
            ("1", Some(true)) if old_plugin != Some(true) => out.push(c("FI_EFA_USE_DEVICE_RDMA", Status::Warn,
                "FI_EFA_USE_DEVICE_RDMA=1 is a legacy setting: only aws-ofi-nccl < 1.7.0 needed it".into(),
                "unset FI_EFA_USE_DEVICE_RDMA")),
            ("1", Some(true)) => {}
            ("0", Some(true)) => out.push(c("FI_EFA_USE_DEVICE_RDMA", Status::Warn,
                "FI_EFA_USE_DEVICE_RDMA=0 disables RDMA on hardware that has it: emulated writes, lower bandwidth (aws-ofi-nccl's RDMA protocol breaks on P5)".into(),
                "unset FI_EFA_USE_DEVICE_RDMA")),
            ("0", _) => {}
            (other, _) => out.push(c("FI_EFA_USE_DEVICE_RDMA", Status::Fail,
                format!("FI_EFA_USE_DEVICE_RDMA={other} is not 0 or 1: libfabric aborts on an invalid value"),
                "unset FI_EFA_USE_DEVICE_RDMA")),
        }
    } else if cx.aws_ofi_nccl.as_deref().map(|p| version_lt(p, "1.7.0")) == Some(true)
        && cx
            .instance_type
            .as_deref()
            .and_then(crate::minimums::has_rdma_read)
            == Some(true)
    {
        out.push(c("FI_EFA_USE_DEVICE_RDMA", Status::Warn,
            format!("aws-ofi-nccl {} < 1.7.0 without FI_EFA_USE_DEVICE_RDMA=1: RMA is emulated, bandwidth is low",
                cx.aws_ofi_nccl.as_deref().unwrap_or("?")),
            "upgrade aws-ofi-nccl to >= 1.7.3 (or set FI_EFA_USE_DEVICE_RDMA=1 for this old plugin)"));
    }
    for var in [
        "FI_EFA_MTU_SIZE",
        "FI_EFA_TX_IOV_LIMIT",
        "FI_EFA_RX_IOV_LIMIT",
    ] {
        if env.contains_key(var) {
            let (st, why) = match lf_ge("1.20") {
                Some(false) => (Status::Warn, "is deprecated (libfabric >= 1.20 aborts when it is set)"),
                _ => (Status::Fail, "makes libfabric >= 1.20 abort (\"env variable detected ... execution cannot proceed\")"),
            };
            out.push(c(var, st, format!("{var} {why}"), &format!("unset {var}")));
        }
    }
    if env.contains_key("FI_EFA_SHM_MAX_MEDIUM_SIZE") {
        let on_119 = cx
            .libfabric
            .as_deref()
            .map(|l| l.starts_with("1.19"))
            .unwrap_or(false);
        out.push(c(
            "FI_EFA_SHM_MAX_MEDIUM_SIZE",
            if on_119 { Status::Fail } else { Status::Warn },
            "FI_EFA_SHM_MAX_MEDIUM_SIZE is deprecated (libfabric 1.19 aborts when it is set)"
                .into(),
            "unset FI_EFA_SHM_MAX_MEDIUM_SIZE",
        ));
    }
    if let Some(v) = get("FI_EFA_SET_CUDA_SYNC_MEMOPS") {
        let needed = v == "0"
            && cx.efa_installer.as_deref().map(|i| version_lt(i, "1.29.1")) == Some(true)
            && cx.nccl.as_deref().map(|n| !version_lt(n, "2.19")) == Some(true);
        if !needed {
            out.push(c("FI_EFA_SET_CUDA_SYNC_MEMOPS", Status::Warn,
                "FI_EFA_SET_CUDA_SYNC_MEMOPS is deprecated; it was only needed with EFA installer < 1.29.1 and NCCL >= 2.19".into(),
                "unset FI_EFA_SET_CUDA_SYNC_MEMOPS"));
        }
    }
    if env.contains_key("FI_EFA_ZCPY_RX_SEED") {
        out.push(c(
            "FI_EFA_ZCPY_RX_SEED",
            Status::Warn,
            "FI_EFA_ZCPY_RX_SEED is deprecated and ignored".into(),
            "unset FI_EFA_ZCPY_RX_SEED",
        ));
    }
    if get("FI_EFA_IFACE") == Some("") {
        out.push(c(
            "FI_EFA_IFACE",
            Status::Fail,
            "FI_EFA_IFACE is set but empty: libfabric aborts".into(),
            "unset FI_EFA_IFACE or list NIC names (e.g. rdmap79s0,rdmap80s0)",
        ));
    }
    if let Some(v) = get("FI_EFA_TX_MIN_CREDITS") {
        if v.trim().parse::<i64>().map(|n| n <= 0).unwrap_or(true) {
            out.push(c(
                "FI_EFA_TX_MIN_CREDITS",
                Status::Fail,
                format!("FI_EFA_TX_MIN_CREDITS={v} is not a positive integer: libfabric aborts"),
                "unset FI_EFA_TX_MIN_CREDITS (default 32)",
            ));
        }
    }
    if get("FI_EFA_FORK_SAFE").map(|v| v != "0").unwrap_or(false) {
        out.push(c("FI_EFA_FORK_SAFE", Status::Warn,
            "FI_EFA_FORK_SAFE is set: not needed on kernels >= 5.13, aws-ofi-nccl sets it itself, and it disables huge pages".into(),
            "unset FI_EFA_FORK_SAFE"));
    }
    for var in env.keys().filter(|k| k.starts_with("RDMAV_")) {
        out.push(c(
            var,
            Status::Warn,
            format!("{var} is set: AWS advises against RDMAV_* variables with EFA"),
            &format!("unset {var}"),
        ));
    }
    if let Some(v) = get("NCCL_PROTO") {
        if v.eq_ignore_ascii_case("simple") {
            out.push(c(
                "NCCL_PROTO",
                Status::Warn,
                "NCCL_PROTO=simple is a legacy setting for aws-ofi-nccl <= 1.5 and costs latency"
                    .into(),
                "unset NCCL_PROTO",
            ));
        }
    }
    if let Some(v) = get("NCCL_NET") {
        let l = v.to_ascii_lowercase();
        if l == "socket" || l == "ib" {
            out.push(c(
                "NCCL_NET",
                Status::Fail,
                format!("NCCL_NET={v} keeps NCCL off the aws-ofi-nccl plugin (no EFA)"),
                "unset NCCL_NET (or NCCL_NET='Libfabric' / 'AWS Libfabric' for plugins <= 1.12)",
            ));
        } else if !l.contains("libfabric") && !l.contains("ofi") {
            out.push(c(
                "NCCL_NET",
                Status::Warn,
                format!("NCCL_NET={v} is not the aws-ofi-nccl network (Libfabric)"),
                "unset NCCL_NET",
            ));
        }
    }
    for var in ["NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"] {
        if get(var) == Some("1") {
            out.push(c(var, Status::Warn, format!("{var}=1 disables NVLink/shared-memory paths inside the node (a debugging setting)"),
                &format!("unset {var}")));
        }
    }
    if env.contains_key("NCCL_MIN_CHANNELS") {
        out.push(c(
            "NCCL_MIN_CHANNELS",
            Status::Warn,
            "NCCL_MIN_CHANNELS is set: AWS advises leaving it at NCCL's default on EFA".into(),
            "unset NCCL_MIN_CHANNELS",
        ));
    }
    if get("FI_HMEM_CUDA_USE_DMABUF") == Some("0") {
        let st = if cx.in_tree_driver {
            Status::Fail
        } else {
            Status::Warn
        };
        out.push(c("FI_HMEM_CUDA_USE_DMABUF", st,
            "FI_HMEM_CUDA_USE_DMABUF=0 turns off the dmabuf route for GPU memory (the only GPUDirect route with the in-tree EFA driver)".into(),
            "unset FI_HMEM_CUDA_USE_DMABUF"));
    }
    if get("OFI_NCCL_DISABLE_GDR_REQUIRED_CHECK")
        .map(|v| v != "0")
        .unwrap_or(false)
    {
        out.push(c("OFI_NCCL_DISABLE_GDR_REQUIRED_CHECK", Status::Warn,
            "OFI_NCCL_DISABLE_GDR_REQUIRED_CHECK hides a missing GPUDirect RDMA path on GPU instances".into(),
            "unset it and fix GPUDirect (see the gpudirect-rdma check)"));
    }
    if out.is_empty() {
        out.push(Check::new(
            "env",
            Status::Pass,
            "no FI_*/NCCL_*/RDMAV_* variable known to break or slow EFA is set",
        ));
    }
    out
}
