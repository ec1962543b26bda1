//! GPU->CPU command rings (`efabench queue`): the host side, the consumers and the verification.
//!
//! GPU-initiated networking over EFA hands every network operation from GPU threads to a CPU
//! proxy through a ring of commands; the ring's cost bounds how many operations per second a
//! MoE dispatch can issue. Libefaxx measured a Vyukov CAS queue whose head and tail the GPU
//! updates across PCIe (0.03-1.1 M ops/s). This module measures that design next to the one
//! MSCCL++ and NCCL's GIN proxy use, in several memory placements:
//!
//! | ring | slots | consumer tails (GPU polls) | head |
//! |---|---|---|---|
//! | `pinned` | mapped pinned host memory | pinned host memory | device memory |
//! | `managed` | managed memory | managed memory | device memory |
//! | `gdr` | device memory, read by the CPU through GDRCopy | pinned host memory | device memory |
//! | `hybrid` | pinned host memory | device memory, written by the CPU through GDRCopy | device memory |
//! | `libefaxx` | managed (Vyukov cells) | managed (CAS head and tail) | managed |
//!
//! The four FIFO rings share one protocol (kernel `efa_queue_fifo` in `kernels/queue.cu`): 16-byte
//! slots `{fst, snd}` published with one store; `snd` = lap parity << 63 | producer << 32 | seq and
//! `fst` = the pattern word of (seq, producer, run salt), so a slot whose two halves come from
//! different writes is caught ("torn"). The host never clears a slot: the parity of lap L is
//! `(L & 1) ^ 1` and a consumer waits until the slot's flag has the parity of the lap it expects.
//! Consumers own chunks of slots round robin (the same slots on every lap, so a one-bit lap flag
//! cannot let a consumer take a command two laps old) and each publishes how far it got (its tail);
//! the GPU keeps a cached copy of the tails in device memory that one warp at a time refreshes,
//! so waiting warps spin on L2 instead of each polling the host across PCIe (the collapse a
//! feasibility probe saw at 132x1024). Warps claim slots with one atomicAdd on the head for all
//! their lanes' commands (warp-aggregated pushes).
//!
//! Every command is verified on the host: a bitmap over (sequence, producer) catches a command
//! received twice, the pattern catches a torn or foreign one, and at the end every command a
//! producer says it pushed must have been received (lost otherwise).
//!
//! Latency comes from GPU timestamps (`%globaltimer`, ns): in `blocking` mode, per command, from
//! the claim to the producer seeing its command acknowledged (round trip); in `nbi` mode, per
//! push call, the time the push held the producing warp (claim, credit wait, stores). Throughput
//! is commands received over the span from the first push to the last quiet, on the GPU clock.

use crate::buffer::{DeviceBuffer, PinnedBuffer};
use crate::driver::{Gpu, KernelParams, Shape, Stream, TypedKernel};
use crate::error::GpuError;
use crate::gdr::Gdr;
use crate::kernels::{kernel, Source};
use crate::mapped::{gdr_mapped, managed, pinned, HostMem};
use crate::pattern;
use cudarc::driver::sys;
use efabench_record::stats::Samples;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most consumer threads a ring supports (the kernel keeps one cached tail per consumer).
pub const MAX_CONSUMERS: usize = 8;
/// Consumer tails are this many u64 apart (64 bytes: one cache line each).
pub const TAIL_STRIDE: usize = 8;
/// Words of the device state block (must match `kernels/queue.cu`; cached tails are 0..8).
const S_CTL: usize = 9;
const S_T0: usize = 10;
const S_T1: usize = 11;
const S_HEAD: usize = 12;
const S_TICK: usize = 13;
const STATE_WORDS: usize = 32;
/// Vyukov control words (u64 index into the control allocation): 128 bytes apart.
const V_HEAD: usize = 0;
const V_TAIL: usize = 16;
const V_POSTED: usize = 32;
const V_COMPLETED: usize = 48;

/// Which ring design and memory placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingKind {
    Pinned,
    Managed,
    Gdr,
    Hybrid,
    Libefaxx,
}

impl RingKind {
    pub const ALL: [RingKind; 5] = [
        RingKind::Pinned,
        RingKind::Managed,
        RingKind::Gdr,
        RingKind::Hybrid,
        RingKind::Libefaxx,
    ];
    pub fn name(self) -> &'static str {
        match self {
            RingKind::Pinned => "pinned",
            RingKind::Managed => "managed",
            RingKind::Gdr => "gdr",
            RingKind::Hybrid => "hybrid",
            RingKind::Libefaxx => "libefaxx",
        }
    }
    /// Whether this ring needs GDRCopy.
    pub fn needs_gdr(self) -> bool {
        matches!(self, RingKind::Gdr | RingKind::Hybrid)
    }
    /// Whether the host touches managed memory while the kernel runs.
    pub fn needs_concurrent_managed(self) -> bool {
        matches!(self, RingKind::Managed | RingKind::Libefaxx)
    }
}

impl fmt::Display for RingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RingKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        RingKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!(
                    "unknown ring {s:?}: use one of {}",
                    RingKind::ALL.map(|k| k.name()).join(", ")
                )
            })
    }
}

/// `nbi` (push many, one quiet at the end) or `blocking` (quiet after each push).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Nbi,
    Blocking,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Nbi, Mode::Blocking];
    pub fn name(self) -> &'static str {
        match self {
            Mode::Nbi => "nbi",
            Mode::Blocking => "blocking",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("unknown mode {s:?}: use nbi or blocking"))
    }
}

/// How producers wait for credits and acknowledgements.
///
/// `Cached` is the default: on an H100 it was faster even for one producer thread (blocking 1x1
/// round trip p50 3.46 us cached against 3.78 us direct, 5.09 us direct with a 200 ns back-off),
/// and it bounds the PCIe reads of thousands of waiting warps to one at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TailPoll {
    /// Read the consumers' tails where they live (a PCIe read per poll for host memory).
    Direct,
    /// Read the device-memory copy, refreshed by one warp at a time.
    Cached,
}

impl FromStr for TailPoll {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "direct" => Ok(TailPoll::Direct),
            "cached" => Ok(TailPoll::Cached),
            _ => Err(format!("unknown tail poll {s:?}: use direct or cached")),
        }
    }
}

/// Blocks of a producer shape: a number, or the device's SM count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Blocks {
    Sm,
    Count(u32),
}

/// Producers: blocks x threads (`1x32`, `SMx1024`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProducerShape {
    pub blocks: Blocks,
    pub threads: u32,
}

impl ProducerShape {
    /// The default sweep of producer shapes (blocks x threads): one thread, one warp, one block,
    /// eight blocks, one block per SM, one 1024-thread block per SM.
    pub const DEFAULT_LIST: &'static str = "1x1,1x32,1x256,8x256,SMx256,SMx1024";

    /// The launch shape on a GPU with `sm_count` multiprocessors.
    pub fn resolve(self, sm_count: u32) -> Shape {
        Shape {
            grid: match self.blocks {
                Blocks::Sm => sm_count.max(1),
                Blocks::Count(n) => n,
            },
            block: self.threads,
        }
    }

    /// Parses a comma-separated list.
    pub fn parse_list(s: &str) -> Result<Vec<ProducerShape>, String> {
        let v: Result<Vec<_>, _> = s
            .split(',')
            .filter(|t| !t.trim().is_empty())
            .map(str::parse)
            .collect();
        let v = v?;
        if v.is_empty() {
            return Err(format!(
                "--producers is empty: give blocks x threads, e.g. {}",
                Self::DEFAULT_LIST
            ));
        }
        Ok(v)
    }
}

impl fmt::Display for ProducerShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.blocks {
            Blocks::Sm => write!(f, "SMx{}", self.threads),
            Blocks::Count(n) => write!(f, "{n}x{}", self.threads),
        }
    }
}

impl FromStr for ProducerShape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let bad = || {
            format!(
                "invalid producer shape {t:?}: use BLOCKSxTHREADS with BLOCKS 1..65535 or SM and \
                 THREADS 1..1024, e.g. 1x32 or SMx1024"
            )
        };
        let (b, th) = t.split_once(['x', 'X']).ok_or_else(bad)?;
        let blocks = if b.eq_ignore_ascii_case("sm") {
            Blocks::Sm
        } else {
            match b.parse::<u32>() {
                Ok(n) if (1..=65535).contains(&n) => Blocks::Count(n),
                _ => return Err(bad()),
            }
        };
        let threads = match th.parse::<u32>() {
            Ok(n) if (1..=1024).contains(&n) => n,
            _ => return Err(bad()),
        };
        Ok(ProducerShape { blocks, threads })
    }
}

// ---------------------------------------------------------------------------------------------
// Slot layout and ring geometry (host side of the protocol; kernels/queue.cu is the device side)
// ---------------------------------------------------------------------------------------------

/// The lap-parity flag a slot at ring position `pos` carries: `(lap & 1) ^ 1`, so a zeroed ring
/// never looks written.
#[inline(always)]
pub const fn lap_flag(pos: u64, nslots_log2: u32) -> u64 {
    ((pos >> nslots_log2) & 1) ^ 1
}

/// The first word of a command: the pattern of (seq, producer, salt).
#[inline(always)]
pub fn command_fst(seq: u64, producer: u64, salt: u64) -> u64 {
    pattern::seed(seq, producer as u32, salt as u32, 0)
}

/// The second word: parity << 63 | producer << 32 | seq.
#[inline(always)]
pub const fn command_snd(seq: u64, producer: u64, pos: u64, nslots_log2: u32) -> u64 {
    (lap_flag(pos, nslots_log2) << 63) | ((producer & 0x7fff_ffff) << 32) | (seq & 0xffff_ffff)
}

/// (flag, producer, seq) of a second word.
#[inline(always)]
pub const fn decode_snd(snd: u64) -> (u64, u64, u64) {
    (snd >> 63, (snd >> 32) & 0x7fff_ffff, snd & 0xffff_ffff)
}

/// The shape of a FIFO ring: 2^nslots_log2 slots in chunks of 2^chunk_log2 slots, the chunks
/// dealt to the consumers round robin.
///
/// Ownership follows the *slot*, not the position: chunk k of every lap belongs to consumer
/// k mod consumers. So the consumer that takes position p is the one that took p − slots before
/// it, and when it arrives at p the slot holds either the command of p − slots (already taken,
/// opposite lap parity) or the command of p. A one-bit lap flag is then enough for any consumer
/// count. Had ownership followed the position (chunk p >> chunk_log2 mod consumers), a consumer
/// count that does not divide the chunks of a lap would hand position p to a consumer that never
/// saw p − slots: arriving early, it could find the command of p − 2·slots still in the slot, with
/// the parity of p, and take it a second time while p's own command was later lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub nslots_log2: u32,
    pub chunk_log2: u32,
    pub consumers: u32,
}

impl Geometry {
    pub fn new(nslots_log2: u32, chunk_log2: u32, consumers: u32) -> Result<Geometry, String> {
        if !(1..=MAX_CONSUMERS as u32).contains(&consumers) {
            return Err(format!(
                "--consumers {consumers} is out of range: use 1 to {MAX_CONSUMERS}"
            ));
        }
        if chunk_log2 > nslots_log2 || !(4..=26).contains(&nslots_log2) {
            return Err(format!(
                "ring of 2^{nslots_log2} slots with chunks of 2^{chunk_log2}: use 2^4..2^26 slots \
                 and chunks no larger than the ring"
            ));
        }
        let chunks = 1u64 << (nslots_log2 - chunk_log2);
        if chunks < consumers as u64 {
            return Err(format!(
                "a ring of 2^{nslots_log2} slots in chunks of 2^{chunk_log2} has {chunks} chunks, \
                 fewer than the {consumers} consumers: use a larger ring or fewer consumers"
            ));
        }
        Ok(Geometry {
            nslots_log2,
            chunk_log2,
            consumers,
        })
    }

    /// The geometry a run uses: chunks of up to 256 slots, small enough that every consumer owns
    /// at least one chunk, and (for a consumer count that is not a power of two) at least four
    /// chunks per consumer, so the uneven share of the last round stays under a quarter of the
    /// ring.
    pub fn for_run(nslots_log2: u32, consumers: u32) -> Result<Geometry, String> {
        let spread = if consumers.is_power_of_two() {
            consumers.trailing_zeros()
        } else {
            consumers.next_power_of_two().trailing_zeros() + 2
        };
        let chunk_log2 = 8.min(nslots_log2.saturating_sub(spread));
        Geometry::new(nslots_log2, chunk_log2, consumers)
    }

    pub fn nslots(&self) -> u64 {
        1 << self.nslots_log2
    }
    /// Chunks in one lap of the ring.
    fn chunks(&self) -> u64 {
        1 << (self.nslots_log2 - self.chunk_log2)
    }
    /// The consumer that owns position `pos` (the same for every lap of its slot).
    #[inline(always)]
    pub fn owner(&self, pos: u64) -> u32 {
        (((pos & (self.nslots() - 1)) >> self.chunk_log2) % self.consumers as u64) as u32
    }
    /// The first position consumer `c` owns.
    pub fn first_owned(&self, c: u32) -> u64 {
        (c as u64) << self.chunk_log2
    }
    /// The position consumer `c` owns after `pos` (which it owns).
    #[inline(always)]
    pub fn next_owned(&self, pos: u64) -> u64 {
        let next = pos + 1;
        if next & ((1 << self.chunk_log2) - 1) != 0 {
            return next;
        }
        // `pos` ended a chunk: the consumer's next chunk is `consumers` chunks on in this lap,
        // or its first chunk of the next lap.
        let lap = pos >> self.nslots_log2;
        let chunk = (pos & (self.nslots() - 1)) >> self.chunk_log2;
        let following = chunk + self.consumers as u64;
        let (lap, chunk) = if following < self.chunks() {
            (lap, following)
        } else {
            (lap + 1, chunk % self.consumers as u64)
        };
        (lap << self.nslots_log2) | (chunk << self.chunk_log2)
    }
}

/// A FIFO ring as the host sees it: the slot words and the consumer tails, through the CPU's
/// mapping of wherever they live.
#[derive(Clone, Copy)]
pub struct FifoView<'a> {
    /// 2 words per slot.
    pub slots: &'a [AtomicU64],
    /// `TAIL_STRIDE` words per consumer.
    pub tails: &'a [AtomicU64],
    pub geometry: Geometry,
    /// The tails are write-combined device memory (GDRCopy): flush stores with a fence.
    pub tails_write_combined: bool,
}

impl FifoView<'_> {
    /// Writes the command at `pos` as the GPU does (used by host producers in tests): fst first,
    /// then snd with the flag, release.
    pub fn host_push(&self, pos: u64, seq: u64, producer: u64, salt: u64) {
        let i = (pos & (self.geometry.nslots() - 1)) as usize;
        self.slots[2 * i].store(command_fst(seq, producer, salt), Ordering::Relaxed);
        self.slots[2 * i + 1].store(
            command_snd(seq, producer, pos, self.geometry.nslots_log2),
            Ordering::Release,
        );
    }
    /// Consumer `c`'s tail.
    pub fn tail(&self, c: u32) -> u64 {
        self.tails[c as usize * TAIL_STRIDE].load(Ordering::Acquire)
    }
    fn publish(&self, c: u32, pos: u64) {
        self.tails[c as usize * TAIL_STRIDE].store(pos, Ordering::Release);
        if self.tails_write_combined {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }
}

/// What each received command was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Ok,
    /// Received before (same producer and sequence).
    Duplicate,
    /// The pattern word does not belong to the command word: torn, stale or foreign.
    Torn,
    /// Producer or sequence outside the run.
    OutOfRange,
}

/// Per-run verification: one bit per (sequence, producer), shared by the consumers.
pub struct Verifier {
    producers: u64,
    per_producer: u64,
    salt: u64,
    bits: Vec<AtomicU64>,
    shared: bool,
}

/// Error counts of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errors {
    pub lost: u64,
    pub duplicated: u64,
    pub torn: u64,
    pub out_of_range: u64,
    /// Received although its producer says it never pushed it.
    pub phantom: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.lost + self.duplicated + self.torn + self.out_of_range + self.phantom
    }
}

impl Verifier {
    /// `shared`: more than one consumer checks concurrently (atomic bit updates).
    pub fn new(producers: u64, per_producer: u64, salt: u64, shared: bool) -> Verifier {
        let n = (producers * per_producer).div_ceil(64) as usize;
        Verifier {
            producers,
            per_producer,
            salt,
            bits: (0..n).map(|_| AtomicU64::new(0)).collect(),
            shared,
        }
    }

    /// Checks one received command and marks it received.
    #[inline]
    pub fn check(&self, fst: u64, snd: u64) -> Check {
        let (_, producer, seq) = decode_snd(snd);
        if producer >= self.producers || seq >= self.per_producer {
            return Check::OutOfRange;
        }
        let torn = fst != command_fst(seq, producer, self.salt);
        let idx = seq * self.producers + producer;
        let (w, bit) = ((idx / 64) as usize, 1u64 << (idx % 64));
        let before = if self.shared {
            self.bits[w].fetch_or(bit, Ordering::Relaxed)
        } else {
            let v = self.bits[w].load(Ordering::Relaxed);
            self.bits[w].store(v | bit, Ordering::Relaxed);
            v
        };
        if before & bit != 0 {
            Check::Duplicate
        } else if torn {
            Check::Torn
        } else {
            Check::Ok
        }
    }

    /// Commands received at least once.
    pub fn received(&self) -> u64 {
        self.bits
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as u64)
            .sum()
    }

    /// Lost and phantom counts against what each producer says it pushed.
    pub fn finish(&self, pushed: &[u32], errors: &mut Errors) {
        let full = pushed.iter().all(|&p| p as u64 == self.per_producer);
        if full && pushed.len() as u64 == self.producers {
            errors.lost += self.producers * self.per_producer - self.received();
            return;
        }
        for seq in 0..self.per_producer {
            for p in 0..self.producers {
                let idx = seq * self.producers + p;
                let set = self.bits[(idx / 64) as usize].load(Ordering::Relaxed) >> (idx % 64) & 1;
                let was_pushed = seq < pushed.get(p as usize).copied().unwrap_or(0) as u64;
                match (was_pushed, set == 1) {
                    (true, false) => errors.lost += 1,
                    (false, true) => errors.phantom += 1,
                    _ => {}
                }
            }
        }
    }
}

/// Tells consumers when to stop: after the kernel is done they consume up to the final head.
#[derive(Default)]
pub struct EndSignal {
    done: AtomicBool,
    final_head: AtomicU64,
    abandon: AtomicBool,
    yield_when_idle: bool,
}

impl EndSignal {
    /// Consumers that give their CPU away while their next slot is empty, for runs with more
    /// threads than CPUs (host-only models of the ring). A measurement keeps the default: each
    /// consumer spins on a CPU of its own.
    pub fn yielding() -> EndSignal {
        EndSignal {
            yield_when_idle: true,
            ..EndSignal::default()
        }
    }
    fn idle(&self) {
        if self.yield_when_idle {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    /// The producers are finished and claimed positions `0..final_head`.
    pub fn finish(&self, final_head: u64) {
        self.final_head.store(final_head, Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }
    /// Stop now, whatever is left (a hung run).
    pub fn abandon(&self) {
        self.abandon.store(true, Ordering::Release);
    }
    fn stop_at(&self, pos: u64) -> bool {
        self.abandon.load(Ordering::Relaxed)
            || (self.done.load(Ordering::Acquire) && pos >= self.final_head.load(Ordering::Relaxed))
    }
}

/// What one consumer saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerReport {
    pub consumed: u64,
    pub duplicated: u64,
    pub torn: u64,
    pub out_of_range: u64,
}

impl ConsumerReport {
    fn count(&mut self, c: Check) {
        self.consumed += 1;
        match c {
            Check::Ok => {}
            Check::Duplicate => self.duplicated += 1,
            Check::Torn => self.torn += 1,
            Check::OutOfRange => self.out_of_range += 1,
        }
    }
}

/// How often (commands) a busy consumer publishes its tail; an idle one publishes at once.
const PUBLISH_EVERY: u64 = 64;

/// Consumer `c` of a FIFO ring: takes its positions in order, verifies each command and
/// publishes its tail, until `end` says the producers are done and it has passed the final head.
pub fn consume_fifo(view: &FifoView<'_>, c: u32, v: &Verifier, end: &EndSignal) -> ConsumerReport {
    let g = view.geometry;
    let mask = g.nslots() - 1;
    let mut pos = g.first_owned(c);
    // Publish the starting position at once: a producer's quiet waits for every consumer's tail
    // to pass its last position, including consumers that own none of its positions.
    view.publish(c, pos);
    let mut published = pos;
    let mut r = ConsumerReport::default();
    loop {
        let i = (pos & mask) as usize;
        let snd = view.slots[2 * i + 1].load(Ordering::Acquire);
        if snd >> 63 != lap_flag(pos, g.nslots_log2) {
            if published != pos {
                view.publish(c, pos);
                published = pos;
            }
            if end.stop_at(pos) {
                break;
            }
            end.idle();
            continue;
        }
        let fst = view.slots[2 * i].load(Ordering::Relaxed);
        r.count(v.check(fst, snd));
        pos = g.next_owned(pos);
        if pos - published >= PUBLISH_EVERY * g.consumers as u64 {
            view.publish(c, pos);
            published = pos;
        }
    }
    view.publish(c, pos);
    r
}

/// Libefaxx's ring as the host sees it: Vyukov cells `{sequence, fst, snd}` and its control words.
#[derive(Clone, Copy)]
pub struct VyukovView<'a> {
    pub cells: &'a [AtomicU64],
    pub ctrl: &'a [AtomicU64],
    pub mask: u64,
}

impl VyukovView<'_> {
    /// Vyukov's pop (CAS on the tail), then `completed += 1` as Libefaxx's proxy does.
    pub fn pop(&self) -> Option<(u64, u64)> {
        let tail = &self.ctrl[V_TAIL];
        let mut pos = tail.load(Ordering::Relaxed);
        loop {
            let cell = 3 * (pos & self.mask) as usize;
            let seq = self.cells[cell].load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos + 1) as i64;
            if diff == 0 {
                match tail.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        let fst = self.cells[cell + 1].load(Ordering::Relaxed);
                        let snd = self.cells[cell + 2].load(Ordering::Relaxed);
                        self.cells[cell].store(pos + self.mask + 1, Ordering::Release);
                        self.ctrl[V_COMPLETED].fetch_add(1, Ordering::Release);
                        return Some((fst, snd));
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = tail.load(Ordering::Relaxed);
            }
        }
    }
    /// Vyukov's push from the host (tests stand in for the GPU with it).
    pub fn push(&self, fst: u64, snd: u64) -> bool {
        let head = &self.ctrl[V_HEAD];
        let mut pos = head.load(Ordering::Relaxed);
        loop {
            let cell = 3 * (pos & self.mask) as usize;
            let seq = self.cells[cell].load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos) as i64;
            if diff == 0 {
                match head.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        self.cells[cell + 1].store(fst, Ordering::Relaxed);
                        self.cells[cell + 2].store(snd, Ordering::Relaxed);
                        self.cells[cell].store(pos + 1, Ordering::Release);
                        self.ctrl[V_POSTED].fetch_add(1, Ordering::Release);
                        return true;
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return false;
            } else {
                pos = head.load(Ordering::Relaxed);
            }
        }
    }
    /// Initial cell sequences (cell i holds i), as Vyukov's constructor sets them.
    pub fn init(&self) {
        for i in 0..=self.mask {
            self.cells[3 * i as usize].store(i, Ordering::Relaxed);
        }
    }
}

/// A consumer of Libefaxx's ring: pops until the producers are done and the ring is empty.
pub fn consume_vyukov(view: &VyukovView<'_>, v: &Verifier, end: &EndSignal) -> ConsumerReport {
    let mut r = ConsumerReport::default();
    loop {
        match view.pop() {
            Some((fst, snd)) => r.count(v.check(fst, snd)),
            None => {
                if end.abandon.load(Ordering::Relaxed) {
                    break;
                }
                if end.done.load(Ordering::Acquire) {
                    // Done: every push completed before the kernel ended; drain once more.
                    match view.pop() {
                        Some((fst, snd)) => r.count(v.check(fst, snd)),
                        None => break,
                    }
                    continue;
                }
                std::hint::spin_loop();
            }
        }
    }
    r
}

// ---------------------------------------------------------------------------------------------
// Measurement on a GPU
// ---------------------------------------------------------------------------------------------

/// One point of the sweep.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    pub ring: RingKind,
    pub producers: ProducerShape,
    pub consumers: u32,
    pub mode: Mode,
    /// Commands in the whole point (split over the producers, at least one each).
    pub commands: u64,
    /// nbi: commands per lane per claim; 0 picks enough for 512 commands per warp claim.
    pub batch: u32,
    /// A system-scope fence before each publish (orders the producer's earlier data writes, as a
    /// real proxy command needs).
    pub release: bool,
    /// FIFO ring of 2^ring_log2 slots.
    pub ring_log2: u32,
    /// Libefaxx's capacity (its default is 8192).
    pub vyukov_capacity: u64,
    /// Stop claiming after this long (slow rings report what they did in the time).
    pub budget: Duration,
    /// After the budget, how long a wait may last before producers give up their waits, and as
    /// long again before the run is declared hung.
    pub hang: Duration,
    /// Changes the pattern per point.
    pub salt: u64,
    /// How producers wait for the consumers' tails.
    pub tail_poll: TailPoll,
    /// Direct polling: nanoseconds a producer sleeps between two reads of a tail (0: none).
    pub poll_sleep_ns: u32,
    /// CPUs the consumers are pinned to, in order (empty: not pinned).
    pub cpus: Vec<usize>,
}

impl QueueConfig {
    pub fn new(ring: RingKind, producers: ProducerShape, consumers: u32, mode: Mode) -> Self {
        QueueConfig {
            ring,
            producers,
            consumers,
            mode,
            commands: 1 << 22,
            batch: 0,
            release: true,
            ring_log2: 16,
            vyukov_capacity: 8192,
            budget: Duration::from_millis(1500),
            hang: Duration::from_secs(10),
            salt: 1,
            tail_poll: TailPoll::Cached,
            poll_sleep_ns: 0,
            cpus: Vec::new(),
        }
    }
}

/// Latency distribution in ns: the shared nearest-rank definition of
/// [`efabench_record::stats`], kept in the GPU clock's unit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencyNs {
    pub samples: u64,
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl LatencyNs {
    pub fn from_samples(v: Vec<u32>) -> LatencyNs {
        let n = v.len() as u64;
        let d = Samples::from_vec(v.into_iter().map(u64::from).collect()).summary_ns();
        LatencyNs {
            samples: n,
            min: d.min,
            mean: d.mean,
            p50: d.p50,
            p99: d.p99,
            max: d.max,
        }
    }
}

/// What one point measured.
#[derive(Clone, Debug)]
pub struct QueueMeasurement {
    pub producers: u64,
    pub per_producer: u64,
    /// Commands the producers pushed.
    pub pushed: u64,
    /// Distinct commands the consumers received.
    pub received: u64,
    /// First push to last quiet, GPU clock.
    pub elapsed_ns: u64,
    pub msg_rate_mops: f64,
    pub latency: LatencyNs,
    /// `round_trip` (blocking) or `push` (nbi).
    pub lat_kind: &'static str,
    pub errors: Errors,
    /// The time budget ran out before every command was pushed.
    pub truncated: bool,
    /// The smallest step of %globaltimer seen (ns), FIFO rings only.
    pub timer_step_ns: Option<u64>,
    pub per_consumer: Vec<u64>,
    /// nbi: commands per lane per claim (1 in blocking mode and for Libefaxx).
    pub batch: u32,
    /// `direct` (producers read the consumers' tails) or `cached` (the device copy).
    pub tail_poll: &'static str,
}

/// Why a ring cannot run on this machine (printed as one line, and the point is skipped).
pub fn unavailable(gpu: &Arc<Gpu>, ring: RingKind) -> Option<String> {
    missing(gpu, ring).map(|why| format!("ring {ring} skipped: {why}"))
}

/// What this machine lacks for a ring placement, if anything: GDRCopy for `gdr` and `hybrid`,
/// concurrent managed access for `managed` and `libefaxx`.
pub fn missing(gpu: &Arc<Gpu>, ring: RingKind) -> Option<String> {
    if ring.needs_gdr() {
        if let Err(e) = Gdr::open() {
            return Some(e.to_string());
        }
    }
    if ring.needs_concurrent_managed() {
        let a =
            gpu.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
        if a.ok() != Some(1) {
            return Some(format!(
                "GPU {} does not support concurrent managed access, so the CPU cannot read \
                 managed memory while a kernel runs",
                gpu.ordinal
            ));
        }
    }
    None
}

/// The CPUs of the GPU's NUMA node (sysfs), or all CPUs when the node is unknown.
pub fn numa_cpus(gpu: &Gpu) -> Vec<usize> {
    let node = crate::nvml::sysfs_numa_node(&gpu.pci_bus_id);
    let list = node
        .and_then(|n| {
            std::fs::read_to_string(format!("/sys/devices/system/node/node{n}/cpulist")).ok()
        })
        .or_else(|| std::fs::read_to_string("/sys/devices/system/cpu/online").ok())
        .unwrap_or_default();
    parse_cpulist(&list)
}

/// `0-3,8,10-11` to a list of CPUs.
pub fn parse_cpulist(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                    v.extend(a..=b.min(a + 4096));
                }
            }
            None => {
                if let Ok(a) = part.trim().parse() {
                    v.push(a);
                }
            }
        }
    }
    v
}

fn pin_to(cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; sched_setaffinity(0, ...)
        // changes only the calling thread. A failure leaves the thread unpinned.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct FifoParams {
    slots: u64,
    tails: u64,
    state: u64,
    pushed: u64,
    lat: u64,
    nslots_log2: u64,
    chunk_log2: u64,
    consumers: u64,
    per_producer: u64,
    batch: u64,
    blocking: u64,
    release: u64,
    salt: u64,
    direct: u64,
}
// SAFETY: repr(C), fourteen u64 fields in the order of `struct FifoParams` in kernels/queue.cu.
unsafe impl KernelParams for FifoParams {}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct VyukovParams {
    cells: u64,
    ctrl: u64,
    state: u64,
    pushed: u64,
    lat: u64,
    mask: u64,
    per_producer: u64,
    blocking: u64,
    salt: u64,
}
// SAFETY: repr(C), nine u64 fields in the order of `struct VyukovParams` in kernels/queue.cu.
unsafe impl KernelParams for VyukovParams {}

/// Runs one point: allocates the ring, starts the consumers (pinned to `cfg.cpus`), launches the
/// producers, and verifies every command.
pub fn measure(gpu: &Arc<Gpu>, cfg: &QueueConfig) -> Result<QueueMeasurement, GpuError> {
    if cfg.consumers == 0 || cfg.consumers as usize > MAX_CONSUMERS {
        return Err(GpuError::Invalid(format!(
            "--consumers {} is out of range: use 1 to {MAX_CONSUMERS}",
            cfg.consumers
        )));
    }
    if let Some(why) = unavailable(gpu, cfg.ring) {
        return Err(GpuError::Invalid(why));
    }
    let shape = cfg.producers.resolve(gpu.sm_count);
    let producers = shape.grid as u64 * shape.block as u64;
    let per_producer = cfg.commands.div_ceil(producers).clamp(1, u32::MAX as u64);
    let total = producers * per_producer;
    gpu.bind()?;
    let stream = Stream::new(gpu)?;
    let side = Stream::new(gpu)?;
    // Device state, pushed counts, latencies.
    let state = DeviceBuffer::new(gpu, STATE_WORDS * 8)?;
    let pushed_buf = DeviceBuffer::new(gpu, producers as usize * 4)?;
    let lat_buf = DeviceBuffer::new(gpu, total as usize * 4)?;
    // Host staging for state writes (initial values, then the control word).
    let staging = PinnedBuffer::new(gpu, STATE_WORDS * 8 * 3)?;
    let stage = HostMem::Pinned(staging);
    {
        let w = stage.words();
        w[S_T0].store(u64::MAX, Ordering::Relaxed);
        w[STATE_WORDS].store(1, Ordering::Relaxed); // "stop" value
        w[STATE_WORDS + 1].store(2, Ordering::Relaxed); // "kill" value
    }
    // SAFETY: both ranges are live allocations of STATE_WORDS * 8 bytes; the stream is
    // synchronised before either is used again.
    unsafe { stream.copy_async(state.ptr(), stage.device(), STATE_WORDS * 8)? };
    stream.synchronize()?;
    let verifier = Verifier::new(producers, per_producer, cfg.salt, cfg.consumers > 1);
    let end = EndSignal::default();
    let set_ctl = |value_word: usize| -> Result<(), GpuError> {
        // SAFETY: copies one u64 from the live staging buffer into the live state block on a
        // separate stream (the copy engine), concurrently with the kernel by design.
        unsafe {
            side.copy_async(
                state.ptr() + (S_CTL * 8) as u64,
                stage.device() + (value_word * 8) as u64,
                8,
            )
        }
    };
    let blocking = cfg.mode == Mode::Blocking;
    // (nbi commands per lane per claim, how producers poll the tails); Libefaxx: one, direct.
    let mut claim: (u32, &'static str) = (1, "direct");

    let (reports, timer_step) = if cfg.ring == RingKind::Libefaxx {
        let cap = cfg.vyukov_capacity.next_power_of_two().max(2);
        let cells = managed(gpu, cap as usize * 24)?;
        let ctrl = managed(gpu, 64 * 8)?;
        cells.zero();
        ctrl.zero();
        let view = VyukovView {
            cells: cells.words(),
            ctrl: ctrl.words(),
            mask: cap - 1,
        };
        view.init();
        let k = kernel(gpu, Source::Queue, "efa_queue_vyukov")?;
        // SAFETY: efa_queue_vyukov takes one `VyukovParams` by value.
        let k = unsafe { TypedKernel::<VyukovParams>::bind(k) };
        let params = VyukovParams {
            cells: cells.device(),
            ctrl: ctrl.device(),
            state: state.ptr(),
            pushed: pushed_buf.ptr(),
            lat: lat_buf.ptr(),
            mask: cap - 1,
            per_producer,
            blocking: blocking as u64,
            salt: cfg.salt,
        };
        let reports = std::thread::scope(|s| -> Result<Vec<ConsumerReport>, GpuError> {
            let handles: Vec<_> = (0..cfg.consumers)
                .map(|c| {
                    let (view, verifier, end) = (&view, &verifier, &end);
                    let cpu = cfg.cpus.get(c as usize).copied();
                    s.spawn(move || {
                        pin_to(cpu);
                        consume_vyukov(view, verifier, end)
                    })
                })
                .collect();
            // SAFETY: every address in params belongs to an allocation that outlives the wait
            // below (the kernel is finished or abandoned before they are dropped).
            let launched = unsafe { k.launch(&stream, shape, &params) };
            let waited =
                launched.and_then(|_| wait_kernel(&stream, cfg.budget, cfg.hang, &set_ctl));
            end.finish(u64::MAX);
            if waited.is_err() {
                end.abandon();
            }
            let reports = handles
                .into_iter()
                .map(|h| h.join().expect("consumer thread panicked"))
                .collect();
            waited.map(|_| reports)
        })?;
        (reports, None)
    } else {
        let g = Geometry::for_run(cfg.ring_log2, cfg.consumers).map_err(GpuError::Invalid)?;
        let slot_bytes = (g.nslots() * 16) as usize;
        let tail_bytes = 4096;
        let (slots, tails) = match cfg.ring {
            RingKind::Pinned => (pinned(gpu, slot_bytes)?, pinned(gpu, tail_bytes)?),
            RingKind::Managed => (managed(gpu, slot_bytes)?, managed(gpu, tail_bytes)?),
            RingKind::Gdr => (gdr_mapped(gpu, slot_bytes)?, pinned(gpu, tail_bytes)?),
            RingKind::Hybrid => (pinned(gpu, slot_bytes)?, gdr_mapped(gpu, tail_bytes)?),
            RingKind::Libefaxx => unreachable!("handled above"),
        };
        slots.zero();
        tails.zero();
        for c in 0..g.consumers {
            tails.words()[c as usize * TAIL_STRIDE].store(g.first_owned(c), Ordering::Relaxed);
        }
        let view = FifoView {
            slots: slots.words(),
            tails: tails.words(),
            geometry: g,
            tails_write_combined: tails.write_combined(),
        };
        let lanes = shape.block.min(32);
        let batch = if cfg.batch == 0 {
            (512 / lanes).max(16)
        } else {
            cfg.batch
        };
        let direct = cfg.tail_poll == TailPoll::Direct;
        claim = (batch, if direct { "direct" } else { "cached" });
        let k = kernel(gpu, Source::Queue, "efa_queue_fifo")?;
        // SAFETY: efa_queue_fifo takes one `FifoParams` by value.
        let k = unsafe { TypedKernel::<FifoParams>::bind(k) };
        let params = FifoParams {
            slots: slots.device(),
            tails: tails.device(),
            state: state.ptr(),
            pushed: pushed_buf.ptr(),
            lat: lat_buf.ptr(),
            nslots_log2: g.nslots_log2 as u64,
            chunk_log2: g.chunk_log2 as u64,
            consumers: g.consumers as u64,
            per_producer,
            batch: batch as u64,
            blocking: blocking as u64,
            release: cfg.release as u64,
            salt: cfg.salt,
            direct: if direct {
                cfg.poll_sleep_ns.max(1) as u64
            } else {
                0
            },
        };
        let reports = std::thread::scope(|s| -> Result<Vec<ConsumerReport>, GpuError> {
            let handles: Vec<_> = (0..cfg.consumers)
                .map(|c| {
                    let (view, verifier, end) = (&view, &verifier, &end);
                    let cpu = cfg.cpus.get(c as usize).copied();
                    s.spawn(move || {
                        pin_to(cpu);
                        consume_fifo(view, c, verifier, end)
                    })
                })
                .collect();
            // SAFETY: every address in params belongs to an allocation that outlives the wait
            // below (the kernel is finished or abandoned before they are dropped).
            let launched = unsafe { k.launch(&stream, shape, &params) };
            let waited =
                launched.and_then(|_| wait_kernel(&stream, cfg.budget, cfg.hang, &set_ctl));
            match &waited {
                Ok(()) => {
                    let st = read_u64s(&state)?;
                    end.finish(st[S_HEAD]);
                    // A consumer stuck at a claimed but unwritten slot would wait forever.
                    let deadline = Instant::now() + cfg.hang;
                    while handles.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    end.abandon();
                }
                Err(_) => end.abandon(),
            }
            let reports = handles
                .into_iter()
                .map(|h| h.join().expect("consumer thread panicked"))
                .collect();
            waited.map(|_| reports)
        })?;
        let st = read_u64s(&state)?;
        (reports, Some(st[S_TICK]))
    };

    let st = read_u64s(&state)?;
    let pushed: Vec<u32> = pushed_buf
        .to_host()?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    let mut errors = Errors::default();
    for r in &reports {
        errors.duplicated += r.duplicated;
        errors.torn += r.torn;
        errors.out_of_range += r.out_of_range;
    }
    verifier.finish(&pushed, &mut errors);
    let pushed_total: u64 = pushed.iter().map(|&p| p as u64).sum();
    let received = verifier.received();
    let elapsed_ns = st[S_T1].saturating_sub(st[S_T0]).max(1);
    let lat: Vec<u32> = lat_buf
        .to_host()?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .filter(|&x| x != 0)
        .map(|x| x - 1)
        .collect();
    Ok(QueueMeasurement {
        producers,
        per_producer,
        pushed: pushed_total,
        received,
        elapsed_ns,
        msg_rate_mops: received as f64 / elapsed_ns as f64 * 1e3,
        latency: LatencyNs::from_samples(lat),
        lat_kind: if blocking { "round_trip" } else { "push" },
        errors,
        truncated: pushed_total < total,
        timer_step_ns: timer_step,
        per_consumer: reports.iter().map(|r| r.consumed).collect(),
        batch: if blocking { 1 } else { claim.0 },
        tail_poll: claim.1,
    })
}

fn read_u64s(b: &DeviceBuffer) -> Result<Vec<u64>, GpuError> {
    Ok(b.to_host()?
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// Waits for the producers: after `budget` they are told to stop claiming; `hang` later to give up
/// every wait; `hang` after that the run is declared hung.
fn wait_kernel(
    stream: &Stream,
    budget: Duration,
    hang: Duration,
    set_ctl: &dyn Fn(usize) -> Result<(), GpuError>,
) -> Result<(), GpuError> {
    let start = Instant::now();
    let mut level = 0;
    loop {
        if stream.is_idle()? {
            return Ok(());
        }
        let t = start.elapsed();
        if level == 0 && t > budget {
            set_ctl(STATE_WORDS)?;
            level = 1;
        } else if level == 1 && t > budget + hang {
            set_ctl(STATE_WORDS + 1)?;
            level = 2;
        } else if level == 2 && t > budget + 2 * hang {
            return Err(GpuError::Invalid(format!(
                "the queue kernel did not finish {} s after it was told to stop: the consumers \
                 stopped acknowledging (a hung ring)",
                (t - budget).as_secs()
            )));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_names_parse() {
        let v = ProducerShape::parse_list(ProducerShape::DEFAULT_LIST).unwrap();
        assert_eq!(v.len(), 6);
        assert_eq!(
            v[5].resolve(132),
            Shape {
                grid: 132,
                block: 1024
            }
        );
        assert_eq!(v[0].to_string(), "1x1");
        assert_eq!(v[4].to_string(), "SMx256");
        for bad in ["0x32", "1x0", "1x2048", "x32", "smx", "32"] {
            assert!(bad.parse::<ProducerShape>().is_err(), "{bad}");
        }
        assert!(ProducerShape::parse_list(",").is_err());
        for k in RingKind::ALL {
            assert_eq!(k.name().parse::<RingKind>(), Ok(k));
        }
        let e = "fifo".parse::<RingKind>().unwrap_err();
        assert!(e.contains("hybrid") && e.contains("libefaxx"), "{e}");
        assert_eq!("NBI".parse::<Mode>(), Ok(Mode::Nbi));
        assert!("quiet".parse::<Mode>().is_err());
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
    }

    #[test]
    fn slot_words_round_trip_and_carry_the_lap_parity() {
        let log2 = 4; // 16 slots
        assert_eq!(lap_flag(0, log2), 1, "lap 0 is not the zeroed state");
        assert_eq!(lap_flag(15, log2), 1);
        assert_eq!(lap_flag(16, log2), 0);
        assert_eq!(lap_flag(32, log2), 1);
        let snd = command_snd(0xdead_beef, 0x7fff_fffe, 17, log2);
        assert_eq!(decode_snd(snd), (0, 0x7fff_fffe, 0xdead_beef));
        assert_eq!(decode_snd(command_snd(5, 3, 3, log2)), (1, 3, 5));
        assert_ne!(command_fst(1, 2, 3), command_fst(2, 1, 3));
        assert_ne!(
            command_fst(1, 2, 3),
            command_fst(1, 2, 4),
            "salt changes the pattern"
        );
    }

    #[test]
    fn consumers_own_chunks_of_slots_round_robin() {
        // 64 slots in chunks of 4: 16 chunks per lap, dealt to 3 consumers (6, 5 and 5 chunks).
        let g = Geometry::new(6, 2, 3).unwrap();
        assert_eq!(
            (g.owner(0), g.owner(3), g.owner(4), g.owner(8), g.owner(12)),
            (0, 0, 1, 2, 0)
        );
        // Chunk 15 (slots 60..63) is consumer 0's; the next lap starts again with chunk 0.
        assert_eq!((g.owner(60), g.owner(64), g.owner(68)), (0, 0, 1));
        let mut p = g.first_owned(1);
        let mut seen = vec![];
        for _ in 0..22 {
            seen.push(p);
            assert_eq!(g.owner(p), 1);
            p = g.next_owned(p);
        }
        let want: Vec<u64> = [4u64, 16, 28, 40, 52, 68]
            .iter()
            .flat_map(|&c| c..c + 4)
            .take(22)
            .collect();
        assert_eq!(seen, want);
        assert!(Geometry::new(10, 2, MAX_CONSUMERS as u32 + 1).is_err());
        assert!(Geometry::new(3, 2, 1).is_err());
        // 4 chunks cannot feed 5 consumers.
        assert!(Geometry::new(4, 2, 5).is_err());
    }

    #[test]
    fn every_position_has_one_owner_which_is_the_owner_of_its_slot() {
        for nslots_log2 in 4..=6 {
            for chunk_log2 in 0..=nslots_log2 {
                for consumers in 1..=MAX_CONSUMERS as u32 {
                    let Ok(g) = Geometry::new(nslots_log2, chunk_log2, consumers) else {
                        assert!(1u64 << (nslots_log2 - chunk_log2) < consumers as u64);
                        continue;
                    };
                    let end = 3 * g.nslots();
                    let mut owner = vec![u32::MAX; end as usize];
                    for c in 0..consumers {
                        let mut p = g.first_owned(c);
                        while p < end {
                            assert_eq!(owner[p as usize], u32::MAX, "{g:?}: {p} owned twice");
                            owner[p as usize] = c;
                            let next = g.next_owned(p);
                            assert!(next > p);
                            p = next;
                        }
                    }
                    for p in 0..end {
                        assert_eq!(owner[p as usize], g.owner(p), "{g:?} at {p}");
                        if p >= g.nslots() {
                            assert_eq!(g.owner(p), g.owner(p - g.nslots()));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_run_gives_every_consumer_a_share_of_the_ring() {
        for consumers in 1..=MAX_CONSUMERS as u32 {
            for ring_log2 in 4..=16 {
                let g = Geometry::for_run(ring_log2, consumers).unwrap();
                let chunks = g.chunks();
                let most = chunks.div_ceil(consumers as u64);
                let least = chunks / consumers as u64;
                assert!(least >= 1, "{g:?}");
                if chunks >= 4 * consumers as u64 {
                    assert!(4 * (most - least) <= most, "{g:?}");
                }
            }
        }
    }

    #[test]
    fn verifier_catches_duplicates_tears_and_losses() {
        let v = Verifier::new(3, 4, 9, false);
        assert_eq!(
            v.check(command_fst(0, 1, 9), command_snd(0, 1, 0, 4)),
            Check::Ok
        );
        assert_eq!(
            v.check(command_fst(0, 1, 9), command_snd(0, 1, 5, 4)),
            Check::Duplicate
        );
        assert_eq!(
            v.check(command_fst(1, 1, 9), command_snd(2, 1, 0, 4)),
            Check::Torn
        );
        assert_eq!(
            v.check(command_fst(0, 1, 8), command_snd(0, 2, 0, 4)),
            Check::Torn
        );
        assert_eq!(v.check(0, command_snd(4, 0, 0, 4)), Check::OutOfRange);
        assert_eq!(v.check(0, command_snd(0, 3, 0, 4)), Check::OutOfRange);
        let mut e = Errors::default();
        v.finish(&[4, 4, 4], &mut e);
        assert_eq!(e.lost, 12 - 3);
        // Producer 0 says it pushed nothing, producer 2's seq 0 was received: a phantom.
        let mut e = Errors::default();
        v.finish(&[0, 4, 0], &mut e);
        assert_eq!((e.lost, e.phantom), (2, 1));
    }
}
