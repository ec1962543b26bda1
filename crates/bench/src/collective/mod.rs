//! All-to-all exchanges over a [`crate::mesh::Mesh`]: the layer `alltoall` and `alltoallv`
//! share, and that any other collective in which every rank sends to every rank in every
//! iteration could use. The benchmarks keep only what is theirs: `alltoall` its equal chunks and
//! `--op`, `alltoallv` its counts matrices; both hand a [`exchange::Plan`] (what this rank sends
//! and receives, and where) to [`exchange::measure`] and turn every rank's outcome into a
//! record with [`report::Outcome`].
//!
//! - `exchange.rs`: the engine: one iteration (post every chunk, count every stripe's arrival by
//!   its CQ data, check the payload), run back to back in the harness's budgeted loop, with the
//!   stop marked in band so every rank ends on the same iteration;
//! - `report.rs`: from every rank's measurement to the record's fields (the slowest rank, the
//!   per-peer arrival matrix, per-rail bytes) and the summary under the table;
//! - `setup.rs`: the checks and header lines before measuring (largest chunk against the
//!   provider, what `--notify`, `--window` and `--bind auto` resolve to on the mesh, the time
//!   budget, libfabric 1.x's shm lock);
//! - `placement.rs`: `--bind`, the core each rank's data-path thread runs on;
//! - `window.rs`: `--window`, the chunks each rank keeps in flight;
//! - `notify.rs`: `--notify`, whether a chunk carries its CQ data or is announced by a signal.

pub mod exchange;
pub mod notify;
pub mod placement;
pub mod report;
pub(crate) mod setup;
pub mod window;

use std::time::Duration;

use crate::error::BenchError;
use crate::harness::{Budget, Ctx, Measured};
use crate::mesh::Mesh;
use exchange::{Op, Plan};

/// Measures one point of an all-to-all with `plan` on the mesh the benchmark's `setup` opened:
/// `iters` timed iterations and `warmup` before them, or `max_time` seconds (a tenth of it for
/// the warm-up), whichever comes first.
pub fn measure(
    ctx: &Ctx,
    mesh: Option<&mut Mesh>,
    plan: &Plan,
    op: Op,
    (iters, warmup): (u64, u64),
    max_time: f64,
) -> Result<Measured, BenchError> {
    let mesh = mesh.ok_or_else(|| BenchError::failed("measure before setup"))?;
    let budget = Budget {
        iters,
        warmup,
        max_time: Duration::from_secs_f64(max_time),
    };
    exchange::measure(ctx, mesh, plan, op, budget)
}
