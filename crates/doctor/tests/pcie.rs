//! The PCIe checks on the fixture trees: links trained below what they can do, and AER counters
//! rising between two snapshots (made by bumping a copy's counter files in between).

#[path = "../../../fixtures/variants.rs"]
mod variants;

use efabench_doctor::{check_aer, run, Inputs, Report, Status};
use efabench_topology::pcie::{links, AerSnapshot};
use efabench_topology::{Root, Topology};
use std::path::Path;

fn report(dir: &Path) -> Report {
    run(&Inputs::new(Root::new(dir).unwrap()))
}

fn check<'a>(r: &'a Report, id: &str) -> &'a efabench_doctor::Check {
    r.get(id).unwrap_or_else(|| panic!("no check {id}: {r:#?}"))
}

#[test]
fn degraded_p5en_names_the_gpu_and_the_efa_with_their_links() {
    let r = report(&variants::fixture("p5en.48xlarge-pcie-degraded"));
    let g = check(&r, "pcie-gpu-links");
    assert_eq!(g.status, Status::Fail, "{g:?}");
    assert_eq!(
        g.summary,
        "GPU 3 0000:86:00.0: PCIe 16.0 GT/s x8, capable of 32.0 GT/s x16"
    );
    assert_eq!(g.subjects, ["0000:86:00.0"]);
    assert!(g.fix.contains("stop and start"), "{g:?}");
    let e = check(&r, "pcie-efa-links");
    assert_eq!(e.status, Status::Fail, "{e:?}");
    assert_eq!(
        e.summary,
        "EFA rdmap165s0 0000:a5:00.0: PCIe 32.0 GT/s x8, capable of 32.0 GT/s x16"
    );
    // The switch ports above them read the same links: judged once, at the devices.
    assert_eq!(check(&r, "pcie-port-links").status, Status::Pass);
    assert_eq!(check(&r, "pcie-aer").status, Status::Pass);
    assert!(!r.passed());
    // The same tree with healthy links passes all four.
    let r = report(&variants::fixture("p5en.48xlarge-gin-ready"));
    for id in [
        "pcie-gpu-links",
        "pcie-efa-links",
        "pcie-port-links",
        "pcie-aer",
    ] {
        assert_eq!(check(&r, id).status, Status::Pass, "{:?}", check(&r, id));
    }
    assert_eq!(
        check(&r, "pcie-gpu-links").summary,
        "8 GPU link(s) at their maximum (32.0 GT/s x16)"
    );
}

const GPU0: &str = "sys/devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.4/0000:53:00.0";

#[test]
fn an_idle_gpu_at_full_width_warns_and_a_slow_upstream_port_fails() {
    let t = variants::copy("p5.48xlarge");
    // An idle GPU drops to Gen1; both ends of its link read it.
    t.write(&format!("{GPU0}/current_link_speed"), "2.5 GT/s PCIe\n");
    t.write(
        "sys/devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.4/current_link_speed",
        "2.5 GT/s PCIe\n",
    );
    // The switch's upstream link (root port 0000:55:00.0 and upstream port 0000:56:00.0).
    t.write(
        "sys/devices/pci0000:55/0000:55:00.0/current_link_width",
        "4\n",
    );
    t.write(
        "sys/devices/pci0000:55/0000:55:00.0/0000:56:00.0/current_link_width",
        "4\n",
    );
    let r = report(&t.dir);
    let g = check(&r, "pcie-gpu-links");
    assert_eq!(g.status, Status::Warn, "{g:?}");
    assert!(
        g.summary
            .starts_with("GPU 0 0000:53:00.0: PCIe 2.5 GT/s x16, capable of 32.0 GT/s x16"),
        "{g:?}"
    );
    let p = check(&r, "pcie-port-links");
    assert_eq!(p.status, Status::Fail, "{p:?}");
    assert_eq!(p.subjects, ["0000:55:00.0", "0000:56:00.0"]);
    assert!(
        p.summary.contains("port 0000:55:00.0 (above GPU 1, EFA rdmap96s0, EFA rdmap97s0, ... (5 devices)): PCIe 32.0 GT/s x4, capable of 32.0 GT/s x16"),
        "{p:?}"
    );
    assert_eq!(check(&r, "pcie-efa-links").status, Status::Pass);
}

fn aer(dir: &Path) -> AerSnapshot {
    let root = Root::new(dir).unwrap();
    let topo = Topology::discover(&root);
    AerSnapshot::read(&root, &topo, &links(&root, &topo))
}

#[test]
fn aer_counters_rising_warn_or_fail_by_kind() {
    let t = variants::copy("p5en.48xlarge-gin-ready");
    let before = aer(&t.dir);
    // 8 GPUs, 16 EFAs and 40 ports carry AER files.
    assert_eq!(before.devices.len(), 64);
    assert_eq!(check_aer(&before, &before).status, Status::Pass);
    t.write(
        &format!("{GPU0}/aer_dev_correctable"),
        "RxErr 3\nBadTLP 2\nTOTAL_ERR_COR 5\n",
    );
    let after = aer(&t.dir);
    let c = check_aer(&before, &after);
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(
        c.summary.contains("GPU 0 0000:53:00.0 correctable 0→5"),
        "{c:?}"
    );
    t.write(
        "sys/devices/pci0000:44/0000:44:00.0/0000:45:00.0/0000:46:01.0/0000:4f:00.0/aer_dev_fatal",
        "DLP 1\nTOTAL_ERR_FATAL 1\n",
    );
    let later = aer(&t.dir);
    let c = check_aer(&before, &later);
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.summary.contains("EFA rdmap79s0 0000:4f:00.0 fatal 0→1"),
        "{c:?}"
    );
    // Not rising any more: the count since boot is a warning.
    let c = check_aer(&later, &aer(&t.dir));
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c.summary.contains("nonfatal=0 fatal=1"), "{c:?}");
    // No AER files at all: skip.
    let none = AerSnapshot {
        at: std::time::Instant::now(),
        devices: Default::default(),
    };
    assert_eq!(check_aer(&none, &none).status, Status::Skip);
}
