//! Which libfabric is loaded, which providers it offers, and what one provider/domain can do.
//!
//! Hints always ask for RDM endpoints (reliable, unconnected: what EFA offers and what NCCL's OFI
//! plugin uses) with `FI_MSG | FI_RMA`, `FI_HMEM` only when asked. We declare every `mr_mode`
//! bit and the `FI_CONTEXT`/`FI_CONTEXT2` modes that the rail handles, so that providers which
//! need them (efa-direct needs `FI_CONTEXT2`, EFA needs `FI_MR_VIRT_ADDR|FI_MR_PROV_KEY|...`,
//! tcp needs none) are all returned; each registration then obeys what the provider granted.

use std::path::{Path, PathBuf};

use efabench_fabric_sys as sys;

use crate::error::{Error, Result};
use crate::raw::{self, HintSpec, OwnedInfo};

/// The libfabric library in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryInfo {
    /// The shared object actually loaded.
    pub path: PathBuf,
    /// `fi_version()`: "major.minor".
    pub version: String,
    /// The API version we request from `fi_getinfo` (newest both the library and our bindings
    /// support), "major.minor".
    pub api_version: String,
    /// True when the requested API version allows `FI_MR_DMABUF` (≥ 1.20).
    pub dmabuf_api: bool,
}

/// Loads libfabric (once per process): `explicit` is the CLI's `--libfabric`; `None` searches
/// `$EFABENCH_LIBFABRIC`, `/opt/amazon/efa/lib64`, `/opt/amazon/efa/lib`, then the system loader.
pub fn load_library(explicit: Option<&Path>) -> Result<LibraryInfo> {
    let lib = sys::load(explicit)?;
    Ok(describe(lib))
}

pub(crate) fn lib() -> Result<&'static sys::Library> {
    Ok(sys::load(None)?)
}

fn describe(lib: &sys::Library) -> LibraryInfo {
    let api = lib.api_version();
    LibraryInfo {
        path: lib.path.clone(),
        version: lib.version_string(),
        api_version: format!("{}.{}", sys::fi_major(api), sys::fi_minor(api)),
        dmabuf_api: api >= sys::DMABUF_API_VERSION,
    }
}

/// What to ask `fi_getinfo` for.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    /// Provider name (`efa`, `tcp`, `shm`, …); `None` = any.
    pub provider: Option<String>,
    /// Fabric name (e.g. `efa` vs `efa-direct`); `None` = any.
    pub fabric: Option<String>,
    /// Domain name (one NIC, e.g. `rdmap16s27-rdm`); `None` = any.
    pub domain: Option<String>,
    /// Ask for `FI_HMEM` (GPU memory).
    pub hmem: bool,
    /// Local address to bind to (passed as `node` with `FI_SOURCE`), e.g. `127.0.0.1` to keep
    /// the tcp provider on loopback.
    pub node: Option<String>,
}

impl Hints {
    /// Hints for one provider name.
    pub fn provider(name: &str) -> Self {
        Hints {
            provider: Some(name.to_string()),
            ..Hints::default()
        }
    }

    fn spec(&self) -> HintSpec {
        HintSpec {
            provider: self.provider.clone(),
            fabric: self.fabric.clone(),
            domain: self.domain.clone(),
            caps: sys::FI_MSG | sys::FI_RMA | if self.hmem { sys::FI_HMEM } else { 0 },
            mode: sys::FI_CONTEXT | sys::FI_CONTEXT2,
            mr_mode: sys::FI_MR_LOCAL
                | sys::FI_MR_VIRT_ADDR
                | sys::FI_MR_ALLOCATED
                | sys::FI_MR_PROV_KEY
                | sys::FI_MR_ENDPOINT
                | sys::FI_MR_HMEM,
            node: self.node.clone(),
        }
    }

    fn describe(&self) -> String {
        let mut s = format!(
            "provider={} RDM endpoints with MSG|RMA{}",
            self.provider.as_deref().unwrap_or("any"),
            if self.hmem { "|HMEM" } else { "" }
        );
        if let Some(f) = &self.fabric {
            s += &format!(" fabric={f}");
        }
        if let Some(d) = &self.domain {
            s += &format!(" domain={d}");
        }
        if let Some(n) = &self.node {
            s += &format!(" node={n}");
        }
        s
    }
}

/// One provider/fabric/domain combination that `fi_getinfo` returned.
#[derive(Clone)]
pub struct ProviderInfo {
    pub(crate) raw: OwnedInfo,
    /// Provider name as libfabric reports it (`efa`, `tcp`, `tcp;ofi_rxm`, `shm`).
    pub provider: String,
    /// Fabric name (`efa`, `efa-direct`, an IP network for tcp, …).
    pub fabric: String,
    /// Domain name (the NIC, e.g. `rdmap16s27-rdm`; an interface for tcp).
    pub domain: String,
    /// Provider version, "major.minor" (EFA 2.1.0 reports 201.0).
    pub provider_version: String,
    /// NIC device name, when the provider reports one.
    pub nic: Option<String>,
    /// Link speed in bits/s from `nic->link_attr->speed`, when reported.
    pub link_speed_bps: Option<u64>,
    /// `domain_attr->mr_mode` bits (`FI_MR_*`).
    pub mr_mode: u64,
    /// `caps` bits.
    pub caps: u64,
    /// `mode` bits the provider requires.
    pub mode: u64,
    pub max_msg_size: u64,
    pub inject_size: u64,
    /// Bytes of remote CQ data the provider carries (EFA: 4).
    pub cq_data_size: u64,
    pub tx_size: u64,
    pub rx_size: u64,
    /// `FI_HMEM` is offered (GPU memory may be registered).
    pub hmem: bool,
    /// `FI_MR_DMABUF` registration is usable: HMEM offered and the negotiated API ≥ 1.20.
    pub dmabuf: bool,
    /// `addr_format` (`FI_ADDR_*`).
    pub addr_format: u32,
    /// The domain progresses control and data together (`FI_PROGRESS_CONTROL_UNIFIED`, asked
    /// for from libfabric 1.21 on): with `FI_THREAD_DOMAIN` the provider takes no lock on a
    /// completion-queue read.
    pub control_unified: bool,
}

impl std::fmt::Debug for ProviderInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderInfo")
            .field("provider", &self.provider)
            .field("fabric", &self.fabric)
            .field("domain", &self.domain)
            .field("provider_version", &self.provider_version)
            .field("link_speed_bps", &self.link_speed_bps)
            .field("mr_mode", &format_args!("{:#x}", self.mr_mode))
            .field("caps", &format_args!("{:#x}", self.caps))
            .field("max_msg_size", &self.max_msg_size)
            .field("inject_size", &self.inject_size)
            .field("hmem", &self.hmem)
            .field("dmabuf", &self.dmabuf)
            .field("control_unified", &self.control_unified)
            .finish()
    }
}

impl ProviderInfo {
    fn from_raw(raw: OwnedInfo, api: u32) -> Self {
        let f = raw.fields();
        let hmem = f.caps & sys::FI_HMEM != 0;
        ProviderInfo {
            provider: f.provider,
            fabric: f.fabric,
            domain: f.domain,
            provider_version: format!(
                "{}.{}",
                sys::fi_major(f.prov_version),
                sys::fi_minor(f.prov_version)
            ),
            nic: f.nic_name,
            link_speed_bps: f.link_speed,
            mr_mode: f.mr_mode,
            caps: f.caps,
            mode: f.mode,
            max_msg_size: f.max_msg_size,
            inject_size: f.inject_size,
            cq_data_size: f.cq_data_size,
            tx_size: f.tx_size,
            rx_size: f.rx_size,
            hmem,
            dmabuf: hmem && api >= sys::DMABUF_API_VERSION,
            addr_format: f.addr_format,
            control_unified: f.control_unified,
            raw,
        }
    }

    /// True when endpoint addresses are strings (`FI_ADDR_STR`, e.g. shm's `fi_shm://<pid>...`),
    /// whose length varies from one endpoint to the next.
    pub fn string_addresses(&self) -> bool {
        self.addr_format == sys::FI_ADDR_STR
    }

    /// True when RMA addresses are virtual addresses (`FI_MR_VIRT_ADDR`), false when they are
    /// offsets into the region (e.g. tcp, which reports `mr_mode` 0).
    pub fn virt_addr(&self) -> bool {
        self.mr_mode & sys::FI_MR_VIRT_ADDR != 0
    }

    /// Names of the `mr_mode` bits, e.g. `["FI_MR_LOCAL", "FI_MR_VIRT_ADDR"]`.
    pub fn mr_mode_names(&self) -> Vec<&'static str> {
        [
            (sys::FI_MR_LOCAL, "FI_MR_LOCAL"),
            (sys::FI_MR_RAW, "FI_MR_RAW"),
            (sys::FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
            (sys::FI_MR_ALLOCATED, "FI_MR_ALLOCATED"),
            (sys::FI_MR_PROV_KEY, "FI_MR_PROV_KEY"),
            (sys::FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"),
            (sys::FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"),
            (sys::FI_MR_ENDPOINT, "FI_MR_ENDPOINT"),
            (sys::FI_MR_HMEM, "FI_MR_HMEM"),
        ]
        .into_iter()
        .filter(|(b, _)| self.mr_mode & b != 0)
        .map(|(_, n)| n)
        .collect()
    }
}

/// All provider/domain entries matching `hints`, in libfabric's order (best first).
/// An empty list is not an error here; [`first_provider`] turns it into one.
pub fn get_info(hints: &Hints) -> Result<Vec<ProviderInfo>> {
    let lib = lib()?;
    let api = lib.api_version();
    Ok(raw::getinfo(lib, &hints.spec())?
        .into_iter()
        .map(|r| ProviderInfo::from_raw(r, api))
        .collect())
}

/// The first entry matching `hints`, or an error naming the providers that are available.
pub fn first_provider(hints: &Hints) -> Result<ProviderInfo> {
    let mut v = get_info(hints)?;
    if v.is_empty() {
        return Err(Error::NoProvider {
            wanted: hints.describe(),
            available: list_providers().unwrap_or_default(),
        });
    }
    Ok(v.swap_remove(0))
}

/// Names of the providers offering RDM endpoints with MSG|RMA, without duplicates, in
/// libfabric's order. Layered names are reported as libfabric gives them (`tcp;ofi_rxm`).
pub fn list_providers() -> Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for i in get_info(&Hints::default())? {
        if !names.contains(&i.provider) {
            names.push(i.provider);
        }
    }
    Ok(names)
}
