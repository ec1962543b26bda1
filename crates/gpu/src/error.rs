//! The one error type of the gpu layer.
//!
//! Every message is one line that says what went wrong and, where there is one, how to fix it.
//! A machine without a CUDA driver gets [`GpuError::NoDriver`] from every call that needs one,
//! never a panic (cudarc's own loader panics when `libcuda.so.1` is missing, so the crate checks
//! first).

use std::sync::Arc;

/// What went wrong in a CUDA, NVRTC or NVML call. The variants hold data (the driver's result
/// code by name, the compiler's log) so that one failed `cuInit` can be cached and returned to
/// every later caller.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GpuError {
    /// `libcuda.so.1` could not be loaded.
    #[error(
        "no CUDA driver was found (libcuda.so.1 not loadable): run on a machine with an NVIDIA \
         GPU and driver, or add the driver's directory to LD_LIBRARY_PATH"
    )]
    NoDriver,
    /// NVRTC (`libnvrtc.so.*`) could not be loaded.
    #[error(
        "NVRTC was not found (libnvrtc.so.13 not loadable): install the CUDA toolkit or the \
         nvidia-cuda-nvrtc package and add its lib directory to LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    /// A CUDA driver call failed.
    #[error("CUDA call {call} failed: {code}")]
    Cuda { call: &'static str, code: String },
    /// A kernel failed to compile.
    #[error(
        "kernel source {kernel} failed to compile with NVRTC: {}",
        first_error_line(.log)
    )]
    Compile { kernel: String, log: String },
    /// NVML could not be loaded (`hint` says what to install) or a query (`what`) failed.
    #[error("NVML: {what}: {source}{hint}")]
    Nvml {
        what: String,
        #[source]
        source: Arc<nvml_wrapper::error::NvmlError>,
        hint: &'static str,
    },
    /// Bad input (a device ordinal, a size, a kind name).
    #[error("{0}")]
    Invalid(String),
    /// Plain host memory (`--mem host|huge`) could not be allocated: huge pages turned off, or
    /// the allocation itself failed.
    #[error(transparent)]
    HostAlloc(efabench_fabric::Error),
}

impl GpuError {
    /// True for the "this machine has no CUDA driver" error, which callers turn into exit 2.
    pub fn is_no_driver(&self) -> bool {
        matches!(self, GpuError::NoDriver)
    }

    /// True when the fault is the machine's or the caller's, not the run's: no driver or NVRTC,
    /// or bad input. The CLI exits 2 for these.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            GpuError::NoDriver | GpuError::NoNvrtc | GpuError::Invalid(_) | GpuError::HostAlloc(_)
        )
    }
}

impl GpuError {
    /// An NVML call `what` failed with `source`.
    pub fn nvml(what: impl Into<String>, source: nvml_wrapper::error::NvmlError) -> Self {
        GpuError::Nvml {
            what: what.into(),
            source: Arc::new(source),
            hint: "",
        }
    }
}

/// Two errors are equal when they are the same variant and say the same thing (NVML's own error
/// cannot be compared, its words can).
impl PartialEq for GpuError {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
    }
}

impl Eq for GpuError {}

/// The line of an NVRTC log that names the error (the whole log, trimmed, when none does).
fn first_error_line(log: &str) -> &str {
    log.lines()
        .find(|l| l.contains("error"))
        .unwrap_or(log.trim())
}
