//! One rank's endpoints for the point-to-point benchmarks, and the only file of the benchmarks
//! that posts fabric operations.
//!
//! A [`Link`] owns a rail group (one rail per NIC, or virtual rails on loopback) and three
//! regions registered on every rail with one call each: `out` (what this rank sends, writes, or
//! exposes for reads), `inbox` (where receives, peers' writes and our reads land) and a small
//! `ctrl` region for the 8-byte control words of the protocols (always on rail 0). Payload
//! buffers are cut into `slots` slots of the current message size; message `pos` of a window
//! uses slot `pos % slots` on both sides, so both know where every payload must be without
//! telling each other, and the buffer footprint stays bounded however large the window
//! (`--footprint`): slots reused within a window carry the same pattern, so verification stays
//! exact.
//!
//! # Routing over rails
//! * `split`: every message is cut into stripes by [`efabench_fabric::split`] (a minimum stripe,
//!   128-byte aligned boundaries, the first rail rotating with the message number), each stripe
//!   posted on its rail. The message completes when every stripe has.
//! * `round-robin`: whole messages go to rail `n % rails`.
//!
//! Both sides derive the route of a message from its number: the k-th send a rank posts meets the
//! k-th receive its peer posts (both count per step), a write's or read's route is the poster's
//! own count. A write target learns that a message landed from the remote CQ data of *every*
//! stripe — it knows from the size how many stripes each message has — never from ordering
//! across rails, which no NIC guarantees.
//!
//! Operations go through the fabric layer's cheapest path (`post_*` with a `u64` context, then
//! `poll` on every rail). Every wait is bounded by `--timeout` of no progress and checks the
//! bootstrap's health about every millisecond, so a dead peer ends the run with its rank named
//! instead of a hang.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_bootstrap::{Health, ProgressHandle};
use efabench_fabric::{
    Completion as FiCompletion, Flags, GroupPeer, GroupRegion, HostBuffer, MemoryBuffer, MrPath,
    Op, RailGroup, RegionDescriptor,
};
use efabench_gpu::{GpuBuffer, MemKind};

use crate::error::BenchError;
use crate::harness::Strategy;
use crate::pattern;

/// Which operation a completion belongs to, and on which window position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    Send(usize),
    Recv(usize),
    Write(usize),
    Read(usize),
    CtrlSend(usize),
    CtrlRecv(usize),
}

/// Most positions a context may name (the largest `--window`).
pub const MAX_POS: usize = 4096;

impl Ctx {
    fn kind(self) -> (u64, usize) {
        match self {
            Ctx::Send(s) => (1, s),
            Ctx::Recv(s) => (2, s),
            Ctx::Write(s) => (3, s),
            Ctx::Read(s) => (4, s),
            Ctx::CtrlSend(s) => (5, s),
            Ctx::CtrlRecv(s) => (6, s),
        }
    }

    fn encode(self) -> u64 {
        let (k, s) = self.kind();
        (k << 32) | s as u64
    }

    fn decode(v: u64) -> Option<Ctx> {
        let s = (v & 0xFFFF_FFFF) as usize;
        Some(match v >> 32 {
            1 => Ctx::Send(s),
            2 => Ctx::Recv(s),
            3 => Ctx::Write(s),
            4 => Ctx::Read(s),
            5 => Ctx::CtrlSend(s),
            6 => Ctx::CtrlRecv(s),
            _ => return None,
        })
    }

    /// Index into the per-context stripe counters.
    fn index(self) -> Option<usize> {
        let (k, s) = self.kind();
        (s < MAX_POS).then(|| (k as usize - 1) * MAX_POS + s)
    }
}

/// A local completion the protocols care about (every stripe of the message completed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub ctx: Ctx,
    pub len: usize,
}

/// A completion that the protocol did not expect at this point.
pub fn unexpected(c: Completion, wanted: &str) -> BenchError {
    BenchError::failed(format!(
        "expected {wanted}, got a completion of {:?} ({} bytes)",
        c.ctx, c.len
    ))
}

/// A payload buffer of any `--mem` kind, shared with the rails that registered it.
pub type Payload = Arc<Box<dyn GpuBuffer>>;

/// What a peer needs from us: our rails' addresses and the descriptors of `out` and `inbox`.
struct PeerInfo {
    peer: GroupPeer,
    out: RegionDescriptor,
    inbox: RegionDescriptor,
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

/// Bytes and operations each rail carried since [`Link::mark_timed`].
#[derive(Clone, Debug, Default)]
struct RailStats {
    bytes: u64,
    ops: u64,
}

/// Empty passes over the completion queues before a wait looks at the clock.
const EMPTY_POLLS: u32 = 256;

/// How long one wait has gone without any completion; the clock is read only once a wait has
/// found nothing for [`EMPTY_POLLS`] passes.
#[derive(Default)]
struct Idle {
    /// The first empty check since the last completion.
    since: Option<Instant>,
    /// The last health check of the job.
    checked: Option<Instant>,
}

/// The stripes of one message: `(rail, offset in message, length)` each.
enum Route {
    One([(usize, usize, usize); 1]),
    Many(Vec<(usize, usize, usize)>),
}

impl Route {
    fn stripes(&self) -> &[(usize, usize, usize)] {
        match self {
            Route::One(s) => s,
            Route::Many(v) => v,
        }
    }
}

/// Stripes of message number `n` of `size` bytes over `rails` rails (see [`Link::route`]).
fn route_of(strategy: Strategy, rails: usize, n: u64, size: usize) -> Route {
    let first = (n % rails.max(1) as u64) as usize;
    match strategy {
        // What `split` gives a single stripe: the whole message on the first rail.
        Strategy::Split if efabench_fabric::route::stripe_count(size, rails) == 1 => {
            Route::One([(first, 0, size)])
        }
        Strategy::Split => Route::Many(
            efabench_fabric::split(size, rails, first)
                .into_iter()
                .map(|s| (s.rail, s.off, s.len))
                .collect(),
        ),
        Strategy::RoundRobin => {
            Route::One([(efabench_fabric::round_robin_rail(n, rails), 0, size)])
        }
    }
}

/// One rank's endpoints, buffers and peers.
pub struct Link {
    group: RailGroup,
    strategy: Strategy,
    out: Payload,
    out_reg: GroupRegion,
    inbox: Payload,
    inbox_reg: GroupRegion,
    ctrl: Arc<HostBuffer>,
    ctrl_reg: GroupRegion,
    ctrl_slots: usize,
    peers: Vec<Option<PeerInfo>>,
    peer: usize,
    /// Current message size and the number of buffer slots in use.
    size: usize,
    slots: usize,
    /// Messages posted this step, per direction: the route of the next one.
    sends: u64,
    recvs: u64,
    rmas: u64,
    /// Stripes still outstanding and bytes completed, per context.
    pending: Vec<(u32, usize)>,
    stash: VecDeque<Completion>,
    remote_data: VecDeque<u64>,
    ctrl_words: VecDeque<u64>,
    ctrl_recv_next: usize,
    ctrl_send_next: usize,
    ctrl_send_busy: Vec<bool>,
    stats: Vec<RailStats>,
    counting: bool,
    timeout: Duration,
    health: Health,
    progress: ProgressHandle,
    scratch: Vec<u8>,
    /// The payload pattern's position stream, computed once per size.
    stream: pattern::Stream,
    corrupt_once: bool,
}

impl Link {
    /// Registers `out`, `inbox` and a control region on every rail of `group`. `health` is
    /// checked about every millisecond while waiting; a failed job ends the wait.
    pub fn new(
        group: RailGroup,
        strategy: Strategy,
        (out, inbox): (Payload, Payload),
        mr: MrPath,
        timeout: Duration,
        (health, progress): (Health, ProgressHandle),
    ) -> Result<Self, BenchError> {
        let ctrl_slots = 8;
        let ctrl = HostBuffer::new(16 * ctrl_slots).map(Arc::new)?;
        let gpu_mem = out.kind() != MemKind::Host && out.kind() != MemKind::Pinned;
        let provider = group.rail(0).info().provider.clone();
        let register = |b: &Payload| {
            group.register(b.clone(), mr).map_err(|e| {
                if gpu_mem {
                    BenchError::usage(format!(
                        "--mem {}: provider {provider} could not register GPU memory ({e}); this \
                         libfabric lacks CUDA support: use the EFA installer's libfabric \
                         (/opt/amazon/efa) or one built with --with-cuda, or --mem host|pinned",
                        b.kind()
                    ))
                } else {
                    BenchError::from(e)
                }
            })
        };
        let out_reg = register(&out)?;
        let inbox_reg = register(&inbox)?;
        let ctrl_reg = group.register(ctrl.clone(), MrPath::Auto)?;
        let rails = group.len();
        Ok(Link {
            group,
            strategy,
            out,
            out_reg,
            inbox,
            inbox_reg,
            ctrl,
            ctrl_reg,
            ctrl_slots,
            peers: Vec::new(),
            peer: 0,
            size: 0,
            slots: 1,
            sends: 0,
            recvs: 0,
            rmas: 0,
            pending: vec![(0, 0); 6 * MAX_POS],
            stash: VecDeque::new(),
            remote_data: VecDeque::new(),
            ctrl_words: VecDeque::new(),
            ctrl_recv_next: 0,
            ctrl_send_next: 0,
            ctrl_send_busy: vec![false; ctrl_slots],
            stats: vec![RailStats::default(); rails],
            counting: false,
            timeout,
            health,
            progress,
            scratch: Vec::new(),
            stream: pattern::Stream::default(),
            corrupt_once: crate::test_hooks::corrupt_payload(),
        })
    }

    /// Which registration path the payload took (`dmabuf`, `va` or `host`), with
    /// `+device-only` when it was registered with `FI_HMEM_DEVICE_ONLY` (device memory).
    pub fn mr_path(&self) -> String {
        let path = self.out_reg.path_taken();
        if MemoryBuffer::device_only(&**self.out) {
            format!("{path}+device-only")
        } else {
            path.to_string()
        }
    }

    /// Bytes of each payload buffer.
    pub fn buffer_bytes(&self) -> usize {
        MemoryBuffer::len(&**self.out)
    }

    /// Our endpoint addresses and the descriptors of `out` and `inbox`, for the all-gather.
    pub fn local_blob(&self) -> Result<Vec<u8>, BenchError> {
        Ok(pack_parts([
            self.group.address()?.to_bytes(),
            self.group.descriptor(&self.out_reg)?.to_bytes(),
            self.group.descriptor(&self.inbox_reg)?.to_bytes(),
        ]))
    }

    /// Inserts the peers we talk to: rank 0 talks to everyone, every other rank to rank 0.
    pub fn connect(&mut self, me: u32, blobs: &[Vec<u8>]) -> Result<(), BenchError> {
        self.peers = (0..blobs.len()).map(|_| None).collect();
        for (r, b) in blobs.iter().enumerate() {
            if r as u32 == me || (me != 0 && r != 0) {
                continue;
            }
            let parts: [&[u8]; 3] = unpack_parts(r, b)?;
            let addr = efabench_fabric::GroupAddress::from_bytes(parts[0])?;
            let out = RegionDescriptor::from_bytes(parts[1])?;
            let inbox = RegionDescriptor::from_bytes(parts[2])?;
            if out.rails() != self.group.len() || inbox.rails() != self.group.len() {
                return Err(BenchError::usage(format!(
                    "rank {r} has {} rails and this rank {}: give every rank the same --rails",
                    out.rails(),
                    self.group.len()
                )));
            }
            let peer = self.group.insert_peer(&addr)?;
            self.peers[r] = Some(PeerInfo { peer, out, inbox });
        }
        Ok(())
    }

    /// Directs the next operations at this rank.
    pub fn set_peer(&mut self, rank: u32) {
        self.peer = rank as usize;
    }

    /// Starts a step: message size, buffer slots in use, and fresh route counters.
    pub fn begin_step(&mut self, size: usize, slots: usize) {
        self.size = size;
        self.slots = slots.max(1);
        self.sends = 0;
        self.recvs = 0;
        self.rmas = 0;
        self.counting = false;
        for s in &mut self.stats {
            *s = RailStats::default();
        }
    }

    /// From now on, count per-rail bytes and operations (the timed part of the step).
    pub fn mark_timed(&mut self) {
        self.counting = true;
        for s in &mut self.stats {
            *s = RailStats::default();
        }
    }

    /// `per_rail` of the record: `{rail, domain, bytes, ops}` of the timed part.
    pub fn per_rail(&self) -> Vec<super::RailLoad> {
        let domains = self.group.domains();
        let load = |(rail, s): (usize, &RailStats)| super::RailLoad {
            rail,
            domain: domains.get(rail).cloned(),
            bytes: s.bytes,
            ops: s.ops,
        };
        self.stats.iter().enumerate().map(load).collect()
    }

    /// Stripes a message of `size` bytes is cut into (1 for round-robin).
    pub fn stripes(&self, size: usize) -> usize {
        match self.strategy {
            Strategy::Split => efabench_fabric::route::stripe_count(size, self.group.len()),
            Strategy::RoundRobin => 1,
        }
    }

    /// Stripes of message number `n` of `size` bytes: `(rail, offset in message, length)`.
    /// A message that goes whole to one rail (every message below the minimum stripe, and
    /// every round-robin message) needs no allocation: a ping-pong posts two or three of them
    /// per round trip, and a heap allocation each was a measurable part of an 8-byte round trip.
    fn route(&self, n: u64, size: usize) -> Route {
        route_of(self.strategy, self.group.len(), n, size)
    }

    fn peer_info(&self) -> Result<&PeerInfo, BenchError> {
        self.peers
            .get(self.peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                BenchError::failed(format!("rank {} is not connected to this rank", self.peer))
            })
    }

    /// Byte offset of window position `pos` (slot `pos % slots`).
    fn offset(&self, pos: usize, size: usize) -> Result<usize, BenchError> {
        let off = (pos % self.slots) * size;
        if off + size > self.buffer_bytes() {
            return Err(BenchError::failed(format!(
                "slot {} of {size} bytes is outside the {}-byte buffer",
                pos % self.slots,
                self.buffer_bytes()
            )));
        }
        Ok(off)
    }

    fn expect(&mut self, ctx: Ctx, stripes: usize) -> Result<(), BenchError> {
        let i = ctx.index().ok_or_else(|| {
            BenchError::failed(format!("window position of {ctx:?} is beyond {MAX_POS}"))
        })?;
        self.pending[i].0 += stripes as u32;
        Ok(())
    }

    fn count(&mut self, rail: usize, bytes: usize) {
        if self.counting {
            let s = &mut self.stats[rail];
            s.bytes += bytes as u64;
            s.ops += 1;
        }
    }

    // ----------------------------------------------------------------- payloads

    /// Writes the pattern of `seed` into buffer slot `slot` of `out`.
    pub fn fill_out(&mut self, slot: usize, size: usize, seed: u64) {
        let off = slot * size;
        self.scratch.resize(size, 0);
        self.stream.fill(&mut self.scratch, seed);
        // The range was checked when the slot was sized; a failure here is a bug, so report it
        // as errors rather than panic.
        if self.out.write_at(off, &self.scratch).is_err() {
            self.corrupt_once = true;
        }
    }

    /// Words of buffer slot `slot` of `inbox` that differ from the pattern of `seed`.
    pub fn check_inbox(&mut self, slot: usize, size: usize, seed: u64) -> u64 {
        let off = slot * size;
        self.scratch.resize(size, 0);
        if self.inbox.read_at(off, &mut self.scratch).is_err() {
            return size.div_ceil(8) as u64;
        }
        if self.corrupt_once && size > 0 {
            self.corrupt_once = false;
            self.scratch[size / 2] ^= 0x5A;
        }
        self.stream.mismatches(&self.scratch, seed)
    }

    /// Waits until data that completions reported has really landed in `inbox`. On shm's CUDA
    /// IPC path the receiving process only *queues* a device-to-device copy and reports the
    /// completion at once, so a clock stopped at the completion times the queueing (it once
    /// read 1624 GB/s over a 450 GB/s NVLink). A no-op for host memory.
    pub fn settle(&self) -> Result<(), BenchError> {
        self.inbox
            .settle()
            .map_err(|e| BenchError::failed(format!("waiting for the GPU copies to land: {e}")))
    }

    // ----------------------------------------------------------------- operations

    pub fn post_send(&mut self, pos: usize, size: usize, ctx: Ctx) -> Result<(), BenchError> {
        let off = self.offset(pos, size)?;
        let route = self.route(self.sends, size);
        self.sends += 1;
        self.expect(ctx, route.stripes().len())?;
        for &(rail, o, len) in route.stripes() {
            let peer = self.peer_info()?.peer.rail(rail);
            self.group.rail(rail).post(Op::Send {
                peer,
                local: self.out_reg.id(rail).range(off + o, len),
                data: None,
                flags: Flags::NONE,
                ctx: ctx.encode(),
            })?;
            self.count(rail, len);
        }
        Ok(())
    }

    /// Whether a message of `size` bytes can go by `fi_inject` (no completion to reap; the buffer
    /// is reusable as soon as the call returns), as fi_pingpong does for small messages.
    pub fn can_inject(&self, size: usize) -> bool {
        self.stripes(size) == 1
            && (0..self.group.len()).all(|r| size as u64 <= self.group.rail(r).info().inject_size)
    }

    /// Sends position `pos` of `out` by `fi_inject`: no completion follows.
    pub fn inject(&mut self, pos: usize, size: usize) -> Result<(), BenchError> {
        let off = self.offset(pos, size)?;
        let route = self.route(self.sends, size);
        self.sends += 1;
        for &(rail, o, len) in route.stripes() {
            let peer = self.peer_info()?.peer.rail(rail);
            self.group.rail(rail).post(Op::Send {
                peer,
                local: self.out_reg.id(rail).range(off + o, len),
                data: None,
                flags: Flags::INJECT,
                ctx: 0,
            })?;
            self.count(rail, len);
        }
        Ok(())
    }

    pub fn post_recv(&mut self, pos: usize, size: usize, ctx: Ctx) -> Result<(), BenchError> {
        let off = self.offset(pos, size)?;
        let route = self.route(self.recvs, size);
        self.recvs += 1;
        self.expect(ctx, route.stripes().len())?;
        for &(rail, o, len) in route.stripes() {
            self.group.rail(rail).post(Op::Recv {
                local: self.inbox_reg.id(rail).range(off + o, len),
                ctx: ctx.encode(),
            })?;
        }
        Ok(())
    }

    /// RDMA-writes position `pos` of `out` into the same position of the peer's inbox; every
    /// stripe carries `data` as remote CQ data when given.
    pub fn post_write(
        &mut self,
        pos: usize,
        size: usize,
        data: Option<u64>,
        ctx: Ctx,
    ) -> Result<(), BenchError> {
        let off = self.offset(pos, size)?;
        let route = self.route(self.rmas, size);
        self.rmas += 1;
        self.expect(ctx, route.stripes().len())?;
        for &(rail, o, len) in route.stripes() {
            let p = self.peer_info()?;
            let (peer, remote) = (p.peer.rail(rail), *p.inbox.rail(rail));
            self.group.rail(rail).post(Op::Write {
                peer,
                local: self.out_reg.id(rail).range(off + o, len),
                remote: remote.at((off + o) as u64),
                data,
                flags: Flags::NONE,
                ctx: ctx.encode(),
            })?;
            self.count(rail, len);
        }
        Ok(())
    }

    /// RDMA-reads the peer's `out` at position `pos` into our inbox.
    pub fn post_read(&mut self, pos: usize, size: usize, ctx: Ctx) -> Result<(), BenchError> {
        let off = self.offset(pos, size)?;
        let route = self.route(self.rmas, size);
        self.rmas += 1;
        self.expect(ctx, route.stripes().len())?;
        for &(rail, o, len) in route.stripes() {
            let p = self.peer_info()?;
            let (peer, remote) = (p.peer.rail(rail), *p.out.rail(rail));
            self.group.rail(rail).post(Op::Read {
                peer,
                local: self.inbox_reg.id(rail).range(off + o, len),
                remote: remote.at((off + o) as u64),
                ctx: ctx.encode(),
            })?;
            self.count(rail, len);
        }
        Ok(())
    }

    // ----------------------------------------------------------------- control words

    /// Posts a receive for one control word (rail 0).
    pub fn post_ctrl_recv(&mut self) -> Result<(), BenchError> {
        let slot = self.ctrl_recv_next;
        self.ctrl_recv_next = (slot + 1) % self.ctrl_slots;
        self.group
            .rail(0)
            .post(Op::Recv {
                local: self.ctrl_reg.id(0).range(slot * 8, 8),
                ctx: Ctx::CtrlRecv(slot).encode(),
            })
            .map_err(Into::into)
    }

    /// Sends one control word to the current peer (rail 0).
    pub fn send_ctrl(&mut self, word: u64) -> Result<(), BenchError> {
        let slot = self.ctrl_send_next;
        self.ctrl_send_next = (slot + 1) % self.ctrl_slots;
        let mut idle = Idle::default();
        while self.ctrl_send_busy[slot] {
            self.progress_once(&mut idle, "a control message to be sent")?;
        }
        let off = (self.ctrl_slots + slot) * 8;
        self.ctrl.write_at(off, &word.to_le_bytes())?;
        let peer = self.peer_info()?.peer.rail(0);
        self.ctrl_send_busy[slot] = true;
        self.group
            .rail(0)
            .post(Op::Send {
                peer,
                local: self.ctrl_reg.id(0).range(off, 8),
                data: None,
                flags: Flags::NONE,
                ctx: Ctx::CtrlSend(slot).encode(),
            })
            .map_err(Into::into)
    }

    /// The next control word received.
    pub fn wait_ctrl(&mut self) -> Result<u64, BenchError> {
        let mut idle = Idle::default();
        loop {
            if let Some(w) = self.ctrl_words.pop_front() {
                return Ok(w);
            }
            self.progress_once(&mut idle, "a control message from the peer")?;
        }
    }

    // ----------------------------------------------------------------- waiting

    /// Polls every rail's CQ up to [`EMPTY_POLLS`] times and sorts what arrives; after that many
    /// empty passes it looks at the clock (`idle`): the health of the job every millisecond, and
    /// the timeout. Any completion resets `idle`, so waits time out on lack of progress, not on
    /// the length of a step. A wait that completes within those polls reads no clock: at 8 B a
    /// ping-pong's handful of clock reads (about 25 ns each on a VM) were a fifth of its latency.
    fn progress_once(&mut self, idle: &mut Idle, what: &str) -> Result<(), BenchError> {
        let mut buf = [FiCompletion::default(); 16];
        for _ in 0..EMPTY_POLLS {
            let mut got = false;
            for r in 0..self.group.len() {
                let n = self.group.rail(r).poll(&mut buf)?;
                for c in &buf[..n] {
                    self.sort(c)?;
                }
                got |= n > 0;
            }
            if got {
                // Tells the bootstrap this rank moves: idle ranks waiting in a collective meanwhile
                // are not timed out (waits time out on lack of progress, not step length).
                self.progress.tick();
                idle.since = None;
                return Ok(());
            }
        }
        let now = Instant::now();
        let since = *idle.since.get_or_insert(now);
        let checked = idle.checked.get_or_insert(now);
        if now.duration_since(*checked) >= Duration::from_millis(1) {
            *checked = now;
            self.health
                .check()
                .map_err(|e| BenchError::failed(e.to_string()))?;
        }
        if now.duration_since(since) >= self.timeout {
            return Err(BenchError::failed(format!(
                "waited {:.1} s for {what} from rank {} without progress; the peer is stuck \
                 or the fabric dropped traffic (raise --timeout if this is expected)",
                self.timeout.as_secs_f64(),
                self.peer
            )));
        }
        Ok(())
    }

    fn sort(&mut self, c: &FiCompletion) -> Result<(), BenchError> {
        if c.context == FiCompletion::REMOTE_CQ_DATA {
            self.remote_data.push_back(c.data);
            return Ok(());
        }
        match Ctx::decode(c.context) {
            Some(Ctx::CtrlSend(s)) => {
                if let Some(b) = self.ctrl_send_busy.get_mut(s) {
                    *b = false;
                }
            }
            Some(Ctx::CtrlRecv(s)) => {
                let mut w = [0u8; 8];
                self.ctrl.read_at(s * 8, &mut w)?;
                self.ctrl_words.push_back(u64::from_le_bytes(w));
            }
            Some(ctx) => {
                // A receive that also carried data (send_data) is still a receive.
                if let Some(d) = c.remote_data() {
                    if !matches!(ctx, Ctx::Recv(_)) {
                        self.remote_data.push_back(d);
                    }
                }
                let i = ctx.index().ok_or_else(|| {
                    BenchError::failed(format!("completion for {ctx:?} beyond the window"))
                })?;
                let p = &mut self.pending[i];
                if p.0 == 0 {
                    return Err(BenchError::failed(format!(
                        "a completion of {ctx:?} arrived that was never posted (or arrived twice)"
                    )));
                }
                p.0 -= 1;
                p.1 += c.len;
                if p.0 == 0 {
                    let len = std::mem::take(&mut p.1);
                    self.stash.push_back(Completion { ctx, len });
                }
            }
            None => {
                return Err(BenchError::failed(format!(
                    "completion with an unknown context {:#x}",
                    c.context
                )));
            }
        }
        Ok(())
    }

    /// The next local completion of a whole message (control traffic and remote CQ data are
    /// sorted aside).
    pub fn wait(&mut self) -> Result<Completion, BenchError> {
        let mut idle = Idle::default();
        loop {
            if let Some(c) = self.stash.pop_front() {
                return Ok(c);
            }
            self.progress_once(&mut idle, "a completion")?;
        }
    }

    fn take(&mut self, ctx: Ctx) -> Option<Completion> {
        let i = self.stash.iter().position(|c| c.ctx == ctx)?;
        self.stash.remove(i)
    }

    /// Waits until every listed operation has completed.
    pub fn wait_for(&mut self, ctxs: &[Ctx]) -> Result<(), BenchError> {
        let mut idle = Idle::default();
        for &ctx in ctxs {
            while self.take(ctx).is_none() {
                self.progress_once(&mut idle, "an operation to complete")?;
            }
        }
        Ok(())
    }

    fn wait_n(&mut self, n: usize, is: fn(Ctx) -> bool, what: &str) -> Result<(), BenchError> {
        let mut idle = Idle::default();
        let mut got = 0;
        while got < n {
            if let Some(i) = self.stash.iter().position(|c| is(c.ctx)) {
                self.stash.remove(i);
                got += 1;
            } else {
                self.progress_once(&mut idle, what)?;
            }
        }
        Ok(())
    }

    pub fn wait_all_sends(&mut self, n: usize) -> Result<(), BenchError> {
        self.wait_n(n, |c| matches!(c, Ctx::Send(_)), "sends of the window")
    }
    pub fn wait_all_writes(&mut self, n: usize) -> Result<(), BenchError> {
        self.wait_n(n, |c| matches!(c, Ctx::Write(_)), "writes of the window")
    }
    pub fn wait_all_reads(&mut self, n: usize) -> Result<(), BenchError> {
        self.wait_n(n, |c| matches!(c, Ctx::Read(_)), "reads of the window")
    }

    /// The next remote CQ data (a stripe of a peer's write landed in our inbox).
    pub fn wait_remote_data(&mut self) -> Result<u64, BenchError> {
        let mut idle = Idle::default();
        loop {
            if let Some(d) = self.remote_data.pop_front() {
                return Ok(d);
            }
            self.progress_once(&mut idle, "a write from the peer")?;
        }
    }

    /// The peer's whole answer (every stripe of one message of `size` bytes) must carry `data`
    /// (write ping-pong).
    pub fn wait_data(&mut self, data: u64, size: usize) -> Result<(), BenchError> {
        for _ in 0..self.stripes(size) {
            let got = self.wait_remote_data()?;
            if got != data {
                return Err(BenchError::failed(format!(
                    "the peer's answer carried CQ data {got:#x}, expected {data:#x}; a write was lost or reordered"
                )));
            }
        }
        Ok(())
    }
}

/// The `out` and `inbox` buffers, `len` bytes each, of the `--mem` kind on GPU `device`.
pub fn alloc_payload(
    mem: MemKind,
    len: usize,
    device: Option<i32>,
) -> Result<(Payload, Payload), BenchError> {
    let one = || {
        efabench_gpu::alloc(mem, len, device.unwrap_or(0))
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
    Ok((one()?, one()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_the_fabric_schedule() {
        for rails in 1..=8 {
            for size in [0, 8, 4096, 128 << 10, (128 << 10) + 1, 1 << 20, 16 << 20] {
                for n in 0..10u64 {
                    let split: Vec<_> =
                        efabench_fabric::split(size, rails, (n % rails as u64) as usize)
                            .into_iter()
                            .map(|s| (s.rail, s.off, s.len))
                            .collect();
                    let r = route_of(Strategy::Split, rails, n, size);
                    assert_eq!(
                        r.stripes(),
                        &split[..],
                        "split {size} B over {rails} rails, message {n}"
                    );
                    let rr = route_of(Strategy::RoundRobin, rails, n, size);
                    assert_eq!(
                        rr.stripes(),
                        &[(efabench_fabric::round_robin_rail(n, rails), 0, size)]
                    );
                }
            }
        }
    }

    #[test]
    fn contexts_round_trip() {
        for c in [
            Ctx::Send(0),
            Ctx::Recv(63),
            Ctx::Write(7),
            Ctx::Read(4095),
            Ctx::CtrlSend(1),
            Ctx::CtrlRecv(2),
        ] {
            assert_eq!(Ctx::decode(c.encode()), Some(c));
            assert!(c.index().is_some());
        }
        assert_eq!(Ctx::decode(0), None);
        assert_eq!(Ctx::decode(FiCompletion::REMOTE_CQ_DATA), None);
        assert_eq!(Ctx::Send(MAX_POS).index(), None);
    }
}
