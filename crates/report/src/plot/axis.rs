//! Axis scales (linear, log2 sizes, log2, log10), their tick positions and labels, and the palette.

use super::*;

/// How one axis maps data to chart coordinates and back to tick labels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Scale {
    Linear,
    /// log2, labelled as sizes (8, 1K, 1M).
    Log2Size,
    /// log2, labelled as numbers.
    Log2,
    Log10,
}

impl Scale {
    pub(super) fn to_coord(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log2Size | Scale::Log2 => v.log2(),
            Scale::Log10 => v.log10(),
        }
    }

    pub(super) fn label(self, c: f64) -> String {
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
    pub(super) fn range_and_ticks(self, lo: f64, hi: f64, from_zero: bool) -> (f64, f64, Vec<f64>) {
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
