//! Which rails a rank opens: [`resolve_rails`] turns `--rails N|all` and the domains paired with
//! the rank's GPU into a [`RailPlan`] over the provider's offer, and [`pick_domain`] finds what
//! `--domain` names. Pure functions over names, so every decision is tested without a fabric.

use super::wire::MAX_RAILS;
use crate::error::{Error, Result};
use crate::info::ProviderInfo;

/// `--rails N|all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RailCount {
    Count(u32),
    All,
}

impl std::str::FromStr for RailCount {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if s.eq_ignore_ascii_case("all") {
            return Ok(RailCount::All);
        }
        match s.parse::<u32>() {
            Ok(n) if n >= 1 && n as usize <= MAX_RAILS => Ok(RailCount::Count(n)),
            _ => Err(Error::Usage(format!(
                "--rails {s:?}: give a number of rails from 1 to {MAX_RAILS}, or `all`"
            ))),
        }
    }
}

impl std::fmt::Display for RailCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RailCount::Count(n) => write!(f, "{n}"),
            RailCount::All => f.write_str("all"),
        }
    }
}

/// The rails [`resolve_rails`] chose: one provider entry per rail, whether they are virtual
/// (several endpoints on one domain), and why, in words for the report.
#[derive(Clone, Debug)]
pub struct RailPlan {
    pub infos: Vec<ProviderInfo>,
    pub virtual_rails: bool,
    pub why: String,
}

/// The decision of [`resolve_rails`] over domain names only: which entries of `domains`
/// (distinct, in offer order) to open, possibly repeated (virtual), and why.
pub(crate) fn plan_domains(
    domains: &[&str],
    provider: &str,
    asked: RailCount,
    paired: &[String],
) -> Result<(Vec<usize>, bool, String)> {
    if domains.is_empty() {
        return Err(Error::Usage(format!(
            "provider {provider} offers no domain to open rails on"
        )));
    }
    let listed = domains.join(", ");
    let mut paired_idx = Vec::new();
    for p in paired {
        match domains.iter().position(|d| d == p) {
            Some(i) if !paired_idx.contains(&i) => paired_idx.push(i),
            Some(_) => {}
            None => {
                return Err(Error::Usage(format!(
                    "domain {p} is paired with this rank's GPU but provider {provider} does not offer it (offered: {listed}); check `efabench topo` and FI_PROVIDER"
                )))
            }
        }
    }
    let order: Vec<usize> = paired_idx
        .iter()
        .copied()
        .chain((0..domains.len()).filter(|i| !paired_idx.contains(i)))
        .collect();
    let names = |v: &[usize]| v.iter().map(|&i| domains[i]).collect::<Vec<_>>().join(", ");
    match asked {
        RailCount::All if !paired_idx.is_empty() => {
            let why = format!(
                "--rails all: the {} domain(s) paired with this rank's GPU: {}",
                paired_idx.len(),
                names(&paired_idx)
            );
            Ok((paired_idx, false, why))
        }
        RailCount::All => {
            let why = if domains.len() == 1 {
                format!(
                    "--rails all: provider {provider} offers one domain ({}), so one rail",
                    domains[0]
                )
            } else {
                format!("--rails all: every domain provider {provider} offers: {listed}")
            };
            Ok(((0..domains.len()).collect(), false, why))
        }
        RailCount::Count(0) => Err(Error::Usage(
            "--rails 0: give at least one rail, or `all`".into(),
        )),
        RailCount::Count(n) => {
            let n = n as usize;
            if n > MAX_RAILS {
                return Err(Error::Usage(format!(
                    "--rails {n}: at most {MAX_RAILS} rails are supported"
                )));
            }
            if n <= domains.len() {
                let pick: Vec<usize> = order[..n].to_vec();
                let unpaired = if paired_idx.is_empty() {
                    String::new()
                } else {
                    let k = pick.iter().filter(|i| !paired_idx.contains(i)).count();
                    if k > 0 {
                        format!(" ({k} of them not paired with this rank's GPU)")
                    } else {
                        String::new()
                    }
                };
                let why = format!("--rails {n}: domains {}{unpaired}", names(&pick));
                Ok((pick, false, why))
            } else if domains.len() == 1 {
                let why = format!(
                    "--rails {n}: provider {provider} offers one domain ({}), so {n} virtual rails (endpoints sharing that domain's link; not a multi-NIC figure)",
                    domains[0]
                );
                Ok((vec![0; n], true, why))
            } else {
                Err(Error::Usage(format!(
                    "--rails {n}: provider {provider} offers only {} domains ({listed}); ask for at most {} rails or --rails all",
                    domains.len(),
                    domains.len()
                )))
            }
        }
    }
}

/// Chooses the rails of one rank for `--rails` (see [`RailCount`]) from the provider's offer
/// (`get_info` output, already narrowed by `--domain` when one was given, see [`pick_domain`]).
/// `All` takes the domains paired with the rank's GPU when `paired_domains` is non-empty
/// (EFA, from the topology), else every distinct domain offered. `Count(n)` takes the paired
/// domains first, then the others in offer order; more rails than domains become virtual rails
/// on the only domain when there is exactly one (loopback), and are an error otherwise.
pub fn resolve_rails(
    offered: &[ProviderInfo],
    asked: RailCount,
    paired_domains: &[String],
) -> Result<RailPlan> {
    let mut first_of: Vec<usize> = Vec::new();
    for (i, info) in offered.iter().enumerate() {
        if !first_of.iter().any(|&j| offered[j].domain == info.domain) {
            first_of.push(i);
        }
    }
    let domains: Vec<&str> = first_of
        .iter()
        .map(|&i| offered[i].domain.as_str())
        .collect();
    let provider = offered
        .first()
        .map(|i| i.provider.as_str())
        .unwrap_or("(none)");
    let (pick, virtual_rails, why) = plan_domains(&domains, provider, asked, paired_domains)?;
    Ok(RailPlan {
        infos: pick
            .into_iter()
            .map(|d| offered[first_of[d]].clone())
            .collect(),
        virtual_rails,
        why,
    })
}

/// Which offered entry `--domain asked` means: the first whose domain name is `asked`, else the
/// first whose fabric name is (tcp names its domains after interfaces, `lo`, `eth0`, and its
/// fabrics after networks, `127.0.0.1/32`). Anything else is a usage error listing the domains
/// the provider offers.
pub fn pick_domain(offered: &[ProviderInfo], asked: &str) -> Result<ProviderInfo> {
    let names: Vec<(&str, &str)> = offered
        .iter()
        .map(|i| (i.domain.as_str(), i.fabric.as_str()))
        .collect();
    let i = match_domain(&names, asked).map_err(Error::Usage)?;
    Ok(offered[i].clone())
}

/// [`pick_domain`] over (domain, fabric) names.
pub(crate) fn match_domain(offered: &[(&str, &str)], asked: &str) -> Result<usize, String> {
    if let Some(i) = offered.iter().position(|(d, _)| *d == asked) {
        return Ok(i);
    }
    if let Some(i) = offered.iter().position(|(_, f)| *f == asked) {
        return Ok(i);
    }
    let mut listed: Vec<&str> = Vec::new();
    for (d, _) in offered {
        if !listed.contains(d) {
            listed.push(d);
        }
    }
    Err(if listed.is_empty() {
        format!("--domain {asked}: the provider offers no domain at all")
    } else {
        format!(
            "--domain {asked}: the provider does not offer it; offered: {}",
            listed.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn all_takes_the_gpu_paired_domains() {
        let d = ["rdmap16s27", "rdmap32s27", "rdmap48s27", "rdmap64s27"];
        let (p, v, why) =
            plan_domains(&d, "efa", RailCount::All, &s(&["rdmap48s27", "rdmap16s27"])).unwrap();
        assert_eq!(p, [2, 0]);
        assert!(!v);
        assert!(why.contains("paired"), "{why}");
        let (p, v, _) = plan_domains(&d, "efa", RailCount::All, &[]).unwrap();
        assert_eq!(p, [0, 1, 2, 3]);
        assert!(!v);
    }

    #[test]
    fn count_prefers_paired_then_offer_order() {
        let d = ["a", "b", "c", "d"];
        let (p, v, why) = plan_domains(&d, "efa", RailCount::Count(3), &s(&["c"])).unwrap();
        assert_eq!(p, [2, 0, 1]);
        assert!(!v);
        assert!(why.contains("2 of them not paired"), "{why}");
        let e = plan_domains(&d, "efa", RailCount::Count(5), &[]).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("a, b, c, d") && m.contains("at most 4"), "{m}");
        assert!(plan_domains(&d, "efa", RailCount::Count(0), &[]).is_err());
    }

    #[test]
    fn one_domain_makes_virtual_rails() {
        let (p, v, why) = plan_domains(&["lo"], "tcp", RailCount::Count(4), &[]).unwrap();
        assert_eq!(p, [0, 0, 0, 0]);
        assert!(v);
        assert!(why.contains("virtual") && why.contains("lo"), "{why}");
        let (p, v, _) = plan_domains(&["shm"], "shm", RailCount::All, &[]).unwrap();
        assert_eq!(p, [0]);
        assert!(!v);
        let (p, v, _) = plan_domains(&["shm"], "shm", RailCount::Count(1), &[]).unwrap();
        assert_eq!(p, [0]);
        assert!(!v);
    }

    #[test]
    fn paired_domain_not_offered_is_an_error() {
        let e = plan_domains(&["a"], "efa", RailCount::All, &s(&["z"])).unwrap_err();
        assert!(e.to_string().contains("z") && e.to_string().contains("offered: a"));
        assert!(plan_domains(&[], "efa", RailCount::All, &[]).is_err());
    }

    #[test]
    fn domain_matches_name_then_fabric() {
        let o = [
            ("eth0", "192.0.2.0/24"),
            ("lo", "127.0.0.1/32"),
            ("lo", "::1/128"),
        ];
        assert_eq!(match_domain(&o, "lo"), Ok(1));
        assert_eq!(match_domain(&o, "::1/128"), Ok(2));
        let e = match_domain(&o, "ib0").unwrap_err();
        assert!(e.contains("offered: eth0, lo"), "{e}");
    }

    #[test]
    fn rail_count_parses() {
        assert_eq!("all".parse::<RailCount>().unwrap(), RailCount::All);
        assert_eq!("4".parse::<RailCount>().unwrap(), RailCount::Count(4));
        assert!("0".parse::<RailCount>().is_err());
        assert!("x".parse::<RailCount>().is_err());
    }
}
