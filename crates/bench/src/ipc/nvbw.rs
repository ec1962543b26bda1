//! nvbandwidth's device-to-device testcases on `efabench ipc` (`--nvbw`).
//!
//! Each test keeps nvbandwidth's name and definition (v0.8, `testcases_ce.cpp`,
//! `testcases_sm.cpp`, `memcpy.cpp`), with one rank per GPU instead of one process for all:
//!
//! * a cell of the matrix is (row, column): row = the GPU whose context issues the copy (its
//!   stream, its copy engine or its SMs), column = the peer GPU. `_read_` tests copy the peer's
//!   buffer into the row GPU's (data moves column → row), `_write_` tests copy the row GPU's
//!   buffer into the peer's (row → column); `_ce` uses `cuMemcpyDtoDAsync`, `_sm` a copy kernel
//!   of one 512-thread block per SM (16-byte loads and stores);
//! * `bidirectional` runs two copies at once, one issued by each GPU of the pair (read: each GPU
//!   reads the other's buffer; write: each writes into the other's). Each copy is timed on its
//!   own stream; the record's bandwidth is the sum of the two (nvbandwidth's `_total`), and the
//!   two parts are kept (`bw1_GBps`, `bw2_GBps`, nvbandwidth's `read1`/`read2` or
//!   `write1`/`write2`);
//! * a sample is `warmup` untimed copies, a start event, `iters` copies (nvbandwidth's
//!   `loopCount`, 16 unless `-n`), an end event; bandwidth = size × iters / the sample's time,
//!   from the median sample (nvbandwidth: 3 samples, median);
//! * `device_local_copy`: a copy-engine copy between two buffers of one GPU (the diagonal);
//! * `device_to_device_latency_sm`: a list of 8-byte pointers in the column GPU's memory, node i
//!   pointing at node i + 16 (one 128-byte line apart), in a 2 MiB buffer; one thread of the row
//!   GPU follows 1,000,000 dependent loads in all (split over the samples, each sample on another
//!   SM), latency = time / loads. The diagonal (row = column) chases the GPU's own memory, which
//!   nvbandwidth leaves empty.
//!
//! Verification (on by default): before every sample the source owner fills its buffer with a
//! pattern whose seed changes per sample and per direction, and the destination owner poisons
//! its buffer; after the sample the destination owner checks every word. A latency chase checks
//! that it stopped on the node the list's arithmetic predicts.
//!
//! What differs from nvbandwidth: the two GPUs of a cell are two processes, so the two copies of
//! a bidirectional cell start at a bootstrap barrier instead of one stream event, and there is
//! no spin kernel holding the stream while copies are queued (copies are queued back to back
//! after the warm-up; at large sizes queueing is far faster than copying). SM copies move the
//! exact size (nvbandwidth rounds sizes of 64 MiB and more down to a multiple of SMs × 512 × 16
//! bytes).

use super::{peer, Rank, POISON_SLOT};
use crate::harness::{Measured, Point};
use crate::pattern;
use crate::queue::record::{fields, read};
use crate::stats::Samples;
use crate::BenchError;
use efabench_bootstrap::Bootstrap;
use efabench_gpu::buffer::{count_mismatches, fill};
use efabench_gpu::ipc::{chase_end, IpcKernels, Mem, CHASE_NODE};
use efabench_gpu::{Event, GpuError, Shape};
use efabench_record::Record;
use serde::{Deserialize, Serialize};

/// Bytes of the latency test's list (nvbandwidth: a fixed 2 MiB buffer).
pub const LATENCY_BYTES: u64 = 2 << 20;
/// Nodes between consecutive loads of the chase: 16 × 8 B = one 128-byte line.
pub const LATENCY_STRIDE: u64 = 16;
/// Dependent loads per latency cell, over all samples (nvbandwidth's `latencyMemAccessCnt`).
pub const LATENCY_LOADS: u64 = 1_000_000;
/// Copies per sample unless `-n` (nvbandwidth's `loopCount`).
pub const LOOP_COUNT: u64 = 16;
/// Threads per block of the SM copy (nvbandwidth's `numThreadPerBlock`).
pub const SM_BLOCK: u32 = 512;

/// Copy engine or SMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Ce,
    Sm,
}

/// One nvbandwidth testcase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    ReadCe,
    WriteCe,
    BidirReadCe,
    BidirWriteCe,
    ReadSm,
    WriteSm,
    BidirReadSm,
    BidirWriteSm,
    LocalCopy,
    Latency,
}

/// One copy of a cell: the rank that issues it, the rank whose buffer is read and the rank
/// whose buffer is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub exec: usize,
    pub src: usize,
    pub dst: usize,
}

impl Test {
    pub const ALL: [Test; 10] = [
        Test::ReadCe,
        Test::WriteCe,
        Test::BidirReadCe,
        Test::BidirWriteCe,
        Test::ReadSm,
        Test::WriteSm,
        Test::BidirReadSm,
        Test::BidirWriteSm,
        Test::LocalCopy,
        Test::Latency,
    ];

    /// nvbandwidth's name of the testcase (the record's `variant`).
    pub fn name(self) -> &'static str {
        match self {
            Test::ReadCe => "device_to_device_memcpy_read_ce",
            Test::WriteCe => "device_to_device_memcpy_write_ce",
            Test::BidirReadCe => "device_to_device_bidirectional_memcpy_read_ce",
            Test::BidirWriteCe => "device_to_device_bidirectional_memcpy_write_ce",
            Test::ReadSm => "device_to_device_memcpy_read_sm",
            Test::WriteSm => "device_to_device_memcpy_write_sm",
            Test::BidirReadSm => "device_to_device_bidirectional_memcpy_read_sm",
            Test::BidirWriteSm => "device_to_device_bidirectional_memcpy_write_sm",
            Test::LocalCopy => "device_local_copy",
            Test::Latency => "device_to_device_latency_sm",
        }
    }

    pub fn engine(self) -> Engine {
        match self {
            Test::ReadCe | Test::WriteCe | Test::BidirReadCe | Test::BidirWriteCe => Engine::Ce,
            Test::LocalCopy => Engine::Ce,
            _ => Engine::Sm,
        }
    }

    pub fn is_bidirectional(self) -> bool {
        matches!(
            self,
            Test::BidirReadCe | Test::BidirWriteCe | Test::BidirReadSm | Test::BidirWriteSm
        )
    }

    /// The copies of cell (row, col), in nvbandwidth's order (`read1`/`write1` first).
    pub fn transfers(self, row: usize, col: usize) -> Vec<Transfer> {
        let t = |exec, src, dst| Transfer { exec, src, dst };
        match self {
            Test::ReadCe | Test::ReadSm | Test::Latency => vec![t(row, col, row)],
            Test::WriteCe | Test::WriteSm => vec![t(row, row, col)],
            Test::LocalCopy => vec![t(row, row, row)],
            // Each GPU reads the other's buffer into its own.
            Test::BidirReadCe | Test::BidirReadSm => vec![t(row, col, row), t(col, row, col)],
            // Each GPU writes its buffer into the other's (write1 is issued by the column GPU).
            Test::BidirWriteCe | Test::BidirWriteSm => vec![t(col, col, row), t(row, row, col)],
        }
    }

    /// The cells measured with `world` GPUs, row-major.
    pub fn cells(self, world: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for row in 0..world {
            for col in 0..world {
                let keep = match self {
                    Test::LocalCopy => row == col,
                    Test::Latency => true,
                    _ => row != col,
                };
                if keep {
                    out.push((row, col));
                }
            }
        }
        out
    }

    /// The names of the parts of a bidirectional cell (nvbandwidth's matrix suffixes).
    pub fn parts(self) -> [&'static str; 2] {
        match self {
            Test::BidirReadCe | Test::BidirReadSm => ["read1", "read2"],
            _ => ["write1", "write2"],
        }
    }

    /// nvbandwidth's title of the matrix.
    pub fn title(self) -> &'static str {
        match self {
            Test::ReadCe => "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
            Test::WriteCe => "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
            Test::BidirReadCe | Test::BidirWriteCe => {
                "memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)"
            }
            Test::ReadSm => "memcpy SM GPU(row) -> GPU(column) bandwidth (GB/s)",
            Test::WriteSm => "memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)",
            Test::BidirReadSm | Test::BidirWriteSm => {
                "memcpy SM GPU(row) <-> GPU(column) bandwidth (GB/s)"
            }
            Test::LocalCopy => "memcpy local GPU(column) bandwidth (GB/s)",
            Test::Latency => "Device to Device Latency SM GPU(row) <-> GPU(column) (ns)",
        }
    }

    /// What moves where, in this tool's words.
    pub fn meaning(self) -> &'static str {
        match self {
            Test::ReadCe | Test::ReadSm => {
                "row GPU copies the column GPU's buffer into its own (data column -> row)"
            }
            Test::WriteCe | Test::WriteSm => {
                "row GPU copies its buffer into the column GPU's (data row -> column)"
            }
            Test::BidirReadCe | Test::BidirReadSm => {
                "both GPUs read the other's buffer at once; total = read1 + read2"
            }
            Test::BidirWriteCe | Test::BidirWriteSm => {
                "both GPUs write into the other's buffer at once; total = write1 + write2"
            }
            Test::LocalCopy => "copy engine, between two buffers of one GPU",
            Test::Latency => {
                "row GPU chases pointers in the column GPU's memory; ns per dependent load"
            }
        }
    }
}

/// Parses `--nvbw`: testcase names, or `all`.
pub fn parse_tests(list: &[String]) -> Result<Vec<Test>, String> {
    let mut out: Vec<Test> = Vec::new();
    for v in list {
        let v = v.trim().to_ascii_lowercase();
        if v.is_empty() {
            continue;
        }
        if v == "all" {
            for t in Test::ALL {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
            continue;
        }
        match Test::ALL.iter().find(|t| t.name() == v) {
            Some(t) if !out.contains(t) => out.push(*t),
            Some(_) => {}
            None => {
                return Err(format!(
                    "unknown --nvbw testcase {v:?}: use all or nvbandwidth's names, e.g. \
                     device_to_device_memcpy_read_ce, device_local_copy (`efabench ipc --help` lists them)"
                ));
            }
        }
    }
    Ok(out)
}

/// One cell of one test at one size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvbwSpec {
    pub test: Test,
    pub size: u64,
    pub row: usize,
    pub col: usize,
    /// Copies per sample, or loads per latency sample.
    pub iters: u64,
    /// Untimed copies before each sample, or loads of the untimed latency launch.
    pub warmup: u64,
    /// Unique per point: seeds differ between points.
    pub index: u64,
}

/// The latency samples' load count: `LATENCY_LOADS` split over `samples`.
pub fn latency_loads(samples: u64) -> u64 {
    LATENCY_LOADS.div_ceil(samples.max(1))
}

/// The points of `tests` for `world` GPUs: test by test, size by size, cells row-major.
pub fn specs(
    tests: &[Test],
    sizes: &[u64],
    world: usize,
    iters: Option<u64>,
    warmup: u64,
    samples: u64,
    first_index: u64,
) -> Vec<NvbwSpec> {
    let mut out = Vec::new();
    let mut index = first_index;
    for &test in tests {
        let (sizes, iters, warmup): (Vec<u64>, u64, u64) = if test == Test::Latency {
            (
                vec![LATENCY_BYTES],
                latency_loads(samples),
                LATENCY_BYTES / CHASE_NODE / LATENCY_STRIDE,
            )
        } else {
            (sizes.to_vec(), iters.unwrap_or(LOOP_COUNT), warmup)
        };
        for &size in &sizes {
            for (row, col) in test.cells(world) {
                index += 1;
                out.push(NvbwSpec {
                    test,
                    size,
                    row,
                    col,
                    iters,
                    warmup,
                    index,
                });
            }
        }
    }
    out
}

/// Rank `owner`'s source or receive buffer as this rank addresses it.
fn mem<'a>(r: &'a Rank, me: usize, owner: usize, recv: bool) -> Result<Mem<'a>, GpuError> {
    Ok(match (owner == me, recv) {
        (true, true) => Mem::Local(&r.recv),
        (true, false) => Mem::Local(&r.src),
        (false, true) => Mem::Peer(peer(&r.peer_recv, owner)?),
        (false, false) => Mem::Peer(peer(&r.peer_src, owner)?),
    })
}

fn copy(r: &Rank, engine: Engine, dst: Mem, src: Mem, len: usize) -> Result<(), GpuError> {
    match engine {
        Engine::Ce => IpcKernels::memcpy(&r.stream, dst, src, len),
        Engine::Sm => r.kernels.sm_copy(
            &r.stream,
            Shape {
                grid: r.gpu.sm_count.max(1),
                block: SM_BLOCK,
            },
            dst,
            src,
            len,
        ),
    }
}

/// Runs one cell on this rank (all ranks call it in step). `samples_ns` holds whole samples.
pub(super) fn measure(
    r: &mut Rank,
    bs: &Bootstrap,
    s: &NvbwSpec,
    samples: u64,
    verify: bool,
) -> Result<Measured, BenchError> {
    if s.test == Test::Latency {
        return measure_latency(r, bs, s, samples, verify);
    }
    let me = bs.rank() as usize;
    let len = s.size as usize;
    let ts = s.test.transfers(s.row, s.col);
    let mine = ts.iter().find(|t| t.exec == me).copied();
    let receiver = ts.iter().any(|t| t.dst == me);
    let base = s.index << 24;
    let mut out = Measured::default();
    if receiver {
        r.counter.reset()?;
    }
    let events = (Event::new(&r.gpu)?, Event::new(&r.gpu)?);
    for k in 0..samples {
        let seeds: Vec<u64> = ts
            .iter()
            .enumerate()
            .map(|(j, t)| pattern::seed(base + k, t.src as u32, t.dst as u32, j as u32))
            .collect();
        for (j, t) in ts.iter().enumerate() {
            if t.src == me {
                fill(&r.stream, &r.src, len, seeds[j])?;
            }
            if t.dst == me {
                let poison = pattern::seed(base + k, t.src as u32, t.dst as u32, POISON_SLOT);
                fill(&r.stream, &r.recv, len, poison)?;
            }
        }
        r.stream.synchronize()?;
        bs.barrier()?;
        if let Some(t) = mine {
            let src = mem(r, me, t.src, false)?;
            let dst = mem(r, me, t.dst, true)?;
            for _ in 0..s.warmup {
                copy(r, s.test.engine(), dst, src, len)?;
            }
            events.0.record(&r.stream)?;
            for _ in 0..s.iters {
                copy(r, s.test.engine(), dst, src, len)?;
            }
            events.1.record(&r.stream)?;
            events.1.synchronize()?;
            let ms = events.0.elapsed_ms(&events.1)?;
            out.samples_ns.push((ms * 1e6).round().max(1.0) as u64);
        }
        // Every copy of the sample is done before anyone checks or refills.
        bs.barrier()?;
        if verify {
            for (j, t) in ts.iter().enumerate() {
                if t.dst == me {
                    count_mismatches(&r.stream, &r.recv, len, seeds[j], &r.counter)?;
                }
            }
        }
        r.stream.synchronize()?;
    }
    if receiver && verify {
        out.errors = r.counter.read()?;
    }
    Ok(out)
}

fn measure_latency(
    r: &mut Rank,
    bs: &Bootstrap,
    s: &NvbwSpec,
    samples: u64,
    verify: bool,
) -> Result<Measured, BenchError> {
    let me = bs.rank() as usize;
    let nodes = s.size / CHASE_NODE;
    let mut out = Measured::default();
    bs.barrier()?;
    if me == s.row {
        let list = mem(r, me, s.col, true)?;
        r.kernels
            .chase_init(&r.stream, list, nodes, LATENCY_STRIDE)?;
        r.stream.synchronize()?;
        // One untimed pass over the cycle brings the list into the caches it fits.
        r.kernels
            .chase(&r.stream, list, nodes, s.warmup, 0, &r.counter)?;
        r.stream.synchronize()?;
        let start = Event::new(&r.gpu)?;
        let end = Event::new(&r.gpu)?;
        let expect = list.ptr() + chase_end(nodes, LATENCY_STRIDE, s.iters) * CHASE_NODE;
        let sms = r.gpu.sm_count.max(1);
        for k in 0..samples {
            start.record(&r.stream)?;
            r.kernels.chase(
                &r.stream,
                list,
                nodes,
                s.iters,
                (k % u64::from(sms)) as u32,
                &r.counter,
            )?;
            end.record(&r.stream)?;
            end.synchronize()?;
            let ms = start.elapsed_ms(&end)?;
            out.samples_ns.push((ms * 1e6).round().max(1.0) as u64);
            if verify && r.counter.read()? != expect {
                out.errors += 1;
            }
        }
    }
    bs.barrier()?;
    Ok(out)
}

/// The record fields of one cell (rank 0; `all` indexed by rank). `link_gbps` is the NVLink
/// speed of the pair per direction, when known.
pub fn point(s: &NvbwSpec, all: &[Measured], samples: u64, link_gbps: Option<f64>) -> Point {
    let mut d = NvbwDetail {
        suite: "nvbandwidth".into(),
        row: s.row,
        col: s.col,
        samples,
        meaning: s.test.meaning().into(),
        src: s.col,
        dst: s.row,
        lat_ns: None,
        lat_kind: None,
        bw_gbytes: None,
        engine: None,
        bw1_gbytes: None,
        bw2_gbytes: None,
        parts: None,
        timing: String::new(),
        check: String::new(),
    };
    let empty = Measured::default();
    let of = |rank: usize| all.get(rank).unwrap_or(&empty);
    if s.test == Test::Latency {
        let mut smp = Samples::from_vec(of(s.row).samples_ns.clone());
        let lat = smp.summary_us(s.iters.max(1) as f64);
        d.lat_ns = Some(lat.p50 * 1e3);
        d.lat_kind = Some("per dependent load".into());
        d.timing = "CUDA events around each launch of one chasing thread; latency = time / loads, median launch".into();
        d.check = "every launch must stop on the node the list predicts".into();
        return Point {
            variant: s.test.name().into(),
            size_bytes: s.size,
            iters: s.iters,
            warmup: s.warmup,
            peer: Some(s.col as u32),
            lat_us: lat,
            bw_gbps: 0.0,
            msg_rate_mops: if lat.p50 > 0.0 { 1.0 / lat.p50 } else { 0.0 },
            extra: fields(&d),
            ..Point::default()
        };
    }
    let ts = s.test.transfers(s.row, s.col);
    let mut parts = Vec::new();
    let mut first = None;
    for t in &ts {
        let mut smp = Samples::from_vec(of(t.exec).samples_ns.clone());
        let lat = smp.summary_us(s.iters.max(1) as f64);
        // bytes / ns = GB/s
        let gbs = if lat.p50 > 0.0 {
            s.size as f64 / (lat.p50 * 1e3)
        } else {
            0.0
        };
        parts.push(gbs);
        first.get_or_insert(lat);
    }
    let lat = first.unwrap_or_default();
    let total: f64 = parts.iter().sum();
    let (src, dst) = match ts.as_slice() {
        [t] => (t.src, t.dst),
        _ => (s.row, s.col),
    };
    d.src = src;
    d.dst = dst;
    d.bw_gbytes = Some(total);
    d.engine = Some(
        match s.test.engine() {
            Engine::Ce => "copy-engine",
            Engine::Sm => "sm",
        }
        .into(),
    );
    if s.test.is_bidirectional() {
        d.bw1_gbytes = Some(parts[0]);
        d.bw2_gbytes = Some(parts.get(1).copied().unwrap_or(0.0));
        d.parts = Some(s.test.parts().map(String::from).to_vec());
    }
    d.timing = "CUDA events around each sample of back-to-back copies on the issuing GPU's stream; bw = size x iters / median sample; bidirectional: sum of the two copies' bandwidths".into();
    d.check = "per sample: source filled with a new seed, destination poisoned, every word checked after the sample".into();
    let link = if s.row == s.col {
        None
    } else if s.test.is_bidirectional() {
        link_gbps.map(|l| 2.0 * l)
    } else {
        link_gbps
    };
    Point {
        variant: s.test.name().into(),
        size_bytes: s.size,
        iters: s.iters,
        warmup: s.warmup,
        peer: Some(s.col as u32),
        lat_us: lat,
        bw_gbps: total * 8.0,
        msg_rate_mops: if lat.p50 > 0.0 { 1.0 / lat.p50 } else { 0.0 },
        link_gbps: link,
        extra: fields(&d),
        ..Point::default()
    }
}

/// The record fields of one nvbandwidth cell, beyond the common ones. Latency cells carry
/// `lat_ns`/`lat_kind`; bandwidth cells `bw_GBps`/`engine`, and bidirectional ones each copy's
/// bandwidth (`bw1_GBps`, `bw2_GBps`) and names (`parts`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvbwDetail {
    /// Always `nvbandwidth`: marks these records apart from the sweep's.
    pub suite: String,
    /// nvbandwidth's matrix cell (row, column GPU ranks).
    pub row: usize,
    pub col: usize,
    pub samples: u64,
    pub meaning: String,
    /// Where the data comes from and goes to.
    pub src: usize,
    pub dst: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_kind: Option<String>,
    #[serde(rename = "bw_GBps", default, skip_serializing_if = "Option::is_none")]
    pub bw_gbytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(rename = "bw1_GBps", default, skip_serializing_if = "Option::is_none")]
    pub bw1_gbytes: Option<f64>,
    #[serde(rename = "bw2_GBps", default, skip_serializing_if = "Option::is_none")]
    pub bw2_gbytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<String>>,
    pub timing: String,
    pub check: String,
}

/// The nvbandwidth fields of a record, or `None` for another record.
pub fn detail(r: &Record) -> Option<NvbwDetail> {
    read::<NvbwDetail>(r).filter(|d| d.suite == "nvbandwidth")
}

/// nvbandwidth-style matrices of the `--nvbw` records: one per test (three for a bidirectional
/// test: part 1, part 2, total) at the test's largest size; `N/A` where a cell was not measured.
pub fn matrix_lines(records: &[Record]) -> Vec<String> {
    let nv: Vec<(&Record, NvbwDetail)> = records
        .iter()
        .filter_map(|r| Some((r, detail(r)?)))
        .collect();
    let world = records.first().map_or(0, |r| r.world as usize);
    let mut lines = Vec::new();
    for test in Test::ALL {
        let cells: Vec<&(&Record, NvbwDetail)> = nv
            .iter()
            .filter(|(r, _)| r.variant == test.name())
            .collect();
        let Some(size) = cells.iter().map(|(r, _)| r.size_bytes).max() else {
            continue;
        };
        let at = |row: usize, col: usize| {
            cells
                .iter()
                .find(|(r, d)| r.size_bytes == size && d.row == row && d.col == col)
        };
        // (suffix, record field) of each matrix of the test.
        type Field = fn(&NvbwDetail) -> Option<f64>;
        let tables: Vec<(String, Field)> = if test == Test::Latency {
            vec![(String::new(), |d| d.lat_ns)]
        } else if test.is_bidirectional() {
            let [p1, p2] = test.parts();
            vec![
                (format!(" {p1}"), |d| d.bw1_gbytes),
                (format!(" {p2}"), |d| d.bw2_gbytes),
                (" total".into(), |d| d.bw_gbytes),
            ]
        } else {
            vec![(String::new(), |d| d.bw_gbytes)]
        };
        for (part, key) in &tables {
            lines.push(format!(
                "# {}{part}: {} at {size} B; {}",
                test.name(),
                test.title(),
                test.meaning()
            ));
            let head: String = (0..world).map(|c| format!("{c:>10}")).collect();
            lines.push(format!("# {:>4}{head}", ""));
            let rows: Vec<usize> = if test == Test::LocalCopy {
                vec![0]
            } else {
                (0..world).collect()
            };
            for row in rows {
                let cols: String = (0..world)
                    .map(|col| {
                        let cell = if test == Test::LocalCopy {
                            at(col, col)
                        } else {
                            at(row, col)
                        };
                        cell.and_then(|(_, d)| key(d))
                            .map_or(format!("{:>10}", "N/A"), |v| format!("{v:>10.2}"))
                    })
                    .collect();
                lines.push(format!("# {row:>4}{cols}"));
            }
            // nvbandwidth's closing line: the sum of the matrix's cells.
            let sum: f64 = cells
                .iter()
                .filter(|(r, _)| r.size_bytes == size)
                .filter_map(|(_, d)| key(d))
                .sum();
            lines.push(format!(
                "# SUM {}{} {sum:.2}",
                test.name(),
                part.replace(' ', "_")
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_parse_and_all_expands_in_order() {
        let all = parse_tests(&["all".into()]).unwrap();
        assert_eq!(all, Test::ALL.to_vec());
        let two = parse_tests(&[
            "device_to_device_latency_sm".into(),
            " DEVICE_LOCAL_COPY ".into(),
            "device_local_copy".into(),
        ])
        .unwrap();
        assert_eq!(two, vec![Test::Latency, Test::LocalCopy]);
        let e = parse_tests(&["device_to_device_memcpy_read".into()]).unwrap_err();
        assert!(e.contains("device_to_device_memcpy_read_ce"), "{e}");
        assert!(e.len() < 300, "{e}");
        assert!(e.contains("--nvbw"), "{e}");
        assert!(parse_tests(&[]).unwrap().is_empty());
        for t in Test::ALL {
            assert_eq!(parse_tests(&[t.name().into()]).unwrap(), vec![t]);
        }
    }

    #[test]
    fn transfers_follow_nvbandwidth_contexts() {
        let tr = |exec, src, dst| Transfer { exec, src, dst };
        // read: the row GPU pulls the column's buffer into its own.
        assert_eq!(Test::ReadCe.transfers(0, 1), vec![tr(0, 1, 0)]);
        assert_eq!(Test::ReadSm.transfers(1, 0), vec![tr(1, 0, 1)]);
        // write: the row GPU pushes its buffer into the column's.
        assert_eq!(Test::WriteCe.transfers(0, 1), vec![tr(0, 0, 1)]);
        assert_eq!(Test::WriteSm.transfers(2, 3), vec![tr(2, 2, 3)]);
        // bidirectional: one copy issued by each GPU, each GPU's buffers used once each way.
        for t in [
            Test::BidirReadCe,
            Test::BidirWriteCe,
            Test::BidirReadSm,
            Test::BidirWriteSm,
        ] {
            let v = t.transfers(0, 1);
            assert_eq!(v.len(), 2, "{t:?}");
            assert_ne!(v[0].exec, v[1].exec, "{t:?}");
            assert_ne!(v[0].dst, v[1].dst, "{t:?}");
            assert_ne!(v[0].src, v[1].src, "{t:?}");
            for x in &v {
                assert_ne!(x.src, x.dst, "{t:?}");
            }
        }
        assert_eq!(
            Test::BidirReadCe.transfers(0, 1),
            vec![tr(0, 1, 0), tr(1, 0, 1)]
        );
        assert_eq!(
            Test::BidirWriteSm.transfers(0, 1),
            vec![tr(1, 1, 0), tr(0, 0, 1)]
        );
        assert_eq!(Test::LocalCopy.transfers(3, 3), vec![tr(3, 3, 3)]);
        assert_eq!(Test::Latency.transfers(0, 1), vec![tr(0, 1, 0)]);
    }

    #[test]
    fn cells_per_test_and_world() {
        assert_eq!(Test::ReadCe.cells(2), vec![(0, 1), (1, 0)]);
        assert_eq!(Test::ReadCe.cells(4).len(), 12);
        assert!(Test::WriteSm.cells(1).is_empty());
        assert_eq!(Test::LocalCopy.cells(3), vec![(0, 0), (1, 1), (2, 2)]);
        assert_eq!(Test::Latency.cells(1), vec![(0, 0)]);
        assert_eq!(Test::Latency.cells(2).len(), 4);
        // One GPU: only the local copy and the local latency have cells.
        let one: Vec<Test> = Test::ALL
            .into_iter()
            .filter(|t| !t.cells(1).is_empty())
            .collect();
        assert_eq!(one, vec![Test::LocalCopy, Test::Latency]);
    }

    #[test]
    fn specs_cover_every_test_size_and_cell_with_unique_indices() {
        let s = specs(
            &[Test::BidirWriteCe, Test::Latency],
            &[1 << 20, 512 << 20],
            2,
            None,
            4,
            5,
            100,
        );
        // 2 sizes x 2 cells, then latency: 1 size x 4 cells.
        assert_eq!(s.len(), 8);
        assert!(s[..4]
            .iter()
            .all(|x| x.iters == LOOP_COUNT && x.warmup == 4));
        assert_eq!(s[4].size, LATENCY_BYTES);
        assert_eq!(s[4].iters, 200_000);
        assert_eq!(s[4].warmup, 16384);
        let mut idx: Vec<u64> = s.iter().map(|x| x.index).collect();
        idx.dedup();
        assert_eq!(idx, (101..=108).collect::<Vec<_>>());
        assert_eq!(
            specs(&[Test::ReadCe], &[4096], 2, Some(3), 0, 3, 0)[0].iters,
            3
        );
        assert_eq!(latency_loads(3), 333_334);
    }

    fn measured(ns: &[u64]) -> Measured {
        Measured {
            samples_ns: ns.to_vec(),
            ..Measured::default()
        }
    }

    #[test]
    fn bidirectional_bandwidth_is_the_sum_of_each_sides_median() {
        let s = NvbwSpec {
            test: Test::BidirReadCe,
            size: 1 << 30,
            row: 0,
            col: 1,
            iters: 16,
            warmup: 4,
            index: 1,
        };
        // Rank 0: 16 copies of 1 GiB in 64 ms (median) = 268.4 GB/s; rank 1 in 80 ms.
        let all = [
            measured(&[70_000_000, 64_000_000, 60_000_000]),
            measured(&[80_000_000, 80_000_000, 90_000_000]),
        ];
        let p = point(&s, &all, 3, Some(3600.0));
        let one = (1u64 << 30) as f64 * 16.0 / 64e6;
        let two = (1u64 << 30) as f64 * 16.0 / 80e6;
        let b1 = p.extra["bw1_GBps"].as_f64().unwrap();
        let b2 = p.extra["bw2_GBps"].as_f64().unwrap();
        assert!((b1 - one).abs() < 1e-6 * one, "{b1} {one}");
        assert!((b2 - two).abs() < 1e-6 * two, "{b2} {two}");
        assert!((p.bw_gbps - (one + two) * 8.0).abs() < 1e-6 * p.bw_gbps);
        assert_eq!(p.extra["parts"], json!(["read1", "read2"]));
        assert_eq!(p.link_gbps, Some(7200.0), "both directions of the link");
        assert_eq!(p.variant, "device_to_device_bidirectional_memcpy_read_ce");
        // Per-copy latency of the first side: 64 ms / 16.
        assert!((p.lat_us.p50 - 4000.0).abs() < 1e-9, "{}", p.lat_us.p50);

        let u = NvbwSpec {
            test: Test::ReadSm,
            ..s
        };
        let p = point(&u, &all, 3, Some(3600.0));
        assert!((p.bw_gbps - one * 8.0).abs() < 1e-6 * p.bw_gbps);
        assert_eq!(p.extra["src"], json!(1), "read: data from the column GPU");
        assert_eq!(p.extra["dst"], json!(0));
        assert_eq!(p.link_gbps, Some(3600.0));
        assert!(p.extra.get("bw1_GBps").is_none());
    }

    #[test]
    fn records_keep_their_golden_keys_and_read_back_typed() {
        let run = crate::ipc::tests::test_run(Some(3600.0));
        let mk = |test: Test| {
            let s = NvbwSpec {
                test,
                size: 1 << 20,
                row: 0,
                col: 1,
                iters: 16,
                warmup: 4,
                index: 1,
            };
            let all = [measured(&[1_000_000]), measured(&[2_000_000])];
            crate::ipc::tests::harness_record(&run, point(&s, &all, 1, Some(3600.0)))
        };
        let recs: Vec<Record> = [Test::Latency, Test::WriteCe, Test::BidirReadSm]
            .into_iter()
            .map(mk)
            .collect();
        crate::ipc::tests::assert_golden(
            &recs,
            include_str!("../../../efabench/tests/golden/ipc-nvbw.keys"),
        );
        let lat = detail(&recs[0]).expect("typed");
        assert!(lat.lat_ns.is_some() && lat.bw_gbytes.is_none());
        let bi = detail(&recs[2]).expect("typed");
        assert_eq!(
            bi.parts,
            Some(vec!["read1".to_string(), "read2".to_string()])
        );
        assert!(recs.iter().all(|r| super::super::sweep_detail(r).is_none()));
    }

    #[test]
    fn latency_is_time_per_dependent_load() {
        let s = NvbwSpec {
            test: Test::Latency,
            size: LATENCY_BYTES,
            row: 1,
            col: 0,
            iters: 200_000,
            warmup: 16384,
            index: 9,
        };
        // 200,000 loads in 150 ms = 750 ns each (median of three launches).
        let all = [
            Measured::default(),
            measured(&[150_000_000, 149_000_000, 170_000_000]),
        ];
        let p = point(&s, &all, 3, None);
        let ns = p.extra["lat_ns"].as_f64().unwrap();
        assert!((ns - 750.0).abs() < 1e-6, "{ns}");
        assert_eq!(p.bw_gbps, 0.0);
        assert_eq!(p.extra["src"], json!(0), "the list lives on the column GPU");
        assert_eq!(p.extra["dst"], json!(1));
    }

    #[test]
    fn matrices_print_like_nvbandwidth() {
        let run = crate::ipc::tests::test_run(None);
        let mk = |test: Test, size: u64, row: usize, col: usize, ns: u64| {
            let s = NvbwSpec {
                test,
                size,
                row,
                col,
                iters: 16,
                warmup: 4,
                index: 1,
            };
            let mut all = vec![Measured::default(), Measured::default()];
            for t in test.transfers(row, col) {
                all[t.exec] = measured(&[ns]);
            }
            run.record(point(&s, &all, 1, None))
        };
        let recs = vec![
            mk(Test::WriteCe, 1 << 20, 0, 1, 1_000_000),
            mk(Test::WriteCe, 1 << 30, 0, 1, 64_000_000),
            mk(Test::WriteCe, 1 << 30, 1, 0, 128_000_000),
            mk(Test::BidirWriteCe, 1 << 30, 0, 1, 64_000_000),
            mk(Test::LocalCopy, 1 << 30, 1, 1, 32_000_000),
        ];
        let lines = matrix_lines(&recs);
        let text = lines.join("\n");
        assert!(
            lines[0].starts_with("# device_to_device_memcpy_write_ce: memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s) at 1073741824 B"),
            "{text}"
        );
        // Largest size only; diagonal and missing cells are N/A.
        let gb = |ms: f64| format!("{:.2}", (1u64 << 30) as f64 * 16.0 / (ms * 1e6));
        assert!(
            lines[2].contains("N/A") && lines[2].contains(&gb(64.0)),
            "{text}"
        );
        assert!(lines[3].contains(&gb(128.0)), "{text}");
        // Bidirectional: write1, write2, total.
        assert!(text.contains("device_to_device_bidirectional_memcpy_write_ce write1:"));
        assert!(text.contains("device_to_device_bidirectional_memcpy_write_ce total:"));
        let total = format!("{:.2}", 2.0 * (1u64 << 30) as f64 * 16.0 / 64e6);
        assert!(text.contains(&total), "{text}");
        // Local copy: one row, the GPU's own column.
        let local = lines
            .iter()
            .position(|l| l.starts_with("# device_local_copy"))
            .unwrap();
        assert!(lines[local + 2].contains("N/A"), "{text}");
        assert!(lines[local + 2].contains(&gb(32.0)), "{text}");
        assert_eq!(lines.len(), 5 + 3 * 5 + 4, "{text}");
        let sum = format!(
            "{:.2}",
            (1u64 << 30) as f64 * 16.0 * (1.0 / 64e6 + 1.0 / 128e6)
        );
        assert!(
            text.contains(&format!("# SUM device_to_device_memcpy_write_ce {sum}")),
            "{text}"
        );
        assert!(text.contains("# SUM device_to_device_bidirectional_memcpy_write_ce_total "));
    }
}
