//! Reading an `NCCL_DEBUG=INFO` log: did NCCL use the aws-ofi-nccl plugin on the `efa` provider,
//! with GPUDirect, or fall back to sockets? Line formats from NCCL and aws-ofi-nccl sources.

use crate::{Check, Status};

/// What the log says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NcclLog {
    pub plugin_version: Option<String>,
    pub provider: Option<String>,
    pub fabric: Option<String>,
    pub nics: Option<u32>,
    /// `Using network X`.
    pub network: Option<String>,
    pub plugin_missing: bool,
    pub gdrdma_channels: usize,
    pub net_channels: usize,
    pub socket_channels: usize,
    pub nvls_disabled: bool,
}

pub fn parse(text: &str) -> NcclLog {
    let mut l = NcclLog::default();
    for line in text.lines() {
        if let Some(i) = line.find("Initializing aws-ofi-nccl ") {
            l.plugin_version = line[i + 26..].split_whitespace().next().map(str::to_string);
        }
        let lower = line.to_ascii_lowercase();
        if let Some(i) = lower.find("selected provider is ") {
            let rest = &line[i + 21..];
            l.provider = rest
                .split(|c: char| c == ',' || c.is_whitespace())
                .next()
                .map(str::to_string);
            if let Some(j) = rest.find("fabric is ") {
                l.fabric = rest[j + 10..].split_whitespace().next().map(str::to_string);
            }
            if let Some(j) = rest.find("(found ") {
                l.nics = rest[j + 7..]
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse().ok());
            }
        }
        if let Some(i) = line.find("Using network ") {
            l.network = Some(line[i + 14..].trim().to_string());
        }
        if line.contains("No plugin found") || line.contains("Could not find: libnccl-net") {
            l.plugin_missing = true;
        }
        if line.contains(" via NET/") {
            if line.contains("via NET/Socket") {
                l.socket_channels += 1;
            } else {
                l.net_channels += 1;
                if line.contains("/GDRDMA") {
                    l.gdrdma_channels += 1;
                }
            }
        }
        if line.contains("Disabling NVLS support due to NCCL version") {
            l.nvls_disabled = true;
        }
    }
    l
}

/// The `nccl-log` check for a log file.
pub fn check(name: &str, text: &str) -> Check {
    let l = parse(text);
    let id = "nccl-log";
    let network = l.network.clone().unwrap_or_default();
    let subjects = [name.to_string()];
    if network == "Socket" || l.socket_channels > 0 && l.net_channels == 0 {
        let why = if l.plugin_missing {
            "the aws-ofi-nccl plugin (libnccl-net.so) was not found"
        } else {
            "the plugin did not provide a network"
        };
        return Check::new(id, Status::Fail, format!("NCCL fell back to sockets (TCP): {why}"))
            .fix("put the aws-ofi-nccl lib directory on LD_LIBRARY_PATH (e.g. /opt/amazon/ofi-nccl/lib), unset NCCL_NET/FI_PROVIDER, and check `efabench doctor`")
            .subjects(subjects);
    }
    if network == "IB" {
        return Check::new(
            id,
            Status::Fail,
            "NCCL used its IB verbs transport, not the aws-ofi-nccl plugin",
        )
        .fix("load the aws-ofi-nccl plugin (LD_LIBRARY_PATH) and unset NCCL_NET")
        .subjects(subjects);
    }
    let ofi = network.contains("Libfabric") || l.plugin_version.is_some();
    if !ofi {
        return Check::new(
            id,
            Status::Warn,
            "the log has no NET/ lines: run with NCCL_DEBUG=INFO on more than one node",
        )
        .fix("rerun with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET) across at least two nodes")
        .subjects(subjects);
    }
    let prov = l.provider.clone().unwrap_or_else(|| "unknown".into());
    if l.provider.is_some() && prov != "efa" {
        return Check::new(
            id,
            Status::Fail,
            format!("NCCL used the aws-ofi-nccl plugin but libfabric provider {prov}, not efa"),
        )
        .fix("unset FI_PROVIDER and check that `fi_info -p efa` lists the EFA devices")
        .subjects(subjects);
    }
    let mut s = format!(
        "NCCL used aws-ofi-nccl {} over provider {prov}{}{}",
        l.plugin_version.as_deref().unwrap_or("?"),
        l.fabric
            .as_deref()
            .map(|f| format!(" (fabric {f})"))
            .unwrap_or_default(),
        l.nics.map(|n| format!(", {n} NICs")).unwrap_or_default()
    );
    if l.net_channels > 0 && l.gdrdma_channels == 0 {
        s.push_str("; no channel used GPUDirect RDMA (no /GDRDMA)");
        return Check::new(id, Status::Warn, s)
            .fix("check the gpudirect-rdma check (p2p file, efa_nv_peermem, dmabuf)")
            .subjects(subjects);
    }
    if l.gdrdma_channels > 0 {
        s.push_str(&format!(
            "; {} channel(s) with GPUDirect RDMA",
            l.gdrdma_channels
        ));
    }
    if l.nvls_disabled {
        s.push_str("; the plugin disabled NVLS because NCCL is older than 2.18.5");
        return Check::new(id, Status::Warn, s)
            .fix("upgrade NCCL to >= 2.18.5")
            .subjects(subjects);
    }
    Check::new(id, Status::Pass, s).subjects(subjects)
}
