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
//!   into the command ring of `efabench proxy`, waits in quiet, then pushes one signal per
//!   destination; this thread is the proxy: it pops what is ready, posts it, and publishes how
//!   far it consumed (credits) and how many writes completed (what quiet waits for).
//!
//! A message to this rank itself is a local copy, counted as arrived at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use efabench_gpu::proxy::{realtime_ns, Command, CommandRing, Peek};

use crate::ep::layout::{writes_to, PhaseLayout, Put};
use crate::error::BenchError;
use crate::mesh::Mesh;
use crate::p2p::link::Payload;

/// What a CQ data word announces (2 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    DispatchMsg = 0,
    DispatchSignal = 1,
    CombineMsg = 2,
    CombineSignal = 3,
}

/// Which phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Dispatch,
    Combine,
}

impl Phase {
    fn kinds(self) -> (Kind, Kind) {
        match self {
            Phase::Dispatch => (Kind::DispatchMsg, Kind::DispatchSignal),
            Phase::Combine => (Kind::CombineMsg, Kind::CombineSignal),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Phase::Dispatch => "dispatch",
            Phase::Combine => "combine",
        }
    }
}

/// Most ranks the 10-bit source field carries.
pub const MAX_RANKS: u32 = 1024;

/// CQ data: kind (2 bits) | iteration mod 16 (4) | source rank (10) | channel (16).
pub fn cq_data(kind: Kind, iter: u64, src: u32, index: u16) -> u64 {
    ((kind as u64) << 30) | ((iter & 0xF) << 26) | ((src as u64 & 0x3FF) << 16) | index as u64
}

/// Splits CQ data into (kind, iteration mod 16, source, channel).
pub fn parse_cq_data(d: u64) -> Option<(Kind, u64, u32, u16)> {
    if d >> 32 != 0 {
        return None;
    }
    let kind = match d >> 30 {
        0 => Kind::DispatchMsg,
        1 => Kind::DispatchSignal,
        2 => Kind::CombineMsg,
        _ => Kind::CombineSignal,
    };
    Some((kind, (d >> 26) & 0xF, ((d >> 16) & 0x3FF) as u32, d as u16))
}

/// Where a phase's time went on this rank (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseTimes {
    /// Start of the phase to its end (every arrival counted, every own write completed).
    pub total_ns: u64,
    /// The producer's first push to its last (ring initiators; 0 for `cpu`).
    pub push_ns: u64,
    /// Time spent inside the post calls.
    pub post_ns: u64,
    /// Last post to the last local completion of this rank's writes.
    pub network_ns: u64,
    /// Last local completion to the last expected arrival (0 when the arrivals came first).
    pub arrival_ns: u64,
    /// The combine's weighted sum at the source (included in `total_ns`).
    pub reduce_ns: u64,
    /// Writes posted (remote ones, signals included).
    pub writes: u64,
    /// CQ data that did not belong to this phase, or counts that disagree with the routing.
    pub errors: u64,
}

/// Counts one phase's arrivals.
struct Arrivals {
    msg: Kind,
    sig: Kind,
    iter: u64,
    channels: usize,
    /// Writes counted per source and channel, and per source.
    got: Vec<Vec<u32>>,
    got_total: Vec<u32>,
    /// Writes each source announced, once its signal arrived.
    announced: Vec<Option<u32>>,
    missing_sources: usize,
    errors: u64,
}

impl Arrivals {
    fn new(phase: Phase, iter: u64, world: usize, channels: usize) -> Arrivals {
        let (msg, sig) = phase.kinds();
        Arrivals {
            msg,
            sig,
            iter,
            channels,
            got: vec![vec![0; channels]; world],
            got_total: vec![0; world],
            announced: vec![None; world],
            missing_sources: world,
            errors: 0,
        }
    }

    fn source_done(&self, src: usize) -> bool {
        self.announced[src] == Some(self.got_total[src])
    }

    /// One CQ data word.
    fn take(&mut self, d: u64) {
        let Some((kind, it, src, idx)) = parse_cq_data(d) else {
            self.errors += 1;
            return;
        };
        let src = src as usize;
        if it != self.iter & 0xF || src >= self.got.len() {
            self.errors += 1;
            return;
        }
        let was = self.source_done(src);
        if kind == self.msg && (idx as usize) < self.channels {
            self.got[src][idx as usize] += 1;
            self.got_total[src] += 1;
        } else if kind == self.sig && self.announced[src].is_none() {
            self.announced[src] = Some(idx as u32);
        } else {
            self.errors += 1;
            return;
        }
        if !was && self.source_done(src) {
            self.missing_sources -= 1;
        } else if was && !self.source_done(src) {
            // A write beyond what the signal announced.
            self.missing_sources += 1;
        }
    }

    /// This rank's own messages, copied locally: arrived at once.
    fn local(&mut self, me: usize, expect: &[u32]) {
        let was = self.source_done(me);
        self.got[me] = expect.to_vec();
        self.got_total[me] = expect.iter().sum();
        self.announced[me] = Some(self.got_total[me]);
        if !was {
            self.missing_sources -= 1;
        }
    }

    fn complete(&self) -> bool {
        self.missing_sources == 0
    }

    /// Errors of the count blocks (`blocks[src][channel]` = announced (messages, writes)):
    /// messages that disagree with the routing, writes that disagree with the CQ data counted.
    fn check_blocks(&self, me: usize, blocks: &[Vec<(u32, u32)>], expect: &[Vec<u32>]) -> u64 {
        let mut bad = 0;
        for (src, b) in blocks.iter().enumerate() {
            if src == me {
                continue;
            }
            for (c, (m, w)) in b.iter().enumerate() {
                bad += (*m != expect[src][c]) as u64 + (*w != self.got[src][c]) as u64;
            }
        }
        bad
    }

    fn describe(&self) -> String {
        let waiting: Vec<String> = (0..self.got.len())
            .filter(|&s| !self.source_done(s))
            .take(8)
            .map(|s| match self.announced[s] {
                None => format!(
                    "rank {s}'s count signal ({} writes so far)",
                    self.got_total[s]
                ),
                Some(a) => format!("{} of rank {s}'s {a} writes", self.got_total[s]),
            })
            .collect();
        waiting.join(", ")
    }
}

/// The pieces of a rank a phase runs on.
pub struct Exchange<'a> {
    pub mesh: &'a mut Mesh,
    pub send: &'a Payload,
    pub recv: &'a Payload,
    pub me: u32,
    pub world: u32,
    pub timeout: Duration,
    pub health: &'a dyn Fn() -> Result<(), String>,
}

/// The rail a write to `dst` on `channel` takes.
fn rail_of(me: u32, p: &Put, rails: usize) -> usize {
    (me as usize + p.dst as usize + p.index as usize) % rails.max(1)
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

    fn post(&mut self, p: &Put, data: u64, times: &mut PhaseTimes) -> Result<(), BenchError> {
        let rail = rail_of(self.me, p, self.mesh.rails());
        let t = Instant::now();
        self.mesh
            .write(p.dst, rail, p.local_off, p.len, p.remote_off, data)?;
        times.post_ns += t.elapsed().as_nanos() as u64;
        times.writes += 1;
        Ok(())
    }

    fn copy_local(&mut self, p: &Put) -> Result<(), BenchError> {
        efabench_gpu::buffer::copy_between(
            &***self.send,
            p.local_off,
            &***self.recv,
            p.remote_off,
            p.len,
        )
        .map_err(|e| BenchError::context("copying a message to this rank itself", e))
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
        let t0 = Instant::now();
        let mut arr = Arrivals::new(phase, iter, self.world as usize, layout.channels);
        let me = self.me;
        for p in writes.iter().filter(|p| p.dst == me) {
            self.copy_local(p)?;
        }
        arr.local(self.me as usize, &layout.expect[self.me as usize]);
        let per_dst = writes_to(self.world, writes);
        for k in 1..self.world {
            let dst = (self.me + k) % self.world;
            for p in writes.iter().filter(|p| p.dst == dst) {
                self.post(p, cq_data(msg, iter, self.me, p.index), &mut times)?;
            }
            let s = layout.signal(self.me, dst, per_dst[dst as usize] as u16);
            self.post(&s, cq_data(sig, iter, self.me, s.index), &mut times)?;
            self.absorb(&mut arr);
        }
        let posted = Instant::now();
        self.finish(t0, &mut arr, &mut times, &mut |_, _, _| {
            Ok((false, Some(posted)))
        })?;
        times.errors += self.check_counts(&arr, layout)?;
        Ok(times)
    }

    /// Polls until every source is complete and every own write completed; fills the network
    /// and arrival stages. `pump` is called between polls until it says everything was posted
    /// (returning whether it did anything, and when the last post happened).
    fn finish(
        &mut self,
        t0: Instant,
        arr: &mut Arrivals,
        times: &mut PhaseTimes,
        pump: &mut Pump<'a, '_>,
    ) -> Result<(), BenchError> {
        let mut posted: Option<Instant> = None;
        let mut local_done: Option<Instant> = None;
        let mut arrived: Option<Instant> = None;
        let mut last = Instant::now();
        let mut spins = 0u32;
        loop {
            let mut moved = false;
            if posted.is_none() {
                let (did, all) = pump(self, arr, times)?;
                moved |= did;
                posted = all;
            }
            moved |= self.mesh.progress()?;
            moved |= self.absorb(arr);
            let now = Instant::now();
            if posted.is_some() && local_done.is_none() && self.mesh.outstanding == 0 {
                local_done = Some(now);
            }
            if arrived.is_none() && arr.complete() {
                arrived = Some(now);
            }
            if let (Some(p), Some(l), Some(a)) = (posted, local_done, arrived) {
                // Device copies this process queued (shm's CUDA path) must have landed before
                // the phase counts as done.
                self.send
                    .settle()
                    .and_then(|()| self.recv.settle())
                    .map_err(|e| BenchError::context("waiting for queued device copies", e))?;
                // Both were noted in this pass: the phase ends now.
                times.total_ns = t0.elapsed().as_nanos() as u64;
                times.network_ns = l.saturating_duration_since(p).as_nanos() as u64;
                times.arrival_ns = a.saturating_duration_since(l).as_nanos() as u64;
                times.errors += arr.errors;
                return Ok(());
            }
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
                (self.health)().map_err(BenchError::failed)?;
                if last.elapsed() >= self.timeout {
                    return Err(BenchError::failed(format!(
                        "rank {} waited {:.1} s without progress in {} for {}{}; that rank is stuck or the fabric dropped traffic (raise --timeout if this is expected)",
                        self.me,
                        self.timeout.as_secs_f64(),
                        arr_phase(arr),
                        arr.describe(),
                        if self.mesh.outstanding > 0 {
                            format!(" and {} local completions", self.mesh.outstanding)
                        } else {
                            String::new()
                        }
                    )));
                }
            }
        }
    }
}

/// What `finish` calls between polls: (did anything, Some(time of the last post) once all is posted).
type Pump<'a, 'b> = dyn FnMut(
        &mut Exchange<'a>,
        &mut Arrivals,
        &mut PhaseTimes,
    ) -> Result<(bool, Option<Instant>), BenchError>
    + 'b;

fn arr_phase(a: &Arrivals) -> &'static str {
    match a.msg {
        Kind::DispatchMsg => "dispatch",
        _ => "combine",
    }
}

/// The ring a producer pushes commands into and the proxy (this thread) consumes.
pub struct RingFeed<'a> {
    pub ring: CommandRing<'a>,
    /// Next position the proxy consumes (persists across phases, as the producer's head does).
    pub next: &'a mut u64,
}

/// The commands of a phase: one per message, then one signal per destination.
/// A signal is a command with the fence bit (it is posted after the quiet, so it orders after
/// every earlier put) whose `signal` field is the number of writes it announces.
pub fn commands(me: u32, world: u32, layout: &PhaseLayout) -> (Vec<Command>, Vec<Command>) {
    let cmd = |p: &Put| Command {
        dst: p.dst as u16,
        signal: p.index,
        len: p.len as u32,
        remote_off: p.remote_off as u64,
        local_off: p.local_off as u64,
        fence: p.signal,
    };
    let per_dst = writes_to(world, &layout.puts);
    let puts = layout.puts.iter().map(cmd).collect();
    let sigs = (1..world)
        .map(|k| {
            let dst = (me + k) % world;
            cmd(&layout.signal(me, dst, per_dst[dst as usize] as u16))
        })
        .collect();
    (puts, sigs)
}

/// A CPU thread in the kernel's place: pushes `puts`, waits in quiet, pushes `signals`, waits
/// again. Returns (first push, last put pushed) in `CLOCK_REALTIME` ns.
pub fn host_produce(
    ring: CommandRing<'_>,
    head: u64,
    puts: &[Command],
    signals: &[Command],
    stop: &AtomicBool,
) -> Result<(u64, u64), String> {
    let mut pos = head;
    let go_on = || !stop.load(Ordering::Acquire);
    let t0 = realtime_ns();
    for c in puts {
        if !ring.host_push(pos, c, go_on) {
            return Err("host producer: stopped while waiting for a credit".into());
        }
        pos += 1;
    }
    let t1 = realtime_ns();
    let quiet = |pos: u64| {
        let mut n = 0u64;
        while ring.done() < pos {
            n += 1;
            if n % 1024 == 0 {
                if !go_on() {
                    return Err("host producer: stopped in quiet".to_string());
                }
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
        Ok(())
    };
    quiet(pos)?;
    for c in signals {
        if !ring.host_push(pos, c, go_on) {
            return Err("host producer: stopped while waiting for a credit".into());
        }
        pos += 1;
    }
    quiet(pos)?;
    Ok((t0, t1))
}

impl Exchange<'_> {
    /// The proxy side of a ring phase: consumes `total` commands from `feed` while `produce`
    /// runs elsewhere (a thread or the GPU). Push times are filled by the caller.
    pub fn run_proxy(
        &mut self,
        phase: Phase,
        iter: u64,
        layout: &PhaseLayout,
        feed: &mut RingFeed<'_>,
        total: u64,
    ) -> Result<PhaseTimes, BenchError> {
        let (msg, sig) = phase.kinds();
        let mut times = PhaseTimes::default();
        let t0 = Instant::now();
        let mut arr = Arrivals::new(phase, iter, self.world as usize, layout.channels);
        let start = *feed.next;
        let ring = feed.ring;
        let mut consumed = 0u64;
        let mut local_copies = 0u64;
        let mut remote = 0u64;
        let mut own_seen = false;
        let own_expect = layout.expect[self.me as usize].clone();
        let own_total: u32 = own_expect.iter().sum();
        let mut own_got = 0u32;
        if own_total == 0 {
            arr.local(self.me as usize, &own_expect);
            own_seen = true;
        }
        let mut pump = |ex: &mut Exchange<'_>,
                        arr: &mut Arrivals,
                        times: &mut PhaseTimes|
         -> Result<(bool, Option<Instant>), BenchError> {
            let mut n = 0;
            while consumed < total && n < 64 {
                let pos = start + consumed;
                let c = match ring.peek(pos) {
                    Peek::Empty => break,
                    Peek::Ready(c) => c,
                    Peek::Torn { a, b } => {
                        return Err(BenchError::failed(format!(
                            "proxy: torn command at ring position {pos} (halves {a:#x} / {b:#x})"
                        )))
                    }
                };
                let p = Put {
                    dst: c.dst as u32,
                    local_off: c.local_off as usize,
                    remote_off: c.remote_off as usize,
                    len: c.len as usize,
                    index: c.signal,
                    signal: c.fence,
                };
                if p.dst >= ex.world {
                    return Err(BenchError::failed(format!(
                        "proxy: command at ring position {pos} is for rank {}, but the job has {} ranks",
                        p.dst, ex.world
                    )));
                }
                if p.dst == ex.me {
                    if !p.signal {
                        ex.copy_local(&p)?;
                        own_got += 1;
                    }
                    local_copies += 1;
                } else {
                    let kind = if p.signal { sig } else { msg };
                    ex.post(&p, cq_data(kind, iter, ex.me, p.index), times)?;
                    remote += 1;
                }
                consumed += 1;
                n += 1;
            }
            if n > 0 {
                ring.publish_tail(start + consumed);
            }
            if !own_seen && own_got == own_total {
                arr.local(ex.me as usize, &own_expect);
                own_seen = true;
            }
            let done = local_copies + remote - ex.mesh.outstanding.min(remote);
            ring.publish_done(start + done);
            Ok((n > 0, (consumed == total).then(Instant::now)))
        };
        let r = self.finish(t0, &mut arr, &mut times, &mut pump);
        *feed.next = start + consumed;
        r?;
        // The producer's last quiet reads `done`: publish the final count.
        ring.publish_done(start + consumed);
        times.errors += self.check_counts(&arr, layout)?;
        Ok(times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cq_data_round_trips_in_32_bits() {
        for (k, it, src, idx) in [
            (Kind::DispatchMsg, 0u64, 0u32, 0u16),
            (Kind::DispatchSignal, 15, 1023, 65535),
            (Kind::CombineMsg, 16 + 3, 7, 511),
            (Kind::CombineSignal, 9, 3, 2),
        ] {
            let d = cq_data(k, it, src, idx);
            assert!(d < 1 << 32);
            assert_eq!(parse_cq_data(d), Some((k, it & 0xF, src, idx)));
        }
        assert_eq!(parse_cq_data(1 << 32), None);
    }

    #[test]
    fn a_source_is_complete_on_its_announced_writes_whatever_the_order() {
        let expect = vec![vec![2u32, 1], vec![0, 3]];
        let mut a = Arrivals::new(Phase::Dispatch, 5, 2, 2);
        a.local(1, &expect[1]);
        assert!(!a.complete());
        // The signal first, then the writes (EFA may deliver them in any order).
        a.take(cq_data(Kind::DispatchSignal, 5, 0, 2));
        assert!(!a.complete());
        a.take(cq_data(Kind::DispatchMsg, 5, 0, 0));
        assert!(!a.complete());
        a.take(cq_data(Kind::DispatchMsg, 5, 0, 1));
        assert!(a.complete());
        assert_eq!(a.errors, 0);
        // Rank 0 merged its two channel-0 messages into one write: the block says so.
        let blocks = vec![vec![(2, 1), (1, 1)], vec![(0, 0), (3, 3)]];
        assert_eq!(a.check_blocks(1, &blocks, &expect), 0);
        // A write of another iteration or a combine write is an error, not an arrival.
        a.take(cq_data(Kind::DispatchMsg, 6, 0, 1));
        a.take(cq_data(Kind::CombineMsg, 5, 0, 0));
        assert_eq!(a.errors, 2);
        assert!(a.complete());
    }

    #[test]
    fn count_blocks_that_disagree_with_the_routing_or_the_cq_data_are_errors() {
        let expect = vec![vec![2u32], vec![0]];
        let mut a = Arrivals::new(Phase::Combine, 0, 2, 1);
        a.local(1, &expect[1]);
        a.take(cq_data(Kind::CombineSignal, 0, 0, 2));
        a.take(cq_data(Kind::CombineMsg, 0, 0, 0));
        a.take(cq_data(Kind::CombineMsg, 0, 0, 0));
        assert!(a.complete());
        assert_eq!(a.check_blocks(1, &[vec![(3, 2)], vec![(0, 0)]], &expect), 1);
        assert_eq!(a.check_blocks(1, &[vec![(2, 1)], vec![(0, 0)]], &expect), 1);
        // A write beyond the announced count reopens the source.
        a.take(cq_data(Kind::CombineMsg, 0, 0, 0));
        assert!(!a.complete());
    }
}
