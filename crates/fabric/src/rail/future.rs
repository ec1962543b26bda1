//! Operations as futures (feature `async`), driven by a [`crate::Executor`] that progresses the
//! rail between polls: for code that keeps many operations of different kinds in flight and
//! would otherwise match contexts by hand. The benchmarks use [`Rail::post`] and [`Rail::poll`]
//! directly, which is the cheapest path.
//!
//! [`Rail::post_async`] takes the same [`Op`] as [`Rail::post`] (its context is unused: the
//! future is the context). The operation is posted on the future's first poll; its completion is
//! parked in its slot by whoever reads the CQ, and taken by the future's next poll. A future
//! dropped before completion cancels its operation and leaves the slot *orphaned*, its region
//! still counted busy, until the completion arrives.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::cq::{Completion, CqData};
use super::post::{Flags, Lowered, Op, Posted};
use super::{Rail, Slot};
use crate::error::{Error, Result};

/// What an operation future resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpResult {
    /// Bytes transferred as the CQ reports them (receives: bytes received).
    pub len: usize,
    /// Remote CQ data carried by a receive completion (a send with data).
    pub data: Option<u64>,
}

impl Rail {
    /// `op` as a future (see the module docs). An inject has no completion to wait for and is
    /// refused here: post it with [`Rail::post`].
    pub fn post_async(&self, op: Op) -> OpFuture<'_> {
        let injects = match op {
            Op::Send { flags, .. } | Op::Write { flags, .. } => flags.contains(Flags::INJECT),
            _ => false,
        };
        let state = if injects {
            OpState::Failed(Some(Error::Usage(
                "an inject has no completion to wait for; post it with Rail::post".into(),
            )))
        } else {
            match self.lower(op) {
                Ok(l) => OpState::Unposted(l),
                Err(e) => OpState::Failed(Some(e)),
            }
        };
        OpFuture { rail: self, state }
    }

    /// A future that resolves to the next completion carrying remote CQ data (a peer's write
    /// with data), in arrival order.
    pub fn remote_data(&self) -> RemoteData<'_> {
        RemoteData { rail: self }
    }

    /// The next remote CQ data completion whose data has source field `source` (see
    /// [`CqData`]), leaving completions from other sources queued in their order. Lets a rank
    /// that writes to several peers tell their notifications apart without relying on arrival
    /// order (EFA's SRD delivers unordered). Looks through the queued completions, so the cost is
    /// the queue's length.
    pub fn wait_remote_data_from(&self, source: u16) -> impl Future<Output = Completion> + use<'_> {
        futures_lite::future::poll_fn(move |_| {
            let mut st = self.state.borrow_mut();
            match st
                .remote
                .iter()
                .position(|c| CqData::from_u64(c.data).source == source)
            {
                Some(i) => Poll::Ready(st.remote.remove(i).expect("index from position")),
                None => Poll::Pending,
            }
        })
    }

    /// Resolves once `n` remote CQ data completions from `source` have arrived, consuming
    /// them; it counts instead of matching one by one, so several notifications of one transfer
    /// (e.g. one per stripe) may arrive in any order. Resolves to the completions' tags in
    /// arrival order.
    pub fn wait_remote_count(
        &self,
        source: u16,
        n: usize,
    ) -> impl Future<Output = Vec<u16>> + use<'_> {
        self.count_remote(n, move |d| d.source == source)
    }

    /// Resolves once `n` remote CQ data completions carrying exactly `data` (source and tag)
    /// have arrived, consuming them: a counter keyed by the whole value, for protocols that
    /// number their steps in the tag and must not take step *s+1*'s notification for step *s*'s.
    pub fn wait_remote_exact(&self, data: CqData, n: usize) -> impl Future<Output = ()> + use<'_> {
        let count = self.count_remote(n, move |d| d == data);
        async move {
            count.await;
        }
    }

    fn count_remote<M: FnMut(CqData) -> bool>(
        &self,
        n: usize,
        mut matches: M,
    ) -> impl Future<Output = Vec<u16>> + use<'_, M> {
        let mut tags = Vec::with_capacity(n);
        futures_lite::future::poll_fn(move |_| {
            let mut st = self.state.borrow_mut();
            let mut i = 0;
            while tags.len() < n && i < st.remote.len() {
                let d = CqData::from_u64(st.remote[i].data);
                if matches(d) {
                    st.remote.remove(i);
                    tags.push(d.tag);
                } else {
                    i += 1;
                }
            }
            if tags.len() == n {
                Poll::Ready(std::mem::take(&mut tags))
            } else {
                Poll::Pending
            }
        })
    }

    fn take_done(&self, slot: u32) -> Option<Result<OpResult>> {
        let mut st = self.state.borrow_mut();
        let s = &mut st.slots[slot as usize];
        if let Slot::Async { done, .. } = s {
            if done.is_some() {
                let r = done.take();
                *s = Slot::Free;
                st.free.push(slot);
                return r;
            }
        }
        None
    }

    fn abandon(&self, slot: u32) {
        let pending = {
            let mut st = self.state.borrow_mut();
            match &st.slots[slot as usize] {
                Slot::Async { done: Some(_), .. } => {
                    st.slots[slot as usize] = Slot::Free;
                    st.free.push(slot);
                    false
                }
                Slot::Async { region, .. } => {
                    let region = *region;
                    st.slots[slot as usize] = Slot::Orphan { region };
                    true
                }
                _ => false,
            }
        };
        if pending {
            self.raw.cancel(slot);
        }
    }
}

enum OpState {
    Unposted(Lowered),
    InFlight(u32),
    Failed(Option<Error>),
    Done,
}

/// An operation as a future, from [`Rail::post_async`]. It is posted on its first poll (retried
/// on `-FI_EAGAIN`) and completes when an [`crate::Executor`] (or anyone calling
/// [`Rail::progress`]) has read its completion. Dropping it before completion cancels it; its
/// memory stays registered until the provider is done with it.
#[must_use = "an OpFuture does nothing until it is polled"]
pub struct OpFuture<'r> {
    rail: &'r Rail,
    state: OpState,
}

impl Future for OpFuture<'_> {
    type Output = Result<OpResult>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                OpState::InFlight(slot) => {
                    return match this.rail.take_done(*slot) {
                        Some(r) => {
                            this.state = OpState::Done;
                            Poll::Ready(r)
                        }
                        None => Poll::Pending,
                    };
                }
                OpState::Unposted(l) => {
                    let res = {
                        let mut st = this.rail.state.borrow_mut();
                        this.rail.try_post(&mut st, l, None)
                    };
                    match res {
                        Ok(Posted::Slot(s)) => this.state = OpState::InFlight(s),
                        Ok(Posted::Again) => return Poll::Pending,
                        Err(e) => {
                            this.state = OpState::Done;
                            return Poll::Ready(Err(e));
                        }
                    }
                }
                OpState::Failed(e) => {
                    let e = e
                        .take()
                        .unwrap_or_else(|| Error::Usage("operation polled after it failed".into()));
                    this.state = OpState::Done;
                    return Poll::Ready(Err(e));
                }
                OpState::Done => {
                    return Poll::Ready(Err(Error::Usage(
                        "operation polled after it completed".into(),
                    )))
                }
            }
        }
    }
}

impl Drop for OpFuture<'_> {
    fn drop(&mut self) {
        if let OpState::InFlight(slot) = self.state {
            self.rail.abandon(slot);
        }
    }
}

/// Future returned by [`Rail::remote_data`].
#[must_use = "a future does nothing until it is polled"]
pub struct RemoteData<'r> {
    rail: &'r Rail,
}

impl Future for RemoteData<'_> {
    type Output = Completion;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Completion> {
        match self.rail.state.borrow_mut().remote.pop_front() {
            Some(c) => Poll::Ready(c),
            None => Poll::Pending,
        }
    }
}
