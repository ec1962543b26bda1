//! One phase (dispatch or combine) on one rank: posting its writes by the chosen initiator and
//! counting what arrives, with the timestamps of its stage breakdown.
//!
//! # Arrival
//! EFA orders no RMA writes, so nothing here waits for "the last write": every write carries 32
//! bits of remote CQ data ([`cq_data`]: kind, iteration mod 16, source rank, channel) and every
//! source ends a phase with one count signal per destination: a write of `(messages, writes)` per
//! channel into the destination's count region (DeepEP's per-expert count) whose CQ data carries
//! the number of writes the source sent that destination. A source is complete when its signal
//! arrived and that many writes were counted; the phase is complete when every source is and this
//! rank's own writes completed locally. After the phase (untimed), the count blocks are read and
//! every channel's messages are checked against the routing and its writes against the CQ data
//! counted (a mismatch is an error, not a hang).
//!
//! # Initiators
//! * `cpu`: this thread posts the writes, one destination after another (starting after itself,
//!   so ranks do not all start with rank 0), merging a destination's consecutive messages of one
//!   channel into one write ([`crate::ep::layout::coalesce`]), each destination's signal right
//!   after its writes (counting makes waiting for them unnecessary).
//! * ring: a producer (GPU kernel, or a CPU thread in its place) pushes one command per message
//!   into the command ring of `efabench proxy`, then one signal per destination (no quiet before
//!   them: arrivals are counted), then waits in quiet; this thread is the proxy: it pops what is ready, posts it (merging a put into
//!   the write before it when its bytes follow for the same destination and channel, unless
//!   `--no-merge`), and publishes how far it consumed (credits) and how many commands completed
//!   (what quiet waits for).
//!
//! # Stages
//! A [`Clock`] charges every instant of a phase on this thread to one stage (launch, post, copy,
//! feed, quiet, network, arrival, settle), so the stages add up to the phase's time.
//!
//! A message to this rank itself is a local copy, counted as arrived at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use efabench_gpu::proxy::{realtime_ns, Command, CommandRing, Peek};

use crate::ep::layout::{writes_to, PhaseLayout, Put};
use crate::error::BenchError;
use crate::harness::Strategy;
use crate::mesh::{on_rail, Completion, Mesh, Message, Payload, Remote, Request, Router, Verb};

mod arrivals;
mod clock;
mod codec;
mod proxy;
#[cfg(test)]
mod tests;

use arrivals::*;
pub use clock::*;
pub use codec::*;
pub use proxy::*;

/// The pieces of a rank a phase runs on.
pub struct Exchange<'a> {
    pub mesh: &'a mut Mesh,
    pub send: &'a Payload,
    pub recv: &'a Payload,
    pub me: u32,
    pub world: u32,
    pub timeout: Duration,
    pub health: &'a dyn Fn() -> Result<(), BenchError>,
    /// Filled when a phase ends: per source, phase start to that source's completion (ns).
    pub arrival_ns: Vec<u64>,
}

/// The rail a write to `dst` on `channel` takes: ep sends whole puts, channel after channel, over
/// the rails in turn (the router's round-robin, a channel being a message of the pair's stream).
fn rail_of(me: u32, p: &Put, rails: usize) -> usize {
    let m = Message {
        n: u64::from(p.index),
        pair: (me, p.dst),
        size: p.len,
    };
    Router::new(Strategy::RoundRobin, rails).first_rail(m)
}

impl<'a> Exchange<'a> {
    /// Every source's count block, `[src][channel]` of (messages, writes).
    fn read_blocks(&self, layout: &PhaseLayout) -> Result<Vec<Vec<(u32, u32)>>, BenchError> {
        let c = layout.channels;
        let mut b = vec![0u8; self.world as usize * c * 8];
        self.recv
            .read_at(layout.counts_recv, &mut b)
            .map_err(|e| BenchError::context("reading the count signals", e))?;
        Ok(b.chunks(c * 8)
            .map(|blk| {
                blk.chunks(8)
                    .map(|x| {
                        (
                            u32::from_le_bytes([x[0], x[1], x[2], x[3]]),
                            u32::from_le_bytes([x[4], x[5], x[6], x[7]]),
                        )
                    })
                    .collect()
            })
            .collect())
    }

    /// After a phase (untimed): the count blocks against the routing and the CQ data counted.
    fn check_counts(&self, arr: &Arrivals, layout: &PhaseLayout) -> Result<u64, BenchError> {
        let blocks = self.read_blocks(layout)?;
        Ok(arr.check_blocks(self.me as usize, &blocks, &layout.expect))
    }

    fn post(
        &mut self,
        p: &Put,
        data: u64,
        clock: &mut Clock,
        times: &mut PhaseTimes,
    ) -> Result<(), BenchError> {
        let rail = rail_of(self.me, p, self.mesh.rails());
        let was = clock.enter(Stage::Post);
        let r = self.mesh.submit(Request {
            op: Verb::Write,
            peer: Remote::Rank(p.dst),
            local: p.local_off,
            remote: p.remote_off,
            route: &on_rail(rail, p.len),
            data: Some(data),
            completion: Completion::Counted,
        });
        clock.enter(was);
        r?;
        times.writes += 1;
        Ok(())
    }

    fn copy_local(&mut self, p: &Put, clock: &mut Clock) -> Result<(), BenchError> {
        let was = clock.enter(Stage::Copy);
        // Queued: the phase's settle waits for every one of them.
        let r = efabench_gpu::buffer::queue_copy_between(
            &***self.send,
            p.local_off,
            &***self.recv,
            p.remote_off,
            p.len,
        )
        .map_err(|e| BenchError::context("copying a message to this rank itself", e));
        clock.enter(was);
        r
    }

    /// Drains CQ data into `arr`.
    fn absorb(&mut self, arr: &mut Arrivals) -> bool {
        let mut any = false;
        while let Some(d) = self.mesh.arrivals.pop_front() {
            any = true;
            arr.take(d);
        }
        any
    }

    /// The CPU initiator: `writes` (merged puts) and one signal per destination.
    pub fn run_cpu(
        &mut self,
        phase: Phase,
        iter: u64,
        layout: &PhaseLayout,
        writes: &[Put],
    ) -> Result<PhaseTimes, BenchError> {
        let (msg, sig) = phase.kinds();
        let mut times = PhaseTimes::default();
        let mut clock = Clock::start_at(Instant::now(), Stage::Feed);
        let mut arr = Arrivals::new(phase, iter, self.world as usize, layout.channels);
        let me = self.me;
        for p in writes.iter().filter(|p| p.dst == me) {
            self.copy_local(p, &mut clock)?;
        }
        arr.local(self.me as usize, &layout.expect[self.me as usize]);
        let per_dst = writes_to(self.world, writes);
        for k in 1..self.world {
            let dst = (self.me + k) % self.world;
            for p in writes.iter().filter(|p| p.dst == dst) {
                self.post(
                    p,
                    cq_data(msg, iter, self.me, p.index),
                    &mut clock,
                    &mut times,
                )?;
            }
            let s = layout.signal(self.me, dst, per_dst[dst as usize] as u16);
            self.post(
                &s,
                cq_data(sig, iter, self.me, s.index),
                &mut clock,
                &mut times,
            )?;
            self.absorb(&mut arr);
        }
        self.finish(&mut clock, &mut arr, &mut times, &mut |_, _, _, _| {
            Ok((false, true))
        })?;
        times.errors += self.check_counts(&arr, layout)?;
        Ok(times)
    }

    /// Polls until every source is complete and every own write completed, charging the time
    /// to the network and arrival stages once everything is posted. `pump` is called between
    /// polls until it says everything was posted (returning whether it did anything, and whether
    /// all is posted), and once more before the settle; it charges its own time to the stages it
    /// is in.
    fn finish(
        &mut self,
        clock: &mut Clock,
        arr: &mut Arrivals,
        times: &mut PhaseTimes,
        pump: &mut Pump<'a, '_>,
    ) -> Result<(), BenchError> {
        let mut posted = false;
        let mut last = Instant::now();
        let mut spins = 0u32;
        loop {
            let mut moved = false;
            if !posted {
                let (did, all) = pump(self, clock, arr, times)?;
                moved |= did;
                posted = all;
                if posted {
                    clock.enter(Stage::Network);
                }
            }
            moved |= self.mesh.progress()?;
            moved |= self.absorb(arr);
            if posted && clock.stage() == Stage::Network && self.mesh.outstanding == 0 {
                clock.enter(Stage::Arrival);
            }
            if clock.stage() == Stage::Arrival && arr.complete() {
                // A GPU producer's last quiet waits for the done count of the commands whose
                // writes just completed: publish it before the settle below, which synchronises
                // the device and so waits for that kernel too.
                pump(self, clock, arr, times)?;
                // Device copies this process queued (shm's CUDA path) must have landed before
                // the phase counts as done.
                clock.enter(Stage::Settle);
                self.send
                    .settle()
                    .and_then(|()| self.recv.settle())
                    .map_err(|e| BenchError::context("waiting for queued device copies", e))?;
                clock.finish(times);
                times.errors += arr.errors;
                self.arrival_ns = arr
                    .done_at
                    .iter()
                    .map(|t| {
                        t.map_or(0, |t| {
                            t.saturating_duration_since(clock.start).as_nanos() as u64
                        })
                    })
                    .collect();
                return Ok(());
            }
            let now = Instant::now();
            if moved {
                last = now;
                spins = 0;
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins > 16 {
                std::thread::yield_now();
            }
            if spins % 256 == 0 {
                (self.health)()?;
                if last.elapsed() >= self.timeout {
                    let mut waiting = vec![arr.describe()];
                    if !posted {
                        waiting.push("the next command of its own producer".into());
                    }
                    if self.mesh.outstanding > 0 {
                        waiting.push(format!("{} local completions", self.mesh.outstanding));
                    }
                    waiting.retain(|w| !w.is_empty());
                    return Err(BenchError::failed(format!(
                        "rank {} waited {:.1} s without progress in {} for {}; that rank is stuck or the fabric dropped traffic (raise --timeout if this is expected)",
                        self.me,
                        self.timeout.as_secs_f64(),
                        arr_phase(arr),
                        waiting.join(" and "),
                    )));
                }
            }
        }
    }
}

/// What `finish` calls between polls: (did anything, everything posted).
type Pump<'a, 'b> = dyn FnMut(
        &mut Exchange<'a>,
        &mut Clock,
        &mut Arrivals,
        &mut PhaseTimes,
    ) -> Result<(bool, bool), BenchError>
    + 'b;

fn arr_phase(a: &Arrivals) -> &'static str {
    match a.msg {
        Kind::DispatchMsg => "dispatch",
        _ => "combine",
    }
}

impl Exchange<'_> {
    /// The proxy side of a ring phase: consumes `total` commands from `feed` while the producer
    /// runs elsewhere (a thread or the GPU), started at `started`. Push times are filled by the
    /// caller.
    pub fn run_proxy(
        &mut self,
        phase: Phase,
        iter: u64,
        layout: &PhaseLayout,
        feed: &mut RingFeed<'_>,
        total: u64,
        started: Instant,
    ) -> Result<PhaseTimes, BenchError> {
        let (msg, sig) = phase.kinds();
        let mut times = PhaseTimes::default();
        let mut clock = Clock::start_at(started, Stage::Launch);
        let mut arr = Arrivals::new(phase, iter, self.world as usize, layout.channels);
        let start = *feed.next;
        let ring = feed.ring;
        let ch = layout.channels;
        let puts_total = layout.puts.len() as u64;
        let mut merger = Merger {
            pending: None,
            limit: feed.merge.unwrap_or(0),
        };
        let merging = feed.merge.is_some();
        let staged = feed.staged_writes;
        let mut tally = Tally {
            wrote: vec![0u32; self.world as usize * ch],
            channels: ch,
            data: cq_data(msg, iter, self.me, 0),
            widest: 1,
            ..Tally::default()
        };
        let mut consumed = 0u64;
        let mut puts_seen = 0u64;
        let mut own_seen = false;
        let own_expect = layout.expect[self.me as usize].clone();
        let own_total: u32 = own_expect.iter().sum();
        if own_total == 0 {
            arr.local(self.me as usize, &own_expect);
            own_seen = true;
        }
        let mut pump = |ex: &mut Exchange<'_>,
                        clock: &mut Clock,
                        arr: &mut Arrivals,
                        times: &mut PhaseTimes|
         -> Result<(bool, bool), BenchError> {
            // Every ready command is posted before the mesh is polled again: polling between
            // batches of a burst runs the peer's incoming copies (shm's device path) in the
            // middle of this rank's posting, which the cpu initiator, posting its whole phase
            // at once, does not. The producer's credits still move every 64 commands.
            let mut n = 0;
            let mut empty = false;
            while consumed < total {
                let pos = start + consumed;
                let c = match ring.peek(pos) {
                    Peek::Empty => {
                        empty = true;
                        break;
                    }
                    Peek::Ready(c) => c,
                    Peek::Torn { a, b } => {
                        return Err(BenchError::failed(format!(
                            "proxy: torn command at ring position {pos} (halves {a:#x} / {b:#x})"
                        )))
                    }
                };
                if clock.stage() == Stage::Launch {
                    clock.enter(Stage::Feed);
                }
                let mut p = Put {
                    dst: c.dst as u32,
                    local_off: c.local_off as usize,
                    remote_off: c.remote_off as usize,
                    len: c.len as usize,
                    index: c.signal,
                    signal: c.fence,
                };
                if p.dst >= ex.world || (!p.signal && p.index as usize >= ch) {
                    return Err(BenchError::failed(format!(
                        "proxy: command at ring position {pos} is for rank {} channel {}, but the job has {} ranks and {ch} channels",
                        p.dst, p.index, ex.world
                    )));
                }
                consumed += 1;
                n += 1;
                if n % 64 == 0 {
                    ring.publish_tail(start + consumed);
                }
                if !p.signal {
                    puts_seen += 1;
                    if merging {
                        if let Some(w) = merger.offer(p) {
                            tally.send(ex, clock, times, w)?;
                        }
                    } else {
                        tally.send(ex, clock, times, (p, 1))?;
                    }
                    continue;
                }
                if let Some(w) = merger.flush() {
                    tally.send(ex, clock, times, w)?;
                }
                if p.dst == ex.me {
                    tally.local_cmds += 1;
                    continue;
                }
                if merging {
                    // The signal announces the writes that went out, and the count block
                    // must say the same per channel.
                    let d = p.dst as usize;
                    let row = &tally.wrote[d * ch..(d + 1) * ch];
                    p.index = row.iter().sum::<u32>() as u16;
                    if row != &staged[d * ch..(d + 1) * ch] {
                        let mut msgs = vec![0u32; ch];
                        for q in layout.puts.iter().filter(|q| q.dst == p.dst) {
                            msgs[q.index as usize] += 1;
                        }
                        let mut b = Vec::with_capacity(ch * 8);
                        for (m, w) in msgs.iter().zip(row) {
                            b.extend_from_slice(&m.to_le_bytes());
                            b.extend_from_slice(&w.to_le_bytes());
                        }
                        let was = clock.enter(Stage::Post);
                        let r = ex.send.write_at(p.local_off, &b);
                        clock.enter(was);
                        r.map_err(|e| BenchError::context("rewriting a count block", e))?;
                    }
                }
                ex.post(&p, cq_data(sig, iter, ex.me, p.index), clock, times)?;
                tally.remote_cmds += 1;
                tally.remote_writes += 1;
            }
            // Nothing waits for commands not pushed yet: once the ring is empty, what was read
            // goes out (a pending write is only carried over a full batch).
            if empty || consumed == total {
                if let Some(w) = merger.flush() {
                    tally.send(ex, clock, times, w)?;
                }
            }
            if n > 0 {
                ring.publish_tail(start + consumed);
            }
            if !own_seen && tally.own_got == own_total as u64 {
                arr.local(ex.me as usize, &own_expect);
                own_seen = true;
            }
            // Commands whose writes completed: a merged write stands for up to `widest`
            // commands, so the in-flight ones are counted at that (exact once none is).
            let inflight = ex.mesh.outstanding.min(tally.remote_writes) * tally.widest;
            let done = tally.local_cmds + tally.remote_cmds.saturating_sub(inflight);
            ring.publish_done(start + done);
            if clock.stage() == Stage::Feed && puts_seen == puts_total && consumed < total {
                clock.enter(Stage::Quiet);
            }
            Ok((n > 0, consumed == total))
        };
        let r = self.finish(&mut clock, &mut arr, &mut times, &mut pump);
        *feed.next = start + consumed;
        r?;
        // The producer's last quiet reads `done`: publish the final count.
        ring.publish_done(start + consumed);
        times.errors += self.check_counts(&arr, layout)?;
        Ok(times)
    }
}
