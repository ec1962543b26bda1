//! Which rail carries which bytes: striping one message over several rails, or sending whole
//! messages to rails in turn. Pure functions, so that the benchmarks, the collectives and the
//! tests agree on one schedule.
//!
//! The split follows the threshold scheduler of aws-ofi-nccl (`nccl_ofi_scheduler`), which is
//! what NCCL traffic on EFA actually does, so that a multi-rail benchmark measures the same
//! shape of traffic:
//!
//! * [`MIN_STRIPE`] = 128 KiB: a stripe smaller than this costs more in per-operation overhead
//!   (a post, a completion, on EFA a packet header per MTU and a separate RDMA descriptor) than
//!   it gains from the extra link; aws-ofi-nccl's default minimum stripe size is the same
//!   order. A message of at most `MIN_STRIPE` bytes therefore goes whole to one rail.
//! * The number of stripes is `ceil(len / MIN_STRIPE)`, capped at the rail count, then lowered
//!   to the largest divisor of the rail count, so that successive messages (each starting at the
//!   rail after the previous message's last stripe) load every rail equally.
//! * [`STRIPE_ALIGN`] = 128 bytes: stripe boundaries fall on multiples of 128 bytes from the
//!   message start (NCCL's LL128 protocol works in 128-byte lines, and aligned boundaries keep
//!   GPU-side copies and PCIe writes whole); the last stripe takes the remainder.
//! * The first rail rotates: the caller passes `first_rail` and continues with
//!   [`next_first_rail`], so single-rail messages spread round-robin too.

/// Messages up to this many bytes are not split (see the module docs).
pub const MIN_STRIPE: usize = 128 * 1024;
/// Stripe boundaries are multiples of this many bytes from the start of the message.
pub const STRIPE_ALIGN: usize = 128;

/// One piece of a message: `len` bytes at offset `off` go over rail `rail`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    pub rail: usize,
    pub off: usize,
    pub len: usize,
}

/// How many stripes a message of `len` bytes gets over `rails` rails.
pub fn stripe_count(len: usize, rails: usize) -> usize {
    let rails = rails.max(1);
    let wanted = len.div_ceil(MIN_STRIPE).clamp(1, rails);
    (1..=wanted).rev().find(|k| rails % k == 0).unwrap_or(1)
}

/// Splits a message of `len` bytes over `rails` rails, starting with rail `first_rail`
/// (taken modulo `rails`). Every byte is in exactly one stripe; stripes are in offset order and
/// never empty, except the single stripe of an empty message. `rails == 0` is treated as 1.
pub fn split(len: usize, rails: usize, first_rail: usize) -> Vec<Stripe> {
    let rails = rails.max(1);
    let n = stripe_count(len, rails);
    let first = first_rail % rails;
    if n == 1 {
        return vec![Stripe {
            rail: first,
            off: 0,
            len,
        }];
    }
    let max = len.div_ceil(n).div_ceil(STRIPE_ALIGN) * STRIPE_ALIGN;
    let mut out = Vec::with_capacity(n);
    let mut off = 0;
    for i in 0..n {
        if off >= len {
            break;
        }
        let l = max.min(len - off);
        out.push(Stripe {
            rail: (first + i) % rails,
            off,
            len: l,
        });
        off += l;
    }
    out
}

/// The first rail of the message after one split as `stripes` (round-robin over messages).
pub fn next_first_rail(stripes: &[Stripe], rails: usize) -> usize {
    match stripes.last() {
        Some(s) => (s.rail + 1) % rails.max(1),
        None => 0,
    }
}

/// The rail of message number `index` when whole messages go to rails in turn.
pub fn round_robin_rail(index: u64, rails: usize) -> usize {
    (index % rails.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_cover(len: usize, rails: usize, first: usize) {
        let s = split(len, rails, first);
        assert!(!s.is_empty());
        assert!(s.len() <= rails.max(1));
        let mut off = 0;
        let mut used = std::collections::HashSet::new();
        for st in &s {
            assert_eq!(st.off, off, "len {len} rails {rails}: {s:?}");
            assert!(st.rail < rails.max(1));
            assert!(used.insert(st.rail), "rail used twice: {s:?}");
            if len > 0 {
                assert!(st.len > 0, "empty stripe: {s:?}");
            }
            off += st.len;
        }
        assert_eq!(off, len, "len {len} rails {rails}: {s:?}");
        for st in &s[..s.len() - 1] {
            assert_eq!((st.off + st.len) % STRIPE_ALIGN, 0, "{s:?}");
        }
        assert_eq!(s[0].rail, first % rails.max(1));
    }

    #[test]
    fn every_byte_is_covered_exactly_once() {
        let mut lens: Vec<usize> = (0..2000).collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            lens.push((x % (64 << 20)) as usize);
        }
        for k in 0..40 {
            lens.extend([
                MIN_STRIPE * k,
                MIN_STRIPE * k + 1,
                (MIN_STRIPE * k).saturating_sub(1),
            ]);
        }
        for &len in &lens {
            for rails in [1, 2, 3, 4, 5, 8, 16] {
                check_cover(len, rails, len % 7);
            }
        }
    }

    #[test]
    fn small_messages_go_whole_to_one_rail() {
        for len in [0, 1, 4096, MIN_STRIPE] {
            assert_eq!(
                split(len, 4, 3),
                vec![Stripe {
                    rail: 3,
                    off: 0,
                    len
                }]
            );
        }
        assert_eq!(split(MIN_STRIPE + 1, 4, 0).len(), 2);
    }

    #[test]
    fn stripe_count_divides_the_rail_count() {
        assert_eq!(stripe_count(3 * MIN_STRIPE, 4), 2);
        assert_eq!(stripe_count(3 * MIN_STRIPE, 3), 3);
        assert_eq!(stripe_count(100 * MIN_STRIPE, 4), 4);
        assert_eq!(stripe_count(5 * MIN_STRIPE, 8), 4);
        assert_eq!(stripe_count(1 << 30, 1), 1);
    }

    #[test]
    fn large_messages_use_every_rail_evenly() {
        let s = split(4 << 20, 4, 1);
        assert_eq!(s.iter().map(|s| s.rail).collect::<Vec<_>>(), [1, 2, 3, 0]);
        assert!(s.iter().all(|s| s.len == 1 << 20));
        assert_eq!(next_first_rail(&s, 4), 1);
        assert_eq!(next_first_rail(&split(1000, 4, 2), 4), 3);
    }

    #[test]
    fn rotation_balances_rails_over_messages() {
        let rails = 4;
        let mut load = [0usize; 4];
        let mut first = 0;
        for _ in 0..400 {
            let s = split(2 * MIN_STRIPE, rails, first);
            first = next_first_rail(&s, rails);
            for st in s {
                load[st.rail] += st.len;
            }
        }
        assert!(load.iter().all(|&l| l == load[0]), "{load:?}");
    }

    #[test]
    fn round_robin_cycles() {
        let v: Vec<usize> = (0..7).map(|i| round_robin_rail(i, 3)).collect();
        assert_eq!(v, [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(round_robin_rail(5, 0), 0);
    }
}
