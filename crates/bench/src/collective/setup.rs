//! What `alltoall` and `alltoallv` check and say before measuring: the largest chunk against the
//! provider, what their `auto` options resolve to on the mesh ([`Tuning`]), the time budget's
//! header line, and the note on libfabric 1.x's shm provider.

use efabench_gpu::MemKind;

use super::notify::{self, Notify};
use super::placement::Placement;
use super::window::Window;
use crate::error::BenchError;
use crate::harness::{Ctx, RunFacts};
use crate::mesh::Mesh;

/// What `--notify`, `--window` and `--bind` resolve to on one run's mesh, shared by both
/// all-to-alls.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tuning {
    /// shm's copies contend: shm, small pages (device memory goes through CUDA IPC, huge pages
    /// take the page-table lock once per 2 MiB), more than 2 ranks, a core per rank.
    contended: bool,
    /// Chunks above this many bytes are announced by a signal (`--notify`).
    pub signal_above: Option<usize>,
}

impl Tuning {
    /// Resolves `notify` on mesh `m` (a usage error where it is refused), sets up `placement`
    /// and adds the header lines of what the `auto` options do here to `facts`.
    pub fn resolve(
        ctx: &Ctx,
        facts: &mut RunFacts,
        mem: MemKind,
        m: &Mesh,
        notify: Notify,
        window: Window,
        placement: &mut Placement,
    ) -> Result<Tuning, BenchError> {
        let small_shm = facts.provider == "shm"
            && matches!(mem, MemKind::Host | MemKind::Pinned)
            && ctx.world > 2;
        let contended = small_shm && m.core_per_rank();
        // Bound with up to two ranks per core: faster than the scheduler's placement at 32
        // ranks on 16 cores, as fast or faster at 4 on 2; with four per core within noise.
        let binds = small_shm && m.ranks_per_core_at_most(2);
        facts.header.extend(placement.setup(ctx, binds)?);
        let inject = m.group().rail(0).info().inject_size;
        let signal_above = notify
            .signal_above(&facts.provider, contended, inject)
            .map_err(BenchError::usage)?;
        facts.header.extend(Notify::header(signal_above));
        facts
            .header
            .extend(window.header(contended && signal_above.is_none()));
        Ok(Tuning {
            contended,
            signal_above,
        })
    }

    /// The chunks in flight per rank among `n` ranks at a point whose largest chunk is `chunk`
    /// bytes (`--window auto` limits only chunks their receivers copy).
    pub fn in_flight(&self, window: Window, chunk: usize, n: usize) -> usize {
        let copying = notify::receivers_copy(self.contended, self.signal_above, chunk);
        window.in_flight(copying, chunk, n)
    }
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
