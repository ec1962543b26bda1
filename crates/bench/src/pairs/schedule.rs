//! Which pairs a run measures and in what order: the first stage's ring shifts
//! ([`Schedule`]), the retest shifts rank 0 chooses from the suspects of a partial matrix, and
//! the header lines that state the schedule and the time budget of the whole run ([`Plan`]).

use super::Pairs;
use crate::locate::{self, PairBw};
use crate::pattern;

/// Rounds after a `ring` or `random` stage that pair each suspect with ranks not named.
pub const RETEST_ROUNDS: u32 = 2;

/// Seed of `random:K` when none is given.
pub(super) const DEFAULT_SEED: u64 = 1;

/// Which shifts the first stage measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Every shift 1..n.
    All,
    /// Shifts 1 and n − 1.
    Ring,
    /// `k` shifts drawn from `seed`.
    Random { k: u32, seed: u64 },
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Schedule::All => write!(f, "all"),
            Schedule::Ring => write!(f, "ring"),
            Schedule::Random { k, seed } => write!(f, "random:{k}:{seed}"),
        }
    }
}

impl Schedule {
    /// The first stage's shifts among `n` ranks, ascending.
    pub fn shifts(self, n: u32) -> Vec<u32> {
        if n < 2 {
            return Vec::new();
        }
        let mut v: Vec<u32> = match self {
            Schedule::All => (1..n).collect(),
            Schedule::Ring => vec![1, n - 1],
            Schedule::Random { k, seed } => {
                let mut all = shuffled(n, seed);
                all.truncate(k as usize);
                all
            }
        };
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether retest rounds follow (the first stage left pairs out).
    pub fn retests(self, n: u32) -> bool {
        self != Schedule::All && (self.shifts(n).len() as u32) < n.saturating_sub(1)
    }
}

/// Shifts 1..n in an order drawn from `seed` (Fisher–Yates on SplitMix64).
fn shuffled(n: u32, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (1..n).collect();
    let mut state = seed;
    for i in (1..v.len()).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let j = (pattern::mix(state) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

impl Pairs<'_> {
    /// Rank 0: the shift of retest round `j` at `size` (see the module docs).
    pub(super) fn choose_retest(&self, n: u32, size: u64, j: u32) -> u32 {
        let pairs: Vec<PairBw> = self
            .seen
            .borrow()
            .iter()
            .filter(|(s, _)| *s == size)
            .map(|(_, p)| *p)
            .collect();
        let named: Vec<u32> = locate::locate(n as usize, &pairs, self.args.suspect_below / 100.0)
            .iter()
            .map(|s| s.rank as u32)
            .collect();
        let used = |k: u32| self.used.iter().any(|&(s, u)| s == size && u == k);
        let good = |k: u32| {
            named
                .iter()
                .all(|&s| !named.contains(&((s + k) % n)) && !named.contains(&((s + n - k) % n)))
        };
        let seed = match self.args.schedule {
            Schedule::Random { seed, .. } => seed,
            _ => DEFAULT_SEED,
        };
        let order = shuffled(n, pattern::mix(seed ^ size ^ ((j as u64) << 40)));
        order
            .iter()
            .copied()
            .find(|&k| !used(k) && good(k))
            .or_else(|| order.iter().copied().find(|&k| good(k)))
            .or_else(|| order.iter().copied().find(|&k| !used(k)))
            .unwrap_or(1)
    }
}

/// How the pairs of a run are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    OneAtATime,
    Rounds(Schedule),
}

impl Plan {
    /// Steps per size (pairs one at a time, or rounds of n pairs at once) and pair measurements
    /// per size among `n` ranks.
    pub fn cost(self, n: u32) -> (u64, u64) {
        let n64 = n as u64;
        match self {
            Plan::OneAtATime => {
                let p = n64 * n64.saturating_sub(1);
                (p, p)
            }
            Plan::Rounds(s) => {
                let rounds = s.shifts(n).len() as u64
                    + if s.retests(n) {
                        RETEST_ROUNDS as u64
                    } else {
                        0
                    };
                (rounds, rounds * n64)
            }
        }
    }
}

/// The header lines that say how pairs are scheduled and how long the whole run may measure.
pub(super) fn budget_lines(
    n: u32,
    sizes: &[u64],
    plan: Plan,
    max_time: f64,
    iterations: impl Fn(u64) -> (u64, u64),
) -> Vec<String> {
    let (steps, pairs) = plan.cost(n);
    let plural = |c: u64| if c == 1 { "" } else { "s" };
    let how = match plan {
        Plan::OneAtATime => format!("one pair at a time, {steps} steps"),
        Plan::Rounds(s) => {
            let shifts = s.shifts(n);
            let first = shifts.len() as u64;
            let what = match s {
                Schedule::All => "all ordered pairs".to_string(),
                Schedule::Ring => "ring, each rank with its two neighbours".to_string(),
                Schedule::Random { k, seed } => {
                    format!(
                        "random, {k} partner{} each way per rank (seed {seed})",
                        plural(k as u64)
                    )
                }
            };
            let list = if first <= 8 {
                format!(
                    ", shift{} {}",
                    plural(first),
                    shifts
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                String::new()
            };
            let mut t = format!(
                "{what}: {first} round{} of {n} pairs at once{list} (round k: every rank r sends to \
                 r+k and receives from r-k)",
                plural(first)
            );
            if s.retests(n) {
                t.push_str(&format!(
                    ", then {RETEST_ROUNDS} retest rounds whose shifts pair each suspect of the \
                     first stage with ranks not named"
                ));
            }
            t
        }
    };
    let per_size: Vec<String> = sizes
        .iter()
        .map(|&s| {
            let (iters, warmup) = iterations(s);
            format!("{warmup}+{iters} at {}", crate::size::human(s))
        })
        .collect();
    let budget = steps as f64 * sizes.len() as f64 * max_time * 1.1;
    vec![
        format!(
            "# schedule: {how}; {} size{} = {} pair measurements",
            sizes.len(),
            plural(sizes.len() as u64),
            pairs * sizes.len() as u64
        ),
        format!(
            "# time budget: each pair stops after its warm-up+timed windows ({}) or {max_time} s \
             timed (warm-up at most {:.3} s), whichever comes first: at most {budget:.1} s of \
             measurement in all, plus one window per pair",
            per_size.join(", "),
            max_time / 10.0
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairs::PairsArgs;

    #[test]
    fn shifts_per_schedule() {
        assert_eq!(Schedule::All.shifts(5), vec![1, 2, 3, 4]);
        assert_eq!(Schedule::Ring.shifts(16), vec![1, 15]);
        assert_eq!(Schedule::Ring.shifts(2), vec![1]);
        let r = Schedule::Random { k: 4, seed: 9 }.shifts(64);
        assert_eq!(r.len(), 4);
        assert!(r.iter().all(|&k| (1..64).contains(&k)));
        // The same seed gives the same shifts on every rank; another seed other ones.
        assert_eq!(r, Schedule::Random { k: 4, seed: 9 }.shifts(64));
        assert_ne!(r, Schedule::Random { k: 4, seed: 10 }.shifts(64));
        // More partners than ranks: every shift, and no retest.
        let all = Schedule::Random { k: 50, seed: 1 };
        assert_eq!(all.shifts(8), (1..8).collect::<Vec<_>>());
        assert!(!all.retests(8));
        assert!(Schedule::Ring.retests(16));
        assert!(!Schedule::Ring.retests(3));
    }

    #[test]
    fn cost_is_rounds_times_ranks() {
        assert_eq!(Plan::Rounds(Schedule::All).cost(64), (63, 63 * 64));
        assert_eq!(Plan::Rounds(Schedule::Ring).cost(1024), (4, 4 * 1024));
        assert_eq!(
            Plan::Rounds(Schedule::Random { k: 10, seed: 1 }).cost(1024),
            (12, 12 * 1024)
        );
        assert_eq!(Plan::OneAtATime.cost(4), (12, 12));
    }

    #[test]
    fn retest_shift_pairs_the_suspect_with_ranks_not_named() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            pairs: PairsArgs,
        }
        let args = <Cli as clap::Parser>::parse_from(["x", "--pairs", "ring"]).pairs;
        let b = Pairs::new(&args).unwrap();
        let n = 16u32;
        // A ring where the pairs of ranks 5 and 9 are a tenth of the others.
        let slow = [5u32, 9];
        for k in [1, n - 1] {
            for s in 0..n {
                let d = (s + k) % n;
                let gbps = if slow.contains(&s) || slow.contains(&d) {
                    0.1
                } else {
                    1.0
                };
                b.seen.borrow_mut().push((
                    4096,
                    PairBw {
                        src: s as usize,
                        dst: d as usize,
                        gbps,
                    },
                ));
            }
        }
        let mut b = b;
        b.used = vec![(4096, 1), (4096, n - 1)];
        for j in 0..RETEST_ROUNDS {
            let k = b.choose_retest(n, 4096, j);
            assert!(!b.used.contains(&(4096, k)), "{k} was measured already");
            for s in slow {
                assert!(
                    !slow.contains(&((s + k) % n)),
                    "shift {k}: {s} sends to a suspect"
                );
                assert!(
                    !slow.contains(&((s + n - k) % n)),
                    "shift {k}: {s} hears a suspect"
                );
            }
            b.used.push((4096, k));
        }
    }
}
