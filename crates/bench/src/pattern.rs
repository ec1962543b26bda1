//! The verification pattern every benchmark writes and checks.
//!
//! Libefaxx filled each buffer with the sender's rank and checked only the final state, so a
//! transfer that never arrived, arrived twice, or landed in the wrong slot looked fine. Here each
//! payload is a pseudo-random stream derived from `(iteration, source rank, destination rank,
//! slot)`: a stale buffer from the previous iteration, a message from the wrong peer, or two
//! messages swapped in a window all fail the check.
//!
//! The function is tiny and branch-free so the GPU kernels (crates/gpu/kernels) compute the same
//! bytes on the device: keep `mix`, `seed` and `word` in step with `pattern.cuh` there.

/// SplitMix64's finaliser: a cheap bijective mix of 64 bits.
#[inline(always)]
pub const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_133D_11EB);
    z ^ (z >> 31)
}

/// The seed of one payload: iteration, sender, receiver and slot inside a window.
#[inline(always)]
pub const fn seed(iter: u64, src: u32, dst: u32, slot: u32) -> u64 {
    mix(iter.wrapping_mul(0x0000_0100_0000_01B3)
        ^ ((src as u64) << 48)
        ^ ((dst as u64) << 32)
        ^ ((slot as u64) << 8)
        ^ 0xEFA0_BE4C)
}

/// Mixed into the position stream so it shares no structure with the seeds.
pub const SALT: u64 = 0x5EED_0FEF_A0BE_4C00;

/// Word `i` of the position stream every payload shares: it makes each 8-byte position unique, so
/// a chunk delivered at the wrong offset fails the check.
#[inline(always)]
pub const fn base_word(i: u64) -> u64 {
    mix(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ SALT)
}

/// 64-bit word `i` of the payload with this seed (little-endian bytes in memory): the position
/// stream XOR the seed. The seed is already a full 64-bit mix of (iteration, source, destination,
/// slot), so a payload of any other iteration, peer or slot differs in every word; and with the
/// position stream computed once ([`Stream`]), filling and checking run at memory speed, so
/// verification stays cheap even when it cannot hide behind the transfer.
#[inline(always)]
pub const fn word(seed: u64, i: u64) -> u64 {
    base_word(i) ^ seed
}

/// Fill `buf` with the pattern for `seed`. A trailing partial word takes the low bytes of its word.
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut chunks = buf.chunks_exact_mut(8);
    let mut i = 0u64;
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, i).to_le_bytes());
        i += 1;
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&word(seed, i).to_le_bytes()[..n]);
}

/// Number of 8-byte words (a trailing partial word counts as one) that differ from the pattern.
pub fn mismatches(buf: &[u8], seed: u64) -> u64 {
    let mut bad = 0u64;
    let mut chunks = buf.chunks_exact(8);
    let mut i = 0u64;
    for c in &mut chunks {
        let got = u64::from_le_bytes(c.try_into().expect("chunk of 8"));
        bad += (got != word(seed, i)) as u64;
        i += 1;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        bad += (rest != &word(seed, i).to_le_bytes()[..rest.len()]) as u64;
    }
    bad
}

/// The position stream, computed once and reused: [`Stream::fill`] and [`Stream::mismatches`]
/// give the same bytes and counts as [`fill`] and [`mismatches`], as an XOR stream.
#[derive(Debug, Default, Clone)]
pub struct Stream {
    base: Vec<u64>,
}

impl Stream {
    fn ensure(&mut self, bytes: usize) {
        let words = bytes.div_ceil(8);
        for i in self.base.len()..words {
            self.base.push(base_word(i as u64));
        }
    }

    /// Same bytes as [`fill`].
    pub fn fill(&mut self, buf: &mut [u8], seed: u64) {
        self.ensure(buf.len());
        let full = buf.len() / 8;
        let mut chunks = buf.chunks_exact_mut(8);
        for (c, b) in (&mut chunks).zip(&self.base) {
            c.copy_from_slice(&(b ^ seed).to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let n = rest.len();
            let w = self.base[full] ^ seed;
            rest.copy_from_slice(&w.to_le_bytes()[..n]);
        }
    }

    /// Same count as [`mismatches`].
    pub fn mismatches(&mut self, buf: &[u8], seed: u64) -> u64 {
        self.ensure(buf.len());
        let mut chunks = buf.chunks_exact(8);
        let mut bad = 0u64;
        for (c, b) in (&mut chunks).zip(&self.base) {
            let got = u64::from_le_bytes(c.try_into().expect("chunk of 8"));
            bad += (got != b ^ seed) as u64;
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let w = self.base[buf.len() / 8] ^ seed;
            bad += (rest != &w.to_le_bytes()[..rest.len()]) as u64;
        }
        bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check_is_clean_for_odd_sizes() {
        for len in [0usize, 1, 7, 8, 9, 63, 4096, 4099] {
            let mut b = vec![0u8; len];
            fill(&mut b, seed(3, 0, 1, 0));
            assert_eq!(mismatches(&b, seed(3, 0, 1, 0)), 0, "len {len}");
        }
    }

    #[test]
    fn stale_wrong_peer_and_swapped_slots_are_caught() {
        let mut b = vec![0u8; 256];
        fill(&mut b, seed(7, 0, 1, 0));
        assert_eq!(
            mismatches(&b, seed(8, 0, 1, 0)),
            32,
            "previous iteration's data"
        );
        assert_eq!(
            mismatches(&b, seed(7, 0, 2, 0)),
            32,
            "data meant for another peer"
        );
        assert_eq!(
            mismatches(&b, seed(7, 0, 1, 1)),
            32,
            "data of another window slot"
        );
    }

    #[test]
    fn one_flipped_byte_is_one_error() {
        let mut b = vec![0u8; 1000];
        fill(&mut b, 42);
        b[999] ^= 1;
        b[0] ^= 0x80;
        assert_eq!(mismatches(&b, 42), 2);
    }

    #[test]
    fn the_stream_gives_the_same_bytes_and_counts() {
        let mut st = Stream::default();
        for len in [0usize, 1, 7, 8, 9, 100, 4096, 4099, 70_000] {
            let seed = seed(len as u64, 1, 2, 3);
            let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
            fill(&mut a, seed);
            st.fill(&mut b, seed);
            assert_eq!(a, b, "len {len}");
            assert_eq!(st.mismatches(&a, seed), 0);
            if len > 0 {
                a[len - 1] ^= 1;
                assert_eq!(st.mismatches(&a, seed), 1);
                assert_eq!(mismatches(&a, seed), 1);
            }
        }
    }

    #[test]
    fn a_chunk_at_the_wrong_offset_is_caught() {
        let s = seed(1, 0, 1, 0);
        let mut b = vec![0u8; 64];
        fill(&mut b, s);
        b.copy_within(0..8, 8); // word 0 delivered where word 1 belongs
        assert_eq!(mismatches(&b, s), 1);
    }

    #[test]
    fn words_match_a_reference_value() {
        // Pinned so the CUDA copy of the formula can be checked against the same numbers.
        assert_eq!(mix(0), 0);
        assert_eq!(word(0, 1), mix(0x9E37_79B9_7F4A_7C15 ^ SALT));
        assert_eq!(word(5, 1), mix(0x9E37_79B9_7F4A_7C15 ^ SALT) ^ 5);
        let s = seed(1, 2, 3, 4);
        assert_eq!(
            s,
            mix(0x0000_0100_0000_01B3 ^ (2u64 << 48) ^ (3u64 << 32) ^ (4u64 << 8) ^ 0xEFA0_BE4C)
        );
    }
}
