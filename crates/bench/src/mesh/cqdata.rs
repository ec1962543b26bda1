//! The one codec of the 32 bits of remote CQ data every write and send carries (EFA's
//! `cq_data_size` is 4 bytes, so nothing wider survives the wire): a 2-bit kind at the top,
//! then an iteration number, a source rank and an index, each as wide as its [`CqCodec`]
//! says. The benchmarks differ only in how they share the 30 bits below the kind: the mesh's
//! control words and payload stripes ([`MESH`]) need 14 bits of window and 16 of source; ep
//! ([`EP`]) needs a 16-bit channel index, leaving 4 bits of iteration and 10 of source. One
//! encoder and one decoder serve both, so that a field's width is stated once and every word
//! is checked to fit 32 bits the same way.

/// The kinds a benchmark's words announce: four, in the top 2 bits.
pub trait CqKind: Copy {
    /// The kinds by their 2-bit code.
    const ALL: [Self; 4];
    /// The 2-bit code of this kind.
    fn code(self) -> u64;
}

/// How the 30 bits below the kind are shared: iteration (highest), source, index (lowest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqCodec {
    iter_bits: u32,
    src_bits: u32,
    index_bits: u32,
}

/// The mesh's layout: kind (2) | iteration (14) | source (16).
pub const MESH: CqCodec = CqCodec::new(14, 16, 0);
/// ep's layout: kind (2) | iteration (4) | source (10) | channel index (16).
pub const EP: CqCodec = CqCodec::new(4, 10, 16);

/// One word, decoded: the source and iteration come back reduced to their fields' widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqWord<K> {
    pub kind: K,
    pub iter: u64,
    pub src: u32,
    pub index: u16,
}

impl CqCodec {
    /// A layout of the three fields; together with the kind they must fill 32 bits exactly,
    /// and the index fits a `u16`.
    pub const fn new(iter_bits: u32, src_bits: u32, index_bits: u32) -> CqCodec {
        assert!(iter_bits + src_bits + index_bits == 30 && index_bits <= 16);
        CqCodec {
            iter_bits,
            src_bits,
            index_bits,
        }
    }

    /// Iterations are carried modulo this.
    pub const fn iter_mod(self) -> u64 {
        1 << self.iter_bits
    }

    /// Ranks the source field can name.
    pub const fn max_ranks(self) -> u32 {
        1 << self.src_bits
    }

    const fn mask(bits: u32) -> u64 {
        (1 << bits) - 1
    }

    /// The word of `kind`, iteration `iter`, source `src` and index `index`, each field
    /// truncated to its width.
    #[inline]
    pub fn encode<K: CqKind>(self, kind: K, iter: u64, src: u32, index: u16) -> u64 {
        let (src_at, iter_at) = (self.index_bits, self.index_bits + self.src_bits);
        (kind.code() << 30)
            | ((iter & Self::mask(self.iter_bits)) << iter_at)
            | ((u64::from(src) & Self::mask(self.src_bits)) << src_at)
            | (u64::from(index) & Self::mask(self.index_bits))
    }

    /// Splits a word; `None` when it does not fit 32 bits.
    #[inline]
    pub fn decode<K: CqKind>(self, d: u64) -> Option<CqWord<K>> {
        if d >> 32 != 0 {
            return None;
        }
        let (src_at, iter_at) = (self.index_bits, self.index_bits + self.src_bits);
        Some(CqWord {
            kind: K::ALL[(d >> 30) as usize],
            iter: (d >> iter_at) & Self::mask(self.iter_bits),
            src: ((d >> src_at) & Self::mask(self.src_bits)) as u32,
            index: (d & Self::mask(self.index_bits)) as u16,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum K {
        A,
        B,
        C,
        D,
    }

    impl CqKind for K {
        const ALL: [K; 4] = [K::A, K::B, K::C, K::D];
        fn code(self) -> u64 {
            self as u64
        }
    }

    #[test]
    fn the_layouts_put_every_field_where_their_benchmarks_expect_it() {
        assert_eq!(MESH.encode(K::B, 3, 5, 0), (1 << 30) | (3 << 16) | 5);
        assert_eq!(
            EP.encode(K::C, 3, 5, 7),
            (2 << 30) | (3 << 26) | (5 << 16) | 7
        );
        assert_eq!((MESH.iter_mod(), MESH.max_ranks()), (1 << 14, 1 << 16));
        assert_eq!((EP.iter_mod(), EP.max_ranks()), (16, 1024));
    }

    #[test]
    fn fields_are_truncated_to_their_widths_and_never_spill() {
        for c in [MESH, EP, CqCodec::new(30, 0, 0), CqCodec::new(0, 14, 16)] {
            let d = c.encode(K::A, u64::MAX, u32::MAX, u16::MAX);
            assert!(d < 1 << 30, "{c:?}: {d:#x}");
            let w: CqWord<K> = c.decode(c.encode(K::D, u64::MAX, 0, 0)).unwrap();
            assert_eq!(
                (w.kind, w.iter, w.src, w.index),
                (K::D, c.iter_mod() - 1, 0, 0)
            );
            let w: CqWord<K> = c.decode(c.encode(K::C, 0, 0, u16::MAX)).unwrap();
            assert_eq!(u64::from(w.index), (1 << c.index_bits) - 1);
        }
        assert_eq!(MESH.decode::<K>(1 << 32), None);
    }
}
