//! The rendezvous itself: a wrong token, random and truncated bytes, idle connections, names and
//! the any-address as the rendezvous, and the check that every rank was started with the same
//! options.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use efabench_bootstrap::wire::{self, Hello};
use efabench_bootstrap::{Bootstrap, BootstrapError};

/// Rank 0 of a 2-rank job in a thread; returns what its all_gather and barrier produced.
fn hub_thread(rdzv: &str) -> std::thread::JoinHandle<Result<Vec<Vec<u8>>, BootstrapError>> {
    let i = info(0, 2, rdzv, "good-token");
    std::thread::spawn(move || {
        let b = Bootstrap::connect(&i, Duration::from_secs(30))?;
        let t = b.all_gather(b"zero")?;
        b.barrier()?;
        Ok(t)
    })
}

fn wrong_token_is_refused_and_the_job_goes_on() {
    let rdzv = free_rdzv();
    let hub = hub_thread(&rdzv);
    let e =
        Bootstrap::connect(&info(1, 2, &rdzv, "evil-token"), Duration::from_secs(20)).unwrap_err();
    assert!(
        matches!(e, BootstrapError::Refused { .. }) && e.to_string().contains("wrong job token"),
        "{e}"
    );
    let e =
        Bootstrap::connect(&info(1, 3, &rdzv, "good-token"), Duration::from_secs(5)).unwrap_err();
    assert!(e.to_string().contains("world size mismatch"), "{e}");
    let b = Bootstrap::connect(&info(1, 2, &rdzv, "good-token"), Duration::from_secs(20)).unwrap();
    let e =
        Bootstrap::connect(&info(1, 2, &rdzv, "good-token"), Duration::from_secs(5)).unwrap_err();
    assert!(e.to_string().contains("rank 1 is already connected"), "{e}");
    assert_eq!(
        b.all_gather(b"one").unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
    b.barrier().unwrap();
    assert_eq!(
        hub.join().unwrap().unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
    b.check().unwrap();
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn random_and_truncated_bytes_do_not_disturb_the_rendezvous() {
    let rdzv = free_rdzv();
    let hub = hub_thread(&rdzv);
    // Wait until rank 0 listens.
    let until = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&rdzv).is_err() {
        assert!(Instant::now() < until, "rank 0 never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let stranger = Hello {
        rank: 1,
        world: 2,
        pid: 1,
        token: "fuzz".into(),
        host: "fuzz".into(),
    };
    let hello = wire::frame(wire::T_HELLO, &stranger.encode());
    let mut rng = Rng(0x00c0_ffee_1234_5678);
    const CONNECTIONS: usize = 400;
    for i in 0..CONNECTIONS {
        let bytes: Vec<u8> = match i % 6 {
            0 => {
                let n = rng.below(2048) as usize;
                rng.bytes(n)
            }
            1 => {
                // A length far beyond any limit, then some bytes.
                let mut v = ((rng.next() as u32) | 0x8000_0000).to_le_bytes().to_vec();
                let n = rng.below(64) as usize;
                v.extend(rng.bytes(n));
                v
            }
            2 => hello[..rng.below(hello.len() as u64) as usize].to_vec(),
            3 => {
                let mut v = hello.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(v.len() as u64) as usize;
                    v[at] = rng.next() as u8;
                }
                v
            }
            4 => {
                let kind = rng.next() as u8;
                let n = rng.below(wire::MAX_HELLO as u64) as usize;
                wire::frame(kind, &rng.bytes(n))
            }
            _ => Vec::new(),
        };
        let mut s = TcpStream::connect(&rdzv).expect("the rendezvous stopped accepting");
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        if i % 50 == 0 {
            // Now and then read the answer to the end: rank 0 must answer or close, never hang.
            s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            let mut sink = Vec::new();
            let r = s.take(64 << 10).read_to_end(&mut sink);
            // Closed (EOF, or a reset because it left our junk unread) is fine; a timeout is not.
            let hung = matches!(&r, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
            assert!(!hung, "rank 0 did not close a junk connection: {r:?}");
        }
    }
    let b = Bootstrap::connect(&info(1, 2, &rdzv, "good-token"), Duration::from_secs(20)).unwrap();
    assert_eq!(
        b.all_gather(b"one").unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
    b.barrier().unwrap();
    assert_eq!(
        hub.join().unwrap().unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
}

fn idle_connections_do_not_lock_the_last_rank_out() {
    let rdzv = free_rdzv();
    let hub = hub_thread(&rdzv);
    let until = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&rdzv).is_err() {
        assert!(Instant::now() < until, "rank 0 never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    // 200 connections that never say anything, held open while the last rank joins.
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(&rdzv).expect("connect"))
        .collect();
    let t0 = Instant::now();
    let b = Bootstrap::connect(&info(1, 2, &rdzv, "good-token"), Duration::from_secs(20)).unwrap();
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the last rank needed {took:?} to get in"
    );
    assert_eq!(
        b.all_gather(b"one").unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
    b.barrier().unwrap();
    hub.join().unwrap().unwrap();
    drop(idle);
}

fn rendezvous_by_name_and_on_all_interfaces() {
    for host in ["localhost", "0.0.0.0"] {
        let port = free_rdzv().rsplit_once(':').unwrap().1.to_string();
        let rdzv = format!("{host}:{port}");
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let i = info(r, 3, &rdzv, "name-test");
                std::thread::spawn(move || {
                    let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                    b.all_gather(&[r as u8])
                })
            })
            .collect();
        for h in handles {
            let t = h.join().unwrap().unwrap_or_else(|e| panic!("{rdzv}: {e}"));
            assert_eq!(t, vec![vec![0], vec![1], vec![2]]);
        }
    }
}

fn different_options_are_named_on_every_rank() {
    let rdzv = free_rdzv();
    let handles: Vec<_> = (0..4)
        .map(|r| {
            let i = info(r, 4, &rdzv, "same-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                b.check_same("options", "sendrecv -b 8 -e 1M --window 64 --check")?;
                let window = if r == 2 { "32" } else { "64" };
                let check = if r >= 2 { "--no-check" } else { "--check" };
                b.check_same(
                    "options",
                    &format!("sendrecv -b 8 -e 1M --window {window} {check}"),
                )?;
                b.barrier()
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let e = h.join().unwrap().unwrap_err();
        assert!(e.is_usage(), "rank {r}: {e}");
        assert_eq!(
            e.to_string(),
            "rank 2 was started with different options than rank 0: `--window 32 --no-check` \
             vs `--window 64 --check`; start every rank with the same options",
            "rank {r}"
        );
    }
}

fn a_rank_that_skips_the_option_check_is_caught() {
    let rdzv = free_rdzv();
    let handles: Vec<_> = (0..2)
        .map(|r| {
            let i = info(r, 2, &rdzv, "skip-test");
            std::thread::spawn(move || {
                let b = Bootstrap::connect(&i, Duration::from_secs(20))?;
                if r == 1 {
                    b.all_gather(b"x").map(drop)
                } else {
                    b.check_same("options", "a")
                }
            })
        })
        .collect();
    for h in handles {
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("check_same"), "{e}");
    }
}

fn main() {
    common::main(&[
        (
            "wrong_token_is_refused_and_the_job_goes_on",
            wrong_token_is_refused_and_the_job_goes_on,
        ),
        (
            "random_and_truncated_bytes_do_not_disturb_the_rendezvous",
            random_and_truncated_bytes_do_not_disturb_the_rendezvous,
        ),
        (
            "idle_connections_do_not_lock_the_last_rank_out",
            idle_connections_do_not_lock_the_last_rank_out,
        ),
        (
            "rendezvous_by_name_and_on_all_interfaces",
            rendezvous_by_name_and_on_all_interfaces,
        ),
        (
            "different_options_are_named_on_every_rank",
            different_options_are_named_on_every_rank,
        ),
        (
            "a_rank_that_skips_the_option_check_is_caught",
            a_rank_that_skips_the_option_check_is_caught,
        ),
    ]);
}
