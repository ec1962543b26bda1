//! `efabench compare`: did a change (driver, libfabric, AMI, instance, code) make things worse,
//! by more than the machine's own noise?
//!
//! Points are matched on everything that identifies them ([`key`]); each side may hold several
//! runs of a point (several files, repeated records, or a [`baseline`] file). Three things are
//! judged per point: the p50 latency and the median-window bandwidth ([`figure`]), each against
//! the tolerance *and* the noise estimated from the runs ([`side`], [`judge`]) and, for single
//! runs, from the sweep ([`sweep`]), and the
//! verification errors (any error the baseline did not have is a regression, whatever the
//! tolerance). A baseline point the candidate lacks fails the comparison unless `allow_missing`:
//! a run that crashed half-way measured nothing at the sizes it never reached. Where the two
//! sides were measured ([`context`]) is compared too; a difference is printed, and fails the
//! comparison with `strict_context`. `docs/compare.md` is the manual.

pub mod baseline;
pub mod context;
pub mod figure;
pub mod judge;
pub mod key;
mod prob;
mod render;
pub mod shift;
pub mod side;
pub mod sweep;
#[cfg(test)]
mod tests;

pub use baseline::{Baseline, BaselinePoint, BASELINE_SCHEMA};
pub use context::{Context, ContextChange};
pub use figure::{BwFigure, Noise, Obs, RunPoint};
pub use judge::{MetricDelta, Verdict};
pub use key::Key;
pub use shift::Shift;
pub use side::{estimate, Estimate, Side, Spread};

use efabench_record::{Error, Record};
use serde::Serialize;

/// How to judge.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// Allowed change in percent before a figure can count as a regression (finite, ≥ 0).
    pub tolerance_pct: f64,
    /// How sure a regression must be, over the whole comparison (0.5 ≤ c < 1; 0.95 default).
    pub confidence: f64,
    /// Baseline points the candidate lacks are listed but do not fail.
    pub allow_missing: bool,
    /// A context change fails the comparison.
    pub strict_context: bool,
}

impl Options {
    /// The defaults of `efabench compare` with this tolerance.
    pub fn with_tolerance(tolerance_pct: f64) -> Self {
        Options {
            tolerance_pct,
            confidence: 0.95,
            allow_missing: false,
            strict_context: false,
        }
    }
}

/// A matched point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub key: Key,
    pub bw_gbps: MetricDelta,
    /// How the bandwidth figures were obtained (the baseline's first run).
    pub bw_figure: BwFigure,
    pub lat_p50_us: MetricDelta,
    /// The most errors of any run, baseline against candidate.
    pub errors: MetricDelta,
    pub verdict: Verdict,
    /// Names of the metrics that regressed (`bw`, `lat`, `errors`).
    pub regressed: Vec<&'static str>,
    /// How sure the candidate is worse on bandwidth or latency, whichever is surer, in percent.
    pub sure_worse_pct: f64,
}

/// Records whose GPU work was time-sliced with another rank's (`gpu_sharing` with `mps: false`):
/// their GPU-side timings include waiting for the other's slices.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TimeSliced {
    pub records: usize,
    /// The shared GPUs, each once: `ranks 0,1 on GPU 0 of host-a`.
    pub gpus: Vec<String>,
}

impl TimeSliced {
    fn add(&mut self, runs: &[RunPoint]) {
        let sliced: Vec<&RunPoint> = runs.iter().filter(|r| !r.time_sliced.is_empty()).collect();
        self.records += sliced.len();
        for g in sliced.iter().flat_map(|r| &r.time_sliced) {
            if !self.gpus.contains(g) {
                self.gpus.push(g.clone());
            }
        }
    }
}

/// The whole comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub tolerance_pct: f64,
    pub confidence: f64,
    /// Tests of bandwidth and latency made: 2 per matched point, 1 where the bandwidth is the
    /// median window (the same median as the latency).
    pub tests: usize,
    /// The confidence each test of a point must reach: `1 − (1 − confidence) / tests`, or with
    /// the sweep's shift judged, `1 − (1 − confidence) / 2 / tests` (the shift takes the other
    /// half).
    pub per_test_confidence: f64,
    /// The whole sweep's shift (`shift.rs`): with several runs on each side; null otherwise.
    pub shift: Option<Shift>,
    /// The sweep's spread of changes added to the noise of points with a single run on a side
    /// (`sweep.rs`), in percent; null when it did not apply.
    pub sweep_noise_pct: Option<f64>,
    pub baseline_files: Vec<String>,
    pub candidate_files: Vec<String>,
    pub baseline_records: usize,
    pub candidate_records: usize,
    pub rows: Vec<Row>,
    /// Baseline points the candidate lacks (a failure unless `allow_missing`).
    pub only_baseline: Vec<Key>,
    pub only_candidate: Vec<Key>,
    /// Whether baseline points missing from the candidate are accepted (`--allow-missing`).
    pub allow_missing: bool,
    /// Points measured more than once within one baseline file (each record is a run).
    pub repeated_baseline: usize,
    /// Same for the candidate.
    pub repeated_candidate: usize,
    /// Matched points whose baseline was verified but some candidate run was not (`--no-check`):
    /// its error count of 0 proves nothing.
    pub unverified_candidate: usize,
    /// Matched baseline records measured on a GPU that ranks shared without NVIDIA MPS.
    pub time_sliced_baseline: TimeSliced,
    /// Same for the candidate.
    pub time_sliced_candidate: TimeSliced,
    /// Matched points whose sides differ in GPU sharing (not shared, shared under MPS,
    /// time-sliced), where both records say.
    pub gpu_sharing_differs: usize,
    /// Where the sides were measured, where they differ.
    pub context_changes: Vec<ContextChange>,
    /// Whether a context change fails the comparison (`--strict-context`).
    pub strict_context: bool,
}

/// Compares one run with another (each record a run of its point) with the default
/// confidence. `tolerance_pct` must be finite and ≥ 0.
pub fn compare(
    baseline: &[Record],
    candidate: &[Record],
    tolerance_pct: f64,
    allow_missing: bool,
) -> Result<Comparison, Error> {
    let b = Side::from_records([("baseline".to_string(), baseline)]);
    let c = Side::from_records([("candidate".to_string(), candidate)]);
    compare_sides(
        &b,
        &c,
        &Options {
            allow_missing,
            ..Options::with_tolerance(tolerance_pct)
        },
    )
}

fn check(o: &Options) -> Result<(), Error> {
    if !o.tolerance_pct.is_finite() || o.tolerance_pct < 0.0 {
        return Err(Error::bad_input(format!(
            "tolerance {} is not a percentage: pass --tolerance with a number >= 0, e.g. 5",
            o.tolerance_pct
        )));
    }
    if !(0.5..1.0).contains(&o.confidence) {
        return Err(Error::bad_input(format!(
            "confidence {} is not between 50 and 100 percent: pass --confidence with a percentage such as 95",
            o.confidence * 100.0
        )));
    }
    Ok(())
}

/// Compares two sides.
pub fn compare_sides(base: &Side, cand: &Side, o: &Options) -> Result<Comparison, Error> {
    check(o)?;
    let cand_pos: std::collections::HashMap<&Key, &Vec<RunPoint>> =
        cand.points.iter().map(|(k, r)| (k, r)).collect();
    let base_keys: std::collections::HashSet<&Key> = base.points.iter().map(|(k, _)| k).collect();
    let mut only_baseline = Vec::new();
    let mut unverified_candidate = 0;
    let mut time_sliced_baseline = TimeSliced::default();
    let mut time_sliced_candidate = TimeSliced::default();
    let mut gpu_sharing_differs = 0;
    // Where a side has a single run, the sweep's spread of changes stands in for the scatter
    // between runs (`sweep.rs`).
    let single = |runs: &[RunPoint]| runs.len() < 2;
    let mut changes = Vec::new();
    for (k, b) in &base.points {
        if let Some(c) = cand_pos.get(k) {
            if single(b) || single(c) {
                let fig = |runs: &[RunPoint]| {
                    estimate(&runs.iter().map(|r| r.lat_p50_us).collect::<Vec<_>>()).value
                };
                let (bv, cv) = (fig(b), fig(c));
                if bv > 0.0 && cv > 0.0 {
                    changes.push((cv / bv).ln());
                }
            }
        }
    }
    let sweep_se = sweep::spread(&changes);
    let mut tested = Vec::new();
    for (k, b) in &base.points {
        let Some(c) = cand_pos.get(k) else {
            only_baseline.push(k.clone());
            continue;
        };
        if b.iter().all(|r| r.verified) && c.iter().any(|r| !r.verified) {
            unverified_candidate += 1;
        }
        time_sliced_baseline.add(b);
        time_sliced_candidate.add(c);
        let state = |runs: &[RunPoint]| runs.last().and_then(|r| r.gpu_sharing.clone());
        if let (Some(x), Some(y)) = (state(b), state(c)) {
            gpu_sharing_differs += usize::from(x != y);
        }
        let fig = |runs: &[RunPoint], bw: bool| {
            let obs: Vec<Obs> = runs
                .iter()
                .map(|r| if bw { r.bw_gbps } else { r.lat_p50_us })
                .collect();
            estimate(&obs)
        };
        let extra = if single(b) || single(c) {
            sweep_se.unwrap_or(0.0)
        } else {
            0.0
        };
        let bw = judge::test(&fig(b, true), &fig(c, true), o.tolerance_pct, true, extra);
        let lat = judge::test(
            &fig(b, false),
            &fig(c, false),
            o.tolerance_pct,
            false,
            extra,
        );
        let max_err = |runs: &[RunPoint]| runs.iter().map(|r| r.errors).max().unwrap_or(0);
        let (be, ce) = (max_err(b), max_err(c));
        let errors = MetricDelta {
            baseline: be as f64,
            candidate: ce as f64,
            change_pct: None,
            baseline_runs: b.len(),
            candidate_runs: c.len(),
            noise_pct: 0.0,
            sure_worse_pct: if ce > be { 100.0 } else { 0.0 },
            verdict: if ce > be {
                Verdict::Regression
            } else if ce < be {
                Verdict::Better
            } else {
                Verdict::Ok
            },
        };
        // A median-window bandwidth is the size over the same median the latency test judges:
        // one test, not two, when every run of both sides has it.
        let same_figure = b
            .iter()
            .chain(c.iter())
            .all(|r| r.bw_figure == BwFigure::MedianWindow);
        tested.push((k.clone(), b[0].bw_figure, bw, lat, errors, same_figure));
    }
    let matched: Vec<shift::Matched<'_>> = base
        .points
        .iter()
        .filter_map(|(k, b)| Some((k, b.as_slice(), cand_pos.get(k)?.as_slice())))
        .collect();
    // The error the user allows is split evenly between the shift and the points when the
    // shift can be judged.
    let alpha = 1.0 - o.confidence;
    let shift = shift::judge(&matched, o.tolerance_pct, 1.0 - alpha / 2.0);
    let point_alpha = if shift.is_some() { alpha / 2.0 } else { alpha };
    let tests: usize = tested.iter().map(|t| if t.5 { 1 } else { 2 }).sum();
    let per_test_confidence = 1.0 - point_alpha / tests.max(1) as f64;
    let rows = tested
        .into_iter()
        .map(|(key, bw_figure, bw, lat, errors, _)| {
            let bw = bw.decide(per_test_confidence);
            let lat = lat.decide(per_test_confidence);
            let mut regressed = Vec::new();
            for (name, m) in [("bw", &bw), ("lat", &lat), ("errors", &errors)] {
                if m.verdict == Verdict::Regression {
                    regressed.push(name);
                }
            }
            let verdict = if !regressed.is_empty() {
                Verdict::Regression
            } else if [&bw, &lat].iter().any(|m| m.verdict == Verdict::Better) {
                Verdict::Better
            } else if [&bw, &lat].iter().any(|m| m.verdict == Verdict::Noise) {
                Verdict::Noise
            } else {
                Verdict::Ok
            };
            let sure_worse_pct = bw.sure_worse_pct.max(lat.sure_worse_pct);
            Row {
                key,
                bw_gbps: bw,
                bw_figure,
                lat_p50_us: lat,
                errors,
                verdict,
                regressed,
                sure_worse_pct,
            }
        })
        .collect();
    let only_candidate = cand
        .points
        .iter()
        .filter(|(k, _)| !base_keys.contains(k))
        .map(|(k, _)| k.clone())
        .collect();
    Ok(Comparison {
        tolerance_pct: o.tolerance_pct,
        confidence: o.confidence,
        tests,
        per_test_confidence,
        shift,
        sweep_noise_pct: sweep_se.map(|s| s * 100.0),
        baseline_files: base.files.clone(),
        candidate_files: cand.files.clone(),
        baseline_records: base.records,
        candidate_records: cand.records,
        rows,
        only_baseline,
        only_candidate,
        allow_missing: o.allow_missing,
        repeated_baseline: base.repeated_in_file,
        repeated_candidate: cand.repeated_in_file,
        unverified_candidate,
        time_sliced_baseline,
        time_sliced_candidate,
        gpu_sharing_differs,
        context_changes: base.context.changes(&cand.context),
        strict_context: o.strict_context,
    })
}

impl Comparison {
    pub fn regressions(&self) -> usize {
        self.count(Verdict::Regression)
    }

    /// Whether the sweep as a whole is slower beyond the tolerance and its noise.
    pub fn shifted(&self) -> bool {
        self.shift
            .as_ref()
            .is_some_and(|s| s.verdict == Verdict::Regression)
    }

    pub fn improvements(&self) -> usize {
        self.count(Verdict::Better)
    }

    /// Points changed beyond the tolerance but not beyond the noise.
    pub fn within_noise(&self) -> usize {
        self.count(Verdict::Noise)
    }

    fn count(&self, v: Verdict) -> usize {
        self.rows.iter().filter(|r| r.verdict == v).count()
    }

    /// Baseline points the candidate lacks.
    pub fn missing(&self) -> usize {
        self.only_baseline.len()
    }

    /// Whether the comparison fails: a regression, a missing point without `allow_missing`, or
    /// a context change with `strict_context`.
    pub fn failed(&self) -> bool {
        !self.failure_reasons().is_empty()
    }

    /// The failure reasons for the verdict line; empty when the comparison passes.
    pub fn failure_reasons(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.regressions() > 0 {
            why.push(format!(
                "{} regression(s) beyond {}% and the noise",
                self.regressions(),
                render::fmt_num(self.tolerance_pct)
            ));
        }
        if let Some(s) = self.shift.as_ref().filter(|_| self.shifted()) {
            why.push(format!(
                "the whole sweep is {:.1}% slower (noise {:.1}%, {} runs a side)",
                s.change_pct, s.noise_pct, s.candidate_runs
            ));
        }
        if !self.allow_missing && self.missing() > 0 {
            why.push(format!(
                "{} baseline point(s) missing from the candidate; pass --allow-missing if the candidate ran a smaller sweep on purpose",
                self.missing()
            ));
        }
        if self.strict_context && !self.context_changes.is_empty() {
            let fields: Vec<&str> = self
                .context_changes
                .iter()
                .map(|c| c.field.as_str())
                .collect();
            why.push(format!(
                "context changed ({}) under --strict-context",
                fields.join(", ")
            ));
        }
        why
    }
}
