//! Who am I? Rank, world size, local rank, rendezvous address and job token from the launcher.
//!
//! efabench runs under whatever starts it: `efabench launch`, `srun`, `mpirun` (Open MPI or
//! MPICH/Hydra), torchrun-style launchers (Kubernetes jobs), or by hand with `--rank/--world`.
//! Each launcher announces the rank differently, so [`detect`] checks them in a fixed order
//! (flags, `efabench launch`, Slurm, Open MPI, MPICH/PMI, torchrun, Kubernetes Indexed Job) and
//! takes the first that is
//! present. Only the *first* launcher found counts: mixing a rank from one with a size from
//! another would produce a job in which ranks disagree about the world.
//!
//! The environment is read through an injected lookup function so that every launcher can be
//! unit-tested without touching the process environment.
//!
//! The rendezvous address is the part launchers do not give: under `mpirun` no variable says
//! where rank 0 runs. When the launcher runs a PMIx server beside the ranks (Open MPI 5's
//! `mpirun`, `srun --mpi=pmix`), rank 0 publishes its address there (`crate::pmix`); otherwise
//! the user has to pass `--rdzv` or `MASTER_ADDR`/`MASTER_PORT`, and the error says exactly that. Under Slurm the first host of the step's node list runs rank 0 (Slurm's
//! default block distribution), and the port is derived from the job and step ids so that two
//! steps on the same node do not collide.
//!
//! Slurm variables only count in a task of a step (one with `SLURM_STEP_ID`): a batch script or
//! an `salloc` shell carries the allocation's variables too, but is one process, not a rank.
//!
//! The job token keeps a stray process or a second job that reuses the port out of the rendezvous.

use std::time::Duration;

use crate::error::BootstrapError;
use crate::hostlist::first_host;

/// Largest world size accepted (the rendezvous keeps one thread and one socket per rank).
pub const MAX_WORLD: u32 = 65_536;
/// Longest job token accepted (it travels in the bounded hello message).
pub const MAX_TOKEN_LEN: usize = 256;

/// What the command line said (`--rank`, `--world`, `--rdzv`, `--timeout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchFlags {
    pub rank: Option<u32>,
    pub world: Option<u32>,
    /// `HOST:PORT` where rank 0 listens.
    pub rdzv: Option<String>,
    /// Longest any bootstrap wait may last, and how long a silent rank is tolerated.
    pub timeout: Duration,
}

impl Default for LaunchFlags {
    fn default() -> Self {
        LaunchFlags {
            rank: None,
            world: None,
            rdzv: None,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Where this process sits in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankInfo {
    pub rank: u32,
    pub world: u32,
    pub local_rank: u32,
    /// `host:port` of rank 0's rendezvous; `None` only when `world == 1`.
    pub rdzv: Option<String>,
    /// Per-job secret shared by all ranks; `None` when the launcher gives nothing to derive one.
    pub token: Option<String>,
    /// Which launcher the numbers came from: "flags", "efabench launch", "slurm", "open mpi",
    /// "mpich/pmi", "torchrun", "indexed job" or "none".
    pub source: &'static str,
}

impl RankInfo {
    /// A job of one rank that needs no rendezvous.
    pub fn single() -> RankInfo {
        RankInfo {
            rank: 0,
            world: 1,
            local_rank: 0,
            rdzv: None,
            token: None,
            source: "none",
        }
    }
}

/// Environment variables set by `efabench launch` for each rank.
pub mod vars {
    pub const RANK: &str = "EFABENCH_RANK";
    pub const WORLD_SIZE: &str = "EFABENCH_WORLD_SIZE";
    pub const LOCAL_RANK: &str = "EFABENCH_LOCAL_RANK";
    pub const RDZV: &str = "EFABENCH_RDZV";
    pub const JOB_TOKEN: &str = "EFABENCH_JOB_TOKEN";
    /// `efabench launch`'s pid, for [`crate::launcher::die_with_launcher`].
    pub const LAUNCHER_PID: &str = "EFABENCH_LAUNCHER_PID";
    /// Loopback address where `efabench launch` hears that a rank joined its job.
    pub const LAUNCH_CTL: &str = "EFABENCH_LAUNCH_CTL";
}

struct Launcher {
    source: &'static str,
    rank: &'static str,
    size: &'static [&'static str],
    local: &'static str,
    /// Some launchers use generic names (`RANK`): when only part of the set is present it
    /// belongs to something else, so ignore it instead of failing.
    partial_is_error: bool,
}

const LAUNCHERS: &[Launcher] = &[
    Launcher {
        source: "efabench launch",
        rank: vars::RANK,
        size: &[vars::WORLD_SIZE],
        local: vars::LOCAL_RANK,
        partial_is_error: true,
    },
    Launcher {
        source: "slurm",
        rank: "SLURM_PROCID",
        size: &["SLURM_NTASKS", "SLURM_NPROCS"],
        local: "SLURM_LOCALID",
        partial_is_error: true,
    },
    Launcher {
        source: "open mpi",
        rank: "OMPI_COMM_WORLD_RANK",
        size: &["OMPI_COMM_WORLD_SIZE"],
        local: "OMPI_COMM_WORLD_LOCAL_RANK",
        partial_is_error: true,
    },
    Launcher {
        source: "mpich/pmi",
        rank: "PMI_RANK",
        size: &["PMI_SIZE"],
        local: "MPI_LOCALRANKID",
        partial_is_error: true,
    },
    Launcher {
        source: "torchrun",
        rank: "RANK",
        size: &["WORLD_SIZE"],
        local: "LOCAL_RANK",
        partial_is_error: false,
    },
    // A Kubernetes Indexed Job gives each pod its index; the world size is the Job's
    // `completions`, which the pod spec passes as WORLD_SIZE. After torchrun: in a JobSet with
    // several replicated jobs the index is per job and RANK, when set, is the global one.
    Launcher {
        source: "indexed job",
        rank: "JOB_COMPLETION_INDEX",
        size: &["WORLD_SIZE"],
        local: "LOCAL_RANK",
        partial_is_error: true,
    },
];

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn get(env: Env, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn parse_u32(env_name: &str, value: &str) -> Result<u32, BootstrapError> {
    value.parse::<u32>().map_err(|_| {
        BootstrapError::usage(format!(
            "{env_name}={value:?} is not a non-negative integer; fix or unset it"
        ))
    })
}

fn validate(
    source: &str,
    rank: u32,
    world: u32,
    local_rank: u32,
    names: [&str; 3],
) -> Result<(), BootstrapError> {
    if world == 0 || world > MAX_WORLD {
        return Err(BootstrapError::usage(format!(
            "{} = {world} from {source} is out of range: the world size must be 1 to {MAX_WORLD}",
            names[1]
        )));
    }
    if rank >= world {
        return Err(BootstrapError::usage(format!(
            "{} = {rank} from {source} must be smaller than {} = {world}",
            names[0], names[1]
        )));
    }
    if local_rank >= world {
        return Err(BootstrapError::usage(format!(
            "{} = {local_rank} from {source} must be smaller than {} = {world}",
            names[2], names[1]
        )));
    }
    Ok(())
}

/// Rank, world and local rank from the first launcher whose variables are present.
fn numbers(flags: &LaunchFlags, env: Env) -> Result<(u32, u32, u32, &'static str), BootstrapError> {
    match (flags.rank, flags.world) {
        (Some(rank), Some(world)) => {
            validate(
                "the command line",
                rank,
                world,
                0,
                ["--rank", "--world", "local rank"],
            )?;
            return Ok((rank, world, 0, "flags"));
        }
        (Some(_), None) => {
            return Err(BootstrapError::usage(
                "--rank was given without --world; give both (and --rdzv HOST:PORT), e.g. \
                 --rank 1 --world 2 --rdzv host0:29500",
            ))
        }
        (None, Some(_)) => {
            return Err(BootstrapError::usage(
                "--world was given without --rank; give both (and --rdzv HOST:PORT), e.g. \
                 --rank 1 --world 2 --rdzv host0:29500",
            ))
        }
        (None, None) => {}
    }
    for l in LAUNCHERS {
        // A batch script or an `salloc` shell carries the allocation's Slurm variables too, but
        // only processes started by `srun` are tasks of a step (and have a step id). Without
        // this, `efabench sendrecv` typed into an sbatch script would wait for ranks that srun
        // was never asked to start.
        if l.source == "slurm" && slurm_step(env).is_none() {
            continue;
        }
        let rank = get(env, l.rank);
        let size = l.size.iter().find_map(|n| get(env, n).map(|v| (*n, v)));
        match (rank, size) {
            (None, None) => continue,
            (Some(r), Some((size_name, s))) => {
                let rank = parse_u32(l.rank, &r)?;
                let world = parse_u32(size_name, &s)?;
                let local = match get(env, l.local) {
                    Some(v) => parse_u32(l.local, &v)?,
                    None => 0,
                };
                validate(l.source, rank, world, local, [l.rank, size_name, l.local])?;
                check_agreement(env, l, rank, world, size_name)?;
                return Ok((rank, world, local, l.source));
            }
            (Some(_), None) if l.partial_is_error => {
                return Err(BootstrapError::usage(format!(
                    "{} is set but {} is not ({} environment is incomplete); set both or unset {}",
                    l.rank, l.size[0], l.source, l.rank
                )))
            }
            (None, Some((size_name, _))) if l.partial_is_error => {
                return Err(BootstrapError::usage(format!(
                    "{size_name} is set but {} is not ({} environment is incomplete); set both \
                     or unset {size_name}",
                    l.rank, l.source
                )))
            }
            _ => continue,
        }
    }
    Ok((0, 1, 0, "none"))
}

/// Launchers that describe the same processes: Slurm (in a step), Open MPI and MPICH/PMI. When
/// more than one of them is present they must agree on this process's rank and the world size;
/// a mix that disagrees (variables exported by hand, a copied environment, a launcher nested in
/// another with several ranks per node) would give ranks that disagree about the job.
/// `efabench launch` is excluded (it is the innermost launcher by construction), and so are the
/// torchrun names (too generic to belong to anything in particular).
const CROSS_CHECKED: &[&str] = &["slurm", "open mpi", "mpich/pmi"];

fn check_agreement(
    env: Env,
    first: &Launcher,
    rank: u32,
    world: u32,
    size_name: &str,
) -> Result<(), BootstrapError> {
    if !CROSS_CHECKED.contains(&first.source) {
        return Ok(());
    }
    for l in LAUNCHERS {
        if l.source == first.source || !CROSS_CHECKED.contains(&l.source) {
            continue;
        }
        if l.source == "slurm" && slurm_step(env).is_none() {
            continue;
        }
        let (Some(r), Some((sn, s))) = (
            get(env, l.rank),
            l.size.iter().find_map(|n| get(env, n).map(|v| (*n, v))),
        ) else {
            continue;
        };
        let (Ok(r2), Ok(w2)) = (r.parse::<u32>(), s.parse::<u32>()) else {
            continue;
        };
        if r2 != rank || w2 != world {
            return Err(BootstrapError::usage(format!(
                "{} and {} environments contradict each other: {}={rank} {size_name}={world} but \
                 {}={r2} {sn}={w2}; start efabench with one launcher (unset the other's \
                 variables), or pass --rank/--world/--rdzv",
                first.source, l.source, first.rank, l.rank
            )));
        }
    }
    Ok(())
}

/// Split `HOST:PORT` (or `[v6]:PORT`) and check both halves.
pub fn parse_host_port(s: &str) -> Result<(String, u16), String> {
    let s = s.trim();
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest
            .split_once(']')
            .ok_or("missing ']' after the IPv6 address")?;
        let p = p.strip_prefix(':').ok_or("missing ':PORT' after ']'")?;
        (h, p)
    } else {
        s.rsplit_once(':').ok_or("missing ':PORT'")?
    };
    if host.is_empty() {
        return Err("the host part is empty".into());
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the host contains spaces".into());
    }
    if !s.starts_with('[') && host.contains(':') {
        return Err("write IPv6 addresses in brackets, e.g. [fe80::1]:29500".into());
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("port {port:?} is not a number 1-65535"))?;
    if port == 0 {
        return Err("port 0 is not a fixed port".into());
    }
    Ok((host.to_string(), port))
}

fn check_rdzv(from: &str, value: &str) -> Result<String, BootstrapError> {
    parse_host_port(value)
        .map(|_| value.trim().to_string())
        .map_err(|why| BootstrapError::usage(format!("{from} {value:?} is not HOST:PORT ({why})")))
}

/// The port used under Slurm when `MASTER_PORT` is not set: the same on every rank of a step,
/// different for different steps, and below the Linux ephemeral range (32768-60999).
pub fn slurm_port(job_id: &str, step_id: &str) -> u16 {
    // FNV-1a over "job.step": cheap, stable across versions and platforms.
    let mut h: u32 = 0x811c_9dc5;
    for b in job_id
        .bytes()
        .chain(std::iter::once(b'.'))
        .chain(step_id.bytes())
    {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    20_000 + (h % 10_000) as u16
}

fn slurm_step(env: Env) -> Option<String> {
    get(env, "SLURM_STEP_ID").or_else(|| get(env, "SLURM_STEPID"))
}

/// Asks the launcher's PMIx server for rank 0's rendezvous (`rank`, `timeout`) → `HOST:PORT`,
/// or why it could not.
pub type PmixExchange<'a> = &'a dyn Fn(u32, Duration) -> Result<String, String>;

fn rendezvous(
    flags: &LaunchFlags,
    env: Env,
    source: &str,
    rank: u32,
    world: u32,
    pmix: Option<PmixExchange>,
) -> Result<Option<String>, BootstrapError> {
    if let Some(r) = &flags.rdzv {
        return check_rdzv("--rdzv", r).map(Some);
    }
    if let Some(r) = get(env, vars::RDZV) {
        return check_rdzv(vars::RDZV, &r).map(Some);
    }
    let slurm_job = get(env, "SLURM_JOB_ID").or_else(|| get(env, "SLURM_JOBID"));
    let derived_port = || -> Option<u16> {
        let job = slurm_job.as_ref()?;
        Some(slurm_port(
            job,
            &slurm_step(env).unwrap_or_else(|| "0".into()),
        ))
    };
    let master_port = || -> Result<Option<u16>, BootstrapError> {
        match get(env, "MASTER_PORT") {
            None => Ok(None),
            Some(p) => match p.parse::<u16>() {
                Ok(port) if port > 0 => Ok(Some(port)),
                _ => Err(BootstrapError::usage(format!(
                    "MASTER_PORT={p:?} is not a port number 1-65535"
                ))),
            },
        }
    };
    if let Some(addr) = get(env, "MASTER_ADDR") {
        let port = match master_port()? {
            Some(p) => p,
            None if source == "slurm" => derived_port().unwrap_or(29_500),
            None => {
                return Err(BootstrapError::usage(format!(
                    "MASTER_ADDR={addr} is set but MASTER_PORT is not; set MASTER_PORT (e.g. \
                     29500) or pass --rdzv {addr}:29500"
                )))
            }
        };
        let hp = if addr.contains(':') && !addr.starts_with('[') {
            format!("[{addr}]:{port}")
        } else {
            format!("{addr}:{port}")
        };
        return check_rdzv("MASTER_ADDR/MASTER_PORT", &hp).map(Some);
    }
    if source == "slurm" {
        let list_var = [
            "SLURM_STEP_NODELIST",
            "SLURM_JOB_NODELIST",
            "SLURM_NODELIST",
        ]
        .into_iter()
        .find_map(|n| get(env, n).map(|v| (n, v)));
        if let Some((name, list)) = list_var {
            let host = first_host(&list).map_err(|why| {
                BootstrapError::usage(format!(
                    "{name}={list:?} is not a Slurm host list ({why}); pass --rdzv HOST:PORT"
                ))
            })?;
            let port = match master_port()? {
                Some(p) => p,
                None => derived_port().unwrap_or(29_500),
            };
            return check_rdzv(name, &format!("{host}:{port}")).map(Some);
        }
    }
    if world == 1 {
        return Ok(None);
    }
    // mpirun (Open MPI 5) and `srun --mpi=pmix` run a PMIx server beside each rank: rank 0
    // publishes its rendezvous there and the others read it.
    let mut pmix_why = String::new();
    if let Some(exchange) = pmix.filter(|_| {
        source != "efabench launch" && source != "flags" && efabench_pmix::advertised(env)
    }) {
        match exchange(rank, flags.timeout) {
            Ok(hp) => return check_rdzv("PMIx", &hp).map(Some),
            Err(why) => pmix_why = format!(" (asking the launcher's PMIx server failed: {why})"),
        }
    }
    let msg = match source {
        "open mpi" | "mpich/pmi" => format!(
            "running under mpirun ({source}, world size {world}) but neither --rdzv HOST:PORT nor \
             MASTER_ADDR is set: mpirun does not tell the ranks where rank 0 runs; pass --rdzv \
             <rank 0's host>:29500, or export MASTER_ADDR=<rank 0's host> MASTER_PORT=29500 to all \
             ranks (Open MPI: mpirun -x MASTER_ADDR -x MASTER_PORT){pmix_why}"
        ),
        "slurm" => format!(
            "running under Slurm (world size {world}) but no node list is set \
             (SLURM_STEP_NODELIST/SLURM_JOB_NODELIST); pass --rdzv HOST:PORT or set MASTER_ADDR"
        ),
        "efabench launch" => format!(
            "{} is set but {} is not; run the ranks through `efabench launch` or set it to \
             rank 0's HOST:PORT",
            vars::RANK,
            vars::RDZV
        ),
        "torchrun" => format!(
            "RANK/WORLD_SIZE are set (world size {world}) but MASTER_ADDR is not; set \
             MASTER_ADDR and MASTER_PORT to rank 0's address, or pass --rdzv HOST:PORT"
        ),
        "indexed job" => format!(
            "JOB_COMPLETION_INDEX/WORLD_SIZE are set (Kubernetes Indexed Job, world size {world}) \
             but MASTER_ADDR is not; set MASTER_ADDR=<job>-0.<headless service> and MASTER_PORT \
             in the pod spec (deploy/k8s/indexed-job.yaml), or pass --rdzv HOST:PORT"
        ),
        _ => format!(
            "--rank/--world describe a job of {world} ranks but no rendezvous address is given; \
             pass --rdzv HOST:PORT (the address rank 0 listens on) to every rank"
        ),
    };
    Err(BootstrapError::usage(msg))
}

fn token(env: Env, source: &str) -> Result<Option<String>, BootstrapError> {
    let t = if let Some(t) = get(env, vars::JOB_TOKEN) {
        Some(t)
    } else {
        match source {
            // The token only comes from the launcher that gave the rank: with hand-given flags
            // inside a Slurm allocation, two separate `srun` steps have different step ids.
            "slurm" => get(env, "SLURM_JOB_ID")
                .or_else(|| get(env, "SLURM_JOBID"))
                .map(|job| format!("slurm:{job}.{}", slurm_step(env).unwrap_or_default())),
            "open mpi" => get(env, "PMIX_NAMESPACE")
                .or_else(|| get(env, "OMPI_MCA_ess_base_jobid"))
                .map(|ns| format!("ompi:{ns}")),
            "torchrun" => get(env, "TORCHELASTIC_RUN_ID").map(|id| format!("torchrun:{id}")),
            _ => None,
        }
    };
    match t {
        Some(t) if t.len() > MAX_TOKEN_LEN => Err(BootstrapError::usage(format!(
            "the job token is {} bytes long; at most {MAX_TOKEN_LEN} are allowed (shorten {})",
            t.len(),
            vars::JOB_TOKEN
        ))),
        t => Ok(t),
    }
}

/// Find rank, world, local rank, rendezvous and token; `env` looks up one variable.
pub fn detect(
    flags: &LaunchFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RankInfo, BootstrapError> {
    detect_with(flags, env, None)
}

/// [`detect`], asking `pmix` for the rendezvous when the launcher runs a PMIx server and gave
/// no address otherwise.
pub fn detect_with(
    flags: &LaunchFlags,
    env: &dyn Fn(&str) -> Option<String>,
    pmix: Option<PmixExchange>,
) -> Result<RankInfo, BootstrapError> {
    let (rank, world, local_rank, source) = numbers(flags, env)?;
    let rdzv = rendezvous(flags, env, source, rank, world, pmix)?;
    let token = token(env, source)?;
    Ok(RankInfo {
        rank,
        world,
        local_rank,
        rdzv,
        token,
        source,
    })
}

/// [`detect`] with the real process environment.
pub fn detect_from_process_env(flags: &LaunchFlags) -> Result<RankInfo, BootstrapError> {
    detect_with(
        flags,
        &|name| std::env::var(name).ok(),
        Some(&crate::pmix::exchange),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(flags: &LaunchFlags, vars: &[(&str, &str)]) -> Result<RankInfo, BootstrapError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        detect(flags, &|k| map.get(k).cloned())
    }

    fn ok(vars: &[(&str, &str)]) -> RankInfo {
        run(&LaunchFlags::default(), vars).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(flags: &LaunchFlags, vars: &[(&str, &str)]) -> BootstrapError {
        match run(flags, vars) {
            Ok(i) => panic!("expected an error, got {i:?}"),
            Err(e) => e,
        }
    }

    fn with_pmix(
        vars: &[(&str, &str)],
        answer: Result<&str, &str>,
    ) -> (Result<RankInfo, BootstrapError>, Vec<u32>) {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let asked = std::cell::RefCell::new(Vec::new());
        let exchange = |rank: u32, _t: Duration| {
            asked.borrow_mut().push(rank);
            answer.map(str::to_string).map_err(str::to_string)
        };
        let r = detect_with(
            &LaunchFlags::default(),
            &|k| map.get(k).cloned(),
            Some(&exchange),
        );
        (r, asked.into_inner())
    }

    #[test]
    fn mpirun_with_a_pmix_server_asks_it_for_the_rendezvous() {
        let base = [
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("PMIX_NAMESPACE", "prterun-host-123@1"),
            (
                "PMIX_SERVER_URI41",
                "prterun-host-123@0.0;tcp4://127.0.0.1:36877",
            ),
        ];
        let (r, asked) = with_pmix(&base, Ok("node1:41234"));
        let i = r.unwrap();
        assert_eq!(asked, [2]);
        assert_eq!(i.rdzv.as_deref(), Some("node1:41234"));
        assert_eq!(i.token.as_deref(), Some("ompi:prterun-host-123@1"));
        // A failed exchange keeps the old message and adds why PMIx did not answer.
        let (r, _) = with_pmix(&base, Err("no PMIx library could be loaded"));
        let s = r.unwrap_err().to_string();
        assert!(
            s.starts_with("running under mpirun (open mpi, world size 4) but neither --rdzv"),
            "{s}"
        );
        assert!(
            s.contains("asking the launcher's PMIx server failed: no PMIx library"),
            "{s}"
        );
        // MASTER_ADDR and --rdzv still win: PMIx is not asked.
        let mut v = base.to_vec();
        v.extend([("MASTER_ADDR", "head"), ("MASTER_PORT", "29500")]);
        let (r, asked) = with_pmix(&v, Ok("x:1"));
        assert_eq!(r.unwrap().rdzv.as_deref(), Some("head:29500"));
        assert!(asked.is_empty());
        // Without a server address (a launcher that offers nothing) PMIx is not asked either.
        let (r, asked) = with_pmix(&base[..3], Ok("x:1"));
        assert!(r.unwrap_err().to_string().contains("neither --rdzv"));
        assert!(asked.is_empty());
        // An answer that is not HOST:PORT is refused, naming PMIx.
        let (r, _) = with_pmix(&base, Ok("garbage"));
        assert!(r.unwrap_err().to_string().contains("PMIx"));
    }

    #[test]
    fn contradicting_slurm_and_mpi_environments_are_refused_naming_both() {
        let v = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_NODELIST", "n[1-2]"),
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "16"),
        ];
        let e = err(&LaunchFlags::default(), &v);
        assert!(e.is_usage());
        let s = e.to_string();
        assert!(
            s.contains("slurm and open mpi environments contradict each other"),
            "{s}"
        );
        assert!(s.contains("SLURM_PROCID=1 SLURM_NTASKS=2"), "{s}");
        assert!(
            s.contains("OMPI_COMM_WORLD_RANK=5 OMPI_COMM_WORLD_SIZE=16"),
            "{s}"
        );
        // Open MPI against MPICH's PMI names.
        let v = [
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
        ];
        let s = err(&LaunchFlags::default(), &v).to_string();
        assert!(s.contains("open mpi and mpich/pmi"), "{s}");
        // Agreeing launchers (mpirun inside an allocation, one rank per node) are fine.
        let v = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_NODELIST", "n[1-2]"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ];
        assert_eq!(ok(&v).source, "slurm");
        // Slurm variables outside a step (an sbatch script running mpirun) do not count.
        let v = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_JOB_ID", "7"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ];
        assert_eq!(ok(&v).source, "open mpi");
    }

    #[test]
    fn kubernetes_indexed_job_variables() {
        let pod = [
            ("JOB_COMPLETION_INDEX", "3"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "efabench-0.efabench"),
            ("MASTER_PORT", "29500"),
            ("EFABENCH_JOB_TOKEN", "efabench"),
            ("HOSTNAME", "efabench-3"),
        ];
        let i = ok(&pod);
        assert_eq!(
            (i.rank, i.world, i.local_rank, i.source),
            (3, 4, 0, "indexed job")
        );
        assert_eq!(i.rdzv.as_deref(), Some("efabench-0.efabench:29500"));
        assert_eq!(i.token.as_deref(), Some("efabench"));
        // The index without the world size is an error naming the missing variable.
        let e = err(&LaunchFlags::default(), &pod[..1]).to_string();
        assert!(
            e.contains("JOB_COMPLETION_INDEX is set but WORLD_SIZE is not"),
            "{e}"
        );
        // Without MASTER_ADDR the message points at the Service's DNS name.
        let e = err(&LaunchFlags::default(), &pod[..2]).to_string();
        assert!(e.contains("MASTER_ADDR=<job>-0.<headless service>"), "{e}");
        // Out of range index.
        let e = err(
            &LaunchFlags::default(),
            &[("JOB_COMPLETION_INDEX", "4"), ("WORLD_SIZE", "4")],
        );
        assert!(
            e.to_string()
                .contains("must be smaller than WORLD_SIZE = 4"),
            "{e}"
        );
        // RANK (torchrun names, e.g. a JobSet's global rank) wins over the per-job index.
        let mut v = pod.to_vec();
        v.push(("RANK", "1"));
        let i = ok(&v);
        assert_eq!((i.rank, i.source), (1, "torchrun"));
    }

    #[test]
    fn nothing_set_is_one_rank() {
        assert_eq!(ok(&[]), RankInfo::single());
        // Unrelated generic variables alone do not make a torchrun job.
        assert_eq!(ok(&[("RANK", "3")]).world, 1);
    }

    #[test]
    fn flags_win_over_every_launcher() {
        let flags = LaunchFlags {
            rank: Some(1),
            world: Some(2),
            rdzv: Some("node7:4000".into()),
            ..LaunchFlags::default()
        };
        let i = run(
            &flags,
            &[
                ("SLURM_PROCID", "5"),
                ("SLURM_NTASKS", "8"),
                ("MASTER_ADDR", "x"),
                ("MASTER_PORT", "1"),
            ],
        )
        .unwrap();
        assert_eq!(
            (i.rank, i.world, i.local_rank, i.source),
            (1, 2, 0, "flags")
        );
        assert_eq!(i.rdzv.as_deref(), Some("node7:4000"));
        assert_eq!(
            i.token, None,
            "Slurm's token must not apply to hand-given ranks"
        );
    }

    #[test]
    fn flags_need_both_and_a_rendezvous() {
        let only_rank = LaunchFlags {
            rank: Some(1),
            ..LaunchFlags::default()
        };
        assert!(err(&only_rank, &[])
            .to_string()
            .contains("--rank was given without --world"));
        let only_world = LaunchFlags {
            world: Some(2),
            ..LaunchFlags::default()
        };
        assert!(err(&only_world, &[])
            .to_string()
            .contains("--world was given without --rank"));
        let no_rdzv = LaunchFlags {
            rank: Some(0),
            world: Some(2),
            ..LaunchFlags::default()
        };
        let e = err(&no_rdzv, &[]);
        assert!(
            e.is_usage() && e.to_string().contains("pass --rdzv HOST:PORT"),
            "{e}"
        );
        let bad = LaunchFlags {
            rank: Some(2),
            world: Some(2),
            ..LaunchFlags::default()
        };
        assert!(err(&bad, &[])
            .to_string()
            .contains("--rank = 2 from the command line must be smaller"));
        let bad_rdzv = LaunchFlags {
            rdzv: Some("host".into()),
            rank: Some(0),
            world: Some(2),
            ..LaunchFlags::default()
        };
        assert!(err(&bad_rdzv, &[]).to_string().contains("missing ':PORT'"));
        // A single rank by hand needs nothing else.
        let single = LaunchFlags {
            rank: Some(0),
            world: Some(1),
            ..LaunchFlags::default()
        };
        assert_eq!(run(&single, &[]).unwrap().rdzv, None);
    }

    #[test]
    fn efabench_launch_variables() {
        let i = ok(&[
            ("EFABENCH_RANK", "3"),
            ("EFABENCH_WORLD_SIZE", "4"),
            ("EFABENCH_LOCAL_RANK", "3"),
            ("EFABENCH_RDZV", "127.0.0.1:41234"),
            ("EFABENCH_JOB_TOKEN", "abc123"),
            // Launch wins over an outer Slurm allocation and over MASTER_ADDR.
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("MASTER_ADDR", "elsewhere"),
            ("MASTER_PORT", "1"),
        ]);
        assert_eq!(
            i,
            RankInfo {
                rank: 3,
                world: 4,
                local_rank: 3,
                rdzv: Some("127.0.0.1:41234".into()),
                token: Some("abc123".into()),
                source: "efabench launch"
            }
        );
        let e = err(
            &LaunchFlags::default(),
            &[("EFABENCH_RANK", "1"), ("EFABENCH_WORLD_SIZE", "2")],
        );
        assert!(e.to_string().contains("EFABENCH_RDZV is not"), "{e}");
        let e = err(&LaunchFlags::default(), &[("EFABENCH_RANK", "1")]);
        assert!(
            e.to_string()
                .contains("EFABENCH_RANK is set but EFABENCH_WORLD_SIZE is not"),
            "{e}"
        );
    }

    #[test]
    fn slurm_variables_nodelist_and_derived_port() {
        let vars = [
            ("SLURM_PROCID", "9"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "3"),
            ("SLURM_STEP_NODELIST", "p5-[001-004,007],p5-010"),
            ("SLURM_JOB_NODELIST", "other[1-2]"),
        ];
        let i = ok(&vars);
        let port = slurm_port("4242", "3");
        assert!((20_000..30_000).contains(&port));
        assert_ne!(
            port,
            slurm_port("4242", "4"),
            "two steps of a job should not share a port"
        );
        assert_eq!(
            (i.rank, i.world, i.local_rank, i.source),
            (9, 16, 1, "slurm")
        );
        assert_eq!(i.rdzv, Some(format!("p5-001:{port}")));
        assert_eq!(i.token.as_deref(), Some("slurm:4242.3"));

        // MASTER_PORT overrides the derived port; MASTER_ADDR overrides the node list.
        let mut v = vars.to_vec();
        v.push(("MASTER_PORT", "5555"));
        assert_eq!(ok(&v).rdzv.as_deref(), Some("p5-001:5555"));
        v.push(("MASTER_ADDR", "10.0.0.9"));
        assert_eq!(ok(&v).rdzv.as_deref(), Some("10.0.0.9:5555"));

        // Without the step list, the job list is used; SLURM_NPROCS stands in for SLURM_NTASKS.
        let i = ok(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NPROCS", "2"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEPID", "2"),
            ("SLURM_JOB_NODELIST", "gpu[12-13]"),
        ]);
        assert_eq!(i.rdzv, Some(format!("gpu12:{}", slurm_port("7", "2"))));
        assert_eq!(i.local_rank, 0);

        let e = err(
            &LaunchFlags::default(),
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_ID", "0"),
            ],
        );
        assert!(e.to_string().contains("no node list"), "{e}");

        // A batch script (no step id) is not a task of a step: one rank, Slurm ignored.
        let i = ok(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "gpu[12-13]"),
        ]);
        assert_eq!((i.world, i.source, i.rdzv), (1, "none", None));
        let e = err(
            &LaunchFlags::default(),
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_JOB_NODELIST", "a[1-"),
            ],
        );
        assert!(e.to_string().contains("not a Slurm host list"), "{e}");
        let e = err(
            &LaunchFlags::default(),
            &[
                ("SLURM_PROCID", "x"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_ID", "0"),
            ],
        );
        assert!(
            e.to_string()
                .contains("SLURM_PROCID=\"x\" is not a non-negative integer"),
            "{e}"
        );
    }

    #[test]
    fn open_mpi_variables_and_the_missing_address_error() {
        let base = [
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("PMIX_NAMESPACE", "prterun-host-123@1"),
        ];
        let e = err(&LaunchFlags::default(), &base);
        assert!(e.is_usage());
        let s = e.to_string();
        assert!(s.starts_with("running under mpirun (open mpi, world size 4) but neither --rdzv HOST:PORT nor MASTER_ADDR is set"), "{s}");
        let mut v = base.to_vec();
        v.extend([("MASTER_ADDR", "head"), ("MASTER_PORT", "29500")]);
        let i = ok(&v);
        assert_eq!(
            (i.rank, i.world, i.local_rank, i.source),
            (2, 4, 0, "open mpi")
        );
        assert_eq!(i.rdzv.as_deref(), Some("head:29500"));
        assert_eq!(i.token.as_deref(), Some("ompi:prterun-host-123@1"));
        // MASTER_ADDR without MASTER_PORT outside Slurm is an error that names the fix.
        let mut v = base.to_vec();
        v.push(("MASTER_ADDR", "head"));
        assert!(err(&LaunchFlags::default(), &v)
            .to_string()
            .contains("MASTER_PORT is not"));
        let flags = LaunchFlags {
            rdzv: Some("[fe80::1]:7000".into()),
            ..LaunchFlags::default()
        };
        assert_eq!(
            run(&flags, &base).unwrap().rdzv.as_deref(),
            Some("[fe80::1]:7000")
        );
    }

    #[test]
    fn mpich_pmi_variables() {
        let base = [
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "3"),
            ("MPI_LOCALRANKID", "1"),
        ];
        let e = err(&LaunchFlags::default(), &base);
        assert!(
            e.to_string().starts_with("running under mpirun (mpich/pmi"),
            "{e}"
        );
        let mut v = base.to_vec();
        v.extend([("MASTER_ADDR", "fe80::2"), ("MASTER_PORT", "600")]);
        let i = ok(&v);
        assert_eq!(
            (i.rank, i.world, i.local_rank, i.source),
            (1, 3, 1, "mpich/pmi")
        );
        assert_eq!(i.rdzv.as_deref(), Some("[fe80::2]:600"));
        assert_eq!(i.token, None);
        let e = err(&LaunchFlags::default(), &[("PMI_SIZE", "3")]);
        assert!(
            e.to_string()
                .contains("PMI_SIZE is set but PMI_RANK is not"),
            "{e}"
        );
    }

    #[test]
    fn torchrun_variables() {
        let i = ok(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "trainer-0.trainer"),
            ("MASTER_PORT", "23456"),
            ("TORCHELASTIC_RUN_ID", "job-xyz"),
        ]);
        assert_eq!(
            (i.rank, i.world, i.local_rank, i.source),
            (5, 8, 1, "torchrun")
        );
        assert_eq!(i.rdzv.as_deref(), Some("trainer-0.trainer:23456"));
        assert_eq!(i.token.as_deref(), Some("torchrun:job-xyz"));
        let e = err(
            &LaunchFlags::default(),
            &[("RANK", "0"), ("WORLD_SIZE", "2")],
        );
        assert!(e.to_string().contains("MASTER_ADDR is not"), "{e}");
        let e = err(
            &LaunchFlags::default(),
            &[("RANK", "0"), ("WORLD_SIZE", "0")],
        );
        assert!(e.to_string().contains("out of range"), "{e}");
        let e = err(
            &LaunchFlags::default(),
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "99999"),
            ],
        );
        assert!(e.to_string().contains("MASTER_PORT=\"99999\""), "{e}");
    }

    #[test]
    fn launcher_order_is_slurm_ompi_pmi_torchrun() {
        let all = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_NODELIST", "n1"),
            // Slurm, Open MPI and PMI must agree (else the job is refused, see
            // contradicting_slurm_and_mpi_environments_are_refused_naming_both); the order
            // decides the source. torchrun's generic names are not cross-checked.
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("RANK", "4"),
            ("WORLD_SIZE", "5"),
            ("MASTER_ADDR", "m"),
            ("MASTER_PORT", "1"),
        ];
        assert_eq!(ok(&all).source, "slurm");
        assert_eq!(ok(&all).rank, 1);
        assert_eq!(ok(&all[4..]).source, "open mpi");
        assert_eq!(ok(&all[6..]).source, "mpich/pmi");
        assert_eq!(ok(&all[8..]).source, "torchrun");
    }

    #[test]
    fn job_token_variable_wins_and_is_bounded() {
        let i = ok(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_JOB_ID", "1"),
            ("SLURM_STEP_ID", "0"),
            ("EFABENCH_JOB_TOKEN", "mine"),
        ]);
        assert_eq!((i.source, i.token.as_deref()), ("slurm", Some("mine")));
        let long = "x".repeat(MAX_TOKEN_LEN + 1);
        assert!(err(&LaunchFlags::default(), &[("EFABENCH_JOB_TOKEN", &long)]).is_usage());
    }

    #[test]
    fn host_port_parsing() {
        assert_eq!(parse_host_port("h:1").unwrap(), ("h".to_string(), 1));
        assert_eq!(
            parse_host_port("[::1]:29500").unwrap(),
            ("::1".to_string(), 29500)
        );
        for bad in [
            "h", ":1", "h:0", "h:70000", "::1:5", "[::1]5", "a b:3", "[::1",
        ] {
            assert!(parse_host_port(bad).is_err(), "{bad:?}");
        }
    }
}
