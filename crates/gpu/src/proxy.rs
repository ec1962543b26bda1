//! The GPU side of `efabench proxy`: command rings the GPU pushes puts into and a CPU proxy pops,
//! and the kernels that issue puts (`kernels/proxy.cu`: `efa_put_nbi`, `efa_quiet`, `efa_fence`).
//!
//! The ring is the `fifo` ring of [`crate::queue`] (head in device memory, slots in mapped pinned host memory,
//! lap parity in every published word so the host never clears a slot) with a 32-byte command
//! instead of its 16-byte slot: a put needs two 64-bit offsets, a length, a rank and a signal,
//! which do not fit 16 bytes, and a GPU has no store wider than 16 bytes that reaches host
//! memory as one unit. So a command is two 16-byte halves, each published by one 16-byte store
//! and each carrying the parity and the low 30 bits of its position; the host takes the command
//! once both halves show the lap it expects (see `kernels/proxy.cu` for the words).
//!
//! Per ring, the proxy publishes two counts the GPU reads where they are (mapped pinned memory,
//! 64 bytes apart): `tail` (commands consumed: the GPU's credits) and `done` (commands whose
//! write completed: what `quiet` waits for). The host side here is safe code over `&[AtomicU64]`
//! so tests drive it with a host producer and plain memory ([`RingMemory::heap`]).
//!
//! Where a ring lives is the queue benchmark's choice of placements (`--ring`, [`RingKind`]):
//! `pinned` (the default, the best the queue sweep measured without GDRCopy), `managed`, `gdr`
//! (slots in device memory the proxy reads through GDRCopy) and `hybrid` (slots in pinned memory,
//! tail and done in device memory the proxy writes through GDRCopy, so the kernel polls its own
//! memory instead of reading host memory across PCIe, NCCL GIN's proxy layout).

use crate::buffer::DeviceBuffer;
use crate::driver::{Gpu, KernelParams, Shape, Stream, TypedKernel};
use crate::error::GpuError;
use crate::kernels::{kernel, Source};
use crate::mapped::{gdr_mapped, managed, pinned, HostMem};
use crate::queue::RingKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// u64 words per slot (two 16-byte halves).
pub const SLOT_WORDS: usize = 4;
/// u64 words of control per ring: tail at 0, done at [`DONE_WORD`] (another cache line).
pub const CTL_STRIDE: usize = 16;
/// Index of the done count inside a ring's control words.
pub const DONE_WORD: usize = 8;
/// Most rails (rings) one proxy serves; the kernel's state block has room for this many heads.
pub const MAX_RINGS: usize = 8;
const POS_MASK: u64 = 0x3fff_ffff;
const STATE_WORDS: usize = 128;

/// One put (or one rail stripe of a put) as the proxy receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    pub dst: u16,
    pub signal: u16,
    pub len: u32,
    pub remote_off: u64,
    pub local_off: u64,
    /// Wait for every earlier write of this ring to complete before posting this one.
    pub fence: bool,
}

/// The lap flag of position `pos`: 1 on even laps, so a zeroed slot is never taken as lap 0.
#[inline(always)]
pub const fn lap_flag(pos: u64, nslots_log2: u32) -> u64 {
    ((pos >> nslots_log2) & 1) ^ 1
}

/// The four words of `cmd` at position `pos`, as the kernel writes them.
pub fn encode(cmd: &Command, pos: u64, nslots_log2: u32) -> [u64; 4] {
    let flag = lap_flag(pos, nslots_log2) << 63;
    let low = (pos & POS_MASK) << 32;
    [
        cmd.remote_off,
        flag | (cmd.fence as u64) << 62 | low | cmd.len as u64,
        cmd.local_off,
        flag | low | (cmd.dst as u64) << 16 | cmd.signal as u64,
    ]
}

/// What the proxy finds at a position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peek {
    /// Not (completely) published yet.
    Empty,
    Ready(Command),
    /// Both halves carry this lap's flag but disagree on the position (a corrupted command).
    Torn {
        a: u64,
        b: u64,
    },
}

/// Decodes the words of a slot that the consumer expects to hold position `pos`.
pub fn decode(w: [u64; 4], pos: u64, nslots_log2: u32) -> Peek {
    let flag = lap_flag(pos, nslots_log2);
    if w[1] >> 63 != flag || w[3] >> 63 != flag {
        return Peek::Empty;
    }
    let (pa, pb) = ((w[1] >> 32) & POS_MASK, (w[3] >> 32) & POS_MASK);
    if pa != pos & POS_MASK || pb != pos & POS_MASK {
        return Peek::Torn { a: w[1], b: w[3] };
    }
    Peek::Ready(Command {
        remote_off: w[0],
        len: w[1] as u32,
        fence: (w[1] >> 62) & 1 == 1,
        local_off: w[2],
        dst: (w[3] >> 16) as u16,
        signal: w[3] as u16,
    })
}

/// One ring as the host sees it: its slots and its control words.
#[derive(Clone, Copy)]
pub struct CommandRing<'a> {
    pub slots: &'a [AtomicU64],
    pub ctl: &'a [AtomicU64],
    pub nslots_log2: u32,
    /// The control words are write-combined device memory (GDRCopy): publish with a fence.
    pub ctl_write_combined: bool,
}

impl CommandRing<'_> {
    pub fn nslots(&self) -> u64 {
        1 << self.nslots_log2
    }
    fn slot(&self, pos: u64) -> &[AtomicU64] {
        let i = (pos & (self.nslots() - 1)) as usize * SLOT_WORDS;
        &self.slots[i..i + SLOT_WORDS]
    }
    /// Reads position `pos` (acquire on the flag words, so a ready command's payload words are
    /// the ones published with it).
    pub fn peek(&self, pos: u64) -> Peek {
        let s = self.slot(pos);
        let w = [s[1].load(Ordering::Acquire), s[3].load(Ordering::Acquire)];
        if w[0] >> 63 != lap_flag(pos, self.nslots_log2) || w[1] >> 63 != w[0] >> 63 {
            return Peek::Empty;
        }
        decode(
            [
                s[0].load(Ordering::Relaxed),
                w[0],
                s[2].load(Ordering::Relaxed),
                w[1],
            ],
            pos,
            self.nslots_log2,
        )
    }
    /// Writes `cmd` at `pos` the way the kernel does (host producers in tests and `--producer
    /// host`): payload words first, flag words last with release. Waits for the credit.
    pub fn host_push(
        &self,
        pos: u64,
        cmd: &Command,
        mut keep_waiting: impl FnMut() -> bool,
    ) -> bool {
        while pos >= self.nslots() && self.tail() <= pos - self.nslots() {
            if !keep_waiting() {
                return false;
            }
            std::hint::spin_loop();
        }
        let w = encode(cmd, pos, self.nslots_log2);
        let s = self.slot(pos);
        s[0].store(w[0], Ordering::Relaxed);
        s[2].store(w[2], Ordering::Relaxed);
        s[1].store(w[1], Ordering::Release);
        s[3].store(w[3], Ordering::Release);
        true
    }
    /// Commands consumed (the producer's credits).
    pub fn tail(&self) -> u64 {
        self.ctl[0].load(Ordering::Acquire)
    }
    pub fn publish_tail(&self, v: u64) {
        self.ctl[0].store(v, Ordering::Release);
        self.flush_ctl();
    }
    /// Commands whose write completed (what quiet waits for).
    pub fn done(&self) -> u64 {
        self.ctl[DONE_WORD].load(Ordering::Acquire)
    }
    pub fn publish_done(&self, v: u64) {
        self.ctl[DONE_WORD].store(v, Ordering::Release);
        self.flush_ctl();
    }
    /// Stores to a write-combined mapping sit in the CPU's buffers until a fence drains them.
    fn flush_ctl(&self) {
        if self.ctl_write_combined {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }
}

/// Where the rings live: memory the GPU producer and the proxy both reach (a [`RingKind`]
/// placement) or the heap (a host producer standing in for the GPU).
pub struct RingMemory(Place);

enum Place {
    Shared {
        kind: RingKind,
        slots: HostMem,
        ctl: HostMem,
    },
    Heap {
        slots: Vec<AtomicU64>,
        ctl: Vec<AtomicU64>,
    },
}

impl RingMemory {
    /// `rings` rings of 2^`nslots_log2` slots in plain memory.
    pub fn heap(rings: usize, nslots_log2: u32) -> RingMemory {
        let n = rings * (SLOT_WORDS << nslots_log2);
        RingMemory(Place::Heap {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            ctl: (0..rings * CTL_STRIDE).map(|_| AtomicU64::new(0)).collect(),
        })
    }
    /// The same placed as `kind` says, for the GPU producer of `gpu` (zeroed). The Libefaxx
    /// ring is a different protocol (16-byte Vyukov cells) and is refused; `gdr` and `hybrid`
    /// need GDRCopy, `managed` concurrent managed access ([`crate::queue::missing`]).
    pub fn new(
        gpu: &Arc<Gpu>,
        kind: RingKind,
        rings: usize,
        nslots_log2: u32,
    ) -> Result<RingMemory, GpuError> {
        if kind == RingKind::Libefaxx {
            return Err(GpuError::Invalid(
                "--ring libefaxx is the queue benchmark's CAS ring, which has no room for a \
                 32-byte put: use pinned, managed, gdr or hybrid"
                    .into(),
            ));
        }
        if let Some(why) = crate::queue::missing(gpu, kind) {
            return Err(GpuError::Invalid(format!(
                "--ring {kind} cannot run here: {why}; use --ring pinned"
            )));
        }
        let slot_bytes = rings * (SLOT_WORDS << nslots_log2) * 8;
        let ctl_bytes = rings * CTL_STRIDE * 8;
        let (slots, ctl) = match kind {
            RingKind::Pinned => (pinned(gpu, slot_bytes)?, pinned(gpu, ctl_bytes)?),
            RingKind::Managed => (managed(gpu, slot_bytes)?, managed(gpu, ctl_bytes)?),
            RingKind::Gdr => (gdr_mapped(gpu, slot_bytes)?, pinned(gpu, ctl_bytes)?),
            RingKind::Hybrid => (pinned(gpu, slot_bytes)?, gdr_mapped(gpu, ctl_bytes)?),
            RingKind::Libefaxx => unreachable!("refused above"),
        };
        slots.zero();
        ctl.zero();
        Ok(RingMemory(Place::Shared { kind, slots, ctl }))
    }
    /// The placement, for records (`heap` for the host producer's rings).
    pub fn kind_name(&self) -> &'static str {
        match &self.0 {
            Place::Shared { kind, .. } => kind.name(),
            Place::Heap { .. } => "heap",
        }
    }
    /// Ring `r`.
    pub fn ring(&self, r: usize, nslots_log2: u32) -> CommandRing<'_> {
        let (s, c, wc) = match &self.0 {
            Place::Shared { slots, ctl, .. } => (slots.words(), ctl.words(), ctl.write_combined()),
            Place::Heap { slots, ctl } => (&slots[..], &ctl[..], false),
        };
        let n = SLOT_WORDS << nslots_log2;
        CommandRing {
            slots: &s[r * n..(r + 1) * n],
            ctl: &c[r * CTL_STRIDE..(r + 1) * CTL_STRIDE],
            nslots_log2,
            ctl_write_combined: wc,
        }
    }
    /// Device addresses (slots, control) for the kernel.
    pub(crate) fn device(&self) -> Option<(u64, u64)> {
        match &self.0 {
            Place::Shared { slots, ctl, .. } => Some((slots.device(), ctl.device())),
            Place::Heap { .. } => None,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ProxyParams {
    slots: u64,
    ctl: u64,
    state: u64,
    ts: u64,
    span: u64,
    nslots_log2: u64,
    rails: u64,
    split: u64,
    first_rail: u64,
    puts: u64,
    size: u64,
    dst: u64,
    blocking: u64,
    poll_ns: u64,
    fence_each: u64,
}
// SAFETY: repr(C), fifteen u64 fields in the order of `struct ProxyParams` in kernels/proxy.cu.
unsafe impl KernelParams for ProxyParams {}

/// One iteration of puts issued by the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuIteration {
    /// `%globaltimer` ns when the kernel started its first put and when its last quiet returned.
    pub t0: u64,
    pub t1: u64,
    /// Per put: push start, quiet returned (`%globaltimer` ns).
    pub push: Vec<u64>,
    pub quiet: Vec<u64>,
}

/// What one launch does.
#[derive(Clone, Copy, Debug)]
pub struct PutPlan {
    pub puts: u32,
    pub size: u64,
    pub dst: u16,
    pub rails: u32,
    pub split: bool,
    pub first_rail: u32,
    pub blocking: bool,
    /// Pause between two reads of the proxy's counts while the kernel waits (0: spin).
    pub poll_ns: u32,
    /// A system-scope fence before every put (the device API's safe default), or one before
    /// the first put only (payloads written before the launch).
    pub fence_each: bool,
}

/// The GPU producer: the kernels, its device state (ring heads persist across launches, so
/// positions keep counting up and lap parity stays right) and its timestamp buffers.
pub struct GpuProducer {
    gpu: Arc<Gpu>,
    stream: Stream,
    puts: TypedKernel<ProxyParams>,
    ping: crate::driver::Kernel,
    state: DeviceBuffer,
    ts: DeviceBuffer,
    span: DeviceBuffer,
    max_puts: usize,
}

impl GpuProducer {
    pub fn new(gpu: &Arc<Gpu>, max_puts: usize) -> Result<GpuProducer, GpuError> {
        gpu.bind()?;
        let k = kernel(gpu, Source::Proxy, "efa_proxy_puts")?;
        // SAFETY: efa_proxy_puts takes exactly one ProxyParams by value.
        let puts = unsafe { TypedKernel::bind(k) };
        Ok(GpuProducer {
            gpu: gpu.clone(),
            stream: Stream::new(gpu)?,
            puts,
            ping: kernel(gpu, Source::Proxy, "efa_proxy_ping")?,
            state: DeviceBuffer::new(gpu, STATE_WORDS * 8)?,
            ts: DeviceBuffer::new(gpu, max_puts.max(1) * 16)?,
            span: DeviceBuffer::new(gpu, 16)?,
            max_puts: max_puts.max(1),
        })
    }

    /// Runs one iteration: launches the kernel over `mem`'s rings and waits for it. The proxy
    /// threads must be consuming the rings meanwhile, or this never returns.
    pub fn run(
        &self,
        mem: &RingMemory,
        nslots_log2: u32,
        plan: &PutPlan,
    ) -> Result<GpuIteration, GpuError> {
        if plan.puts as usize > self.max_puts || plan.rails as usize > MAX_RINGS || plan.rails == 0
        {
            return Err(GpuError::Invalid(format!(
                "{} puts over {} rails exceed the producer's {} puts / {MAX_RINGS} rails",
                plan.puts, plan.rails, self.max_puts
            )));
        }
        let (slots, ctl) = mem.device().ok_or_else(|| {
            GpuError::Invalid("the GPU producer needs rings it can reach (RingMemory::new)".into())
        })?;
        let p = ProxyParams {
            slots,
            ctl,
            state: self.state.ptr(),
            ts: self.ts.ptr(),
            span: self.span.ptr(),
            nslots_log2: nslots_log2 as u64,
            rails: plan.rails as u64,
            split: plan.split as u64,
            first_rail: plan.first_rail as u64,
            puts: plan.puts as u64,
            size: plan.size,
            dst: plan.dst as u64,
            blocking: plan.blocking as u64,
            poll_ns: plan.poll_ns as u64,
            fence_each: plan.fence_each as u64,
        };
        // SAFETY: every address is a live allocation of this GPU (state, ts, span) or the device
        // address of the rings' shared memory (pinned, managed or GDR-mapped), all sized for
        // `puts` and `rails` (checked above), and all outlive the launch because we synchronise
        // before returning.
        unsafe {
            self.puts
                .launch(&self.stream, Shape { grid: 1, block: 32 }, &p)?
        };
        self.stream.synchronize()?;
        let n = plan.puts as usize;
        let ts = crate::buffer::copy_to_host(&self.gpu, self.ts.ptr(), n * 16)?;
        let span = crate::buffer::copy_to_host(&self.gpu, self.span.ptr(), 16)?;
        let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        Ok(GpuIteration {
            t0: word(&span, 0),
            t1: word(&span, 1),
            push: (0..n).map(|i| word(&ts, i)).collect(),
            quiet: (0..n).map(|i| word(&ts, n + i)).collect(),
        })
    }

    /// Offset of `%globaltimer` from the host's `CLOCK_REALTIME` (ns, gpu - host), from `n`
    /// ping exchanges over mapped pinned memory: each is bracketed by two host reads, the GPU's
    /// stamp is taken as the midpoint, and the exchange with the shortest round trip wins.
    /// Returns (offset, that round trip, the host time of that exchange's midpoint).
    pub fn clock_offset(&self, n: u32) -> Result<(i64, u64, u64), GpuError> {
        let buf = pinned(&self.gpu, 4096)?;
        let w = buf.words();
        let dev = buf.device();
        // SAFETY: efa_proxy_ping(u64 words, u64 n) reads/writes three words of the live pinned
        // buffer, which outlives the launch (we synchronise below).
        unsafe {
            self.ping
                .launch(&self.stream, Shape { grid: 1, block: 1 }, &[dev, n as u64])?
        };
        let mut best = (0i64, u64::MAX, 0u64);
        let give_up = Instant::now() + std::time::Duration::from_secs(10);
        for k in 1..=n as u64 {
            let t0 = realtime_ns();
            w[0].store(k, Ordering::Release);
            while w[1].load(Ordering::Acquire) != k {
                if Instant::now() > give_up {
                    return Err(GpuError::Invalid(
                        "the clock ping kernel did not answer in 10 s".into(),
                    ));
                }
                std::hint::spin_loop();
            }
            let t1 = realtime_ns();
            let g = w[2].load(Ordering::Relaxed);
            let rtt = t1.saturating_sub(t0);
            if rtt < best.1 {
                let mid = t0 / 2 + t1 / 2;
                best = (g as i64 - mid as i64, rtt, mid);
            }
        }
        self.stream.synchronize()?;
        Ok(best)
    }
}

/// The host clock every timestamp of `efabench proxy` uses: `CLOCK_REALTIME` in ns (one base for
/// every process of a host).
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_round_trips_and_laps() {
        let c = Command {
            dst: 3,
            signal: 0xbeef,
            len: 8 << 20,
            remote_off: 0x1234_5678_9abc,
            local_off: 77,
            fence: true,
        };
        for pos in [0u64, 1, 15, 16, 17, (1 << 30) + 5, u32::MAX as u64 * 3] {
            assert_eq!(decode(encode(&c, pos, 4), pos, 4), Peek::Ready(c), "{pos}");
            // The same slot one lap later is not ready yet.
            assert_eq!(decode(encode(&c, pos, 4), pos + 16, 4), Peek::Empty);
        }
        // Zeroed memory is never a command of lap 0.
        assert_eq!(decode([0; 4], 0, 4), Peek::Empty);
        // Halves of different positions of the same lap are torn.
        let mut w = encode(&c, 5, 10);
        w[3] = encode(&c, 6, 10)[3];
        assert!(matches!(decode(w, 5, 10), Peek::Torn { .. }));
        // Half of the next command published only: still empty.
        let mut w = encode(&c, 5, 4);
        w[3] = 0;
        assert_eq!(decode(w, 5, 4), Peek::Empty);
    }

    #[test]
    fn heap_ring_push_peek_and_credits() {
        let mem = RingMemory::heap(2, 2);
        let r = mem.ring(1, 2);
        let c = |i: u64| Command {
            dst: 1,
            signal: i as u16,
            len: 8,
            remote_off: i * 8,
            local_off: i * 8,
            fence: false,
        };
        for i in 0..4 {
            assert!(r.host_push(i, &c(i), || false));
        }
        // Full: the fifth push needs a credit.
        assert!(!r.host_push(4, &c(4), || false));
        assert_eq!(r.peek(0), Peek::Ready(c(0)));
        r.publish_tail(1);
        assert!(r.host_push(4, &c(4), || false));
        assert_eq!(r.peek(4), Peek::Ready(c(4)));
        assert_eq!(r.peek(5), Peek::Empty);
        // Ring 0 is untouched.
        assert_eq!(mem.ring(0, 2).peek(0), Peek::Empty);
        r.publish_done(3);
        assert_eq!(r.done(), 3);
    }
}
