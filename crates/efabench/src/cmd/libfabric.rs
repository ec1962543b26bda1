//! The libfabric facts `topo` and `doctor` report, asked of the library itself (through the fabric
//! layer) rather than by running `fi_info`: the same loader, search order and version that the
//! benchmarks use, so what the diagnostics say is what a benchmark would get.

use efabench_fabric::{get_info, load_library, Error, Hints};
use efabench_topology::libfabric::LibfabricDomain;

/// What the loaded libfabric offers for EFA.
pub struct Queried {
    /// The shared object that was loaded.
    pub path: String,
    /// Its version ("2.1").
    pub version: String,
    /// RDM domains of the `efa` provider (empty when the provider is absent).
    pub efa_domains: Vec<LibfabricDomain>,
    /// Every provider that answers `fi_getinfo`, with its domains, in libfabric's order
    /// (`tcp` on `lo` and `eth0`, `shm` ...): what works when EFA does not.
    pub providers: Vec<(String, Vec<String>)>,
}

impl Queried {
    /// `libfabric 1.17 (release; loaded /usr/lib/.../libfabric.so.1.20.0, whose file name
    /// carries the ABI version 1.20.0, not the release)`: the two numbers side by side are
    /// otherwise read as two libfabrics.
    pub fn describe(&self) -> String {
        format!(
            "libfabric {} (release; {})",
            self.version,
            library_file(&self.path)
        )
    }
}

/// `loaded PATH`, plus what the version in its file name is when it has one.
pub fn library_file(path: &str) -> String {
    let abi = path
        .rsplit('/')
        .next()
        .and_then(|f| f.strip_prefix("libfabric.so."))
        .filter(|v| v.contains('.'));
    match abi {
        Some(abi) => format!(
            "loaded {path}, whose file name carries the library's ABI (soname) version {abi}, not the release"
        ),
        None => format!("loaded {path}"),
    }
}

/// Load libfabric and list its EFA domains. `Err` is the loader's one-line message (every path
/// it tried).
pub fn query() -> Result<Queried, String> {
    let lib = load_library(None).map_err(|e| e.to_string())?;
    let efa = match get_info(&Hints::provider("efa")) {
        Ok(v) => v,
        Err(Error::NoProvider { .. }) => Vec::new(),
        Err(e) => return Err(e.to_string()),
    };
    let mut providers: Vec<(String, Vec<String>)> = Vec::new();
    for i in get_info(&Hints::default()).unwrap_or_default() {
        match providers.iter_mut().find(|(p, _)| *p == i.provider) {
            Some((_, d)) if !d.contains(&i.domain) => d.push(i.domain),
            Some(_) => {}
            None => providers.push((i.provider, vec![i.domain])),
        }
    }
    Ok(Queried {
        providers,
        path: lib.path.display().to_string(),
        version: lib.version,
        efa_domains: efa
            .into_iter()
            .map(|i| LibfabricDomain {
                provider: i.provider,
                fabric: i.fabric,
                domain: i.domain,
                ep_type: Some("FI_EP_RDM".to_string()),
                prov_version: Some(i.provider_version),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_name_version_is_called_the_abi_version() {
        let s = library_file("/usr/lib/x86_64-linux-gnu/libfabric.so.1.20.0");
        assert!(
            s.ends_with("ABI (soname) version 1.20.0, not the release"),
            "{s}"
        );
        assert_eq!(
            library_file("/x/libfabric.so.1"),
            "loaded /x/libfabric.so.1"
        );
    }
}
