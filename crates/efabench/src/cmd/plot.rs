//! `efabench plot RESULTS.jsonl... -o FILE.(png|svg)`: draw records, e.g. bandwidth against
//! message size, one line per configuration; with `--stages`, `efabench ep` records as stacked
//! bars of their stages. The drawing lives in `efabench_report::{plot, stages}`; this file maps
//! options and errors (bad input exit 2, a failed draw exit 1).

use crate::error::CliError;
use crate::exit::Exit;
use efabench_report::plot::{plot_paths, Field, PlotOptions, FIELD_NAMES, TIME_SLICED_MARK};
use efabench_report::stages::{plot_stage_paths, StagesOptions};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSONL files written with -o by efabench benchmarks (one or more).
    #[arg(required = true, value_name = "RESULTS.jsonl")]
    pub inputs: Vec<PathBuf>,
    /// Image to write; the extension picks the format: .png or .svg.
    #[arg(short = 'o', long = "output", value_name = "FILE.png|FILE.svg")]
    pub output: PathBuf,
    /// Draw `efabench ep` records as stacked bars of where the time goes: one horizontal bar per
    /// configuration (variant, and dtype, layout, merging or input file where those differ),
    /// split into the ep_stages launch, post, copy, feed, quiet, network, arrival, settle,
    /// reduce, in µs. Several runs of one configuration draw one bar, the run with the median
    /// total (so its stages still add up to it; see --each-run). Records without ep_stages are
    /// refused.
    #[arg(long, conflicts_with_all = ["x", "y", "log_y", "linear_x"])]
    pub stages: bool,
    /// With --stages: one bar per run ("run 1", "run 2", ...) instead of the median run.
    #[arg(long, requires = "stages")]
    pub each_run: bool,
    /// Field on the x axis (size is drawn on a log2 axis labelled 8, 1K, 1M, 1G).
    #[arg(long, default_value = "size", value_name = "FIELD")]
    pub x: String,
    /// Field on the y axis: bw_gbps, busbw_gbps, lat_p50, lat_p99, lat_min, lat_max,
    /// lat_mean, msg_rate_mops, util_pct, ...
    #[arg(long, default_value = "bw_gbps", value_name = "FIELD")]
    pub y: String,
    /// Logarithmic y axis (useful for latency).
    #[arg(long)]
    pub log_y: bool,
    /// Linear x axis even for size.
    #[arg(long)]
    pub linear_x: bool,
    /// Chart title (default: e.g. "efabench write: bandwidth vs message size").
    #[arg(long)]
    pub title: Option<String>,
    /// Only records of this benchmark (e.g. sendrecv).
    #[arg(long)]
    pub bench: Option<String>,
    /// Only records of this variant (e.g. stream).
    #[arg(long)]
    pub variant: Option<String>,
    /// Image width in pixels.
    #[arg(long, default_value_t = 1024, allow_hyphen_values = true)]
    pub width: u32,
    /// Image height in pixels [default: 640; with --stages, tall enough for the bars].
    #[arg(long, allow_hyphen_values = true)]
    pub height: Option<u32>,
}

fn field(s: &str, flag: &str) -> Result<Field, CliError> {
    s.parse::<Field>().map_err(|_| {
        CliError::usage(format!(
            "unknown field `{}` for {flag}: use one of {}",
            super::topo::shown(s),
            FIELD_NAMES.join(", ")
        ))
    })
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    if args.stages {
        return run_stages(args);
    }
    let opts = PlotOptions {
        x: field(&args.x, "--x")?,
        y: field(&args.y, "--y")?,
        log_x: args.linear_x.then_some(false),
        log_y: args.log_y,
        title: args.title,
        width: args.width,
        height: args.height.unwrap_or(640),
        bench: args.bench,
        variant: args.variant,
    };
    let summary = plot_paths(&args.inputs, &opts, &args.output)?;
    let skipped = if summary.skipped > 0 {
        format!(
            " ({} record(s) without a plottable {} or {} left out)",
            summary.skipped,
            opts.x.name(),
            opts.y.name()
        )
    } else {
        String::new()
    };
    let sliced = if summary.time_sliced > 0 {
        format!(
            "; {} series measured on a GPU shared without NVIDIA MPS (time-sliced), marked {TIME_SLICED_MARK} in the legend",
            summary.time_sliced
        )
    } else {
        String::new()
    };
    let stages = if summary.stage_records > 0 {
        format!(
            "; {} ep record(s) hold one message size each: --stages draws where their time goes",
            summary.stage_records
        )
    } else {
        String::new()
    };
    super::compare::print_stdout(&format!(
        "wrote {}: {} series, {} points{skipped}{sliced}{stages}\n",
        args.output.display(),
        summary.series,
        summary.points
    ))?;
    Ok(Exit::Ok)
}

fn run_stages(args: Args) -> Result<Exit, CliError> {
    let opts = StagesOptions {
        each_run: args.each_run,
        title: args.title,
        width: args.width,
        height: args.height,
        bench: args.bench,
        variant: args.variant,
    };
    let summary = plot_stage_paths(&args.inputs, &opts, &args.output)?;
    let median = if summary.records > summary.bars {
        " (several runs of a configuration: the median run drawn; --each-run draws them all)"
    } else {
        ""
    };
    super::compare::print_stdout(&format!(
        "wrote {}: {} bars from {} records{median}\n",
        args.output.display(),
        summary.bars,
        summary.records
    ))?;
    Ok(Exit::Ok)
}
