//! The decision on one figure of one point: is the candidate worse by more than the tolerance
//! *and* by more than the noise, and how sure is that?
//!
//! With `b` and `c` the two sides' estimates and `se_b`, `se_c` their relative standard errors
//! (`side.rs`), the change is judged on `d = ln(c / b)`, whose standard error is
//! `se = √(se_b² + se_c² + se_sweep²)` (`sweep.rs`: only where a side has a single run). "How
//! sure" is the probability that the candidate is really worse: `P = F(worse / se)`, with `worse = d` for latency and `-d` for bandwidth, and `F` Student's t
//! distribution with Welch–Satterthwaite's degrees of freedom when repeated runs set a side's
//! noise, else the normal. A regression needs both: worse by more than the tolerance
//! (`|Δ| × 100 > tol × base`, so a change of exactly the tolerance passes) and `P` at least the
//! per-test confidence, which is the requested confidence spread over every test of the
//! comparison (Bonferroni: `1 − (1 − confidence) / tests`), so that 28 points of pure noise do
//! not fail a run 1 time in 1.4.

use super::prob::t_cdf;
use super::side::Estimate;
use serde::Serialize;

/// The judgement on one metric or one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Within the tolerance.
    Ok,
    /// Beyond the tolerance, but not beyond the noise: could be chance.
    Noise,
    /// Better by more than the tolerance and the noise.
    Better,
    /// Worse by more than the tolerance and the noise (or new errors).
    Regression,
}

/// One metric of one matched point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricDelta {
    pub baseline: f64,
    pub candidate: f64,
    /// (candidate - baseline) / baseline × 100; `None` when the baseline is 0.
    pub change_pct: Option<f64>,
    /// Runs on each side.
    pub baseline_runs: usize,
    pub candidate_runs: usize,
    /// Standard error of the change, in percent (`se` above × 100).
    pub noise_pct: f64,
    /// How sure the candidate is worse: P above, in percent.
    pub sure_worse_pct: f64,
    pub verdict: Verdict,
}

/// The statistics of one metric before the verdict (which needs every test's count).
#[derive(Clone, Debug)]
pub struct Tested {
    pub delta: MetricDelta,
    /// Worse beyond the tolerance (+1), better beyond it (-1), within it (0).
    beyond: i8,
}

/// Welch–Satterthwaite degrees of freedom; `None` when both sides' noise is from many samples.
fn welch_df(b: &Estimate, c: &Estimate) -> Option<f64> {
    if b.df.is_none() && c.df.is_none() {
        return None;
    }
    let vb = b.rel_se.powi(2);
    let vc = c.rel_se.powi(2);
    let term = |v: f64, df: Option<f64>| df.map(|d| v * v / d.max(1.0)).unwrap_or(0.0);
    let denom = term(vb, b.df) + term(vc, c.df);
    if denom <= 0.0 {
        return None;
    }
    Some(((vb + vc).powi(2) / denom).max(1.0))
}

/// The statistics of one metric. `higher_is_better` for bandwidth, not for latency; `sweep_se`
/// is the sweep's spread of changes (`sweep.rs`), 0 when it does not apply.
pub fn test(
    b: &Estimate,
    c: &Estimate,
    tol_pct: f64,
    higher_is_better: bool,
    sweep_se: f64,
) -> Tested {
    let (base, cand) = (b.value, c.value);
    let change = (cand - base) / base * 100.0;
    let change_pct = (base != 0.0 && change.is_finite()).then_some(change);
    let worse_by = if higher_is_better {
        base - cand
    } else {
        cand - base
    };
    let limit = tol_pct * base.abs();
    let beyond = if worse_by * 100.0 > limit {
        1
    } else if -worse_by * 100.0 > limit {
        -1
    } else {
        0
    };
    let se = (b.rel_se.powi(2) + c.rel_se.powi(2) + sweep_se.powi(2)).sqrt();
    let se = if se.is_finite() { se } else { 0.0 };
    let logs = base > 0.0 && cand > 0.0 && base.is_finite() && cand.is_finite();
    let worse = if logs {
        let d = (cand / base).ln();
        if higher_is_better {
            -d
        } else {
            d
        }
    } else {
        worse_by
    };
    let sure = if logs && se > 0.0 {
        t_cdf(worse / se, welch_df(b, c))
    } else if worse > 0.0 {
        1.0
    } else if worse < 0.0 {
        0.0
    } else {
        0.5
    };
    Tested {
        delta: MetricDelta {
            baseline: base,
            candidate: cand,
            change_pct,
            baseline_runs: b.runs,
            candidate_runs: c.runs,
            noise_pct: se * 100.0,
            sure_worse_pct: sure * 100.0,
            verdict: Verdict::Ok,
        },
        beyond,
    }
}

impl Tested {
    /// The verdict at the per-test confidence (a probability, e.g. 0.999).
    pub fn decide(mut self, per_test: f64) -> MetricDelta {
        let sure = self.delta.sure_worse_pct / 100.0;
        self.delta.verdict = match self.beyond {
            1 if sure >= per_test => Verdict::Regression,
            -1 if 1.0 - sure >= per_test => Verdict::Better,
            0 => Verdict::Ok,
            _ => Verdict::Noise,
        };
        self.delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::side::Spread;

    fn est(value: f64, rel_se: f64, runs: usize, df: Option<f64>) -> Estimate {
        Estimate {
            value,
            rel_se,
            df,
            runs,
            spread: if df.is_some() {
                Spread::Between
            } else {
                Spread::Within
            },
        }
    }

    #[test]
    fn a_change_must_beat_the_tolerance_and_the_noise() {
        // 30% slower latency with 1% noise per side: sure, a regression.
        let t = test(
            &est(10.0, 0.01, 1, None),
            &est(13.0, 0.01, 1, None),
            5.0,
            false,
            0.0,
        );
        assert!(t.delta.sure_worse_pct > 99.99);
        assert_eq!(t.decide(0.999).verdict, Verdict::Regression);
        // The same change with 20% noise per side: could be chance.
        let t = test(
            &est(10.0, 0.2, 1, None),
            &est(13.0, 0.2, 1, None),
            5.0,
            false,
            0.0,
        );
        assert!((t.delta.sure_worse_pct - 82.5).abs() < 1.0, "{:?}", t.delta);
        assert_eq!(t.decide(0.999).verdict, Verdict::Noise);
        // Sure but within the tolerance: ok.
        let t = test(
            &est(10.0, 0.0001, 1, None),
            &est(10.4, 0.0001, 1, None),
            5.0,
            false,
            0.0,
        );
        assert_eq!(t.decide(0.999).verdict, Verdict::Ok);
        // Bandwidth up 30%: better.
        let t = test(
            &est(10.0, 0.01, 1, None),
            &est(13.0, 0.01, 1, None),
            5.0,
            true,
            0.0,
        );
        assert!(t.delta.sure_worse_pct < 0.01);
        assert_eq!(t.decide(0.999).verdict, Verdict::Better);
    }

    #[test]
    fn few_runs_widen_the_interval() {
        // Two runs per side scattering 5%: a 30% change is less sure under t(2) than normal.
        let b = est(10.0, 0.05, 2, Some(1.0));
        let c = est(13.0, 0.05, 2, Some(1.0));
        let t = test(&b, &c, 5.0, false, 0.0);
        let normal = test(
            &est(10.0, 0.05, 2, None),
            &est(13.0, 0.05, 2, None),
            5.0,
            false,
            0.0,
        );
        assert!(t.delta.sure_worse_pct < normal.delta.sure_worse_pct);
        assert_eq!(welch_df(&b, &c), Some(2.0));
    }
}
