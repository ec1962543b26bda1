//! Finding and loading `libfabric.so.1` at run time.
//!
//! The binary has no link-time dependency on libfabric (`ldd` lists none), so one build runs
//! against Debian's 1.17, the PyPI wheel's 2.5.1 and the AWS EFA installer's 2.x. Each exported
//! function is resolved with `dlvsym` at the symbol version whose struct layouts match
//! [`crate::bindings`]; a library too old to have that version is reported as such.
//!
//! Search order: an explicit path (the CLI's `--libfabric`), then `$EFABENCH_LIBFABRIC`; when
//! either is given, it is the only candidate (silently falling back to another library would
//! measure something the user did not ask for). Otherwise `/opt/amazon/efa/lib64/libfabric.so.1`,
//! `/opt/amazon/efa/lib/libfabric.so.1`, then `libfabric.so.1` through the system loader.
//! The first library that loads is kept for the life of the process and never unloaded, which
//! is what lets every other type hold plain function pointers.

use core::ffi::{c_char, c_int, c_void};
use std::ffi::{CStr, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::bindings::{fi_fabric_attr, fi_info, fid_fabric};

/// Environment variable naming the libfabric shared object to load.
pub const ENV_VAR: &str = "EFABENCH_LIBFABRIC";

/// Paths tried, in order, when neither an explicit path nor `EFABENCH_LIBFABRIC` is given.
pub const DEFAULT_CANDIDATES: [&str; 3] = [
    "/opt/amazon/efa/lib64/libfabric.so.1",
    "/opt/amazon/efa/lib/libfabric.so.1",
    "libfabric.so.1",
];

/// `int fi_getinfo(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **)`
pub type FiGetinfo = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const fi_info,
    *mut *mut fi_info,
) -> c_int;
/// `void fi_freeinfo(struct fi_info *)`
pub type FiFreeinfo = unsafe extern "C" fn(*mut fi_info);
/// `struct fi_info *fi_dupinfo(const struct fi_info *)`
pub type FiDupinfo = unsafe extern "C" fn(*const fi_info) -> *mut fi_info;
/// `int fi_fabric(struct fi_fabric_attr *, struct fid_fabric **, void *)`
pub type FiFabric =
    unsafe extern "C" fn(*mut fi_fabric_attr, *mut *mut fid_fabric, *mut c_void) -> c_int;
/// `uint32_t fi_version(void)`
pub type FiVersion = unsafe extern "C" fn() -> u32;
/// `const char *fi_strerror(int)`
pub type FiStrerror = unsafe extern "C" fn(c_int) -> *const c_char;
/// `char *fi_tostr(const void *, enum fi_type)`
pub type FiTostr = unsafe extern "C" fn(*const c_void, u32) -> *mut c_char;

/// The loaded library: its exported functions, pinned to the bindings' symbol versions.
pub struct Library {
    /// Path of the shared object actually mapped (resolved through `dladdr`).
    pub path: PathBuf,
    /// `fi_version()` of the library, `FI_VERSION(major, minor)`.
    pub version: u32,
    pub fi_getinfo: FiGetinfo,
    pub fi_freeinfo: FiFreeinfo,
    pub fi_dupinfo: FiDupinfo,
    pub fi_fabric: FiFabric,
    pub fi_version: FiVersion,
    pub fi_strerror: FiStrerror,
    pub fi_tostr: FiTostr,
}

impl fmt::Debug for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.path)
            .field("version", &self.version_string())
            .finish()
    }
}

impl Library {
    /// `"major.minor"` of `fi_version()`.
    pub fn version_string(&self) -> String {
        format!(
            "{}.{}",
            crate::fi_major(self.version),
            crate::fi_minor(self.version)
        )
    }

    /// The API version to pass to `fi_getinfo`: the newer of what both the library and the
    /// bindings support.
    pub fn api_version(&self) -> u32 {
        self.version.min(crate::BINDINGS_API_VERSION)
    }

    /// `fi_strerror(errno)` as an owned string (errno positive, as libfabric returns `-errno`).
    pub fn strerror(&self, errno: i32) -> String {
        // SAFETY: fi_strerror accepts any int and returns a pointer to a static NUL-terminated
        // string (or NULL on some builds for unknown codes, which we check).
        let p = unsafe { (self.fi_strerror)(errno) };
        if p.is_null() {
            return format!("error {errno}");
        }
        // SAFETY: non-null, NUL-terminated, static lifetime per the libfabric contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// One path that did not load, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub path: String,
    pub why: OpenFailure,
}

/// Why one candidate path did not give a usable libfabric.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenFailure {
    #[error("no such file")]
    NoSuchFile,
    #[error("path contains a NUL byte")]
    NulInPath,
    /// The dynamic loader refused it; its reason, without the path it repeats.
    #[error("{0}")]
    Loader(String),
    /// It loaded but lacks a symbol every libfabric since 1.5 has.
    #[error("has no {name}@{version}: libfabric older than 1.5 or not libfabric")]
    MissingSymbol {
        name: &'static str,
        version: &'static str,
    },
}

/// No usable libfabric was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    pub attempts: Vec<Attempt>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "libfabric could not be loaded: tried ")?;
        for (i, a) in self.attempts.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{} ({})", a.path, a.why)?;
        }
        write!(
            f,
            ". Fix: install the AWS EFA installer (/opt/amazon/efa), or the distribution's \
             libfabric (e.g. `apt-get install libfabric1`), or point {ENV_VAR} (or --libfabric) \
             at a libfabric.so.1 of version 1.5 or newer"
        )
    }
}

impl std::error::Error for LoadError {}

static LOADED: OnceLock<Library> = OnceLock::new();
static LOAD_LOCK: Mutex<()> = Mutex::new(());

/// The library loaded earlier by [`load`], if any.
pub fn loaded() -> Option<&'static Library> {
    LOADED.get()
}

/// Loads libfabric once per process (see the module docs for the search order) and returns it.
///
/// Once a library is loaded, later calls return it whatever path they name: the process keeps
/// one libfabric. A failure is not remembered, so a later call with a better path may succeed.
pub fn load(explicit: Option<&Path>) -> Result<&'static Library, LoadError> {
    if let Some(lib) = LOADED.get() {
        return Ok(lib);
    }
    let _guard = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(lib) = LOADED.get() {
        return Ok(lib);
    }
    let env = std::env::var_os(ENV_VAR).filter(|v| !v.is_empty());
    let candidates: Vec<String> = match (explicit, env) {
        (Some(p), _) => vec![p.to_string_lossy().into_owned()],
        (None, Some(e)) => vec![PathBuf::from(e).to_string_lossy().into_owned()],
        (None, None) => DEFAULT_CANDIDATES.iter().map(|s| s.to_string()).collect(),
    };
    let mut attempts = Vec::new();
    for c in &candidates {
        match open_one(c) {
            Ok(lib) => return Ok(LOADED.get_or_init(|| lib)),
            Err(why) => attempts.push(Attempt {
                path: if c.contains('/') {
                    c.clone()
                } else {
                    format!("{c} via the system loader")
                },
                why,
            }),
        }
    }
    Err(LoadError { attempts })
}

fn dlerror_string() -> String {
    // SAFETY: dlerror returns NULL or a thread-local NUL-terminated message valid until the next
    // dl* call on this thread; we copy it at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dynamic loader error".to_string()
    } else {
        // SAFETY: non-null NUL-terminated string from dlerror, copied immediately.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn open_one(path: &str) -> Result<Library, OpenFailure> {
    if path.contains('/') && !Path::new(path).exists() {
        return Err(OpenFailure::NoSuchFile);
    }
    let cpath = CString::new(path).map_err(|_| OpenFailure::NulInPath)?;
    // SAFETY: cpath is a valid C string; dlopen runs the library's constructors, which is what
    // loading libfabric means. RTLD_LOCAL keeps its symbols out of the global namespace.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        let e = dlerror_string();
        // The loader's message repeats the path; keep only the reason after it.
        let short = e.rsplit(": ").next().unwrap_or(&e).to_string();
        return Err(OpenFailure::Loader(short));
    }
    let sym = |name: &'static str, version: &'static str| -> Result<*mut c_void, OpenFailure> {
        let n = CString::new(name).expect("static symbol name");
        let v = CString::new(version).expect("static version name");
        // SAFETY: handle is a live dlopen handle (never closed on success), n and v are valid C
        // strings.
        let p = unsafe { libc::dlvsym(handle, n.as_ptr(), v.as_ptr()) };
        if p.is_null() {
            Err(OpenFailure::MissingSymbol { name, version })
        } else {
            Ok(p)
        }
    };
    let resolved = (|| {
        Ok::<_, OpenFailure>((
            sym("fi_getinfo", "FABRIC_1.3")?,
            sym("fi_freeinfo", "FABRIC_1.3")?,
            sym("fi_dupinfo", "FABRIC_1.3")?,
            sym("fi_fabric", "FABRIC_1.1")?,
            sym("fi_version", "FABRIC_1.0")?,
            sym("fi_strerror", "FABRIC_1.0")?,
            sym("fi_tostr", "FABRIC_1.0")?,
        ))
    })();
    let (getinfo, freeinfo, dupinfo, fabric, version, strerror, tostr) = match resolved {
        Ok(v) => v,
        Err(e) => {
            // SAFETY: handle came from dlopen above and nothing from it is kept.
            unsafe { libc::dlclose(handle) };
            return Err(e);
        }
    };
    // SAFETY (all transmutes below): each pointer was resolved by dlvsym at the symbol version
    // whose C prototype the target type spells out (libfabric's fabric.h for ABI 1.3 / 1.1 /
    // 1.0); function and data pointers have the same size on every platform libfabric supports.
    let lib = unsafe {
        Library {
            path: mapped_path(getinfo).unwrap_or_else(|| PathBuf::from(path)),
            version: 0,
            fi_getinfo: core::mem::transmute::<*mut c_void, FiGetinfo>(getinfo),
            fi_freeinfo: core::mem::transmute::<*mut c_void, FiFreeinfo>(freeinfo),
            fi_dupinfo: core::mem::transmute::<*mut c_void, FiDupinfo>(dupinfo),
            fi_fabric: core::mem::transmute::<*mut c_void, FiFabric>(fabric),
            fi_version: core::mem::transmute::<*mut c_void, FiVersion>(version),
            fi_strerror: core::mem::transmute::<*mut c_void, FiStrerror>(strerror),
            fi_tostr: core::mem::transmute::<*mut c_void, FiTostr>(tostr),
        }
    };
    // SAFETY: fi_version takes no arguments and only returns a constant.
    let v = unsafe { (lib.fi_version)() };
    Ok(Library { version: v, ..lib })
}

/// The file that holds `addr` (the real path behind `libfabric.so.1`).
fn mapped_path(addr: *mut c_void) -> Option<PathBuf> {
    // SAFETY: Dl_info is plain data; dladdr only writes into it.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: addr is a symbol address inside a loaded object; info is a valid out-pointer.
    let ok = unsafe { libc::dladdr(addr, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader, valid while the object
    // stays loaded (forever, here); copied at once.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    let p = PathBuf::from(name);
    Some(std::fs::canonicalize(&p).unwrap_or(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_explicit_path_is_one_line_and_says_how_to_fix() {
        // A load that already succeeded in this process would short-circuit; this test process
        // loads nothing else first.
        if loaded().is_some() {
            return;
        }
        let e = load(Some(Path::new("/nonexistent/libfabric.so.1"))).unwrap_err();
        let s = e.to_string();
        assert!(!s.contains('\n'));
        assert!(
            s.contains("/nonexistent/libfabric.so.1 (no such file)"),
            "{s}"
        );
        assert!(s.contains("apt-get install libfabric1"), "{s}");
        assert!(s.contains(ENV_VAR), "{s}");
    }
}
