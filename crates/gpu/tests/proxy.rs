//! The GPU producer of `efabench proxy` against a host consumer, in every ring placement this
//! machine has (`pinned` and `managed` everywhere with a GPU; `gdr` and `hybrid` with GDRCopy):
//! every put arrives once, in order, with its length and offsets, in nbi and blocking mode.
//! Without a CUDA driver (CI) it prints "skipped: no CUDA driver" and passes.

use efabench_gpu::proxy::{GpuProducer, Peek, PutPlan, RingMemory};
use efabench_gpu::queue::{missing, RingKind};
use efabench_gpu::Gpu;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const LOG2: u32 = 6; // 64 slots: 200 puts wrap the ring three times

#[test]
fn every_put_arrives_through_every_ring_placement() {
    match efabench_gpu::driver() {
        Err(e) if e.is_no_driver() => {
            println!("skipped: no CUDA driver");
            return;
        }
        Err(e) => panic!("CUDA driver present but unusable: {e}"),
        Ok(()) => {}
    }
    let gpu = Gpu::open(0).expect("GPU 0");
    for kind in [
        RingKind::Pinned,
        RingKind::Managed,
        RingKind::Gdr,
        RingKind::Hybrid,
    ] {
        if let Some(why) = missing(&gpu, kind) {
            println!("ring {kind}: skipped: {why}");
            let e = RingMemory::new(&gpu, kind, 1, LOG2).err().expect("refused");
            assert!(e.to_string().contains("use --ring pinned"), "{e}");
            continue;
        }
        // A fresh producer per ring: its head starts at 0, as the zeroed ring's laps expect.
        let prod = GpuProducer::new(&gpu, 200).unwrap();
        let mem = RingMemory::new(&gpu, kind, 1, LOG2).unwrap();
        assert_eq!(mem.kind_name(), kind.name());
        let mut next = 0u64;
        for blocking in [false, true] {
            let plan = PutPlan {
                puts: 200,
                size: 4096,
                dst: 1,
                rails: 1,
                split: false,
                first_rail: 0,
                blocking,
                poll_ns: 0,
                fence_each: true,
            };
            let stop = AtomicBool::new(false);
            let got = std::thread::scope(|s| {
                let consumer = s.spawn(|| {
                    let ring = mem.ring(0, LOG2);
                    let mut cmds = Vec::new();
                    let give_up = Instant::now() + Duration::from_secs(20);
                    let mut pos = next;
                    while cmds.len() < plan.puts as usize && Instant::now() < give_up {
                        match ring.peek(pos) {
                            Peek::Ready(c) => {
                                cmds.push(c);
                                pos += 1;
                                ring.publish_tail(pos);
                                ring.publish_done(pos);
                            }
                            Peek::Torn { a, b } => panic!("{kind}: torn command {a:#x} {b:#x}"),
                            Peek::Empty if stop.load(Ordering::Acquire) => break,
                            Peek::Empty => std::hint::spin_loop(),
                        }
                    }
                    cmds
                });
                let it = prod.run(&mem, LOG2, &plan);
                stop.store(true, Ordering::Release);
                let cmds = consumer.join().unwrap();
                it.unwrap_or_else(|e| panic!("{kind}: {e}"));
                cmds
            });
            assert_eq!(got.len(), 200, "{kind} blocking={blocking}: puts received");
            for (i, c) in got.iter().enumerate() {
                assert_eq!(c.len, 4096, "{kind}: put {i} length");
                assert_eq!(c.dst, 1, "{kind}: put {i} destination");
                assert_eq!(c.local_off % 4096, 0, "{kind}: put {i} local offset");
            }
            let mut offs: Vec<u64> = got.iter().map(|c| c.remote_off).collect();
            offs.sort_unstable();
            offs.dedup();
            assert_eq!(
                offs.len(),
                200,
                "{kind}: every put has its own remote offset"
            );
            next += 200;
        }
        println!("ring {kind}: 400 puts, nbi and blocking");
    }
}
