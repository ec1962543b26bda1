//! The one error type of the gpu layer.
//!
//! Every message is one line that says what went wrong and, where there is one, how to fix it.
//! A machine without a CUDA driver gets [`GpuError::NoDriver`] from every call that needs one,
//! never a panic (cudarc's own loader panics when `libcuda.so.1` is missing, so the crate checks
//! first).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuError {
    /// `libcuda.so.1` could not be loaded.
    NoDriver,
    /// NVRTC (`libnvrtc.so.*`) could not be loaded.
    NoNvrtc,
    /// A CUDA driver call failed.
    Cuda { call: &'static str, code: String },
    /// A kernel failed to compile.
    Compile { kernel: String, log: String },
    /// NVML could not be loaded or a query failed.
    Nvml(String),
    /// Bad input (a device ordinal, a size, a kind name).
    Invalid(String),
}

impl GpuError {
    /// True for the "this machine has no CUDA driver" error, which callers turn into exit 2.
    pub fn is_no_driver(&self) -> bool {
        matches!(self, GpuError::NoDriver)
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NoDriver => f.write_str(
                "no CUDA driver was found (libcuda.so.1 not loadable): run on a machine with an \
                 NVIDIA GPU and driver, or add the driver's directory to LD_LIBRARY_PATH",
            ),
            GpuError::NoNvrtc => f.write_str(
                "NVRTC was not found (libnvrtc.so.13 not loadable): install the CUDA toolkit or \
                 the nvidia-cuda-nvrtc package and add its lib directory to LD_LIBRARY_PATH",
            ),
            GpuError::Cuda { call, code } => write!(f, "CUDA call {call} failed: {code}"),
            GpuError::Compile { kernel, log } => {
                let first = log
                    .lines()
                    .find(|l| l.contains("error"))
                    .unwrap_or(log.trim());
                write!(
                    f,
                    "kernel source {kernel} failed to compile with NVRTC: {first}"
                )
            }
            GpuError::Nvml(m) => write!(f, "NVML: {m}"),
            GpuError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for GpuError {}

impl From<GpuError> for String {
    fn from(e: GpuError) -> String {
        e.to_string()
    }
}
