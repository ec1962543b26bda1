//! The measured round: the write stream one rank runs to its destination and from its source
//! at once, with READY/ACK signals in CQ data and the last window marked, verification of every
//! window (untimed), and the time budget of `--max-time` kept by the harness's budgeted loop.

use std::time::Duration;

use efabench_fabric::Stripe;

use serde::{Deserialize, Serialize};

use super::PairsSpec;
use crate::error::BenchError;
use crate::harness::{Budgeted, Ctx, Measured, Phase, Span, Stop};
use crate::mesh::{
    cq_data, parse_cq_data, Completion, Kind, Mesh, RailLoad, Remote, Request, Verb, ITER_MOD,
};
use crate::pattern;

/// What a rank's round says beyond its samples and errors; it travels to rank 0 with them
/// ([`Measured::detail`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundFacts {
    /// The sender's bytes and operations per rail, as the mesh counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_rail: Option<Vec<RailLoad>>,
    /// Why the sender stopped (absent on a rank that sent nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<Stop>,
    /// Warm-up windows actually sent (fewer than `-w` when a tenth of `--max-time` ran out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_done: Option<u64>,
    /// Each rail measured alone, Gbps (two rails or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail_gbps: Option<Vec<f64>>,
}

/// This rank's part of one round: a write stream to `to` and/or from `from`, at once.
///
/// The sender decides how long its pair runs, through the harness's budgeted loop
/// ([`Ctx::run_budgeted`]): warm-up ends after `-w` windows or a tenth of `--max-time`, and the
/// timed part after `-n` windows or `--max-time`, whichever comes first (at least one timed
/// window). The last window's CQ data says so (`Stop` in place of `Payload`), so the receiver
/// sends no READY after it and both ends finish with nothing in flight; a link 100 times slower
/// than the others still yields its number within the budget. While the sender waits for a
/// READY or an ACK, this rank's receiver side moves too (a rank of a ring shift sends and
/// receives at once).
pub(super) fn stream(
    ctx: &Ctx,
    mesh: &mut Mesh,
    spec: &PairsSpec,
    to: Option<u32>,
    from: Option<u32>,
    slow: Option<Duration>,
    only_rail: Option<usize>,
) -> Result<(Measured, RoundFacts), BenchError> {
    let me = mesh.me();
    let verify = ctx.opts.job.verify();
    // One rail alone carries whole messages when a rail is measured by itself.
    let routes = |mesh: &Mesh, a: u32, b: u32| match only_rail {
        Some(rail) => vec![Stripe {
            rail,
            off: 0,
            len: spec.size,
        }],
        None => mesh.route(a, b, spec.size, false),
    };
    let send_routes = to.map(|d| routes(mesh, me, d)).unwrap_or_default();
    let recv_routes = from.map(|s| routes(mesh, s, me)).unwrap_or_default();
    let mut st = Streams {
        expect: recv_routes.len() as u64 * spec.window,
        mesh,
        me,
        size: spec.size,
        win: spec.slots.max(1),
        per_window: spec.window,
        verify,
        slow,
        to,
        from,
        send_routes,
        recv_routes,
        sw: 0,
        readies: 0,
        acks: 0,
        sending: to.is_some(),
        rw: 0,
        got: 0,
        rlast: false,
        rstopped: from.is_none(),
        errors: 0,
    };
    if let Some(s) = from {
        st.mesh.signal(s, cq_data(Kind::Ready, 0, me))?;
    }
    let spent = match to {
        Some(_) => {
            let spent = ctx.run_budgeted(spec.budget, Span::Body, &mut st)?;
            st.mesh.count_from_now(false);
            st.sending = false;
            Some(spent)
        }
        None => None,
    };
    // The receiver side runs until its sender's last window.
    while !st.rstopped {
        if !st.pump()? {
            st.idle()?;
        }
    }
    st.mesh.drain_local()?;
    let facts = RoundFacts {
        per_rail: Some(st.mesh.rail_loads()),
        stopped_by: spent.as_ref().map(|s| s.stopped_by),
        warmup_done: spent.as_ref().map(|s| s.warmup_done),
        rail_gbps: None,
    };
    let (samples_ns, sent_errors) = spent.map_or((Vec::new(), 0), |s| (s.samples_ns, s.errors));
    let m = Measured {
        samples_ns,
        errors: st.errors + sent_errors,
        ..Measured::default()
    };
    Ok((m, facts))
}

/// One rank's two streams of a round: the windows it sends to `to` and those it receives from
/// `from`, each numbered from 0 (the number travels in the CQ data, modulo [`ITER_MOD`]).
struct Streams<'m> {
    mesh: &'m mut Mesh,
    me: u32,
    size: usize,
    /// Buffer slots a window cycles through, and messages per window.
    win: usize,
    per_window: u64,
    verify: bool,
    /// Test hook: a slow rank sleeps this long in each window it sends.
    slow: Option<Duration>,
    to: Option<u32>,
    from: Option<u32>,
    send_routes: Vec<Stripe>,
    recv_routes: Vec<Stripe>,
    /// Sender: the window being sent, the READY and ACK words received (READY `w` lets window
    /// `w` go; ACK `w` says every stripe of it arrived), and whether the sender still runs.
    sw: u64,
    readies: u64,
    acks: u64,
    sending: bool,
    /// Receiver: the window being received, its stripes so far, whether it is the sender's last,
    /// whether the last one was received, and the payload words that failed.
    rw: u64,
    got: u64,
    rlast: bool,
    rstopped: bool,
    expect: u64,
    errors: u64,
}

impl Streams<'_> {
    /// Sorts what arrived and moves the receiver on (ACK, check, READY) when its window is
    /// complete; returns whether anything moved.
    fn pump(&mut self) -> Result<bool, BenchError> {
        let (me, from, to) = (self.me, self.from, self.to);
        let mut moved = false;
        while let Some(d) = self.mesh.arrivals.pop_front() {
            let (kind, it, src) = parse_cq_data(d).ok_or_else(|| {
                BenchError::failed(format!("rank {me} got CQ data {d:#x} no pairs peer sends"))
            })?;
            let window = it == self.rw % ITER_MOD && !self.rstopped;
            match kind {
                Kind::Payload if Some(src) == from && window => self.got += 1,
                Kind::Stop if Some(src) == from && window => {
                    self.got += 1;
                    self.rlast = true;
                }
                Kind::Ready if Some(src) == to && it == self.readies % ITER_MOD => {
                    self.readies += 1
                }
                Kind::Ack if Some(src) == to && it == self.acks % ITER_MOD => self.acks += 1,
                _ => {
                    return Err(BenchError::failed(format!(
                        "rank {me} got {kind:?} for window {it} from rank {src}, out of step \
                         (expected payload of window {} from {from:?}, ready {} / ack {} from {to:?})",
                        self.rw, self.readies, self.acks
                    )))
                }
            }
            moved = true;
        }
        if let (Some(src), false) = (from, self.rstopped) {
            if self.got >= self.expect {
                if self.got > self.expect {
                    return Err(BenchError::failed(format!(
                        "rank {me} got {} stripes from rank {src} in window {}, expected {}",
                        self.got, self.rw, self.expect
                    )));
                }
                self.mesh.signal(src, cq_data(Kind::Ack, self.rw, me))?;
                if self.verify {
                    for slot in 0..self.win.min(self.per_window as usize) {
                        for (i, st) in self.recv_routes.iter().enumerate() {
                            self.errors += self.mesh.check_recv(
                                slot * self.size + st.off,
                                st.len,
                                pattern::seed(self.rw, src, me, (slot as u32) << 8 | i as u32),
                            );
                        }
                    }
                }
                self.rw += 1;
                self.got = 0;
                if self.rlast {
                    self.rstopped = true;
                } else {
                    self.mesh.signal(src, cq_data(Kind::Ready, self.rw, me))?;
                }
                moved = true;
            }
        }
        Ok(moved)
    }

    /// Waits for the fabric to move, naming what this rank still waits for.
    fn idle(&mut self) -> Result<(), BenchError> {
        let (from, to, rw, sw) = (self.from, self.to, self.rw, self.sw);
        let (rdone, sdone) = (self.rstopped, !self.sending);
        self.mesh.wait_progress(move |_| {
            let mut parts = Vec::new();
            if let (Some(s), false) = (from, rdone) {
                parts.push(format!("window {rw} from rank {s}"));
            }
            if let (Some(d), false) = (to, sdone) {
                parts.push(format!("rank {d} to acknowledge window {sw}"));
            }
            parts.join(" and ")
        })
    }

    /// Moves both streams until the sender's counter `which` passes the window being sent.
    fn wait_for(&mut self, which: fn(&Self) -> u64) -> Result<(), BenchError> {
        while which(self) <= self.sw {
            if !self.pump()? {
                self.idle()?;
            }
        }
        Ok(())
    }
}

impl Budgeted for Streams<'_> {
    /// Fills the window (when verifying) and waits for the receiver's READY.
    fn prepare(&mut self, _: Phase) -> Result<(), BenchError> {
        let (me, sw) = (self.me, self.sw);
        let dst = self.to.expect("only a sender runs the loop");
        if self.verify {
            self.mesh.drain_local()?;
            for slot in 0..self.win {
                for (i, st) in self.send_routes.iter().enumerate() {
                    self.mesh.fill_send(
                        slot * self.size + st.off,
                        st.len,
                        pattern::seed(sw, me, dst, (slot as u32) << 8 | i as u32),
                    )?;
                }
            }
        }
        self.wait_for(|s| s.readies)
    }

    /// Posts the window (the last one of the timed part marked) and waits for its ACK.
    fn body(&mut self, phase: Phase, last: Option<Stop>) -> Result<bool, BenchError> {
        let dst = self.to.expect("only a sender runs the loop");
        if let Some(d) = self.slow {
            std::thread::sleep(d);
        }
        let kind = match (phase, last) {
            (Phase::Timed, Some(_)) => Kind::Stop,
            _ => Kind::Payload,
        };
        let data = cq_data(kind, self.sw, self.me);
        for pos in 0..self.per_window as usize {
            let at = (pos % self.win) * self.size;
            self.mesh.submit(Request {
                op: Verb::Write,
                peer: Remote::Rank(dst),
                local: at,
                remote: at,
                route: &self.send_routes,
                data: Some(data),
                completion: Completion::Counted,
            })?;
        }
        self.wait_for(|s| s.acks)?;
        self.sw += 1;
        Ok(last.is_some())
    }

    fn timed_from_here(&mut self) -> Result<(), BenchError> {
        self.mesh.count_from_now(true);
        Ok(())
    }
}
