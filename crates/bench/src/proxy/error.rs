//! Why a proxy thread, the host producer, the target or a payload step stopped. Typed so that a
//! fabric, GPU or job failure stays attached as the cause while the message reads as the proxy
//! saw it (which rail, which ring position); the harness prints it on one line, prefixed with
//! the rank, like any other run failure.

use efabench_bootstrap::BootstrapError;
use efabench_gpu::GpuError;

/// A failure of `efabench proxy` while it runs (never bad input: options are checked first).
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The job failed (a peer died, the job aborted) while this thread waited.
    #[error(transparent)]
    Job(#[from] BootstrapError),
    /// Another proxy thread or the producer failed first.
    #[error("proxy: stopped because another thread failed")]
    Stopped,
    #[error("proxy: no command and no completion for {secs:.0} s ({consumed} of {expected} commands consumed, {completed} completed)")]
    Idle {
        secs: f64,
        consumed: u64,
        expected: u64,
        completed: u64,
    },
    #[error("proxy (rail {rail}): torn command at ring position {pos} (halves {a:#x} / {b:#x})")]
    Torn {
        rail: usize,
        pos: u64,
        a: u64,
        b: u64,
    },
    #[error("proxy (rail {rail}): command at ring position {pos} is for rank {dst}, but this proxy connects rank {ours} only")]
    WrongRank {
        rail: usize,
        pos: u64,
        dst: u16,
        ours: u16,
    },
    #[error("proxy (rail {rail}): command at ring position {pos} ({len} bytes from {from} to {to}): {source}")]
    Post {
        rail: usize,
        pos: u64,
        len: u32,
        from: u64,
        to: u64,
        #[source]
        source: efabench_fabric::Error,
    },
    /// A write's completion failed; `job` holds the job's failure when it knows one (a dead peer
    /// is the likelier cause, so it is named first).
    #[error("{}proxy (rail {rail}): a write to rank {rank} failed: {source}{}",
        job.as_ref().map_or(String::new(), |j| format!("{j} (")),
        if job.is_some() { ")" } else { "" })]
    Write {
        rail: usize,
        rank: u16,
        job: Option<Box<BootstrapError>>,
        #[source]
        source: efabench_fabric::Error,
    },
    #[error("proxy (rail {rail}): completion of unknown context {context}")]
    UnknownContext { rail: usize, context: u64 },
    #[error("host producer: a proxy thread failed")]
    ProducerStopped,
    #[error("host producer: no credit")]
    NoCredit,
    /// The CPU baseline noticed a proxy thread's failure.
    #[error("a proxy thread failed")]
    ThreadFailed,
    #[error("rail {0} was not handed back")]
    NotHandedBack(usize),
    #[error("target: {0}")]
    TargetPoll(#[source] efabench_fabric::Error),
    #[error("target: {missing} write(s) of this iteration never arrived in {secs:.0} s")]
    NeverArrived { missing: u64, secs: f64 },
    #[error("writing the payload of put {put}: {source}")]
    Fill {
        put: u32,
        #[source]
        source: GpuError,
    },
    /// Waiting for the provider's copies into device memory before checking it.
    #[error(transparent)]
    Settle(GpuError),
    #[error("checking put {put}: {source}")]
    Check {
        put: u32,
        #[source]
        source: GpuError,
    },
}
