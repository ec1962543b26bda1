//! One side of a comparison: the runs of each point, from one or several record files or from
//! a baseline file, and the estimate of each figure with its noise.
//!
//! Each record is one run of its point: a second file adds a run, and so does a record that
//! repeats its key in one file (runs appended with `-o`). A side's figure is the geometric mean
//! of its runs (changes are judged as ratios); its standard error is the larger of what the runs'
//! own spread says (the within-run errors, averaged and divided by the runs) and what the runs'
//! scatter about each other says (their sample standard deviation over √runs, with runs − 1
//! degrees of freedom). With one run the second is unknown and only the first counts.

use super::context::Context;
use super::figure::{Obs, RunPoint};
use super::key::Key;
use efabench_record::Record;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The runs of one side, by point.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Side {
    /// The files read (records or a baseline file).
    pub files: Vec<String>,
    /// Records read (a baseline file counts its stored runs).
    pub records: usize,
    /// Each point with its runs, in first-seen order.
    pub points: Vec<(Key, Vec<RunPoint>)>,
    pub context: Context,
    /// Points measured more than once within one records file.
    pub repeated_in_file: usize,
}

impl Side {
    /// A side made of record files, each `(name, records)`.
    pub fn from_records<'a>(files: impl IntoIterator<Item = (String, &'a [Record])>) -> Side {
        let mut side = Side::default();
        let mut pos: HashMap<Key, usize> = HashMap::new();
        let mut repeated = std::collections::HashSet::new();
        for (name, records) in files {
            side.files.push(name);
            side.records += records.len();
            let mut seen_here = std::collections::HashSet::new();
            for r in records {
                side.context.add(r);
                let k = Key::of(r);
                if !seen_here.insert(k.clone()) {
                    repeated.insert(k.clone());
                }
                let run = RunPoint::of(r);
                match pos.get(&k) {
                    Some(&i) => side.points[i].1.push(run),
                    None => {
                        pos.insert(k.clone(), side.points.len());
                        side.points.push((k, vec![run]));
                    }
                }
            }
        }
        side.repeated_in_file = repeated.len();
        side
    }

    /// The largest number of runs of any point.
    pub fn max_runs(&self) -> usize {
        self.points.iter().map(|(_, r)| r.len()).max().unwrap_or(0)
    }
}

/// Which spread set a side's standard error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Spread {
    /// The runs' own (within-run) errors.
    Within,
    /// The scatter of repeated runs about each other.
    Between,
}

/// A side's figure for one point and metric.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Geometric mean of the runs (arithmetic when one is not positive).
    pub value: f64,
    /// Standard error of `value`, relative to it.
    pub rel_se: f64,
    /// Degrees of freedom of `rel_se`: runs − 1 when the runs' scatter set it, null when the
    /// within-run errors did (many samples: the normal distribution).
    pub df: Option<f64>,
    pub runs: usize,
    pub spread: Spread,
}

/// Combines the runs of one figure (see the module documentation).
pub fn estimate(obs: &[Obs]) -> Estimate {
    let k = obs.len().max(1) as f64;
    let within = (obs.iter().map(|o| o.rel_se.powi(2)).sum::<f64>() / k / k).sqrt();
    let positive = !obs.is_empty() && obs.iter().all(|o| o.value.is_finite() && o.value > 0.0);
    let (value, between) = if positive {
        let logs: Vec<f64> = obs.iter().map(|o| o.value.ln()).collect();
        let mean = logs.iter().sum::<f64>() / k;
        let between = (obs.len() >= 2).then(|| {
            let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (k - 1.0);
            (var / k).sqrt()
        });
        // One run (or identical runs) keep their exact figure: exp(ln x) may differ in the
        // last bit, which would move a change of exactly the tolerance across it.
        let exact = obs.iter().all(|o| o.value == obs[0].value);
        (if exact { obs[0].value } else { mean.exp() }, between)
    } else {
        let mean = obs.iter().map(|o| o.value).sum::<f64>() / k;
        (if mean.is_finite() { mean } else { 0.0 }, None)
    };
    let within = if within.is_finite() { within } else { 0.0 };
    match between.filter(|b| b.is_finite() && *b > within) {
        Some(b) => Estimate {
            value,
            rel_se: b,
            df: Some(k - 1.0),
            runs: obs.len(),
            spread: Spread::Between,
        },
        None => Estimate {
            value,
            rel_se: within,
            df: None,
            runs: obs.len(),
            spread: Spread::Within,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::figure::Noise;
    use efabench_record::testing::sample;

    fn obs(value: f64, rel_se: f64) -> Obs {
        Obs {
            value,
            rel_se,
            noise: Noise::Blocks,
        }
    }

    #[test]
    fn repeated_runs_set_the_noise_when_they_scatter_more() {
        let one = estimate(&[obs(10.0, 0.02)]);
        assert_eq!((one.value, one.rel_se, one.df), (10.0, 0.02, None));
        // Two runs agreeing closely: the within-run errors, halved in variance.
        let two = estimate(&[obs(10.0, 0.02), obs(10.0, 0.02)]);
        assert!((two.rel_se - 0.02 / 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(two.spread, Spread::Within);
        // Runs 20% apart: their scatter wins, with 1 degree of freedom.
        let far = estimate(&[obs(10.0, 0.001), obs(12.0, 0.001)]);
        assert_eq!((far.spread, far.df), (Spread::Between, Some(1.0)));
        assert!((far.value - 120f64.sqrt()).abs() < 1e-9);
        assert!((far.rel_se - (1.2f64.ln() / 2.0)).abs() < 1e-9);
        // A zero figure (latency-only benchmark): no logs, no panic.
        let zero = estimate(&[obs(0.0, 0.0), obs(0.0, 0.0)]);
        assert_eq!((zero.value, zero.rel_se), (0.0, 0.0));
    }

    #[test]
    fn files_and_repeated_keys_add_runs() {
        let a = [
            sample("pairs", "stream", 64, 1.0, 1.0),
            sample("pairs", "stream", 64, 1.1, 1.0),
        ];
        let b = [sample("pairs", "stream", 64, 1.2, 1.0)];
        let s = Side::from_records([("a".to_string(), &a[..]), ("b".to_string(), &b[..])]);
        assert_eq!((s.points.len(), s.points[0].1.len()), (1, 3));
        assert_eq!((s.records, s.repeated_in_file, s.max_runs()), (3, 1, 3));
    }
}
