//! One rank's endpoint for the point-to-point benchmarks, and the only file of the benchmarks
//! that talks to the fabric layer.
//!
//! A [`Link`] owns one rail and three registered regions: `out` (what this rank sends, writes, or
//! exposes for reads), `inbox` (where receives, peers' writes and our reads land) and a small
//! `ctrl` region for the 8-byte control words of the protocols. Both regions are cut into slots of
//! the current message size, and slot `k` of a sender's `out` always travels to slot `k` of the
//! receiver's `inbox`, so both sides know where every payload must be without telling each other.
//!
//! Operations go through the fabric layer's cheapest path (`post_*` with a `u64` context, then
//! `poll`); completions that arrive before anyone waits for them are kept in a small stash.
//! Every wait is bounded by `--timeout` and checks the bootstrap's health about every
//! millisecond, so a dead peer ends the run with its rank named instead of a hang.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_fabric::{
    get_info, Completion as FiCompletion, Hints, Hmem, HostBuffer, MemoryBuffer, Peer,
    ProviderInfo, Rail, RailConfig, RegionId, RemoteRegion,
};
use efabench_gpu::{GpuBuffer, GpuChoice, GpuError, MemKind};

use crate::error::BenchError;
use crate::pattern;

/// Which operation a completion belongs to, and on which slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    Send(usize),
    Recv(usize),
    Write(usize),
    Read(usize),
    CtrlSend(usize),
    CtrlRecv(usize),
}

impl Ctx {
    fn encode(self) -> u64 {
        let (k, s) = match self {
            Ctx::Send(s) => (1u64, s),
            Ctx::Recv(s) => (2, s),
            Ctx::Write(s) => (3, s),
            Ctx::Read(s) => (4, s),
            Ctx::CtrlSend(s) => (5, s),
            Ctx::CtrlRecv(s) => (6, s),
        };
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
}

/// A local completion the protocols care about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub ctx: Ctx,
    pub len: usize,
}

/// Why a protocol step stopped.
#[derive(Debug)]
pub enum LinkError {
    /// The user asked for something this provider or host cannot do (exit 2).
    Usage(String),
    /// The fabric, the peer or the protocol failed (exit 1).
    Failed(String),
}

impl LinkError {
    pub fn protocol(m: String) -> Self {
        LinkError::Failed(m)
    }
    pub fn unexpected(c: Completion, wanted: &str) -> Self {
        LinkError::Failed(format!(
            "expected {wanted}, got a completion of {:?} ({} bytes)",
            c.ctx, c.len
        ))
    }
    pub fn into_bench(self) -> BenchError {
        match self {
            LinkError::Usage(m) => BenchError::Usage(m),
            LinkError::Failed(m) => BenchError::Failed(m),
        }
    }
}

fn fabric(e: efabench_fabric::Error) -> LinkError {
    match e {
        efabench_fabric::Error::Load(_) | efabench_fabric::Error::NoProvider { .. } => {
            LinkError::Usage(e.to_string())
        }
        _ => LinkError::Failed(e.to_string()),
    }
}

/// How to open a link.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    pub provider: String,
    pub domain: Option<String>,
    /// Local address to bind to (keeps tcp on loopback when all ranks share this host).
    pub node: Option<String>,
    pub mem: String,
    /// `--gpu`: an index or `auto` (the local rank's GPU).
    pub gpu: String,
    pub local_rank: u32,
    /// Bytes of each of `out` and `inbox`.
    pub buf_bytes: usize,
    pub ctrl_slots: usize,
    pub timeout: Duration,
}

/// Test-only hook (integration tests set it on one rank): corrupt one byte of the first payload
/// this rank verifies, so a test can prove that verification reports errors.
const CORRUPT_ENV: &str = "EFABENCH_TEST_CORRUPT_PAYLOAD";

/// A payload buffer of any `--mem` kind, shared with the rail that registered it.
type Payload = Arc<Box<dyn GpuBuffer>>;

/// One rank's endpoint, buffers and peers.
pub struct Link<'h> {
    rail: Rail,
    out: Payload,
    out_id: RegionId,
    inbox: Payload,
    inbox_id: RegionId,
    ctrl: Arc<HostBuffer>,
    ctrl_id: RegionId,
    ctrl_slots: usize,
    peers: Vec<Option<(Peer, RemoteRegion, RemoteRegion)>>,
    peer: usize,
    /// Current message size: the slot stride.
    size: usize,
    stash: VecDeque<Completion>,
    remote_data: VecDeque<u64>,
    ctrl_words: VecDeque<u64>,
    ctrl_recv_next: usize,
    ctrl_send_next: usize,
    ctrl_send_busy: Vec<bool>,
    timeout: Duration,
    health: &'h dyn Fn() -> Result<(), String>,
    scratch: Vec<u8>,
    /// The payload pattern's position stream, computed once per size.
    stream: pattern::Stream,
    corrupt_once: bool,
}

impl<'h> Link<'h> {
    /// Open the rail and register the buffers. `health` is called about every millisecond while
    /// waiting; an `Err` from it ends the wait (a peer died, the job aborted).
    pub fn open(
        cfg: &LinkConfig,
        health: &'h dyn Fn() -> Result<(), String>,
    ) -> Result<Self, LinkError> {
        let (out, inbox) = alloc_payload(cfg)?;
        let hmem = out.hmem() != Hmem::System;
        let hints = Hints {
            provider: Some(cfg.provider.clone()),
            domain: cfg.domain.clone(),
            node: cfg.node.clone(),
            hmem,
            ..Hints::default()
        };
        let info: ProviderInfo = match get_info(&hints) {
            Ok(v) if !v.is_empty() => v.into_iter().next().expect("non-empty"),
            Ok(_) | Err(efabench_fabric::Error::NoProvider { .. }) if hmem => {
                return Err(LinkError::Usage(format!(
                    "--mem {}: provider {} cannot register GPU memory (no FI_HMEM here); this needs \
                     EFA with GPUDirect RDMA (p4d/p5 with the EFA installer) or a libfabric built with \
                     CUDA support; use --mem host or --mem pinned",
                    cfg.mem, cfg.provider
                )))
            }
            Ok(_) => {
                return Err(LinkError::Usage(format!(
                    "provider {} offers no RDM endpoint with MSG|RMA here",
                    cfg.provider
                )))
            }
            Err(e) => return Err(fabric(e)),
        };
        if (cfg.buf_bytes as u64) > info.max_msg_size.saturating_mul(4096) {
            return Err(LinkError::Usage(format!(
                "messages of up to {} bytes exceed what provider {} can send ({} bytes); lower -e",
                cfg.buf_bytes, info.provider, info.max_msg_size
            )));
        }
        let rail = Rail::open(
            &info,
            &RailConfig {
                post_timeout: cfg.timeout,
                max_in_flight: 8192,
                ..RailConfig::default()
            },
        )
        .map_err(fabric)?;
        let ctrl = HostBuffer::new(16 * cfg.ctrl_slots)
            .map(Arc::new)
            .map_err(fabric)?;
        // A provider may advertise FI_HMEM and still fail to register GPU memory when its
        // libfabric was built without CUDA support: that is a setup problem, not a run failure.
        let register_payload = |b: &Payload| {
            rail.register(b.clone()).map_err(|e| {
                if hmem {
                    LinkError::Usage(format!(
                        "--mem {}: provider {} could not register GPU memory ({e}); this libfabric \
                         lacks CUDA support: use the EFA installer's libfabric (/opt/amazon/efa), \
                         or --mem host|pinned",
                        cfg.mem, info.provider
                    ))
                } else {
                    fabric(e)
                }
            })
        };
        let out_id = register_payload(&out)?;
        let inbox_id = register_payload(&inbox)?;
        let ctrl_id = rail.register(ctrl.clone()).map_err(fabric)?;
        Ok(Link {
            rail,
            out,
            out_id,
            inbox,
            inbox_id,
            ctrl,
            ctrl_id,
            ctrl_slots: cfg.ctrl_slots,
            peers: Vec::new(),
            peer: 0,
            size: 0,
            stash: VecDeque::new(),
            remote_data: VecDeque::new(),
            ctrl_words: VecDeque::new(),
            ctrl_recv_next: 0,
            ctrl_send_next: 0,
            ctrl_send_busy: vec![false; cfg.ctrl_slots],
            timeout: cfg.timeout,
            health,
            scratch: Vec::new(),
            stream: pattern::Stream::default(),
            corrupt_once: std::env::var_os(CORRUPT_ENV).is_some(),
        })
    }

    pub fn provider_name(&self) -> String {
        self.rail.info().provider.clone()
    }
    pub fn fabric_name(&self) -> String {
        self.rail.info().fabric.clone()
    }
    pub fn domain_name(&self) -> String {
        self.rail.info().domain.clone()
    }
    /// The NIC's link speed in Gbps, when the provider reports one.
    pub fn link_gbps(&self) -> Option<f64> {
        self.rail
            .info()
            .link_speed_bps
            .filter(|b| *b > 0)
            .map(|b| b as f64 / 1e9)
    }

    /// Our endpoint address and the descriptors of `out` and `inbox`, for the all-gather.
    pub fn local_blob(&self) -> Result<Vec<u8>, LinkError> {
        let addr = self.rail.address().map_err(fabric)?;
        let mut v = Vec::with_capacity(2 + addr.len() + 2 * RemoteRegion::BYTES);
        v.extend_from_slice(&(addr.len() as u16).to_le_bytes());
        v.extend_from_slice(&addr);
        v.extend_from_slice(
            &self
                .rail
                .remote_region(self.out_id)
                .map_err(fabric)?
                .to_bytes(),
        );
        v.extend_from_slice(
            &self
                .rail
                .remote_region(self.inbox_id)
                .map_err(fabric)?
                .to_bytes(),
        );
        Ok(v)
    }

    /// Insert the peers we talk to: rank 0 talks to everyone, every other rank to rank 0.
    pub fn connect(&mut self, me: u32, blobs: &[Vec<u8>]) -> Result<(), LinkError> {
        self.peers = vec![None; blobs.len()];
        for (r, b) in blobs.iter().enumerate() {
            if r as u32 == me || (me != 0 && r != 0) {
                continue;
            }
            let bad =
                || LinkError::Failed(format!("rank {r} sent a malformed endpoint description"));
            let n = u16::from_le_bytes(b.get(..2).ok_or_else(bad)?.try_into().map_err(|_| bad())?)
                as usize;
            let addr = b.get(2..2 + n).ok_or_else(bad)?;
            let rr = |i: usize| {
                let s = 2 + n + i * RemoteRegion::BYTES;
                b.get(s..s + RemoteRegion::BYTES)
                    .ok_or_else(bad)
                    .and_then(|x| RemoteRegion::from_bytes(x).map_err(fabric))
            };
            let (out, inbox) = (rr(0)?, rr(1)?);
            let peer = self.rail.insert_peer(addr).map_err(fabric)?;
            self.peers[r] = Some((peer, out, inbox));
        }
        Ok(())
    }

    /// Direct the next operations at this rank.
    pub fn set_peer(&mut self, rank: u32) {
        self.peer = rank as usize;
    }

    fn peer(&self) -> Result<(Peer, RemoteRegion, RemoteRegion), LinkError> {
        self.peers.get(self.peer).copied().flatten().ok_or_else(|| {
            LinkError::Failed(format!("rank {} is not connected to this rank", self.peer))
        })
    }

    fn range(&mut self, slot: usize, size: usize) -> Result<usize, LinkError> {
        self.size = size;
        let off = slot * size;
        if off + size > MemoryBuffer::len(&**self.out) {
            return Err(LinkError::Failed(format!(
                "slot {slot} of {size} bytes is outside the {}-byte buffer",
                MemoryBuffer::len(&**self.out)
            )));
        }
        Ok(off)
    }

    // ----------------------------------------------------------------- payloads

    /// Write the pattern of `seed` into slot `slot` of `out`.
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

    /// Words of slot `slot` of `inbox` that differ from the pattern of `seed`.
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

    // ----------------------------------------------------------------- operations

    pub fn post_send(&mut self, slot: usize, size: usize, ctx: Ctx) -> Result<(), LinkError> {
        let off = self.range(slot, size)?;
        let (peer, ..) = self.peer()?;
        self.rail
            .post_send(peer, self.out_id, off, size, ctx.encode())
            .map_err(fabric)
    }

    /// Whether a message of `size` bytes can go by `fi_inject` (no completion to reap; the buffer
    /// is reusable as soon as the call returns), as fi_pingpong does for small messages.
    pub fn can_inject(&self, size: usize) -> bool {
        size as u64 <= self.rail.info().inject_size
    }

    /// Send slot `slot` of `out` by `fi_inject`: no completion follows.
    pub fn inject(&mut self, slot: usize, size: usize) -> Result<(), LinkError> {
        let off = self.range(slot, size)?;
        let (peer, ..) = self.peer()?;
        self.rail
            .inject(peer, self.out_id, off, size)
            .map_err(fabric)
    }

    pub fn post_recv(&mut self, slot: usize, size: usize, ctx: Ctx) -> Result<(), LinkError> {
        let off = self.range(slot, size)?;
        self.rail
            .post_recv(self.inbox_id, off, size, ctx.encode())
            .map_err(fabric)
    }

    pub fn post_write(
        &mut self,
        slot: usize,
        size: usize,
        data: Option<u64>,
        ctx: Ctx,
    ) -> Result<(), LinkError> {
        let off = self.range(slot, size)?;
        let (peer, _, inbox) = self.peer()?;
        match data {
            Some(d) => self.rail.post_write_data(
                peer,
                self.out_id,
                off,
                size,
                &inbox,
                off as u64,
                d,
                ctx.encode(),
            ),
            None => self.rail.post_write(
                peer,
                self.out_id,
                off,
                size,
                &inbox,
                off as u64,
                ctx.encode(),
            ),
        }
        .map_err(fabric)
    }

    pub fn post_read(&mut self, slot: usize, size: usize, ctx: Ctx) -> Result<(), LinkError> {
        let off = self.range(slot, size)?;
        let (peer, out, _) = self.peer()?;
        self.rail
            .post_read(
                peer,
                self.inbox_id,
                off,
                size,
                &out,
                off as u64,
                ctx.encode(),
            )
            .map_err(fabric)
    }

    // ----------------------------------------------------------------- control words

    /// Post a receive for one control word.
    pub fn post_ctrl_recv(&mut self) -> Result<(), LinkError> {
        let slot = self.ctrl_recv_next;
        self.ctrl_recv_next = (slot + 1) % self.ctrl_slots;
        self.rail
            .post_recv(self.ctrl_id, slot * 8, 8, Ctx::CtrlRecv(slot).encode())
            .map_err(fabric)
    }

    /// Send one control word to the current peer.
    pub fn send_ctrl(&mut self, word: u64) -> Result<(), LinkError> {
        let slot = self.ctrl_send_next;
        self.ctrl_send_next = (slot + 1) % self.ctrl_slots;
        let deadline = self.deadline();
        while self.ctrl_send_busy[slot] {
            self.progress_once(deadline, "a control message to be sent")?;
        }
        let off = (self.ctrl_slots + slot) * 8;
        self.ctrl
            .write_at(off, &word.to_le_bytes())
            .map_err(fabric)?;
        let (peer, ..) = self.peer()?;
        self.ctrl_send_busy[slot] = true;
        self.rail
            .post_send(peer, self.ctrl_id, off, 8, Ctx::CtrlSend(slot).encode())
            .map_err(fabric)
    }

    /// The next control word received.
    pub fn wait_ctrl(&mut self) -> Result<u64, LinkError> {
        let deadline = self.deadline();
        loop {
            if let Some(w) = self.ctrl_words.pop_front() {
                return Ok(w);
            }
            self.progress_once(deadline, "a control message from the peer")?;
        }
    }

    // ----------------------------------------------------------------- waiting

    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// Poll the CQ once (spinning up to a millisecond when it is empty) and sort what arrives.
    fn progress_once(&mut self, deadline: Instant, what: &str) -> Result<(), LinkError> {
        let mut buf = [FiCompletion::default(); 16];
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let n = self.rail.poll(&mut buf).map_err(fabric)?;
            if n > 0 {
                for c in &buf[..n] {
                    self.sort(c)?;
                }
                return Ok(());
            }
            spins += 1;
            if spins % 256 == 0 {
                let now = Instant::now();
                if now.duration_since(start) >= Duration::from_millis(1) {
                    (self.health)().map_err(LinkError::Failed)?;
                    if now >= deadline {
                        return Err(LinkError::Failed(format!(
                            "waited {:.1} s for {what} from rank {} without progress; the peer is stuck \
                             or the fabric dropped traffic (raise --timeout if this is expected)",
                            self.timeout.as_secs_f64(),
                            self.peer
                        )));
                    }
                    return Ok(());
                }
            }
        }
    }

    fn sort(&mut self, c: &FiCompletion) -> Result<(), LinkError> {
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
                self.ctrl.read_at(s * 8, &mut w).map_err(fabric)?;
                self.ctrl_words.push_back(u64::from_le_bytes(w));
            }
            Some(ctx) => {
                // A receive that also carried data (send_data) is still a receive.
                self.stash.push_back(Completion { ctx, len: c.len });
                if let Some(d) = c.remote_data() {
                    if !matches!(ctx, Ctx::Recv(_)) {
                        self.remote_data.push_back(d);
                    }
                }
            }
            None => {
                return Err(LinkError::Failed(format!(
                    "completion with an unknown context {:#x}",
                    c.context
                )));
            }
        }
        Ok(())
    }

    /// The next local completion (control traffic and remote CQ data are sorted aside).
    pub fn wait(&mut self) -> Result<Completion, LinkError> {
        let deadline = self.deadline();
        loop {
            if let Some(c) = self.stash.pop_front() {
                return Ok(c);
            }
            self.progress_once(deadline, "a completion")?;
        }
    }

    fn take(&mut self, ctx: Ctx) -> Option<Completion> {
        let i = self.stash.iter().position(|c| c.ctx == ctx)?;
        self.stash.remove(i)
    }

    /// Wait until every listed operation has completed.
    pub fn wait_for(&mut self, ctxs: &[Ctx]) -> Result<(), LinkError> {
        let deadline = self.deadline();
        for &ctx in ctxs {
            while self.take(ctx).is_none() {
                self.progress_once(deadline, "an operation to complete")?;
            }
        }
        Ok(())
    }

    fn wait_n(&mut self, n: usize, is: fn(Ctx) -> bool, what: &str) -> Result<(), LinkError> {
        let deadline = self.deadline();
        let mut got = 0;
        while got < n {
            if let Some(i) = self.stash.iter().position(|c| is(c.ctx)) {
                self.stash.remove(i);
                got += 1;
            } else {
                self.progress_once(deadline, what)?;
            }
        }
        Ok(())
    }

    pub fn wait_all_sends(&mut self, n: usize) -> Result<(), LinkError> {
        self.wait_n(n, |c| matches!(c, Ctx::Send(_)), "sends of the window")
    }
    pub fn wait_all_writes(&mut self, n: usize) -> Result<(), LinkError> {
        self.wait_n(n, |c| matches!(c, Ctx::Write(_)), "writes of the window")
    }
    pub fn wait_all_reads(&mut self, n: usize) -> Result<(), LinkError> {
        self.wait_n(n, |c| matches!(c, Ctx::Read(_)), "reads of the window")
    }

    /// The next remote CQ data (a peer's write landed in our inbox).
    pub fn wait_remote_data(&mut self) -> Result<u64, LinkError> {
        let deadline = self.deadline();
        loop {
            if let Some(d) = self.remote_data.pop_front() {
                return Ok(d);
            }
            self.progress_once(deadline, "a write from the peer")?;
        }
    }

    /// The next remote CQ data must be `data` (write ping-pong: the peer's answer).
    pub fn wait_data(&mut self, data: u64) -> Result<(), LinkError> {
        let got = self.wait_remote_data()?;
        if got != data {
            return Err(LinkError::Failed(format!(
                "the peer's answer carried CQ data {got:#x}, expected {data:#x}; a write was lost or reordered"
            )));
        }
        Ok(())
    }
}

/// The `out` and `inbox` buffers, of the `--mem` kind, on the GPU `--gpu` names.
fn alloc_payload(cfg: &LinkConfig) -> Result<(Payload, Payload), LinkError> {
    let kind: MemKind = cfg.mem.parse().map_err(LinkError::Usage)?;
    let gpu_err = |e: GpuError| {
        let m = format!("--mem {}: {e}", cfg.mem);
        if e.is_no_driver() {
            LinkError::Usage(format!("{m}; use --mem host on machines without a GPU"))
        } else {
            LinkError::Usage(m)
        }
    };
    let device = if kind.needs_gpu() {
        let choice: GpuChoice = cfg.gpu.parse().map_err(|e: String| LinkError::Usage(e))?;
        efabench_gpu::resolve(choice, cfg.local_rank).map_err(gpu_err)?
    } else {
        0
    };
    let one = || {
        efabench_gpu::alloc(kind, cfg.buf_bytes, device)
            .map(Arc::new)
            .map_err(gpu_err)
    };
    Ok((one()?, one()?))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
        assert_eq!(Ctx::decode(0), None);
        assert_eq!(Ctx::decode(FiCompletion::REMOTE_CQ_DATA), None);
    }
}
