//! libfabric as seen from outside the process: `fi_info` output and library file names.
//!
//! Why not only the fabric crate: `doctor` and `topo` must work where libfabric cannot be loaded
//! (wrong version, missing, or a fixture tree of another node), so they parse the text of
//! `fi_info --version` / `fi_info -p efa` — from a file the user
//! captured, or by running `fi_info` on the live system — and read versions from the
//! `libfabric.so.1.N.0` file name (§2.4). The fabric layer can fill the same types directly.
//!
//! A file given with `--fi-info FILE` is checked before it is believed ([`read_fi_info_file`]):
//! the lenient parser alone would read `/etc/passwd` as "libfabric found, version unknown", and a
//! diagnosis built on a wrong file is worse than none. fi_info prints only `key: value` lines
//! (`provider: efa`, `    domain: rdmap16s27-rdm`, `libfabric: 2.1.0`, and in `-v` mode the
//! same shape nested), so every line must have that shape, the file must say something fi_info
//! says (a version, a provider entry, or `fi_getinfo: -61`), and every provider entry must name
//! its fabric and domain. The read is bounded, so `/dev/zero` is refused rather than swallowed.

use crate::root::Root;
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why `fi_info` text could not be read or believed. Each message is one line; the file name
/// comes first where there is a file.
#[derive(Debug, thiserror::Error)]
pub enum FiInfoError {
    #[error(
        "not fi_info output: line {line} `{text}` is not a `key: value` line as fi_info prints"
    )]
    NotKeyValue { line: usize, text: String },
    #[error("this is `fi_info -v` output, whose layout efabench does not read: capture `fi_info --version; fi_info -p efa` without -v")]
    Verbose,
    #[error("not fi_info output: no `libfabric:` version line, no `provider:` entry and no `fi_getinfo:` result")]
    NothingSaid,
    #[error("incomplete fi_info output: the `provider: {provider}` entry has no `{missing}:`")]
    Incomplete {
        provider: String,
        missing: &'static str,
    },
    #[error("{}: {}", path.display(), io_reason(source))]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is a directory", path.display())]
    Directory { path: PathBuf },
    #[error("{} is larger than {} MiB: not fi_info output", path.display(), FI_INFO_MAX_BYTES >> 20)]
    TooLarge { path: PathBuf },
    #[error("{} is not text (invalid UTF-8 at byte {}): not fi_info output", path.display(), source.utf8_error().valid_up_to())]
    NotText {
        path: PathBuf,
        #[source]
        source: std::string::FromUtf8Error,
    },
    #[error("{}: {source}", path.display())]
    Content {
        path: PathBuf,
        #[source]
        source: Box<FiInfoError>,
    },
    #[error("fi_info not found in /opt/amazon/efa/bin or PATH")]
    NotFound,
    #[error("cannot run {}: {source}", exe.display())]
    Spawn {
        exe: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} {args} did not finish within {timeout:?}", exe.display())]
    Timeout {
        exe: PathBuf,
        args: String,
        timeout: Duration,
    },
}

/// One `fi_info` entry (provider, fabric, domain).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LibfabricDomain {
    pub provider: String,
    pub fabric: String,
    pub domain: String,
    /// `FI_EP_RDM` / `FI_EP_DGRAM`, when known.
    pub ep_type: Option<String>,
    /// Provider version as printed (`201.0`).
    pub prov_version: Option<String>,
}

/// What `fi_info --version` and `fi_info -p efa` said.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FiInfo {
    /// `libfabric: 1.22.0amzn5.0`.
    pub library_version: Option<String>,
    /// `libfabric api: 1.22`.
    pub api_version: Option<String>,
    pub entries: Vec<LibfabricDomain>,
    /// `fi_getinfo: -61 (No data available)` was seen: the provider asked for is absent.
    pub no_data: bool,
}

impl FiInfo {
    /// Entries of the `efa` provider.
    pub fn efa(&self) -> impl Iterator<Item = &LibfabricDomain> {
        self.entries.iter().filter(|e| e.provider == "efa")
    }

    /// The libfabric version: from `--version`, else derived from an entry's provider version.
    pub fn version(&self) -> Option<String> {
        self.library_version.clone().or_else(|| {
            self.entries.iter().find_map(|e| {
                e.prov_version
                    .as_deref()
                    .and_then(prov_version_to_libfabric)
            })
        })
    }
}

/// Parse `fi_info` text (any mix of `--version` and provider listings).
pub fn parse_fi_info(text: &str) -> FiInfo {
    let mut info = FiInfo::default();
    let mut cur: Option<LibfabricDomain> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("libfabric api:") {
            info.api_version = Some(v.trim().to_string());
        } else if let Some(v) = t.strip_prefix("libfabric:") {
            info.library_version = Some(v.trim().to_string());
        } else if t.starts_with("fi_getinfo:") && t.contains("-61") {
            info.no_data = true;
        } else if let Some(p) = t.strip_prefix("provider:") {
            if let Some(e) = cur.take() {
                info.entries.push(e);
            }
            cur = Some(LibfabricDomain {
                provider: p.trim().to_string(),
                fabric: String::new(),
                domain: String::new(),
                ep_type: None,
                prov_version: None,
            });
        } else if let Some(e) = cur.as_mut() {
            if let Some(v) = t.strip_prefix("fabric:") {
                e.fabric = v.trim().to_string();
            } else if let Some(v) = t.strip_prefix("domain:") {
                e.domain = v.trim().to_string();
            } else if let Some(v) = t.strip_prefix("version:") {
                e.prov_version = Some(v.trim().to_string());
            } else if let Some(v) = t.strip_prefix("type:") {
                e.ep_type = Some(v.trim().to_string());
            }
        }
    }
    if let Some(e) = cur.take() {
        info.entries.push(e);
    }
    info
}

/// The most bytes `--fi-info FILE` may hold: `fi_info -v` for every provider of a p5 (32 NICs ×
/// several fabrics) is a few hundred KiB.
pub const FI_INFO_MAX_BYTES: usize = 4 << 20;

/// Whether a trimmed line has a shape fi_info prints: `key: value`, `key:` (a nested block of
/// `-v`), a YAML document marker of `-v`, or a `#` comment the user added. A key is a name or a
/// path (`/opt/amazon/efa/bin/fi_info: 2.1.0`); after the colon comes a space or the end, which
/// is what tells `provider: efa` from `root:x:0:0:root:/root:/bin/bash`.
fn is_fi_info_line(t: &str) -> bool {
    if t.is_empty() || t == "---" || t == "..." || t.starts_with('#') {
        return true;
    }
    let Some((key, rest)) = t.split_once(':') else {
        return false;
    };
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ' ' | '.' | '-' | '/'))
        && (rest.is_empty() || rest.starts_with([' ', '\t']))
}

/// A line for an error message: at most 40 characters, control characters escaped.
fn snippet(line: &str) -> String {
    let mut s: String = line.trim().chars().take(40).collect();
    if line.trim().chars().count() > 40 {
        s.push('…');
    }
    s.escape_debug().to_string()
}

/// [`parse_fi_info`] for text that claims to be fi_info output: an error (one line, without
/// the file name) when it is not.
pub fn parse_fi_info_checked(text: &str) -> Result<FiInfo, FiInfoError> {
    for (i, line) in text.lines().enumerate() {
        if !is_fi_info_line(line.trim()) {
            return Err(FiInfoError::NotKeyValue {
                line: i + 1,
                text: snippet(line),
            });
        }
    }
    let info = parse_fi_info(text);
    if info.entries.is_empty() && text.lines().any(|l| l.trim_end() == "fi_info:") {
        return Err(FiInfoError::Verbose);
    }
    if info.library_version.is_none() && info.entries.is_empty() && !info.no_data {
        return Err(FiInfoError::NothingSaid);
    }
    if let Some(e) = info
        .entries
        .iter()
        .find(|e| e.fabric.is_empty() || e.domain.is_empty())
    {
        return Err(FiInfoError::Incomplete {
            provider: snippet(&e.provider),
            missing: if e.fabric.is_empty() {
                "fabric"
            } else {
                "domain"
            },
        });
    }
    Ok(info)
}

/// Reads and checks a captured fi_info file (`--fi-info FILE`), reading at most
/// [`FI_INFO_MAX_BYTES`]. The error is one line naming the file and what is wrong.
pub fn read_fi_info_file(path: &Path) -> Result<FiInfo, FiInfoError> {
    let read = |source| FiInfoError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(FiInfoError::Directory {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::new();
    file.take(FI_INFO_MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() > FI_INFO_MAX_BYTES {
        return Err(FiInfoError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = String::from_utf8(bytes).map_err(|source| FiInfoError::NotText {
        path: path.to_path_buf(),
        source,
    })?;
    parse_fi_info_checked(&text).map_err(|e| FiInfoError::Content {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

/// `std::io::Error` without the " (os error N)" suffix.
fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// `OFI_VERSION_DEF_PROV` → libfabric version: `201.0` → `2.1.0`, `111.20` → `1.11.2`. Versions
/// before 1.11 printed `2.0`/`3.0` (not derivable): `None`.
pub fn prov_version_to_libfabric(v: &str) -> Option<String> {
    let (a, b) = v.trim().split_once('.')?;
    let a: u32 = a.parse().ok()?;
    let b: u32 = b.parse().ok()?;
    if a < 100 {
        return None;
    }
    Some(format!("{}.{}.{}", a / 100, a % 100, b / 10))
}

/// libfabric release for a `libfabric.so.1.N.0` file.
pub fn libfabric_version_from_soname(file: &str) -> Option<&'static str> {
    let rest = file.strip_prefix("libfabric.so.1.")?;
    let minor: u32 = rest.split('.').next()?.parse().ok()?;
    Some(match minor {
        21 => "1.18",
        22 => "1.19",
        23 => "1.20",
        24 => "1.21",
        25 => "1.22",
        26 => "2.0",
        27 => "2.1",
        28 => "2.2",
        29 => "2.3",
        30 => "2.4",
        32 => "2.7",
        _ => return None,
    })
}

/// libfabric libraries under the installer's directories: (system path, version if known).
pub fn libfabric_files(root: &Root) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for dir in ["/opt/amazon/efa/lib64", "/opt/amazon/efa/lib"] {
        for f in root.list(dir) {
            if f.starts_with("libfabric.so.1.") {
                out.push((
                    format!("{dir}/{f}"),
                    libfabric_version_from_soname(&f).map(str::to_string),
                ));
            }
        }
    }
    out
}

/// Where `fi_info` is on the live system: the EFA installer's copy, then `PATH`.
pub fn find_fi_info(path_env: Option<&str>) -> Option<std::path::PathBuf> {
    let mut cands = vec![std::path::PathBuf::from("/opt/amazon/efa/bin/fi_info")];
    if let Some(p) = path_env {
        cands.extend(std::env::split_paths(p).map(|d| d.join("fi_info")));
    }
    cands.into_iter().find(|c| c.is_file())
}

/// Run `fi_info --version` and `fi_info -p efa` (each bounded by `timeout`) and parse both.
/// Errors say what was looked for.
pub fn run_fi_info(
    path_env: Option<&str>,
    timeout: Duration,
) -> Result<(String, FiInfo), FiInfoError> {
    let exe = find_fi_info(path_env).ok_or(FiInfoError::NotFound)?;
    let mut text = run_bounded(&exe, &["--version"], timeout)?;
    text.push('\n');
    text.push_str(&run_bounded(&exe, &["-p", "efa"], timeout)?);
    Ok((exe.to_string_lossy().into_owned(), parse_fi_info(&text)))
}

fn run_bounded(exe: &Path, args: &[&str], timeout: Duration) -> Result<String, FiInfoError> {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| FiInfoError::Spawn {
            exe: exe.to_path_buf(),
            source,
        })?;
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.take(1 << 22).read_to_end(&mut s);
        }
        if let Some(e) = err.as_mut() {
            let _ = e.take(1 << 16).read_to_end(&mut s);
        }
        s
    });
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(FiInfoError::Timeout {
                    exe: exe.to_path_buf(),
                    args: args.join(" "),
                    timeout,
                });
            }
        }
    }
    let bytes = reader.join().unwrap_or_default();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_and_blocks() {
        let t = "/opt/amazon/efa/bin/fi_info: 2.1.0amzn4.0\nlibfabric: 2.1.0amzn4.0\nlibfabric api: 2.1\n\
provider: efa\n    fabric: efa-direct\n    domain: rdmap47s0-rdm\n    version: 201.0\n    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n\
provider: efa\n    fabric: efa\n    domain: rdmap47s0-dgrm\n    version: 201.0\n    type: FI_EP_DGRAM\n    protocol: FI_PROTO_EFA\n";
        let i = parse_fi_info(t);
        assert_eq!(i.library_version.as_deref(), Some("2.1.0amzn4.0"));
        assert_eq!(i.api_version.as_deref(), Some("2.1"));
        assert_eq!(i.entries.len(), 2);
        assert_eq!(i.entries[0].fabric, "efa-direct");
        assert_eq!(i.entries[1].ep_type.as_deref(), Some("FI_EP_DGRAM"));
        assert!(!i.no_data);
        assert!(parse_fi_info("fi_getinfo: -61 (No data available)\n").no_data);
        assert_eq!(
            prov_version_to_libfabric("111.20").as_deref(),
            Some("1.11.2")
        );
        assert_eq!(prov_version_to_libfabric("2.0"), None);
        assert_eq!(
            libfabric_version_from_soname("libfabric.so.1.25.0"),
            Some("1.22")
        );
        assert_eq!(libfabric_version_from_soname("libfabric.so.1"), None);
    }

    #[test]
    fn checked_parse_accepts_fi_info_and_refuses_other_text() {
        let good = "/opt/amazon/efa/bin/fi_info: 2.1.0amzn4.0\nlibfabric: 2.1.0amzn4.0\nlibfabric api: 2.1\n\
provider: efa\n    fabric: efa-direct\n    domain: rdmap47s0-rdm\n    version: 201.0\n    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n";
        assert_eq!(parse_fi_info_checked(good).unwrap(), parse_fi_info(good));
        assert!(
            parse_fi_info_checked("fi_getinfo: -61 (No data available)\n")
                .unwrap()
                .no_data
        );
        // `fi_info -v` shape: nested keys, empty values, YAML markers.
        let verbose = "---\nfi_info:\n    caps: [ FI_MSG, FI_RMA ]\n    src_addr: fi_sockaddr_in://127.0.0.1:0\n\
    fabric_attr:\n        name: 127.0.0.1/32\n        prov_name: tcp;ofi_rxm\n...\n\
provider: tcp;ofi_rxm\n    fabric: 127.0.0.1/32\n    domain: lo\n";
        assert_eq!(parse_fi_info_checked(verbose).unwrap().entries.len(), 1);
        let only_verbose = verbose.split("provider:").next().unwrap();
        let e = parse_fi_info_checked(only_verbose).unwrap_err().to_string();
        assert!(e.contains("`fi_info -v` output"), "{e}");

        let passwd =
            "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n";
        let e = parse_fi_info_checked(passwd).unwrap_err().to_string();
        assert!(
            e.starts_with("not fi_info output: line 1 `root:x:0:0:root:/root:/bin/bash`"),
            "{e}"
        );
        for bad in ["", "\n\n", "# only a comment\n", "name: value\n"] {
            let e = parse_fi_info_checked(bad).unwrap_err().to_string();
            assert!(e.contains("no `libfabric:` version line"), "{bad:?}: {e}");
        }
        let e = parse_fi_info_checked("libfabric: 1.2\nhello world\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2 `hello world`"), "{e}");
        let e = parse_fi_info_checked("provider: efa\n    fabric: efa\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("has no `domain:`"), "{e}");
        let long = format!("{}\n", "x".repeat(100));
        let e = parse_fi_info_checked(&long).unwrap_err().to_string();
        assert!(e.len() < 120 && e.contains('…'), "{e}");
        let e = parse_fi_info_checked("a\u{1b}[31m\n")
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
    }

    #[test]
    fn fi_info_files_are_read_bounded_and_checked() {
        let dir = std::env::temp_dir().join(format!("efabench-fi-info-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = read_fi_info_file(Path::new("/etc/passwd"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/etc/passwd: not fi_info output: line 1"),
            "{e}"
        );
        let e = read_fi_info_file(&dir).unwrap_err().to_string();
        assert!(e.ends_with("is a directory"), "{e}");
        let e = read_fi_info_file(&dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("missing: No such file or directory"), "{e}");
        let e = read_fi_info_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "/dev/zero is larger than 4 MiB: not fi_info output");
        let bin = dir.join("bin");
        std::fs::write(&bin, [b'a', 0xff, 0xfe]).unwrap();
        assert!(read_fi_info_file(&bin)
            .unwrap_err()
            .to_string()
            .contains("not text"));
        let ok = dir.join("ok");
        std::fs::write(&ok, "libfabric: 1.17.0\nlibfabric api: 1.17\n").unwrap();
        assert_eq!(
            read_fi_info_file(&ok).unwrap().library_version.as_deref(),
            Some("1.17.0")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
