//! `--window`: how many of its chunks a rank keeps in flight in an all-to-all, for `alltoall`
//! and `alltoallv` alike.
//!
//! By default every chunk of an iteration is posted at once. Over shm with a core per rank on
//! small pages, where receivers copy the chunks (`--notify data`, see [`super::notify`]), `auto`
//! keeps 2 chunks in flight per rank from 16 KiB chunks up instead, the next posted as one
//! completes, in the same peer order: the receiver copies such a chunk with `process_vm_readv`,
//! which takes the sender's page-table lock once per 4 KiB page, and with every chunk posted at
//! once up to n − 1 receivers take one sender's lock together (the largest kernel cost in a
//! 16-rank profile against `MPI_Alltoall`). Two in flight keep it to about two readers per
//! sender. Chunks their sender copies (signalled, the default there) are all posted at once: with
//! them, all at once measured 0.99-1.33× `MPI_Alltoall` at 8 and 16 ranks against 1.01-1.21× for
//! two in flight. On huge pages the lock is taken once per 2 MiB, device memory does not use CMA,
//! and with more ranks than cores the ranks wait on the scheduler more than on the lock: there
//! `auto` posts everything at once too.

/// `--window`: how many of its chunks a rank keeps in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// 2 where shm's copies contend (see the module docs), else all.
    Auto,
    All,
    Chunks(usize),
}

/// Smallest chunk that `--window auto` keeps 2 in flight of (where it applies).
pub const AUTO_WINDOW_MIN_CHUNK: usize = 16 << 10;

impl Window {
    pub fn name(self) -> String {
        match self {
            Window::Auto => "auto".into(),
            Window::All => "all".into(),
            Window::Chunks(w) => w.to_string(),
        }
    }

    /// The chunks in flight per rank among `n` ranks at a point whose largest chunk is `chunk`
    /// bytes, where receivers copy the chunks and shm's copies contend (`copying`) or not.
    pub fn in_flight(self, copying: bool, chunk: usize, n: usize) -> usize {
        let w = match self {
            Window::All => usize::MAX,
            Window::Chunks(w) => w,
            Window::Auto if copying && chunk >= AUTO_WINDOW_MIN_CHUNK => 2,
            Window::Auto => usize::MAX,
        };
        w.min(n.saturating_sub(1).max(1))
    }

    /// The header line of a run where `auto` limits the window (`copying`: receivers copy the
    /// chunks where shm's copies contend).
    pub fn header(self, copying: bool) -> Option<String> {
        (self == Window::Auto && copying).then(|| {
            format!(
                "# window: 2 chunks in flight per rank from {} chunks up (--window auto on shm \
                 with --notify data: more in flight makes receivers wait on each other); \
                 --window all posts every chunk at once",
                crate::size::human(AUTO_WINDOW_MIN_CHUNK as u64)
            )
        })
    }
}

/// Parses `--window`: auto, all or a number of chunks from 1 to 65536.
pub fn window_arg(s: &str) -> Result<Window, String> {
    match s {
        "auto" => Ok(Window::Auto),
        "all" => Ok(Window::All),
        _ => match s.parse::<usize>() {
            Ok(w) if (1..=65536).contains(&w) => Ok(Window::Chunks(w)),
            _ => Err(format!(
                "{s:?} is not a window: use auto, all or a number of chunks from 1 to 65536"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_values() {
        assert_eq!(window_arg("auto"), Ok(Window::Auto));
        assert_eq!(window_arg("all"), Ok(Window::All));
        assert_eq!(window_arg("3"), Ok(Window::Chunks(3)));
        for bad in ["0", "65537", "-1", "two", ""] {
            assert!(
                window_arg(bad)
                    .unwrap_err()
                    .contains("auto, all or a number"),
                "{bad}"
            );
        }
    }

    #[test]
    fn auto_limits_large_chunks_where_copies_contend() {
        let big = AUTO_WINDOW_MIN_CHUNK;
        assert_eq!(Window::Auto.in_flight(true, big, 16), 2);
        assert_eq!(Window::Auto.in_flight(true, big - 16, 16), 15);
        assert_eq!(Window::Auto.in_flight(false, big, 16), 15);
        assert_eq!(Window::Chunks(4).in_flight(false, 16, 3), 2);
        assert_eq!(Window::All.in_flight(true, big, 2), 1);
        assert!(Window::Auto.header(true).is_some() && Window::Auto.header(false).is_none());
        assert!(Window::All.header(true).is_none());
    }
}
