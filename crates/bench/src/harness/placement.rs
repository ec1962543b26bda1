//! Where each rank's GPU buffers are, and what that does to GPU-side timings.
//!
//! Two processes on one GPU do not run at once: without NVIDIA MPS the GPU time-slices between
//! their contexts (a couple of milliseconds a slice). A benchmark whose GPU work in one process
//! waits for GPU work in another, such as `proxy` (the producer kernel spins in `quiet()` while
//! the target's copy waits for the GPU) or device-memory copies through shm on a shared GPU,
//! then measures the scheduler, not the path: on an H200 pair every GPU-initiated put took one
//! ~2.4 ms slice. The run header says so, so nobody reads that as the proxy's cost.

use std::path::{Path, PathBuf};

/// The header line for ranks that share a GPU on one host, or `None` when no two do (or MPS
/// runs, which gives them one shared context).
pub fn shared_gpu_note(gpus: &[i32], hosts: &[String], mps: bool) -> Option<String> {
    if mps {
        return None;
    }
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new(); // (first rank, ranks)
    for (r, g) in gpus.iter().enumerate() {
        if *g < 0 {
            continue; // unknown
        }
        let host = hosts.get(r);
        match groups
            .iter_mut()
            .find(|(first, _)| gpus[*first] == *g && hosts.get(*first) == host)
        {
            Some((_, ranks)) => ranks.push(r),
            None => groups.push((r, vec![r])),
        }
    }
    let shared: Vec<String> = groups
        .iter()
        .filter(|(_, ranks)| ranks.len() > 1)
        .map(|(first, ranks)| {
            let list: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
            format!("ranks {} on GPU {}", list.join(","), gpus[*first])
        })
        .collect();
    if shared.is_empty() {
        return None;
    }
    Some(format!(
        "# note: {} share a GPU without NVIDIA MPS: their GPU work is time-sliced, so GPU-side \
         timings include waiting for each other's slices (start nvidia-cuda-mps-control -d, or \
         one rank per GPU, to measure the path)",
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

    #[test]
    fn ranks_on_one_gpu_of_one_host_are_named() {
        let note = shared_gpu_note(&[0, 0], &hosts(2, "a"), false).unwrap();
        assert!(note.contains("ranks 0,1 on GPU 0"), "{note}");
        let note = shared_gpu_note(&[0, 1, 0, 1], &hosts(4, "a"), false).unwrap();
        assert!(
            note.contains("ranks 0,2 on GPU 0; ranks 1,3 on GPU 1"),
            "{note}"
        );
    }

    #[test]
    fn one_gpu_each_other_hosts_or_mps_is_no_note() {
        assert_eq!(shared_gpu_note(&[0, 1], &hosts(2, "a"), false), None);
        // GPU 0 of two different hosts is two GPUs.
        let two = vec!["a".to_string(), "b".to_string()];
        assert_eq!(shared_gpu_note(&[0, 0], &two, false), None);
        assert_eq!(shared_gpu_note(&[0, 0], &hosts(2, "a"), true), None);
        assert_eq!(shared_gpu_note(&[3], &hosts(1, "a"), false), None);
        assert_eq!(shared_gpu_note(&[-1, -1], &hosts(2, "a"), false), None);
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
