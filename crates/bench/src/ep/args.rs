//! The options of `efabench ep`, parsed and bounded before anything touches hardware.

use std::path::PathBuf;

use crate::harness::{bounded, iters_arg, warmup_arg, FabricArgs, JobArgs, MemArgs};

/// Element type of the dispatched tokens (combine always carries bf16, as DeepEP's does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Dtype {
    /// 2 bytes per element.
    Bf16,
    /// 1 byte per element (e4m3) plus one f32 scale per 128 elements.
    Fp8,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::Fp8 => "fp8",
        }
    }
}

/// Where a (token, expert) pair lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// One message per (token, expert) into `[local expert][source rank][slot]` (DeepEP's
    /// low-latency layout).
    #[value(name = "ll", alias = "low-latency")]
    LowLatency,
    /// One message per (token, destination rank) into `[source rank][slot]` (the
    /// normal/high-throughput layout).
    PerRank,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::LowLatency => "ll",
            Layout::PerRank => "per-rank",
        }
    }
}

/// Who posts the RDMA writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Initiator {
    /// The rank's CPU thread posts them, batched per destination.
    Cpu,
    /// A producer pushes one command per (token, expert) into the proxy's command ring, then a
    /// signal per destination and a quiet; the proxy thread posts them.
    Gpu,
}

impl Initiator {
    pub fn name(self) -> &'static str {
        match self {
            Initiator::Cpu => "cpu",
            Initiator::Gpu => "gpu",
        }
    }
}

/// What stands behind `--initiator gpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Producer {
    /// A kernel with `--mem cuda`, a CPU thread otherwise.
    Auto,
    /// A GPU kernel (needs `--mem cuda`).
    Gpu,
    /// A CPU thread in the kernel's place (same ring, same proxy): runs on any machine.
    Host,
}

/// How tokens choose experts.
#[derive(Clone, Debug, PartialEq)]
pub enum RoutingSpec {
    /// K distinct experts uniformly at random.
    Uniform,
    /// Expert e drawn with weight 1/(e+1)^S: the first experts (on the first ranks) are hot.
    Zipf(f64),
    /// One hot expert: each token picks `expert` with probability `share`, its other choices
    /// uniformly among the rest.
    Hot { expert: u32, share: f64 },
    /// Read from a file (format in [`crate::ep::routing`]).
    File(PathBuf),
}

impl std::fmt::Display for RoutingSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoutingSpec::Uniform => f.write_str("uniform"),
            RoutingSpec::Zipf(s) => write!(f, "zipf:{s}"),
            RoutingSpec::Hot { expert, share } => write!(f, "hot:{expert}:{share}"),
            RoutingSpec::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

fn routing_arg(s: &str) -> Result<RoutingSpec, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("uniform") {
        return Ok(RoutingSpec::Uniform);
    }
    if let Some(x) = t.strip_prefix("zipf:") {
        return match x.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && (0.0..=8.0).contains(&v) => Ok(RoutingSpec::Zipf(v)),
            _ => Err(format!(
                "--routing zipf:{} needs an exponent from 0 to 8, e.g. --routing zipf:1.2",
                crate::size::clip(x)
            )),
        };
    }
    if let Some(x) = t.strip_prefix("hot:") {
        let bad = || {
            format!(
                "--routing hot:{} needs an expert and the share of tokens that pick it (above 0, at most 1), e.g. --routing hot:0:0.5",
                crate::size::clip(x)
            )
        };
        let (e, p) = x.split_once(':').ok_or_else(bad)?;
        let expert = e.trim().parse::<u32>().map_err(|_| bad())?;
        let share = p.trim().parse::<f64>().map_err(|_| bad())?;
        if !(share > 0.0 && share <= 1.0) {
            return Err(bad());
        }
        return Ok(RoutingSpec::Hot { expert, share });
    }
    if let Some(p) = t.strip_prefix("file:") {
        return Ok(RoutingSpec::File(PathBuf::from(p)));
    }
    Err(format!(
        "unknown --routing '{}': use uniform, zipf:S (e.g. zipf:1.2), hot:E:P (e.g. hot:0:0.5) or file:PATH",
        crate::size::clip(t)
    ))
}

fn tokens_arg(s: &str) -> Result<u32, String> {
    bounded(s, "--tokens", 1, 65_536, "128").map(|n| n as u32)
}

fn hidden_arg(s: &str) -> Result<u32, String> {
    let h = bounded(s, "--hidden", 128, 65_536, "7168")? as u32;
    if h % 128 != 0 {
        return Err(format!(
            "--hidden {h} is not a multiple of 128 (fp8 keeps one scale per 128 elements): use e.g. --hidden {}",
            h.div_ceil(128) * 128
        ));
    }
    Ok(h)
}

fn topk_arg(s: &str) -> Result<u32, String> {
    bounded(s, "--topk", 1, 64, "8").map(|n| n as u32)
}

fn experts_arg(s: &str) -> Result<u32, String> {
    bounded(s, "--experts", 1, 65_535, "256").map(|n| n as u32)
}

fn seed_arg(s: &str) -> Result<u64, String> {
    bounded(s, "--seed", 0, u64::MAX, "1")
}

/// Options of `ep`: the fabric, memory and job groups, and its own shape. It has no size sweep
/// (the shape sets the sizes), so of the sweep's options it takes only `-n` and `-w`.
#[derive(clap::Args, Debug, Clone)]
pub struct EpArgs {
    /// Timed iterations, each a whole dispatch and combine (default 50).
    #[arg(short = 'n', long = "iters", value_parser = iters_arg, allow_hyphen_values = true)]
    pub iters: Option<u64>,
    /// Untimed warm-up iterations (default 5).
    #[arg(short = 'w', long = "warmup", value_parser = warmup_arg, allow_hyphen_values = true)]
    pub warmup: Option<u64>,
    #[command(flatten)]
    pub fabric: FabricArgs,
    #[command(flatten)]
    pub mem: MemArgs,
    #[command(flatten)]
    pub job: JobArgs,
    /// Tokens each rank holds.
    #[arg(long, default_value = "128", value_parser = tokens_arg, allow_hyphen_values = true)]
    pub tokens: u32,
    /// Elements per token (a multiple of 128).
    #[arg(long, default_value = "7168", value_parser = hidden_arg, allow_hyphen_values = true)]
    pub hidden: u32,
    /// Experts each token is routed to.
    #[arg(long, default_value = "8", value_parser = topk_arg, allow_hyphen_values = true)]
    pub topk: u32,
    /// Experts in all, spread evenly over the ranks (a multiple of the number of ranks).
    #[arg(long, default_value = "256", value_parser = experts_arg, allow_hyphen_values = true)]
    pub experts: u32,
    /// Dispatch element type: bf16, or fp8 with one f32 scale per 128 elements.
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    pub dtype: Dtype,
    /// Routing: uniform, zipf:S, hot:E:P (expert E in a share P of the tokens) or file:PATH
    /// (seeded, identical on every rank).
    #[arg(long, default_value = "uniform", value_parser = routing_arg)]
    pub routing: RoutingSpec,
    /// Receive layout: ll (`[local expert][source rank][slot]`) or per-rank (each token once per
    /// destination rank).
    #[arg(long, value_enum, default_value_t = Layout::LowLatency)]
    pub layout: Layout,
    /// Who posts the writes: cpu, gpu, or a list (gpu,cpu) measured in the same run.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "cpu")]
    pub initiator: Vec<Initiator>,
    /// Behind --initiator gpu: auto (a kernel with --mem cuda, else a CPU thread), gpu or host.
    #[arg(long, value_enum, default_value_t = Producer::Auto)]
    pub producer: Producer,
    /// The proxy posts one write per ring command, instead of merging contiguous puts to the
    /// same destination and channel into one write (its default, as the cpu initiator does).
    #[arg(long)]
    pub no_merge: bool,
    /// Seed of the routing and the routing weights.
    #[arg(long, default_value = "1", value_parser = seed_arg, allow_hyphen_values = true)]
    pub seed: u64,
}

crate::impl_options!(EpArgs: fabric, mem);

/// Timed iterations when -n is not given (each is a whole dispatch and combine).
pub const DEFAULT_ITERS: u64 = 50;
/// Warm-up iterations when -w is not given.
pub const DEFAULT_WARMUP: u64 = 5;

impl EpArgs {
    /// The initiators, in the order given.
    pub fn initiators(&self) -> Vec<Initiator> {
        let mut out: Vec<Initiator> = Vec::new();
        for i in &self.initiator {
            if !out.contains(i) {
                out.push(*i);
            }
        }
        if out.is_empty() {
            out.push(Initiator::Cpu);
        }
        out
    }

    /// Whether `--initiator gpu` runs a kernel (else a CPU thread stands in for it).
    pub fn gpu_producer(&self) -> bool {
        match self.producer {
            Producer::Gpu => true,
            Producer::Host => false,
            Producer::Auto => self.mem.mem == efabench_gpu::MemKind::Cuda,
        }
    }

    pub fn iterations(&self) -> (u64, u64) {
        (
            self.iters.unwrap_or(DEFAULT_ITERS),
            self.warmup.unwrap_or(DEFAULT_WARMUP),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct T {
        #[command(flatten)]
        a: EpArgs,
    }

    fn parse(args: &[&str]) -> Result<EpArgs, String> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        // The tests assert on the message the user reads: the string is the point.
        T::try_parse_from(v).map(|t| t.a).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_the_low_latency_shape_on_the_cpu() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.tokens, a.hidden, a.topk, a.experts), (128, 7168, 8, 256));
        assert_eq!(a.initiators(), vec![Initiator::Cpu]);
        assert_eq!(a.layout, Layout::LowLatency);
        assert_eq!(a.routing, RoutingSpec::Uniform);
        assert_eq!(a.iterations(), (DEFAULT_ITERS, DEFAULT_WARMUP));
        assert!(
            !a.gpu_producer(),
            "host memory: the CPU stands in for the kernel"
        );
    }

    #[test]
    fn lists_and_routings_parse() {
        let a = parse(&["--initiator", "gpu,cpu", "--routing", "zipf:1.5"]).unwrap();
        assert_eq!(a.initiators(), vec![Initiator::Gpu, Initiator::Cpu]);
        assert_eq!(a.routing, RoutingSpec::Zipf(1.5));
        let a = parse(&["--routing", "file:/x/y", "--layout", "per-rank"]).unwrap();
        assert_eq!(a.routing, RoutingSpec::File("/x/y".into()));
        assert_eq!(a.layout, Layout::PerRank);
    }

    #[test]
    fn bad_values_say_how_to_fix_them() {
        for (args, needle) in [
            (vec!["--hidden", "100"], "128 to 65536"),
            (vec!["--hidden", "200"], "multiple of 128"),
            (vec!["--topk", "0"], "1 to 64"),
            (vec!["--tokens", "-3"], "negative"),
            (vec!["--routing", "zipf:x"], "exponent"),
            (vec!["--routing", "pareto"], "uniform, zipf:S"),
            (vec!["--routing", "hot:0"], "needs an expert and the share"),
            (vec!["--routing", "hot:0:0"], "above 0, at most 1"),
            (vec!["--routing", "hot:x:0.5"], "hot:x:0.5"),
            (vec!["--initiator", "nic"], "cpu, gpu"),
            (vec!["-n", "0"], "1 to 10000000"),
            (vec!["-b", "8"], "unexpected argument"),
        ] {
            let e = parse(&args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }
}
