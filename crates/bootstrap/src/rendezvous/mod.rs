//! The TCP rendezvous: rank 0 serves, every other rank keeps one connection to it.
//!
//! Why a star and not MPI: the job needs only a handful of small collectives at start-up and at
//! the end (addresses of endpoints, results), and it must behave the same under `srun`, `mpirun`,
//! Kubernetes or `efabench launch` without linking an MPI. A star keeps the failure story simple:
//! rank 0 sees every rank, so it is the one place that decides "rank 3 died" and tells everyone.
//!
//! Failure detection, the reason this module exists (a dead rank must never hang the others):
//! * a rank that exits or is killed closes its socket, so its reader thread at rank 0 sees EOF
//!   or a reset at once;
//! * a rank that freezes (SIGSTOP, swapping, a hung driver call) keeps its socket open, so both
//!   ends send a heartbeat whenever they have sent nothing for a while, and a reader that hears
//!   nothing for `timeout` declares the other side silent;
//! * a collective that some ranks never call is ended by rank 0 after `timeout`, naming them;
//! * whatever rank 0 concludes is sent to every rank as one message, so all of them report the
//!   same cause, and a rank that calls [`Bootstrap::abort`] has its reason forwarded the same way.
//!
//! Each connection has a reader thread (blocking reads with a read timeout) and a writer thread
//! (a channel, so one slow peer never blocks the others and heartbeats go out when idle). The
//! result of all this is one flag: [`Bootstrap::check`] is an atomic load that a busy data-path
//! loop can call every millisecond.
//!
//! The files, one job each: this one holds the public face ([`Bootstrap`], its collectives,
//! abort and health handles); `state.rs` what the threads of one rank share; `hub.rs` rank 0's
//! server (accept, handshake, readers, collectives); `client.rs` the other ranks' connection;
//! `watchdog.rs` heartbeats, progress and the timeouts that end a stuck job; `options.rs` the
//! message that names the option in which a rank differs from rank 0.
//!
//! Before a peer has presented the job token it is a stranger: its hello is bounded to
//! [`wire::MAX_HELLO`] bytes and a few seconds, the number of strangers being served at once is
//! capped, and a refusal never touches the job's state.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::detect::{parse_host_port, RankInfo};
use crate::error::BootstrapError;
use crate::wire::{self, Hello, Op};

mod client;
mod hub;
mod options;
mod state;
mod watchdog;

use client::*;
use hub::*;
use options::*;
use state::*;
pub use watchdog::ProgressHandle;
use watchdog::*;

/// `op` of the [`BootstrapError::Timeout`] raised when ranks never connect.
pub(crate) const CONNECT_OP: &str = "connect";

/// A job's connection to its rendezvous. `Send + Sync`: one thread may run collectives while
/// others poll [`Bootstrap::check`].
pub struct Bootstrap {
    rank: u32,
    world: u32,
    local_rank: u32,
    timeout: Duration,
    shared: Arc<Shared>,
    role: Role,
    /// Next collective sequence number; held for the whole collective so that two threads of
    /// one rank cannot interleave collectives.
    next_seq: Mutex<u64>,
}

/// See [`Bootstrap::abort_handle`].
#[derive(Clone)]
pub struct AbortHandle {
    shared: Arc<Shared>,
    rank: u32,
    link: AbortLink,
}

#[derive(Clone)]
enum AbortLink {
    Single,
    Hub,
    Client(Sender<Out>),
}

impl AbortHandle {
    /// See [`Bootstrap::abort`].
    pub fn abort(&self, reason: &str) {
        let reason: String = reason.chars().take(wire::MAX_TEXT / 4).collect();
        self.shared.report(BootstrapError::Aborted {
            rank: self.rank,
            reason: reason.clone(),
        });
        let mut acks = Vec::new();
        match &self.link {
            AbortLink::Single => {}
            AbortLink::Hub => {
                let st = lock(&self.shared.state);
                for p in st.hub.iter().flat_map(|h| h.peers.iter().flatten()) {
                    let (tx, rx) = mpsc::sync_channel(1);
                    if p.tx.send(Out::Flush(tx)).is_ok() {
                        acks.push(rx);
                    }
                }
            }
            AbortLink::Client(tx) => {
                let mut p = Vec::new();
                wire::put_text(&mut p, &reason);
                let _ = tx.send(Out::Frame(Arc::new(wire::frame(wire::T_ABORT, &p))));
                let (ack_tx, ack_rx) = mpsc::sync_channel(1);
                if tx.send(Out::Flush(ack_tx)).is_ok() {
                    acks.push(ack_rx);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        for rx in acks {
            let _ = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        }
    }
}

/// See [`Bootstrap::health`].
#[derive(Clone)]
pub struct Health(Arc<Shared>);

impl Health {
    /// Err once any rank died, froze, aborted or broke the protocol (one atomic load when well).
    pub fn check(&self) -> Result<(), BootstrapError> {
        match self.0.failure() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("local_rank", &self.local_rank)
            .field("failure", &self.shared.failure())
            .finish()
    }
}

impl Bootstrap {
    /// Join the job: rank 0 listens on `info.rdzv`, the others connect to it (retrying with
    /// back-off until `timeout`). Returns once every rank is connected. `timeout` also bounds
    /// every later wait and is how long a silent rank is tolerated.
    pub fn connect(info: &RankInfo, timeout: Duration) -> Result<Bootstrap, BootstrapError> {
        let timeout = timeout.max(Duration::from_millis(100));
        if info.world <= 1 {
            let shared = Arc::new(Shared::new(1, String::new(), timeout));
            lock(&shared.state).started = true;
            return Ok(Bootstrap {
                rank: 0,
                world: 1,
                local_rank: info.local_rank,
                timeout,
                shared,
                role: Role::Single,
                next_seq: Mutex::new(1),
            });
        }
        if info.rank >= info.world {
            return Err(BootstrapError::usage(format!(
                "rank {} is not smaller than the world size {}",
                info.rank, info.world
            )));
        }
        let rdzv = info.rdzv.as_deref().ok_or_else(|| {
            BootstrapError::usage(format!(
                "a job of {} ranks needs a rendezvous address; pass --rdzv HOST:PORT",
                info.world
            ))
        })?;
        let b = if info.rank == 0 {
            start_hub(info, rdzv, timeout)?
        } else {
            start_client(info, rdzv, timeout)?
        };
        // Under `efabench launch`: from now on a death of this rank is seen by the others.
        crate::launcher::report_joined(info);
        Ok(b)
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }
    pub fn world(&self) -> u32 {
        self.world
    }
    pub fn local_rank(&self) -> u32 {
        self.local_rank
    }
    /// The timeout this bootstrap was connected with.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Err once any rank died, froze, aborted or broke the protocol. One atomic load when all is
    /// well, so data-path polling loops can call it every millisecond.
    pub fn check(&self) -> Result<(), BootstrapError> {
        match self.shared.failure() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// A `Send + 'static` handle on [`Bootstrap::check`], for data-path objects that outlive a
    /// borrow of the bootstrap (a benchmark's endpoints polling their CQs).
    pub fn health(&self) -> Health {
        Health(self.shared.clone())
    }

    /// A cheap handle that the data path bumps whenever it makes progress (an iteration, a
    /// window, a verified payload). Heartbeats carry the count to rank 0, and a collective wait
    /// times out only when no rank's count moved (and no contribution arrived) for the timeout:
    /// ranks idle in a collective while others run a long measured step are not a failure.
    pub fn progress(&self) -> ProgressHandle {
        ProgressHandle {
            count: self.shared.progress.clone(),
        }
    }

    /// Fail unless every rank passes the same `value` (an options fingerprint such as
    /// `"sendrecv -b 8 -e 1M --window 64 --check"`). A collective: every rank must call it, at
    /// the same point. On a difference every rank returns the same usage error, naming the first
    /// rank that differs from rank 0 and the differing words, e.g. ``rank 1 was started with
    /// different options than rank 0: `--no-check` vs `--check`; start every rank with the same
    /// options``. `what` names the thing compared ("options").
    pub fn check_same(&self, what: &str, value: &str) -> Result<(), BootstrapError> {
        let payload = self.collective(Op::CheckSame, value.as_bytes())?;
        let table = wire::decode_table(&payload, self.world)
            .map_err(|detail| BootstrapError::Protocol { rank: 0, detail })?;
        match first_difference(what, &table) {
            None => Ok(()),
            Some(e) => {
                // Every rank computed the same error from the same table; recording it also makes
                // `check` and later collectives fail with it rather than with a side effect.
                self.shared.report(e.clone());
                Err(e)
            }
        }
    }

    /// Make sure this process ends once the job has failed, even if the thread running the
    /// benchmark never looks at the bootstrap again.
    ///
    /// Why: libfabric's shm provider can leave a survivor spinning inside `fi_cq_read` or
    /// `fi_send` (its spin lock in shared memory) when a peer is killed or frozen at the wrong
    /// moment; that thread never returns to call [`Bootstrap::check`], so the job would hang
    /// although the bootstrap knows exactly what happened. Once the bootstrap has learned that the
    /// job failed (a peer died or went silent, an abort arrived, a collective waited with nothing
    /// moving for the timeout) and the process is still alive `grace` later, a watchdog thread
    /// prints the job's one-line reason (`efabench: rank R: ...`) to stderr and exits the process:
    /// status 2 for a usage error (ranks started with different options), 1 otherwise.
    ///
    /// Why exit instead of unwinding: the stuck thread is inside C code that holds a lock and will
    /// never return, so there is nothing to unwind; Rust cannot interrupt another thread. The
    /// records measured so far are safe because the record writer flushes every line. Exiting
    /// runs the C libraries' exit handlers; should one of them block on the stuck thread's lock,
    /// the process kills itself 2 s later (SIGKILL) rather than hang.
    ///
    /// `grace` should cover the normal way out (the benchmark notices within milliseconds, then
    /// [`Bootstrap::abort`] may wait up to 2 s for its message to leave): 3 to 5 s is right. The
    /// watchdog is disarmed when the `Bootstrap` is dropped; arming it twice has no effect.
    pub fn arm_watchdog(&self, grace: Duration) {
        if self.shared.watchdog_armed.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = self.shared.clone();
        let rank = self.rank;
        let spawned = std::thread::Builder::new()
            .name("efabench-watchdog".into())
            .stack_size(256 << 10)
            .spawn(move || watchdog(&shared, rank, grace));
        if let Err(e) = spawned {
            // Without the thread the job still fails through `check`; say what is missing.
            eprintln!("efabench: rank {rank}: cannot start the watchdog thread ({e})");
        }
    }

    /// The job's failure, waiting at most `within` for the bootstrap to learn of one.
    ///
    /// For the data path's own timeouts: when a send or a completion times out because the
    /// peer froze or died, the bootstrap usually learns the real cause ("rank 2 stopped
    /// answering") within a heartbeat or two. Returning that instead of the data path's error
    /// ("timed out waiting for fi_inject") names the rank on every rank. Returns `None` when the
    /// bootstrap saw nothing wrong (the data path's error is then the real one).
    pub fn failure_within(&self, within: Duration) -> Option<BootstrapError> {
        let deadline = Instant::now() + within;
        let mut st = lock(&self.shared.state);
        loop {
            if let Some(e) = &st.failure {
                return Some(e.clone());
            }
            let now = Instant::now();
            if now >= deadline || self.shared.closing.load(Ordering::Acquire) {
                return None;
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Every rank's blob, indexed by rank, on every rank.
    pub fn all_gather(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        let payload = self.collective(Op::AllGather, blob)?;
        wire::decode_table(&payload, self.world)
            .map_err(|detail| BootstrapError::Protocol { rank: 0, detail })
    }

    /// Returns once every rank has called it.
    pub fn barrier(&self) -> Result<(), BootstrapError> {
        self.collective(Op::Barrier, &[]).map(|_| ())
    }

    /// Every rank's blob at rank 0 (`Some`); the other ranks get `None` once rank 0 has them all.
    pub fn gather(&self, blob: &[u8]) -> Result<Option<Vec<Vec<u8>>>, BootstrapError> {
        let payload = self.collective(Op::Gather, blob)?;
        if self.rank != 0 {
            return Ok(None);
        }
        wire::decode_table(&payload, self.world)
            .map(Some)
            .map_err(|detail| BootstrapError::Protocol { rank: 0, detail })
    }

    /// Rank 0's blob on every rank (what the other ranks pass is ignored).
    pub fn broadcast(&self, blob_at_root: &[u8]) -> Result<Vec<u8>, BootstrapError> {
        let blob = if self.rank == 0 { blob_at_root } else { &[] };
        self.collective(Op::Broadcast, blob)
    }

    /// Fail the whole job with `reason`: every rank's `check` and collectives return
    /// [`BootstrapError::Aborted`] naming this rank. Waits (at most 2 s) until the message is out.
    pub fn abort(&self, reason: &str) {
        self.abort_handle().abort(reason)
    }

    /// A handle that can [`AbortHandle::abort`] the job from another thread (e.g. one that
    /// learns this rank crashed).
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            shared: self.shared.clone(),
            rank: self.rank,
            link: match &self.role {
                Role::Single => AbortLink::Single,
                Role::Hub { .. } => AbortLink::Hub,
                Role::Client { tx, .. } => AbortLink::Client(tx.clone()),
            },
        }
    }

    fn wait_started(
        &self,
        deadline: Instant,
        on_timeout: impl Fn(&State) -> BootstrapError,
    ) -> Result<(), BootstrapError> {
        let mut st = lock(&self.shared.state);
        loop {
            if let Some(e) = &st.failure {
                return Err(e.clone());
            }
            if st.started {
                return Ok(());
            }
            if st.rank0_left {
                return Err(BootstrapError::Left {
                    rank: 0,
                    op: CONNECT_OP.into(),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(on_timeout(&st));
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    fn collective(&self, op: Op, blob: &[u8]) -> Result<Vec<u8>, BootstrapError> {
        if blob.len() > wire::MAX_BLOB {
            return Err(BootstrapError::usage(format!(
                "{} of {} bytes per rank is more than the {} MiB the rendezvous carries",
                op.name(),
                blob.len(),
                wire::MAX_BLOB >> 20
            )));
        }
        let mut next = lock(&self.next_seq);
        let seq = *next;
        *next += 1;
        self.check()?;
        match &self.role {
            Role::Single => {
                return Ok(match op {
                    Op::AllGather | Op::Gather | Op::CheckSame => {
                        wire::encode_table(std::iter::once(blob))
                    }
                    Op::Barrier => Vec::new(),
                    Op::Broadcast => blob.to_vec(),
                })
            }
            Role::Hub { .. } => contribute(&self.shared, 0, seq, op, blob.to_vec()),
            Role::Client { tx, .. } => {
                let f = wire::frame(wire::T_CONTRIB, &wire::encode_contrib(seq, op, blob));
                // A closed channel means the writer already failed and reported why.
                let _ = tx.send(Out::Frame(Arc::new(f)));
            }
        }
        // Rank 0 ends a collective when nothing moved for the timeout and tells everyone; the
        // local deadline only matters if that message can never arrive. It too counts from the
        // job's last activity (rank 0's heartbeats say when the job moved), not from our arrival.
        let backstop = self.timeout * 2 + Duration::from_secs(2);
        let entered = Instant::now();
        let mut st = lock(&self.shared.state);
        loop {
            let deadline = st.activity_at.map_or(entered, |a| a.max(entered)) + backstop;
            // A result that arrived is returned even when a failure was reported since: every
            // rank got the same result, so they all draw the same conclusion from it. Otherwise
            // a rank that reads a `check_same` table late would see the abort another rank sent
            // after reading it (`rank 1 aborted the job: ...`, exit 1) instead of the usage error
            // it computes itself (exit 2 on every rank).
            if st.result.as_ref().is_some_and(|(s, _)| *s == seq) {
                return Ok(st.result.take().map(|(_, p)| p).unwrap_or_default());
            }
            if let Some(e) = &st.failure {
                return Err(e.clone());
            }
            if st.rank0_left {
                return Err(BootstrapError::Left {
                    rank: 0,
                    op: format!("{} #{seq}", op.name()),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                let e = BootstrapError::Timeout {
                    op: format!("{} #{seq}", op.name()),
                    waiting_for: vec![0],
                    after: backstop,
                };
                return Err(e);
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking && self.world > 1 {
            self.abort(&format!("rank {} panicked", self.rank));
        }
        let bye = Arc::new(wire::frame(wire::T_BYE, &[]));
        self.shared.closing.store(true, Ordering::Release);
        self.shared.cv.notify_all();
        match &self.role {
            Role::Single => {}
            Role::Client {
                tx,
                stream,
                threads,
            } => {
                let _ = tx.send(Out::Frame(bye));
                let _ = tx.send(Out::Close);
                let mut handles: Vec<JoinHandle<()>> = lock(threads).drain(..).collect();
                // The writer first, so the goodbye is out before the socket closes.
                if !handles.is_empty() {
                    let _ = handles.remove(0).join();
                }
                let _ = stream.shutdown(Shutdown::Both);
                for h in handles {
                    let _ = h.join();
                }
            }
            Role::Hub { wake_addr, threads } => {
                let streams: Vec<TcpStream> = {
                    let st = lock(&self.shared.state);
                    let peers = st.hub.iter().flat_map(|h| h.peers.iter().flatten());
                    peers
                        .filter_map(|p| {
                            let _ = p.tx.send(Out::Frame(bye.clone()));
                            let _ = p.tx.send(Out::Close);
                            p.stream.try_clone().ok()
                        })
                        .collect()
                };
                let writers: Vec<JoinHandle<()>> = lock(&self.shared.writers).drain(..).collect();
                for w in writers {
                    let _ = w.join();
                }
                for s in streams {
                    let _ = s.shutdown(Shutdown::Both);
                }
                if let Some(a) = wake_addr {
                    // Wake the accept thread so it sees `closing` and returns.
                    let _ = TcpStream::connect_timeout(a, Duration::from_millis(200));
                }
                for h in lock(threads).drain(..) {
                    let _ = h.join();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn bootstrap_is_send_and_sync() {
        assert_send_sync::<Bootstrap>();
    }

    #[test]
    fn one_rank_needs_no_socket() {
        let b = Bootstrap::connect(&RankInfo::single(), Duration::from_secs(1)).unwrap();
        assert_eq!((b.rank(), b.world(), b.local_rank()), (0, 1, 0));
        assert_eq!(b.all_gather(b"x").unwrap(), vec![b"x".to_vec()]);
        b.barrier().unwrap();
        assert_eq!(b.gather(b"y").unwrap(), Some(vec![b"y".to_vec()]));
        assert_eq!(b.broadcast(b"z").unwrap(), b"z".to_vec());
        b.check().unwrap();
        b.abort("stop");
        assert_eq!(
            b.check().unwrap_err().to_string(),
            "rank 0 aborted the job: stop"
        );
        assert!(b.barrier().is_err());
    }

    #[test]
    fn option_differences_show_the_differing_words() {
        let d = |a: &str, b: &str| word_difference(a, b);
        assert_eq!(
            d("sendrecv -b 8 --no-check", "sendrecv -b 8 --check"),
            ("`--no-check`".into(), "`--check`".into())
        );
        assert_eq!(
            d(
                "sendrecv --window 32 --check",
                "sendrecv --window 64 --check"
            ),
            ("`--window 32`".into(), "`--window 64`".into())
        );
        assert_eq!(
            d("sendrecv -b 8", "sendrecv -b 8 --check"),
            ("`(nothing)`".into(), "`--check`".into())
        );
        assert_eq!(d("a  b", "a b"), ("`a  b`".into(), "`a b`".into()));
        let long = format!("x {}", "y".repeat(10_000));
        let (a, _) = d(&long, "x z");
        assert!(a.len() < 100 && a.ends_with("...`"), "{a}");
        let t = vec![b"a".to_vec(), b"a".to_vec(), b"b".to_vec()];
        let e = first_difference("options", &t).unwrap();
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "rank 2 was started with different options than rank 0: `b` vs `a`; start every \
             rank with the same options"
        );
        assert!(first_difference("options", &t[..2]).is_none());
    }

    #[test]
    fn progress_handles_share_one_count() {
        let b = Bootstrap::connect(&RankInfo::single(), Duration::from_secs(1)).unwrap();
        let p = b.progress();
        let q = p.clone();
        p.tick();
        q.tick();
        assert_eq!(b.progress().count(), 2);
        b.check_same("options", "x").unwrap();
    }

    #[test]
    fn heartbeat_fits_several_times_in_the_timeout() {
        assert_eq!(
            heartbeat_for(Duration::from_secs(60)),
            Duration::from_secs(1)
        );
        assert_eq!(
            heartbeat_for(Duration::from_secs(2)),
            Duration::from_millis(250)
        );
        assert_eq!(
            heartbeat_for(Duration::from_millis(1)),
            Duration::from_millis(10)
        );
    }
}
