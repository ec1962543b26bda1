//! Opening a [`Mesh`] for a benchmark: the rails of the harness's plan, the registered buffers,
//! every rank connected with one all-gather, and the record fields and header line every run on
//! a mesh repeats. Every benchmark that posts through a mesh starts here: the point-to-point
//! ones, `pairs`, `alltoall` and `alltoallv` through [`open_mesh`], `ep` (which allocates its
//! buffers itself) and `proxy` (whose threads then each take a rail, [`super::Mesh::into_rails`])
//! through [`connect_mesh`] and [`mesh_facts`]. [`run_on_mesh`] runs such a
//! benchmark and keeps a failed run from tearing its mesh down.

use efabench_fabric::RailConfig;

use super::{Mesh, Payload};
use crate::error::BenchError;
use crate::harness::{self, Benchmark, BuildInfo, Ctx, Options, RunDetail, RunFacts, Strategy};

/// Allocates `send` and `recv` bytes of `--mem` memory, opens the rails of the plan and
/// connects every rank; the run facts carry the strategy too.
pub(crate) fn open_mesh(
    ctx: &Ctx,
    send: usize,
    recv: usize,
) -> Result<(Mesh, RunFacts), BenchError> {
    let bufs = super::alloc(ctx.opts.mem_kind(), send, recv, ctx.device)?;
    let strategy = ctx
        .opts
        .fabric
        .as_ref()
        .map(|f| f.strategy())
        .unwrap_or(Strategy::Split);
    let m = connect_mesh(ctx, bufs, strategy)?;
    let mut facts = mesh_facts(ctx, &m)?;
    facts.detail.strategy = Some(m.strategy().name());
    Ok((m, facts))
}

/// Opens the rails of the plan, registers `bufs` (send, receive) and connects every rank, with
/// messages spread over the rails by `strategy` (`ep` keeps the buffers too, so it allocates them
/// itself, and picks each put's rail itself).
pub(crate) fn connect_mesh(
    ctx: &Ctx,
    bufs: (Payload, Payload),
    strategy: Strategy,
) -> Result<Mesh, BenchError> {
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
        strategy,
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
        detail: RunDetail {
            virtual_rails: Some(plan.virtual_rails),
            mr: Some(m.mr_path().into()),
            ..RunDetail::default()
        },
    })
}

/// Runs `bench` on the harness; when the run fails, the mesh `mesh` takes out of it is leaked
/// instead of closed. A failed run can leave writes posted to a peer that stopped reading (or
/// reads too slowly); libfabric 1.17's tcp provider (ofi_rxm) crashes with SIGSEGV when such an
/// endpoint and its registrations are closed. The process exits next and the kernel releases
/// the sockets and memory, so the fabric is not torn down here.
pub(crate) fn run_on_mesh<B: Benchmark>(
    bench: &mut B,
    opts: &(impl Options + ?Sized),
    build: &BuildInfo,
    mesh: impl FnOnce(&mut B) -> Option<Mesh>,
) -> Result<crate::Verdict, BenchError> {
    let run = harness::run(bench, opts, build);
    if run.is_err() {
        std::mem::forget(mesh(bench));
    }
    run
}
