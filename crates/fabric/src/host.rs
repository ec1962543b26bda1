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

impl HostBuffer {
    /// Allocates `len` zeroed bytes aligned to the page size.
    pub fn new(len: usize) -> Result<Self> {
        Ok(HostBuffer {
            alloc: PageAlloc::new(len)?,
        })
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
