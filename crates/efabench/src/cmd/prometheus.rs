//! EFA counters in the Prometheus text exposition format (version 0.0.4), under the names the
//! EFA collector of node_exporter in awsome-distributed-training uses, so its dashboards and
//! alerts work on what `efabench counters --prometheus FILE` writes for node_exporter's textfile
//! collector.
//!
//! That collector reports each counter of `ports/<n>/hw_counters` as
//! `node_amazonefa_<counter>{device="<ibdev>",port="<n>"}`, of type counter, plus
//! `node_amazonefa_info{device="<ibdev>"} 1`. Drivers since the split layout keep the
//! device-wide counters (`cmds_err`, `reg_mr_err`, ...) in the device's own `hw_counters`, where
//! that collector does not look; they are written here under the same scheme (their names were
//! port counters on older drivers), with the port label of the device's port. A name present in
//! both scopes (pre-split drivers) is written once, from the port. `lifespan` (the driver's cache
//! time) is not a counter and is not written.

use efabench_topology::counters::Snapshot;
use std::collections::BTreeMap;

const PREFIX: &str = "node_amazonefa_";

/// One line of help per known counter; others get a generic line naming the sysfs file.
fn help(counter: &str) -> String {
    let known = match counter {
        "tx_bytes" => "Bytes transmitted",
        "tx_pkts" => "Packets transmitted",
        "rx_bytes" => "Bytes received",
        "rx_pkts" => "Packets received",
        "rx_drops" => "Received packets dropped",
        "send_bytes" => "Bytes sent by send operations",
        "send_wrs" => "Send work requests",
        "recv_bytes" => "Bytes received by receive operations",
        "recv_wrs" => "Receive work requests",
        "rdma_read_bytes" => "Bytes read by RDMA read",
        "rdma_read_wrs" => "RDMA read work requests",
        "rdma_read_wr_err" => "RDMA read work requests that failed",
        "rdma_read_resp_bytes" => "Bytes sent in responses to remote RDMA reads",
        "rdma_write_bytes" => "Bytes written by RDMA write",
        "rdma_write_wrs" => "RDMA write work requests",
        "rdma_write_wr_err" => "RDMA write work requests that failed",
        "rdma_write_recv_bytes" => "Bytes received from remote RDMA writes",
        "retrans_bytes" => "Bytes retransmitted",
        "retrans_pkts" => "Packets retransmitted",
        "retrans_timeout_events" => "Retransmission timeouts",
        "unresponsive_remote_events" => "Remote peers that stopped responding",
        "impaired_remote_conn_events" => "Connections to remote peers that became impaired",
        "submitted_cmds" => "Admin commands submitted to the device",
        "completed_cmds" => "Admin commands completed by the device",
        "cmds_err" => "Admin commands that failed",
        "no_completion_cmds" => "Admin commands without a completion",
        "keep_alive_rcvd" => "Keep-alive events received from the device",
        "alloc_pd_err" => "Protection domain allocations that failed",
        "alloc_ucontext_err" => "User context allocations that failed",
        "create_qp_err" => "Queue pair creations that failed",
        "create_cq_err" => "Completion queue creations that failed",
        "create_ah_err" => "Address handle creations that failed",
        "reg_mr_err" => "Memory registrations that failed",
        "mmap_err" => "Memory mappings that failed",
        _ => "",
    };
    if known.is_empty() {
        format!("EFA hw_counters/{counter}, cumulative since the driver loaded")
    } else {
        format!("{known} (EFA hw_counters/{counter}, cumulative since the driver loaded)")
    }
}

/// A counter file name usable as the tail of a metric name (`[a-zA-Z0-9_]`, not empty).
fn valid_tail(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Label values escape `\`, `"` and newlines.
pub(crate) fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text for one snapshot: one family per counter (HELP, TYPE, then one sample
/// per device), then `node_amazonefa_info`.
pub fn render(s: &Snapshot) -> String {
    // counter -> [(device, port, value)]
    let mut families: BTreeMap<&str, Vec<(&str, String, u64)>> = BTreeMap::new();
    for n in &s.nics {
        let port = n.port_num.unwrap_or(1).to_string();
        for (k, v) in &n.port {
            families
                .entry(k.as_str())
                .or_default()
                .push((n.name.as_str(), port.clone(), *v));
        }
        for (k, v) in &n.device {
            if !n.port.contains_key(k) {
                families
                    .entry(k.as_str())
                    .or_default()
                    .push((n.name.as_str(), port.clone(), *v));
            }
        }
    }
    let mut out = String::new();
    for (counter, samples) in families {
        if counter == "lifespan" || !valid_tail(counter) {
            continue;
        }
        let name = format!("{PREFIX}{counter}");
        out.push_str(&format!("# HELP {name} {}\n", help(counter)));
        out.push_str(&format!("# TYPE {name} counter\n"));
        for (dev, port, v) in samples {
            out.push_str(&format!(
                "{name}{{device=\"{}\",port=\"{}\"}} {v}\n",
                label(dev),
                label(&port)
            ));
        }
    }
    let info = format!("{PREFIX}info");
    out.push_str(&format!(
        "# HELP {info} An EFA device under /sys/class/infiniband; the value is always 1\n"
    ));
    out.push_str(&format!("# TYPE {info} gauge\n"));
    for n in &s.nics {
        out.push_str(&format!("{info}{{device=\"{}\"}} 1\n", label(&n.name)));
    }
    out
}

/// Writes `text` to `path` whole (node_exporter reads only `*.prom`; the temporary name does
/// not end so).
pub use efabench_report::write_atomically;

#[cfg(test)]
#[path = "exposition_check.rs"]
mod exposition_check;
#[cfg(test)]
pub(crate) use exposition_check::check_exposition;

#[cfg(test)]
mod tests {
    use super::*;
    use efabench_topology::counters::NicCounters;
    use std::time::Instant;

    fn nic(name: &str, port: &[(&str, u64)], device: &[(&str, u64)]) -> NicCounters {
        NicCounters {
            name: name.into(),
            port_num: Some(1),
            port: port.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            device: device.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn families_are_grouped_typed_and_valid() {
        let s = Snapshot {
            at: Instant::now(),
            nics: vec![
                nic(
                    "rdmap16s27",
                    &[("tx_bytes", 10), ("rx_drops", 0), ("lifespan", 10)],
                    &[("cmds_err", 1)],
                ),
                nic(
                    "rdmap32s27",
                    &[("tx_bytes", 20), ("rx_drops", 3)],
                    &[("cmds_err", 0), ("bad-name", 1)],
                ),
            ],
        };
        let t = render(&s);
        let samples = check_exposition(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
        assert!(t.contains("# TYPE node_amazonefa_tx_bytes counter\n"));
        assert!(t.contains("node_amazonefa_tx_bytes{device=\"rdmap16s27\",port=\"1\"} 10\n"));
        assert!(t.contains("node_amazonefa_tx_bytes{device=\"rdmap32s27\",port=\"1\"} 20\n"));
        assert!(t.contains("node_amazonefa_cmds_err{device=\"rdmap16s27\",port=\"1\"} 1\n"));
        assert!(t.contains("node_amazonefa_info{device=\"rdmap32s27\"} 1\n"));
        assert!(!t.contains("lifespan") && !t.contains("bad-name"), "{t}");
        // 3 counter families x 2 NICs + 2 info samples.
        assert_eq!(samples.len(), 8);
    }

    #[test]
    fn a_counter_in_both_scopes_is_written_once() {
        let s = Snapshot {
            at: Instant::now(),
            nics: vec![nic("efa_0", &[("rx_bytes", 5)], &[("rx_bytes", 5)])],
        };
        let t = render(&s);
        assert_eq!(t.matches("node_amazonefa_rx_bytes{").count(), 1);
        check_exposition(&t).unwrap();
    }

    #[test]
    fn labels_are_escaped() {
        let s = Snapshot {
            at: Instant::now(),
            nics: vec![nic("we\"ird\\dev\n", &[("tx_bytes", 1)], &[])],
        };
        let t = render(&s);
        let samples = check_exposition(&t).unwrap_or_else(|e| panic!("{e}\n{t}"));
        assert_eq!(samples[0].1[0].1, "we\"ird\\dev\n");
    }

    #[test]
    fn the_checker_refuses_what_prometheus_refuses() {
        for bad in [
            "m 1",                                       // no final newline
            "1m 1\n",                                    // bad name
            "m{a=b} 1\n",                                // unquoted value
            "m{a=\"x\\q\"} 1\n",                         // bad escape
            "m{a=\"x\"} one\n",                          // not a number
            "m 1\nn 1\nm 2\n",                           // not contiguous
            "m 1\n# TYPE m counter\n",                   // TYPE after samples
            "# TYPE m counter\n# TYPE m counter\nm 1\n", // TYPE twice
            "m{a=\"1\"} 1\nm{a=\"1\"} 2\n",              // repeated sample
            "# TYPE m countr\nm 1\n",                    // unknown type
            "m{a=\"1\" 1\n",                             // unclosed
        ] {
            assert!(check_exposition(bad).is_err(), "accepted {bad:?}");
        }
        assert!(check_exposition(
            "# HELP m x\n# TYPE m gauge\nm{a=\"1\",b=\"\"} 1.5e3 1700000000\nm -Inf\n"
        )
        .is_ok());
    }

    #[test]
    fn atomic_write_replaces_the_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("efabench-prom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("efa.prom");
        write_atomically(&f, "a 1\n").unwrap();
        write_atomically(&f, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "a 2\n");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        assert!(write_atomically(&dir.join("missing/efa.prom"), "x").is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
