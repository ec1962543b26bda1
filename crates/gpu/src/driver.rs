//! The CUDA driver surface: loading, contexts, streams, events, kernels and raw memory calls.
//!
//! This is the crate's one FFI module (with `buffer/` and `ipc.rs`, which call the same `sys`
//! functions for what cudarc has no safe wrapper for). It uses cudarc's raw `sys`/`result` layer
//! rather than `CudaContext`, for three reasons: cudarc's loader panics when `libcuda.so.1` is
//! missing (we check [`driver`] first and return [`GpuError::NoDriver`]); its `alloc` takes
//! memory from the stream-ordered pool, which NICs cannot register (we call `cuMemAlloc_v2`);
//! and its event tracking adds work to every launch of a benchmark loop.

use crate::error::GpuError;
use cudarc::driver::{result, sys};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

/// Turns a `CUresult` into `Result`, naming the call.
pub(crate) fn check(call: &'static str, r: sys::CUresult) -> Result<(), GpuError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Cuda {
            call,
            code: format!("{r:?}"),
        })
    }
}

fn from_driver(call: &'static str, e: result::DriverError) -> GpuError {
    GpuError::Cuda {
        call,
        code: format!("{:?}", e.0),
    }
}

/// Loads `libcuda.so.1` and calls `cuInit` once per process; every other function starts here.
pub fn driver() -> Result<(), GpuError> {
    static STATE: OnceLock<Result<(), GpuError>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            // SAFETY: is_culib_present only tries to dlopen the candidate library names and
            // closes them again; it touches no CUDA state.
            if !unsafe { sys::is_culib_present() } {
                return Err(GpuError::NoDriver);
            }
            result::init().map_err(|e| from_driver("cuInit", e))
        })
        .clone()
}

/// Number of CUDA devices visible to this process.
pub fn device_count() -> Result<i32, GpuError> {
    driver()?;
    result::device::get_count().map_err(|e| from_driver("cuDeviceGetCount", e))
}

/// One GPU with its primary context retained for the life of the process.
#[derive(Debug)]
pub struct Gpu {
    pub ordinal: i32,
    pub name: String,
    /// `0000:18:00.0` style (as `cuDeviceGetPCIBusId` prints it).
    pub pci_bus_id: String,
    pub sm_count: u32,
    pub cc: (u32, u32),
    pub total_mem: usize,
    pub dmabuf_supported: bool,
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
}

// SAFETY: a CUcontext handle may be made current on any thread (the driver API is thread-safe);
// the primary context is retained once and never released, so the handle stays valid.
unsafe impl Send for Gpu {}
// SAFETY: as above; Gpu has no interior mutability of its own.
unsafe impl Sync for Gpu {}

impl Gpu {
    /// The device with this ordinal; the same `Arc` for every call with the same ordinal.
    pub fn open(ordinal: i32) -> Result<Arc<Gpu>, GpuError> {
        static OPEN: OnceLock<Mutex<HashMap<i32, Arc<Gpu>>>> = OnceLock::new();
        driver()?;
        let count = device_count()?;
        if ordinal < 0 || ordinal >= count {
            return Err(GpuError::Invalid(format!(
                "GPU {ordinal} does not exist: this machine has {count} CUDA device(s), numbered 0..{}",
                count.max(1) - 1
            )));
        }
        let map = OPEN.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = map.get(&ordinal) {
            return Ok(g.clone());
        }
        let dev = result::device::get(ordinal).map_err(|e| from_driver("cuDeviceGet", e))?;
        // SAFETY: dev came from cuDeviceGet; the retained primary context is never released.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(|e| from_driver("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: ctx is a live primary context.
        unsafe { result::ctx::set_current(ctx) }.map_err(|e| from_driver("cuCtxSetCurrent", e))?;
        let attr = |a: sys::CUdevice_attribute| -> Result<i32, GpuError> {
            // SAFETY: dev is a valid device and a is a valid attribute enum value.
            unsafe { result::device::get_attribute(dev, a) }
                .map_err(|e| from_driver("cuDeviceGetAttribute", e))
        };
        use sys::CUdevice_attribute as A;
        let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32;
        let dmabuf_supported = attr(A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).unwrap_or(0) != 0;
        let name = result::device::get_name(dev).map_err(|e| from_driver("cuDeviceGetName", e))?;
        // SAFETY: dev is valid.
        let total_mem = unsafe { result::device::total_mem(dev) }
            .map_err(|e| from_driver("cuDeviceTotalMem", e))?;
        let mut bus = [0 as std::ffi::c_char; 32];
        // SAFETY: the buffer is 32 bytes and we pass its length; the driver NUL-terminates.
        check("cuDeviceGetPCIBusId", unsafe {
            sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, dev)
        })?;
        // SAFETY: NUL-terminated by the driver within the buffer (zero-initialised).
        let pci_bus_id = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }
            .to_string_lossy()
            .to_lowercase();
        let g = Arc::new(Gpu {
            ordinal,
            name,
            pci_bus_id,
            sm_count,
            cc: (major, minor),
            total_mem,
            dmabuf_supported,
            dev,
            ctx,
        });
        map.insert(ordinal, g.clone());
        Ok(g)
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn bind(&self) -> Result<(), GpuError> {
        // SAFETY: ctx is the retained primary context (never released).
        unsafe { result::ctx::set_current(self.ctx) }.map_err(|e| from_driver("cuCtxSetCurrent", e))
    }

    /// `compute_XY` for NVRTC.
    pub fn arch(&self) -> String {
        format!("compute_{}{}", self.cc.0, self.cc.1)
    }

    /// Free and total device memory in bytes.
    pub fn mem_info(&self) -> Result<(usize, usize), GpuError> {
        self.bind()?;
        result::mem_get_info().map_err(|e| from_driver("cuMemGetInfo", e))
    }

    /// Whether this GPU can map memory of `peer` (NVLink or PCIe peer-to-peer).
    pub fn can_access_peer(&self, peer: &Gpu) -> Result<bool, GpuError> {
        let mut v = 0i32;
        // SAFETY: both devices are valid and v is a valid out pointer.
        check("cuDeviceCanAccessPeer", unsafe {
            sys::cuDeviceCanAccessPeer(&mut v, self.dev, peer.dev)
        })?;
        Ok(v != 0)
    }

    /// One `cuDeviceGetAttribute` value of this GPU.
    pub fn attribute(&self, a: sys::CUdevice_attribute) -> Result<i32, GpuError> {
        // SAFETY: dev is a valid device and a is a valid attribute enum value.
        unsafe { result::device::get_attribute(self.dev, a) }
            .map_err(|e| from_driver("cuDeviceGetAttribute", e))
    }

    /// Blocks until all work on this GPU is done.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.bind()?;
        result::ctx::synchronize().map_err(|e| from_driver("cuCtxSynchronize", e))
    }
}

/// A non-blocking stream on one GPU.
pub struct Stream {
    gpu: Arc<Gpu>,
    raw: sys::CUstream,
}

// SAFETY: CUstream handles may be used from any thread once their context is current; every
// method binds the context first. The stream is destroyed only in Drop.
unsafe impl Send for Stream {}
// SAFETY: as above; the driver serialises work submitted to one stream.
unsafe impl Sync for Stream {}

impl Stream {
    pub fn new(gpu: &Arc<Gpu>) -> Result<Stream, GpuError> {
        gpu.bind()?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| from_driver("cuStreamCreate", e))?;
        Ok(Stream {
            gpu: gpu.clone(),
            raw,
        })
    }
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
    pub(crate) fn raw(&self) -> sys::CUstream {
        self.raw
    }
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.gpu.bind()?;
        // SAFETY: raw is a live stream of this context.
        unsafe { result::stream::synchronize(self.raw) }
            .map_err(|e| from_driver("cuStreamSynchronize", e))
    }

    /// Whether all work submitted to the stream has completed (`cuStreamQuery`), so a caller can
    /// wait with a deadline instead of blocking in `synchronize`.
    pub fn is_idle(&self) -> Result<bool, GpuError> {
        self.gpu.bind()?;
        // SAFETY: raw is a live stream of this context.
        match unsafe { sys::cuStreamQuery(self.raw) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check("cuStreamQuery", r).map(|_| false),
        }
    }

    /// Copies `len` bytes between two device-visible addresses (UVA: local, peer-mapped or
    /// IPC-mapped), on the copy engine, ordered on this stream.
    ///
    /// # Safety
    /// `dst` and `src` must each be valid for `len` bytes until the copy has completed.
    pub unsafe fn copy_async(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        self.gpu.bind()?;
        // SAFETY: the caller guarantees both ranges; raw is a live stream.
        check("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, len, self.raw)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: raw is a live stream owned by this value; errors at teardown are ignored.
            let _ = unsafe { result::stream::destroy(self.raw) };
        }
    }
}

/// A CUDA event with timing enabled.
pub struct Event {
    gpu: Arc<Gpu>,
    raw: sys::CUevent,
}

// SAFETY: event handles are usable from any thread with their context current (bound first).
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    pub fn new(gpu: &Arc<Gpu>) -> Result<Event, GpuError> {
        gpu.bind()?;
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| from_driver("cuEventCreate", e))?;
        Ok(Event {
            gpu: gpu.clone(),
            raw,
        })
    }
    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<(), GpuError> {
        self.gpu.bind()?;
        // SAFETY: both handles are live and belong to the same context.
        unsafe { result::event::record(self.raw, stream.raw()) }
            .map_err(|e| from_driver("cuEventRecord", e))
    }
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.gpu.bind()?;
        // SAFETY: raw is a live event.
        unsafe { result::event::synchronize(self.raw) }
            .map_err(|e| from_driver("cuEventSynchronize", e))
    }
    /// Milliseconds from `self` to `end` (both recorded and complete).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f64, GpuError> {
        self.gpu.bind()?;
        // SAFETY: both are live events created with timing enabled.
        unsafe { result::event::elapsed(self.raw, end.raw) }
            .map(f64::from)
            .map_err(|e| from_driver("cuEventElapsedTime", e))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: raw is a live event owned by this value.
            let _ = unsafe { result::event::destroy(self.raw) };
        }
    }
}

/// A kernel of a loaded module (modules are cached for the life of the process).
#[derive(Clone)]
pub struct Kernel {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) func: sys::CUfunction,
    pub name: String,
}

// SAFETY: a CUfunction of a module that is never unloaded stays valid and may be launched from
// any thread with its context current (launch binds it).
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

/// Grid and block of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub grid: u32,
    pub block: u32,
}

impl Kernel {
    /// Launches the kernel on `stream`. Every parameter of the efabench kernels is 64 bits wide
    /// (a device pointer or an unsigned long long), so arguments are passed as `u64`.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list, and every pointer among them must be valid
    /// for what the kernel does with it until the launch completes.
    pub unsafe fn launch(
        &self,
        stream: &Stream,
        shape: Shape,
        args: &[u64],
    ) -> Result<(), GpuError> {
        self.gpu.bind()?;
        let mut vals: Vec<u64> = args.to_vec();
        let mut ptrs: Vec<*mut c_void> = vals
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        // SAFETY: ptrs points at vals, which outlive the call (cuLaunchKernel copies the
        // parameters before returning); the caller guarantees that they match the kernel.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                self.func,
                shape.grid,
                1,
                1,
                shape.block,
                1,
                1,
                0,
                stream.raw(),
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}

/// The parameter block of one kernel: a `#[repr(C)]` struct passed by value as the kernel's only
/// parameter, so a launch names its arguments by field instead of an untyped list.
///
/// # Safety
/// The implementing type must be `#[repr(C)]` with exactly the layout of the CUDA struct the
/// kernel takes by value (same field types, order and size).
pub unsafe trait KernelParams: Copy + 'static {}

/// A kernel bound to its parameter struct `P`.
pub struct TypedKernel<P: KernelParams> {
    kernel: Kernel,
    _params: std::marker::PhantomData<fn(P)>,
}

impl<P: KernelParams> TypedKernel<P> {
    /// Binds `kernel` to `P`.
    ///
    /// # Safety
    /// The kernel's parameter list must be exactly one `P` by value.
    pub unsafe fn bind(kernel: Kernel) -> Self {
        TypedKernel {
            kernel,
            _params: std::marker::PhantomData,
        }
    }

    pub fn name(&self) -> &str {
        &self.kernel.name
    }

    /// Launches the kernel with `params`.
    ///
    /// # Safety
    /// Every address in `params` must be valid for what the kernel does with it until the launch
    /// completes.
    pub unsafe fn launch(&self, stream: &Stream, shape: Shape, params: &P) -> Result<(), GpuError> {
        self.kernel.gpu.bind()?;
        let mut copy: P = *params;
        let mut ptrs = [&mut copy as *mut P as *mut c_void];
        // SAFETY: ptrs holds one pointer to a P that outlives the call (cuLaunchKernel copies
        // the parameters before returning); bind's contract makes P the kernel's parameter.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                self.kernel.func,
                shape.grid,
                1,
                1,
                shape.block,
                1,
                1,
                0,
                stream.raw(),
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}
