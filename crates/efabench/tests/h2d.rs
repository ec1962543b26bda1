//! `efabench h2d` as the built binary: on a machine without a CUDA driver (CI) it exits 2 with
//! one line naming the missing driver and the fix, before any point. On a GPU machine the run is
//! `scripts/gpu-tests.sh`'s (timing is never asserted here).

use std::process::Command;

#[test]
fn without_a_cuda_driver_h2d_exits_2_with_the_fix() {
    // The library's own answer to "is there a driver", the one `h2d` acts on.
    if !efabench_gpu::driver().is_err_and(|e| e.is_no_driver()) {
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_efabench"))
        .args([
            "h2d", "-b", "1M", "-e", "1M", "--engine", "ce", "--dir", "h2d",
        ])
        .output()
        .expect("run efabench");
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(e.starts_with("efabench h2d: no CUDA driver"), "{e}");
    assert!(e.contains("LD_LIBRARY_PATH"), "{e}");
    assert!(o.stdout.is_empty(), "no table without a measurement");
}
