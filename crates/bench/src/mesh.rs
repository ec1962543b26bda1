//! Every rank connected to every other rank: the endpoints of the collective benchmarks
//! (`alltoall`, `pairs`).
//!
//! The point-to-point [`Link`](crate::p2p) talks to one peer at a time, from rank 0; a collective
//! has every rank sending to and receiving from several peers at once. A [`Mesh`] owns one rail
//! group (one rail per NIC, or virtual rails on loopback) and three regions registered on every
//! rail with one call each: `send` (what this rank sends or writes), `recv` (where peers' writes
//! and our receives land) and a small `ctrl` region that only carries remote CQ data for
//! acknowledgements. Addresses and descriptors are exchanged once, with one all-gather, and every
//! other rank is inserted on every rail.
//!
//! # Who sent what
//! A completion never says which rank it came from, and EFA orders nothing across RMA writes, so
//! every write and every send carries 32 bits of CQ data (EFA's width) naming its kind, a 14-bit
//! iteration (or window) number and the 16-bit source rank ([`cq_data`]). Arrival is proved by
//! counting those per source and iteration, stripe by stripe, never by "the last write arrived".
//!
//! # Routes
//! A message to `peer` goes over the rails by `--strategy`: `round-robin` puts the whole message
//! on rail `(peer + me) % rails` (Libefaxx's channel choice: senders do not all pile onto rail 0
//! of a receiver), `split` cuts it into stripes with [`efabench_fabric::split`] starting at that
//! same rail. Sends (`--op sendrecv`) start every split at rail 0 instead, so that every source's
//! stripe on a given rail has the same length and any posted receive of that rail fits it
//! (receives are not directed at a source in this fabric layer, so they match in arrival order).
//!
//! # Waiting
//! [`Mesh::wait_until`] polls every rail's CQ, checks the bootstrap's health about every
//! millisecond (a killed or frozen rank ends the wait with its rank named), and gives up after
//! `--timeout` without any progress, naming what it still waits for.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_bootstrap::{Health, ProgressHandle};
use efabench_fabric::{
    Completion as FiCompletion, Flags, GroupAddress, GroupPeer, GroupRegion, HostBuffer,
    MemoryBuffer, MrPath, Op, RailGroup, RegionDescriptor, Stripe,
};
use efabench_gpu::MemKind;
use serde_json::{json, Value};

use crate::error::BenchError;
use crate::harness::Strategy;
use crate::p2p::link::{pack_parts, unpack_parts, Payload};
use crate::pattern;

/// What a 32-bit CQ data word announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A stripe of payload.
    Payload = 0,
    /// "Every stripe of your window arrived" (pairs).
    Ack = 1,
    /// "You may start the next window" (pairs).
    Ready = 2,
    /// "No more windows: the count or the time budget of this pair is spent" (pairs; sent by
    /// the sender in place of the window the READY asked for).
    Stop = 3,
}

/// How long an idle wait sleeps when ranks outnumber cores, after yielding for IDLE_YIELD.
const IDLE_SLEEP_US: u64 = 20;
const IDLE_YIELD: Duration = Duration::from_micros(200);

/// Iterations are carried modulo this (14 bits); a peer is never more than one ahead.
pub const ITER_MOD: u64 = 1 << 14;

/// The CQ data of a message: kind, iteration (mod 2^14) and source rank, in 32 bits.
pub fn cq_data(kind: Kind, iter: u64, src: u32) -> u64 {
    ((kind as u64) << 30) | ((iter % ITER_MOD) << 16) | (src as u64 & 0xFFFF)
}

/// Splits CQ data into (kind, iteration mod 2^14, source).
pub fn parse_cq_data(d: u64) -> Option<(Kind, u64, u32)> {
    if d >> 32 != 0 {
        return None;
    }
    let kind = match d >> 30 {
        0 => Kind::Payload,
        1 => Kind::Ack,
        2 => Kind::Ready,
        3 => Kind::Stop,
        _ => return None,
    };
    Some((kind, (d >> 16) & (ITER_MOD - 1), (d & 0xFFFF) as u32))
}

/// Local operation contexts: bits 63..60 the kind, the rest an index.
const CTX_WRITE: u64 = 1 << 60;
const CTX_SEND: u64 = 2 << 60;
const CTX_RECV: u64 = 3 << 60;
const CTX_CTRL: u64 = 4 << 60;
const CTX_MASK: u64 = 0xF << 60;

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
    stats: Vec<RailStats>,
    counting: bool,
    timeout: Duration,
    health: Health,
    /// Ticked on every poll that found a completion, so the bootstrap sees a slow data path
    /// move (a long point is slow, not stuck).
    progress_tick: Option<ProgressHandle>,
    /// How a rank that found nothing to do waits (see [`Mesh::set_ranks_on_host`]).
    idle_sleep: Option<Duration>,
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
        let gpu_mem = send.kind() != MemKind::Host && send.kind() != MemKind::Pinned;
        let provider = group.rail(0).info().provider.clone();
        let register = |b: &Payload| {
            group.register(b.clone(), mr).map_err(|e| {
                if gpu_mem {
                    BenchError::usage(format!(
                        "--mem {}: provider {provider} could not register GPU memory ({e}); use \
                         the EFA installer's libfabric or one built with CUDA, or --mem host|pinned",
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
            stats: vec![RailStats::default(); rails],
            counting: false,
            timeout,
            health,
            progress_tick: None,
            idle_sleep: None,
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
        self.idle_sleep = (ranks > cores).then(|| Duration::from_micros(IDLE_SLEEP_US));
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

    /// Which registration path the payload took.
    /// How a message is spread over the rails (`--strategy`).
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    pub fn mr_path(&self) -> &'static str {
        self.send_reg.path_taken()
    }

    pub fn send_bytes(&self) -> usize {
        MemoryBuffer::len(&**self.send)
    }

    pub fn recv_bytes(&self) -> usize {
        MemoryBuffer::len(&**self.recv)
    }

    /// Our addresses and the descriptors of `recv` and `ctrl`, for the all-gather.
    pub fn local_blob(&self) -> MeshResult<Vec<u8>> {
        Ok(pack_parts([
            self.group.address()?.to_bytes(),
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
            let parts: [&[u8]; 3] = unpack_parts(r, b)?;
            let addr = GroupAddress::from_bytes(parts[0])?;
            let recv = RegionDescriptor::from_bytes(parts[1])?;
            let ctrl = RegionDescriptor::from_bytes(parts[2])?;
            if recv.rails() != self.group.len() {
                return Err(BenchError::usage(format!(
                    "rank {r} has {} rails and this rank {}: give every rank the same --rails",
                    recv.rails(),
                    self.group.len()
                )));
            }
            let peer = self.group.insert_peer(&addr)?;
            self.peers[r] = Some(MeshPeer { peer, recv, ctrl });
        }
        Ok(())
    }

    fn peer(&self, r: u32) -> MeshResult<&MeshPeer> {
        self.peers
            .get(r as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| BenchError::failed(format!("rank {r} is not connected to this rank")))
    }

    // ------------------------------------------------------------------ routes and stats

    /// The stripes of a `len`-byte message between `a` and `b` (symmetric in the two ranks, so
    /// the receiver computes the sender's route). `sends` starts every split at rail 0.
    pub fn route(&self, a: u32, b: u32, len: usize, sends: bool) -> Vec<Stripe> {
        let rails = self.group.len();
        let first = ((a as usize) + (b as usize)) % rails;
        match self.strategy {
            Strategy::RoundRobin => vec![Stripe {
                rail: first,
                off: 0,
                len,
            }],
            Strategy::Split => efabench_fabric::split(len, rails, if sends { 0 } else { first }),
        }
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

    /// `per_rail`: `{rail, domain, bytes, ops}` of the timed part.
    pub fn per_rail(&self) -> Value {
        let domains = self.group.domains();
        Value::Array(
            self.stats
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    json!({"rail": i, "domain": domains.get(i), "bytes": s.bytes, "ops": s.ops})
                })
                .collect(),
        )
    }

    // ------------------------------------------------------------------ payloads

    /// Fills `len` bytes of `send` at `off` with the pattern of `seed`.
    pub fn fill_send(&mut self, off: usize, len: usize, seed: u64) -> MeshResult<()> {
        self.scratch.resize(len, 0);
        self.stream.fill(&mut self.scratch, seed);
        self.send
            .write_at(off, &self.scratch)
            .map_err(|e| BenchError::failed(format!("filling the send buffer: {e}")))
    }

    /// Words of `recv[off..off+len]` that differ from the pattern of `seed`.
    pub fn check_recv(&mut self, off: usize, len: usize, seed: u64) -> u64 {
        self.scratch.resize(len, 0);
        if self.recv.read_at(off, &mut self.scratch).is_err() {
            return len.div_ceil(8) as u64;
        }
        if self.corrupt_once && len > 0 {
            self.corrupt_once = false;
            self.scratch[len / 2] ^= 0x5A;
        }
        self.stream.mismatches(&self.scratch, seed)
    }

    /// Copies `len` bytes of `send` at `from` into `recv` at `to` (this rank's own chunk).
    pub fn copy_local(&mut self, from: usize, to: usize, len: usize) -> MeshResult<()> {
        efabench_gpu::buffer::copy_between(&**self.send, from, &**self.recv, to, len)
            .map_err(|e| BenchError::failed(format!("copying the own chunk: {e}")))
    }

    // ------------------------------------------------------------------ operations

    /// RDMA-writes `send[off..off+len]` to `peer`'s `recv` at `remote_off`, with CQ data.
    pub fn write(
        &mut self,
        peer: u32,
        rail: usize,
        off: usize,
        len: usize,
        remote_off: usize,
        data: u64,
    ) -> MeshResult<()> {
        let p = self.peer(peer)?;
        let (fi_peer, remote) = (p.peer.rail(rail), *p.recv.rail(rail));
        self.group.rail(rail).post(Op::Write {
            peer: fi_peer,
            local: self.send_reg.id(rail).range(off, len),
            remote: remote.at(remote_off as u64),
            data: Some(data),
            flags: Flags::NONE,
            ctx: CTX_WRITE,
        })?;
        self.outstanding += 1;
        self.count(rail, len);
        Ok(())
    }

    /// Sends `send[off..off+len]` to `peer` on `rail`, with CQ data.
    pub fn send(
        &mut self,
        peer: u32,
        rail: usize,
        off: usize,
        len: usize,
        data: u64,
    ) -> MeshResult<()> {
        let fi_peer = self.peer(peer)?.peer.rail(rail);
        self.group.rail(rail).post(Op::Send {
            peer: fi_peer,
            local: self.send_reg.id(rail).range(off, len),
            data: Some(data),
            flags: Flags::NONE,
            ctx: CTX_SEND,
        })?;
        self.outstanding += 1;
        self.count(rail, len);
        Ok(())
    }

    /// Posts receive number `index` into `recv[off..off+len]` on `rail`.
    pub fn post_recv(
        &mut self,
        index: usize,
        rail: usize,
        off: usize,
        len: usize,
    ) -> MeshResult<()> {
        self.group
            .rail(rail)
            .post(Op::Recv {
                local: self.recv_reg.id(rail).range(off, len),
                ctx: CTX_RECV | index as u64,
            })
            .map_err(Into::into)
    }

    /// An 8-byte write into `peer`'s control region carrying `data` (ACK/READY), on rail 0.
    pub fn signal(&mut self, peer: u32, data: u64) -> MeshResult<()> {
        let p = self.peer(peer)?;
        let (fi_peer, remote) = (p.peer.rail(0), *p.ctrl.rail(0));
        self.group.rail(0).post(Op::Write {
            peer: fi_peer,
            local: self.ctrl_reg.id(0).range(0, 8),
            remote: remote.at(8),
            data: Some(data),
            flags: Flags::NONE,
            ctx: CTX_CTRL,
        })?;
        self.outstanding += 1;
        Ok(())
    }

    // ------------------------------------------------------------------ progress

    /// Polls every rail once and sorts what completed; returns whether anything did.
    pub fn progress(&mut self) -> MeshResult<bool> {
        let mut buf = [FiCompletion::default(); 32];
        let mut got = false;
        for r in 0..self.group.len() {
            let n = self.group.rail(r).poll(&mut buf)?;
            for c in &buf[..n] {
                self.sort(c)?;
            }
            got |= n > 0;
        }
        if got {
            if let Some(p) = &self.progress_tick {
                p.tick();
            }
        }
        Ok(got)
    }

    fn sort(&mut self, c: &FiCompletion) -> MeshResult<()> {
        if c.context == FiCompletion::REMOTE_CQ_DATA {
            self.arrivals.push_back(c.data);
            return Ok(());
        }
        match c.context & CTX_MASK {
            CTX_WRITE | CTX_SEND | CTX_CTRL => {
                if self.outstanding == 0 {
                    return Err(BenchError::failed(
                        "a local completion arrived that was never posted (or arrived twice)",
                    ));
                }
                self.outstanding -= 1;
            }
            CTX_RECV => self.received.push_back(Received {
                index: (c.context & !CTX_MASK) as usize,
                data: c.remote_data().unwrap_or(u64::MAX),
                len: c.len,
            }),
            _ => {
                return Err(BenchError::failed(format!(
                    "completion with an unknown context {:#x}",
                    c.context
                )))
            }
        }
        Ok(())
    }

    /// Polls until `done` says so. `done` is asked after every poll that found something (and
    /// once up front); `what` describes what is missing when the wait gives up. Fails when the
    /// job failed elsewhere (a rank died, froze or aborted: the bootstrap names it) or after
    /// `--timeout` without any completion.
    pub fn wait_until(
        &mut self,
        mut done: impl FnMut(&mut Mesh) -> MeshResult<bool>,
        what: impl Fn(&Mesh) -> String,
    ) -> MeshResult<()> {
        if done(self)? {
            return Ok(());
        }
        let mut last = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.progress()? {
                last = Instant::now();
                if done(self)? {
                    return Ok(());
                }
                continue;
            }
            spins = spins.wrapping_add(1);
            // Ranks often outnumber cores (8 ranks on a 2-core CI host): a rank that found
            // nothing gives its core to the rank it waits for instead of spinning out its slice
            // (on shm the peer's process does the copy, so it must run). With a core to itself,
            // `sched_yield` returns at once; with more ranks than cores on the host, a wait
            // that found nothing for IDLE_YIELD sleeps in short steps instead (a yield alone
            // leaves 8 spinning ranks on 2 cores competing with the ones copying data).
            if spins > 16 {
                match self.idle_sleep {
                    Some(d) if last.elapsed() >= IDLE_YIELD => std::thread::sleep(d),
                    _ => std::thread::yield_now(),
                }
            }
            if spins % 256 == 0 {
                self.health.check()?;
                if last.elapsed() >= self.timeout {
                    return Err(BenchError::failed(format!(
                        "rank {} waited {:.1} s without progress for {}; that rank is stuck or \
                         the fabric dropped traffic (raise --timeout if this is expected)",
                        self.me,
                        self.timeout.as_secs_f64(),
                        what(self)
                    )));
                }
            }
        }
    }

    /// Polls until at least one completion arrived (of any kind), with the same failure rules
    /// as [`Mesh::wait_until`].
    pub fn wait_progress(&mut self, what: impl Fn(&Mesh) -> String) -> MeshResult<()> {
        let mut first = true;
        self.wait_until(
            move |_| {
                let f = first;
                first = false;
                Ok(!f)
            },
            what,
        )
    }

    /// Waits until every local operation completed.
    pub fn drain_local(&mut self) -> MeshResult<()> {
        self.wait_until(
            |m| Ok(m.outstanding == 0),
            |m| format!("{} local completions", m.outstanding),
        )
    }
}

/// The send and receive buffers of a mesh: `send` and `recv` bytes of the `--mem` kind.
pub fn alloc(
    mem: MemKind,
    send: usize,
    recv: usize,
    device: Option<i32>,
) -> MeshResult<(Payload, Payload)> {
    let one = |len: usize| {
        efabench_gpu::alloc(mem, len.max(64), device.unwrap_or(0))
            .map(Arc::new)
            .map_err(|e| {
                let m = format!("--mem {mem}: {e}");
                if e.is_no_driver() {
                    BenchError::usage(format!("{m}; use --mem host on machines without a GPU"))
                } else {
                    BenchError::usage(m)
                }
            })
    };
    Ok((one(send)?, one(recv)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cq_data_round_trips_in_32_bits() {
        for (k, it, src) in [
            (Kind::Payload, 0u64, 0u32),
            (Kind::Ack, 16_383, 65_535),
            (Kind::Ready, 16_384 + 5, 7),
            (Kind::Stop, 9, 3),
        ] {
            let d = cq_data(k, it, src);
            assert!(d < 1 << 32);
            assert_eq!(parse_cq_data(d), Some((k, it % ITER_MOD, src)));
        }
        assert_eq!(parse_cq_data(1 << 32), None);
        assert_eq!(parse_cq_data(u64::MAX), None);
    }
}
