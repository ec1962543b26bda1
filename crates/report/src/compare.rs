//! `efabench compare`: did a change (driver, libfabric, AMI, instance, code) make things worse?
//!
//! Records of the two runs are matched by (bench, variant, size_bytes, peer, mem, provider,
//! rails): the things a user varies on purpose. For each pair three metrics are judged:
//! `bw_gbps` (lower is worse), `lat_us.p50` (higher is worse; the median, because min is too
//! optimistic and p99 too noisy to gate on) and `errors` (any error the baseline did not have is
//! a regression, whatever the tolerance). A change is a regression only when it is worse by
//! *more than* the tolerance, so noise within it passes; the comparison is done on
//! `|Δ| × 100 > tol × base` so that a change of exactly the tolerance is never flagged by
//! rounding. A baseline point the candidate lacks is a failure: a run that crashed half-way
//! measured nothing at the sizes it never reached, and a CI gate must not pass it. Runs that
//! measure a deliberately smaller sweep pass `allow_missing` (`--allow-missing`); the missing
//! points are still listed and counted. Points only the candidate has are listed and never fail.
//! When a file holds the same key several times (runs appended to one file), the last record is
//! used and the output says so. Records measured on a GPU that ranks time-sliced without NVIDIA
//! MPS (`gpu_sharing`) get a warning line, and so do pairs whose sides differ in that state:
//! such a change is the GPU scheduler's, not the path's.

use efabench_record::Error;
use efabench_record::{GpuSharing, Record};
use std::fmt::Write as _;

/// What two records must share to be compared.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Key {
    pub bench: String,
    pub variant: String,
    pub size_bytes: u64,
    pub peer: Option<u32>,
    pub mem: String,
    pub provider: String,
    pub rails: u32,
}

impl Key {
    pub fn of(r: &Record) -> Self {
        Key {
            bench: r.bench.clone(),
            variant: r.variant.clone(),
            size_bytes: r.size_bytes,
            peer: r.peer,
            mem: r.mem.clone(),
            provider: r.provider.clone(),
            rails: r.rails,
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} {} B peer {} mem {} provider {} rails {}",
            self.bench,
            self.variant,
            self.size_bytes,
            self.peer
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into()),
            self.mem,
            self.provider,
            self.rails
        )
    }
}

/// The judgement on one metric or one pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Within the tolerance.
    Ok,
    /// Better by more than the tolerance.
    Better,
    /// Worse by more than the tolerance (or new errors).
    Regression,
}

/// One metric of one matched pair.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MetricDelta {
    pub baseline: f64,
    pub candidate: f64,
    /// (candidate - baseline) / baseline × 100; `None` when the baseline is 0.
    pub change_pct: Option<f64>,
    pub verdict: Verdict,
}

/// A matched pair.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    pub key: Key,
    pub bw_gbps: MetricDelta,
    pub lat_p50_us: MetricDelta,
    pub errors: MetricDelta,
    pub verdict: Verdict,
    /// Names of the metrics that regressed (`bw`, `lat`, `errors`).
    pub regressed: Vec<&'static str>,
}

/// The whole comparison.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Comparison {
    pub tolerance_pct: f64,
    pub baseline_records: usize,
    pub candidate_records: usize,
    pub rows: Vec<Row>,
    /// Baseline points the candidate lacks (a failure unless `allow_missing`).
    pub only_baseline: Vec<Key>,
    pub only_candidate: Vec<Key>,
    /// Whether baseline points missing from the candidate are accepted (`--allow-missing`).
    pub allow_missing: bool,
    /// Keys that appeared more than once in the baseline (the last record was used).
    pub repeated_baseline: usize,
    /// Same for the candidate.
    pub repeated_candidate: usize,
    /// Matched pairs whose baseline was verified but whose candidate was not (`--no-check`):
    /// their error count of 0 proves nothing.
    pub unverified_candidate: usize,
    /// Matched baseline records measured on a GPU that ranks shared without NVIDIA MPS.
    pub time_sliced_baseline: TimeSliced,
    /// Same for the candidate.
    pub time_sliced_candidate: TimeSliced,
    /// Matched pairs whose sides differ in GPU sharing (not shared, shared under MPS,
    /// time-sliced), where both records say.
    pub gpu_sharing_differs: usize,
}

/// Records whose GPU work was time-sliced with another rank's (`gpu_sharing` with `mps: false`):
/// their GPU-side timings include waiting for the other's slices.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TimeSliced {
    pub records: usize,
    /// The shared GPUs, each once: `ranks 0,1 on GPU 0 of host-a`.
    pub gpus: Vec<String>,
}

impl TimeSliced {
    fn add(&mut self, sharing: &GpuSharing) {
        let groups = sharing.time_sliced();
        if groups.is_empty() {
            return;
        }
        self.records += 1;
        for g in groups {
            let d = g.describe();
            if !self.gpus.contains(&d) {
                self.gpus.push(d);
            }
        }
    }
}

/// A record's GPU-sharing state for telling two sides apart; `None` when the record predates
/// the field.
fn sharing_state(s: &GpuSharing) -> Option<&'static str> {
    match s {
        GpuSharing::Unknown => None,
        GpuSharing::NotShared => Some("not shared"),
        GpuSharing::Shared(_) if s.is_time_sliced() => Some("time-sliced"),
        GpuSharing::Shared(_) => Some("shared under MPS"),
    }
}

/// Judges one metric. `higher_is_better` for bandwidth, not for latency.
fn judge(base: f64, cand: f64, tol_pct: f64, higher_is_better: bool) -> MetricDelta {
    let change_pct = (base != 0.0).then(|| (cand - base) / base * 100.0);
    // worse_by > 0 means the candidate is worse.
    let worse_by = if higher_is_better {
        base - cand
    } else {
        cand - base
    };
    let limit = tol_pct * base.abs();
    let verdict = if worse_by * 100.0 > limit {
        Verdict::Regression
    } else if -worse_by * 100.0 > limit {
        Verdict::Better
    } else {
        Verdict::Ok
    };
    MetricDelta {
        baseline: base,
        candidate: cand,
        change_pct,
        verdict,
    }
}

/// Last record per key, in first-seen order, plus how many keys repeated.
fn index(records: &[Record]) -> (Vec<(Key, &Record)>, usize) {
    let mut out: Vec<(Key, &Record)> = Vec::new();
    let mut pos = std::collections::HashMap::new();
    let mut repeated = std::collections::HashSet::new();
    for r in records {
        let k = Key::of(r);
        match pos.get(&k) {
            Some(&i) => {
                out[i] = (k.clone(), r);
                repeated.insert(k);
            }
            None => {
                pos.insert(k.clone(), out.len());
                out.push((k, r));
            }
        }
    }
    (out, repeated.len())
}

/// Compares two runs. `tolerance_pct` must be finite and ≥ 0. With `allow_missing`, baseline
/// points the candidate lacks are listed but do not fail the comparison.
pub fn compare(
    baseline: &[Record],
    candidate: &[Record],
    tolerance_pct: f64,
    allow_missing: bool,
) -> Result<Comparison, Error> {
    if !tolerance_pct.is_finite() || tolerance_pct < 0.0 {
        return Err(Error::bad_input(format!(
            "tolerance {tolerance_pct} is not a percentage: pass --tolerance with a number >= 0, e.g. 5"
        )));
    }
    let (base, repeated_baseline) = index(baseline);
    let (cand, repeated_candidate) = index(candidate);
    let cand_pos: std::collections::HashMap<&Key, &Record> =
        cand.iter().map(|(k, r)| (k, *r)).collect();
    let base_keys: std::collections::HashSet<&Key> = base.iter().map(|(k, _)| k).collect();

    let mut rows = Vec::new();
    let mut only_baseline = Vec::new();
    let mut unverified_candidate = 0;
    let mut time_sliced_baseline = TimeSliced::default();
    let mut time_sliced_candidate = TimeSliced::default();
    let mut gpu_sharing_differs = 0;
    for (k, b) in &base {
        let Some(c) = cand_pos.get(k) else {
            only_baseline.push(k.clone());
            continue;
        };
        if b.verified && !c.verified {
            unverified_candidate += 1;
        }
        let (bs, cs) = (b.gpu_sharing(), c.gpu_sharing());
        time_sliced_baseline.add(&bs);
        time_sliced_candidate.add(&cs);
        if let (Some(x), Some(y)) = (sharing_state(&bs), sharing_state(&cs)) {
            gpu_sharing_differs += usize::from(x != y);
        }
        let bw = judge(b.bw_gbps, c.bw_gbps, tolerance_pct, true);
        let lat = judge(b.lat_us.p50, c.lat_us.p50, tolerance_pct, false);
        let new_errors = c.errors > b.errors;
        let errors = MetricDelta {
            baseline: b.errors as f64,
            candidate: c.errors as f64,
            change_pct: None,
            verdict: if new_errors {
                Verdict::Regression
            } else if c.errors < b.errors {
                Verdict::Better
            } else {
                Verdict::Ok
            },
        };
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
        } else {
            Verdict::Ok
        };
        rows.push(Row {
            key: k.clone(),
            bw_gbps: bw,
            lat_p50_us: lat,
            errors,
            verdict,
            regressed,
        });
    }
    let only_candidate = cand
        .iter()
        .filter(|(k, _)| !base_keys.contains(k))
        .map(|(k, _)| k.clone())
        .collect();
    Ok(Comparison {
        tolerance_pct,
        baseline_records: baseline.len(),
        candidate_records: candidate.len(),
        rows,
        only_baseline,
        only_candidate,
        allow_missing,
        repeated_baseline,
        repeated_candidate,
        unverified_candidate,
        time_sliced_baseline,
        time_sliced_candidate,
        gpu_sharing_differs,
    })
}

impl Comparison {
    pub fn regressions(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.verdict == Verdict::Regression)
            .count()
    }

    /// Baseline points the candidate lacks.
    pub fn missing(&self) -> usize {
        self.only_baseline.len()
    }

    /// Whether the comparison fails: a regression, or a missing point without `allow_missing`.
    pub fn failed(&self) -> bool {
        self.regressions() > 0 || (!self.allow_missing && self.missing() > 0)
    }

    /// The failure reasons for the verdict line, e.g. `2 regression(s) beyond 5%, 3 baseline
    /// point(s) missing from the candidate`; empty when the comparison passes.
    fn failure_reasons(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.regressions() > 0 {
            why.push(format!(
                "{} regression(s) beyond {}%",
                self.regressions(),
                fmt_num(self.tolerance_pct)
            ));
        }
        if !self.allow_missing && self.missing() > 0 {
            why.push(format!(
                "{} baseline point(s) missing from the candidate; pass --allow-missing if the candidate ran a smaller sweep on purpose",
                self.missing()
            ));
        }
        why
    }

    pub fn improvements(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.verdict == Verdict::Better)
            .count()
    }

    /// The human table: `#` header, one aligned row per matched key, unmatched keys, summary.
    pub fn render_table(&self, baseline_name: &str, candidate_name: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# efabench compare: baseline {baseline_name} ({} records) vs candidate {candidate_name} ({} records)",
            self.baseline_records, self.candidate_records
        );
        let _ = writeln!(
            out,
            "# tolerance {}%: a regression is bw_gbps lower, lat_us.p50 higher by more than that, or new verification errors",
            fmt_num(self.tolerance_pct)
        );
        let _ = writeln!(
            out,
            "# bw in Gbps (10^9 bit/s), p50 latency in us; change = (candidate - baseline) / baseline"
        );
        for (n, which) in [
            (self.repeated_baseline, "baseline"),
            (self.repeated_candidate, "candidate"),
        ] {
            if n > 0 {
                let _ = writeln!(
                    out,
                    "# note: {n} key(s) appear more than once in the {which}; the last record of each is compared"
                );
            }
        }
        if self.unverified_candidate > 0 {
            let _ = writeln!(
                out,
                "# note: {} candidate record(s) were run without verification (--no-check) where the baseline was verified; their errors are not known",
                self.unverified_candidate
            );
        }
        for (t, which) in [
            (&self.time_sliced_baseline, "baseline"),
            (&self.time_sliced_candidate, "candidate"),
        ] {
            if t.records > 0 {
                let _ = writeln!(
                    out,
                    "# warning: {} {which} record(s) were measured on a GPU shared without NVIDIA MPS ({}): their GPU work was time-sliced, so GPU-side timings include waiting for the other rank's slices",
                    t.records,
                    t.gpus.join("; ")
                );
            }
        }
        if self.gpu_sharing_differs > 0 {
            let _ = writeln!(
                out,
                "# warning: {} matched pair(s) differ in GPU sharing (not shared / shared under MPS / time-sliced, from gpu_sharing): a change there is the GPU scheduler's, not the path's",
                self.gpu_sharing_differs
            );
        }
        let _ = writeln!(out, "#");

        let header: Vec<String> = [
            "bench",
            "variant",
            "size(B)",
            "peer",
            "mem",
            "provider",
            "rails",
            "bw_base",
            "bw_cand",
            "bw_chg(%)",
            "p50_base",
            "p50_cand",
            "p50_chg(%)",
            "errors",
            "verdict",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut table = vec![header];
        for r in &self.rows {
            let k = &r.key;
            table.push(vec![
                k.bench.clone(),
                k.variant.clone(),
                k.size_bytes.to_string(),
                k.peer.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                k.mem.clone(),
                k.provider.clone(),
                k.rails.to_string(),
                format!("{:.2}", r.bw_gbps.baseline),
                format!("{:.2}", r.bw_gbps.candidate),
                fmt_change(r.bw_gbps.change_pct),
                format!("{:.2}", r.lat_p50_us.baseline),
                format!("{:.2}", r.lat_p50_us.candidate),
                fmt_change(r.lat_p50_us.change_pct),
                format!("{}->{}", r.errors.baseline, r.errors.candidate),
                match r.verdict {
                    Verdict::Ok => "ok".to_string(),
                    Verdict::Better => "better".to_string(),
                    Verdict::Regression => format!("REGRESSION({})", r.regressed.join(",")),
                },
            ]);
        }
        // Text columns left-aligned, numbers right-aligned; the header line starts with '#'.
        let left = [0usize, 1, 4, 5, 14];
        let widths: Vec<usize> = (0..table[0].len())
            .map(|c| table.iter().map(|row| row[c].len()).max().unwrap_or(0))
            .collect();
        for (i, row) in table.iter().enumerate() {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let w = widths[c];
                if c > 0 {
                    line.push_str("  ");
                }
                if left.contains(&c) {
                    let _ = write!(line, "{cell:<w$}");
                } else {
                    let _ = write!(line, "{cell:>w$}");
                }
            }
            let line = line.trim_end().to_string();
            let line = if i == 0 {
                format!("# {line}")
            } else {
                format!("  {line}")
            };
            let _ = writeln!(out, "{line}");
        }
        let missing_label = if self.allow_missing {
            "only in the baseline (missing from the candidate; allowed by --allow-missing)"
        } else {
            "only in the baseline (missing from the candidate: a failure)"
        };
        for (keys, which) in [
            (&self.only_baseline, missing_label),
            (&self.only_candidate, "only in the candidate"),
        ] {
            if !keys.is_empty() {
                let _ = writeln!(out, "# {} key(s) {which}:", keys.len());
                for k in keys.iter() {
                    let _ = writeln!(out, "#   {k}");
                }
            }
        }
        let _ = writeln!(
            out,
            "# {} matched, {} regression(s), {} improvement(s), {} missing from the candidate{}, {} only in candidate",
            self.rows.len(),
            self.regressions(),
            self.improvements(),
            self.missing(),
            if self.allow_missing && self.missing() > 0 {
                " (allowed)"
            } else {
                ""
            },
            self.only_candidate.len()
        );
        let why = self.failure_reasons();
        let _ = writeln!(
            out,
            "# Result: {}",
            if why.is_empty() {
                "OK".to_string()
            } else {
                format!("FAILED ({})", why.join(", "))
            }
        );
        out
    }

    /// The comparison as one JSON object (`--format json`).
    pub fn to_json(&self, baseline_name: &str, candidate_name: &str) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("baseline".into(), baseline_name.into());
            o.insert("candidate".into(), candidate_name.into());
            o.insert("regressions".into(), self.regressions().into());
            o.insert("improvements".into(), self.improvements().into());
            o.insert("missing".into(), self.missing().into());
            // "regression" wins over "missing" when both apply: it is the stronger finding.
            let result = if self.regressions() > 0 {
                "regression"
            } else if self.failed() {
                "missing"
            } else {
                "ok"
            };
            o.insert("result".into(), result.into());
        }
        v
    }
}

fn fmt_change(c: Option<f64>) -> String {
    match c {
        Some(c) => format!("{c:+.1}"),
        None => "-".into(),
    }
}

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efabench_record::testing::sample;

    #[test]
    fn boundary_is_not_a_regression_just_beyond_is() {
        let base = vec![
            sample("sendrecv", "stream", 4096, 100.0, 10.0),
            sample("sendrecv", "stream", 8192, 100.0, 10.0),
            sample("sendrecv", "pingpong", 8, 1.0, 2.0),
        ];
        let mut cand = base.clone();
        cand[0].bw_gbps = 95.0; // exactly -5 %: ok
        cand[0].lat_us.p50 = 10.5; // exactly +5 %: ok
        cand[1].bw_gbps = 94.99; // just beyond: regression
        cand[2].lat_us.p50 = 1.0; // much better
        let c = compare(&base, &cand, 5.0, false).unwrap();
        assert_eq!(c.rows.len(), 3);
        assert_eq!(c.rows[0].verdict, Verdict::Ok);
        assert_eq!(c.rows[0].bw_gbps.change_pct, Some(-5.0));
        assert_eq!(c.rows[1].verdict, Verdict::Regression);
        assert_eq!(c.rows[1].regressed, ["bw"]);
        assert_eq!(c.rows[2].verdict, Verdict::Better);
        assert_eq!(c.regressions(), 1);
        assert_eq!(c.improvements(), 1);

        // Latency just beyond the tolerance.
        let mut cand2 = base.clone();
        cand2[0].lat_us.p50 = 10.51;
        let c = compare(&base, &cand2, 5.0, false).unwrap();
        assert_eq!(c.rows[0].regressed, ["lat"]);

        // With a wider tolerance the same candidate passes.
        assert_eq!(compare(&base, &cand, 10.0, false).unwrap().regressions(), 0);
    }

    #[test]
    fn new_errors_regress_whatever_the_tolerance() {
        let base = vec![sample("write", "stream", 64, 10.0, 3.0)];
        let mut cand = base.clone();
        cand[0].errors = 1;
        let c = compare(&base, &cand, 1000.0, false).unwrap();
        assert_eq!(c.rows[0].regressed, ["errors"]);
        assert_eq!(c.unverified_candidate, 0);
        // An unverified candidate cannot show errors: said in a note, not hidden.
        let mut unverified = base.clone();
        unverified[0].verified = false;
        let c = compare(&base, &unverified, 5.0, false).unwrap();
        assert_eq!(c.unverified_candidate, 1);
        assert!(c
            .render_table("a", "b")
            .contains("1 candidate record(s) were run without verification"));
        // Fewer errors than the baseline is not a regression.
        let c = compare(&cand, &base, 0.0, false).unwrap();
        assert_eq!(c.regressions(), 0);
    }

    fn shared(r: &mut Record, mps: Option<bool>) {
        let v = match mps {
            None => serde_json::Value::Null,
            Some(mps) => serde_json::json!([{"host": "h", "gpu": 0, "ranks": [0, 1], "mps": mps}]),
        };
        r.extra.insert(efabench_record::GPU_SHARING.into(), v);
    }

    #[test]
    fn time_sliced_gpus_are_warned_about() {
        let sweep = |mps: Option<bool>| {
            let mut v = vec![
                sample("proxy", "nbi", 1024, 10.0, 3.0),
                sample("proxy", "nbi", 2048, 10.0, 3.0),
            ];
            v.iter_mut().for_each(|r| shared(r, mps));
            v
        };
        let warnings = |c: &Comparison| -> Vec<String> {
            c.render_table("a", "b")
                .lines()
                .filter(|l| l.starts_with("# warning:"))
                .map(str::to_string)
                .collect()
        };
        // Neither side shared a GPU, or the records predate the field: no warning.
        let c = compare(&sweep(None), &sweep(None), 5.0, false).unwrap();
        assert!(warnings(&c).is_empty());
        let old = vec![
            sample("proxy", "nbi", 1024, 10.0, 3.0),
            sample("proxy", "nbi", 2048, 10.0, 3.0),
        ];
        let c = compare(&old, &sweep(None), 5.0, false).unwrap();
        assert!(warnings(&c).is_empty());
        assert_eq!(c.gpu_sharing_differs, 0);

        // Both time-sliced: one line per side, naming the GPU; the states agree.
        let c = compare(&sweep(Some(false)), &sweep(Some(false)), 5.0, false).unwrap();
        let w = warnings(&c);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("# warning: 2 baseline record(s) were measured on a GPU shared without NVIDIA MPS (ranks 0,1 on GPU 0 of h): their GPU work was time-sliced"),
            "{w:?}"
        );
        assert!(
            w[1].starts_with("# warning: 2 candidate record(s)"),
            "{w:?}"
        );
        assert_eq!(c.gpu_sharing_differs, 0);

        // Baseline under MPS, candidate time-sliced: the candidate's line and the difference.
        let c = compare(&sweep(Some(true)), &sweep(Some(false)), 5.0, false).unwrap();
        let w = warnings(&c);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("# warning: 2 candidate record(s)"),
            "{w:?}"
        );
        assert!(
            w[1].starts_with("# warning: 2 matched pair(s) differ in GPU sharing"),
            "{w:?}"
        );
        // Not shared against shared under MPS differs too, with nothing time-sliced.
        let c = compare(&sweep(None), &sweep(Some(true)), 5.0, false).unwrap();
        assert_eq!(warnings(&c).len(), 1);
        assert_eq!(c.gpu_sharing_differs, 2);
        // In the JSON.
        let c = compare(&sweep(Some(false)), &sweep(None), 5.0, false).unwrap();
        let j = c.to_json("a", "b");
        assert_eq!(j["time_sliced_baseline"]["records"], 2);
        assert_eq!(
            j["time_sliced_baseline"]["gpus"][0],
            "ranks 0,1 on GPU 0 of h"
        );
        assert_eq!(j["time_sliced_candidate"]["records"], 0);
        assert_eq!(j["gpu_sharing_differs"], 2);
        // A warning, not a failure.
        assert!(!c.failed());
    }

    #[test]
    fn unmatched_and_repeated_keys_are_reported() {
        let base = vec![
            sample("sendrecv", "stream", 64, 10.0, 3.0),
            sample("sendrecv", "stream", 128, 10.0, 3.0),
        ];
        let mut cand = vec![
            sample("sendrecv", "stream", 64, 1.0, 3.0),
            sample("sendrecv", "stream", 64, 10.0, 3.0), // later run: this one counts
            sample("sendrecv", "stream", 256, 10.0, 3.0),
        ];
        cand[2].mem = "cuda".into();
        let c = compare(&base, &cand, 5.0, false).unwrap();
        assert_eq!(c.rows.len(), 1);
        assert_eq!(c.regressions(), 0);
        assert_eq!(c.repeated_candidate, 1);
        assert_eq!(c.only_baseline.len(), 1);
        assert_eq!(c.only_baseline[0].size_bytes, 128);
        assert_eq!(c.only_candidate[0].mem, "cuda");

        // The 128 B point of the baseline is missing from the candidate: a failure.
        assert_eq!(c.missing(), 1);
        assert!(c.failed());
        let t = c.render_table("base.jsonl", "cand.jsonl");
        assert!(
            t.contains("# 1 key(s) only in the baseline (missing from the candidate: a failure):"),
            "{t}"
        );
        assert!(t.contains("#   sendrecv/stream 128 B peer 1 mem host provider efa rails 1"));
        assert!(t.contains("appear more than once in the candidate"));
        assert!(
            t.contains("# 1 matched, 0 regression(s), 0 improvement(s), 1 missing from the candidate, 1 only in candidate"),
            "{t}"
        );
        assert!(
            t.contains("# Result: FAILED (1 baseline point(s) missing from the candidate; pass --allow-missing"),
            "{t}"
        );
        let j = c.to_json("a", "b");
        assert_eq!(j["result"], "missing");
        assert_eq!(j["missing"], 1);

        // --allow-missing: listed and counted, not a failure.
        let c = compare(&base, &cand, 5.0, true).unwrap();
        assert!(!c.failed());
        let t = c.render_table("base.jsonl", "cand.jsonl");
        assert!(t.contains("1 missing from the candidate (allowed)"), "{t}");
        assert!(t.contains("allowed by --allow-missing"), "{t}");
        assert!(t.contains("# Result: OK"), "{t}");
        assert_eq!(c.to_json("a", "b")["result"], "ok");

        // A point only the candidate has never fails.
        let c = compare(&base[..1], &cand, 5.0, false).unwrap();
        assert_eq!((c.missing(), c.only_candidate.len()), (0, 1));
        assert!(!c.failed());
    }

    #[test]
    fn table_and_json_show_the_regression() {
        let base = vec![sample("sendrecv", "stream", 1 << 20, 97.0, 90.0)];
        let mut cand = base.clone();
        cand[0].bw_gbps = 48.5;
        cand[0].lat_us.p50 = 180.0;
        let c = compare(&base, &cand, 5.0, false).unwrap();
        let t = c.render_table("a", "b");
        let row = t.lines().find(|l| !l.starts_with('#')).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "sendrecv",
                "stream",
                "1048576",
                "1",
                "host",
                "efa",
                "1",
                "97.00",
                "48.50",
                "-50.0",
                "90.00",
                "180.00",
                "+100.0",
                "0->0",
                "REGRESSION(bw,lat)"
            ]
        );
        assert!(t.contains("# Result: FAILED (1 regression(s) beyond 5%)"));
        let header = t.lines().find(|l| l.contains("bw_base")).unwrap();
        assert!(header.starts_with("# bench"));

        let j = c.to_json("a", "b");
        assert_eq!(j["result"], "regression");
        assert_eq!(j["regressions"], 1);
        assert_eq!(j["rows"][0]["verdict"], "regression");
        assert_eq!(j["rows"][0]["bw_gbps"]["change_pct"], -50.0);
        assert_eq!(j["rows"][0]["key"]["size_bytes"], 1 << 20);
    }

    #[test]
    fn zero_baseline_and_bad_tolerance() {
        let mut base = vec![sample("sendrecv", "stream", 64, 0.0, 3.0)];
        base[0].bw_gbps = 0.0;
        let cand = base.clone();
        let c = compare(&base, &cand, 5.0, false).unwrap();
        assert_eq!(c.rows[0].bw_gbps.change_pct, None);
        assert_eq!(c.rows[0].verdict, Verdict::Ok);
        for t in [-1.0, f64::NAN, f64::INFINITY] {
            let e = compare(&base, &cand, t, false).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::BadInput);
            assert!(e.to_string().contains("--tolerance"));
        }
    }
}
