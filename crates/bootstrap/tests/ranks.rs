//! Multi-process tests of the rendezvous and the launcher, with real processes on loopback.
//!
//! Failure detection can only be tested with processes that really die or freeze, so this test
//! binary plays three parts, chosen by `EFABENCH_TEST_ROLE`: without it, it is the test driver;
//! with `worker` it is one rank; with `launcher` it is `efabench launch` (the library's
//! launcher, starting this same binary as its ranks). The driver has its own `main` (no libtest
//! harness) so that the re-executed copies never run the tests themselves.
//!
//! Timing assertions are only generous upper bounds on failure detection ("within the timeout
//! plus a few seconds"): never a timed assertion on how fast things work.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use efabench_bootstrap::launcher::{launch, LaunchOptions};
use efabench_bootstrap::wire::{self, Hello};
use efabench_bootstrap::{
    detect_from_process_env, Bootstrap, BootstrapError, LaunchFlags, RankInfo,
};
use rustix::process::{Pid, Signal};

const ROLE: &str = "EFABENCH_TEST_ROLE";
const MODE: &str = "EFABENCH_TEST_MODE";
const VICTIM: &str = "EFABENCH_TEST_VICTIM";
const ACTION: &str = "EFABENCH_TEST_ACTION";
const TIMEOUT: &str = "EFABENCH_TEST_TIMEOUT";
const RANKS: &str = "EFABENCH_TEST_RANKS";
const GRACE: &str = "EFABENCH_TEST_GRACE";

/// Bootstrap timeout of the worker ranks in the failure tests.
const FAIL_TIMEOUT: Duration = Duration::from_secs(3);
/// "A few seconds" on top of the timeout, generous for a loaded 2-core CI machine.
const SLACK: Duration = Duration::from_secs(12);

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_secs(name: &str, default: f64) -> Duration {
    Duration::from_secs_f64(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

// ---------------------------------------------------------------------------------------------
// Worker: one rank.

/// Rank i's all-gather blob: sizes from empty to 256 KiB, contents that depend on the rank.
fn blob(i: u32) -> Vec<u8> {
    let len = match i % 4 {
        0 => 0,
        1 => 256 << 10,
        2 => 17,
        _ => 4096 + i as usize,
    };
    (0..len)
        .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

fn collectives(b: &Bootstrap) -> Result<i32, BootstrapError> {
    let (r, w) = (b.rank(), b.world());
    let table = b.all_gather(&blob(r))?;
    if table.len() != w as usize || (0..w).any(|i| table[i as usize] != blob(i)) {
        eprintln!("rank {r}: all_gather table is wrong");
        return Ok(3);
    }
    // Every rank must hold the same table: compare a digest of it across ranks too.
    let digest: u64 = table
        .iter()
        .flatten()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
            (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let digests = b.all_gather(&digest.to_le_bytes())?;
    if digests.iter().any(|d| d.as_slice() != digest.to_le_bytes()) {
        eprintln!("rank {r}: ranks hold different tables");
        return Ok(3);
    }
    b.barrier()?;
    let mine = format!("rank {r} pid {}", std::process::id());
    match (r, b.gather(mine.as_bytes())?) {
        (0, Some(all)) => {
            let good = all.len() == w as usize
                && all
                    .iter()
                    .enumerate()
                    .all(|(i, g)| g.starts_with(format!("rank {i} pid ").as_bytes()));
            if !good {
                eprintln!("rank 0: gather is wrong");
                return Ok(3);
            }
        }
        (0, None) | (_, Some(_)) => {
            eprintln!("rank {r}: gather returned the table at the wrong rank");
            return Ok(3);
        }
        _ => {}
    }
    let bc = b.broadcast(if r == 0 { b"from rank 0" } else { b"not me" })?;
    if bc != b"from rank 0" {
        eprintln!("rank {r}: broadcast is wrong");
        return Ok(3);
    }
    b.barrier()?;
    eprintln!("rank {r} ok");
    if r == 0 {
        println!("OK {w} ranks");
    }
    Ok(0)
}

/// Wait for the job to fail (the victim dies or freezes), report, exit 1.
fn wait_for_failure(b: &Bootstrap, mode: &str) -> i32 {
    let r = b.rank();
    let give_up = Instant::now() + Duration::from_secs(120);
    let e = if mode == "barrier" {
        match b.barrier() {
            Ok(()) => {
                eprintln!("rank {r}: barrier completed although a rank never called it");
                return 3;
            }
            Err(e) => e,
        }
    } else {
        loop {
            if let Err(e) = b.check() {
                break e;
            }
            if Instant::now() > give_up {
                eprintln!("rank {r}: no failure detected");
                return 3;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    eprintln!("rank {r}: {}", e.message());
    1
}

fn worker() -> i32 {
    efabench_bootstrap::die_with_launcher();
    let mode = std::env::var(MODE).unwrap_or_default();
    let victim = env_u32(VICTIM, u32::MAX);
    let timeout = env_secs(TIMEOUT, 20.0);
    let flags = LaunchFlags {
        timeout,
        ..LaunchFlags::default()
    };
    let info = match detect_from_process_env(&flags) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("{e}");
            return if e.is_usage() { 2 } else { 1 };
        }
    };
    if mode == "exit2" && info.rank == victim {
        eprintln!("bad option (exiting 2 on purpose)");
        return 2;
    }
    let b = match Bootstrap::connect(&info, timeout) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rank {}: {e}", info.rank);
            return if e.is_usage() { 2 } else { 1 };
        }
    };
    if mode == "collectives" {
        return collectives(&b).unwrap_or_else(|e| {
            eprintln!("rank {}: {e}", b.rank());
            1
        });
    }
    // Failure modes: make sure everyone is connected, say so, then misbehave or wait.
    if let Err(e) = b.all_gather(&[]) {
        eprintln!("rank {}: {e}", b.rank());
        return 1;
    }
    println!("READY {}", b.rank());
    let _ = std::io::stdout().flush();
    eprintln!("rank {} pid {}", b.rank(), std::process::id());
    if mode == "watchdog" {
        b.arm_watchdog(Duration::from_secs(1));
        if b.rank() != victim {
            // Stuck like a thread spinning in fi_cq_read: never looks at the bootstrap again.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(120) {
                std::hint::spin_loop();
                std::thread::sleep(Duration::from_millis(1));
            }
            eprintln!("rank {}: the watchdog never fired", b.rank());
            return 3;
        }
    }
    if b.rank() == victim {
        std::thread::sleep(Duration::from_millis(300));
        let sig = match std::env::var(ACTION).as_deref() {
            Ok("selfkill") => Some(Signal::KILL),
            Ok("selfstop") => Some(Signal::STOP),
            _ => None,
        };
        if let Some(sig) = sig {
            let _ = rustix::process::kill_process(rustix::process::getpid(), sig);
        }
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    wait_for_failure(&b, &mode)
}

fn launcher_role() -> i32 {
    let opts = LaunchOptions {
        ranks: env_u32(RANKS, 2),
        program: std::env::current_exe().expect("current_exe"),
        args: vec![],
        grace: env_secs(GRACE, 5.0),
        env: vec![(ROLE.into(), "worker".into())],
    };
    match launch(&opts) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("efabench launch: {e}");
            if e.is_usage() {
                2
            } else {
                1
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Driver helpers.

fn exe() -> PathBuf {
    std::env::current_exe().expect("current_exe")
}

/// A command for this binary with no launcher variables from the outside world.
fn command(role: &str) -> Command {
    let mut c = Command::new(exe());
    for (k, _) in std::env::vars() {
        let launcher_var = k.starts_with("EFABENCH_")
            || k.starts_with("SLURM_")
            || k.starts_with("OMPI_")
            || k.starts_with("PMI_")
            || k.starts_with("PMIX_")
            || [
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "MASTER_ADDR",
                "MASTER_PORT",
                "MPI_LOCALRANKID",
            ]
            .contains(&k.as_str());
        if launcher_var {
            c.env_remove(&k);
        }
    }
    c.env(ROLE, role);
    c
}

struct Proc {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    status: Option<ExitStatus>,
}

/// Start a process whose stdout/stderr are collected; `ready` gets a message per stdout line.
fn start(mut cmd: Command, ready: Option<mpsc::Sender<String>>) -> Proc {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn test process");
    let stdout = Arc::new(Mutex::new(String::new()));
    let stderr = Arc::new(Mutex::new(String::new()));
    let (o, e) = (
        child.stdout.take().expect("stdout"),
        child.stderr.take().expect("stderr"),
    );
    let so = stdout.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(o).lines().map_while(Result::ok) {
            so.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(tx) = &ready {
                let _ = tx.send(line);
            }
        }
    });
    let se = stderr.clone();
    std::thread::spawn(move || {
        let mut s = String::new();
        let mut e = e;
        let mut buf = [0u8; 4096];
        while let Ok(n) = e.read(&mut buf) {
            if n == 0 {
                break;
            }
            s.push_str(&String::from_utf8_lossy(&buf[..n]));
            *se.lock().unwrap() = s.clone();
        }
    });
    Proc {
        child,
        stdout,
        stderr,
        status: None,
    }
}

impl Proc {
    /// Wait until it exits or `deadline`; true if it exited.
    fn wait_until(&mut self, deadline: Instant) -> bool {
        while self.status.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.status = Some(st);
                // Let the output threads drain the pipes.
                std::thread::sleep(Duration::from_millis(50));
                break;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }
    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// kill(2) on a child we started and have not reaped.
fn signal(child: &Child, sig: Signal) {
    let pid = Pid::from_raw(child.id() as i32).expect("a child pid is positive");
    rustix::process::kill_process(pid, sig).expect("kill");
}

fn free_rdzv() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Run the launcher role to completion (bounded) and return it.
fn run_launch(n: u32, mode: &str, extra: &[(&str, &str)]) -> (Proc, Duration) {
    let mut c = command("launcher");
    c.env(RANKS, n.to_string()).env(MODE, mode);
    for (k, v) in extra {
        c.env(k, v);
    }
    let t0 = Instant::now();
    let mut p = start(c, None);
    assert!(
        p.wait_until(t0 + Duration::from_secs(120)),
        "launch of {n} ranks did not finish: {}",
        p.stderr()
    );
    (p, t0.elapsed())
}

/// Start `n` ranks directly (no launcher) and wait until all of them are connected.
fn start_ranks(n: u32, mode: &str, victim: u32, timeout: Duration) -> Vec<Proc> {
    let rdzv = free_rdzv();
    let (tx, rx) = mpsc::channel();
    let procs: Vec<Proc> = (0..n)
        .map(|r| {
            let mut c = command("worker");
            c.env("EFABENCH_RANK", r.to_string())
                .env("EFABENCH_WORLD_SIZE", n.to_string())
                .env("EFABENCH_LOCAL_RANK", r.to_string())
                .env("EFABENCH_RDZV", &rdzv)
                .env("EFABENCH_JOB_TOKEN", "direct-test")
                .env(MODE, mode)
                .env(VICTIM, victim.to_string())
                .env(TIMEOUT, timeout.as_secs_f64().to_string());
            start(c, Some(tx.clone()))
        })
        .collect();
    for _ in 0..n {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("ranks did not get ready");
        assert!(line.starts_with("READY"), "{line}");
    }
    procs
}

/// Every rank but `victim` exits non-zero within `bound` and names the victim.
fn expect_others_fail(procs: &mut [Proc], victim: u32, t0: Instant, bound: Duration, words: &str) {
    for (r, p) in procs.iter_mut().enumerate() {
        if r as u32 == victim {
            continue;
        }
        assert!(
            p.wait_until(t0 + bound),
            "rank {r} still running {bound:?} after the failure"
        );
        let st = p.status.unwrap();
        let err = p.stderr();
        assert!(!st.success(), "rank {r} exited 0: {err}");
        assert!(
            err.contains(&format!("rank {victim}")) && err.contains(words),
            "rank {r}: {err}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Tests.

fn collectives_under_launch(n: u32) {
    let (p, took) = run_launch(n, "collectives", &[]);
    let (out, err) = (p.stdout(), p.stderr());
    assert_eq!(p.status.unwrap().code(), Some(0), "launch -n {n}: {err}");
    assert_eq!(
        out,
        format!("OK {n} ranks\n"),
        "only rank 0's stdout is shown"
    );
    for r in 0..n {
        assert!(
            err.contains(&format!("[rank {r}] rank {r} ok\n")),
            "rank {r} missing: {err}"
        );
    }
    eprintln!("    {n} ranks: all_gather/barrier/gather/broadcast ok in {took:.2?}");
}

fn launch_1_rank() {
    collectives_under_launch(1)
}
fn launch_2_ranks() {
    collectives_under_launch(2)
}
fn launch_8_ranks() {
    collectives_under_launch(8)
}
fn launch_16_ranks() {
    collectives_under_launch(16)
}

fn sigkill_a_rank_while_others_poll_check() {
    let mut procs = start_ranks(4, "poll", 2, FAIL_TIMEOUT);
    let t0 = Instant::now();
    procs[2].child.kill().unwrap();
    expect_others_fail(&mut procs, 2, t0, FAIL_TIMEOUT + SLACK, "died");
}

fn sigstop_a_rank_while_others_poll_check() {
    let mut procs = start_ranks(4, "poll", 1, FAIL_TIMEOUT);
    let t0 = Instant::now();
    signal(&procs[1].child, Signal::STOP);
    expect_others_fail(&mut procs, 1, t0, FAIL_TIMEOUT + SLACK, "stopped answering");
}

fn sigstop_rank_0_while_others_wait_in_a_barrier() {
    let mut procs = start_ranks(3, "barrier", 0, FAIL_TIMEOUT);
    let t0 = Instant::now();
    signal(&procs[0].child, Signal::STOP);
    expect_others_fail(
        &mut procs,
        0,
        t0,
        FAIL_TIMEOUT + SLACK,
        "rank 0 stopped answering",
    );
}

fn launch_ends_the_job_when_a_rank_is_killed() {
    let t = FAIL_TIMEOUT.as_secs_f64().to_string();
    let (p, took) = run_launch(
        4,
        "barrier",
        &[
            (VICTIM, "3"),
            (ACTION, "selfkill"),
            (TIMEOUT, &t),
            (GRACE, "5"),
        ],
    );
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(137), "{err}");
    assert!(
        err.contains("efabench launch: rank 3 was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    // The other ranks noticed on their own and named the dead rank.
    for r in 0..3 {
        assert!(
            err.contains(&format!("[rank {r}] rank {r}: rank 3 on ")) && err.contains(" died"),
            "rank {r}: {err}"
        );
    }
    assert!(took < FAIL_TIMEOUT + SLACK, "took {took:?}");
}

fn launch_ends_the_job_when_a_rank_freezes() {
    let t = FAIL_TIMEOUT.as_secs_f64().to_string();
    let (p, took) = run_launch(
        4,
        "poll",
        &[
            (VICTIM, "1"),
            (ACTION, "selfstop"),
            (TIMEOUT, &t),
            (GRACE, "1"),
        ],
    );
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(1), "{err}");
    assert!(
        err.contains("rank 1 on ") && err.contains(" stopped answering"),
        "{err}"
    );
    assert!(
        err.contains("still running"),
        "the stopped rank had to be stopped by launch: {err}"
    );
    assert!(took < FAIL_TIMEOUT + SLACK, "took {took:?}");
}

fn launch_exits_with_the_first_failing_status() {
    let (p, _) = run_launch(3, "exit2", &[(VICTIM, "1"), (TIMEOUT, "20"), (GRACE, "1")]);
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(2), "{err}");
    assert!(err.contains("[rank 1] bad option"), "{err}");
    assert!(
        err.contains("efabench launch: rank 1 exited with status 2"),
        "{err}"
    );
}

fn launch_forwards_sigint() {
    let mut c = command("launcher");
    c.env(RANKS, "2").env(MODE, "poll").env(TIMEOUT, "20");
    let (tx, rx) = mpsc::channel();
    let mut p = start(c, Some(tx));
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("rank 0 did not get ready");
    assert_eq!(line, "READY 0");
    signal(&p.child, Signal::INT);
    assert!(
        p.wait_until(Instant::now() + Duration::from_secs(30)),
        "launch ignored SIGINT"
    );
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(130), "{err}");
    assert!(
        err.contains("received SIGINT; passing SIGINT on to the ranks"),
        "{err}"
    );
}

fn info(rank: u32, world: u32, rdzv: &str, token: &str) -> RankInfo {
    RankInfo {
        rank,
        world,
        local_rank: rank,
        rdzv: Some(rdzv.into()),
        token: Some(token.into()),
        source: "test",
    }
}

/// Rank 0 of a 2-rank job in a thread; returns what its all_gather and barrier produced.
fn hub_thread(rdzv: &str) -> std::thread::JoinHandle<Result<Vec<Vec<u8>>, BootstrapError>> {
    let i = info(0, 2, rdzv, "good-token");
    std::thread::spawn(move || {
        let b = Bootstrap::connect(&i, Duration::from_secs(30))?;
        let t = b.all_gather(b"zero")?;
        b.barrier()?;
        Ok(t)
    })
}

fn wrong_token_is_refused_and_the_job_goes_on() {
    let rdzv = free_rdzv();
    let hub = hub_thread(&rdzv);
    let e =
        Bootstrap::connect(&info(1, 2, &rdzv, "evil-token"), Duration::from_secs(20)).unwrap_err();
    assert!(
        matches!(e, BootstrapError::Refused { .. }) && e.to_string().contains("wrong job token"),
        "{e}"
    );
    let e =
        Bootstrap::connect(&info(1, 3, &rdzv, "good-token"), Duration::from_secs(5)).unwrap_err();
    assert!(e.to_string().contains("world size mismatch"), "{e}");
    let b = Bootstrap::connect(&info(1, 2, &rdzv, "good-token"), Duration::from_secs(20)).unwrap();
    let e =
        Bootstrap::connect(&info(1, 2, &rdzv, "good-token"), Duration::from_secs(5)).unwrap_err();
    assert!(e.to_string().contains("rank 1 is already connected"), "{e}");
    assert_eq!(
        b.all_gather(b"one").unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
    b.barrier().unwrap();
    assert_eq!(
        hub.join().unwrap().unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
    b.check().unwrap();
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn random_and_truncated_bytes_do_not_disturb_the_rendezvous() {
    let rdzv = free_rdzv();
    let hub = hub_thread(&rdzv);
    // Wait until rank 0 listens.
    let until = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&rdzv).is_err() {
        assert!(Instant::now() < until, "rank 0 never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let stranger = Hello {
        rank: 1,
        world: 2,
        pid: 1,
        token: "fuzz".into(),
        host: "fuzz".into(),
    };
    let hello = wire::frame(wire::T_HELLO, &stranger.encode());
    let mut rng = Rng(0x00c0_ffee_1234_5678);
    const CONNECTIONS: usize = 400;
    for i in 0..CONNECTIONS {
        let bytes: Vec<u8> = match i % 6 {
            0 => {
                let n = rng.below(2048) as usize;
                rng.bytes(n)
            }
            1 => {
                // A length far beyond any limit, then some bytes.
                let mut v = ((rng.next() as u32) | 0x8000_0000).to_le_bytes().to_vec();
                let n = rng.below(64) as usize;
                v.extend(rng.bytes(n));
                v
            }
            2 => hello[..rng.below(hello.len() as u64) as usize].to_vec(),
            3 => {
                let mut v = hello.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(v.len() as u64) as usize;
                    v[at] = rng.next() as u8;
                }
                v
            }
            4 => {
                let kind = rng.next() as u8;
                let n = rng.below(wire::MAX_HELLO as u64) as usize;
                wire::frame(kind, &rng.bytes(n))
            }
            _ => Vec::new(),
        };
        let mut s = TcpStream::connect(&rdzv).expect("the rendezvous stopped accepting");
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        if i % 50 == 0 {
            // Now and then read the answer to the end: rank 0 must answer or close, never hang.
            s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            let mut sink = Vec::new();
            let r = s.take(64 << 10).read_to_end(&mut sink);
            // Closed (EOF, or a reset because it left our junk unread) is fine; a timeout is not.
            let hung = matches!(&r, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
            assert!(!hung, "rank 0 did not close a junk connection: {r:?}");
        }
    }
    let b = Bootstrap::connect(&info(1, 2, &rdzv, "good-token"), Duration::from_secs(20)).unwrap();
    assert_eq!(
        b.all_gather(b"one").unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
    b.barrier().unwrap();
    assert_eq!(
        hub.join().unwrap().unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
}

fn idle_connections_do_not_lock_the_last_rank_out() {
    let rdzv = free_rdzv();
    let hub = hub_thread(&rdzv);
    let until = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&rdzv).is_err() {
        assert!(Instant::now() < until, "rank 0 never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    // 200 connections that never say anything, held open while the last rank joins.
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(&rdzv).expect("connect"))
        .collect();
    let t0 = Instant::now();
    let b = Bootstrap::connect(&info(1, 2, &rdzv, "good-token"), Duration::from_secs(20)).unwrap();
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the last rank needed {took:?} to get in"
    );
    assert_eq!(
        b.all_gather(b"one").unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
    b.barrier().unwrap();
    hub.join().unwrap().unwrap();
    drop(idle);
}

fn abort_reaches_every_rank_with_its_reason() {
    let rdzv = free_rdzv();
    let handles: Vec<_> = (0..3)
        .map(|r| {
            let i = info(r, 3, &rdzv, "abort-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                if r == 2 {
                    b.abort("the NIC is missing");
                    return b.check();
                }
                b.barrier()
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let e = h.join().unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            "rank 2 aborted the job: the NIC is missing",
            "rank {r}"
        );
    }
}

fn a_rank_that_left_cannot_be_waited_for() {
    let rdzv = free_rdzv();
    let i1 = info(1, 2, &rdzv, "left-test");
    let leaver =
        std::thread::spawn(move || Bootstrap::connect(&i1, Duration::from_secs(20)).map(drop));
    let b = Bootstrap::connect(&info(0, 2, &rdzv, "left-test"), Duration::from_secs(20)).unwrap();
    leaver.join().unwrap().unwrap();
    let e = b.barrier().unwrap_err();
    assert!(matches!(e, BootstrapError::Left { rank: 1, .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("rank 1 already left the job but barrier #1 still needs it"),
        "{e}"
    );
}

fn a_rank_that_never_comes_is_named_by_everyone() {
    let rdzv = free_rdzv();
    let i1 = info(1, 3, &rdzv, "missing-test");
    let t = Duration::from_secs(1);
    let one = std::thread::spawn(move || Bootstrap::connect(&i1, t).map(drop));
    let t0 = Instant::now();
    let e0 = Bootstrap::connect(&info(0, 3, &rdzv, "missing-test"), t).unwrap_err();
    let e1 = one.join().unwrap().unwrap_err();
    for e in [e0, e1] {
        assert!(
            e.to_string()
                .starts_with("rank 2 did not join the job within 1 s"),
            "{e}"
        );
    }
    assert!(t0.elapsed() < t + SLACK);
}

fn rendezvous_by_name_and_on_all_interfaces() {
    for host in ["localhost", "0.0.0.0"] {
        let port = free_rdzv().rsplit_once(':').unwrap().1.to_string();
        let rdzv = format!("{host}:{port}");
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let i = info(r, 3, &rdzv, "name-test");
                std::thread::spawn(move || {
                    let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                    b.all_gather(&[r as u8])
                })
            })
            .collect();
        for h in handles {
            let t = h.join().unwrap().unwrap_or_else(|e| panic!("{rdzv}: {e}"));
            assert_eq!(t, vec![vec![0], vec![1], vec![2]]);
        }
    }
}

fn mismatched_collectives_fail_on_every_rank() {
    let rdzv = free_rdzv();
    let handles: Vec<_> = (0..3)
        .map(|r| {
            let i = info(r, 3, &rdzv, "mismatch-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                if r == 1 {
                    b.all_gather(b"x").map(drop)
                } else {
                    b.barrier()
                }
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(
            e.contains("must call the same collectives in the same order"),
            "rank {r}: {e}"
        );
    }
}

/// Three ranks: 0 and 1 run a "measured step" three times as long as the timeout while rank 2
/// waits in a barrier. With progress ticks the job is healthy; without, the barrier times out
/// naming the ranks that did not arrive.
fn three_ranks_busy_step(tick: bool) -> Vec<Result<(), BootstrapError>> {
    let rdzv = free_rdzv();
    let timeout = Duration::from_millis(800);
    let handles: Vec<_> = (0..3)
        .map(|r| {
            let i = info(r, 3, &rdzv, "progress-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, timeout)?;
                b.barrier()?;
                if r < 2 {
                    let progress = b.progress();
                    let t0 = Instant::now();
                    while t0.elapsed() < timeout * 3 {
                        if tick {
                            progress.tick();
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                b.barrier()?;
                b.barrier()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn a_long_step_with_progress_is_not_a_timeout() {
    for (r, res) in three_ranks_busy_step(true).into_iter().enumerate() {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

fn a_long_step_without_progress_times_out_naming_the_ranks() {
    for (r, res) in three_ranks_busy_step(false).into_iter().enumerate() {
        let e = res.unwrap_err().to_string();
        assert!(
            e.contains("waiting for ranks 0 and 1: no rank made progress"),
            "rank {r}: {e}"
        );
    }
}

fn different_options_are_named_on_every_rank() {
    let rdzv = free_rdzv();
    let handles: Vec<_> = (0..4)
        .map(|r| {
            let i = info(r, 4, &rdzv, "same-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                b.check_same("options", "sendrecv -b 8 -e 1M --window 64 --check")?;
                let window = if r == 2 { "32" } else { "64" };
                let check = if r >= 2 { "--no-check" } else { "--check" };
                b.check_same(
                    "options",
                    &format!("sendrecv -b 8 -e 1M --window {window} {check}"),
                )?;
                b.barrier()
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let e = h.join().unwrap().unwrap_err();
        assert!(e.is_usage(), "rank {r}: {e}");
        assert_eq!(
            e.to_string(),
            "rank 2 was started with different options than rank 0: `--window 32 --no-check` \
             vs `--window 64 --check`; start every rank with the same options",
            "rank {r}"
        );
    }
}

fn a_rank_that_skips_the_option_check_is_caught() {
    let rdzv = free_rdzv();
    let handles: Vec<_> = (0..2)
        .map(|r| {
            let i = info(r, 2, &rdzv, "skip-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                if r == 1 {
                    b.all_gather(b"x").map(drop)
                } else {
                    b.check_same("options", "a")
                }
            })
        })
        .collect();
    for h in handles {
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("check_same"), "{e}");
    }
}

fn the_watchdog_ends_ranks_stuck_outside_the_bootstrap() {
    let t = FAIL_TIMEOUT.as_secs_f64().to_string();
    let (p, took) = run_launch(
        3,
        "watchdog",
        &[
            (VICTIM, "1"),
            (ACTION, "selfkill"),
            (TIMEOUT, &t),
            (GRACE, "30"),
        ],
    );
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(137), "{err}");
    for r in [0, 2] {
        assert!(
            err.contains(&format!("[rank {r}] efabench: rank {r}: rank 1 on "))
                && err.contains(" died"),
            "rank {r}: {err}"
        );
    }
    assert!(err.contains("ended by the watchdog"), "{err}");
    assert!(
        !err.contains("still running"),
        "launch had to stop them: {err}"
    );
    assert!(took < FAIL_TIMEOUT + SLACK, "took {took:?}");
}

fn pids_in(text: &str) -> Vec<i32> {
    text.lines()
        .filter_map(|l| {
            l.split_once(" pid ")
                .and_then(|(_, p)| p.trim().parse().ok())
        })
        .collect()
}

/// Gone, or a zombie waiting for a parent that does not reap.
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

fn ranks_die_with_a_killed_launcher(sig: Signal, code: Option<i32>) {
    let mut c = command("launcher");
    c.env(RANKS, "3").env(MODE, "poll").env(TIMEOUT, "60");
    let mut p = start(c, None);
    let until = Instant::now() + Duration::from_secs(60);
    let pids = loop {
        let pids = pids_in(&p.stderr());
        if pids.len() == 3 {
            break pids;
        }
        assert!(
            Instant::now() < until,
            "ranks did not start: {}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    signal(&p.child, sig);
    assert!(p.wait_until(Instant::now() + Duration::from_secs(30)));
    assert_eq!(p.status.unwrap().code(), code, "{}", p.stderr());
    let until = Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(|&pid| process_gone(pid)) {
        assert!(
            Instant::now() < until,
            "ranks {pids:?} outlived launch killed by {sig:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ranks_die_with_a_sigkilled_launcher() {
    ranks_die_with_a_killed_launcher(Signal::KILL, None)
}

fn sighup_to_launch_ends_the_ranks() {
    ranks_die_with_a_killed_launcher(Signal::HUP, Some(129))
}

fn a_rank_dead_before_joining_ends_the_job_at_once() {
    // The others would wait 60 s to join and then get 30 s of grace: launch must not wait.
    let (p, took) = run_launch(4, "exit2", &[(VICTIM, "2"), (TIMEOUT, "60"), (GRACE, "30")]);
    let err = p.stderr();
    assert_eq!(p.status.unwrap().code(), Some(2), "{err}");
    assert!(err.contains("had not joined the job yet"), "{err}");
    // The rank's own words come before launch's summary.
    let own = err.find("[rank 2] bad option").expect("rank 2's message");
    let summary = err.find("efabench launch: rank 2 exited").expect("summary");
    assert!(own < summary, "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {err}");
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("worker") => std::process::exit(worker()),
        Ok("launcher") => std::process::exit(launcher_role()),
        _ => {}
    }
    let tests: &[(&str, fn())] = &[
        ("launch_1_rank", launch_1_rank),
        ("launch_2_ranks", launch_2_ranks),
        ("launch_8_ranks", launch_8_ranks),
        ("launch_16_ranks", launch_16_ranks),
        (
            "wrong_token_is_refused_and_the_job_goes_on",
            wrong_token_is_refused_and_the_job_goes_on,
        ),
        (
            "random_and_truncated_bytes_do_not_disturb_the_rendezvous",
            random_and_truncated_bytes_do_not_disturb_the_rendezvous,
        ),
        (
            "idle_connections_do_not_lock_the_last_rank_out",
            idle_connections_do_not_lock_the_last_rank_out,
        ),
        (
            "abort_reaches_every_rank_with_its_reason",
            abort_reaches_every_rank_with_its_reason,
        ),
        (
            "a_rank_that_left_cannot_be_waited_for",
            a_rank_that_left_cannot_be_waited_for,
        ),
        (
            "rendezvous_by_name_and_on_all_interfaces",
            rendezvous_by_name_and_on_all_interfaces,
        ),
        (
            "a_rank_that_never_comes_is_named_by_everyone",
            a_rank_that_never_comes_is_named_by_everyone,
        ),
        (
            "mismatched_collectives_fail_on_every_rank",
            mismatched_collectives_fail_on_every_rank,
        ),
        (
            "sigkill_a_rank_while_others_poll_check",
            sigkill_a_rank_while_others_poll_check,
        ),
        (
            "sigstop_a_rank_while_others_poll_check",
            sigstop_a_rank_while_others_poll_check,
        ),
        (
            "sigstop_rank_0_while_others_wait_in_a_barrier",
            sigstop_rank_0_while_others_wait_in_a_barrier,
        ),
        (
            "launch_ends_the_job_when_a_rank_is_killed",
            launch_ends_the_job_when_a_rank_is_killed,
        ),
        (
            "launch_ends_the_job_when_a_rank_freezes",
            launch_ends_the_job_when_a_rank_freezes,
        ),
        (
            "launch_exits_with_the_first_failing_status",
            launch_exits_with_the_first_failing_status,
        ),
        ("launch_forwards_sigint", launch_forwards_sigint),
        (
            "a_long_step_with_progress_is_not_a_timeout",
            a_long_step_with_progress_is_not_a_timeout,
        ),
        (
            "a_long_step_without_progress_times_out_naming_the_ranks",
            a_long_step_without_progress_times_out_naming_the_ranks,
        ),
        (
            "different_options_are_named_on_every_rank",
            different_options_are_named_on_every_rank,
        ),
        (
            "a_rank_that_skips_the_option_check_is_caught",
            a_rank_that_skips_the_option_check_is_caught,
        ),
        (
            "the_watchdog_ends_ranks_stuck_outside_the_bootstrap",
            the_watchdog_ends_ranks_stuck_outside_the_bootstrap,
        ),
        (
            "ranks_die_with_a_sigkilled_launcher",
            ranks_die_with_a_sigkilled_launcher,
        ),
        (
            "sighup_to_launch_ends_the_ranks",
            sighup_to_launch_ends_the_ranks,
        ),
        (
            "a_rank_dead_before_joining_ends_the_job_at_once",
            a_rank_dead_before_joining_ends_the_job_at_once,
        ),
    ];
    // `cargo test --test ranks -- NAME` runs the tests whose name contains NAME.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<_> = tests
        .iter()
        .filter(|(n, _)| filter.is_empty() || filter.iter().any(|f| n.contains(f.as_str())))
        .collect();
    println!("\nrunning {} tests", selected.len());
    let mut failed = Vec::new();
    for (name, f) in &selected {
        let t0 = Instant::now();
        let ok = std::panic::catch_unwind(f).is_ok();
        println!(
            "test {name} ... {} ({:.1?})",
            if ok { "ok" } else { "FAILED" },
            t0.elapsed()
        );
        if !ok {
            failed.push(*name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        println!("failed: {}", failed.join(", "));
        std::process::exit(1);
    }
}
