//! Tests that need a GPU. Each one prints "skipped: no CUDA driver" and returns where there is
//! none (CI), so `cargo test` stays green on machines without a GPU; scripts/gpu-tests.sh runs
//! them on a GPU machine, where they must pass.

use efabench_fabric::{Hmem, MemoryBuffer};
use efabench_gpu::buffer::{copy_to_host, fill_async, Counter};
use efabench_gpu::kernels::{cache_dir, cache_file_name, kernel, ptx, Source};
use efabench_gpu::{
    alloc, alloc_registered, pattern, DeviceBuffer, Event, Gpu, MemKind, Shape, Stream,
};
use std::sync::Arc;

fn gpu() -> Option<Arc<Gpu>> {
    match efabench_gpu::driver() {
        Err(e) if e.is_no_driver() => {
            println!("skipped: no CUDA driver");
            None
        }
        Err(e) => panic!("CUDA driver present but unusable: {e}"),
        Ok(()) => Some(Gpu::open(0).expect("GPU 0")),
    }
}

#[test]
fn every_kind_allocates_fills_and_checks() {
    let Some(g) = gpu() else { return };
    println!(
        "GPU 0: {} cc {}.{} {} SMs bus {} dmabuf {}",
        g.name, g.cc.0, g.cc.1, g.sm_count, g.pci_bus_id, g.dmabuf_supported
    );
    for kind in MemKind::ALL {
        for len in [4099usize, 8 << 20] {
            let mut b = alloc(kind, len, 0).unwrap_or_else(|e| panic!("{kind} {len}: {e}"));
            assert_eq!(b.len(), len);
            assert_eq!(b.kind(), kind);
            let expect_hmem = match kind {
                MemKind::Cuda | MemKind::Managed => Hmem::Cuda { device: 0 },
                _ => Hmem::System,
            };
            assert_eq!(b.hmem(), expect_hmem, "{kind}");
            // Plain host memory (small or huge pages) has no device mapping; every CUDA kind has one.
            assert_eq!(b.device_ptr().is_some(), !kind.is_host(), "{kind}");
            assert!(
                b.mismatches(11).unwrap() > 0,
                "{kind}: fresh buffer is zeroed"
            );
            b.fill_pattern(11).unwrap();
            assert_eq!(b.mismatches(11).unwrap(), 0, "{kind} {len}");
            assert_eq!(
                b.mismatches(12).unwrap(),
                len.div_ceil(8) as u64,
                "{kind} {len}"
            );
            if kind == MemKind::Cuda {
                println!("cuda {len} B: dmabuf {:?}", b.dmabuf());
                if g.dmabuf_supported {
                    assert!(
                        b.dmabuf().is_some(),
                        "device says dmabuf is supported but export failed"
                    );
                }
            }
        }
    }
    let mut r = alloc_registered(4099, 0).unwrap();
    assert_eq!(r.hmem(), Hmem::System);
    assert_eq!(r.as_ptr() as usize % 4096, 0);
    use efabench_gpu::GpuBuffer;
    r.fill_pattern(5).unwrap();
    assert_eq!(r.mismatches(5).unwrap(), 0);
    // Managed memory is refused beyond the device's free memory instead of oversubscribing.
    let (free, _) = g.mem_info().unwrap();
    let e = alloc(MemKind::Managed, free + (1 << 30), 0)
        .err()
        .expect("too large");
    assert!(e.to_string().contains("free memory"), "{e}");
}

#[test]
fn device_buffers_make_synchronous_copies_wait() {
    // Without SYNC_MEMOPS, shm's device-to-device copy returns (and the transfer completes)
    // before the bytes land: see the buffer module doc.
    let Some(g) = gpu() else { return };
    for len in [8usize, 3 << 20] {
        let b = DeviceBuffer::new(&g, len).unwrap();
        assert!(b.sync_memops().unwrap(), "{len} B: SYNC_MEMOPS not set");
    }
}

#[test]
fn pattern_ranges_match_the_host_pattern_for_every_kind() {
    let Some(_g) = gpu() else { return };
    for kind in MemKind::ALL {
        let b = alloc(kind, 1000, 0).unwrap();
        // Two ranges with their own seeds, the second at an odd offset and length.
        b.fill_range(0, 504, 21).unwrap();
        b.fill_range(504, 493, 22).unwrap();
        let mut v = vec![0u8; 1000];
        b.read_at(0, &mut v).unwrap();
        assert_eq!(pattern::mismatches(&v[..504], 21), 0, "{kind}");
        assert_eq!(pattern::mismatches(&v[504..997], 22), 0, "{kind}");
        assert_eq!(b.mismatches_in(504, 493, 22).unwrap(), 0, "{kind}");
        assert_eq!(b.mismatches_in(504, 493, 21).unwrap(), 62, "{kind}");
        b.write_at(600, &[0xee]).unwrap();
        assert_eq!(b.mismatches_in(504, 493, 22).unwrap(), 1, "{kind}");
        assert!(b.fill_range(999, 2, 1).is_err(), "{kind}");
    }
}

#[test]
fn device_pattern_words_equal_the_rust_words() {
    let Some(g) = gpu() else { return };
    for len in [1usize, 7, 8, 4099, 1 << 20] {
        let mut d = DeviceBuffer::new(&g, len).unwrap();
        use efabench_gpu::GpuBuffer;
        let seed = pattern::seed(3, 0, 1, 2);
        d.fill_pattern(seed).unwrap();
        let got = d.to_host().unwrap();
        let mut want = vec![0u8; len];
        pattern::fill(&mut want, seed);
        assert_eq!(got, want, "len {len}");
        // And word by word against word() for the first few.
        for i in 0..(len / 8).min(16) {
            let w = u64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(w, pattern::word(seed, i as u64));
        }
    }
}

#[test]
fn kernels_compile_for_this_arch_and_are_cached() {
    let Some(g) = gpu() else { return };
    for s in [Source::Buffer, Source::Ipc, Source::IpcTma] {
        if g.cc < s.min_cc() {
            println!("{} skipped: needs cc {:?}", s.file(), s.min_cc());
            continue;
        }
        let p = ptx(s, &g.arch()).unwrap_or_else(|e| panic!("{}: {e}", s.file()));
        assert!(p.contains(".entry"), "{}", s.file());
        if let Some(d) = cache_dir() {
            let f = d.join(cache_file_name(&s.text(), &g.arch()));
            assert!(f.exists(), "disk cache {} missing", f.display());
        }
    }
    assert!(kernel(&g, Source::Ipc, "no_such_kernel").is_err());
}

/// push, pull and tma kernels on one GPU (target = its own buffer): same code as over NVLink.
#[test]
fn ipc_kernels_write_and_check_the_pattern_locally() {
    let Some(g) = gpu() else { return };
    let len = (4 << 20) + 48;
    let s = Stream::new(&g).unwrap();
    let d = DeviceBuffer::new(&g, len).unwrap();
    let seed = pattern::seed(9, 0, 1, 0);
    let push = kernel(&g, Source::Ipc, "efa_push").unwrap();
    for shape in [
        Shape {
            grid: 1,
            block: 256,
        },
        Shape {
            grid: g.sm_count,
            block: 512,
        },
    ] {
        // SAFETY: d holds len bytes; efa_push(ulonglong2*, u64, u64).
        unsafe { fill_async(&s, d.ptr(), len, 1).unwrap() };
        unsafe {
            push.launch(&s, shape, &[d.ptr(), (len / 16) as u64, seed])
                .unwrap()
        };
        s.synchronize().unwrap();
        use efabench_gpu::GpuBuffer;
        assert_eq!(d.mismatches(seed).unwrap(), 0, "push {shape:?}");
    }
    let pull = kernel(&g, Source::Ipc, "efa_pull").unwrap();
    let c = Counter::new(&g).unwrap();
    // SAFETY: efa_pull(const ulonglong2*, u64, u64, u64*); d and c are live.
    unsafe {
        pull.launch(
            &s,
            Shape {
                grid: 128,
                block: 256,
            },
            &[d.ptr(), (len / 16) as u64, seed, c.ptr()],
        )
        .unwrap()
    };
    s.synchronize().unwrap();
    assert_eq!(c.read().unwrap(), 0, "pull of a clean buffer");
    unsafe {
        pull.launch(
            &s,
            Shape {
                grid: 128,
                block: 256,
            },
            &[d.ptr(), (len / 16) as u64, seed ^ 1, c.ptr()],
        )
        .unwrap()
    };
    s.synchronize().unwrap();
    assert_eq!(
        c.read().unwrap(),
        (len / 8) as u64,
        "pull against another seed"
    );
    if g.cc >= (9, 0) {
        let tma = kernel(&g, Source::IpcTma, "efa_tma_push").unwrap();
        let seed2 = pattern::seed(10, 0, 1, 0);
        // SAFETY: efa_tma_push(unsigned char*, u64, u64); len is a multiple of 16.
        unsafe {
            tma.launch(
                &s,
                Shape {
                    grid: 2 * g.sm_count,
                    block: 256,
                },
                &[d.ptr(), len as u64, seed2],
            )
            .unwrap()
        };
        s.synchronize().unwrap();
        use efabench_gpu::GpuBuffer;
        assert_eq!(d.mismatches(seed2).unwrap(), 0, "tma");
        let tail = copy_to_host(&g, d.ptr() + len as u64 - 16, 16).unwrap();
        let mut want = vec![0u8; len];
        pattern::fill(&mut want, seed2);
        assert_eq!(&tail[..], &want[len - 16..]);
    }
}

#[test]
fn events_time_queued_work() {
    let Some(g) = gpu() else { return };
    let s = Stream::new(&g).unwrap();
    let d = DeviceBuffer::new(&g, 256 << 20).unwrap();
    let (a, b) = (Event::new(&g).unwrap(), Event::new(&g).unwrap());
    a.record(&s).unwrap();
    for i in 0..10 {
        // SAFETY: d holds 256 MiB.
        unsafe { fill_async(&s, d.ptr(), 256 << 20, i).unwrap() };
    }
    b.record(&s).unwrap();
    b.synchronize().unwrap();
    let ms = a.elapsed_ms(&b).unwrap();
    println!(
        "10 fills of 256 MiB: {ms:.3} ms = {:.0} GB/s",
        10.0 * 268435456.0 / ms / 1e6
    );
    assert!(ms > 0.0);
}

#[test]
fn nvml_inventory_lists_every_gpu() {
    let Some(_) = gpu() else { return };
    let inv = efabench_gpu::nvml::inventory().expect("NVML loads where the driver does");
    println!("{}", serde_json::to_string_pretty(&inv).unwrap_or_default());
    assert_eq!(inv.len() as i32, efabench_gpu::device_count().unwrap());
    let g = Gpu::open(0).unwrap();
    assert!(
        inv.iter()
            .any(|i| i.pci_bus_id == efabench_gpu::nvml::normalize_bus_id(&g.pci_bus_id)),
        "CUDA's bus id {} not among NVML's",
        g.pci_bus_id
    );
}

/// `FI_ENOSYS`: what `fi_mr_regattr` returns for CUDA memory on a libfabric built without CUDA,
/// even where the provider lists `FI_HMEM` in its caps (Debian's shm does).
const FI_ENOSYS: i32 = 38;

/// Registers each kind with libfabric on a provider that registers device memory when this
/// libfabric has one: shm, then tcp, each asked for `FI_HMEM` and taken only when its fi_info
/// caps carry it and a CUDA buffer actually registers (a libfabric built with CUDA:
/// scripts/gpu-libfabric.sh). There every kind must register. Otherwise tcp on loopback without
/// `FI_HMEM`: host kinds must register and CUDA kinds are refused. The output names the provider
/// and whether HMEM registration was exercised.
#[test]
fn buffers_register_with_libfabric_where_the_provider_allows() {
    let Some(_) = gpu() else { return };
    let lib = match efabench_fabric::load_library(None) {
        Ok(l) => l,
        Err(e) => {
            println!("skipped registration: {e}");
            return;
        }
    };
    println!("libfabric {} from {}", lib.version, lib.path.display());
    let mut why_not: Vec<String> = Vec::new();
    for provider in ["shm", "tcp"] {
        let mut hints = efabench_fabric::Hints::provider(provider);
        if provider == "tcp" {
            hints.node = Some("127.0.0.1".into());
        }
        hints.hmem = true;
        let info = match efabench_fabric::first_provider(&hints) {
            Ok(i) if i.hmem => i,
            Ok(i) => {
                why_not.push(format!(
                    "{provider}: FI_HMEM not in its caps ({:#x})",
                    i.caps
                ));
                continue;
            }
            Err(e) => {
                why_not.push(format!("{provider}: {e}"));
                continue;
            }
        };
        let rail = efabench_fabric::Rail::open(&info, &Default::default()).expect("open rail");
        // Device memory first: a libfabric without CUDA support refuses it with FI_ENOSYS.
        let probe = Arc::new(alloc(MemKind::Cuda, 1 << 20, 0).unwrap());
        match rail.register(probe) {
            Ok(_) => {}
            Err(e) if e.errno() == Some(FI_ENOSYS) => {
                why_not.push(format!(
                    "{provider}: FI_HMEM in its caps, but this libfabric has no CUDA support ({e})"
                ));
                continue;
            }
            Err(e) => panic!(
                "{} ({}) offers FI_HMEM but refused device memory: {e}",
                info.provider, info.domain
            ),
        }
        for kind in MemKind::ALL {
            let b = Arc::new(alloc(kind, 1 << 20, 0).unwrap());
            match rail.register(b) {
                Ok(_) => println!("{} hmem: {kind} registered", info.provider),
                Err(e) => panic!(
                    "{} ({}) with FI_HMEM: {kind} must register: {e}",
                    info.provider, info.domain
                ),
            }
        }
        println!(
            "registration: provider {} (domain {}), HMEM registration exercised (cuda and managed registered with FI_HMEM_CUDA)",
            info.provider, info.domain
        );
        return;
    }

    // No provider registers device memory here: host kinds on tcp without FI_HMEM.
    let mut hints = efabench_fabric::Hints::provider("tcp");
    hints.node = Some("127.0.0.1".into());
    let info = match efabench_fabric::first_provider(&hints) {
        Ok(i) => i,
        Err(e) => {
            println!(
                "skipped registration: no provider registers device memory ({}) and tcp is not offered: {e}",
                why_not.join("; ")
            );
            return;
        }
    };
    let rail = efabench_fabric::Rail::open(&info, &Default::default()).expect("open rail");
    for kind in MemKind::ALL {
        let b = Arc::new(alloc(kind, 1 << 20, 0).unwrap());
        match rail.register(b) {
            Ok(_) => {
                assert!(
                    !matches!(kind, MemKind::Cuda | MemKind::Managed),
                    "{kind} registered without FI_HMEM"
                );
                println!("{} without hmem: {kind} registered", info.provider);
            }
            Err(e) => {
                println!("{} without hmem: {kind} not registered: {e}", info.provider);
                assert!(
                    matches!(kind, MemKind::Cuda | MemKind::Managed),
                    "host-resident {kind} must register: {e}"
                );
            }
        }
    }
    println!(
        "registration: provider {} (domain {}), HMEM registration NOT exercised: {} (use a libfabric built with CUDA: scripts/gpu-libfabric.sh, EFABENCH_LIBFABRIC=...)",
        info.provider,
        info.domain,
        why_not.join("; ")
    );
}

/// The nvbandwidth copies (copy engine and SM kernel) between two buffers of one GPU, and the
/// pointer chase against its own memory: the same launches `ipc --nvbw` makes across NVLink.
#[test]
fn ipc_copies_and_chase_run_on_one_gpu() {
    use efabench_gpu::ipc::{chase_end, IpcKernels, Mem, CHASE_NODE};
    use efabench_gpu::GpuBuffer;
    let Some(g) = gpu() else { return };
    let k = IpcKernels::load(&g).unwrap();
    let s = Stream::new(&g).unwrap();
    let len = (3 << 20) + 48;
    let src = DeviceBuffer::new(&g, len).unwrap();
    let dst = DeviceBuffer::new(&g, len).unwrap();
    for (i, sm) in [false, true].into_iter().enumerate() {
        let seed = pattern::seed(i as u64, 0, 0, 7);
        efabench_gpu::buffer::fill(&s, &src, len, seed).unwrap();
        efabench_gpu::buffer::fill(&s, &dst, len, seed ^ 0xff).unwrap();
        if sm {
            let shape = Shape {
                grid: g.sm_count,
                block: 512,
            };
            k.sm_copy(&s, shape, Mem::Local(&dst), Mem::Local(&src), len)
                .unwrap();
        } else {
            IpcKernels::memcpy(&s, Mem::Local(&dst), Mem::Local(&src), len).unwrap();
        }
        s.synchronize().unwrap();
        assert_eq!(dst.mismatches(seed).unwrap(), 0, "sm={sm}");
    }
    // A partial copy leaves the tail poisoned: the check sees a short copy.
    let seed = pattern::seed(5, 0, 0, 7);
    efabench_gpu::buffer::fill(&s, &src, len, seed).unwrap();
    efabench_gpu::buffer::fill(&s, &dst, len, 1).unwrap();
    IpcKernels::memcpy(&s, Mem::Local(&dst), Mem::Local(&src), len - 4096).unwrap();
    s.synchronize().unwrap();
    assert_eq!(dst.mismatches(seed).unwrap(), 512);
    // Lengths are checked against both buffers.
    let small = DeviceBuffer::new(&g, 4096).unwrap();
    assert!(IpcKernels::memcpy(&s, Mem::Local(&small), Mem::Local(&src), 8192).is_err());
    assert!(k
        .sm_copy(
            &s,
            Shape { grid: 1, block: 32 },
            Mem::Local(&dst),
            Mem::Local(&src),
            100
        )
        .is_err());

    // Pointer chase over a 2 MiB list, 128 bytes between loads.
    let list = DeviceBuffer::new(&g, 2 << 20).unwrap();
    let nodes = (2 << 20) / CHASE_NODE;
    let end = Counter::new(&g).unwrap();
    k.chase_init(&s, Mem::Local(&list), nodes, 16).unwrap();
    for (hops, target) in [(1u64, 0u32), (16384, 1), (100_000, g.sm_count - 1)] {
        let (a, b) = (Event::new(&g).unwrap(), Event::new(&g).unwrap());
        a.record(&s).unwrap();
        k.chase(&s, Mem::Local(&list), nodes, hops, target, &end)
            .unwrap();
        b.record(&s).unwrap();
        b.synchronize().unwrap();
        let want = list.ptr() + chase_end(nodes, 16, hops) * CHASE_NODE;
        assert_eq!(end.read().unwrap(), want, "{hops} hops");
        println!(
            "chase of {hops} loads on block {target}: {:.1} ns per load (local memory)",
            a.elapsed_ms(&b).unwrap() * 1e6 / hops as f64
        );
    }
    assert!(k
        .chase(&s, Mem::Local(&list), nodes + 1, 1, 0, &end)
        .is_err());
    assert!(k
        .chase(&s, Mem::Local(&list), nodes, 1, g.sm_count, &end)
        .is_err());
}

/// The round-trip probes of `efabench queue` (bare, and with a push's claim under every
/// ordering): every round trip made by the GPU is answered once by the CPU thread, and each is
/// timed.
#[test]
fn the_floor_probe_answers_every_round_trip() {
    use efabench_gpu::queue::{run_floor, Deadlines, Floor, Producers, Release};
    use std::time::Duration;
    let Some(g) = gpu() else { return };
    let iters = 1 << 14;
    for probe in [
        Floor::Bare,
        Floor::Claimed(Release::Fence),
        Floor::Claimed(Release::Store),
        Floor::Claimed(Release::None),
    ] {
        let dev = Producers::new(&g, 1, iters).expect("producer state");
        let limits = Deadlines {
            budget: Duration::from_secs(5),
            hang: Duration::from_secs(5),
        };
        let answered = run_floor(&g, &dev, None, probe, limits).expect("floor");
        let done = dev.pushed().expect("pushed")[0] as u64;
        let lat: Vec<u32> = dev.latency_slots().expect("latency");
        let mut ns: Vec<u32> = lat.iter().filter(|&&x| x != 0).map(|x| x - 1).collect();
        ns.sort_unstable();
        println!(
            "{probe:?}: {done} round trips, {answered} answers, p50 {} ns, min {} ns",
            ns[ns.len() / 2],
            ns[0]
        );
        assert_eq!(
            (done, answered, ns.len() as u64),
            (iters, iters, iters),
            "{probe:?}"
        );
        let st = dev.state().expect("state");
        assert!(st.t1 > st.t0, "{st:?}");
    }
}
