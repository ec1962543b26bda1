//! Builders for tests of the crates that consume records (`report`'s compare and plot, the CLI):
//! a plausible record and a fresh temporary directory. Behind the `test-util` feature so that
//! benchmarks never carry them; dev-dependencies enable it.

use crate::record::{LatencySummary, Record, SCHEMA};
use std::path::{Path, PathBuf};

/// A plausible send/recv record (EFA, host memory, one rail, peer 1).
pub fn sample(bench: &str, variant: &str, size: u64, bw: f64, p50: f64) -> Record {
    Record {
        schema: SCHEMA.to_string(),
        bench: bench.to_string(),
        variant: variant.to_string(),
        size_bytes: size,
        iters: 1000,
        warmup: 100,
        world: 2,
        peer: Some(1),
        provider: "efa".into(),
        fabric: "efa".into(),
        domains: vec!["rdmap16s27-rdm".into()],
        libfabric: Some("2.1.0".into()),
        rails: 1,
        mem: "host".into(),
        lat_us: LatencySummary {
            min: p50 * 0.9,
            p50,
            p99: p50 * 1.5,
            max: p50 * 3.0,
            mean: p50 * 1.1,
        },
        bw_gbps: bw,
        busbw_gbps: None,
        msg_rate_mops: bw / 8.0 / size as f64 * 1e3,
        link_gbps: Some(100.0),
        util_pct: Some(bw),
        errors: 0,
        verified: true,
        counters: None,
        host: "node-a".into(),
        timestamp: "2026-11-22T03:00:00.000Z".into(),
        version: "0.1.0".into(),
        git: None,
        extra: Default::default(),
    }
}

/// A fresh, empty directory for one test, removed with everything in it when the guard drops.
pub fn tempdir(name: &str) -> TempDir {
    // The thread's number keeps parallel tests apart; digits only, so the path is safe in a
    // shell script a test writes there.
    let thread: String = format!("{:?}", std::thread::current().id())
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let d = std::env::temp_dir().join(format!(
        "efabench-test-{name}-{}-{thread}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// A directory [`tempdir`] made; it reads as the path it holds.
pub struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}
