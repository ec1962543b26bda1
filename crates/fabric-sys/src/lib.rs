//! efabench-fabric-sys: the libfabric ABI, loaded at run time.
//!
//! Why this shape: almost all of libfabric's API is
//! `static inline` code in its headers that jumps through function tables held in the objects, and
//! only about ten functions are really exported, each under a symbol version (`FABRIC_1.x`).
//! So this crate is three things, and nothing else in the workspace touches raw libfabric:
//!
//! * [`bindings`]: types and constants generated **once** by `tools/generate.sh` from Debian's
//!   libfabric-dev 1.17 headers (ABI 1.3) and committed, plus a few newer items added by hand in
//!   this file (`FI_MR_DMABUF`, [`fi_mr_dmabuf`], the `mr_iov`/`dmabuf` union of [`fi_mr_attr`]).
//!   Building needs no libclang, no C compiler and no libfabric.
//! * [`loader`]: `dlopen` of `libfabric.so.1` and `dlvsym` of each exported function **pinned to
//!   the symbol version these bindings match**. Plain `dlsym` would hand back the newest version
//!   (e.g. `fi_getinfo@FABRIC_1.9` on 2.x), whose `fi_info` may not match our structs. libfabric
//!   keeps every old version as a compat shim, so one binary runs on 1.17 and on 2.x.
//! * [`inline`]: the header's `static inline` calls re-written as `#[inline(always)]` ops-table
//!   calls, so the data path costs exactly what the C inline costs.
//!
//! Structs only grow at their end between versions, and the compat `fi_getinfo@FABRIC_1.3` passes
//! the caller's requested API version through, so we may ask for API 1.20 (dmabuf) at run time on a
//! newer library with 1.17 structs, as long as the structs *we* allocate and hand to the library
//! are large enough for what that API version lets it read: see [`fi_mr_attr`] and
//! [`CqErrEntry`], which carry trailing room for that reason.

pub mod bindings;
pub mod crash;
pub mod inline;
pub mod loader;

pub use bindings::*;
pub use loader::{load, loaded, Attempt, Library, LoadError, OpenFailure};

use core::ffi::{c_int, c_void};

/// `FI_VERSION(major, minor)`.
#[inline(always)]
pub const fn fi_version_make(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}
/// `FI_MAJOR(version)`.
#[inline(always)]
pub const fn fi_major(version: u32) -> u32 {
    version >> 16
}
/// `FI_MINOR(version)`.
#[inline(always)]
pub const fn fi_minor(version: u32) -> u32 {
    version & 0xffff
}

/// The newest libfabric API version these bindings are written for: 1.17 headers plus the
/// hand-added dmabuf items of 1.20 and the trailing `fi_mr_attr`/`fi_cq_err_entry` room.
pub const BINDINGS_API_VERSION: u32 = fi_version_make(1, 20);
/// Library version that introduced `FI_PROGRESS_CONTROL_UNIFIED` (set as `control_progress`).
pub const CONTROL_UNIFIED_VERSION: u32 = fi_version_make(1, 21);
/// Library version from which the domain's `data_progress` field is `progress`, the one
/// progress hint (`control_progress` is then deprecated and follows it).
pub const UNIFIED_PROGRESS_FIELD_VERSION: u32 = fi_version_make(2, 0);
/// API version that introduced `FI_MR_DMABUF` registration.
pub const DMABUF_API_VERSION: u32 = fi_version_make(1, 20);

/// `FI_ADDR_UNSPEC` (`((uint64_t) -1)`; a cast macro bindgen cannot translate).
pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
/// `FI_ADDR_NOTAVAIL`.
pub const FI_ADDR_NOTAVAIL: fi_addr_t = u64::MAX;
/// `FI_KEY_NOTAVAIL`.
pub const FI_KEY_NOTAVAIL: u64 = u64::MAX;

/// `FI_MR_DMABUF` registration flag (libfabric ≥ 1.20; honoured only when the application asked
/// for API ≥ 1.20 in `fi_getinfo`).
pub const FI_MR_DMABUF: u64 = 1 << 40;

/// `struct fi_mr_dmabuf` (libfabric ≥ 1.20).
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct fi_mr_dmabuf {
    pub fd: c_int,
    pub offset: u64,
    pub len: usize,
    pub base_addr: *mut c_void,
}

/// The first member of `struct fi_mr_attr`: an iovec array, or (with `FI_MR_DMABUF`) a dmabuf.
#[repr(C)]
#[derive(Copy, Clone)]
pub union fi_mr_attr_buf {
    pub mr_iov: *const iovec,
    pub dmabuf: *const fi_mr_dmabuf,
}

/// `union { uint64_t reserved; int cuda; int ze; int neuron; int synapseai; } device`.
#[repr(C)]
#[derive(Copy, Clone)]
pub union fi_mr_attr_device {
    pub reserved: u64,
    pub cuda: c_int,
    pub ze: c_int,
    pub neuron: c_int,
    pub synapseai: c_int,
}

/// `struct fi_mr_attr`, written by hand.
///
/// Fields up to `device` are the 1.17 layout (with `mr_iov` turned into the ≥ 1.20 union). The
/// library reads fields that newer API versions define (`hmem_data` from 1.19, `page_size`,
/// `base_mr`, `sub_mr_cnt` in 2.x) only when the application asked for that API version; we keep
/// them, zeroed, plus spare room, so that the library never reads past our struct whatever
/// version we ask for.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct fi_mr_attr {
    pub buf: fi_mr_attr_buf,
    pub iov_count: usize,
    pub access: u64,
    pub offset: u64,
    pub requested_key: u64,
    pub context: *mut c_void,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
    pub iface: fi_hmem_iface,
    pub device: fi_mr_attr_device,
    pub hmem_data: *mut c_void,
    pub page_size: usize,
    pub base_mr: *const fid_mr,
    pub sub_mr_cnt: usize,
    pub _reserved: [u64; 8],
}

impl fi_mr_attr {
    /// An all-zero attribute (null pointers, `FI_HMEM_SYSTEM`).
    pub const fn zeroed() -> Self {
        fi_mr_attr {
            buf: fi_mr_attr_buf {
                mr_iov: core::ptr::null(),
            },
            iov_count: 0,
            access: 0,
            offset: 0,
            requested_key: 0,
            context: core::ptr::null_mut(),
            auth_key_size: 0,
            auth_key: core::ptr::null_mut(),
            iface: FI_HMEM_SYSTEM,
            device: fi_mr_attr_device { reserved: 0 },
            hmem_data: core::ptr::null_mut(),
            page_size: 0,
            base_mr: core::ptr::null(),
            sub_mr_cnt: 0,
            _reserved: [0; 8],
        }
    }
}

/// A `struct fi_cq_err_entry` with spare room after it: newer API versions append fields (e.g.
/// `src_addr`) that a provider fills when the application asked for that version.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct CqErrEntry {
    pub entry: fi_cq_err_entry,
    pub _reserved: [u64; 8],
}

impl CqErrEntry {
    /// An all-zero entry (`err_data = NULL`, `err_data_size = 0`: the provider keeps the data).
    pub const fn zeroed() -> Self {
        CqErrEntry {
            entry: fi_cq_err_entry {
                op_context: core::ptr::null_mut(),
                flags: 0,
                len: 0,
                buf: core::ptr::null_mut(),
                data: 0,
                tag: 0,
                olen: 0,
                err: 0,
                prov_errno: 0,
                err_data: core::ptr::null_mut(),
                err_data_size: 0,
            },
            _reserved: [0; 8],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_written_mr_attr_keeps_the_1_17_prefix() {
        // The 1.17 layout: iov ptr, count, access, offset, key, context, auth size, auth ptr,
        // iface (int, padded), device union (8) => 80 bytes up to and including `device`.
        assert_eq!(core::mem::offset_of!(fi_mr_attr, iov_count), 8);
        assert_eq!(core::mem::offset_of!(fi_mr_attr, iface), 64);
        assert_eq!(core::mem::offset_of!(fi_mr_attr, device), 72);
        assert_eq!(core::mem::offset_of!(fi_mr_attr, hmem_data), 80);
        assert_eq!(core::mem::size_of::<fi_mr_dmabuf>(), 32);
    }

    #[test]
    fn version_macros() {
        assert_eq!(fi_version_make(1, 20), 0x10014);
        assert_eq!(fi_major(fi_version_make(2, 5)), 2);
        assert_eq!(fi_minor(fi_version_make(2, 5)), 5);
    }
}
