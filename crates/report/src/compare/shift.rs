//! The whole sweep as one figure: did the candidate's runs, taken as wholes, get slower?
//!
//! A change of driver, library or code usually moves every point of a sweep the same way, by a
//! modest amount, while a shared machine moves single points between runs by far more. Point by
//! point, a 30% slowdown then hides in each point's scatter (and in the correction for testing
//! every point). Taken as a whole it does not: each run gets a *level*, the mean over the points
//! every run measured of `ln(p50 / reference)`, the reference being the point's median p50 over
//! every run of both sides, so a run that was slow everywhere has a high level. The change is
//! `d = median(candidate levels) − median(baseline levels)`; its noise comes from how far the
//! runs' levels lie from their side's median (`σ = 1.4826 × median |level − side median|`, robust
//! to a run that caught the machine in a bad state; with an odd run count the median run's own
//! zero is left out), with `se = 1.2533 σ √(1/n_b + 1/n_c)` for a
//! median of runs. The shift is a regression when it is beyond the tolerance and `F(d / se)`,
//! Student's t with `n_b + n_c − 2` degrees of freedom (the noise is estimated from that few
//! runs), reaches its share of the confidence: half of what the user allows to be wrong, the
//! points' tests sharing the other half.
//!
//! It needs at least [`MIN_RUNS`] runs on each side: a single run cannot show how far a whole run
//! lands from the next one, and on the 2-core VM that is where most of the noise is (a whole
//! sweep ran 2-3x slower in some runs, in whichever state the hypervisor put the vCPUs).

use super::figure::RunPoint;
use super::judge::Verdict;
use super::key::Key;
use super::prob::t_cdf;
use serde::Serialize;

/// A matched point: its key and its runs on each side.
pub type Matched<'a> = (&'a Key, &'a [RunPoint], &'a [RunPoint]);

/// Fewest runs on each side for a shift to be judged.
pub const MIN_RUNS: usize = 2;
/// Fewest points every run measured.
pub const MIN_POINTS: usize = 3;

/// The sweep's shift and its judgement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Shift {
    /// Points every run of both sides measured (the level's average).
    pub points: usize,
    pub baseline_runs: usize,
    pub candidate_runs: usize,
    /// exp(d) − 1 in percent: how much slower the candidate's median run is.
    pub change_pct: f64,
    /// se × 100.
    pub noise_pct: f64,
    /// F(d / se) in percent (Student's t, n_b + n_c − 2 degrees of freedom).
    pub sure_worse_pct: f64,
    /// The confidence this test must reach, in percent.
    pub confidence_pct: f64,
    pub verdict: Verdict,
}

/// The estimator median ([`efabench_record::stats::sample_median`]) of values that are there.
fn median(v: &mut [f64]) -> f64 {
    efabench_record::stats::sample_median(v).unwrap_or(f64::NAN)
}

/// How far each level lies from the side's median `m`. With an odd count one run *is* the
/// median, and its zero would pull the median deviation down (with three runs a side, two of the
/// six deviations would be zero): it is left out.
fn deviations(levels: &[f64], m: f64) -> Vec<f64> {
    let mut d: Vec<f64> = levels.iter().map(|l| (l - m).abs()).collect();
    d.sort_by(f64::total_cmp);
    if d.len() % 2 == 1 {
        d.remove(0);
    }
    d
}

/// The levels of one side's runs over `refs` (point index → reference log p50).
fn levels(runs: &[&[RunPoint]], refs: &[f64]) -> Vec<f64> {
    let n = runs[0].len();
    (0..n)
        .map(|j| {
            let sum: f64 = runs
                .iter()
                .zip(refs)
                .map(|(rs, r)| rs[j].lat_p50_us.value.ln() - r)
                .sum();
            sum / runs.len() as f64
        })
        .collect()
}

/// The shift between the matched points of the two sides, or `None` when fewer than
/// [`MIN_RUNS`] runs per side or [`MIN_POINTS`] points allow one. Run `j` of a side is the `j`-th
/// run of every point (the `j`-th file); points whose run count differs from the side's are left
/// out, as are points with a p50 that is not positive.
pub fn judge(matched: &[Matched<'_>], tol_pct: f64, confidence: f64) -> Option<Shift> {
    let runs_of = |pick: fn(&Matched<'_>) -> usize| {
        let mut counts: Vec<usize> = matched.iter().map(pick).collect();
        counts.sort_unstable();
        counts.get(counts.len() / 2).copied()
    };
    let nb = runs_of(|m| m.1.len())?;
    let nc = runs_of(|m| m.2.len())?;
    if nb < MIN_RUNS || nc < MIN_RUNS {
        return None;
    }
    let positive = |rs: &[RunPoint]| {
        rs.iter()
            .all(|r| r.lat_p50_us.value.is_finite() && r.lat_p50_us.value > 0.0)
    };
    let used: Vec<&Matched<'_>> = matched
        .iter()
        .filter(|(_, b, c)| b.len() == nb && c.len() == nc && positive(b) && positive(c))
        .collect();
    if used.len() < MIN_POINTS {
        return None;
    }
    let refs: Vec<f64> = used
        .iter()
        .map(|(_, b, c)| {
            let mut logs: Vec<f64> = b
                .iter()
                .chain(c.iter())
                .map(|r| r.lat_p50_us.value.ln())
                .collect();
            median(&mut logs)
        })
        .collect();
    let base: Vec<&[RunPoint]> = used.iter().map(|m| m.1).collect();
    let cand: Vec<&[RunPoint]> = used.iter().map(|m| m.2).collect();
    let (mut lb, mut lc) = (levels(&base, &refs), levels(&cand, &refs));
    let (mb, mc) = (median(&mut lb), median(&mut lc));
    let d = mc - mb;
    let mut dev = deviations(&lb, mb);
    dev.extend(deviations(&lc, mc));
    let sigma = 1.4826 * median(&mut dev);
    let se = 1.2533 * sigma * (1.0 / nb as f64 + 1.0 / nc as f64).sqrt();
    let df = (nb + nc - 2) as f64;
    let p_worse = if se > 0.0 {
        t_cdf(d / se, Some(df))
    } else if d > 0.0 {
        1.0
    } else if d < 0.0 {
        0.0
    } else {
        0.5
    };
    let limit = (1.0 + tol_pct / 100.0).ln();
    let verdict = if d > limit {
        if p_worse >= confidence {
            Verdict::Regression
        } else {
            Verdict::Noise
        }
    } else if -d > limit {
        if 1.0 - p_worse >= confidence {
            Verdict::Better
        } else {
            Verdict::Noise
        }
    } else {
        Verdict::Ok
    };
    Some(Shift {
        points: used.len(),
        baseline_runs: nb,
        candidate_runs: nc,
        change_pct: d.exp_m1() * 100.0,
        noise_pct: se * 100.0,
        sure_worse_pct: p_worse * 100.0,
        confidence_pct: confidence * 100.0,
        verdict,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::figure::{Noise, Obs};
    use efabench_record::testing::sample;

    fn key(i: u64) -> Key {
        Key::of(&sample("sendrecv", "pingpong", 8 << i, 1.0, 1.0))
    }

    fn runs(p50s: &[f64]) -> Vec<RunPoint> {
        let r = sample("sendrecv", "pingpong", 8, 1.0, 1.0);
        p50s.iter()
            .map(|&v| RunPoint {
                lat_p50_us: Obs {
                    value: v,
                    rel_se: 0.0,
                    noise: Noise::Blocks,
                },
                ..RunPoint::of(&r)
            })
            .collect()
    }

    /// Ten points, `n` runs a side, each run's level scattered by `jitter` (run j by a share of
    /// it that differs per run and side), the candidate slower by `factor` everywhere.
    fn sweep(n: usize, jitter: f64, factor: f64) -> Option<Shift> {
        let keys: Vec<Key> = (0..10).map(key).collect();
        let side = |f: f64, phase: usize| -> Vec<Vec<RunPoint>> {
            (0..10)
                .map(|i| {
                    let base = 1.0 + i as f64;
                    let v: Vec<f64> = (0..n)
                        .map(|j| {
                            let s = [1.0, -0.8, 0.3, -0.4, 0.6, -0.2][(j + phase) % 6];
                            base * f * (1.0 + s * jitter)
                        })
                        .collect();
                    runs(&v)
                })
                .collect()
        };
        let (b, c) = (side(1.0, 0), side(factor, 1));
        let matched: Vec<Matched<'_>> = keys
            .iter()
            .zip(b.iter().zip(c.iter()))
            .map(|(k, (b, c))| (k, b.as_slice(), c.as_slice()))
            .collect();
        judge(&matched, 5.0, 0.975)
    }

    #[test]
    fn a_uniform_slowdown_beyond_the_run_scatter_is_a_regression() {
        let s = sweep(3, 0.05, 1.3).unwrap();
        assert_eq!(s.verdict, Verdict::Regression, "{s:?}");
        assert!((s.change_pct - 30.0).abs() < 12.0, "{s:?}");
        assert_eq!((s.points, s.baseline_runs, s.candidate_runs), (10, 3, 3));
    }

    #[test]
    fn runs_that_scatter_more_than_the_change_are_noise() {
        // Runs ±40% apart cannot show a 30% slowdown with three runs a side.
        let s = sweep(3, 0.4, 1.3).unwrap();
        assert_ne!(s.verdict, Verdict::Regression, "{s:?}");
        assert!(s.noise_pct > 20.0, "{s:?}");
        // The same sweep without the slowdown is within the tolerance or noise, never a
        // regression, and a faster candidate is better.
        assert_ne!(sweep(3, 0.05, 1.0).unwrap().verdict, Verdict::Regression);
        assert_eq!(sweep(3, 0.02, 0.7).unwrap().verdict, Verdict::Better);
    }

    #[test]
    fn one_run_a_side_is_not_judged() {
        assert_eq!(sweep(1, 0.05, 1.3), None);
        assert!(sweep(2, 0.05, 1.3).is_some());
    }
}
