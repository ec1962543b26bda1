//! Doctor verdicts on the fixture trees and their broken variants.

#[path = "../../../fixtures/variants.rs"]
mod variants;

use efabench_doctor::{
    check_counters, memlock_from_limits, run, Inputs, LibfabricInput, Memlock, Report, Status,
};
use efabench_topology::libfabric::parse_fi_info;
use efabench_topology::{Root, Snapshot};
use std::collections::BTreeMap;
use std::path::Path;

fn inputs(dir: &Path, env: &[(&str, &str)]) -> Inputs {
    let root = Root::new(dir).unwrap();
    let mut i = Inputs::new(root);
    if let Ok(t) = std::fs::read_to_string(dir.join("fi_info.txt")) {
        i.libfabric = LibfabricInput::from_fi_info("fi_info.txt", &parse_fi_info(&t));
    }
    i.memlock = std::fs::read_to_string(dir.join("proc/self/limits"))
        .ok()
        .and_then(|t| memlock_from_limits(&t));
    i.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>();
    i
}

fn status(r: &Report, id: &str) -> Status {
    r.get(id)
        .unwrap_or_else(|| panic!("no check {id}: {r:#?}"))
        .status
}

#[test]
fn healthy_p5_passes_everything_checkable() {
    let r = run(&inputs(&variants::fixture("p5.48xlarge"), &[]));
    for c in &r.checks {
        let expect = if ["security-group", "placement-group"].contains(&c.id.as_str()) {
            Status::Skip
        } else {
            Status::Pass
        };
        assert_eq!(c.status, expect, "{c:?}");
    }
    assert!(r.passed());
    assert!(r
        .get("efa-devices")
        .unwrap()
        .summary
        .contains("32 EFA devices"));
    assert!(r
        .get("libfabric-efa-provider")
        .unwrap()
        .summary
        .contains("32 efa-direct"));
    let j = r.to_json();
    assert_eq!(j["fails"], 0);
    assert_eq!(j["checks"][0]["id"], "efa-devices");
}

#[test]
fn healthy_p4d_passes() {
    let r = run(&inputs(&variants::fixture("p4d.24xlarge"), &[]));
    assert_eq!(r.fails(), 0, "{r:#?}");
    assert_eq!(r.warns(), 0, "{r:#?}");
    assert!(r
        .get("gpudirect-rdma")
        .unwrap()
        .summary
        .contains("p2p: NVIDIA"));
}

#[test]
fn legacy_p4d_fails_on_old_versions() {
    let r = run(&inputs(&variants::fixture("p4d.24xlarge-legacy"), &[]));
    for id in ["efa-driver", "efa-installer", "libfabric", "aws-ofi-nccl"] {
        assert_eq!(status(&r, id), Status::Fail, "{id}: {:?}", r.get(id));
    }
    assert_eq!(
        status(&r, "gpudirect-rdma"),
        Status::Pass,
        "gdr=1 is a path"
    );
    assert_eq!(
        status(&r, "env:FI_EFA_USE_DEVICE_RDMA"),
        Status::Warn,
        "plugin < 1.7 without the variable"
    );
    assert!(!r.passed());
    // The legacy layout lists the same counters twice; each stale value is reported once.
    assert_eq!(status(&r, "efa-counters"), Status::Pass);
}

#[test]
fn broken_variants() {
    let cases: &[(&str, &str, Status)] = &[
        ("no-efa", "efa-devices", Status::Fail),
        ("no-efa", "efa-driver", Status::Fail),
        ("no-efa", "efa-ports", Status::Skip),
        ("missing-nic", "efa-devices", Status::Fail),
        ("port-down", "efa-ports", Status::Fail),
        ("errors-stale", "efa-counters", Status::Warn),
        ("hugepages-0", "hugepages", Status::Warn),
        ("no-gdr", "gpudirect-rdma", Status::Fail),
        ("memlock-low", "memlock", Status::Fail),
        ("no-uverbs", "efa-uverbs", Status::Fail),
        ("no-efa", "efa-uverbs", Status::Skip),
    ];
    for (variant, id, want) in cases {
        let t = variants::variant(variant);
        let r = run(&inputs(t.path(), &[]));
        let c = r.get(id).unwrap();
        assert_eq!(c.status, *want, "{variant}/{id}: {c:?}");
        assert_eq!(r.passed(), r.fails() == 0);
        if *variant == "port-down" {
            assert_eq!(c.subjects, vec!["rdmap113s0"]);
        }
        if *variant == "no-efa" && *id == "efa-devices" {
            assert!(c.summary.contains("driver"), "{c:?}");
        }
        if *variant == "missing-nic" {
            assert!(r
                .get("efa-devices")
                .unwrap()
                .summary
                .contains("31 EFA devices"));
            assert_eq!(r.get("efa-devices").unwrap().subjects, vec!["0000:c9:00.0"]);
        }
    }
}

#[test]
fn no_gdr_with_open_module_and_dmabuf_is_a_path() {
    // no-gdr has empty p2p files and the proprietary NVIDIA module; with the open module (and
    // kernel 6.8) the dmabuf route remains, unless FI_HMEM_CUDA_USE_DMABUF=0.
    let t = variants::variant("no-gdr");
    t.write(
        "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n",
    );
    let r = run(&inputs(t.path(), &[]));
    let c = r.get("gpudirect-rdma").unwrap();
    assert_eq!(c.status, Status::Pass, "{c:?}");
    let r = run(&inputs(t.path(), &[("FI_HMEM_CUDA_USE_DMABUF", "0")]));
    assert_eq!(status(&r, "gpudirect-rdma"), Status::Fail);
    assert_eq!(status(&r, "env:FI_HMEM_CUDA_USE_DMABUF"), Status::Warn);
}

#[test]
fn rising_counters_fail() {
    let t = variants::copy("p5.48xlarge");
    let root = Root::new(t.path()).unwrap();
    let a = Snapshot::read(&root).unwrap();
    t.bump("rdmap96s0", "retrans_pkts", true, 12);
    t.bump("rdmap96s0", "unresponsive_remote_events", true, 1);
    t.bump("rdmap97s0", "tx_bytes", true, 1 << 20);
    let b = Snapshot::read(&root).unwrap();
    let c = check_counters(&a, &b);
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert_eq!(c.subjects, vec!["rdmap96s0"]);
    assert!(
        c.summary.contains("rdmap96s0:retrans_pkts+12"),
        "{}",
        c.summary
    );
    // Traffic alone is not an error.
    let c2 = check_counters(&b, &b);
    assert_eq!(
        c2.status,
        Status::Warn,
        "stale non-zero errors after the bump: {c2:?}"
    );
}

#[test]
fn environment_lint() {
    let dir = variants::fixture("p5.48xlarge");
    let env = [
        ("FI_PROVIDER", "tcp"),
        ("FI_EFA_MTU_SIZE", "8000"),
        ("FI_EFA_USE_DEVICE_RDMA", "0"),
        ("RDMAV_FORK_SAFE", "1"),
        ("NCCL_PROTO", "simple"),
        ("NCCL_NET", "Socket"),
        ("FI_EFA_IFACE", ""),
    ];
    let r = run(&inputs(&dir, &env));
    assert_eq!(status(&r, "env:FI_PROVIDER"), Status::Fail);
    assert_eq!(
        status(&r, "env:FI_EFA_MTU_SIZE"),
        Status::Fail,
        "libfabric 2.1 aborts"
    );
    assert_eq!(status(&r, "env:FI_EFA_USE_DEVICE_RDMA"), Status::Warn);
    assert_eq!(status(&r, "env:RDMAV_FORK_SAFE"), Status::Warn);
    assert_eq!(status(&r, "env:NCCL_PROTO"), Status::Warn);
    assert_eq!(status(&r, "env:NCCL_NET"), Status::Fail);
    assert_eq!(status(&r, "env:FI_EFA_IFACE"), Status::Fail);
    assert!(r.get("env").is_none());
    assert!(!r.passed());
    // FI_PROVIDER=efa is fine; USE_DEVICE_RDMA=1 on an instance without RDMA read aborts.
    let t = variants::copy("p4d.24xlarge");
    t.write("sys/devices/virtual/dmi/id/product_name", "p3dn.24xlarge\n");
    let r = run(&inputs(
        t.path(),
        &[("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1")],
    ));
    assert!(r.get("env:FI_PROVIDER").is_none());
    assert_eq!(status(&r, "env:FI_EFA_USE_DEVICE_RDMA"), Status::Fail);
    // On old libfabric the aborting variables are only deprecated.
    let r = run(&inputs(
        &variants::fixture("p4d.24xlarge-legacy"),
        &[("FI_EFA_MTU_SIZE", "1")],
    ));
    assert_eq!(status(&r, "env:FI_EFA_MTU_SIZE"), Status::Warn);
}

#[test]
fn libfabric_inputs() {
    let dir = variants::fixture("p5.48xlarge");
    let mut i = inputs(&dir, &[]);
    i.libfabric =
        LibfabricInput::from_fi_info("x", &parse_fi_info("fi_getinfo: -61 (No data available)\n"));
    let r = run(&i);
    assert_eq!(status(&r, "libfabric-efa-provider"), Status::Fail);
    // Version then comes from the libfabric.so.1.27.0 file name.
    assert!(
        r.get("libfabric").unwrap().summary.contains("2.1"),
        "{:?}",
        r.get("libfabric")
    );
    i.libfabric = LibfabricInput::NotFound {
        looked: "nowhere".into(),
    };
    assert_eq!(status(&run(&i), "libfabric"), Status::Fail);
    i.libfabric = LibfabricInput::NotChecked {
        why: "fixture".into(),
    };
    let r = run(&i);
    assert_eq!(status(&r, "libfabric"), Status::Skip);
    assert_eq!(status(&r, "libfabric-efa-provider"), Status::Skip);
    // An entry per NIC is expected.
    let t = std::fs::read_to_string(dir.join("fi_info.txt")).unwrap();
    let cut: String = t.replace("rdmap201s0-rdm", "rdmap201s0-gone");
    i.libfabric = LibfabricInput::from_fi_info("x", &parse_fi_info(&cut));
    let r = run(&i);
    assert_eq!(
        r.get("libfabric-efa-provider").unwrap().subjects,
        vec!["rdmap201s0"]
    );
}

#[test]
fn nccl_logs() {
    let ok = "NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v8)\n\
NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.0\n\
NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 32 nics)\n\
NCCL INFO Using network Libfabric\n\
NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Libfabric/0/GDRDMA\n";
    let tcp = "NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory\n\
NCCL INFO NET/Plugin : No plugin found, using internal implementation\n\
NCCL INFO NET/IB : No device found.\n\
NCCL INFO NET/Socket : Using [0]ens32:10.1.2.3<0>\n\
NCCL INFO Using network Socket\n\
NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0\n";
    let mut i = inputs(&variants::fixture("p5.48xlarge"), &[]);
    i.nccl_log = Some(("ok.log".into(), ok.into()));
    let c = run(&i).get("nccl-log").cloned().unwrap();
    assert_eq!(c.status, Status::Pass, "{c:?}");
    assert!(c.summary.contains("1.14.0") && c.summary.contains("32 NICs"));
    i.nccl_log = Some(("tcp.log".into(), tcp.into()));
    let c = run(&i).get("nccl-log").cloned().unwrap();
    assert_eq!(c.status, Status::Fail);
    assert!(c.summary.contains("sockets"));
    i.nccl_log = Some(("nogdr.log".into(), ok.replace("/GDRDMA", "")));
    assert_eq!(run(&i).get("nccl-log").unwrap().status, Status::Warn);
    i.nccl_log = Some(("empty.log".into(), String::new()));
    assert_eq!(run(&i).get("nccl-log").unwrap().status, Status::Warn);
}

#[test]
fn memlock_parsing_and_empty_root() {
    assert_eq!(
        memlock_from_limits(
            "Max locked memory         unlimited            unlimited            bytes\n"
        ),
        Some(Memlock::Unlimited)
    );
    assert_eq!(
        memlock_from_limits(
            "Max locked memory         65536                65536                bytes\n"
        ),
        Some(Memlock::Bytes(65536))
    );
    let d = std::env::temp_dir().join(format!("efabench-doctor-empty-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let mut i = Inputs::new(Root::new(&d).unwrap());
    i.memlock = Some(Memlock::Bytes(65536));
    let r = run(&i);
    assert_eq!(status(&r, "efa-devices"), Status::Fail);
    assert_eq!(status(&r, "memlock"), Status::Fail);
    assert_eq!(status(&r, "gpudirect-rdma"), Status::Skip);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn this_machine_does_not_panic() {
    let mut i = Inputs::new(Root::system());
    i.env = std::env::vars().collect();
    i.memlock = efabench_doctor::memlock_of_this_process();
    let r = run(&i);
    assert!(r.checks.len() >= 15);
    assert!(r.get("efa-devices").is_some());
}

#[test]
fn in_tree_driver_relies_on_dmabuf() {
    // The in-tree driver has no /sys/module/efa/version and no p2p/gdr file.
    let t = variants::copy("p5.48xlarge");
    t.remove("sys/module/efa/version");
    for e in std::fs::read_dir(t.dir.join("sys/class/infiniband")).unwrap() {
        let n = e.unwrap().file_name().into_string().unwrap();
        t.remove(&format!("sys/class/infiniband/{n}/device/p2p"));
    }
    let r = run(&inputs(t.path(), &[]));
    let d = r.get("efa-driver").unwrap();
    assert_eq!(d.status, Status::Pass);
    assert!(d.summary.contains("in-tree"), "{d:?}");
    let g = r.get("gpudirect-rdma").unwrap();
    assert_eq!(g.status, Status::Pass, "open module + kernel 6.8: {g:?}");
    assert!(g.summary.contains("dmabuf"));
    t.write("proc/sys/kernel/osrelease", "5.10.0-28-cloud-amd64\n");
    assert_eq!(
        status(&run(&inputs(t.path(), &[])), "gpudirect-rdma"),
        Status::Fail
    );
}

#[test]
fn cuda_13_found_and_says_where() {
    let cases = [
        (
            "cuda13-header",
            Status::Pass,
            "CUDA toolkit 13.0 in /usr/local/cuda-13.0 (from include/cuda.h)",
        ),
        (
            "cuda13-cudart",
            Status::Pass,
            "CUDA toolkit 13.0.96 in /usr/local/cuda-13.0 (from targets/x86_64-linux/lib/libcudart.so.13.0.96)",
        ),
        (
            "cuda13-soname",
            Status::Pass,
            "CUDA toolkit 13 in /usr/local/cuda-13.0 (from targets/x86_64-linux/lib/libcudart.so)",
        ),
        (
            "cuda13-nvcc",
            Status::Warn,
            "CUDA toolkit in /usr/local/cuda-13.0 has no readable version (only bin/nvcc could tell it, and nvcc is run only with --root /)",
        ),
    ];
    for (variant, want, summary) in cases {
        let t = variants::variant(variant);
        let r = run(&inputs(t.path(), &[]));
        let c = r.get("cuda").unwrap();
        assert_eq!((c.status, c.summary.as_str()), (want, summary), "{variant}");
    }
    let r = run(&inputs(&variants::fixture("p5.48xlarge"), &[]));
    assert_eq!(
        r.get("cuda").unwrap().summary,
        "CUDA toolkit 12.8.1 in /usr/local/cuda (from version.json)"
    );
    // The minimum still applies to a version read from the header.
    let t = variants::variant("cuda13-header");
    t.write(
        "usr/local/cuda-13.0/targets/x86_64-linux/include/cuda.h",
        "#define CUDA_VERSION 12010\n",
    );
    let c = run(&inputs(t.path(), &[])).get("cuda").unwrap().clone();
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.summary
            .starts_with("CUDA 12.1 (from include/cuda.h) is older than 12.2"),
        "{c:?}"
    );
}

fn gin_inputs(name: &str) -> Inputs {
    let mut i = inputs(&variants::fixture(name), &[]);
    i.gin = true;
    i
}

#[test]
fn gin_group_only_when_asked() {
    let r = run(&inputs(&variants::fixture("p5en.48xlarge-gin-ready"), &[]));
    assert!(r.checks.iter().all(|c| !c.id.starts_with("gin")), "{r:#?}");
}

#[test]
fn gin_ready_p5en_passes_every_check() {
    let r = run(&gin_inputs("p5en.48xlarge-gin-ready"));
    for c in &r.checks {
        let expect = if ["security-group", "placement-group"].contains(&c.id.as_str()) {
            Status::Skip
        } else {
            Status::Pass
        };
        assert_eq!(c.status, expect, "{c:?}");
    }
    let v = r.get("gin").unwrap();
    assert!(v.summary.contains("EFA-GDA"), "{v:?}");
    assert!(r
        .get("gin-instance")
        .unwrap()
        .summary
        .contains("p5en, p6-b200, p6-b300"));
    assert!(r
        .get("gin-gdrcopy")
        .unwrap()
        .summary
        .contains("libgdrapi 2.5 and gdrdrv 2.5 loaded"));
    assert!(r
        .get("gin-rdma-core")
        .unwrap()
        .summary
        .contains("64.0amzn0"));
    assert!(r.passed());
}

#[test]
fn gin_not_ready_p5en_names_what_is_missing() {
    let r = run(&gin_inputs("p5en.48xlarge-gin-not-ready"));
    // The ordinary checks pass: only the GIN group tells the trees apart.
    for c in r.checks.iter().filter(|c| !c.id.starts_with("gin")) {
        assert_ne!(c.status, Status::Fail, "{c:?}");
    }
    assert_eq!(status(&r, "gin-instance"), Status::Pass);
    for (id, says) in [
        (
            "gin-aws-ofi-nccl",
            "aws-ofi-nccl 1.16.1 is older than 1.21.0",
        ),
        ("gin-nccl", "NCCL 2.27.7 is older than 2.31.2"),
        ("gin-gdrcopy", "libgdrapi.so not found; gdrdrv not loaded"),
        ("gin-efa-driver", "EFA driver 2.17.3g is older than 3.3.0"),
        ("gin-rdma-core", "rdma-core 58.amzn0 is older than 64.0"),
        ("gin-libfabric", "libfabric 2.1.0amzn4.0 is older than 2.6"),
        (
            "gin-peer-mapping",
            "/etc/modprobe.d/nvidia-gdaki.conf but the loaded driver runs without it",
        ),
    ] {
        let c = r.get(id).unwrap();
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.summary.contains(says), "{id}: {:?}", c.summary);
        assert!(!c.fix.is_empty(), "{c:?}");
    }
    let v = r.get("gin").unwrap();
    assert_eq!(v.status, Status::Fail);
    assert!(v.summary.contains("not ready (7 missing)"), "{v:?}");
    assert!(!r.passed());
}

#[test]
fn gin_on_p5_is_proxy_mode_only() {
    // p5 has no EFA-GDA: its EFA-GDA checks are skipped, the instance check says which types can.
    let r = run(&gin_inputs("p5.48xlarge"));
    let i = r.get("gin-instance").unwrap();
    assert_eq!(i.status, Status::Warn);
    assert!(
        i.summary
            .contains("cannot use EFA-GDA (only p5en, p6-b200, p6-b300 can)"),
        "{i:?}"
    );
    for id in [
        "gin-efa-driver",
        "gin-rdma-core",
        "gin-libfabric",
        "gin-peer-mapping",
    ] {
        assert_eq!(status(&r, id), Status::Skip, "{id}");
    }
    // NCCL 2.27.7, aws-ofi-nccl 1.16.1, no GDRCopy: even proxy mode is not ready.
    assert_eq!(status(&r, "gin-nccl"), Status::Fail);
    assert_eq!(status(&r, "gin"), Status::Fail);
}

#[test]
fn gin_p5en_after_driver_reload_needs_only_the_rest() {
    // The not-ready tree with the option active: the peer-mapping check passes, the others still fail.
    let t = variants::copy("p5en.48xlarge-gin-not-ready");
    let params = t.dir.join("proc/driver/nvidia/params");
    let text = std::fs::read_to_string(&params).unwrap().replace(
        "RegistryDwords: \"\"",
        "RegistryDwords: \"RMSmallBarP2PPeerBar1=1;PeerMappingOverride=0x1;\"",
    );
    std::fs::write(&params, text).unwrap();
    let mut i = inputs(&t.dir, &[]);
    i.gin = true;
    let r = run(&i);
    assert_eq!(status(&r, "gin-peer-mapping"), Status::Pass);
    assert!(r.get("gin").unwrap().summary.contains("(6 missing)"));
    // Without the params file (driver not loaded) it fails again, saying so.
    std::fs::remove_file(&params).unwrap();
    let r = run(&i);
    let c = r.get("gin-peer-mapping").unwrap();
    assert_eq!(c.status, Status::Fail);
    assert!(c.summary.contains("not loaded"), "{c:?}");
}
