//! One rail's libfabric objects (fabric, domain, endpoint, CQ, AV), its memory regions and the
//! operations posted on them; completions read back with their slot.

use super::*;

/// One completion as the CQ reports it (`struct fi_cq_data_entry`), with the op context turned
/// into a slot index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawCompletion {
    /// Slot index, or `None` for completions without a context (remote CQ data).
    pub slot: Option<u32>,
    pub flags: u64,
    pub len: usize,
    pub data: u64,
}

/// A CQ error entry, decoded.
pub(crate) struct RawCqError {
    pub slot: Option<u32>,
    pub errno: i32,
    pub prov_errno: i32,
    pub text: String,
}

pub(crate) enum CqRead {
    Entries,
    Empty,
    Error(RawCqError),
}

pub(crate) const CQ_BATCH: usize = 16;

/// A libfabric context per in-flight operation. `op_context` of every posted operation points at
/// one of these, so the provider may use it as scratch space (FI_CONTEXT / FI_CONTEXT2 modes)
/// and the completion maps straight back to an index.
pub(super) struct Contexts {
    ctx: Box<[UnsafeCell<sys::fi_context2>]>,
}

impl Contexts {
    fn new(n: usize) -> Self {
        let ctx = (0..n)
            .map(|_| {
                UnsafeCell::new(sys::fi_context2 {
                    internal: [ptr::null_mut(); 8],
                })
            })
            .collect();
        Contexts { ctx }
    }
    #[inline(always)]
    fn ptr(&self, slot: u32) -> *mut c_void {
        self.ctx[slot as usize].get().cast()
    }
    #[inline(always)]
    fn slot_of(&self, p: *mut c_void) -> Option<u32> {
        if p.is_null() {
            return None;
        }
        let base = self.ctx.as_ptr() as usize;
        let off = (p as usize).wrapping_sub(base);
        let sz = std::mem::size_of::<UnsafeCell<sys::fi_context2>>();
        let idx = off / sz;
        if off % sz == 0 && idx < self.ctx.len() {
            Some(idx as u32)
        } else {
            None
        }
    }
}

/// A registered memory region.
pub(crate) struct RawMr {
    lib: &'static Library,
    mr: *mut sys::fid_mr,
    desc: *mut c_void,
    pub key: u64,
    pub ptr: *mut u8,
    pub len: usize,
    /// Keeps the memory alive at least as long as the registration.
    _buf: Arc<dyn MemoryBuffer>,
}

// SAFETY: `mr` and `desc` are handles of a registration on a domain opened with FI_THREAD_DOMAIN;
// libfabric lets such objects be used from any thread as long as calls on the domain are
// serialised, which holds because a RawMr is only reached through its rail's `RefCell` state (the
// rail is !Sync, so one thread at a time). `ptr` points into the buffer kept alive by `_buf`
// (`MemoryBuffer: Send + Sync`); it is never dereferenced by Rust code. Moving the owner to
// another thread therefore moves the whole registration with it, which is sound. RawMr is not
// Sync.
unsafe impl Send for RawMr {}

impl Drop for RawMr {
    fn drop(&mut self) {
        // SAFETY: mr is a live fid_mr (closed once, here). The rail drops RawMr only when no
        // operation on it is in flight or after the endpoint was closed.
        let ret = unsafe { fi::fi_close(ptr::addr_of_mut!((*self.mr).fid)) };
        let _ = (ret, self.lib);
    }
}

/// One NIC's fabric, domain, CQ, AV and endpoint.
pub(crate) struct RawRail {
    pub lib: &'static Library,
    pub info: OwnedInfo,
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    cq: *mut sys::fid_cq,
    av: *mut sys::fid_av,
    ep: *mut sys::fid_ep,
    ctx: Contexts,
    pub mr_mode: u64,
    /// The provider's name, for the errors of calls on this rail.
    pub provider: String,
}

// SAFETY: the rail opens its domain with FI_THREAD_DOMAIN and is used from one thread at a time
// (RawRail is not Sync, and the safe Rail wraps it in a RefCell-based !Sync type); libfabric
// objects may be used from any thread as long as calls are serialised.
unsafe impl Send for RawRail {}

impl Drop for RawRail {
    fn drop(&mut self) {
        self.close_endpoint();
        // SAFETY: each handle is live or NULL; closed in reverse order of opening, each once.
        unsafe {
            for f in [
                self.av.cast::<sys::fid>(),
                self.cq.cast::<sys::fid>(),
                self.domain.cast::<sys::fid>(),
                self.fabric.cast::<sys::fid>(),
            ] {
                if !f.is_null() {
                    fi::fi_close(f);
                }
            }
        }
    }
}

impl RawRail {
    /// Opens fabric, domain, CQ (FI_CQ_FORMAT_DATA), AV and an enabled RDM endpoint.
    pub fn open(info: &OwnedInfo, cq_size: usize, slots: usize) -> Result<RawRail> {
        let lib = info.lib;
        let info = info.clone();
        let fields = info.fields();
        let mut r = RawRail {
            lib,
            info,
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            ctx: Contexts::new(slots),
            mr_mode: fields.mr_mode,
            provider: fields.provider.clone(),
        };
        let chk = |call: &'static str, ret: i32| -> Result<()> {
            if ret != 0 {
                Err(Error::call(call, ret as i64, lib, Some(&fields.provider)))
            } else {
                Ok(())
            }
        };
        // efa opens a shm endpoint of its own for peers on this host.
        if fields.provider.starts_with("shm") || fields.provider == "efa" {
            crate::shm::clear_stale_regions();
        }
        // SAFETY: each call gets the handles opened by the previous one (checked non-error);
        // on an early return, Drop closes whatever was opened. Attribute structs are zeroed plain
        // data that outlive the calls.
        unsafe {
            let ip = r.info.ptr;
            chk(
                "fi_fabric",
                (lib.fi_fabric)((*ip).fabric_attr, &mut r.fabric, ptr::null_mut()),
            )?;
            chk(
                "fi_domain",
                fi::fi_domain(r.fabric, ip, &mut r.domain, ptr::null_mut()),
            )?;
            let mut cq_attr: sys::fi_cq_attr = std::mem::zeroed();
            cq_attr.format = sys::FI_CQ_FORMAT_DATA;
            cq_attr.wait_obj = sys::FI_WAIT_NONE;
            cq_attr.size = cq_size as _;
            chk(
                "fi_cq_open",
                fi::fi_cq_open(r.domain, &mut cq_attr, &mut r.cq, ptr::null_mut()),
            )?;
            let mut av_attr: sys::fi_av_attr = std::mem::zeroed();
            av_attr.type_ = (*(*ip).domain_attr).av_type;
            if av_attr.type_ == sys::FI_AV_UNSPEC {
                av_attr.type_ = sys::FI_AV_TABLE;
            }
            chk(
                "fi_av_open",
                fi::fi_av_open(r.domain, &mut av_attr, &mut r.av, ptr::null_mut()),
            )?;
            chk(
                "fi_endpoint",
                fi::fi_endpoint(r.domain, ip, &mut r.ep, ptr::null_mut()),
            )?;
            chk(
                "fi_ep_bind(cq)",
                fi::fi_ep_bind(r.ep, r.cq.cast(), sys::FI_TRANSMIT | sys::FI_RECV),
            )?;
            chk("fi_ep_bind(av)", fi::fi_ep_bind(r.ep, r.av.cast(), 0))?;
            chk("fi_enable", fi::fi_enable(r.ep))?;
        }
        Ok(r)
    }

    /// Closes the endpoint (stops all DMA on our buffers); later posts fail with EBADF.
    pub fn close_endpoint(&mut self) {
        if !self.ep.is_null() {
            // SAFETY: ep is live; closed once, then forgotten.
            unsafe { fi::fi_close(self.ep.cast()) };
            self.ep = ptr::null_mut();
        }
    }

    /// The error of a call on this rail that returned `ret`.
    #[cold]
    pub fn err(&self, call: &'static str, ret: i64) -> Error {
        Error::call(call, ret, self.lib, Some(&self.provider))
    }

    fn ep(&self) -> Result<*mut sys::fid_ep> {
        if self.ep.is_null() {
            Err(Error::Usage("the rail's endpoint is closed".into()))
        } else {
            Ok(self.ep)
        }
    }

    /// `fi_getname` of the endpoint.
    pub fn name(&self) -> Result<Vec<u8>> {
        let ep = self.ep()?;
        let mut buf = vec![0u8; 256];
        let mut len: sys::size_t = buf.len() as _;
        // SAFETY: ep live; buf/len describe writable memory of len bytes.
        let mut ret = unsafe { fi::fi_getname(ep, buf.as_mut_ptr().cast(), &mut len) };
        if ret == -(sys::FI_ETOOSMALL as i32) {
            buf.resize(len as usize, 0);
            // SAFETY: as above, with the size the provider asked for.
            ret = unsafe { fi::fi_getname(ep, buf.as_mut_ptr().cast(), &mut len) };
        }
        if ret != 0 {
            return Err(self.err("fi_getname", ret as i64));
        }
        buf.truncate(len as usize);
        Ok(buf)
    }

    /// `fi_av_insert` of one address.
    pub fn av_insert(&self, addr: &[u8]) -> Result<u64> {
        let mut out: sys::fi_addr_t = sys::FI_ADDR_NOTAVAIL;
        // SAFETY: av live; addr is readable (the provider reads one address of its format from
        // it — we checked below that the length matches our own address length); out writable.
        let ret = unsafe {
            fi::fi_av_insert(
                self.av,
                addr.as_ptr().cast(),
                1,
                &mut out,
                0,
                ptr::null_mut(),
            )
        };
        if ret != 1 {
            return Err(if ret < 0 {
                self.err("fi_av_insert", ret as i64)
            } else {
                Error::Usage(
                    "fi_av_insert rejected the peer address (was it made by the same provider?)"
                        .into(),
                )
            });
        }
        Ok(out)
    }

    /// Registers `buf` for local and remote access. `requested_key` is used unless the provider
    /// chooses keys (FI_MR_PROV_KEY); FI_MR_ENDPOINT binds and enables the region. `use_dmabuf`
    /// (decided by the caller from [`crate::MrPath`]) registers through the buffer's dmabuf
    /// (`FI_MR_DMABUF`); it must only be true when `buf.dmabuf()` is `Some`.
    pub fn register(
        &self,
        buf: Arc<dyn MemoryBuffer>,
        requested_key: u64,
        use_dmabuf: bool,
    ) -> Result<RawMr> {
        let ptr = buf.as_ptr();
        let len = buf.len();
        let iov = sys::iovec {
            iov_base: ptr.cast(),
            iov_len: len as _,
        };
        let mut attr = sys::fi_mr_attr::zeroed();
        attr.buf.mr_iov = &iov;
        attr.iov_count = 1;
        attr.access = sys::FI_SEND
            | sys::FI_RECV
            | sys::FI_READ
            | sys::FI_WRITE
            | sys::FI_REMOTE_READ
            | sys::FI_REMOTE_WRITE;
        attr.requested_key = requested_key;
        let mut flags = 0u64;
        let dmabuf_desc;
        match buf.hmem() {
            Hmem::System => attr.iface = sys::FI_HMEM_SYSTEM,
            Hmem::Cuda { device } => {
                attr.iface = sys::FI_HMEM_CUDA;
                attr.device.cuda = device;
                if buf.device_only() {
                    flags |= sys::FI_HMEM_DEVICE_ONLY;
                }
            }
        }
        if let (Some(d), true) = (buf.dmabuf(), use_dmabuf) {
            dmabuf_desc = sys::fi_mr_dmabuf {
                fd: d.fd,
                offset: d.offset,
                len,
                base_addr: ptr.cast(),
            };
            attr.buf.dmabuf = &dmabuf_desc;
            flags |= sys::FI_MR_DMABUF;
        }
        let mut mr: *mut sys::fid_mr = ptr::null_mut();
        // SAFETY: domain live; attr (and the iov/dmabuf it points at) outlive the call; the
        // buffer is kept alive by the Arc stored in RawMr for as long as the registration.
        let ret = unsafe { fi::fi_mr_regattr(self.domain, &attr, flags, &mut mr) };
        if ret != 0 {
            return Err(self.err("fi_mr_regattr", ret as i64));
        }
        let mut raw = RawMr {
            lib: self.lib,
            mr,
            // SAFETY: mr was just registered successfully.
            desc: unsafe { fi::fi_mr_desc(mr) },
            key: 0,
            ptr,
            len,
            _buf: buf,
        };
        if self.mr_mode & sys::FI_MR_ENDPOINT != 0 {
            let ep = self.ep()?;
            // SAFETY: mr and ep are live.
            let ret = unsafe { fi::fi_mr_bind(mr, ep.cast(), 0) };
            if ret != 0 {
                return Err(self.err("fi_mr_bind", ret as i64));
            }
            // SAFETY: mr is live and bound.
            let ret = unsafe { fi::fi_mr_enable(mr) };
            if ret != 0 {
                return Err(self.err("fi_mr_enable", ret as i64));
            }
        }
        // SAFETY: mr is live (and enabled where required); the key is valid from now on.
        let key = unsafe { fi::fi_mr_key(mr) };
        if key == sys::FI_KEY_NOTAVAIL {
            return Err(Error::Usage(
                "the provider's memory keys do not fit in 64 bits (FI_MR_RAW), which efabench does not support".into(),
            ));
        }
        raw.key = key;
        Ok(raw)
    }

    /// Posts one operation. Returns the raw libfabric return value (0, or `-errno`;
    /// `-FI_EAGAIN` means "progress and retry").
    ///
    /// The local range `[off, off+len)` is checked against `mr` here; `slot` must be a free
    /// context index (checked against the table size); see the module docs for the lifetime
    /// invariant.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn post(
        &self,
        op: RawOp,
        mr: &RawMr,
        off: usize,
        len: usize,
        peer: u64,
        slot: u32,
    ) -> Result<i64> {
        let ep = self.ep()?;
        if off.checked_add(len).is_none_or(|end| end > mr.len) {
            return Err(Error::Usage(format!(
                "range {off}+{len} is outside the registered region of {} bytes",
                mr.len
            )));
        }
        if slot as usize >= self.ctx.ctx.len() {
            return Err(Error::Usage("operation slot out of range".into()));
        }
        let ctx = self.ctx.ptr(slot);
        // SAFETY: off+len lies inside the registered, live region (checked above; liveness per
        // the module invariant); desc belongs to that region; ctx points at a context that stays
        // valid for the rail's life and is reserved for this op until its completion is read.
        let buf = unsafe { mr.ptr.add(off) }.cast::<c_void>();
        let (desc, l) = (mr.desc, len as sys::size_t);
        // SAFETY: see above; ep is live.
        let ret = unsafe {
            match op {
                RawOp::Send => fi::fi_send(ep, buf, l, desc, peer, ctx),
                RawOp::SendData(d) => fi::fi_senddata(ep, buf, l, desc, d, peer, ctx),
                RawOp::Recv => fi::fi_recv(ep, buf, l, desc, peer, ctx),
                RawOp::Write { addr, key } => fi::fi_write(ep, buf, l, desc, peer, addr, key, ctx),
                RawOp::WriteData { addr, key, data } => {
                    fi::fi_writedata(ep, buf, l, desc, data, peer, addr, key, ctx)
                }
                RawOp::WriteMsg {
                    addr,
                    key,
                    data,
                    flags,
                } => {
                    // SAFETY (the message): iov, desc and rma_iov live on this stack frame until
                    // fi_writemsg returns, which is all libfabric requires of them (it copies
                    // the descriptors before returning); the buffer itself is covered above.
                    let iov = sys::iovec {
                        iov_base: buf,
                        iov_len: l,
                    };
                    let mut d = desc;
                    let rma = sys::fi_rma_iov { addr, len: l, key };
                    let cq_data = if data.is_some() {
                        sys::FI_REMOTE_CQ_DATA
                    } else {
                        0
                    };
                    let msg = sys::fi_msg_rma {
                        msg_iov: &iov,
                        desc: &mut d,
                        iov_count: 1,
                        addr: peer,
                        rma_iov: &rma,
                        rma_iov_count: 1,
                        context: ctx,
                        data: data.unwrap_or(0),
                    };
                    fi::fi_writemsg(ep, &msg, flags | cq_data | sys::FI_COMPLETION)
                }
                RawOp::Read { addr, key } => fi::fi_read(ep, buf, l, desc, peer, addr, key, ctx),
                RawOp::Inject => fi::fi_inject(ep, buf, l, peer),
                RawOp::InjectWrite { addr, key } => {
                    fi::fi_inject_write(ep, buf, l, peer, addr, key)
                }
            }
        };
        Ok(ret as i64)
    }

    /// `fi_cancel` of the operation using `slot` (best effort; its completion still arrives).
    pub fn cancel(&self, slot: u32) {
        if let (Ok(ep), true) = (self.ep(), (slot as usize) < self.ctx.ctx.len()) {
            // SAFETY: ep is live; the context belongs to an operation we posted.
            unsafe { fi::fi_cancel(ep, self.ctx.ptr(slot)) };
        }
    }

    /// The two receives and injects of a ping-pong between `send` and `recv` (see
    /// [`RawPair`]): `len` bytes at `offs[i]` of both regions for slot `i`, to `peer`, the
    /// receive of slot `i` in context slot `slots[i]`. Checks the ranges and the context slots.
    pub fn pair(
        &self,
        (send, recv): (&RawMr, &RawMr),
        offs: [usize; 2],
        len: usize,
        peer: u64,
        slots: [u32; 2],
    ) -> Result<RawPair> {
        let ep = self.ep()?;
        for (mr, name) in [(send, "send"), (recv, "receive")] {
            for off in offs {
                if off.checked_add(len).is_none_or(|end| end > mr.len) {
                    return Err(Error::Usage(format!(
                        "{name} range {off}+{len} is outside the registered region of {} bytes",
                        mr.len
                    )));
                }
            }
        }
        if slots.iter().any(|&s| s as usize >= self.ctx.ctx.len()) || slots[0] == slots[1] {
            return Err(Error::Usage("ping-pong context slots out of range".into()));
        }
        // SAFETY: offs[i]+len lies inside both registered regions (checked above); `add` of an
        // in-bounds offset of a live allocation. The pointers are dereferenced only by the
        // provider, while the regions stay pinned (see RawPair).
        let at = |mr: &RawMr, i: usize| unsafe { mr.ptr.add(offs[i]) }.cast::<c_void>();
        Ok(RawPair {
            ep,
            peer,
            len: len as sys::size_t,
            out: [at(send, 0), at(send, 1)],
            into: [at(recv, 0), at(recv, 1)],
            recv_desc: recv.desc,
            ctx: [self.ctx.ptr(slots[0]), self.ctx.ptr(slots[1])],
        })
    }

    /// Reads up to [`CQ_BATCH`] completions and hands each to `f`.
    #[inline(always)]
    pub fn cq_read(&self, mut f: impl FnMut(RawCompletion)) -> CqRead {
        let mut ent = std::mem::MaybeUninit::<[sys::fi_cq_data_entry; CQ_BATCH]>::uninit();
        // SAFETY: cq is live; ent has room for CQ_BATCH entries of the CQ's format (DATA). The
        // provider writes the first `n` entries it returns.
        let n = unsafe { fi::fi_cq_read(self.cq, ent.as_mut_ptr().cast(), CQ_BATCH as _) };
        if n > 0 {
            let n = (n as usize).min(CQ_BATCH);
            let base = ent.as_ptr().cast::<sys::fi_cq_data_entry>();
            for i in 0..n {
                // SAFETY: entries 0..n were written by fi_cq_read (n ≤ CQ_BATCH, checked).
                let e = unsafe { base.add(i).read() };
                f(RawCompletion {
                    slot: self.ctx.slot_of(e.op_context),
                    flags: e.flags,
                    len: e.len as usize,
                    data: e.data,
                });
            }
            return CqRead::Entries;
        }
        if n == -(sys::FI_EAGAIN as isize) as sys::ssize_t || n == 0 {
            return CqRead::Empty;
        }
        if n == -(sys::FI_EAVAIL as isize) as sys::ssize_t {
            return match self.cq_readerr() {
                Some(e) => CqRead::Error(e),
                None => CqRead::Empty,
            };
        }
        let errno = (-n) as i32;
        CqRead::Error(RawCqError {
            slot: None,
            errno,
            prov_errno: 0,
            text: format!("fi_cq_read failed: {}", self.lib.strerror(errno)),
        })
    }

    fn cq_readerr(&self) -> Option<RawCqError> {
        let mut e = sys::CqErrEntry::zeroed();
        // SAFETY: cq live; e is a zeroed fi_cq_err_entry with spare room after it.
        let n = unsafe { fi::fi_cq_readerr(self.cq, &mut e.entry, 0) };
        if n != 1 {
            return None;
        }
        let mut buf = [0 as c_char; 256];
        // SAFETY: cq live; err_data is what the provider gave us in this entry (valid until the
        // next readerr); buf is writable for its length. The result is NULL or a C string.
        let p = unsafe {
            fi::fi_cq_strerror(
                self.cq,
                e.entry.prov_errno,
                e.entry.err_data,
                buf.as_mut_ptr(),
                buf.len() as _,
            )
        };
        let prov_text = cstr_opt(p).unwrap_or_default();
        // Some providers (1.17's shm) report a negative err; libfabric defines it positive.
        let errno = e.entry.err.abs();
        let generic = self.lib.strerror(errno);
        let text = if prov_text.is_empty() || prov_text == generic {
            generic
        } else {
            format!("{prov_text} ({generic})")
        };
        Some(RawCqError {
            slot: self.ctx.slot_of(e.entry.op_context),
            errno,
            prov_errno: e.entry.prov_errno,
            text,
        })
    }
}

/// A ping-pong's posts resolved once, for [`crate::rail::PingPong`]: the endpoint, the peer and,
/// per slot (0 or 1), the bytes an inject sends, the bytes a receive fills and the receive's
/// context. Posting is then the libfabric call alone, as in fabtests' loop (completions come
/// from the rail's one CQ, read by `RawRail::cq_read`).
///
/// Validity: the pointers stay valid while the rail is alive and its endpoint open, both
/// regions stay registered and the two context slots stay reserved for this pair. `PingPong`
/// keeps all of that for as long as it owns a `RawPair`: it borrows the rail exclusively (the
/// rail cannot be dropped, so the endpoint stays open), pins both regions (their in-flight count,
/// so neither can be deregistered) and holds both context slots out of the rail's free list.
pub(crate) struct RawPair {
    ep: *mut sys::fid_ep,
    peer: u64,
    len: sys::size_t,
    out: [*mut c_void; 2],
    into: [*mut c_void; 2],
    recv_desc: *mut c_void,
    ctx: [*mut c_void; 2],
}

impl RawPair {
    /// `fi_recv` of `len` bytes into slot `i & 1`, in that slot's context. The caller must not
    /// post a slot whose receive is still in flight (its context is the provider's until then).
    #[inline(always)]
    pub fn recv(&self, i: usize) -> isize {
        let i = i & 1;
        // SAFETY: ep is the live endpoint, into[i]..+len lies in a pinned registered region
        // whose descriptor is recv_desc, and ctx[i] is a context reserved for this slot that the
        // caller (PingPong) does not reuse before its completion is read (see RawPair).
        unsafe {
            fi::fi_recv(
                self.ep,
                self.into[i],
                self.len,
                self.recv_desc,
                sys::FI_ADDR_UNSPEC,
                self.ctx[i],
            ) as isize
        }
    }

    /// `fi_inject` of slot `i & 1`'s `len` bytes to the peer (no completion, no context).
    #[inline(always)]
    pub fn inject(&self, i: usize) -> isize {
        // SAFETY: ep is the live endpoint and out[i]..+len lies in a pinned registered region;
        // fi_inject copies the bytes before it returns.
        unsafe { fi::fi_inject(self.ep, self.out[i & 1], self.len, self.peer) as isize }
    }
}

/// The operation to post.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RawOp {
    Send,
    SendData(u64),
    Recv,
    Write {
        addr: u64,
        key: u64,
    },
    WriteData {
        addr: u64,
        key: u64,
        data: u64,
    },
    /// `fi_writemsg` with explicit flags (`FI_MORE`, `FI_DELIVERY_COMPLETE`), and remote CQ data
    /// when `data` is given.
    WriteMsg {
        addr: u64,
        key: u64,
        data: Option<u64>,
        flags: u64,
    },
    Read {
        addr: u64,
        key: u64,
    },
    Inject,
    InjectWrite {
        addr: u64,
        key: u64,
    },
}
