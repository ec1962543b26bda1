//! A rail: one NIC's fabric, domain, address vector, completion queue and RDM endpoint, plus the
//! memory registered on it and the table of operations in flight.
//!
//! The rail is split by job:
//! * this file: the [`Rail`] type, how it is opened and how peers are added;
//! * [`mr`]: registered memory ([`RegionId`], [`RemoteRegion`]) and its bookkeeping;
//! * [`post`]: the one way to start an operation, [`Rail::post`] of an [`Op`];
//! * [`cq`]: reading the completion queue ([`Rail::poll`], [`Completion`]);
//! * [`pair`]: a ping-pong's two receives and injects resolved once ([`PingPong`]), for latency
//!   loops that post nothing else;
//! * `future` (feature `async`): the same operations as futures, for the executor of `exec`.
//!
//! Every posted operation owns a *slot*; its `op_context` is that slot's `fi_context2`, so a CQ
//! entry maps back to the slot by pointer arithmetic (no hash map, no allocation). The slot keeps
//! the caller's `u64` context, handed back by [`Rail::poll`] as [`Completion::context`].
//!
//! Memory safety: registered memory is owned by the rail (an `Arc` of the buffer), each region
//! counts the operations in flight on it, [`Rail::deregister`] refuses a busy region, and dropping
//! the rail closes the endpoint (which ends all DMA) before any region. `-FI_EAGAIN` on post is
//! answered by progressing the CQ and retrying, bounded by [`RailConfig::post_timeout`] so that a
//! dead peer becomes an error, not a hang.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::info::ProviderInfo;
use crate::raw::RawRail;

pub mod cq;
#[cfg(feature = "async")]
pub mod future;
pub mod mr;
pub mod pair;
pub mod post;

pub use cq::{Completion, CqData};
#[cfg(feature = "async")]
pub use future::{OpFuture, OpResult, RemoteData};
pub use mr::{RegionId, RemoteRegion};
pub use pair::PingPong;
pub use post::{Flags, Local, Op, RemoteAt};

use mr::RegionSlot;

/// How a rail is opened.
#[derive(Clone, Debug)]
pub struct RailConfig {
    /// CQ depth (0 = provider default).
    pub cq_size: usize,
    /// Most operations in flight at once (slots in the context table).
    pub max_in_flight: usize,
    /// Longest a [`Rail::post`] keeps retrying on `-FI_EAGAIN` (or a full slot table) before
    /// failing.
    pub post_timeout: Duration,
}

impl Default for RailConfig {
    fn default() -> Self {
        RailConfig {
            cq_size: 0,
            max_in_flight: 1024,
            post_timeout: Duration::from_secs(30),
        }
    }
}

/// A peer's address in this rail's address vector (`fi_addr_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer(pub u64);

/// Region index of a slot that holds no region.
const NO_REGION: u32 = u32::MAX;

/// What one entry of the context table holds.
#[derive(Debug)]
enum Slot {
    Free,
    /// Posted by [`Rail::post`]: the completion goes to [`Rail::poll`] with `ctx`.
    Raw {
        ctx: u64,
        region: u32,
        op: &'static str,
    },
    /// Posted by an [`OpFuture`]: the completion is parked here until the future is polled.
    #[cfg(feature = "async")]
    Async {
        region: u32,
        op: &'static str,
        done: Option<Result<OpResult>>,
    },
    /// A dropped future's operation, or a receive a dropped [`PingPong`] left posted: cancelled,
    /// its region pinned until the completion arrives (which frees the slot).
    Orphan {
        region: u32,
    },
    /// Reserved by a live [`PingPong`] for one of its two receives (it reads their completions
    /// itself): out of the free list until the pair is dropped.
    Held,
}

/// Everything of a rail that changes while it runs (behind one `RefCell`: the rail is driven by
/// one thread).
struct State {
    slots: Vec<Slot>,
    free: Vec<u32>,
    regions: Vec<RegionSlot>,
    /// Completions read while nobody was polling (e.g. during EAGAIN progress).
    ready: VecDeque<Completion>,
    /// Completions without a local operation (remote CQ data).
    remote: VecDeque<Completion>,
    /// Errors of posted operations, reported by the next `poll`.
    errors: VecDeque<Error>,
    next_key: u64,
}

impl State {
    /// Completions and errors waiting for [`Rail::poll`] outside the CQ.
    #[inline(always)]
    fn queued(&self) -> usize {
        self.errors.len() + self.ready.len() + self.remote.len()
    }
}

static NEXT_RAIL: AtomicU32 = AtomicU32::new(1);

/// One NIC's endpoint with its CQ, AV and registered memory. Not `Sync`: drive a rail from one
/// thread (open one rail per thread and NIC).
pub struct Rail {
    raw: RawRail,
    id: u32,
    info: ProviderInfo,
    cfg: RailConfig,
    state: RefCell<State>,
}

impl std::fmt::Debug for Rail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rail")
            .field("id", &self.id)
            .field("provider", &self.info.provider)
            .field("domain", &self.info.domain)
            .finish()
    }
}

impl Drop for Rail {
    fn drop(&mut self) {
        // Closing the endpoint first ends every transfer, so closing the regions and dropping
        // their buffers afterwards is safe even with operations still in flight.
        self.raw.close_endpoint();
        self.state.get_mut().regions.clear();
    }
}

impl Rail {
    /// Opens fabric, domain, CQ, AV and an enabled endpoint for `info`.
    pub fn open(info: &ProviderInfo, cfg: &RailConfig) -> Result<Rail> {
        let n = cfg.max_in_flight.clamp(1, 1 << 20);
        let raw = RawRail::open(&info.raw, cfg.cq_size, n)?;
        Ok(Rail {
            raw,
            id: NEXT_RAIL.fetch_add(1, Ordering::Relaxed),
            info: info.clone(),
            cfg: cfg.clone(),
            state: RefCell::new(State {
                slots: (0..n).map(|_| Slot::Free).collect(),
                free: (0..n as u32).rev().collect(),
                regions: Vec::new(),
                ready: VecDeque::new(),
                remote: VecDeque::new(),
                errors: VecDeque::new(),
                next_key: 1,
            }),
        })
    }

    /// The provider entry this rail was opened from.
    pub fn info(&self) -> &ProviderInfo {
        &self.info
    }

    /// This endpoint's address (`fi_getname`), to give to peers.
    pub fn address(&self) -> Result<Vec<u8>> {
        self.raw.name()
    }

    /// Inserts a peer's address (from its [`Rail::address`]) into the address vector.
    pub fn insert_peer(&self, addr: &[u8]) -> Result<Peer> {
        if self.info.string_addresses() {
            // A string address is as long as its text (shm's name holds a process id, so two
            // ranks' addresses differ in length once their pids do): it only has to be one
            // NUL-terminated string.
            if addr.is_empty() || addr.iter().take(addr.len() - 1).any(|&b| b == 0) {
                return Err(Error::Usage(format!(
                    "peer address {addr:?} is not one {} address string (peer on another provider?)",
                    self.info.provider
                )));
            }
            if addr.last() == Some(&0) {
                return Ok(Peer(self.raw.av_insert(addr)?));
            }
            let mut z = addr.to_vec();
            z.push(0);
            return Ok(Peer(self.raw.av_insert(&z)?));
        }
        let own = self.raw.name()?;
        if addr.len() != own.len() {
            return Err(Error::Usage(format!(
                "peer address is {} bytes but {} addresses are {} bytes (peer on another provider?)",
                addr.len(),
                self.info.provider,
                own.len()
            )));
        }
        Ok(Peer(self.raw.av_insert(addr)?))
    }
}
