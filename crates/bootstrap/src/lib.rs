//! efabench-bootstrap: who is in the job, and a way for its ranks to meet and to fail together.
//!
//! Every multi-rank benchmark needs three things before it can touch a NIC: its rank and the
//! world size, the other ranks' endpoint addresses, and a guarantee that if any rank dies the
//! others stop instead of hanging (the first complaint about nccl-tests). This crate gives them
//! without MPI, so the same binary runs under `srun`, `mpirun`, Kubernetes or `efabench launch`:
//!
//! * [`detect()`] reads rank, world size, local rank, rendezvous address and job token from flags
//!   or the launcher's environment (the [`mod@detect`] module docs list the order);
//! * [`Bootstrap`] is a TCP rendezvous served by rank 0: all-gather, barrier, gather, broadcast
//!   and abort, with heartbeats so that a dead or frozen rank is named on every rank within the
//!   timeout, and [`Bootstrap::check`] for data-path loops; [`Bootstrap::progress`] (ticks that
//!   keep collective waits from timing out while the job moves), [`Bootstrap::check_same`]
//!   (every rank started with the same options), [`Bootstrap::arm_watchdog`] (end a process
//!   stuck in the fabric library after the job failed) and [`Bootstrap::failure_within`] (the
//!   real cause behind a data-path timeout);
//! * [`launcher`] starts N local ranks (`efabench launch`) and ends the job when one fails;
//!   [`die_with_launcher`] makes a rank die with it.
//!
//! Blocking sockets and threads, no async runtime; signals, `prctl` and `kill` go through
//! `rustix` and `signal-hook`, and PMIx (where `mpirun` gives no address) through the
//! `efabench-pmix` FFI crate, so this crate has no `unsafe` code at all.

#![forbid(unsafe_code)]

pub mod detect;
mod error;
pub mod hostlist;
pub mod launcher;
mod pmix;
pub use launcher::die_with_launcher;
mod rendezvous;
pub mod wire;

pub use detect::{detect, detect_from_process_env, detect_with, LaunchFlags, RankInfo};
pub use error::BootstrapError;
pub use hostlist::{expand_hostlist, first_host};
pub use pmix::ExchangeError;
pub use rendezvous::{AbortHandle, Bootstrap, Health, ProgressHandle};
