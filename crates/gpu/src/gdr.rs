//! GDRCopy, loaded at run time: device memory mapped into the CPU's address space (BAR1).
//!
//! The `gdr` and `hybrid` rings of `efabench queue` need the CPU to read or write GPU memory with
//! plain loads and stores: NCCL's GIN proxy keeps its consumer index in GPU memory this way so the
//! GPU polls locally. GDRCopy is a user library (`libgdrapi.so`) plus a kernel module (`gdrdrv`,
//! `/dev/gdrdrv`); neither is needed to build efabench, and on a machine without them
//! [`Gdr::open`] says which one is missing so the caller can skip those rings with one line.

use crate::buffer::DeviceBuffer;
use crate::error::GpuError;
use std::ffi::{c_char, c_int, c_ulong, c_void, CStr};
use std::sync::Arc;

/// GPU pages that GDRCopy pins and maps are 64 KiB.
pub const GPU_PAGE: usize = 64 << 10;

/// `gdr_mh_t`: a struct holding one `unsigned long`, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct GdrMh {
    h: c_ulong,
}

type GdrT = *mut c_void;

/// The entry points of `libgdrapi.so` that efabench uses (stable since GDRCopy 2.0).
struct Api {
    open: unsafe extern "C" fn() -> GdrT,
    close: unsafe extern "C" fn(GdrT) -> c_int,
    pin: unsafe extern "C" fn(GdrT, c_ulong, usize, u64, u32, *mut GdrMh) -> c_int,
    unpin: unsafe extern "C" fn(GdrT, GdrMh) -> c_int,
    map: unsafe extern "C" fn(GdrT, GdrMh, *mut *mut c_void, usize) -> c_int,
    unmap: unsafe extern "C" fn(GdrT, GdrMh, *mut c_void, usize) -> c_int,
}

/// The library names tried, in order.
pub const LIBRARY_NAMES: [&str; 2] = ["libgdrapi.so.2", "libgdrapi.so"];

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".to_string()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn load() -> Result<Api, GpuError> {
    let mut handle = std::ptr::null_mut();
    for name in LIBRARY_NAMES {
        let c = std::ffi::CString::new(name).expect("no NUL in a constant");
        // SAFETY: c is NUL-terminated; dlopen has no other preconditions.
        handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !handle.is_null() {
            break;
        }
    }
    if handle.is_null() {
        return Err(GpuError::Invalid(format!(
            "GDRCopy's library is not installed ({} not loadable): install gdrcopy and add its lib \
             directory to LD_LIBRARY_PATH",
            LIBRARY_NAMES.join(" or ")
        )));
    }
    let sym = |name: &str| -> Result<*mut c_void, GpuError> {
        let c = std::ffi::CString::new(name).expect("no NUL in a constant");
        // SAFETY: handle is a live dlopen handle (never closed); c is NUL-terminated.
        let p = unsafe { libc::dlsym(handle, c.as_ptr() as *const c_char) };
        if p.is_null() {
            Err(GpuError::Invalid(format!(
                "libgdrapi has no symbol {name} ({}): install GDRCopy 2.x",
                dl_error()
            )))
        } else {
            Ok(p)
        }
    };
    // SAFETY: each symbol is the GDRCopy 2.x function of that name, whose C signature the
    // matching field type spells out (gdrapi.h); function pointers and data pointers have the
    // same size on every platform libgdrapi exists for.
    unsafe {
        Ok(Api {
            open: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> GdrT>(sym(
                "gdr_open",
            )?),
            close: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(GdrT) -> c_int>(sym(
                "gdr_close",
            )?),
            pin: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(GdrT, c_ulong, usize, u64, u32, *mut GdrMh) -> c_int,
            >(sym("gdr_pin_buffer")?),
            unpin: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(GdrT, GdrMh) -> c_int>(
                sym("gdr_unpin_buffer")?,
            ),
            map: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(GdrT, GdrMh, *mut *mut c_void, usize) -> c_int,
            >(sym("gdr_map")?),
            unmap: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(GdrT, GdrMh, *mut c_void, usize) -> c_int,
            >(sym("gdr_unmap")?),
        })
    }
}

/// An open GDRCopy handle (`gdr_open`).
pub struct Gdr {
    api: Api,
    g: GdrT,
}

// SAFETY: a gdr_t may be used from any thread (GDRCopy serialises its ioctls); it is closed once.
unsafe impl Send for Gdr {}
// SAFETY: as above.
unsafe impl Sync for Gdr {}

impl Gdr {
    /// Loads the library and opens the driver, or says which of the two is missing.
    pub fn open() -> Result<Arc<Gdr>, GpuError> {
        let api = load()?;
        // SAFETY: gdr_open takes no arguments and returns NULL on failure.
        let g = unsafe { (api.open)() };
        if g.is_null() {
            let why = if std::path::Path::new("/dev/gdrdrv").exists() {
                "/dev/gdrdrv exists but gdr_open failed (check its permissions)"
            } else {
                "the gdrdrv kernel module is not loaded (/dev/gdrdrv missing)"
            };
            return Err(GpuError::Invalid(format!(
                "GDRCopy unusable: {why}; load it with `modprobe gdrdrv` (gdrcopy's insmod.sh)"
            )));
        }
        Ok(Arc::new(Gdr { api, g }))
    }

    /// Maps a device buffer for the CPU. The buffer must start on a 64 KiB GPU page and be a
    /// whole number of pages long (allocate with [`DeviceBuffer::new`], whose allocations are
    /// 2 MiB aligned and sized).
    pub fn map(
        self: &Arc<Gdr>,
        buf: Arc<DeviceBuffer>,
        len: usize,
    ) -> Result<GdrMapping, GpuError> {
        let len = len.div_ceil(GPU_PAGE) * GPU_PAGE;
        if buf.ptr() as usize % GPU_PAGE != 0 || len > buf_capacity(&buf) {
            return Err(GpuError::Invalid(format!(
                "GDRCopy maps whole 64 KiB GPU pages: buffer at {:#x} of {} bytes cannot map {len}",
                buf.ptr(),
                buf_capacity(&buf)
            )));
        }
        let mut mh = GdrMh::default();
        // SAFETY: g is open; the range lies in a live cuMemAlloc allocation (checked above); mh
        // is a valid out pointer.
        let r = unsafe { (self.api.pin)(self.g, buf.ptr() as c_ulong, len, 0, 0, &mut mh) };
        if r != 0 {
            return Err(GpuError::Invalid(format!(
                "gdr_pin_buffer failed ({r}): the GPU or driver does not allow GPUDirect mappings"
            )));
        }
        let mut va: *mut c_void = std::ptr::null_mut();
        // SAFETY: mh was just pinned with this length; va is a valid out pointer.
        let r = unsafe { (self.api.map)(self.g, mh, &mut va, len) };
        if r != 0 || va.is_null() {
            // SAFETY: mh is pinned and unpinned once.
            unsafe { (self.api.unpin)(self.g, mh) };
            return Err(GpuError::Invalid(format!("gdr_map failed ({r})")));
        }
        Ok(GdrMapping {
            gdr: self.clone(),
            buf,
            mh,
            va,
            len,
        })
    }
}

fn buf_capacity(buf: &DeviceBuffer) -> usize {
    use efabench_fabric::MemoryBuffer;
    buf.len().div_ceil(2 << 20) * (2 << 20)
}

impl Drop for Gdr {
    fn drop(&mut self) {
        // SAFETY: g is open and closed once; every mapping holds an Arc, so none is left.
        unsafe { (self.api.close)(self.g) };
    }
}

/// Device memory mapped into this process: `host()` is the CPU's address of the buffer's start.
pub struct GdrMapping {
    gdr: Arc<Gdr>,
    buf: Arc<DeviceBuffer>,
    mh: GdrMh,
    va: *mut c_void,
    len: usize,
}

// SAFETY: the mapping is owned by the value and the memory behind it may be accessed from any
// thread (callers use atomics).
unsafe impl Send for GdrMapping {}
// SAFETY: as above.
unsafe impl Sync for GdrMapping {}

impl GdrMapping {
    /// The CPU address of the start of the device buffer.
    pub fn host(&self) -> *mut u8 {
        self.va as *mut u8
    }
    /// The device address of the same memory.
    pub fn device(&self) -> u64 {
        self.buf.ptr()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for GdrMapping {
    fn drop(&mut self) {
        // SAFETY: va/mh come from gdr_map/gdr_pin_buffer on this handle and are released once.
        unsafe {
            (self.gdr.api.unmap)(self.gdr.g, self.mh, self.va, self.len);
            (self.gdr.api.unpin)(self.gdr.g, self.mh);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_gdrcopy_open_says_what_is_missing() {
        match Gdr::open() {
            Ok(_) => println!("GDRCopy present: nothing to check here"),
            Err(e) => {
                let m = e.to_string();
                assert!(
                    m.contains("libgdrapi") || m.contains("gdrdrv"),
                    "message names the missing piece: {m}"
                );
                assert!(!m.contains('\n'), "one line: {m}");
            }
        }
    }
}
