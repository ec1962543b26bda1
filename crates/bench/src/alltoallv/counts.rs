//! Per-(source, destination) byte counts of an all-to-all: `--counts` of `alltoallv`.
//!
//! A [`Counts`] is an n × n matrix of bytes, row = source rank, column = destination rank, the
//! diagonal being what a rank keeps for itself (nccl-tests and `MPI_Alltoallv` count it too).
//! Every cell is a multiple of 16 bytes, as nccl-tests aligns its per-peer counts.
//!
//! Where the counts come from ([`CountsSpec`]):
//! * `uniform`: every cell is `size / n` (rounded down to 16 B): `alltoall`'s chunks.
//! * `zipf:S`: hot destinations. Destination `d` gets a share proportional to `1 / (d + 1)^S` of
//!   every source's `size` bytes, so rank 0 is the hottest receiver, rank n − 1 the coldest;
//!   `S = 0` is `uniform`.
//! * `moe:T,H,K,E`: a token routing. Every rank holds `T` tokens of `H` bf16 elements (2·H bytes
//!   each); each token picks `K` distinct experts of `E` uniformly at random (seeded by `--seed`,
//!   the source rank and the token); expert `e` lives on rank `e / (E / n)` (`E` must split evenly
//!   over the ranks, as in DeepEP). A token goes once to every rank that hosts at least one of its
//!   experts (the per-rank layout of a normal-mode dispatch), so cell (i, j) is 2·H bytes times
//!   the number of rank i's tokens routed to rank j.
//! * `file:PATH`: a traffic matrix read as nccl-tests' `alltoallv_perf` reads
//!   `NCCL_TESTS_ALLTOALLV_MATRIX_FILE`: whitespace-separated non-negative numbers (bytes), a
//!   square matrix whose cell `[i][j]` is what rank i sends rank j; a matrix larger than the job is
//!   cut to its first n rows and columns; every value is rounded down to a multiple of 16.
//!
//! `uniform` and `zipf` are shapes: each size of the `-b/-e` sweep is one rank's whole send
//! buffer, shared out as the shape says. `moe` and `file` fix every byte themselves, so, as
//! nccl-tests requires for its matrix mode, `-b` must equal `-e` and be at least the largest
//! number of bytes any rank sends or receives (the buffer each rank holds).

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::collective::exchange::{Chunk, Plan};
use crate::error::BenchError;
use crate::pattern::mix;

/// Cells are rounded down to this many bytes (nccl-tests' alignment).
pub const ALIGN: u64 = 16;

/// Largest matrix file `file:` reads (a 1,000-rank matrix of 12-digit numbers is 13 MB).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// Largest `T × K` of a `moe` routing (every rank routes every rank's tokens to know the
/// matrix, so this bounds the work done before anything is measured).
const MAX_ROUTED: u64 = 1 << 26;

/// Where `--counts` takes the matrix from.
#[derive(Clone, Debug, PartialEq)]
pub enum CountsSpec {
    Uniform,
    Zipf(f64),
    Moe {
        tokens: u64,
        hidden: u64,
        topk: u64,
        experts: u64,
    },
    File(PathBuf),
}

impl FromStr for CountsSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let usage = "use uniform, zipf:S (e.g. zipf:1.1), moe:T,H,K,E (e.g. moe:128,7168,8,256) or file:PATH";
        let (kind, arg) = t.split_once(':').unwrap_or((t, ""));
        match kind {
            "uniform" if arg.is_empty() => Ok(CountsSpec::Uniform),
            "zipf" => match arg.parse::<f64>() {
                Ok(x) if x.is_finite() && (0.0..=16.0).contains(&x) => Ok(CountsSpec::Zipf(x)),
                _ => Err(format!(
                    "--counts zipf:{}: the exponent must be a number from 0 to 16, e.g. zipf:1.1",
                    crate::size::clip(arg)
                )),
            },
            "moe" => {
                let parts: Vec<&str> = arg.split(',').map(str::trim).collect();
                let nums: Option<Vec<u64>> = parts.iter().map(|p| p.parse().ok()).collect();
                let Some(&[tokens, hidden, topk, experts]) = nums.as_deref() else {
                    return Err(format!(
                        "--counts moe:{}: give four whole numbers T,H,K,E (tokens per rank, hidden \
                         size in bf16 elements, experts per token, experts), e.g. moe:128,7168,8,256",
                        crate::size::clip(arg)
                    ));
                };
                if tokens == 0 || hidden == 0 || topk == 0 || experts == 0 {
                    return Err("--counts moe:T,H,K,E: every number must be at least 1".into());
                }
                if topk > experts {
                    return Err(format!(
                        "--counts moe: K = {topk} experts per token is more than the E = {experts} experts there are"
                    ));
                }
                if (2 * hidden) % ALIGN != 0 {
                    return Err(format!(
                        "--counts moe: H = {hidden} bf16 elements make {} bytes per token; use a multiple of 8 elements (16-byte tokens)",
                        2 * hidden
                    ));
                }
                if tokens.saturating_mul(topk) > MAX_ROUTED || hidden > 1 << 24 {
                    return Err(format!(
                        "--counts moe: T × K = {} routed tokens per rank or H = {hidden} is too large (at most {MAX_ROUTED} and {})",
                        tokens.saturating_mul(topk),
                        1u64 << 24
                    ));
                }
                Ok(CountsSpec::Moe {
                    tokens,
                    hidden,
                    topk,
                    experts,
                })
            }
            "file" if !arg.is_empty() => Ok(CountsSpec::File(PathBuf::from(arg))),
            _ => Err(format!("--counts '{}': {usage}", crate::size::clip(t))),
        }
    }
}

impl std::fmt::Display for CountsSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CountsSpec::Uniform => write!(f, "uniform"),
            CountsSpec::Zipf(s) => write!(f, "zipf:{s}"),
            CountsSpec::Moe {
                tokens,
                hidden,
                topk,
                experts,
            } => write!(f, "moe:{tokens},{hidden},{topk},{experts}"),
            CountsSpec::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

impl CountsSpec {
    /// Whether the sweep's size shares itself out (`uniform`, `zipf`) rather than the spec
    /// fixing every byte (`moe`, `file`).
    pub fn is_shape(&self) -> bool {
        matches!(self, CountsSpec::Uniform | CountsSpec::Zipf(_))
    }
}

/// An n × n matrix of bytes, row = source, column = destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts {
    n: usize,
    cells: Vec<u64>,
}

impl Counts {
    /// Rank `me`'s cells of a counts matrix (send cells packed in destination order, receive
    /// cells in source order), with receive halves of `half` bytes.
    pub fn plan(&self, me: usize, half: usize) -> Plan {
        let (c, n) = (self, self.n());
        Plan {
            out: (0..n)
                .map(|d| Chunk {
                    off: c.send_offset(me, d) as usize,
                    len: c.get(me, d) as usize,
                })
                .collect(),
            inc: (0..n)
                .map(|s| Chunk {
                    off: c.recv_offset(s, me) as usize,
                    len: c.get(s, me) as usize,
                })
                .collect(),
            remote: (0..n).map(|d| c.recv_offset(me, d) as usize).collect(),
            half,
            window: usize::MAX,
            signal_above: None,
        }
    }

    /// A matrix from rows (each `n` long).
    pub fn from_rows(rows: &[Vec<u64>]) -> Self {
        let n = rows.len();
        Counts {
            n,
            cells: rows.iter().flat_map(|r| r.iter().copied()).collect(),
        }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes `src` sends `dst`.
    pub fn get(&self, src: usize, dst: usize) -> u64 {
        self.cells[src * self.n + dst]
    }

    /// Bytes `src` sends in all (its own cell included).
    pub fn sent(&self, src: usize) -> u64 {
        (0..self.n).map(|d| self.get(src, d)).sum()
    }

    /// Bytes `dst` receives in all (its own cell included).
    pub fn received(&self, dst: usize) -> u64 {
        (0..self.n).map(|s| self.get(s, dst)).sum()
    }

    /// The largest of every rank's bytes sent and received: what nccl-tests' alltoallv
    /// bandwidth divides by the time.
    pub fn busiest(&self) -> u64 {
        (0..self.n)
            .map(|r| self.sent(r).max(self.received(r)))
            .max()
            .unwrap_or(0)
    }

    /// The largest bytes any rank sends, and receives.
    pub fn max_sent_received(&self) -> (u64, u64) {
        (
            (0..self.n).map(|r| self.sent(r)).max().unwrap_or(0),
            (0..self.n).map(|r| self.received(r)).max().unwrap_or(0),
        )
    }

    /// Offset of `dst`'s cell in `src`'s send buffer: cells packed in destination order.
    pub fn send_offset(&self, src: usize, dst: usize) -> u64 {
        (0..dst).map(|d| self.get(src, d)).sum()
    }

    /// Offset of `src`'s cell in `dst`'s receive buffer: cells packed in source order.
    pub fn recv_offset(&self, src: usize, dst: usize) -> u64 {
        (0..src).map(|s| self.get(s, dst)).sum()
    }

    /// The busiest receiver's bytes over the mean of every rank's (1 when balanced).
    pub fn recv_imbalance(&self) -> f64 {
        let all: Vec<u64> = (0..self.n).map(|r| self.received(r)).collect();
        let mean = all.iter().sum::<u64>() as f64 / self.n.max(1) as f64;
        if mean > 0.0 {
            *all.iter().max().unwrap_or(&0) as f64 / mean
        } else {
            1.0
        }
    }

    /// Rows as nested vectors (for the record).
    pub fn rows(&self) -> Vec<Vec<u64>> {
        self.cells.chunks(self.n).map(<[u64]>::to_vec).collect()
    }
}

fn floor16(x: f64) -> u64 {
    (x.max(0.0) as u64) / ALIGN * ALIGN
}

/// The counts of a shape (`uniform`, `zipf`) for one rank's whole send buffer of `size` bytes.
pub fn shape(spec: &CountsSpec, n: usize, size: u64) -> Counts {
    let weights: Vec<f64> = match spec {
        CountsSpec::Zipf(s) => (0..n).map(|d| 1.0 / ((d + 1) as f64).powf(*s)).collect(),
        _ => vec![1.0; n],
    };
    let total: f64 = weights.iter().sum();
    let row: Vec<u64> = weights
        .iter()
        .map(|w| floor16(size as f64 * w / total))
        .collect();
    Counts::from_rows(&vec![row; n])
}

/// The counts of a `moe` routing over `n` ranks.
pub fn moe(
    n: usize,
    tokens: u64,
    hidden: u64,
    topk: u64,
    experts: u64,
    seed: u64,
) -> Result<Counts, BenchError> {
    if experts % n as u64 != 0 {
        return Err(BenchError::usage(format!(
            "--counts moe: E = {experts} experts do not split evenly over {n} ranks; use a multiple of {n}"
        )));
    }
    let per_rank = experts / n as u64;
    let token_bytes = 2 * hidden;
    let mut rows = vec![vec![0u64; n]; n];
    let mut picked = Vec::with_capacity(topk as usize);
    let mut hit = vec![false; n];
    for (src, row) in rows.iter_mut().enumerate() {
        for t in 0..tokens {
            // K distinct experts, uniformly: draw until K different ones came up (K ≤ E).
            picked.clear();
            let mut state = mix(seed ^ mix(((src as u64) << 40) ^ t ^ 0x0E0E_0000_0000_0000));
            while (picked.len() as u64) < topk {
                state = mix(state.wrapping_add(0x9E37_79B9_7F4A_7C15));
                let e = state % experts;
                if !picked.contains(&e) {
                    picked.push(e);
                }
            }
            hit.iter_mut().for_each(|h| *h = false);
            for &e in &picked {
                hit[(e / per_rank) as usize] = true;
            }
            for (dst, h) in hit.iter().enumerate() {
                if *h {
                    row[dst] += token_bytes;
                }
            }
        }
    }
    Ok(Counts::from_rows(&rows))
}

/// Reads the text of a traffic matrix file (see the module doc); parse it with [`parse_matrix`]
/// once the number of ranks is known.
pub fn read_text(path: &Path) -> Result<String, BenchError> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| {
        BenchError::usage(format!(
            "--counts file:{shown}: {e}; give the path of a traffic matrix file"
        ))
    })?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(BenchError::usage(format!(
            "--counts file:{shown}: {} bytes is larger than the {MAX_FILE_BYTES} a matrix file may have",
            meta.len()
        )));
    }
    std::fs::read_to_string(path).map_err(|e| {
        BenchError::usage(format!("--counts file:{shown}: {e}; the file must be text"))
    })
}

/// A digest of a matrix file's text, so every rank can tell it holds the same matrix.
pub fn text_digest(text: &str) -> u64 {
    text.bytes()
        .fold(mix(text.len() as u64), |h, b| mix(h ^ u64::from(b)))
}

/// Parses the text of a traffic matrix for `n` ranks.
pub fn parse_matrix(text: &str, n: usize) -> Result<Counts, String> {
    let mut rows: Vec<Vec<u64>> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut row = Vec::new();
        for (j, w) in line.split_whitespace().enumerate() {
            let v: f64 = w.parse().map_err(|_| {
                format!(
                    "line {}, column {}: '{}' is not a number of bytes",
                    i + 1,
                    j + 1,
                    crate::size::clip(w)
                )
            })?;
            if !v.is_finite() || v < 0.0 || v > crate::harness::MAX_SIZE as f64 {
                return Err(format!(
                    "line {}, column {}: {w} bytes is out of range (0 to 64G)",
                    i + 1,
                    j + 1
                ));
            }
            row.push(floor16(v));
        }
        if row.is_empty() {
            continue;
        }
        if let Some(first) = rows.first() {
            if first.len() != row.len() {
                return Err(format!(
                    "line {} has {} columns, the first row {}; every row needs the same number",
                    i + 1,
                    row.len(),
                    first.len()
                ));
            }
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err("the matrix is empty".into());
    }
    let dim = rows.len();
    if rows[0].len() != dim {
        return Err(format!(
            "the matrix must be square: it has {dim} rows of {} columns",
            rows[0].len()
        ));
    }
    if dim < n {
        return Err(format!(
            "the matrix is {dim} x {dim}, smaller than the {n} ranks of this job; give a matrix of at least {n} x {n}"
        ));
    }
    let cut: Vec<Vec<u64>> = rows.iter().take(n).map(|r| r[..n].to_vec()).collect();
    Ok(Counts::from_rows(&cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        for s in [
            "uniform",
            "zipf:1.5",
            "moe:128,7168,8,256",
            "file:/tmp/m.txt",
        ] {
            let spec: CountsSpec = s.parse().unwrap();
            assert_eq!(spec.to_string(), s);
        }
        for bad in [
            "",
            "zipf",
            "zipf:-1",
            "zipf:x",
            "moe:1,2,3",
            "moe:1,8,9,8",
            "moe:0,8,1,1",
            "moe:1,3,1,1",
            "file:",
            "normal",
        ] {
            assert!(bad.parse::<CountsSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn uniform_is_alltoall_and_zipf_makes_rank_0_hot() {
        let u = shape(&CountsSpec::Uniform, 4, 4096);
        assert!((0..4).all(|s| (0..4).all(|d| u.get(s, d) == 1024)));
        assert_eq!(u.busiest(), 4096);
        let z = shape(&CountsSpec::Zipf(1.0), 4, 1 << 20);
        for s in 0..4 {
            assert!(z.sent(s) <= 1 << 20);
            for d in 1..4 {
                assert!(z.get(s, d - 1) > z.get(s, d));
                assert_eq!(z.get(s, d) % ALIGN, 0);
            }
        }
        assert_eq!(z.busiest(), z.received(0));
        assert!(z.recv_imbalance() > 1.5);
    }

    #[test]
    fn moe_routes_every_token_to_its_ranks_and_is_seeded() {
        let m = moe(4, 100, 8, 2, 8, 1).unwrap();
        for s in 0..4 {
            // Every token reaches 1 or 2 ranks (2 experts, 2 experts per rank).
            let tokens = m.sent(s) / 16;
            assert!((100..=200).contains(&tokens), "{tokens}");
        }
        assert_eq!(m, moe(4, 100, 8, 2, 8, 1).unwrap());
        assert_ne!(m, moe(4, 100, 8, 2, 8, 2).unwrap());
        // Top-E of E experts: every token goes everywhere.
        let all = moe(2, 10, 8, 4, 4, 7).unwrap();
        assert!((0..2).all(|s| (0..2).all(|d| all.get(s, d) == 160)));
        assert!(moe(3, 10, 8, 2, 8, 1).is_err());
    }

    #[test]
    fn matrix_files_read_as_nccl_tests_reads_them() {
        let m = parse_matrix("100 200 150\n 50 100 75\n\n300 150 200\n", 3).unwrap();
        assert_eq!(
            m.rows(),
            vec![vec![96, 192, 144], vec![48, 96, 64], vec![288, 144, 192]]
        );
        assert_eq!(m.send_offset(0, 2), 96 + 192);
        assert_eq!(m.recv_offset(2, 1), 192 + 96);
        // Larger than the job: the first n rows and columns.
        let cut = parse_matrix("16 32 48\n64 80 96\n1 2 3\n", 2).unwrap();
        assert_eq!(cut.rows(), vec![vec![16, 32], vec![64, 80]]);
        assert!(parse_matrix("16 32\n48\n", 2)
            .unwrap_err()
            .contains("columns"));
        assert!(parse_matrix("16 32\n", 2).unwrap_err().contains("square"));
        assert!(parse_matrix("16\n", 2)
            .unwrap_err()
            .contains("smaller than the 2 ranks"));
        assert!(parse_matrix("16 -1\n1 1\n", 2)
            .unwrap_err()
            .contains("out of range"));
        assert!(parse_matrix("16 x\n1 1\n", 2)
            .unwrap_err()
            .contains("not a number"));
        assert!(parse_matrix(" \n", 2).unwrap_err().contains("empty"));
    }

    #[test]
    fn uniform_counts_give_alltoall_plans() {
        let c = shape(&CountsSpec::Uniform, 4, 4096);
        for me in 0..4u32 {
            let (a, b) = (Plan::uniform(me, 4, 1024), c.plan(me as usize, 4096));
            assert_eq!(
                (a.out, a.inc, a.remote, a.half),
                (b.out, b.inc, b.remote, b.half)
            );
        }
    }

    #[test]
    fn every_chunk_lands_where_its_receiver_expects_it() {
        let c = parse_matrix("0 992 64 0\n32 96 0 4096\n0 0 0 16\n160 16 0 16\n", 4).unwrap();
        let half = c.max_sent_received().1 as usize;
        let plans: Vec<Plan> = (0..4).map(|r| c.plan(r, half)).collect();
        for (me, p) in plans.iter().enumerate() {
            let mut end = 0;
            for (dst, out) in p.out.iter().enumerate() {
                // Sender and receiver agree on the length and on the place.
                assert_eq!(out.len, plans[dst].inc[me].len);
                assert_eq!(p.remote[dst], plans[dst].inc[me].off);
                // Send cells are packed in destination order, inside the buffer.
                assert_eq!(out.off, end);
                end += out.len;
            }
            let last = p.inc.last().unwrap();
            assert!(last.off + last.len <= half, "receive cells fit one half");
        }
    }
}
