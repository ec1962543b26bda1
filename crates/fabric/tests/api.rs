//! In-process tests of the safe API on one rail talking to itself (tcp on loopback and shm), on
//! the library this process loads (`EFABENCH_LIBFABRIC` or the system's), plus checks that need
//! no library at all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_fabric::{
    first_provider, flags, get_info, list_providers, load_library, Completion, Error, Flags, Hints,
    HostBuffer, Op, Rail, RailConfig, RemoteRegion,
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
        // From 1.21 the rail asks for control-unified progress, and shm grants it (no lock
        // on a completion-queue read); older libraries do not know the value.
        assert_eq!(
            i.control_unified,
            lib_at_least(&lib.version, 1, 21),
            "{lib:?}"
        );
    }
    let e = first_provider(&Hints::provider("no-such-provider")).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, Error::NoProvider { .. }));
    assert!(
        s.contains("available:") && s.contains("shm") && !s.contains('\n'),
        "{s}"
    );
}

/// Whether a "major.minor" version string is at least `major.minor`.
fn lib_at_least(version: &str, major: u32, minor: u32) -> bool {
    let mut it = version.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
    let v = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    v >= (major, minor)
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
    rail.post(Op::Recv {
        local: region.range(4096, 64),
        ctx: 1,
    })
    .unwrap();
    rail.post(Op::Send {
        peer: me,
        local: region.range(0, 9),
        data: Some(77),
        flags: Flags::NONE,
        ctx: 2,
    })
    .unwrap();
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

    // Many writes in flight, each completion with its own context, then one read back.
    for i in 0..64 {
        buf.write_at(i * 256, &[i as u8; 256]).unwrap();
    }
    for i in 0..64 {
        rail.post(Op::Write {
            peer: me,
            local: region.range(i * 256, 256),
            remote: remote.at((32768 + i * 256) as u64),
            data: None,
            flags: Flags::NONE,
            ctx: 1000 + i as u64,
        })
        .unwrap();
    }
    let mut ctxs: Vec<u64> = poll_n(&rail, 64).iter().map(|c| c.context).collect();
    ctxs.sort_unstable();
    assert_eq!(ctxs, (1000..1064).collect::<Vec<_>>());
    for i in 0..64 {
        assert_eq!(
            buf.to_vec(32768 + i * 256, 256).unwrap(),
            vec![i as u8; 256]
        );
    }
    buf.fill(0, 256, 0).unwrap();
    rail.post(Op::Read {
        peer: me,
        local: region.range(0, 256),
        remote: remote.at(32768 + 5 * 256),
        ctx: 5,
    })
    .unwrap();
    assert_eq!(poll_n(&rail, 1)[0].context, 5);
    assert_eq!(buf.to_vec(0, 256).unwrap(), vec![5u8; 256]);

    // A write with data: the target side (ourselves) also sees a completion carrying the data.
    rail.post(Op::Write {
        peer: me,
        local: region.range(0, 8),
        remote: remote.at(8192),
        data: Some(0xfeed),
        flags: Flags::NONE,
        ctx: 6,
    })
    .unwrap();
    let got = poll_n(&rail, 2);
    let c = got
        .iter()
        .find(|c| c.context == Completion::REMOTE_CQ_DATA)
        .expect("remote CQ data");
    assert_eq!(c.data, 0xfeed);
    assert!(got.iter().any(|c| c.context == 6), "{got:?}");

    // Inject: no completion, the buffer is reusable at once.
    if rail.info().inject_size >= 8 {
        rail.post(Op::Recv {
            local: region.range(4096, 64),
            ctx: 8,
        })
        .unwrap();
        buf.write_at(0, b"injected").unwrap();
        rail.post(Op::Send {
            peer: me,
            local: region.range(0, 8),
            data: None,
            flags: Flags::INJECT,
            ctx: 0,
        })
        .unwrap();
        buf.write_at(0, b"XXXXXXXX").unwrap();
        let c = poll_n(&rail, 1)[0];
        assert_eq!((c.context, c.len), (8, 8));
        assert_eq!(buf.to_vec(4096, 8).unwrap(), b"injected");
    }

    // Bad arguments are errors, not panics.
    let send_with = |off, len, data, flags| Op::Send {
        peer: me,
        local: region.range(off, len),
        data,
        flags,
        ctx: 9,
    };
    let send = |off, len| send_with(off, len, None, Flags::NONE);
    assert!(matches!(
        rail.post(send(65_000, 1000)),
        Err(Error::Usage(_))
    ));
    assert!(matches!(
        rail.post(Op::Write {
            peer: me,
            local: region.range(0, 8),
            remote: remote.at(remote.len - 4),
            data: None,
            flags: Flags::NONE,
            ctx: 9
        }),
        Err(Error::Usage(_))
    ));
    let too_big = rail.info().inject_size as usize + 1;
    let e = rail
        .post(send_with(0, too_big, None, Flags::INJECT))
        .unwrap_err();
    assert!(e.to_string().contains("inject_size"), "{e}");
    for bad in [Flags::MORE, Flags::DELIVERY_COMPLETE, Flags::INJECT] {
        let e = rail.post(send_with(0, 8, Some(1), bad)).unwrap_err();
        assert!(e.is_usage(), "{bad:?}: {e}");
    }
    let other = self::rail(provider);
    let foreign = other
        .register(Arc::new(HostBuffer::new(4096).unwrap()))
        .unwrap();
    assert!(rail
        .post(Op::Recv {
            local: foreign.range(0, 8),
            ctx: 3
        })
        .is_err());

    // A region with an operation in flight cannot be deregistered until its completion was
    // read.
    rail.post(Op::Recv {
        local: region.range(0, 64),
        ctx: 10,
    })
    .unwrap();
    assert!(rail.deregister(region).is_err(), "busy region deregistered");
    rail.post(send(128, 16)).unwrap();
    let got = poll_n(&rail, 2);
    assert!(got.iter().any(|c| c.context == 10), "{got:?}");
    rail.deregister(region).unwrap();
    assert!(rail.remote_region(region).is_err());
    assert!(rail.post(send(0, 8)).is_err());
}

/// The same rail driven through futures: many writes in flight, a read, remote CQ data, and a
/// dropped future that keeps its region busy until its completion arrived.
#[cfg(feature = "async")]
fn async_self_loop(provider: &str) {
    use efabench_fabric::{join_all, Executor};
    use std::future::Future;
    let rail = rail(provider);
    let buf = Arc::new(HostBuffer::new(1 << 16).unwrap());
    let region = rail.register(buf.clone()).unwrap();
    let me = rail.insert_peer(&rail.address().unwrap()).unwrap();
    let remote = rail.remote_region(region).unwrap();
    let ex = Executor::for_rail(&rail);
    let write_with = |off: usize, len: usize, at: u64, data: Option<u64>, flags| Op::Write {
        peer: me,
        local: region.range(off, len),
        remote: remote.at(at),
        data,
        flags,
        ctx: 0,
    };
    let write = |off, len, at, data| write_with(off, len, at, data, Flags::NONE);
    for i in 0..64 {
        buf.write_at(i * 256, &[i as u8; 256]).unwrap();
    }
    let writes =
        (0..64).map(|i| rail.post_async(write(i * 256, 256, (32768 + i * 256) as u64, None)));
    for r in ex.block_on(join_all(writes), deadline()).unwrap() {
        r.unwrap();
    }
    buf.fill(0, 256, 0).unwrap();
    let read = Op::Read {
        peer: me,
        local: region.range(0, 256),
        remote: remote.at(32768 + 5 * 256),
        ctx: 0,
    };
    ex.block_on(rail.post_async(read), deadline())
        .unwrap()
        .unwrap();
    assert_eq!(buf.to_vec(0, 256).unwrap(), vec![5u8; 256]);
    ex.block_on(rail.post_async(write(0, 8, 8192, Some(0xfeed))), deadline())
        .unwrap()
        .unwrap();
    let c = ex.block_on(rail.remote_data(), deadline()).unwrap();
    assert_eq!(c.context, Completion::REMOTE_CQ_DATA);
    assert_eq!(c.data, 0xfeed);
    // An inject has no completion to wait for: refused as a future.
    let inject = write_with(0, 8, 0, None, Flags::INJECT);
    let r = ex.block_on(rail.post_async(inject), deadline()).unwrap();
    assert!(matches!(r, Err(Error::Usage(_))), "{r:?}");

    // A dropped future does not release its region until its completion arrived.
    let pending = rail.post_async(Op::Recv {
        local: region.range(0, 64),
        ctx: 0,
    });
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

#[cfg(feature = "async")]
#[test]
fn async_self_loop_tcp_and_shm() {
    async_self_loop("tcp");
    async_self_loop("shm");
}

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
