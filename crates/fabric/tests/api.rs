//! In-process tests of the safe API on one rail talking to itself (tcp on loopback and shm), on
//! the library this process loads (`EFABENCH_LIBFABRIC` or the system's), plus checks that need
//! no library at all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_fabric::{
    first_provider, flags, get_info, join_all, list_providers, load_library, Completion, Error,
    Executor, Hints, HostBuffer, Rail, RailConfig, RemoteRegion,
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

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

#[test]
fn remote_region_round_trips_and_rejects_bad_lengths() {
    let r = RemoteRegion {
        addr: 0x7f00_dead_beef,
        key: 42,
        len: 1 << 30,
    };
    assert_eq!(RemoteRegion::from_bytes(&r.to_bytes()).unwrap(), r);
    let e = RemoteRegion::from_bytes(&[0u8; 23]).unwrap_err();
    assert!(!e.to_string().contains('\n'));
}

#[test]
fn host_buffer_is_page_aligned_and_bounds_checked() {
    use efabench_fabric::MemoryBuffer;
    let b = HostBuffer::new(10_000).unwrap();
    assert_eq!(b.as_ptr() as usize % 4096, 0);
    assert_eq!(b.len(), 10_000);
    b.write_at(9_990, &[7u8; 10]).unwrap();
    assert_eq!(b.to_vec(9_990, 10).unwrap(), vec![7u8; 10]);
    assert!(b.write_at(9_991, &[7u8; 10]).is_err());
    assert!(b.read_at(usize::MAX, &mut [0u8; 2]).is_err());
}

#[test]
fn providers_are_listed_with_their_attributes() {
    let lib = load_library(None).expect("libfabric must be loadable for this test");
    println!("{lib:?}");
    let names = list_providers().unwrap();
    println!("providers: {names:?}");
    assert!(names.iter().any(|n| n.starts_with("tcp")), "{names:?}");
    assert!(names.iter().any(|n| n == "shm"), "{names:?}");
    for i in get_info(&Hints::provider("shm")).unwrap() {
        println!("{i:?} {:?}", i.mr_mode_names());
        assert_eq!(i.provider, "shm");
        assert!(i.caps & flags::FI_RMA != 0);
    }
    let e = first_provider(&Hints::provider("no-such-provider")).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, Error::NoProvider { .. }));
    assert!(
        s.contains("available:") && s.contains("shm") && !s.contains('\n'),
        "{s}"
    );
}

fn self_loop(provider: &str) {
    let rail = rail(provider);
    let buf = Arc::new(HostBuffer::new(1 << 16).unwrap());
    let region = rail.register(buf.clone()).unwrap();
    let me = rail.insert_peer(&rail.address().unwrap()).unwrap();
    let remote = rail.remote_region(region).unwrap();
    if rail.info().virt_addr() {
        assert_eq!(remote.addr, buf_addr(&buf));
    } else {
        assert_eq!(remote.addr, 0, "offset-based RMA starts at 0");
    }

    // Low-level path: recv + send with contexts, then poll until both completions are back.
    buf.write_at(0, b"ping-pong").unwrap();
    rail.post_recv(region, 4096, 64, 1).unwrap();
    rail.post_send_data(me, region, 0, 9, 77, 2).unwrap();
    let got = poll_n(&rail, 2);
    // Nothing else is in flight: a bounded wait ends in a timeout error, not a hang.
    let mut one = [Completion::default(); 1];
    let r = rail.poll_wait(&mut one, Instant::now() + Duration::from_millis(50), || {
        Ok(())
    });
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    // The health check's error ends the wait too.
    let r = rail.poll_wait(&mut one, deadline(), || {
        Err(Error::Health("peer 1 is gone".into()))
    });
    assert!(matches!(r, Err(Error::Health(_))), "{r:?}");
    let recv = got
        .iter()
        .find(|c| c.context == 1)
        .expect("recv completion");
    assert!(got.iter().any(|c| c.context == 2), "{got:?}");
    assert_eq!(recv.len, 9);
    assert_eq!(recv.remote_data(), Some(77));
    assert_eq!(buf.to_vec(4096, 9).unwrap(), b"ping-pong");

    // Async path: many writes in flight, then read back.
    let ex = Executor::for_rail(&rail);
    for i in 0..64 {
        buf.write_at(i * 256, &[i as u8; 256]).unwrap();
    }
    let writes =
        (0..64).map(|i| rail.write(me, region, i * 256, 256, &remote, (32768 + i * 256) as u64));
    for r in ex.block_on(join_all(writes), deadline()).unwrap() {
        r.unwrap();
    }
    for i in 0..64 {
        assert_eq!(
            buf.to_vec(32768 + i * 256, 256).unwrap(),
            vec![i as u8; 256]
        );
    }
    buf.fill(0, 256, 0).unwrap();
    ex.block_on(
        rail.read(me, region, 0, 256, &remote, 32768 + 5 * 256),
        deadline(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(buf.to_vec(0, 256).unwrap(), vec![5u8; 256]);

    // write_data: the target side (ourselves) sees a completion carrying the data.
    ex.block_on(
        rail.write_data(me, region, 0, 8, &remote, 8192, 0xfeed),
        deadline(),
    )
    .unwrap()
    .unwrap();
    let c = ex.block_on(rail.remote_data(), deadline()).unwrap();
    assert_eq!(c.context, Completion::REMOTE_CQ_DATA);
    assert_eq!(c.data, 0xfeed);

    // Bad arguments are errors, not panics.
    assert!(matches!(
        rail.post_send(me, region, 65_000, 1000, 9),
        Err(Error::Usage(_))
    ));
    assert!(matches!(
        rail.post_write(me, region, 0, 8, &remote, remote.len - 4, 9),
        Err(Error::Usage(_))
    ));
    let other = self::rail(provider);
    let foreign = other
        .register(Arc::new(HostBuffer::new(4096).unwrap()))
        .unwrap();
    assert!(rail.post_recv(foreign, 0, 8, 3).is_err());

    // A region with an operation in flight cannot be deregistered; a dropped future does not
    // release it until its completion arrived.
    let pending = rail.recv(region, 0, 64);
    let mut pending = Box::pin(pending);
    let waker = std::task::Waker::noop();
    let _ = pending
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker));
    assert!(rail.deregister(region).is_err(), "busy region deregistered");
    drop(pending); // cancels
    let t0 = Instant::now();
    while rail.deregister(region).is_err() {
        rail.progress().unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "cancelled receive never completed"
        );
    }
    assert!(rail.remote_region(region).is_err());
}

use std::future::Future;

fn buf_addr(b: &HostBuffer) -> u64 {
    use efabench_fabric::MemoryBuffer;
    b.as_ptr() as u64
}

fn poll_n(rail: &Rail, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let mut c = [Completion::default(); 4];
    let t0 = Instant::now();
    while out.len() < n {
        let k = rail.poll(&mut c).unwrap();
        out.extend_from_slice(&c[..k]);
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "completions missing: {out:?}"
        );
    }
    out
}

#[test]
fn tcp_self_loop() {
    self_loop("tcp");
}

#[test]
fn shm_self_loop() {
    self_loop("shm");
}

/// The binary must not link libfabric: it is loaded at run time (`ldd` lists no libfabric).
/// Same check for the CLI: `ldd target/debug/efabench | grep -c libfabric` must print 0.
#[test]
fn binary_does_not_link_libfabric() {
    let exe = std::env::current_exe().unwrap();
    match std::process::Command::new("ldd").arg(&exe).output() {
        Ok(o) => {
            let s = String::from_utf8_lossy(&o.stdout);
            println!("{s}");
            assert!(o.status.success(), "ldd failed on {}", exe.display());
            assert!(
                !s.contains("libfabric"),
                "{} links libfabric",
                exe.display()
            );
        }
        Err(e) => println!("SKIP: ldd not available: {e}"),
    }
}
