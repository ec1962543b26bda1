//! Topology, pairing and counters against the fixture trees.

#[path = "../../../fixtures/variants.rs"]
mod variants;

use efabench_topology::installed::{CudaSource, EfaDriver, Installed};
use efabench_topology::topo::Pairing;
use efabench_topology::{NvLink, NvmlGpu, Root, Snapshot, Topology};
use std::collections::BTreeMap;

fn topo(name: &str) -> Topology {
    Topology::discover(&Root::new(variants::fixture(name)).unwrap())
}

#[test]
fn p5_pairs_four_nics_per_gpu_by_pcie_switch() {
    let t = topo("p5.48xlarge");
    assert_eq!(t.instance_type.as_deref(), Some("p5.48xlarge"));
    assert_eq!(t.gpus.len(), 8, "NVSwitches must not count as GPUs");
    assert_eq!(t.nics.len(), 32, "the ENA must not count as an EFA");
    assert_eq!(t.aggregate_link_gbps, 3200.0);
    let g0 = &t.gpus[0];
    assert_eq!(g0.pci_bus_id, "0000:53:00.0");
    assert_eq!(g0.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(g0.pairing, Pairing::Pcie);
    assert_eq!(
        g0.nics,
        vec!["rdmap79s0", "rdmap80s0", "rdmap81s0", "rdmap82s0"]
    );
    let g7 = &t.gpus[7];
    assert_eq!(g7.pci_bus_id, "0000:ca:00.0");
    assert_eq!(g7.numa_node, Some(1));
    assert_eq!(
        g7.nics,
        vec!["rdmap198s0", "rdmap199s0", "rdmap200s0", "rdmap201s0"]
    );
    for n in &t.nics {
        assert_eq!(n.gpus.len(), 1, "{}", n.name);
        assert_eq!(n.state.as_deref(), Some("ACTIVE"));
        assert_eq!(n.link_gbps, Some(100.0));
        assert_eq!(n.p2p.as_deref(), Some("NVIDIA peermem"));
    }
    assert_eq!(t.nic("rdmap150s0").unwrap().gpus, vec![4]);
    assert_eq!(t.numa.len(), 2);
    assert_eq!(t.numa[1].cpulist, "48-95,144-191");
    assert!(t.efa_pci_without_rdma_device.is_empty());
    let j = t.to_json();
    assert_eq!(j["gpus"][0]["nics"][3], "rdmap82s0");
    assert_eq!(j["nics"][0]["gpus"][0], 0);
    assert!(j["libfabric_domains"].is_null());
}

#[test]
fn p4d_pairs_one_nic_with_two_gpus_per_root() {
    for name in ["p4d.24xlarge", "p4d.24xlarge-legacy"] {
        let t = topo(name);
        assert_eq!(t.gpus.len(), 8, "{name}");
        assert_eq!(t.nics.len(), 4, "{name}");
        assert_eq!(t.aggregate_link_gbps, 400.0);
        let expect = ["rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"];
        for (i, g) in t.gpus.iter().enumerate() {
            assert_eq!(g.nics, vec![expect[i / 2]], "{name} gpu {i}");
            assert_eq!(g.pairing, Pairing::Pcie);
        }
        assert_eq!(t.nic("rdmap144s27").unwrap().gpus, vec![4, 5]);
        assert_eq!(t.nic("rdmap144s27").unwrap().numa_node, Some(1));
    }
    assert_eq!(
        topo("p4d.24xlarge-legacy").nics[0].gdr.as_deref(),
        Some("1")
    );
}

#[test]
fn numa_fallback_when_no_nic_shares_a_root_complex() {
    let t = variants::copy("p4d.24xlarge");
    // Move GPU0 under a root complex of its own (still NUMA 0).
    let src = t.dir.join("sys/devices/pci0000:10/0000:10:1c.0");
    let dst = t.dir.join("sys/devices/pci0000:30/0000:30:1c.0");
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::rename(&src, &dst).unwrap();
    t.remove("sys/bus/pci/devices/0000:10:1c.0");
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:30/0000:30:1c.0",
        t.dir.join("sys/bus/pci/devices/0000:30:1c.0"),
    )
    .unwrap();
    let topo = Topology::discover(&Root::new(t.path()).unwrap());
    let g = topo
        .gpus
        .iter()
        .find(|g| g.pci_bus_id == "0000:30:1c.0")
        .unwrap();
    assert_eq!(g.pairing, Pairing::Numa);
    assert_eq!(g.nics, vec!["rdmap16s27", "rdmap32s27"]);
}

#[test]
fn nvml_merge_by_bus_id() {
    let mut t = topo("p5.48xlarge");
    t.merge_nvml(vec![NvmlGpu {
        pci_bus_id: "00000000:53:00.0".into(),
        name: "NVIDIA H100 80GB HBM3 (nvml)".into(),
        nvlinks: vec![NvLink {
            peer_pci_bus_id: "00000000:07:00.0".into(),
            links: 5,
            gbps_per_link: Some(200.0),
        }],
        numa_node: Some(1),
    }]);
    assert_eq!(
        t.gpus[0].name.as_deref(),
        Some("NVIDIA H100 80GB HBM3 (nvml)")
    );
    assert_eq!(t.gpus[0].name_source, Some("nvml"));
    assert_eq!(t.gpus[0].nvlinks[0].peer_pci_bus_id, "0000:07:00.0");
    assert_eq!(t.gpus[1].name_source, Some("pci-id"));
    // sysfs's NUMA node wins; NVML's fills in only where sysfs has none (-1).
    assert_eq!(t.gpus[0].numa_node, Some(0));
    let v = variants::copy("p5.48xlarge");
    v.write(
        "sys/devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.4/0000:53:00.0/numa_node",
        "-1\n",
    );
    let mut t = Topology::discover(&Root::new(&v.dir).unwrap());
    assert_eq!(t.gpus[0].numa_node, None);
    t.merge_nvml(vec![NvmlGpu {
        pci_bus_id: "0000:53:00.0".into(),
        name: String::new(),
        nvlinks: Vec::new(),
        numa_node: Some(1),
    }]);
    assert_eq!(t.gpus[0].numa_node, Some(1));
}

#[test]
fn pcie_links_of_gpus_efas_and_the_ports_above_them() {
    use efabench_topology::pcie::{links, LinkOwner};
    let root = Root::new(variants::fixture("p5en.48xlarge-pcie-degraded")).unwrap();
    let t = Topology::discover(&root);
    let l = links(&root, &t);
    // 8 GPUs, 16 EFAs; per switch a root port, an upstream port and 3 downstream ports.
    assert_eq!(l.len(), 8 + 16 + 8 * 5);
    let short: Vec<String> = l
        .iter()
        .filter(|r| r.width_short() || r.speed_short())
        .map(|r| {
            format!(
                "{}: {} of {}",
                r.label(),
                r.link.current_text(),
                r.capable_text()
            )
        })
        .collect();
    assert_eq!(
        short,
        [
            "GPU 3 0000:86:00.0: 16.0 GT/s x8 of 32.0 GT/s x16",
            "EFA rdmap165s0 0000:a5:00.0: 32.0 GT/s x8 of 32.0 GT/s x16",
            "port 0000:79:01.4 (above GPU 3): 16.0 GT/s x8 of 32.0 GT/s x16",
            "port 0000:9b:01.1 (above EFA rdmap165s0): 32.0 GT/s x8 of 32.0 GT/s x16",
        ]
    );
    let LinkOwner::Port { below, direct } =
        &l.iter().find(|r| r.bdf == "0000:77:00.0").unwrap().owner
    else {
        panic!("0000:77:00.0 is the root port above GPU 3")
    };
    assert_eq!(below, &["GPU 3", "EFA rdmap130s0", "EFA rdmap131s0"]);
    assert!(direct.is_empty());
    assert_eq!(t.gpus[3].pcie.unwrap().current_width, Some(8));
    // A Gen5 GPU in a Gen4 slot trains at Gen4: not short of what the link can do.
    let v = variants::copy("p5en.48xlarge-gin-ready");
    let gpu0 = "sys/devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.4";
    v.write(&format!("{gpu0}/max_link_speed"), "16.0 GT/s PCIe\n");
    v.write(&format!("{gpu0}/current_link_speed"), "16.0 GT/s PCIe\n");
    v.write(
        &format!("{gpu0}/0000:53:00.0/current_link_speed"),
        "16.0 GT/s PCIe\n",
    );
    let root = Root::new(&v.dir).unwrap();
    let l = links(&root, &Topology::discover(&root));
    assert!(
        l.iter().all(|r| !r.speed_short() && !r.width_short()),
        "{l:#?}"
    );
    // p4d's GPUs and EFAs sit on the root bus: no port above them.
    let root = Root::new(variants::fixture("p4d.24xlarge")).unwrap();
    assert_eq!(links(&root, &Topology::discover(&root)).len(), 12);
}

#[test]
fn variants_show_up_in_topology() {
    let t = variants::variant("no-efa");
    let topo = Topology::discover(&Root::new(t.path()).unwrap());
    assert!(topo.nics.is_empty());
    assert_eq!(topo.efa_pci_without_rdma_device.len(), 32);
    assert!(topo
        .gpus
        .iter()
        .all(|g| g.nics.is_empty() && g.pairing == Pairing::None));
    let t = variants::variant("port-down");
    let topo = Topology::discover(&Root::new(t.path()).unwrap());
    assert_eq!(
        topo.nic("rdmap113s0").unwrap().state.as_deref(),
        Some("DOWN")
    );
    assert_eq!(topo.aggregate_link_gbps, 3200.0);
}

#[test]
fn counters_list_every_file_and_deltas_follow_changes() {
    let t = variants::copy("p5.48xlarge");
    let root = Root::new(t.path()).unwrap();
    let a = Snapshot::read(&root).unwrap();
    assert_eq!(a.nics.len(), 32);
    let n = &a.nics[0];
    assert_eq!(n.port.len(), 22, "r2.17 port counters");
    assert_eq!(n.device.len(), 12);
    assert!(!n.port.contains_key("lifespan"));
    t.bump("rdmap79s0", "tx_bytes", true, 4096);
    t.bump("rdmap79s0", "retrans_pkts", true, 3);
    t.bump("rdmap79s0", "cmds_err", false, 1);
    let b = Snapshot::read(&root).unwrap();
    let j = a.delta_json(&b);
    assert_eq!(j.as_object().unwrap().len(), 1, "{j}");
    assert_eq!(j["rdmap79s0"]["tx_bytes"], 4096);
    assert_eq!(j["rdmap79s0"]["retrans_pkts"], 3);
    assert_eq!(j["rdmap79s0"]["cmds_err"], 1);
    let d = a.delta(&b);
    let errs = d.iter().find(|d| d.name == "rdmap79s0").unwrap().errors();
    assert_eq!(
        errs.keys().collect::<Vec<_>>(),
        ["cmds_err", "retrans_pkts"]
    );
    // A counter file with garbage is skipped, not fatal.
    t.write(
        "sys/class/infiniband/rdmap80s0/ports/1/hw_counters/tx_pkts",
        "not a number\n",
    );
    let c = Snapshot::read(&root).unwrap();
    let n80 = c.nics.iter().find(|n| n.name == "rdmap80s0").unwrap();
    assert!(!n80.port.contains_key("tx_pkts"));
    assert!(n80.port.contains_key("tx_bytes"));
}

#[test]
fn legacy_layout_has_counters_in_both_scopes() {
    let s = Snapshot::read(&Root::new(variants::fixture("p4d.24xlarge-legacy")).unwrap()).unwrap();
    assert_eq!(s.nics[0].port.len(), 25);
    assert_eq!(s.nics[0].device.len(), 25);
    assert!(Snapshot::read(&Root::new(variants::variant("no-efa").path()).unwrap()).is_none());
}

#[test]
fn installed_versions_from_files() {
    let root = Root::new(variants::fixture("p5.48xlarge")).unwrap();
    let i = Installed::scan(&root, &BTreeMap::new());
    assert_eq!(
        i.efa_driver,
        EfaDriver::Amzn {
            version: "2.17.3g".into()
        }
    );
    assert_eq!(i.efa_installer.unwrap().version.as_deref(), Some("1.43.2"));
    assert_eq!(
        Installed::best(&i.libfabric).unwrap().version.as_deref(),
        Some("2.1")
    );
    assert_eq!(
        Installed::best(&i.aws_ofi_nccl).unwrap().version.as_deref(),
        Some("1.16.1")
    );
    assert_eq!(
        i.nccl.len(),
        1,
        "symlinks to the same file count once: {:?}",
        i.nccl
    );
    assert_eq!(i.nccl[0].version.as_deref(), Some("2.27.7"));
    let nv = i.nvidia_driver.unwrap();
    assert_eq!((nv.version.as_str(), nv.open), ("570.133.20", true));
    assert_eq!(i.cuda.unwrap().version.as_deref(), Some("12.8.1"));
    assert!(i.modules.contains(&"efa_nv_peermem".to_string()));

    let legacy = Installed::scan(
        &Root::new(variants::fixture("p4d.24xlarge-legacy")).unwrap(),
        &BTreeMap::new(),
    );
    assert_eq!(legacy.aws_ofi_nccl[0].version.as_deref(), Some("1.5.0aws"));
    assert_eq!(legacy.nccl[0].version.as_deref(), Some("2.8.4"));
    assert_eq!(legacy.cuda.unwrap().version.as_deref(), Some("11.0.228"));
    assert!(!legacy.nvidia_driver.unwrap().open);
    assert_eq!(
        legacy.libfabric[0].version, None,
        "soname 1.14 is not in the table"
    );
}

#[test]
fn empty_root_gives_empty_topology() {
    let d = std::env::temp_dir().join(format!("efabench-empty-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let t = Topology::discover(&Root::new(&d).unwrap());
    assert!(t.gpus.is_empty() && t.nics.is_empty() && t.numa.is_empty());
    assert_eq!(t.instance_type, None);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn kernel_names_efa_n_are_accepted() {
    // Without the rdma-core rename rule devices keep the kernel's efa_N names.
    let t = variants::copy("p4d.24xlarge");
    let class = t.dir.join("sys/class/infiniband");
    for (i, name) in ["rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"]
        .iter()
        .enumerate()
    {
        let target = std::fs::read_link(class.join(name)).unwrap();
        let target = target.to_string_lossy().replace(name, &format!("efa_{i}"));
        let dir = class.join(&target);
        std::fs::rename(dir.parent().unwrap().join(name), &dir).unwrap();
        std::fs::remove_file(class.join(name)).unwrap();
        std::os::unix::fs::symlink(&target, class.join(format!("efa_{i}"))).unwrap();
    }
    let root = Root::new(t.path()).unwrap();
    let topo = Topology::discover(&root);
    let names: Vec<&str> = topo.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["efa_0", "efa_1", "efa_2", "efa_3"]);
    assert_eq!(topo.gpus[5].nics, vec!["efa_2"]);
    assert_eq!(Snapshot::read(&root).unwrap().nics[3].name, "efa_3");
}

#[test]
fn cuda_13_without_version_files() {
    // (variant, version, where it was read, relative to the toolkit directory)
    let cases = [
        ("cuda13-header", Some("13.0"), "include/cuda.h"),
        (
            "cuda13-cudart",
            Some("13.0.96"),
            "targets/x86_64-linux/lib/libcudart.so.13.0.96",
        ),
        (
            "cuda13-soname",
            Some("13"),
            "targets/x86_64-linux/lib/libcudart.so",
        ),
        ("cuda13-nvcc", None, "bin/nvcc --version"),
    ];
    for (variant, version, from) in cases {
        let t = variants::variant(variant);
        let i = Installed::scan(&Root::new(t.path()).unwrap(), &BTreeMap::new());
        let c = i.cuda.unwrap_or_else(|| panic!("{variant}: no toolkit"));
        assert_eq!(
            c.dir, "/usr/local/cuda-13.0",
            "{variant}: links followed in the root"
        );
        assert_eq!(c.version.as_deref(), version, "{variant}: {c:?}");
        assert_eq!(c.from(), from, "{variant}: {c:?}");
    }
}

#[test]
fn cuda_version_files_come_first() {
    let t = variants::variant("cuda13-cudart");
    t.write(
        "usr/local/cuda-13.0/version.json",
        "{\"cuda\": {\"version\": \"13.0.1\"}}\n",
    );
    let root = Root::new(t.path()).unwrap();
    let c = Installed::scan(&root, &BTreeMap::new()).cuda.unwrap();
    assert_eq!(
        (c.version.as_deref(), c.source),
        (Some("13.0.1"), CudaSource::VersionJson)
    );
    // A version.json without a version falls through to the next source.
    t.write("usr/local/cuda-13.0/version.json", "{}\n");
    let c = Installed::scan(&root, &BTreeMap::new()).cuda.unwrap();
    assert_eq!(
        (c.version.as_deref(), c.source),
        (Some("13.0.96"), CudaSource::Cudart)
    );
    // The header is read before the library.
    t.write(
        "usr/local/cuda-13.0/targets/x86_64-linux/include/cuda.h",
        "#define CUDA_VERSION 13000\n",
    );
    let c = Installed::scan(&root, &BTreeMap::new()).cuda.unwrap();
    assert_eq!(c.source, CudaSource::CudaHeader);
    // Nothing with a version: the first file seen is named.
    t.remove("usr/local/cuda-13.0/targets/x86_64-linux/include/cuda.h");
    t.remove("usr/local/cuda-13.0/targets/x86_64-linux/lib");
    let c = Installed::scan(&root, &BTreeMap::new()).cuda.unwrap();
    assert_eq!((c.version, c.source), (None, CudaSource::VersionJson));
    // A dangling /usr/local/cuda is no toolkit.
    t.remove("usr/local/cuda-13.0");
    assert_eq!(Installed::scan(&root, &BTreeMap::new()).cuda, None);
}
