//! The host side of the command rings, with a host thread standing in for the GPU: slot layout,
//! lap parity over many wrap-arounds, several consumers, and verification that catches a dropped,
//! doubled or torn command. (The benchmark's tests run one small point of every ring on a GPU.)

use efabench_gpu::queue::{
    consume_fifo, consume_vyukov, EndSignal, Errors, FifoView, Geometry, Verifier, VyukovView,
    MAX_CONSUMERS, TAIL_STRIDE,
};
use std::sync::atomic::{AtomicU64, Ordering};

const SALT: u64 = 0x51;

fn words(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

/// A FIFO ring in host memory, for host-only models of the protocol.
struct HostRing {
    g: Geometry,
    slots: Vec<AtomicU64>,
    tails: Vec<AtomicU64>,
}

impl HostRing {
    /// A zeroed ring whose consumer tails start at each consumer's first position.
    fn new(g: Geometry) -> HostRing {
        let tails = words(TAIL_STRIDE * MAX_CONSUMERS);
        for c in 0..g.consumers {
            tails[c as usize * TAIL_STRIDE].store(g.first_owned(c), Ordering::Relaxed);
        }
        HostRing {
            g,
            slots: words(2 * g.nslots() as usize),
            tails,
        }
    }

    fn view(&self) -> FifoView<'_> {
        FifoView {
            slots: &self.slots,
            tails: &self.tails,
            geometry: self.g,
            tails_write_combined: false,
        }
    }

    /// Runs every consumer while `produce` pushes (it returns the final head), then adds up
    /// what they found against what each producer says it pushed: the errors and the commands
    /// consumed.
    fn run(
        &self,
        v: &Verifier,
        end: &EndSignal,
        pushed: &[u32],
        produce: impl FnOnce(&FifoView<'_>) -> u64,
    ) -> (Errors, u64) {
        let view = self.view();
        let reports = std::thread::scope(|s| {
            let hs: Vec<_> = (0..self.g.consumers)
                .map(|c| {
                    let view = &view;
                    s.spawn(move || consume_fifo(view, c, v, end))
                })
                .collect();
            end.finish(produce(&view));
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        let mut e = Errors::default();
        for r in &reports {
            e.duplicated += r.duplicated;
            e.torn += r.torn;
            e.out_of_range += r.out_of_range;
        }
        v.finish(pushed, &mut e);
        // Every consumer published a tail at its end.
        for c in 0..self.g.consumers {
            assert!(view.tail(c) >= self.g.first_owned(c));
        }
        (e, reports.iter().map(|r| r.consumed).sum())
    }
}

/// Waits, as a producer does, until the slot of `pos` is free: the consumer of its previous
/// lap has passed it.
fn wait_credit(view: &FifoView<'_>, pos: u64) {
    let n = view.geometry.nslots();
    if pos >= n {
        while view.tail(view.geometry.owner(pos - n)) <= pos - n {
            std::thread::yield_now();
        }
    }
}

/// What the host producer does to one command.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Never pushed (but the producer counts it as pushed).
    Drop,
    /// Pushed twice.
    Double,
    /// The flag word is new but the pattern word is from another command.
    Tear,
}

/// Pushes `per_producer` commands of each of `producers` producers (interleaved as warps would)
/// into the ring, waiting for credits like the GPU does, with `fault` applied to (producer 1,
/// seq 5). Returns the errors the consumers found and how many commands they took.
fn run_fifo(
    nslots_log2: u32,
    consumers: u32,
    producers: u64,
    per_producer: u64,
    fault: Fault,
) -> (Errors, u64) {
    let ring = HostRing::new(Geometry::new(nslots_log2, 2, consumers).unwrap());
    let v = Verifier::new(producers, per_producer, SALT, consumers > 1);
    let end = EndSignal::default();
    let pushed = vec![per_producer as u32; producers as usize];
    ring.run(&v, &end, &pushed, |view| {
        let mut pos = 0u64;
        let n = view.geometry.nslots();
        let mut push = |seq: u64, p: u64, tear: bool| {
            wait_credit(view, pos);
            view.host_push(pos, seq, p, SALT);
            if tear {
                let i = (pos & (n - 1)) as usize;
                view.slots[2 * i].store(
                    efabench_gpu::queue::command_fst(seq + 1, p, SALT),
                    Ordering::Relaxed,
                );
            }
            pos += 1;
        };
        for seq in 0..per_producer {
            for p in 0..producers {
                let hit = p == 1 && seq == 5;
                match fault {
                    Fault::Drop if hit => {}
                    Fault::Double if hit => {
                        push(seq, p, false);
                        push(seq, p, false);
                    }
                    Fault::Tear if hit => push(seq, p, true),
                    _ => push(seq, p, false),
                }
            }
        }
        pos
    })
}

#[test]
fn every_command_arrives_once_across_many_laps() {
    for consumers in 1..=4 {
        // 16 slots, 3 x 200 commands: 37 laps, so the parity flips many times.
        let (e, consumed) = run_fifo(4, consumers, 3, 200, Fault::None);
        assert_eq!(e, Errors::default(), "{consumers} consumers");
        assert_eq!(consumed, 600);
    }
}

#[test]
fn a_dropped_command_is_lost() {
    for consumers in [1, 3] {
        let (e, consumed) = run_fifo(4, consumers, 3, 20, Fault::Drop);
        assert_eq!(e.lost, 1, "{e:?}");
        assert_eq!(e.total(), 1);
        assert_eq!(consumed, 59);
    }
}

#[test]
fn a_doubled_command_is_a_duplicate() {
    for consumers in [1, 2] {
        let (e, consumed) = run_fifo(4, consumers, 3, 20, Fault::Double);
        assert_eq!(e.duplicated, 1, "{e:?}");
        assert_eq!(e.total(), 1);
        assert_eq!(consumed, 61);
    }
}

#[test]
fn a_torn_slot_is_caught() {
    let (e, _) = run_fifo(5, 2, 4, 20, Fault::Tear);
    assert_eq!((e.torn, e.total()), (1, 1), "{e:?}");
}

#[test]
fn stale_slots_of_the_previous_lap_are_not_consumed() {
    // One lap written, the consumer takes it; the same contents left in place must not be taken
    // again on the next lap (the parity differs), so the consumer stops at the final head.
    let g = Geometry::new(4, 2, 1).unwrap();
    let slots = words(32);
    let tails = words(TAIL_STRIDE);
    let view = FifoView {
        slots: &slots,
        tails: &tails,
        geometry: g,
        tails_write_combined: false,
    };
    let v = Verifier::new(16, 2, SALT, false);
    for p in 0..16 {
        view.host_push(p, 0, p, SALT);
    }
    let end = EndSignal::default();
    end.finish(16);
    let r = consume_fifo(&view, 0, &v, &end);
    assert_eq!(r.consumed, 16);
    assert_eq!(view.tail(0), 16);
    // Second lap: position 16 rewrites slot 0; slot 1 still holds lap 0's command, whose flag
    // must not match lap 1's parity, so a consumer at position 17 waits instead of re-reading it.
    view.host_push(16, 1, 0, SALT);
    assert_eq!(
        slots[1].load(Ordering::Relaxed) >> 63,
        efabench_gpu::queue::lap_flag(16, 4)
    );
    assert_ne!(
        slots[3].load(Ordering::Relaxed) >> 63,
        efabench_gpu::queue::lap_flag(17, 4),
        "stale slot must not look written for lap 1"
    );
}

/// The first position at or after `from` that consumer `c` owns.
fn owned_from(g: Geometry, c: u32, from: u64) -> u64 {
    let mut p = g.first_owned(c);
    while p < from {
        p = g.next_owned(p);
    }
    p
}

/// One host producer writes positions `0..total` in order, except those in `late`: each of these
/// is held back until the ring cannot go on without it (the position a lap later needs its slot)
/// or the end, and then written only once every consumer has gone as far as it can, that is,
/// waits at or beyond it. A consumer that took a command two laps old from the held-back slot
/// shows as a duplicate (or torn) command and a lost one.
fn run_with_late_writes(
    nslots_log2: u32,
    chunk_log2: u32,
    consumers: u32,
    total: u64,
    late: &[u64],
) -> (Errors, u64) {
    let g = Geometry::new(nslots_log2, chunk_log2, consumers).unwrap();
    let ring = HostRing::new(g);
    // One producer, command `pos` has sequence `pos`.
    let v = Verifier::new(1, total, SALT, consumers > 1);
    let end = EndSignal::yielding();
    ring.run(&v, &end, &[total as u32], |view| {
        let write = |pos: u64| {
            wait_credit(view, pos);
            view.host_push(pos, pos, 0, SALT);
        };
        let settle_then_write = |pos: u64| {
            for c in 0..consumers {
                let stop = owned_from(g, c, pos);
                while view.tail(c) < stop {
                    std::thread::yield_now();
                }
            }
            write(pos);
        };
        let mut held: Vec<u64> = vec![];
        for pos in 0..total {
            if let Some(i) = held.iter().position(|&l| l + g.nslots() == pos) {
                settle_then_write(held.remove(i));
            }
            if late.contains(&pos) {
                held.push(pos);
            } else {
                write(pos);
            }
        }
        for l in held {
            settle_then_write(l);
        }
        total
    })
}

#[test]
fn no_consumer_count_or_chunking_takes_a_stale_slot_from_a_late_writer() {
    let mut runs = 0;
    for nslots_log2 in [4u32, 5] {
        let n = 1u64 << nslots_log2;
        for chunk_log2 in 0..=3u32 {
            for consumers in 1..=MAX_CONSUMERS as u32 {
                if Geometry::new(nslots_log2, chunk_log2, consumers).is_err() {
                    // Fewer chunks than consumers: refused, never run.
                    assert!(n >> chunk_log2 < consumers as u64);
                    continue;
                }
                // Late writers in the first lap (the slot is still zero), in a later lap (it
                // holds a command two laps old), at a chunk's start and inside one, and two at
                // once.
                for late in [
                    vec![n],
                    vec![n + 1],
                    vec![1],
                    vec![2 * n + 3],
                    vec![n + 2, 2 * n + 5],
                ] {
                    let total = 4 * n;
                    let (e, consumed) =
                        run_with_late_writes(nslots_log2, chunk_log2, consumers, total, &late);
                    assert_eq!(
                        (e, consumed),
                        (Errors::default(), total),
                        "2^{nslots_log2} slots, chunks of 2^{chunk_log2}, {consumers} consumers, \
                         late {late:?}"
                    );
                    runs += 1;
                }
            }
        }
    }
    assert!(runs > 100, "{runs}");
}

#[test]
fn many_producers_claiming_out_of_order_lose_and_double_nothing() {
    // Producers claim positions from a shared head and write them after a pseudo-random pause,
    // as warps of a GPU do, for every consumer count on a small ring (many laps).
    for consumers in 1..=MAX_CONSUMERS as u32 {
        let g = Geometry::for_run(5, consumers).unwrap();
        let ring = HostRing::new(g);
        let (producers, per) = (3u64, 200u64);
        let v = Verifier::new(producers, per, SALT, true);
        let end = EndSignal::yielding();
        let head = AtomicU64::new(0);
        let (e, consumed) = ring.run(&v, &end, &[per as u32; 3], |view| {
            std::thread::scope(|s| {
                for p in 0..producers {
                    let head = &head;
                    s.spawn(move || {
                        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ p;
                        for seq in 0..per {
                            let pos = head.fetch_add(1, Ordering::Relaxed);
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            for _ in 0..x % 8 {
                                std::thread::yield_now();
                            }
                            wait_credit(view, pos);
                            view.host_push(pos, seq, p, SALT);
                        }
                    });
                }
            });
            head.load(Ordering::Relaxed)
        });
        assert_eq!(e, Errors::default(), "{consumers} consumers, {g:?}");
        assert_eq!(consumed, producers * per);
    }
}

#[test]
fn libefaxx_ring_delivers_everything_to_several_consumers() {
    let mask = 7u64;
    let cells = words(3 * 8);
    let ctrl = words(64);
    let view = VyukovView {
        cells: &cells,
        ctrl: &ctrl,
        mask,
    };
    view.init();
    let (producers, per) = (4u64, 50u64);
    let v = Verifier::new(producers, per, SALT, true);
    let end = EndSignal::default();
    let reports = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let (view, v, end) = (&view, &v, &end);
                s.spawn(move || consume_vyukov(view, v, end))
            })
            .collect();
        let ps: Vec<_> = (0..producers)
            .map(|p| {
                let view = &view;
                s.spawn(move || {
                    for seq in 0..per {
                        let fst = efabench_gpu::queue::command_fst(seq, p, SALT);
                        let snd = efabench_gpu::queue::command_snd(seq, p, 0, 63);
                        while !view.push(fst, snd) {
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        for p in ps {
            p.join().unwrap();
        }
        end.finish(u64::MAX);
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let mut e = Errors::default();
    for r in &reports {
        e.duplicated += r.duplicated;
        e.torn += r.torn;
    }
    v.finish(&[per as u32; 4], &mut e);
    assert_eq!(e, Errors::default());
    assert_eq!(reports.iter().map(|r| r.consumed).sum::<u64>(), 200);
    assert_eq!(
        ctrl[48].load(Ordering::Relaxed),
        200,
        "completed counts every pop"
    );
}
