//! A real Slurm (slurmctld + slurmd + munged on loopback, `common/slurm.rs`) runs efabench
//! through `srun` and `sbatch`: the ranks find each other from Slurm's own variables, and the
//! shipped `deploy/slurm/efabench-check.sbatch` runs `efabench cluster`; then a Slurm whose
//! nodes are simulated nodes (their own namespaces, hostnames and addresses) checks a cluster
//! with one node throttled. Skipped ("skipped: ...")
//! where Slurm is not installed (`scripts/setup.sh --slurm`) or this is not root.

mod common;
#[path = "common/slurm.rs"]
mod slurm;

use common::netns::{Cluster, Impair, Side};
use common::BIN;
use slurm::{Sim, Slurm, SlurmError};
use std::process::Stdio;
use std::time::Duration;

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

    // sbatch on the shipped script (tcp, small sizes, short budgets), waited for.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/slurm/efabench-check.sbatch");
    let o = s
        .command("sbatch")
        .current_dir(&dir)
        .args(["--wait", "-N", "1", "--ntasks-per-node=2", "--time=5"])
        .arg(&script)
        .env("EFABENCH", BIN)
        .env("EFABENCH_PROVIDER", "tcp")
        .env("EFABENCH_TIMEOUT", "60")
        .env("EFABENCH_ARGS", QUICK)
        .output()
        .unwrap();
    let log = job_log(&dir);
    // One node: this host's failing checks (no EFA) are the cluster's, not a node's.
    assert!(
        log.contains("== efabench cluster on 1 nodes"),
        "{log}\n{o:?}"
    );
    assert!(log.contains("# verdict: no node to isolate"), "{log}");
    assert_eq!(
        o.status.code(),
        Some(0),
        "sbatch --wait: {}\n{log}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d = job_dir(&dir);
    let read =
        |f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    assert!(
        read("records.jsonl").contains("\"bench\":\"pairs\""),
        "{log}"
    );
    assert!(
        read("summary.json").contains("\"schema\": \"efabench-cluster/1\""),
        "{log}"
    );
    assert!(
        read("cluster.prom").contains("efabench_cluster_node_verdict"),
        "{log}"
    );
}

/// `efabench cluster` options that keep a run short on a 2-core host.
const QUICK: &str =
    "--domain eth0 --ignore-check efa-devices,memlock --interval 0 --pairs-size 256K --alltoall-size 256K --pairs-budget 3 \
                     --alltoall-budget 2";

/// The log of the one sbatch job run in `dir`.
fn job_log(dir: &std::path::Path) -> String {
    let logs: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("efabench-check-")
        })
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    logs.join("\n")
}

/// The output directory of the one sbatch job run in `dir`.
fn job_dir(dir: &std::path::Path) -> std::path::PathBuf {
    let job_dirs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    assert_eq!(job_dirs.len(), 1, "{}", job_log(dir));
    job_dirs[0].path()
}

fn summary(path: &std::path::Path) -> serde_json::Value {
    let t = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{e}: {t}"))
}

fn verdicts(s: &serde_json::Value) -> Vec<(String, String)> {
    s["nodes"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|n| {
            (
                n["host"].as_str().unwrap_or("?").to_string(),
                n["verdict"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

/// Four simulated nodes, each running its own slurmd (own namespace, hostname and address),
/// slurmctld and the clients on a fifth: `srun -N 4 --ntasks-per-node=1 efabench cluster`
/// passes a healthy cluster (exit 0), isolates the node throttled with tc and it alone (exit 1,
/// with its evidence), names a node whose task never joins; `sbatch` on the shipped script
/// runs the same check.
#[test]
fn srun_and_sbatch_across_simulated_nodes_isolate_the_throttled_node_alone() {
    let Some(mut sim) = Cluster::new(5) else {
        return;
    };
    sim.nodes[4].hostname = "ctl".into();
    // Slurm's daemons and clients reach their own node's address (srun and slurmctld on the
    // controller, a batch script's srun on its node): that goes through the loopback, which
    // simulated nodes keep down. The ranks are held to eth0 with --domain.
    for n in &sim.nodes {
        let o = std::process::Command::new("ip")
            .args(["-n", &n.ns, "link", "set", "lo", "up"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    }
    let node = |n: &common::netns::Node| (n.hostname.clone(), n.ns.clone(), n.addr.clone());
    let spec = Sim {
        ctl: node(&sim.nodes[4]),
        nodes: sim.nodes[..4].iter().map(node).collect(),
    };
    let s = match Slurm::start_on(spec, 2, Duration::from_secs(20)) {
        Ok(s) => s,
        Err(SlurmError::Missing(why)) => {
            eprintln!("skipped: {why}");
            return;
        }
        Err(SlurmError::Failed(why)) => panic!("Slurm did not start: {why}"),
    };
    let dir = s.dir.join("out");
    std::fs::create_dir_all(&dir).unwrap();
    let srun = |name: &str, wrap: Option<&str>| {
        let sum = dir.join(format!("{name}.json"));
        let mut c = s.command("srun");
        c.args(["-N", "4", "--ntasks-per-node=1", "--time=3"]);
        if let Some(script) = wrap {
            c.args(["sh", "-c", script, "sh"]);
        }
        c.args([BIN, "cluster", "-p", "tcp", "--timeout", "20"])
            .args(QUICK.split_whitespace())
            .arg("--summary")
            .arg(&sum)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let o = c.output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        println!("== srun {name}: exit {:?}\n{out}", o.status.code());
        eprintln!("{err}");
        (o.status.code(), out, err, sum)
    };

    let (code, out, err, sum) = srun("healthy", None);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let v = verdicts(&summary(&sum));
    assert_eq!(v.len(), 4, "{out}");
    assert!(v.iter().all(|(_, x)| x != "ISOLATE"), "{v:?}\n{out}");

    sim.impair(2, Side::Both, Impair::rate(100));
    let (code, out, err, sum) = srun("throttled", None);
    assert_eq!(code, Some(1), "{out}\n{err}");
    let s1 = summary(&sum);
    let isolated: Vec<String> = verdicts(&s1)
        .into_iter()
        .filter(|(_, x)| x == "ISOLATE")
        .map(|(h, _)| h)
        .collect();
    assert_eq!(isolated, ["node3"], "{out}");
    let n3 = s1["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["host"] == "node3")
        .unwrap();
    assert_eq!(n3["reasons"][0]["stage"], "pairs", "{n3}");
    assert!(
        n3["reasons"][0]["evidence"]
            .as_str()
            .unwrap()
            .contains("% of its peers ["),
        "{n3}"
    );
    assert!(
        out.contains("# verdict: ISOLATE node3 (1 of 4 nodes); exit 1"),
        "{out}"
    );

    // The task of node4 exits at once: rank 0 names node4 (from Slurm's placement).
    let (code, out, err, sum) = srun(
        "never-joins",
        Some(r#"[ "$SLURM_PROCID" = 3 ] && exit 0; exec "$@""#),
    );
    assert_eq!(code, Some(1), "{out}\n{err}");
    let v = verdicts(&summary(&sum));
    assert_eq!(
        v.last().unwrap(),
        &("node4".to_string(), "ISOLATE".to_string()),
        "{out}"
    );
    assert!(out.contains("never joined the job"), "{out}");

    // sbatch on the shipped script, node3 still throttled.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/slurm/efabench-check.sbatch");
    let o = s
        .command("sbatch")
        .current_dir(&dir)
        .args(["--wait", "-N", "4", "--ntasks-per-node=1", "--time=5"])
        .arg(&script)
        .env("EFABENCH", BIN)
        .env("EFABENCH_PROVIDER", "tcp")
        .env("EFABENCH_TIMEOUT", "20")
        .env("EFABENCH_ARGS", QUICK)
        .output()
        .unwrap();
    let log = job_log(&dir);
    println!("== sbatch\n{log}");
    assert_eq!(o.status.code(), Some(1), "{log}\n{o:?}");
    assert!(
        log.contains("# verdict: ISOLATE node3 (1 of 4 nodes)"),
        "{log}"
    );
    let d = job_dir(&dir);
    assert_eq!(
        verdicts(&summary(&d.join("summary.json")))
            .into_iter()
            .filter(|(_, x)| x == "ISOLATE")
            .map(|(h, _)| h)
            .collect::<Vec<_>>(),
        ["node3"]
    );
}
