//! The options of `efabench ipc` and what they name: launch shapes (`GxB`, `smxB`), the
//! methods of `--variant` × `--shapes`, the sizes (multiples of 16 bytes) and the default
//! iteration count.

use efabench_gpu::{GpuChoice, Shape};

use super::nvbw;
use crate::harness::{gpu_arg, JobArgs, SweepArgs};
use crate::size::sweep;
use crate::BenchError;

/// Options of `efabench ipc`: the kernels' own, the GPU, the size sweep and the job. It uses
/// no libfabric and places its own device memory, so clap refuses the fabric and memory options.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct IpcArgs {
    /// Timed batches per point; each is bracketed by CUDA events, none by a host sync.
    #[arg(long, default_value = "5", value_parser = samples_arg, allow_hyphen_values = true)]
    pub samples: u64,
    /// Variants, comma-separated: copy-engine (or ce), push, pull, tma [default: all four, or
    /// none when --nvbw is given].
    #[arg(long, value_delimiter = ',', value_enum, ignore_case = true)]
    pub variant: Option<Vec<Variant>>,
    /// Launch shapes of push and pull, GRIDxBLOCK; `smxB` means one block per SM.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1x256,16x256,128x256,smx512",
        value_parser = parse_shape
    )]
    pub shapes: Vec<ShapeSpec>,
    /// Grids of the tma variant (256 threads a block): smK = K blocks per SM, or a block count.
    #[arg(long, value_delimiter = ',', default_value = "sm2", value_parser = tma_grid_arg)]
    pub tma_grids: Vec<Grid>,
    /// Also measure every ordered GPU pair at the largest size (automatic above 2 GPUs).
    #[arg(long)]
    pub matrix: bool,
    /// nvbandwidth's device-to-device testcases, comma-separated, or `all`: every ordered GPU
    /// pair at every size (device_to_device_memcpy_{read,write}_{ce,sm},
    /// device_to_device_bidirectional_memcpy_{read,write}_{ce,sm}, device_local_copy,
    /// device_to_device_latency_sm).
    #[arg(long, value_delimiter = ',', value_parser = nvbw::pick_arg)]
    pub nvbw: Vec<nvbw::Pick>,
    /// This rank's GPU: an index, or auto (= local rank).
    #[arg(long, default_value = "auto", value_parser = gpu_arg)]
    pub gpu: GpuChoice,
    #[command(flatten)]
    pub sweep: SweepArgs,
    #[command(flatten)]
    pub job: JobArgs,
}

crate::impl_options!(IpcArgs: sweep);

/// A kind of copy `--variant` picks; each is measured with its own launch shapes (none for the
/// copy engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    /// `cuMemcpyDtoDAsync`.
    #[value(alias = "ce")]
    CopyEngine,
    /// SM stores into the peer's memory, one per `--shapes` entry.
    Push,
    /// SM loads from the peer's memory, one per `--shapes` entry.
    Pull,
    /// Bulk copies, one per `--tma-grids` entry.
    Tma,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::CopyEngine,
        Variant::Push,
        Variant::Pull,
        Variant::Tma,
    ];

    /// The option's name of the variant.
    pub fn name(self) -> &'static str {
        match self {
            Variant::CopyEngine => "copy-engine",
            Variant::Push => "push",
            Variant::Pull => "pull",
            Variant::Tma => "tma",
        }
    }
}

/// The variants `--variant` selects: the given list, else all four unless `--nvbw` is given.
pub fn variants(args: &IpcArgs) -> Vec<Variant> {
    match &args.variant {
        Some(v) => v.clone(),
        None if args.nvbw.is_empty() => Variant::ALL.to_vec(),
        None => Vec::new(),
    }
}

/// The variants as `--variant` writes them, comma-separated.
pub fn variant_list(variants: &[Variant]) -> String {
    variants
        .iter()
        .map(|v| v.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// Values as an option writes them, comma-separated.
pub fn comma_list<T: std::fmt::Display>(values: &[T]) -> String {
    values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn samples_arg(s: &str) -> Result<u64, String> {
    crate::harness::bounded(s, "--samples", 1, 4096, "5")
}

/// Defaults of the shared options that differ for ipc (applied with clap's `mut_arg`): NVLink
/// needs large messages to reach its peak, and the kernels move 16-byte vectors.
pub const IPC_DEFAULTS: [(&str, &str); 4] = [
    ("min_bytes", "4K"),
    ("max_bytes", "1G"),
    ("warmup", "10"),
    ("timeout", "60"),
];

/// How many blocks: a number, or a multiple of the SM count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grid {
    Blocks(u32),
    PerSm(u32),
}

/// The grid as `--tma-grids` writes it: `sm2`, `132`.
impl std::fmt::Display for Grid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Grid::Blocks(n) => write!(f, "{n}"),
            Grid::PerSm(k) => write!(f, "sm{k}"),
        }
    }
}

/// A launch shape as the user wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeSpec {
    pub grid: Grid,
    pub block: u32,
}

/// The shape as `--shapes` writes it: `128x256`, `smx512`, `sm2x256`.
impl std::fmt::Display for ShapeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.grid {
            Grid::Blocks(n) => write!(f, "{n}x{}", self.block),
            Grid::PerSm(1) => write!(f, "smx{}", self.block),
            Grid::PerSm(k) => write!(f, "sm{k}x{}", self.block),
        }
    }
}

impl ShapeSpec {
    pub fn resolve(self, sm_count: u32) -> Shape {
        Shape {
            grid: match self.grid {
                Grid::Blocks(b) => b,
                Grid::PerSm(k) => k * sm_count.max(1),
            },
            block: self.block,
        }
    }
    /// `128x256`, or `sm132x512` for a grid sized from the SM count.
    pub fn label(self, sm_count: u32) -> String {
        let s = self.resolve(sm_count);
        match self.grid {
            Grid::Blocks(_) => format!("{}x{}", s.grid, s.block),
            Grid::PerSm(_) => format!("sm{}x{}", s.grid, s.block),
        }
    }
}

/// Parses `GxB`, `smxB` or `smKxB` (K blocks per SM).
pub fn parse_shape(s: &str) -> Result<ShapeSpec, String> {
    let bad = || {
        format!(
            "invalid launch shape {:?}: write GRIDxBLOCK (128x256) or smxBLOCK (one block per SM), \
             BLOCK a multiple of 32 up to 1024",
            crate::size::clip(s)
        )
    };
    let t = s.trim().to_ascii_lowercase();
    let (g, b) = t.split_once('x').ok_or_else(bad)?;
    let block: u32 = b.parse().map_err(|_| bad())?;
    if block == 0 || block > 1024 || block % 32 != 0 {
        return Err(bad());
    }
    let grid = if let Some(k) = g.strip_prefix("sm") {
        let k: u32 = if k.is_empty() {
            1
        } else {
            k.parse().map_err(|_| bad())?
        };
        if k == 0 || k > 64 {
            return Err(bad());
        }
        Grid::PerSm(k)
    } else {
        let n: u32 = g.parse().map_err(|_| bad())?;
        if n == 0 || n > 1 << 20 {
            return Err(bad());
        }
        Grid::Blocks(n)
    };
    Ok(ShapeSpec { grid, block })
}

/// Threads per block of the tma kernel.
const TMA_BLOCK: u32 = 256;

/// Parses one `--tma-grids` entry: `smK` or a block count (the kernel's blocks have 256 threads).
fn tma_grid_arg(s: &str) -> Result<Grid, String> {
    parse_shape(&format!("{}x{TMA_BLOCK}", s.trim())).map(|s| s.grid).map_err(|_| {
        format!(
            "invalid --tma-grids entry {:?}: use smK (K blocks per SM) or a block count, e.g. sm2,132",
            crate::size::clip(s)
        )
    })
}

/// What one point runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    CopyEngine,
    Push(ShapeSpec),
    Pull(ShapeSpec),
    /// Bulk copy, 256 threads a block (fixed by the kernel).
    Tma(ShapeSpec),
}

impl Method {
    pub fn shape(self, sm_count: u32) -> Option<Shape> {
        match self {
            Method::CopyEngine => None,
            Method::Push(s) | Method::Pull(s) | Method::Tma(s) => Some(s.resolve(sm_count)),
        }
    }
    /// The record's variant name.
    pub fn name(self, sm_count: u32) -> String {
        match self {
            Method::CopyEngine => "copy-engine".to_string(),
            Method::Push(s) => format!("push-{}", s.label(sm_count)),
            Method::Pull(s) => format!("pull-{}", s.label(sm_count)),
            Method::Tma(s) => format!("tma-{}", s.label(sm_count)),
        }
    }
}

/// The methods of `--variant` × `--shapes` (`--tma-grids` for tma), in the order given.
pub fn methods(variants: &[Variant], shapes: &[ShapeSpec], tma_grids: &[Grid]) -> Vec<Method> {
    let mut out = Vec::new();
    for v in variants {
        match v {
            Variant::CopyEngine => out.push(Method::CopyEngine),
            Variant::Push => out.extend(shapes.iter().map(|s| Method::Push(*s))),
            Variant::Pull => out.extend(shapes.iter().map(|s| Method::Pull(*s))),
            Variant::Tma => out.extend(tma_grids.iter().map(|&grid| {
                Method::Tma(ShapeSpec {
                    grid,
                    block: TMA_BLOCK,
                })
            })),
        }
    }
    out.dedup();
    out
}

/// The sizes, each a positive multiple of 16 bytes (the kernels move 16-byte vectors).
pub fn ipc_sizes(min: u64, max: u64, factor: u64) -> Result<Vec<u64>, BenchError> {
    let sizes = sweep(min, max, factor)?;
    if let Some(s) = sizes.iter().find(|s| **s < 16 || **s % 16 != 0) {
        return Err(BenchError::usage(format!(
            "ipc size {s} is not a multiple of 16 bytes: pick -b/-e/-f so every size is (e.g. -b 4K)"
        )));
    }
    Ok(sizes)
}

/// Iterations for one size: enough to move 4 GiB, between 20 and 2000.
pub fn default_iters(size: u64) -> u64 {
    (4u64 << 30).div_ceil(size.max(1)).clamp(20, 2000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::tests::IpcArgsParser;
    use clap::Parser;

    #[test]
    fn shapes_parse_and_name() {
        let s = parse_shape("128x256").unwrap();
        assert_eq!(
            s.resolve(132),
            Shape {
                grid: 128,
                block: 256
            }
        );
        assert_eq!(s.label(132), "128x256");
        let s = parse_shape("smx512").unwrap();
        assert_eq!(
            s.resolve(132),
            Shape {
                grid: 132,
                block: 512
            }
        );
        assert_eq!(Method::Pull(s).name(132), "pull-sm132x512");
        assert_eq!(parse_shape("sm2x256").unwrap().resolve(132).grid, 264);
        for bad in [
            "128", "0x256", "1x0", "1x100", "1x2048", "smx", "axb", "sm0x256",
        ] {
            let e = parse_shape(bad).unwrap_err();
            assert!(e.contains("GRIDxBLOCK"), "{bad}: {e}");
        }
        let t = parse_shape("sm2x256").unwrap();
        assert_eq!(Method::Tma(t).name(132), "tma-sm264x256");
        assert_eq!(Method::CopyEngine.name(132), "copy-engine");
    }

    #[test]
    fn default_method_list_is_ce_four_pushes_four_pulls_and_tma() {
        let a = IpcArgsParser::parse_from(["x"]).a;
        let m = methods(&variants(&a), &a.shapes, &a.tma_grids);
        assert_eq!(m.len(), 10);
        assert_eq!(m[0], Method::CopyEngine);
        assert_eq!(m[9].name(132), "tma-sm264x256");
        assert_eq!(comma_list(&a.shapes), "1x256,16x256,128x256,smx512");
        assert_eq!(comma_list(&a.tma_grids), "sm2");
        let names: Vec<String> = m.iter().map(|m| m.name(132)).collect();
        assert!(names.contains(&"push-1x256".to_string()));
        assert!(names.contains(&"push-16x256".to_string()));
        assert!(names.contains(&"push-128x256".to_string()));
        assert!(names.contains(&"pull-sm132x512".to_string()));
    }

    #[test]
    fn shapes_and_tma_grids_are_parsed_by_clap() {
        let parse = |v: &[&str]| IpcArgsParser::try_parse_from(v.iter().copied());
        let a = parse(&["x", "--shapes", "SM2x256,64x128", "--tma-grids", "sm3,64"])
            .unwrap()
            .a;
        assert_eq!(comma_list(&a.shapes), "sm2x256,64x128");
        assert_eq!(a.tma_grids, [Grid::PerSm(3), Grid::Blocks(64)]);
        assert_eq!(comma_list(&a.tma_grids), "sm3,64");
        let e = parse(&["x", "--shapes", "128"]).unwrap_err();
        assert!(e.to_string().contains("GRIDxBLOCK"), "{e}");
        let e = parse(&["x", "--tma-grids", "x"]).unwrap_err();
        assert!(e.to_string().contains("--tma-grids"), "{e}");
    }

    #[test]
    fn variants_are_parsed_by_clap() {
        let parse = |v: &[&str]| IpcArgsParser::try_parse_from(v.iter().copied());
        let a = parse(&["x", "--variant", "CE,pull"]).unwrap().a;
        assert_eq!(variants(&a), [Variant::CopyEngine, Variant::Pull]);
        assert_eq!(variant_list(&variants(&a)), "copy-engine,pull");
        for bad in ["store", "push,", "push,x"] {
            let e = parse(&["x", "--variant", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue, "{bad}");
            assert!(
                e.to_string().contains("copy-engine, push, pull, tma"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn nvbw_replaces_the_default_variants_unless_they_are_named() {
        let parse = |v: &[&str]| IpcArgsParser::parse_from(v.iter().copied()).a;
        let a = parse(&["x"]);
        assert_eq!(variants(&a), Variant::ALL);
        assert!(a.nvbw.is_empty());
        let a = parse(&["x", "--nvbw", "all"]);
        assert!(variants(&a).is_empty());
        assert_eq!(nvbw::tests(&a.nvbw).len(), 10);
        let a = parse(&[
            "x",
            "--nvbw",
            "device_local_copy,device_to_device_latency_sm",
            "--variant",
            "copy-engine",
        ]);
        assert_eq!(variants(&a), [Variant::CopyEngine]);
        assert_eq!(
            nvbw::tests(&a.nvbw),
            [nvbw::Test::LocalCopy, nvbw::Test::Latency]
        );
        let m = methods(&variants(&a), &a.shapes, &a.tma_grids);
        assert_eq!(m, [Method::CopyEngine]);
    }

    #[test]
    fn sizes_must_be_multiples_of_16() {
        assert_eq!(ipc_sizes(4096, 16384, 2).unwrap(), vec![4096, 8192, 16384]);
        let e = ipc_sizes(8, 64, 2).unwrap_err();
        assert!(e.to_string().contains("multiple of 16"), "{e}");
        assert!(
            ipc_sizes(16, 100, 2).is_err(),
            "100 is not a multiple of 16"
        );
    }
}
