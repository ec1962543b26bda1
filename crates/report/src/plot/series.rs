//! Records to series: the fields an axis can show and how records group into lines.

use super::*;

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

    pub(super) fn short(self) -> &'static str {
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
    pub(super) fn missing_hint(self) -> &'static str {
        match self {
            Field::BusbwGbps => " (only collective benchmarks such as alltoall record busbw_gbps)",
            Field::UtilPct | Field::LinkGbps => {
                " (the link speed was unknown when these records were measured)"
            }
            _ => "",
        }
    }
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
pub(super) struct SeriesKey {
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
