//! efabench-pmix: the few PMIx client calls a rank needs to learn where rank 0 listens, with
//! `libpmix.so.2` loaded at run time.
//!
//! Why PMIx: `mpirun` (Open MPI 5 / PRRTE) and `srun --mpi=pmix` run a PMIx server next to every
//! rank, and its key-value store is how MPI libraries exchange addresses. Rank 0 puts
//! `host:port` under a key, all ranks fence, the others get it: no `-x MASTER_ADDR` needed, and
//! no MPI linked at build time. The library comes from the launcher's own installation
//! (`PMIX_PREFIX`/`OPAL_PREFIX`, which Open MPI exports to its ranks), or from the loader's path.
//!
//! This crate is an FFI surface: the `unsafe` blocks are here and only here, each with its
//! SAFETY comment; the API above them is safe. Struct layouts are those of PMIx v4/v5
//! (`pmix_common.h`), which kept v2's prefix: `pmix_proc_t` is a 256-byte namespace and a
//! `u32` rank; `pmix_value_t` is a `u16` type followed by an 8-byte-aligned union whose `string`
//! member is a `char *`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// `PMIX_MAX_NSLEN + 1`.
const NSPACE_LEN: usize = 256;
const PMIX_SUCCESS: c_int = 0;
/// `pmix_scope_t` `PMIX_GLOBAL`: visible to processes on every node.
const PMIX_GLOBAL: u8 = 3;
/// `pmix_data_type_t` `PMIX_STRING`.
const PMIX_STRING: u16 = 3;

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct PmixProc {
    nspace: [c_char; NSPACE_LEN],
    rank: u32,
}

/// `pmix_value_t`: the type tag, then the union (at least as large as the real one, which is
/// 24 bytes in v5; PMIx reads only the member the type names).
#[repr(C)]
struct PmixValue {
    kind: u16,
    data: [u64; 4],
}

type InitFn = unsafe extern "C" fn(*mut PmixProc, *mut c_void, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut PmixValue) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const PmixProc, usize, *const c_void, usize) -> c_int;
type GetFn = unsafe extern "C" fn(
    *const PmixProc,
    *const c_char,
    *const c_void,
    usize,
    *mut *mut PmixValue,
) -> c_int;
type ValueFreeFn = unsafe extern "C" fn(*mut PmixValue, usize);
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

struct Api {
    init: InitFn,
    finalize: FinalizeFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    value_free: Option<ValueFreeFn>,
    error_string: Option<ErrorStringFn>,
}

/// Why a PMIx call did not give an answer; each message is one line for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PmixError {
    /// None of the candidate files could be loaded; `tried` says why for each.
    #[error("no PMIx library could be loaded ({tried}); set EFABENCH_PMIX=/path/to/libpmix.so.2")]
    NoLibrary { tried: String },
    /// `path` loaded but lacks `symbol`.
    #[error("{path} has no {symbol}: not a PMIx client library")]
    NotPmix { path: String, symbol: String },
    /// A PMIx call returned a status other than success (`status` is PMIx's name for it).
    #[error("{call} failed: {status}")]
    Call { call: String, status: String },
    /// A key or value to pass to PMIx holds a NUL byte.
    #[error("a PMIx {what} has a NUL byte")]
    Nul {
        what: &'static str,
        #[source]
        source: std::ffi::NulError,
    },
    /// `PMIx_Get` succeeded but gave no value.
    #[error("PMIx_Get of {key} from rank {rank} returned nothing")]
    NoValue { key: String, rank: u32 },
    /// The value under `key` is not a string.
    #[error("PMIx key {key} of rank {rank} is not a string")]
    NotString { key: String, rank: u32 },
}

/// Whether this process was started by a launcher that runs a PMIx server for it.
pub fn advertised(env: &dyn Fn(&str) -> Option<String>) -> bool {
    [
        "PMIX_SERVER_URI41",
        "PMIX_SERVER_URI4",
        "PMIX_SERVER_URI3",
        "PMIX_SERVER_URI2",
        "PMIX_SERVER_URI21",
    ]
    .iter()
    .any(|k| env(k).is_some_and(|v| !v.is_empty()))
        && env("PMIX_NAMESPACE").is_some_and(|v| !v.is_empty())
}

/// Where `libpmix.so.2` is looked for, in order: `EFABENCH_PMIX` (a file), the launcher's
/// installation (`PMIX_PREFIX`, `OPAL_PREFIX`: `lib`, `lib64`, `lib/openmpi`), then the dynamic
/// loader's own search (`libpmix.so.2`, `libpmix.so`).
pub fn candidates(env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = env("EFABENCH_PMIX").filter(|p| !p.is_empty()) {
        out.push(p);
    }
    for var in ["PMIX_PREFIX", "OPAL_PREFIX"] {
        if let Some(prefix) = env(var).filter(|p| !p.is_empty()) {
            for sub in ["lib", "lib64", "lib/openmpi"] {
                let p = format!("{}/{sub}/libpmix.so.2", prefix.trim_end_matches('/'));
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    out.push("libpmix.so.2".into());
    out.push("libpmix.so".into());
    out
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a thread-local NUL-terminated message, read at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-NULL dlerror results are valid C strings until the next dl* call.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn load(paths: &[String]) -> Result<(Api, String), PmixError> {
    let mut tried = Vec::new();
    for path in paths {
        if path.contains('/') && !std::path::Path::new(path).exists() {
            continue;
        }
        let Ok(c) = CString::new(path.as_str()) else {
            continue;
        };
        // SAFETY: c is a valid C string; dlopen runs the library's constructors, which is what
        // loading PMIx means. The handle is never closed: the functions below stay valid.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            tried.push(format!("{path}: {}", dlerror_text()));
            continue;
        }
        let sym = |name: &str| -> *mut c_void {
            let n = CString::new(name).unwrap_or_default();
            // SAFETY: h is a live handle from dlopen above; n is a valid C string.
            unsafe { libc::dlsym(h, n.as_ptr()) }
        };
        let need = |name: &str| -> Result<*mut c_void, PmixError> {
            let p = sym(name);
            if p.is_null() {
                Err(PmixError::NotPmix {
                    path: path.clone(),
                    symbol: name.to_string(),
                })
            } else {
                Ok(p)
            }
        };
        // SAFETY (all transmutes below): each pointer is the address of the PMIx function of
        // that name, whose C signature (PMIx standard v4/v5) is the fn type it is cast to.
        let api = unsafe {
            Api {
                init: std::mem::transmute::<*mut c_void, InitFn>(need("PMIx_Init")?),
                finalize: std::mem::transmute::<*mut c_void, FinalizeFn>(need("PMIx_Finalize")?),
                put: std::mem::transmute::<*mut c_void, PutFn>(need("PMIx_Put")?),
                commit: std::mem::transmute::<*mut c_void, CommitFn>(need("PMIx_Commit")?),
                fence: std::mem::transmute::<*mut c_void, FenceFn>(need("PMIx_Fence")?),
                get: std::mem::transmute::<*mut c_void, GetFn>(need("PMIx_Get")?),
                value_free: {
                    let p = sym("PMIx_Value_free");
                    (!p.is_null()).then(|| std::mem::transmute::<*mut c_void, ValueFreeFn>(p))
                },
                error_string: {
                    let p = sym("PMIx_Error_string");
                    (!p.is_null()).then(|| std::mem::transmute::<*mut c_void, ErrorStringFn>(p))
                },
            }
        };
        return Ok((api, path.clone()));
    }
    Err(PmixError::NoLibrary {
        tried: if tried.is_empty() {
            "none of the candidate files exists".to_string()
        } else {
            tried.join("; ")
        },
    })
}

/// A PMIx client session: initialised on creation, finalised on drop.
pub struct Client {
    api: Api,
    me: PmixProc,
    library: String,
}

impl Client {
    /// Load the library (see [`candidates`]) and connect to the launcher's PMIx server.
    pub fn connect(env: &dyn Fn(&str) -> Option<String>) -> Result<Client, PmixError> {
        let (api, library) = load(&candidates(env))?;
        let mut me = PmixProc {
            nspace: [0; NSPACE_LEN],
            rank: 0,
        };
        // SAFETY: me is a writable pmix_proc_t; no info array is passed (NULL, 0).
        let rc = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
        let c = Client { api, me, library };
        if rc != PMIX_SUCCESS {
            let msg = c.status(rc);
            // Nothing to finalise after a failed init.
            std::mem::forget(c);
            return Err(PmixError::Call {
                call: "PMIx_Init".into(),
                status: msg,
            });
        }
        Ok(c)
    }

    /// The library file that was loaded.
    pub fn library(&self) -> &str {
        &self.library
    }

    /// This process's rank in its namespace.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// This process's namespace (the job).
    pub fn namespace(&self) -> String {
        // SAFETY: PMIx_Init wrote a NUL-terminated name into the zeroed 256-byte array, and its
        // last byte is never written (names are at most 255 bytes).
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    fn status(&self, rc: c_int) -> String {
        match self.api.error_string {
            // SAFETY: PMIx_Error_string returns a static C string for any status.
            Some(f) => {
                let s = unsafe { f(rc) };
                if s.is_null() {
                    format!("status {rc}")
                } else {
                    // SAFETY: non-NULL, static and NUL-terminated (see above).
                    format!("{} ({rc})", unsafe { CStr::from_ptr(s) }.to_string_lossy())
                }
            }
            None => format!("status {rc}"),
        }
    }

    fn check(&self, what: &str, rc: c_int) -> Result<(), PmixError> {
        if rc == PMIX_SUCCESS {
            Ok(())
        } else {
            Err(PmixError::Call {
                call: what.to_string(),
                status: self.status(rc),
            })
        }
    }

    /// Publish `key = value` to every node (`PMIX_GLOBAL`) and commit it.
    pub fn put(&self, key: &str, value: &str) -> Result<(), PmixError> {
        let k = CString::new(key).map_err(|source| PmixError::Nul {
            what: "key",
            source,
        })?;
        let v = CString::new(value).map_err(|source| PmixError::Nul {
            what: "value",
            source,
        })?;
        let mut val = PmixValue {
            kind: PMIX_STRING,
            data: [v.as_ptr() as u64, 0, 0, 0],
        };
        // SAFETY: k and val (whose string member points at v) live across the call; PMIx_Put
        // copies the value.
        let rc = unsafe { (self.api.put)(PMIX_GLOBAL, k.as_ptr(), &mut val) };
        self.check("PMIx_Put", rc)?;
        // SAFETY: no arguments.
        let rc = unsafe { (self.api.commit)() };
        self.check("PMIx_Commit", rc)
    }

    /// Wait until every process of this namespace has reached the fence.
    pub fn fence(&self) -> Result<(), PmixError> {
        // SAFETY: NULL procs means "all of my namespace"; no info array.
        let rc = unsafe { (self.api.fence)(std::ptr::null(), 0, std::ptr::null(), 0) };
        self.check("PMIx_Fence", rc)
    }

    /// The string `key` that process `rank` of this namespace put.
    pub fn get(&self, rank: u32, key: &str) -> Result<String, PmixError> {
        let k = CString::new(key).map_err(|source| PmixError::Nul {
            what: "key",
            source,
        })?;
        let who = PmixProc {
            nspace: self.me.nspace,
            rank,
        };
        let mut out: *mut PmixValue = std::ptr::null_mut();
        // SAFETY: who and k live across the call; PMIx allocates *out on success.
        let rc = unsafe { (self.api.get)(&who, k.as_ptr(), std::ptr::null(), 0, &mut out) };
        self.check(&format!("PMIx_Get of {key} from rank {rank}"), rc)?;
        if out.is_null() {
            return Err(PmixError::NoValue {
                key: key.to_string(),
                rank,
            });
        }
        // SAFETY: out points at the pmix_value_t PMIx allocated; its type says which union
        // member is valid, and a string member is NULL or a NUL-terminated string it owns.
        let text = unsafe {
            let v = &*out;
            let p = v.data[0] as *const c_char;
            (v.kind == PMIX_STRING && !p.is_null())
                .then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        if let Some(free) = self.api.value_free {
            // SAFETY: out came from PMIx_Get and is released once, with PMIx's own function.
            unsafe { free(out, 1) };
        }
        text.ok_or_else(|| PmixError::NotString {
            key: key.to_string(),
            rank,
        })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: this session was initialised; no info array.
        unsafe { (self.api.finalize)(std::ptr::null(), 0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn layouts_match_pmix_common_h() {
        assert_eq!(std::mem::size_of::<PmixProc>(), 260);
        assert_eq!(std::mem::offset_of!(PmixValue, data), 8);
    }

    #[test]
    fn advertised_needs_a_server_and_a_namespace() {
        assert!(advertised(&env(&[
            ("PMIX_SERVER_URI41", "x;tcp4://127.0.0.1:1"),
            ("PMIX_NAMESPACE", "j@1")
        ])));
        assert!(!advertised(&env(&[("PMIX_NAMESPACE", "j@1")])));
        assert!(!advertised(&env(&[("PMIX_SERVER_URI2", "x")])));
        assert!(!advertised(&env(&[])));
    }

    #[test]
    fn candidates_start_with_the_override_and_the_launchers_prefix() {
        let c = candidates(&env(&[
            ("EFABENCH_PMIX", "/x/libpmix.so.2"),
            ("PMIX_PREFIX", "/opt/v/"),
        ]));
        assert_eq!(c[0], "/x/libpmix.so.2");
        assert!(c.contains(&"/opt/v/lib/openmpi/libpmix.so.2".to_string()));
        assert_eq!(c.last().unwrap(), "libpmix.so");
    }

    #[test]
    fn a_missing_library_is_an_error_naming_the_fix() {
        let e = load(&["/nonexistent/libpmix.so.2".into()]).err().unwrap();
        assert!(matches!(e, PmixError::NoLibrary { .. }), "{e:?}");
        assert!(e.to_string().contains("EFABENCH_PMIX"), "{e}");
    }
}
