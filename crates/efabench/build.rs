//! Stamps the binary with its version and git commit so every record names what produced it.
use std::process::Command;

fn main() {
    let git = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=EFABENCH_GIT={git}");
    let version = env!("CARGO_PKG_VERSION");
    let long = if git.is_empty() {
        version.to_string()
    } else {
        format!("{version} ({git})")
    };
    println!("cargo:rustc-env=EFABENCH_VERSION_LONG={long}");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs");
}
