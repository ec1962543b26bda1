//! The budgeted loop: warm-up and timed iterations that end after a count *or* a time budget,
//! whichever comes first, with every rank of an exchange ending on the same iteration. It serves
//! the benchmarks whose slow parts must still yield numbers within `--max-time` instead of
//! failing the job (`alltoall`, `alltoallv`, `pairs`); the host-timed loop ([`super::timed`])
//! runs a fixed count.
//!
//! # The loop
//! A benchmark says what one iteration is ([`Budgeted`]) and hands it to the harness with
//! [`Ctx::run_budgeted`]; the loop runs two phases of them, the warm-up (at most `-w` iterations
//! or a tenth of the budget) and the timed part (at most `-n` iterations or the budget). Per
//! iteration it calls `prepare` (untimed: fill a payload, wait for a peer's go-ahead), decides
//! whether this rank ends the phase here, calls `body` with that decision, reads the clock, and
//! calls `check` (untimed: verify, repost). After the warm-up it calls `timed_from_here` (a
//! barrier, counters from zero). It returns the samples, the payload words that failed, the
//! warm-up iterations run and what ended the timed part ([`Spent`]).
//!
//! # Stopping together
//! The loop decides alone when this rank's budget ran out (at least two iterations per phase,
//! unless the count is smaller): an iteration whose start plus the previous iteration's length
//! reaches the budget is the last, so a phase of long iterations (a pair's window over a slow
//! link) ends near its budget rather than one iteration after it;
//! the ranks agree in band: the body of the iteration a rank ends on tells its peers (a mark in
//! the iteration's own messages, so no extra round trip), and a body returns `true` when its
//! iteration ends the phase, because this rank decided so or because a peer's mark arrived. The
//! last iteration by count is passed to the body too, so a peer that cannot know the count (a
//! receiver that never learns where its sender's warm-up ended) hears of it the same way.
//!
//! # The clock
//! The loop reads the clock once per iteration after the body and, with [`Span::Body`], once
//! before it: a sample is the body alone ([`Span::Body`]), or the time from the end of one body
//! to the end of the next ([`Span::Between`], as loops of back-to-back collectives time
//! themselves: one clock read per iteration). The budget is read from the same clock values, so
//! deciding costs no further read. Nothing else happens per iteration: the samples are reserved
//! up front (up to 65 536; a longer run grows them), no lock, no shared counter. The job's
//! health is not polled by the loop: every body waits through a [`crate::mesh::Mesh`], whose
//! waits check it and count progress.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::Ctx;
use crate::error::BenchError;
use crate::stats::Samples;

/// Which part of a budgeted run an iteration belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Warmup,
    Timed,
}

/// What ended a phase on this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stop {
    /// Its count (`-w` or `-n`) ran out.
    Count,
    /// Its time ran out, on this rank or on a peer that said so in band.
    Time,
}

impl Stop {
    pub fn name(self) -> &'static str {
        match self {
            Stop::Count => "count",
            Stop::Time => "time",
        }
    }
}

/// The counts and the time budget of one point: the timed part ends after `iters` iterations or
/// `max_time`, the warm-up after `warmup` or a tenth of `max_time`.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub iters: u64,
    pub warmup: u64,
    pub max_time: Duration,
}

/// What one sample spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// The body alone (two clock reads per iteration).
    Body,
    /// From the end of one body to the end of the next: prepare, check and body back to back
    /// (one clock read per iteration).
    Between,
}

/// One iteration of a budgeted benchmark on this rank (see the module docs). The benchmark
/// keeps its own iteration numbers: the loop only says which phase an iteration is in.
pub trait Budgeted {
    /// Untimed work before the next iteration.
    fn prepare(&mut self, _phase: Phase) -> Result<(), BenchError> {
        Ok(())
    }

    /// The iteration itself. `last` is `Some` when this rank ends the phase with it (and why);
    /// returns whether the phase ends with it on this rank (its own `last` or a peer's mark).
    fn body(&mut self, phase: Phase, last: Option<Stop>) -> Result<bool, BenchError>;

    /// Untimed work after the iteration: the payload words that failed verification.
    fn check(&mut self, _phase: Phase) -> Result<u64, BenchError> {
        Ok(0)
    }

    /// Called once between the warm-up and the first timed iteration.
    fn timed_from_here(&mut self) -> Result<(), BenchError> {
        Ok(())
    }
}

/// What a budgeted run gives back.
#[derive(Clone, Debug)]
pub struct Spent {
    /// One sample per timed iteration, ns.
    pub samples_ns: Vec<u64>,
    pub errors: u64,
    /// Warm-up iterations run (fewer than `-w` when its time ran out).
    pub warmup_done: u64,
    /// What ended the timed part.
    pub stopped_by: Stop,
}

/// Longest `--max-time`, seconds (an hour per point).
const MAX_TIME_S: f64 = 3600.0;

/// `--max-time` of a budgeted benchmark, bounded.
pub fn max_time_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.001..=MAX_TIME_S).contains(&v) => Ok(v),
        _ => Err(format!(
            "--max-time '{}' is not a number of seconds from 0.001 to {MAX_TIME_S}; pass e.g. --max-time 1",
            crate::size::clip(s)
        )),
    }
}

/// Runs the warm-up and the timed part of `r` within `b`, taking samples of `span`.
pub(super) fn budget_loop(
    b: Budget,
    span: Span,
    r: &mut impl Budgeted,
) -> Result<Spent, BenchError> {
    let mut errors = 0;
    let (warmup_done, _) = phase(
        r,
        Phase::Warmup,
        b.warmup,
        b.max_time / 10,
        span,
        None,
        &mut errors,
    )?;
    r.timed_from_here()?;
    let mut samples = Samples::with_capacity(b.iters.min(1 << 16) as usize);
    let (_, stopped_by) = phase(
        r,
        Phase::Timed,
        b.iters,
        b.max_time,
        span,
        Some(&mut samples),
        &mut errors,
    )?;
    Ok(Spent {
        samples_ns: samples.into_vec(),
        errors,
        warmup_done,
        stopped_by,
    })
}

/// Up to `count` iterations of `phase` within `budget`: the iterations run and what ended them.
fn phase(
    r: &mut impl Budgeted,
    phase: Phase,
    count: u64,
    budget: Duration,
    span: Span,
    mut samples: Option<&mut Samples>,
    errors: &mut u64,
) -> Result<(u64, Stop), BenchError> {
    let mut last = Instant::now();
    let mut first = None;
    // The previous iteration's length: an iteration that would end past the budget is made
    // the last, so that a phase of long iterations (a pair's window over a slow link) ends
    // near its budget instead of one iteration after it.
    let mut prev = Duration::ZERO;
    for i in 0..count {
        r.prepare(phase)?;
        let t0 = match span {
            Span::Body => Instant::now(),
            Span::Between => last,
        };
        let from = *first.get_or_insert(t0);
        let stop = if i + 1 == count {
            Some(Stop::Count)
        } else if i > 0 && t0.duration_since(from) + prev >= budget {
            Some(Stop::Time)
        } else {
            None
        };
        let ends = r.body(phase, stop)? || stop.is_some();
        let now = Instant::now();
        prev = now.duration_since(t0);
        if let Some(s) = samples.as_deref_mut() {
            s.push(prev.as_nanos() as u64);
        }
        last = now;
        *errors += r.check(phase)?;
        if ends {
            return Ok((
                i + 1,
                if i + 1 < count {
                    Stop::Time
                } else {
                    Stop::Count
                },
            ));
        }
    }
    Ok((count, Stop::Count))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank of a simulated exchange: it ends a phase when the loop says so, or when its
    /// "peer" (a fixed iteration) marks one.
    struct Fake {
        calls: Vec<(Phase, Option<Stop>)>,
        peer_marks_at: Option<usize>,
        sleep: Duration,
        checks: u64,
    }

    impl Budgeted for Fake {
        fn body(&mut self, phase: Phase, last: Option<Stop>) -> Result<bool, BenchError> {
            self.calls.push((phase, last));
            std::thread::sleep(self.sleep);
            Ok(self.peer_marks_at == Some(self.calls.len() - 1))
        }

        fn check(&mut self, _: Phase) -> Result<u64, BenchError> {
            self.checks += 1;
            Ok(1)
        }
    }

    fn budget(iters: u64, warmup: u64, max_time_ms: u64) -> Budget {
        Budget {
            iters,
            warmup,
            max_time: Duration::from_millis(max_time_ms),
        }
    }

    fn fake(peer_marks_at: Option<usize>, sleep_ms: u64) -> Fake {
        Fake {
            calls: Vec::new(),
            peer_marks_at,
            sleep: Duration::from_millis(sleep_ms),
            checks: 0,
        }
    }

    #[test]
    fn counts_end_both_phases_and_the_last_iteration_is_told() {
        let mut f = fake(None, 0);
        let b = budget(5, 2, 60_000);
        let s = budget_loop(b, Span::Between, &mut f).unwrap();
        assert_eq!(s.samples_ns.len(), 5);
        assert_eq!((s.warmup_done, s.stopped_by, s.errors), (2, Stop::Count, 7));
        assert_eq!(f.calls[1], (Phase::Warmup, Some(Stop::Count)));
        assert_eq!(f.calls[2], (Phase::Timed, None));
        assert_eq!(f.calls[6], (Phase::Timed, Some(Stop::Count)));
    }

    #[test]
    fn the_budget_ends_a_phase_after_at_least_one_iteration() {
        let mut f = fake(None, 3);
        let b = budget(1000, 1000, 20);
        let s = budget_loop(b, Span::Body, &mut f).unwrap();
        assert_eq!(s.stopped_by, Stop::Time);
        assert!(
            s.warmup_done >= 2 && s.warmup_done < 10,
            "{}",
            s.warmup_done
        );
        assert!(s.samples_ns.len() >= 2 && s.samples_ns.len() < 100);
        assert!(s.samples_ns.iter().all(|&ns| ns >= 3_000_000));
        let last = f.calls.last().unwrap();
        assert_eq!(*last, (Phase::Timed, Some(Stop::Time)));
    }

    #[test]
    fn an_iteration_that_would_end_past_the_budget_is_the_last() {
        // 10 ms iterations, 25 ms: the third starts at 20 ms or later and would end at 30 ms or
        // later, so it is the last (a slower host only makes the iterations longer).
        let mut f = fake(None, 10);
        let b = budget(1000, 1, 25);
        let s = budget_loop(b, Span::Body, &mut f).unwrap();
        assert_eq!(s.stopped_by, Stop::Time);
        assert!(
            (2..=3).contains(&s.samples_ns.len()),
            "{}",
            s.samples_ns.len()
        );
    }

    #[test]
    fn a_peers_mark_ends_the_phase_on_the_same_iteration() {
        // Iteration 4 overall is the third timed one (warm-up 2).
        let mut f = fake(Some(4), 0);
        let b = budget(10, 2, 60_000);
        let s = budget_loop(b, Span::Between, &mut f).unwrap();
        assert_eq!(s.samples_ns.len(), 3);
        assert_eq!(s.stopped_by, Stop::Time);
        assert_eq!(f.checks, 5);
    }
}
