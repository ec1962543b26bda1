//! Checks of the host's own settings that the EFA data path depends on: huge pages (libfabric's
//! bounce buffers), `RLIMIT_MEMLOCK` (memory registration) and the ptrace scope (the shared-memory
//! path between processes of one node).

use crate::checks::Facts;
use crate::{Check, Memlock, Status};

fn meminfo_value(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l[key.len()..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn cpu_count(list: &str) -> usize {
    list.split(',')
        .filter_map(|r| {
            let r = r.trim();
            match r.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                    (b >= a).then(|| b - a + 1)
                }
                None => r.parse::<usize>().ok().map(|_| 1),
            }
        })
        .sum()
}

pub(crate) fn hugepages(f: &Facts) -> Check {
    let id = "hugepages";
    let Ok(text) = f.inputs.root.read("/proc/meminfo") else {
        return Check::new(id, Status::Skip, "/proc/meminfo not readable");
    };
    let total = meminfo_value(&text, "HugePages_Total:").unwrap_or(0);
    let size_kb = meminfo_value(&text, "Hugepagesize:").unwrap_or(2048).max(1);
    let cpus: usize = f.topo.numa.iter().map(|n| cpu_count(&n.cpulist)).sum();
    let fix = "reserve them (`sudo /opt/amazon/bin/efa-hugepages-reserve.sh`, or `echo N | sudo tee /proc/sys/vm/nr_hugepages`); libfabric falls back to normal pages, so this only costs performance";
    if total == 0 {
        return Check::new(
            id,
            Status::Warn,
            "no huge pages reserved (HugePages_Total: 0): libfabric's EFA buffers use normal pages",
        )
        .fix(fix)
        .subjects(["/proc/meminfo"]);
    }
    // AWS efa-check.sh heuristic: 110 MiB per CPU, skipped for pages > 16 MiB.
    if cpus > 0 && size_kb <= 16 * 1024 {
        let want = (110 * 1024 * cpus as u64) / size_kb + 1;
        if total < want {
            return Check::new(
                id,
                Status::Warn,
                format!(
                "{total} huge pages of {size_kb} kB; AWS's check suggests {want} for {cpus} CPUs"),
            )
            .fix(fix)
            .subjects(["/proc/meminfo"]);
        }
    }
    Check::new(
        id,
        Status::Pass,
        format!("{total} huge pages of {size_kb} kB reserved"),
    )
    .subjects(["/proc/meminfo"])
}

pub(crate) fn memlock(f: &Facts) -> Check {
    let id = "memlock";
    let fix = "raise it: `ulimit -l unlimited` in the job, `memlock unlimited` in /etc/security/limits.d/01_efa.conf (the EFA installer writes it), LimitMEMLOCK=infinity for systemd units, --ulimit memlock=-1 for containers";
    match f.inputs.memlock {
        None => Check::new(id, Status::Skip, "RLIMIT_MEMLOCK not known for this root"),
        Some(Memlock::Unlimited) => Check::new(id, Status::Pass, "RLIMIT_MEMLOCK unlimited"),
        Some(Memlock::Bytes(b)) if b < 64 << 20 => Check::new(
            id,
            Status::Fail,
            format!(
                "RLIMIT_MEMLOCK is {} KiB: memory registration of real buffers fails (reg_mr_err)",
                b / 1024
            ),
        )
        .fix(fix),
        Some(Memlock::Bytes(b)) if b < 16 << 30 => Check::new(
            id,
            Status::Warn,
            format!(
                "RLIMIT_MEMLOCK is {} MiB, below the 16 GiB AWS's EFA check asks for",
                b >> 20
            ),
        )
        .fix(fix),
        Some(Memlock::Bytes(b)) => {
            Check::new(id, Status::Pass, format!("RLIMIT_MEMLOCK {} GiB", b >> 30))
        }
    }
}

pub(crate) fn ptrace(f: &Facts) -> Check {
    let id = "ptrace-scope";
    match f.inputs.root.read_trim("/proc/sys/kernel/yama/ptrace_scope") {
        None => Check::new(id, Status::Skip, "no Yama ptrace_scope on this kernel"),
        Some(v) if v == "0" => Check::new(id, Status::Pass, "ptrace_scope 0: libfabric can use its shared-memory (SHM) path within the node"),
        Some(v) => Check::new(id, Status::Warn, format!(
            "ptrace_scope {v}: libfabric disables its SHM provider, so intra-node MPI/libfabric traffic is slower"))
            .fix("`sudo sysctl -w kernel.yama.ptrace_scope=0` (or accept slower intra-node libfabric traffic)")
            .subjects(["/proc/sys/kernel/yama/ptrace_scope"]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn cpulists() {
        assert_eq!(cpu_count("0-47,96-143"), 96);
        assert_eq!(cpu_count("0,2,4"), 3);
        assert_eq!(cpu_count("garbage,5-1"), 0);
        assert_eq!(
            meminfo_value("HugePages_Total:    5128\n", "HugePages_Total:"),
            Some(5128)
        );
    }
}
