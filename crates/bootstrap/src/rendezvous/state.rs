//! What every thread of one rank shares: the job's state behind one mutex (peers, the
//! collective in flight, the first failure), the flags a data-path loop polls, and the helpers
//! that record a failure once and wake everyone waiting.
//!
//! Rank 0 (the hub) and the other ranks (clients) use the same [`Shared`]; the hub's extra
//! bookkeeping lives in [`HubState`].

use super::*;

pub(super) enum Role {
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

pub(super) enum Out {
    Frame(Arc<Vec<u8>>),
    /// Answered once everything queued before it was written (or the connection is gone).
    Flush(mpsc::SyncSender<()>),
    Close,
}

pub(super) struct Peer {
    pub(super) tx: Sender<Out>,
    pub(super) stream: TcpStream,
    pub(super) left: bool,
    /// The host the rank said it runs on (its hello), to name it when it dies or goes silent.
    pub(super) host: String,
}

pub(super) struct Round {
    pub(super) seq: u64,
    pub(super) op: Op,
    pub(super) first: u32,
    pub(super) blobs: Vec<Option<Vec<u8>>>,
    pub(super) have: u32,
    pub(super) started: Instant,
}

pub(super) struct HubState {
    pub(super) peers: Vec<Option<Peer>>,
    /// The last progress count each rank's heartbeat carried (index 0: rank 0's own counter).
    pub(super) progress_seen: Vec<u64>,
    /// When rank 0 last received anything from each rank (heartbeat or message).
    pub(super) last_heard: Vec<Option<Instant>>,
    pub(super) connected: u32,
    pub(super) next_seq: u64,
    pub(super) round: Option<Round>,
    pub(super) born: Instant,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) failure: Option<BootstrapError>,
    /// Last time the job moved: at rank 0, some rank's progress count grew or a collective
    /// contribution arrived; at the other ranks, rank 0 said so in its heartbeat or a result came.
    /// Collective waits time out only after `timeout` without any of this.
    pub(super) activity_at: Option<Instant>,
    pub(super) started: bool,
    /// Result of the last completed collective for this process: (seq, payload).
    pub(super) result: Option<(u64, Vec<u8>)>,
    /// Client only: rank 0 closed its bootstrap normally.
    pub(super) rank0_left: bool,
    pub(super) hub: Option<HubState>,
}

pub(super) struct Shared {
    pub(super) failed: AtomicBool,
    pub(super) closing: AtomicBool,
    pub(super) state: Mutex<State>,
    pub(super) cv: Condvar,
    pub(super) world: u32,
    pub(super) token: String,
    pub(super) timeout: Duration,
    pub(super) heartbeat: Duration,
    /// Connections that have not presented a valid hello yet, oldest first.
    pub(super) strangers: Mutex<Strangers>,
    pub(super) writers: Mutex<Vec<JoinHandle<()>>>,
    /// This process's progress count, bumped by [`ProgressHandle::tick`]; a rank's heartbeats
    /// carry it to rank 0.
    pub(super) progress: Arc<AtomicU64>,
    /// Rank 0: a count bumped whenever the job moved (any rank's progress or a contribution);
    /// its heartbeats carry it to the other ranks. Elsewhere: the last value rank 0 sent.
    pub(super) job_activity: AtomicU64,
    pub(super) watchdog_armed: AtomicBool,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Heartbeat period for a given timeout: often enough that several fit in one timeout.
pub(super) fn heartbeat_for(timeout: Duration) -> Duration {
    (timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

pub(super) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

pub(super) fn describe_loss(e: &io::Error) -> String {
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
    pub(super) fn new(world: u32, token: String, timeout: Duration) -> Shared {
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
    pub(super) fn mark_activity(&self, st: &mut State) {
        st.activity_at = Some(Instant::now());
        self.job_activity.fetch_add(1, Ordering::Relaxed);
    }

    /// Record the first failure; at rank 0 also tell every connected rank.
    pub(super) fn report(&self, e: BootstrapError) {
        let mut st = lock(&self.state);
        self.report_locked(&mut st, e);
    }

    pub(super) fn report_locked(&self, st: &mut State, mut e: BootstrapError) {
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

    pub(super) fn failure(&self) -> Option<BootstrapError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.state).failure.clone()
    }

    pub(super) fn spawn(
        &self,
        name: String,
        f: impl FnOnce() + Send + 'static,
    ) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name(name)
            .stack_size(256 << 10)
            .spawn(f)
    }
}

pub(super) fn peer_left(shared: &Shared, peer: u32) -> bool {
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
