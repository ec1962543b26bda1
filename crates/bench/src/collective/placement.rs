//! Where a rank's data-path thread runs during an all-to-all (`--bind`), for `alltoall` and
//! `alltoallv` alike.
//!
//! Over shm every chunk above the inject size is copied by its receiver with
//! `process_vm_readv`, which takes the sender's page-table lock page by page: n − 1 receivers
//! and n senders per host keep the kernel busy, and a rank whose thread the scheduler moves or
//! parks while others wait on its copies stalls every rank. With a core per rank and small pages
//! (where those copies contend), each rank's data-path thread on a core of its own measured as
//! fast or faster than leaving it to the scheduler at every chunk size from 4 to 64 KiB on the
//! 16-core GPU hosts, against `MPI_Alltoall` (16 ranks: 0.82-1.13× against 0.56-0.92×). Only that
//! thread is bound: the rank's helper threads (heartbeats, progress) stay free, and the thread
//! gets its CPUs back when the benchmark is dropped.

use crate::error::BenchError;
use crate::harness::Ctx;

/// `--bind`: where each rank's data-path thread runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Bind {
    /// A core of its own where shm's copies contend, else unbound.
    Auto,
    /// A core of its own at every size.
    Core,
    /// Where the scheduler puts it.
    None,
}

/// A rank's placement for one run: what `--bind` asked, whether the copies contend here, the
/// CPUs the thread had at setup and the core it gets.
#[derive(Debug)]
pub struct Placement {
    bind: Bind,
    contended: bool,
    cpus: Vec<usize>,
    core: usize,
}

impl Placement {
    pub fn new(bind: Bind) -> Placement {
        Placement {
            bind,
            contended: false,
            cpus: Vec::new(),
            core: 0,
        }
    }

    /// Reads this thread's CPUs and picks the rank's core by its place among the ranks of its
    /// host. `contended`: shm's copies contend here (shm, small pages, more than 2 ranks, a core
    /// per rank). Returns the header line that says what `--bind` does in this run, if any.
    pub fn setup(&mut self, ctx: &Ctx, contended: bool) -> Result<Option<String>, BenchError> {
        self.contended = contended;
        self.cpus = efabench_gpu::affinity::allowed_cpus()
            .map_err(|e| BenchError::failed(format!("could not read this rank's CPUs: {e}")))?;
        let local = ctx.hosts[..ctx.rank as usize]
            .iter()
            .filter(|h| **h == ctx.host)
            .count();
        self.core = self.cpus[local % self.cpus.len().max(1)];
        Ok(match self.bind {
            Bind::Auto if contended => Some(
                "# bind: each rank's data-path thread on a core of its own (--bind auto: shm with \
                 a core per rank on small pages; --bind none leaves it to the scheduler)"
                    .into(),
            ),
            Bind::Core => Some(
                "# bind: each rank's data-path thread on a core of its own (--bind core)".into(),
            ),
            _ => None,
        })
    }

    /// Whether the data-path thread runs bound.
    pub fn bound(&self) -> bool {
        match self.bind {
            Bind::None => false,
            Bind::Core => true,
            Bind::Auto => self.contended,
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
        auto.contended = true;
        assert!(auto.bound());
        assert_eq!(auto.name(), "core");
        assert!(Placement::new(Bind::Core).bound());
        let mut none = Placement::new(Bind::None);
        none.contended = true;
        assert!(!none.bound());
        assert_eq!(none.name(), "none");
    }
}
