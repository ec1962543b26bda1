//! Which provider, which domain(s), and how many rails: decided once per run by the harness, from
//! facts every rank shares, so all ranks agree without talking about it.
//!
//! * Provider: `--provider`, else `efa` when present, else `shm` when every rank is on
//!   this host, else `tcp`. Names match libfabric's or their first component, so `tcp` finds
//!   1.17's `tcp;ofi_rxm`.
//! * Domain: `--domain` is honoured or refused — a name the provider does not offer exits 2 with
//!   the list it does offer. tcp with every rank on this host binds to loopback unless a domain
//!   was named.
//! * Rails (`--rails N|all`): on EFA, the NICs that `topology` pairs with this rank's GPU (every
//!   NIC of the node for a rank alone on its host with host memory); else the distinct domains
//!   the provider offers; on loopback (one domain) N endpoints of that
//!   domain, labelled *virtual rails* in the records and the table header.

use efabench_fabric::{get_info, Hints, ProviderInfo, RailConfig, RailCount, RailGroup};
use efabench_gpu::{GpuChoice, MemKind};

use super::{Ctx, Rails, Strategy};
use crate::error::BenchError;

/// The fabric side of a run, the same on every rank.
#[derive(Clone, Debug)]
pub struct FabricPlan {
    /// Version of the libfabric loaded.
    pub libfabric: String,
    /// The provider as libfabric spells it, and why it was chosen.
    pub provider: String,
    pub why: String,
    /// One entry per rail.
    pub rails: Vec<ProviderInfo>,
    /// Several endpoints on one domain (loopback) rather than several NICs.
    pub virtual_rails: bool,
    /// What `--rails` resolved to, in words.
    pub rails_why: String,
}

impl FabricPlan {
    /// One line for stderr: provider, domains, rails.
    pub fn describe(&self) -> String {
        format!(
            "provider {} ({}); {} rail(s){}: {}",
            self.provider,
            self.why,
            self.rails.len(),
            if self.virtual_rails { " (virtual)" } else { "" },
            self.rails_why
        )
    }

    /// The distinct domain names of the rails, in rail order.
    pub fn domains(&self) -> Vec<String> {
        self.rails.iter().map(|i| i.domain.clone()).collect()
    }

    /// The rails for a header line: `2 on rdmap16s27,rdmap32s27`, or `2 virtual (...) on lo`.
    pub fn rails_line(&self) -> String {
        let mut distinct = self.domains();
        distinct.dedup();
        format!(
            "{}{} on {}",
            self.rails.len(),
            if self.virtual_rails {
                " virtual (endpoints of one domain, not separate NICs)"
            } else {
                ""
            },
            distinct.join(",")
        )
    }

    /// Sum of the rails' link speeds in Gbps, when every rail reports one; none for virtual
    /// rails (one NIC carries them all).
    pub fn link_gbps(&self) -> Option<f64> {
        if self.virtual_rails {
            return None;
        }
        self.rails
            .iter()
            .map(|i| i.link_speed_bps.filter(|b| *b > 0).map(|b| b as f64 / 1e9))
            .sum()
    }

    /// Fails (bad input) when one message of `len` bytes is more than the provider sends: by
    /// `split` a message is cut over every rail, so it may be that many times one message.
    pub fn check_message(&self, len: u64, strategy: Strategy) -> Result<(), BenchError> {
        let max_msg = self.rails.first().map_or(u64::MAX, |i| i.max_msg_size);
        let most = match strategy {
            Strategy::Split => max_msg.saturating_mul(self.rails.len() as u64),
            Strategy::RoundRobin => max_msg,
        };
        if len > most {
            return Err(BenchError::usage(format!(
                "messages of {len} bytes exceed what provider {} can send ({most} bytes with \
                 --rails {} --strategy {}); lower -e",
                self.provider,
                self.rails.len(),
                strategy.name()
            )));
        }
        Ok(())
    }

    /// Opens the rails of this plan (one endpoint, CQ and AV each).
    pub fn open(&self, cfg: &RailConfig) -> Result<RailGroup, BenchError> {
        let r = if self.virtual_rails {
            RailGroup::open_virtual(&self.rails[0], self.rails.len(), cfg)
        } else {
            RailGroup::open(&self.rails, cfg)
        };
        Ok(r?)
    }
}

/// Provider, domain and rails for this run.
pub(crate) fn plan(ctx: &Ctx) -> Result<FabricPlan, BenchError> {
    // A benchmark that needs the fabric but takes no fabric options runs on the defaults.
    let own;
    let args = match &ctx.opts.fabric {
        Some(f) => f,
        None => {
            own = super::defaults::<super::FabricArgs>();
            &own
        }
    };
    let mem = ctx.opts.mem_kind();
    let lib = efabench_fabric::load_library(args.libfabric.as_deref())?;
    let available = efabench_fabric::list_providers()?;
    let (provider, why) = choose_provider(args.provider.as_deref(), &available, ctx.one_host())?;
    let hmem = matches!(mem, MemKind::Cuda | MemKind::Managed);
    // Ranks on one host keep tcp on loopback rather than the first interface.
    let node = (provider.starts_with("tcp") && ctx.one_host() && args.domain.is_none())
        .then(|| "127.0.0.1".to_string());
    let hints = Hints {
        provider: Some(provider.clone()),
        node,
        hmem,
        ..Hints::default()
    };
    let offered = match get_info(&hints) {
        Ok(v) if !v.is_empty() => v,
        Ok(_) | Err(efabench_fabric::Error::NoProvider { .. }) if hmem => {
            return Err(BenchError::usage(format!(
                "--mem {}: provider {provider} cannot register GPU memory (no FI_HMEM here); this \
                 needs EFA with GPUDirect RDMA (p4d/p5 with the EFA installer) or a libfabric built \
                 with CUDA support; use --mem host or --mem pinned",
                mem
            )))
        }
        Ok(_) => {
            return Err(BenchError::usage(format!(
                "provider {provider} offers no RDM endpoint with MSG|RMA here"
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let count = match args.rails {
        Rails::Count(n) => RailCount::Count(n),
        Rails::All => RailCount::All,
    };
    let (rails, virtual_rails, rails_why) = match &args.domain {
        Some(d) => {
            let one = efabench_fabric::pick_domain(&offered, d)?;
            let n = match args.rails {
                Rails::Count(n) => n as usize,
                Rails::All => 1,
            };
            let why = if n > 1 {
                format!("{n} endpoints on domain {} (--domain)", one.domain)
            } else {
                format!("domain {} (--domain)", one.domain)
            };
            (vec![one; n], n > 1, why)
        }
        None => {
            let paired = paired_domains(ctx, &provider, &offered);
            let p = efabench_fabric::resolve_rails(&offered, count, &paired)?;
            (p.infos, p.virtual_rails, p.why)
        }
    };
    Ok(FabricPlan {
        libfabric: lib.version.clone(),
        provider,
        why,
        rails,
        virtual_rails,
        rails_why,
    })
}

/// On EFA, the libfabric domains of the NICs `topology` pairs with this rank's GPU (the GPU of
/// `--gpu`, or the local rank's when the memory is host memory).
fn paired_domains(ctx: &Ctx, provider: &str, offered: &[ProviderInfo]) -> Vec<String> {
    if !provider.starts_with("efa") {
        return Vec::new();
    }
    let topo = efabench_topology::Topology::discover(&efabench_topology::Root::system());
    if topo.gpus.is_empty() {
        return Vec::new();
    }
    let choice = ctx.opts.mem.as_ref().map_or(GpuChoice::Auto, |m| m.gpu);
    // Host memory with this rank alone on its host (one rank per node, as `cluster` runs by
    // default): no GPU to pair with, so `--rails all` means every NIC of the node.
    let host_mem = !matches!(ctx.opts.mem_kind(), MemKind::Cuda | MemKind::Managed);
    let me = ctx.hosts.get(ctx.rank as usize);
    let alone = me.is_some_and(|h| ctx.hosts.iter().filter(|x| *x == h).count() == 1);
    if host_mem && alone && matches!(choice, GpuChoice::Auto) {
        return Vec::new();
    }
    let gpu = match (ctx.device, choice) {
        (Some(d), _) => d as usize,
        (None, GpuChoice::Index(i)) => i as usize,
        (None, GpuChoice::Auto) => ctx.local_rank as usize % topo.gpus.len(),
    };
    let Some(g) = topo.gpus.get(gpu) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for nic in &g.nics {
        for o in offered {
            let paired = o.domain == *nic || o.domain.starts_with(&format!("{nic}-"));
            if paired && !out.contains(&o.domain) {
                out.push(o.domain.clone());
            }
        }
    }
    out
}

/// `efa` when present, else `shm` when every rank is on this host, else `tcp`.
/// Returns the name as libfabric spells it, and why it was chosen.
pub fn choose_provider(
    asked: Option<&str>,
    available: &[String],
    one_host: bool,
) -> Result<(String, String), BenchError> {
    let find = |p: &str| {
        available
            .iter()
            .find(|a| a.as_str() == p)
            .or_else(|| available.iter().find(|a| a.split(';').next() == Some(p)))
            .cloned()
    };
    if let Some(p) = asked {
        return find(p).map(|name| (name, "asked for with --provider".to_string())).ok_or_else(|| {
            BenchError::usage(format!(
                "provider '{}' is not offered by the loaded libfabric; available: {}; pick one with --provider",
                crate::size::clip(p),
                available.join(", ")
            ))
        });
    }
    if let Some(efa) = find("efa") {
        return Ok((efa, "EFA is present".into()));
    }
    if one_host {
        if let Some(shm) = find("shm") {
            return Ok((shm, "no EFA; all ranks on this host".into()));
        }
    }
    if let Some(tcp) = find("tcp") {
        let why = if one_host {
            "no EFA and no shm provider"
        } else {
            "no EFA; ranks on several hosts"
        };
        return Ok((tcp, why.into()));
    }
    Err(BenchError::usage(format!(
        "no usable provider: the loaded libfabric offers {}; install the EFA installer or a \
         libfabric with the tcp provider, or name one with --provider",
        available.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn provider_defaults_follow_the_design() {
        let all = names(&["efa", "shm", "tcp"]);
        assert_eq!(choose_provider(None, &all, true).unwrap().0, "efa");
        let no_efa = names(&["shm", "tcp", "udp"]);
        assert_eq!(choose_provider(None, &no_efa, true).unwrap().0, "shm");
        assert_eq!(choose_provider(None, &no_efa, false).unwrap().0, "tcp");
        assert_eq!(
            choose_provider(Some("tcp"), &no_efa, true).unwrap().0,
            "tcp"
        );
        let v117 = names(&["tcp;ofi_rxm", "shm", "udp;ofi_rxd"]);
        assert_eq!(
            choose_provider(Some("tcp"), &v117, true).unwrap().0,
            "tcp;ofi_rxm"
        );
        assert_eq!(
            choose_provider(None, &v117, false).unwrap().0,
            "tcp;ofi_rxm"
        );
    }

    #[test]
    fn unknown_provider_lists_the_available_ones() {
        let e = choose_provider(Some("verbs"), &names(&["shm", "tcp"]), true).unwrap_err();
        assert!(e.is_usage());
        assert!(e.to_string().contains("available: shm, tcp"), "{e}");
        assert!(choose_provider(None, &names(&["udp"]), false)
            .unwrap_err()
            .is_usage());
    }
}
