//! The noise a single run cannot show itself: how far points move between two runs of the same
//! sweep, read from the sweep.
//!
//! A run's block medians say how steady it was while it ran, not how far the next run lands from
//! it: on a shared machine whole points move between runs by far more than within one (on the
//! 2-core VM a 1 KiB stream's p50 went from 154 µs to 0.29 µs between two back-to-back runs).
//! With one run on a side that scatter cannot be measured point by point, but the sweep holds many
//! points measured under the same conditions: the spread of their changes `d_i = ln(c_i / b_i)`
//! about the median change is an estimate of it, `1.4826 × median |d_i − median d|` (the normal
//! σ from the median absolute deviation, robust to the points that really changed). A uniform
//! slowdown shifts every `d_i` and leaves this spread alone, so it is still found; a sweep whose
//! points scatter by 50% cannot show a 30% change at any one point, and says so as noise.
//! Needs [`MIN_POINTS`] matched points; with fewer, or with several runs on both sides (whose own
//! scatter is measured per point), it does not apply.

/// Fewest matched points for a spread to mean anything.
pub const MIN_POINTS: usize = 8;

/// The scaled median absolute deviation of the changes, or `None` with too few of them.
pub fn spread(changes: &[f64]) -> Option<f64> {
    let d: Vec<f64> = changes.iter().copied().filter(|x| x.is_finite()).collect();
    if d.len() < MIN_POINTS {
        return None;
    }
    efabench_record::stats::robust_sd(&d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uniform_shift_leaves_the_spread_alone() {
        let noise = [0.01, -0.02, 0.0, 0.03, -0.01, 0.02, -0.03, 0.0, 0.01];
        let s = spread(&noise).unwrap();
        let shifted: Vec<f64> = noise.iter().map(|d| d + 0.26).collect();
        assert!((spread(&shifted).unwrap() - s).abs() < 1e-12);
        // One point that really moved does not widen it much.
        let mut one = noise.to_vec();
        one[0] = 1.0;
        assert!(spread(&one).unwrap() < 2.0 * s + 1e-12);
        assert_eq!(spread(&noise[..7]), None);
    }
}
