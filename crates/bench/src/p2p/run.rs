//! `efabench sendrecv|write|read`: set up, sweep, record.
//!
//! Order of work, chosen so that every failure is reported by every rank with the same cause:
//! check the arguments (all ranks alike, before any connection), find our rank, connect the
//! bootstrap, then do anything that can fail on one rank only (open `-o`, load libfabric, open the
//! endpoint) and, if it fails, abort the job through the bootstrap so the others stop at once.

use std::time::{Duration, Instant};

use efabench_bootstrap::{Bootstrap, BootstrapError, LaunchFlags};
use efabench_record::{Format, JsonlWriter, Record, Sink};
use serde_json::{json, Map};

use super::link::{Link, LinkConfig, LinkError};
use super::protocol::{self, Outcome, Step};
use crate::error::BenchError;
use crate::harness::{Point, Progress, RunInfo};
use crate::options::{CommonArgs, Rails};
use crate::stats::{gbps, mops};
use crate::P2pKind;

/// Options of the point-to-point benchmarks.
#[derive(clap::Args, Debug, Clone)]
pub struct P2pArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Messages in flight in the stream variant (and slots per read round).
    #[arg(long, default_value_t = 64, value_parser = window_arg)]
    pub window: usize,
    /// Variants to run, comma-separated: pingpong, stream.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [Variant::Pingpong, Variant::Stream])]
    pub variant: Vec<Variant>,
}

/// `pingpong` (latency) or `stream` (bandwidth).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    Pingpong,
    Stream,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Pingpong => "pingpong",
            Variant::Stream => "stream",
        }
    }
}

fn window_arg(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1; pass e.g. --window 64".into()),
        Ok(n) if n > 4096 => Err(format!("{n} is too large; at most 4096 messages in flight")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "'{s}' is not a whole number; pass e.g. --window 64"
        )),
    }
}

/// Version and commit of the binary, stamped into every record.
#[derive(Clone, Debug, Default)]
pub struct BuildInfo {
    pub version: String,
    pub git: Option<String>,
}

/// Most bytes one rank keeps per buffer for stream windows; larger messages get fewer slots.
const WINDOW_BYTES: u64 = 64 << 20;

fn bench_name(kind: P2pKind) -> &'static str {
    match kind {
        P2pKind::SendRecv => "sendrecv",
        P2pKind::Write => "write",
        P2pKind::Read => "read",
    }
}

fn from_bootstrap(e: BootstrapError) -> BenchError {
    if e.is_usage() {
        BenchError::usage(e.to_string())
    } else {
        BenchError::failed(e.to_string())
    }
}

/// Run one rank of a point-to-point benchmark. Returns the exit status: 0 clean, 1 when payloads
/// failed verification (the records say where).
pub fn run_p2p(kind: P2pKind, args: P2pArgs, build: BuildInfo) -> Result<i32, BenchError> {
    let c = &args.common;
    let sizes = c.sizes()?;
    let format: Format = c.format.parse().map_err(BenchError::usage)?;
    if let Rails::Count(n) = c.rails {
        if n > 1 {
            return Err(BenchError::usage(format!(
                "--rails {n}: multi-rail point-to-point runs are not built yet; use --rails 1"
            )));
        }
    }
    let flags = LaunchFlags {
        rank: c.rank,
        world: c.world,
        rdzv: c.rdzv.clone(),
        timeout: c.timeout(),
    };
    let info = efabench_bootstrap::detect_from_process_env(&flags).map_err(from_bootstrap)?;
    if info.world < 2 {
        return Err(BenchError::usage(format!(
            "{} needs at least 2 ranks; run `efabench launch -n 2 -- {} ...`, or start it under \
             srun/mpirun, or by hand with --rank/--world/--rdzv",
            bench_name(kind),
            bench_name(kind)
        )));
    }
    let bs = Bootstrap::connect(&info, c.timeout()).map_err(from_bootstrap)?;
    match run_ranked(kind, &args, &sizes, format, &bs, build) {
        Ok(code) => Ok(code),
        Err(e) => {
            // Tell every rank why, so nobody waits for a rank that already gave up.
            bs.abort(&e.to_string());
            Err(e)
        }
    }
}

fn run_ranked(
    kind: P2pKind,
    args: &P2pArgs,
    sizes: &[u64],
    format: Format,
    bs: &Bootstrap,
    build: BuildInfo,
) -> Result<i32, BenchError> {
    let c = &args.common;
    let (rank, world) = (bs.rank(), bs.world());
    let bench = bench_name(kind);

    let mut jsonl = match (&c.output, rank) {
        (Some(path), 0) => {
            Some(JsonlWriter::open(path).map_err(|e| BenchError::usage(e.to_string()))?)
        }
        _ => None,
    };

    // Everyone must agree on the provider: pick it from facts every rank shares.
    let lib = efabench_fabric::load_library(c.libfabric.as_deref())
        .map_err(|e| BenchError::usage(e.to_string()))?;
    let host = efabench_record::hostname();
    let hosts = bs.all_gather(host.as_bytes()).map_err(from_bootstrap)?;
    let one_host = hosts.iter().all(|h| h == host.as_bytes());
    let available =
        efabench_fabric::list_providers().map_err(|e| BenchError::usage(e.to_string()))?;
    let (provider, why) = choose_provider(c.provider.as_deref(), &available, one_host)?;
    if rank == 0 {
        eprintln!("provider: {provider} ({why})");
    }
    // Ranks on one host keep tcp on loopback rather than the first interface.
    let node = (provider.starts_with("tcp") && one_host && c.domain.is_none())
        .then(|| "127.0.0.1".to_string());

    let max = *sizes.iter().max().expect("a sweep has at least one size");
    let buf_bytes = (2 * max).max((args.window as u64 * max).min(WINDOW_BYTES.max(max)));
    let cfg = LinkConfig {
        provider: provider.clone(),
        domain: c.domain.clone(),
        node,
        mem: c.mem.clone(),
        gpu: c.gpu.clone(),
        local_rank: bs.local_rank(),
        buf_bytes: buf_bytes as usize,
        ctrl_slots: 8,
        timeout: c.timeout(),
    };
    let health = || bs.check().map_err(|e| e.to_string());
    let mut link = Link::open(&cfg, &health).map_err(link_to_bench)?;
    let blob = link.local_blob().map_err(link_to_bench)?;
    let blobs = bs.all_gather(&blob).map_err(from_bootstrap)?;
    link.connect(rank, &blobs).map_err(link_to_bench)?;

    let run = RunInfo {
        bench: bench.to_string(),
        world,
        provider: link.provider_name(),
        fabric: link.fabric_name(),
        domains: vec![link.domain_name()],
        libfabric: Some(lib.version.clone()),
        rails: 1,
        mem: c.mem.clone(),
        link_gbps: link.link_gbps(),
        verified: c.verify(),
        host,
        version: build.version,
        git: build.git,
    };
    let mut sink = (rank == 0).then(|| Sink::stdout(format));
    let steps = (args.variant.len() * sizes.len() * (world as usize - 1)) as u64;
    let progress = Progress::new(rank == 0, steps, bench);
    let counters_root = efabench_topology::Root::system();
    let mut total_errors = 0u64;

    for &variant in &args.variant {
        for &size in sizes {
            let slots = ((buf_bytes / size) as usize).max(1);
            let window = match variant {
                Variant::Stream => args.window.min(slots),
                Variant::Pingpong => match kind {
                    P2pKind::Read => args.window.min(slots),
                    _ => 2,
                },
            };
            let (iters, warmup) = match variant {
                Variant::Stream => c.iterations(size, window as u64),
                Variant::Pingpong => c.iterations(size, 1),
            };
            for peer in 1..world {
                let step = Step {
                    size: size as usize,
                    iters,
                    warmup,
                    window,
                    verify: c.verify(),
                    sender: 0,
                    responder: peer,
                };
                let before = (rank == 0)
                    .then(|| efabench_topology::Snapshot::read(&counters_root))
                    .flatten();
                let started = Instant::now();
                let outcome = if rank == 0 {
                    link.set_peer(peer);
                    run_sender(kind, variant, &mut link, &step)
                } else if rank == peer {
                    link.set_peer(0);
                    run_responder(kind, variant, &mut link, &step)
                } else {
                    Ok(Outcome::default())
                };
                let mut outcome = outcome.map_err(link_to_bench)?;
                // The gather doubles as the fence between steps: the responder contributes only
                // after it verified its last payload, so the next step cannot overwrite it.
                let all = bs
                    .gather(&outcome.errors.to_le_bytes())
                    .map_err(from_bootstrap)?;
                if rank != 0 {
                    continue;
                }
                let responder_errors = all
                    .as_ref()
                    .and_then(|v| v.get(peer as usize))
                    .and_then(|b| b.as_slice().try_into().ok())
                    .map(u64::from_le_bytes)
                    .unwrap_or(0);
                let errors = outcome.errors + responder_errors;
                total_errors += errors;
                let counters = before.and_then(|b| {
                    efabench_topology::Snapshot::read(&counters_root).map(|a| b.delta_json(&a))
                });
                let rec = point_record(
                    &run,
                    kind,
                    variant,
                    &step,
                    &mut outcome,
                    errors,
                    counters,
                    started.elapsed(),
                );
                progress.step(format!("{} {}", variant.name(), crate::size::human(size)));
                if let Some(w) = jsonl.as_mut() {
                    w.push(&rec)
                        .map_err(|e| BenchError::failed(e.to_string()))?;
                }
                if let Some(s) = sink.as_mut() {
                    s.push(&rec)
                        .map_err(|e| BenchError::failed(e.to_string()))?;
                }
            }
        }
    }
    progress.finish();
    if let Some(s) = sink {
        s.finish().map_err(|e| BenchError::failed(e.to_string()))?;
    }
    bs.barrier().map_err(from_bootstrap)?;
    if total_errors > 0 {
        eprintln!(
            "efabench: {total_errors} payload words failed verification; the records' `errors` field says where"
        );
        return Ok(1);
    }
    Ok(0)
}

fn run_sender(
    kind: P2pKind,
    variant: Variant,
    link: &mut Link,
    s: &Step,
) -> Result<Outcome, LinkError> {
    match (kind, variant) {
        (P2pKind::SendRecv, Variant::Pingpong) => protocol::sendrecv_pingpong_sender(link, s),
        (P2pKind::SendRecv, Variant::Stream) => protocol::sendrecv_stream_sender(link, s),
        (P2pKind::Write, Variant::Pingpong) => protocol::write_pingpong_sender(link, s),
        (P2pKind::Write, Variant::Stream) => protocol::write_stream_sender(link, s),
        (P2pKind::Read, v) => protocol::read_sender(link, s, v == Variant::Stream),
    }
}

fn run_responder(
    kind: P2pKind,
    variant: Variant,
    link: &mut Link,
    s: &Step,
) -> Result<Outcome, LinkError> {
    match (kind, variant) {
        (P2pKind::SendRecv, Variant::Pingpong) => protocol::sendrecv_pingpong_responder(link, s),
        (P2pKind::SendRecv, Variant::Stream) => protocol::sendrecv_stream_responder(link, s),
        (P2pKind::Write, Variant::Pingpong) => protocol::write_pingpong_responder(link, s),
        (P2pKind::Write, Variant::Stream) => protocol::write_stream_responder(link, s),
        (P2pKind::Read, v) => protocol::read_responder(link, s, v == Variant::Stream),
    }
}

#[allow(clippy::too_many_arguments)]
fn point_record(
    run: &RunInfo,
    kind: P2pKind,
    variant: Variant,
    s: &Step,
    o: &mut Outcome,
    errors: u64,
    counters: Option<serde_json::Value>,
    wall: Duration,
) -> Record {
    let size = s.size as u64;
    let n = o.samples.len() as u64;
    let total_ns = o.samples.total_ns();
    let (lat_kind, divisor, messages) = match (kind, variant) {
        (P2pKind::Read, Variant::Pingpong) => ("post-to-completion", 1.0, n),
        (_, Variant::Pingpong) => ("one-way (round trip / 2)", 2.0, n),
        (_, Variant::Stream) => (
            "per message (window time / window)",
            s.window as f64,
            n * s.window as u64,
        ),
    };
    let lat_us = o.samples.summary_us(divisor);
    // Pingpong: one message in flight, so bandwidth is size over one message's time.
    // Stream: the windows' total time; pingpong: the messages' own (one-way or read) time.
    let busy_ns = match variant {
        Variant::Stream => total_ns,
        Variant::Pingpong => (total_ns as f64 / divisor) as u64,
    };
    let bw = gbps(size * messages, busy_ns);
    let mut extra = Map::new();
    extra.insert("lat_kind".into(), json!(lat_kind));
    extra.insert("window".into(), json!(s.window));
    extra.insert("bw_GBps".into(), json!(bw / 8.0));
    extra.insert(
        "wall_s".into(),
        json!((wall.as_secs_f64() * 1000.0).round() / 1000.0),
    );
    run.record(Point {
        variant: variant.name().to_string(),
        size_bytes: size,
        iters: s.iters,
        warmup: s.warmup,
        peer: Some(s.responder),
        lat_us,
        bw_gbps: bw,
        busbw_gbps: None,
        msg_rate_mops: mops(messages, busy_ns),
        errors,
        counters,
        extra,
    })
}

/// DESIGN.md: `efa` when present, else `shm` when every rank is on this host, else `tcp`.
/// Names match libfabric's, or their first component, so `tcp` finds 1.17's `tcp;ofi_rxm`.
/// Returns the name as libfabric spells it, and why it was chosen.
fn choose_provider(
    asked: Option<&str>,
    available: &[String],
    one_host: bool,
) -> Result<(String, String), BenchError> {
    let find = |p: &str| {
        available
            .iter()
            .find(|a| a.as_str() == p)
            .or_else(|| available.iter().find(|a| a.split(';').next() == Some(p)))
            .cloned()
    };
    if let Some(p) = asked {
        return find(p).map(|name| (name, "asked for with --provider".to_string())).ok_or_else(|| {
            BenchError::usage(format!(
                "provider '{p}' is not offered by the loaded libfabric; available: {}; pick one with --provider",
                available.join(", ")
            ))
        });
    }
    if let Some(efa) = find("efa") {
        return Ok((efa, "EFA is present".into()));
    }
    if one_host {
        if let Some(shm) = find("shm") {
            return Ok((shm, "no EFA; all ranks on this host".into()));
        }
    }
    if let Some(tcp) = find("tcp") {
        let why = if one_host {
            "no EFA and no shm provider"
        } else {
            "no EFA; ranks on several hosts"
        };
        return Ok((tcp, why.into()));
    }
    Err(BenchError::usage(format!(
        "no usable provider: the loaded libfabric offers {}; install the EFA installer or a \
         libfabric with the tcp provider, or name one with --provider",
        available.join(", ")
    )))
}

fn link_to_bench(e: LinkError) -> BenchError {
    e.into_bench()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn provider_defaults_follow_the_design() {
        let all = names(&["efa", "shm", "tcp"]);
        assert_eq!(choose_provider(None, &all, true).unwrap().0, "efa");
        let no_efa = names(&["shm", "tcp", "udp"]);
        assert_eq!(choose_provider(None, &no_efa, true).unwrap().0, "shm");
        assert_eq!(choose_provider(None, &no_efa, false).unwrap().0, "tcp");
        assert_eq!(
            choose_provider(Some("tcp"), &no_efa, true).unwrap().0,
            "tcp"
        );
        let v117 = names(&["tcp;ofi_rxm", "shm", "udp;ofi_rxd"]);
        assert_eq!(
            choose_provider(Some("tcp"), &v117, true).unwrap().0,
            "tcp;ofi_rxm"
        );
        assert_eq!(
            choose_provider(None, &v117, false).unwrap().0,
            "tcp;ofi_rxm"
        );
    }

    #[test]
    fn unknown_provider_lists_the_available_ones() {
        let e = choose_provider(Some("verbs"), &names(&["shm", "tcp"]), true).unwrap_err();
        assert!(e.is_usage());
        assert!(e.to_string().contains("available: shm, tcp"), "{e}");
        assert!(choose_provider(None, &names(&["udp"]), false)
            .unwrap_err()
            .is_usage());
    }

    #[test]
    fn window_must_be_positive() {
        assert!(window_arg("0").is_err());
        assert!(window_arg("x").is_err());
        assert_eq!(window_arg("64"), Ok(64));
    }
}
