//! A busy-poll executor (feature `async`): one per thread, no tokio, no wakers that do anything.
//! It drives the futures of [`Rail::post_async`]; the benchmarks do not use it (they post and
//! poll directly, which is cheaper still), the fabric's examples and tests do.
//!
//! Why: the data path is a thread spinning on `fi_cq_read`; a
//! generic runtime adds 40–90 ns and occasional `epoll_wait` syscalls to every re-poll, while a
//! loop that polls the future with a no-op waker and then progresses the rails adds about a
//! nanosecond. Futures are re-polled after every progress round, so they need no waker; a future
//! whose completion is already parked in its slot resolves on its next poll.
//!
//! Every wait has a deadline, and may carry a health check (e.g. "is the rendezvous still up?"),
//! both looked at every [`CHECK_EVERY`] rounds so that the clock read stays off the hot path.

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::rail::Rail;

/// Rounds between two deadline / health checks.
pub const CHECK_EVERY: u32 = 64;

/// Something the executor drives between polls of the future (a rail's CQ).
pub trait Progress {
    /// Reads completions and dispatches them; errors no operation can take are returned.
    fn progress(&self) -> Result<()>;
}

impl Progress for Rail {
    #[inline]
    fn progress(&self) -> Result<()> {
        Rail::progress(self)
    }
}

/// Drives futures on the current thread while progressing a set of rails (or anything that
/// implements [`Progress`]). `P` is usually [`Rail`] (static dispatch, the progress call is
/// inlined); use `dyn Progress` to mix kinds.
pub struct Executor<'a, P: Progress + ?Sized + 'a = Rail> {
    rails: Vec<&'a P>,
}

impl<'a> Executor<'a, Rail> {
    /// An executor for one rail.
    pub fn for_rail(rail: &'a Rail) -> Self {
        Executor { rails: vec![rail] }
    }
}

impl<'a, P: Progress + ?Sized + 'a> Executor<'a, P> {
    /// An executor that progresses `rails` (usually every rail this thread uses).
    pub fn new(rails: &[&'a P]) -> Self {
        Executor {
            rails: rails.to_vec(),
        }
    }

    /// Runs `fut` to completion or until `deadline`.
    #[inline]
    pub fn block_on<F: Future>(&self, fut: F, deadline: Instant) -> Result<F::Output> {
        self.block_on_checked(fut, deadline, || Ok(()))
    }

    /// Runs `fut` to completion, until `deadline`, or until `check` returns an error (it is
    /// called every [`CHECK_EVERY`] rounds: use it to notice a dead peer).
    #[inline(always)]
    pub fn block_on_checked<F: Future>(
        &self,
        fut: F,
        deadline: Instant,
        mut check: impl FnMut() -> Result<()>,
    ) -> Result<F::Output> {
        let mut fut = pin!(fut);
        let mut cx = Context::from_waker(Waker::noop());
        let mut rounds: u32 = 0;
        // No clock read before the first check: on VMs whose clocksource is not the TSC,
        // `Instant::now()` is a system call, which would dominate a short operation.
        let mut first_check: Option<Instant> = None;
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return Ok(v);
            }
            for r in self.rails.iter() {
                r.progress()?;
            }
            rounds = rounds.wrapping_add(1);
            if rounds % CHECK_EVERY == 0 {
                slow_check(&mut first_check, deadline, &mut check)?;
            }
        }
    }
}

/// The deadline and health check, out of the hot loop.
#[cold]
#[inline(never)]
fn slow_check(
    first_check: &mut Option<Instant>,
    deadline: Instant,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    let now = Instant::now();
    let start = *first_check.get_or_insert(now);
    if now >= deadline {
        return Err(Error::Timeout {
            what: "operations to complete".into(),
            secs: now.duration_since(start).as_secs_f64(),
        });
    }
    check()
}

/// Polls many futures together; resolves to their outputs in order (like `join_all`).
pub fn join_all<F: Future>(futs: impl IntoIterator<Item = F>) -> JoinAll<F> {
    JoinAll {
        items: futs
            .into_iter()
            .map(|f| Item::Pending(Box::pin(f)))
            .collect(),
        left: usize::MAX,
    }
}

enum Item<F: Future> {
    Pending(Pin<Box<F>>),
    Done(Option<F::Output>),
}

/// Future returned by [`join_all`].
#[must_use = "a future does nothing until it is polled"]
pub struct JoinAll<F: Future> {
    items: Vec<Item<F>>,
    left: usize,
}

// The futures are boxed (pinned on the heap) and outputs are never pinned, so moving a JoinAll
// moves nothing that is pinned.
impl<F: Future> Unpin for JoinAll<F> {}

impl<F: Future> Future for JoinAll<F> {
    type Output = Vec<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<F::Output>> {
        let this = &mut *self;
        if this.left == usize::MAX {
            this.left = this.items.len();
        }
        for it in this.items.iter_mut() {
            if let Item::Pending(f) = it {
                if let Poll::Ready(v) = f.as_mut().poll(cx) {
                    *it = Item::Done(Some(v));
                    this.left -= 1;
                }
            }
        }
        if this.left > 0 {
            return Poll::Pending;
        }
        Poll::Ready(
            this.items
                .iter_mut()
                .filter_map(|it| match it {
                    Item::Done(v) => v.take(),
                    Item::Pending(_) => None,
                })
                .collect(),
        )
    }
}
