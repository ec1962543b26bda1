//! What the integration tests share: real ranks over loopback started by hand
//! (`--rank/--world/--rdzv`, the way a user runs efabench on two hosts without a launcher) and
//! their output. The submodules each do one job the tests would otherwise write again and
//! again: reading records ([`records`]), checking a collective's records ([`collective`]),
//! hitting a rank mid-run ([`failures`]) and simulated nodes ([`netns`]).
// Each test file is its own crate and uses part of this module.
#![allow(dead_code)]

use std::net::TcpListener;
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

/// A fresh, empty directory for one test, removed with everything in it when the guard drops
/// (tests leave nothing behind in the temporary directory).
pub fn tmp(name: &str) -> TempDir {
    efabench_record::testing::tempdir(name)
}

pub use efabench_record::testing::TempDir;

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The arguments of a command line written as one string, split at white space: the tests'
/// command lines read as a user types them (none of their arguments holds a space).
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Removes from `c`'s environment every variable through which a launcher around this test
/// (Slurm, mpirun, torchrun, `efabench launch`, or a job token) would tell a rank who it is, so
/// that the job the test starts is only what the test gives it.
pub fn without_launcher_env(c: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars() {
        if efabench_bootstrap::detect::is_launcher_var(&k) {
            c.env_remove(&k);
        }
    }
    c
}

/// `efabench ARGS` run to the end, for the commands that start no ranks (`plot`, `compare`, ...).
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run efabench")
}

/// Fails the test unless `o` exited with `code`, showing its stderr.
pub fn assert_exit(o: &Output, code: i32) {
    assert_eq!(o.status.code(), Some(code), "{}", text(&o.stderr));
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
pub mod collective;
pub mod failures;
pub mod netns;
pub mod records;
pub use records::*;

#[path = "../../../bench/src/golden.rs"]
#[allow(dead_code)]
pub mod golden;
#[allow(unused_imports)]
pub use golden::{assert_golden_keys, record_keys};
