//! The measured round: the write stream one rank runs to its destination and from its source
//! at once, with READY/ACK/STOP signals in CQ data, verification of every window (untimed) and
//! the time budget of `--max-time`.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::PairsSpec;
use crate::error::BenchError;
use crate::harness::Measured;
use crate::mesh::{cq_data, parse_cq_data, Kind, Mesh, ITER_MOD};
use crate::pattern;
use crate::stats::Samples;

/// How the sender ended a pair's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum StopReason {
    /// `-n` timed windows were sent.
    Count,
    /// `--max-time` ran out first.
    Time,
}

impl StopReason {
    pub(super) fn name(self) -> &'static str {
        match self {
            StopReason::Count => "count",
            StopReason::Time => "time",
        }
    }
}

/// What a rank's round says beyond its samples and errors; it travels to rank 0 with them
/// ([`Measured::detail`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct RoundFacts {
    /// The sender's bytes and operations per rail, as the mesh counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_rail: Option<Value>,
    /// Why the sender stopped (absent on a rank that sent nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<StopReason>,
    /// Warm-up windows actually sent (fewer than `-w` when a tenth of `--max-time` ran out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_done: Option<u64>,
    /// Each rail measured alone, Gbps (two rails or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail_gbps: Option<Vec<f64>>,
}

/// This rank's part of one round: a write stream to `to` and/or from `from`, at once.
///
/// The sender decides how long its pair runs: warm-up ends after `-w` windows or a tenth of
/// `--max-time`, and the timed part after `-n` windows or `--max-time`, whichever comes first
/// (at least one timed window). It says so with a STOP in place of the window the receiver's
/// READY asked for, so both ends finish with nothing in flight and a link 100 times slower than
/// the others still yields its number within the budget.
pub(super) fn stream(
    mesh: &mut Mesh,
    spec: &PairsSpec,
    to: Option<u32>,
    from: Option<u32>,
    verify: bool,
    slow: Option<Duration>,
    only_rail: Option<usize>,
) -> Result<(Measured, RoundFacts), BenchError> {
    let me = mesh.me();
    let size = spec.size;
    let win = spec.slots.max(1);
    let per_window = spec.window;
    let warm_budget = spec.max_time / 10;
    // Sender state.
    let mut samples = Samples::with_capacity(spec.iters.min(1 << 16) as usize);
    let mut sw = 0u64; // window being sent
    let mut in_flight: Option<Instant> = None;
    let mut readies = 0u64; // READY words received (the next one expected is for window `readies`)
    let mut acks = 0u64;
    let mut started: Option<Instant> = None; // first window posted
    let mut timed: Option<(u64, Instant)> = None; // first timed window and when it started
    let mut stopped: Option<StopReason> = None;
    // One rail alone carries whole messages when a rail is measured by itself.
    let routes = |mesh: &Mesh, a: u32, b: u32| match only_rail {
        Some(rail) => vec![efabench_fabric::Stripe {
            rail,
            off: 0,
            len: size,
        }],
        None => mesh.route(a, b, size, false),
    };
    let send_routes = to.map(|d| routes(mesh, me, d));
    let recv_routes = from.map(|s| routes(mesh, s, me));
    // Receiver state.
    let mut rw = 0u64;
    let mut got = 0u64;
    let mut rstopped = false;
    let expect = recv_routes
        .as_ref()
        .map(|r| r.len() as u64 * per_window)
        .unwrap_or(0);
    let mut errors = 0u64;
    if let Some(s) = from {
        mesh.signal(s, cq_data(Kind::Ready, 0, me))?;
    }
    let mut filled = u64::MAX;
    loop {
        // Sort what arrived.
        while let Some(d) = mesh.arrivals.pop_front() {
            let (kind, it, src) = parse_cq_data(d).ok_or_else(|| {
                BenchError::failed(format!("rank {me} got CQ data {d:#x} no pairs peer sends"))
            })?;
            match kind {
                Kind::Payload if Some(src) == from && it == rw % ITER_MOD && !rstopped => got += 1,
                Kind::Stop if Some(src) == from && it == rw % ITER_MOD && got == 0 => {
                    rstopped = true
                }
                Kind::Ready if Some(src) == to && it == readies % ITER_MOD => readies += 1,
                Kind::Ack if Some(src) == to && it == acks % ITER_MOD => acks += 1,
                _ => {
                    return Err(BenchError::failed(format!(
                        "rank {me} got {kind:?} for window {it} from rank {src}, out of step \
                         (expected payload of window {rw} from {from:?}, ready {readies} / ack {acks} from {to:?})"
                    )))
                }
            }
        }
        let mut moved = false;
        // Sender: fill, wait for READY, post the window (or STOP), wait for the ACK.
        if let (Some(dst), Some(routes)) = (to, send_routes.as_ref()) {
            if stopped.is_none() {
                if in_flight.is_none() && filled != sw && verify {
                    mesh.drain_local()?;
                    for slot in 0..win {
                        for (i, st) in routes.iter().enumerate() {
                            mesh.fill_send(
                                slot * size + st.off,
                                st.len,
                                pattern::seed(sw, me, dst, (slot as u32) << 8 | i as u32),
                            )?;
                        }
                    }
                    filled = sw;
                    moved = true;
                }
                if in_flight.is_none() && readies > sw {
                    let now = Instant::now();
                    let began = *started.get_or_insert(now);
                    if timed.is_none()
                        && (sw >= spec.warmup || now.duration_since(began) >= warm_budget)
                    {
                        timed = Some((sw, now));
                        mesh.count_from_now(true);
                    }
                    let stop = timed.and_then(|(first, at)| {
                        if sw >= first + spec.iters {
                            Some(StopReason::Count)
                        } else if sw > first && now.duration_since(at) >= spec.max_time {
                            Some(StopReason::Time)
                        } else {
                            None
                        }
                    });
                    if let Some(why) = stop {
                        mesh.count_from_now(false);
                        mesh.signal(dst, cq_data(Kind::Stop, sw, me))?;
                        stopped = Some(why);
                    } else {
                        let t0 = Instant::now();
                        if let Some(d) = slow {
                            std::thread::sleep(d);
                        }
                        let data = cq_data(Kind::Payload, sw, me);
                        for pos in 0..per_window as usize {
                            let slot = pos % win;
                            for st in routes {
                                let off = slot * size + st.off;
                                mesh.write(dst, st.rail, off, st.len, off, data)?;
                            }
                        }
                        in_flight = Some(t0);
                    }
                    moved = true;
                }
                if let Some(t0) = in_flight {
                    if acks > sw {
                        let dt = t0.elapsed().as_nanos() as u64;
                        if timed.is_some() {
                            samples.push(dt);
                        }
                        in_flight = None;
                        sw += 1;
                        moved = true;
                    }
                }
            }
        }
        // Receiver: count, ACK, check, READY.
        if let (Some(src), Some(routes)) = (from, recv_routes.as_ref()) {
            if !rstopped && got >= expect {
                if got > expect {
                    return Err(BenchError::failed(format!(
                        "rank {me} got {got} stripes from rank {src} in window {rw}, expected {expect}"
                    )));
                }
                mesh.signal(src, cq_data(Kind::Ack, rw, me))?;
                if verify {
                    for slot in 0..win.min(per_window as usize) {
                        for (i, st) in routes.iter().enumerate() {
                            errors += mesh.check_recv(
                                slot * size + st.off,
                                st.len,
                                pattern::seed(rw, src, me, (slot as u32) << 8 | i as u32),
                            );
                        }
                    }
                }
                rw += 1;
                got = 0;
                mesh.signal(src, cq_data(Kind::Ready, rw, me))?;
                moved = true;
            }
        }
        if (to.is_none() || stopped.is_some()) && (from.is_none() || rstopped) {
            break;
        }
        if !moved {
            let (rw_, sw_, rdone, sdone) = (rw, sw, rstopped, stopped.is_some());
            mesh.wait_progress(move |_| {
                let mut parts = Vec::new();
                if let Some(s) = from {
                    if !rdone {
                        parts.push(format!("window {rw_} from rank {s}"));
                    }
                }
                if let Some(d) = to {
                    if !sdone {
                        parts.push(format!("rank {d} to acknowledge window {sw_}"));
                    }
                }
                parts.join(" and ")
            })?;
        }
    }
    mesh.drain_local()?;
    let facts = RoundFacts {
        per_rail: Some(mesh.per_rail()),
        stopped_by: stopped,
        warmup_done: timed.map(|(first, _)| first),
        rail_gbps: None,
    };
    let m = Measured {
        samples_ns: samples.into_vec(),
        errors,
        ..Measured::default()
    };
    Ok((m, facts))
}
