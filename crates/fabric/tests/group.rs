//! In-process tests of [`RailGroup`] on loopback (tcp on `lo`, shm): a group of virtual rails
//! registers one buffer on every rail, describes it with every rail's key, connects to itself
//! rail-aligned and moves striped data over all rails; plus the `Send`-ness of a rail and the
//! generation check of region ids.

use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(feature = "async")]
use efabench_fabric::Executor;
use efabench_fabric::{
    connect_all, get_info, load_library, pick_domain, resolve_rails, split, Completion, Error,
    Flags, GroupAddress, Hints, HostBuffer, MrPath, Op, Rail, RailConfig, RailCount, RailGroup,
    RegionDescriptor,
};

/// Compile-time: a rail (and a group) may be moved to another thread.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Rail>();
    assert_send::<RailGroup>();
};

/// Compile-time: a rail is still not `Sync` (one thread drives it). The call below is ambiguous,
/// and fails to compile, if `Rail: Sync`.
#[test]
fn rail_is_not_sync() {
    trait AmbiguousIfSync<A> {
        fn check() {}
    }
    impl<T: ?Sized> AmbiguousIfSync<()> for T {}
    #[allow(dead_code)]
    struct IsSync;
    impl<T: ?Sized + Sync> AmbiguousIfSync<IsSync> for T {}
    <Rail as AmbiguousIfSync<_>>::check();
}

fn offered(provider: &str) -> Vec<efabench_fabric::ProviderInfo> {
    load_library(None).expect("libfabric must be loadable for this test");
    let v = get_info(&Hints::provider(provider)).expect("get_info");
    assert!(!v.is_empty(), "{provider} offers nothing");
    v
}

/// The provider's entries on one domain: `lo` for tcp (so that virtual rails stay on
/// loopback), the only one for shm.
fn loopback(provider: &str) -> Vec<efabench_fabric::ProviderInfo> {
    let o = offered(provider);
    if provider == "tcp" {
        let lo = pick_domain(&o, "lo").expect("tcp offers lo");
        o.into_iter()
            .filter(|i| i.domain == lo.domain && i.fabric == lo.fabric)
            .collect()
    } else {
        o
    }
}

fn group(provider: &str, n: u32) -> RailGroup {
    let plan = resolve_rails(&loopback(provider), RailCount::Count(n), &[]).expect("plan");
    println!("{provider}: {}", plan.why);
    assert_eq!(plan.infos.len(), n as usize);
    assert_eq!(plan.virtual_rails, n > 1, "{}", plan.why);
    RailGroup::open_plan(&plan, &RailConfig::default()).expect("open group")
}

#[test]
fn tcp_names_its_loopback_domain_lo_and_unknown_domains_are_listed() {
    let o = offered("tcp");
    let names: Vec<_> = o.iter().map(|i| (&i.domain, &i.fabric)).collect();
    println!("{names:?}");
    let lo = pick_domain(&o, "lo").expect("lo");
    assert!(
        lo.fabric.starts_with("127.") || lo.fabric == "::1/128",
        "{lo:?}"
    );
    let e = pick_domain(&o, "no-such-nic").unwrap_err();
    assert!(matches!(e, Error::Usage(_)));
    assert!(e.to_string().contains("lo"), "{e}");
}

#[test]
fn stale_region_id_does_not_reach_a_new_registration() {
    let g = group("shm", 1);
    let r = g.rail(0);
    let a = r
        .register(Arc::new(HostBuffer::new(4096).unwrap()))
        .unwrap();
    r.deregister(a).unwrap();
    let b = r
        .register(Arc::new(HostBuffer::new(8192).unwrap()))
        .unwrap();
    assert_ne!(a, b);
    assert_eq!(r.remote_region(b).unwrap().len, 8192);
    let e = r.remote_region(a).unwrap_err();
    assert!(e.to_string().contains("deregistered"), "{e}");
    assert!(r.deregister(a).is_err());
    assert!(r
        .post(Op::Recv {
            local: a.range(0, 16),
            ctx: 1
        })
        .is_err());
    assert_eq!(r.remote_region(b).unwrap().len, 8192);
}

#[test]
fn mr_path_names_and_host_registration() {
    for p in MrPath::ALL {
        assert_eq!(p.name().parse::<MrPath>().unwrap(), p);
    }
    assert!("cuda".parse::<MrPath>().is_err());
    let g = group("shm", 2);
    let buf = Arc::new(HostBuffer::new(4096).unwrap());
    let r = g.register(buf.clone(), MrPath::Auto).unwrap();
    assert_eq!(r.path_taken(), "host");
    let r = g.register(buf.clone(), MrPath::Va).unwrap();
    assert_eq!(r.path_taken(), "host");
    let e = g.register(buf, MrPath::Dmabuf).unwrap_err();
    assert!(e.to_string().contains("dmabuf"), "{e}");
}

#[test]
fn rail_count_mismatch_is_named() {
    let g2 = group("shm", 2);
    let g3 = group("shm", 3);
    let e = g2.insert_peer(&g3.address().unwrap()).unwrap_err();
    let m = e.to_string();
    assert!(m.contains('3') && m.contains('2'), "{m}");
    let e = resolve_rails(&loopback("shm"), RailCount::Count(0), &[]).unwrap_err();
    assert!(matches!(e, Error::Usage(_)));
}

fn striped_write_over_every_rail(provider: &str) {
    const LEN: usize = 1 << 20;
    let g = group(provider, 2);
    assert!(g.is_virtual());
    assert_eq!(g.domains().len(), 2);
    let src = Arc::new(HostBuffer::new(LEN).unwrap());
    let dst = Arc::new(HostBuffer::new(LEN).unwrap());
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    src.write_at(0, &pattern).unwrap();
    let s = g.register(src, MrPath::Auto).unwrap();
    let d = g.register(dst.clone(), MrPath::Auto).unwrap();

    // One descriptor carries every rail's key, and survives the wire.
    let desc = g.descriptor(&d).unwrap();
    assert_eq!(desc.rails(), 2);
    for i in 0..2 {
        assert_eq!(*desc.rail(i), g.rail(i).remote_region(d.id(i)).unwrap());
    }
    let desc = RegionDescriptor::from_bytes(&desc.to_bytes()).unwrap();

    // Connect the group to itself through the all-gather hook (rank 1 of 2 here).
    let addr = g.address().unwrap();
    assert_eq!(GroupAddress::from_bytes(&addr.to_bytes()).unwrap(), addr);
    let peers = connect_all(&g, |mine| Ok(vec![addr.to_bytes(), mine.to_vec()]), 1).unwrap();
    assert!(peers[1].is_none());
    let me = peers[0].clone().unwrap();
    assert_eq!(me.rails(), 2);

    let stripes = split(LEN, g.len(), 1);
    assert_eq!(stripes.len(), 2);
    for st in &stripes {
        g.rail(st.rail)
            .post(Op::Write {
                peer: me.rail(st.rail),
                local: s.id(st.rail).range(st.off, st.len),
                remote: desc.rail(st.rail).at(st.off as u64),
                data: Some(st.rail as u64),
                flags: Flags::NONE,
                ctx: 100 + st.rail as u64,
            })
            .expect("write");
    }
    // The local completion says the source may be reused; the target's remote CQ data says the
    // bytes have landed (tcp;ofi_rxm completes a write before the target has processed it).
    let deadline = Instant::now() + Duration::from_secs(30);
    for st in &stripes {
        let (mut local, mut remote) = (false, false);
        let mut out = [Completion::default(); 4];
        while !(local && remote) {
            let n = g
                .rail(st.rail)
                .poll_wait(&mut out, deadline, || Ok(()))
                .expect("poll");
            for c in &out[..n] {
                if c.context == Completion::REMOTE_CQ_DATA {
                    assert_eq!(c.remote_data(), Some(st.rail as u64));
                    remote = true;
                } else {
                    assert_eq!(c.context, 100 + st.rail as u64);
                    local = true;
                }
            }
        }
    }
    assert!(dst.to_vec(0, LEN).unwrap() == pattern, "payload differs");
    g.deregister(&d).unwrap();
    assert!(g.descriptor(&d).is_err());
}

#[test]
fn striped_write_over_two_virtual_rails_tcp() {
    striped_write_over_every_rail("tcp");
}

#[test]
fn striped_write_over_two_virtual_rails_shm() {
    striped_write_over_every_rail("shm");
}

#[cfg(feature = "async")]
#[test]
fn remote_data_is_told_apart_by_source_with_futures_lite_combinators() {
    use efabench_fabric::{future, CqData};
    let g = group("shm", 1);
    let r = g.rail(0);
    let buf = Arc::new(HostBuffer::new(4096).unwrap());
    let reg = g.register(buf, MrPath::Auto).unwrap();
    let desc = g.descriptor(&reg).unwrap();
    let me = connect_all(&g, |mine| Ok(vec![mine.to_vec()]), 0).unwrap();
    assert!(me[0].is_none());
    let peer = g.insert_peer(&g.address().unwrap()).unwrap().rail(0);
    let exec = Executor::for_rail(r);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Notifications from "sources" 1, 2, 3, 3, 1 in that order.
    let order = [(1u16, 10u16), (2, 20), (3, 30), (3, 31), (1, 11)];
    for (i, &(source, tag)) in order.iter().enumerate() {
        let data = CqData { source, tag }.to_u64();
        let op = r.post_async(Op::Write {
            peer,
            local: reg.id(0).range(i * 8, 8),
            remote: desc.rail(0).at(i as u64 * 8),
            data: Some(data),
            flags: Flags::NONE,
            ctx: 0,
        });
        exec.block_on(op, deadline).unwrap().unwrap();
    }
    // Source 3's pair and source 2's single one, waited for together (zip), whatever the order.
    let (threes, two) = exec
        .block_on(
            future::zip(r.wait_remote_count(3, 2), r.wait_remote_data_from(2)),
            deadline,
        )
        .unwrap();
    assert_eq!(threes, [30, 31]);
    assert_eq!(CqData::from_u64(two.data), CqData { source: 2, tag: 20 });
    // What is left is source 1's, still in arrival order.
    let ones = exec.block_on(r.wait_remote_count(1, 2), deadline).unwrap();
    assert_eq!(ones, [10, 11]);
    // Nothing from source 9: the wait ends at its deadline instead of hanging.
    let e = exec
        .block_on(
            r.wait_remote_data_from(9),
            Instant::now() + Duration::from_millis(200),
        )
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
}
