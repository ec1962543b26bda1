//! The individual checks. Each is a function of the gathered facts and returns one or more
//! [`Check`]s; the order here is the order of the report.
//! Some live in their own files: [`crate::rising`] (the counters compared `--interval` apart),
//! [`crate::pcie`] (PCIe links and AER), [`crate::gpu_health`] (the driver's GPU readings) and
//! [`crate::host`] (huge pages, memlock, ptrace scope).

use crate::env::{lint, EnvContext};
use crate::minimums::{for_instance, Minimums};
use crate::{Check, Inputs, LibfabricInput, Status};
use efabench_topology::installed::{version_lt, CudaSource, EfaDriver, Found, Installed};
use efabench_topology::topo::{instance_profile, InstanceProfile};
use efabench_topology::Topology;

pub(crate) struct Facts<'a> {
    pub(crate) inputs: &'a Inputs,
    pub(crate) topo: Topology,
    installed: Installed,
    profile: Option<InstanceProfile>,
    min: Minimums,
    libfabric_version: Option<String>,
}

impl Facts<'_> {
    fn instance(&self) -> &str {
        self.topo
            .instance_type
            .as_deref()
            .unwrap_or("unknown instance type")
    }
    /// `; reconstructed: ...` after an expected figure, when the profile's figures were not
    /// read in a source or seen on a real node (the others name their source in `topo`).
    fn evidence(&self) -> String {
        match self.profile {
            Some(p) if p.evidence == efabench_topology::profiles::Evidence::Reconstructed => {
                format!("; {}", p.provenance())
            }
            _ => String::new(),
        }
    }

    fn has_efa_hw(&self) -> bool {
        !self.topo.nics.is_empty() || !self.topo.efa_pci_without_rdma_device.is_empty()
    }
    fn has_gpus(&self) -> bool {
        !self.topo.gpus.is_empty() || self.profile.map(|p| p.gpus > 0).unwrap_or(false)
    }
}

pub(crate) fn all(inputs: &Inputs) -> Vec<Check> {
    let topo = Topology::discover(&inputs.root);
    let installed = Installed::scan(&inputs.root, &inputs.env);
    let profile = topo.instance_type.as_deref().and_then(instance_profile);
    let min = for_instance(topo.instance_type.as_deref());
    let libfabric_version = match &inputs.libfabric {
        LibfabricInput::Found { version, .. } => version.clone(),
        _ => None,
    }
    .or_else(|| Installed::best(&installed.libfabric).and_then(|f| f.version.clone()));
    let links = efabench_topology::pcie::links(&inputs.root, &topo);
    let rising = crate::rising::read(inputs, &topo, &links);
    let f = Facts {
        inputs,
        topo,
        installed,
        profile,
        min,
        libfabric_version,
    };
    let mut out = vec![
        efa_devices(&f),
        efa_driver(&f),
        efa_uverbs(&f),
        efa_ports(&f),
        rising.efa,
        efa_installer(&f),
        libfabric(&f),
        libfabric_provider(&f),
        aws_ofi_nccl(&f),
        nccl(&f),
        gpus(&f),
        nvidia_driver(&f),
        cuda(&f),
        gpudirect(&f),
        crate::pcie::gpu_links(&links, f.topo.gpus.len()),
        crate::pcie::efa_links(&links, f.topo.nics.len()),
        crate::pcie::port_links(&links),
        rising.aer,
    ];
    out.extend(rising.gpu);
    out.extend([
        crate::host::hugepages(&f),
        crate::host::memlock(&f),
        crate::host::ptrace(&f),
    ]);
    let cx = EnvContext {
        instance_type: f.topo.instance_type.clone(),
        libfabric: f.libfabric_version.clone(),
        aws_ofi_nccl: best(&f.installed.aws_ofi_nccl),
        efa_installer: f
            .installed
            .efa_installer
            .as_ref()
            .and_then(|i| i.version.clone()),
        nccl: best(&f.installed.nccl),
        in_tree_driver: matches!(f.installed.efa_driver, EfaDriver::InTree { .. }),
    };
    out.extend(lint(&inputs.env, &cx));
    out.push(
        Check::new("security-group", Status::Skip,
            "the security group's self-referencing all-traffic rule cannot be seen from one node")
            .fix("run a two-node test: `efabench sendrecv --rank 0 --world 2 --rdzv HOST:PORT` on one node and `--rank 1` on the other; a hang or 'Unreachable remote' means the rule (inbound and outbound, all traffic, source = the group itself) is missing or the nodes are in different subnets"),
    );
    out.push(
        Check::new("placement-group", Status::Skip,
            "cluster placement group membership cannot be seen from sysfs")
            .fix("query IMDS: `curl -s -H \"X-aws-ec2-metadata-token: $(curl -s -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60')\" http://169.254.169.254/latest/meta-data/placement/group-name` (404 = none), and compare two-node `efabench sendrecv` bandwidth and retrans_* counters"),
    );
    if let Some((name, text)) = &inputs.nccl_log {
        out.push(crate::nccl_log::check(name, text));
    }
    if inputs.gin {
        out.extend(crate::gin::checks(&crate::gin::GinFacts {
            instance_type: f.topo.instance_type.as_deref(),
            installed: &f.installed,
            stack: efabench_topology::gin::GinStack::scan(&inputs.root),
            libfabric_version: f.libfabric_version.as_deref(),
        }));
    }
    out
}

fn best(found: &[Found]) -> Option<String> {
    Installed::best(found).and_then(|f| f.version.clone())
}

fn efa_devices(f: &Facts) -> Check {
    let id = "efa-devices";
    let n = f.topo.nics.len();
    let unbound = &f.topo.efa_pci_without_rdma_device;
    let expected = f.profile.map(|p| p.efa_devices).filter(|e| *e > 0);
    if n == 0 && unbound.is_empty() {
        let what = match (f.topo.instance_type.as_deref(), expected) {
            (Some(t), Some(e)) => format!(" ({t} should have {e})"),
            (Some(t), None) => format!(" (instance type {t})"),
            _ => String::new(),
        };
        return Check::new(id, Status::Fail, format!(
            "no EFA device: no RDMA device with PCI vendor 0x1d0f under /sys/class/infiniband{what}"))
            .fix("launch the instance with EFA network interfaces (InterfaceType=efa) and install the EFA driver with the EFA installer (efa_installer.sh)")
            .subjects(["/sys/class/infiniband"]);
    }
    if n == 0 {
        return Check::new(id, Status::Fail, format!(
            "{} EFA PCI function(s) but no RDMA device: the efa kernel driver is not bound", unbound.len()))
            .fix("load the driver (`sudo modprobe efa`) or install it with the EFA installer, then rerun")
            .subjects(unbound.clone());
    }
    let names: Vec<String> = f.topo.nics.iter().map(|n| n.name.clone()).collect();
    match expected {
        Some(e) if n < e => {
            let mut subjects = unbound.clone();
            if subjects.is_empty() {
                subjects.push("/sys/class/infiniband".into());
            }
            Check::new(id, Status::Fail, format!(
                "{n} EFA devices, {} should have {e}{}{}", f.instance(), f.evidence(),
                if unbound.is_empty() { String::new() } else { format!(" ({} PCI function(s) without an RDMA device)", unbound.len()) }))
                .fix("check that the instance was launched with all EFA interfaces (one per network card), reload the driver, or stop/start the instance; p5en can enumerate late — rerun after a minute")
                .subjects(subjects)
        }
        Some(e) => Check::new(
            id,
            Status::Pass,
            format!(
                "{n} EFA devices ({} expects {e}{})",
                f.instance(),
                f.evidence()
            ),
        )
        .subjects(names),
        None => Check::new(
            id,
            Status::Pass,
            format!(
                "{n} EFA device(s) ({}: expected count unknown)",
                f.instance()
            ),
        )
        .subjects(names),
    }
}

fn efa_driver(f: &Facts) -> Check {
    let id = "efa-driver";
    let mods = &f.installed.modules;
    let missing: Vec<&str> = if mods.is_empty() {
        Vec::new()
    } else {
        ["ib_core", "ib_uverbs"]
            .into_iter()
            .filter(|m| !mods.iter().any(|x| x == m))
            .collect()
    };
    match &f.installed.efa_driver {
        EfaDriver::NotLoaded if !f.has_efa_hw() => {
            Check::new(id, Status::Skip, "no EFA hardware, so no efa kernel module to check")
        }
        EfaDriver::NotLoaded => Check::new(id, Status::Fail, "the efa kernel module is not loaded")
            .fix("`sudo modprobe efa`, or install the driver with the EFA installer")
            .subjects(["/sys/module/efa"]),
        _ if !missing.is_empty() => Check::new(id, Status::Fail, format!(
            "efa is loaded but {} missing from /proc/modules", missing.join(" and ")))
            .fix("`sudo modprobe ib_uverbs` (efa needs ib_core and ib_uverbs)")
            .subjects(["/proc/modules"]),
        EfaDriver::Amzn { version } => match f.min.efa_driver {
            Some(m) if version_lt(version, m) => Check::new(id, Status::Fail, format!(
                "EFA driver {version} is older than {m} (minimum for {})", f.min.family))
                .fix("update with the current EFA installer (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html)")
                .subjects(["/sys/module/efa/version"]),
            _ => Check::new(id, Status::Pass, format!("EFA driver {version} (amzn out-of-tree)"))
                .subjects(["/sys/module/efa/version"]),
        },
        EfaDriver::InTree { kernel } => Check::new(id, Status::Pass, format!(
            "in-tree EFA driver (kernel {}): GPUDirect only through dmabuf",
            kernel.as_deref().unwrap_or("?")))
            .subjects(["/sys/module/efa"]),
    }
}

fn efa_uverbs(f: &Facts) -> Check {
    let id = "efa-uverbs";
    let n = f.topo.nics.len();
    if n == 0 {
        return Check::new(id, Status::Skip, "no EFA device");
    }
    let root = &f.inputs.root;
    if !root.is_dir("/dev/infiniband") {
        return Check::new(id, Status::Fail, format!(
            "{n} EFA device(s) in sysfs but no /dev/infiniband: user space (libfabric) cannot open them"))
            .fix("in a container, pass the devices through (docker --device=/dev/infiniband/uverbs0 ..., or the EFA Kubernetes device plugin with vpc.amazonaws.com/efa resources); on the host, `sudo modprobe ib_uverbs`")
            .subjects(["/dev/infiniband"]);
    }
    let uverbs = root
        .list("/dev/infiniband")
        .into_iter()
        .filter(|d| d.starts_with("uverbs"))
        .count();
    if uverbs < n {
        return Check::new(id, Status::Warn, format!(
            "{uverbs} /dev/infiniband/uverbs* for {n} EFA devices: some devices are not usable from here"))
            .fix("pass all uverbs devices into the container (or request all EFA interfaces from the device plugin)")
            .subjects(["/dev/infiniband"]);
    }
    Check::new(
        id,
        Status::Pass,
        format!("{uverbs} /dev/infiniband/uverbs* device(s)"),
    )
}

fn efa_ports(f: &Facts) -> Check {
    let id = "efa-ports";
    if f.topo.nics.is_empty() {
        return Check::new(id, Status::Skip, "no EFA device");
    }
    let mut bad = Vec::new();
    let mut slow = Vec::new();
    let mut nports = 0;
    for n in &f.topo.nics {
        if n.ports.is_empty() {
            bad.push(format!("{} (no ports)", n.name));
        }
        for p in &n.ports {
            nports += 1;
            let active = p.state.as_deref() == Some("ACTIVE");
            let up = p
                .phys_state
                .as_deref()
                .map(|s| s == "LinkUp")
                .unwrap_or(true);
            if !active || !up {
                bad.push(format!(
                    "{}/{} {}/{}",
                    n.name,
                    p.port,
                    p.state.as_deref().unwrap_or("?"),
                    p.phys_state.as_deref().unwrap_or("?")
                ));
            }
            if let (Some(g), Some(prof)) = (p.gbps, f.profile) {
                if g < prof.gbps_per_efa {
                    slow.push(format!("{} {g} Gb/s", n.name));
                }
            }
        }
    }
    if !bad.is_empty() {
        return Check::new(id, Status::Fail, format!("{} of {nports} EFA ports not ACTIVE/LinkUp: {}", bad.len(), bad.join(", ")))
            .fix("check the interface in the EC2 console, reload the driver (`sudo rmmod efa && sudo modprobe efa`) or stop/start the instance")
            .subjects(bad.iter().map(|b| b.split('/').next().unwrap_or(b).to_string()).collect::<Vec<_>>());
    }
    if !slow.is_empty() {
        return Check::new(
            id,
            Status::Warn,
            format!(
            "{} port(s) report less than {} Gb/s: {} (drivers before r2.13 always report 100 Gb/s)",
            slow.len(), f.profile.map(|p| p.gbps_per_efa).unwrap_or(0.0), slow.join(", ")),
        )
        .fix("update the EFA driver; if it is current, the port really runs slower")
        .subjects(
            slow.iter()
                .map(|s| s.split(' ').next().unwrap_or(s).to_string())
                .collect::<Vec<_>>(),
        );
    }
    Check::new(
        id,
        Status::Pass,
        format!(
            "all {nports} EFA ports ACTIVE, {} Gb/s in total",
            f.topo.aggregate_link_gbps
        ),
    )
}

fn below(v: &str, m: Option<&str>) -> Option<String> {
    m.filter(|m| version_lt(v, m)).map(str::to_string)
}

fn efa_installer(f: &Facts) -> Check {
    let id = "efa-installer";
    match &f.installed.efa_installer {
        None if f.has_efa_hw() => Check::new(id, Status::Warn,
            "no /opt/amazon/efa_installed_packages: the EFA software was not installed by the EFA installer")
            .fix("install the EFA installer (curl -O https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz) unless your image ships libfabric/rdma-core otherwise")
            .subjects(["/opt/amazon/efa_installed_packages"]),
        None => Check::new(id, Status::Skip, "no EFA hardware and no EFA installer"),
        Some(Found { path, version: None }) => Check::new(id, Status::Warn, format!("{path} has no '# EFA installer version:' line"))
            .fix("reinstall with the EFA installer").subjects([path.clone()]),
        Some(Found { path, version: Some(v) }) => match below(v, f.min.efa_installer) {
            Some(m) => Check::new(id, Status::Fail, format!("EFA installer {v} is older than {m} (minimum for {})", f.min.family))
                .fix("install the current EFA installer").subjects([path.clone()]),
            None => Check::new(id, Status::Pass, format!("EFA installer {v}")).subjects([path.clone()]),
        },
    }
}

fn libfabric(f: &Facts) -> Check {
    let id = "libfabric";
    match &f.inputs.libfabric {
        LibfabricInput::Found { source, version, .. } => {
            let v = version.clone().or_else(|| f.libfabric_version.clone());
            match v {
                None => Check::new(id, Status::Warn, format!("libfabric found ({source}) but its version is unknown"))
                    .fix("run `fi_info --version`").subjects([source.clone()]),
                Some(v) => match below(&v, f.min.libfabric) {
                    Some(m) => Check::new(id, if f.has_efa_hw() { Status::Fail } else { Status::Warn }, format!(
                        "libfabric {v} is older than {m} (minimum for {}{})", f.min.family,
                        if f.has_efa_hw() { "" } else { "; matters only on EFA instances" }))
                        .fix("install the current EFA installer (it ships libfabric in /opt/amazon/efa)")
                        .subjects([source.clone()]),
                    None => Check::new(id, Status::Pass, format!("libfabric {v} ({source})")).subjects([source.clone()]),
                },
            }
        }
        LibfabricInput::NotFound { looked } => {
            let st = if f.has_efa_hw() { Status::Fail } else { Status::Warn };
            Check::new(id, st, format!("libfabric not found ({looked})"))
                .fix("install the EFA installer (libfabric goes to /opt/amazon/efa), or point EFABENCH_LIBFABRIC at libfabric.so.1")
        }
        LibfabricInput::NotChecked { why } => Check::new(id, Status::Skip, format!("libfabric not queried: {why}"))
            .fix("pass --fi-info FILE with the output of `fi_info --version; fi_info -p efa` captured on the node"),
    }
}

fn libfabric_provider(f: &Facts) -> Check {
    let id = "libfabric-efa-provider";
    let LibfabricInput::Found {
        source,
        domains: Some(domains),
        ..
    } = &f.inputs.libfabric
    else {
        return Check::new(id, Status::Skip, "libfabric providers not queried")
            .fix("run `fi_info -p efa` on the node (or pass its output with --fi-info FILE)");
    };
    if domains.is_empty() {
        let st = if f.has_efa_hw() {
            Status::Fail
        } else {
            Status::Warn
        };
        return Check::new(id, st, "libfabric has no efa provider entry (fi_info -p efa: -61 No data available)")
            .fix("use the libfabric from the EFA installer (/opt/amazon/efa/lib*), check that the efa driver is loaded and /dev/infiniband/uverbs* exist")
            .subjects([source.clone()]);
    }
    let rdm: Vec<&str> = domains
        .iter()
        .filter(|d| d.domain.ends_with("-rdm"))
        .map(|d| d.domain.as_str())
        .collect();
    let missing: Vec<String> = f
        .topo
        .nics
        .iter()
        .filter(|n| !rdm.contains(&format!("{}-rdm", n.name).as_str()))
        .map(|n| n.name.clone())
        .collect();
    let direct = domains.iter().filter(|d| d.fabric == "efa-direct").count();
    let fabrics = {
        let mut v: Vec<&str> = domains.iter().map(|d| d.fabric.as_str()).collect();
        v.sort();
        v.dedup();
        if v.len() > 3 {
            format!("{} distinct fabric names", v.len())
        } else {
            v.join(", ")
        }
    };
    if !missing.is_empty() {
        return Check::new(id, Status::Fail, format!(
            "libfabric efa provider lacks an RDM domain for {} of {} EFA devices", missing.len(), f.topo.nics.len()))
            .fix("check the missing devices' ports and /dev/infiniband/uverbs*, then rerun fi_info -p efa")
            .subjects(missing);
    }
    let v = f.libfabric_version.as_deref().unwrap_or("");
    if direct == 0 && !v.is_empty() && !version_lt(v, "2.1") {
        return Check::new(id, Status::Warn, format!(
            "efa provider present ({} RDM domains; fabric {fabrics}) but no efa-direct fabric, which libfabric {v} should list", rdm.len()))
            .fix("check FI_EFA_* settings that disable efa-direct; efabench falls back to the efa fabric")
            .subjects([source.clone()]);
    }
    Check::new(
        id,
        Status::Pass,
        format!(
            "efa provider: {} RDM domains, fabric {fabrics}{}",
            rdm.len(),
            if direct > 0 {
                format!(" ({direct} efa-direct)")
            } else {
                String::new()
            }
        ),
    )
    .subjects([source.clone()])
}

fn aws_ofi_nccl(f: &Facts) -> Check {
    let id = "aws-ofi-nccl";
    let found = &f.installed.aws_ofi_nccl;
    if found.is_empty() {
        if !f.has_gpus() {
            return Check::new(id, Status::Skip, "no GPUs: the NCCL plugin is not needed");
        }
        return Check::new(id, Status::Warn,
            "aws-ofi-nccl (libnccl-net*.so) not found in /opt/amazon/ofi-nccl, /opt/aws-ofi-nccl or LD_LIBRARY_PATH: NCCL on this host would use TCP sockets")
            .fix("install it with the EFA installer (>= 1.42 ships it) or build aws-ofi-nccl; containers must carry their own")
            .subjects(["/opt/amazon/ofi-nccl/lib"]);
    }
    let paths: Vec<String> = found.iter().map(|x| x.path.clone()).collect();
    let mut versions: Vec<&str> = found.iter().filter_map(|x| x.version.as_deref()).collect();
    versions.sort();
    versions.dedup();
    let Some(v) = best(found) else {
        return Check::new(
            id,
            Status::Warn,
            "aws-ofi-nccl found but no 'Initializing aws-ofi-nccl' version string in it",
        )
        .fix("reinstall aws-ofi-nccl")
        .subjects(paths);
    };
    if let Some(m) = below(&v, f.min.aws_ofi_nccl) {
        return Check::new(
            id,
            Status::Fail,
            format!(
                "aws-ofi-nccl {v} is older than {m} (minimum for {})",
                f.min.family
            ),
        )
        .fix("install a current aws-ofi-nccl (EFA installer >= 1.42 ships it as libnccl-ofi)")
        .subjects(paths);
    }
    if let Some(lf) = f.libfabric_version.as_deref() {
        let need = if !version_lt(&v, "1.13.0") {
            Some("1.22")
        } else if !version_lt(&v, "1.8.0") {
            Some("1.18")
        } else {
            None
        };
        if let Some(need) = need.filter(|n| version_lt(lf, n)) {
            return Check::new(id, Status::Fail, format!(
                "aws-ofi-nccl {v} needs libfabric >= {need}, found {lf}: the plugin refuses to start"))
                .fix("upgrade libfabric (EFA installer) or use a plugin that matches it").subjects(paths);
        }
    }
    if versions.len() > 1 {
        return Check::new(id, Status::Warn, format!(
            "several aws-ofi-nccl versions installed ({}): which one NCCL loads depends on LD_LIBRARY_PATH", versions.join(", ")))
            .fix("keep one plugin on the library path; check `NET/OFI Initializing aws-ofi-nccl` in an NCCL_DEBUG=INFO log")
            .subjects(paths);
    }
    Check::new(id, Status::Pass, format!("aws-ofi-nccl {v}")).subjects(paths)
}

fn nccl(f: &Facts) -> Check {
    let id = "nccl";
    let found = &f.installed.nccl;
    if found.is_empty() {
        if !f.has_gpus() {
            return Check::new(id, Status::Skip, "no GPUs: NCCL not needed");
        }
        return Check::new(id, Status::Warn, "libnccl.so not found in the system library directories or LD_LIBRARY_PATH")
            .fix("fine if your framework or container brings NCCL (pip nvidia-nccl-cu12); otherwise install NCCL")
            .subjects(["/usr/lib/x86_64-linux-gnu"]);
    }
    let paths: Vec<String> = found.iter().map(|x| x.path.clone()).collect();
    let Some(v) = best(found) else {
        return Check::new(id, Status::Warn, "libnccl found but its version is unknown")
            .subjects(paths);
    };
    match below(&v, f.min.nccl) {
        Some(m) => Check::new(
            id,
            Status::Fail,
            format!(
                "NCCL {v} is older than {m} (minimum for {}: NVLS bug with EFA)",
                f.min.family
            ),
        )
        .fix("upgrade NCCL")
        .subjects(paths),
        None => Check::new(id, Status::Pass, format!("NCCL {v}")).subjects(paths),
    }
}

fn gpus(f: &Facts) -> Check {
    let id = "gpus";
    let n = f.topo.gpus.len();
    let ids: Vec<String> = f.topo.gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
    match f.profile.map(|p| p.gpus) {
        Some(e) if e > 0 && n < e => Check::new(
            id,
            Status::Fail,
            format!(
                "{n} NVIDIA GPUs on the PCI bus, {} should have {e}{}",
                f.instance(),
                f.evidence()
            ),
        )
        .fix("a GPU fell off the bus: check `dmesg` for Xid 79, then stop/start the instance")
        .subjects(ids),
        _ if n == 0 => Check::new(
            id,
            Status::Skip,
            "no NVIDIA GPU (PCI vendor 0x10de, display class) on the PCI bus",
        ),
        Some(e) if e > 0 => Check::new(
            id,
            Status::Pass,
            format!(
                "{n} NVIDIA GPUs ({} expects {e}{})",
                f.instance(),
                f.evidence()
            ),
        )
        .subjects(ids),
        _ => Check::new(id, Status::Pass, format!("{n} NVIDIA GPU(s)")).subjects(ids),
    }
}

fn nvidia_driver(f: &Facts) -> Check {
    let id = "nvidia-driver";
    let Some(d) = &f.installed.nvidia_driver else {
        if f.topo.gpus.is_empty() {
            return Check::new(id, Status::Skip, "no GPU and no NVIDIA driver");
        }
        return Check::new(id, Status::Fail, "NVIDIA GPUs present but the NVIDIA driver is not loaded (no /proc/driver/nvidia/version)")
            .fix("install/load the NVIDIA driver (open kernel module recommended for EFA dmabuf)")
            .subjects(["/proc/driver/nvidia/version"]);
    };
    let kind = if d.open {
        "open kernel module"
    } else {
        "proprietary kernel module"
    };
    match below(&d.version, f.min.nvidia_driver) {
        Some(m) => Check::new(
            id,
            Status::Fail,
            format!(
                "NVIDIA driver {} ({kind}) is older than {m} (minimum for {})",
                d.version, f.min.family
            ),
        )
        .fix("upgrade the NVIDIA driver")
        .subjects(["/proc/driver/nvidia/version"]),
        None => Check::new(
            id,
            Status::Pass,
            format!("NVIDIA driver {} ({kind})", d.version),
        )
        .subjects(["/proc/driver/nvidia/version"]),
    }
}

fn cuda(f: &Facts) -> Check {
    let id = "cuda";
    let Some(c) = &f.installed.cuda else {
        return Check::new(
            id,
            Status::Skip,
            "no CUDA toolkit in /usr/local/cuda (containers and pip wheels bring their own)",
        );
    };
    let Some(v) = &c.version else {
        let why = match c.source {
            CudaSource::Nvcc if f.inputs.root.is_system() => {
                "only bin/nvcc could tell it, and `nvcc --version` failed or printed no release"
            }
            CudaSource::Nvcc => "only bin/nvcc could tell it, and nvcc is run only with --root /",
            _ => "none in version.json, version.txt, include/cuda.h or the libcudart.so name",
        };
        return Check::new(
            id,
            Status::Warn,
            format!("CUDA toolkit in {} has no readable version ({why})", c.dir),
        )
        .subjects([c.path.clone()]);
    };
    match below(v, f.min.cuda) {
        Some(m) => Check::new(
            id,
            Status::Fail,
            format!(
                "CUDA {v} (from {}) is older than {m} (minimum for {})",
                c.from(),
                f.min.family
            ),
        )
        .fix("install a newer CUDA toolkit")
        .subjects([c.path.clone()]),
        None => Check::new(
            id,
            Status::Pass,
            format!("CUDA toolkit {v} in {} (from {})", c.dir, c.from()),
        )
        .subjects([c.path.clone()]),
    }
}

fn gpudirect(f: &Facts) -> Check {
    let id = "gpudirect-rdma";
    if f.topo.gpus.is_empty() || f.topo.nics.is_empty() {
        return Check::new(id, Status::Skip, "needs both GPUs and EFA devices");
    }
    let nv = f.installed.nvidia_driver.as_ref();
    let kernel_ok = f
        .installed
        .kernel
        .as_deref()
        .map(|k| !version_lt(k, "5.12"))
        .unwrap_or(false);
    let dmabuf_ok = nv.map(|d| d.open).unwrap_or(false)
        && kernel_ok
        && f.inputs
            .env
            .get("FI_HMEM_CUDA_USE_DMABUF")
            .map(|v| v != "0")
            .unwrap_or(true);
    let mut good = Vec::new();
    let mut bad = Vec::new();
    let mut routes = Vec::new();
    for n in &f.topo.nics {
        let (ok, route) = match (&n.p2p, &n.gdr) {
            (Some(p), _) if !p.is_empty() => (true, format!("p2p: {p}")),
            (Some(_), _) => (dmabuf_ok, "p2p empty".to_string()),
            (None, Some(g)) => (g == "1" || dmabuf_ok, format!("gdr={g}")),
            (None, None) => (dmabuf_ok, "dmabuf".to_string()),
        };
        if !routes.contains(&route) {
            routes.push(route);
        }
        if ok {
            good.push(n.name.clone())
        } else {
            bad.push(n.name.clone())
        }
    }
    if bad.is_empty() {
        let via = if dmabuf_ok {
            " (dmabuf route also available)"
        } else {
            ""
        };
        return Check::new(
            id,
            Status::Pass,
            format!(
                "GPUDirect RDMA path on all {} EFA devices: {}{via}",
                good.len(),
                routes.join(", ")
            ),
        );
    }
    let why = if !kernel_ok {
        "kernel older than 5.12 or unknown"
    } else if nv.map(|d| !d.open).unwrap_or(true) {
        "no NVIDIA open kernel module"
    } else {
        "FI_HMEM_CUDA_USE_DMABUF=0"
    };
    Check::new(id, Status::Fail, format!(
        "no GPUDirect RDMA path on {} of {} EFA devices ({}; dmabuf route unavailable: {why})",
        bad.len(), f.topo.nics.len(), routes.join(", ")))
        .fix("install the EFA driver after the NVIDIA driver (EFA installer), or load efa_nv_peermem (`sudo modprobe efa_nv_peermem`), or use the NVIDIA open kernel module (dmabuf, kernel >= 5.12)")
        .subjects(bad)
}
