//! `efabench proxy` as real ranks over loopback, with the host producer standing in for the GPU
//! (this machine has none): every mode over shm and tcp, 1 and 2 rails, payloads verified, the
//! stage breakdown in every record; a killed target fails the initiator fast; and without a
//! CUDA driver the GPU producer is refused with exit 2 and "no CUDA driver".

use std::process::Command;
use std::time::Duration;

mod common;
use common::failures::*;
use common::*;

fn modes(provider: &str, rails: u32, threads: &str) {
    let line = format!(
        "proxy --producer host -p {provider} -b 64 -e 256K -f 64 -n 6 -w 1 --puts 8 \
         --ring-slots 16 --rails {rails} --proxy-threads {threads} --timeout 30"
    );
    let run = recorded(&format!("{provider}-{rails}-{threads}"), 2, &words(&line));
    let recs = run.passed(&format!("proxy/{provider}/{rails}"));
    let said = run.stdout(0) + &run.stderr(0);
    assert!(said.contains("nbi/cpu"), "summary of ratios: {said}");
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
    let args = words("proxy --producer host -p tcp -b 8 -e 8 -n 10000000 --modes nbi --timeout 5");
    let hit = Hit::kill(1, Duration::from_secs(3), Duration::from_secs(20));
    the_others_name_the_hit_rank(2, &args, hit);
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
