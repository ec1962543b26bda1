//! Rank 0's rendezvous through the launcher's PMIx server: rank 0 picks a free port and puts
//! `host:port` under [`KEY`], every rank fences, the others get the key from rank 0, and all
//! fence again (so rank 0 stays connected until everyone has read) before finalising.
//!
//! The host rank 0 publishes is `PMIX_HOSTNAME` (the node name the launcher used to reach that
//! node, so the other nodes can resolve it), else this machine's host name. The port is one the
//! kernel handed out a moment earlier: another process could take it before rank 0 binds it, in
//! which case rank 0 fails with "address in use" and the job ends; it does not hang.
//!
//! The PMIx calls run on their own thread so that a fence some rank never reaches ends after the
//! job's `--timeout` instead of blocking forever.

use std::sync::mpsc;
use std::time::Duration;

use efabench_pmix::PmixError;

/// Why rank 0's address could not be agreed through PMIx.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// A PMIx call failed (or no PMIx library could be loaded).
    #[error(transparent)]
    Pmix(#[from] PmixError),
    /// PMIx and the launcher's variables disagree on this process's rank.
    #[error(
        "PMIx says this is rank {pmix} of {namespace} but the launcher's variables say rank {env}"
    )]
    RankMismatch {
        pmix: u32,
        namespace: String,
        env: u32,
    },
    /// Rank 0 found no free port to publish.
    #[error("cannot pick a free port: {0}")]
    FreePort(#[source] std::io::Error),
    /// The thread that makes the PMIx calls did not start.
    #[error("cannot start the PMIx thread: {0}")]
    Thread(#[source] std::io::Error),
    /// No answer within the job's timeout.
    #[error("no answer within {secs} s (a rank did not reach the PMIx fence)")]
    Timeout { secs: u64 },
}

/// The PMIx key under which rank 0 publishes `host:port`.
pub const KEY: &str = "efabench.rdzv";

fn host() -> String {
    std::env::var("PMIX_HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| {
            rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned()
        })
}

fn free_port() -> Result<u16, ExchangeError> {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(ExchangeError::FreePort)
}

fn run(rank: u32) -> Result<String, ExchangeError> {
    let client = efabench_pmix::Client::connect(&|n| std::env::var(n).ok())?;
    if client.rank() != rank {
        return Err(ExchangeError::RankMismatch {
            pmix: client.rank(),
            namespace: client.namespace(),
            env: rank,
        });
    }
    let mine = if rank == 0 {
        let h = host();
        let hp = if h.contains(':') {
            format!("[{h}]:{}", free_port()?)
        } else {
            format!("{h}:{}", free_port()?)
        };
        client.put(KEY, &hp)?;
        Some(hp)
    } else {
        None
    };
    client.fence()?;
    let hp = match mine {
        Some(hp) => hp,
        None => client.get(0, KEY)?,
    };
    client.fence()?;
    drop(client);
    Ok(hp)
}

/// `HOST:PORT` of rank 0's rendezvous, agreed through PMIx within `timeout`.
pub fn exchange(rank: u32, timeout: Duration) -> Result<String, ExchangeError> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("pmix".into())
        .spawn(move || {
            let _ = tx.send(run(rank));
        })
        .map_err(ExchangeError::Thread)?;
    rx.recv_timeout(timeout)
        .unwrap_or(Err(ExchangeError::Timeout {
            secs: timeout.as_secs(),
        }))
}
