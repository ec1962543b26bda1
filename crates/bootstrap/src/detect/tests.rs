//! Tests of `detect`.

use super::*;
use crate::pmix::ExchangeError;
use efabench_pmix::PmixError;
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
    answer: Result<&str, PmixError>,
) -> (Result<RankInfo, BootstrapError>, Vec<u32>) {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let asked = std::cell::RefCell::new(Vec::new());
    let exchange = |rank: u32, _t: Duration| {
        asked.borrow_mut().push(rank);
        answer
            .clone()
            .map(str::to_string)
            .map_err(ExchangeError::from)
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
    let (r, _) = with_pmix(
        &base,
        Err(PmixError::NoLibrary {
            tried: "none of the candidate files exists".into(),
        }),
    );
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

#[test]
fn launcher_variables_are_the_ones_detection_reads_and_their_families() {
    for v in [
        "EFABENCH_RANK",
        "SLURM_JOB_ID",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "MPI_LOCALRANKID",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "JOB_COMPLETION_INDEX",
        "MASTER_ADDR",
        "TORCHELASTIC_RUN_ID",
    ] {
        assert!(is_launcher_var(v), "{v}");
    }
    for v in ["PATH", "FI_PROVIDER", "CUDA_VISIBLE_DEVICES", "RANKS"] {
        assert!(!is_launcher_var(v), "{v}");
    }
}
