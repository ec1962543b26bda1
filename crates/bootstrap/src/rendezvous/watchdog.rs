//! Liveness: the heartbeats a writer thread sends when it has nothing else to send, the
//! progress count they carry, rank 0's monitor that ends a collective when no rank moved for the
//! timeout (naming the ranks it waits for), and the watchdog that ends a rank stuck inside a
//! provider call after the job has failed.
//!
//! Dead and silent peers themselves are noticed by the reader threads (`hub.rs`, `client.rs`):
//! EOF or a reset means dead, a read timeout with no heartbeat means silent.

use super::*;

/// What a heartbeat carries: a rank's own progress count (to rank 0), or rank 0's count of
/// job activity (to the other ranks).
#[derive(Clone, Copy)]
pub(super) enum Beat {
    OwnProgress,
    JobActivity,
}

/// Writer thread: sends queued frames, and a heartbeat whenever nothing was sent for a period.
pub(super) fn writer_loop(
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

/// Rank 0 heard `rank`'s progress count: if it grew, the job moved.
pub(super) fn note_progress(shared: &Shared, rank: u32, count: u64) {
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

/// Rank 0's monitor: ranks that never connect, collectives that wait while nothing moves.
///
/// A collective is not timed from its first arrival: with three or more ranks, idle ranks wait
/// in a collective while two others run a long measured step, and that is healthy. It times out
/// only when no rank has made progress ([`ProgressHandle::tick`], carried by heartbeats) and no
/// contribution arrived for `timeout`; it then names the ranks that never arrived.
pub(super) fn monitor_loop(shared: Arc<Shared>) {
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

/// Counts this rank's progress; see [`Bootstrap::progress`]. Cloning shares the count.
#[derive(Clone, Debug)]
pub struct ProgressHandle {
    pub(super) count: Arc<AtomicU64>,
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

pub(super) fn watchdog(shared: &Shared, rank: u32, grace: Duration) {
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
