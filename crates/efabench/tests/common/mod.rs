//! What the integration tests share: real ranks over loopback started by hand
//! (`--rank/--world/--rdzv`, the way a user runs efabench on two hosts without a launcher), their
//! output, and their records checked against the schema.
// Each test file is its own crate and uses part of this module.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_efabench");

/// A port nobody listens on now (the rendezvous of one job).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh, empty directory for one test of this process.
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("efabench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Rank `r` of `world`, meeting at the rendezvous on `port`, with extra environment.
pub fn rank(r: u32, world: u32, port: u16, args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut c = Command::new(BIN);
    c.args(args)
        .args(["--rank", &r.to_string(), "--world", &world.to_string()])
        .args(["--rdzv", &format!("127.0.0.1:{port}")])
        .env("EFABENCH_JOB_TOKEN", format!("test-{port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("start efabench")
}

/// Runs `world` ranks of `args` to the end; every rank's output.
pub fn job(world: u32, args: &[&str]) -> Vec<Output> {
    job_env(world, args, &[], &[])
}

/// Like [`job`]; `env` goes to every rank, `env1` to rank 1 only (a fault on one rank).
pub fn job_env(
    world: u32,
    args: &[&str],
    env: &[(&str, &str)],
    env1: &[(&str, &str)],
) -> Vec<Output> {
    let port = free_port();
    let kids: Vec<Child> = (0..world)
        .map(|r| {
            let mut e = env.to_vec();
            if r == 1 {
                e.extend_from_slice(env1);
            }
            rank(r, world, port, args, &e)
        })
        .collect();
    kids.into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect()
}

/// Every record of a records file, each validated against the schema.
pub fn records(path: &Path) -> Vec<efabench_report::Record> {
    std::fs::read_to_string(path)
        .expect("records file")
        .lines()
        .map(|l| efabench_report::validate_line(l).expect("record validates against the schema"))
        .collect()
}

/// Fails the test unless every rank exited 0, with their output.
pub fn all_ok(outs: &[Output], what: &str) {
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "{what}: rank {r} failed ({:?}):\n{}\n{}",
            o.status,
            text(&o.stdout),
            text(&o.stderr)
        );
    }
}
pub mod netns;

/// The set of keys of every record of a JSON Lines file: nested object keys dotted
/// (`lat_us.p99`), keys of objects inside arrays under `[]` (`per_rail[].bytes`). `counters` is
/// kept as one key: its contents name this machine's NICs and counters.
pub fn record_keys(path: &Path) -> std::collections::BTreeSet<String> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.insert(key.clone());
                    if key != "counters" {
                        walk(&key, v, out);
                    }
                }
            }
            serde_json::Value::Array(a) => {
                for x in a.iter().filter(|x| x.is_object()) {
                    walk(&format!("{prefix}[]"), x, out);
                }
            }
            _ => {}
        }
    }
    let mut keys = std::collections::BTreeSet::new();
    for line in std::fs::read_to_string(path).expect("records file").lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a record is JSON");
        walk("", &v, &mut keys);
    }
    keys
}

/// Fails unless `keys` equal the golden set `tests/golden/<name>.keys` (one key a line, sorted),
/// naming the keys that appeared and disappeared. `EFABENCH_BLESS=1` writes the file instead
/// (only when a record's fields were meant to change; `docs/records.md` must say so too).
pub fn assert_golden_keys(name: &str, keys: &std::collections::BTreeSet<String>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.keys"));
    let now: String = keys.iter().map(|k| format!("{k}\n")).collect();
    if std::env::var_os("EFABENCH_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; write it with EFABENCH_BLESS=1 once the keys are right",
            path.display()
        )
    });
    let want: std::collections::BTreeSet<String> = golden.lines().map(str::to_string).collect();
    let added: Vec<_> = keys.difference(&want).collect();
    let lost: Vec<_> = want.difference(keys).collect();
    assert!(
        added.is_empty() && lost.is_empty(),
        "{name}: record keys changed from {}: new {added:?}, missing {lost:?}",
        path.display()
    );
}
