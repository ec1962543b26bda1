//! The floor a blocking ring is measured against: the bare GPU → CPU → GPU round trip of this
//! machine, with nothing of a ring in it.
//!
//! One GPU thread (`efa_queue_floor` in `kernels/queue.cu`) stores a sequence number into pinned
//! host memory; one CPU thread spins on that word and copies each new number into a second word,
//! a cache line away; the GPU spins reading the second word until it holds its number. That is
//! one posted PCIe write, the CPU's poll of its own memory, and the GPU's PCIe reads: what any
//! blocking push and wait must pay, without a slot claim, a fence, a pattern or a tail. A ring's
//! blocking round trip over this figure is how much of its time is the ring's own.

use super::device::Producers;
use super::Release;
use crate::driver::Gpu;
use crate::error::GpuError;
use crate::mapped::{pinned, HostMem};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Which probe: the bare round trip, or the round trip with what every push of a shared ring
/// does before its store (claim a position with one device-memory atomic, order the number after
/// earlier writes as the ring's [`Release`] would), and nothing else of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Floor {
    Bare,
    Claimed(Release),
}

impl Floor {
    /// The ordering of a claimed probe.
    pub fn claimed(self) -> Option<Release> {
        match self {
            Floor::Bare => None,
            Floor::Claimed(r) => Some(r),
        }
    }

    /// The `ring` of its records.
    pub fn name(self) -> &'static str {
        match self {
            Floor::Bare => "floor",
            Floor::Claimed(_) => "floor+claim",
        }
    }
}

/// Word offsets (u64) of the GPU's number and the CPU's answer: 64 bytes apart.
pub(crate) const FLOOR_FLAG: usize = 0;
pub(crate) const FLOOR_ANSWER: usize = 8;

/// The two words of the probe, in pinned host memory.
pub struct FloorMemory {
    pub(crate) mem: HostMem,
}

impl FloorMemory {
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self, GpuError> {
        let mem = pinned(gpu, 4096)?;
        mem.zero();
        Ok(FloorMemory { mem })
    }

    /// Answers every number the GPU writes until `end` is set: the CPU side of the probe, run on
    /// a thread of its own (pinned where the ring's consumer would be). Returns the answers made.
    pub fn answer(&self, end: &AtomicBool) -> u64 {
        let w = self.mem.words();
        let (flag, answer) = (&w[FLOOR_FLAG], &w[FLOOR_ANSWER]);
        let mut last = 0;
        let mut answered = 0;
        loop {
            let v = flag.load(Ordering::Acquire);
            if v != last {
                answer.store(v, Ordering::Release);
                last = v;
                answered += 1;
            } else if end.load(Ordering::Relaxed) {
                return answered;
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Runs `iters` round trips of `probe` with the answering thread on `cpu` (when given):
/// the producers' state (timestamps, one latency slot per round trip, the count done) is read
/// back from `dev` as for a ring. Returns the answers the CPU made.
pub fn run_floor(
    gpu: &Arc<Gpu>,
    dev: &Producers,
    cpu: Option<usize>,
    probe: Floor,
    limits: super::Deadlines,
) -> Result<u64, GpuError> {
    let mem = FloorMemory::new(gpu)?;
    let end = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (m, e) = (&mem, &end);
        let h = s.spawn(move || {
            if let Some(cpu) = cpu {
                super::pin_current_thread(cpu);
            }
            m.answer(e)
        });
        let waited = dev.launch_floor(gpu, &mem, probe, limits);
        end.store(true, Ordering::Relaxed);
        let answered = h.join().expect("the floor's answering thread panicked");
        waited.map(|_| answered)
    })
}
