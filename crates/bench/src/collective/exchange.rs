//! One all-to-all exchange on a [`Mesh`], with any per-(source, destination) byte counts: the
//! engine of `alltoall` and `alltoallv`, run in the harness's budgeted loop
//! ([`Ctx::run_budgeted`]).
//!
//! # One iteration
//! Every rank writes (or sends) its chunk to every peer and copies its own chunk locally; the
//! iteration ends on a rank when every stripe of every peer's chunk for *that* iteration arrived
//! (counted by the remote CQ data each stripe carries: kind, iteration, source) and its own
//! operations completed. A chunk of zero bytes is announced by an 8-byte write into the peer's
//! control region with the same CQ data, so every rank hears from every rank in every iteration.
//!
//! # Back to back
//! A rank finishes iteration i only after every peer's chunk of i arrived, which each peer
//! posts only after finishing i−1 (checks included), so a peer is never more than one iteration
//! ahead: arrivals are counted by iteration parity. Checked iterations alternate receive halves
//! (the half a peer one iteration ahead writes was already checked); the timed iterations all
//! land in half 0 (the footprint of `MPI_Alltoall`'s one receive buffer); the probes after the
//! loop (each after a barrier, the last one checked) use half 1, where no late write of the timed
//! loop lands (EFA orders no writes).
//!
//! # Stopping together
//! A rank whose time budget ran out (the budgeted loop decides) marks the chunks of its next
//! iteration (CQ data kind `Stop` in place of `Payload`), and so does every rank on the last
//! iteration by count; since every rank receives from every rank in every iteration, all of
//! them see the mark at the end of the same iteration and leave the loop there, without a
//! round trip.
//!
//! # Signalled chunks
//! With [`Plan::signal_above`], a chunk above that size is written without CQ data, tracked by
//! its destination, and announced by one signal (an 8-byte write with the same CQ data) once all
//! its stripes completed locally; its receiver counts that one signal instead of its stripes.
//!
//! # Send/recv
//! `Op::Sendrecv` sends into receives posted in advance (two iterations' worth). Receives match
//! in arrival order (this fabric layer has no directed receives), so a chunk lands in one of the
//! receive slots of its rail and its CQ data names its source, which the check uses. Every
//! source's chunk must then have the same length (`alltoall`'s equal chunks).

use std::time::Instant;

use efabench_bootstrap::Bootstrap;

use efabench_fabric::Stripe;

use crate::error::BenchError;
use crate::harness::{Budget, Budgeted, Ctx, Measured, Phase, Span, Stop};
use crate::mesh::{
    cq_data, on_rail, parse_cq_data, Completion, Kind, Mesh, Remote, Request, Verb, ITER_MOD,
};
use crate::pattern;

use super::report::RankOutcome;

/// The transfer an all-to-all uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    /// RDMA write with remote CQ data.
    Write,
    /// Two-sided send/recv with CQ data.
    Sendrecv,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Sendrecv => "sendrecv",
        }
    }
}

/// Where one chunk sits in a buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    pub off: usize,
    pub len: usize,
}

/// What this rank sends and receives in one iteration.
#[derive(Clone, Debug)]
pub struct Plan {
    /// By destination: the chunk in our send buffer (our own included).
    pub out: Vec<Chunk>,
    /// By source: where its chunk lands in one receive half (our own included).
    pub inc: Vec<Chunk>,
    /// By destination: where our chunk lands in its receive half.
    pub remote: Vec<usize>,
    /// Bytes of one receive half (the receive buffer holds two).
    pub half: usize,
    /// Most of our chunks in flight at once (`usize::MAX`: all posted at once). The next is
    /// posted, in the same peer order, as an earlier one completes.
    pub window: usize,
    /// Chunks above this many bytes are written without CQ data and announced by one signal
    /// once their writes completed ([`super::notify`]); `None`: every write carries CQ data.
    pub signal_above: Option<usize>,
}

impl Plan {
    /// Equal chunks of `chunk` bytes, in rank order (`alltoall`; `alltoallv` builds its plans
    /// from a counts matrix).
    pub fn uniform(me: u32, n: u32, chunk: usize) -> Plan {
        let cells: Vec<Chunk> = (0..n as usize)
            .map(|r| Chunk {
                off: r * chunk,
                len: chunk,
            })
            .collect();
        Plan {
            out: cells.clone(),
            inc: cells,
            remote: vec![me as usize * chunk; n as usize],
            half: chunk * n as usize,
            window: usize::MAX,
            signal_above: None,
        }
    }
}

/// Iterations after the timed loop that each start on every rank at once (a barrier before
/// each) and time every source's arrival; the last of them is checked.
pub const ARRIVAL_PROBES: u64 = 3;

/// One measured point on this rank: barrier, the checked warm-up, barrier, the timed loop back
/// to back, then [`ARRIVAL_PROBES`] iterations each after a barrier (the last one checked); the
/// harness's budgeted loop ([`Ctx::run_budgeted`]) runs the first two phases. The detail
/// ([`RankOutcome`]) carries `per_rail`, `warmup_done`, `stopped_by`, `src_delay_ns` (each
/// source's mean arrival time after this rank started the iteration, in the timed loop) and
/// `src_probe_ns` (its median in the probes).
pub fn measure(
    ctx: &Ctx,
    mesh: &mut Mesh,
    plan: &Plan,
    op: Op,
    b: Budget,
) -> Result<Measured, BenchError> {
    let verify = ctx.opts.job.verify();
    let mut run = Run::new(mesh, plan, op, b.warmup + b.iters + ARRIVAL_PROBES)?;
    // Nobody writes the new layout while a peer still checks the previous point.
    ctx.bs.barrier()?;
    run.start()?;
    let mut phases = Phases {
        run,
        bs: ctx.bs,
        verify,
        iters: b.iters,
        warm: 0,
    };
    let spent = ctx.run_budgeted(b, Span::Between, &mut phases)?;
    let mut run = phases.run;
    run.mesh.count_from_now(false);
    let per_rail = run.mesh.rail_loads();
    // The arrival probes (see `locate::arrival_suspect` for what they are for). In the
    // back-to-back loop a rank starts iteration i+1 when the slowest chunk of i reached *it*, so
    // behind a slow node the ranks' starts drift apart; after a barrier every rank starts
    // together. They land in half 1, where no late write of the timed loop lands; every chunk
    // of a probe has arrived everywhere before the next barrier, so the checked last probe
    // sees only its own writes.
    let mut errors = spent.errors;
    run.timing = Timing::Probe;
    for k in 0..ARRIVAL_PROBES {
        let last = k + 1 == ARRIVAL_PROBES;
        run.fill_if(verify && last)?;
        ctx.bs.barrier()?;
        run.exchange(1, false, ARRIVAL_PROBES - k - 1)?;
        errors += run.finish(verify && last, 1)?;
    }
    run.mesh.drain_local()?;
    let outcome = RankOutcome {
        per_rail,
        warmup_done: spent.warmup_done,
        stopped_by: spent.stopped_by.name().to_string(),
        src_delay_ns: run.loop_arrival_ns(spent.samples_ns.len() as u64),
        src_probe_ns: run.probe_arrival_ns(),
    };
    Ok(Measured {
        samples_ns: spent.samples_ns,
        errors,
        detail: outcome.into(),
    })
}

/// The two phases of a point as the budgeted loop sees them: warm-up iterations are checked
/// (when verifying) and alternate receive halves; timed ones land in half 0, unchecked.
struct Phases<'c, 'm> {
    run: Run<'m>,
    bs: &'c Bootstrap,
    verify: bool,
    iters: u64,
    /// Warm-up iterations run so far.
    warm: u64,
}

impl Phases<'_, '_> {
    fn half(&self, phase: Phase) -> usize {
        match phase {
            Phase::Warmup => (self.warm % 2) as usize,
            Phase::Timed => 0,
        }
    }
}

impl Budgeted for Phases<'_, '_> {
    fn prepare(&mut self, phase: Phase) -> Result<(), BenchError> {
        self.run.fill_if(self.verify && phase == Phase::Warmup)
    }

    fn body(&mut self, phase: Phase, last: Option<Stop>) -> Result<bool, BenchError> {
        // When the loop stops here: after the warm-up come the timed iterations and the
        // probes, after the timed part only the probes.
        let after = match phase {
            Phase::Warmup => self.iters + ARRIVAL_PROBES,
            Phase::Timed => ARRIVAL_PROBES,
        };
        self.run.timing = if phase == Phase::Timed {
            Timing::Loop
        } else {
            Timing::Off
        };
        let half = self.half(phase);
        self.run.exchange(half, last.is_some(), after)
    }

    fn check(&mut self, phase: Phase) -> Result<u64, BenchError> {
        let half = self.half(phase);
        if phase == Phase::Warmup {
            self.warm += 1;
        }
        self.run.finish(self.verify && phase == Phase::Warmup, half)
    }

    fn timed_from_here(&mut self) -> Result<(), BenchError> {
        self.bs.barrier()?;
        self.run.mesh.count_from_now(true);
        Ok(())
    }
}

/// Which arrivals [`Run::count`] times.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Timing {
    Off,
    /// The timed loop's back-to-back iterations.
    Loop,
    /// The barrier-started probes after it.
    Probe,
}

/// A receive posted for `Op::Sendrecv`: where it lands and which stripe of a chunk it takes.
#[derive(Clone, Copy, Debug)]
struct RecvSlot {
    rail: usize,
    off: usize,
    len: usize,
    stripe: u32,
}

/// How a chunk travels: its stripes, or one 8-byte signal when it has no bytes.
fn stripes(mesh: &Mesh, a: u32, b: u32, len: usize, sends: bool) -> Vec<Stripe> {
    if len == 0 {
        Vec::new()
    } else {
        mesh.route(a, b, len, sends)
    }
}

/// One point's state on this rank: the global iteration number, the arrival counts of the
/// current and the next iteration, and (send/recv) the receive slots.
struct Run<'m> {
    mesh: &'m mut Mesh,
    plan: &'m Plan,
    op: Op,
    n: u32,
    me: u32,
    /// Global iteration number within this point.
    g: u64,
    /// The routes of each source's chunk into us, and of our chunk to each peer.
    stripes_in: Vec<Vec<Stripe>>,
    stripes_out: Vec<Vec<Stripe>>,
    /// Arrivals expected from each source per iteration (a zero-byte chunk: its one signal).
    want_from: Vec<u32>,
    expected: u64,
    /// Arrivals by iteration parity, total and per source.
    got: [u64; 2],
    got_from: [Vec<u32>; 2],
    /// A chunk of the iteration (by parity) carried the stop mark.
    stop: [bool; 2],
    /// send/recv: the receive slots, which iteration's data each holds, and how many receives
    /// this point still has to post.
    slots: Vec<RecvSlot>,
    landed: Vec<(usize, u64, u32)>,
    to_post: u64,
    /// Which arrivals are timed now; by source, the summed arrival times of the timed loop and
    /// each probe's arrival time, ns after the iteration started on this rank.
    timing: Timing,
    loop_ns: Vec<u128>,
    probe_ns: Vec<Vec<u64>>,
    /// The iteration being posted: the next peer (as an offset from this rank), the receive
    /// half and the CQ data of its chunks.
    next: u32,
    post_half: usize,
    post_data: u64,
    /// By destination: our chunk to it is announced by a signal; and the signalled chunks whose
    /// writes are still in flight (their signal not yet posted).
    signal_to: Vec<bool>,
    unsignalled: usize,
}

impl<'m> Run<'m> {
    fn new(
        mesh: &'m mut Mesh,
        plan: &'m Plan,
        op: Op,
        total_iters: u64,
    ) -> Result<Self, BenchError> {
        let n = mesh.world();
        let me = mesh.me();
        let sends = op == Op::Sendrecv;
        let stripes_in: Vec<_> = (0..n)
            .map(|s| stripes(mesh, s, me, plan.inc[s as usize].len, sends))
            .collect();
        let stripes_out: Vec<_> = (0..n)
            .map(|p| stripes(mesh, me, p, plan.out[p as usize].len, sends))
            .collect();
        let signalled = |len: usize| !sends && plan.signal_above.is_some_and(|t| len > t);
        let want_from: Vec<u32> = (0..n)
            .map(|s| {
                if s == me {
                    0
                } else if signalled(plan.inc[s as usize].len) {
                    1
                } else {
                    stripes_in[s as usize].len().max(1) as u32
                }
            })
            .collect();
        let signal_to: Vec<bool> = (0..n)
            .map(|p| p != me && signalled(plan.out[p as usize].len))
            .collect();
        let expected: u64 = want_from.iter().map(|&w| w as u64).sum();
        let mut slots = Vec::new();
        if sends {
            let len0 = plan.inc.iter().map(|c| c.len).max().unwrap_or(0);
            if plan.inc.iter().any(|c| c.len != len0) {
                return Err(BenchError::usage(
                    "send/recv exchanges need chunks of one size from every source; use RDMA writes",
                ));
            }
            for half in 0..2 {
                for s in (0..n).filter(|&s| s != me) {
                    for (i, st) in stripes_in[s as usize].iter().enumerate() {
                        slots.push(RecvSlot {
                            rail: st.rail,
                            off: half * plan.half + plan.inc[s as usize].off + st.off,
                            len: st.len,
                            stripe: i as u32,
                        });
                    }
                }
            }
        }
        Ok(Run {
            mesh,
            plan,
            op,
            n,
            me,
            g: 0,
            stripes_in,
            stripes_out,
            want_from,
            expected,
            got: [0, 0],
            got_from: [vec![0; n as usize], vec![0; n as usize]],
            stop: [false, false],
            slots,
            landed: Vec::new(),
            to_post: expected * total_iters,
            timing: Timing::Off,
            loop_ns: vec![0; n as usize],
            probe_ns: vec![Vec::new(); n as usize],
            next: 0,
            post_half: 0,
            post_data: 0,
            signal_to,
            unsignalled: 0,
        })
    }

    /// Posts the first receives (send/recv).
    fn start(&mut self) -> Result<(), BenchError> {
        if self.op == Op::Sendrecv {
            for i in 0..self.slots.len() {
                self.post_slot(i)?;
            }
        }
        Ok(())
    }

    fn post_slot(&mut self, i: usize) -> Result<(), BenchError> {
        if self.to_post == 0 {
            return Ok(());
        }
        self.to_post -= 1;
        let s = self.slots[i];
        self.mesh.submit(Request {
            op: Verb::Recv,
            peer: Remote::Any,
            local: s.off,
            remote: 0,
            route: &on_rail(s.rail, s.len),
            data: None,
            completion: Completion::Received(i),
        })
    }

    /// Each source's mean arrival time in the timed loop (`iters` iterations; a chunk of
    /// iteration i+1 that arrived before this rank started it counts 0), ns.
    fn loop_arrival_ns(&self, iters: u64) -> Vec<u64> {
        self.loop_ns
            .iter()
            .map(|&t| u64::try_from(t / u128::from(iters.max(1))).unwrap_or(u64::MAX))
            .collect()
    }

    /// Each source's median arrival time over the probes, ns.
    fn probe_arrival_ns(&mut self) -> Vec<u64> {
        self.probe_ns
            .iter_mut()
            .map(|v| {
                v.sort_unstable();
                crate::stats::median(v).unwrap_or(0)
            })
            .collect()
    }

    /// Counts one arrival of `data` (kind, iteration, source); returns its iteration. While
    /// timing, the arrival that completes a source's chunk of this iteration records the time
    /// since `t0` (the iteration's start) for that source.
    fn count(&mut self, data: u64, t0: Instant) -> Result<u64, BenchError> {
        let (kind, it, src) = parse_cq_data(data)
            .filter(|(k, _, s)| {
                matches!(k, Kind::Payload | Kind::Stop) && *s < self.n && *s != self.me
            })
            .ok_or_else(|| {
                BenchError::failed(format!(
                    "rank {} got CQ data {data:#x} that no all-to-all peer sends; are all ranks running the same efabench?",
                    self.me
                ))
            })?;
        let g = if it == self.g % ITER_MOD {
            self.g
        } else if it == (self.g + 1) % ITER_MOD {
            self.g + 1
        } else {
            return Err(BenchError::failed(format!(
                "rank {} at iteration {} got a chunk of iteration {it} (mod {ITER_MOD}) from rank {src}; the ranks are out of step",
                self.me, self.g
            )));
        };
        let p = (g % 2) as usize;
        self.got[p] += 1;
        self.stop[p] |= kind == Kind::Stop;
        self.got_from[p][src as usize] += 1;
        if g == self.g && self.got_from[p][src as usize] == self.want_from[src as usize] {
            let ns = t0.elapsed().as_nanos();
            match self.timing {
                Timing::Off => {}
                Timing::Loop => self.loop_ns[src as usize] += ns,
                Timing::Probe => self.probe_ns[src as usize].push(ns as u64),
            }
        }
        Ok(g)
    }

    /// Fills every chunk we send with the pattern of (this iteration, source, destination,
    /// stripe), when `verify`.
    fn fill_if(&mut self, verify: bool) -> Result<(), BenchError> {
        if !verify {
            return Ok(());
        }
        let (me, g) = (self.me, self.g);
        for p in 0..self.n {
            let c = self.plan.out[p as usize];
            if p == me {
                self.mesh
                    .fill_send(c.off, c.len, pattern::seed(g, me, me, 0))?;
                continue;
            }
            for (i, st) in self.stripes_out[p as usize].iter().enumerate() {
                self.mesh
                    .fill_send(c.off + st.off, st.len, pattern::seed(g, me, p, i as u32))?;
            }
        }
        Ok(())
    }

    /// Posts our chunks (or their signals) to the first peers, up to the plan's window, and
    /// copies our own chunk; [`Run::post_more`] posts the rest as earlier ones complete.
    fn post(&mut self, half: usize, data: u64) -> Result<(), BenchError> {
        let me = self.me as usize;
        (self.next, self.post_half, self.post_data) = (1, half, data);
        self.post_more()?;
        let own = self.plan.out[me];
        if own.len > 0 {
            let to = half * self.plan.half + self.plan.inc[me].off;
            self.mesh.copy_local(own.off, to, own.len)?;
        }
        Ok(())
    }

    /// Posts the next peers' chunks, in the order rank + 1, rank + 2, ..., while fewer than the
    /// window are in flight.
    #[inline]
    fn post_more(&mut self) -> Result<(), BenchError> {
        let (n, me) = (self.n, self.me);
        let base = self.post_half * self.plan.half;
        let data = self.post_data;
        while self.next < n && self.mesh.outstanding as usize + self.unsignalled < self.plan.window
        {
            let p = (me + self.next) % n;
            self.next += 1;
            let c = self.plan.out[p as usize];
            let at = base + self.plan.remote[p as usize];
            if self.stripes_out[p as usize].is_empty() {
                self.mesh.signal(p, data)?;
            }
            let (op, data, completion) = match (self.signal_to[p as usize], self.op) {
                // Announced by a signal once every stripe completed: tracked by destination.
                (true, _) => (Verb::Write, None, Completion::Tracked(p as usize)),
                (false, Op::Write) => (Verb::Write, Some(data), Completion::Counted),
                (false, Op::Sendrecv) => (Verb::Send, Some(data), Completion::Counted),
            };
            self.mesh.submit(Request {
                op,
                peer: Remote::Rank(p),
                local: c.off,
                remote: at,
                route: &self.stripes_out[p as usize],
                data,
                completion,
            })?;
            if self.signal_to[p as usize] {
                self.unsignalled += 1;
            }
        }
        Ok(())
    }

    /// The timed part of one iteration: post every chunk, wait for every arrival of this
    /// iteration and every local completion. Returns whether any rank (this one when `ask`)
    /// marked the iteration as its last of the loop. `half` is the receive half the chunks land
    /// in; `after` is how many iterations this point runs after this one when the loop stops
    /// here.
    fn exchange(&mut self, half: usize, ask: bool, after: u64) -> Result<bool, BenchError> {
        let g = self.g;
        let p = (g % 2) as usize;
        let (n, me) = (self.n, self.me);
        let t0 = Instant::now();
        self.post(
            half,
            cq_data(if ask { Kind::Stop } else { Kind::Payload }, g, me),
        )?;
        // Wait for this iteration's arrivals and our completions.
        loop {
            while let Some(d) = self.mesh.arrivals.pop_front() {
                self.count(d, t0)?;
            }
            while let Some(r) = self.mesh.received.pop_front() {
                let slot = self.slots.get(r.index).copied().ok_or_else(|| {
                    BenchError::failed(format!("a receive completed for unknown slot {}", r.index))
                })?;
                if r.len != slot.len {
                    return Err(BenchError::failed(format!(
                        "rank {me} received {} bytes into a {}-byte slot; are all ranks running the same options?",
                        r.len, slot.len
                    )));
                }
                let it = self.count(r.data, t0)?;
                // Reposted once its iteration is over (and checked), so a later message cannot
                // overwrite it first.
                self.landed.push((r.index, it, (r.data & 0xFFFF) as u32));
            }
            while let Some(d) = self.mesh.take_done() {
                // Every stripe of a signalled chunk is written: announce it.
                let peer = d.index as u32;
                self.mesh.signal(peer, self.post_data)?;
                self.unsignalled -= 1;
            }
            if self.next < n {
                self.post_more()?;
            }
            if self.got[p] >= self.expected
                && self.mesh.outstanding == 0
                && self.unsignalled == 0
                && self.next >= n
            {
                break;
            }
            let want = self.expected;
            let got_from = &self.got_from[p];
            let want_from = &self.want_from;
            self.mesh.wait_progress(move |m| {
                let missing: Vec<String> = (0..n)
                    .filter(|&s| got_from[s as usize] < want_from[s as usize])
                    .map(|s| s.to_string())
                    .collect();
                if missing.is_empty() {
                    format!("{} local completions (iteration {g})", m.outstanding)
                } else {
                    format!(
                        "the chunks of iteration {g} from {} {} ({want} stripes expected in all)",
                        if missing.len() == 1 { "rank" } else { "ranks" },
                        missing.join(", ")
                    )
                }
            })?;
        }
        if self.got[p] > self.expected {
            return Err(BenchError::failed(format!(
                "rank {me} got {} stripes in iteration {g}, expected {}; a chunk arrived twice",
                self.got[p], self.expected
            )));
        }
        let stop = ask || self.stop[p];
        if stop && self.op == Op::Sendrecv {
            // The next iteration's receives are posted already; post only what the `after`
            // iterations still need, so none is left posted into the next point.
            self.to_post = after.saturating_sub(1) * self.expected;
        }
        Ok(stop)
    }

    /// The untimed end of an iteration: checks it (when `check`; else frees its receive slots)
    /// and moves on to the next. Returns the payload words that failed.
    fn finish(&mut self, check: bool, half: usize) -> Result<u64, BenchError> {
        let g = self.g;
        let p = (g % 2) as usize;
        let errors = if check { self.check(g, half)? } else { 0 };
        if !check && self.op == Op::Sendrecv {
            // This iteration's receive slots are free again.
            for (idx, it, src) in std::mem::take(&mut self.landed) {
                if it == g {
                    self.post_slot(idx)?;
                } else {
                    self.landed.push((idx, it, src));
                }
            }
        }
        self.got[p] = 0;
        self.stop[p] = false;
        self.got_from[p].iter_mut().for_each(|c| *c = 0);
        self.g += 1;
        Ok(errors)
    }

    /// Checks every chunk of iteration `g` in receive half `half`, ours and every peer's,
    /// stripe by stripe; returns the words that differ.
    fn check(&mut self, g: u64, half: usize) -> Result<u64, BenchError> {
        let (n, me) = (self.n, self.me);
        let base = half * self.plan.half;
        let own = self.plan.inc[me as usize];
        let mut errors = self
            .mesh
            .check_recv(base + own.off, own.len, pattern::seed(g, me, me, 0));
        match self.op {
            Op::Write => {
                for s in (0..n).filter(|&s| s != me) {
                    let c = self.plan.inc[s as usize];
                    for (i, st) in self.stripes_in[s as usize].iter().enumerate() {
                        errors += self.mesh.check_recv(
                            base + c.off + st.off,
                            st.len,
                            pattern::seed(g, s, me, i as u32),
                        );
                    }
                }
            }
            Op::Sendrecv => {
                for (idx, it, src) in std::mem::take(&mut self.landed) {
                    if it != g {
                        self.landed.push((idx, it, src));
                        continue;
                    }
                    let s = self.slots[idx];
                    errors +=
                        self.mesh
                            .check_recv(s.off, s.len, pattern::seed(g, src, me, s.stripe));
                    self.post_slot(idx)?;
                }
            }
        }
        // Every peer delivered exactly its stripes.
        for s in (0..n).filter(|&s| s != me) {
            let want = self.want_from[s as usize];
            if self.got_from[(g % 2) as usize][s as usize] != want {
                return Err(BenchError::failed(format!(
                    "rank {me} got {} stripes from rank {s} in iteration {g}, expected {want}",
                    self.got_from[(g % 2) as usize][s as usize]
                )));
            }
        }
        Ok(errors)
    }
}
