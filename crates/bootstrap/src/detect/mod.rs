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

/// Whether environment variable `name` is one through which a launcher tells a rank who it is
/// or where rank 0 runs: every name the detection reads, and the families those launchers set
/// (`EFABENCH_`, `SLURM_`, `OMPI_`, `PMI_`, `PMIX_`, `TORCHELASTIC_`). A process that starts ranks
/// of its own (a test, a wrapper) removes these so that the job is only what it gives.
pub fn is_launcher_var(name: &str) -> bool {
    const FAMILIES: &[&str] = &[
        "EFABENCH_",
        "SLURM_",
        "OMPI_",
        "PMI_",
        "PMIX_",
        "TORCHELASTIC_",
    ];
    FAMILIES.iter().any(|f| name.starts_with(f))
        || ["MASTER_ADDR", "MASTER_PORT"].contains(&name)
        || LAUNCHERS
            .iter()
            .any(|l| l.rank == name || l.local == name || l.size.contains(&name))
}

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
pub type PmixExchange<'a> = &'a dyn Fn(u32, Duration) -> Result<String, crate::pmix::ExchangeError>;

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
mod tests;
