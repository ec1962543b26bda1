//! `efabench proxy` as real ranks over loopback, with the host producer standing in for the GPU
//! (this machine has none): every mode over shm and tcp, 1 and 2 rails, payloads verified, the
//! stage breakdown in every record; a killed target fails the initiator fast; and without a
//! CUDA driver the GPU producer is refused with exit 2 and "no CUDA driver".

use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::*;

fn modes(provider: &str, rails: u32, threads: &str) {
    let dir = tmp(&format!("{provider}-{rails}-{threads}"));
    let out = dir.join("r.jsonl");
    let rails_s = rails.to_string();
    let outs = job(
        2,
        &[
            "proxy",
            "--producer",
            "host",
            "-p",
            provider,
            "-b",
            "64",
            "-e",
            "256K",
            "-f",
            "64",
            "-n",
            "6",
            "-w",
            "1",
            "--puts",
            "8",
            "--ring-slots",
            "16",
            "--rails",
            &rails_s,
            "--proxy-threads",
            threads,
            "--timeout",
            "30",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r} of proxy/{provider}/{rails} failed: {}\n{}",
            o.status,
            text(&o.stderr)
        );
    }
    let said = text(&outs[0].stdout) + &text(&outs[0].stderr);
    assert!(said.contains("nbi/cpu"), "summary of ratios: {said}");
    let recs: Vec<efabench_report::Record> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| efabench_report::validate_line(l).expect("record validates"))
        .collect();
    // 64, 4K, 256K × cpu, blocking, nbi.
    assert_eq!(recs.len(), 9);
    for r in &recs {
        assert_eq!(r.bench, "proxy");
        assert_eq!(r.errors, 0, "{r:?}");
        assert!(r.verified && r.bw_gbps > 0.0, "{r:?}");
        assert_eq!(r.rails, rails);
        assert_eq!(r.extra["producer"], "host");
        assert_eq!(r.extra["proxy_threads"], threads);
        let st = r.extra["stages"].as_object().expect("stages");
        for k in [
            "pop_to_post",
            "post_to_completion",
            "post_to_arrival",
            "push_to_quiet",
        ] {
            assert!(st[k]["p50_us"].as_f64().is_some(), "{k} in {r:?}");
        }
        if r.variant != "cpu" {
            assert!(st["push_to_pop"]["p50_us"].as_f64().is_some(), "{r:?}");
        }
        // Eight puts per iteration (with 2 rails a 256K put is two stripes).
        let stripes = if rails == 2 && r.size_bytes > 128 << 10 {
            2
        } else {
            1
        };
        assert_eq!(r.extra["commands"], 8 * 7 * stripes, "{r:?}");
    }
    let blocking: Vec<_> = recs.iter().filter(|r| r.variant == "blocking").collect();
    assert!(
        blocking.iter().all(|r| r.extra["batch_mean"] == 1.0),
        "one put at a time"
    );
}

#[test]
fn shm_every_mode_one_rail() {
    modes("shm", 1, "rail");
}

#[test]
fn tcp_every_mode_two_rails() {
    modes("tcp", 2, "rail");
}

#[test]
fn shm_one_proxy_thread_for_two_rails() {
    modes("shm", 2, "gpu");
}

#[test]
fn a_killed_target_fails_the_initiator_fast() {
    let port = free_port();
    let args = [
        "proxy",
        "--producer",
        "host",
        "-p",
        "tcp",
        "-b",
        "8",
        "-e",
        "8",
        "-n",
        "10000000",
        "--modes",
        "nbi",
        "--timeout",
        "5",
    ];
    let mut r0 = rank(0, 2, port, &args, &[]);
    let mut r1 = rank(1, 2, port, &args, &[]);
    std::thread::sleep(Duration::from_secs(3));
    r1.kill().unwrap();
    let _ = r1.wait();
    let t0 = Instant::now();
    let o = loop {
        if r0.try_wait().unwrap().is_some() {
            break r0.wait_with_output().unwrap();
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = r0.kill();
            panic!("rank 0 still running 20 s after its target was killed");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("rank 1"),
        "the message names the dead rank: {err}"
    );
}

#[test]
fn gpu_producer_without_a_driver_exits_2() {
    if efabench_gpu::driver().is_ok() {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    let o = Command::new(BIN)
        .args(["proxy", "-p", "shm"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("no CUDA driver") && err.contains("--producer host"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
