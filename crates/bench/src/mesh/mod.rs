//! One rank's endpoints: a rail group, the registered buffers and every peer. Every fabric
//! benchmark on the CPU data path posts through a [`Mesh`]: the collectives (`alltoall`,
//! `alltoallv`, `pairs`, `ep`) talk to several peers at once, the point-to-point benchmarks
//! (`sendrecv`, `write`, `read`) use it as a pair ([`crate::p2p`] adds only their routing by
//! message number and window slots).
//!
//! A [`Mesh`] owns one rail group (one rail per NIC, or virtual rails on loopback) and three
//! regions registered on every rail with one call each: `send` (what this rank sends, writes or
//! exposes for reads), `recv` (where peers' writes, our receives and our reads land) and a small
//! `ctrl` region that only carries remote CQ data for control signals ([`Mesh::signal`]).
//! Addresses and descriptors are exchanged once, with one all-gather, and every other rank is
//! inserted on every rail.
//!
//! # Who sent what
//! A completion never says which rank it came from, and EFA orders nothing across RMA writes, so
//! every write and every send carries 32 bits of CQ data (EFA's width) naming its kind, a 14-bit
//! iteration (or window) number and a 16-bit source ([`cq_data`]). Arrival is proved by counting
//! those per source and iteration, stripe by stripe, never by "the last write arrived".
//!
//! # Posting and accounting local completions
//! Every operation is a [`Request`] submitted with [`Mesh::submit`] (the lean ping-pong alone
//! goes straight to its rail: see [`LeanStep`]). The request says where each stripe's local
//! completion goes ([`Completion`]): counted in `outstanding` (the collectives drain it), into
//! `received` (a numbered receive), towards a tracked message (done, into [`Mesh::take_done`],
//! once every stripe has: the point-to-point protocols wait for single messages), or nowhere
//! (an `fi_inject` completes nothing).
//!
//! # Routes
//! Every route comes from one [`Router`] (also ep's and the GPU proxy's). A message to `peer`
//! goes over the rails by `--strategy`: `round-robin` puts the whole message
//! on rail `(peer + me) % rails` (Libefaxx's channel choice: senders do not all pile onto rail 0
//! of a receiver), `split` cuts it into stripes with [`efabench_fabric::split`] starting at that
//! same rail. Sends (`--op sendrecv`) start every split at rail 0 instead, so that every source's
//! stripe on a given rail has the same length and any posted receive of that rail fits it
//! (receives are not directed at a source in this fabric layer, so they match in arrival order).
//! (The point-to-point benchmarks route by message number instead: see [`crate::p2p`].)
//!
//! # Waiting
//! [`Mesh::wait_until`] polls every rail's CQ, checks the bootstrap's health (a killed or frozen
//! rank ends the wait with its rank named), and gives up after `--timeout` without any progress,
//! naming what it still waits for. A wait that completes within [`EMPTY_POLLS`] passes reads no
//! clock: at 8 B a ping-pong's handful of clock reads (about 25 ns each on a VM) were a fifth of
//! its latency.

mod buffers;
mod connect;
pub mod cqdata;
mod lane;
mod lean;
mod pair;
mod request;
pub mod route;
mod signal;
mod track;
mod wait;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use efabench_bootstrap::{Health, ProgressHandle};
use efabench_fabric::{
    Completion as FiCompletion, GroupAddress, GroupPeer, GroupRegion, HostBuffer, MemoryBuffer,
    MrPath, RailGroup, RegionDescriptor,
};
use efabench_gpu::MemKind;
use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::harness::Strategy;
use crate::pattern;

pub use self::buffers::{alloc, Payload};
pub(crate) use self::connect::{connect_mesh, mesh_facts, open_mesh, run_on_mesh};
pub use self::lane::{Lane, LaneRail};
pub use self::lean::LeanStep;
pub use self::pair::Link;
pub use self::request::{on_rail, Completion, Remote, Request, Verb};
pub use self::route::{Message, Route, Router};
pub use self::signal::{cq_data, parse_cq_data, Kind, ITER_MOD};
pub use self::track::{Done, MAX_INDEX};
pub use self::wait::EMPTY_POLLS;

/// Local operation contexts: bits 63..60 the kind, the rest an index.
const CTX_COUNTED: u64 = 1 << 60;
const CTX_RECV: u64 = 2 << 60;
const CTX_TRACK: u64 = 3 << 60;
const CTX_MASK: u64 = 0xF << 60;

/// Bytes and operations one rail carried in the timed part (`per_rail` of the records).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RailLoad {
    pub rail: usize,
    pub domain: Option<String>,
    pub bytes: u64,
    pub ops: u64,
}

/// A receive that completed: which posted receive it was, and the sender's CQ data.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub index: usize,
    pub data: u64,
    pub len: usize,
}

/// Why a wait or a post failed, as the harness wants it.
pub type MeshResult<T> = Result<T, BenchError>;

/// What a peer needs from us.
struct MeshPeer {
    peer: GroupPeer,
    send: RegionDescriptor,
    recv: RegionDescriptor,
    ctrl: RegionDescriptor,
}

#[derive(Clone, Debug, Default)]
struct RailStats {
    bytes: u64,
    ops: u64,
}

/// One rank's rails, buffers and every peer.
pub struct Mesh {
    group: RailGroup,
    strategy: Strategy,
    me: u32,
    world: u32,
    send: Payload,
    send_reg: GroupRegion,
    recv: Payload,
    recv_reg: GroupRegion,
    /// Kept alive while registered: the target of ACK/READY writes.
    _ctrl: Arc<HostBuffer>,
    ctrl_reg: GroupRegion,
    peers: Vec<Option<MeshPeer>>,
    /// Local writes/sends/control writes not yet completed.
    pub outstanding: u64,
    /// Remote CQ data that arrived (writes into our regions), in arrival order.
    pub arrivals: VecDeque<u64>,
    /// Receives that completed.
    pub received: VecDeque<Received>,
    /// Per tracked message: stripes still outstanding and bytes completed.
    pending: Vec<(u32, usize)>,
    /// Tracked messages whose every stripe completed, in completion order.
    done: VecDeque<(u32, usize)>,
    stats: Vec<RailStats>,
    counting: bool,
    timeout: Duration,
    health: Health,
    /// Ticked on every poll that found a completion, so the bootstrap sees a slow data path
    /// move (a long point is slow, not stuck).
    progress_tick: Option<ProgressHandle>,
    /// Ranks on this host and its cores (see [`Mesh::set_ranks_on_host`]).
    host_ranks: (usize, usize),
    /// How a rank that found nothing to do waits (see [`Mesh::set_ranks_on_host`]).
    idle_sleep: Option<Duration>,
    /// Never yield the core while waiting (see [`Mesh::set_spin`]).
    spin: bool,
    /// Where a poll puts its completions (kept here: clearing 1 KiB per empty poll showed in
    /// the 8-byte ping-pong).
    cq: [FiCompletion; 32],
    scratch: Vec<u8>,
    stream: pattern::Stream,
    corrupt_once: bool,
}

impl Mesh {
    /// Registers `send`, `recv` and a control region on every rail of `group`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        group: RailGroup,
        strategy: Strategy,
        (send, recv): (Payload, Payload),
        mr: MrPath,
        me: u32,
        world: u32,
        timeout: Duration,
        health: Health,
    ) -> MeshResult<Self> {
        let ctrl = HostBuffer::new(64).map(Arc::new)?;
        let gpu_mem = !send.kind().is_host() && send.kind() != MemKind::Pinned;
        let provider = group.rail(0).info().provider.clone();
        let register = |b: &Payload| {
            group.register(b.clone(), mr).map_err(|e| {
                if gpu_mem {
                    BenchError::usage(format!(
                        "--mem {}: provider {provider} could not register GPU memory ({e}); this \
                         libfabric lacks CUDA support: use the EFA installer's libfabric \
                         (/opt/amazon/efa) or one built with --with-cuda, or --mem host|huge|pinned",
                        b.kind()
                    ))
                } else {
                    BenchError::from(e)
                }
            })
        };
        let send_reg = register(&send)?;
        let recv_reg = register(&recv)?;
        let ctrl_reg = group.register(ctrl.clone(), MrPath::Auto)?;
        let rails = group.len();
        Ok(Mesh {
            group,
            strategy,
            me,
            world,
            send,
            send_reg,
            recv,
            recv_reg,
            _ctrl: ctrl,
            ctrl_reg,
            peers: Vec::new(),
            outstanding: 0,
            arrivals: VecDeque::new(),
            received: VecDeque::new(),
            pending: Vec::new(),
            done: VecDeque::new(),
            stats: vec![RailStats::default(); rails],
            counting: false,
            timeout,
            health,
            progress_tick: None,
            host_ranks: (1, 1),
            idle_sleep: None,
            spin: false,
            cq: [FiCompletion::default(); 32],
            scratch: Vec::new(),
            stream: pattern::Stream::default(),
            corrupt_once: crate::test_hooks::corrupt_payload(),
        })
    }

    /// Report data-path progress to the bootstrap through `p` (its heartbeats carry the count).
    pub fn set_progress(&mut self, p: ProgressHandle) {
        self.progress_tick = Some(p);
    }

    /// With more ranks on this host than cores, idle waits sleep a few microseconds instead
    /// of yielding, so the ranks doing work get the cores.
    pub fn set_ranks_on_host(&mut self, ranks: usize) {
        let cores = std::thread::available_parallelism()
            .map(|c| c.get())
            .unwrap_or(1);
        self.idle_sleep = (ranks > cores).then(|| Duration::from_micros(wait::IDLE_SLEEP_US));
        self.host_ranks = (ranks, cores);
    }

    /// Whether this host runs at most `k` of its ranks per core (as [`Mesh::set_ranks_on_host`]
    /// was told; true until then).
    pub fn ranks_per_core_at_most(&self, k: usize) -> bool {
        let (ranks, cores) = self.host_ranks;
        ranks <= k * cores
    }

    /// Whether this host has a core for each of its ranks (as [`Mesh::set_ranks_on_host`] was
    /// told; true until then).
    pub fn core_per_rank(&self) -> bool {
        self.ranks_per_core_at_most(1)
    }

    /// Waits never yield the core: a latency benchmark with a core per rank spins, as the
    /// point-to-point ones do (a `sched_yield` per empty poll is a system call on its path).
    pub fn set_spin(&mut self, on: bool) {
        self.spin = on;
    }

    pub fn rails(&self) -> usize {
        self.group.len()
    }

    pub fn group(&self) -> &RailGroup {
        &self.group
    }

    pub fn me(&self) -> u32 {
        self.me
    }

    pub fn world(&self) -> u32 {
        self.world
    }

    /// How a message is spread over the rails (`--strategy`).
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Which registration path the payload took (`dmabuf`, `va` or `host`).
    pub fn mr_path(&self) -> &'static str {
        self.send_reg.path_taken()
    }

    /// [`Mesh::mr_path`], with `+device-only` when the payload was registered with
    /// `FI_HMEM_DEVICE_ONLY` (device memory).
    pub fn mr_path_detail(&self) -> String {
        let path = self.mr_path();
        if MemoryBuffer::device_only(&**self.send) {
            format!("{path}+device-only")
        } else {
            path.to_string()
        }
    }

    pub fn send_bytes(&self) -> usize {
        MemoryBuffer::len(&**self.send)
    }

    pub fn recv_bytes(&self) -> usize {
        MemoryBuffer::len(&**self.recv)
    }

    /// Our addresses and the descriptors of `send`, `recv` and `ctrl`, for the all-gather.
    pub fn local_blob(&self) -> MeshResult<Vec<u8>> {
        Ok(pack_parts([
            self.group.address()?.to_bytes(),
            self.group.descriptor(&self.send_reg)?.to_bytes(),
            self.group.descriptor(&self.recv_reg)?.to_bytes(),
            self.group.descriptor(&self.ctrl_reg)?.to_bytes(),
        ]))
    }

    /// Inserts every other rank (`blobs` indexed by rank, from the all-gather).
    pub fn connect(&mut self, blobs: &[Vec<u8>]) -> MeshResult<()> {
        self.peers = (0..blobs.len()).map(|_| None).collect();
        for (r, b) in blobs.iter().enumerate() {
            if r as u32 == self.me {
                continue;
            }
            let parts: [&[u8]; 4] = unpack_parts(r, b)?;
            let addr = GroupAddress::from_bytes(parts[0])?;
            let send = RegionDescriptor::from_bytes(parts[1])?;
            let recv = RegionDescriptor::from_bytes(parts[2])?;
            let ctrl = RegionDescriptor::from_bytes(parts[3])?;
            let rails = self.group.len();
            if let Some(d) = [&send, &recv, &ctrl]
                .into_iter()
                .find(|d| d.rails() != rails)
            {
                return Err(BenchError::usage(format!(
                    "rank {r} has {} rails and this rank {rails}: give every rank the same --rails",
                    d.rails()
                )));
            }
            let peer = self.group.insert_peer(&addr)?;
            self.peers[r] = Some(MeshPeer {
                peer,
                send,
                recv,
                ctrl,
            });
        }
        Ok(())
    }

    fn peer(&self, r: u32) -> MeshResult<&MeshPeer> {
        self.peers
            .get(r as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| BenchError::failed(format!("rank {r} is not connected to this rank")))
    }

    /// The rails, for threads that each own one and its completion queue (`proxy`'s threads).
    /// Resolve the [`Lane`]s they post through first: the registrations stay with the rails,
    /// the mesh's own bookkeeping goes.
    pub fn into_rails(self) -> Vec<efabench_fabric::Rail> {
        self.group.into_rails()
    }

    /// Start counting per-rail bytes and operations (the timed part).
    pub fn count_from_now(&mut self, on: bool) {
        self.counting = on;
        if on {
            for s in &mut self.stats {
                *s = RailStats::default();
            }
        }
    }

    fn count(&mut self, rail: usize, bytes: usize) {
        if self.counting {
            let s = &mut self.stats[rail];
            s.bytes += bytes as u64;
            s.ops += 1;
        }
    }

    /// Bytes and operations each rail carried in the timed part.
    pub fn rail_loads(&self) -> Vec<RailLoad> {
        let domains = self.group.domains();
        let load = |(rail, s): (usize, &RailStats)| RailLoad {
            rail,
            domain: domains.get(rail).cloned(),
            bytes: s.bytes,
            ops: s.ops,
        };
        self.stats.iter().enumerate().map(load).collect()
    }
}

/// Length-prefixed parts (addresses, region descriptors) as one all-gather blob.
pub(crate) fn pack_parts<const N: usize>(parts: [Vec<u8>; N]) -> Vec<u8> {
    let mut v = Vec::new();
    for part in parts {
        v.extend_from_slice(&(part.len() as u32).to_le_bytes());
        v.extend_from_slice(&part);
    }
    v
}

/// The `N` parts of rank `rank`'s blob made by [`pack_parts`]; never trusts a length it reads.
pub(crate) fn unpack_parts<const N: usize>(
    rank: usize,
    b: &[u8],
) -> Result<[&[u8]; N], BenchError> {
    let bad = || {
        BenchError::failed(format!(
            "rank {rank} sent a malformed endpoint description (same efabench version and options everywhere?)"
        ))
    };
    let mut parts: [&[u8]; N] = [&[]; N];
    let mut rest = b;
    for part in &mut parts {
        let n = rest
            .get(..4)
            .and_then(|x| x.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(bad)? as usize;
        *part = rest.get(4..4 + n).ok_or_else(bad)?;
        rest = &rest[4 + n..];
    }
    Ok(parts)
}
