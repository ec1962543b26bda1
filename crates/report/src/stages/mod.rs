//! `efabench plot --stages`: where the time of an `efabench ep` phase goes.
//!
//! An `ep` record is one fixed message size per run, so a chart against size says nothing; what
//! a user of an expert-parallel benchmark wants to see is which stage of dispatch and combine
//! costs what, GPU-initiated next to CPU-initiated. Each record's `ep_stages` holds the slowest
//! rank's median iteration split into stages that add up to `total_us` (`docs/metrics.md`); this
//! draws one horizontal stacked bar per configuration, the stages in their order in time, with
//! the x axis in µs.
//!
//! Several runs of one configuration (a file appended to by repeated runs, or `--iters` rounds)
//! become one bar by default: the run whose `total_us` is the median (the lower one for an even
//! count), drawn whole, so its segments still add up to its total; medians per stage would
//! not. [`StagesOptions::each_run`] draws every run instead.
//!
//! Bars are grouped by phase (dispatch, combine, both) in the order the phases first appear,
//! so the initiators of one phase sit next to each other. Labels name the variant and only what
//! differs between bars (dtype, layout, merging, sizes, input file), as `plot` does.

use crate::fault::{DrawFailure, ReportError};
use crate::plot::{
    ensure_font, fmt_num, nice_step, ticks_between, Axis, ImageFormat, PALETTE, TIME_SLICED_MARK,
};
use efabench_record::error::{io_reason, Error};
use efabench_record::Record;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The stages of `ep_stages` in the order they happen, as the legend names them.
pub const STAGE_NAMES: [&str; 9] = [
    "launch", "post", "copy", "feed", "quiet", "network", "arrival", "settle", "reduce",
];

/// A record's `ep_stages`: the slowest rank's median iteration, in µs. `push_us` (overlapping
/// the stages) and `merged` (a count) are not drawn and not read.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
pub struct EpStages {
    pub launch_us: f64,
    pub post_us: f64,
    pub copy_us: f64,
    pub feed_us: f64,
    pub quiet_us: f64,
    pub network_us: f64,
    pub arrival_us: f64,
    pub settle_us: f64,
    pub reduce_us: f64,
    pub total_us: f64,
}

impl EpStages {
    /// The stages in [`STAGE_NAMES`] order.
    pub fn stages(&self) -> [f64; 9] {
        [
            self.launch_us,
            self.post_us,
            self.copy_us,
            self.feed_us,
            self.quiet_us,
            self.network_us,
            self.arrival_us,
            self.settle_us,
            self.reduce_us,
        ]
    }
}

/// The `ep` fields, besides the common ones, that tell configurations apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
struct EpConfig {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    dtype: Option<String>,
    #[serde(default)]
    layout: Option<String>,
    #[serde(default)]
    proxy_merge: Option<bool>,
    #[serde(default)]
    tokens: Option<u64>,
    #[serde(default)]
    hidden: Option<u64>,
}

/// A record's `ep_stages`, absent or null in records without stages.
#[derive(Deserialize)]
struct StagesField {
    #[serde(default)]
    ep_stages: Option<EpStages>,
}

/// Whether a record carries stages (a present, non-null `ep_stages` of any shape).
pub(crate) fn has_stages(r: &Record) -> bool {
    #[derive(Deserialize)]
    struct Present {
        #[serde(default)]
        ep_stages: Option<serde::de::IgnoredAny>,
    }
    r.fields::<Present>().is_ok_and(|p| p.ep_stages.is_some())
}

/// What to draw.
#[derive(Clone, Debug)]
pub struct StagesOptions {
    /// One bar per run instead of the median run of each configuration.
    pub each_run: bool,
    pub title: Option<String>,
    pub width: u32,
    /// `None`: tall enough for the bars.
    pub height: Option<u32>,
    /// Only records of this benchmark.
    pub bench: Option<String>,
    /// Only records of this variant (e.g. `dispatch/gpu-gpu`).
    pub variant: Option<String>,
}

impl Default for StagesOptions {
    fn default() -> Self {
        StagesOptions {
            each_run: false,
            title: None,
            width: 1024,
            height: None,
            bench: None,
            variant: None,
        }
    }
}

/// What was drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagesSummary {
    pub bars: usize,
    /// Records the bars stand for (with the median, more than the bars).
    pub records: usize,
    pub format: ImageFormat,
}

/// One bar.
#[derive(Clone, Debug, PartialEq)]
pub struct StageBar {
    pub label: String,
    pub stages: EpStages,
    /// Runs of this configuration the bar stands for (1 with `each_run`).
    pub runs: usize,
}

/// One record that has stages, typed.
#[derive(Clone, Debug)]
struct StageRecord {
    key: ConfigKey,
    stages: EpStages,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ConfigKey {
    file: usize,
    variant: String,
    config: EpConfig,
    world: u32,
    provider: String,
    mem: String,
    time_sliced: bool,
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// `a, b, c` of distinct items, at most `max` of them.
fn short_list(items: impl IntoIterator<Item = String>, max: usize) -> String {
    let mut v: Vec<String> = Vec::new();
    for i in items {
        if !v.contains(&i) {
            v.push(i);
        }
    }
    let more = v.len().saturating_sub(max);
    v.truncate(max);
    let mut s = v.join(", ");
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}

/// The typed stages of one record, `None` when it has none.
fn read_stages(r: &Record, file: &Path, index: usize) -> Result<Option<EpStages>, ReportError> {
    let malformed = |source| ReportError::Malformed {
        index,
        file: file.to_path_buf(),
        what: "ep_stages",
        source,
    };
    let Some(s) = r.fields::<StagesField>().map_err(malformed)?.ep_stages else {
        return Ok(None);
    };
    for (name, v) in STAGE_NAMES
        .iter()
        .zip(s.stages())
        .chain([(&"total", s.total_us)])
    {
        if !v.is_finite() || v < 0.0 {
            return Err(ReportError::StageValue {
                index,
                file: file.to_path_buf(),
                stage: name,
                value: v,
            });
        }
    }
    Ok(Some(s))
}

fn read_config(r: &Record, file: &Path, index: usize) -> Result<EpConfig, ReportError> {
    r.fields().map_err(|source| ReportError::Malformed {
        index,
        file: file.to_path_buf(),
        what: "ep field",
        source,
    })
}

/// The records with stages after the filters, or the one-line refusal naming which records
/// have stages when some do not.
fn stage_records(
    inputs: &[(PathBuf, Vec<Record>)],
    opts: &StagesOptions,
) -> Result<Vec<StageRecord>, ReportError> {
    let wanted = |r: &Record| {
        opts.bench.as_deref().is_none_or(|b| b == r.bench)
            && opts.variant.as_deref().is_none_or(|v| v == r.variant)
    };
    let mut with = Vec::new();
    // Per file: (records with stages, their variants), (records without, their bench/variant).
    let mut have: Vec<(usize, Vec<String>)> = Vec::new();
    let mut lack: Vec<(usize, Vec<String>)> = Vec::new();
    let mut matched = 0;
    for (file, (path, records)) in inputs.iter().enumerate() {
        let (mut h, mut l) = ((0, Vec::new()), (0, Vec::new()));
        for (i, r) in records.iter().enumerate() {
            if !wanted(r) {
                continue;
            }
            matched += 1;
            match read_stages(r, path, i)? {
                Some(stages) => {
                    h.0 += 1;
                    h.1.push(r.variant.clone());
                    with.push(StageRecord {
                        key: ConfigKey {
                            file,
                            variant: r.variant.clone(),
                            config: read_config(r, path, i)?,
                            world: r.world,
                            provider: r.provider.clone(),
                            mem: r.mem.clone(),
                            time_sliced: r.gpu_sharing().is_time_sliced(),
                        },
                        stages,
                    });
                }
                None => {
                    l.0 += 1;
                    l.1.push(format!("{}/{}", r.bench, r.variant));
                }
            }
        }
        have.push(h);
        lack.push(l);
    }
    let total: usize = inputs.iter().map(|(_, r)| r.len()).sum();
    if total == 0 {
        return Err(ReportError::bad_input(
            "no records to plot: pass JSONL files written with -o by `efabench ep`",
        ));
    }
    if matched == 0 {
        let filters = [("--bench", &opts.bench), ("--variant", &opts.variant)]
            .iter()
            .filter_map(|(n, v)| v.as_ref().map(|v| format!("{n} {v}")))
            .collect::<Vec<_>>();
        let present = short_list(
            inputs
                .iter()
                .flat_map(|(_, rs)| rs.iter().map(|r| format!("{}/{}", r.bench, r.variant))),
            8,
        );
        return Err(ReportError::bad_input(format!(
            "no record matches {}: the inputs hold {present}",
            filters.join(" ")
        )));
    }
    if lack.iter().any(|(n, _)| *n > 0) {
        let per_file = |counts: &[(usize, Vec<String>)]| {
            counts
                .iter()
                .enumerate()
                .filter(|(_, (n, _))| *n > 0)
                .map(|(f, (n, what))| {
                    format!(
                        "{} ({n}: {})",
                        file_name(&inputs[f].0),
                        short_list(what.iter().cloned(), 4)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        let has = if have.iter().any(|(n, _)| *n > 0) {
            format!(
                "only these records have them: {}; pass only those (or --bench ep)",
                per_file(&have)
            )
        } else {
            "no input record has them: write ep records with `efabench ep ... -o FILE.jsonl`"
                .to_string()
        };
        return Err(ReportError::bad_input(format!(
            "--stages draws ep_stages, which {} record(s) lack: {}; {has}",
            lack.iter().map(|(n, _)| n).sum::<usize>(),
            per_file(&lack)
        )));
    }
    Ok(with)
}

/// What a label may add to the variant, each shown only where bars differ in it. The CPU
/// initiator has no proxy to merge (`proxy_merge` null), so only ring records say merge or not.
fn label_parts(k: &ConfigKey) -> [Option<String>; 8] {
    let c = &k.config;
    [
        c.dtype.clone(),
        c.layout.as_ref().map(|l| format!("{l} layout")),
        c.proxy_merge
            .map(|m| if m { "merge" } else { "no merge" }.to_string()),
        c.tokens.map(|t| format!("{t} tokens")),
        c.hidden.map(|h| format!("hidden {h}")),
        Some(format!("{} ranks", k.world)),
        Some(k.provider.clone()),
        Some(format!("mem={}", k.mem)),
    ]
}

/// Groups the records into bars (see the module docs).
fn build_bars(
    inputs: &[(PathBuf, Vec<Record>)],
    records: &[StageRecord],
    each_run: bool,
) -> Vec<StageBar> {
    // Configurations in order of first appearance, with their runs.
    let mut groups: Vec<(&ConfigKey, Vec<EpStages>)> = Vec::new();
    for r in records {
        match groups.iter_mut().find(|(k, _)| **k == r.key) {
            Some((_, runs)) => runs.push(r.stages),
            None => groups.push((&r.key, vec![r.stages])),
        }
    }
    // Phases in order of first appearance; within one, configurations keep theirs.
    let phase = |k: &ConfigKey| {
        k.config
            .phase
            .clone()
            .unwrap_or_else(|| k.variant.split('/').next().unwrap_or("").to_string())
    };
    let mut phases: Vec<String> = Vec::new();
    for (k, _) in &groups {
        let p = phase(k);
        if !phases.contains(&p) {
            phases.push(p);
        }
    }
    groups.sort_by_key(|(k, _)| phases.iter().position(|p| *p == phase(k)));

    let keys: Vec<&ConfigKey> = groups.iter().map(|(k, _)| *k).collect();
    let parts: Vec<[Option<String>; 8]> = keys.iter().map(|k| label_parts(k)).collect();
    let varies: Vec<bool> = (0..8)
        .map(|i| {
            let mut seen: Vec<&String> = parts.iter().filter_map(|p| p[i].as_ref()).collect();
            seen.sort();
            seen.dedup();
            seen.len() > 1
        })
        .collect();
    let base_label = |k: &ConfigKey| {
        let mut label = k.variant.clone();
        for (part, show) in label_parts(k).into_iter().zip(&varies) {
            if let (true, Some(s)) = (show, part) {
                label.push(' ');
                label.push_str(&s);
            }
        }
        label
    };
    // Name the file only where the rest of the label cannot tell two bars apart.
    let show_file = |a: &ConfigKey| {
        keys.iter()
            .any(|b| a.file != b.file && base_label(a) == base_label(b))
    };

    let mut bars = Vec::new();
    for (k, runs) in &groups {
        let mut label = base_label(k);
        if show_file(k) {
            label.push_str(&format!(" [{}]", file_name(&inputs[k.file].0)));
        }
        let mark = |label: &mut String| {
            if k.time_sliced {
                label.push(' ');
                label.push_str(TIME_SLICED_MARK);
            }
        };
        if each_run {
            for (i, s) in runs.iter().enumerate() {
                let mut label = label.clone();
                if runs.len() > 1 {
                    label.push_str(&format!(" run {}", i + 1));
                }
                mark(&mut label);
                bars.push(StageBar {
                    label,
                    stages: *s,
                    runs: 1,
                });
            }
        } else {
            let mut sorted = runs.clone();
            sorted.sort_by(|a, b| a.total_us.total_cmp(&b.total_us));
            let median = efabench_record::stats::median(&sorted).unwrap_or(sorted[0]);
            if runs.len() > 1 {
                label.push_str(&format!(" (median of {} runs)", runs.len()));
            }
            mark(&mut label);
            bars.push(StageBar {
                label,
                stages: median,
                runs: runs.len(),
            });
        }
    }
    bars
}

/// Reads `ep` records' stages and groups them into bars: what [`plot_stage_files`] draws.
pub fn stage_bars(
    inputs: &[(PathBuf, Vec<Record>)],
    opts: &StagesOptions,
) -> Result<Vec<StageBar>, ReportError> {
    let records = stage_records(inputs, opts)?;
    Ok(build_bars(inputs, &records, opts.each_run))
}

/// Height that fits `bars` bars when none is given.
fn auto_height(bars: usize) -> u32 {
    (140 + 34 * bars as u32).clamp(320, 4000)
}

/// Draws the stage bars of `inputs` (records per source file) to `out` (`.png` or `.svg`).
pub fn plot_stage_files(
    inputs: &[(PathBuf, Vec<Record>)],
    opts: &StagesOptions,
    out: &Path,
) -> Result<StagesSummary, ReportError> {
    let format = ImageFormat::from_path(out)?;
    let bars = stage_bars(inputs, opts)?;
    let (width, height) = (opts.width, opts.height.unwrap_or(auto_height(bars.len())));
    if !(400..=10_000).contains(&width) || !(150..=10_000).contains(&height) {
        return Err(ReportError::bad_input(format!(
            "image size {width}x{height} is out of range for --stages: use a width of 400 to 10000 and a height of 150 to 10000 pixels"
        )));
    }
    ensure_font()?;
    std::fs::File::create(out).map_err(|e| {
        Error::bad_input(format!(
            "cannot write the plot to {}: {}; pass -o with a writable path",
            out.display(),
            io_reason(&e)
        ))
    })?;
    let title = opts.title.clone().unwrap_or_else(|| {
        "efabench ep: where the time goes (slowest rank's median iteration)".to_string()
    });
    let size = (width, height);
    let result = match format {
        ImageFormat::Png => draw(
            BitMapBackend::new(out, size).into_drawing_area(),
            &bars,
            &title,
        ),
        ImageFormat::Svg => draw(
            SVGBackend::new(out, size).into_drawing_area(),
            &bars,
            &title,
        ),
    };
    result.map_err(|source| ReportError::Draw {
        path: out.to_path_buf(),
        source,
    })?;
    Ok(StagesSummary {
        bars: bars.len(),
        records: bars.iter().map(|b| b.runs).sum(),
        format,
    })
}

/// Reads the JSONL files and draws their stages; what `efabench plot --stages` runs.
pub fn plot_stage_paths<P: AsRef<Path>>(
    inputs: &[P],
    opts: &StagesOptions,
    out: &Path,
) -> Result<StagesSummary, ReportError> {
    ImageFormat::from_path(out)?;
    let inputs = efabench_record::read_files(inputs)?;
    plot_stage_files(&inputs, opts, out)
}

/// Width of the legend strip right of the chart, in pixels.
const LEGEND_W: u32 = 120;

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    bars: &[StageBar],
    title: &str,
) -> Result<(), DrawFailure>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| DrawFailure::from(e);
    root.fill(&WHITE).map_err(e)?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(e)?
        .margin(4, 12, 12, 12);
    let (w, _) = root.dim_in_pixel();
    let (chart_area, legend_area) = root.split_horizontally(w.saturating_sub(LEGEND_W));

    let n = bars.len();
    let max = bars
        .iter()
        .map(|b| b.stages.total_us.max(b.stages.stages().iter().sum()))
        .fold(0.0, f64::max);
    // Room right of the longest bar for its total; the axis need not end on a tick.
    let hi = max.max(1.0) * 1.13;
    let step = nice_step(hi / 8.0);
    let x_axis = Axis {
        lo: 0.0,
        hi,
        ticks: ticks_between(0.0, hi, step),
    };
    let y_axis = Axis {
        lo: 0.0,
        hi: n as f64,
        ticks: (0..n).map(|i| i as f64 + 0.5).collect(),
    };
    // Bar i is drawn from the top: row n-1-i.
    let labels: Vec<String> = bars.iter().rev().map(|b| b.label.clone()).collect();
    let fy = |v: &f64| {
        labels
            .get(v.floor().max(0.0) as usize)
            .cloned()
            .unwrap_or_default()
    };
    let fx = |v: &f64| fmt_num(*v);
    let longest = bars
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(0);
    let label_w = (longest as u32 * 7 + 16).min(chart_area.dim_in_pixel().0 / 2);
    let mut chart = ChartBuilder::on(&chart_area)
        .margin(8)
        .x_label_area_size(48)
        .y_label_area_size(label_w)
        .build_cartesian_2d(x_axis, y_axis)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("µs per iteration")
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(e)?;

    let row = |i: usize| (n - 1 - i) as f64;
    for (s, _) in STAGE_NAMES.iter().enumerate() {
        let color = PALETTE[s % PALETTE.len()];
        let rects = bars.iter().enumerate().filter_map(|(i, b)| {
            let st = b.stages.stages();
            let x0: f64 = st[..s].iter().sum();
            (st[s] > 0.0).then(|| {
                Rectangle::new(
                    [(x0, row(i) + 0.18), (x0 + st[s], row(i) + 0.82)],
                    color.filled(),
                )
            })
        });
        chart.draw_series(rects).map_err(e)?;
    }
    let total_style = ("sans-serif", 12)
        .into_text_style(&chart_area)
        .pos(Pos::new(HPos::Left, VPos::Center));
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let end = b.stages.stages().iter().sum::<f64>();
            Text::new(
                format!("{} µs", fmt_num(b.stages.total_us.round())),
                (end + hi * 0.008, row(i) + 0.5),
                total_style.clone(),
            )
        }))
        .map_err(e)?;

    let font = ("sans-serif", 13).into_font();
    legend_area
        .draw(&Text::new(
            "stage",
            (10, 40),
            font.clone().style(FontStyle::Bold),
        ))
        .map_err(e)?;
    for (s, name) in STAGE_NAMES.iter().enumerate() {
        let y = 64 + 22 * s as i32;
        let color = PALETTE[s % PALETTE.len()];
        legend_area
            .draw(&Rectangle::new([(10, y), (26, y + 14)], color.filled()))
            .map_err(e)?;
        legend_area
            .draw(&Text::new(name.to_string(), (32, y), font.clone()))
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests;
