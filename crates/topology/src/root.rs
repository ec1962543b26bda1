//! Every read of `/sys`, `/proc`, `/opt` and DMI goes through a [`Root`].
//!
//! Why: the diagnostics must be testable on machines without EFA or GPUs, so the same code reads
//! either the live system (`/`) or a fixture tree that mirrors a p4d/p5 node. Paths are written in
//! their absolute system form (`/sys/class/infiniband`) and mapped under the root. Symlinks are
//! resolved *inside* the root: an absolute link target is re-rooted and `..` never climbs above the
//! root, so a fixture with `sys/class/infiniband/X -> ../../devices/...` behaves exactly like sysfs
//! and can never read the host's files by accident.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Longest symlink chain followed before giving up (the kernel's limit is 40).
const MAX_LINKS: usize = 40;

/// A directory that stands for `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    dir: PathBuf,
}

/// Why a root directory cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootError(pub String);

impl std::fmt::Display for RootError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RootError {}

impl Default for Root {
    fn default() -> Self {
        Root::system()
    }
}

impl Root {
    /// The live system.
    pub fn system() -> Root {
        Root {
            dir: PathBuf::from("/"),
        }
    }

    /// A fixture tree (or `/`). Fails with a one-line reason when `dir` is not a directory.
    pub fn new(dir: impl AsRef<Path>) -> Result<Root, RootError> {
        let dir = dir.as_ref();
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(RootError(format!(
                    "--root {}: not a directory; give the directory that stands for / (e.g. fixtures/p5.48xlarge)",
                    dir.display()
                )))
            }
            Err(e) => {
                return Err(RootError(format!(
                    "--root {}: {e}; give an existing directory that stands for / (default /)",
                    dir.display()
                )))
            }
        }
        let dir = fs::canonicalize(dir).map_err(|e| {
            RootError(format!(
                "--root {}: cannot resolve the path: {e}",
                dir.display()
            ))
        })?;
        Ok(Root { dir })
    }

    /// The host directory behind this root.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// True when this root is the live system's `/`.
    pub fn is_system(&self) -> bool {
        self.dir == Path::new("/")
    }

    /// Resolve every symlink in `path` (a system path such as `/sys/class/infiniband/x/device`)
    /// inside the root and return the canonical system path (still starting with `/`). Missing
    /// trailing components are kept as written. `None` on a symlink loop.
    pub fn resolve(&self, path: impl AsRef<Path>) -> Option<PathBuf> {
        let mut pending: Vec<PathBuf> = Vec::new();
        push_components(&mut pending, path.as_ref());
        pending.reverse();
        let mut out = PathBuf::from("/");
        let mut links = 0usize;
        let mut missing = false;
        while let Some(part) = pending.pop() {
            if part.as_os_str() == ".." {
                out.pop();
                continue;
            }
            out.push(&part);
            if missing {
                continue;
            }
            let host = self.host_unresolved(&out);
            match fs::symlink_metadata(&host) {
                Ok(m) if m.file_type().is_symlink() => {
                    links += 1;
                    if links > MAX_LINKS {
                        return None;
                    }
                    let target = fs::read_link(&host).ok()?;
                    out.pop();
                    if target.is_absolute() {
                        out = PathBuf::from("/");
                    }
                    let mut parts = Vec::new();
                    push_components(&mut parts, &target);
                    for p in parts.into_iter().rev() {
                        pending.push(p);
                    }
                }
                Ok(_) => {}
                Err(_) => missing = true,
            }
        }
        Some(out)
    }

    /// The host path of a system path, with symlinks resolved inside the root.
    pub fn host(&self, path: impl AsRef<Path>) -> PathBuf {
        match self.resolve(path.as_ref()) {
            Some(p) => self.host_unresolved(&p),
            // A loop: hand back a path that will fail to open rather than escape the root.
            None => self.dir.join(".efabench-symlink-loop"),
        }
    }

    fn host_unresolved(&self, sys: &Path) -> PathBuf {
        let rel = sys.strip_prefix("/").unwrap_or(sys);
        self.dir.join(rel)
    }

    /// The whole file as text (lossy UTF-8).
    pub fn read(&self, path: impl AsRef<Path>) -> io::Result<String> {
        let bytes = fs::read(self.host(path))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The file's text with surrounding whitespace removed; `None` when it cannot be read.
    pub fn read_trim(&self, path: impl AsRef<Path>) -> Option<String> {
        self.read(path).ok().map(|s| s.trim().to_string())
    }

    /// The file as raw bytes.
    pub fn read_bytes(&self, path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
        fs::read(self.host(path))
    }

    /// Whether anything exists at `path` (after resolving symlinks).
    pub fn exists(&self, path: impl AsRef<Path>) -> bool {
        fs::metadata(self.host(path)).is_ok()
    }

    /// Whether `path` is a directory.
    pub fn is_dir(&self, path: impl AsRef<Path>) -> bool {
        fs::metadata(self.host(path))
            .map(|m| m.is_dir())
            .unwrap_or(false)
    }

    /// Names in a directory, sorted; empty when it cannot be listed.
    pub fn list(&self, path: impl AsRef<Path>) -> Vec<String> {
        let mut names: Vec<String> = match fs::read_dir(self.host(path)) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        names
    }

    /// Regular files (not symlinks, not directories) directly in a directory, sorted, with their
    /// host paths. Resolves the directory once, so reading many small files (hw_counters) costs
    /// one resolution instead of one per file.
    pub fn list_files(&self, path: impl AsRef<Path>) -> Vec<(String, PathBuf)> {
        let dir = self.host(path);
        let mut out: Vec<(String, PathBuf)> = match fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.to_string();
                    Some((name, e.path()))
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        out.sort();
        out
    }

    /// The last component of a symlink's resolved target (e.g. the driver name behind
    /// `/sys/bus/pci/devices/X/driver`).
    pub fn link_basename(&self, path: impl AsRef<Path>) -> Option<String> {
        let path = path.as_ref();
        if fs::symlink_metadata(self.host(path.parent()?).join(path.file_name()?))
            .map(|m| !m.file_type().is_symlink())
            .unwrap_or(true)
        {
            return None;
        }
        self.resolve(path)?
            .file_name()
            .and_then(OsStr::to_str)
            .map(str::to_string)
    }
}

fn push_components(out: &mut Vec<PathBuf>, path: &Path) {
    for c in path.components() {
        match c {
            Component::Normal(s) => out.push(PathBuf::from(s)),
            Component::ParentDir => out.push(PathBuf::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("efabench-root-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn relative_and_absolute_links_stay_inside() {
        let d = tmp("links");
        fs::create_dir_all(d.join("sys/devices/pci0000:10/0000:10:1b.0")).unwrap();
        fs::write(
            d.join("sys/devices/pci0000:10/0000:10:1b.0/vendor"),
            "0x1d0f\n",
        )
        .unwrap();
        fs::create_dir_all(d.join("sys/class/x")).unwrap();
        symlink(
            "../../devices/pci0000:10/0000:10:1b.0",
            d.join("sys/class/x/rel"),
        )
        .unwrap();
        symlink(
            "/sys/devices/pci0000:10/0000:10:1b.0",
            d.join("sys/class/x/abs"),
        )
        .unwrap();
        symlink("../../../../../../../../etc", d.join("sys/class/x/escape")).unwrap();
        let root = Root::new(&d).unwrap();
        assert_eq!(
            root.read_trim("/sys/class/x/rel/vendor").as_deref(),
            Some("0x1d0f")
        );
        assert_eq!(
            root.read_trim("/sys/class/x/abs/vendor").as_deref(),
            Some("0x1d0f")
        );
        assert_eq!(
            root.resolve("/sys/class/x/rel").unwrap(),
            PathBuf::from("/sys/devices/pci0000:10/0000:10:1b.0")
        );
        // `..` stops at the root: this resolves to <root>/etc, not the host's /etc.
        assert_eq!(
            root.resolve("/sys/class/x/escape").unwrap(),
            PathBuf::from("/etc")
        );
        assert!(!root.exists("/sys/class/x/escape/passwd"));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn loops_and_bad_roots_are_errors_not_panics() {
        let d = tmp("loop");
        symlink("b", d.join("a")).unwrap();
        symlink("a", d.join("b")).unwrap();
        let root = Root::new(&d).unwrap();
        assert!(root.resolve("/a/x").is_none());
        assert!(root.read("/a").is_err());
        let e = Root::new(d.join("nope")).unwrap_err();
        assert!(e.0.contains("--root"), "{e}");
        fs::write(d.join("file"), "x").unwrap();
        assert!(Root::new(d.join("file"))
            .unwrap_err()
            .0
            .contains("not a directory"));
        let _ = fs::remove_dir_all(&d);
    }
}
