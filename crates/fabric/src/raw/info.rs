//! `fi_getinfo` requests and the owned `fi_info` list they return.

use super::*;

/// What a `fi_getinfo` request asks for.
#[derive(Clone, Debug, Default)]
pub(crate) struct HintSpec {
    pub provider: Option<String>,
    pub fabric: Option<String>,
    pub domain: Option<String>,
    pub caps: u64,
    pub mode: u64,
    pub mr_mode: u64,
    pub node: Option<String>,
}

/// Plain values read out of one `fi_info`.
#[derive(Clone, Debug)]
pub(crate) struct InfoFields {
    pub provider: String,
    pub fabric: String,
    pub domain: String,
    pub prov_version: u32,
    pub link_speed: Option<u64>,
    pub nic_name: Option<String>,
    pub mr_mode: u64,
    pub caps: u64,
    pub mode: u64,
    pub max_msg_size: u64,
    pub inject_size: u64,
    pub cq_data_size: u64,
    pub tx_size: u64,
    pub rx_size: u64,
    pub addr_format: u32,
    pub control_unified: bool,
}

/// An `fi_info` owned by us (freed with `fi_freeinfo`), one entry, `next` = NULL.
pub(crate) struct OwnedInfo {
    pub(super) lib: &'static Library,
    pub(super) ptr: *mut sys::fi_info,
}

// SAFETY: the fi_info is a plain heap struct owned exclusively by this value; libfabric does not
// touch it behind our back, so moving it to another thread is fine.
unsafe impl Send for OwnedInfo {}
// SAFETY: the fi_info is never written after fi_getinfo/fi_dupinfo returned it: every &self
// method only reads its fields, and libfabric does not change it behind our back.
unsafe impl Sync for OwnedInfo {}

impl Drop for OwnedInfo {
    fn drop(&mut self) {
        // SAFETY: ptr came from fi_dupinfo and is freed exactly once.
        unsafe { (self.lib.fi_freeinfo)(self.ptr) }
    }
}

impl Clone for OwnedInfo {
    fn clone(&self) -> Self {
        // SAFETY: self.ptr is a valid fi_info; fi_dupinfo deep-copies one entry.
        let p = unsafe { (self.lib.fi_dupinfo)(self.ptr) };
        assert!(!p.is_null(), "fi_dupinfo: out of memory");
        OwnedInfo {
            lib: self.lib,
            ptr: p,
        }
    }
}

impl OwnedInfo {
    pub fn fields(&self) -> InfoFields {
        // SAFETY: ptr is a valid fi_info whose attribute pointers are either NULL (checked) or
        // point to attribute structs owned by it.
        unsafe {
            let i = &*self.ptr;
            let fab = i.fabric_attr.as_ref();
            let dom = i.domain_attr.as_ref();
            let ep = i.ep_attr.as_ref();
            let tx = i.tx_attr.as_ref();
            let rx = i.rx_attr.as_ref();
            let nic = i.nic.as_ref();
            let link = nic.and_then(|n| n.link_attr.as_ref());
            let dev = nic.and_then(|n| n.device_attr.as_ref());
            InfoFields {
                provider: fab.and_then(|f| cstr_opt(f.prov_name)).unwrap_or_default(),
                fabric: fab.and_then(|f| cstr_opt(f.name)).unwrap_or_default(),
                domain: dom.and_then(|d| cstr_opt(d.name)).unwrap_or_default(),
                prov_version: fab.map(|f| f.prov_version).unwrap_or(0),
                link_speed: link.map(|l| l.speed).filter(|&s| s > 0),
                nic_name: dev.and_then(|d| cstr_opt(d.name)),
                mr_mode: dom.map(|d| d.mr_mode as u32 as u64).unwrap_or(0),
                caps: i.caps,
                mode: i.mode,
                max_msg_size: ep.map(|e| e.max_msg_size).unwrap_or(0),
                inject_size: tx.map(|t| t.inject_size).unwrap_or(0),
                cq_data_size: dom.map(|d| d.cq_data_size).unwrap_or(0),
                tx_size: tx.map(|t| t.size).unwrap_or(0),
                rx_size: rx.map(|r| r.size).unwrap_or(0),
                addr_format: i.addr_format,
                control_unified: dom.is_some_and(|d| {
                    d.control_progress == sys::FI_PROGRESS_CONTROL_UNIFIED
                        || d.data_progress == sys::FI_PROGRESS_CONTROL_UNIFIED
                }),
            }
        }
    }
}

pub(super) fn strdup_opt(s: &Option<String>) -> Result<*mut c_char> {
    match s {
        None => Ok(ptr::null_mut()),
        Some(s) => {
            let c = CString::new(s.as_str())
                .map_err(|_| Error::Usage(format!("name {s:?} contains a NUL byte")))?;
            // SAFETY: c is a valid C string; the copy is malloc'd so fi_freeinfo can free it.
            Ok(unsafe { libc::strdup(c.as_ptr()) })
        }
    }
}

/// `fi_getinfo` for RDM endpoints with the given hints; returns one owned info per match.
///
/// Every rail serializes all its calls, control and data, on one thread at a time
/// (`FI_THREAD_DOMAIN`), so it also asks for `FI_PROGRESS_CONTROL_UNIFIED` where the library
/// knows it (1.21 on): that lets the provider drop the mutex its completion queue otherwise
/// takes on every read (the endpoint list lock of libfabric's utility layer). A provider that
/// refuses the hint is asked again without it.
pub(crate) fn getinfo(lib: &'static Library, h: &HintSpec) -> Result<Vec<OwnedInfo>> {
    if lib.version >= sys::CONTROL_UNIFIED_VERSION {
        let unified = getinfo_with(lib, h, true)?;
        if !unified.is_empty() {
            return Ok(unified);
        }
    }
    getinfo_with(lib, h, false)
}

pub(super) fn getinfo_with(
    lib: &'static Library,
    h: &HintSpec,
    control_unified: bool,
) -> Result<Vec<OwnedInfo>> {
    // SAFETY: fi_dupinfo(NULL) is fi_allocinfo(): a zeroed fi_info with all attr structs.
    let hints = unsafe { (lib.fi_dupinfo)(ptr::null()) };
    if hints.is_null() {
        return Err(Error::Call {
            call: "fi_allocinfo",
            errno: libc::ENOMEM,
            text: "out of memory".into(),
            provider: None,
        });
    }
    struct FreeHints(&'static Library, *mut sys::fi_info);
    impl Drop for FreeHints {
        fn drop(&mut self) {
            // SAFETY: allocated by fi_dupinfo above, freed once (with the strdup'd names).
            unsafe { (self.0.fi_freeinfo)(self.1) }
        }
    }
    let _free = FreeHints(lib, hints);
    let node = match &h.node {
        Some(n) => Some(
            CString::new(n.as_str())
                .map_err(|_| Error::Usage(format!("node {n:?} contains a NUL byte")))?,
        ),
        None => None,
    };
    // SAFETY: hints and its attr structs were allocated by fi_allocinfo; we set plain fields and
    // malloc'd strings that fi_freeinfo will free.
    unsafe {
        (*hints).caps = h.caps;
        (*hints).mode = h.mode;
        (*(*hints).ep_attr).type_ = sys::FI_EP_RDM;
        (*(*hints).domain_attr).mr_mode = h.mr_mode as i32;
        (*(*hints).domain_attr).threading = sys::FI_THREAD_DOMAIN;
        if control_unified {
            // From 2.0 `data_progress` is `progress`, the one hint libfabric reads for both.
            if lib.version >= sys::UNIFIED_PROGRESS_FIELD_VERSION {
                (*(*hints).domain_attr).data_progress = sys::FI_PROGRESS_CONTROL_UNIFIED;
            } else {
                (*(*hints).domain_attr).control_progress = sys::FI_PROGRESS_CONTROL_UNIFIED;
            }
        }
        (*(*hints).domain_attr).name = strdup_opt(&h.domain)?;
        (*(*hints).fabric_attr).prov_name = strdup_opt(&h.provider)?;
        (*(*hints).fabric_attr).name = strdup_opt(&h.fabric)?;
    }
    let mut out: *mut sys::fi_info = ptr::null_mut();
    let flags = if node.is_some() { sys::FI_SOURCE } else { 0 };
    // SAFETY: all pointers are valid or NULL as fi_getinfo allows; out receives a list we free.
    let ret = unsafe {
        (lib.fi_getinfo)(
            lib.api_version(),
            node.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            ptr::null(),
            flags,
            hints,
            &mut out,
        )
    };
    if ret == -sys::FI_ENODATA {
        return Ok(Vec::new());
    }
    if ret != 0 {
        return Err(call_err(lib, "fi_getinfo", ret as i64));
    }
    let mut v = Vec::new();
    let mut cur = out;
    while !cur.is_null() {
        // SAFETY: cur is an entry of the list fi_getinfo returned.
        let d = unsafe { (lib.fi_dupinfo)(cur) };
        if !d.is_null() {
            // SAFETY: d is a fresh copy; we own it. Clear `next` (dupinfo already does; be sure).
            unsafe { (*d).next = ptr::null_mut() };
            v.push(OwnedInfo { lib, ptr: d });
        }
        // SAFETY: walking the list returned by fi_getinfo.
        cur = unsafe { (*cur).next };
    }
    // SAFETY: out came from fi_getinfo and is freed once.
    unsafe { (lib.fi_freeinfo)(out) };
    Ok(v)
}
