//! Rank 0's side of the rendezvous: the listening socket, the handshake that turns a stranger
//! into a rank (job token, world size, options fingerprint), one reader thread per rank, and the
//! collectives, which rank 0 completes when the last part arrives and answers to everyone.

use super::*;

pub(super) fn bind(host: &str, port: u16) -> Result<TcpListener, BootstrapError> {
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

pub(super) fn start_hub(
    info: &RankInfo,
    rdzv: &str,
    timeout: Duration,
) -> Result<Bootstrap, BootstrapError> {
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
pub(super) struct Strangers {
    next_id: u64,
    list: VecDeque<(u64, TcpStream)>,
}

/// Most strangers served at once, on top of the world size.
pub(super) const STRANGERS_OVER_WORLD: usize = 64;
/// Longest time a connection may take to send its whole hello (bounded by the timeout too).
pub(super) const HELLO_DEADLINE: Duration = Duration::from_secs(5);

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
pub(super) struct DeadlineReader<'a> {
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

pub(super) fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
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

pub(super) fn refuse(stream: &mut TcpStream, reason: &str) {
    let mut p = Vec::new();
    wire::put_text(&mut p, reason);
    let _ = wire::write_frame(stream, wire::T_REFUSE, &p);
    let _ = stream.shutdown(Shutdown::Both);
}

/// Check a stranger's hello; on success register it and return its rank and stream.
pub(super) fn handshake(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    id: u64,
) -> Option<(u32, TcpStream)> {
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

pub(super) fn hub_reader(shared: &Arc<Shared>, rank: u32, mut stream: TcpStream) {
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

/// Add one rank's part of a collective; the last one completes it and answers everyone.
pub(super) fn contribute(shared: &Shared, rank: u32, seq: u64, op: Op, blob: Vec<u8>) {
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
