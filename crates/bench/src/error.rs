//! Benchmark errors, split the way the CLI needs them: bad input (exit 2) versus a run that
//! failed (exit 1).
//!
//! A benchmark's own checks say what is wrong in words ([`BenchError::usage`],
//! [`BenchError::failed`]). Failures of the layers below arrive whole through `?`: the fabric's,
//! the bootstrap's, the GPU layer's and the record writer's errors are variants of their own, so
//! the cause is kept as the error's `source()` and [`BenchError::is_usage`] asks the cause which
//! side of the line it is on. A variant's message includes its cause's (`{e}` is never missing
//! the reason); [`BenchError::message`] prints the chain on one line, each cause once
//! (`rank 1: fabric: fi_writemsg failed: ...`).

use efabench_bootstrap::BootstrapError;
use efabench_gpu::GpuError;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad input or a missing prerequisite; the message says what is wrong and how to fix it.
    #[error("{0}")]
    Usage(String),
    /// The run itself failed: a peer died, a completion errored, payloads did not verify.
    #[error("{0}")]
    Failed(String),
    /// A libfabric call, completion or wait failed; a missing library or provider is bad input.
    #[error("fabric: {0}")]
    Fabric(#[from] efabench_fabric::Error),
    /// The job failed as a whole (a rank died, froze or aborted) or was started wrongly. Its
    /// message is the same on every rank, so it is printed as it is.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// A CUDA, NVRTC or NVML call failed; no driver or bad GPU input is bad input.
    #[error("gpu: {0}")]
    Gpu(#[from] GpuError),
    /// Writing records or the table failed.
    #[error(transparent)]
    Record(#[from] efabench_record::Error),
    /// A local I/O failure while doing `what`.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// Options a benchmark was given as words (`efabench cluster` builds its stages' options from
    /// the user's) did not parse: clap's message without its usage lines.
    #[error(transparent)]
    Options(OptionWords),
    /// `efabench proxy` failed while it ran (a proxy thread, the producer or the target).
    #[error(transparent)]
    Proxy(Box<crate::proxy::ProxyError>),
    /// What this rank was doing when `source` happened (`rank 1`, `clock alignment`).
    #[error("{context}: {source}")]
    Context {
        context: String,
        #[source]
        source: Box<BenchError>,
    },
}

/// Options given as words that clap refused. It reads as clap's first line without the
/// `error: ` prefix and usage lines, and its cause is the value parser's error, if any (clap's
/// own text would repeat the message).
#[derive(Debug)]
pub struct OptionWords(pub clap::Error);

impl std::fmt::Display for OptionWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0.to_string();
        f.write_str(
            text.lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: "),
        )
    }
}

impl std::error::Error for OptionWords {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0)
    }
}

impl From<crate::proxy::ProxyError> for BenchError {
    fn from(e: crate::proxy::ProxyError) -> Self {
        BenchError::Proxy(Box::new(e))
    }
}

impl From<io::Error> for BenchError {
    fn from(source: io::Error) -> Self {
        BenchError::Io {
            what: "I/O error".into(),
            source,
        }
    }
}

impl BenchError {
    pub fn usage(m: impl Into<String>) -> Self {
        BenchError::Usage(m.into())
    }
    pub fn failed(m: impl Into<String>) -> Self {
        BenchError::Failed(m.into())
    }

    /// `source` with a word on what was being done (`clock alignment: ...`); keeps its class.
    pub fn context(context: impl Into<String>, source: impl Into<BenchError>) -> Self {
        BenchError::Context {
            context: context.into(),
            source: Box::new(source.into()),
        }
    }

    /// An I/O failure while doing `what`.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        BenchError::Io {
            what: what.into(),
            source,
        }
    }

    /// The error as this rank prints it: a failure of this rank's own (not a job-wide one that
    /// every rank reports alike, nor bad input) is prefixed with `rank N`.
    pub fn on_rank(self, rank: u32) -> Self {
        match self {
            e @ (BenchError::Bootstrap(_) | BenchError::Context { .. }) => e,
            e if e.is_usage() => e,
            e => BenchError::context(format!("rank {rank}"), e),
        }
    }

    /// True for bad input or a missing prerequisite (exit 2), asking the cause where there is one.
    pub fn is_usage(&self) -> bool {
        use efabench_fabric::Error as F;
        match self {
            BenchError::Usage(_) | BenchError::Options(_) => true,
            BenchError::Failed(_) | BenchError::Io { .. } | BenchError::Proxy(_) => false,
            BenchError::Fabric(e) => {
                matches!(e, F::Load(_) | F::NoProvider { .. } | F::Usage(_))
            }
            BenchError::Bootstrap(e) => e.is_usage(),
            BenchError::Gpu(e) => e.is_usage(),
            BenchError::Record(e) => e.kind() == efabench_record::ErrorKind::BadInput,
            BenchError::Context { source, .. } => source.is_usage(),
        }
    }

    /// The message and its causes on one line.
    pub fn message(&self) -> String {
        efabench_record::chain(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_that_do_not_parse_are_one_usage_line_with_clap_as_the_cause() {
        use clap::Parser;
        #[derive(Parser, Debug)]
        struct Words {
            #[arg(long)]
            n: u32,
        }
        let clap = Words::try_parse_from(["pairs", "--n", "x"]).unwrap_err();
        let e =
            BenchError::context("pairs stage", BenchError::Options(OptionWords(clap))).on_rank(0);
        assert!(e.is_usage());
        let m = e.message();
        assert!(
            m.starts_with("pairs stage: invalid value 'x' for '--n <N>'"),
            "{m}"
        );
        assert!(
            !m.contains('\n') && m.matches("invalid value").count() == 1,
            "{m}"
        );
        let BenchError::Context { source, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(std::error::Error::source(&**source).is_some());
    }

    #[test]
    fn causes_are_kept_and_decide_the_class() {
        let fab = efabench_fabric::Error::Call {
            call: "fi_writemsg",
            errno: 11,
            text: "Resource temporarily unavailable".into(),
            provider: Some("efa".into()),
        };
        let e = BenchError::from(fab).on_rank(1);
        assert!(!e.is_usage());
        assert_eq!(
            e.message(),
            "rank 1: fabric: fi_writemsg: -FI_EAGAIN (Resource temporarily unavailable), provider efa"
        );
        assert!(std::error::Error::source(&e).is_some());

        let e = BenchError::from(GpuError::NoDriver).on_rank(0);
        assert!(e.is_usage());
        assert!(
            e.message().starts_with("gpu: no CUDA driver"),
            "{}",
            e.message()
        );

        // A job-wide failure reads the same on every rank.
        let died = BootstrapError::PeerDied {
            rank: 2,
            host: String::new(),
            detail: "its connection was reset".into(),
        };
        let e = BenchError::from(died.clone()).on_rank(1);
        assert_eq!(e.message(), died.to_string());

        let e = BenchError::context("clock alignment", BenchError::usage("bad"));
        assert!(e.is_usage());
        assert_eq!(e.message(), "clock alignment: bad");
    }
}
