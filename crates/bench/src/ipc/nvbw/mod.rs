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
//!
//! `mod.rs` holds the testcases, their cells and their measurement; `report.rs` the record of a
//! cell and nvbandwidth's matrices.

mod report;

pub use report::{detail, matrix_lines, point, NvbwDetail};

use super::{peer, Rank, POISON_SLOT};
use crate::harness::{Clock, Ctx, DeviceRounds, Loop, Measured};
use crate::pattern;
use crate::BenchError;
use efabench_bootstrap::Bootstrap;
use efabench_gpu::buffer::{count_mismatches, fill};
use efabench_gpu::ipc::{chase_end, IpcKernels, Mem, CHASE_NODE};
use efabench_gpu::{Event, GpuError, Shape};

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

/// One entry of `--nvbw`: a testcase, or all ten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    All,
    One(Test),
}

/// The entry as `--nvbw` writes it.
impl std::fmt::Display for Pick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pick::All => f.write_str("all"),
            Pick::One(t) => f.write_str(t.name()),
        }
    }
}

/// Parses one `--nvbw` entry (clap's value parser): a testcase's name, or `all`.
pub fn pick_arg(s: &str) -> Result<Pick, String> {
    let v = s.trim().to_ascii_lowercase();
    if v == "all" {
        return Ok(Pick::All);
    }
    Test::ALL
        .iter()
        .find(|t| t.name() == v)
        .map(|t| Pick::One(*t))
        .ok_or_else(|| {
            format!(
                "--nvbw {:?} is not an nvbandwidth testcase: use all or names from `efabench ipc --help`, \
                 e.g. device_to_device_memcpy_read_ce",
                crate::size::clip(&v)
            )
        })
}

/// The testcases of `--nvbw`, each once, in the order given (`all`: nvbandwidth's order).
pub fn tests(picks: &[Pick]) -> Vec<Test> {
    let mut out: Vec<Test> = Vec::new();
    for p in picks {
        let more: &[Test] = match p {
            Pick::All => &Test::ALL,
            Pick::One(t) => std::slice::from_ref(t),
        };
        for t in more {
            if !out.contains(t) {
                out.push(*t);
            }
        }
    }
    out
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

/// One bandwidth cell on this rank: an iteration is one sample. Untimed before it, the source
/// owners fill and the destination owners poison, then a barrier; the issuing rank queues
/// `warmup` copies, a start event, `iters` copies and an end event, and waits for the end; a
/// barrier after it, then the destination owners check every word.
struct Cell<'a> {
    r: &'a Rank,
    bs: &'a Bootstrap,
    s: &'a NvbwSpec,
    me: usize,
    ts: Vec<Transfer>,
    /// The copy this rank issues, if any.
    mine: Option<Transfer>,
    verify: bool,
    /// Each transfer's pattern seed of the current sample.
    seeds: Vec<u64>,
    events: (Event, Event),
}

impl DeviceRounds for Cell<'_> {
    fn prepare(&mut self, k: u64) -> Result<(), BenchError> {
        let (r, me, len) = (self.r, self.me, self.s.size as usize);
        let base = self.s.index << 24;
        self.seeds.clear();
        self.seeds.extend(
            self.ts
                .iter()
                .enumerate()
                .map(|(j, t)| pattern::seed(base + k, t.src as u32, t.dst as u32, j as u32)),
        );
        for (j, t) in self.ts.iter().enumerate() {
            if t.src == me {
                fill(&r.stream, &r.src, len, self.seeds[j])?;
            }
            if t.dst == me {
                let poison = pattern::seed(base + k, t.src as u32, t.dst as u32, POISON_SLOT);
                fill(&r.stream, &r.recv, len, poison)?;
            }
        }
        r.stream.synchronize()?;
        self.bs.barrier()?;
        Ok(())
    }

    fn run(&mut self, _k: u64) -> Result<Option<u64>, BenchError> {
        let Some(t) = self.mine else { return Ok(None) };
        let (r, me, s) = (self.r, self.me, self.s);
        let len = s.size as usize;
        let src = mem(r, me, t.src, false)?;
        let dst = mem(r, me, t.dst, true)?;
        for _ in 0..s.warmup {
            copy(r, s.test.engine(), dst, src, len)?;
        }
        self.events.0.record(&r.stream)?;
        for _ in 0..s.iters {
            copy(r, s.test.engine(), dst, src, len)?;
        }
        self.events.1.record(&r.stream)?;
        self.events.1.synchronize()?;
        let ms = self.events.0.elapsed_ms(&self.events.1)?;
        Ok(Some((ms * 1e6).round().max(1.0) as u64))
    }

    fn check(&mut self, _k: u64) -> Result<u64, BenchError> {
        let (r, len) = (self.r, self.s.size as usize);
        // Every copy of the sample is done before anyone checks or refills.
        self.bs.barrier()?;
        if self.verify {
            for (j, t) in self.ts.iter().enumerate() {
                if t.dst == self.me {
                    count_mismatches(&r.stream, &r.recv, len, self.seeds[j], &r.counter)?;
                }
            }
        }
        r.stream.synchronize()?;
        // The mismatches add up on the GPU; the count is read once, after the last sample.
        Ok(0)
    }
}

/// Runs one cell on this rank (all ranks call it in step). `samples_ns` holds whole samples.
pub(super) fn measure(
    r: &mut Rank,
    ctx: &Ctx,
    s: &NvbwSpec,
    samples: u64,
    verify: bool,
) -> Result<Measured, BenchError> {
    if s.test == Test::Latency {
        return measure_latency(r, ctx, s, samples, verify);
    }
    let me = ctx.bs.rank() as usize;
    let ts = s.test.transfers(s.row, s.col);
    let mine = ts.iter().find(|t| t.exec == me).copied();
    let receiver = ts.iter().any(|t| t.dst == me);
    if receiver {
        r.counter.reset()?;
    }
    let lp = Loop {
        warmup: 0,
        iters: samples,
        timed: mine.is_some(),
        clock: Clock::Iteration,
    };
    let mut cell = Cell {
        r,
        bs: ctx.bs,
        s,
        me,
        seeds: Vec::with_capacity(ts.len()),
        ts,
        mine,
        verify,
        events: (Event::new(&r.gpu)?, Event::new(&r.gpu)?),
    };
    let mut out = ctx.run_device_rounds(lp, &mut cell)?;
    if receiver && verify {
        out.errors = r.counter.read()?;
    }
    Ok(out)
}

/// One latency cell on the row rank: a warm-up iteration writes the list and follows it once
/// (untimed, so that the list is in the caches it fits), then one chase per sample between two
/// CUDA events, each on another SM, checked for the node it must stop on.
struct Chase<'a> {
    r: &'a Rank,
    s: &'a NvbwSpec,
    list: Mem<'a>,
    nodes: u64,
    /// The address the timed chases stop on.
    expect: u64,
    sms: u32,
    verify: bool,
    events: (Event, Event),
}

impl DeviceRounds for Chase<'_> {
    fn run(&mut self, i: u64) -> Result<Option<u64>, BenchError> {
        let (r, list, nodes) = (self.r, self.list, self.nodes);
        if i == 0 {
            r.kernels
                .chase_init(&r.stream, list, nodes, LATENCY_STRIDE)?;
            r.stream.synchronize()?;
            r.kernels
                .chase(&r.stream, list, nodes, self.s.warmup, 0, &r.counter)?;
            r.stream.synchronize()?;
            return Ok(None);
        }
        let k = i - 1;
        self.events.0.record(&r.stream)?;
        r.kernels.chase(
            &r.stream,
            list,
            nodes,
            self.s.iters,
            (k % u64::from(self.sms)) as u32,
            &r.counter,
        )?;
        self.events.1.record(&r.stream)?;
        self.events.1.synchronize()?;
        let ms = self.events.0.elapsed_ms(&self.events.1)?;
        Ok(Some((ms * 1e6).round().max(1.0) as u64))
    }

    fn check(&mut self, i: u64) -> Result<u64, BenchError> {
        let stopped_right = i == 0 || !self.verify || self.r.counter.read()? == self.expect;
        Ok(u64::from(!stopped_right))
    }
}

fn measure_latency(
    r: &mut Rank,
    ctx: &Ctx,
    s: &NvbwSpec,
    samples: u64,
    verify: bool,
) -> Result<Measured, BenchError> {
    let bs = ctx.bs;
    let me = bs.rank() as usize;
    let nodes = s.size / CHASE_NODE;
    let mut out = Measured::default();
    bs.barrier()?;
    if me == s.row {
        let r = &*r;
        let list = mem(r, me, s.col, true)?;
        let lp = Loop {
            warmup: 1,
            iters: samples,
            timed: true,
            clock: Clock::Iteration,
        };
        let mut chase = Chase {
            r,
            s,
            list,
            nodes,
            expect: list.ptr() + chase_end(nodes, LATENCY_STRIDE, s.iters) * CHASE_NODE,
            sms: r.gpu.sm_count.max(1),
            verify,
            events: (Event::new(&r.gpu)?, Event::new(&r.gpu)?),
        };
        out = ctx.run_device_rounds(lp, &mut chase)?;
    }
    bs.barrier()?;
    Ok(out)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_all_expands_in_order() {
        assert_eq!(tests(&[pick_arg("all").unwrap()]), Test::ALL.to_vec());
        let picks: Vec<Pick> = [
            "device_to_device_latency_sm",
            " DEVICE_LOCAL_COPY ",
            "device_local_copy",
        ]
        .iter()
        .map(|s| pick_arg(s).unwrap())
        .collect();
        assert_eq!(tests(&picks), vec![Test::Latency, Test::LocalCopy]);
        assert_eq!(picks[1].to_string(), "device_local_copy");
        let e = pick_arg("device_to_device_memcpy_read").unwrap_err();
        assert!(e.contains("device_to_device_memcpy_read_ce"), "{e}");
        assert!(e.len() < 300, "{e}");
        assert!(e.contains("--nvbw"), "{e}");
        assert!(pick_arg("").is_err());
        assert!(pick_arg(&"x".repeat(10_000)).unwrap_err().len() < 300);
        assert!(tests(&[]).is_empty());
        for t in Test::ALL {
            assert_eq!(tests(&[pick_arg(t.name()).unwrap()]), vec![t]);
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
}
