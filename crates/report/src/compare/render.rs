//! The comparison as people read it (an aligned table with `#` notes) and as programs read it
//! (one JSON object).

use super::{BwFigure, Comparison, Verdict};
use std::fmt::Write as _;

pub(crate) fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        v.to_string()
    }
}

fn fmt_change(c: Option<f64>) -> String {
    match c {
        Some(c) => format!("{c:+.1}"),
        None => "-".into(),
    }
}

/// A probability in percent, never printed as a certainty: noise is estimated, not known.
fn fmt_sure(p: f64) -> String {
    if p >= 99.99 {
        ">99.99".into()
    } else if p >= 99.0 {
        format!("{:.2}", (p * 100.0).floor() / 100.0)
    } else {
        format!("{p:.1}")
    }
}

fn side_name(files: &[String]) -> String {
    match files {
        [one] => one.clone(),
        many => format!("{} files ({})", many.len(), many.join(", ")),
    }
}

impl Comparison {
    /// The `#` lines above the table.
    fn header(&self, out: &mut String, baseline_name: &str, candidate_name: &str) {
        let _ = writeln!(
            out,
            "# efabench compare: baseline {baseline_name} ({} records) vs candidate {candidate_name} ({} records)",
            self.baseline_records, self.candidate_records
        );
        let _ = writeln!(
            out,
            "# tolerance {}%, confidence {}% over {} test(s) ({}% each): a regression is a p50 latency up or a bandwidth down by more than the tolerance and, that sure, beyond the noise; or new verification errors",
            fmt_num(self.tolerance_pct),
            fmt_num(self.confidence * 100.0),
            self.tests,
            fmt_sure(self.per_test_confidence * 100.0)
        );
        let _ = writeln!(
            out,
            "# bw in Gbps (10^9 bit/s): size over the median window where records keep their blocks (bw_figure), else the record's; p50 latency in us; runs = baseline/candidate runs of the point"
        );
        let _ = writeln!(
            out,
            "# change = (candidate - baseline) / baseline; noise = standard error of the change from the runs' own spread and their scatter (%); sure = how sure the candidate is worse (%)"
        );
        if let Some(s) = self.sweep_noise_pct {
            let _ = writeln!(
                out,
                "# single runs: the points' changes scatter by {s:.1}% across the sweep; that is added to the noise of each point with one run on a side (repeat runs to measure it per point)"
            );
        }
        if self.context_changes.is_empty() {
            let _ = writeln!(
                out,
                "# context: same libfabric, provider, hosts, git, version and domains"
            );
        }
        for c in &self.context_changes {
            let _ = writeln!(
                out,
                "# context changed: {c}{}",
                if self.strict_context {
                    " (a failure under --strict-context)"
                } else {
                    ""
                }
            );
        }
        for (n, which) in [
            (self.repeated_baseline, "baseline"),
            (self.repeated_candidate, "candidate"),
        ] {
            if n > 0 {
                let _ = writeln!(
                    out,
                    "# note: {n} point(s) appear more than once in one {which} file; each record is counted as a run"
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
    }

    /// The human table: `#` header, one aligned row per matched point, unmatched points,
    /// summary, verdict.
    pub fn render_table(&self, baseline_name: &str, candidate_name: &str) -> String {
        let mut out = String::new();
        self.header(&mut out, baseline_name, candidate_name);
        let header: Vec<String> = [
            "bench",
            "variant",
            "size(B)",
            "peer",
            "mem",
            "provider",
            "rails",
            "runs",
            "bw_base",
            "bw_cand",
            "bw_chg(%)",
            "p50_base",
            "p50_cand",
            "p50_chg(%)",
            "noise(%)",
            "sure(%)",
            "errors",
            "verdict",
            "settings",
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
                format!(
                    "{}/{}",
                    r.lat_p50_us.baseline_runs, r.lat_p50_us.candidate_runs
                ),
                format!("{:.2}", r.bw_gbps.baseline),
                format!("{:.2}", r.bw_gbps.candidate),
                fmt_change(r.bw_gbps.change_pct),
                format!("{:.2}", r.lat_p50_us.baseline),
                format!("{:.2}", r.lat_p50_us.candidate),
                fmt_change(r.lat_p50_us.change_pct),
                format!("{:.1}", r.bw_gbps.noise_pct.max(r.lat_p50_us.noise_pct)),
                fmt_sure(r.sure_worse_pct),
                format!("{}->{}", r.errors.baseline, r.errors.candidate),
                match r.verdict {
                    Verdict::Ok => "ok".to_string(),
                    Verdict::Better => "better".to_string(),
                    Verdict::Noise => "noise".to_string(),
                    Verdict::Regression => format!("REGRESSION({})", r.regressed.join(",")),
                },
                match r.bw_figure {
                    BwFigure::MedianWindow => k.settings_text(),
                    BwFigure::Record => format!("{} (bw: record's)", k.settings_text()),
                },
            ]);
        }
        // Text columns left-aligned, numbers right-aligned; the header line starts with '#'.
        let left = [0usize, 1, 4, 5, 17, 18];
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
            "# {} matched, {} regression(s), {} beyond the tolerance but within the noise, {} improvement(s), {} missing from the candidate{}, {} only in candidate",
            self.rows.len(),
            self.regressions(),
            self.within_noise(),
            self.improvements(),
            self.missing(),
            if self.allow_missing && self.missing() > 0 {
                " (allowed)"
            } else {
                ""
            },
            self.only_candidate.len()
        );
        match &self.shift {
            Some(s) => {
                let _ = writeln!(
                    out,
                    "# whole sweep (the median run's p50 over {} points, {}/{} runs): {:+.1}%, noise {:.1}%, sure {}% (needs {}): {}",
                    s.points,
                    s.baseline_runs,
                    s.candidate_runs,
                    s.change_pct,
                    s.noise_pct,
                    fmt_sure(s.sure_worse_pct),
                    fmt_sure(s.confidence_pct),
                    match s.verdict {
                        Verdict::Ok => "within the tolerance",
                        Verdict::Noise => "beyond the tolerance but within the noise",
                        Verdict::Better => "better",
                        Verdict::Regression => "REGRESSION",
                    }
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "# whole sweep: not judged (needs {} runs or more on each side: pass --baseline and the candidate files several times)",
                    super::shift::MIN_RUNS
                );
            }
        }
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
            o.insert("within_noise".into(), self.within_noise().into());
            o.insert("improvements".into(), self.improvements().into());
            o.insert("missing".into(), self.missing().into());
            // "regression" wins over the others when several apply: it is the strongest finding.
            o.insert("shifted".into(), self.shifted().into());
            let result = if self.regressions() > 0 || self.shifted() {
                "regression"
            } else if !self.allow_missing && self.missing() > 0 {
                "missing"
            } else if self.failed() {
                "context"
            } else {
                "ok"
            };
            o.insert("result".into(), result.into());
        }
        v
    }

    /// How the sides were named by their files, for the header.
    pub fn side_names(&self) -> (String, String) {
        (
            side_name(&self.baseline_files),
            side_name(&self.candidate_files),
        )
    }
}
