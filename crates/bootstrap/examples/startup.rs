//! How long does a job take to meet? Time from starting N local ranks to the first completed
//! barrier (spawn, connect with back-off, handshake, barrier), measured on one host.
//!
//! `cargo run --release -p efabench-bootstrap --example startup -- 64 [repeats]`
//!
//! The example starts itself N times as ranks; rank 0 reports when its first barrier returned,
//! as wall-clock time since the parent began spawning.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use efabench_bootstrap::{detect_from_process_env, Bootstrap, LaunchFlags};

const T0: &str = "EFABENCH_STARTUP_T0_NS";

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn rank() -> i32 {
    let flags = LaunchFlags {
        timeout: Duration::from_secs(60),
        ..LaunchFlags::default()
    };
    let run = || -> Result<(), efabench_bootstrap::BootstrapError> {
        let info = detect_from_process_env(&flags)?;
        let b = Bootstrap::connect(&info, flags.timeout)?;
        b.barrier()?;
        if b.rank() == 0 {
            let t0: u128 = std::env::var(T0)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            println!("{}", now_ns().saturating_sub(t0));
        }
        // Stay until everyone is through, so no rank sees a goodbye mid-barrier.
        b.barrier()
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn main() {
    if std::env::var(T0).is_ok() {
        std::process::exit(rank());
    }
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let repeats: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let exe = std::env::current_exe().expect("current_exe");
    let mut firsts = Vec::new();
    for rep in 0..repeats {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let token = efabench_bootstrap::launcher::random_token();
        let start = Instant::now();
        let t0 = now_ns();
        let children: Vec<_> = (0..n)
            .map(|r| {
                Command::new(&exe)
                    .env(T0, t0.to_string())
                    .env("EFABENCH_RANK", r.to_string())
                    .env("EFABENCH_WORLD_SIZE", n.to_string())
                    .env("EFABENCH_LOCAL_RANK", r.to_string())
                    .env("EFABENCH_RDZV", format!("127.0.0.1:{port}"))
                    .env("EFABENCH_JOB_TOKEN", &token)
                    .stdout(if r == 0 {
                        Stdio::piped()
                    } else {
                        Stdio::null()
                    })
                    .spawn()
                    .expect("spawn rank")
            })
            .collect();
        let spawned = start.elapsed();
        let mut first_ms = None;
        for (r, c) in children.into_iter().enumerate() {
            let out = c.wait_with_output().expect("wait");
            assert!(out.status.success(), "rank {r} failed");
            if r == 0 {
                let ns: f64 = String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .unwrap_or(f64::NAN);
                first_ms = Some(ns / 1e6);
            }
        }
        let first_ms = first_ms.unwrap_or(f64::NAN);
        println!(
            "run {rep}: {n} ranks: spawned in {:.0} ms, first barrier after {first_ms:.0} ms, all exited after {:.0} ms",
            spawned.as_secs_f64() * 1e3,
            start.elapsed().as_secs_f64() * 1e3
        );
        firsts.push(first_ms);
    }
    firsts.sort_by(f64::total_cmp);
    println!(
        "{n} ranks, start to first completed barrier: median {:.0} ms, min {:.0} ms, max {:.0} ms over {} runs",
        firsts[firsts.len() / 2],
        firsts[0],
        firsts[firsts.len() - 1],
        firsts.len()
    );
}
