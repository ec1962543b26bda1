//! Simulated nodes: one network namespace per node on a bridge made for the test, each with its
//! own hostname (a UTS namespace entered per rank), its own address in 10.213.X.0/24 and an
//! optional `tc netem` impairment (rate, delay, loss) on its sending side, its receiving side
//! or both. Ranks started in a node see only its `eth0` (the loopback stays down), so traffic
//! between ranks crosses the bridge and the impairment.
//!
//! Everything is removed when the [`Cluster`] is dropped, also when the test panics: the ranks
//! it started are killed, the namespaces deleted (their veths and qdiscs go with them) and the
//! bridge deleted. Names carry the test process's id and a counter, so tests running in parallel
//! threads (and other test processes) never share a namespace or an interface; Linux interface
//! names are at most 15 characters.
//!
//! Where namespaces cannot be made (not root, no `ip`), [`Cluster::new`] prints
//! "skipped: ..." and returns `None`, and the test passes without measuring.

use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use super::BIN;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// What `tc netem` does to one node's traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Impair {
    /// Rate limit in Mbit/s.
    pub rate_mbit: Option<u32>,
    /// Added one-way delay in milliseconds.
    pub delay_ms: Option<f64>,
    /// Packet loss in percent.
    pub loss_pct: Option<f64>,
}

impl Impair {
    pub fn rate(mbit: u32) -> Impair {
        Impair {
            rate_mbit: Some(mbit),
            ..Impair::default()
        }
    }

    /// The qdisc: `tbf` for a rate limit alone (in every kernel that has traffic control),
    /// `netem` when delay or loss is asked for (a module some kernels lack).
    fn qdisc_args(&self) -> Vec<String> {
        if let (Some(r), None, None) = (self.rate_mbit, self.delay_ms, self.loss_pct) {
            // The bucket holds at least a jiffy's worth at the rate (and a 64 KiB segment).
            let burst = (r as u64 * 1_000_000 / 8 / 250).max(64 << 10);
            return vec![
                "tbf".into(),
                "rate".into(),
                format!("{r}mbit"),
                "burst".into(),
                burst.to_string(),
                "latency".into(),
                "10ms".into(),
            ];
        }
        self.netem_args()
    }

    fn netem_args(&self) -> Vec<String> {
        let mut a = vec!["netem".to_string(), "limit".into(), "100000".into()];
        if let Some(d) = self.delay_ms {
            a.extend(["delay".into(), format!("{d}ms")]);
        }
        if let Some(l) = self.loss_pct {
            a.extend(["loss".into(), format!("{l}%")]);
        }
        if let Some(r) = self.rate_mbit {
            a.extend(["rate".into(), format!("{r}mbit")]);
        }
        a
    }
}

/// Which of a node's directions an impairment applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// What the node sends (its `eth0` egress).
    Sending,
    /// What the node receives (the egress of its veth's bridge end).
    Receiving,
    Both,
}

/// One simulated node.
#[derive(Debug)]
pub struct Node {
    pub ns: String,
    pub hostname: String,
    pub addr: String,
    /// The bridge ends of its veths (in the test's own namespace), one per NIC (eth0, eth1...).
    pub outers: Vec<String>,
}

/// N simulated nodes on one bridge; removed on drop.
#[derive(Debug)]
pub struct Cluster {
    pub nodes: Vec<Node>,
    /// One bridge per NIC index: every node's ethK is on bridge K.
    bridges: Vec<String>,
    kids: Vec<u32>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn run(prog: &str, args: &[&str]) -> Result<(), String> {
    let o = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

impl Cluster {
    /// `n` nodes (at most 250), named node1..nodeN, at 10.213.X.1..N. `None` (after printing
    /// "skipped: ...") where network namespaces cannot be made here.
    pub fn new(n: usize) -> Option<Cluster> {
        Cluster::with_nics(n, 1)
    }

    /// Like [`Cluster::new`], each node with `nics` NICs (eth0 at 10.213.X.i, eth1 at
    /// 10.214.X.i, ...), NIC k of every node on bridge k: several rails per node.
    pub fn with_nics(n: usize, nics: usize) -> Option<Cluster> {
        assert!((1..=250).contains(&n));
        assert!((1..=4).contains(&nics));
        // Namespaces need root: read the effective uid from /proc.
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .map(|l| l.split_whitespace().nth(2) == Some("0"))
            })
            .unwrap_or(false);
        if !root {
            eprintln!("skipped: simulated nodes need root (network namespaces)");
            return None;
        }
        if Command::new("ip").arg("-V").output().is_err() {
            eprintln!(
                "skipped: simulated nodes need `ip` (iproute2; scripts/setup.sh installs it)"
            );
            return None;
        }
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{:x}x{id:x}", std::process::id());
        let subnet = 1 + id % 250;
        let mut c = Cluster {
            nodes: Vec::new(),
            bridges: Vec::new(),
            kids: Vec::new(),
        };
        if let Err(e) = c.build(n, nics, &tag, subnet) {
            eprintln!("skipped: cannot make simulated nodes here ({e})");
            return None; // drop removes what was made
        }
        Some(c)
    }

    fn build(&mut self, n: usize, nics: usize, tag: &str, subnet: u32) -> Result<(), String> {
        for k in 0..nics {
            let bridge = format!(
                "efb{tag}{}",
                if k == 0 { String::new() } else { k.to_string() }
            );
            assert!(bridge.len() <= 15, "{bridge}");
            ip(&["link", "add", &bridge, "type", "bridge"])?;
            // Pushed once it exists, so the drop deletes it.
            self.bridges.push(bridge.clone());
            ip(&["link", "set", &bridge, "up"])?;
        }
        for i in 0..n {
            let node = Node {
                ns: format!("efabench-{tag}-n{}", i + 1),
                hostname: format!("node{}", i + 1),
                addr: format!("10.213.{subnet}.{}", i + 1),
                outers: (0..nics)
                    .map(|k| format!("ef{}{tag}n{i}", ['v', 'w', 'x', 'y'][k]))
                    .collect(),
            };
            assert!(
                node.outers.iter().all(|o| o.len() <= 15),
                "{:?}",
                node.outers
            );
            ip(&["netns", "add", &node.ns])?;
            // Pushed before the veths exist, so a failure below still deletes the namespace.
            let (ns, outers) = (node.ns.clone(), node.outers.clone());
            self.nodes.push(node);
            for (k, outer) in outers.iter().enumerate() {
                let inner = format!("ef{}{tag}n{i}", ['i', 'j', 'k', 'l'][k]);
                let eth = format!("eth{k}");
                let addr = format!("10.{}.{subnet}.{}", 213 + k, i + 1);
                ip(&["link", "add", outer, "type", "veth", "peer", "name", &inner])?;
                ip(&["link", "set", &inner, "netns", &ns])?;
                ip(&["link", "set", outer, "master", &self.bridges[k]])?;
                ip(&["link", "set", outer, "up"])?;
                ip(&["-n", &ns, "link", "set", &inner, "name", &eth])?;
                ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", &eth])?;
                ip(&["-n", &ns, "link", "set", &eth, "up"])?;
            }
        }
        Ok(())
    }

    /// Impairs node `i` (0-based) on `side`. `Err` says why `tc` refused (e.g. a kernel
    /// without `netem`; the caller skips).
    pub fn try_impair(&self, i: usize, side: Side, how: Impair) -> Result<(), String> {
        self.try_impair_nic(i, 0, side, how)
    }

    /// Impairs NIC `k` (eth`k`) of node `i` on `side`. Where the kernel lacks `netem`, packet
    /// loss without delay falls back to nftables (`numgen random ... drop` on the node's
    /// output and/or input hook for eth`k`) and a rate to `tbf`; delay has no fallback.
    pub fn try_impair_nic(
        &self,
        i: usize,
        k: usize,
        side: Side,
        how: Impair,
    ) -> Result<(), String> {
        match self.qdisc(i, k, side, &how.qdisc_args()) {
            Err(e) if how.delay_ms.is_none() && how.loss_pct.is_some() => {
                let loss = how.loss_pct.unwrap_or(0.0);
                if let Some(r) = how.rate_mbit {
                    self.qdisc(i, k, side, &Impair::rate(r).qdisc_args())?;
                }
                self.nft_loss(i, k, side, loss)
                    .map_err(|f| format!("{e}; and by nftables: {f}"))
            }
            r => r,
        }
    }

    fn qdisc(&self, i: usize, k: usize, side: Side, args: &[String]) -> Result<(), String> {
        let node = &self.nodes[i];
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let eth = format!("eth{k}");
        if matches!(side, Side::Sending | Side::Both) {
            let mut v = vec!["-n", &node.ns, "qdisc", "replace", "dev", &eth, "root"];
            v.extend_from_slice(&a);
            ip_tc(&v)?;
        }
        if matches!(side, Side::Receiving | Side::Both) {
            let mut v = vec!["qdisc", "replace", "dev", &node.outers[k], "root"];
            v.extend_from_slice(&a);
            ip_tc(&v)?;
        }
        Ok(())
    }

    /// Drops `pct` % of eth`k`'s packets inside node `i` with nftables (removed with the
    /// namespace).
    fn nft_loss(&self, i: usize, k: usize, side: Side, pct: f64) -> Result<(), String> {
        let per_10k = (pct * 100.0).round() as u32;
        let mut rules = format!("table inet efbloss{k} {{\n");
        if matches!(side, Side::Sending | Side::Both) {
            rules.push_str(&format!(
                "chain out {{ type filter hook output priority 0; oifname \"eth{k}\" numgen random mod 10000 < {per_10k} drop; }}\n"
            ));
        }
        if matches!(side, Side::Receiving | Side::Both) {
            rules.push_str(&format!(
                "chain in {{ type filter hook input priority 0; iifname \"eth{k}\" numgen random mod 10000 < {per_10k} drop; }}\n"
            ));
        }
        rules.push_str("}\n");
        let mut c = Command::new("ip")
            .args(["netns", "exec", &self.nodes[i].ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("nft: {e}"))?;
        use std::io::Write;
        c.stdin
            .take()
            .expect("piped stdin")
            .write_all(rules.as_bytes())
            .map_err(|e| format!("nft: {e}"))?;
        let o = c.wait_with_output().map_err(|e| format!("nft: {e}"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "nft (nftables; scripts/setup.sh installs it): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
    }

    /// Limits what node `src` sends to node `dst` (one ordered link, eth0) to `mbit`, leaving
    /// its other traffic alone: an htb qdisc on `src`'s eth0 whose default class is unlimited
    /// and whose second class, chosen by `dst`'s address, has the rate.
    pub fn impair_link(&self, src: usize, dst: usize, mbit: u32) -> Result<(), String> {
        let ns = &self.nodes[src].ns;
        let dst_ip = format!("{}/32", self.nodes[dst].addr);
        let rate = format!("{mbit}mbit");
        let tc = |args: &[&str]| {
            let mut v = vec!["-n", ns.as_str()];
            v.extend_from_slice(args);
            run("tc", &v)
        };
        tc(&[
            "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1",
        ])?;
        tc(&[
            "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate",
            "100gbit",
        ])?;
        tc(&[
            "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:2", "htb", "rate", &rate,
        ])?;
        tc(&[
            "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "u32", "match", "ip",
            "dst", &dst_ip, "flowid", "1:2",
        ])
    }

    /// Like [`Cluster::try_impair`], failing the test when `tc` refuses.
    pub fn impair(&self, i: usize, side: Side, how: Impair) {
        self.try_impair(i, side, how).expect("tc impairment");
    }

    /// The rendezvous address of a job whose rank 0 runs on node `i`.
    pub fn rdzv(&self, i: usize, port: u16) -> String {
        format!("{}:{port}", self.nodes[i].addr)
    }

    /// Starts efabench in node `i` (its own hostname) with `args` and extra environment.
    pub fn spawn(&mut self, i: usize, args: &[String], env: &[(String, String)]) -> Child {
        let node = &self.nodes[i];
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &node.ns, "unshare", "--uts", "sh", "-c"])
            .arg(r#"hostname "$0" && exec "$@""#)
            .arg(&node.hostname)
            .arg(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c.spawn().expect("start efabench in a simulated node");
        self.kids.push(child.id());
        child
    }

    /// Starts a job of one rank per node, rank r on node r, meeting at node 0; `env_of(r)` adds
    /// environment per rank. The ranks' processes, by rank.
    pub fn start_job(
        &mut self,
        args: &[&str],
        env_of: impl Fn(usize) -> Vec<(String, String)>,
    ) -> Vec<Child> {
        let world = self.nodes.len();
        let port = 29_000 + (std::process::id() % 20_000) as u16;
        (0..world)
            .map(|r| {
                let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
                a.extend([
                    "--rank".into(),
                    r.to_string(),
                    "--world".into(),
                    world.to_string(),
                    "--rdzv".into(),
                    self.rdzv(0, port),
                ]);
                let mut env = vec![("EFABENCH_JOB_TOKEN".to_string(), format!("sim-{port}"))];
                env.extend(env_of(r));
                self.spawn(r, &a, &env)
            })
            .collect()
    }

    /// Waits for a rank started by [`Cluster::start_job`] and forgets its pid (it may be reused,
    /// so the drop must not kill it).
    pub fn reap(&mut self, k: Child) -> Output {
        let pid = k.id();
        let o = k.wait_with_output().unwrap();
        self.kids.retain(|&p| p != pid);
        o
    }

    /// Runs a job of one rank per node (see [`Cluster::start_job`]). Every rank's output, by
    /// rank.
    pub fn job(
        &mut self,
        args: &[&str],
        env_of: impl Fn(usize) -> Vec<(String, String)>,
    ) -> Vec<Output> {
        let kids = self.start_job(args, env_of);
        kids.into_iter().map(|k| self.reap(k)).collect()
    }
}

fn ip_tc(args: &[&str]) -> Result<(), String> {
    // `tc -n NS ...` or `tc ...`: the same words `ip` takes for a namespace.
    run("tc", args)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for &pid in &self.kids {
            // Only our own children; those that exited are gone already (an error is fine).
            let _ = Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        for n in &self.nodes {
            let _ = ip(&["netns", "del", &n.ns]);
        }
        for b in &self.bridges {
            let _ = ip(&["link", "del", b]);
        }
    }
}
