//! Versions of the installed EFA/NCCL/NVIDIA stack, read from files under a [`Root`].
//!
//! Why files and not `dlopen`: loading a plugin or NCCL to ask its version can itself fail or
//! crash, and a fixture tree cannot be loaded at all. Every component embeds a greppable version:
//! the installer's package file, `/sys/module/efa/version`,
//! `Initializing aws-ofi-nccl X` and `NCCL version X+cudaY` inside the shared objects,
//! `/proc/driver/nvidia/version`, and the CUDA toolkit's `version.json` (or, on installs without
//! it, `include/cuda.h`'s `CUDA_VERSION` and the `libcudart.so.X.Y.Z` file name).

use crate::root::Root;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;

/// A file found and the version read from it (None when the file carries none we recognise).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Found {
    pub path: String,
    pub version: Option<String>,
}

/// The EFA kernel driver.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EfaDriver {
    /// Out-of-tree amzn driver: `/sys/module/efa/version` (e.g. `2.17.3g`).
    Amzn { version: String },
    /// In-tree driver (no version attribute); the kernel release instead.
    InTree { kernel: Option<String> },
    /// No `efa` module.
    NotLoaded,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvidiaDriver {
    pub version: String,
    /// NVIDIA open kernel module (needed for the dmabuf GPUDirect route).
    pub open: bool,
}

/// Everything version-like the doctor looks at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Installed {
    pub efa_driver: EfaDriver,
    pub efa_installer: Option<Found>,
    pub libfabric: Vec<Found>,
    pub aws_ofi_nccl: Vec<Found>,
    pub nccl: Vec<Found>,
    pub nvidia_driver: Option<NvidiaDriver>,
    pub cuda: Option<CudaToolkit>,
    pub kernel: Option<String>,
    /// Module names from `/proc/modules`.
    pub modules: Vec<String>,
}

/// Directories searched for NCCL and the aws-ofi-nccl plugin, before `LD_LIBRARY_PATH`.
pub const PLUGIN_DIRS: &[&str] = &[
    "/opt/amazon/ofi-nccl/lib",
    "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
    "/opt/amazon/ofi-nccl/lib/aarch64-linux-gnu",
    "/opt/amazon/ofi-nccl/lib64",
    "/opt/aws-ofi-nccl/lib",
    "/opt/amazon/aws-ofi-nccl/lib",
];
pub const NCCL_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/local/cuda/lib64",
    "/opt/nccl/build/lib",
];

impl Installed {
    /// Scan `root`; `env` supplies `LD_LIBRARY_PATH` (directories are read under the root).
    pub fn scan(root: &Root, env: &BTreeMap<String, String>) -> Installed {
        let ld: Vec<String> = env
            .get("LD_LIBRARY_PATH")
            .map(|p| {
                p.split(':')
                    .filter(|d| d.starts_with('/'))
                    .map(|d| d.trim_end_matches('/').to_string())
                    .collect()
            })
            .unwrap_or_default();
        let mut plugin_dirs: Vec<String> = PLUGIN_DIRS.iter().map(|s| s.to_string()).collect();
        plugin_dirs.extend(ld.iter().cloned());
        let mut nccl_dirs: Vec<String> = NCCL_DIRS.iter().map(|s| s.to_string()).collect();
        nccl_dirs.extend(ld);
        let kernel = root
            .read_trim("/proc/sys/kernel/osrelease")
            .filter(|s| !s.is_empty());
        let efa_driver = if let Some(v) = root.read_trim("/sys/module/efa/version") {
            EfaDriver::Amzn { version: v }
        } else if root.exists("/sys/module/efa") {
            EfaDriver::InTree {
                kernel: kernel.clone(),
            }
        } else {
            EfaDriver::NotLoaded
        };
        Installed {
            efa_driver,
            efa_installer: efa_installer(root),
            libfabric: crate::libfabric::libfabric_files(root)
                .into_iter()
                .map(|(path, version)| Found { path, version })
                .collect(),
            aws_ofi_nccl: scan_libs(
                root,
                &plugin_dirs,
                |f| f.starts_with("libnccl-net") && f.contains(".so"),
                b"Initializing aws-ofi-nccl ",
                |_| None,
            ),
            nccl: scan_libs(
                root,
                &nccl_dirs,
                |f| f.starts_with("libnccl.so"),
                b"NCCL version ",
                |f| {
                    // libnccl.so.2.18.5 carries the version in its name.
                    let v = f.strip_prefix("libnccl.so.")?;
                    (v.split('.').count() == 3).then(|| v.to_string())
                },
            ),
            nvidia_driver: nvidia_driver(root),
            cuda: cuda(root),
            kernel,
            modules: root
                .read("/proc/modules")
                .map(|t| {
                    t.lines()
                        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// The newest version among found files (None when nothing carried a version).
    pub fn best(found: &[Found]) -> Option<&Found> {
        found.iter().filter(|f| f.version.is_some()).max_by(|a, b| {
            cmp_versions(
                a.version.as_deref().unwrap_or(""),
                b.version.as_deref().unwrap_or(""),
            )
        })
    }
}

fn efa_installer(root: &Root) -> Option<Found> {
    for path in [
        "/opt/amazon/efa_installed_packages",
        "/opt/amazon/efa/installed_packages",
    ] {
        if let Ok(t) = root.read(path) {
            let version = t.lines().find_map(|l| {
                let rest = l.split_once("EFA installer version:")?.1;
                rest.split_whitespace().next().map(str::to_string)
            });
            return Some(Found {
                path: path.to_string(),
                version,
            });
        }
    }
    None
}

fn nvidia_driver(root: &Root) -> Option<NvidiaDriver> {
    if let Ok(t) = root.read("/proc/driver/nvidia/version") {
        let line = t.lines().find(|l| l.starts_with("NVRM version:"))?;
        let version = line
            .split_whitespace()
            .find(|w| is_dotted_number(w))?
            .to_string();
        return Some(NvidiaDriver {
            version,
            open: line.contains("Open Kernel Module"),
        });
    }
    root.read_trim("/sys/module/nvidia/version")
        .filter(|v| is_dotted_number(v))
        .map(|version| NvidiaDriver {
            version,
            open: false,
        })
}

/// The CUDA toolkit behind `/usr/local/cuda`, read without loading anything from it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CudaToolkit {
    /// The toolkit directory: `/usr/local/cuda` with its symlinks resolved inside the root
    /// (e.g. `/usr/local/cuda-13.0`).
    pub dir: String,
    /// Where the version was read (or, without a version, the first toolkit file seen).
    pub source: CudaSource,
    /// The system path of that file.
    pub path: String,
    pub version: Option<String>,
}

/// The places a CUDA toolkit records its version, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CudaSource {
    /// `version.json` (`{"cuda": {"version": "12.8.1"}}`), CUDA 11.1 and later.
    VersionJson,
    /// `version.txt` (`CUDA Version 11.0.228`), CUDA 11.0 and earlier.
    VersionTxt,
    /// `#define CUDA_VERSION 13000` in `include/cuda.h` (major and minor only).
    CudaHeader,
    /// The runtime library's real name, `libcudart.so.13.0.96`, or the soname inside it.
    Cudart,
    /// `bin/nvcc --version` (`release 13.0, V13.0.88`), run only on the live system.
    Nvcc,
}

impl CudaToolkit {
    /// Where the version came from, relative to the toolkit directory: `include/cuda.h`,
    /// `targets/x86_64-linux/lib/libcudart.so.13.0.96`, `bin/nvcc --version`.
    pub fn from(&self) -> String {
        let rel = self
            .path
            .strip_prefix(&self.dir)
            .map(|r| r.trim_start_matches('/'))
            .filter(|r| !r.is_empty())
            .unwrap_or(&self.path);
        match self.source {
            CudaSource::Nvcc => format!("{rel} --version"),
            _ => rel.to_string(),
        }
    }
}

/// Longest `nvcc --version` may run before it is killed and the version counted as unread.
const NVCC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn cuda(root: &Root) -> Option<CudaToolkit> {
    let top = "/usr/local/cuda";
    if !root.is_dir(top) {
        return None;
    }
    let dir = root
        .resolve(top)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| top.to_string());
    let mut first_seen: Option<CudaToolkit> = None;
    let mut found = |source: CudaSource, path: String, version: Option<String>| {
        let t = CudaToolkit {
            dir: dir.clone(),
            source,
            path,
            version,
        };
        if t.version.is_some() {
            return Some(t);
        }
        first_seen.get_or_insert(t);
        None
    };
    let path = format!("{dir}/version.json");
    if let Ok(t) = root.read(&path) {
        let v = serde_json::from_str::<serde_json::Value>(&t)
            .ok()
            .and_then(|j| j.get("cuda")?.get("version")?.as_str().map(str::to_string));
        if let Some(t) = found(CudaSource::VersionJson, path, v) {
            return Some(t);
        }
    }
    let path = format!("{dir}/version.txt");
    if let Ok(t) = root.read(&path) {
        let v = t
            .split_whitespace()
            .find(|w| is_dotted_number(w))
            .map(str::to_string);
        if let Some(t) = found(CudaSource::VersionTxt, path, v) {
            return Some(t);
        }
    }
    let targets: Vec<String> = root
        .list(format!("{dir}/targets"))
        .into_iter()
        .map(|t| format!("{dir}/targets/{t}"))
        .collect();
    let mut headers = vec![format!("{dir}/include/cuda.h")];
    headers.extend(targets.iter().map(|t| format!("{t}/include/cuda.h")));
    for path in headers {
        if let Ok(t) = root.read(&path) {
            let v = cuda_h_version(&t);
            if let Some(t) = found(CudaSource::CudaHeader, path, v) {
                return Some(t);
            }
        }
    }
    let mut lib_dirs = vec![format!("{dir}/lib64"), format!("{dir}/lib")];
    lib_dirs.extend(targets.iter().map(|t| format!("{t}/lib")));
    let mut best: Option<(String, String)> = None;
    for d in &lib_dirs {
        for f in root.list(d) {
            if !f.starts_with("libcudart.so") {
                continue;
            }
            let path = format!("{d}/{f}");
            let Some(real) = root.resolve(&path).filter(|_| root.exists(&path)) else {
                continue;
            };
            let real_name = real.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let v = cudart_version(real_name)
                .or_else(|| cudart_version(&f))
                .or_else(|| {
                    // A bare libcudart.so: the soname string inside names the major version.
                    scan_for_version(&root.host(&path), b"libcudart.so.")
                        .filter(|v| is_version_like(v))
                });
            let real = real.to_string_lossy().into_owned();
            match v {
                Some(v) if best.as_ref().is_none_or(|(b, _)| v.len() > b.len()) => {
                    best = Some((v, real))
                }
                Some(_) => {}
                None => {
                    found(CudaSource::Cudart, real, None);
                }
            }
        }
    }
    if let Some((v, path)) = best {
        return found(CudaSource::Cudart, path, Some(v));
    }
    let path = format!("{dir}/bin/nvcc");
    if root.exists(&path) {
        // Running a program is the last resort, and only on the live system: a fixture tree's
        // nvcc is not this machine's to run.
        let v = if root.is_system() {
            nvcc_version(&root.host(&path), NVCC_TIMEOUT)
        } else {
            None
        };
        if let Some(t) = found(CudaSource::Nvcc, path, v) {
            return Some(t);
        }
    }
    first_seen
}

/// `#define CUDA_VERSION 13000` → `13.0` (the header encodes major × 1000 + minor × 10).
pub fn cuda_h_version(header: &str) -> Option<String> {
    header.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        if w.next()? != "#define" || w.next()? != "CUDA_VERSION" {
            return None;
        }
        let n: u32 = w.next()?.parse().ok()?;
        (n >= 1000).then(|| format!("{}.{}", n / 1000, (n % 1000) / 10))
    })
}

/// `libcudart.so.13.0.96` → `13.0.96`, `libcudart.so.13` → `13`; None for `libcudart.so`.
pub fn cudart_version(file_name: &str) -> Option<String> {
    let v = file_name.strip_prefix("libcudart.so.")?;
    is_version_like(v).then(|| v.to_string())
}

fn is_version_like(v: &str) -> bool {
    !v.is_empty()
        && v.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `nvcc --version`'s `Cuda compilation tools, release 13.0, V13.0.88` → `13.0.88` (or `13.0`
/// without the `V` word).
pub fn nvcc_release(out: &str) -> Option<String> {
    let line = out.lines().find(|l| l.contains("release "))?;
    let after = line.split_once("release ")?.1;
    if let Some(v) = after
        .split_whitespace()
        .find_map(|w| w.strip_prefix('V'))
        .filter(|v| is_version_like(v))
    {
        return Some(v.to_string());
    }
    let r = after.split([',', ' ']).next()?;
    is_version_like(r).then(|| r.to_string())
}

/// Run `nvcc --version` with its output captured and a time limit; None when it fails, hangs or
/// prints no release.
fn nvcc_version(nvcc: &std::path::Path, limit: std::time::Duration) -> Option<String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(nvcc)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let start = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    nvcc_release(&out)
}

fn is_dotted_number(w: &str) -> bool {
    w.contains('.')
        && w.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn scan_libs(
    root: &Root,
    dirs: &[String],
    want: impl Fn(&str) -> bool,
    needle: &[u8],
    from_name: impl Fn(&str) -> Option<String>,
) -> Vec<Found> {
    let mut out: Vec<Found> = Vec::new();
    let mut seen_targets: Vec<std::path::PathBuf> = Vec::new();
    for dir in dirs {
        for f in root.list(dir) {
            if !want(&f) {
                continue;
            }
            let path = format!("{dir}/{f}");
            // libnccl.so -> libnccl.so.2 -> libnccl.so.2.18.5: report each real file once.
            let Some(target) = root.resolve(&path) else {
                continue;
            };
            if seen_targets.contains(&target) || !root.exists(&path) {
                continue;
            }
            seen_targets.push(target.clone());
            let target_name = target
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            let version =
                from_name(&target_name).or_else(|| scan_for_version(&root.host(&path), needle));
            out.push(Found {
                path: target.to_string_lossy().into_owned(),
                version,
            });
        }
    }
    out
}

/// Largest file prefix scanned for an embedded version string.
const SCAN_LIMIT: u64 = 1 << 30;

/// Find `needle` in the file and return the word after it (up to NUL or whitespace).
pub fn scan_for_version(host_path: &std::path::Path, needle: &[u8]) -> Option<String> {
    let f = std::fs::File::open(host_path).ok()?;
    let mut r = f.take(SCAN_LIMIT);
    let mut buf = vec![0u8; 1 << 20];
    let keep = needle.len() + 64;
    let mut window: Vec<u8> = Vec::new();
    loop {
        let n = r.read(&mut buf).ok()?;
        if n == 0 {
            return find_in(&window, needle, true);
        }
        window.extend_from_slice(&buf[..n]);
        if let Some(v) = find_in(&window, needle, false) {
            return Some(v);
        }
        if window.len() > keep {
            window.drain(..window.len() - keep);
        }
    }
}

fn find_in(hay: &[u8], needle: &[u8], at_end: bool) -> Option<String> {
    let mut start = 0;
    while let Some(pos) = hay[start..].windows(needle.len()).position(|w| w == needle) {
        let from = start + pos + needle.len();
        let tail = &hay[from..];
        let end = tail
            .iter()
            .position(|&b| b == 0 || b.is_ascii_whitespace() || !b.is_ascii_graphic());
        match end {
            Some(e) if e > 0 => return Some(String::from_utf8_lossy(&tail[..e]).into_owned()),
            None if at_end && !tail.is_empty() => {
                return Some(String::from_utf8_lossy(&tail[..tail.len().min(64)]).into_owned())
            }
            None => return None, // the word may continue in the next chunk
            _ => start = from,
        }
    }
    None
}

/// Leading dotted numbers of a version string: `2.17.3g` → `[2, 17, 3]`, `1.22.0amzn5.0` → `[1, 22, 0]`,
/// `1.7.3-aws` → `[1, 7, 3]`, `535.54.03` → `[535, 54, 3]`, `2.18.5+cuda12.2` → `[2, 18, 5]`.
pub fn version_numbers(v: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in v.trim().trim_start_matches('v').split('.') {
        let digits: String = part.chars().take_while(|c| c.is_ascii_digit()).collect();
        match digits.parse::<u32>() {
            Ok(n) => out.push(n),
            Err(_) => break,
        }
        if digits.len() != part.len() {
            break;
        }
    }
    out
}

/// Compare two version strings numerically (missing parts count as 0).
pub fn cmp_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (version_numbers(a), version_numbers(b));
    for i in 0..a.len().max(b.len()) {
        let o = a.get(i).unwrap_or(&0).cmp(b.get(i).unwrap_or(&0));
        if o != std::cmp::Ordering::Equal {
            return o;
        }
    }
    std::cmp::Ordering::Equal
}

/// `a < b` as versions; false when `a` has no number at all.
pub fn version_lt(a: &str, b: &str) -> bool {
    !version_numbers(a).is_empty() && cmp_versions(a, b) == std::cmp::Ordering::Less
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(version_numbers("2.17.3g"), vec![2, 17, 3]);
        assert_eq!(version_numbers("1.22.0amzn5.0"), vec![1, 22, 0]);
        assert_eq!(version_numbers("1.7.3-aws"), vec![1, 7, 3]);
        assert_eq!(version_numbers("2.18.5+cuda12.2"), vec![2, 18, 5]);
        assert_eq!(version_numbers("GitHub-dev"), Vec::<u32>::new());
        assert!(version_lt("1.13.0g", "2.5.0"));
        assert!(!version_lt("2.10.0g", "2.5.0"));
        assert!(!version_lt("junk", "1.0"));
        assert!(version_lt("535.54.03", "535.104.05"));
    }

    #[test]
    fn cuda_version_texts() {
        let h = "/* CUDA_VERSION 9000 in a comment */\n#define CUDA_VERSION 13000\n";
        assert_eq!(cuda_h_version(h).as_deref(), Some("13.0"));
        assert_eq!(
            cuda_h_version("#define  CUDA_VERSION   12080").as_deref(),
            Some("12.8")
        );
        assert_eq!(cuda_h_version("#define CUDA_VERSION_MAJOR 13"), None);
        assert_eq!(cuda_h_version("#define CUDA_VERSION x"), None);
        assert_eq!(
            cudart_version("libcudart.so.13.0.96").as_deref(),
            Some("13.0.96")
        );
        assert_eq!(cudart_version("libcudart.so.13").as_deref(), Some("13"));
        assert_eq!(cudart_version("libcudart.so"), None);
        assert_eq!(cudart_version("libcudart.so.13.0.96.bak"), None);
        let out =
            "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n\
Built on Wed_Jul_16_07:30:01_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\n\
Build cuda_13.0.r13.0/compiler.36260728_0\n";
        assert_eq!(nvcc_release(out).as_deref(), Some("13.0.88"));
        assert_eq!(
            nvcc_release("Cuda compilation tools, release 12.4,").as_deref(),
            Some("12.4")
        );
        assert_eq!(nvcc_release("nvcc: command not found"), None);
    }

    #[test]
    fn nvcc_is_run_with_a_time_limit() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("efabench-nvcc-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let script = |name: &str, body: &str| {
            let p = d.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let limit = std::time::Duration::from_secs(5);
        let ok = script(
            "nvcc",
            "echo 'Cuda compilation tools, release 13.0, V13.0.88'",
        );
        assert_eq!(nvcc_version(&ok, limit).as_deref(), Some("13.0.88"));
        // Answers only after the limit: killed, so no version.
        let slow = script(
            "nvcc-slow",
            "sleep 3; echo 'Cuda compilation tools, release 13.0, V13.0.88'",
        );
        assert_eq!(
            nvcc_version(&slow, std::time::Duration::from_millis(200)),
            None
        );
        let fails = script("nvcc-fails", "exit 1");
        assert_eq!(nvcc_version(&fails, limit), None);
        assert_eq!(nvcc_version(&d.join("absent"), limit), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn finds_embedded_strings_across_chunks() {
        let d = std::env::temp_dir().join(format!("efabench-scan-{}", std::process::id()));
        let mut bytes = vec![0u8; (1 << 20) - 10];
        bytes.extend_from_slice(b"NCCL version 2.18.5+cuda12.2\0more");
        std::fs::write(&d, &bytes).unwrap();
        assert_eq!(
            scan_for_version(&d, b"NCCL version ").as_deref(),
            Some("2.18.5+cuda12.2")
        );
        std::fs::write(&d, b"nothing here").unwrap();
        assert_eq!(scan_for_version(&d, b"NCCL version "), None);
        let _ = std::fs::remove_file(&d);
    }
}
