//! One error type for the fabric layer.
//!
//! Every variant prints as one line that says what went wrong and, where the caller can do
//! something about it, how to fix it. Provider failures keep the provider's own words
//! (`fi_strerror`, or `fi_cq_readerr` + `fi_cq_strerror` for completions) and the errno, because
//! "write failed" is useless when debugging a fabric and "Permission denied (prov_errno 13)" is not.

use std::fmt;

pub use efabench_fabric_sys::LoadError;

/// Errors of the fabric layer.
#[derive(Debug, Clone)]
pub enum Error {
    /// No libfabric could be loaded (the CLI exits 2 on this).
    Load(LoadError),
    /// `fi_getinfo` found nothing matching the request.
    NoProvider {
        /// What was asked for, in words.
        wanted: String,
        /// Provider names that are available for RDM endpoints with MSG|RMA.
        available: Vec<String>,
    },
    /// A libfabric call returned an error.
    Call {
        call: &'static str,
        /// Positive errno (libfabric returns `-errno`).
        errno: i32,
        text: String,
    },
    /// An operation completed with an error (read from the CQ's error queue).
    Completion {
        op: &'static str,
        errno: i32,
        prov_errno: i32,
        /// `fi_cq_strerror` text for `prov_errno`, plus `fi_strerror(errno)`.
        text: String,
    },
    /// A wait reached its deadline.
    Timeout { what: String, secs: f64 },
    /// The caller asked for something impossible (bad offset, wrong rail, …).
    Usage(String),
    /// A health check passed to a wait reported a problem (e.g. a peer went away).
    Health(String),
}

impl Error {
    /// The errno libfabric reported, when there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Call { errno, .. } | Error::Completion { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Load(e) => write!(f, "{e}"),
            Error::NoProvider { wanted, available } => {
                write!(f, "no libfabric provider offers {wanted}; ")?;
                if available.is_empty() {
                    write!(
                        f,
                        "none offers RDM endpoints with MSG|RMA at all (check FI_PROVIDER and the libfabric install)"
                    )
                } else {
                    write!(
                        f,
                        "available: {} (choose one with --provider)",
                        available.join(", ")
                    )
                }
            }
            Error::Call { call, errno, text } => write!(f, "{call} failed: {text} (-{errno})"),
            Error::Completion {
                op,
                errno,
                prov_errno,
                text,
            } => write!(
                f,
                "{op} completed with an error: {text} (errno {errno}, prov_errno {prov_errno})"
            ),
            Error::Timeout { what, secs } => write!(
                f,
                "timed out after {secs:.1} s waiting for {what}; the peer may be dead or unreachable (raise --timeout if it is only slow)"
            ),
            Error::Usage(s) => write!(f, "{s}"),
            Error::Health(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<LoadError> for Error {
    fn from(e: LoadError) -> Self {
        Error::Load(e)
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
