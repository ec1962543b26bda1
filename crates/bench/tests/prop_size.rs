//! Property tests of the size parser and the sweep: any input is a value or a one-line
//! error (never a panic), errors never echo more than a bounded part of the input, a parsed
//! size round-trips through its printed form, and every sweep the option bounds allow is finite,
//! ascending, and ends at the maximum. Bounded case counts keep CI fast (PROPTEST_CASES raises
//! them).

use efabench_bench::size::{human, parse_size, sweep};
use proptest::prelude::*;

fn cases() -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    ProptestConfig::with_cases(n)
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn any_text_is_a_size_or_a_short_error(s in ".{0,300}") {
        match parse_size(&s) {
            Ok(_) => {}
            Err(e) => {
                prop_assert!(!e.contains('\n'));
                prop_assert!(e.len() < 300, "{} bytes", e.len());
            }
        }
    }

    #[test]
    fn digits_and_suffixes_parse_exactly(n in 0u64..1 << 33, unit in 0usize..4) {
        let (suffix, shift) = [("", 0), ("K", 10), ("M", 20), ("G", 30)][unit];
        let text = format!("{n}{suffix}");
        match n.checked_mul(1 << shift) {
            Some(v) => prop_assert_eq!(parse_size(&text), Ok(v)),
            None => prop_assert!(parse_size(&text).is_err()),
        }
    }

    #[test]
    fn printed_sizes_parse_back(v in 1u64..1 << 40) {
        prop_assert_eq!(parse_size(&human(v)), Ok(v));
    }

    #[test]
    fn sweeps_are_finite_ascending_and_end_at_the_maximum(
        min in 1u64..1 << 36, max in 1u64..1 << 36, f in 2u64..=1024
    ) {
        match sweep(min, max, f) {
            Ok(s) => {
                prop_assert!(min <= max);
                prop_assert_eq!(s.first(), Some(&min));
                prop_assert_eq!(s.last(), Some(&max));
                prop_assert!(s.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(s.len() <= 64);
            }
            Err(e) => prop_assert!(min > max && e.is_usage()),
        }
    }
}
