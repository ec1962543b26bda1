//! The rails of one rank, used together: one NIC per rail on EFA instances (p5: 32 NICs, 4 or
//! more per GPU), or several endpoints on one domain on a machine with a single domain
//! (loopback tcp, shm), labelled *virtual* so that no figure measured on them passes for a
//! multi-NIC result.
//!
//! Each rail is opened independently (its own fabric, domain, CQ, AV and endpoint, exactly as
//! [`Rail::open`] does), so that [`RailGroup::into_rails`] can hand one rail to one thread and
//! stay within `FI_THREAD_DOMAIN`: no libfabric object is shared between two rails.
//!
//! The group is split by job:
//! * this file: [`RailGroup`] (open, register a buffer on every rail at once, insert a peer's
//!   rails) and [`connect_all`]; local rail *i* talks to the peer's rail *i*;
//! * [`wire`]: what crosses the wire, rail-aligned: a [`GroupAddress`] carries every
//!   rail's endpoint name and a [`RegionDescriptor`] every rail's (addr, key, len) of one buffer;
//!   both decode with bounds and never trust a count from the peer;
//! * [`plan`]: which rails to open, [`resolve_rails`] (`--rails N|all`) and
//!   [`pick_domain`] (`--domain`), pure functions over the provider's offer, tested without a
//!   fabric.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::info::ProviderInfo;
use crate::memory::{MemoryBuffer, MrPath};
use crate::rail::{Peer, Rail, RailConfig, RegionId};

pub mod plan;
pub mod wire;

pub use plan::{pick_domain, resolve_rails, RailCount, RailPlan};
pub use wire::{GroupAddress, RegionDescriptor, MAX_ADDRESS_BYTES, MAX_RAILS};

use wire::check_count;

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
    /// Rail `i`, exclusively (e.g. for a [`crate::PingPong`], which holds it for a whole loop).
    pub fn rail_mut(&mut self, i: usize) -> &mut Rail {
        &mut self.rails[i]
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
            .zip(a.names())
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
