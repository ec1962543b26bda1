//! The options of `efabench h2d` and their checks, before anything touches a GPU.

use crate::harness::{bounded, JobArgs, SweepArgs};
use efabench_gpu::h2d::{Dir, Engine};

/// Options of `efabench h2d`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct H2dArgs {
    /// Engines, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ce,sm")]
    pub engine: Vec<Engine>,
    /// Directions, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "h2d,d2h,both"
    )]
    pub dir: Vec<Dir>,
    /// Scopes, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "each,all")]
    pub scope: Vec<Scope>,
    /// Host buffer placements, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "near,far")]
    pub placement: Vec<Placement>,
    /// GPUs: all, or indices comma-separated (0,3).
    #[arg(long, default_value = "all", value_parser = gpus_arg)]
    pub gpus: GpuList,
    /// Samples per point; the record keeps the median (nvbandwidth takes 3).
    #[arg(long, default_value = "3", value_parser = samples_arg, allow_hyphen_values = true)]
    pub samples: u64,
    #[command(flatten)]
    pub sweep: SweepArgs,
    #[command(flatten)]
    pub job: JobArgs,
}

crate::impl_options!(H2dArgs: sweep);

/// `--scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// One GPU at a time.
    Each,
    /// Every GPU of --gpus at once.
    All,
}

/// `--placement`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Placement {
    /// The GPU's NUMA node.
    Near,
    /// Another NUMA node (skipped on a one-node machine).
    Far,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Near => "near",
            Placement::Far => "far",
        }
    }
}

/// `--gpus`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuList {
    All,
    Some(Vec<usize>),
}

impl GpuList {
    /// The GPUs among `count`, or the usage error naming the missing one.
    pub fn resolve(&self, count: usize) -> Result<Vec<usize>, String> {
        match self {
            GpuList::All if count == 0 => {
                Err("the CUDA driver sees no GPU: check nvidia-smi and CUDA_VISIBLE_DEVICES".into())
            }
            GpuList::All => Ok((0..count).collect()),
            GpuList::Some(v) => match v.iter().find(|g| **g >= count) {
                Some(g) => Err(format!(
                    "--gpus {g} does not exist: this machine has {count} GPU(s); use 0..{} or all",
                    count.max(1) - 1
                )),
                None => Ok(v.clone()),
            },
        }
    }
}

/// Parses `--gpus`: `all`, or distinct indices.
pub fn gpus_arg(s: &str) -> Result<GpuList, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("all") {
        return Ok(GpuList::All);
    }
    let mut v = Vec::new();
    for part in t.split(',') {
        let g: usize = part.trim().parse().map_err(|_| {
            format!(
                "--gpus {:?}: use all or GPU indices separated by commas, e.g. --gpus 0,3",
                crate::size::clip(s)
            )
        })?;
        if g >= 1024 || v.contains(&g) {
            return Err(format!(
                "--gpus {:?}: index {g} repeated or out of range; list each GPU once",
                crate::size::clip(s)
            ));
        }
        v.push(g);
    }
    Ok(GpuList::Some(v))
}

fn samples_arg(s: &str) -> Result<u64, String> {
    bounded(s, "--samples", 1, 1000, "3")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        a: H2dArgs,
    }

    fn parse(args: &[&str]) -> Result<H2dArgs, clap::Error> {
        let mut v = vec!["h2d"];
        v.extend(args);
        Cli::try_parse_from(v).map(|c| c.a)
    }

    #[test]
    fn defaults_cover_every_case() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.engine, [Engine::Ce, Engine::Sm]);
        assert_eq!(a.dir, [Dir::H2d, Dir::D2h, Dir::Both]);
        assert_eq!(a.scope, [Scope::Each, Scope::All]);
        assert_eq!(a.placement, [Placement::Near, Placement::Far]);
        assert_eq!(a.gpus, GpuList::All);
        assert_eq!(a.samples, 3);
    }

    #[test]
    fn choices_parse_and_bad_ones_are_refused() {
        let a = parse(&[
            "--engine",
            "sm",
            "--dir",
            "both",
            "--gpus",
            "0,3",
            "--placement",
            "far",
        ])
        .unwrap();
        assert_eq!(a.engine, [Engine::Sm]);
        assert_eq!(a.dir, [Dir::Both]);
        assert_eq!(a.gpus, GpuList::Some(vec![0, 3]));
        assert_eq!(a.placement, [Placement::Far]);
        for bad in [
            &["--engine", "dma"][..],
            &["--dir", "up"],
            &["--scope", "some"],
            &["--placement", "NEAR"],
            &["--gpus", "0,0"],
            &["--gpus", "x"],
            &["--samples", "0"],
            &["-p", "efa"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(GpuList::All.resolve(2).unwrap(), [0, 1]);
        assert!(GpuList::Some(vec![2])
            .resolve(2)
            .unwrap_err()
            .contains("--gpus 2"));
        assert!(GpuList::All.resolve(0).is_err());
    }
}
