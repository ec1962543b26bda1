//! The only module of this crate with `unsafe` code: owned libfabric handles and the calls on them
//! (`info.rs`: `fi_getinfo` and owned `fi_info`; `rail.rs`: one rail's fabric, domain, endpoint,
//! CQ, AV and memory regions, and the posts on them; `pages.rs`: page-aligned host memory).
//!
//! Everything here has a safe signature and checks what it can check itself (bounds of a
//! registered region, slot indices, NULL results). One invariant is kept by the safe code in
//! the `rail` module rather than here, and `RawRail::post` relies on it: **a region's memory stays
//! registered and alive while any operation posted on it may still be in flight** (the rail counts
//! in-flight operations per region, refuses to deregister a busy one, and closes the endpoint,
//! which stops all DMA, before it closes any memory region or drops any buffer).

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use efabench_fabric_sys as sys;
use efabench_fabric_sys::inline as fi;
use sys::Library;

use crate::error::{Error, Result};
use crate::memory::{Hmem, MemoryBuffer};

mod info;
mod pages;
mod rail;

pub(crate) use info::*;
pub(crate) use pages::*;
pub(crate) use rail::*;

pub(super) fn call_err(lib: &Library, call: &'static str, ret: i64) -> Error {
    Error::call(call, ret, lib, None)
}

pub(super) fn cstr_opt(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: libfabric strings in fi_info are NUL-terminated and live as long as the info.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}
