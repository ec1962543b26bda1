//! Completions and waiting: polling every rail, sorting what completed (counted, received,
//! tracked, remote CQ data), and the bounded waits every benchmark on a mesh uses.

use std::time::{Duration, Instant};

use efabench_bootstrap::Health;
use efabench_fabric::Completion as FiCompletion;

use super::{Done, Mesh, MeshResult, Received, CTX_COUNTED, CTX_MASK, CTX_RECV, CTX_TRACK};
use crate::error::BenchError;

/// How long an idle wait sleeps when ranks outnumber cores, after yielding for IDLE_YIELD.
pub(super) const IDLE_SLEEP_US: u64 = 20;
const IDLE_YIELD: Duration = Duration::from_micros(200);

/// Empty passes over the completion queues before a wait looks at the clock.
pub const EMPTY_POLLS: u32 = 256;

/// What a wait does after [`EMPTY_POLLS`] empty polls: fails when the job is unhealthy (a rank
/// died or froze), or when nothing progressed for `timeout` since `since` (set here on the first
/// call after progress), naming `what` rank `me` waited for.
#[cold]
#[inline(never)]
pub(super) fn idle_check(
    health: &Health,
    since: &mut Option<Instant>,
    timeout: Duration,
    me: u32,
    what: impl FnOnce() -> String,
) -> MeshResult<()> {
    health.check()?;
    if since.get_or_insert_with(Instant::now).elapsed() >= timeout {
        return Err(BenchError::failed(format!(
            "rank {me} waited {:.1} s without progress for {}; that rank is stuck or the fabric \
             dropped traffic (raise --timeout if this is expected)",
            timeout.as_secs_f64(),
            what()
        )));
    }
    Ok(())
}

impl Mesh {
    /// The oldest tracked message done, taken out.
    #[inline]
    pub fn take_done(&mut self) -> Option<Done> {
        self.take_done_if(|_| true)
    }

    /// The oldest tracked message done whose tag `is` holds for, taken out.
    #[inline]
    fn take_done_if(&mut self, is: impl Fn(u32) -> bool) -> Option<Done> {
        // The oldest is nearly always the one waited for (a ping-pong has one message in
        // flight): take it without the search and the general removal.
        let (tag, len) = if is(self.done.front()?.0) {
            self.done.pop_front()?
        } else {
            let i = self.done.iter().position(|d| is(d.0))?;
            self.done.remove(i)?
        };
        Some(Done::from_tag(tag, len))
    }

    /// The oldest remote CQ data for which `is` holds, taken out of [`Mesh::arrivals`].
    #[inline]
    pub fn take_arrival(&mut self, is: impl Fn(u64) -> bool) -> Option<u64> {
        if is(*self.arrivals.front()?) {
            return self.arrivals.pop_front();
        }
        let i = self.arrivals.iter().position(|&d| is(d))?;
        self.arrivals.remove(i)
    }

    /// Polls every rail once and sorts what completed; returns whether anything did.
    #[inline]
    pub fn progress(&mut self) -> MeshResult<bool> {
        let mut got = false;
        for r in 0..self.group.len() {
            let n = self.group.rail(r).poll(&mut self.cq)?;
            if n == 0 {
                continue;
            }
            for i in 0..n {
                let c = self.cq[i];
                self.sort(&c)?;
            }
            got = true;
        }
        if got {
            if let Some(p) = &self.progress_tick {
                p.tick();
            }
        }
        Ok(got)
    }

    fn sort(&mut self, c: &FiCompletion) -> MeshResult<()> {
        if c.context == FiCompletion::REMOTE_CQ_DATA {
            self.arrivals.push_back(c.data);
            return Ok(());
        }
        match c.context & CTX_MASK {
            CTX_COUNTED => {
                if self.outstanding == 0 {
                    return Err(BenchError::failed(
                        "a local completion arrived that was never posted (or arrived twice)",
                    ));
                }
                self.outstanding -= 1;
            }
            CTX_RECV => self.received.push_back(Received {
                index: (c.context & !CTX_MASK) as usize,
                data: c.remote_data().unwrap_or(u64::MAX),
                len: c.len,
            }),
            CTX_TRACK => {
                let tag = (c.context & !CTX_MASK) as u32;
                let p = match self.pending.get_mut(tag as usize) {
                    Some(p) if p.0 > 0 => p,
                    _ => {
                        return Err(BenchError::failed(format!(
                            "a completion of message {tag:#x} arrived that was never posted (or \
                             arrived twice)"
                        )))
                    }
                };
                p.0 -= 1;
                p.1 += c.len;
                if p.0 == 0 {
                    let len = std::mem::take(&mut p.1);
                    self.done.push_back((tag, len));
                }
            }
            _ => {
                return Err(BenchError::failed(format!(
                    "completion with an unknown context {:#x}",
                    c.context
                )))
            }
        }
        Ok(())
    }

    /// Polls until `done` says so. `done` is asked after every poll that found something (and
    /// once up front); `what` describes what is missing when the wait gives up. Fails when the
    /// job failed elsewhere (a rank died, froze or aborted: the bootstrap names it) or after
    /// `--timeout` without any completion.
    pub fn wait_until(
        &mut self,
        mut done: impl FnMut(&mut Mesh) -> MeshResult<bool>,
        what: impl Fn(&Mesh) -> String,
    ) -> MeshResult<()> {
        if done(self)? {
            return Ok(());
        }
        // The clock is read only once the wait has found nothing for a while: `since` is the
        // first look at it after the last completion.
        let mut since: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            if self.progress()? {
                since = None;
                if done(self)? {
                    return Ok(());
                }
                continue;
            }
            spins = spins.wrapping_add(1);
            // Ranks often outnumber cores (8 ranks on a 2-core CI host): a rank that found
            // nothing gives its core to the rank it waits for instead of spinning out its slice
            // (on shm the peer's process does the copy, so it must run). With a core to itself,
            // `sched_yield` returns at once; with more ranks than cores on the host, a wait
            // that found nothing for IDLE_YIELD sleeps in short steps instead (a yield alone
            // leaves 8 spinning ranks on 2 cores competing with the ones copying data).
            if spins > 16 && !self.spin {
                match self.idle_sleep {
                    Some(d) if since.get_or_insert_with(Instant::now).elapsed() >= IDLE_YIELD => {
                        std::thread::sleep(d)
                    }
                    _ => std::thread::yield_now(),
                }
            }
            if spins % EMPTY_POLLS == 0 {
                idle_check(&self.health, &mut since, self.timeout, self.me, || {
                    what(self)
                })?;
            }
        }
    }

    /// Polls until at least one completion arrived (of any kind), with the same failure rules
    /// as [`Mesh::wait_until`].
    pub fn wait_progress(&mut self, what: impl Fn(&Mesh) -> String) -> MeshResult<()> {
        let mut first = true;
        self.wait_until(
            move |_| {
                let f = first;
                first = false;
                Ok(!f)
            },
            what,
        )
    }

    /// Waits until every local operation completed.
    pub fn drain_local(&mut self) -> MeshResult<()> {
        self.wait_until(
            |m| Ok(m.outstanding == 0),
            |m| format!("{} local completions", m.outstanding),
        )
    }

    /// Waits for a tracked message whose tag `is` holds for and takes it out, with the failure
    /// rules of [`Mesh::wait_until`]; `what` names what is missing.
    pub(super) fn wait_done(
        &mut self,
        is: impl Fn(u32) -> bool,
        what: impl Fn(&Mesh) -> String,
    ) -> MeshResult<Done> {
        let mut got = None;
        let done = |m: &mut Mesh| {
            got = m.take_done_if(&is);
            Ok(got.is_some())
        };
        self.wait_until(done, what)?;
        got.ok_or_else(|| BenchError::failed("a wait ended without its completion"))
    }

    /// Waits for remote CQ data for which `is` holds and takes it out of [`Mesh::arrivals`],
    /// with the failure rules of [`Mesh::wait_until`].
    pub fn wait_arrival(
        &mut self,
        is: impl Fn(u64) -> bool,
        what: impl Fn(&Mesh) -> String,
    ) -> MeshResult<u64> {
        let mut got = None;
        let done = |m: &mut Mesh| {
            got = m.take_arrival(&is);
            Ok(got.is_some())
        };
        self.wait_until(done, what)?;
        got.ok_or_else(|| BenchError::failed("a wait ended without its arrival"))
    }
}
