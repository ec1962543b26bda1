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
//! * forwards SIGINT/SIGTERM to the ranks, and SIGHUP (a closed terminal or ssh session) as
//!   SIGTERM;
//! * makes the ranks die with it even when it is killed with SIGKILL: it passes its pid in
//!   `EFABENCH_LAUNCHER_PID`, and a rank that calls [`die_with_launcher`] at start-up asks the
//!   kernel for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`) and then checks that the
//!   parent is still the launcher (it may have died before the request);
//! * when a rank fails after the job started, gives the others `grace` to notice through the
//!   rendezvous and exit with their own message (they name the dead rank), then SIGTERM, then
//!   SIGKILL 2 s later (a stopped process only dies of SIGKILL). A rank that fails before it
//!   joined the job cannot be noticed by the others (nobody knows it yet): launch stops them at
//!   once instead of letting them wait out their timeout. Ranks tell launch that they joined
//!   over a loopback socket (`EFABENCH_LAUNCH_CTL`, checked with the job token);
//! * prints a failing rank's own output before its own summary line, so the first line is the
//!   real error;
//! * removes the files that libfabric's shm provider leaves in `/dev/shm` when a rank dies
//!   without closing its endpoint (named `PID:UID:N` after the rank's pid, in libfabric 1.17 and
//!   2.x alike), only for its own children's pids, once they are dead;
//! * exits with the first failing rank's status (a bad option still exits 2), or 128 + signal
//!   when a rank was killed by a signal, and says which. A crash wins over an earlier plain
//!   exit: a crashing rank tells the job before the kernel ends it, so the ranks that follow it
//!   can be reaped first; launch waits a moment for a crash before naming the first failure, and
//!   a crash seen later still sets the job's status.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::detect::{vars, RankInfo};
use crate::error::BootstrapError;

/// Most ranks one `launch` starts (each is a process with a few threads).
pub const MAX_LOCAL_RANKS: u32 = 1024;

/// Options that place a rank in a job: `launch` sets them itself for every rank.
const PLACEMENT_OPTIONS: &[&str] = &["--rank", "--world", "--rdzv"];

/// Refuse a rank command that `launch` cannot run: not one of `benchmarks` (the CLI passes
/// `efabench_bench::BENCHMARKS`, the one list of benchmark commands), or one that places itself
/// (`--rank`, `--world`, `--rdzv`, also as `--rank=3`). The usage error is one line.
pub fn check_rank_command(args: &[OsString], benchmarks: &[&str]) -> Result<(), BootstrapError> {
    let first = args.first().map(|a| a.to_string_lossy().into_owned());
    let name =
        match first.as_deref() {
            None | Some("") => return Err(BootstrapError::usage(
                "launch needs the command every rank runs, e.g. `efabench launch -n 2 sendrecv`",
            )),
            Some(c) => c.to_string(),
        };
    if name.starts_with('-') {
        return Err(BootstrapError::usage(format!(
            "launch got option {} where the command should be; put launch's own options (-n, \
             --timeout) before the command, e.g. `efabench launch -n 2 sendrecv {}`",
            crate::error::shorten(&name, 40),
            crate::error::shorten(&name, 40)
        )));
    }
    if !benchmarks.contains(&name.as_str()) {
        return Err(BootstrapError::usage(format!(
            "launch starts benchmark ranks, and `{}` is not a benchmark; use one of {} (run \
             other commands without launch)",
            crate::error::shorten(&name, 40),
            benchmarks.join(", ")
        )));
    }
    for a in &args[1..] {
        let a = a.to_string_lossy();
        if a == "--" {
            break;
        }
        let opt = a.split_once('=').map_or(a.as_ref(), |(o, _)| o);
        if PLACEMENT_OPTIONS.contains(&opt) {
            return Err(BootstrapError::usage(format!(
                "launch places every rank itself, so the command must not have {opt}; remove \
                 --rank, --world and --rdzv (use them only for ranks started by hand)"
            )));
        }
    }
    Ok(())
}

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

/// Make this process die with the `efabench launch` that started it, even if launch is killed
/// with SIGKILL (which it cannot pass on). Call it first thing in `main`; outside `launch`
/// (no `EFABENCH_LAUNCHER_PID`) it does nothing.
///
/// It asks the kernel for SIGKILL when the parent dies (`prctl(PR_SET_PDEATHSIG)`, through
/// rustix: no `unsafe`), then closes the race with a launcher that died before that request:
/// if the parent is no longer the launcher, this rank exits at once (status 1, one line).
/// (The kernel sends the signal when the *thread* that started the rank ends, which is why
/// [`launch`] starts the ranks from the thread that then waits for them.)
pub fn die_with_launcher() {
    let Some(launcher) = std::env::var(vars::LAUNCHER_PID)
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
    else {
        return;
    };
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)) {
        eprintln!("efabench: cannot ask to die with efabench launch ({e}); continuing");
        return;
    }
    if Pid::as_raw(rustix::process::getppid()) != launcher {
        eprintln!("efabench: efabench launch (pid {launcher}) is gone; this rank exits");
        std::process::exit(1);
    }
}

/// Tell `efabench launch` (if it started us) that this rank joined its job. Called by
/// [`crate::Bootstrap::connect`] once every rank is connected; best effort and bounded.
pub(crate) fn report_joined(info: &RankInfo) {
    let (Some(addr), Some(token)) = (std::env::var(vars::LAUNCH_CTL).ok(), info.token.as_ref())
    else {
        return;
    };
    let Ok(addr) = addr.parse::<std::net::SocketAddr>() else {
        return;
    };
    if !addr.ip().is_loopback() {
        return;
    }
    if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
        let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
        let _ = s.write_all(format!("joined {} {token}\n", info.rank).as_bytes());
    }
}

/// Launch's side of [`report_joined`]: marks `joined[rank]` for every valid message.
fn control_loop(
    listener: TcpListener,
    token: String,
    joined: Arc<Vec<AtomicBool>>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Acquire) {
        let s = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = Vec::new();
        let _ = s.take(128).read_to_end(&mut buf);
        let msg = String::from_utf8_lossy(&buf);
        let mut words = msg.split_whitespace();
        if let (Some("joined"), Some(rank), Some(t)) = (words.next(), words.next(), words.next()) {
            if t == token {
                if let Some(flag) = rank.parse::<usize>().ok().and_then(|r| joined.get(r)) {
                    flag.store(true, Ordering::Release);
                }
                // Every rank joined: nothing more can arrive. Stop polling, so this thread
                // does not wake 200 times a second for the rest of the job and take a core
                // from a rank that spins on its completion queue.
                if joined.iter().all(|f| f.load(Ordering::Acquire)) {
                    return;
                }
            }
        }
    }
}

/// The signal launch received (0 when none): set by signal-hook's async-signal-safe handler.
struct SignalGuard {
    got: Arc<AtomicUsize>,
    ids: Vec<signal_hook::SigId>,
}

impl SignalGuard {
    fn install() -> SignalGuard {
        let got = Arc::new(AtomicUsize::new(0));
        let ids = [Signal::INT, Signal::TERM, Signal::HUP]
            .into_iter()
            .filter_map(|sig| {
                let n = sig.as_raw();
                signal_hook::flag::register_usize(n, got.clone(), n as usize).ok()
            })
            .collect();
        SignalGuard { got, ids }
    }
    fn take(&self) -> i32 {
        self.got.swap(0, Ordering::SeqCst) as i32
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

fn send_signal(child: &Child, sig: Signal) {
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
        // Only children whose exit status was not collected yet are signalled, so the pid is
        // still ours.
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Remove the shm provider's files of a dead rank: `/dev/shm/PID:UID:N` (libfabric names an
/// endpoint's region `fi_shm://PID` + `:UID:N` and opens it without the prefix; 1.17 and 2.x
/// alike), only files that we own. Returns how many were removed.
pub fn remove_shm_files_of(pid: u32, dir: &Path) -> usize {
    let uid = rustix::process::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let mut parts = name.split(':');
        let ours = parts.next() == Some(pid.to_string().as_str())
            && parts.next() == Some(uid.to_string().as_str())
            && parts
                .next()
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            && parts.next().is_none();
        let owned = entry
            .metadata()
            .is_ok_and(|m| m.is_file() && m.uid() == uid);
        if ours && owned && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// "SIGKILL" for 9, and so on.
pub fn signal_name(sig: i32) -> String {
    const NAMES: [(Signal, &str); 16] = [
        (Signal::HUP, "SIGHUP"),
        (Signal::INT, "SIGINT"),
        (Signal::QUIT, "SIGQUIT"),
        (Signal::ILL, "SIGILL"),
        (Signal::TRAP, "SIGTRAP"),
        (Signal::ABORT, "SIGABRT"),
        (Signal::BUS, "SIGBUS"),
        (Signal::FPE, "SIGFPE"),
        (Signal::KILL, "SIGKILL"),
        (Signal::SEGV, "SIGSEGV"),
        (Signal::PIPE, "SIGPIPE"),
        (Signal::ALARM, "SIGALRM"),
        (Signal::TERM, "SIGTERM"),
        (Signal::USR1, "SIGUSR1"),
        (Signal::USR2, "SIGUSR2"),
        (Signal::STOP, "SIGSTOP"),
    ];
    NAMES
        .iter()
        .find(|(s, _)| s.as_raw() == sig)
        .map_or_else(|| format!("signal {sig}"), |(_, n)| n.to_string())
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
        .map_err(|e| BootstrapError::io("cannot find a free loopback port", e))
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

/// Wait (at most `limit`) until a pump thread has copied everything its rank wrote.
/// How long a first failure by exit status waits for another rank to show a crash.
const CRASH_SETTLE: Duration = Duration::from_secs(1);

/// Poll the ranks still running for up to `limit`, adding those that end to `ended`; returns
/// early once one of them died on a signal.
fn settle_for_crash(
    children: &mut [Child],
    status: &mut [Option<ExitStatus>],
    ended: &mut Vec<(u32, ExitStatus)>,
    limit: Duration,
) {
    let until = Instant::now() + limit;
    loop {
        for (r, c) in children.iter_mut().enumerate() {
            if status[r].is_some() {
                continue;
            }
            if let Ok(Some(st)) = c.try_wait() {
                status[r] = Some(st);
                ended.push((r as u32, st));
            }
        }
        let crashed = ended.iter().any(|(_, st)| st.signal().is_some());
        let running = status.iter().any(Option::is_none);
        if crashed || !running || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn drain(pump: Option<&JoinHandle<()>>, limit: Duration) {
    let until = Instant::now() + limit;
    while pump.is_some_and(|p| !p.is_finished()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
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
    let signals = SignalGuard::install();
    // Where ranks say that they joined the job (see `report_joined`).
    let joined: Arc<Vec<AtomicBool>> = Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
    let stop_ctl = Arc::new(AtomicBool::new(false));
    let ctl = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(|l| l.local_addr().map(|a| (l, a)))
        .map_err(|e| BootstrapError::io("cannot open launch's control socket", e))?;
    let ctl_addr = ctl.1.to_string();
    {
        let (token, joined, stop) = (token.clone(), joined.clone(), stop_ctl.clone());
        std::thread::Builder::new()
            .name("launch-ctl".into())
            .spawn(move || control_loop(ctl.0, token, joined, stop))
            .map_err(|e| BootstrapError::io("cannot start a launch thread", e))?;
    }
    let mut children: Vec<Child> = Vec::with_capacity(n as usize);
    let mut pumps: Vec<Option<JoinHandle<()>>> = Vec::new();
    let stop_all = |children: &mut Vec<Child>| {
        for c in children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    for r in 0..n {
        let mut cmd = Command::new(&opts.program);
        cmd.args(&opts.args)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .env(vars::RANK, r.to_string())
            .env(vars::WORLD_SIZE, n.to_string())
            .env(vars::LOCAL_RANK, r.to_string())
            .env(vars::RDZV, &rdzv)
            .env(vars::JOB_TOKEN, &token)
            .env(vars::LAUNCHER_PID, std::process::id().to_string())
            .env(vars::LAUNCH_CTL, &ctl_addr)
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
                stop_all(&mut children);
                stop_ctl.store(true, Ordering::Release);
                return Err(BootstrapError::io(
                    format!("cannot start rank {r} ({})", opts.program.display()),
                    e,
                ));
            }
        };
        let pump_thread = child.stderr.take().and_then(|err| {
            std::thread::Builder::new()
                .name(format!("rank{r}-stderr"))
                .spawn(move || pump(r, err))
                .map_err(|e| note(&format!("cannot copy rank {r}'s stderr: {e}")))
                .ok()
        });
        pumps.push(pump_thread);
        children.push(child);
    }

    let mut status: Vec<Option<ExitStatus>> = vec![None; n as usize];
    // Ranks this launcher signalled: their deaths by signal are not crashes.
    let mut stopped_by_us = vec![false; n as usize];
    let mut first: Option<(u32, ExitStatus)> = None;
    let mut signalled: Option<i32> = None;
    let mut term_at: Option<Instant> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        // Signals first, so that ranks ended by the same Ctrl-C are not taken for a failure.
        let sig = signals.take();
        if sig != 0 {
            // SIGHUP (terminal or session gone) is passed on as SIGTERM: the ranks' libraries
            // clean up on SIGTERM, and a rank must not outlive its launcher.
            let pass = if sig == Signal::HUP.as_raw() {
                Signal::TERM
            } else {
                Signal::from_named_raw(sig).unwrap_or(Signal::TERM)
            };
            if signalled.is_some() {
                // A second Ctrl-C: no more patience.
                kill_at = Some(Instant::now());
            } else {
                note(&format!(
                    "received {}; passing {} on to the ranks",
                    signal_name(sig),
                    signal_name(pass.as_raw())
                ));
                signalled = Some(sig);
                kill_at = Some(Instant::now() + opts.grace);
            }
            // Ranks already reaped are skipped: their pids may have been reused.
            for (r, c) in children.iter().enumerate() {
                if status[r].is_none() {
                    send_signal(c, pass);
                    stopped_by_us[r] = true;
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
        if first.is_none() && signalled.is_none() && ended.iter().any(|(_, st)| !st.success()) {
            // A rank that crashes tells the job before the kernel ends it (and a core dump can
            // take a while), so the ranks that follow it may be reaped first. Give the others a
            // moment to show a crash before naming the first failure.
            settle_for_crash(&mut children, &mut status, &mut ended, CRASH_SETTLE);
        }
        ended.sort_by_key(|(r, st)| (st.signal().is_none(), *r));
        let running: Vec<u32> = (0..n).filter(|&r| status[r as usize].is_none()).collect();
        if first.is_none() && signalled.is_none() {
            if let Some(&(r, st)) = ended.iter().find(|(_, st)| !st.success()) {
                first = Some((r, st));
                // Its own words first: they are the real error, ours is the summary.
                drain(pumps[r as usize].as_ref(), Duration::from_millis(500));
                let before_join = !joined[r as usize].load(Ordering::Acquire);
                let tail = if running.is_empty() {
                    String::new()
                } else if before_join {
                    // Nobody can learn of it through the rendezvous: do not wait for them.
                    "; it had not joined the job yet, so the other ranks are stopped now".into()
                } else {
                    format!(
                        "; stopping the other ranks (they get {:.0} s to exit)",
                        opts.grace.as_secs_f64()
                    )
                };
                note(&format!("rank {r} {}{tail}", describe_status(st)));
                term_at = Some(if before_join {
                    Instant::now()
                } else {
                    Instant::now() + opts.grace
                });
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
            if joined[r as usize].load(Ordering::Acquire) {
                note(&format!(
                    "rank(s) {} still running {:.0} s after rank {r} failed; sending SIGTERM",
                    crate::error::rank_list(&running),
                    opts.grace.as_secs_f64()
                ));
            }
            for &r in &running {
                send_signal(&children[r as usize], Signal::TERM);
                stopped_by_us[r as usize] = true;
            }
        }
        if kill_at.is_some_and(|t| now >= t) {
            kill_at = None;
            for &r in &running {
                let _ = children[r as usize].kill();
                stopped_by_us[r as usize] = true;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    stop_ctl.store(true, Ordering::Release);
    // Ranks that did not end cleanly may have left their shm regions behind.
    let shm = Path::new("/dev/shm");
    for (c, st) in children.iter().zip(&status) {
        if !st.is_some_and(|s| s.success()) {
            remove_shm_files_of(c.id(), shm);
        }
    }
    for p in pumps.into_iter().flatten() {
        let _ = p.join();
    }
    // A crash is the job's cause even when a rank that followed it was reaped first.
    let crash = (0..n as usize)
        .find(|&r| !stopped_by_us[r] && status[r].is_some_and(|st| st.signal().is_some()));
    if let (Some(c), Some((f, _))) = (crash, first) {
        if c as u32 != f {
            let st = status[c].expect("reaped");
            note(&format!(
                "rank {c} {} after rank {f} failed; the job ends with rank {c}'s status",
                describe_status(st)
            ));
            first = Some((c as u32, st));
        }
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
        let killed = ExitStatus::from_raw(Signal::KILL.as_raw());
        assert_eq!(describe_status(killed), "was killed by signal 9 (SIGKILL)");
        assert_eq!(exit_code(killed), 137);
        let two = ExitStatus::from_raw(2 << 8);
        assert_eq!(describe_status(two), "exited with status 2");
        assert_eq!(exit_code(two), 2);
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(Signal::HUP.as_raw()), "SIGHUP");
        assert_eq!(signal_name(Signal::TERM.as_raw()), "SIGTERM");
        assert_eq!(signal_name(77), "signal 77");
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    const BENCHES: &[&str] = &["sendrecv", "write", "read", "alltoall"];

    #[test]
    fn only_benchmarks_without_placement_options_are_launched() {
        for ok in [
            &["sendrecv"][..],
            &["write", "-b", "8", "--check"],
            &["read", "--timeout", "3"],
            &["alltoall"],
            &["sendrecv", "--", "--rank", "3"],
        ] {
            check_rank_command(&os(ok), BENCHES).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for (bad, words) in [
            (&["sendrecv", "--rank", "3"][..], "must not have --rank"),
            (&["write", "--world=4"], "must not have --world"),
            (
                &["read", "-b", "8", "--rdzv", "h:1"],
                "must not have --rdzv",
            ),
            (&["plot", "x.jsonl"], "`plot` is not a benchmark"),
            (&["doctor"], "`doctor` is not a benchmark"),
            (&["launch", "-n", "2"], "`launch` is not a benchmark"),
            (&["-n", "2"], "option -n where the command should be"),
            (&[], "needs the command"),
        ] {
            let e = check_rank_command(&os(bad), BENCHES).unwrap_err();
            assert!(e.is_usage(), "{bad:?}");
            let m = e.to_string();
            assert!(m.contains(words), "{bad:?}: {m}");
            assert!(!m.contains('\n'));
        }
        let long = "x".repeat(100_000);
        let m = check_rank_command(&os(&[&long]), BENCHES)
            .unwrap_err()
            .to_string();
        assert!(m.len() < 300, "{}", m.len());
    }

    #[test]
    fn only_a_dead_childs_own_shm_files_are_removed() {
        let dir = std::env::temp_dir().join(format!("efabench-shm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let uid = rustix::process::getuid().as_raw();
        let mine = [format!("4242:{uid}:0"), format!("4242:{uid}:17")];
        let others = [
            format!("42421:{uid}:0"),
            format!("4242:{}:0", uid + 1),
            format!("4242:{uid}:0:extra"),
            format!("4242:{uid}:"),
            "4242".to_string(),
            format!("x4242:{uid}:0"),
        ];
        for f in mine.iter().chain(&others) {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        assert_eq!(remove_shm_files_of(4242, &dir), 2);
        for f in &mine {
            assert!(!dir.join(f).exists(), "{f}");
        }
        for f in &others {
            assert!(dir.join(f).exists(), "{f}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
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

    /// Two bash ranks that tell launch they joined; rank 0 exits with status 1 at once (as a
    /// rank that learned of a crash does), rank 1 dies of SIGSEGV after `crash_after` seconds.
    fn follower_before_crash(crash_after: &str) -> i32 {
        let script = format!(
            "ctl=$EFABENCH_LAUNCH_CTL; \
             echo \"joined $EFABENCH_RANK $EFABENCH_JOB_TOKEN\" > /dev/tcp/${{ctl%:*}}/${{ctl##*:}}; \
             if [ \"$EFABENCH_RANK\" = 0 ]; then sleep 0.2; exit 1; fi; \
             sleep {crash_after}; kill -SEGV $$"
        );
        let opts = LaunchOptions {
            ranks: 2,
            program: "/bin/bash".into(),
            args: vec!["-c".into(), script.into()],
            grace: Duration::from_secs(8),
            env: vec![],
        };
        launch(&opts).unwrap()
    }

    #[test]
    fn a_crash_reaped_after_its_follower_sets_the_status() {
        // Within the settle window, and after it (the crash still wins at the end).
        assert_eq!(follower_before_crash("0.5"), 128 + 11);
        assert_eq!(follower_before_crash("2"), 128 + 11);
    }
}
