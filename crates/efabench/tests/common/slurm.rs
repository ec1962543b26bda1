//! A real Slurm on this host for tests: a private munged, slurmctld and one slurmd per node,
//! all on loopback, all state under one temp directory, all stopped on drop (by the PIDs this
//! helper started). Include with `#[path = "common/slurm.rs"] mod slurm;`.
//!
//! This first step runs every node on 127.0.0.1 in this host's own network namespace (one node is
//! what Debian's Slurm 22.05 runs without `--enable-multiple-slurmd`); nodes with their own
//! namespaces and addresses come with the namespace helper. What mattered, and is done here:
//! munged with its own socket and key (so nothing of the host's munge is touched),
//! `SlurmUser=root`, `proctrack/linuxproc`, `task/none`, no accounting, per-node spool, pid, log
//! and `TmpFS` paths (`%n`), free ports for slurmctld and each slurmd, and
//! `SlurmdParameters=config_overrides` so a node may declare more CPUs than this host has.
#![allow(dead_code)]

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a cluster could not be started; tests print "skipped: {why}" for the first kind.
#[derive(Debug)]
pub enum SlurmError {
    /// A program is missing (`scripts/setup.sh --slurm` installs them).
    Missing(String),
    /// Started but did not come up; the text has the daemons' log tails.
    Failed(String),
}

pub struct Slurm {
    pub dir: PathBuf,
    pub conf: PathBuf,
    pub nodes: Vec<String>,
    children: Vec<Child>,
    /// On simulated nodes: where each daemon and client runs.
    sim: Option<Sim>,
}

/// Simulated nodes a Slurm runs on: slurmctld (and every client command) in the controller's
/// namespace, one slurmd in each node's namespace, each process with the node's hostname and a
/// private `/etc/hosts` naming every node (a bind mount in its own mount namespace, so this
/// host's file is never touched).
pub struct Sim {
    /// (hostname, network namespace, address) of the controller.
    pub ctl: (String, String, String),
    /// (hostname, network namespace, address) of each compute node.
    pub nodes: Vec<(String, String, String)>,
}

impl Sim {
    /// A command that runs `prog` in namespace `ns` as host `hostname`, with `hosts` as its
    /// /etc/hosts. `nsenter --net` rather than `ip netns exec`: the latter remounts /sys, which
    /// hides the cgroup tree slurmd 22.05 needs.
    pub fn command(ns: &str, hostname: &str, hosts: &Path, prog: &Path) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{ns}"))
            .args(["unshare", "--uts", "--mount", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@""#)
            .arg(hosts)
            .arg(hostname)
            .arg(prog);
        c
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.exists())
}

fn tail(path: &Path) -> String {
    let t = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

impl Slurm {
    /// Start munged, slurmctld and `nodes` slurmds (node1..nodeN; one node: this host's name) with `cpus` CPUs each, and wait
    /// until `sinfo` shows every node idle (at most `wait`).
    pub fn start(nodes: usize, cpus: u32, wait: Duration) -> Result<Slurm, SlurmError> {
        let progs = Slurm::programs()?;
        let dir = std::env::temp_dir().join(format!(
            "efabench-slurm-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).unwrap();
        let s = Slurm {
            conf: dir.join("slurm.conf"),
            dir: dir.clone(),
            // One node is named after this host, so that the step's node list (where efabench
            // finds rank 0) resolves without /etc/hosts entries.
            nodes: if nodes == 1 {
                vec![hostname()]
            } else {
                (1..=nodes).map(|i| format!("node{i}")).collect()
            },
            children: Vec::new(),
            sim: None,
        };
        s.boot(progs, cpus, wait)
    }

    /// Start munged, slurmctld in `sim.ctl`'s namespace and one slurmd per `sim.nodes` in its
    /// own, each with its hostname and address; wait until every node is idle.
    pub fn start_on(sim: Sim, cpus: u32, wait: Duration) -> Result<Slurm, SlurmError> {
        let progs = Slurm::programs()?;
        let dir = std::env::temp_dir().join(format!(
            "efabench-slurm-{}-{}",
            std::process::id(),
            sim.ctl.1
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).unwrap();
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for (h, _, a) in std::iter::once(&sim.ctl).chain(&sim.nodes) {
            hosts.push_str(&format!("{a} {h}\n"));
        }
        std::fs::write(dir.join("hosts"), hosts).unwrap();
        let s = Slurm {
            conf: dir.join("slurm.conf"),
            dir,
            nodes: sim.nodes.iter().map(|n| n.0.clone()).collect(),
            children: Vec::new(),
            sim: Some(sim),
        };
        s.boot(progs, cpus, wait)
    }

    fn programs() -> Result<Vec<PathBuf>, SlurmError> {
        let mut progs = Vec::new();
        for p in ["munged", "slurmctld", "slurmd", "srun", "sinfo", "sbatch"] {
            progs.push(which(p).ok_or_else(|| {
                SlurmError::Missing(format!(
                    "no {p} (scripts/setup.sh --slurm installs Slurm and munge)"
                ))
            })?);
        }
        if !rustix_is_root() {
            return Err(SlurmError::Missing(
                "not root (slurmd runs as root here)".into(),
            ));
        }
        Ok(progs)
    }

    /// A daemon's command: here, or in its simulated node.
    fn daemon(&self, prog: &Path, host: &str) -> Command {
        match &self.sim {
            None => Command::new(prog),
            Some(sim) => {
                let (h, ns, _) = std::iter::once(&sim.ctl)
                    .chain(&sim.nodes)
                    .find(|n| n.0 == host)
                    .expect("a simulated node of this Slurm");
                Sim::command(ns, h, &self.dir.join("hosts"), prog)
            }
        }
    }

    fn boot(mut self, progs: Vec<PathBuf>, cpus: u32, wait: Duration) -> Result<Slurm, SlurmError> {
        let s = &mut self;
        let dir = s.dir.clone();
        // munge: a private key and socket.
        let key = dir.join("munge.key");
        let mut k = std::fs::File::create(&key).unwrap();
        let mut bytes = [0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut r| std::io::Read::read_exact(&mut r, &mut bytes))
            .unwrap();
        k.write_all(&bytes).unwrap();
        drop(k);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let sock = dir.join("munge.sock");
        let munged = Command::new(&progs[0])
            .arg("--foreground")
            .arg("--force")
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
            .arg(format!("--log-file={}", dir.join("munged.log").display()))
            .arg(format!("--seed-file={}", dir.join("munged.seed").display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("munged.err")).unwrap())
            .spawn()
            .map_err(|e| SlurmError::Failed(format!("munged: {e}")))?;
        s.children.push(munged);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            if Instant::now() > deadline {
                return Err(SlurmError::Failed(format!(
                    "munged did not create its socket: {}{}",
                    tail(&dir.join("munged.err")),
                    tail(&dir.join("munged.log"))
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // slurm.conf
        let (host, ctl_addr) = match &s.sim {
            None => (hostname(), "127.0.0.1".to_string()),
            Some(sim) => (sim.ctl.0.clone(), sim.ctl.2.clone()),
        };
        let ctl_port = free_port();
        let d = dir.display();
        let mut conf = format!(
            "ClusterName=efabench\n\
             SlurmctldHost={host}({ctl_addr})\n\
             SlurmctldPort={ctl_port}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={sock}\n\
             CredType=cred/munge\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool-%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd-%n.log\n\
             TmpFS={d}/tmp-%n\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             ReturnToService=2\n\
             MpiDefault=none\n\
             SlurmdTimeout=30\n\
             SlurmdParameters=config_overrides\n",
            sock = sock.display()
        );
        for (i, n) in s.nodes.iter().enumerate() {
            std::fs::create_dir_all(dir.join(format!("tmp-{n}"))).unwrap();
            let (addr, hostname) = match &s.sim {
                None => ("127.0.0.1".to_string(), host.clone()),
                Some(sim) => (sim.nodes[i].2.clone(), n.clone()),
            };
            conf.push_str(&format!(
                "NodeName={n} NodeAddr={addr} NodeHostname={hostname} Port={} CPUs={cpus} State=UNKNOWN\n",
                free_port()
            ));
        }
        conf.push_str("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n");
        std::fs::write(&s.conf, conf).unwrap();
        let ctld = s
            .daemon(&progs[1], &host)
            .args(["-D", "-i", "-f"])
            .arg(&s.conf)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("slurmctld.err")).unwrap())
            .spawn()
            .map_err(|e| SlurmError::Failed(format!("slurmctld: {e}")))?;
        s.children.push(ctld);
        for n in s.nodes.clone() {
            let c = s
                .daemon(&progs[2], &n)
                .args(["-D", "-N", &n, "-f"])
                .arg(&s.conf)
                .env("SLURM_CONF", &s.conf)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("slurmd-{n}.err"))).unwrap())
                .spawn()
                .map_err(|e| SlurmError::Failed(format!("slurmd {n}: {e}")))?;
            s.children.push(c);
        }
        // Wait for every node to be idle.
        let deadline = Instant::now() + wait;
        loop {
            let o = s
                .command("sinfo")
                .args(["-h", "-N", "-o", "%N %t"])
                .output();
            let text = o
                .map(|o| {
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                })
                .unwrap_or_else(|e| e.to_string());
            let idle = text.lines().filter(|l| l.ends_with(" idle")).count();
            if idle == s.nodes.len() {
                return Ok(self);
            }
            let broken = text
                .lines()
                .any(|l| l.ends_with(" inval") || l.contains(" drain"));
            if broken || Instant::now() > deadline {
                let mut logs = format!(
                    "sinfo: {text:?}\nslurmctld: {}{}\n",
                    tail(&dir.join("slurmctld.log")),
                    tail(&dir.join("slurmctld.err"))
                );
                for n in &s.nodes {
                    logs.push_str(&format!(
                        "slurmd {n}: {}{}\n",
                        tail(&dir.join(format!("slurmd-{n}.log"))),
                        tail(&dir.join(format!("slurmd-{n}.err")))
                    ));
                }
                return Err(SlurmError::Failed(format!(
                    "the nodes did not become idle (within {wait:?})\n{logs}"
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A Slurm client command (`srun`, `sbatch`, `sinfo`, `squeue`, ...) for this cluster.
    pub fn command(&self, prog: &str) -> Command {
        let mut c = match &self.sim {
            None => Command::new(prog),
            Some(sim) => {
                let path = which(prog).unwrap_or_else(|| PathBuf::from(prog));
                Sim::command(&sim.ctl.1, &sim.ctl.0, &self.dir.join("hosts"), &path)
            }
        };
        c.env("SLURM_CONF", &self.conf);
        for v in [
            "SLURM_JOB_ID",
            "SLURM_STEP_ID",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURM_JOBID",
        ] {
            c.env_remove(v);
        }
        c
    }
}

fn rustix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|t| {
            t.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
                .unwrap_or(false)
        })
        .unwrap_or(false)
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // Daemons in reverse order of start: slurmds, slurmctld, munged. Only our own children.
        // SIGTERM first: slurmctld then stops its own helper (slurmscriptd), which SIGKILL would
        // leave behind.
        for c in self.children.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
