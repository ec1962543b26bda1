//! What travels and how it is checked: the bytes of every dispatched token, the expert's
//! output, and the weighted sum the token's source must end with.
//!
//! * A dispatch message is a 16-byte header (source rank, token, iteration, tag: the global
//!   expert in the `ll` layout, the destination rank in `per-rank`; as DeepEP's message starts
//!   with an `int4` of source information) and the token: `bf16`: `2H` bytes; `fp8`: `H` e4m3
//!   bytes then `H/128` f32 scales (`H + H/128·4` bytes, `16 + H + H/32` with the header, DeepEP's
//!   `num_fp8_bytes`).
//! * Element `j` of token `t` of rank `s` in iteration `i` comes from byte `j` of the pattern of
//!   `seed(i, s, t)` (crates/bench/src/pattern.rs): `bf16`: `(int8)b / 64`; `fp8`: the e4m3 code
//!   `b & 0xBF` (no NaN, at most 1.875) times a power-of-two scale per 128 elements. Every value is
//!   exact in its type, so a message from another iteration, source or token fails the check.
//! * Expert `e` multiplies by `f(e) ∈ {1, 2, 0.5, −1}` (exact in bf16) and returns bf16.
//! * The source reduces `y = Σ_k w_k · out_k` in f32; the check allows `2^-7 · Σ_k |w_k f(e_k) x|`
//!   (the bf16 rounding of the per-rank layout's partial sums) plus 1e-6.

use crate::ep::args::Dtype;
use crate::pattern;

/// Bytes of a message header.
pub const HEADER: usize = 16;

/// Bytes of one token's payload of `hidden` elements.
pub fn payload_bytes(dtype: Dtype, hidden: usize) -> usize {
    match dtype {
        Dtype::Bf16 => 2 * hidden,
        Dtype::Fp8 => hidden + hidden / 128 * 4,
    }
}

/// The pattern seed of token `t` of rank `src` in iteration `iter`.
pub fn token_seed(iter: u64, src: u32, t: u32) -> u64 {
    pattern::seed(iter, src, t, 0x4550)
}

/// Round-to-nearest-even f32 → bf16 bits.
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return 0x7fc0;
    }
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

pub fn bf16_value(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// e4m3 (OCP FP8, finite codes) to f32.
pub fn e4m3_value(c: u8) -> f32 {
    let sign = if c & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = ((c >> 3) & 0xF) as i32;
    let man = (c & 7) as f32;
    let v = if exp == 0 {
        man / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    };
    sign * v
}

fn fp8_scale(seed: u64, block: usize) -> f32 {
    2f32.powi((pattern::mix(seed ^ (block as u64 + 1)) % 5) as i32 - 2)
}

/// Writes the message (header + payload) of token `t` of `src` into `out`.
pub fn fill_message(
    out: &mut [u8],
    dtype: Dtype,
    hidden: usize,
    hdr: [u32; 4],
    seed: u64,
    stream: &mut pattern::Stream,
) {
    for (i, w) in hdr.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    let body = &mut out[HEADER..HEADER + payload_bytes(dtype, hidden)];
    match dtype {
        Dtype::Bf16 => {
            let mut b = vec![0u8; hidden];
            stream.fill(&mut b, seed);
            for (j, x) in b.iter().enumerate() {
                let v = bf16_bits((*x as i8) as f32 / 64.0);
                body[2 * j..2 * j + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        Dtype::Fp8 => {
            stream.fill(&mut body[..hidden], seed);
            for c in &mut body[..hidden] {
                *c &= 0xBF;
            }
            for blk in 0..hidden / 128 {
                let s = fp8_scale(seed, blk).to_le_bytes();
                body[hidden + 4 * blk..hidden + 4 * blk + 4].copy_from_slice(&s);
            }
        }
    }
}

/// The token values a message carries (dequantised for fp8).
pub fn decode_token(msg: &[u8], dtype: Dtype, hidden: usize) -> Vec<f32> {
    let body = &msg[HEADER..];
    match dtype {
        Dtype::Bf16 => (0..hidden)
            .map(|j| bf16_value(u16::from_le_bytes([body[2 * j], body[2 * j + 1]])))
            .collect(),
        Dtype::Fp8 => (0..hidden)
            .map(|j| {
                let b = hidden + 4 * (j / 128);
                let s = f32::from_le_bytes([body[b], body[b + 1], body[b + 2], body[b + 3]]);
                e4m3_value(body[j]) * s
            })
            .collect(),
    }
}

/// The header words of a received message.
pub fn header(msg: &[u8]) -> [u32; 4] {
    let w = |i: usize| u32::from_le_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
    [w(0), w(4), w(8), w(12)]
}

/// 8-byte words of `got` that differ from `want` (a trailing partial word counts as one).
pub fn word_mismatches(got: &[u8], want: &[u8]) -> u64 {
    got.chunks(8)
        .zip(want.chunks(8))
        .filter(|(a, b)| a != b)
        .count() as u64
}

/// Expert `e`'s factor.
pub fn expert_factor(e: u32) -> f32 {
    [1.0, 2.0, 0.5, -1.0][(e % 4) as usize]
}

/// bf16 bytes of `values`.
pub fn to_bf16_bytes(values: &[f32], out: &mut [u8]) {
    for (j, v) in values.iter().enumerate() {
        out[2 * j..2 * j + 2].copy_from_slice(&bf16_bits(*v).to_le_bytes());
    }
}

/// `Σ_s w[s] · slot_s` over the bf16 slots of one token (`slots` back to back, `2H` bytes each).
pub fn reduce_token(slots: &[u8], weights: &[f32], hidden: usize, out: &mut [f32]) {
    out.iter_mut().for_each(|x| *x = 0.0);
    for (s, w) in weights.iter().enumerate() {
        if *w == 0.0 {
            continue;
        }
        let b = &slots[s * 2 * hidden..(s + 1) * 2 * hidden];
        for (j, o) in out.iter_mut().enumerate() {
            *o += w * bf16_value(u16::from_le_bytes([b[2 * j], b[2 * j + 1]]));
        }
    }
}

/// Elements of a combined token that are off the expected weighted sum: `x` the token as sent,
/// `coef` the `w_k · f(e_k)` of its experts.
pub fn combined_mismatches(got: &[f32], x: &[f32], coef: &[f32]) -> u64 {
    let sum: f32 = coef.iter().sum();
    let abs: f32 = coef.iter().map(|c| c.abs()).sum();
    got.iter()
        .zip(x)
        .filter(|(g, x)| {
            let want = sum * **x;
            let tol = abs * x.abs() / 128.0 + 1e-6;
            // A NaN compares as neither: off too.
            let off = (**g - want).abs();
            !matches!(
                off.partial_cmp(&tol),
                Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
            )
        })
        .count() as u64
}

/// The environment variable that makes one rank corrupt one received dispatch message and one
/// received combine slot (read only in builds with the `test-hooks` feature).
#[cfg(feature = "test-hooks")]
pub const CORRUPT_ENV: &str = "EFABENCH_TEST_EP_CORRUPT";

/// Whether this rank corrupts the first dispatch message and the first combine slot it checks.
pub fn corrupt_hook() -> bool {
    #[cfg(feature = "test-hooks")]
    {
        std::env::var_os(CORRUPT_ENV).is_some()
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_differ_per_iteration_source_and_token() {
        let mut st = pattern::Stream::default();
        for dtype in [Dtype::Bf16, Dtype::Fp8] {
            let h = 256;
            let n = HEADER + payload_bytes(dtype, h);
            let mut a = vec![0u8; n];
            fill_message(&mut a, dtype, h, [1, 2, 3, 4], token_seed(3, 1, 2), &mut st);
            assert_eq!(header(&a), [1, 2, 3, 4]);
            let x = decode_token(&a, dtype, h);
            assert!(x.iter().all(|v| v.is_finite() && v.abs() <= 8.0));
            for other in [
                token_seed(4, 1, 2),
                token_seed(3, 0, 2),
                token_seed(3, 1, 3),
            ] {
                let mut b = vec![0u8; n];
                fill_message(&mut b, dtype, h, [1, 2, 3, 4], other, &mut st);
                assert!(word_mismatches(&b, &a) > (n / 8 / 2) as u64, "{dtype:?}");
            }
        }
        assert_eq!(payload_bytes(Dtype::Fp8, 7168), 7168 + 224);
        assert_eq!(payload_bytes(Dtype::Bf16, 7168), 14336);
    }

    #[test]
    fn weighted_sums_check_and_a_flipped_exponent_is_caught() {
        let mut st = pattern::Stream::default();
        let h = 128;
        let mut m = vec![0u8; HEADER + payload_bytes(Dtype::Fp8, h)];
        fill_message(&mut m, Dtype::Fp8, h, [0; 4], token_seed(1, 0, 0), &mut st);
        let x = decode_token(&m, Dtype::Fp8, h);
        let experts = [5u32, 6, 7];
        let w = [0.25f32, 0.5, 0.75];
        let mut slots = vec![0u8; 3 * 2 * h];
        for (k, e) in experts.iter().enumerate() {
            let y: Vec<f32> = x.iter().map(|v| v * expert_factor(*e)).collect();
            to_bf16_bytes(&y, &mut slots[k * 2 * h..]);
        }
        let coef: Vec<f32> = experts
            .iter()
            .zip(&w)
            .map(|(e, w)| w * expert_factor(*e))
            .collect();
        let mut out = vec![0f32; h];
        reduce_token(&slots, &w, h, &mut out);
        assert_eq!(combined_mismatches(&out, &x, &coef), 0);
        slots[2 * 7 + 1] ^= 0x40;
        reduce_token(&slots, &w, h, &mut out);
        assert_eq!(combined_mismatches(&out, &x, &coef), 1);
    }

    #[test]
    fn bf16_and_e4m3_conversions() {
        assert_eq!(bf16_value(bf16_bits(1.5)), 1.5);
        assert_eq!(bf16_value(bf16_bits(-0.015625)), -0.015625);
        assert_eq!(e4m3_value(0x38), 1.0);
        assert_eq!(e4m3_value(0xB8), -1.0);
        assert_eq!(e4m3_value(0x3F), 1.875);
        assert_eq!(e4m3_value(0x01), 2f32.powi(-9));
    }
}
