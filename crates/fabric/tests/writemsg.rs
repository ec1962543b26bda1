//! Writes with [`Flags::MORE`] and [`Flags::DELIVERY_COMPLETE`] (`fi_writemsg` with `FI_MORE` and
//! `FI_DELIVERY_COMPLETE`) on one rail talking to itself, over tcp on loopback and shm: a batch of writes posted with `more`
//! set on all but the last lands byte for byte, each delivers its CQ data once, and each local
//! completion carries its context. The proxy benchmark posts its batches this way.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_fabric::{
    first_provider, load_library, Completion, Flags, Hints, HostBuffer, Op, Rail, RailConfig,
};

fn rail(provider: &str) -> Rail {
    load_library(None).expect("libfabric must be loadable for this test");
    let mut hints = Hints::provider(provider);
    if provider == "tcp" {
        hints.node = Some("127.0.0.1".into());
    }
    let info = first_provider(&hints).expect("provider");
    Rail::open(&info, &RailConfig::default()).expect("open rail")
}

fn batch(provider: &str, delivery: bool) {
    const N: usize = 16;
    const LEN: usize = 3000;
    let rail = rail(provider);
    let src = Arc::new(HostBuffer::new(N * LEN).unwrap());
    let dst = Arc::new(HostBuffer::new(N * LEN).unwrap());
    let src_id = rail.register(src.clone()).unwrap();
    let dst_id = rail.register(dst.clone()).unwrap();
    let me = rail.insert_peer(&rail.address().unwrap()).unwrap();
    let remote = rail.remote_region(dst_id).unwrap();
    let want: Vec<u8> = (0..N * LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    src.write_at(0, &want).unwrap();
    let flags = if delivery {
        Flags::DELIVERY_COMPLETE
    } else {
        Flags::NONE
    };
    // Put i goes to slot N-1-i, so an ignored remote offset shows up as a mismatch.
    for i in 0..N {
        let remote_off = ((N - 1 - i) * LEN) as u64;
        rail.post(Op::Write {
            peer: me,
            local: src_id.range(i * LEN, LEN),
            remote: remote.at(remote_off),
            data: Some(i as u64),
            flags: flags.more_if(i + 1 < N),
            ctx: 100 + i as u64,
        })
        .unwrap_or_else(|e| panic!("{provider}: {e}"));
    }
    let mut local = BTreeSet::new();
    let mut data = BTreeSet::new();
    let mut out = [Completion::default(); 16];
    let deadline = Instant::now() + Duration::from_secs(20);
    while local.len() < N || data.len() < N {
        assert!(
            Instant::now() < deadline,
            "{provider}: {} local, {} remote",
            local.len(),
            data.len()
        );
        let n = rail.poll(&mut out).unwrap();
        for c in &out[..n] {
            if let Some(d) = c.remote_data() {
                assert!(data.insert(d), "CQ data {d} twice");
            } else {
                assert!(local.insert(c.context), "context {} twice", c.context);
            }
        }
    }
    assert_eq!(local, (100..100 + N as u64).collect());
    assert_eq!(data, (0..N as u64).collect());
    let got = dst.to_vec(0, N * LEN).unwrap();
    for i in 0..N {
        let at = (N - 1 - i) * LEN;
        assert_eq!(&got[at..at + LEN], &want[i * LEN..(i + 1) * LEN], "put {i}");
    }
    // Out of range stays an error, not a post.
    assert!(rail
        .post(Op::Write {
            peer: me,
            local: src_id.range(0, LEN),
            remote: remote.at((N * LEN) as u64),
            data: Some(0),
            flags,
            ctx: 0,
        })
        .is_err());
    // An inject cannot be batched: a usage error, not a silently dropped flag.
    let e = rail
        .post(Op::Write {
            peer: me,
            local: src_id.range(0, 8),
            remote: remote.at(0),
            data: None,
            flags: Flags::INJECT | Flags::MORE,
            ctx: 0,
        })
        .unwrap_err();
    assert!(e.is_usage() && e.to_string().contains("INJECT"), "{e}");
}

#[test]
fn tcp_write_batch_with_more() {
    batch("tcp", false);
    batch("tcp", true);
}

#[test]
fn shm_write_batch_with_more() {
    batch("shm", false);
    batch("shm", true);
}
