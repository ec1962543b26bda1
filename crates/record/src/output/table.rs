//! The human table: a header block per configuration, one row per point, and the summary of
//! each group (peak bandwidth per peer, errors).

use super::*;

/// What makes two records belong to the same table (one header block).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct GroupKey {
    pub(super) bench: String,
    pub(super) variant: String,
    pub(super) provider: String,
    pub(super) fabric: String,
    pub(super) domains: Vec<String>,
    pub(super) libfabric: Option<String>,
    pub(super) mem: String,
    pub(super) rails: u32,
    pub(super) world: u32,
    pub(super) verified: bool,
    pub(super) lat_kind: String,
    pub(super) busbw: bool,
    pub(super) busbw_def: Option<String>,
    pub(super) host: String,
    /// Rows are ordered pairs (the record names its source in `src`), not peers of rank 0.
    pub(super) pairs: bool,
    /// Rows name a peer of rank 0 (point-to-point benchmarks); collectives and GPU-local
    /// benchmarks have none.
    pub(super) peer: bool,
}

impl GroupKey {
    pub(super) fn of(r: &Record) -> Self {
        GroupKey {
            bench: r.bench.clone(),
            variant: r.variant.clone(),
            provider: r.provider.clone(),
            fabric: r.fabric.clone(),
            domains: r.domains.clone(),
            libfabric: r.libfabric.clone(),
            mem: r.mem.clone(),
            rails: r.rails,
            world: r.world,
            verified: r.verified,
            lat_kind: r.lat_kind(),
            busbw: r.busbw_gbps.is_some(),
            busbw_def: r.busbw_def(),
            host: r.host.clone(),
            pairs: r.common().src.is_some(),
            peer: r.peer.is_some(),
        }
    }
}

/// Running totals of the current table, for its summary lines.
#[derive(Default)]
pub(super) struct GroupStats {
    /// The highest bus bandwidth and its size (a collective's records).
    pub(super) peak_busbw: Option<(f64, u64)>,
    pub(super) errors: u64,
    /// One entry per peer (`None` for records without one), in the order the peers appeared:
    /// rank 0 measures each peer in turn, and an average over several peers' sizes would count
    /// every size once per peer and blur a slow peer into the others.
    pub(super) peers: Vec<(Option<u32>, PeerStats)>,
}

/// Summary totals of one peer's rows.
#[derive(Default)]
pub(super) struct PeerStats {
    pub(super) rows: u64,
    /// Distinct sizes among the rows.
    pub(super) sizes: Vec<u64>,
    /// Every row's bandwidth with its size (pairs: one row per ordered pair and size).
    pub(super) bws: Vec<(u64, f64)>,
    pub(super) peak_bw: f64,
    pub(super) peak_at: u64,
    best_p50: Option<(f64, u64)>,
    pub(super) errors: u64,
}

impl GroupStats {
    pub(super) fn add(&mut self, r: &Record) {
        if let Some(b) = r.busbw_gbps {
            if self.peak_busbw.is_none_or(|(p, _)| b > p) {
                self.peak_busbw = Some((b, r.size_bytes));
            }
        }
        self.errors = self.errors.saturating_add(r.errors);
        let i = match self.peers.iter().position(|(p, _)| *p == r.peer) {
            Some(i) => i,
            None => {
                self.peers.push((r.peer, PeerStats::default()));
                self.peers.len() - 1
            }
        };
        let st = &mut self.peers[i].1;
        st.rows += 1;
        if !st.sizes.contains(&r.size_bytes) {
            st.sizes.push(r.size_bytes);
        }
        st.bws.push((r.size_bytes, r.bw_gbps));
        if st.rows == 1 || r.bw_gbps > st.peak_bw {
            st.peak_bw = r.bw_gbps;
            st.peak_at = r.size_bytes;
        }
        if st.best_p50.is_none_or(|(p, _)| r.lat_us.p50 < p) {
            st.best_p50 = Some((r.lat_us.p50, r.size_bytes));
        }
        st.errors = st.errors.saturating_add(r.errors);
    }
}

/// Which latency statistic the record's bandwidth was computed from, when it is one of them:
/// `bw = size / lat_mean` (the total time of the timed iterations, as the point-to-point
/// benchmarks do) or `size / lat_p50` (the median, as `ipc` does). `None` when neither holds
/// (a collective whose time is the slowest rank's, a zero latency).
pub(super) fn bw_basis(r: &Record) -> Option<&'static str> {
    let matches = |lat_us: f64| {
        if lat_us.is_nan() || lat_us <= 0.0 || r.size_bytes == 0 {
            return false;
        }
        let implied = r.size_bytes as f64 * 8.0 / (lat_us * 1e3);
        (implied - r.bw_gbps).abs() <= 1e-6 * implied.max(r.bw_gbps)
    };
    if matches(r.lat_us.mean) {
        Some("lat_mean")
    } else if matches(r.lat_us.p50) {
        Some("lat_p50")
    } else {
        None
    }
}

// Column widths of the table (data rows are right-aligned under the `#` header line).
pub(super) const W_SIZE: usize = 12;
pub(super) const W_ITERS: usize = 8;
pub(super) const W_PEER: usize = 4;
pub(super) const W_WARM: usize = 6;
pub(super) const W_LAT: usize = 12;
pub(super) const W_BW: usize = 10;
pub(super) const W_BUSBW: usize = 12;
pub(super) const W_RATE: usize = 15;
pub(super) const W_UTIL: usize = 8;
pub(super) const W_ERR: usize = 7;

/// At least `min_decimals`, and enough decimals to show 3 significant digits of small values
/// (a 8-byte ping-pong's 0.00412 Gbps must not print as 0.00), at most 6.
pub(super) fn num(v: f64, min_decimals: usize) -> String {
    let decimals = if v == 0.0 || !v.is_finite() {
        min_decimals
    } else {
        let mag = v.abs().log10().floor() as i32; // 0.0041 -> -3
        (2 - mag).clamp(min_decimals as i32, 6) as usize
    };
    format!("{v:.decimals$}")
}

pub(super) fn dash_or(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) => format!("{v:.decimals$}"),
        None => "-".to_string(),
    }
}

/// The table's column line (with units), starting with `#`.
pub(super) fn column_line(busbw: bool) -> String {
    let mut s = format!(
        "{:>W_SIZE$} {:>W_PEER$} {:>W_WARM$} {:>W_ITERS$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_BW$}",
        "size(B)", "peer", "warmup", "iters", "lat_min(us)", "lat_p50(us)", "lat_p99(us)", "lat_max(us)", "lat_mean(us)", "bw(Gbps)"
    );
    if busbw {
        s.push_str(&format!(" {:>W_BUSBW$}", "busbw(Gbps)"));
    }
    s.push_str(&format!(
        " {:>W_RATE$} {:>W_UTIL$} {:>W_ERR$}",
        "msg_rate(Mops)", "util(%)", "errors"
    ));
    s.replace_range(0..1, "#");
    s
}

/// One data row of the table.
pub(super) fn table_row(r: &Record, busbw: bool) -> String {
    let mut s = format!(
        "{:>W_SIZE$} {:>W_PEER$} {:>W_WARM$} {:>W_ITERS$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_LAT$} {:>W_BW$}",
        r.size_bytes,
        r.peer.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
        r.warmup,
        r.iters,
        num(r.lat_us.min, 2),
        num(r.lat_us.p50, 2),
        num(r.lat_us.p99, 2),
        num(r.lat_us.max, 2),
        num(r.lat_us.mean, 2),
        num(r.bw_gbps, 2)
    );
    if busbw {
        let b = r
            .busbw_gbps
            .map(|b| num(b, 2))
            .unwrap_or_else(|| "-".into());
        s.push_str(&format!(" {b:>W_BUSBW$}"));
    }
    let errors = if r.verified {
        r.errors.to_string()
    } else {
        "N/A".to_string()
    };
    s.push_str(&format!(
        " {:>W_RATE$} {:>W_UTIL$} {:>W_ERR$}",
        num(r.msg_rate_mops, 3),
        dash_or(r.util_pct, 1),
        errors
    ));
    s
}

pub(super) fn latency_line(kind: &str) -> String {
    let what = match kind {
        "post-to-completion" => "post-to-completion (time from posting the operation to its completion; a read is a round trip, so this is not comparable with one-way latency)",
        "round-trip/2" => "one-way = ping-pong round-trip / 2",
        "one-way" => "one-way",
        other => other,
    };
    format!("# latency: {what}; min/p50/p99/max/mean over the timed iterations, in us")
}

/// The `#` header block printed before the first row of a table.
pub(super) fn header_block(r: &Record, key: &GroupKey) -> Vec<String> {
    let mut h = Vec::new();
    h.push(format!("# efabench {} / {}", r.bench, r.variant));
    h.push(format!(
        "# provider {}  fabric {}  domains {}  libfabric {}",
        r.provider,
        r.fabric,
        if r.domains.is_empty() {
            "-".to_string()
        } else {
            r.domains.join(",")
        },
        r.libfabric.as_deref().unwrap_or("-")
    ));
    h.push(format!(
        "# mem {}  rails {}  world {}  host {}",
        r.mem, r.rails, r.world, r.host
    ));
    h.push(if key.pairs {
        format!(
            "# one row per ordered pair: column \"peer\" is the destination, the source is the record's src (the pair table below names both); untimed and timed windows in columns \"warmup\" and \"iters\"; verification {}",
            if r.verified { "on" } else { "off (errors N/A)" }
        )
    } else if key.peer {
        format!(
            "# rank 0 measures each peer in turn (column \"peer\"); untimed and timed iterations per size in columns \"warmup\" and \"iters\"; verification {}",
            if r.verified { "on" } else { "off (errors N/A)" }
        )
    } else {
        format!(
            "# untimed and timed iterations per size in columns \"warmup\" and \"iters\"; verification {}",
            if r.verified { "on" } else { "off (errors N/A)" }
        )
    });
    h.push(latency_line(&key.lat_kind));
    if key.busbw {
        h.push(if r.bench == "alltoallv" {
            "# bw: algbw = the busiest rank's bytes sent or received per iteration (own chunk included) / time of the slowest rank, in Gbps (10^9 bit/s); msg_rate in 10^6 messages/s"
        } else {
            "# bw: algbw = size (one rank's whole send buffer, its own chunk included) / time of the slowest rank, in Gbps (10^9 bit/s); msg_rate in 10^6 messages/s"
        }
        .to_string());
        h.push(match &key.busbw_def {
            Some(d) => format!("# busbw: {d}"),
            None => format!(
                "# busbw: bw x (n-1)/n with n = world = {} (nccl-tests all-to-all bus bandwidth), in Gbps",
                r.world
            ),
        });
    } else {
        h.push(
            "# bw: payload bits in one direction / elapsed time, in Gbps (10^9 bit/s); msg_rate in 10^6 messages/s"
                .to_string(),
        );
    }
    match bw_basis(r) {
        Some("lat_mean") => h.push(
            "# bw = size / lat_mean: the total time of the timed iterations, not the median (lat_p50)"
                .into(),
        ),
        Some(basis) => h.push(format!(
            "# bw = size / {basis}: from the median time of the timed iterations, not the mean"
        )),
        None => {}
    }
    h.push("# util: bw / sum of the link speeds used (- when the link speed is unknown)".into());
    h.push("#".into());
    h.push(column_line(key.busbw));
    h
}

/// The table's closing lines: per peer, the peak bandwidth with its size and the lowest p50
/// latency (`peer 1: ...`; records without a peer, e.g. a collective, get no label); for pairs
/// the median pair per size; then the peak bus bandwidth and the error total. No figure is
/// averaged over sizes: an 8-byte row and a 1 MiB row measure different things.
pub(super) fn summary_block(key: &GroupKey, st: &GroupStats) -> Vec<String> {
    let mut s = Vec::new();
    if st.peers.is_empty() {
        return s;
    }
    if key.pairs {
        // Rows of every source to one destination: a summary per "peer" would mix sources.
        let mut sizes: Vec<u64> = st
            .peers
            .iter()
            .flat_map(|(_, ps)| ps.sizes.clone())
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for size in sizes {
            let bws = st
                .peers
                .iter()
                .flat_map(|(_, ps)| ps.bws.iter())
                .filter(|(at, _)| *at == size)
                .map(|(_, bw)| *bw);
            let n = bws.clone().count();
            if let Some(median) = crate::stats::median_of(bws) {
                s.push(format!(
                    "# Median pair bw at {size} B: {median:.2} Gbps over {n} ordered pair{} (the pair table and suspects follow)",
                    if n == 1 { "" } else { "s" },
                ));
            }
        }
    }
    for (peer, ps) in st.peers.iter().filter(|_| !key.pairs) {
        let who = peer.map(|p| format!(" with peer {p}")).unwrap_or_default();
        s.push(format!(
            "# Peak bw{who}: {:.2} Gbps at {} B",
            ps.peak_bw, ps.peak_at
        ));
        if let Some((p50, at)) = ps.best_p50 {
            s.push(format!("# Lowest lat_p50{who}: {p50:.2} us at {at} B"));
        }
    }
    if let Some((busbw, at)) = st.peak_busbw {
        s.push(format!("# Peak busbw: {busbw:.2} Gbps at {at} B"));
    }
    if key.verified {
        let by_peer: Vec<String> = st
            .peers
            .iter()
            .filter(|(p, ps)| p.is_some() && ps.errors > 0)
            .map(|(p, ps)| format!("peer {}: {}", p.unwrap_or_default(), ps.errors))
            .collect();
        s.push(format!(
            "# Errors: {} {}{}",
            st.errors,
            if st.errors == 0 { "OK" } else { "FAILED" },
            if by_peer.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_peer.join(", "))
            }
        ));
    } else {
        s.push("# Errors: N/A (verification off)".into());
    }
    s.push("#".into());
    s
}
