//! The GPU health checks driven by the JSON fixture source, as CI runs them: a healthy p5en
//! passes, a faulty one fails and warns on each fault with the GPU named, a one-GPU machine skips
//! NVLink instead of failing, and a driver that is not there is one clean skip.

#[path = "../../../fixtures/variants.rs"]
mod variants;

use efabench_doctor::{run, Inputs, NvmlInput, Report, Status};
use efabench_topology::gpu_health::FixtureSource;
use efabench_topology::Root;
use std::sync::Arc;

const GPU_CHECKS: [&str; 9] = [
    "gpu-pcie-nvml",
    "gpu-pcie-replay",
    "gpu-nvlink",
    "gpu-nvlink-errors",
    "gpu-xid",
    "gpu-ecc",
    "gpu-row-remap",
    "gpu-throttle",
    "gpu-persistence",
];

fn report(tree: &str, nvml: NvmlInput) -> Report {
    let mut i = Inputs::new(Root::new(variants::fixture(tree)).unwrap());
    i.nvml = nvml;
    run(&i)
}

fn fixture(name: &str) -> NvmlInput {
    let path = variants::fixture("nvml").join(name);
    NvmlInput::Source(Arc::new(FixtureSource::open(&path).unwrap()))
}

fn get<'a>(r: &'a Report, id: &str) -> &'a efabench_doctor::Check {
    r.get(id).unwrap_or_else(|| panic!("no check {id}: {r:#?}"))
}

#[test]
fn healthy_p5en_passes_every_gpu_check() {
    let r = report("p5en.48xlarge-gin-ready", fixture("healthy-p5en.json"));
    for id in GPU_CHECKS {
        assert_eq!(get(&r, id).status, Status::Pass, "{:?}", get(&r, id));
    }
    assert_eq!(
        get(&r, "gpu-nvlink").summary,
        "8 GPU(s), all 18 NVLinks up on each"
    );
    assert!(r.passed(), "{r:#?}");
}

#[test]
fn faulty_p5en_names_each_fault() {
    let r = report("p5en.48xlarge-gin-ready", fixture("faulty-p5en.json"));
    let expect = [
        (
            "gpu-pcie-nvml",
            Status::Fail,
            "GPU 3 0000:86:00.0: PCIe Gen5 x8, capable of Gen5 x16",
        ),
        ("gpu-pcie-replay", Status::Warn, "GPU 2 0000:75:00.0 4→9"),
        (
            "gpu-nvlink",
            Status::Fail,
            "GPU 1 0000:64:00.0: 17 of 18 links up (down: 5)",
        ),
        (
            "gpu-nvlink-errors",
            Status::Warn,
            "GPU 6 0000:b9:00.0 link 2 crc_flit 0→17",
        ),
        ("gpu-xid", Status::Fail, "GPU 4 0000:97:00.0 Xid 79"),
        ("gpu-ecc", Status::Fail, "GPU 4 0000:97:00.0: 2 uncorrected"),
        (
            "gpu-row-remap",
            Status::Fail,
            "GPU 5 0000:a8:00.0: remap failed",
        ),
        (
            "gpu-throttle",
            Status::Warn,
            "GPU 0 0000:53:00.0: HW slowdown",
        ),
        ("gpu-persistence", Status::Warn, "GPU 0 0000:53:00.0"),
    ];
    for (id, status, text) in expect {
        let c = get(&r, id);
        assert_eq!(c.status, status, "{c:?}");
        assert!(
            c.summary.contains(text),
            "{id}: {:?} lacks {text:?}",
            c.summary
        );
        assert!(!c.fix.is_empty(), "{c:?}");
    }
    // An application XID alongside a fatal one is listed too.
    assert!(get(&r, "gpu-xid")
        .summary
        .contains("GPU 5 0000:a8:00.0 Xid 13"));
    assert!(!r.passed());
}

#[test]
fn one_gpu_machine_skips_nvlink_and_unreadable_xids() {
    let r = report("p5en.48xlarge-gin-ready", fixture("one-gpu-h200.json"));
    for id in ["gpu-nvlink", "gpu-nvlink-errors", "gpu-xid"] {
        assert_eq!(get(&r, id).status, Status::Skip, "{:?}", get(&r, id));
    }
    assert!(get(&r, "gpu-nvlink").summary.contains("not supported"));
    assert!(get(&r, "gpu-xid").fix.contains("root"));
    for id in [
        "gpu-pcie-nvml",
        "gpu-ecc",
        "gpu-row-remap",
        "gpu-persistence",
    ] {
        assert_eq!(get(&r, id).status, Status::Pass, "{:?}", get(&r, id));
    }
}

#[test]
fn no_driver_is_one_skip_and_no_source_is_none() {
    let r = report(
        "p5.48xlarge",
        NvmlInput::Unavailable("libnvidia-ml.so.1: cannot open shared object file".into()),
    );
    let c = get(&r, "gpu-nvml");
    assert_eq!(c.status, Status::Skip);
    assert!(c.summary.starts_with("no NVIDIA driver"), "{c:?}");
    assert!(GPU_CHECKS.iter().all(|id| r.get(id).is_none()));
    let r = report("p5.48xlarge", NvmlInput::NotQueried);
    assert!(r.get("gpu-nvml").is_none());
    assert!(GPU_CHECKS.iter().all(|id| r.get(id).is_none()));
}
