//! GPU->CPU command rings: the kinds, the host side of the protocol and the typed kernel
//! launches. The benchmark that drives them (`efabench queue`: points, consumer threads, timing
//! and records) lives in the benchmark crate; this module only knows rings and kernels.
//!
//! GPU-initiated networking over EFA hands every network operation from GPU threads to a CPU
//! proxy through a ring of commands; the ring's cost bounds how many operations per second a
//! MoE dispatch can issue. Libefaxx measured a Vyukov CAS queue whose head and tail the GPU
//! updates across PCIe (0.03-1.1 M ops/s). These rings put that design next to the one
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
//!
//! [`ring`] is the host side (slot words, geometry, views, consumers, verifier), usable without a
//! GPU; [`device`] allocates a ring where its kind places it and launches the producer kernels.

pub mod device;
pub mod floor;
pub mod ring;

pub use device::{
    pin_current_thread, Deadlines, FifoLaunch, FifoMemory, Producers, StateWords, VyukovMemory,
};
pub use floor::{run_floor, Floor};
pub use ring::*;

use crate::driver::Gpu;
use crate::gdr::Gdr;
use cudarc::driver::sys;
use std::fmt;
use std::sync::Arc;

/// Most consumer threads a ring supports (the kernel keeps one cached tail per consumer).
pub const MAX_CONSUMERS: usize = 8;
/// Consumer tails are this many u64 apart (64 bytes: one cache line each).
pub const TAIL_STRIDE: usize = 8;
/// Words of the device state block (must match `kernels/queue.cu`; cached tails are 0..8).
pub(crate) const S_CTL: usize = 9;
pub(crate) const S_T0: usize = 10;
pub(crate) const S_T1: usize = 11;
pub(crate) const S_HEAD: usize = 12;
pub(crate) const S_TICK: usize = 13;
pub(crate) const STATE_WORDS: usize = 32;
/// Vyukov control words (u64 index into the control allocation): 128 bytes apart.
pub(crate) const V_HEAD: usize = 0;
pub(crate) const V_TAIL: usize = 16;
pub(crate) const V_POSTED: usize = 32;
pub(crate) const V_COMPLETED: usize = 48;

/// Which ring design and memory placement (a clap value set: its names are the command-line
/// spellings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
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

/// `nbi` (push many, one quiet at the end) or `blocking` (quiet after each push).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
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

/// How producers wait for credits and acknowledgements.
///
/// `Cached` is the default: on an H100 it was faster even for one producer thread (blocking 1x1
/// round trip p50 3.46 us cached against 3.78 us direct, 5.09 us direct with a 200 ns back-off),
/// and it bounds the PCIe reads of thousands of waiting warps to one at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum TailPoll {
    /// Read the device-memory copy, refreshed by one warp at a time.
    Cached,
    /// Read the consumers' tails where they live (a PCIe read per poll for host memory).
    Direct,
}

/// How a producer orders a command after its own earlier writes (a real command's payload, which
/// the proxy hands to the NIC once it reads the slot), as the kernel's `release` parameter.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Release {
    /// A system-scope fence (`fence.acq_rel.sys`) before every batch, then plain stores. The
    /// default: on an H200 the release store below made the blocking round trip slower.
    #[default]
    Fence,
    /// The slot's own 16-byte store is a system-scope release (`st.release.sys.v2`) when a claim
    /// holds one command (every blocking push); a batch of several takes one fence first.
    Store,
    /// Not ordered: what the ring costs without a payload to publish (no real proxy can use it).
    None,
}

impl Release {
    /// The kernel's encoding (`FifoParams::release` in `kernels/queue.cu`).
    pub fn code(self) -> u64 {
        match self {
            Release::None => 0,
            Release::Fence => 1,
            Release::Store => 2,
        }
    }

    /// Whether earlier writes are ordered before the command at all.
    pub fn orders(self) -> bool {
        self != Release::None
    }

    pub fn name(self) -> &'static str {
        match self {
            Release::Store => "store",
            Release::Fence => "fence",
            Release::None => "none",
        }
    }
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
