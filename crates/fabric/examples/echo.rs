//! Echo over libfabric between two processes: the Rust counterpart of Libefaxx's `echo` and
//! `bootstrap` experiments, using only the public API of `efabench-fabric`.
//!
//! The program starts a copy of itself as the server, with a pipe in each direction. Over the
//! pipes the two exchange their fabric addresses and memory-region descriptors (the "bootstrap");
//! everything after that goes over the fabric:
//! 1. the client sends `--inflight` messages at once, the server echoes each one back, and the
//!    client checks every echo;
//! 2. the client RMA-writes `--inflight` chunks into the server's region at once, then a
//!    `write_data` whose remote CQ data tells the server to check them; the server answers with a
//!    message saying how many chunks it verified;
//! 3. the client RMA-reads the server's region back and checks it.
//!
//! Run (tcp on loopback, or shm; `--libfabric PATH` or `EFABENCH_LIBFABRIC` picks the library):
//! ```text
//! cargo run -p efabench-fabric --example echo -- --provider tcp --inflight 8
//! cargo run -p efabench-fabric --example echo -- --provider shm
//! ```
//! Exit status 0 on success, 1 on a failed check or fabric error, 2 on bad arguments or a
//! missing libfabric.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_fabric::{
    first_provider, join_all, load_library, Error, Executor, Flags, Hints, HostBuffer, Op,
    OpFuture, Peer, Rail, RailConfig, RegionId, RemoteRegion,
};

struct Opts {
    provider: String,
    libfabric: Option<PathBuf>,
    inflight: usize,
    size: usize,
    server: bool,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        provider: "tcp".into(),
        libfabric: None,
        inflight: 8,
        size: 4096,
        server: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--provider" => o.provider = val("--provider")?,
            "--libfabric" => o.libfabric = Some(PathBuf::from(val("--libfabric")?)),
            "--inflight" => {
                o.inflight = val("--inflight")?
                    .parse()
                    .map_err(|_| "--inflight takes a number".to_string())?
            }
            "--size" => {
                o.size = val("--size")?
                    .parse()
                    .map_err(|_| "--size takes a number of bytes".to_string())?
            }
            "--server" => o.server = true,
            "-h" | "--help" => {
                return Err(
                    "usage: echo [--provider tcp|shm|efa] [--libfabric PATH] [--inflight N] [--size BYTES]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    if o.inflight == 0 || o.inflight > 512 || o.size < 32 || o.size > (1 << 22) {
        return Err("--inflight must be 1..=512 and --size 32..=4194304".into());
    }
    Ok(o)
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("echo: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = load_library(o.libfabric.as_deref()) {
        eprintln!("echo: {e}");
        std::process::exit(2);
    }
    let r = if o.server { server(&o) } else { client(&o) };
    if let Err(e) = r {
        eprintln!("echo{}: {e}", if o.server { " server" } else { "" });
        std::process::exit(1);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err("odd-length hex from the peer".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| "bad hex from the peer".into()))
        .collect()
}

fn read_field(r: &mut impl BufRead, name: &str) -> Result<Vec<u8>, String> {
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    let v = line
        .trim()
        .strip_prefix(name)
        .and_then(|s| s.strip_prefix(' '))
        .ok_or(format!("expected {name} from the peer, got {line:?}"))?;
    unhex(v)
}

fn open(o: &Opts) -> Result<(Rail, Arc<HostBuffer>, efabench_fabric::RegionId), Error> {
    let mut hints = Hints::provider(&o.provider);
    if o.provider == "tcp" {
        hints.node = Some("127.0.0.1".into());
    }
    let info = first_provider(&hints)?;
    let rail = Rail::open(&info, &RailConfig::default())?;
    let buf = Arc::new(HostBuffer::new(o.inflight * o.size)?);
    let region = rail.register(buf.clone())?;
    Ok((rail, buf, region))
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

fn pattern(chunk: usize, i: usize) -> u8 {
    (chunk * 131 + i * 7 + 1) as u8
}

fn client(o: &Opts) -> Result<(), String> {
    let lib = load_library(None).map_err(|e| e.to_string())?;
    let (rail, buf, region) = open(o).map_err(|e| e.to_string())?;
    let info = rail.info();
    println!(
        "libfabric {} ({}), API {}; provider {} fabric {} domain {} mr_mode {:?}",
        lib.version,
        lib.path.display(),
        lib.api_version,
        info.provider,
        info.fabric,
        info.domain,
        info.mr_mode_names()
    );
    // Bootstrap: start the server and swap addresses and region descriptors over pipes.
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(std::env::args().skip(1))
        .arg("--server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the server process: {e}"))?;
    let mut to = child.stdin.take().expect("piped");
    let mut from = BufReader::new(child.stdout.take().expect("piped"));
    let me = rail.address().map_err(|e| e.to_string())?;
    let mine = rail.remote_region(region).map_err(|e| e.to_string())?;
    writeln!(to, "ADDR {}\nREGION {}", hex(&me), hex(&mine.to_bytes()))
        .map_err(|e| e.to_string())?;
    let peer_addr = read_field(&mut from, "ADDR")?;
    let remote =
        RemoteRegion::from_bytes(&read_field(&mut from, "REGION")?).map_err(|e| e.to_string())?;
    let peer = rail.insert_peer(&peer_addr).map_err(|e| e.to_string())?;
    println!(
        "client address {} ; server address {}",
        hex(&me),
        hex(&peer_addr)
    );
    println!(
        "server region: addr {:#x} key {:#x} len {}",
        remote.addr, remote.key, remote.len
    );

    let ex = Executor::for_rail(&rail);
    let (n, sz) = (o.inflight, o.size);
    let e = |x: Error| x.to_string();

    // 1. Messages: n sends and n receives for the echoes, all in flight together. The echoes
    //    land in the second half of each slot.
    let half = sz / 2;
    for i in 0..n {
        let mut msg = format!("hello world #{i}").into_bytes();
        msg.resize(half, 0);
        buf.write_at(i * sz, &msg).map_err(e)?;
    }
    let t0 = Instant::now();
    // Receives and sends go into one join_all: all are `OpFuture`s, posted on the first poll.
    let ops = (0..n)
        .map(|i| recv(&rail, region, i * sz + half, half))
        .chain((0..n).map(|i| send(&rail, peer, region, i * sz, half)));
    let mut results = ex.block_on(join_all(ops), deadline()).map_err(e)?;
    let rs = results.drain(..n).collect::<Vec<_>>();
    for s in results {
        s.map_err(e)?;
    }
    let mut echoed = Vec::new();
    for (i, r) in rs.into_iter().enumerate() {
        r.map_err(e)?;
        let got = buf.to_vec(i * sz + half, half).map_err(e)?;
        let text =
            String::from_utf8_lossy(&got[..got.iter().position(|&b| b == 0).unwrap_or(half)])
                .into_owned();
        echoed.push(text);
    }
    echoed.sort();
    let mut want: Vec<String> = (0..n).map(|i| format!("hello world #{i}")).collect();
    want.sort();
    if echoed != want {
        return Err(format!("echoes {echoed:?} differ from the messages sent"));
    }
    for m in &echoed {
        println!("echo msg: {m}");
    }
    println!(
        "{n} messages of {half} bytes echoed in {:.1} us (the first exchange includes connection setup)",
        t0.elapsed().as_secs_f64() * 1e6
    );

    // 2. RMA writes, all in flight, then write_data to tell the server to check.
    for c in 0..n {
        let chunk: Vec<u8> = (0..sz).map(|i| pattern(c, i)).collect();
        buf.write_at(c * sz, &chunk).map_err(e)?;
    }
    let status = recv(&rail, region, 0, 64);
    let t0 = Instant::now();
    let writes =
        join_all((0..n).map(|c| write(&rail, peer, region, c * sz, sz, &remote, (c * sz) as u64)));
    for w in ex.block_on(writes, deadline()).map_err(e)? {
        w.map_err(e)?;
    }
    ex.block_on(
        write_data(&rail, peer, region, 0, 0, &remote, 0, n as u64),
        deadline(),
    )
    .map_err(e)?
    .map_err(e)?;
    let dt = t0.elapsed();
    // The status message lands at offset 0, which we no longer need.
    let st = ex.block_on(status, deadline()).map_err(e)?.map_err(e)?;
    let text = String::from_utf8_lossy(&buf.to_vec(0, st.len).map_err(e)?)
        .trim_end_matches('\0')
        .to_string();
    println!(
        "{n} RMA writes of {sz} bytes + write_data in {:.1} us; server says: {text}",
        dt.as_secs_f64() * 1e6
    );
    if !text.starts_with("verified") {
        return Err(format!("server could not verify the writes: {text}"));
    }

    // 3. RMA read of the whole server region back into ours.
    buf.fill(0, n * sz, 0).map_err(e)?;
    let reads =
        join_all((0..n).map(|c| read(&rail, peer, region, c * sz, sz, &remote, (c * sz) as u64)));
    for r in ex.block_on(reads, deadline()).map_err(e)? {
        r.map_err(e)?;
    }
    for c in 0..n {
        let got = buf.to_vec(c * sz, sz).map_err(e)?;
        if let Some(i) = (0..sz).find(|&i| got[i] != pattern(c, i)) {
            return Err(format!(
                "RMA read: chunk {c} byte {i} is {} instead of {}",
                got[i],
                pattern(c, i)
            ));
        }
    }
    println!("{n} RMA reads of {sz} bytes checked");

    // Goodbye over the fabric so the server stays progressed until we are done.
    buf.write_at(0, b"bye").map_err(e)?;
    let ack = recv(&rail, region, 64, 64);
    ex.block_on(send(&rail, peer, region, 0, 3), deadline())
        .map_err(e)?
        .map_err(e)?;
    ex.block_on(ack, deadline()).map_err(e)?.map_err(e)?;
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("server exited with {status}"));
    }
    println!("Echo successful!");
    Ok(())
}

fn server(o: &Opts) -> Result<(), String> {
    let (rail, buf, region) = open(o).map_err(|e| e.to_string())?;
    let stdin = std::io::stdin();
    let mut from = stdin.lock();
    let peer_addr = read_field(&mut from, "ADDR")?;
    let _client_region =
        RemoteRegion::from_bytes(&read_field(&mut from, "REGION")?).map_err(|e| e.to_string())?;
    let mine = rail.remote_region(region).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout();
    writeln!(
        out,
        "ADDR {}\nREGION {}",
        hex(&rail.address().map_err(|e| e.to_string())?),
        hex(&mine.to_bytes())
    )
    .and_then(|_| out.flush())
    .map_err(|e| e.to_string())?;
    let peer = rail.insert_peer(&peer_addr).map_err(|e| e.to_string())?;
    let ex = Executor::for_rail(&rail);
    let (n, sz) = (o.inflight, o.size);
    let half = sz / 2;
    let e = |x: Error| x.to_string();

    // 1. Echo: receive n messages, send each back from where it landed.
    let rs = ex
        .block_on(
            join_all((0..n).map(|i| recv(&rail, region, i * sz, half))),
            deadline(),
        )
        .map_err(e)?;
    let mut lens = Vec::new();
    for r in rs {
        lens.push(r.map_err(e)?.len);
    }
    let sends = join_all((0..n).map(|i| send(&rail, peer, region, i * sz, lens[i])));
    for s in ex.block_on(sends, deadline()).map_err(e)? {
        s.map_err(e)?;
    }
    eprintln!("[server] echoed {n} messages");

    // 2. Wait for the write_data, check the chunks, report.
    let c = ex.block_on(rail.remote_data(), deadline()).map_err(e)?;
    let mut bad = None;
    for ch in 0..c.data as usize {
        let got = buf.to_vec(ch * sz, sz).map_err(e)?;
        if let Some(i) = (0..sz).find(|&i| got[i] != pattern(ch, i)) {
            bad = Some(format!(
                "chunk {ch} byte {i} is {} instead of {}",
                got[i],
                pattern(ch, i)
            ));
            break;
        }
    }
    let msg = match bad {
        None => format!("verified {} chunks", c.data),
        Some(b) => format!("mismatch: {b}"),
    };
    eprintln!("[server] remote CQ data {} -> {msg}", c.data);
    // Send the status from a scratch copy so the client can still read the chunks.
    let status = Arc::new(HostBuffer::new(128).map_err(e)?);
    status.write_at(0, msg.as_bytes()).map_err(e)?;
    let sreg = rail.register(status.clone()).map_err(e)?;
    let bye = recv(&rail, sreg, 64, 64);
    ex.block_on(send(&rail, peer, sreg, 0, msg.len()), deadline())
        .map_err(e)?
        .map_err(e)?;

    // 3. The client reads our region; we only progress until its goodbye.
    ex.block_on(bye, deadline()).map_err(e)?.map_err(e)?;
    status.write_at(0, b"ack").map_err(e)?;
    ex.block_on(send(&rail, peer, sreg, 0, 3), deadline())
        .map_err(e)?
        .map_err(e)?;
    eprintln!("[server] done");
    Ok(())
}

// Shorthands over `Rail::post_async` for the operations this example runs.

fn recv(rail: &Rail, region: RegionId, off: usize, len: usize) -> OpFuture<'_> {
    let local = region.range(off, len);
    rail.post_async(Op::Recv { local, ctx: 0 })
}

fn send(rail: &Rail, peer: Peer, region: RegionId, off: usize, len: usize) -> OpFuture<'_> {
    rail.post_async(Op::Send {
        peer,
        local: region.range(off, len),
        data: None,
        flags: Flags::NONE,
        ctx: 0,
    })
}

fn write<'r>(
    rail: &'r Rail,
    peer: Peer,
    region: RegionId,
    off: usize,
    len: usize,
    remote: &RemoteRegion,
    remote_off: u64,
) -> OpFuture<'r> {
    write_op(rail, peer, region.range(off, len), remote, remote_off, None)
}

#[allow(clippy::too_many_arguments)]
fn write_data<'r>(
    rail: &'r Rail,
    peer: Peer,
    region: RegionId,
    off: usize,
    len: usize,
    remote: &RemoteRegion,
    remote_off: u64,
    data: u64,
) -> OpFuture<'r> {
    write_op(
        rail,
        peer,
        region.range(off, len),
        remote,
        remote_off,
        Some(data),
    )
}

fn write_op<'r>(
    rail: &'r Rail,
    peer: Peer,
    local: efabench_fabric::Local,
    remote: &RemoteRegion,
    remote_off: u64,
    data: Option<u64>,
) -> OpFuture<'r> {
    rail.post_async(Op::Write {
        peer,
        local,
        remote: remote.at(remote_off),
        data,
        flags: Flags::NONE,
        ctx: 0,
    })
}

fn read<'r>(
    rail: &'r Rail,
    peer: Peer,
    region: RegionId,
    off: usize,
    len: usize,
    remote: &RemoteRegion,
    remote_off: u64,
) -> OpFuture<'r> {
    rail.post_async(Op::Read {
        peer,
        local: region.range(off, len),
        remote: remote.at(remote_off),
        ctx: 0,
    })
}
