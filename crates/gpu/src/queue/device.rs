//! The device side of a ring point: the ring's memory where its kind places it, the producers'
//! state block, and the producer kernels launched and waited for with the stop and kill
//! escalation. The caller runs the consumers (on threads of its own) while a launch waits.

use super::ring::{FifoView, Geometry, VyukovView};
use super::{RingKind, STATE_WORDS, S_CTL, S_HEAD, S_T0, S_T1, S_TICK, TAIL_STRIDE};
use crate::buffer::{DeviceBuffer, PinnedBuffer};
use crate::driver::{Gpu, KernelParams, Shape, Stream, TypedKernel};
use crate::error::GpuError;
use crate::kernels::{kernel, Source};
use crate::mapped::{gdr_mapped, managed, pinned, HostMem};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pins the calling thread to `cpu` (a consumer on the GPU's NUMA node). A failure leaves the
/// thread where it was: the run is slower, not wrong.
pub fn pin_current_thread(cpu: usize) {
    let _ = crate::affinity::bind_current_thread(&[cpu]);
}

/// A FIFO ring's slots and consumer tails, placed as its kind says (`libefaxx` is not a FIFO
/// ring: see [`VyukovMemory`]); zeroed, every consumer's tail at its first position.
pub struct FifoMemory {
    slots: HostMem,
    tails: HostMem,
    geometry: Geometry,
}

impl FifoMemory {
    pub fn new(gpu: &Arc<Gpu>, kind: RingKind, geometry: Geometry) -> Result<Self, GpuError> {
        let slot_bytes = (geometry.nslots() * 16) as usize;
        let tail_bytes = 4096;
        let (slots, tails) = match kind {
            RingKind::Pinned => (pinned(gpu, slot_bytes)?, pinned(gpu, tail_bytes)?),
            RingKind::Managed => (managed(gpu, slot_bytes)?, managed(gpu, tail_bytes)?),
            RingKind::Gdr => (gdr_mapped(gpu, slot_bytes)?, pinned(gpu, tail_bytes)?),
            RingKind::Hybrid => (pinned(gpu, slot_bytes)?, gdr_mapped(gpu, tail_bytes)?),
            RingKind::Libefaxx => {
                return Err(GpuError::Invalid(
                    "the libefaxx ring is a Vyukov queue, not a FIFO ring".into(),
                ))
            }
        };
        slots.zero();
        tails.zero();
        for c in 0..geometry.consumers {
            tails.words()[c as usize * TAIL_STRIDE]
                .store(geometry.first_owned(c), Ordering::Relaxed);
        }
        Ok(FifoMemory {
            slots,
            tails,
            geometry,
        })
    }

    /// The ring as the consumers see it.
    pub fn view(&self) -> FifoView<'_> {
        FifoView {
            slots: self.slots.words(),
            tails: self.tails.words(),
            geometry: self.geometry,
            tails_write_combined: self.tails.write_combined(),
        }
    }
}

/// Libefaxx's ring: `capacity` (a power of two) Vyukov cells and its control words, in managed
/// memory as Libefaxx places them, initialised as Vyukov's constructor does.
pub struct VyukovMemory {
    cells: HostMem,
    ctrl: HostMem,
    mask: u64,
}

impl VyukovMemory {
    pub fn new(gpu: &Arc<Gpu>, capacity: u64) -> Result<Self, GpuError> {
        let cap = capacity.next_power_of_two().max(2);
        let cells = managed(gpu, cap as usize * 24)?;
        let ctrl = managed(gpu, 64 * 8)?;
        cells.zero();
        ctrl.zero();
        let m = VyukovMemory {
            cells,
            ctrl,
            mask: cap - 1,
        };
        m.view().init();
        Ok(m)
    }

    /// The ring as the consumers see it.
    pub fn view(&self) -> VyukovView<'_> {
        VyukovView {
            cells: self.cells.words(),
            ctrl: self.ctrl.words(),
            mask: self.mask,
        }
    }
}

/// What the FIFO kernel is told besides where the ring is.
#[derive(Clone, Copy, Debug)]
pub struct FifoLaunch {
    /// nbi: commands per lane per claim.
    pub batch: u32,
    pub blocking: bool,
    /// How each publish is ordered after the producer's earlier writes.
    pub release: super::Release,
    pub salt: u64,
    /// Poll the consumers' tails where they live, sleeping this many ns between two reads
    /// (`None`: poll the device copy).
    pub direct_sleep_ns: Option<u32>,
}

/// How long a launch may run: after `budget` the producers are told to stop claiming, `hang`
/// later to give up every wait, and `hang` after that the run is declared hung.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    pub budget: Duration,
    pub hang: Duration,
}

/// The producers' timestamps and progress, read back after a launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateWords {
    /// First push and last quiet, `%globaltimer` ns.
    pub t0: u64,
    pub t1: u64,
    /// Positions claimed (FIFO rings).
    pub head: u64,
    /// The smallest step of `%globaltimer` the kernel saw (FIFO rings).
    pub tick: u64,
}

/// The producers of one point: `producers` threads pushing `per_producer` commands each, their
/// device state block (control word, timestamps, head, cached tails), pushed counts and one
/// latency slot per command.
pub struct Producers {
    stream: Stream,
    side: Stream,
    state: DeviceBuffer,
    stage: HostMem,
    pushed: DeviceBuffer,
    lat: DeviceBuffer,
    per_producer: u64,
}

impl Producers {
    pub fn new(gpu: &Arc<Gpu>, producers: u64, per_producer: u64) -> Result<Self, GpuError> {
        gpu.bind()?;
        let stream = Stream::new(gpu)?;
        let side = Stream::new(gpu)?;
        let state = DeviceBuffer::new(gpu, STATE_WORDS * 8)?;
        let pushed = DeviceBuffer::new(gpu, producers as usize * 4)?;
        let lat = DeviceBuffer::new(gpu, (producers * per_producer) as usize * 4)?;
        // Host staging for state writes (initial values, then the control word's values).
        let stage = HostMem::Pinned(PinnedBuffer::new(gpu, STATE_WORDS * 8 * 3)?);
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
        Ok(Producers {
            stream,
            side,
            state,
            stage,
            pushed,
            lat,
            per_producer,
        })
    }

    /// Writes staged value `value_word` into the control word while the kernel runs.
    fn set_ctl(&self, value_word: usize) -> Result<(), GpuError> {
        // SAFETY: copies one u64 from the live staging buffer into the live state block on a
        // separate stream (the copy engine), concurrently with the kernel by design.
        unsafe {
            self.side.copy_async(
                self.state.ptr() + (S_CTL * 8) as u64,
                self.stage.device() + (value_word * 8) as u64,
                8,
            )
        }
    }

    /// Runs `efa_queue_fifo` on `ring` and waits for it within `limits` (a hung run is an error;
    /// the caller abandons its consumers).
    pub fn run_fifo(
        &self,
        gpu: &Arc<Gpu>,
        shape: Shape,
        ring: &FifoMemory,
        l: FifoLaunch,
        limits: Deadlines,
    ) -> Result<(), GpuError> {
        let g = ring.geometry;
        let k = kernel(gpu, Source::Queue, "efa_queue_fifo")?;
        // SAFETY: efa_queue_fifo takes one `FifoParams` by value.
        let k = unsafe { TypedKernel::<FifoParams>::bind(k) };
        let params = FifoParams {
            slots: ring.slots.device(),
            tails: ring.tails.device(),
            state: self.state.ptr(),
            pushed: self.pushed.ptr(),
            lat: self.lat.ptr(),
            nslots_log2: g.nslots_log2 as u64,
            chunk_log2: g.chunk_log2 as u64,
            consumers: g.consumers as u64,
            per_producer: self.per_producer,
            batch: l.batch as u64,
            blocking: l.blocking as u64,
            release: l.release.code(),
            salt: l.salt,
            direct: l.direct_sleep_ns.map_or(0, |ns| ns.max(1) as u64),
        };
        // SAFETY: every address in params belongs to `ring` or `self`, both borrowed until the
        // wait below returns (the kernel is finished, or declared hung and its consumers
        // abandoned, before they can be dropped).
        unsafe { k.launch(&self.stream, shape, &params)? };
        self.wait(limits)
    }

    /// Runs `efa_queue_vyukov` on `ring` and waits for it, as [`Producers::run_fifo`] does.
    pub fn run_vyukov(
        &self,
        gpu: &Arc<Gpu>,
        shape: Shape,
        ring: &VyukovMemory,
        blocking: bool,
        salt: u64,
        limits: Deadlines,
    ) -> Result<(), GpuError> {
        let k = kernel(gpu, Source::Queue, "efa_queue_vyukov")?;
        // SAFETY: efa_queue_vyukov takes one `VyukovParams` by value.
        let k = unsafe { TypedKernel::<VyukovParams>::bind(k) };
        let params = VyukovParams {
            cells: ring.cells.device(),
            ctrl: ring.ctrl.device(),
            state: self.state.ptr(),
            pushed: self.pushed.ptr(),
            lat: self.lat.ptr(),
            mask: ring.mask,
            per_producer: self.per_producer,
            blocking: blocking as u64,
            salt,
        };
        // SAFETY: as in `run_fifo`: `ring` and `self` stay borrowed until the wait returns.
        unsafe { k.launch(&self.stream, shape, &params)? };
        self.wait(limits)
    }

    /// Runs `efa_queue_floor` (one thread, one round trip per latency slot) against `mem`, whose
    /// numbers a CPU thread answers meanwhile ([`super::floor::run_floor`]), and waits for it.
    pub(crate) fn launch_floor(
        &self,
        gpu: &Arc<Gpu>,
        mem: &super::floor::FloorMemory,
        probe: super::floor::Floor,
        limits: Deadlines,
    ) -> Result<(), GpuError> {
        use super::floor::{FLOOR_ANSWER, FLOOR_FLAG};
        let k = kernel(gpu, Source::Queue, "efa_queue_floor")?;
        // SAFETY: efa_queue_floor takes one `FloorParams` by value.
        let k = unsafe { TypedKernel::<FloorParams>::bind(k) };
        let params = FloorParams {
            flag: mem.mem.device() + (FLOOR_FLAG * 8) as u64,
            answer: mem.mem.device() + (FLOOR_ANSWER * 8) as u64,
            state: self.state.ptr(),
            pushed: self.pushed.ptr(),
            lat: self.lat.ptr(),
            iters: self.per_producer,
            claim: probe.claimed().is_some() as u64,
            release: probe.claimed().map_or(0, |r| r.code()),
        };
        // SAFETY: `mem` and `self` stay borrowed until the wait returns, as in `run_fifo`; the
        // kernel writes at most `per_producer` latency slots, the size `lat` was allocated with.
        unsafe { k.launch(&self.stream, Shape { grid: 1, block: 1 }, &params)? };
        self.wait(limits)
    }

    /// Waits for the producers, telling them to stop and then to give up as `limits` say.
    fn wait(&self, limits: Deadlines) -> Result<(), GpuError> {
        let Deadlines { budget, hang } = limits;
        let start = Instant::now();
        let mut level = 0;
        loop {
            if self.stream.is_idle()? {
                return Ok(());
            }
            let t = start.elapsed();
            if level == 0 && t > budget {
                self.set_ctl(STATE_WORDS)?;
                level = 1;
            } else if level == 1 && t > budget + hang {
                self.set_ctl(STATE_WORDS + 1)?;
                level = 2;
            } else if level == 2 && t > budget + 2 * hang {
                return Err(GpuError::Invalid(format!(
                    "the queue kernel did not finish {} s after it was told to stop: the \
                     consumers stopped acknowledging (a hung ring)",
                    (t - budget).as_secs()
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Timestamps, head and timer step, after a launch.
    pub fn state(&self) -> Result<StateWords, GpuError> {
        let st: Vec<u64> = self
            .state
            .to_host()?
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Ok(StateWords {
            t0: st[S_T0],
            t1: st[S_T1],
            head: st[S_HEAD],
            tick: st[S_TICK],
        })
    }

    /// Commands each producer pushed.
    pub fn pushed(&self) -> Result<Vec<u32>, GpuError> {
        u32s(&self.pushed)
    }

    /// One `%globaltimer` latency per command slot, ns plus one (0: the slot was never used).
    pub fn latency_slots(&self) -> Result<Vec<u32>, GpuError> {
        u32s(&self.lat)
    }
}

fn u32s(b: &DeviceBuffer) -> Result<Vec<u32>, GpuError> {
    Ok(b.to_host()?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect())
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

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct FloorParams {
    flag: u64,
    answer: u64,
    state: u64,
    pushed: u64,
    lat: u64,
    iters: u64,
    claim: u64,
    release: u64,
}
// SAFETY: repr(C), eight u64 fields in the order of `struct FloorParams` in kernels/queue.cu.
unsafe impl KernelParams for FloorParams {}
