//! CUDA C kernels kept in `crates/gpu/kernels/`, compiled at run time with NVRTC.
//!
//! Sources are embedded in the binary (`include_str!`), so nothing CUDA-related is needed to
//! build. Each source is compiled for the device's own architecture (`compute_XY` PTX, which the
//! driver turns into machine code for that chip), once per process (memory cache), and, unless
//! `EFABENCH_KERNEL_CACHE=0`, kept on disk under `$XDG_CACHE_HOME/efabench` (or
//! `~/.cache/efabench`) under a name made of a hash of the source and the architecture, so a
//! second run skips NVRTC.

use crate::driver::{check, Gpu, Kernel};
use crate::error::GpuError;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

const PATTERN_CUH: &str = include_str!("../kernels/pattern.cuh");

/// The kernel sources of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// `buffer.cu`: efa_fill, efa_mismatches.
    Buffer,
    /// `ipc.cu`: efa_push, efa_pull, efa_copy, efa_chase_init, efa_chase.
    Ipc,
    /// `ipc_tma.cu`: efa_tma_push (sm_90 and newer).
    IpcTma,
    /// `queue.cu`: efa_queue_fifo, efa_queue_vyukov, efa_queue_floor (`efabench queue`).
    Queue,
    /// `proxy.cu`: efa_proxy_puts, efa_proxy_ping (`efabench proxy`).
    Proxy,
    /// `ep.cu`: efa_ep_begin, efa_ep_puts, efa_ep_signal, efa_ep_reduce (`efabench ep`).
    Ep,
}

impl Source {
    pub fn file(self) -> &'static str {
        match self {
            Source::Buffer => "buffer.cu",
            Source::Ipc => "ipc.cu",
            Source::IpcTma => "ipc_tma.cu",
            Source::Queue => "queue.cu",
            Source::Proxy => "proxy.cu",
            Source::Ep => "ep.cu",
        }
    }
    fn raw(self) -> &'static str {
        match self {
            Source::Buffer => include_str!("../kernels/buffer.cu"),
            Source::Ipc => include_str!("../kernels/ipc.cu"),
            Source::IpcTma => include_str!("../kernels/ipc_tma.cu"),
            Source::Queue => include_str!("../kernels/queue.cu"),
            Source::Proxy => include_str!("../kernels/proxy.cu"),
            Source::Ep => include_str!("../kernels/ep.cu"),
        }
    }
    /// The lowest compute capability the source compiles for.
    pub fn min_cc(self) -> (u32, u32) {
        match self {
            Source::IpcTma => (9, 0),
            _ => (7, 0),
        }
    }
    /// The source with `#include "pattern.cuh"` replaced by the header (NVRTC then needs no
    /// include path).
    pub fn text(self) -> String {
        self.raw().replace("#include \"pattern.cuh\"", PATTERN_CUH)
    }
}

/// FNV-1a, 64 bits: stable across Rust versions, unlike `DefaultHasher`, so it can name files.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Where compiled PTX is kept between runs, or `None` when the disk cache is off.
pub fn cache_dir() -> Option<PathBuf> {
    if std::env::var("EFABENCH_KERNEL_CACHE").is_ok_and(|v| v == "0") {
        return None;
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("efabench"))
}

/// The file name of one compiled source for one architecture.
pub fn cache_file_name(src: &str, arch: &str) -> String {
    format!("{:016x}-{arch}.ptx", fnv1a(src.as_bytes()))
}

/// Compiles (or finds in a cache) the PTX of `source` for `arch` (`compute_90`).
pub fn ptx(source: Source, arch: &str) -> Result<String, GpuError> {
    static MEM: OnceLock<Mutex<HashMap<(Source, String), String>>> = OnceLock::new();
    let mem = MEM.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (source, arch.to_string());
    if let Some(p) = mem.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(p.clone());
    }
    let text = source.text();
    let file = cache_dir().map(|d| d.join(cache_file_name(&text, arch)));
    if let Some(p) = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()) {
        if p.contains(".entry") {
            mem.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, p.clone());
            return Ok(p);
        }
    }
    let p = compile(source.file(), &text, arch)?;
    if let Some(f) = file {
        // Best effort: a read-only home only costs a recompile next time.
        if let Some(dir) = f.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = f.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &p).is_ok() {
            let _ = std::fs::rename(&tmp, &f);
        }
    }
    mem.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, p.clone());
    Ok(p)
}

fn compile(name: &str, text: &str, arch: &str) -> Result<String, GpuError> {
    // SAFETY: only tries to dlopen the NVRTC library names; no NVRTC state is touched.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(GpuError::NoNvrtc);
    }
    let opts = cudarc::nvrtc::CompileOptions {
        options: vec![
            format!("--gpu-architecture={arch}"),
            "--std=c++17".to_string(),
            "-default-device".to_string(),
        ],
        name: Some(name.to_string()),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(text, opts) {
        Ok(p) => Ok(p.to_src()),
        Err(cudarc::nvrtc::CompileError::CompileError { log, .. }) => Err(GpuError::Compile {
            kernel: name.to_string(),
            log: log.to_string_lossy().into_owned(),
        }),
        Err(e) => Err(GpuError::Compile {
            kernel: name.to_string(),
            log: format!("{e:?}"),
        }),
    }
}

struct Module(sys::CUmodule);
// SAFETY: modules are loaded once and never unloaded; the handle is only used under the mutex
// below and with its context current.
unsafe impl Send for Module {}

/// The kernel `name` of `source`, loaded into `gpu`'s context (compiled on first use).
pub fn kernel(gpu: &Arc<Gpu>, source: Source, name: &str) -> Result<Kernel, GpuError> {
    static MODS: OnceLock<Mutex<HashMap<(i32, Source), Module>>> = OnceLock::new();
    if gpu.cc < source.min_cc() {
        return Err(GpuError::Invalid(format!(
            "{} needs compute capability {}.{} or newer; GPU {} ({}) is {}.{}",
            source.file(),
            source.min_cc().0,
            source.min_cc().1,
            gpu.ordinal,
            gpu.name,
            gpu.cc.0,
            gpu.cc.1
        )));
    }
    let code = ptx(source, &gpu.arch())?;
    let mods = MODS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut mods = mods.lock().unwrap_or_else(|p| p.into_inner());
    gpu.bind()?;
    let module = match mods.get(&(gpu.ordinal, source)) {
        Some(m) => m.0,
        None => {
            let c = std::ffi::CString::new(code).map_err(|_| GpuError::Compile {
                kernel: source.file().to_string(),
                log: "PTX contains a NUL byte".to_string(),
            })?;
            let mut m: sys::CUmodule = std::ptr::null_mut();
            // SAFETY: c is a NUL-terminated PTX image that outlives the call; m is an out pointer.
            check("cuModuleLoadData", unsafe {
                sys::cuModuleLoadData(&mut m, c.as_ptr().cast())
            })?;
            mods.insert((gpu.ordinal, source), Module(m));
            m
        }
    };
    let cname = std::ffi::CString::new(name)
        .map_err(|_| GpuError::Invalid(format!("kernel name {name:?} contains a NUL byte")))?;
    let mut func: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: module is loaded in this (current) context; cname is NUL-terminated.
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut func, module, cname.as_ptr())
    })?;
    Ok(Kernel {
        gpu: gpu.clone(),
        func,
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_are_expanded_and_the_constants_match_the_rust_pattern() {
        let rust = include_str!("../../bench/src/pattern.rs").replace('_', "");
        for s in [Source::Buffer, Source::Ipc, Source::IpcTma, Source::Queue] {
            let t = s.text();
            assert!(!t.contains("#include"), "{} still has an include", s.file());
            assert!(t.contains("efa_word"), "{}", s.file());
        }
        // Every 64-bit constant of pattern.cuh appears (digit for digit) in pattern.rs.
        for c in [
            "BF58476D1CE4E5B9",
            "94D049BB133D11EB",
            "00000100000001B3",
            "EFA0BE4C",
            "9E3779B97F4A7C15",
            "5EED0FEFA0BE4C00",
        ] {
            assert!(PATTERN_CUH.contains(c), "pattern.cuh lacks {c}");
            assert!(rust.contains(c), "pattern.rs lacks {c}");
        }
        for shift in ["30", "27", "31", "48", "32", "<< 8"] {
            assert!(
                PATTERN_CUH.contains(shift) && rust.contains(shift),
                "shift {shift}"
            );
        }
    }

    #[test]
    fn cache_names_change_with_source_and_arch() {
        let a = cache_file_name("x", "compute_90");
        assert_ne!(a, cache_file_name("y", "compute_90"));
        assert_ne!(a, cache_file_name("x", "compute_80"));
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
