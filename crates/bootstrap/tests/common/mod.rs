//! What the multi-process tests of the rendezvous and the launcher share (`ranks_*.rs`), with
//! real processes on loopback.
//!
//! Failure detection can only be tested with processes that really die or freeze, so every test
//! binary plays three parts, chosen by `EFABENCH_TEST_ROLE`: without it, it is the test driver;
//! with `worker` it is one rank; with `launcher` it is `efabench launch` (the library's
//! launcher, starting this same binary as its ranks). The driver is [`main`] (no libtest
//! harness) so that the re-executed copies never run the tests themselves.
//!
//! Timing assertions are only generous upper bounds on failure detection ("within the timeout
//! plus a few seconds"): never a timed assertion on how fast things work.
// Each test binary uses part of this module.
#![allow(dead_code)]
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use efabench_bootstrap::launcher::{launch, LaunchOptions};
use efabench_bootstrap::{
    detect_from_process_env, Bootstrap, BootstrapError, LaunchFlags, RankInfo,
};
use rustix::process::{Pid, Signal};

pub const ROLE: &str = "EFABENCH_TEST_ROLE";
pub const MODE: &str = "EFABENCH_TEST_MODE";
pub const VICTIM: &str = "EFABENCH_TEST_VICTIM";
pub const ACTION: &str = "EFABENCH_TEST_ACTION";
pub const TIMEOUT: &str = "EFABENCH_TEST_TIMEOUT";
pub const RANKS: &str = "EFABENCH_TEST_RANKS";
pub const GRACE: &str = "EFABENCH_TEST_GRACE";

/// Bootstrap timeout of the worker ranks in the failure tests.
pub const FAIL_TIMEOUT: Duration = Duration::from_secs(3);
/// "A few seconds" on top of the timeout, generous for a loaded 2-core CI machine.
pub const SLACK: Duration = Duration::from_secs(12);

pub fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn env_secs(name: &str, default: f64) -> Duration {
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
pub fn blob(i: u32) -> Vec<u8> {
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

pub fn collectives(b: &Bootstrap) -> Result<i32, BootstrapError> {
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
pub fn wait_for_failure(b: &Bootstrap, mode: &str) -> i32 {
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

pub fn worker() -> i32 {
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

pub fn launcher_role() -> i32 {
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

pub fn exe() -> PathBuf {
    std::env::current_exe().expect("current_exe")
}

/// A command for this binary with no launcher variables from the outside world.
pub fn command(role: &str) -> Command {
    let mut c = Command::new(exe());
    for (k, _) in std::env::vars() {
        if efabench_bootstrap::detect::is_launcher_var(&k) {
            c.env_remove(&k);
        }
    }
    c.env(ROLE, role);
    c
}

pub struct Proc {
    pub child: Child,
    pub stdout: Arc<Mutex<String>>,
    pub stderr: Arc<Mutex<String>>,
    pub status: Option<ExitStatus>,
}

/// Start a process whose stdout/stderr are collected; `ready` gets a message per stdout line.
pub fn start(mut cmd: Command, ready: Option<mpsc::Sender<String>>) -> Proc {
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
    pub fn wait_until(&mut self, deadline: Instant) -> bool {
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
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
    pub fn stdout(&self) -> String {
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
pub fn signal(child: &Child, sig: Signal) {
    let pid = Pid::from_raw(child.id() as i32).expect("a child pid is positive");
    rustix::process::kill_process(pid, sig).expect("kill");
}

pub fn free_rdzv() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Run the launcher role to completion (bounded) and return it.
pub fn run_launch(n: u32, mode: &str, extra: &[(&str, &str)]) -> (Proc, Duration) {
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
pub fn start_ranks(n: u32, mode: &str, victim: u32, timeout: Duration) -> Vec<Proc> {
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
pub fn expect_others_fail(
    procs: &mut [Proc],
    victim: u32,
    t0: Instant,
    bound: Duration,
    words: &str,
) {
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

pub fn info(rank: u32, world: u32, rdzv: &str, token: &str) -> RankInfo {
    RankInfo {
        rank,
        world,
        local_rank: rank,
        rdzv: Some(rdzv.into()),
        token: Some(token.into()),
        source: "test",
    }
}

/// The test binary's `main`: a rank or a launcher when `EFABENCH_TEST_ROLE` says so, else the
/// driver, which runs `tests` one after the other and exits 1 if any failed.
pub fn main(tests: &[(&str, fn())]) {
    match std::env::var(ROLE).as_deref() {
        Ok("worker") => std::process::exit(worker()),
        Ok("launcher") => std::process::exit(launcher_role()),
        _ => {}
    }
    // `cargo test --test ranks_launch -- NAME` runs the tests whose name contains NAME.
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
