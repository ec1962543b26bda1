//! Drawing one chart with plotters: frame, grid, series and legend.

use super::*;

/// A chart's titles and axis scales.
pub(super) struct Frame {
    pub(super) title: String,
    pub(super) x_title: String,
    pub(super) y_title: String,
    pub(super) x_scale: Scale,
    pub(super) y_scale: Scale,
}

pub(super) fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &[Series],
    opts: &PlotOptions,
) -> Result<(), DrawFailure>
where
    DB::ErrorType: 'static,
{
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

pub(super) fn draw_frame<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &[Series],
    frame: &Frame,
) -> Result<(), DrawFailure>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| DrawFailure::from(e);
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
