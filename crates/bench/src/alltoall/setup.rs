//! What `alltoall`, `alltoallv` and `pairs` share before measuring: the mesh of every rank on
//! the rails of the plan, and the header lines.

use efabench_fabric::RailConfig;
use serde::Serialize;

use crate::error::BenchError;
use crate::harness::{Ctx, RunFacts};
use crate::mesh::{self, Mesh};
use crate::p2p::link::Payload;

/// The record fields every point of a mesh run repeats.
#[derive(Serialize)]
struct MeshFacts {
    virtual_rails: bool,
    mr: &'static str,
}

/// The strategy, a field of the collectives' and `pairs`' records.
#[derive(Serialize)]
struct StrategyFact {
    strategy: &'static str,
}

/// Opens the rails of the plan and connects every rank (shared with `pairs`).
pub(crate) fn open_mesh(
    ctx: &Ctx,
    send: usize,
    recv: usize,
) -> Result<(Mesh, RunFacts), BenchError> {
    let bufs = mesh::alloc(ctx.opts.mem_kind(), send, recv, ctx.device)?;
    let m = connect_mesh(ctx, bufs)?;
    let facts = mesh_facts(ctx, &m)?;
    let strategy = m.strategy().name();
    Ok((m, facts.detail(&StrategyFact { strategy })))
}

/// Opens the rails of the plan, registers `bufs` (send, receive) and connects every rank (`ep`
/// keeps the buffers too, so it allocates them itself).
pub(crate) fn connect_mesh(ctx: &Ctx, bufs: (Payload, Payload)) -> Result<Mesh, BenchError> {
    let fabric = ctx
        .opts
        .fabric
        .as_ref()
        .ok_or_else(|| BenchError::failed("a mesh needs the fabric options"))?;
    let timeout = ctx.opts.job.timeout();
    let plan = ctx.plan()?;
    let group = plan.open(&RailConfig {
        post_timeout: timeout,
        max_in_flight: 8192,
        ..RailConfig::default()
    })?;
    let mut m = Mesh::new(
        group,
        fabric.strategy,
        bufs,
        fabric.mr.path(),
        ctx.rank,
        ctx.world,
        timeout,
        ctx.bs.health(),
    )?;
    m.set_ranks_on_host(ctx.hosts.iter().filter(|h| **h == ctx.host).count());
    m.set_progress(ctx.bs.progress());
    let blob = m.local_blob()?;
    let blobs = ctx.bs.all_gather(&blob)?;
    m.connect(&blobs)?;
    Ok(m)
}

/// What every record of a run on mesh `m` repeats (`virtual_rails`, `mr`), and the header line.
pub(crate) fn mesh_facts(ctx: &Ctx, m: &Mesh) -> Result<RunFacts, BenchError> {
    let plan = ctx.plan()?;
    let rails = plan.rails.len() as u32;
    let domains = plan.domains();
    let header = vec![format!(
        "# rails: {} | strategy: {} | mr: {}",
        plan.rails_line(),
        m.strategy().name(),
        m.mr_path()
    )];
    Ok(RunFacts {
        provider: plan.provider.clone(),
        fabric: plan.rails[0].fabric.clone(),
        domains,
        libfabric: Some(plan.libfabric.clone()),
        rails,
        mem: ctx.opts.mem_kind().to_string(),
        link_gbps: plan.link_gbps(),
        header,
        ..RunFacts::default()
    }
    .detail(&MeshFacts {
        virtual_rails: plan.virtual_rails,
        mr: m.mr_path(),
    }))
}

/// Fails with a usage error when one message of `chunk` bytes exceeds what the provider sends.
pub(crate) fn check_chunk(m: &Mesh, chunk: u64, provider: &str) -> Result<(), BenchError> {
    let max_msg = m.group().rail(0).info().max_msg_size;
    if chunk > max_msg {
        return Err(BenchError::usage(format!(
            "chunks of {chunk} bytes exceed what provider {provider} can send in one message ({max_msg} bytes); lower -e"
        )));
    }
    Ok(())
}

/// A header note when the figures of a mesh of `world` ranks would time libfabric 1.x's shm
/// provider more than the exchange: 1.x posts a write under the receiving process's lock, which
/// that process holds while it copies every queued chunk, so a sender whose peer is copying (or
/// was preempted while copying) spins inside `fi_writedata`. libfabric 2.x posts through
/// lock-free queues. Measured against `MPI_Alltoall` on one host, the same binary on 2.x reached
/// MPI where 1.x stayed at about 0.6x (8 ranks, 1 MiB).
pub(crate) fn shm_lock_note(provider: &str, libfabric: Option<&str>, world: u32) -> Option<String> {
    let major = libfabric?.split('.').next()?.parse::<u32>().ok()?;
    (provider == "shm" && major < 2 && world > 2).then(|| {
        format!(
            "# note: libfabric {}'s shm provider posts under the receiving process's lock, held while \
             it copies: with {world} ranks senders wait on their peers' copies; libfabric 2.x has no \
             such lock (point EFABENCH_LIBFABRIC at a 2.x libfabric.so.1 for the transport's figures)",
            libfabric.unwrap_or_default()
        )
    })
}

/// The header line of the time budget of a sweep of `sizes` sizes.
pub(crate) fn budget_line(max_time: f64, sizes: usize) -> String {
    format!(
        "# time budget: each size stops after its -n timed iterations or {max_time} s, whichever comes \
         first (warm-up: -w or {:.3} s), every rank at the same iteration: at most {:.1} s of \
         measurement in all, plus one iteration per size",
        max_time / 10.0,
        max_time * 1.1 * sizes as f64
    )
}

#[cfg(test)]
mod tests {
    use super::shm_lock_note;

    #[test]
    fn the_shm_lock_note_is_for_libfabric_1_shm_meshes_of_more_than_two_ranks() {
        let note = shm_lock_note("shm", Some("1.17"), 4).expect("a note for 1.17 shm at 4 ranks");
        assert!(note.starts_with("# note: libfabric 1.17's shm"), "{note}");
        assert!(note.contains("with 4 ranks"), "{note}");
        assert_eq!(shm_lock_note("shm", Some("1.17"), 2), None);
        assert_eq!(shm_lock_note("shm", Some("2.5"), 8), None);
        assert_eq!(shm_lock_note("tcp", Some("1.17"), 8), None);
        assert_eq!(shm_lock_note("shm", None, 8), None);
        assert_eq!(shm_lock_note("shm", Some("garbage"), 8), None);
    }
}
