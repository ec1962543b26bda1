//! The report layer's own errors: a drawing backend that failed and an `ep` record whose stages
//! or settings do not read. They are typed so the cause (the backend's error, serde's) stays
//! attached for the CLI's one-line chain; every other refusal of a path, file, field or option
//! is the record crate's one-line [`Error`], carried in [`ReportError::Record`].

use efabench_record::{Error, ErrorKind};
use std::path::PathBuf;

/// What a drawing backend returned, boxed: its type depends on the backend (PNG or SVG).
pub type DrawFailure = Box<dyn std::error::Error + Send + Sync>;

/// Why a plot was not drawn.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A path, file, field or option the report layer refused, or a write that failed.
    #[error(transparent)]
    Record(#[from] Error),
    /// The drawing backend failed part-way.
    #[error("cannot draw the plot to {}: {source}", path.display())]
    Draw {
        path: PathBuf,
        #[source]
        source: DrawFailure,
    },
    /// A record's `ep_stages` or `ep` settings do not deserialize.
    #[error(
        "record {} of {} has a malformed {what} ({source}); pass records written by `efabench ep -o`",
        index + 1,
        file.display()
    )]
    Malformed {
        /// 0-based position of the record in its file.
        index: usize,
        file: PathBuf,
        /// `ep_stages` or `ep field`.
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A stage time that is negative or not finite.
    #[error(
        "record {} of {} has a malformed ep_stages ({stage}_us is {value}); pass records written by `efabench ep -o`",
        index + 1,
        file.display()
    )]
    StageValue {
        index: usize,
        file: PathBuf,
        stage: &'static str,
        value: f64,
    },
}

impl ReportError {
    /// Bad input described in one line (the record crate's [`Error::bad_input`]).
    pub fn bad_input(msg: impl Into<String>) -> Self {
        ReportError::Record(Error::bad_input(msg))
    }

    /// Whether the caller's input is at fault (the CLI exits 2) or the work failed (exit 1).
    pub fn kind(&self) -> ErrorKind {
        match self {
            ReportError::Record(e) => e.kind(),
            ReportError::Draw { .. } => ErrorKind::Failed,
            ReportError::Malformed { .. } | ReportError::StageValue { .. } => ErrorKind::BadInput,
        }
    }
}
