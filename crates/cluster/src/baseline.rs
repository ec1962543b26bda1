//! `--baseline FILE` and `--save-baseline FILE`: this run against what the cluster did when it
//! was known to be healthy.
//!
//! The relative decision ([`crate::decide`]) judges each node against the pairs without it, so
//! it cannot see a cluster whose every node is equally low (a bad image, a fallback to another
//! provider): the pairs agree with each other and all look fine. A baseline file
//! (`efabench.baseline.v1`, the format `efabench baseline` and `compare --save` write) saved
//! from an earlier healthy run is the expectation instead, with its noise.
//!
//! # Matching
//! Points are matched by their [`Key`]: bench, size, world, rails, memory and, for a pair, its
//! source rank (`src`) and destination rank (`peer`). The provider is not compared: a run that
//! fell back to another provider is exactly what the baseline is to catch, so it is measured
//! against it (the context line names the change). Host names are not in the key either:
//! a new allocation gets other hosts, and rank `r` of this run is compared with rank `r` of the
//! baseline's runs. Where a node's ranks sit decides only which pairs are its own.
//!
//! # The figures
//! Each matched pair gives the log of its ratio, this run's median-window bandwidth over the
//! baseline's (the geometric mean of its runs). Its noise has two parts:
//! * independent from pair to pair: this run's window noise and the baseline mean's within-run
//!   error, and the scatter of the ratios between the pairs;
//! * common to all pairs: where the baseline holds several runs whose scatter is larger than
//!   their within-run errors, the run-to-run spread (one more run drawn from it, plus the
//!   error of the baseline's mean). A whole run is faster or slower at once, so this part does
//!   not shrink with the number of pairs, and it has only runs − 1 degrees of freedom.
//!
//! A set of pairs (a node's, or the cluster's) is summarised by the median of their log ratios,
//! its standard error `1.2533 s / sqrt(n)` for the independent part (s the larger of the
//! ratios' robust spread and the pairs' own noise) combined with the common part, and an
//! interval from Student's t (Welch-Satterthwaite degrees of freedom) at `1 - alpha / tests`,
//! tests being every node and the cluster.
//!
//! # The finding
//! The cluster's ratio is the median over every matched pair that touches no node the relative
//! decision named (while those are fewer than half the nodes): a single slow node is that
//! decision's finding (its baseline ratio is added to its evidence), and on a small cluster its
//! pairs would otherwise drag the median. When the
//! interval's upper end is below `--isolate-below` the cluster fails as a whole (exit 3, as a
//! check failing on most nodes); below `--warn-below` it is a cluster-wide WARN.

use std::collections::BTreeSet;
use std::path::Path;

use efabench_record::Record;
use efabench_report::compare::{
    estimate, Baseline, BaselinePoint, Context, ContextChange, Key, RunPoint, Side, Spread,
};
use serde::{Deserialize, Serialize};

use crate::decide::{median, robust_scale, t_quantile, MIN_NOISE};
use crate::paths::PathError;
use crate::verdict::{Judgement, Thresholds};

/// The median's standard error over the population's σ: √(π / 2).
const MEDIAN_SE: f64 = 1.253_314;

/// Degrees of freedom given to a noise that comes from many samples (windows within a run).
const MANY: f64 = 1000.0;

/// A baseline file read before the stages.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The path as given.
    pub file: String,
    pub baseline: Baseline,
}

/// Reads `--baseline FILE`: a one-line reason naming the file when it is missing, not a
/// baseline file, or holds no `pairs` point.
pub fn load(path: &Path) -> Result<Loaded, PathError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PathError::BaselineUnreadable {
        path: shown.clone(),
        source,
    })?;
    let baseline = match Baseline::parse(path, &text) {
        Ok(Some(b)) => b,
        Ok(None) => return Err(PathError::NotABaseline { path: shown }),
        Err(e) => return Err(PathError::BaselineBroken(e)),
    };
    if !baseline.points.iter().any(|p| p.key.bench == "pairs") {
        return Err(PathError::NoPairsPoint {
            path: shown,
            points: baseline.points.len(),
        });
    }
    Ok(Loaded {
        file: shown,
        baseline,
    })
}

/// Refuses a `--save-baseline` path before any stage: an unwritable directory, or an existing
/// file that is not a baseline file (it would be replaced).
pub fn check_save_path(path: &Path) -> Result<(), PathError> {
    crate::summary::check_writable(path, "--save-baseline")?;
    if let Ok(text) = std::fs::read_to_string(path) {
        match Baseline::parse(path, &text) {
            Ok(Some(_)) => {}
            _ if text.trim().is_empty() => {}
            _ => {
                return Err(PathError::NotABaselineToReplace {
                    path: path.display().to_string(),
                })
            }
        }
    }
    Ok(())
}

/// Whether `old` can take this run as one more: the same libfabric, provider, efabench version
/// and NICs, and some point in common. Hosts and commits may differ (runs over allocations).
fn same_context(old: &Baseline, new: &Baseline) -> Result<(), String> {
    let (a, b) = (&old.context, &new.context);
    let changed: Vec<String> = a
        .changes(b)
        .into_iter()
        .filter(|c| !matches!(c.field.as_str(), "host" | "git"))
        .map(|c| c.to_string())
        .collect();
    if !changed.is_empty() {
        return Err(changed.join(", "));
    }
    if !new
        .points
        .iter()
        .any(|p| old.points.iter().any(|o| o.key == p.key))
    {
        return Err("no point in common (another job shape or size)".into());
    }
    Ok(())
}

/// Adds `new`'s runs to `old`, point by point, and recomputes each point's spread.
fn append(mut old: Baseline, new: Baseline) -> Baseline {
    for p in new.points {
        match old.points.iter_mut().find(|o| o.key == p.key) {
            Some(o) => o.runs.extend(p.runs),
            None => old.points.push(p),
        }
    }
    for o in &mut old.points {
        let lat: Vec<_> = o.runs.iter().map(|r| r.lat_p50_us).collect();
        let bw: Vec<_> = o.runs.iter().map(|r| r.bw_gbps).collect();
        o.lat_p50_us = estimate(&lat);
        o.bw_gbps = estimate(&bw);
    }
    old.sources.extend(new.sources);
    old.context.merge(&new.context);
    old.created = new.created;
    old
}

/// Why `--save-baseline` was not written.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The run has nothing a baseline holds.
    #[error("--save-baseline {path}: not written, this run measured no pairs or alltoall record")]
    NothingToSave { path: String },
    /// Writing the file failed.
    #[error("--save-baseline {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: efabench_record::Error,
    },
}

/// Writes this run's `pairs` and `alltoall` records to `path` as a baseline file, appended to
/// the one there when it is of the same context. Returns the line that says which.
pub fn save(path: &Path, records: &[Record], source: &str) -> Result<String, SaveError> {
    let shown = path.display();
    let mine: Vec<Record> = records
        .iter()
        .filter(|r| r.bench == "pairs" || r.bench == "alltoall")
        .cloned()
        .collect();
    if mine.is_empty() {
        return Err(SaveError::NothingToSave {
            path: shown.to_string(),
        });
    }
    let new = Baseline::of(&Side::from_records([(source.to_string(), &mine[..])]));
    let old = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| Baseline::parse(path, &t).ok().flatten());
    let (out, how) = match old {
        Some(old) => match same_context(&old, &new) {
            Ok(()) => {
                let b = append(old, new);
                let runs = b.points.iter().map(|p| p.runs.len()).max().unwrap_or(0);
                let how = format!(
                    "appended this run ({} point(s), up to {runs} run(s) each)",
                    b.points.len()
                );
                (b, how)
            }
            Err(why) => {
                let how = format!(
                    "replaced it with this run ({} point(s)): its context differed ({why})",
                    new.points.len()
                );
                (new, how)
            }
        },
        None => {
            let how = format!("wrote this run ({} point(s), 1 run)", new.points.len());
            (new, how)
        }
    };
    out.save(path).map_err(|source| SaveError::Write {
        path: shown.to_string(),
        source,
    })?;
    Ok(format!("--save-baseline {shown}: {how}"))
}

/// A ratio to the baseline with its interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// This run's median over the baseline's (the median of the pairs' ratios).
    pub ratio: f64,
    /// The interval at `confidence` (two-sided).
    pub low: f64,
    pub high: f64,
    pub confidence: f64,
    /// Matched pairs behind it.
    pub pairs: usize,
    /// Noise of one pair's ratio (log units, ~ relative), independent and common parts
    /// together.
    pub noise: f64,
}

impl Ratio {
    /// "51% [47-55%]"; a tenth of a percent below 10%.
    pub fn describe(&self) -> String {
        let pct = |v: f64| {
            if v < 0.1 {
                format!("{:.1}", v * 100.0)
            } else {
                format!("{:.0}", v * 100.0)
            }
        };
        format!(
            "{}% [{}-{}%]",
            pct(self.ratio),
            pct(self.low),
            pct(self.high)
        )
    }
}

/// What the comparison concludes about the cluster as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Finding {
    /// Not confidently below the WARN line (or nothing to compare).
    Pass,
    /// Confidently below `warn_below` of the baseline.
    Warn,
    /// Confidently below `isolate_below` of the baseline: the cluster fails (exit 3).
    Fail,
}

impl Finding {
    pub fn as_str(self) -> &'static str {
        match self {
            Finding::Pass => "PASS",
            Finding::Warn => "WARN",
            Finding::Fail => "FAIL",
        }
    }
}

/// One node's pairs against the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRatio {
    pub host: String,
    pub ratio: Ratio,
}

/// The comparison of this run with `--baseline`, in the summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The baseline file as given.
    pub file: String,
    /// Its points, and the most runs any of them holds.
    pub baseline_points: usize,
    pub baseline_runs: usize,
    /// This run's `pairs` points, and how many of them the baseline has.
    pub run_pairs: usize,
    pub matched_pairs: usize,
    /// The matched `alltoall` points, and the median of their bandwidth ratios.
    pub matched_alltoall: usize,
    pub alltoall_ratio: Option<f64>,
    /// The cluster's ratio: every matched pair touching no node in `left_out`.
    pub cluster: Option<Ratio>,
    /// Nodes the relative decision named, whose pairs the cluster's ratio leaves out.
    pub left_out: Vec<String>,
    pub finding: Finding,
    /// Each node's pairs (either end on it) against the baseline.
    pub nodes: Vec<NodeRatio>,
    /// Where the baseline and this run were measured.
    pub baseline_context: Context,
    pub run_context: Context,
    /// A line saying why nothing could be compared, when nothing could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Comparison {
    /// The summary line: points matched and the two contexts.
    pub fn describe(&self) -> String {
        let head = format!(
            "baseline {} ({} point(s), up to {} run(s))",
            self.file, self.baseline_points, self.baseline_runs
        );
        if let Some(m) = &self.message {
            return format!("{head}: {m}");
        }
        let show = |s: &BTreeSet<String>| {
            if s.is_empty() {
                "(none)".to_string()
            } else {
                s.iter().cloned().collect::<Vec<_>>().join(",")
            }
        };
        let (b, r) = (&self.baseline_context, &self.run_context);
        let ctx: Vec<String> = [
            ("libfabric", &b.libfabric, &r.libfabric),
            ("provider", &b.provider, &r.provider),
            ("hosts", &b.host, &r.host),
            ("git", &b.git, &r.git),
        ]
        .iter()
        .map(|(name, x, y)| {
            if x == y {
                format!("{name} {} (same)", show(x))
            } else {
                format!("{name} {} -> {}", show(x), show(y))
            }
        })
        .collect();
        let cluster = match &self.cluster {
            Some(c) => format!(
                "; pairs at {} of it ({} {})",
                c.describe(),
                self.finding.as_str(),
                if self.left_out.is_empty() {
                    "over every matched pair".to_string()
                } else {
                    format!("without {}", self.left_out.join(", "))
                }
            ),
            None => String::new(),
        };
        format!(
            "{head}: {} of {} pair point(s) matched by rank (src, peer), {} alltoall{}{cluster}; {}",
            self.matched_pairs,
            self.run_pairs,
            self.matched_alltoall,
            self.alltoall_ratio
                .map_or(String::new(), |a| format!(" at {:.0}%", a * 100.0)),
            ctx.join(", ")
        )
    }

    /// The context fields that differ (printed, never fatal).
    pub fn context_changes(&self) -> Vec<ContextChange> {
        self.baseline_context.changes(&self.run_context)
    }
}

/// Whether two keys name the same point, whatever the provider: a run that fell back from
/// `efa` to `tcp` measured the same pairs, and is to be judged against the baseline, not left
/// unmatched (the context line names the change).
fn same_point(a: &Key, b: &Key) -> bool {
    let loose = |k: &Key| Key {
        provider: String::new(),
        ..k.clone()
    };
    loose(a) == loose(b)
}

/// One matched pair: the log of its ratio and its noise.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PairRatio {
    src: usize,
    dst: usize,
    log: f64,
    /// Noise independent from pair to pair (log units).
    indep: f64,
    /// Noise shared by every pair of a run (log units), and its degrees of freedom.
    common: f64,
    df: f64,
}

fn pair_ratio(b: &BaselinePoint, now: &RunPoint) -> Option<PairRatio> {
    let base = &b.bw_gbps;
    let cur = &now.bw_gbps;
    if !(base.value.is_finite() && base.value > 0.0 && cur.value.is_finite() && cur.value > 0.0) {
        return None;
    }
    let src = b.key.src()?;
    let dst = b.key.peer? as usize;
    let (indep, common, df) = match base.spread {
        // σ between runs is rel_se √runs; one more run from it, plus the mean's error.
        Spread::Between => (
            cur.rel_se,
            base.rel_se * ((base.runs + 1) as f64).sqrt(),
            base.df.unwrap_or(1.0).max(1.0),
        ),
        Spread::Within => ((base.rel_se.powi(2) + cur.rel_se.powi(2)).sqrt(), 0.0, MANY),
    };
    Some(PairRatio {
        src,
        dst,
        log: (cur.value / base.value).ln(),
        indep,
        common,
        df,
    })
}

/// The median ratio of `pairs` with its interval (module documentation).
fn aggregate(pairs: &[&PairRatio], tests: usize, alpha: f64) -> Option<Ratio> {
    let n = pairs.len();
    if n == 0 {
        return None;
    }
    let logs: Vec<f64> = pairs.iter().map(|p| p.log).collect();
    let m = median(&mut logs.clone());
    let scatter = robust_scale(&logs);
    let own = median(&mut pairs.iter().map(|p| p.indep).collect::<Vec<_>>());
    let s = scatter.max(own).max(MIN_NOISE);
    let df_a = if scatter >= own && n > 1 {
        (n - 1) as f64
    } else {
        MANY
    };
    let a = if n == 1 {
        s
    } else {
        MEDIAN_SE * s / (n as f64).sqrt()
    };
    let c = median(&mut pairs.iter().map(|p| p.common).collect::<Vec<_>>());
    let df_c = pairs
        .iter()
        .filter(|p| p.common > 0.0)
        .map(|p| p.df)
        .fold(MANY, f64::min);
    let se = (a * a + c * c).sqrt();
    let df = if c > 0.0 {
        se.powi(4) / (a.powi(4) / df_a + c.powi(4) / df_c)
    } else {
        df_a
    };
    let tests = tests.max(1) as f64;
    let q = t_quantile(1.0 - alpha / tests / 2.0, df);
    Some(Ratio {
        ratio: m.exp(),
        low: (m - q * se).exp(),
        high: (m + q * se).exp(),
        confidence: 1.0 - alpha / tests,
        pairs: n,
        noise: (s * s + c * c).sqrt(),
    })
}

/// Compares this run's records with the baseline, adds the cluster-wide finding to `j` (a
/// failure when below the ISOLATE line) and each named node's baseline ratio to the evidence
/// of its `pairs` reasons.
pub fn judge(
    j: &mut Judgement,
    rank_host: &[String],
    records: &[Record],
    loaded: &Loaded,
    t: &Thresholds,
) -> Comparison {
    let b = &loaded.baseline;
    let run = Side::from_records([("this run".to_string(), records)]);
    let mut pairs = Vec::new();
    let mut a2a = Vec::new();
    let mut run_pairs = 0;
    for (key, runs) in &run.points {
        let Some(now) = runs.last() else { continue };
        if key.bench == "pairs" {
            run_pairs += 1;
        }
        let Some(bp) = b.points.iter().find(|p| same_point(&p.key, key)) else {
            continue;
        };
        match key.bench.as_str() {
            "pairs" => pairs.extend(pair_ratio(bp, now)),
            "alltoall" if bp.bw_gbps.value > 0.0 && now.bw_gbps.value > 0.0 => {
                a2a.push(now.bw_gbps.value / bp.bw_gbps.value)
            }
            _ => {}
        }
    }
    let host_of = |r: usize| rank_host.get(r).map(String::as_str);
    let mut hosts: Vec<&str> = Vec::new();
    for h in rank_host {
        if !hosts.contains(&h.as_str()) {
            hosts.push(h);
        }
    }
    let named: Vec<String> = j
        .nodes
        .iter()
        .filter(|n| n.reasons.iter().any(|r| r.stage == "pairs"))
        .map(|n| n.host.clone())
        .collect();
    // A few named nodes are the per-node decision's; half the cluster or more named (the
    // floor under every node, say) is the cluster's own state, measured whole.
    let left_out = if named.len() * 2 < hosts.len() {
        named
    } else {
        Vec::new()
    };
    let tests = hosts.len() + 1;
    let touches = |p: &PairRatio, h: &str| host_of(p.src) == Some(h) || host_of(p.dst) == Some(h);
    let nodes: Vec<NodeRatio> = hosts
        .iter()
        .filter_map(|h| {
            let own: Vec<&PairRatio> = pairs.iter().filter(|p| touches(p, h)).collect();
            aggregate(&own, tests, t.alpha).map(|ratio| NodeRatio {
                host: h.to_string(),
                ratio,
            })
        })
        .collect();
    let kept: Vec<&PairRatio> = pairs
        .iter()
        .filter(|p| !left_out.iter().any(|h| touches(p, h)))
        .collect();
    let cluster = aggregate(&kept, tests, t.alpha);
    let finding = match cluster {
        Some(c) if c.high < t.isolate_below => Finding::Fail,
        Some(c) if c.high < t.warn_below => Finding::Warn,
        _ => Finding::Pass,
    };
    let baseline_pairs = b.points.iter().filter(|p| p.key.bench == "pairs").count();
    let message = if pairs.is_empty() {
        Some(format!(
            "none of this run's {run_pairs} pair point(s) matches one of its {baseline_pairs} \
             (matched by bench, size, world, src and peer ranks, rails, mem): save the \
             baseline from a run of the same job shape and sizes"
        ))
    } else if cluster.is_none() {
        Some(format!(
            "every matched pair touches a node the relative decision named ({})",
            left_out.join(", ")
        ))
    } else {
        None
    };
    let run_context = {
        let mut c = run.context.clone();
        // The records name the host of the rank that wrote them; name every node of the job.
        c.host = rank_host.iter().cloned().collect();
        c
    };
    let out = Comparison {
        file: loaded.file.clone(),
        baseline_points: b.points.len(),
        baseline_runs: b.points.iter().map(|p| p.runs.len()).max().unwrap_or(0),
        run_pairs,
        matched_pairs: pairs.len(),
        matched_alltoall: a2a.len(),
        alltoall_ratio: (!a2a.is_empty()).then(|| median(&mut a2a)),
        cluster,
        left_out,
        finding,
        nodes,
        baseline_context: b.context.clone(),
        run_context,
        message,
    };
    if let (Some(c), Finding::Warn | Finding::Fail) = (cluster, finding) {
        let line = if finding == Finding::Fail {
            t.isolate_below
        } else {
            t.warn_below
        };
        let text = format!(
            "pairs at {} of the baseline {} over {} matched pair(s), confidently below {:.0}% \
             ({:.2}% confidence): every node is slow alike (image, provider, fabric), which \
             the per-node decision cannot see",
            c.describe(),
            loaded.file,
            c.pairs,
            line * 100.0,
            c.confidence * 100.0
        );
        if finding == Finding::Fail {
            j.cluster_failures.push(text.clone());
        }
        j.cluster.push(text);
    }
    for n in &mut j.nodes {
        let Some(r) = out.nodes.iter().find(|x| x.host == n.host) else {
            continue;
        };
        for reason in n.reasons.iter_mut().filter(|r| r.stage == "pairs") {
            reason.evidence.push_str(&format!(
                "; vs baseline: {} over {} pair(s)",
                r.ratio.describe(),
                r.ratio.pairs
            ));
        }
    }
    out
}

#[cfg(test)]
#[path = "baseline_tests.rs"]
mod tests;
