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

use crate::fault::{DrawFailure, ReportError};
use efabench_record::error::{io_reason, Error};
use efabench_record::human_size;
use efabench_record::Record;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::OnceLock;

mod axis;
mod draw;
mod series;
#[cfg(test)]
mod tests;

pub(crate) use axis::*;
use draw::*;
pub use series::*;

/// DejaVu Sans 2.37 (Bitstream Vera licence + public-domain changes; see assets/).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

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

/// Draws `inputs` (records per source file) to `out` (`.png` or `.svg`).
pub fn plot_files(
    inputs: &[(PathBuf, Vec<Record>)],
    opts: &PlotOptions,
    out: &Path,
) -> Result<PlotSummary, ReportError> {
    let format = ImageFormat::from_path(out)?;
    if !(200..=10_000).contains(&opts.width) || !(150..=10_000).contains(&opts.height) {
        return Err(ReportError::bad_input(format!(
            "image size {}x{} is out of range: use a width of 200 to 10000 and a height of 150 to 10000 pixels",
            opts.width, opts.height
        )));
    }
    let total: usize = inputs.iter().map(|(_, r)| r.len()).sum();
    if total == 0 {
        return Err(ReportError::bad_input(
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
            return Err(ReportError::bad_input(format!(
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
        return Err(ReportError::bad_input(format!(
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
    result.map_err(|source| ReportError::Draw {
        path: out.to_path_buf(),
        source,
    })?;
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
                    && crate::stages::has_stages(r)
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
) -> Result<PlotSummary, ReportError> {
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
) -> Result<(), ReportError> {
    let format = ImageFormat::from_path(out)?;
    if series.iter().all(|s| s.points.is_empty()) {
        return Err(Error::bad_input("no points to plot").into());
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
    result.map_err(|source| ReportError::Draw {
        path: out.to_path_buf(),
        source,
    })
}
