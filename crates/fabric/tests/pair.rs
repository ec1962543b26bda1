//! [`PingPong`] on one rail talking to itself (tcp on loopback and shm): messages go both ways
//! on alternating slots and land intact, a slot cannot be posted twice, a message above the
//! inject size is refused, the regions stay pinned while the pair lives, and a receive left
//! posted when the pair is dropped keeps its region pinned until it completes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_fabric::{
    first_provider, load_library, Completion, Error, Flags, Hints, HostBuffer, Op, PingPong, Rail,
    RailConfig,
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

fn wait(pp: &mut PingPong<'_>, slot: usize) -> usize {
    let t0 = Instant::now();
    loop {
        if let Some(len) = pp.poll(slot).unwrap() {
            return len;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "slot {slot} never completed"
        );
    }
}

fn pair(provider: &str) {
    let mut rail = rail(provider);
    let (sbuf, rbuf) = (
        Arc::new(HostBuffer::new(4096).unwrap()),
        Arc::new(HostBuffer::new(4096).unwrap()),
    );
    let send = rail.register(sbuf.clone()).unwrap();
    let recv = rail.register(rbuf.clone()).unwrap();
    let me = rail.insert_peer(&rail.address().unwrap()).unwrap();
    let inject = rail.info().inject_size as usize;
    let e = rail
        .ping_pong(me, (send, recv), [0, 64], inject + 1)
        .unwrap_err();
    assert!(matches!(e, Error::Usage(_)), "{e}");
    {
        let mut pp = rail.ping_pong(me, (send, recv), [0, 64], 8).unwrap();
        for i in 0..20u64 {
            let slot = (i % 2) as usize;
            sbuf.write_at(slot * 64, &(i * 7 + 1).to_le_bytes())
                .unwrap();
            pp.post_recv(slot).unwrap();
            assert!(pp.posted(slot));
            pp.inject(slot).unwrap();
            assert_eq!(wait(&mut pp, slot), 8);
            assert!(!pp.posted(slot));
            assert_eq!(
                rbuf.to_vec(slot * 64, 8).unwrap(),
                (i * 7 + 1).to_le_bytes()
            );
        }
        pp.post_recv(1).unwrap();
        let e = pp.post_recv(1).unwrap_err();
        assert!(e.to_string().contains("still posted"), "{e}");
    }
    // The pair is gone with slot 1's receive still posted: the region stays pinned until that
    // receive completes (a message of ours fills it), then it can be deregistered.
    assert!(rail.deregister(recv).is_err(), "a posted receive pins recv");
    rail.post(Op::Send {
        peer: me,
        local: send.range(0, 8),
        data: None,
        flags: Flags::NONE,
        ctx: 9,
    })
    .unwrap();
    let t0 = Instant::now();
    let mut c = [Completion::default(); 4];
    for region in [recv, send] {
        // `send` until the send's own completion is read.
        while rail.deregister(region).is_err() {
            let _ = rail.poll(&mut c);
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "a region stays pinned"
            );
        }
    }
}

/// A message longer than the posted receive (from a second endpoint) fails the pair's poll with
/// the receive's error completion.
fn error_completion(provider: &str) {
    let mut a = rail(provider);
    let b = rail(provider);
    let abuf = Arc::new(HostBuffer::new(4096).unwrap());
    let bbuf = Arc::new(HostBuffer::new(4096).unwrap());
    let aregion = a.register(abuf).unwrap();
    let bregion = b.register(bbuf).unwrap();
    let a_self = a.insert_peer(&a.address().unwrap()).unwrap();
    let to_a = b.insert_peer(&a.address().unwrap()).unwrap();
    let mut pp = a.ping_pong(a_self, (aregion, aregion), [0, 64], 8).unwrap();
    pp.post_recv(0).unwrap();
    // From another thread: the connection needs `a`'s progress (the pair's polls) while the
    // post waits for it.
    let sender = std::thread::spawn(move || {
        b.post(Op::Send {
            peer: to_a,
            local: bregion.range(0, 256),
            data: None,
            flags: Flags::NONE,
            ctx: 1,
        })
        .unwrap();
        let (t0, mut c) = (Instant::now(), [Completion::default(); 4]);
        // Until the send's own completion (or its error) comes back.
        while !matches!(b.poll(&mut c), Ok(n) if n > 0) && t0.elapsed() < Duration::from_secs(5) {}
    });
    let t0 = Instant::now();
    let e = loop {
        match pp.poll(0) {
            Ok(None) => {}
            Ok(Some(len)) => panic!("a {len}-byte receive completed without error"),
            Err(e) => break e,
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no error completion"
        );
    };
    sender.join().unwrap();
    assert!(
        matches!(e, Error::Completion { op: "fi_recv", .. }),
        "{e:?}"
    );
    assert!(!pp.posted(0), "the failed receive's slot is free again");
}

#[test]
fn error_completion_fails_the_poll() {
    error_completion("tcp");
    error_completion("shm");
}

#[test]
fn ping_pong_tcp() {
    pair("tcp");
}

#[test]
fn ping_pong_shm() {
    pair("shm");
}
