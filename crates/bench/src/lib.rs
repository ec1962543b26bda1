//! efabench-bench: the shared benchmark harness and one module per benchmark.
//!
//! * [`harness`]: what nccl-tests calls `common.cu` — typed options, the size sweep, bootstrap,
//!   provider/domain/rail choice, memory, records, sinks, counters, errors, exit codes. A
//!   benchmark implements [`harness::Benchmark`] and calls [`harness::run`].
//! * One module per benchmark: [`p2p`] (`sendrecv`, `write`, `read`), [`ipc`] (NVLink),
//!   [`proxy`] (GPU-initiated writes through a CPU proxy), [`h2d`] (host↔GPU copies).
//! * [`pattern`], [`size`], [`stats`]: payload patterns, sizes, timing statistics.
//! * [`test_hooks`]: faults the integration tests inject, only with the `test-hooks` feature.
//!
//! Adding a benchmark means one new file here and one line in the CLI.

#![forbid(unsafe_code)]

pub mod alltoall;
pub mod alltoallv;
pub mod collective;
pub mod ep;
pub mod error;
pub mod h2d;
// Shared with the integration tests, which use the parts the unit tests do not.
#[cfg(test)]
#[allow(dead_code)]
mod golden;
pub mod harness;
pub mod ipc;
pub mod locate;
pub mod mesh;
pub mod p2p;
pub mod pairs;
pub mod pattern;
pub mod proxy;
pub mod queue;
pub mod size;
pub mod stats;
pub mod test_hooks;

pub use error::BenchError;
pub use harness::{BuildInfo, Verdict};

/// Declares the benchmark subcommands: one line each (`"name" Variant(Args) => runner`; the
/// arguments are boxed, being large), so
/// adding a benchmark is one file plus one line here. Generates [`BenchCommand`] (a clap
/// subcommand enum the CLI flattens in), its dispatch, and [`BENCHMARKS`] (the names `launch`
/// accepts).
macro_rules! benchmarks {
    ($( $(#[$meta:meta])* $name:literal $variant:ident($args:ty) => $run:expr ;)*) => {
        /// The benchmark subcommands.
        #[derive(clap::Subcommand, Debug)]
        pub enum BenchCommand {
            $( $(#[$meta])* #[command(name = $name)] $variant(Box<$args>), )*
        }

        /// Names of every benchmark subcommand.
        pub const BENCHMARKS: &[&str] = &[$($name),*];

        impl BenchCommand {
            /// The subcommand's name (`write`), as errors name it.
            pub fn name(&self) -> &'static str {
                match self {
                    $( BenchCommand::$variant(_) => $name, )*
                }
            }

            /// Runs one rank of the benchmark; returns what it found.
            pub fn run(&self, build: &BuildInfo) -> Result<Verdict, BenchError> {
                match self {
                    $( BenchCommand::$variant(a) => ($run)(&**a, build), )*
                }
            }
        }
    };
}

benchmarks! {
    /// Two-sided send/recv: ping-pong latency and streaming bandwidth, over 1..N rails.
    "sendrecv" Sendrecv(p2p::P2pArgs) => p2p::run::<p2p::SendRecv>;
    /// RDMA write with remote CQ data: ping-pong latency and streaming bandwidth, over 1..N rails.
    "write" Write(p2p::P2pArgs) => p2p::run::<p2p::Write>;
    /// RDMA read: post-to-completion latency and streaming bandwidth, over 1..N rails.
    "read" Read(p2p::P2pArgs) => p2p::run::<p2p::Read>;
    /// NVLink through CUDA IPC: kernels and copy engine writing into a peer GPU.
    #[command(mut_arg("min_bytes", |a| a.default_value(ipc::IPC_DEFAULTS[0].1)),
              mut_arg("max_bytes", |a| a.default_value(ipc::IPC_DEFAULTS[1].1)),
              mut_arg("warmup", |a| a.default_value(ipc::IPC_DEFAULTS[2].1)),
              mut_arg("timeout", |a| a.default_value(ipc::IPC_DEFAULTS[3].1)))]
    "ipc" Ipc(ipc::IpcArgs) => ipc::run_ipc;
    /// GPU-initiated RDMA writes through a CPU proxy (cpu baseline, blocking, nbi) with a
    /// latency breakdown per put.
    "proxy" Proxy(proxy::ProxyArgs) => proxy::run_proxy;
    /// GPU->CPU command rings of a GPU-initiated proxy: M ops/s, round trip, every command verified.
    "queue" Queue(queue::QueueArgs) => queue::run_queue;
    /// All-to-all with nccl-tests' semantics (algbw, busbw = algbw x (n-1)/n), write or send/recv.
    #[command(mut_arg("min_bytes", |a| a.default_value("1K")))]
    "alltoall" Alltoall(alltoall::AlltoallArgs) => alltoall::run_alltoall;
    /// All-to-all with per-(source, destination) counts (uniform, zipf, moe routing, matrix file), nccl-tests' alltoallv bandwidth.
    #[command(mut_arg("min_bytes", |a| a.default_value("1K")))]
    "alltoallv" Alltoallv(alltoallv::AlltoallvArgs) => alltoallv::run_alltoallv;
    /// Bandwidth of every ordered pair of ranks (ring shift), outliers named, --min-bw gate.
    #[command(mut_arg("min_bytes", |a| a.default_value("1M")), mut_arg("max_bytes", |a| a.default_value("1M")))]
    "pairs" Pairs(pairs::PairsArgs) => pairs::run_pairs;
    /// Expert-parallel dispatch and combine (DeepEP's layouts), CPU- or GPU-initiated, verified.
    "ep" Ep(ep::EpArgs) => ep::run_ep;
    /// Host<->GPU copy bandwidth per GPU (copy engine and SM; h2d, d2h, both; each GPU and all
    /// at once; host memory near and far), verified, against the GPU's PCIe link.
    #[command(mut_arg("min_bytes", |a| a.default_value(h2d::H2D_DEFAULTS[0].1)),
              mut_arg("max_bytes", |a| a.default_value(h2d::H2D_DEFAULTS[1].1)),
              mut_arg("step_factor", |a| a.default_value(h2d::H2D_DEFAULTS[2].1)))]
    "h2d" H2d(h2d::H2dArgs) => h2d::run_h2d;
}
