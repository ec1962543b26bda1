//! The options of `efabench proxy`: modes, producer, rings and proxy threads, each bounded by
//! its parser with a hint.

use efabench_gpu::queue::RingKind;

use crate::harness::{self, AllGroups};

/// Options of `efabench proxy`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Benchmark options")]
pub struct ProxyArgs {
    /// Modes to run, comma-separated: cpu (CPU-posted baseline), blocking, nbi.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [Mode::Cpu, Mode::Blocking, Mode::Nbi])]
    pub modes: Vec<Mode>,
    /// Who pushes the puts: the GPU, or a CPU thread standing in for it (machines without one).
    #[arg(long, value_enum, default_value = "gpu")]
    pub producer: Producer,
    /// Puts per iteration, 1 to 4096 (fewer when --footprint would be exceeded).
    #[arg(long, default_value = "64", value_parser = puts_arg, allow_hyphen_values = true)]
    pub puts: u32,
    /// Bytes an iteration touches per buffer at most (puts beyond it are dropped, at least one).
    #[arg(long, default_value = "64M", value_parser = footprint_arg, allow_hyphen_values = true)]
    pub footprint: u64,
    /// Where the GPU producer's command rings live: pinned (host memory, the default), managed,
    /// gdr (slots in device memory, read through GDRCopy), hybrid (tail and done counts in device
    /// memory, written through GDRCopy, so the GPU polls its own memory). The queue's libefaxx
    /// CAS ring is not offered: its slots cannot carry a 32-byte put. [default: pinned]
    #[arg(long, value_parser = put_ring_parser())]
    pub ring: Option<RingKind>,
    /// Slots per ring (power of two, 16 to 65536).
    #[arg(long, default_value = "1024", value_parser = slots_arg, allow_hyphen_values = true)]
    pub ring_slots: u64,
    /// Most commands a proxy posts as one FI_MORE batch, 1 to 256.
    #[arg(long, default_value = "32", value_parser = batch_arg, allow_hyphen_values = true)]
    pub batch: usize,
    /// Proxy threads: one per rail, or one per GPU serving every rail of the GPU in turn.
    #[arg(long, value_enum, default_value = "rail")]
    pub proxy_threads: ProxyThreads,
    /// Nanoseconds the GPU pauses between two reads of the proxy's counts in quiet and while
    /// waiting for ring credits, 0 (spin) to 10000.
    #[arg(long, default_value = "0", value_parser = poll_arg, allow_hyphen_values = true)]
    pub quiet_poll_ns: u32,
    /// System-scope fence in the kernel: before every put (the safe default for payloads a
    /// kernel writes just before putting them) or once before the first put of an iteration
    /// (enough here: every payload is written before the launch).
    #[arg(long, value_enum, default_value = "per-put")]
    pub payload_fence: PayloadFence,
    #[command(flatten)]
    pub groups: AllGroups,
}

crate::impl_options!(ProxyArgs => groups);

/// Where the GPU producer fences its payload stores before the commands that name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PayloadFence {
    PerPut,
    Once,
}

impl PayloadFence {
    pub fn name(self) -> &'static str {
        match self {
            PayloadFence::PerPut => "per-put",
            PayloadFence::Once => "once",
        }
    }
}

/// How many proxy threads serve the rails of the initiating GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProxyThreads {
    /// One thread per rail, each owning its rail's completion queue.
    Rail,
    /// One thread for the GPU, owning every rail's completion queue.
    Gpu,
}

impl ProxyThreads {
    pub fn name(self) -> &'static str {
        match self {
            ProxyThreads::Rail => "rail",
            ProxyThreads::Gpu => "gpu",
        }
    }
}

/// A mode of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Cpu,
    Blocking,
    Nbi,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Blocking => "blocking",
            Mode::Nbi => "nbi",
        }
    }
}

/// Who pushes the commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Producer {
    Gpu,
    Host,
}

/// The rings `--ring` picks from: every [`RingKind`] whose slots carry a put, by the same names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PutRing {
    Pinned,
    Managed,
    Gdr,
    Hybrid,
}

impl From<PutRing> for RingKind {
    fn from(r: PutRing) -> RingKind {
        match r {
            PutRing::Pinned => RingKind::Pinned,
            PutRing::Managed => RingKind::Managed,
            PutRing::Gdr => RingKind::Gdr,
            PutRing::Hybrid => RingKind::Hybrid,
        }
    }
}

fn put_ring_parser() -> impl clap::builder::TypedValueParser<Value = RingKind> {
    use clap::builder::TypedValueParser;
    clap::builder::EnumValueParser::<PutRing>::new().map(RingKind::from)
}

fn puts_arg(s: &str) -> Result<u32, String> {
    harness::bounded(s, "--puts", 1, 4096, "64").map(|n| n as u32)
}
fn poll_arg(s: &str) -> Result<u32, String> {
    harness::bounded(s, "--quiet-poll-ns", 0, 10_000, "200").map(|n| n as u32)
}
fn batch_arg(s: &str) -> Result<usize, String> {
    harness::bounded(s, "--batch", 1, 256, "32").map(|n| n as usize)
}
fn slots_arg(s: &str) -> Result<u64, String> {
    let n = harness::bounded(s, "--ring-slots", 16, 65536, "1024")?;
    if !n.is_power_of_two() {
        return Err(format!(
            "--ring-slots {n} is not a power of two: use e.g. 1024"
        ));
    }
    Ok(n)
}
fn footprint_arg(s: &str) -> Result<u64, String> {
    let n = crate::size::parse_size(s)?;
    if n == 0 || n > harness::MAX_SIZE {
        return Err(format!(
            "--footprint {} is out of range: use 1 to 64G, e.g. --footprint 64M",
            crate::size::clip(s)
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_bounded() {
        assert!(puts_arg("0").is_err());
        assert!(puts_arg("5000").is_err());
        assert_eq!(puts_arg("64"), Ok(64));
        assert!(slots_arg("1000").unwrap_err().contains("power of two"));
        assert_eq!(slots_arg("1024"), Ok(1024));
        assert!(batch_arg("0").is_err());
        assert!(footprint_arg("0").is_err());
    }

    #[derive(clap::Parser, Debug)]
    struct P {
        #[command(flatten)]
        a: ProxyArgs,
    }

    #[test]
    fn ring_is_one_of_the_four_that_carry_a_put() {
        use clap::Parser;
        assert_eq!(P::parse_from(["x"]).a.ring, None);
        for k in [
            RingKind::Pinned,
            RingKind::Managed,
            RingKind::Gdr,
            RingKind::Hybrid,
        ] {
            assert_eq!(P::parse_from(["x", "--ring", k.name()]).a.ring, Some(k));
        }
        use clap::ValueEnum;
        for r in PutRing::value_variants() {
            assert_eq!(harness::name_of(r), RingKind::from(*r).name());
        }
        for bad in ["libefaxx", "spsc", ""] {
            let e = P::try_parse_from(["x", "--ring", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue, "{bad}");
            assert!(
                e.to_string().contains("pinned, managed, gdr, hybrid"),
                "{bad}: {e}"
            );
        }
    }
}
