//! `--notify`: how a receiver learns that a written chunk arrived, for `alltoall` and
//! `alltoallv` alike.
//!
//! * `data`: every stripe of a chunk is an RDMA write carrying remote CQ data, one operation per
//!   stripe. Over shm the receiver then does the copy: it finds the write in its command queue
//!   when it polls and reads the sender's pages with `process_vm_readv`.
//! * `signal`: the chunk is written without CQ data and, once the write completed locally, one
//!   8-byte signal to the peer's control word carries the CQ data. Over shm a write without CQ
//!   data above the inject size is copied by the sender inside the call (`process_vm_writev`,
//!   libfabric's fast RMA) and completes at once, so no chunk waits for its receiver to be
//!   scheduled and poll; the signal costs one small command.
//! * `auto`: `signal` for chunks above the provider's inject size over shm with a core per rank
//!   on small pages (where shm's copies contend), else `data`. Against `MPI_Alltoall` on the
//!   16-core GPU hosts, signalling measured 1.00-1.17× at 8 ranks and 1.08-1.18× at 16 ranks
//!   (128 KiB-1 MiB) where `data` measured 0.81-1.09× and 0.81-0.95×; at 4 KiB chunks a write
//!   is an inject either way and the extra signal lost (0.92× against 1.12×). With more ranks
//!   than cores (4 and 8 ranks on 2 cores) it was mixed, so `auto` keeps `data` there.
//!
//! Only shm orders the signal behind the bytes: a write there completes locally once its bytes
//! are in the peer's memory, or (inject-sized) once it is queued ahead of everything posted to
//! that peer after it. Other providers complete a write on transmission, so `signal` is refused
//! on them.

/// Whether receivers copy chunks of `chunk` bytes where shm's copies contend (`contended`):
/// what `--window auto` limits. A signalled chunk is copied by its sender.
pub fn receivers_copy(contended: bool, signal_above: Option<usize>, chunk: usize) -> bool {
    contended && signal_above.is_none_or(|t| chunk <= t)
}

/// `--notify`: how a chunk's arrival is announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Notify {
    /// `signal` above the inject size over shm where copies contend, else `data`.
    Auto,
    /// Remote CQ data on every stripe's write.
    Data,
    /// A signal after the chunk's writes completed (shm only).
    Signal,
}

impl Notify {
    /// The chunks above how many bytes are announced by a signal (`None`: none is), for a run
    /// over `provider` whose inject size is `inject` bytes, where shm's copies contend or not;
    /// a usage error for `signal` over a provider that does not order it.
    pub fn signal_above(
        self,
        provider: &str,
        contended: bool,
        inject: u64,
    ) -> Result<Option<usize>, String> {
        match self {
            Notify::Data => Ok(None),
            Notify::Auto => Ok((provider == "shm" && contended).then_some(inject as usize)),
            Notify::Signal if provider == "shm" => Ok(Some(0)),
            Notify::Signal => Err(format!(
                "--notify signal needs -p shm (provider {provider} completes a write on \
                 transmission, so a signal could overtake its data); use --notify data"
            )),
        }
    }

    /// The header line of a run where chunks are signalled.
    pub fn header(signal_above: Option<usize>) -> Option<String> {
        signal_above.map(|t| {
            let which = match t {
                0 => "every chunk is".to_string(),
                t => format!("chunks above {} are", crate::size::human(t as u64)),
            };
            format!(
                "# notify: {which} written without CQ data (over shm the sender copies it in the \
                 call) and announced by a signal once written; --notify data puts CQ data on \
                 every write"
            )
        })
    }

    /// The record's `notify` at a point whose non-empty chunks have lengths `chunks`: `data`,
    /// `signal` or `mixed`.
    pub fn record(
        signal_above: Option<usize>,
        chunks: impl Iterator<Item = usize>,
    ) -> &'static str {
        let (mut signalled, mut plain) = (false, false);
        for c in chunks.filter(|&c| c > 0) {
            match signal_above {
                Some(t) if c > t => signalled = true,
                _ => plain = true,
            }
        }
        match (signalled, plain) {
            (true, true) => "mixed",
            (true, false) => "signal",
            _ => "data",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_signals_above_inject_size_where_shm_copies_contend() {
        assert_eq!(Notify::Auto.signal_above("shm", true, 4096), Ok(Some(4096)));
        assert_eq!(Notify::Auto.signal_above("shm", false, 4096), Ok(None));
        assert_eq!(Notify::Auto.signal_above("tcp", true, 4096), Ok(None));
        assert_eq!(Notify::Data.signal_above("shm", true, 4096), Ok(None));
        assert_eq!(Notify::Signal.signal_above("shm", false, 4096), Ok(Some(0)));
        let e = Notify::Signal.signal_above("efa", true, 32).unwrap_err();
        assert!(
            e.contains("needs -p shm") && e.contains("--notify data"),
            "{e}"
        );
    }

    #[test]
    fn signalled_chunks_are_not_copied_by_receivers() {
        assert!(receivers_copy(true, None, 1 << 20));
        assert!(receivers_copy(true, Some(4096), 4096));
        assert!(!receivers_copy(true, Some(4096), 4097));
        assert!(!receivers_copy(false, None, 1 << 20));
    }

    #[test]
    fn the_record_names_what_the_chunks_used() {
        let chunks = || [0usize, 4096, 8192].into_iter();
        assert_eq!(Notify::record(Some(4096), chunks()), "mixed");
        assert_eq!(Notify::record(Some(0), chunks()), "signal");
        assert_eq!(Notify::record(None, chunks()), "data");
        assert_eq!(Notify::record(Some(8192), chunks()), "data");
        assert!(Notify::header(None).is_none());
        assert!(Notify::header(Some(4096))
            .unwrap()
            .contains("chunks above 4K are"));
        assert!(Notify::header(Some(0)).unwrap().contains("every chunk is"));
    }
}
