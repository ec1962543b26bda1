//! The rails of one rank, used together: one NIC per rail on EFA instances (p5: 32 NICs, 4 or
//! more per GPU), or several endpoints on one domain on a machine with a single domain
//! (loopback tcp, shm), labelled *virtual* so that no figure measured on them passes for a
//! multi-NIC result.
//!
//! Each rail is opened independently (its own fabric, domain, CQ, AV and endpoint, exactly as
//! [`Rail::open`] does), so that [`RailGroup::into_rails`] can hand one rail to one thread and
//! stay within `FI_THREAD_DOMAIN`: no libfabric object is shared between two rails.
//!
//! What crosses the wire is rail-aligned: a [`GroupAddress`] carries every rail's endpoint name
//! and a [`RegionDescriptor`] every rail's (addr, key, len) of one buffer registered on all rails
//! at once ([`RailGroup::register`]); local rail *i* talks to the peer's rail *i*. Both decode
//! with bounds and never trust a count from the peer.
//!
//! Which rails to open is decided by [`resolve_rails`] (`--rails N|all`) and [`pick_domain`]
//! (`--domain`), pure functions over the provider's offer, tested without a fabric.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::info::ProviderInfo;
use crate::memory::{MemoryBuffer, MrPath};
use crate::rail::{Peer, Rail, RailConfig, RegionId, RemoteRegion};

/// Most rails a group may have (and a peer's descriptor may claim): 4× the 32 NICs of a p5.
pub const MAX_RAILS: usize = 128;
/// Longest endpoint name accepted from a peer (EFA: 32 bytes, tcp: 16–28, shm: up to 256).
pub const MAX_ADDRESS_BYTES: usize = 4096;

const DESCRIPTOR_MAGIC: &[u8; 4] = b"EFRD";
const ADDRESS_MAGIC: &[u8; 4] = b"EFGA";

/// The rails of one rank.
pub struct RailGroup {
    rails: Vec<Rail>,
    virtual_rails: bool,
}

impl std::fmt::Debug for RailGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RailGroup")
            .field("rails", &self.rails)
            .field("virtual", &self.virtual_rails)
            .finish()
    }
}

/// One buffer registered on every rail of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRegion {
    ids: Vec<RegionId>,
    len: usize,
    path: &'static str,
}

impl GroupRegion {
    /// The region's id on rail `rail` (panics when out of range, like slice indexing).
    pub fn id(&self, rail: usize) -> RegionId {
        self.ids[rail]
    }
    /// Ids on every rail, in rail order.
    pub fn ids(&self) -> &[RegionId] {
        &self.ids
    }
    /// Length of the buffer in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for an empty buffer (never: empty buffers cannot be registered).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// How the buffer was registered: `"dmabuf"`, `"va"` (GPU memory by address) or `"host"`.
    pub fn path_taken(&self) -> &'static str {
        self.path
    }
}

/// What a peer needs to target one buffer over every rail: each rail's [`RemoteRegion`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionDescriptor {
    rails: Vec<RemoteRegion>,
}

impl RegionDescriptor {
    /// A descriptor from per-rail regions (1..=[`MAX_RAILS`] of them).
    pub fn new(rails: Vec<RemoteRegion>) -> Result<Self> {
        check_count(rails.len(), "region descriptor")?;
        Ok(RegionDescriptor { rails })
    }
    /// Rail `i`'s region (panics when out of range, like slice indexing).
    pub fn rail(&self, i: usize) -> &RemoteRegion {
        &self.rails[i]
    }
    /// Number of rails described.
    pub fn rails(&self) -> usize {
        self.rails.len()
    }
    /// `"EFRD"`, rail count (u32 LE), then each rail's [`RemoteRegion::to_bytes`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(8 + self.rails.len() * RemoteRegion::BYTES);
        b.extend_from_slice(DESCRIPTOR_MAGIC);
        b.extend_from_slice(&(self.rails.len() as u32).to_le_bytes());
        for r in &self.rails {
            b.extend_from_slice(&r.to_bytes());
        }
        b
    }
    /// Parses [`RegionDescriptor::to_bytes`]; the count must match the length exactly.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let mut rd = Reader::new(b, DESCRIPTOR_MAGIC, "region descriptor")?;
        let n = rd.count()?;
        let need = n * RemoteRegion::BYTES;
        if rd.rest().len() != need {
            return Err(Error::Usage(format!(
                "a region descriptor of {n} rails is {} bytes, got {} (peer running another efabench version?)",
                8 + need,
                b.len()
            )));
        }
        let rails = rd
            .rest()
            .chunks_exact(RemoteRegion::BYTES)
            .map(RemoteRegion::from_bytes)
            .collect::<Result<Vec<_>>>()?;
        Ok(RegionDescriptor { rails })
    }
}

/// Every rail's endpoint name, to give to peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupAddress {
    rails: Vec<Vec<u8>>,
}

impl GroupAddress {
    /// An address from per-rail endpoint names.
    pub fn new(rails: Vec<Vec<u8>>) -> Result<Self> {
        check_count(rails.len(), "group address")?;
        if let Some(a) = rails.iter().find(|a| a.len() > MAX_ADDRESS_BYTES) {
            return Err(Error::Usage(format!(
                "an endpoint name of {} bytes exceeds the {MAX_ADDRESS_BYTES}-byte limit",
                a.len()
            )));
        }
        Ok(GroupAddress { rails })
    }
    /// Rail `i`'s endpoint name.
    pub fn rail(&self, i: usize) -> &[u8] {
        &self.rails[i]
    }
    /// Number of rails.
    pub fn rails(&self) -> usize {
        self.rails.len()
    }
    /// `"EFGA"`, rail count (u32 LE), then per rail its length (u32 LE) and bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(ADDRESS_MAGIC);
        b.extend_from_slice(&(self.rails.len() as u32).to_le_bytes());
        for a in &self.rails {
            b.extend_from_slice(&(a.len() as u32).to_le_bytes());
            b.extend_from_slice(a);
        }
        b
    }
    /// Parses [`GroupAddress::to_bytes`], checking every length against what is left.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let mut rd = Reader::new(b, ADDRESS_MAGIC, "group address")?;
        let n = rd.count()?;
        let mut rails = Vec::with_capacity(n);
        for i in 0..n {
            let len = rd.u32()? as usize;
            if len > MAX_ADDRESS_BYTES || len > rd.rest().len() {
                return Err(Error::Usage(format!(
                    "group address: rail {i} claims a {len}-byte name but {} bytes are left (limit {MAX_ADDRESS_BYTES}); corrupt or from another efabench version",
                    rd.rest().len()
                )));
            }
            rails.push(rd.take(len).to_vec());
        }
        if !rd.rest().is_empty() {
            return Err(Error::Usage(format!(
                "group address: {} bytes left over after {n} rails; corrupt or from another efabench version",
                rd.rest().len()
            )));
        }
        Ok(GroupAddress { rails })
    }
}

fn check_count(n: usize, what: &str) -> Result<()> {
    if n == 0 || n > MAX_RAILS {
        return Err(Error::Usage(format!(
            "a {what} must have 1 to {MAX_RAILS} rails, got {n}"
        )));
    }
    Ok(())
}

/// Bounded little-endian reader for the two wire formats above.
struct Reader<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8], magic: &[u8; 4], what: &'static str) -> Result<Self> {
        if b.len() < 8 || &b[..4] != magic {
            return Err(Error::Usage(format!(
                "not a {what} ({} bytes without the {:?} header); peer running another efabench version?",
                b.len(),
                std::str::from_utf8(magic).unwrap_or("?")
            )));
        }
        Ok(Reader { b: &b[4..], what })
    }
    fn u32(&mut self) -> Result<u32> {
        if self.b.len() < 4 {
            return Err(Error::Usage(format!("{} is truncated", self.what)));
        }
        let v = u32::from_le_bytes(self.b[..4].try_into().expect("4 bytes"));
        self.b = &self.b[4..];
        Ok(v)
    }
    fn count(&mut self) -> Result<usize> {
        let n = self.u32()? as usize;
        check_count(n, self.what)?;
        Ok(n)
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        a
    }
    fn rest(&self) -> &'a [u8] {
        self.b
    }
}

/// A peer's address on every rail, rail-aligned with the local group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPeer {
    peers: Vec<Peer>,
}

impl GroupPeer {
    /// The peer's address in local rail `i`'s address vector (its rail `i`).
    pub fn rail(&self, i: usize) -> Peer {
        self.peers[i]
    }
    /// Number of rails.
    pub fn rails(&self) -> usize {
        self.peers.len()
    }
}

impl RailGroup {
    /// Opens one rail per entry of `infos` (normally one per NIC/domain, see [`resolve_rails`]).
    /// Entries naming the same domain more than once make a virtual group.
    pub fn open(infos: &[ProviderInfo], cfg: &RailConfig) -> Result<RailGroup> {
        check_count(infos.len(), "rail group")?;
        let rails = infos
            .iter()
            .map(|i| Rail::open(i, cfg))
            .collect::<Result<Vec<_>>>()?;
        let mut domains: Vec<&str> = infos.iter().map(|i| i.domain.as_str()).collect();
        domains.sort_unstable();
        domains.dedup();
        Ok(RailGroup {
            virtual_rails: domains.len() < infos.len(),
            rails,
        })
    }

    /// Opens `n` rails on one domain (loopback testing of multi-rail code); labelled virtual.
    pub fn open_virtual(info: &ProviderInfo, n: usize, cfg: &RailConfig) -> Result<RailGroup> {
        check_count(n, "rail group")?;
        let rails = (0..n)
            .map(|_| Rail::open(info, cfg))
            .collect::<Result<Vec<_>>>()?;
        Ok(RailGroup {
            rails,
            virtual_rails: true,
        })
    }

    /// A group of rails opened separately, e.g. the rails of [`RailGroup::into_rails`] given
    /// back by their threads (in the same order, so that regions and peers stay rail-aligned).
    /// Rails sharing a domain make a virtual group.
    pub fn from_rails(rails: Vec<Rail>) -> Result<RailGroup> {
        check_count(rails.len(), "rail group")?;
        let mut domains: Vec<&str> = rails.iter().map(|r| r.info().domain.as_str()).collect();
        domains.sort_unstable();
        domains.dedup();
        Ok(RailGroup {
            virtual_rails: domains.len() < rails.len(),
            rails,
        })
    }

    /// Opens the rails a [`RailPlan`] chose.
    pub fn open_plan(plan: &RailPlan, cfg: &RailConfig) -> Result<RailGroup> {
        let mut g = RailGroup::open(&plan.infos, cfg)?;
        g.virtual_rails |= plan.virtual_rails;
        Ok(g)
    }

    /// Number of rails.
    pub fn len(&self) -> usize {
        self.rails.len()
    }
    /// True when the group has no rail (never, once opened).
    pub fn is_empty(&self) -> bool {
        self.rails.is_empty()
    }
    /// Rail `i` (panics when out of range, like slice indexing).
    pub fn rail(&self, i: usize) -> &Rail {
        &self.rails[i]
    }
    /// Every rail, in rail order.
    pub fn rails(&self) -> &[Rail] {
        &self.rails
    }
    /// The rails, to move one to each thread (a [`Rail`] is `Send`, not `Sync`).
    pub fn into_rails(self) -> Vec<Rail> {
        self.rails
    }
    /// True when the rails share one domain (several endpoints on one NIC or on loopback):
    /// their bandwidth is not that of several links.
    pub fn is_virtual(&self) -> bool {
        self.virtual_rails
    }
    /// Each rail's domain name, in rail order.
    pub fn domains(&self) -> Vec<String> {
        self.rails.iter().map(|r| r.info().domain.clone()).collect()
    }
    /// Sum of the link speeds of the distinct domains in Gbit/s, when every rail reports one
    /// (virtual rails on one domain share its link, so it counts once).
    pub fn link_gbps(&self) -> Option<f64> {
        let mut seen: Vec<&str> = Vec::new();
        let mut sum = 0f64;
        for r in &self.rails {
            let bps = r.info().link_speed_bps?;
            if !seen.contains(&r.info().domain.as_str()) {
                seen.push(&r.info().domain);
                sum += bps as f64 / 1e9;
            }
        }
        Some(sum)
    }

    /// Registers `buf` on every rail (one registration per rail, one call); on failure the
    /// rails registered so far are deregistered again.
    pub fn register<B: MemoryBuffer + 'static>(
        &self,
        buf: Arc<B>,
        path: MrPath,
    ) -> Result<GroupRegion> {
        let len = buf.len();
        let mut ids = Vec::with_capacity(self.rails.len());
        for (i, r) in self.rails.iter().enumerate() {
            match r.register_with(buf.clone(), path) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    for (r, id) in self.rails.iter().zip(&ids) {
                        let _ = r.deregister(*id);
                    }
                    return Err(match e {
                        Error::Usage(m) => Error::Usage(format!("rail {i}: {m}")),
                        e => e,
                    });
                }
            }
        }
        let path = self.rails[0].region_path(ids[0])?;
        Ok(GroupRegion { ids, len, path })
    }

    /// Deregisters `r` on every rail (fails, leaving all registered, while any rail has
    /// operations on it in flight).
    pub fn deregister(&self, r: &GroupRegion) -> Result<()> {
        self.check_rails(r.ids.len(), "region")?;
        for (rail, id) in self.rails.iter().zip(&r.ids) {
            rail.remote_region(*id)?;
        }
        for (rail, id) in self.rails.iter().zip(&r.ids) {
            rail.deregister(*id)?;
        }
        Ok(())
    }

    fn check_rails(&self, n: usize, what: &str) -> Result<()> {
        if n != self.rails.len() {
            return Err(Error::Usage(format!(
                "the {what} has {n} rails but this group has {}; both sides must use the same --rails",
                self.rails.len()
            )));
        }
        Ok(())
    }

    /// The descriptor a peer needs to target `r` on every rail.
    pub fn descriptor(&self, r: &GroupRegion) -> Result<RegionDescriptor> {
        self.check_rails(r.ids.len(), "region")?;
        let rails = self
            .rails
            .iter()
            .zip(&r.ids)
            .map(|(rail, id)| rail.remote_region(*id))
            .collect::<Result<Vec<_>>>()?;
        RegionDescriptor::new(rails)
    }

    /// Every rail's endpoint name.
    pub fn address(&self) -> Result<GroupAddress> {
        GroupAddress::new(
            self.rails
                .iter()
                .map(Rail::address)
                .collect::<Result<Vec<_>>>()?,
        )
    }

    /// Inserts a peer's rails into the local rails' address vectors, rail `i` to rail `i`.
    pub fn insert_peer(&self, a: &GroupAddress) -> Result<GroupPeer> {
        if a.rails() != self.rails.len() {
            return Err(Error::Usage(format!(
                "the peer has {} rails but this rank has {}; start every rank with the same --rails (and a provider with as many domains)",
                a.rails(),
                self.rails.len()
            )));
        }
        let peers = self
            .rails
            .iter()
            .zip(&a.rails)
            .enumerate()
            .map(|(i, (r, addr))| {
                r.insert_peer(addr).map_err(|e| match e {
                    Error::Usage(m) => Error::Usage(format!("rail {i}: {m}")),
                    e => e,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(GroupPeer { peers })
    }
}

/// Exchanges group addresses over any all-gather (bootstrap's, MPI's, a file) and inserts every
/// other rank: element `r` of the result is rank `r`'s peer, `None` for `me`. `all_gather`
/// receives this rank's address bytes and must return every rank's, in rank order.
pub fn connect_all(
    group: &RailGroup,
    all_gather: impl FnOnce(&[u8]) -> Result<Vec<Vec<u8>>, String>,
    me: usize,
) -> Result<Vec<Option<GroupPeer>>> {
    let mine = group.address()?.to_bytes();
    let all = all_gather(&mine)
        .map_err(|e| Error::Health(format!("exchanging fabric addresses failed: {e}")))?;
    if me >= all.len() {
        return Err(Error::Usage(format!(
            "rank {me} is outside the all-gather of {} ranks",
            all.len()
        )));
    }
    if all[me] != mine {
        return Err(Error::Usage(format!(
            "the all-gather's entry {me} is not this rank's address; is the rank number right?"
        )));
    }
    all.iter()
        .enumerate()
        .map(|(r, b)| {
            if r == me {
                return Ok(None);
            }
            let a = GroupAddress::from_bytes(b)
                .map_err(|e| Error::Usage(format!("rank {r}'s address: {e}")))?;
            group.insert_peer(&a).map(Some).map_err(|e| match e {
                Error::Usage(m) => Error::Usage(format!("rank {r}: {m}")),
                e => e,
            })
        })
        .collect()
}

// ------------------------------------------------------------------ which rails to open

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

    #[test]
    fn wire_formats_round_trip_and_are_bounded() {
        let d = RegionDescriptor::new(vec![
            RemoteRegion {
                addr: 1,
                key: 2,
                len: 3,
            },
            RemoteRegion {
                addr: 4,
                key: 5,
                len: 6,
            },
        ])
        .unwrap();
        let b = d.to_bytes();
        assert_eq!(RegionDescriptor::from_bytes(&b).unwrap(), d);
        assert!(RegionDescriptor::from_bytes(&b[..b.len() - 1]).is_err());
        let mut huge = b.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(RegionDescriptor::from_bytes(&huge).is_err());
        assert!(RegionDescriptor::from_bytes(&[]).is_err());

        let a = GroupAddress::new(vec![vec![1, 2, 3], vec![], vec![9; 40]]).unwrap();
        let b = a.to_bytes();
        assert_eq!(GroupAddress::from_bytes(&b).unwrap(), a);
        for cut in 0..b.len() {
            assert!(GroupAddress::from_bytes(&b[..cut]).is_err(), "cut {cut}");
        }
        let mut lie = b.clone();
        lie[8..12].copy_from_slice(&(u32::MAX).to_le_bytes());
        assert!(GroupAddress::from_bytes(&lie).is_err());
        let mut extra = b;
        extra.push(0);
        assert!(GroupAddress::from_bytes(&extra).is_err());
    }
}
