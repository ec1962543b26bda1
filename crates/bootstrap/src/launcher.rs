//! `efabench launch`: start N local ranks and make the job live and die as one.
//!
//! A local job is how the benchmarks are tried on one host and how CI tests multi-rank code, so
//! the launcher has to give the same guarantees a cluster launcher does, and the one nccl-tests
//! users miss most: when one rank fails, the job ends, with that rank's status. It
//! * gives every rank the variables [`crate::detect()`] reads first (`EFABENCH_RANK`,
//!   `EFABENCH_WORLD_SIZE`, `EFABENCH_LOCAL_RANK`, `EFABENCH_RDZV` on a free loopback port, and a
//!   random `EFABENCH_JOB_TOKEN` so that a leftover rank of an earlier run cannot join);
//! * passes rank 0's stdout through untouched (tables, JSON) and prefixes every rank's stderr
//!   lines with `[rank r]`;
//! * forwards SIGINT/SIGTERM to the ranks;
//! * when a rank fails, gives the others `grace` to notice through the rendezvous and exit with
//!   their own message (they name the dead rank), then SIGTERM, then SIGKILL 2 s later (a
//!   stopped process only dies of SIGKILL);
//! * exits with the first failing rank's status (a bad option still exits 2), or 128 + signal
//!   when a rank was killed by a signal, and says which.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::detect::vars;
use crate::error::BootstrapError;

/// Most ranks one `launch` starts (each is a process with a few threads).
pub const MAX_LOCAL_RANKS: u32 = 1024;

/// What to start and how.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Number of ranks.
    pub ranks: u32,
    /// Program every rank runs (for `efabench launch`, the efabench binary itself).
    pub program: PathBuf,
    /// Its arguments (the subcommand and its options).
    pub args: Vec<OsString>,
    /// After the first rank fails, how long the others get to exit on their own.
    pub grace: Duration,
    /// Extra variables for every rank.
    pub env: Vec<(OsString, OsString)>,
}

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNAL.store(sig, Ordering::SeqCst);
}

/// SIGINT/SIGTERM handlers for the launcher's lifetime; the previous ones come back on drop.
struct SignalGuard {
    old: Vec<(libc::c_int, libc::sighandler_t)>,
}

impl SignalGuard {
    fn install() -> SignalGuard {
        SIGNAL.store(0, Ordering::SeqCst);
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        let old = [libc::SIGINT, libc::SIGTERM]
            .into_iter()
            // SAFETY: `on_signal` only performs an atomic store, which is async-signal-safe;
            // installing a handler has no other memory-safety requirement.
            .map(|sig| (sig, unsafe { libc::signal(sig, handler) }))
            .collect();
        SignalGuard { old }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for &(sig, old) in &self.old {
            if old != libc::SIG_ERR {
                // SAFETY: restores the handler `signal` returned for this signal earlier.
                unsafe { libc::signal(sig, old) };
            }
        }
    }
}

fn send_signal(child: &Child, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: plain kill(2) on a child we spawned and have not reaped yet (the caller only
        // signals children whose exit status has not been collected, so the pid is still ours).
        unsafe { libc::kill(pid, sig) };
    }
}

/// "SIGKILL" for 9, and so on.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// "exited with status 2" / "was killed by signal 9 (SIGKILL)".
pub fn describe_status(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s} ({})", signal_name(s)),
        _ => "ended in an unknown way".into(),
    }
}

/// The shell's convention: the code itself, or 128 + signal.
pub fn exit_code(st: ExitStatus) -> i32 {
    match (st.code(), st.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}

fn note(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "efabench launch: {msg}");
}

/// A loopback port that is free now (rank 0 binds it a moment later, with SO_REUSEADDR).
fn free_port() -> Result<u16, BootstrapError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| BootstrapError::Io(format!("cannot find a free loopback port: {e}")))
}

/// 128 random bits as hex, from the kernel (or std's randomly keyed hasher if that fails).
pub fn random_token() -> String {
    let mut b = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    if !ok {
        use std::hash::{BuildHasher, Hasher};
        for half in b.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            h.write_u32(std::process::id());
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Copy a rank's stderr to ours, one `[rank r] ` prefixed line at a time (long lines are cut
/// into 64 KiB pieces, so a rank that never prints a newline cannot make us buffer forever).
fn pump(rank: u32, mut from: impl Read) {
    const MAX_LINE: usize = 64 << 10;
    let prefix = format!("[rank {rank}] ");
    let mut buf = [0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let emit = |line: &[u8]| {
        let mut out = Vec::with_capacity(prefix.len() + line.len() + 1);
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
        out.push(b'\n');
        let _ = std::io::stderr().lock().write_all(&out);
    };
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &c in &buf[..n] {
            if c == b'\n' {
                emit(&line);
                line.clear();
            } else {
                line.push(c);
                if line.len() >= MAX_LINE {
                    emit(&line);
                    line.clear();
                }
            }
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}

/// Start the ranks, wait for them, and return the job's exit code.
pub fn launch(opts: &LaunchOptions) -> Result<i32, BootstrapError> {
    if opts.ranks == 0 || opts.ranks > MAX_LOCAL_RANKS {
        return Err(BootstrapError::usage(format!(
            "-n {} is out of range: launch starts 1 to {MAX_LOCAL_RANKS} local ranks",
            opts.ranks
        )));
    }
    let n = opts.ranks;
    let rdzv = format!("127.0.0.1:{}", free_port()?);
    let token = random_token();
    let _signals = SignalGuard::install();
    let mut children: Vec<Child> = Vec::with_capacity(n as usize);
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    for r in 0..n {
        let mut cmd = Command::new(&opts.program);
        cmd.args(&opts.args)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .env(vars::RANK, r.to_string())
            .env(vars::WORLD_SIZE, n.to_string())
            .env(vars::LOCAL_RANK, r.to_string())
            .env(vars::RDZV, &rdzv)
            .env(vars::JOB_TOKEN, &token)
            .stdin(Stdio::null())
            .stdout(if r == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for c in &mut children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(BootstrapError::Io(format!(
                    "cannot start rank {r} ({}): {e}",
                    opts.program.display()
                )));
            }
        };
        if let Some(err) = child.stderr.take() {
            match std::thread::Builder::new()
                .name(format!("rank{r}-stderr"))
                .spawn(move || pump(r, err))
            {
                Ok(h) => pumps.push(h),
                Err(e) => note(&format!("cannot copy rank {r}'s stderr: {e}")),
            }
        }
        children.push(child);
    }

    let mut status: Vec<Option<ExitStatus>> = vec![None; n as usize];
    let mut first: Option<(u32, ExitStatus)> = None;
    let mut signalled: Option<i32> = None;
    let mut term_at: Option<Instant> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        // Signals first, so that ranks ended by the same Ctrl-C are not taken for a failure.
        let sig = SIGNAL.swap(0, Ordering::SeqCst);
        if sig != 0 {
            if signalled.is_some() {
                // A second Ctrl-C: no more patience.
                kill_at = Some(Instant::now());
            } else {
                note(&format!(
                    "received {}; passing it on to the ranks",
                    signal_name(sig)
                ));
                signalled = Some(sig);
                kill_at = Some(Instant::now() + opts.grace);
            }
            // Ranks already reaped are skipped: their pids may have been reused.
            for (r, c) in children.iter().enumerate() {
                if status[r].is_none() {
                    send_signal(c, sig);
                }
            }
        }
        // Reap everything that ended since the last sweep. Within one sweep a rank killed by a
        // signal is taken as the first failure: the others usually exited *because* of it.
        let mut ended: Vec<(u32, ExitStatus)> = Vec::new();
        for (r, c) in children.iter_mut().enumerate() {
            if status[r].is_some() {
                continue;
            }
            let st = match c.try_wait() {
                Ok(Some(st)) => st,
                Ok(None) => continue,
                Err(_) => ExitStatus::from_raw(1 << 8),
            };
            status[r] = Some(st);
            ended.push((r as u32, st));
        }
        ended.sort_by_key(|(r, st)| (st.signal().is_none(), *r));
        let running: Vec<u32> = (0..n).filter(|&r| status[r as usize].is_none()).collect();
        if first.is_none() && signalled.is_none() {
            if let Some(&(r, st)) = ended.iter().find(|(_, st)| !st.success()) {
                first = Some((r, st));
                let tail = if running.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; stopping the other ranks (they get {:.0} s to exit)",
                        opts.grace.as_secs_f64()
                    )
                };
                note(&format!("rank {r} {}{tail}", describe_status(st)));
                term_at = Some(Instant::now() + opts.grace);
            }
        }
        if running.is_empty() {
            break;
        }
        let now = Instant::now();
        if term_at.is_some_and(|t| now >= t) {
            term_at = None;
            kill_at = Some(now + Duration::from_secs(2));
            let (r, _) = first.unwrap_or((0, ExitStatus::from_raw(0)));
            note(&format!(
                "rank(s) {} still running {:.0} s after rank {r} failed; sending SIGTERM",
                crate::error::rank_list(&running),
                opts.grace.as_secs_f64()
            ));
            for &r in &running {
                send_signal(&children[r as usize], libc::SIGTERM);
            }
        }
        if kill_at.is_some_and(|t| now >= t) {
            kill_at = None;
            for &r in &running {
                let _ = children[r as usize].kill();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for p in pumps {
        let _ = p.join();
    }
    Ok(match (first, signalled) {
        (Some((_, st)), _) => exit_code(st),
        (None, Some(sig)) => 128 + sig,
        (None, None) => 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_described_and_mapped_like_a_shell() {
        let killed = ExitStatus::from_raw(libc::SIGKILL);
        assert_eq!(describe_status(killed), "was killed by signal 9 (SIGKILL)");
        assert_eq!(exit_code(killed), 137);
        let two = ExitStatus::from_raw(2 << 8);
        assert_eq!(describe_status(two), "exited with status 2");
        assert_eq!(exit_code(two), 2);
    }

    #[test]
    fn tokens_are_random_hex() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn rank_counts_are_checked() {
        let opts = LaunchOptions {
            ranks: 0,
            program: "/bin/true".into(),
            args: vec![],
            grace: Duration::from_secs(1),
            env: vec![],
        };
        assert!(launch(&opts).unwrap_err().is_usage());
    }
}
