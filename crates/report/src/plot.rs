//! `efabench plot`: PNG or SVG charts of records, e.g. bandwidth or latency against message size.
//!
//! Pure Rust end to end (plotters' bitmap and SVG backends with `ab_glyph` text), and the font is
//! compiled in (DejaVu Sans from Debian's `fonts-dejavu-core`, licence in `assets/`), so the
//! binary draws the same chart on a bare compute node without fontconfig, freetype or any system
//! font — plotters' bitmap backend cannot draw a single label without a registered font.
//!
//! Message sizes are powers of two (or 1.5× steps), so the size axis is log2 with labels such as
//! 8, 1K, 1M, 1G. The y axis is linear from zero by default (bandwidth plots read best that
//! way); `--log-y` is there for latency, which spans decades. Each series is one configuration:
//! (bench, variant, peer, mem, provider, input file); when one file holds several runs of the same
//! configuration (results appended by repeated runs), a size seen again starts a new series
//! ("run 2") instead of zig-zagging back. Legend labels only name what differs between series.

use efabench_record::error::{io_reason, Error};
use efabench_record::human_size;
use efabench_record::Record;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::OnceLock;

/// DejaVu Sans 2.37 (Bitstream Vera licence + public-domain changes; see assets/).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Registers the embedded font as plotters' `sans-serif` once per process.
pub(crate) fn ensure_font() -> Result<(), Error> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::failed(
            "the embedded DejaVu Sans font could not be loaded; the efabench binary is damaged, rebuild it",
        ))
    }
}

/// A numeric record field that can go on an axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Size,
    World,
    Rails,
    Iters,
    BwGbps,
    BusbwGbps,
    LatMin,
    LatP50,
    LatP99,
    LatMax,
    LatMean,
    MsgRateMops,
    UtilPct,
    LinkGbps,
    Errors,
}

/// Canonical names accepted by `--x` / `--y`, in the order the help lists them.
pub const FIELD_NAMES: &[&str] = &[
    "size",
    "bw_gbps",
    "busbw_gbps",
    "lat_p50",
    "lat_p99",
    "lat_min",
    "lat_max",
    "lat_mean",
    "msg_rate_mops",
    "util_pct",
    "link_gbps",
    "errors",
    "world",
    "rails",
    "iters",
];

impl FromStr for Field {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let f = match s.trim() {
            "size" | "size_bytes" => Field::Size,
            "world" => Field::World,
            "rails" => Field::Rails,
            "iters" => Field::Iters,
            "bw" | "bw_gbps" => Field::BwGbps,
            "busbw" | "busbw_gbps" => Field::BusbwGbps,
            "lat_min" | "lat_us.min" => Field::LatMin,
            "lat_p50" | "lat" | "lat_us.p50" => Field::LatP50,
            "lat_p99" | "lat_us.p99" => Field::LatP99,
            "lat_max" | "lat_us.max" => Field::LatMax,
            "lat_mean" | "lat_us.mean" => Field::LatMean,
            "msg_rate" | "msg_rate_mops" => Field::MsgRateMops,
            "util" | "util_pct" => Field::UtilPct,
            "link_gbps" => Field::LinkGbps,
            "errors" => Field::Errors,
            _ => {
                return Err(format!(
                    "unknown field `{s}`: use one of {}",
                    FIELD_NAMES.join(", ")
                ))
            }
        };
        Ok(f)
    }
}

impl Field {
    /// The value of this field in a record; `None` where the record has none (busbw of a
    /// point-to-point record, util of a link of unknown speed).
    pub fn value(self, r: &Record) -> Option<f64> {
        match self {
            Field::Size => Some(r.size_bytes as f64),
            Field::World => Some(r.world as f64),
            Field::Rails => Some(r.rails as f64),
            Field::Iters => Some(r.iters as f64),
            Field::BwGbps => Some(r.bw_gbps),
            Field::BusbwGbps => r.busbw_gbps,
            Field::LatMin => Some(r.lat_us.min),
            Field::LatP50 => Some(r.lat_us.p50),
            Field::LatP99 => Some(r.lat_us.p99),
            Field::LatMax => Some(r.lat_us.max),
            Field::LatMean => Some(r.lat_us.mean),
            Field::MsgRateMops => Some(r.msg_rate_mops),
            Field::UtilPct => r.util_pct,
            Field::LinkGbps => r.link_gbps,
            Field::Errors => Some(r.errors as f64),
        }
        .filter(|v| v.is_finite())
    }

    /// Canonical name, as in [`FIELD_NAMES`].
    pub fn name(self) -> &'static str {
        match self {
            Field::Size => "size",
            Field::World => "world",
            Field::Rails => "rails",
            Field::Iters => "iters",
            Field::BwGbps => "bw_gbps",
            Field::BusbwGbps => "busbw_gbps",
            Field::LatMin => "lat_min",
            Field::LatP50 => "lat_p50",
            Field::LatP99 => "lat_p99",
            Field::LatMax => "lat_max",
            Field::LatMean => "lat_mean",
            Field::MsgRateMops => "msg_rate_mops",
            Field::UtilPct => "util_pct",
            Field::LinkGbps => "link_gbps",
            Field::Errors => "errors",
        }
    }

    /// Axis title with units.
    pub fn axis_title(self) -> &'static str {
        match self {
            Field::Size => "message size (bytes)",
            Field::World => "ranks (world size)",
            Field::Rails => "rails (NICs used)",
            Field::Iters => "timed iterations",
            Field::BwGbps => "bandwidth (Gbps = 10^9 bit/s)",
            Field::BusbwGbps => "bus bandwidth (Gbps = 10^9 bit/s)",
            Field::LatMin => "latency min (us)",
            Field::LatP50 => "latency p50 (us)",
            Field::LatP99 => "latency p99 (us)",
            Field::LatMax => "latency max (us)",
            Field::LatMean => "latency mean (us)",
            Field::MsgRateMops => "message rate (10^6 msg/s)",
            Field::UtilPct => "link utilisation (%)",
            Field::LinkGbps => "link speed (Gbps)",
            Field::Errors => "verification errors",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Field::Size => "message size",
            Field::BwGbps => "bandwidth",
            Field::BusbwGbps => "bus bandwidth",
            Field::LatMin | Field::LatP50 | Field::LatP99 | Field::LatMax | Field::LatMean => {
                "latency"
            }
            Field::MsgRateMops => "message rate",
            Field::UtilPct => "link utilisation",
            _ => self.name(),
        }
    }

    /// Which records lack this field, for the "nothing to plot" message.
    fn missing_hint(self) -> &'static str {
        match self {
            Field::BusbwGbps => " (only collective benchmarks such as alltoall record busbw_gbps)",
            Field::UtilPct | Field::LinkGbps => {
                " (the link speed was unknown when these records were measured)"
            }
            _ => "",
        }
    }
}

/// The image format, from the output file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Svg,
}

impl ImageFormat {
    pub fn from_path(path: &Path) -> Result<Self, Error> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("png") => Ok(ImageFormat::Png),
            Some("svg") => Ok(ImageFormat::Svg),
            _ => Err(Error::bad_input(format!(
                "cannot tell the image format of {}: name the output FILE.png or FILE.svg",
                path.display()
            ))),
        }
    }
}

/// What to draw.
#[derive(Clone, Debug)]
pub struct PlotOptions {
    pub x: Field,
    pub y: Field,
    /// `None`: log2 for `size`, linear otherwise.
    pub log_x: Option<bool>,
    pub log_y: bool,
    pub title: Option<String>,
    pub width: u32,
    pub height: u32,
    /// Only records of this benchmark (e.g. `sendrecv`).
    pub bench: Option<String>,
    /// Only records of this variant (e.g. `stream`).
    pub variant: Option<String>,
}

impl Default for PlotOptions {
    fn default() -> Self {
        PlotOptions {
            x: Field::Size,
            y: Field::BwGbps,
            log_x: None,
            log_y: false,
            title: None,
            width: 1024,
            height: 640,
            bench: None,
            variant: None,
        }
    }
}

/// What was drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlotSummary {
    pub series: usize,
    pub points: usize,
    /// Records left out: no value for the field, or a non-positive value on a log axis.
    pub skipped: usize,
    /// Series drawn from records whose GPU was time-sliced between ranks (no MPS).
    pub time_sliced: usize,
    /// Records drawn that hold `ep_stages` (`efabench ep`: one size per run), which
    /// `plot --stages` draws as where their time goes instead.
    pub stage_records: usize,
    pub format: ImageFormat,
}

/// One line on the chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    /// Its records were measured on a GPU that ranks shared without NVIDIA MPS.
    pub time_sliced: bool,
    /// (x, y) in data units, sorted by x.
    pub points: Vec<(f64, f64)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct SeriesKey {
    bench: String,
    variant: String,
    peer: Option<u32>,
    mem: String,
    provider: String,
    /// Only when the x axis is not the size: then each size is its own line (bw vs world at
    /// 1M, at 4M, ...), instead of points of different sizes stacked at the same x.
    size: Option<u64>,
    file: usize,
    time_sliced: bool,
}

/// What the legend appends to a series measured on a time-sliced GPU.
pub const TIME_SLICED_MARK: &str = "(GPU time-sliced, no MPS)";

/// Groups records into series (see the module docs) and returns them with the count of
/// records that had no plottable value.
pub fn build_series(inputs: &[(PathBuf, Vec<Record>)], opts: &PlotOptions) -> (Vec<Series>, usize) {
    let log_x = opts.log_x.unwrap_or(opts.x == Field::Size);
    let usable = |v: Option<f64>, log: bool| v.filter(|v| !log || *v > 0.0);
    // (key, run number, points)
    type Group = (SeriesKey, usize, Vec<(f64, f64)>);
    let mut groups: Vec<Group> = Vec::new();
    let mut skipped = 0;
    for (file, (_, records)) in inputs.iter().enumerate() {
        for r in records {
            if opts.bench.as_deref().is_some_and(|b| b != r.bench)
                || opts.variant.as_deref().is_some_and(|v| v != r.variant)
            {
                continue;
            }
            let (Some(x), Some(y)) = (
                usable(opts.x.value(r), log_x),
                usable(opts.y.value(r), opts.log_y),
            ) else {
                skipped += 1;
                continue;
            };
            let key = SeriesKey {
                bench: r.bench.clone(),
                variant: r.variant.clone(),
                peer: r.peer,
                mem: r.mem.clone(),
                provider: r.provider.clone(),
                size: (opts.x != Field::Size).then_some(r.size_bytes),
                file,
                time_sliced: r.gpu_sharing().is_time_sliced(),
            };
            match groups.iter().rposition(|(k, _, _)| *k == key) {
                Some(i) if !groups[i].2.iter().any(|p| p.0 == x) => groups[i].2.push((x, y)),
                Some(i) => {
                    let run = groups[i].1 + 1;
                    groups.push((key, run, vec![(x, y)]));
                }
                None => groups.push((key, 1, vec![(x, y)])),
            }
        }
    }

    let varies = |f: &dyn Fn(&SeriesKey) -> String| {
        groups
            .first()
            .is_some_and(|(k0, _, _)| groups.iter().any(|(k, _, _)| f(k) != f(k0)))
    };
    let show_peer = varies(&|k| format!("{:?}", k.peer));
    let show_mem = varies(&|k| k.mem.clone());
    let show_provider = varies(&|k| k.provider.clone());
    let show_size = varies(&|k| format!("{:?}", k.size));
    let base_label = |k: &SeriesKey| {
        let mut label = format!("{}/{}", k.bench, k.variant);
        if let (true, Some(size)) = (show_size, k.size) {
            label.push_str(&format!(" {}B", human_size(size)));
        }
        if show_provider {
            label.push_str(&format!(" {}", k.provider));
        }
        if show_mem {
            label.push_str(&format!(" mem={}", k.mem));
        }
        if show_peer {
            match k.peer {
                Some(p) => label.push_str(&format!(" peer {p}")),
                None => label.push_str(" all peers"),
            }
        }
        label
    };
    // Name the file only where the rest of the label cannot tell two series apart.
    let show_file = groups.iter().any(|(a, _, _)| {
        groups
            .iter()
            .any(|(b, _, _)| a.file != b.file && base_label(a) == base_label(b))
    });
    let show_run = groups.iter().any(|(_, run, _)| *run > 1);
    let file_name = |i: usize| {
        let p = &inputs[i].0;
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string())
    };

    let series = groups
        .iter()
        .map(|(k, run, points)| {
            let mut points = points.clone();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut label = base_label(k);
            if show_file {
                label.push_str(&format!(" [{}]", file_name(k.file)));
            }
            if show_run {
                label.push_str(&format!(" run {run}"));
            }
            if k.time_sliced {
                label.push(' ');
                label.push_str(TIME_SLICED_MARK);
            }
            Series {
                label,
                time_sliced: k.time_sliced,
                points,
            }
        })
        .collect();
    (series, skipped)
}

/// How one axis maps data to chart coordinates and back to tick labels.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scale {
    Linear,
    /// log2, labelled as sizes (8, 1K, 1M).
    Log2Size,
    /// log2, labelled as numbers.
    Log2,
    Log10,
}

impl Scale {
    fn to_coord(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log2Size | Scale::Log2 => v.log2(),
            Scale::Log10 => v.log10(),
        }
    }

    fn label(self, c: f64) -> String {
        match self {
            Scale::Linear => fmt_num(c),
            Scale::Log2Size => {
                let v = 2f64.powf(c).round();
                if (0.0..1.8e19).contains(&v) {
                    human_size(v as u64)
                } else {
                    fmt_num(v)
                }
            }
            Scale::Log2 => fmt_num(2f64.powf(c)),
            Scale::Log10 => fmt_num(10f64.powf(c)),
        }
    }

    /// Axis range (with a little room) and tick positions, in coordinate units.
    fn range_and_ticks(self, lo: f64, hi: f64, from_zero: bool) -> (f64, f64, Vec<f64>) {
        match self {
            Scale::Linear => {
                let lo = if from_zero && lo >= 0.0 { 0.0 } else { lo };
                let (lo, hi) = if hi > lo {
                    let pad = (hi - lo) * 0.05;
                    (if lo == 0.0 { 0.0 } else { lo - pad }, hi + pad)
                } else {
                    let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.5 };
                    (lo - pad, hi + pad)
                };
                let step = nice_step((hi - lo) / 8.0);
                let ticks = ticks_between(lo, hi, step);
                (lo, hi, ticks)
            }
            Scale::Log2Size | Scale::Log2 => {
                let (a, b) = (lo.floor(), hi.ceil());
                let (a, b) = if b - a < 1.0 {
                    (a - 1.0, b + 1.0)
                } else {
                    (a, b)
                };
                let step = ((b - a) / 14.0).ceil().max(1.0);
                let first = (a / step).ceil() * step;
                let ticks = ticks_between(first, b, step);
                (a - 0.25, b + 0.25, ticks)
            }
            Scale::Log10 => {
                // Pad the data range a little rather than widening it to whole decades, which
                // can leave most of the chart empty; ticks at 1, 2, 5 x 10^k inside it (only
                // decades when the range spans many).
                let span = (hi - lo).max(0.3);
                let (a, b) = (lo - span * 0.05, hi + span * 0.05);
                let mults: &[f64] = if b - a <= 3.5 {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                let mut ticks = Vec::new();
                let mut d = a.floor();
                while d <= b {
                    for m in mults {
                        let t = d + m.log10();
                        if t >= a && t <= b {
                            ticks.push(t);
                        }
                    }
                    d += 1.0;
                }
                (a, b, ticks)
            }
        }
    }
}

/// One axis in chart coordinates (already log-transformed where the scale is log) with the
/// tick positions we chose. plotters' own f64 axis picks decimal ticks (2.5, 7.5) that make no
/// sense on a log2 size axis, and its key-point wrapper cannot take a label formatter for f64,
/// so this small coordinate type does both.
pub(crate) struct Axis {
    pub(crate) lo: f64,
    pub(crate) hi: f64,
    pub(crate) ticks: Vec<f64>,
}

impl Ranged for Axis {
    type ValueType = f64;
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let frac = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (frac * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Bold points carry the labels and grid lines; no light grid in between.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// 1, 2 or 5 × 10^k, at least `raw`.
pub(crate) fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

pub(crate) fn ticks_between(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 && out.len() < 1000 {
        // Avoid printing -0 and 0.30000000000000004.
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

/// A tick label: integers plainly, fractions with at most three decimals.
pub(crate) fn fmt_num(v: f64) -> String {
    if v != 0.0 && v.abs() < 0.001 {
        return format!("{v:.0e}");
    }
    if v.abs() >= 1000.0 || v.fract() == 0.0 {
        return format!("{v:.0}");
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Ten colours that stay distinct on white (Tableau 10).
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Draws `inputs` (records per source file) to `out` (`.png` or `.svg`).
pub fn plot_files(
    inputs: &[(PathBuf, Vec<Record>)],
    opts: &PlotOptions,
    out: &Path,
) -> Result<PlotSummary, Error> {
    let format = ImageFormat::from_path(out)?;
    if !(200..=10_000).contains(&opts.width) || !(150..=10_000).contains(&opts.height) {
        return Err(Error::bad_input(format!(
            "image size {}x{} is out of range: use a width of 200 to 10000 and a height of 150 to 10000 pixels",
            opts.width, opts.height
        )));
    }
    let total: usize = inputs.iter().map(|(_, r)| r.len()).sum();
    if total == 0 {
        return Err(Error::bad_input(
            "no records to plot: pass JSONL files written with -o by an efabench benchmark",
        ));
    }
    let (series, skipped) = build_series(inputs, opts);
    if series.is_empty() {
        let filters = [("--bench", &opts.bench), ("--variant", &opts.variant)]
            .iter()
            .filter_map(|(n, v)| v.as_ref().map(|v| format!("{n} {v}")))
            .collect::<Vec<_>>();
        let matching = inputs.iter().flat_map(|(_, rs)| rs.iter()).any(|r| {
            opts.bench.as_deref().is_none_or(|b| b == r.bench)
                && opts.variant.as_deref().is_none_or(|v| v == r.variant)
        });
        if !matching {
            let mut present: Vec<String> = inputs
                .iter()
                .flat_map(|(_, rs)| rs.iter().map(|r| format!("{}/{}", r.bench, r.variant)))
                .collect();
            present.sort();
            present.dedup();
            return Err(Error::bad_input(format!(
                "no record matches {}: the inputs hold {}",
                filters.join(" "),
                present.join(", ")
            )));
        }
        let log = if opts.log_y {
            " (positive values only with --log-y)"
        } else {
            ""
        };
        return Err(Error::bad_input(format!(
            "no record has a value for {}{}{log}; choose another --y",
            opts.y.name(),
            opts.y.missing_hint()
        )));
    }
    ensure_font()?;

    // Refuse an unwritable output path up front, with the same wording as -o elsewhere.
    std::fs::File::create(out).map_err(|e| {
        Error::bad_input(format!(
            "cannot write the plot to {}: {}; pass -o with a writable path",
            out.display(),
            io_reason(&e)
        ))
    })?;

    let points = series.iter().map(|s| s.points.len()).sum();
    let size = (opts.width, opts.height);
    let result = match format {
        ImageFormat::Png => draw(
            BitMapBackend::new(out, size).into_drawing_area(),
            &series,
            opts,
        ),
        ImageFormat::Svg => draw(
            SVGBackend::new(out, size).into_drawing_area(),
            &series,
            opts,
        ),
    };
    result.map_err(|e| Error::failed(format!("cannot draw the plot to {}: {e}", out.display())))?;
    Ok(PlotSummary {
        series: series.len(),
        points,
        skipped,
        time_sliced: series.iter().filter(|s| s.time_sliced).count(),
        stage_records: inputs
            .iter()
            .flat_map(|(_, rs)| rs.iter())
            .filter(|r| {
                opts.bench.as_deref().is_none_or(|b| b == r.bench)
                    && opts.variant.as_deref().is_none_or(|v| v == r.variant)
                    && r.extra.get("ep_stages").is_some_and(|v| !v.is_null())
            })
            .count(),
        format,
    })
}

/// Reads the JSONL files and plots them; what `efabench plot` runs.
pub fn plot_paths<P: AsRef<Path>>(
    inputs: &[P],
    opts: &PlotOptions,
    out: &Path,
) -> Result<PlotSummary, Error> {
    // Check the output name before reading possibly large inputs.
    ImageFormat::from_path(out)?;
    let inputs = efabench_record::read_files(inputs)?;
    plot_files(&inputs, opts, out)
}

/// Draws `series` (x, y in data units) with linear axes and the given titles to `out` (`.png`
/// or `.svg`): for figures that are not records, e.g. the cluster verdict's simulated
/// operating characteristics.
pub fn plot_xy(
    series: &[Series],
    title: &str,
    x_title: &str,
    y_title: &str,
    out: &Path,
) -> Result<(), Error> {
    let format = ImageFormat::from_path(out)?;
    if series.iter().all(|s| s.points.is_empty()) {
        return Err(Error::bad_input("no points to plot"));
    }
    ensure_font()?;
    let frame = Frame {
        title: title.to_string(),
        x_title: x_title.to_string(),
        y_title: y_title.to_string(),
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
    };
    let size = (1024, 640);
    let result = match format {
        ImageFormat::Png => draw_frame(
            BitMapBackend::new(out, size).into_drawing_area(),
            series,
            &frame,
        ),
        ImageFormat::Svg => draw_frame(
            SVGBackend::new(out, size).into_drawing_area(),
            series,
            &frame,
        ),
    };
    result.map_err(|e| Error::failed(format!("cannot draw the plot to {}: {e}", out.display())))
}

/// A chart's titles and axis scales.
struct Frame {
    title: String,
    x_title: String,
    y_title: String,
    x_scale: Scale,
    y_scale: Scale,
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &[Series],
    opts: &PlotOptions,
) -> Result<(), String> {
    let x_scale = match (opts.log_x.unwrap_or(opts.x == Field::Size), opts.x) {
        (true, Field::Size) => Scale::Log2Size,
        (true, _) => Scale::Log2,
        (false, _) => Scale::Linear,
    };
    let y_scale = if opts.log_y {
        Scale::Log10
    } else {
        Scale::Linear
    };
    let title = opts.title.clone().unwrap_or_else(|| {
        let mut benches: Vec<&str> = series
            .iter()
            .map(|s| s.label.split(' ').next().unwrap_or(""))
            .collect();
        benches.dedup();
        let what = format!("{} vs {}", opts.y.short(), opts.x.short());
        if benches.len() == 1 {
            format!("efabench {}: {what}", benches[0])
        } else {
            format!("efabench: {what}")
        }
    });
    let frame = Frame {
        title,
        x_title: opts.x.axis_title().to_string(),
        y_title: opts.y.axis_title().to_string(),
        x_scale,
        y_scale,
    };
    draw_frame(root, series, &frame)
}

fn draw_frame<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &[Series],
    frame: &Frame,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (x_scale, y_scale) = (frame.x_scale, frame.y_scale);

    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x_lo, mut x_hi, mut y_lo, mut y_hi) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        let (cx, cy) = (x_scale.to_coord(x), y_scale.to_coord(y));
        x_lo = x_lo.min(cx);
        x_hi = x_hi.max(cx);
        y_lo = y_lo.min(cy);
        y_hi = y_hi.max(cy);
    }
    let (x0, x1, x_ticks) = x_scale.range_and_ticks(x_lo, x_hi, false);
    let (y0, y1, y_ticks) = y_scale.range_and_ticks(y_lo, y_hi, true);

    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(frame.title.as_str(), ("sans-serif", 24))
        .margin(18)
        .x_label_area_size(52)
        .y_label_area_size(76)
        .build_cartesian_2d(
            Axis {
                lo: x0,
                hi: x1,
                ticks: x_ticks,
            },
            Axis {
                lo: y0,
                hi: y1,
                ticks: y_ticks,
            },
        )
        .map_err(e)?;
    let fx = move |v: &f64| x_scale.label(*v);
    let fy = move |v: &f64| y_scale.label(*v);
    chart
        .configure_mesh()
        .x_desc(frame.x_title.as_str())
        .y_desc(frame.y_title.as_str())
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(e)?;

    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let hollow = (i / PALETTE.len()) % 2 == 1;
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|&(x, y)| (x_scale.to_coord(x), y_scale.to_coord(y)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(e)?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(2))
            });
        let marker = if hollow {
            ShapeStyle::from(color).stroke_width(2)
        } else {
            color.filled()
        };
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, marker)))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use efabench_record::testing::{sample, tempdir};

    fn sweep(bench: &str, variant: &str, scale: f64) -> Vec<Record> {
        (3..=20)
            .map(|e| {
                let size = 1u64 << e;
                let bw = scale * 100.0 * (size as f64 / (size as f64 + 16384.0));
                sample(bench, variant, size, bw, 2.0 + size as f64 / 12_500.0)
            })
            .collect()
    }

    #[test]
    fn fields_parse_and_reject() {
        assert_eq!("lat_p50".parse::<Field>(), Ok(Field::LatP50));
        assert_eq!("lat_us.p99".parse::<Field>(), Ok(Field::LatP99));
        assert_eq!("busbw_gbps".parse::<Field>(), Ok(Field::BusbwGbps));
        let e = "bandwidth".parse::<Field>().unwrap_err();
        assert!(
            e.starts_with("unknown field `bandwidth`: use one of size, bw_gbps"),
            "{e}"
        );
        for n in FIELD_NAMES {
            assert_eq!(n.parse::<Field>().unwrap().name(), *n);
        }
    }

    #[test]
    fn image_format_from_extension() {
        assert_eq!(
            ImageFormat::from_path(Path::new("a.PNG")),
            Ok(ImageFormat::Png)
        );
        assert_eq!(
            ImageFormat::from_path(Path::new("a.svg")),
            Ok(ImageFormat::Svg)
        );
        let e = ImageFormat::from_path(Path::new("a.jpg")).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadInput);
        assert!(e.to_string().contains("FILE.png or FILE.svg"));
    }

    #[test]
    fn series_group_label_and_split_runs() {
        let mut file_a = sweep("sendrecv", "stream", 1.0);
        file_a.extend(sweep("sendrecv", "pingpong", 0.1));
        // The same configuration appended a second time: a second run.
        file_a.extend(sweep("sendrecv", "stream", 0.9));
        let inputs = vec![(PathBuf::from("/tmp/a.jsonl"), file_a)];
        let (series, skipped) = build_series(&inputs, &PlotOptions::default());
        assert_eq!(skipped, 0);
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "sendrecv/stream run 1",
                "sendrecv/pingpong run 1",
                "sendrecv/stream run 2"
            ]
        );
        assert!(series.iter().all(|s| s.points.len() == 18));
        assert!(series[0].points.windows(2).all(|w| w[0].0 < w[1].0));

        let mut other = sweep("sendrecv", "stream", 1.0);
        other.iter_mut().for_each(|r| r.mem = "cuda".into());
        let inputs = vec![
            (PathBuf::from("a.jsonl"), sweep("sendrecv", "stream", 1.0)),
            (PathBuf::from("b.jsonl"), other),
        ];
        let opts = PlotOptions {
            variant: Some("stream".into()),
            ..Default::default()
        };
        let (series, _) = build_series(&inputs, &opts);
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        // mem tells the series apart, so the file is not named.
        assert_eq!(
            labels,
            ["sendrecv/stream mem=host", "sendrecv/stream mem=cuda"]
        );

        // The same configuration in two files (before/after): the file names tell them apart.
        let inputs = vec![
            (
                PathBuf::from("before.jsonl"),
                sweep("sendrecv", "stream", 1.0),
            ),
            (
                PathBuf::from("after.jsonl"),
                sweep("sendrecv", "stream", 0.9),
            ),
        ];
        let (series, _) = build_series(&inputs, &PlotOptions::default());
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "sendrecv/stream [before.jsonl]",
                "sendrecv/stream [after.jsonl]"
            ]
        );
    }

    #[test]
    fn other_x_axes_draw_one_line_per_size() {
        let mut recs = Vec::new();
        for world in [2u32, 4, 8] {
            for size in [1u64 << 20, 4 << 20] {
                let mut r = sample("alltoall", "default", size, 10.0 * world as f64, 5.0);
                r.world = world;
                r.peer = None;
                recs.push(r);
            }
        }
        let inputs = vec![(PathBuf::from("a.jsonl"), recs)];
        let opts = PlotOptions {
            x: Field::World,
            ..Default::default()
        };
        let (series, _) = build_series(&inputs, &opts);
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["alltoall/default 1MB", "alltoall/default 4MB"]);
        assert_eq!(series[0].points, [(2.0, 20.0), (4.0, 40.0), (8.0, 80.0)]);
    }

    #[test]
    fn log2_ticks_are_whole_powers_with_size_labels() {
        let (lo, hi, ticks) = Scale::Log2Size.range_and_ticks(3.0, 30.0, false);
        assert!(lo < 3.0 && hi > 30.0);
        assert!(
            ticks.len() <= 15 && ticks.iter().all(|t| t.fract() == 0.0),
            "{ticks:?}"
        );
        let labels: Vec<String> = ticks.iter().map(|t| Scale::Log2Size.label(*t)).collect();
        assert!(labels.contains(&"1G".to_string()), "{labels:?}");
        assert_eq!(Scale::Log2Size.label(3.0), "8");
        assert_eq!(Scale::Log2Size.label(10.0), "1K");
        assert_eq!(Scale::Log2Size.label(20.0), "1M");
        let (_, _, ticks) = Scale::Log2Size.range_and_ticks(10.0, 10.0, false);
        assert_eq!(ticks, [9.0, 10.0, 11.0]);
        let (lo, hi, ticks) = Scale::Linear.range_and_ticks(3.0, 97.0, true);
        assert_eq!(lo, 0.0);
        assert!(
            hi > 97.0 && ticks.contains(&20.0) && ticks.contains(&100.0),
            "{ticks:?}"
        );
        // 2 us .. 500 us: ticks at 1-2-5 steps inside the padded range.
        let (lo, hi, ticks) = Scale::Log10.range_and_ticks(2f64.log10(), 500f64.log10(), true);
        assert!(lo < 2f64.log10() && hi > 500f64.log10() && hi < 3.0);
        let labels: Vec<String> = ticks.iter().map(|t| Scale::Log10.label(*t)).collect();
        assert_eq!(labels, ["2", "5", "10", "20", "50", "100", "200", "500"]);
        let (_, _, ticks) = Scale::Log10.range_and_ticks(-1.0, 5.0, true);
        let labels: Vec<String> = ticks.iter().map(|t| Scale::Log10.label(*t)).collect();
        assert_eq!(labels, ["0.1", "1", "10", "100", "1000", "10000", "100000"]);
        assert_eq!(fmt_num(0.30000000000000004), "0.3");
        assert_eq!(fmt_num(12.5), "12.5");
    }

    #[test]
    fn writes_png_and_svg() {
        let dir = tempdir("plot");
        let mut b = sweep("write", "stream", 0.8);
        b.iter_mut().for_each(|r| r.provider = "tcp".into());
        let inputs = vec![
            (dir.join("a.jsonl"), sweep("sendrecv", "stream", 1.0)),
            (dir.join("b.jsonl"), b),
        ];
        let png = dir.join("bw.png");
        let s = plot_files(&inputs, &PlotOptions::default(), &png).unwrap();
        assert_eq!((s.series, s.points, s.format), (2, 36, ImageFormat::Png));
        assert_eq!(s.stage_records, 0);
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
        assert_eq!(&bytes[1..4], b"PNG");

        let svg = dir.join("lat.svg");
        let opts = PlotOptions {
            y: Field::LatP50,
            log_y: true,
            title: Some("latency".into()),
            ..Default::default()
        };
        plot_files(&inputs, &opts, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg"));
        for needle in [
            "latency p50 (us)",
            "message size (bytes)",
            "1K",
            "sendrecv/stream",
            "write/stream",
        ] {
            assert!(text.contains(needle), "{needle} missing from the SVG");
        }
    }

    #[test]
    fn time_sliced_records_are_marked_in_the_legend() {
        let sliced = |mut v: Vec<Record>, mps: bool| {
            for r in &mut v {
                r.extra.insert(
                    efabench_record::GPU_SHARING.into(),
                    serde_json::json!([{"host": "h", "gpu": 0, "ranks": [0, 1], "mps": mps}]),
                );
            }
            v
        };
        // One file: a run on one GPU without MPS, then one under MPS (shared, not time-sliced)
        // and one that predates the field. The time-sliced run is its own series.
        let mut recs = sliced(sweep("proxy", "nbi", 0.01), false);
        recs.extend(sliced(sweep("proxy", "nbi", 1.0), true));
        let inputs = vec![(PathBuf::from("one-gpu.jsonl"), recs)];
        let (series, _) = build_series(&inputs, &PlotOptions::default());
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            ["proxy/nbi (GPU time-sliced, no MPS)", "proxy/nbi"],
            "no 'run 2': the time-sliced records are another series"
        );
        assert_eq!(
            series.iter().map(|s| s.time_sliced).collect::<Vec<_>>(),
            [true, false]
        );
        // Before/after files that differ only in that: the file names and the mark.
        let inputs = vec![
            (
                PathBuf::from("shared.jsonl"),
                sliced(sweep("proxy", "nbi", 0.01), false),
            ),
            (PathBuf::from("two-gpus.jsonl"), sweep("proxy", "nbi", 1.0)),
        ];
        let (series, _) = build_series(&inputs, &PlotOptions::default());
        let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "proxy/nbi [shared.jsonl] (GPU time-sliced, no MPS)",
                "proxy/nbi [two-gpus.jsonl]"
            ]
        );
        // Drawn into the legend, and counted in the summary.
        let dir = tempdir("plotsliced");
        let svg = dir.join("p.svg");
        let s = plot_files(&inputs, &PlotOptions::default(), &svg).unwrap();
        assert_eq!((s.series, s.time_sliced), (2, 1));
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            text.contains("(GPU time-sliced, no MPS)"),
            "legend mark missing"
        );
    }

    #[test]
    fn bad_inputs_are_one_line_bad_input_errors() {
        let dir = tempdir("plotbad");
        let inputs = vec![(dir.join("a.jsonl"), sweep("sendrecv", "stream", 1.0))];
        let opts = PlotOptions::default();
        let check = |r: Result<PlotSummary, Error>, needle: &str| {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::BadInput, "{e}");
            assert!(e.to_string().contains(needle), "{e}");
            assert!(!e.to_string().contains('\n'));
        };
        check(
            plot_files(&inputs, &opts, &dir.join("x.gif")),
            "FILE.png or FILE.svg",
        );
        check(
            plot_files(&[], &opts, &dir.join("x.png")),
            "no records to plot",
        );
        let busbw = PlotOptions {
            y: Field::BusbwGbps,
            ..Default::default()
        };
        check(
            plot_files(&inputs, &busbw, &dir.join("x.png")),
            "no record has a value for busbw_gbps (only collective",
        );
        let filt = PlotOptions {
            bench: Some("read".into()),
            ..Default::default()
        };
        check(
            plot_files(&inputs, &filt, &dir.join("x.png")),
            "no record matches --bench read: the inputs hold sendrecv/stream",
        );
        check(
            plot_files(&inputs, &opts, Path::new("/nonexistent/x.png")),
            "cannot write the plot to /nonexistent/x.png: No such file or directory",
        );
        let tiny = PlotOptions {
            width: 10,
            ..Default::default()
        };
        check(
            plot_files(&inputs, &tiny, &dir.join("x.png")),
            "out of range",
        );
        check(
            plot_paths(&[dir.join("missing.jsonl")], &opts, &dir.join("x.png")),
            "missing.jsonl: No such file or directory",
        );
    }
}
