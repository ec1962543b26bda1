//! Reading what a run wrote. Almost every test runs a job whose rank 0 writes its records
//! (`-o`) into a directory of its own and then checks them: [`recorded`] is that job and
//! [`records`] reads the file back through the schema, so that a record the schema refuses
//! fails whichever test wrote it. The JSON files other commands write (`--summary`) and the
//! sums over a record's per-rail figures are read here too, once.

use std::path::{Path, PathBuf};
use std::process::Output;

use efabench_report::Record;
use serde_json::Value;

use super::{all_ok, job_env, text, tmp, TempDir};

/// Every record of a records file, each validated against the schema.
pub fn records(path: &Path) -> Vec<Record> {
    std::fs::read_to_string(path)
        .expect("records file")
        .lines()
        .map(|l| efabench_report::validate_line(l).expect("record validates against the schema"))
        .collect()
}

/// Every line of a JSON Lines file as JSON, not checked against the schema; none when there is
/// no file.
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// A JSON file (a `--summary`); the test fails with the file's name or its text when it cannot
/// be read or parsed.
pub fn json_file(path: &Path) -> Value {
    let t = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{e}: {t}"))
}

/// The bytes a record's rails carried (`per_rail[].bytes`), added up.
pub fn per_rail_bytes(r: &Record) -> u64 {
    r.extra["per_rail"]
        .as_array()
        .expect("per_rail")
        .iter()
        .map(|x| x["bytes"].as_u64().unwrap())
        .sum()
}

/// A finished job whose rank 0 wrote its records into a directory of its own, removed when
/// this drops.
pub struct Recorded {
    /// Every rank's output, by rank.
    pub outs: Vec<Output>,
    /// The records file (`-o`).
    pub out: PathBuf,
    _dir: TempDir,
}

impl Recorded {
    /// The records, validated against the schema.
    pub fn records(&self) -> Vec<Record> {
        records(&self.out)
    }

    /// Fails the test unless every rank exited 0 (see [`all_ok`]); the records.
    pub fn passed(&self, what: &str) -> Vec<Record> {
        all_ok(&self.outs, what);
        self.records()
    }

    /// Rank `r`'s standard output.
    pub fn stdout(&self, r: usize) -> String {
        text(&self.outs[r].stdout)
    }

    /// Rank `r`'s standard error.
    pub fn stderr(&self, r: usize) -> String {
        text(&self.outs[r].stderr)
    }
}

/// Runs `world` ranks of `args` to the end, rank 0 writing its records (`-o`) into a fresh
/// directory named after `name`.
pub fn recorded(name: &str, world: u32, args: &[&str]) -> Recorded {
    recorded_env(name, world, args, &[], &[])
}

/// Like [`recorded`]; `env` goes to every rank, `env1` to rank 1 only (see [`job_env`]).
pub fn recorded_env(
    name: &str,
    world: u32,
    args: &[&str],
    env: &[(&str, &str)],
    env1: &[(&str, &str)],
) -> Recorded {
    let dir = tmp(name);
    let out = dir.join("r.jsonl");
    let path = out.to_str().expect("a UTF-8 temporary path");
    let mut args = args.to_vec();
    args.extend(["-o", path]);
    let outs = job_env(world, &args, env, env1);
    Recorded {
        outs,
        out,
        _dir: dir,
    }
}
