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
    Ok(Queried {
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
