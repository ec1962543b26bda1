//! A real Slurm (slurmctld + slurmd + munged on loopback, `common/slurm.rs`) runs efabench
//! through `srun` and `sbatch`: the ranks find each other from Slurm's own variables, and the
//! shipped `deploy/slurm/efabench-check.sbatch` runs its three stages. Skipped ("skipped: ...")
//! where Slurm is not installed (`scripts/setup.sh --slurm`) or this is not root.

#[path = "common/slurm.rs"]
mod slurm;

use slurm::{Slurm, SlurmError};
use std::process::Stdio;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_efabench");

fn cluster(cpus: u32) -> Option<Slurm> {
    match Slurm::start(1, cpus, Duration::from_secs(60)) {
        Ok(s) => Some(s),
        Err(SlurmError::Missing(why)) => {
            eprintln!("skipped: {why}");
            None
        }
        Err(SlurmError::Failed(why)) => panic!("Slurm did not start: {why}"),
    }
}

#[test]
fn srun_and_sbatch_run_efabench() {
    let Some(s) = cluster(4) else { return };
    let dir = s.dir.join("out");
    std::fs::create_dir_all(&dir).unwrap();
    // srun: two tasks, rank 0's rendezvous from SLURM_STEP_NODELIST and the derived port.
    let out = dir.join("write.jsonl");
    let o = s
        .command("srun")
        .args([
            "-N", "1", "-n", "2", "--time=2", BIN, "write", "-p", "tcp", "-b", "8", "-e", "8",
            "-n", "10",
        ])
        .args(["--timeout", "60", "-o", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "srun: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.lines().count() >= 1);
    assert!(text.contains("\"world\":2"), "{text}");

    // sbatch on the shipped script (host memory, tcp, tiny sizes), waited for.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/slurm/efabench-check.sbatch");
    let o = s
        .command("sbatch")
        .current_dir(&dir)
        .args(["--wait", "-N", "1", "--ntasks-per-node=2", "--time=5"])
        .arg(&script)
        .env("EFABENCH", BIN)
        .env("EFABENCH_PROVIDER", "tcp")
        .env("EFABENCH_MAX_BYTES", "64K")
        .env("EFABENCH_TIMEOUT", "60")
        .env("EFABENCH_ITERS", "20")
        .output()
        .unwrap();
    let logs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("efabench-check-")
        })
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    let log = logs.join("\n");
    // This host has no EFA: doctor fails (stage 1), pairs and alltoall pass.
    assert!(log.contains("== 1. doctor on every node"), "{log}\n{o:?}");
    assert!(log.contains("== 3. alltoall"), "{log}");
    assert_eq!(
        o.status.code(),
        Some(1),
        "sbatch --wait: {}\n{log}",
        String::from_utf8_lossy(&o.stderr)
    );
    let job_dirs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    assert_eq!(job_dirs.len(), 1, "{log}");
    let d = job_dirs[0].path();
    let read =
        |f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    assert!(read("pairs.jsonl").contains("\"bench\":\"pairs\""), "{log}");
    assert!(read("alltoall.jsonl").contains("\"world\":2"), "{log}");
}
