//! Where each rank's GPU buffers are, and what that does to GPU-side timings.
//!
//! Two processes on one GPU do not run at once: without NVIDIA MPS the GPU time-slices between
//! their contexts (a couple of milliseconds a slice). A benchmark whose GPU work in one process
//! waits for GPU work in another, such as `proxy` (the producer kernel spins in `quiet()` while
//! the target's copy waits for the GPU) or device-memory copies through shm on a shared GPU,
//! then measures the scheduler, not the path: on an H200 pair every GPU-initiated put took one
//! ~2.4 ms slice. The run header says so, so nobody reads that as the proxy's cost.

use efabench_record::SharedGpu;
use std::path::{Path, PathBuf};

/// What one rank tells the others about its placement: its GPU ordinal and whether an MPS
/// daemon serves it.
pub fn encode(gpu: i32, mps: bool) -> Vec<u8> {
    let mut b = gpu.to_le_bytes().to_vec();
    b.push(u8::from(mps));
    b
}

/// [`encode`]'s bytes back; `None` for a rank that sent something else.
pub fn decode(b: &[u8]) -> Option<(i32, bool)> {
    match b {
        [a, b, c, d, m] if *m <= 1 => Some((i32::from_le_bytes([*a, *b, *c, *d]), *m == 1)),
        _ => None,
    }
}

/// The GPUs that serve more than one rank of one host, from each rank's GPU ordinal (negative:
/// unknown), host name and whether an MPS daemon serves it, all in rank order. Every record of
/// the run carries the result as `gpu_sharing`.
pub fn shared_gpus(gpus: &[i32], hosts: &[String], mps: &[bool]) -> Vec<SharedGpu> {
    let mut groups: Vec<SharedGpu> = Vec::new();
    for (r, g) in gpus.iter().enumerate() {
        if *g < 0 {
            continue; // unknown
        }
        let host = hosts.get(r).cloned().unwrap_or_default();
        let rank_mps = mps.get(r).copied().unwrap_or(false);
        match groups.iter_mut().find(|s| s.gpu == *g && s.host == host) {
            Some(s) => {
                s.ranks.push(r as u32);
                // One rank without MPS is enough for the GPU to time-slice.
                s.mps &= rank_mps;
            }
            None => groups.push(SharedGpu {
                host,
                gpu: *g,
                ranks: vec![r as u32],
                mps: rank_mps,
            }),
        }
    }
    groups.retain(|s| s.ranks.len() > 1);
    groups
}

/// The header line for GPUs shared without MPS, or `None` when there are none (MPS gives the
/// ranks one shared context, so they run at once).
pub fn shared_gpu_note(groups: &[SharedGpu]) -> Option<String> {
    let sliced: Vec<&SharedGpu> = groups.iter().filter(|s| !s.mps).collect();
    let first_host = sliced.first()?.host.as_str();
    let one_host = sliced.iter().all(|s| s.host == first_host);
    let shared: Vec<String> = sliced
        .iter()
        .map(|s| {
            if one_host {
                let list: Vec<String> = s.ranks.iter().map(|r| r.to_string()).collect();
                format!("ranks {} on GPU {}", list.join(","), s.gpu)
            } else {
                s.describe()
            }
        })
        .collect();
    Some(format!(
        "# note: {} share a GPU without NVIDIA MPS: their GPU work is time-sliced, so GPU-side \
         timings include waiting for each other's slices (start nvidia-cuda-mps-control -d, or \
         one rank per GPU, to measure the path; records say so in gpu_sharing)",
        shared.join("; ")
    ))
}

/// Whether an NVIDIA MPS control daemon serves this process: its pipe directory
/// (`CUDA_MPS_PIPE_DIRECTORY`, default `/tmp/nvidia-mps`) holds the `control` socket.
pub fn mps_running() -> bool {
    let dir = std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/nvidia-mps"));
    mps_pipe_present(&dir)
}

fn mps_pipe_present(dir: &Path) -> bool {
    dir.join("control").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize, name: &str) -> Vec<String> {
        vec![name.to_string(); n]
    }

    fn note(gpus: &[i32], hosts: &[String], mps: bool) -> Option<String> {
        shared_gpu_note(&shared_gpus(gpus, hosts, &vec![mps; gpus.len()]))
    }

    #[test]
    fn ranks_on_one_gpu_of_one_host_are_named() {
        let two = note(&[0, 0], &hosts(2, "a"), false).unwrap();
        assert!(two.contains("ranks 0,1 on GPU 0 share"), "{two}");
        let four = note(&[0, 1, 0, 1], &hosts(4, "a"), false).unwrap();
        assert!(
            four.contains("ranks 0,2 on GPU 0; ranks 1,3 on GPU 1"),
            "{four}"
        );
    }

    #[test]
    fn one_gpu_each_other_hosts_or_mps_is_no_note() {
        assert_eq!(note(&[0, 1], &hosts(2, "a"), false), None);
        // GPU 0 of two different hosts is two GPUs.
        let two = vec!["a".to_string(), "b".to_string()];
        assert_eq!(note(&[0, 0], &two, false), None);
        assert_eq!(note(&[0, 0], &hosts(2, "a"), true), None);
        assert_eq!(note(&[3], &hosts(1, "a"), false), None);
        assert_eq!(note(&[-1, -1], &hosts(2, "a"), false), None);
    }

    #[test]
    fn the_record_field_names_every_shared_gpu() {
        let h = hosts(4, "a");
        assert_eq!(shared_gpus(&[0, 1], &h[..2], &[false, false]), vec![]);
        assert_eq!(
            shared_gpus(&[0, 1, 0, 1], &h, &[false; 4]),
            vec![
                SharedGpu {
                    host: "a".into(),
                    gpu: 0,
                    ranks: vec![0, 2],
                    mps: false
                },
                SharedGpu {
                    host: "a".into(),
                    gpu: 1,
                    ranks: vec![1, 3],
                    mps: false
                },
            ]
        );
        // Under MPS the GPU is still shared (recorded), but not time-sliced (no note).
        let under_mps = shared_gpus(&[0, 0], &h[..2], &[true, true]);
        assert_eq!(
            under_mps,
            vec![SharedGpu {
                host: "a".into(),
                gpu: 0,
                ranks: vec![0, 1],
                mps: true
            }]
        );
        assert_eq!(shared_gpu_note(&under_mps), None);
        // A rank that does not see the daemon makes the GPU time-sliced.
        let mixed = shared_gpus(&[0, 0], &h[..2], &[true, false]);
        assert!(!mixed[0].mps);
        // Two hosts, each with a shared GPU 0: the note names the hosts.
        let hs: Vec<String> = ["a", "a", "b", "b"].iter().map(|s| s.to_string()).collect();
        let g = shared_gpus(&[0, 0, 0, 0], &hs, &[false, false, false, true]);
        assert_eq!(g.len(), 2);
        assert_eq!((g[1].host.as_str(), g[1].mps), ("b", false));
        let n = shared_gpu_note(&g).unwrap();
        assert!(
            n.contains("ranks 0,1 on GPU 0 of a; ranks 2,3 on GPU 0 of b share"),
            "{n}"
        );
    }

    #[test]
    fn placement_travels_between_ranks() {
        for (g, m) in [(0, false), (7, true), (-1, false)] {
            assert_eq!(decode(&encode(g, m)), Some((g, m)));
        }
        assert_eq!(decode(&[0, 0, 0, 0]), None, "a bare ordinal");
        assert_eq!(decode(&[0, 0, 0, 0, 2]), None);
        // What the harness builds from the gathered bytes and puts in every record.
        let gathered = [encode(0, false), encode(0, false), vec![1, 2]];
        let placed: Vec<Option<(i32, bool)>> = gathered.iter().map(|b| decode(b)).collect();
        let ordinals: Vec<i32> = placed.iter().map(|p| p.map_or(-1, |(g, _)| g)).collect();
        let mps: Vec<bool> = placed.iter().map(|p| p.is_some_and(|(_, m)| m)).collect();
        let groups = shared_gpus(&ordinals, &hosts(3, "h"), &mps);
        let mut extra = serde_json::Map::new();
        extra.insert(
            efabench_record::GPU_SHARING.into(),
            efabench_record::GpuSharing::to_value(&groups),
        );
        let mut rec = efabench_record::testing::sample("proxy", "nbi", 8, 1.0, 1.0);
        rec.extra = extra;
        let line = serde_json::to_string(&rec).unwrap();
        assert!(
            line.contains(r#""gpu_sharing":[{"gpu":0,"host":"h","mps":false,"ranks":[0,1]}]"#),
            "{line}"
        );
        let back = efabench_record::parse_records(&line, "test").unwrap();
        assert!(back[0].gpu_sharing().is_time_sliced());
    }

    #[test]
    fn mps_is_seen_by_its_control_socket() {
        let dir = std::env::temp_dir().join(format!("efabench-mps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!mps_pipe_present(&dir));
        std::fs::write(dir.join("control"), b"").unwrap();
        assert!(mps_pipe_present(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
