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

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot pick a free port: {e}"))
}

fn run(rank: u32) -> Result<String, String> {
    let client = efabench_pmix::Client::connect(&|n| std::env::var(n).ok()).map_err(|e| e.0)?;
    if client.rank() != rank {
        return Err(format!(
            "PMIx says this is rank {} of {} but the launcher's variables say rank {rank}",
            client.rank(),
            client.namespace()
        ));
    }
    let mine = if rank == 0 {
        let h = host();
        let hp = if h.contains(':') {
            format!("[{h}]:{}", free_port()?)
        } else {
            format!("{h}:{}", free_port()?)
        };
        client.put(KEY, &hp).map_err(|e| e.0)?;
        Some(hp)
    } else {
        None
    };
    client.fence().map_err(|e| e.0)?;
    let hp = match mine {
        Some(hp) => hp,
        None => client.get(0, KEY).map_err(|e| e.0)?,
    };
    client.fence().map_err(|e| e.0)?;
    drop(client);
    Ok(hp)
}

/// `HOST:PORT` of rank 0's rendezvous, agreed through PMIx within `timeout`.
pub fn exchange(rank: u32, timeout: Duration) -> Result<String, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("pmix".into())
        .spawn(move || {
            let _ = tx.send(run(rank));
        })
        .map_err(|e| format!("cannot start the PMIx thread: {e}"))?;
    rx.recv_timeout(timeout).unwrap_or_else(|_| {
        Err(format!(
            "no answer within {} s (a rank did not reach the PMIx fence)",
            timeout.as_secs()
        ))
    })
}
