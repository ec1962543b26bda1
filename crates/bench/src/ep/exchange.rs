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
//!   destination; this thread is the proxy: it pops what is ready, posts it (merging a put into
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
use crate::mesh::{Mesh, Payload};

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

/// Where a phase's time went on this rank (ns). The proxy-side stages (`launch` to `settle`)
/// partition `total_ns` (before the combine's `reduce_ns`): every instant of the phase is charged
/// to exactly one of them by [`Clock`]. `push_ns` is the producer's own span; it overlaps them.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PhaseTimes {
    /// Start of the phase to its end (every arrival counted, every own write completed, queued
    /// device copies settled), plus `reduce_ns` for the combine.
    pub total_ns: u64,
    /// The producer's first push to its last put (ring initiators; 0 for `cpu`). Overlaps the
    /// stages below; not part of their sum.
    pub push_ns: u64,
    /// Ring initiators: start of the phase (just before the kernel launch or the producer
    /// thread's start) to the first command the proxy reads: the launch, the kernel being
    /// scheduled (under MPS, next to the other rank's), its first push.
    pub launch_ns: u64,
    /// Time spent inside the post calls.
    pub post_ns: u64,
    /// Time spent copying this rank's messages to itself.
    pub copy_ns: u64,
    /// The rest of the posting time: the proxy polling completions between posts, and waiting
    /// for the producer's next command while some of its puts are still to come.
    pub feed_ns: u64,
    /// Ring initiators: every put read, waiting for the producer's count signals, i.e. its
    /// quiet: the completion of every put it pushed (the proxy polls completions meanwhile).
    pub quiet_ns: u64,
    /// Everything posted to the last local completion of this rank's writes.
    pub network_ns: u64,
    /// Last local completion to the last expected arrival (0 when the arrivals came first).
    pub arrival_ns: u64,
    /// Waiting for the device copies this process queued (shm's CUDA path) to land.
    pub settle_ns: u64,
    /// The combine's weighted sum at the source (included in `total_ns`).
    pub reduce_ns: u64,
    /// Writes posted (remote ones, signals included).
    pub writes: u64,
    /// Ring commands the proxy merged into the write before them (contiguous puts to the same
    /// destination and channel); 0 without merging.
    pub merged: u64,
    /// CQ data that did not belong to this phase, or counts that disagree with the routing.
    pub errors: u64,
}

impl PhaseTimes {
    /// The sum of the proxy-side stages (= `total_ns - reduce_ns` when measured by [`Clock`]).
    pub fn stage_sum_ns(&self) -> u64 {
        self.launch_ns
            + self.post_ns
            + self.copy_ns
            + self.feed_ns
            + self.quiet_ns
            + self.network_ns
            + self.arrival_ns
            + self.settle_ns
    }
}

/// A stage of the proxy side of a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Launch,
    Post,
    Copy,
    Feed,
    Quiet,
    Network,
    Arrival,
    Settle,
}

/// Charges every instant from its start to exactly one stage: [`Clock::enter`] closes the
/// current stage at `now` and opens the next one there, so the stages add up to the elapsed time.
#[derive(Clone, Debug)]
pub struct Clock {
    start: Instant,
    mark: Instant,
    stage: Stage,
    ns: [u64; 8],
}

impl Clock {
    pub fn start_at(start: Instant, stage: Stage) -> Clock {
        Clock {
            start,
            mark: start,
            stage,
            ns: [0; 8],
        }
    }

    /// Closes the current stage now and opens `next`; returns the stage it closed.
    pub fn enter(&mut self, next: Stage) -> Stage {
        self.enter_at(Instant::now(), next)
    }

    fn enter_at(&mut self, now: Instant, next: Stage) -> Stage {
        let d = now.saturating_duration_since(self.mark).as_nanos() as u64;
        self.ns[self.stage as usize] += d;
        self.mark = now.max(self.mark);
        std::mem::replace(&mut self.stage, next)
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// Closes the current stage and writes every stage and the total into `t`.
    pub fn finish(&mut self, t: &mut PhaseTimes) {
        let s = self.stage;
        self.enter(s);
        let n = |s: Stage| self.ns[s as usize];
        t.launch_ns = n(Stage::Launch);
        t.post_ns = n(Stage::Post);
        t.copy_ns = n(Stage::Copy);
        t.feed_ns = n(Stage::Feed);
        t.quiet_ns = n(Stage::Quiet);
        t.network_ns = n(Stage::Network);
        t.arrival_ns = n(Stage::Arrival);
        t.settle_ns = n(Stage::Settle);
        t.total_ns = self.mark.saturating_duration_since(self.start).as_nanos() as u64;
    }
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
    /// When each source became complete (its signal and every write it announced).
    done_at: Vec<Option<Instant>>,
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
            done_at: vec![None; world],
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
            self.done_at[src] = Some(Instant::now());
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
            self.done_at[me] = Some(Instant::now());
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
    /// Filled when a phase ends: per source, phase start to that source's completion (ns).
    pub arrival_ns: Vec<u64>,
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

    fn post(
        &mut self,
        p: &Put,
        data: u64,
        clock: &mut Clock,
        times: &mut PhaseTimes,
    ) -> Result<(), BenchError> {
        let rail = rail_of(self.me, p, self.mesh.rails());
        let was = clock.enter(Stage::Post);
        let r = self
            .mesh
            .write(p.dst, rail, p.local_off, p.len, p.remote_off, data);
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
                (self.health)().map_err(BenchError::failed)?;
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

/// The ring a producer pushes commands into and the proxy (this thread) consumes.
pub struct RingFeed<'a> {
    pub ring: CommandRing<'a>,
    /// Next position the proxy consumes (persists across phases, as the producer's head does).
    pub next: &'a mut u64,
    /// Merge contiguous puts into one write up to this many bytes (`None`: one write per
    /// command).
    pub merge: Option<usize>,
    /// `[dst][channel]` (flattened): the writes the count block staged for `dst` announces.
    /// When the proxy's merging posted other counts, it rewrites that block before the signal.
    pub staged_writes: &'a [u32],
}

/// The proxy's merging of ring commands: a put extends the pending write when it goes to the
/// same destination and channel and its bytes follow the pending write's on both sides (what a
/// proxy batching adjacent commands, or posting with `FI_MORE`, sends as one write). The
/// producer's commands are unchanged; only what reaches the fabric differs.
#[derive(Debug, Default)]
struct Merger {
    pending: Option<(Put, u64)>,
    limit: usize,
}

impl Merger {
    /// Offers `p` (not a signal); returns the write to post first when `p` does not extend the
    /// pending one, with the commands it covers.
    fn offer(&mut self, p: Put) -> Option<(Put, u64)> {
        if let Some((w, n)) = &mut self.pending {
            if w.dst == p.dst
                && w.index == p.index
                && w.local_off + w.len == p.local_off
                && w.remote_off + w.len == p.remote_off
                && w.len + p.len <= self.limit
            {
                w.len += p.len;
                *n += 1;
                return None;
            }
        }
        self.pending.replace((p, 1))
    }

    /// The pending write, if any.
    fn flush(&mut self) -> Option<(Put, u64)> {
        self.pending.take()
    }
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

/// What the proxy sent in a phase.
#[derive(Debug, Default)]
struct Tally {
    /// Writes posted per `[dst][channel]` (what the count block must announce).
    wrote: Vec<u32>,
    channels: usize,
    /// The CQ data of a put of channel 0 (the channel is the low 16 bits).
    data: u64,
    local_cmds: u64,
    remote_cmds: u64,
    remote_writes: u64,
    /// Most commands one write stood for.
    widest: u64,
    /// This rank's messages to itself copied.
    own_got: u64,
}

impl Tally {
    /// A put (possibly merged, standing for `n` commands) goes out: a local copy or a write.
    fn send(
        &mut self,
        ex: &mut Exchange<'_>,
        clock: &mut Clock,
        times: &mut PhaseTimes,
        (w, n): (Put, u64),
    ) -> Result<(), BenchError> {
        times.merged += n - 1;
        self.widest = self.widest.max(n);
        if w.dst == ex.me {
            ex.copy_local(&w, clock)?;
            self.own_got += n;
            self.local_cmds += n;
        } else {
            ex.post(&w, self.data | w.index as u64, clock, times)?;
            self.wrote[w.dst as usize * self.channels + w.index as usize] += 1;
            self.remote_cmds += n;
            self.remote_writes += 1;
        }
        Ok(())
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
            let mut n = 0;
            let mut empty = false;
            while consumed < total && n < 64 {
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
    fn the_clock_charges_every_instant_to_one_stage() {
        let t0 = Instant::now();
        let mut c = Clock::start_at(t0, Stage::Launch);
        let ms = Duration::from_millis(1);
        c.enter_at(t0 + ms, Stage::Feed);
        let was = c.enter_at(t0 + 2 * ms, Stage::Post);
        assert_eq!(was, Stage::Feed);
        c.enter_at(t0 + 5 * ms, was);
        c.enter_at(t0 + 6 * ms, Stage::Quiet);
        c.enter_at(t0 + 9 * ms, Stage::Network);
        c.enter_at(t0 + 10 * ms, Stage::Arrival);
        c.enter_at(t0 + 12 * ms, Stage::Settle);
        let mut t = PhaseTimes::default();
        c.finish(&mut t);
        let ms = |n: u64| n * 1_000_000;
        assert_eq!(
            (t.launch_ns, t.feed_ns, t.post_ns, t.quiet_ns),
            (ms(1), ms(2), ms(3), ms(3))
        );
        assert_eq!((t.network_ns, t.arrival_ns), (ms(1), ms(2)));
        // `finish` closes Settle now: whatever it took, the stages add up to the total.
        assert!(t.total_ns >= ms(12));
        assert_eq!(t.stage_sum_ns(), t.total_ns);
    }

    fn put(dst: u32, index: u16, local_off: usize, remote_off: usize, len: usize) -> Put {
        Put {
            dst,
            local_off,
            remote_off,
            len,
            index,
            signal: false,
        }
    }

    #[test]
    fn the_proxy_merges_only_contiguous_puts_of_one_destination_and_channel() {
        let mut m = Merger {
            pending: None,
            limit: 300,
        };
        assert_eq!(m.offer(put(1, 0, 0, 1000, 100)), None);
        // Contiguous on both sides: merged.
        assert_eq!(m.offer(put(1, 0, 100, 1100, 100)), None);
        // Another channel: the pending write goes out.
        assert_eq!(
            m.offer(put(1, 1, 200, 1200, 100)),
            Some((put(1, 0, 0, 1000, 200), 2))
        );
        // Another destination, a gap on the remote side, a gap on the local side.
        assert_eq!(
            m.offer(put(2, 1, 300, 1300, 100)),
            Some((put(1, 1, 200, 1200, 100), 1))
        );
        assert_eq!(
            m.offer(put(2, 1, 400, 1500, 100)),
            Some((put(2, 1, 300, 1300, 100), 1))
        );
        assert_eq!(
            m.offer(put(2, 1, 600, 1600, 100)),
            Some((put(2, 1, 400, 1500, 100), 1))
        );
        // Up to the provider's largest message, not beyond.
        assert_eq!(m.offer(put(2, 1, 700, 1700, 100)), None);
        assert_eq!(m.offer(put(2, 1, 800, 1800, 100)), None);
        assert_eq!(
            m.offer(put(2, 1, 900, 1900, 100)),
            Some((put(2, 1, 600, 1600, 300), 3))
        );
        assert_eq!(m.flush(), Some((put(2, 1, 900, 1900, 100), 1)));
        assert_eq!(m.flush(), None);
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
