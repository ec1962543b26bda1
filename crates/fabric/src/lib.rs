//! efabench-fabric: a safe Rust API over libfabric for benchmarks and custom collectives.
//!
//! * [`load_library`], [`get_info`], [`first_provider`], [`list_providers`]: which libfabric and
//!   which providers/NICs there are ([`ProviderInfo`]: names, link speed, mr_mode, caps, limits,
//!   HMEM and dmabuf support).
//! * [`Rail`]: one NIC's endpoint; [`Rail::address`]/[`Rail::insert_peer`] to connect,
//!   [`Rail::register`] (any [`MemoryBuffer`]: [`HostBuffer`] here, CUDA buffers from the gpu
//!   crate) and [`RemoteRegion`] for RMA; one [`Rail::post`] of an [`Op`] (send, receive, write,
//!   read, with remote CQ data and [`Flags`]) starts any operation, and [`Rail::poll`] hands back
//!   its [`Completion`] with the context it was posted with.
//! * [`RailGroup`]: the rails of one rank (one per NIC, or virtual rails on one domain), with
//!   one-call registration on every rail, rail-aligned addresses and descriptors, and
//!   [`resolve_rails`]/[`pick_domain`] for `--rails`/`--domain`; [`route`] says which rail
//!   carries which bytes ([`split`], [`round_robin_rail`]).
//! * Feature `async` (off by default; no benchmark uses it): the same [`Op`]s as futures
//!   (`Rail::post_async`) driven by a busy-poll `Executor` with `join_all`, always with a
//!   deadline.
//! * [`Error`]: one error type; a failed call keeps its name, code, `fi_strerror` text and
//!   provider (`fi_writemsg: -FI_EAGAIN (Resource temporarily unavailable), provider efa`).
//!
//! All `unsafe` of this crate lives in the private `raw` module (the only caller of the
//! libfabric ABI, which is in `efabench-fabric-sys`).

#![deny(unsafe_code)]

pub mod error;
#[cfg(feature = "async")]
pub mod exec;
pub mod group;
pub mod host;
pub mod info;
#[allow(unsafe_code)] // declares the `unsafe trait MemoryBuffer` contract; no unsafe code
pub mod memory;
pub mod rail;
#[allow(unsafe_code)]
mod raw;
pub mod route;
mod shm;

pub use efabench_fabric_sys::crash;
pub use error::{Error, Result};
#[cfg(feature = "async")]
pub use exec::{join_all, Executor, JoinAll, Progress};
/// futures-lite's future combinators (`zip`, `try_zip`, `or`, `race`, `poll_fn`, …): they work
/// with [`Executor::block_on`], which re-polls after every progress round (the waker is unused).
#[cfg(feature = "async")]
pub use futures_lite::future;
pub use group::{
    connect_all, pick_domain, resolve_rails, GroupAddress, GroupPeer, GroupRegion, RailCount,
    RailGroup, RailPlan, RegionDescriptor,
};
pub use host::HostBuffer;
pub use info::{
    first_provider, get_info, list_providers, load_library, Hints, LibraryInfo, ProviderInfo,
};
pub use memory::{DmabufHandle, Hmem, MemoryBuffer, MrPath};
pub use rail::{
    Completion, CqData, Flags, Local, Op, Peer, PingPong, Rail, RailConfig, RegionId, RemoteAt,
    RemoteRegion,
};
#[cfg(feature = "async")]
pub use rail::{OpFuture, OpResult, RemoteData};
pub use route::{next_first_rail, round_robin_rail, split, Stripe};

/// libfabric completion and capability flags callers may test in [`Completion::flags`].
pub mod flags {
    pub use efabench_fabric_sys::{
        FI_MSG, FI_READ, FI_RECV, FI_REMOTE_CQ_DATA, FI_REMOTE_READ, FI_REMOTE_WRITE, FI_RMA,
        FI_SEND, FI_WRITE,
    };
}
