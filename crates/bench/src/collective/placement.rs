//! Where a rank's data-path thread runs during an all-to-all (`--bind`), for `alltoall` and
//! `alltoallv` alike.
//!
//! Over shm every chunk above the inject size is copied between processes with
//! `process_vm_readv`/`process_vm_writev`, which take a page-table lock page by page: n − 1
//! peers and n ranks per host keep the kernel busy, and a rank whose thread the scheduler moves
//! or parks while others wait on its copies stalls every rank. On small pages, each rank's
//! data-path thread bound to a core (by its place among the host's ranks) measured as fast or
//! faster than leaving it to the scheduler at every chunk size from 4 to 64 KiB on the 16-core
//! GPU hosts, against `MPI_Alltoall` (16 ranks: 0.82-1.13× against 0.56-0.92×), and with two
//! ranks per core as well (32 ranks on 16 cores: 1.30-1.99× against 0.81-1.66×; 4 ranks on the
//! 2-core VM: 1.02-1.28× against 0.99-1.16× in one run, within a few percent in another); with
//! four per core (8 ranks on 2 cores) bound and unbound were within noise, so `auto` binds up to
//! two ranks per core. Only that thread is bound: the rank's helper threads (heartbeats,
//! progress) stay free, and the thread gets its CPUs back when the benchmark is dropped.

use crate::error::BenchError;
use crate::harness::Ctx;

/// `--bind`: where each rank's data-path thread runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Bind {
    /// A core by its place among the host's ranks where binding helps (shm, small pages, at most
    /// two ranks per core), else unbound.
    Auto,
    /// A core by its place among the host's ranks, always.
    Core,
    /// Where the scheduler puts it.
    None,
}

/// A rank's placement for one run: what `--bind` asked, whether binding helps here, the CPUs
/// the thread had at setup and the core it gets.
#[derive(Debug)]
pub struct Placement {
    bind: Bind,
    helps: bool,
    cpus: Vec<usize>,
    core: usize,
}

impl Placement {
    pub fn new(bind: Bind) -> Placement {
        Placement {
            bind,
            helps: false,
            cpus: Vec::new(),
            core: 0,
        }
    }

    /// Reads this thread's CPUs and picks the rank's core by its place among the ranks of its
    /// host. `helps`: binding helps here (shm, small pages, more than 2 ranks, at most two per
    /// core). Returns the header line that says what `--bind` does in this run, if any.
    pub fn setup(&mut self, ctx: &Ctx, helps: bool) -> Result<Option<String>, BenchError> {
        self.helps = helps;
        self.cpus = efabench_gpu::affinity::allowed_cpus()
            .map_err(|e| BenchError::failed(format!("could not read this rank's CPUs: {e}")))?;
        let local = ctx.hosts[..ctx.rank as usize]
            .iter()
            .filter(|h| **h == ctx.host)
            .count();
        self.core = self.cpus[local % self.cpus.len().max(1)];
        let host_ranks = ctx.hosts.iter().filter(|h| **h == ctx.host).count();
        let shared = match host_ranks.div_ceil(self.cpus.len().max(1)) {
            0 | 1 => "a core of its own".to_string(),
            k => format!("a core shared by up to {k} ranks"),
        };
        Ok(match self.bind {
            Bind::Auto if helps => Some(format!(
                "# bind: each rank's data-path thread on {shared} (--bind auto: shm on small \
                 pages, at most two ranks per core; --bind none leaves it to the scheduler)"
            )),
            Bind::Core => Some(format!(
                "# bind: each rank's data-path thread on {shared} (--bind core)"
            )),
            _ => None,
        })
    }

    /// Whether the data-path thread runs bound.
    pub fn bound(&self) -> bool {
        match self.bind {
            Bind::None => false,
            Bind::Core => true,
            Bind::Auto => self.helps,
        }
    }

    /// The record's `bind`: `core` or `none`.
    pub fn name(&self) -> &'static str {
        if self.bound() {
            "core"
        } else {
            "none"
        }
    }

    /// Binds this thread to its core, or gives it back every CPU it had at setup.
    pub fn place(&self) -> Result<(), BenchError> {
        let cpus = match self.bound() {
            true => std::slice::from_ref(&self.core),
            false => &self.cpus[..],
        };
        efabench_gpu::affinity::bind_current_thread(cpus).map_err(|e| {
            BenchError::failed(format!(
                "could not bind the rank to CPU(s) {cpus:?}: {e}; run with --bind none"
            ))
        })
    }
}

/// The thread gets back the CPUs it had before `--bind` placed it: a run on the same thread
/// after this one (`efabench cluster` runs several) starts where this one started.
impl Drop for Placement {
    fn drop(&mut self) {
        if !self.cpus.is_empty() {
            let _ = efabench_gpu::affinity::bind_current_thread(&self.cpus);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_binds_only_where_copies_contend() {
        let mut auto = Placement::new(Bind::Auto);
        assert!(!auto.bound());
        auto.helps = true;
        assert!(auto.bound());
        assert_eq!(auto.name(), "core");
        assert!(Placement::new(Bind::Core).bound());
        let mut none = Placement::new(Bind::None);
        none.helps = true;
        assert!(!none.bound());
        assert_eq!(none.name(), "none");
    }
}
