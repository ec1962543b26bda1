//! The `static inline` functions of libfabric's headers, re-written as ops-table calls.
//!
//! Each function does what its C namesake does (same arguments, same return value), so the
//! libfabric man pages describe them. A provider that leaves an op NULL gets `-FI_ENOSYS`
//! (providers normally install `fi_no_*` stubs, so the check is one predictable branch).
//!
//! # Safety (all functions)
//! Every pointer argument must be what the C function requires: a live object of the named kind
//! opened through this library and not yet closed, and buffers/contexts valid for as long as the
//! C API says (for data transfers: until the operation's completion is read).

#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use core::ffi::{c_char, c_int, c_void};

use crate::bindings::*;
use crate::fi_mr_attr;

const ENOSYS: ssize_t = -(FI_ENOSYS as ssize_t);

macro_rules! call {
    ($table:expr, $op:ident, $enosys:expr $(, $arg:expr)* $(,)?) => {{
        // SAFETY: the caller guarantees the object (and so its ops table) is live; a NULL op is
        // reported as -FI_ENOSYS instead of being called.
        match unsafe { (*$table).$op } {
            // SAFETY: the function pointer comes from the provider's ops table for this object
            // and is called with the C prototype's arguments.
            Some(f) => unsafe { f($($arg),*) },
            None => $enosys,
        }
    }};
}

#[inline(always)]
pub unsafe fn fi_close(fid: *mut fid) -> c_int {
    call!((*fid).ops, close, ENOSYS as c_int, fid)
}
#[inline(always)]
pub unsafe fn fi_control(fid: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    call!((*fid).ops, control, ENOSYS as c_int, fid, command, arg)
}
#[inline(always)]
pub unsafe fn fi_domain(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    call!(
        (*fabric).ops,
        domain,
        ENOSYS as c_int,
        fabric,
        info,
        domain,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_endpoint(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    call!(
        (*domain).ops,
        endpoint,
        ENOSYS as c_int,
        domain,
        info,
        ep,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    call!(
        (*domain).ops,
        cq_open,
        ENOSYS as c_int,
        domain,
        attr,
        cq,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_av_open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    call!(
        (*domain).ops,
        av_open,
        ENOSYS as c_int,
        domain,
        attr,
        av,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_ep_bind(ep: *mut fid_ep, bfid: *mut fid, flags: u64) -> c_int {
    let f = core::ptr::addr_of_mut!((*ep).fid);
    call!((*f).ops, bind, ENOSYS as c_int, f, bfid, flags)
}
#[inline(always)]
pub unsafe fn fi_enable(ep: *mut fid_ep) -> c_int {
    fi_control(
        core::ptr::addr_of_mut!((*ep).fid),
        FI_ENABLE as c_int,
        core::ptr::null_mut(),
    )
}
#[inline(always)]
pub unsafe fn fi_cancel(ep: *mut fid_ep, context: *mut c_void) -> ssize_t {
    let f = core::ptr::addr_of_mut!((*ep).fid);
    call!((*ep).ops, cancel, ENOSYS, f, context)
}
#[inline(always)]
pub unsafe fn fi_setopt(
    ep: *mut fid_ep,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: size_t,
) -> c_int {
    let f = core::ptr::addr_of_mut!((*ep).fid);
    call!(
        (*ep).ops,
        setopt,
        ENOSYS as c_int,
        f,
        level,
        optname,
        optval,
        optlen
    )
}
#[inline(always)]
pub unsafe fn fi_getopt(
    ep: *mut fid_ep,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut size_t,
) -> c_int {
    let f = core::ptr::addr_of_mut!((*ep).fid);
    call!(
        (*ep).ops,
        getopt,
        ENOSYS as c_int,
        f,
        level,
        optname,
        optval,
        optlen
    )
}
/// `fi_getname(&ep->fid, addr, addrlen)` (the endpoint form).
#[inline(always)]
pub unsafe fn fi_getname(ep: *mut fid_ep, addr: *mut c_void, addrlen: *mut size_t) -> c_int {
    let f = core::ptr::addr_of_mut!((*ep).fid);
    call!((*ep).cm, getname, ENOSYS as c_int, f, addr, addrlen)
}
#[inline(always)]
pub unsafe fn fi_av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: size_t,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    call!(
        (*av).ops,
        insert,
        ENOSYS as c_int,
        av,
        addr,
        count,
        fi_addr,
        flags,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: size_t,
    flags: u64,
) -> c_int {
    call!(
        (*av).ops,
        remove,
        ENOSYS as c_int,
        av,
        fi_addr,
        count,
        flags
    )
}
#[inline(always)]
pub unsafe fn fi_mr_reg(
    domain: *mut fid_domain,
    buf: *const c_void,
    len: size_t,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    let f = core::ptr::addr_of_mut!((*domain).fid);
    call!(
        (*domain).mr,
        reg,
        ENOSYS as c_int,
        f,
        buf,
        len,
        access,
        offset,
        requested_key,
        flags,
        mr,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_mr_regattr(
    domain: *mut fid_domain,
    attr: *const fi_mr_attr,
    flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    let f = core::ptr::addr_of_mut!((*domain).fid);
    call!((*domain).mr, regattr, ENOSYS as c_int, f, attr, flags, mr)
}
#[inline(always)]
pub unsafe fn fi_mr_desc(mr: *mut fid_mr) -> *mut c_void {
    (*mr).mem_desc
}
#[inline(always)]
pub unsafe fn fi_mr_key(mr: *mut fid_mr) -> u64 {
    (*mr).key
}
#[inline(always)]
pub unsafe fn fi_mr_bind(mr: *mut fid_mr, bfid: *mut fid, flags: u64) -> c_int {
    let f = core::ptr::addr_of_mut!((*mr).fid);
    call!((*f).ops, bind, ENOSYS as c_int, f, bfid, flags)
}
#[inline(always)]
pub unsafe fn fi_mr_enable(mr: *mut fid_mr) -> c_int {
    fi_control(
        core::ptr::addr_of_mut!((*mr).fid),
        FI_ENABLE as c_int,
        core::ptr::null_mut(),
    )
}
#[inline(always)]
pub unsafe fn fi_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    call!(
        (*ep).msg,
        send,
        ENOSYS,
        ep,
        buf,
        len,
        desc,
        dest_addr,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    data: u64,
    dest_addr: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    call!(
        (*ep).msg,
        senddata,
        ENOSYS,
        ep,
        buf,
        len,
        desc,
        data,
        dest_addr,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    dest_addr: fi_addr_t,
) -> ssize_t {
    call!((*ep).msg, inject, ENOSYS, ep, buf, len, dest_addr)
}
#[inline(always)]
pub unsafe fn fi_sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> ssize_t {
    call!((*ep).msg, sendmsg, ENOSYS, ep, msg, flags)
}
#[inline(always)]
pub unsafe fn fi_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: size_t,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    context: *mut c_void,
) -> ssize_t {
    call!(
        (*ep).msg,
        recv,
        ENOSYS,
        ep,
        buf,
        len,
        desc,
        src_addr,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> ssize_t {
    call!(
        (*ep).rma,
        write,
        ENOSYS,
        ep,
        buf,
        len,
        desc,
        dest_addr,
        addr,
        key,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    data: u64,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> ssize_t {
    call!(
        (*ep).rma,
        writedata,
        ENOSYS,
        ep,
        buf,
        len,
        desc,
        data,
        dest_addr,
        addr,
        key,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> ssize_t {
    call!((*ep).rma, writemsg, ENOSYS, ep, msg, flags)
}
#[inline(always)]
pub unsafe fn fi_inject_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: size_t,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
) -> ssize_t {
    call!(
        (*ep).rma,
        inject,
        ENOSYS,
        ep,
        buf,
        len,
        dest_addr,
        addr,
        key
    )
}
#[inline(always)]
pub unsafe fn fi_read(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: size_t,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> ssize_t {
    call!(
        (*ep).rma,
        read,
        ENOSYS,
        ep,
        buf,
        len,
        desc,
        src_addr,
        addr,
        key,
        context
    )
}
#[inline(always)]
pub unsafe fn fi_cq_read(cq: *mut fid_cq, buf: *mut c_void, count: size_t) -> ssize_t {
    call!((*cq).ops, read, ENOSYS, cq, buf, count)
}
#[inline(always)]
pub unsafe fn fi_cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> ssize_t {
    call!((*cq).ops, readerr, ENOSYS, cq, buf, flags)
}
#[inline(always)]
pub unsafe fn fi_cq_strerror(
    cq: *mut fid_cq,
    prov_errno: c_int,
    err_data: *const c_void,
    buf: *mut c_char,
    len: size_t,
) -> *const c_char {
    call!(
        (*cq).ops,
        strerror,
        core::ptr::null(),
        cq,
        prov_errno,
        err_data,
        buf,
        len
    )
}
