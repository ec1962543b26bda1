//! One point of `efabench queue` on a GPU: the ring allocated where its kind places it, one
//! consumer thread per `--consumers` pinned to the GPU's NUMA node, the producer kernel launched
//! and waited for, and every command checked against what each producer says it pushed.
//!
//! The ring protocol and the kernels are `efabench_gpu::queue`'s; this file decides how many
//! commands each producer pushes, runs the consumers while the kernel runs, ends them when the
//! producers are done (or abandons them when the ring hangs) and turns the device's counters and
//! timestamps into a [`QueueMeasurement`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_gpu::queue::{
    consume_fifo, consume_vyukov, missing, pin_current_thread, run_floor, ConsumerReport,
    Deadlines, EndSignal, Errors, FifoLaunch, FifoMemory, Floor, Geometry, Mode, Producers,
    Release, RingKind, TailPoll, Verifier, VyukovMemory, MAX_CONSUMERS,
};
use efabench_gpu::{Gpu, GpuError};
use efabench_record::stats::Samples;

use super::shape::ProducerShape;

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
    /// How each publish is ordered after the producer's earlier data writes (a real proxy
    /// command needs it ordered).
    pub release: Release,
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
            release: Release::default(),
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

/// The CPUs of the GPU's NUMA node (sysfs), or all CPUs when the node is unknown.
pub fn numa_cpus(gpu: &Gpu) -> Vec<usize> {
    let node = efabench_gpu::nvml::sysfs_numa_node(&gpu.pci_bus_id);
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
    let dev = Producers::new(gpu, producers, per_producer)?;
    let limits = Deadlines {
        budget: cfg.budget,
        hang: cfg.hang,
    };
    let verifier = Verifier::new(producers, per_producer, cfg.salt, cfg.consumers > 1);
    let end = EndSignal::default();
    let blocking = cfg.mode == Mode::Blocking;
    // (nbi commands per lane per claim, how producers poll the tails); Libefaxx: one, direct.
    let mut claim: (u32, &'static str) = (1, "direct");

    let reports = if cfg.ring == RingKind::Libefaxx {
        let ring = VyukovMemory::new(gpu, cfg.vyukov_capacity)?;
        let view = ring.view();
        std::thread::scope(|s| -> Result<Vec<ConsumerReport>, GpuError> {
            let handles: Vec<_> = (0..cfg.consumers)
                .map(|c| {
                    let (view, verifier, end) = (&view, &verifier, &end);
                    let cpu = cfg.cpus.get(c as usize).copied();
                    s.spawn(move || {
                        if let Some(cpu) = cpu {
                            pin_current_thread(cpu);
                        }
                        consume_vyukov(view, verifier, end)
                    })
                })
                .collect();
            let waited = dev.run_vyukov(gpu, shape, &ring, blocking, cfg.salt, limits);
            end.finish(u64::MAX);
            if waited.is_err() {
                end.abandon();
            }
            let reports = handles
                .into_iter()
                .map(|h| h.join().expect("consumer thread panicked"))
                .collect();
            waited.map(|_| reports)
        })?
    } else {
        let g = Geometry::for_run(cfg.ring_log2, cfg.consumers).map_err(GpuError::Invalid)?;
        let ring = FifoMemory::new(gpu, cfg.ring, g)?;
        let view = ring.view();
        let lanes = shape.block.min(32);
        let batch = if cfg.batch == 0 {
            (512 / lanes).max(16)
        } else {
            cfg.batch
        };
        let direct = cfg.tail_poll == TailPoll::Direct;
        claim = (batch, if direct { "direct" } else { "cached" });
        let launch = FifoLaunch {
            batch,
            blocking,
            release: cfg.release,
            salt: cfg.salt,
            direct_sleep_ns: direct.then_some(cfg.poll_sleep_ns),
        };
        std::thread::scope(|s| -> Result<Vec<ConsumerReport>, GpuError> {
            let handles: Vec<_> = (0..cfg.consumers)
                .map(|c| {
                    let (view, verifier, end) = (&view, &verifier, &end);
                    let cpu = cfg.cpus.get(c as usize).copied();
                    s.spawn(move || {
                        if let Some(cpu) = cpu {
                            pin_current_thread(cpu);
                        }
                        consume_fifo(view, c, verifier, end)
                    })
                })
                .collect();
            let waited = dev.run_fifo(gpu, shape, &ring, launch, limits);
            match &waited {
                Ok(()) => {
                    end.finish(dev.state()?.head);
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
        })?
    };

    let st = dev.state()?;
    let pushed = dev.pushed()?;
    let mut errors = Errors::default();
    for r in &reports {
        errors.duplicated += r.duplicated;
        errors.torn += r.torn;
        errors.out_of_range += r.out_of_range;
    }
    verifier.finish(&pushed, &mut errors);
    let pushed_total: u64 = pushed.iter().map(|&p| p as u64).sum();
    let received = verifier.received();
    let elapsed_ns = st.t1.saturating_sub(st.t0).max(1);
    let lat: Vec<u32> = dev
        .latency_slots()?
        .into_iter()
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
        timer_step_ns: (cfg.ring != RingKind::Libefaxx).then_some(st.tick),
        per_consumer: reports.iter().map(|r| r.consumed).collect(),
        batch: if blocking { 1 } else { claim.0 },
        tail_poll: claim.1,
    })
}

/// A GPU → CPU → GPU round-trip probe of this machine (`efabench_gpu::queue::floor`), bare or
/// with a push's claim and ordering: one GPU thread and one CPU thread, pinned where a ring's
/// first consumer would be, for as many round trips as a blocking point makes (within its
/// budget). Every round trip is checked: the GPU waits for its own number, and the count the CPU
/// answered must equal the count the GPU saw.
pub fn measure_floor(
    gpu: &Arc<Gpu>,
    cfg: &QueueConfig,
    probe: Floor,
) -> Result<QueueMeasurement, GpuError> {
    let iters = cfg.commands.clamp(1, u32::MAX as u64);
    let dev = Producers::new(gpu, 1, iters)?;
    let limits = Deadlines {
        budget: cfg.budget,
        hang: cfg.hang,
    };
    let answered = run_floor(gpu, &dev, cfg.cpus.first().copied(), probe, limits)?;
    let st = dev.state()?;
    let done = dev.pushed()?.first().copied().unwrap_or(0) as u64;
    // The CPU answers each number once; an answer more or less than the GPU counted is a
    // round trip lost or made up.
    let errors = Errors {
        lost: done.saturating_sub(answered),
        phantom: answered.saturating_sub(done),
        ..Errors::default()
    };
    let lat: Vec<u32> = dev
        .latency_slots()?
        .into_iter()
        .filter(|&x| x != 0)
        .map(|x| x - 1)
        .collect();
    let elapsed_ns = st.t1.saturating_sub(st.t0).max(1);
    Ok(QueueMeasurement {
        producers: 1,
        per_producer: iters,
        pushed: done,
        received: answered.min(done),
        elapsed_ns,
        msg_rate_mops: done as f64 / elapsed_ns as f64 * 1e3,
        latency: LatencyNs::from_samples(lat),
        lat_kind: "round_trip",
        errors,
        truncated: done < iters,
        timer_step_ns: None,
        per_consumer: vec![answered],
        batch: 1,
        tail_poll: "direct",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist(""), Vec::<usize>::new());
    }

    /// Where a CUDA driver exists: one small point of every ring this machine can run, in both
    /// modes, with consumer counts that do and do not divide the ring's chunks.
    #[test]
    fn every_ring_on_a_gpu_delivers_every_command() {
        let gpu = match efabench_gpu::driver() {
            Err(e) if e.is_no_driver() => {
                println!("skipped: no CUDA driver");
                return;
            }
            Err(e) => panic!("CUDA driver present but unusable: {e}"),
            Ok(()) => Gpu::open(0).expect("GPU 0"),
        };
        for ring in RingKind::ALL {
            if let Some(why) = unavailable(&gpu, ring) {
                println!("{why}");
                continue;
            }
            for (shape, consumers, mode) in [
                ("1x1", 1, Mode::Blocking),
                ("1x32", 2, Mode::Nbi),
                ("4x256", 3, Mode::Nbi),
                ("4x256", 5, Mode::Nbi),
                ("1x32", 6, Mode::Blocking),
                ("8x256", 8, Mode::Nbi),
            ] {
                let mut cfg = QueueConfig::new(
                    ring,
                    shape.parse::<ProducerShape>().unwrap(),
                    consumers,
                    mode,
                );
                cfg.commands = 1 << 14;
                cfg.ring_log2 = 10;
                // Every ordering of the FIFO kernel (Libefaxx's ring has its own fences).
                for release in [Release::Store, Release::Fence, Release::None] {
                    cfg.release = release;
                    let m = measure(&gpu, &cfg).expect("measure");
                    println!("{ring} {shape} c{consumers} {mode} release {release:?}: {m:?}");
                    assert_eq!(m.errors.total(), 0, "{ring} {shape} {mode}: {:?}", m.errors);
                    assert_eq!(m.received, m.pushed);
                    if !m.truncated {
                        assert_eq!(m.pushed, m.producers * m.per_producer);
                    }
                    if ring == RingKind::Libefaxx {
                        break;
                    }
                }
            }
        }
    }
}
