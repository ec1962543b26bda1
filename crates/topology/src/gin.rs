//! What GPU-initiated networking (NCCL's GIN over EFA) needs beyond the ordinary stack, read from
//! files under a [`Root`]: the rdma-core release, GDRCopy (the `libgdrapi` library and the
//! `gdrdrv` kernel module) and the NVIDIA driver's `RegistryDwords` (`PeerMappingOverride=1`).
//!
//! Why two places for the NVIDIA option: `/proc/driver/nvidia/params` shows what the loaded
//! driver runs with (`RegistryDwords: "PeerMappingOverride=1"`), `/etc/modprobe.d/*.conf` what it
//! will load with next time. An option written to modprobe.d but absent from the params file
//! means the driver has not been reloaded since.

use crate::installed::Found;
use crate::root::Root;
use serde::Serialize;

/// GIN prerequisites found under a root.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GinStack {
    /// rdma-core release: from the EFA installer's package list, else a `libibverbs.so.1.X.Y.0`
    /// file name (its last two numbers are the rdma-core release).
    pub rdma_core: Option<Found>,
    /// `libgdrapi.so.*` files (the version is in the file name, e.g. `libgdrapi.so.2.5`).
    pub gdrapi: Vec<Found>,
    /// The loaded `gdrdrv` module: `Some(version)` (`None` inside when it has no version file).
    pub gdrdrv: Option<Option<String>>,
    /// The loaded NVIDIA driver's `RegistryDwords` (`None`: no params file).
    pub registry_dwords: Option<String>,
    /// modprobe.d files setting `NVreg_RegistryDwords` for `nvidia`: (path, value).
    pub registry_dwords_configured: Vec<(String, String)>,
}

/// System library directories searched for `libibverbs` and `libgdrapi`.
const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/lib64",
    "/opt/gdrcopy/lib",
    "/opt/gdrcopy/lib64",
];

const MODPROBE_DIRS: &[&str] = &["/etc/modprobe.d", "/run/modprobe.d", "/usr/lib/modprobe.d"];

impl GinStack {
    pub fn scan(root: &Root) -> GinStack {
        GinStack {
            rdma_core: rdma_core(root),
            gdrapi: gdrapi(root),
            gdrdrv: (root.exists("/sys/module/gdrdrv") || module_listed(root, "gdrdrv"))
                .then(|| root.read_trim("/sys/module/gdrdrv/version")),
            registry_dwords: root
                .read("/proc/driver/nvidia/params")
                .ok()
                .map(|t| registry_dwords(&t).unwrap_or_default()),
            registry_dwords_configured: configured_dwords(root),
        }
    }

    /// Whether the loaded NVIDIA driver runs with `KEY=1` (e.g. `PeerMappingOverride`).
    pub fn dword_on(&self, key: &str) -> bool {
        self.registry_dwords
            .as_deref()
            .is_some_and(|d| dword_is_on(d, key))
    }

    /// modprobe.d files that set `KEY=1` for the next load of the NVIDIA driver.
    pub fn dword_configured(&self, key: &str) -> Vec<&str> {
        self.registry_dwords_configured
            .iter()
            .filter(|(_, v)| dword_is_on(v, key))
            .map(|(p, _)| p.as_str())
            .collect()
    }
}

fn module_listed(root: &Root, name: &str) -> bool {
    root.read("/proc/modules")
        .is_ok_and(|t| t.lines().any(|l| l.split_whitespace().next() == Some(name)))
}

/// `KEY=1` (or `KEY=0x1`) among `;`-separated registry entries.
pub fn dword_is_on(dwords: &str, key: &str) -> bool {
    dwords.split(';').any(|e| {
        let Some((k, v)) = e.split_once('=') else {
            return false;
        };
        let v = v.trim();
        let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse::<u64>().ok(),
        };
        k.trim() == key && n.is_some_and(|n| n != 0)
    })
}

/// The value of the `RegistryDwords: "..."` line of `/proc/driver/nvidia/params`.
pub fn registry_dwords(params: &str) -> Option<String> {
    let line = params
        .lines()
        .find(|l| l.trim_start().starts_with("RegistryDwords:"))?;
    let v = line.trim_start()["RegistryDwords:".len()..].trim();
    Some(v.trim_matches('"').to_string())
}

/// `NVreg_RegistryDwords=VALUE` on an `options nvidia ...` line of a modprobe config.
fn modprobe_dwords(text: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        if words.next() != Some("options") || words.next() != Some("nvidia") {
            continue;
        }
        let rest: String = words.collect::<Vec<_>>().join(" ");
        if let Some(at) = rest.find("NVreg_RegistryDwords=") {
            let v = &rest[at + "NVreg_RegistryDwords=".len()..];
            let v = match v.strip_prefix('"') {
                Some(q) => q.split('"').next().unwrap_or_default(),
                None => v.split_whitespace().next().unwrap_or_default(),
            };
            return Some(v.to_string());
        }
    }
    None
}

fn configured_dwords(root: &Root) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in MODPROBE_DIRS {
        let mut names = root.list(dir);
        names.sort();
        for name in names.into_iter().filter(|n| n.ends_with(".conf")) {
            let path = format!("{dir}/{name}");
            if let Some(v) = root.read(&path).ok().and_then(|t| modprobe_dwords(&t)) {
                out.push((path, v));
            }
        }
    }
    out
}

/// `rdma-core_64.0amzn0-1_amd64` (deb) or `rdma-core-64.0amzn0-1.amzn2023.x86_64` (rpm) → `64.0amzn0`.
fn rdma_core_from_packages(text: &str) -> Option<String> {
    text.split_whitespace().find_map(|p| {
        let rest = p.strip_prefix("rdma-core")?;
        let rest = rest.strip_prefix('_').or_else(|| rest.strip_prefix('-'))?;
        rest.starts_with(|c: char| c.is_ascii_digit())
            .then(|| rest.split(['-', '_']).next().unwrap_or(rest).to_string())
    })
}

fn rdma_core(root: &Root) -> Option<Found> {
    for path in [
        "/opt/amazon/efa_installed_packages",
        "/opt/amazon/efa/installed_packages",
    ] {
        if let Some(v) = root
            .read(path)
            .ok()
            .and_then(|t| rdma_core_from_packages(&t))
        {
            return Some(Found {
                path: path.to_string(),
                version: Some(v),
            });
        }
    }
    for dir in LIB_DIRS {
        for name in root.list(dir) {
            // libibverbs.so.1.14.50.0: ABI 1.14, rdma-core 50.0.
            let Some(v) = name.strip_prefix("libibverbs.so.1.") else {
                continue;
            };
            let parts: Vec<&str> = v.split('.').collect();
            if parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()) {
                return Some(Found {
                    path: format!("{dir}/{name}"),
                    version: Some(format!("{}.{}", parts[1], parts[2])),
                });
            }
        }
    }
    None
}

fn gdrapi(root: &Root) -> Vec<Found> {
    let mut out: Vec<Found> = Vec::new();
    for dir in LIB_DIRS {
        for name in root.list(dir) {
            let Some(v) = name.strip_prefix("libgdrapi.so") else {
                continue;
            };
            let path = format!("{dir}/{name}");
            // Report the real file once (libgdrapi.so -> .so.2 -> .so.2.5).
            let Some(target) = root.resolve(&path) else {
                continue;
            };
            let target_s = target.to_string_lossy().into_owned();
            if out.iter().any(|f| f.path == target_s) || !root.exists(&path) {
                continue;
            }
            let real = target
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("libgdrapi.so."))
                .unwrap_or(v.trim_start_matches('.'));
            let version = (real.split('.').count() >= 2
                && real.split('.').all(|p| p.parse::<u32>().is_ok()))
            .then(|| real.to_string());
            out.push(Found {
                path: target_s,
                version,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_dwords_parse() {
        let p = "EnableResizableBar: 0\nRegistryDwords: \"PeerMappingOverride=1;\"\nRegistryDwordsPerDevice: \"\"\n";
        let d = registry_dwords(p).unwrap();
        assert!(dword_is_on(&d, "PeerMappingOverride"));
        assert!(dword_is_on(
            "RMSmallBarP2PPeerBar1=1;PeerMappingOverride=0x1",
            "PeerMappingOverride"
        ));
        assert!(!dword_is_on("PeerMappingOverride=0", "PeerMappingOverride"));
        assert!(!dword_is_on("", "PeerMappingOverride"));
        assert!(!dword_is_on(
            "XPeerMappingOverride=1",
            "PeerMappingOverride"
        ));
        assert_eq!(
            registry_dwords("RegistryDwords: \"\"\n").as_deref(),
            Some("")
        );
        assert_eq!(registry_dwords("EnableMSI: 1\n"), None);
    }

    #[test]
    fn modprobe_lines_parse() {
        assert_eq!(
            modprobe_dwords(
                "# GIN\noptions nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1\"\n"
            )
            .as_deref(),
            Some("PeerMappingOverride=1")
        );
        assert_eq!(
            modprobe_dwords("options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords=\"PeerMappingOverride=1;\"")
                .as_deref(),
            Some("PeerMappingOverride=1;")
        );
        assert_eq!(
            modprobe_dwords("options nvidia_uvm NVreg_RegistryDwords=X=1"),
            None
        );
        assert_eq!(
            modprobe_dwords("# options nvidia NVreg_RegistryDwords=\"A=1\""),
            None
        );
    }

    #[test]
    fn rdma_core_package_names() {
        assert_eq!(
            rdma_core_from_packages("efa_3.3.0-1 rdma-core_64.0amzn0-1_amd64 rdma-core-dev_1")
                .as_deref(),
            Some("64.0amzn0")
        );
        assert_eq!(
            rdma_core_from_packages(
                "rdma-core-devel-46.0-1.amzn2.x86_64 rdma-core-46.0-1.amzn2.x86_64"
            )
            .as_deref(),
            Some("46.0")
        );
        assert_eq!(rdma_core_from_packages("libfabric1-aws_2.1.0"), None);
    }
}
