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

enum Role {
    Single,
    Hub {
        wake_addr: Option<SocketAddr>,
        threads: Mutex<Vec<JoinHandle<()>>>,
    },
    Client {
        tx: Sender<Out>,
        stream: TcpStream,
        threads: Mutex<Vec<JoinHandle<()>>>,
    },
}

enum Out {
    Frame(Arc<Vec<u8>>),
    /// Answered once everything queued before it was written (or the connection is gone).
    Flush(mpsc::SyncSender<()>),
    Close,
}

struct Peer {
    tx: Sender<Out>,
    stream: TcpStream,
    left: bool,
    /// The host the rank said it runs on (its hello), to name it when it dies or goes silent.
    host: String,
}

struct Round {
    seq: u64,
    op: Op,
    first: u32,
    blobs: Vec<Option<Vec<u8>>>,
    have: u32,
    started: Instant,
}

struct HubState {
    peers: Vec<Option<Peer>>,
    /// The last progress count each rank's heartbeat carried (index 0: rank 0's own counter).
    progress_seen: Vec<u64>,
    /// When rank 0 last received anything from each rank (heartbeat or message).
    last_heard: Vec<Option<Instant>>,
    connected: u32,
    next_seq: u64,
    round: Option<Round>,
    born: Instant,
}

#[derive(Default)]
struct State {
    failure: Option<BootstrapError>,
    /// Last time the job moved: at rank 0, some rank's progress count grew or a collective
    /// contribution arrived; at the other ranks, rank 0 said so in its heartbeat or a result came.
    /// Collective waits time out only after `timeout` without any of this.
    activity_at: Option<Instant>,
    started: bool,
    /// Result of the last completed collective for this process: (seq, payload).
    result: Option<(u64, Vec<u8>)>,
    /// Client only: rank 0 closed its bootstrap normally.
    rank0_left: bool,
    hub: Option<HubState>,
}

struct Shared {
    failed: AtomicBool,
    closing: AtomicBool,
    state: Mutex<State>,
    cv: Condvar,
    world: u32,
    token: String,
    timeout: Duration,
    heartbeat: Duration,
    /// Connections that have not presented a valid hello yet, oldest first.
    strangers: Mutex<Strangers>,
    writers: Mutex<Vec<JoinHandle<()>>>,
    /// This process's progress count, bumped by [`ProgressHandle::tick`]; a rank's heartbeats
    /// carry it to rank 0.
    progress: Arc<AtomicU64>,
    /// Rank 0: a count bumped whenever the job moved (any rank's progress or a contribution);
    /// its heartbeats carry it to the other ranks. Elsewhere: the last value rank 0 sent.
    job_activity: AtomicU64,
    watchdog_armed: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Heartbeat period for a given timeout: often enough that several fit in one timeout.
fn heartbeat_for(timeout: Duration) -> Duration {
    (timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn describe_loss(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            "its connection closed without a goodbye (the process exited or was killed)".into()
        }
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => {
            "its connection was reset (the process was killed or its host went down)".into()
        }
        io::ErrorKind::BrokenPipe => "its connection is gone (broken pipe)".into(),
        _ => format!("its connection failed: {e}"),
    }
}

impl Shared {
    fn new(world: u32, token: String, timeout: Duration) -> Shared {
        Shared {
            failed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            world,
            token,
            timeout,
            heartbeat: heartbeat_for(timeout),
            strangers: Mutex::new(Strangers::default()),
            writers: Mutex::new(Vec::new()),
            progress: Arc::new(AtomicU64::new(0)),
            job_activity: AtomicU64::new(0),
            watchdog_armed: AtomicBool::new(false),
        }
    }

    /// The job moved (caller holds the state lock).
    fn mark_activity(&self, st: &mut State) {
        st.activity_at = Some(Instant::now());
        self.job_activity.fetch_add(1, Ordering::Relaxed);
    }

    /// Record the first failure; at rank 0 also tell every connected rank.
    fn report(&self, e: BootstrapError) {
        let mut st = lock(&self.state);
        self.report_locked(&mut st, e);
    }

    fn report_locked(&self, st: &mut State, mut e: BootstrapError) {
        if st.failure.is_some() || self.closing.load(Ordering::Acquire) {
            return;
        }
        if let Some(hub) = &st.hub {
            // Rank 0 knows every rank's host from its hello: name it with the rank.
            if let BootstrapError::PeerDied { rank, host, .. }
            | BootstrapError::PeerSilent { rank, host, .. } = &mut e
            {
                if let Some(Some(p)) = hub.peers.get(*rank as usize) {
                    if host.is_empty() {
                        host.clone_from(&p.host);
                    }
                }
            }
            let f = Arc::new(wire::frame(wire::T_FAIL, &wire::encode_error(&e)));
            for p in hub.peers.iter().flatten() {
                let _ = p.tx.send(Out::Frame(f.clone()));
            }
        }
        st.failure = Some(e);
        self.failed.store(true, Ordering::Release);
        self.cv.notify_all();
    }

    fn failure(&self) -> Option<BootstrapError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.state).failure.clone()
    }

    fn spawn(&self, name: String, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name(name)
            .stack_size(256 << 10)
            .spawn(f)
    }
}

/// What a heartbeat carries: a rank's own progress count (to rank 0), or rank 0's count of
/// job activity (to the other ranks).
#[derive(Clone, Copy)]
enum Beat {
    OwnProgress,
    JobActivity,
}

/// Writer thread: sends queued frames, and a heartbeat whenever nothing was sent for a period.
fn writer_loop(
    shared: Arc<Shared>,
    mut stream: TcpStream,
    rx: Receiver<Out>,
    peer: u32,
    beat: Beat,
) {
    loop {
        let item = match rx.recv_timeout(shared.heartbeat) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => {
                let count = match beat {
                    Beat::OwnProgress => shared.progress.load(Ordering::Relaxed),
                    Beat::JobActivity => shared.job_activity.load(Ordering::Relaxed),
                };
                Out::Frame(Arc::new(wire::frame(
                    wire::T_HEARTBEAT,
                    &count.to_le_bytes(),
                )))
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match item {
            Out::Frame(f) => {
                if let Err(e) = stream.write_all(&f) {
                    if is_timeout(&e) {
                        shared.report(BootstrapError::PeerSilent {
                            rank: peer,
                            host: String::new(),
                            silent_for: shared.timeout,
                        });
                    } else if !peer_left(&shared, peer) {
                        shared.report(BootstrapError::PeerDied {
                            rank: peer,
                            host: String::new(),
                            detail: describe_loss(&e),
                        });
                    }
                    break;
                }
            }
            Out::Flush(ack) => {
                let _ = ack.send(());
            }
            Out::Close => break,
        }
    }
    let _ = stream.shutdown(Shutdown::Write);
}

fn peer_left(shared: &Shared, peer: u32) -> bool {
    let st = lock(&shared.state);
    match &st.hub {
        Some(hub) => hub
            .peers
            .get(peer as usize)
            .and_then(|p| p.as_ref())
            .is_some_and(|p| p.left),
        None => st.rank0_left,
    }
}

// ---------------------------------------------------------------------------------------------
// Rank 0: the hub.

fn bind(host: &str, port: u16) -> Result<TcpListener, BootstrapError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            BootstrapError::usage(format!(
                "rank 0 cannot resolve its rendezvous host {host:?}: {e}; pass --rdzv with an \
                 address of rank 0's host"
            ))
        })?
        .collect();
    let in_use = |a: &dyn std::fmt::Display| {
        BootstrapError::usage(format!(
            "rank 0 cannot listen on {a}: the port is already in use (another job or a leftover \
             process?); choose another port with --rdzv HOST:PORT or MASTER_PORT"
        ))
    };
    // A loopback rendezvous (`efabench launch`, tests) stays on loopback. Any other name is
    // served on all interfaces, as torch's TCPStore does: the name may resolve to 127.0.1.1 on
    // rank 0's own host (Debian's /etc/hosts) while the other hosts resolve it to the real
    // address, or it may be a Kubernetes service or NAT address that is not on this host.
    let loopback_name = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback_name {
        for a in &addrs {
            match TcpListener::bind(a) {
                Ok(l) => return Ok(l),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(in_use(a)),
                Err(_) => {}
            }
        }
    }
    let any: SocketAddr = if !addrs.is_empty() && addrs.iter().all(|a| a.is_ipv6()) {
        SocketAddr::from(([0u16; 8], port))
    } else {
        SocketAddr::from(([0u8; 4], port))
    };
    TcpListener::bind(any).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            in_use(&any)
        } else {
            BootstrapError::io(format!("rank 0 cannot listen on {host}:{port}"), e)
        }
    })
}

fn start_hub(info: &RankInfo, rdzv: &str, timeout: Duration) -> Result<Bootstrap, BootstrapError> {
    let (host, port) = parse_host_port(rdzv).map_err(|why| {
        BootstrapError::usage(format!("rendezvous {rdzv:?} is not HOST:PORT ({why})"))
    })?;
    let listener = bind(&host, port)?;
    let wake_addr = listener.local_addr().ok().map(|a| {
        if a.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], a.port()))
        } else {
            a
        }
    });
    let shared = Arc::new(Shared::new(
        info.world,
        info.token.clone().unwrap_or_default(),
        timeout,
    ));
    lock(&shared.state).hub = Some(HubState {
        peers: (0..info.world).map(|_| None).collect(),
        progress_seen: vec![0; info.world as usize],
        last_heard: vec![None; info.world as usize],
        connected: 0,
        next_seq: 1,
        round: None,
        born: Instant::now(),
    });
    let spawn_err = |e: io::Error| BootstrapError::io("cannot start a rendezvous thread", e);
    let s = shared.clone();
    // Detached: it ends when Drop wakes it with a connection and it sees `closing`.
    shared
        .spawn("rdzv-accept".into(), move || accept_loop(s, listener))
        .map_err(spawn_err)?;
    let s = shared.clone();
    let monitor = shared
        .spawn("rdzv-monitor".into(), move || monitor_loop(s))
        .map_err(spawn_err)?;
    let b = Bootstrap {
        rank: 0,
        world: info.world,
        local_rank: info.local_rank,
        timeout,
        shared,
        role: Role::Hub {
            wake_addr,
            threads: Mutex::new(vec![monitor]),
        },
        next_seq: Mutex::new(1),
    };
    // The monitor ends the wait after `timeout`, naming the missing ranks; this is a backstop.
    b.wait_started(Instant::now() + timeout + Duration::from_secs(2), |st| {
        let missing = st.hub.as_ref().map_or_else(Vec::new, |h| {
            (1..h.peers.len() as u32)
                .filter(|&r| h.peers[r as usize].is_none())
                .collect()
        });
        BootstrapError::Timeout {
            op: CONNECT_OP.into(),
            waiting_for: missing,
            after: timeout,
        }
    })?;
    Ok(b)
}

/// Unauthenticated connections being served, so that a flood of idle ones cannot lock a real
/// rank out: when the cap is reached the *oldest* stranger is cut off (a real rank sends its
/// hello right after connecting, so it is never the oldest for long), and every stranger has
/// [`HELLO_DEADLINE`] in all to present its hello.
#[derive(Default)]
struct Strangers {
    next_id: u64,
    list: VecDeque<(u64, TcpStream)>,
}

/// Most strangers served at once, on top of the world size.
const STRANGERS_OVER_WORLD: usize = 64;
/// Longest time a connection may take to send its whole hello (bounded by the timeout too).
const HELLO_DEADLINE: Duration = Duration::from_secs(5);

impl Strangers {
    /// Register a new stranger, cutting off the oldest when `cap` are already waiting.
    fn admit(&mut self, stream: &TcpStream, cap: usize) -> Option<u64> {
        while self.list.len() >= cap.max(1) {
            if let Some((_, oldest)) = self.list.pop_front() {
                let _ = oldest.shutdown(Shutdown::Both);
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.list.push_back((id, stream.try_clone().ok()?));
        Some(id)
    }
    /// Stop tracking `id`; false if it had been cut off already.
    fn forget(&mut self, id: u64) -> bool {
        let before = self.list.len();
        self.list.retain(|(i, _)| *i != id);
        self.list.len() != before
    }
}

/// Reads that all end by one deadline, however slowly the bytes trickle in.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl io::Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "hello deadline"));
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut s = self.stream;
        io::Read::read(&mut s, buf)
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let cap = shared.world as usize + STRANGERS_OVER_WORLD;
    for conn in listener.incoming() {
        if shared.closing.load(Ordering::Acquire) {
            break;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(_) => {
                // Out of file descriptors and the like: do not spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let Some(id) = lock(&shared.strangers).admit(&stream, cap) else {
            continue;
        };
        let s = shared.clone();
        let spawned = shared.spawn("rdzv-peer".into(), move || {
            let who = handshake(&s, stream, id);
            lock(&s.strangers).forget(id);
            if let Some((rank, stream)) = who {
                hub_reader(&s, rank, stream);
            }
        });
        if spawned.is_err() {
            lock(&shared.strangers).forget(id);
        }
    }
}

fn refuse(stream: &mut TcpStream, reason: &str) {
    let mut p = Vec::new();
    wire::put_text(&mut p, reason);
    let _ = wire::write_frame(stream, wire::T_REFUSE, &p);
    let _ = stream.shutdown(Shutdown::Both);
}

/// Check a stranger's hello; on success register it and return its rank and stream.
fn handshake(shared: &Arc<Shared>, mut stream: TcpStream, id: u64) -> Option<(u32, TcpStream)> {
    let hello_timeout = shared.timeout.min(HELLO_DEADLINE);
    let _ = stream.set_nodelay(true);
    stream.set_write_timeout(Some(hello_timeout)).ok()?;
    let mut reader = DeadlineReader {
        stream: &stream,
        deadline: Instant::now() + hello_timeout,
    };
    let (kind, payload) = wire::read_frame(&mut reader, wire::MAX_HELLO).ok()?;
    // It said its piece: no longer a stranger to cut off. If it was cut off meanwhile, its
    // socket is shut down, so it must not become a rank (it will connect again).
    if !lock(&shared.strangers).forget(id) {
        return None;
    }
    if kind != wire::T_HELLO {
        refuse(&mut stream, "expected an efabench hello");
        return None;
    }
    let hello = match Hello::decode(&payload) {
        Ok(h) => h,
        Err(why) => {
            refuse(&mut stream, &format!("malformed hello ({why})"));
            return None;
        }
    };
    let world = shared.world;
    if hello.token != shared.token {
        refuse(
            &mut stream,
            "wrong job token: this rendezvous belongs to another job; give every rank the same \
             EFABENCH_JOB_TOKEN (or launcher) or use another port",
        );
        return None;
    }
    if hello.world != world {
        refuse(
            &mut stream,
            &format!(
                "world size mismatch: rank 0 runs a job of {world} ranks, this rank was told {}",
                hello.world
            ),
        );
        return None;
    }
    if hello.rank == 0 || hello.rank >= world {
        refuse(
            &mut stream,
            &format!(
                "rank {} cannot join a job of {world} ranks served by rank 0 (two rank 0s?)",
                hello.rank
            ),
        );
        return None;
    }
    let rank = hello.rank;
    let writer_stream = stream.try_clone().ok()?;
    let keep_stream = stream.try_clone().ok()?;
    let (tx, rx) = mpsc::channel();
    {
        let mut st = lock(&shared.state);
        if let Some(e) = &st.failure {
            let reason = format!("the job has already failed: {}", e.message());
            drop(st);
            refuse(&mut stream, &reason);
            return None;
        }
        let hub = st.hub.as_mut()?;
        if hub.peers[rank as usize].is_some() {
            drop(st);
            refuse(
                &mut stream,
                &format!(
                    "rank {rank} is already connected; two processes were given the same rank"
                ),
            );
            return None;
        }
        let _ = tx.send(Out::Frame(Arc::new(wire::frame(wire::T_WELCOME, &[]))));
        hub.peers[rank as usize] = Some(Peer {
            tx,
            stream: keep_stream,
            left: false,
            host: hello.host.clone(),
        });
        hub.connected += 1;
        if hub.connected == world - 1 {
            let start = Arc::new(wire::frame(wire::T_START, &[]));
            for p in hub.peers.iter().flatten() {
                let _ = p.tx.send(Out::Frame(start.clone()));
            }
            st.started = true;
            shared.cv.notify_all();
        }
    }
    let _ = writer_stream.set_write_timeout(Some(shared.timeout));
    let s = shared.clone();
    match shared.spawn(format!("rdzv-w{rank}"), move || {
        writer_loop(s, writer_stream, rx, rank, Beat::JobActivity)
    }) {
        Ok(h) => lock(&shared.writers).push(h),
        Err(e) => shared.report(BootstrapError::io("cannot start a writer thread", e)),
    }
    Some((rank, stream))
}

fn hub_reader(shared: &Arc<Shared>, rank: u32, mut stream: TcpStream) {
    if stream.set_read_timeout(Some(shared.timeout)).is_err() {
        return;
    }
    let max = wire::MAX_BLOB as u32 + 64;
    loop {
        let (kind, payload) = match wire::read_frame(&mut stream, max) {
            Ok(f) => {
                if let Some(h) = lock(&shared.state).hub.as_mut() {
                    h.last_heard[rank as usize] = Some(Instant::now());
                }
                f
            }
            Err(e) => {
                if shared.closing.load(Ordering::Acquire) || peer_left(shared, rank) {
                    return;
                }
                let e = if is_timeout(&e) {
                    BootstrapError::PeerSilent {
                        rank,
                        host: String::new(),
                        silent_for: shared.timeout,
                    }
                } else if e.kind() == io::ErrorKind::InvalidData {
                    BootstrapError::Protocol {
                        rank,
                        detail: e.to_string(),
                    }
                } else {
                    BootstrapError::PeerDied {
                        rank,
                        host: String::new(),
                        detail: describe_loss(&e),
                    }
                };
                shared.report(e);
                return;
            }
        };
        match kind {
            wire::T_HEARTBEAT => {
                // An empty heartbeat (an older peer) says it is alive, not that it moved.
                if let Ok(count) = wire::Reader::new(&payload).u64() {
                    note_progress(shared, rank, count);
                }
            }
            wire::T_CONTRIB => match wire::decode_contrib(&payload) {
                Ok((seq, op, blob)) => contribute(shared, rank, seq, op, blob.to_vec()),
                Err(detail) => {
                    shared.report(BootstrapError::Protocol { rank, detail });
                    return;
                }
            },
            wire::T_ABORT => {
                let reason = wire::Reader::new(&payload)
                    .text()
                    .unwrap_or_else(|_| "(the reason was unreadable)".into());
                shared.report(BootstrapError::Aborted { rank, reason });
            }
            wire::T_BYE => {
                let mut st = lock(&shared.state);
                if let Some(p) = st
                    .hub
                    .as_mut()
                    .and_then(|h| h.peers[rank as usize].as_mut())
                {
                    p.left = true;
                }
                // A collective may be waiting for it: that one can never complete now.
                let needed = st
                    .hub
                    .as_ref()
                    .and_then(|h| h.round.as_ref())
                    .filter(|r| r.blobs[rank as usize].is_none())
                    .map(|r| format!("{} #{}", r.op.name(), r.seq));
                if let Some(op) = needed {
                    shared.report_locked(&mut st, BootstrapError::Left { rank, op });
                }
                return;
            }
            k => {
                shared.report(BootstrapError::Protocol {
                    rank,
                    detail: format!("unexpected message type {k}"),
                });
                return;
            }
        }
    }
}

/// Rank 0 heard `rank`'s progress count: if it grew, the job moved.
fn note_progress(shared: &Shared, rank: u32, count: u64) {
    let mut st = lock(&shared.state);
    let Some(seen) = st
        .hub
        .as_mut()
        .and_then(|h| h.progress_seen.get_mut(rank as usize))
    else {
        return;
    };
    if *seen != count {
        *seen = count;
        shared.mark_activity(&mut st);
    }
}

/// Add one rank's part of a collective; the last one completes it and answers everyone.
fn contribute(shared: &Shared, rank: u32, seq: u64, op: Op, blob: Vec<u8>) {
    let mut st = lock(&shared.state);
    if st.failure.is_some() {
        return;
    }
    shared.mark_activity(&mut st);
    let world = shared.world;
    let Some(hub) = st.hub.as_mut() else { return };
    if seq != hub.next_seq {
        let detail = format!(
            "sent collective #{seq} while #{} was expected",
            hub.next_seq
        );
        shared.report_locked(&mut st, BootstrapError::Protocol { rank, detail });
        return;
    }
    let round = hub.round.get_or_insert_with(|| Round {
        seq,
        op,
        first: rank,
        blobs: (0..world).map(|_| None).collect(),
        have: 0,
        started: Instant::now(),
    });
    if round.op != op {
        let e = BootstrapError::Aborted {
            rank,
            reason: format!(
                "it called {} as collective #{seq} but rank {} called {}; every rank must call the \
                 same collectives in the same order",
                op.name(),
                round.first,
                round.op.name()
            ),
        };
        shared.report_locked(&mut st, e);
        return;
    }
    if round.blobs[rank as usize].is_some() {
        let detail = format!("sent collective #{seq} twice");
        shared.report_locked(&mut st, BootstrapError::Protocol { rank, detail });
        return;
    }
    round.blobs[rank as usize] = Some(blob);
    round.have += 1;
    if round.have < world {
        // Someone who already said goodbye can never contribute.
        let gone = hub.peers.iter().enumerate().find_map(|(r, p)| {
            p.as_ref()
                .filter(|p| p.left && round.blobs[r].is_none())
                .map(|_| r as u32)
        });
        if let Some(r) = gone {
            let op = format!("{} #{seq}", op.name());
            shared.report_locked(&mut st, BootstrapError::Left { rank: r, op });
        }
        return;
    }
    let Some(round) = hub.round.take() else {
        return;
    };
    hub.next_seq += 1;
    let blobs: Vec<Vec<u8>> = round
        .blobs
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    let total: usize = blobs.iter().map(|b| b.len() + 4).sum();
    if total + 64 > wire::MAX_FRAME as usize {
        let e = BootstrapError::local(format!(
            "{} #{seq} would move {total} bytes in one message, more than the {} MiB limit; \
             send less per rank",
            op.name(),
            wire::MAX_FRAME >> 20
        ));
        shared.report_locked(&mut st, e);
        return;
    }
    let table = || wire::encode_table(blobs.iter().map(Vec::as_slice));
    let (to_peers, to_root) = match op {
        Op::AllGather => {
            let t = table();
            (t.clone(), t)
        }
        Op::Barrier => (Vec::new(), Vec::new()),
        Op::Gather => (Vec::new(), table()),
        Op::CheckSame => {
            let t = table();
            (t.clone(), t)
        }
        Op::Broadcast => (blobs[0].clone(), blobs[0].clone()),
    };
    let f = Arc::new(wire::frame(
        wire::T_RESULT,
        &wire::encode_result(seq, &to_peers),
    ));
    for p in hub.peers.iter().flatten() {
        let _ = p.tx.send(Out::Frame(f.clone()));
    }
    st.result = Some((seq, to_root));
    shared.cv.notify_all();
}

/// Rank 0's monitor: ranks that never connect, collectives that wait while nothing moves.
///
/// A collective is not timed from its first arrival: with three or more ranks, idle ranks wait
/// in a collective while two others run a long measured step, and that is healthy. It times out
/// only when no rank has made progress ([`ProgressHandle::tick`], carried by heartbeats) and no
/// contribution arrived for `timeout`; it then names the ranks that never arrived.
fn monitor_loop(shared: Arc<Shared>) {
    let mut st = lock(&shared.state);
    loop {
        if shared.closing.load(Ordering::Acquire) || st.failure.is_some() {
            return;
        }
        // Rank 0's own progress needs no heartbeat: read it here.
        let own = shared.progress.load(Ordering::Relaxed);
        let moved = st.hub.as_mut().is_some_and(|hub| {
            let changed = hub.progress_seen[0] != own;
            hub.progress_seen[0] = own;
            changed
        });
        if moved {
            shared.mark_activity(&mut st);
        }
        let timeout = shared.timeout;
        let activity_at = st.activity_at;
        let expired = st.hub.as_ref().and_then(|hub| {
            if !st.started && hub.born.elapsed() > timeout {
                let missing = (1..shared.world)
                    .filter(|&r| hub.peers[r as usize].is_none())
                    .collect();
                return Some((CONNECT_OP.to_string(), missing));
            }
            let round = hub.round.as_ref()?;
            let last_move = activity_at.map_or(round.started, |a| a.max(round.started));
            if last_move.elapsed() <= timeout {
                return None;
            }
            let missing: Vec<u32> = (0..shared.world)
                .filter(|&r| round.blobs[r as usize].is_none())
                .collect();
            Some((format!("{} #{}", round.op.name(), round.seq), missing))
        });
        // A missing rank that has also stopped sending heartbeats is frozen, not slow: name it
        // as such (its reader would say so a moment later anyway).
        let silent = expired.as_ref().and_then(|(_, missing)| {
            let hub = st.hub.as_ref()?;
            missing.iter().find_map(|&r| {
                let quiet = hub.last_heard[r as usize]?.elapsed();
                (r != 0 && quiet > (shared.heartbeat * 4).max(timeout / 2)).then_some((r, quiet))
            })
        });
        if let Some((rank, silent_for)) = silent {
            shared.report_locked(
                &mut st,
                BootstrapError::PeerSilent {
                    rank,
                    host: String::new(),
                    silent_for,
                },
            );
            return;
        }
        if let Some((op, waiting_for)) = expired {
            shared.report_locked(
                &mut st,
                BootstrapError::Timeout {
                    op,
                    waiting_for,
                    after: timeout,
                },
            );
            return;
        }
        st = shared
            .cv
            .wait_timeout(st, shared.heartbeat)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
}

// ---------------------------------------------------------------------------------------------
// Ranks 1..world: clients.

enum Attempt {
    Welcome(TcpStream),
    Retry(String),
}

fn try_once(addr: &str, hello: &[u8], remaining: Duration) -> Result<Attempt, BootstrapError> {
    let addrs: Vec<SocketAddr> = match addr.to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => return Ok(Attempt::Retry(format!("cannot resolve it: {e}"))),
    };
    let mut last = String::from("no address");
    for a in addrs {
        let limit = remaining.clamp(Duration::from_millis(1), Duration::from_secs(2));
        let mut s = match TcpStream::connect_timeout(&a, limit) {
            Ok(s) => s,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        let _ = s.set_nodelay(true);
        let limit = remaining.clamp(Duration::from_millis(100), Duration::from_secs(10));
        let _ = s.set_read_timeout(Some(limit));
        let _ = s.set_write_timeout(Some(limit));
        if let Err(e) = s.write_all(hello) {
            last = format!("sending the hello failed: {e}");
            continue;
        }
        return match wire::read_frame(&mut s, wire::MAX_HELLO) {
            Ok((wire::T_WELCOME, _)) => Ok(Attempt::Welcome(s)),
            Ok((wire::T_REFUSE, p)) => Err(BootstrapError::Refused {
                addr: addr.into(),
                reason: wire::Reader::new(&p)
                    .text()
                    .unwrap_or_else(|_| "(no reason given)".into()),
            }),
            Ok((k, _)) => Err(BootstrapError::Connect {
                addr: addr.into(),
                detail: format!("it answered with message type {k}, not an efabench rendezvous"),
            }),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Err(BootstrapError::Connect {
                addr: addr.into(),
                detail: "something that is not an efabench rendezvous listens there".into(),
            }),
            // Closed before answering: rank 0 may be busy with too many connections; retry.
            Err(e) => Ok(Attempt::Retry(format!("the handshake failed: {e}"))),
        };
    }
    Ok(Attempt::Retry(last))
}

fn start_client(
    info: &RankInfo,
    rdzv: &str,
    timeout: Duration,
) -> Result<Bootstrap, BootstrapError> {
    parse_host_port(rdzv).map_err(|why| {
        BootstrapError::usage(format!("rendezvous {rdzv:?} is not HOST:PORT ({why})"))
    })?;
    let begin = Instant::now();
    let deadline = begin + timeout;
    let hello = Hello {
        rank: info.rank,
        world: info.world,
        pid: std::process::id(),
        token: info.token.clone().unwrap_or_default(),
        host: efabench_record::hostname(),
    };
    let hello = wire::frame(wire::T_HELLO, &hello.encode());
    let mut backoff = Duration::from_millis(5);
    let stream = loop {
        let now = Instant::now();
        let last = match try_once(rdzv, &hello, deadline.saturating_duration_since(now))? {
            Attempt::Welcome(s) => break s,
            Attempt::Retry(why) => why,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(BootstrapError::Connect {
                addr: rdzv.into(),
                detail: format!(
                    "no answer within {:.0} s (last error: {last})",
                    timeout.as_secs_f64()
                ),
            });
        }
        std::thread::sleep(backoff.min(deadline - now));
        backoff = (backoff * 2).min(Duration::from_millis(500));
    };
    let io_err = |e: io::Error| BootstrapError::io("rendezvous socket setup failed", e);
    stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
    stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
    let shared = Arc::new(Shared::new(info.world, String::new(), timeout));
    let (tx, rx) = mpsc::channel();
    let spawn_err = |e: io::Error| BootstrapError::io("cannot start a rendezvous thread", e);
    let (ws, rs) = (
        stream.try_clone().map_err(io_err)?,
        stream.try_clone().map_err(io_err)?,
    );
    let s = shared.clone();
    let writer = shared
        .spawn("rdzv-writer".into(), move || {
            writer_loop(s, ws, rx, 0, Beat::OwnProgress)
        })
        .map_err(spawn_err)?;
    let s = shared.clone();
    let reader = shared
        .spawn("rdzv-reader".into(), move || client_reader(s, rs))
        .map_err(spawn_err)?;
    let b = Bootstrap {
        rank: info.rank,
        world: info.world,
        local_rank: info.local_rank,
        timeout,
        shared,
        role: Role::Client {
            tx,
            stream,
            threads: Mutex::new(vec![writer, reader]),
        },
        next_seq: Mutex::new(1),
    };
    // Rank 0 gives up on missing ranks `timeout` after it started and tells us; this is a
    // backstop in case rank 0 started long after us.
    b.wait_started(begin + timeout * 2 + Duration::from_secs(2), |_| {
        BootstrapError::Connect {
            addr: rdzv.into(),
            detail: "connected, but rank 0 never said that the job is complete".into(),
        }
    })?;
    Ok(b)
}

fn client_reader(shared: Arc<Shared>, mut stream: TcpStream) {
    loop {
        let (kind, payload) = match wire::read_frame(&mut stream, wire::MAX_FRAME) {
            Ok(f) => f,
            Err(e) => {
                if shared.closing.load(Ordering::Acquire) || lock(&shared.state).rank0_left {
                    return;
                }
                let e = if is_timeout(&e) {
                    BootstrapError::PeerSilent {
                        rank: 0,
                        host: String::new(),
                        silent_for: shared.timeout,
                    }
                } else if e.kind() == io::ErrorKind::InvalidData {
                    BootstrapError::Protocol {
                        rank: 0,
                        detail: e.to_string(),
                    }
                } else {
                    BootstrapError::PeerDied {
                        rank: 0,
                        host: String::new(),
                        detail: describe_loss(&e),
                    }
                };
                shared.report(e);
                return;
            }
        };
        match kind {
            wire::T_HEARTBEAT => {
                if let Ok(count) = wire::Reader::new(&payload).u64() {
                    if shared.job_activity.swap(count, Ordering::Relaxed) != count {
                        lock(&shared.state).activity_at = Some(Instant::now());
                    }
                }
            }
            wire::T_WELCOME => {}
            wire::T_START => {
                lock(&shared.state).started = true;
                shared.cv.notify_all();
            }
            wire::T_RESULT => {
                let mut r = wire::Reader::new(&payload);
                match r.u64() {
                    Ok(seq) => {
                        let mut st = lock(&shared.state);
                        st.result = Some((seq, r.rest().to_vec()));
                        st.activity_at = Some(Instant::now());
                        drop(st);
                        shared.cv.notify_all();
                    }
                    Err(detail) => {
                        shared.report(BootstrapError::Protocol { rank: 0, detail });
                        return;
                    }
                }
            }
            wire::T_FAIL => {
                let e = wire::decode_error(&payload)
                    .unwrap_or_else(|detail| BootstrapError::Protocol { rank: 0, detail });
                shared.report(e);
            }
            wire::T_BYE => {
                lock(&shared.state).rank0_left = true;
                shared.cv.notify_all();
                return;
            }
            k => {
                shared.report(BootstrapError::Protocol {
                    rank: 0,
                    detail: format!("unexpected message type {k}"),
                });
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Progress, option checks and the watchdog.

/// Counts this rank's progress; see [`Bootstrap::progress`]. Cloning shares the count.
#[derive(Clone, Debug)]
pub struct ProgressHandle {
    count: Arc<AtomicU64>,
}

impl ProgressHandle {
    /// The data path moved: one relaxed atomic increment, cheap enough for every iteration.
    #[inline]
    pub fn tick(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// How many ticks so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Longest piece of either side that a difference message quotes.
const DIFF_SHOWN: usize = 80;

fn quote(words: &[&str]) -> String {
    let s = words.join(" ");
    let s = if s.is_empty() {
        "(nothing)".to_string()
    } else {
        s
    };
    let s: String = s.chars().filter(|c| !c.is_control()).collect();
    if s.chars().count() > DIFF_SHOWN {
        let cut: String = s.chars().take(DIFF_SHOWN).collect();
        format!("`{cut}...`")
    } else {
        format!("`{s}`")
    }
}

/// The words where `mine` and `root` differ: the common leading and trailing words removed,
/// plus the option name in front when only its value differs (`--window 32` vs `--window 64`).
fn word_difference(mine: &str, root: &str) -> (String, String) {
    let a: Vec<&str> = mine.split_whitespace().collect();
    let b: Vec<&str> = root.split_whitespace().collect();
    let mut head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let max_tail = a.len().min(b.len()) - head;
    let tail = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_tail)
        .take_while(|(x, y)| x == y)
        .count();
    let first_differs = |v: &[&str]| v.get(head).is_some_and(|w| !w.starts_with('-'));
    if head > 0 && b[head - 1].starts_with('-') && (first_differs(&a) || first_differs(&b)) {
        head -= 1;
    }
    if a == b {
        // Same words, different spacing or bytes: show the raw strings.
        return (quote(&[mine]), quote(&[root]));
    }
    (
        quote(&a[head..a.len() - tail]),
        quote(&b[head..b.len() - tail]),
    )
}

/// The usage error `check_same` reports for this table, or `None` when every rank agrees.
fn first_difference(what: &str, table: &[Vec<u8>]) -> Option<BootstrapError> {
    let root = table.first()?;
    let (rank, mine) = table.iter().enumerate().skip(1).find(|(_, v)| *v != root)?;
    let (mine, theirs) = word_difference(
        &String::from_utf8_lossy(mine),
        &String::from_utf8_lossy(root),
    );
    let what: String = what.chars().take(40).collect();
    Some(BootstrapError::Usage(format!(
        "rank {rank} was started with different {what} than rank 0: {mine} vs {theirs}; start \
         every rank with the same {what}"
    )))
}

fn watchdog(shared: &Shared, rank: u32, grace: Duration) {
    let mut st = lock(&shared.state);
    // Wait for a failure (or for the bootstrap to close normally).
    let failure = loop {
        if shared.closing.load(Ordering::Acquire) {
            return;
        }
        if let Some(e) = &st.failure {
            break e.clone();
        }
        st = shared
            .cv
            .wait_timeout(st, Duration::from_secs(1))
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    };
    // Give the benchmark thread `grace` to notice and leave the normal way.
    let deadline = Instant::now() + grace;
    loop {
        if shared.closing.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        st = shared
            .cv
            .wait_timeout(st, deadline - now)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
    drop(st);
    let _ = writeln!(
        io::stderr().lock(),
        "efabench: rank {rank}: {} (ended by the watchdog: the benchmark had not stopped \
         {:.0} s after the failure)",
        failure.message(),
        grace.as_secs_f64()
    );
    // Exit handlers of C libraries run in this thread; if one blocks on a lock held by the stuck
    // thread, do not hang: a second thread ends the process the hard way.
    let _ = std::thread::Builder::new().spawn(|| {
        std::thread::sleep(Duration::from_secs(2));
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    });
    std::process::exit(if failure.is_usage() { 2 } else { 1 });
}

// ---------------------------------------------------------------------------------------------
// The public face.

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
