//! Filling and checking device memory with the pattern kernels, on the buffer's own GPU.

use super::*;

/// `CU_STREAM_PER_THREAD` of cuda.h: the calling thread's implicit stream (cudarc has no
/// constant for it).
pub(super) fn per_thread_stream() -> sys::CUstream {
    std::ptr::without_provenance_mut(0x2)
}

pub(super) fn fill_zero(gpu: &Arc<Gpu>, ptr: u64, len: usize) -> Result<(), GpuError> {
    gpu.bind()?;
    // SAFETY: ptr..ptr+len is an allocation of this context.
    check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(ptr, 0, len) })?;
    gpu.synchronize()
}

/// Launch shape for the pattern kernels: enough blocks to cover the GPU, never more than needed.
pub fn pattern_shape(gpu: &Gpu, len: usize) -> Shape {
    let words = (len as u64).div_ceil(8).max(1);
    let max_blocks = u64::from(gpu.sm_count.max(1)) * 8;
    Shape {
        grid: words.div_ceil(256).clamp(1, max_blocks) as u32,
        block: 256,
    }
}

/// Queues a fill of `ptr..ptr+len` with the pattern of `seed` on `stream`.
///
/// # Safety
/// `ptr..ptr+len` must be device-accessible memory of the stream's GPU (or mapped into it),
/// valid until the fill completes.
pub unsafe fn fill_async(stream: &Stream, ptr: u64, len: usize, seed: u64) -> Result<(), GpuError> {
    let k = kernel(stream.gpu(), Source::Buffer, "efa_fill")?;
    // SAFETY: efa_fill(unsigned char*, u64, u64); the caller guarantees the range.
    unsafe {
        k.launch(
            stream,
            pattern_shape(stream.gpu(), len),
            &[ptr, len as u64, seed],
        )
    }
}

/// Queues a count of the words of `ptr..ptr+len` that differ from the pattern of `seed`, added
/// to the 8-byte device counter at `count`.
///
/// # Safety
/// As [`fill_async`] for the range (read only), and `count` must be a device-accessible u64.
pub unsafe fn mismatches_async(
    stream: &Stream,
    ptr: u64,
    len: usize,
    seed: u64,
    count: u64,
) -> Result<(), GpuError> {
    let k = kernel(stream.gpu(), Source::Buffer, "efa_mismatches")?;
    // SAFETY: efa_mismatches(const unsigned char*, u64, u64, u64*); the caller guarantees both.
    unsafe {
        k.launch(
            stream,
            pattern_shape(stream.gpu(), len),
            &[ptr, len as u64, seed, count],
        )
    }
}

pub(super) fn fill_on_gpu(gpu: &Arc<Gpu>, ptr: u64, len: usize, seed: u64) -> Result<(), GpuError> {
    let s = Stream::new(gpu)?;
    // SAFETY: ptr..ptr+len is an allocation of this GPU owned by the caller's buffer.
    unsafe { fill_async(&s, ptr, len, seed)? };
    s.synchronize()
}

pub(super) fn mismatches_on_gpu(
    gpu: &Arc<Gpu>,
    ptr: u64,
    len: usize,
    seed: u64,
) -> Result<u64, GpuError> {
    let s = Stream::new(gpu)?;
    let counter = Counter::new(gpu)?;
    // SAFETY: the range is the caller's buffer; counter is a live 8-byte device allocation.
    unsafe { mismatches_async(&s, ptr, len, seed, counter.ptr())? };
    s.synchronize()?;
    counter.read()
}

/// One u64 in device memory (mismatch and error counters).
pub struct Counter {
    pub(super) gpu: Arc<Gpu>,
    pub(super) ptr: u64,
}

impl Counter {
    pub fn new(gpu: &Arc<Gpu>) -> Result<Counter, GpuError> {
        gpu.bind()?;
        let mut ptr = 0u64;
        // SAFETY: valid out pointer; the context is current.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, 8) })?;
        let c = Counter {
            gpu: gpu.clone(),
            ptr,
        };
        c.reset()?;
        Ok(c)
    }
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    pub fn reset(&self) -> Result<(), GpuError> {
        self.gpu.bind()?;
        // SAFETY: ptr is a live 8-byte allocation.
        check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(self.ptr, 0, 8) })?;
        // The memset runs on the legacy stream, which the benchmarks' non-blocking streams do
        // not wait for: finish it before any kernel adds to the counter.
        self.gpu.synchronize()
    }
    /// Reads the value (synchronous copy: waits for the work that updates it on the legacy
    /// stream semantics of cuMemcpyDtoH; callers synchronise their stream first).
    pub fn read(&self) -> Result<u64, GpuError> {
        let b = copy_to_host(&self.gpu, self.ptr, 8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(&b);
        Ok(u64::from_le_bytes(w))
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // Kernels queued by the safe launches may still use the counter: wait for them.
        if self.gpu.bind().is_ok() && self.gpu.synchronize().is_ok() {
            // SAFETY: ptr came from cuMemAlloc and is freed once.
            let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
        }
    }
}

/// Queues a fill of the first `len` bytes of `buf` with the pattern of `seed` on `stream` (the
/// safe, checked form of [`fill_async`]; `buf`'s drop waits for the GPU, so the fill cannot
/// outlive it).
pub fn fill(stream: &Stream, buf: &DeviceBuffer, len: usize, seed: u64) -> Result<(), GpuError> {
    check_range("cuda", buf.len(), 0, len)?;
    same_device(stream, &buf.gpu)?;
    // SAFETY: len bytes of buf are a live allocation of the stream's GPU (checked above).
    unsafe { fill_async(stream, buf.ptr(), len, seed) }
}

/// Queues a count of the words of the first `len` bytes of `buf` that differ from the pattern
/// of `seed`, added to `counter` (the safe form of [`mismatches_async`]).
pub fn count_mismatches(
    stream: &Stream,
    buf: &DeviceBuffer,
    len: usize,
    seed: u64,
    counter: &Counter,
) -> Result<(), GpuError> {
    check_range("cuda", buf.len(), 0, len)?;
    same_device(stream, &buf.gpu)?;
    same_device(stream, &counter.gpu)?;
    // SAFETY: len bytes of buf are live memory of this GPU (checked); counter is a live u64 of
    // it; both are freed only after their drops synchronise the GPU.
    unsafe { mismatches_async(stream, buf.ptr(), len, seed, counter.ptr()) }
}

pub(super) fn same_device(stream: &Stream, gpu: &Gpu) -> Result<(), GpuError> {
    if stream.gpu().ordinal != gpu.ordinal {
        return Err(GpuError::Invalid(format!(
            "the stream is on GPU {} but the memory on GPU {}",
            stream.gpu().ordinal,
            gpu.ordinal
        )));
    }
    Ok(())
}

impl Counter {
    /// The GPU of the counter.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

/// Copies `len` bytes at device address `ptr` into a new host vector.
pub fn copy_to_host(gpu: &Arc<Gpu>, ptr: u64, len: usize) -> Result<Vec<u8>, GpuError> {
    gpu.bind()?;
    let mut v = vec![0u8; len];
    // SAFETY: v has len bytes; the caller names a device range of at least len bytes.
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, ptr, len)
    })?;
    Ok(v)
}
