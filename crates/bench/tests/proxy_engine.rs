//! The CPU proxy of `efabench proxy` driven by a host producer instead of a GPU, on one rail
//! talking to itself (tcp on loopback and shm): command decode and honoured offsets and sizes,
//! FI_MORE batching, quiet accounting (the done count), the fence, and the errors a bad command
//! must produce (wrong rank, out of range, torn, a dead job).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use efabench_bench::harness::Strategy;
use efabench_bench::proxy::engine::{self, Feed, Lane, ProxyConfig, RailLog, Target};
use efabench_bootstrap::BootstrapError;
use efabench_fabric::{
    first_provider, load_library, Hints, HostBuffer, MemoryBuffer, Rail, RailConfig,
};
use efabench_gpu::proxy::{Command, CommandRing, RingMemory};

const LOG2: u32 = 4;

struct Loop {
    rail: Rail,
    tgt: Target,
    dst: Arc<HostBuffer>,
}

fn pattern_byte(i: usize) -> u8 {
    (i * 13 + i / 256) as u8
}

fn self_loop(provider: &str, len: usize) -> Loop {
    load_library(None).expect("libfabric must be loadable for this test");
    let mut hints = Hints::provider(provider);
    if provider == "tcp" {
        hints.node = Some("127.0.0.1".into());
    }
    let info = first_provider(&hints).expect("provider");
    let rail = Rail::open(&info, &RailConfig::default()).expect("open rail");
    let src = Arc::new(HostBuffer::new(len).unwrap());
    let dst = Arc::new(HostBuffer::new(len).unwrap());
    let bytes: Vec<u8> = (0..len).map(pattern_byte).collect();
    src.write_at(0, &bytes).unwrap();
    let region = rail.register(src).unwrap();
    let dst_id = rail.register(dst.clone()).unwrap();
    let peer = rail.insert_peer(&rail.address().unwrap()).unwrap();
    let remote = rail.remote_region(dst_id).unwrap();
    Loop {
        rail,
        tgt: Target {
            peer,
            dst_rank: 1,
            my_rank: 0,
            region,
            remote,
        },
        dst,
    }
}

fn cfg(batch: usize) -> ProxyConfig {
    ProxyConfig {
        batch,
        max_in_flight: 256,
        idle_timeout: Duration::from_secs(20),
    }
}

fn cmd(signal: u16, len: u32, local_off: u64, remote_off: u64) -> Command {
    Command {
        dst: 1,
        signal,
        len,
        remote_off,
        local_off,
        fence: false,
    }
}

/// One proxy thread over the single lane of `l` (ring positions `0..n`).
fn serve_one(
    l: &Loop,
    ring: CommandRing<'_>,
    n: u64,
    cfg: &ProxyConfig,
    failed: &AtomicBool,
    health: &dyn Fn() -> Result<(), BootstrapError>,
) -> Result<RailLog, String> {
    let lane = Lane {
        index: 0,
        rail: &l.rail,
        ring,
        feed: Feed::Ring,
        start: 0,
        expected: n,
        keep_from: 0,
        tgt: &l.tgt,
    };
    // The tests read the message the user would.
    engine::serve(&[lane], cfg, failed, health)
        .map(|mut v| v.remove(0))
        .map_err(|e| e.to_string())
}

/// A host producer pushes `cmds` while the proxy serves them on this thread.
fn serve_all(l: &Loop, cmds: &[Command], batch: usize) -> (Result<RailLog, String>, u64) {
    let mem = RingMemory::heap(1, LOG2);
    let ring = mem.ring(0, LOG2);
    let failed = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let n = cmds.len() as u64;
    let ok = || Ok(());
    // Fill the first lap before serving so that batches form.
    let first = cmds.len().min(1 << LOG2);
    for (i, c) in cmds[..first].iter().enumerate() {
        assert!(ring.host_push(i as u64, c, || false));
    }
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            for (i, c) in cmds.iter().enumerate().skip(first) {
                if !ring.host_push(i as u64, c, || !stop.load(Ordering::Relaxed)) {
                    return;
                }
            }
        });
        let r = serve_one(l, ring, n, &cfg(batch), &failed, &ok);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        (r, ring.done())
    })
}

fn batches_and_offsets(provider: &str) {
    let l = self_loop(provider, 1 << 16);
    // 40 commands of varying sizes, each to a mirrored remote offset: more than a ring lap
    // (16 slots), so credits and lap parity are exercised too.
    let cmds: Vec<Command> = (0..40u16)
        .map(|i| {
            let len = 100 + 37 * i as u32;
            let local = i as u64 * 1500;
            cmd(i, len, local, (39 - i as u64) * 1600)
        })
        .collect();
    let (r, done) = serve_all(&l, &cmds, 8);
    let log = r.unwrap_or_else(|e| panic!("{provider}: {e}"));
    assert_eq!(done, 40, "quiet accounting: every write counted done once");
    assert!(
        log.batches < 40,
        "{provider}: FI_MORE batches formed: {} batches",
        log.batches
    );
    assert!(log
        .times
        .iter()
        .all(|t| t.pop <= t.post && t.post <= t.done));
    assert_landed(&l, &cmds, provider);
}

/// Every command's bytes (the source pattern at its local offset) are at its remote offset.
fn assert_landed(l: &Loop, cmds: &[Command], what: &str) {
    let got = l.dst.to_vec(0, MemoryBuffer::len(&*l.dst)).unwrap();
    for c in cmds {
        let (from, at, n) = (c.local_off as usize, c.remote_off as usize, c.len as usize);
        let want: Vec<u8> = (from..from + n).map(pattern_byte).collect();
        assert!(
            got[at..at + n] == want[..],
            "{what}: put {} landed wrong",
            c.signal
        );
    }
}

#[test]
fn shm_batches_offsets_and_quiet() {
    batches_and_offsets("shm");
}

#[test]
fn tcp_batches_offsets_and_quiet() {
    batches_and_offsets("tcp");
}

#[test]
fn fence_drains_before_posting() {
    let l = self_loop("shm", 1 << 16);
    let mut cmds: Vec<Command> = (0..6u16)
        .map(|i| cmd(i, 64, i as u64 * 64, i as u64 * 64))
        .collect();
    let mut f = cmd(6, 64, 6 * 64, 6 * 64);
    f.fence = true;
    cmds.push(f);
    let (r, done) = serve_all(&l, &cmds, 32);
    let log = r.unwrap();
    assert_eq!(done, 7);
    assert_eq!(log.fence_drains, 1);
    // The fenced write was posted after every earlier one completed.
    let last_done = log.times[..6].iter().map(|t| t.done).max().unwrap();
    assert!(log.times[6].post >= last_done);
}

#[test]
fn bad_commands_fail_with_their_position() {
    let l = self_loop("shm", 4096);
    let mut wrong = cmd(0, 64, 0, 0);
    wrong.dst = 5;
    let (r, _) = serve_all(&l, &[cmd(0, 64, 0, 0), wrong], 1);
    let e = r.unwrap_err();
    assert!(e.contains("position 1") && e.contains("rank 5"), "{e}");

    let (r, _) = serve_all(&l, &[cmd(0, 64, 0, 4090)], 1);
    let e = r.unwrap_err();
    assert!(e.contains("position 0") && e.contains("outside"), "{e}");

    // Both halves flagged for this lap but from different positions: torn.
    let mem = RingMemory::heap(1, LOG2);
    let ring = mem.ring(0, LOG2);
    let w = efabench_gpu::proxy::encode(&cmd(0, 8, 0, 0), 0, LOG2);
    let w2 = efabench_gpu::proxy::encode(&cmd(0, 8, 0, 0), 2, LOG2);
    ring.slots[0].store(w[0], Ordering::Relaxed);
    ring.slots[1].store(w[1], Ordering::Relaxed);
    ring.slots[2].store(w2[2], Ordering::Relaxed);
    ring.slots[3].store(w2[3], Ordering::Relaxed);
    let failed = AtomicBool::new(false);
    let e = serve_one(&l, ring, 1, &cfg(4), &failed, &|| Ok(())).unwrap_err();
    assert!(e.contains("torn"), "{e}");
    assert!(
        failed.load(Ordering::Relaxed),
        "a failing proxy raises the shared flag"
    );
}

#[test]
fn dead_job_stops_the_proxy() {
    let l = self_loop("shm", 4096);
    let mem = RingMemory::heap(1, LOG2);
    let failed = AtomicBool::new(false);
    // Nothing is ever pushed: the health check (a dead peer) must end the wait.
    let e = serve_one(&l, mem.ring(0, LOG2), 1, &cfg(4), &failed, &|| {
        Err(BootstrapError::local("rank 1 died"))
    })
    .unwrap_err();
    assert!(e.contains("rank 1 died"), "{e}");
}

/// The per-GPU proxy: one thread serves three rails (three self-looped endpoints), each with
/// its own ring, while a host producer pushes into all of them; every lane's writes land and
/// are counted done on that lane's ring only.
fn one_thread_serves_every_rail(provider: &str) {
    let loops: Vec<Loop> = (0..3).map(|_| self_loop(provider, 1 << 14)).collect();
    let mem = RingMemory::heap(3, LOG2);
    let per_lane = 40u64;
    let cmds = |r: usize| -> Vec<Command> {
        (0..per_lane as u16)
            .map(|i| {
                let len = 64 + 8 * (i as u32 + r as u32);
                cmd(i, len, i as u64 * 300, (per_lane - 1 - i as u64) * 400)
            })
            .collect()
    };
    let failed = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let logs = std::thread::scope(|s| {
        let producer = s.spawn(|| {
            // Interleave the rings so that every lane has work while the others wait for credits.
            for i in 0..per_lane as usize {
                for r in 0..3 {
                    let c = cmds(r)[i];
                    if !mem
                        .ring(r, LOG2)
                        .host_push(i as u64, &c, || !stop.load(Ordering::Relaxed))
                    {
                        return;
                    }
                }
            }
        });
        let lanes: Vec<Lane> = loops
            .iter()
            .enumerate()
            .map(|(r, l)| Lane {
                index: r,
                rail: &l.rail,
                ring: mem.ring(r, LOG2),
                feed: Feed::Ring,
                start: 0,
                expected: per_lane,
                keep_from: per_lane / 2,
                tgt: &l.tgt,
            })
            .collect();
        let logs = engine::serve(&lanes, &cfg(8), &failed, &|| Ok(()));
        stop.store(true, Ordering::Relaxed);
        producer.join().unwrap();
        logs
    })
    .unwrap_or_else(|e| panic!("{provider}: {e}"));
    assert_eq!(logs.len(), 3);
    for (r, (log, l)) in logs.iter().zip(&loops).enumerate() {
        assert_eq!(log.commands, per_lane, "lane {r}");
        assert_eq!(
            log.times.len() as u64,
            per_lane / 2,
            "stamps kept from keep_from"
        );
        assert_eq!(mem.ring(r, LOG2).done(), per_lane, "lane {r} done count");
        assert_landed(l, &cmds(r), &format!("{provider} lane {r}"));
    }
}

#[test]
fn shm_one_thread_serves_every_rail() {
    one_thread_serves_every_rail("shm");
}

#[test]
fn tcp_one_thread_serves_every_rail() {
    one_thread_serves_every_rail("tcp");
}

#[test]
fn schedule_follows_the_rail_split() {
    let s = engine::schedule(3, 1 << 20, 2, Strategy::Split, 1);
    assert!(s.iter().all(|p| p.len() == 2));
    assert_eq!(s[0][0].1.len + s[0][1].1.len, 1 << 20);
    assert_eq!(s[1][1].1.remote_off, (1 << 20) + s[1][0].1.len as u64);
    let s = engine::schedule(3, 64, 2, Strategy::RoundRobin, 1);
    assert_eq!(s.iter().map(|p| p[0].0).collect::<Vec<_>>(), vec![0, 1, 0]);
    assert!(s
        .iter()
        .all(|p| p[0].1.signal as u64 * 64 == p[0].1.local_off));
}
