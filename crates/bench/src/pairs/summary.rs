//! What rank 0 prints after the sweep: one n × n table of Gbps per size, the pairs below
//! `--outlier` of their size's median (with host and NIC of both ends), the suspect ranks and
//! NICs ([`crate::locate`]) and the `--min-bw` verdict, all read from the records.

use efabench_record::Record;

use super::PairsDetail;
use crate::locate::{self, PairBw};

/// The n × n tables, the outliers, the suspects and the `--min-bw` verdict (rank 0).
pub fn summarize(
    records: &[Record],
    outlier: f64,
    suspect_below: f64,
    min_bw: Option<f64>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut sizes: Vec<u64> = records.iter().map(|r| r.size_bytes).collect();
    sizes.dedup();
    let n = records.first().map(|r| r.world as usize).unwrap_or(0);
    let src_of = |r: &Record| PairsDetail::of(r).map_or(0, |d| d.src as usize);
    let text = |r: &Record, k: fn(&PairsDetail) -> &Option<String>| {
        PairsDetail::of(r)
            .and_then(|d| k(&d).clone())
            .unwrap_or_else(|| "?".into())
    };
    for size in sizes {
        let rs: Vec<&Record> = records.iter().filter(|r| r.size_bytes == size).collect();
        let mut grid = vec![vec![None; n]; n];
        for r in &rs {
            let (s, d) = (src_of(r), r.peer.unwrap_or(0) as usize);
            if s < n && d < n {
                grid[s][d] = Some(r.bw_gbps);
            }
        }
        out.push(format!(
            "# pairs at {size} B: Gbps, row = source rank, column = destination rank"
        ));
        let mut head = format!("# {:>7}", "src\\dst");
        for d in 0..n {
            head.push_str(&format!(" {d:>9}"));
        }
        out.push(head);
        for (s, row) in grid.iter().enumerate() {
            let mut line = format!("# {s:>7}");
            for c in row {
                match c {
                    Some(v) => line.push_str(&format!(" {v:>9.2}")),
                    None => line.push_str(&format!(" {:>9}", "-")),
                }
            }
            out.push(line);
        }
        let mut bws: Vec<f64> = rs.iter().map(|r| r.bw_gbps).collect();
        bws.sort_by(f64::total_cmp);
        let median = match bws.len() {
            0 => 0.0,
            l if l % 2 == 1 => bws[l / 2],
            l => (bws[l / 2 - 1] + bws[l / 2]) / 2.0,
        };
        let limit = median * outlier / 100.0;
        let mut outliers = 0;
        for r in &rs {
            if r.bw_gbps < limit {
                outliers += 1;
                let (s, d) = (src_of(r), r.peer.unwrap_or(0) as usize);
                out.push(format!(
                    "# outlier at {size} B: {s} -> {d}: {:.2} Gbps ({:.0}% of the median {:.2}); \
                     src rank {s} on {} NIC {}, dst rank {d} on {} NIC {}",
                    r.bw_gbps,
                    r.bw_gbps / median.max(f64::MIN_POSITIVE) * 100.0,
                    median,
                    text(r, |d| &d.src_host),
                    text(r, |d| &d.src_nic),
                    text(r, |d| &d.dst_host),
                    text(r, |d| &d.dst_nic),
                ));
            }
        }
        if outliers == 0 {
            out.push(format!(
                "# no pair at {size} B below {outlier}% of the median {median:.2} Gbps"
            ));
        }
        // A slow node is judged against the pairs without it (see `locate`): with three
        // nodes, four of six pairs involve a slow one and a global median is its own number.
        if n >= 3 {
            let pairs: Vec<PairBw> = rs
                .iter()
                .map(|r| PairBw {
                    src: src_of(r),
                    dst: r.peer.unwrap_or(0) as usize,
                    gbps: r.bw_gbps,
                })
                .collect();
            let found = locate::locate(n, &pairs, suspect_below / 100.0);
            if found.is_empty() {
                out.push(format!(
                    "# no suspect at {size} B: every rank's pairs (sending and receiving) are at \
                     {suspect_below}% or more of the median of the pairs without it"
                ));
            }
            for s in found {
                let place = rs
                    .iter()
                    .find(|x| src_of(x) == s.rank)
                    .map(|x| {
                        format!(
                            "{} NIC {}",
                            text(x, |d| &d.src_host),
                            text(x, |d| &d.src_nic)
                        )
                    })
                    .unwrap_or_else(|| "?".into());
                out.push(format!(
                    "# suspect at {size} B: rank {} on {place} ({}): {}",
                    s.rank,
                    s.direction.describe(),
                    s.evidence()
                ));
            }
            out.extend(rail_suspects(&rs, n, size, suspect_below));
        }
    }
    if let Some(min) = min_bw {
        let below: Vec<String> = records
            .iter()
            .filter(|r| r.bw_gbps < min)
            .map(|r| {
                format!(
                    "{} -> {} at {} B ({:.2} Gbps)",
                    src_of(r),
                    r.peer.unwrap_or(0),
                    r.size_bytes,
                    r.bw_gbps
                )
            })
            .collect();
        if below.is_empty() {
            out.push(format!("# --min-bw {min}: every pair passed"));
        } else {
            out.push(format!(
                "# --min-bw {min}: FAILED, {} pair(s) below: {}",
                below.len(),
                below.join(", ")
            ));
        }
    }
    out
}

/// Per-rail suspects of one size from the records' `rail_gbps` (each rail measured alone):
/// the suspect NIC of a node, named by rail and domain.
fn rail_suspects(rs: &[&Record], n: usize, size: u64, suspect_below: f64) -> Vec<String> {
    let src_of = |r: &Record| PairsDetail::of(r).map_or(0, |d| d.src as usize);
    let per = |r: &Record| -> Vec<f64> {
        PairsDetail::of(r)
            .and_then(|d| d.rail_gbps)
            .unwrap_or_default()
    };
    let rails = rs.iter().map(|r| per(r).len()).max().unwrap_or(0);
    let mut out = Vec::new();
    if rails < 2 {
        return out;
    }
    for rail in 0..rails {
        let pairs: Vec<PairBw> = rs
            .iter()
            .filter_map(|r| {
                per(r).get(rail).map(|&g| PairBw {
                    src: src_of(r),
                    dst: r.peer.unwrap_or(0) as usize,
                    gbps: g,
                })
            })
            .collect();
        for s in locate::locate(n, &pairs, suspect_below / 100.0) {
            let rec = rs.iter().find(|x| src_of(x) == s.rank);
            let detail = rec.and_then(|x| PairsDetail::of(x));
            let host = detail
                .as_ref()
                .and_then(|d| d.src_host.as_deref())
                .unwrap_or("?");
            let domain = detail
                .as_ref()
                .and_then(|d| d.per_rail.as_ref())
                .and_then(|a| a.get(rail))
                .and_then(|v| v.domain.as_deref())
                .unwrap_or("?");
            out.push(format!(
                "# suspect NIC at {size} B: rank {} on {host} rail {rail} (domain {domain}) ({}), \
                 each rail measured alone: {}",
                s.rank,
                s.direction.describe(),
                s.evidence()
            ));
        }
    }
    out
}
