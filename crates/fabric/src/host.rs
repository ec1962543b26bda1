//! Page-aligned host memory for registration.
//!
//! The NIC may read or write a registered buffer at any time (a peer's RDMA write lands whenever
//! it lands), so the buffer is never handed out as a `&[u8]`/`&mut [u8]`; it is read and written
//! by copies, which keeps Rust's aliasing rules out of the DMA's way. Page alignment is what
//! providers and `ibv_reg_mr` like best and what fabtests uses.

use crate::error::{Error, Result};
use crate::raw::PageAlloc;

/// Zero-initialised, page-aligned host memory; implements [`crate::MemoryBuffer`].
pub struct HostBuffer {
    alloc: PageAlloc,
}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("ptr", &self.alloc.ptr())
            .field("len", &self.alloc.len())
            .finish()
    }
}

const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// The system's transparent huge page mode (`always`, `madvise` or `never`: the bracketed word
/// of sysfs), or `None` where the kernel has none.
pub fn thp_mode() -> Option<String> {
    let s = std::fs::read_to_string(THP_ENABLED).ok()?;
    let start = s.find('[')? + 1;
    let end = start + s[start..].find(']')?;
    Some(s[start..end].to_string())
}

impl HostBuffer {
    /// Allocates `len` zeroed bytes aligned to the page size.
    pub fn new(len: usize) -> Result<Self> {
        Ok(HostBuffer {
            alloc: PageAlloc::new(len)?,
        })
    }

    /// Allocates `len` zeroed bytes on transparent huge pages (whole 2 MiB pages, advised
    /// with `MADV_HUGEPAGE`). A remote process's copy (shm's `process_vm_readv`) or a pinning
    /// registration then walks one page-table entry per 2 MiB instead of one per 4 KiB page.
    /// Fails with a usage error where the system has transparent huge pages turned off.
    pub fn new_huge(len: usize) -> Result<Self> {
        if thp_mode().as_deref() == Some("never") {
            return Err(Error::Usage(format!(
                "transparent huge pages are off on this host ({THP_ENABLED} says never); use --mem \
                 host, or turn them on with `echo madvise > {THP_ENABLED}`"
            )));
        }
        Ok(HostBuffer {
            alloc: PageAlloc::new_huge(len)?,
        })
    }

    /// Whether the buffer was allocated with [`HostBuffer::new_huge`].
    pub fn is_huge(&self) -> bool {
        self.alloc.is_huge()
    }

    pub(crate) fn alloc(&self) -> &PageAlloc {
        &self.alloc
    }

    /// Length in bytes.
    pub fn size(&self) -> usize {
        self.alloc.len()
    }

    fn check(&self, off: usize, len: usize) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.alloc.len() => Ok(()),
            _ => Err(Error::Usage(format!(
                "range {off}+{len} is outside the host buffer of {} bytes",
                self.alloc.len()
            ))),
        }
    }

    /// Copies `src` into the buffer at `off`.
    pub fn write_at(&self, off: usize, src: &[u8]) -> Result<()> {
        self.check(off, src.len())?;
        self.alloc.write_at(off, src);
        Ok(())
    }

    /// Copies bytes at `off` into `dst`.
    pub fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        self.check(off, dst.len())?;
        self.alloc.read_at(off, dst);
        Ok(())
    }

    /// Sets `len` bytes at `off` to `byte`.
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> Result<()> {
        self.check(off, len)?;
        self.alloc.fill(off, len, byte);
        Ok(())
    }

    /// The bytes, for exclusive use: `&mut self` keeps every `&self` copy and any registration
    /// (which holds a shared `Arc`) away while the slice lives. Shared readers use
    /// [`HostBuffer::read_at`]. The old shared `as_slice` is gone because `write_at(&self)` (and
    /// the NIC) could change the bytes under it; the borrow checker now refuses that pattern:
    ///
    /// ```compile_fail,E0502
    /// use efabench_fabric::HostBuffer;
    /// let mut b = HostBuffer::new(64).unwrap();
    /// let view = b.as_mut_slice();
    /// b.write_at(0, &[1, 2, 3]).unwrap(); // a write through &self while the slice is alive
    /// assert_eq!(view[0], 0);
    /// ```
    ///
    /// and neither can a shared slice be taken at all:
    ///
    /// ```compile_fail,E0599
    /// use efabench_fabric::HostBuffer;
    /// let b = HostBuffer::new(64).unwrap();
    /// let view: &[u8] = b.as_slice();
    /// b.write_at(0, &[1, 2, 3]).unwrap();
    /// assert_eq!(view[0], 0);
    /// ```
    ///
    /// (Stable rustdoc does not check the error codes named above; the passing example below
    /// has the same setup, so each failure comes from its marked line.)
    ///
    /// What works: copy out through `&self`, or mutate through `&mut self`.
    ///
    /// ```
    /// use efabench_fabric::HostBuffer;
    /// let mut b = HostBuffer::new(64).unwrap();
    /// b.as_mut_slice()[0] = 9;
    /// b.write_at(1, &[1, 2, 3]).unwrap();
    /// let mut copy = [0u8; 4];
    /// b.read_at(0, &mut copy).unwrap();
    /// assert_eq!(copy, [9, 1, 2, 3]);
    /// ```
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.alloc.as_mut_slice()
    }

    /// A copy of `len` bytes at `off`.
    pub fn to_vec(&self, off: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read_at(off, &mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_buffers_are_whole_aligned_huge_pages_or_refused() {
        match HostBuffer::new_huge(3 << 20) {
            Ok(b) => {
                assert!(b.is_huge());
                assert_eq!(b.size(), 3 << 20);
                assert_eq!(b.alloc().ptr() as usize % crate::raw::HUGE_PAGE, 0);
                let mut tail = [1u8; 16];
                b.alloc().read_at((3 << 20) - 16, &mut tail);
                assert_eq!(tail, [0; 16], "zeroed");
                assert_ne!(thp_mode().as_deref(), Some("never"));
            }
            Err(e) => {
                assert_eq!(thp_mode().as_deref(), Some("never"), "{e}");
                assert!(e.to_string().contains("--mem host"), "{e}");
            }
        }
        assert!(!HostBuffer::new(4096).unwrap().is_huge());
    }
}
