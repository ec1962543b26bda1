//! Faults the integration tests inject into real ranks, compiled only with the `test-hooks`
//! cargo feature.
//!
//! The tests in `crates/efabench/tests/` start real `efabench` processes and need some of them
//! to misbehave in a controlled way: flip a byte of a received payload (so verification must
//! report it) or run slow (so `pairs` must name the slow rank). They ask through environment
//! variables read here. A build without the feature (every release build: `cargo build
//! --release -p efabench`) has none of these names in it, and every hook answers "no fault":
//! a user's environment cannot change what a benchmark measures.
//!
//! `scripts/test.sh` runs the tests with `--features efabench/test-hooks`; the tests that need
//! a hook are ignored, with that reason, in a build without it.

use std::time::Duration;

/// Corrupt one byte of the first payload (or chunk) this rank verifies.
#[cfg(feature = "test-hooks")]
pub const CORRUPT_PAYLOAD_ENV: &str = "EFABENCH_TEST_CORRUPT_PAYLOAD";
/// The rank named here sleeps inside the timed part of every window `pairs` sends.
#[cfg(feature = "test-hooks")]
pub const SLOW_RANK_ENV: &str = "EFABENCH_TEST_SLOW_RANK";
/// How long the slow rank sleeps per window, in µs (default 2000).
#[cfg(feature = "test-hooks")]
pub const SLOW_US_ENV: &str = "EFABENCH_TEST_SLOW_US";

/// The rank named here raises SIGSEGV in its first measured `pairs` round.
#[cfg(feature = "test-hooks")]
pub const CRASH_RANK_ENV: &str = "EFABENCH_TEST_CRASH_RANK";

/// Whether `rank` is the one to crash, as a provider's bad access inside a call would.
pub fn crash_rank(rank: u32) -> bool {
    #[cfg(feature = "test-hooks")]
    {
        std::env::var(CRASH_RANK_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            == Some(rank)
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        let _ = rank;
        false
    }
}

/// Whether this rank corrupts the first payload it verifies.
pub fn corrupt_payload() -> bool {
    #[cfg(feature = "test-hooks")]
    {
        std::env::var_os(CORRUPT_PAYLOAD_ENV).is_some()
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        false
    }
}

/// How long `rank` sleeps inside each timed window, when it is the slow rank.
pub fn slow_rank_delay(rank: u32) -> Option<Duration> {
    #[cfg(feature = "test-hooks")]
    {
        let parse = |k: &str| std::env::var(k).ok()?.trim().parse::<u64>().ok();
        parse(SLOW_RANK_ENV)
            .filter(|&r| r == u64::from(rank))
            .map(|_| Duration::from_micros(parse(SLOW_US_ENV).unwrap_or(2000)))
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        let _ = rank;
        None
    }
}

#[cfg(all(test, not(feature = "test-hooks")))]
mod tests {
    #[test]
    fn without_the_feature_no_hook_fires() {
        // Whatever the environment says, a build without the feature injects nothing.
        assert!(!super::corrupt_payload());
        assert_eq!(super::slow_rank_delay(0), None);
        assert!(!super::crash_rank(0));
    }
}
