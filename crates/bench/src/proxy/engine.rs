//! The CPU proxy itself, the host producer that stands in for the GPU, and the target's side:
//! everything of `efabench proxy` that posts or waits for fabric operations, in safe code over a
//! [`Rail`] and a [`CommandRing`], so tests drive it without a GPU.
//!
//! * [`serve`] is one proxy thread over one rail (`--proxy-threads rail`) or over every rail of
//!   its GPU (`--proxy-threads gpu`); per rail ([`Lane`]) it pops every ready command of the
//!   ring (up to `batch` at once), posts each as `fi_writemsg` with remote CQ data (the put's signal) and
//!   `FI_MORE` on all but the last of a batch, publishes how far it consumed (the producer's
//!   credits) and, as completions arrive, how many writes completed (what `quiet` waits for).
//!   Writes carry `FI_DELIVERY_COMPLETE`, so a local completion means the bytes are in the
//!   target's memory: `quiet` can then return on local state alone, without a round trip from
//!   the target (the target's CQ-data counts are used to verify, not to complete). It honours
//!   each command's offsets and length, keeps up to `max_in_flight` writes outstanding, and
//!   drains its writes before a command that carries the fence bit.
//! * [`schedule`] turns a put into its commands with the mesh's [`Router`] (each put starting on
//!   the rail after the previous put's last stripe), the same schedule the kernel applies.
//! * [`host_iteration`] pushes one iteration's commands from a CPU thread and waits in quiet the
//!   way the kernel does (`--producer host`).
//! * [`await_puts`] is the target: it counts every put's CQ data over all rails and notes when
//!   each put's last stripe arrived.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use efabench_bootstrap::BootstrapError;
use efabench_fabric::{Completion, CqData, Flags, Op, Peer, Rail, RegionId, RemoteRegion};
use efabench_gpu::proxy::{realtime_ns, Command, CommandRing, Peek};

use super::error::ProxyError;
use crate::harness::Strategy;
use crate::mesh::{Message, Router};

/// Where one proxy writes: the peer on this rail, the local region and the peer's region.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub peer: Peer,
    pub dst_rank: u16,
    pub my_rank: u16,
    pub region: RegionId,
    pub remote: RemoteRegion,
}

/// How a proxy thread posts.
#[derive(Clone, Copy, Debug)]
pub struct ProxyConfig {
    /// Most commands posted as one `FI_MORE` batch.
    pub batch: usize,
    /// Most writes in flight on this rail.
    pub max_in_flight: usize,
    /// Longest the proxy waits without progress before it gives up.
    pub idle_timeout: Duration,
}

/// Where commands come from.
#[derive(Clone, Copy)]
pub enum Feed<'a> {
    /// The ring (the GPU or a host producer pushes).
    Ring,
    /// The CPU baseline: the proxy thread itself posts `per_iter` commands per iteration once
    /// `go` exceeds that iteration's number (no ring, no producer).
    Direct {
        per_iter: &'a [Command],
        go: &'a AtomicU64,
    },
}

/// Host timestamps (`CLOCK_REALTIME` ns) of one command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdTimes {
    pub signal: u16,
    pub pop: u64,
    pub post: u64,
    pub done: u64,
}

/// What one proxy thread did in one point.
#[derive(Clone, Debug, Default)]
pub struct RailLog {
    /// Stamps of commands `keep_from..expected` (the breakdown covers the last iterations only,
    /// so memory stays bounded however many iterations run).
    pub times: Vec<CmdTimes>,
    pub keep_from: u64,
    /// Batches posted (commands / batches = the mean `FI_MORE` batch).
    pub batches: u64,
    pub fence_drains: u64,
    pub max_in_flight: u64,
    /// Commands posted.
    pub commands: u64,
}

/// One rail's share of a point, as a proxy thread serves it: the rail, its ring (or the CPU
/// baseline's list), where its writes go, and which positions of the ring belong to the point
/// (`start..start + expected`; stamps are kept from `keep_from` on).
#[derive(Clone, Copy)]
pub struct Lane<'a> {
    /// Index of the rail in the group (for messages).
    pub index: usize,
    pub rail: &'a Rail,
    pub ring: CommandRing<'a>,
    pub feed: Feed<'a>,
    pub start: u64,
    pub expected: u64,
    pub keep_from: u64,
    pub tgt: &'a Target,
}

/// Runs one proxy thread over `lanes` until every lane's `expected` commands have completed:
/// one lane is the per-rail proxy (`--proxy-threads rail`), several the per-GPU proxy that
/// serves every rail of its GPU from one thread (`--proxy-threads gpu`), visiting the lanes in
/// turn and never waiting on one while another has work. Returns each lane's log, in order.
/// `failed` is raised by whoever fails first (this thread, another proxy or the producer) so the
/// others stop waiting; `health` reports a dead peer or an aborted job.
pub fn serve(
    lanes: &[Lane<'_>],
    cfg: &ProxyConfig,
    failed: &AtomicBool,
    health: &dyn Fn() -> Result<(), BootstrapError>,
) -> Result<Vec<RailLog>, ProxyError> {
    let r = serve_inner(lanes, cfg, failed, health);
    if r.is_err() {
        failed.store(true, Ordering::Release);
    }
    r
}

/// What a proxy thread keeps per lane between visits.
struct LaneState {
    log: RailLog,
    consumed: u64,
    done: u64,
    inflight: u64,
    /// The ring position whose fence was last counted (a fence is counted once however many
    /// visits it waits).
    fence_seen: u64,
}

fn serve_inner(
    lanes: &[Lane<'_>],
    cfg: &ProxyConfig,
    failed: &AtomicBool,
    health: &dyn Fn() -> Result<(), BootstrapError>,
) -> Result<Vec<RailLog>, ProxyError> {
    let mut states: Vec<LaneState> = lanes
        .iter()
        .map(|l| {
            let keep_from = l.keep_from.min(l.expected);
            LaneState {
                log: RailLog {
                    times: vec![CmdTimes::default(); (l.expected - keep_from) as usize],
                    keep_from,
                    ..RailLog::default()
                },
                consumed: 0,
                done: 0,
                inflight: 0,
                fence_seen: u64::MAX,
            }
        })
        .collect();
    let mut batch: Vec<Command> = Vec::with_capacity(cfg.batch);
    let mut out = [Completion::default(); 64];
    let mut idle = 0u64;
    let mut last_progress = Instant::now();
    while lanes
        .iter()
        .zip(&states)
        .any(|(l, st)| st.done < l.expected)
    {
        let mut progress = false;
        for (lane, st) in lanes.iter().zip(states.iter_mut()) {
            if st.done < lane.expected {
                progress |= visit(lane, st, cfg, &mut batch, &mut out, health)?;
            }
        }
        if progress {
            idle = 0;
            last_progress = Instant::now();
            continue;
        }
        idle += 1;
        if idle % 1024 == 0 {
            if failed.load(Ordering::Acquire) {
                return Err(ProxyError::Stopped);
            }
            health()?;
            // Waiting for the producer between iterations is normal; no progress at all for the
            // idle timeout is not.
            if last_progress.elapsed() > cfg.idle_timeout {
                let (c, d, e) = lanes.iter().zip(&states).fold((0, 0, 0), |a, (l, st)| {
                    (a.0 + st.consumed, a.1 + st.done, a.2 + l.expected)
                });
                return Err(ProxyError::Idle {
                    secs: cfg.idle_timeout.as_secs_f64(),
                    consumed: c,
                    expected: e,
                    completed: d,
                });
            }
            if idle > 64 * 1024 {
                std::thread::yield_now();
            }
        }
    }
    Ok(states.into_iter().map(|st| st.log).collect())
}

/// One visit of a lane: pops what is ready (up to a batch), posts it, publishes the tail, polls
/// the rail's completions and publishes the done count. Returns whether anything happened.
fn visit(
    lane: &Lane<'_>,
    st: &mut LaneState,
    cfg: &ProxyConfig,
    batch: &mut Vec<Command>,
    out: &mut [Completion],
    health: &dyn Fn() -> Result<(), BootstrapError>,
) -> Result<bool, ProxyError> {
    let (ring, tgt, start, expected) = (lane.ring, lane.tgt, lane.start, lane.expected);
    let rail_no = lane.index;
    let keep_from = st.log.keep_from;
    let mut dummy = CmdTimes::default();
    let data = |signal: u16| {
        CqData {
            source: tgt.my_rank,
            tag: signal,
        }
        .to_u64()
    };
    batch.clear();
    while st.consumed + (batch.len() as u64) < expected
        && batch.len() < cfg.batch
        && st.inflight + (batch.len() as u64) < cfg.max_in_flight as u64
    {
        let idx = st.consumed + batch.len() as u64;
        let cmd = match lane.feed {
            Feed::Ring => match ring.peek(start + idx) {
                Peek::Empty => break,
                Peek::Ready(c) => c,
                Peek::Torn { a, b } => {
                    return Err(ProxyError::Torn {
                        rail: rail_no,
                        pos: start + idx,
                        a,
                        b,
                    })
                }
            },
            Feed::Direct { per_iter, go } => {
                let n = per_iter.len() as u64;
                if go.load(Ordering::Acquire) <= idx / n {
                    break;
                }
                per_iter[(idx % n) as usize]
            }
        };
        if cmd.fence && (st.inflight > 0 || !batch.is_empty()) {
            if st.fence_seen != idx {
                st.fence_seen = idx;
                st.log.fence_drains += 1;
            }
            break;
        }
        if cmd.dst != tgt.dst_rank {
            return Err(ProxyError::WrongRank {
                rail: rail_no,
                pos: start + idx,
                dst: cmd.dst,
                ours: tgt.dst_rank,
            });
        }
        let t = stamp(&mut st.log.times, keep_from, idx, &mut dummy);
        t.pop = realtime_ns();
        t.signal = cmd.signal;
        batch.push(cmd);
    }
    let n = batch.len();
    for (i, cmd) in batch.iter().enumerate() {
        let idx = st.consumed + i as u64;
        lane.rail
            .post(Op::Write {
                peer: tgt.peer,
                local: tgt.region.range(cmd.local_off as usize, cmd.len as usize),
                remote: tgt.remote.at(cmd.remote_off),
                data: Some(data(cmd.signal)),
                flags: Flags::DELIVERY_COMPLETE.more_if(i + 1 < n),
                ctx: idx,
            })
            .map_err(|source| ProxyError::Post {
                rail: rail_no,
                pos: start + idx,
                len: cmd.len,
                from: cmd.local_off,
                to: cmd.remote_off,
                source,
            })?;
        stamp(&mut st.log.times, keep_from, idx, &mut dummy).post = realtime_ns();
    }
    if n > 0 {
        st.consumed += n as u64;
        st.inflight += n as u64;
        st.log.commands += n as u64;
        st.log.batches += 1;
        st.log.max_in_flight = st.log.max_in_flight.max(st.inflight);
        ring.publish_tail(start + st.consumed);
    }
    let k = lane.rail.poll(out).map_err(|source| ProxyError::Write {
        rail: rail_no,
        rank: tgt.dst_rank,
        // A dead peer is the likelier cause: say so when the job knows it.
        job: health().err().map(Box::new),
        source,
    })?;
    for c in &out[..k] {
        if c.context == Completion::REMOTE_CQ_DATA {
            continue;
        }
        if c.context >= st.consumed {
            return Err(ProxyError::UnknownContext {
                rail: rail_no,
                context: c.context,
            });
        }
        stamp(&mut st.log.times, keep_from, c.context, &mut dummy).done = realtime_ns();
        st.done += 1;
        st.inflight -= 1;
    }
    if k > 0 {
        ring.publish_done(start + st.done);
    }
    Ok(n > 0 || k > 0)
}

/// The stamps of command `idx`, or a scratch entry when it is before `keep_from`.
fn stamp<'a>(
    times: &'a mut [CmdTimes],
    keep_from: u64,
    idx: u64,
    dummy: &'a mut CmdTimes,
) -> &'a mut CmdTimes {
    match idx.checked_sub(keep_from) {
        Some(i) => &mut times[i as usize],
        None => dummy,
    }
}

/// The commands of one iteration: put `p` (`size` bytes at local and remote offset `p * size`,
/// signal `p`) split over `rails` by the rail group's schedule, the first rail rotating from 0
/// (what `kernels/proxy.cu` does with `first_rail = 0`). Returns per put its (rail, command)s.
pub fn schedule(
    puts: u32,
    size: u64,
    rails: usize,
    strategy: Strategy,
    dst: u16,
) -> Vec<Vec<(usize, Command)>> {
    // Each put starts on the rail after the previous put's last stripe: put `p` is message
    // `p * stripes` of the router's stream.
    let router = Router::new(strategy, rails);
    let per_put = router.stripe_count(size as usize) as u64;
    (0..puts)
        .map(|p| {
            let m = Message {
                n: u64::from(p) * per_put,
                pair: (0, 0),
                size: size as usize,
            };
            router
                .route(m)
                .stripes()
                .iter()
                .map(|s| {
                    let base = p as u64 * size + s.off as u64;
                    (
                        s.rail,
                        Command {
                            dst,
                            signal: p as u16,
                            len: s.len as u32,
                            remote_off: base,
                            local_off: base,
                            fence: false,
                        },
                    )
                })
                .collect()
        })
        .collect()
}

/// Host timestamps of one host-produced iteration: per put, push start and quiet returned.
#[derive(Clone, Debug, Default)]
pub struct HostIteration {
    pub push: Vec<u64>,
    pub quiet: Vec<u64>,
    pub t0: u64,
    pub t1: u64,
}

/// Pushes one iteration from this thread (`heads`: the next position of each ring, advanced)
/// and waits in quiet after each put (`blocking`) or once at the end: the GPU kernel's loop on
/// the CPU. Fails when a proxy failed or `health` does.
pub fn host_iteration(
    rings: &[CommandRing<'_>],
    heads: &mut [u64],
    sched: &[Vec<(usize, Command)>],
    blocking: bool,
    failed: &AtomicBool,
    health: &dyn Fn() -> Result<(), BootstrapError>,
) -> Result<HostIteration, ProxyError> {
    let mut it = HostIteration {
        t0: realtime_ns(),
        ..HostIteration::default()
    };
    let mut spins = 0u64;
    let mut check = || -> Result<(), ProxyError> {
        spins += 1;
        if spins % 1024 == 0 {
            if failed.load(Ordering::Acquire) {
                return Err(ProxyError::ProducerStopped);
            }
            health()?;
        }
        Ok(())
    };
    let quiet = |heads: &[u64], check: &mut dyn FnMut() -> Result<(), ProxyError>| {
        for (r, ring) in rings.iter().enumerate() {
            while ring.done() < heads[r] {
                check()?;
                std::hint::spin_loop();
            }
        }
        Ok::<(), ProxyError>(())
    };
    for put in sched {
        it.push.push(realtime_ns());
        for (r, cmd) in put {
            let mut err = None;
            let ok = rings[*r].host_push(heads[*r], cmd, || match check() {
                Ok(()) => true,
                Err(e) => {
                    err = Some(e);
                    false
                }
            });
            if !ok {
                return Err(err.unwrap_or(ProxyError::NoCredit));
            }
            heads[*r] += 1;
        }
        if blocking {
            quiet(heads, &mut check)?;
            it.quiet.push(realtime_ns());
        }
    }
    quiet(heads, &mut check)?;
    it.t1 = realtime_ns();
    if !blocking {
        it.quiet = vec![it.t1; sched.len()];
    }
    Ok(it)
}

/// The target's side of one iteration: waits until every put's stripes delivered their CQ data
/// (signal = put index) over `rails`, noting when each put's last stripe arrived. Returns the
/// number of unexpected CQ data (a signal out of range, from the wrong rank, or one stripe too
/// many). Fails when `deadline` passes or `health` does.
pub fn await_puts(
    rails: &[Rail],
    stripes: &[u32],
    from: u16,
    arrive: &mut [u64],
    timeout: Duration,
    health: &dyn Fn() -> Result<(), BootstrapError>,
) -> Result<u64, ProxyError> {
    let mut got = vec![0u32; stripes.len()];
    let mut missing: u64 = stripes.iter().map(|&s| s as u64).sum();
    let mut errors = 0u64;
    let mut out = [Completion::default(); 64];
    let mut spins = 0u64;
    let start = Instant::now();
    while missing > 0 {
        let mut any = false;
        for rail in rails {
            let k = rail.poll(&mut out).map_err(ProxyError::TargetPoll)?;
            for c in &out[..k] {
                let Some(d) = c.remote_data() else { continue };
                any = true;
                let d = CqData::from_u64(d);
                let p = d.tag as usize;
                if d.source != from || p >= stripes.len() || got[p] >= stripes[p] {
                    errors += 1;
                    continue;
                }
                got[p] += 1;
                missing -= 1;
                if got[p] == stripes[p] {
                    arrive[p] = realtime_ns();
                }
            }
        }
        if !any {
            spins += 1;
            if spins % 1024 == 0 {
                health()?;
                if start.elapsed() > timeout {
                    return Err(ProxyError::NeverArrived {
                        missing,
                        secs: timeout.as_secs_f64(),
                    });
                }
            }
        }
    }
    Ok(errors)
}
