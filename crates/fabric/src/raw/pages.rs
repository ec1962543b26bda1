//! Page-aligned host memory for registered buffers (normal or huge pages).

use super::*;

/// Page-aligned, zero-initialised host memory owned by a [`crate::HostBuffer`].
pub(crate) struct PageAlloc {
    ptr: *mut u8,
    layout: std::alloc::Layout,
    len: usize,
}

// SAFETY: PageAlloc owns its allocation; all access goes through raw pointer copies (the NIC may
// write it at any time, so it is treated as shared DMA memory, never as a Rust reference).
unsafe impl Send for PageAlloc {}
// SAFETY: shared access goes only through write_at/read_at/fill, which use aligned word atomics
// (see `word`), so concurrent copies from several threads are not data races.
unsafe impl Sync for PageAlloc {}

/// The transparent huge page size on x86-64 and aarch64 with 4 KiB base pages.
pub const HUGE_PAGE: usize = 2 << 20;

impl PageAlloc {
    pub fn new(len: usize) -> Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        // Whole words, so the word-atomic copies below never reach past the allocation.
        let layout = std::alloc::Layout::from_size_align(len.max(1).next_multiple_of(8), page)
            .map_err(|_| Error::Usage(format!("cannot allocate a host buffer of {len} bytes")))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::Usage(format!(
                "out of memory allocating a host buffer of {len} bytes"
            )));
        }
        Ok(PageAlloc { ptr, layout, len })
    }

    /// As [`PageAlloc::new`], on transparent huge pages: whole 2 MiB pages, 2 MiB-aligned,
    /// advised with `MADV_HUGEPAGE` before the first touch (so the kernel backs them with huge
    /// pages at the first fault where it has them; it falls back to small pages silently).
    pub fn new_huge(len: usize) -> Result<Self> {
        let size = len.max(1).next_multiple_of(HUGE_PAGE);
        let layout = std::alloc::Layout::from_size_align(size, HUGE_PAGE)
            .map_err(|_| Error::Usage(format!("cannot allocate a host buffer of {len} bytes")))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(Error::Usage(format!(
                "out of memory allocating a huge-page host buffer of {len} bytes"
            )));
        }
        // SAFETY: ptr..ptr+size is the allocation just made, 2 MiB-aligned; madvise only sets
        // a paging hint on it. A failure (THP compiled out) leaves small pages, which is what
        // the header reports from the system's THP setting.
        unsafe { libc::madvise(ptr as *mut libc::c_void, size, libc::MADV_HUGEPAGE) };
        // SAFETY: the allocation is `size` writable bytes, not yet shared with anyone.
        unsafe { std::ptr::write_bytes(ptr, 0, size) };
        Ok(PageAlloc { ptr, layout, len })
    }

    /// Whether the allocation was made on huge pages ([`PageAlloc::new_huge`]).
    pub fn is_huge(&self) -> bool {
        self.layout.align() == HUGE_PAGE
    }
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    /// The aligned 8-byte word at `word_start`, as an atomic.
    ///
    /// Why atomics: the buffer is shared (`&self` from several threads, and the NIC may DMA into
    /// it at any time), so plain copies through it would be data races. Every CPU access goes
    /// through relaxed 8-byte atomics on aligned words (a plain `mov` on x86), never a slice.
    fn word(&self, word_start: usize) -> &AtomicU64 {
        debug_assert!(word_start % 8 == 0 && word_start + 8 <= self.layout.size());
        // SAFETY: ptr is page aligned and the allocation covers whole words (layout rounded up
        // to 8), so word_start..+8 lies inside it and is 8-aligned; the memory lives as long as
        // `self`; all shared CPU accesses are atomics of the same size on the same words.
        unsafe { AtomicU64::from_ptr(self.ptr.add(word_start) as *mut u64) }
    }
    /// Copies `src` to offset `off` (range checked by the caller).
    pub fn write_at(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.len);
        let (mut pos, mut rest) = (off, src);
        while !rest.is_empty() {
            let (start, skip) = (pos & !7, pos & 7);
            let take = (8 - skip).min(rest.len());
            let word = self.word(start);
            if take == 8 {
                let w: [u8; 8] = rest[..8].try_into().expect("8 bytes");
                word.store(u64::from_ne_bytes(w), Ordering::Relaxed);
            } else {
                let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                    let mut w = old.to_ne_bytes();
                    w[skip..skip + take].copy_from_slice(&rest[..take]);
                    Some(u64::from_ne_bytes(w))
                });
            }
            pos += take;
            rest = &rest[take..];
        }
    }
    /// Copies from offset `off` into `dst` (range checked by the caller).
    pub fn read_at(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.len);
        let (mut pos, mut done) = (off, 0);
        while done < dst.len() {
            let (start, skip) = (pos & !7, pos & 7);
            let take = (8 - skip).min(dst.len() - done);
            let w = self.word(start).load(Ordering::Relaxed).to_ne_bytes();
            dst[done..done + take].copy_from_slice(&w[skip..skip + take]);
            pos += take;
            done += take;
        }
    }
    /// The bytes, for the exclusive owner (`&mut self`: no shared copy and no registration,
    /// which holds an `Arc`, can be live).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr holds len initialised (zeroed at allocation) bytes owned by self, and
        // &mut self gives exclusive access for the slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    pub fn fill(&self, off: usize, len: usize, byte: u8) {
        let chunk = [byte; 256];
        let mut at = off;
        while at < off + len {
            let n = (off + len - at).min(chunk.len());
            self.write_at(at, &chunk[..n]);
            at += n;
        }
    }
}

impl Drop for PageAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// `MemoryBuffer` for `HostBuffer` lives here because the trait is `unsafe` to implement.
// SAFETY: ptr..ptr+len is one live host allocation for as long as the HostBuffer lives, and it
// never moves.
unsafe impl MemoryBuffer for crate::host::HostBuffer {
    fn as_ptr(&self) -> *mut u8 {
        self.alloc().ptr()
    }
    fn len(&self) -> usize {
        self.alloc().len()
    }
    fn hmem(&self) -> Hmem {
        Hmem::System
    }
}
