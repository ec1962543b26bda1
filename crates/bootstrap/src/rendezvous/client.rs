//! The side of ranks 1..world: connect to rank 0 (retrying until the deadline, since rank 0 may
//! start last), present the hello, then one reader thread that takes results, rank 0's verdict
//! on a failure, and heartbeats, and notices when rank 0 goes silent or away.

use super::*;

pub(super) enum Attempt {
    Welcome(TcpStream),
    Retry(String),
}

pub(super) fn try_once(
    addr: &str,
    hello: &[u8],
    remaining: Duration,
) -> Result<Attempt, BootstrapError> {
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

pub(super) fn start_client(
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

pub(super) fn client_reader(shared: Arc<Shared>, mut stream: TcpStream) {
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
