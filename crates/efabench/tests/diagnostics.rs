//! `efabench topo`, `doctor` and `counters` run as the built binary against the fixture trees,
//! their broken variants, and this machine (no EFA, no GPU).

#[path = "../../../fixtures/variants.rs"]
mod variants;

#[path = "../src/cmd/exposition_check.rs"]
mod exposition_check;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn efabench(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_efabench"));
    c.args(args).env_clear();
    if let Ok(p) = std::env::var("PATH") {
        c.env("PATH", p);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run efabench")
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn doctor(root: &Path, extra: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
    let fi = root.join("fi_info.txt");
    let mut args = vec!["doctor", "--json", "--interval", "0", "--root"];
    let r = s(root);
    let f = s(&fi);
    args.push(&r);
    if fi.exists() {
        args.extend(["--fi-info", &f]);
    }
    args.extend(extra);
    let o = efabench(&args, env);
    (o.status.code().unwrap(), json(&o))
}

fn status_of(j: &Value, id: &str) -> String {
    j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {j}"))["status"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn topo_pairs_gpus_and_nics_on_both_fixtures() {
    let p5 = variants::fixture("p5.48xlarge");
    let fi = p5.join("fi_info.txt");
    let o = efabench(
        &["topo", "--json", "--root", &s(&p5), "--fi-info", &s(&fi)],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    let j = json(&o);
    assert_eq!(j["instance_type"], "p5.48xlarge");
    assert_eq!(j["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(j["nics"].as_array().unwrap().len(), 32);
    assert_eq!(j["gpus"][2]["pci_bus_id"], "0000:75:00.0");
    assert_eq!(
        j["gpus"][2]["nics"],
        serde_json::json!(["rdmap113s0", "rdmap114s0", "rdmap115s0", "rdmap116s0"])
    );
    assert_eq!(j["nics"][31]["name"], "rdmap201s0");
    assert_eq!(j["nics"][31]["gpus"], serde_json::json!([7]));
    assert_eq!(j["nics"][0]["link_gbps"], 100.0);
    assert_eq!(j["nics"][0]["state"], "ACTIVE");
    assert_eq!(j["numa"][0]["cpulist"], "0-47,96-143");
    assert_eq!(j["libfabric_domains"].as_array().unwrap().len(), 96);

    let p4d = variants::fixture("p4d.24xlarge");
    let o = efabench(&["topo", "--root", &s(&p4d)], &[]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("instance type: p4d.24xlarge"), "{text}");
    assert!(
        text.contains(
            "rdmap144s27  0000:90:1b.0  1     8.0 GT/s x16  ACTIVE  100   p2p=NVIDIA  4,5"
        ),
        "{text}"
    );
    assert!(text.contains("libfabric domains: not queried"), "{text}");
}

#[test]
fn doctor_statuses_and_exit_codes_per_fixture() {
    let (code, j) = doctor(&variants::fixture("p5.48xlarge"), &[], &[]);
    assert_eq!(
        (code, j["fails"].as_u64(), j["warns"].as_u64()),
        (0, Some(0), Some(0)),
        "{j}"
    );
    assert_eq!(status_of(&j, "security-group"), "skip");
    let (code, j) = doctor(&variants::fixture("p4d.24xlarge"), &[], &[]);
    assert_eq!(code, 0, "{j}");
    let (code, j) = doctor(&variants::fixture("p4d.24xlarge-legacy"), &[], &[]);
    assert_eq!(code, 1);
    for id in ["efa-driver", "efa-installer", "libfabric", "aws-ofi-nccl"] {
        assert_eq!(status_of(&j, id), "fail", "{id}");
    }
    let cases = [
        ("no-efa", "efa-devices", "fail", 1),
        ("missing-nic", "efa-devices", "fail", 1),
        ("port-down", "efa-ports", "fail", 1),
        ("errors-stale", "efa-counters", "warn", 0),
        ("hugepages-0", "hugepages", "warn", 0),
        ("no-gdr", "gpudirect-rdma", "fail", 1),
        ("memlock-low", "memlock", "fail", 1),
    ];
    for (variant, id, want, want_code) in cases {
        let t = variants::variant(variant);
        let (code, j) = doctor(t.path(), &[], &[]);
        assert_eq!(status_of(&j, id), want, "{variant}: {j}");
        assert_eq!(code, want_code, "{variant}: {j}");
        assert_eq!(j["fails"].as_u64().unwrap() > 0, code == 1);
    }
}

#[test]
fn doctor_lints_the_environment_and_reads_nccl_logs() {
    let p5 = variants::fixture("p5.48xlarge");
    let (code, j) = doctor(
        &p5,
        &[],
        &[("FI_PROVIDER", "sockets"), ("FI_EFA_TX_IOV_LIMIT", "1")],
    );
    assert_eq!(code, 1);
    assert_eq!(status_of(&j, "env:FI_PROVIDER"), "fail");
    assert_eq!(status_of(&j, "env:FI_EFA_TX_IOV_LIMIT"), "fail");
    let dir = std::env::temp_dir().join(format!("efabench-nccl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("nccl.log");
    std::fs::write(
        &log,
        "ip-10-0-0-1:1234:1234 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation\n\
ip-10-0-0-1:1234:1234 [0] NCCL INFO Using network Socket\n",
    )
    .unwrap();
    let (code, j) = doctor(&p5, &["--nccl-log", &s(&log)], &[]);
    assert_eq!(code, 1);
    assert_eq!(status_of(&j, "nccl-log"), "fail");
    // The log alone is judged: a node check failing (FI_PROVIDER) does not fail a good log,
    // unless --all asks for the node checks too.
    std::fs::write(
        &log,
        "ip-10-0-0-1:1234:1234 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2\n\
ip-10-0-0-1:1234:1234 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)\n\
ip-10-0-0-1:1234:1234 [0] NCCL INFO Using network AWS Libfabric\n\
ip-10-0-0-1:1234:1234 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA\n",
    )
    .unwrap();
    let bad_env = [("FI_PROVIDER", "sockets")];
    let (code, j) = doctor(&p5, &["--nccl-log", &s(&log)], &bad_env);
    assert_eq!(status_of(&j, "nccl-log"), "pass", "{j}");
    assert_eq!((code, j["checks"].as_array().unwrap().len()), (0, 1), "{j}");
    let (code, j) = doctor(&p5, &["--nccl-log", &s(&log), "--all"], &bad_env);
    assert_eq!(code, 1);
    assert_eq!(status_of(&j, "nccl-log"), "pass");
    assert_eq!(status_of(&j, "env:FI_PROVIDER"), "fail");
    let o = efabench(
        &[
            "doctor",
            "--root",
            &s(&p5),
            "--nccl-log",
            "/nonexistent.log",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn doctor_on_this_machine_reports_what_is_missing() {
    let o = efabench(&["doctor", "--json", "--interval", "0"], &[]);
    let code = o.status.code().expect("exited, not killed");
    assert!(code == 0 || code == 1, "{o:?}");
    let j = json(&o);
    assert!(j["checks"].as_array().unwrap().len() >= 15);
    if !Path::new("/sys/class/infiniband").exists() {
        assert_eq!(status_of(&j, "efa-devices"), "fail");
        assert_eq!(code, 1);
    }
    let o = efabench(&["doctor", "--interval", "0"], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("efa-devices"), "{text}");
    assert!(
        text.lines().last().unwrap_or("").contains("checks:"),
        "{text}"
    );
}

#[test]
fn counters_snapshot_json_lists_every_counter() {
    let p5 = variants::fixture("p5.48xlarge");
    let o = efabench(&["counters", "--json", "--root", &s(&p5)], &[]);
    assert_eq!(o.status.code(), Some(0));
    let j = json(&o);
    let nics = j["nics"].as_array().unwrap();
    assert_eq!(nics.len(), 32);
    assert_eq!(nics[0]["name"], "rdmap79s0");
    assert_eq!(nics[0]["port"].as_object().unwrap().len(), 22);
    assert_eq!(nics[0]["device"].as_object().unwrap().len(), 12);
    assert_eq!(nics[0]["port"]["tx_bytes"], 98213441792310u64);
    let legacy = variants::fixture("p4d.24xlarge-legacy");
    let j = json(&efabench(
        &["counters", "--json", "--root", &s(&legacy)],
        &[],
    ));
    assert_eq!(j["nics"][0]["device"].as_object().unwrap().len(), 25);
}

/// A shell command that stands for a workload moving `bytes` through rdmap32s27 of the fixture
/// tree at `root`: it adds them to the NIC's `tx_bytes` counter.
fn moves_bytes(root: &std::path::Path, bytes: u64) -> String {
    let port = root.join("sys/class/infiniband/rdmap32s27/ports/1/hw_counters");
    format!(
        "echo $(( $(cat {p}/tx_bytes) + {bytes} )) > {p}/tx_bytes.new && mv {p}/tx_bytes.new {p}/tx_bytes",
        p = s(&port)
    )
}

#[test]
fn counters_around_a_command_see_its_traffic_and_keep_its_exit_code() {
    let t = variants::copy("p4d.24xlarge");
    let root = s(t.path());
    // The "workload" moves 1 MB through rdmap32s27 by rewriting its counters.
    let script = format!("{}; exit 7", moves_bytes(t.path(), 1_000_000));
    let o = efabench(
        &[
            "counters", "--json", "--root", &root, "--", "sh", "-c", &script,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(7), "{o:?}");
    let j = json(&o);
    assert_eq!(j["exit_code"], 7);
    assert_eq!(j["verdict"]["efa_traffic"], true);
    assert_eq!(j["verdict"]["bytes"], 1_000_000);
    assert_eq!(j["verdict"]["nics_used"], serde_json::json!(["rdmap32s27"]));
    let nic = j["nics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "rdmap32s27")
        .unwrap();
    assert_eq!(nic["delta"]["tx_bytes"], 1_000_000);
    assert!(nic["seconds"].as_f64().unwrap() >= 0.0);
    // Nothing moved: the verdict says so, and the job fails with exit 3.
    let o = efabench(&["counters", "--root", &root, "--", "true"], &[]);
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("verdict: no EFA traffic"), "{text}");
    assert!(text.contains("exit status 3: no EFA traffic"), "{text}");
    // The command's own failure wins over the verdict.
    let o = efabench(&["counters", "--root", &root, "--", "false"], &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
}

#[test]
fn counters_around_a_command_name_the_idle_nics() {
    let t = variants::copy("p4d.24xlarge");
    let root = s(t.path());
    // Traffic on 1 of the 4 NICs the p4d pairs with its GPUs, the command succeeds.
    let script = moves_bytes(t.path(), 4096);
    let o = efabench(
        &["counters", "--root", &root, "--", "sh", "-c", &script],
        &[],
    );
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("verdict: fewer NICs than expected carried traffic: 1 of 4 expected"),
        "{text}"
    );
    assert!(
        text.contains("idle: rdmap16s27, rdmap144s27, rdmap160s27"),
        "{text}"
    );
    let o = efabench(
        &[
            "counters", "--json", "--root", &root, "--", "sh", "-c", &script,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(4));
    let j = json(&o);
    assert_eq!(j["status"], 4);
    assert_eq!(j["verdict"]["idle_nics"].as_array().unwrap().len(), 3);
    // Asking for one NIC: enough.
    let o = efabench(
        &[
            "counters",
            "--root",
            &root,
            "--expect-nics",
            "1",
            "--",
            "sh",
            "-c",
            &script,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let o = efabench(
        &[
            "counters",
            "--root",
            &root,
            "--expect-nics",
            "none",
            "--",
            "true",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--expect-nics none"));
}

#[test]
fn counters_watch_is_bounded_by_count() {
    let p4d = variants::fixture("p4d.24xlarge");
    let o = efabench(
        &[
            "counters",
            "--json",
            "--root",
            &s(&p4d),
            "--watch",
            "0.05",
            "--count",
            "2",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["interval"], 1);
    assert_eq!(lines[0]["nics"].as_array().unwrap().len(), 4);
    assert_eq!(lines[0]["nics"][0]["rates"]["tx_gbps"], 0.0);
    assert!(lines[0]["nics"][0]["delta"].is_object());
}

/// The degraded p5en tree with the faulty GPU readings: both links named with their speed and
/// width, the NVML faults failed, exit 1; `topo` shows the links.
#[test]
fn doctor_flags_degraded_links_and_gpu_faults_from_a_fixture() {
    let root = variants::fixture("p5en.48xlarge-pcie-degraded");
    let nvml = s(&variants::fixture("nvml").join("faulty-p5en.json"));
    let (code, j) = doctor(&root, &["--nvml-fixture", &nvml], &[]);
    assert_eq!(code, 1, "{j}");
    let summary = |id: &str| {
        j["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()["summary"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(status_of(&j, "pcie-gpu-links"), "fail");
    assert_eq!(
        summary("pcie-gpu-links"),
        "GPU 3 0000:86:00.0: PCIe 16.0 GT/s x8, capable of 32.0 GT/s x16"
    );
    assert_eq!(status_of(&j, "pcie-efa-links"), "fail");
    assert!(summary("pcie-efa-links").contains("EFA rdmap165s0 0000:a5:00.0: PCIe 32.0 GT/s x8"));
    for id in ["gpu-xid", "gpu-ecc", "gpu-row-remap", "gpu-nvlink"] {
        assert_eq!(status_of(&j, id), "fail", "{id}");
    }
    let o = efabench(&["topo", "--root", &s(&root)], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines().any(|l| l.starts_with("3 ")
            && l.contains("0000:86:00.0")
            && l.contains("16.0 GT/s x8 (max 32.0 GT/s x16)")),
        "{out}"
    );
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let p4d = s(&variants::fixture("p4d.24xlarge"));
    let no_efa = variants::variant("no-efa");
    let cases: Vec<Vec<&str>> = vec![
        vec!["topo", "--root", "/nonexistent/root"],
        vec!["doctor", "--root", "/nonexistent/root"],
        vec!["doctor", "--root", &p4d, "--interval", "-1"],
        vec!["doctor", "--root", &p4d, "--interval", "1e300"],
        vec!["counters", "--root", &p4d, "--watch", "-1"],
        vec![
            "counters", "--root", &p4d, "--watch", "1e308", "--count", "1",
        ],
        vec!["counters", "--root", &p4d, "--watch", "1", "--count", "-1"],
        vec!["doctor", "--root", &p4d, "--fi-info", "/nonexistent"],
        vec!["doctor", "--root", &p4d, "--fi-info", "/etc/passwd"],
        vec!["doctor", "--root", &p4d, "--nccl-log", "/dev/zero"],
        vec!["doctor", "--root", &p4d, "--nccl-log", &p4d],
        vec!["topo", "--root", &p4d, "--fi-info", "/etc/passwd"],
        vec!["topo", "--root", &p4d, "--fi-info", "/dev/zero"],
        vec!["doctor", "--root", &p4d, "--fi-info", &p4d],
        vec!["doctor", "--root", &p4d, "--nvml-fixture", "/nonexistent"],
        vec!["doctor", "--root", &p4d, "--nvml-fixture", "/etc/passwd"],
        vec!["counters", "--root", &p4d, "--watch", "0"],
        vec!["counters", "--root", &p4d, "--count", "3"],
        vec!["counters", "--root", &p4d, "--watch", "1", "--count", "0"],
        vec!["counters", "--root", &p4d, "--", "/nonexistent/command"],
        vec![
            "counters",
            "--root",
            &p4d,
            "--prometheus",
            "/nonexistent/dir/efa.prom",
        ],
        vec!["counters", "--root", &p4d, "--prometheus", "/tmp"],
        vec!["counters", "--root", &p4d, "--prometheus", "-", "--json"],
        vec![
            "counters",
            "--root",
            &p4d,
            "--prometheus",
            "-",
            "--",
            "true",
        ],
    ];
    let nr = s(no_efa.path());
    let mut cases = cases;
    cases.push(vec!["counters", "--root", &nr]);
    for args in cases {
        let o = efabench(&args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("efabench: "), "{err}");
        assert!(err.len() < 400, "{args:?}: echoes too much: {err}");
        // A negative or huge number names its option instead of clap's
        // "unexpected argument '-1' found".
        let number = args.iter().position(|a| {
            a.starts_with('-') && a[1..].starts_with(|c: char| c.is_ascii_digit())
                || a.starts_with("1e")
        });
        if let Some(i) = number {
            assert!(err.contains(args[i - 1]), "{args:?}: {err}");
        }
        if args.contains(&"--fi-info") {
            // The file is named, and garbage is never taken for libfabric.
            let file = args[args.len() - 1];
            assert!(err.contains(&format!("--fi-info {file}")), "{err}");
            assert!(!String::from_utf8_lossy(&o.stdout).contains("libfabric found"));
        }
    }
}

/// The sample value of `name{device=dev}` in exposition text.
fn sample(samples: &[exposition_check::Sample], name: &str, dev: &str) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| n == name && l.iter().any(|(k, v)| k == "device" && v == dev))
        .map(|s| s.2)
}

#[test]
fn counters_prometheus_to_stdout_is_valid_exposition_with_the_exporter_names() {
    for (tree, nics, dev, port_only) in [
        ("p5.48xlarge", 32, "rdmap79s0", "retrans_timeout_events"),
        ("p4d.24xlarge", 4, "rdmap16s27", "rdma_write_recv_bytes"),
        (
            "p4d.24xlarge-legacy",
            4,
            "rdmap16s27",
            "rdma_read_resp_bytes",
        ),
    ] {
        let root = variants::fixture(tree);
        let o = efabench(&["counters", "--root", &s(&root), "--prometheus", "-"], &[]);
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let text = String::from_utf8(o.stdout).unwrap();
        let samples =
            exposition_check::check_exposition(&text).unwrap_or_else(|e| panic!("{tree}: {e}"));
        // Values are the sysfs files' own.
        let hw = root.join(format!("sys/class/infiniband/{dev}/ports/1/hw_counters"));
        for c in ["tx_bytes", "rx_bytes", "rx_drops", port_only] {
            let want: f64 = std::fs::read_to_string(hw.join(c))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert_eq!(
                sample(&samples, &format!("node_amazonefa_{c}"), dev),
                Some(want),
                "{tree} {c}"
            );
        }
        assert!(
            text.contains("# TYPE node_amazonefa_tx_bytes counter\n"),
            "{tree}"
        );
        assert!(
            text.contains(&format!(
                "node_amazonefa_tx_bytes{{device=\"{dev}\",port=\"1\"}} "
            )),
            "{tree}"
        );
        let infos = samples
            .iter()
            .filter(|s| s.0 == "node_amazonefa_info")
            .count();
        assert_eq!(infos, nics, "{tree}");
        // Every sample but info carries device and port labels.
        for (n, l, _) in &samples {
            if n != "node_amazonefa_info" {
                let keys: Vec<&str> = l.iter().map(|(k, _)| k.as_str()).collect();
                assert_eq!(keys, ["device", "port"], "{n}");
            }
            assert!(!n.ends_with("lifespan"));
        }
    }
}

#[test]
fn counters_prometheus_file_is_replaced_and_rewritten_with_watch() {
    let t = variants::copy("p4d.24xlarge");
    let root = s(&t.dir);
    let dir = t.dir.join("textfile");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("efa.prom");
    let o = efabench(&["counters", "--root", &root, "--prometheus", &s(&f)], &[]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(o.stdout.is_empty());
    let first = std::fs::read_to_string(&f).unwrap();
    exposition_check::check_exposition(&first).unwrap();
    // A counter moves; --watch rewrites the file, leaving no temporary next to it.
    let c = t
        .dir
        .join("sys/class/infiniband/rdmap16s27/ports/1/hw_counters/rx_drops");
    std::fs::write(&c, "17\n").unwrap();
    let o = efabench(
        &[
            "counters",
            "--root",
            &root,
            "--prometheus",
            &s(&f),
            "--watch",
            "0.05",
            "--count",
            "2",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let text = std::fs::read_to_string(&f).unwrap();
    let samples = exposition_check::check_exposition(&text).unwrap();
    assert_eq!(
        sample(&samples, "node_amazonefa_rx_drops", "rdmap16s27"),
        Some(17.0)
    );
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["efa.prom"]);
}
