//! `efabench counters`: every EFA hardware counter of every device; live rates with `--watch`;
//! or per-NIC deltas around a command (`-- CMD ARGS...`) with a verdict on whether its traffic
//! went over EFA.
//!
//! Around a command the verdict is also the exit status, so that a job can fail on a silent
//! fallback to TCP: the command's own failure status wins; else [`Exit::NoEfaTraffic`] when it
//! moved no byte over EFA, [`Exit::IdleNics`] when fewer NICs carried traffic than
//! `--expect-nics` asks (by default every NIC paired with a GPU, or every NIC on a node without
//! GPUs), naming the idle ones; else 0.
//!
//! Counters are listed from the directories (`efabench_topology::counters`), never from a fixed
//! table, because the set depends on the driver version.

use crate::cmd::topo::{emit, open_root};
use crate::error::CliError;
use crate::exit::Exit;
use efabench_topology::counters::{NicDelta, Snapshot};
use efabench_topology::{Root, Topology};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print JSON instead of tables (one object per line with --watch).
    #[arg(long)]
    pub json: bool,
    /// Directory that stands for / (a fixture tree or a copy of another node's files).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Print rates (Gb/s, packets/s, drops, retransmissions) every SECS seconds.
    #[arg(long, value_name = "SECS", allow_hyphen_values = true)]
    pub watch: Option<f64>,
    /// With --watch: stop after N intervals (default: until interrupted).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub count: Option<u64>,
    /// Write the counters in Prometheus text format (node_exporter's EFA collector names,
    /// `node_amazonefa_<counter>{device,port}`) to FILE, replaced atomically (for node_exporter's
    /// textfile collector: name it `*.prom`), or to stdout with `-`. With --watch, rewritten every
    /// interval.
    #[arg(long, value_name = "FILE|-")]
    pub prometheus: Option<PathBuf>,
    /// With -- CMD: how many NICs must carry traffic, a number or `all` (every NIC paired
    /// with a GPU; every NIC when the node has no GPU). Fewer exits 4, naming the idle NICs.
    #[arg(long, value_name = "N|all", default_value = "all")]
    pub expect_nics: String,
    /// Run this command and print per-NIC counter deltas around it (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// What `--expect-nics` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Every NIC paired with a GPU (every NIC without GPUs).
    All,
    /// At least this many NICs.
    AtLeast(usize),
}

fn parse_expect(s: &str) -> Result<Expect, CliError> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("all") {
        return Ok(Expect::All);
    }
    match t.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(Expect::AtLeast(n)),
        _ => Err(CliError::usage(format!(
            "--expect-nics {}: give a number of NICs (at least 1) or `all`",
            super::topo::shown(s)
        ))),
    }
}

/// The NICs that should carry the command's traffic: those paired with a GPU, or all of them
/// when none is (no GPU on the node, or pairing unknown).
fn expected_nics(root: &Root, deltas: &[NicDelta]) -> Vec<String> {
    let topo = Topology::discover(root);
    let paired: Vec<String> = topo
        .nics
        .iter()
        .filter(|n| !n.gpus.is_empty())
        .map(|n| n.name.clone())
        .filter(|n| deltas.iter().any(|d| &d.name == n))
        .collect();
    if paired.is_empty() {
        deltas.iter().map(|d| d.name.clone()).collect()
    } else {
        paired
    }
}

fn no_counters(root: &Root) -> CliError {
    CliError::usage(format!(
        "no readable EFA hw_counters under {}/sys/class/infiniband (no EFA device, or the efa driver is not loaded); run `efabench doctor`",
        root.dir().display().to_string().trim_end_matches('/')
    ))
}

fn read(root: &Root) -> Result<Snapshot, CliError> {
    Snapshot::read(root).ok_or_else(|| no_counters(root))
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    let root = open_root(&args.root)?;
    if args.count.is_some() && args.watch.is_none() {
        return Err(CliError::usage(
            "--count needs --watch SECS (e.g. --watch 1 --count 10)",
        ));
    }
    if let Some(p) = &args.prometheus {
        if !args.command.is_empty() {
            return Err(CliError::usage(
                "--prometheus and -- CMD cannot be combined; write the metrics with --prometheus FILE [--watch SECS] and run the command separately",
            ));
        }
        if args.json {
            return Err(CliError::usage(
                "--prometheus and --json cannot be combined; pick one output format",
            ));
        }
        check_prometheus_path(p)?;
    }
    if let Some(w) = args.watch {
        if !args.command.is_empty() {
            return Err(CliError::usage(
                "--watch and -- CMD cannot be combined; use one or the other",
            ));
        }
        if !w.is_finite() || w <= 0.0 || w > 86400.0 {
            return Err(CliError::usage(format!(
                "--watch {}: give an interval in seconds, more than 0 and at most 86400 (e.g. --watch 1)",
                super::topo::shown(&w.to_string())
            )));
        }
        if args.count == Some(0) {
            return Err(CliError::usage(
                "--count 0: give at least 1 interval (or leave --count out to run until interrupted)",
            ));
        }
        if let Some(p) = &args.prometheus {
            return watch_prometheus(&root, p, Duration::from_secs_f64(w), args.count);
        }
        return watch(&root, Duration::from_secs_f64(w), args.count, args.json);
    }
    let expect = parse_expect(&args.expect_nics)?;
    if !args.command.is_empty() {
        return wrap(&root, &args.command, args.json, expect);
    }
    let s = read(&root)?;
    if let Some(p) = &args.prometheus {
        write_prometheus(p, &s)?;
        return Ok(Exit::Ok);
    }
    if args.json {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&s.to_json()).unwrap_or_default()
        ));
    } else {
        emit(&render_snapshot(&s));
    }
    Ok(Exit::Ok)
}

/// Counters as a matrix: one row per counter, one column per NIC, in pages of 6 NICs.
fn render_snapshot(s: &Snapshot) -> String {
    let mut out = String::new();
    for page in s.nics.chunks(6) {
        let mut rows: Vec<(String, Vec<String>)> = Vec::new();
        for (scope, pick) in [("port", true), ("device", false)] {
            let names: BTreeSet<&String> = page
                .iter()
                .flat_map(|n| if pick { n.port.keys() } else { n.device.keys() })
                .collect();
            for name in names {
                let vals = page
                    .iter()
                    .map(|n| {
                        let m = if pick { &n.port } else { &n.device };
                        m.get(name)
                            .map(|v| v.to_string())
                            .unwrap_or_else(|| "-".into())
                    })
                    .collect();
                rows.push((format!("{scope}:{name}"), vals));
            }
        }
        let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(7);
        let widths: Vec<usize> = (0..page.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r.1[i].len())
                    .max()
                    .unwrap_or(0)
                    .max(page[i].name.len())
            })
            .collect();
        out.push_str(&format!("{:<w0$}", "COUNTER"));
        for (i, n) in page.iter().enumerate() {
            out.push_str(&format!("  {:>w$}", n.name, w = widths[i]));
        }
        out.push('\n');
        for (name, vals) in &rows {
            out.push_str(&format!("{name:<w0$}"));
            for (i, v) in vals.iter().enumerate() {
                out.push_str(&format!("  {v:>w$}", w = widths[i]));
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "{} EFA device(s); values are cumulative since the driver loaded\n",
        s.nics.len()
    ));
    out
}

/// `-` (stdout) or a file whose directory exists and that is not itself a directory.
fn check_prometheus_path(p: &Path) -> Result<(), CliError> {
    if p.as_os_str() == "-" {
        return Ok(());
    }
    let shown = super::topo::shown(&p.display().to_string());
    if p.is_dir() {
        return Err(CliError::usage(format!(
            "--prometheus {shown} is a directory; give a file in it (e.g. {shown}/efa.prom for node_exporter's textfile collector) or - for stdout"
        )));
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(CliError::usage(format!(
            "--prometheus {shown}: directory {} does not exist; create it or give another path (- for stdout)",
            super::topo::shown(&dir.display().to_string())
        )));
    }
    Ok(())
}

/// The snapshot in Prometheus text format to stdout (`-`) or atomically to a file.
fn write_prometheus(p: &Path, s: &Snapshot) -> Result<bool, CliError> {
    let text = super::prometheus::render(s);
    if p.as_os_str() == "-" {
        return Ok(emit(&text));
    }
    super::prometheus::write_atomically(p, &text).map_err(|e| {
        CliError::usage(format!(
            "--prometheus {}: cannot write it: {e}; give a writable path (- for stdout)",
            super::topo::shown(&p.display().to_string())
        ))
    })?;
    Ok(true)
}

fn watch_prometheus(
    root: &Root,
    p: &Path,
    every: Duration,
    count: Option<u64>,
) -> Result<Exit, CliError> {
    let mut i = 0u64;
    loop {
        let s = read(root)?;
        if !write_prometheus(p, &s)? {
            return Ok(Exit::Ok);
        }
        i += 1;
        if count.is_some_and(|c| i >= c) {
            return Ok(Exit::Ok);
        }
        std::thread::sleep(every);
    }
}

fn delta_json(d: &NicDelta, later: &Snapshot) -> Value {
    let n = later.nics.iter().find(|n| n.name == d.name);
    let r = d.rates();
    json!({
        "name": d.name,
        "port": n.map(|n| json!(n.port)).unwrap_or(Value::Null),
        "device": n.map(|n| json!(n.device)).unwrap_or(Value::Null),
        "delta": d.to_map(),
        "seconds": d.seconds,
        "rates": r,
    })
}

fn watch(
    root: &Root,
    every: Duration,
    count: Option<u64>,
    as_json: bool,
) -> Result<Exit, CliError> {
    let mut prev = read(root)?;
    let mut i = 0u64;
    loop {
        std::thread::sleep(every);
        let cur = read(root)?;
        let deltas = prev.delta(&cur);
        if as_json {
            let nics: Vec<Value> = deltas.iter().map(|d| delta_json(d, &cur)).collect();
            if !emit(&format!("{}\n", json!({ "interval": i, "nics": nics }))) {
                return Ok(Exit::Ok);
            }
        } else {
            let mut rows = vec![[
                "NIC",
                "TX Gb/s",
                "RX Gb/s",
                "TX pkt/s",
                "RX pkt/s",
                "rx_drops",
                "retrans_pkts",
                "errors",
            ]
            .map(String::from)
            .to_vec()];
            let (mut tx, mut rx) = (0.0, 0.0);
            for d in &deltas {
                let r = d.rates();
                tx += r.tx_gbps;
                rx += r.rx_gbps;
                rows.push(vec![
                    d.name.clone(),
                    format!("{:.2}", r.tx_gbps),
                    format!("{:.2}", r.rx_gbps),
                    format!("{:.0}", r.tx_pps),
                    format!("{:.0}", r.rx_pps),
                    r.rx_drops.to_string(),
                    r.retrans_pkts.to_string(),
                    r.errors.to_string(),
                ]);
            }
            rows.push(vec![
                "total".into(),
                format!("{tx:.2}"),
                format!("{rx:.2}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
            let secs = deltas.first().map(|d| d.seconds).unwrap_or(0.0);
            let text = format!("interval {} ({secs:.2}s)\n{}\n", i + 1, right_table(&rows));
            if !emit(&text) {
                return Ok(Exit::Ok);
            }
        }
        prev = cur;
        i += 1;
        if count.is_some_and(|c| i >= c) {
            return Ok(Exit::Ok);
        }
    }
}

fn right_table(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map(|r| r.len()).unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map(|s| s.len()).unwrap_or(0))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if i == 0 {
                    format!("{s:<w$}", w = widths[0])
                } else {
                    format!("{s:>w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The command line for the report, cut to 100 characters.
fn short_command(cmd: &[String]) -> String {
    let full = cmd.join(" ");
    if full.chars().count() <= 100 {
        full
    } else {
        format!("{}...", full.chars().take(97).collect::<String>())
    }
}

fn human_bytes(b: u64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}

fn wrap(root: &Root, cmd: &[String], as_json: bool, expect: Expect) -> Result<Exit, CliError> {
    let before = read(root)?;
    let status = std::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .status()
        .map_err(|e| {
            CliError::usage(format!(
                "cannot run `{}`: {e}; give a command on PATH or a path to an executable after --",
                super::topo::shown(&cmd[0])
            ))
        })?;
    let child = Exit::of_child(status);
    let code = child.code();
    let after = read(root)?;
    let deltas = before.delta(&after);
    let used: Vec<&NicDelta> = deltas.iter().filter(|d| d.traffic_bytes() > 0).collect();
    let total: u64 = used
        .iter()
        .map(|d| d.traffic_bytes())
        .fold(0, u64::saturating_add);
    let rdma: u64 = deltas
        .iter()
        .map(|d| {
            d.get("rdma_write_bytes")
                .saturating_add(d.get("rdma_read_bytes"))
        })
        .fold(0, u64::saturating_add);
    let errors: Vec<String> = deltas
        .iter()
        .flat_map(|d| {
            d.errors()
                .into_iter()
                .map(move |(k, v)| format!("{}:{k}+{v}", d.name))
        })
        .collect();
    let secs = deltas.first().map(|d| d.seconds).unwrap_or(0.0);
    let expected = expected_nics(root, &deltas);
    let idle: Vec<String> = expected
        .iter()
        .filter(|n| !used.iter().any(|d| &&d.name == n))
        .cloned()
        .collect();
    let (wanted, short) = match expect {
        Expect::All => (expected.len(), !idle.is_empty()),
        Expect::AtLeast(n) => (n, used.len() < n),
    };
    let exit = if code != 0 {
        child
    } else if total == 0 {
        Exit::NoEfaTraffic
    } else if short {
        Exit::IdleNics
    } else {
        Exit::Ok
    };
    let status = exit.code();
    let nic_verdict = (total > 0 && short).then(|| {
        format!(
            "fewer NICs than expected carried traffic: {} of {wanted} expected ({}); idle: {}",
            used.len(),
            match expect {
                Expect::All => "--expect-nics all: the NICs paired with GPUs, or all without GPUs",
                Expect::AtLeast(_) => "--expect-nics",
            },
            if idle.is_empty() {
                "-".to_string()
            } else {
                idle.join(", ")
            }
        )
    });
    let verdict = if total > 0 {
        format!(
            "traffic went over EFA: {} on {} of {} NIC(s){}",
            human_bytes(total),
            used.len(),
            deltas.len(),
            if rdma > 0 {
                format!(", {} by RDMA read/write", human_bytes(rdma))
            } else {
                String::new()
            }
        )
    } else {
        "no EFA traffic while the command ran: it used TCP, NVLink or shared memory, or did not communicate off-node (for NCCL: check `efabench doctor --nccl-log`)".to_string()
    };
    if as_json {
        let nics: Vec<Value> = deltas.iter().map(|d| delta_json(d, &after)).collect();
        emit(&format!(
            "{}\n",
            json!({
                "command": cmd,
                "exit_code": code,
                "seconds": secs,
                "verdict": {
                    "efa_traffic": total > 0,
                    "bytes": total,
                    "rdma_bytes": rdma,
                    "nics_used": used.iter().map(|d| d.name.clone()).collect::<Vec<_>>(),
                    "errors": errors,
                    "summary": verdict,
                    "expected_nics": expected,
                    "idle_nics": idle,
                    "enough_nics": !short,
                    "nics_summary": nic_verdict,
                },
                "status": status,
                "nics": nics,
            })
        ));
    } else {
        let mut out = String::new();
        out.push_str(&format!(
            "\nefabench counters: `{}` exited with {code} after {secs:.2}s\n",
            short_command(cmd)
        ));
        let mut rows = vec![[
            "NIC",
            "TX bytes",
            "RX bytes",
            "TX pkts",
            "RX pkts",
            "RDMA wr bytes",
            "RDMA rd bytes",
            "rx_drops",
            "retrans_pkts",
        ]
        .map(String::from)
        .to_vec()];
        for d in &deltas {
            if d.traffic_bytes() == 0 && d.errors().is_empty() {
                continue;
            }
            rows.push(vec![
                d.name.clone(),
                d.get("tx_bytes").to_string(),
                d.get("rx_bytes").to_string(),
                d.get("tx_pkts").to_string(),
                d.get("rx_pkts").to_string(),
                d.get("rdma_write_bytes").to_string(),
                d.get("rdma_read_bytes").to_string(),
                d.get("rx_drops").to_string(),
                d.get("retrans_pkts").to_string(),
            ]);
        }
        if rows.len() > 1 {
            out.push_str(&right_table(&rows));
        }
        let idle = deltas.len() - (rows.len() - 1);
        if idle > 0 {
            out.push_str(&format!(
                "{idle} NIC(s) without traffic or errors not shown\n"
            ));
        }
        out.push_str(&format!("verdict: {verdict}\n"));
        if let Some(v) = &nic_verdict {
            out.push_str(&format!("verdict: {v}\n"));
        }
        let why = match exit {
            Exit::NoEfaTraffic => Some("no EFA traffic"),
            Exit::IdleNics => Some("idle NICs"),
            _ => None,
        };
        if let Some(why) = why {
            out.push_str(&format!("exit status {status}: {why}\n"));
        }
        if !errors.is_empty() {
            out.push_str(&format!(
                "errors rose during the command: {}\n",
                errors.join(", ")
            ));
        }
        emit(&out);
    }
    Ok(exit)
}
