//! One error type for the fabric layer.
//!
//! Every variant prints as one line that says what went wrong and, where the caller can do
//! something about it, how to fix it. A failed libfabric call keeps its cause as data: the call's
//! name, the return code (printed by its libfabric name, `-FI_EAGAIN`), the library's own words
//! for it (`fi_strerror`, or `fi_cq_strerror` for completions) and the provider, because "write
//! failed" is useless when debugging a fabric and
//! `fi_writemsg: -FI_EAGAIN (Resource temporarily unavailable), provider efa` is not.
//!
//! The variants are leaves: libfabric reports codes, not nested errors, so only [`Error::Load`]
//! has a [`std::error::Error::source`] (the loader's own error, shown transparently). Callers
//! wrap this type (`#[from]`) and add their own context around it.

pub use efabench_fabric_sys::LoadError;

/// Errors of the fabric layer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// No libfabric could be loaded (the CLI exits 2 on this).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// `fi_getinfo` found nothing matching the request.
    #[error("no libfabric provider offers {wanted}; {}", available_hint(.available))]
    NoProvider {
        /// What was asked for, in words.
        wanted: String,
        /// Provider names that are available for RDM endpoints with MSG|RMA.
        available: Vec<String>,
    },
    /// A libfabric call returned an error.
    #[error("{call}: {} ({text}){}", code_name(*.errno), on_provider(.provider))]
    Call {
        /// The libfabric function, e.g. `fi_writemsg`.
        call: &'static str,
        /// Positive errno (libfabric returns `-errno`).
        errno: i32,
        /// `fi_strerror(errno)`.
        text: String,
        /// The provider of the rail the call was made on, when there was one.
        provider: Option<String>,
    },
    /// An operation completed with an error (read from the CQ's error queue).
    #[error(
        "{op}: completed with {}: {text} (prov_errno {prov_errno}){}",
        code_name(*.errno),
        on_provider(.provider)
    )]
    Completion {
        /// The libfabric call that posted the operation.
        op: &'static str,
        errno: i32,
        prov_errno: i32,
        /// `fi_cq_strerror` text for `prov_errno`, plus `fi_strerror(errno)`.
        text: String,
        provider: Option<String>,
    },
    /// A wait reached its deadline.
    #[error("timed out after {secs:.1} s waiting for {what}; the peer may be dead or unreachable (raise --timeout if it is only slow)")]
    Timeout { what: String, secs: f64 },
    /// The caller asked for something impossible (bad offset, wrong rail, …).
    #[error("{0}")]
    Usage(String),
    /// A health check passed to a wait reported a problem (e.g. a peer went away).
    #[error("{0}")]
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

    /// True for errors the caller can fix by asking differently (no library, no provider, bad
    /// arguments); the rest are failures of the fabric or of a peer.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::Load(_) | Error::NoProvider { .. } | Error::Usage(_)
        )
    }

    /// The error of a libfabric call that returned `ret` (`-errno`).
    pub(crate) fn call(
        call: &'static str,
        ret: i64,
        lib: &efabench_fabric_sys::Library,
        provider: Option<&str>,
    ) -> Error {
        let errno = ret.unsigned_abs().min(i32::MAX as u64) as i32;
        Error::Call {
            call,
            errno,
            text: lib.strerror(errno),
            provider: provider.map(str::to_owned),
        }
    }
}

fn available_hint(available: &[String]) -> String {
    if available.is_empty() {
        "none offers RDM endpoints with MSG|RMA at all (check FI_PROVIDER and the libfabric install)"
            .into()
    } else {
        format!(
            "available: {} (choose one with --provider)",
            available.join(", ")
        )
    }
}

fn on_provider(p: &Option<String>) -> String {
    match p {
        Some(p) => format!(", provider {p}"),
        None => String::new(),
    }
}

/// `-FI_EAGAIN` for 11: a libfabric return code by the name its headers give it (`-errno` when
/// the code has no name).
pub fn code_name(errno: i32) -> String {
    match errno_name(errno) {
        Some(n) => format!("-{n}"),
        None => format!("-{errno}"),
    }
}

/// The `FI_E*` name of a positive libfabric error code (`fi_errno.h`: POSIX errno values below
/// 256, libfabric's own from `FI_ERRNO_OFFSET`).
pub fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        1 => "FI_EPERM",
        2 => "FI_ENOENT",
        4 => "FI_EINTR",
        5 => "FI_EIO",
        7 => "FI_E2BIG",
        9 => "FI_EBADF",
        11 => "FI_EAGAIN",
        12 => "FI_ENOMEM",
        13 => "FI_EACCES",
        14 => "FI_EFAULT",
        16 => "FI_EBUSY",
        19 => "FI_ENODEV",
        22 => "FI_EINVAL",
        24 => "FI_EMFILE",
        28 => "FI_ENOSPC",
        38 => "FI_ENOSYS",
        42 => "FI_ENOMSG",
        61 => "FI_ENODATA",
        75 => "FI_EOVERFLOW",
        90 => "FI_EMSGSIZE",
        92 => "FI_ENOPROTOOPT",
        95 => "FI_EOPNOTSUPP",
        98 => "FI_EADDRINUSE",
        99 => "FI_EADDRNOTAVAIL",
        100 => "FI_ENETDOWN",
        101 => "FI_ENETUNREACH",
        103 => "FI_ECONNABORTED",
        104 => "FI_ECONNRESET",
        105 => "FI_ENOBUFS",
        106 => "FI_EISCONN",
        107 => "FI_ENOTCONN",
        108 => "FI_ESHUTDOWN",
        110 => "FI_ETIMEDOUT",
        111 => "FI_ECONNREFUSED",
        112 => "FI_EHOSTDOWN",
        113 => "FI_EHOSTUNREACH",
        114 => "FI_EALREADY",
        115 => "FI_EINPROGRESS",
        121 => "FI_EREMOTEIO",
        125 => "FI_ECANCELED",
        129 => "FI_EKEYREJECTED",
        256 => "FI_EOTHER",
        257 => "FI_ETOOSMALL",
        258 => "FI_EOPBADSTATE",
        259 => "FI_EAVAIL",
        260 => "FI_EBADFLAGS",
        261 => "FI_ENOEQ",
        262 => "FI_EDOMAIN",
        263 => "FI_ENOCQ",
        264 => "FI_ECRC",
        265 => "FI_ETRUNC",
        266 => "FI_ENOKEY",
        267 => "FI_ENOAV",
        268 => "FI_EOVERRUN",
        269 => "FI_ENORX",
        _ => return None,
    })
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use efabench_fabric_sys as sys;

    #[test]
    fn a_call_error_names_the_call_the_code_and_the_provider() {
        let e = Error::Call {
            call: "fi_writemsg",
            errno: sys::FI_EAGAIN,
            text: "Resource temporarily unavailable".into(),
            provider: Some("efa".into()),
        };
        assert_eq!(
            e.to_string(),
            "fi_writemsg: -FI_EAGAIN (Resource temporarily unavailable), provider efa"
        );
        assert_eq!(e.errno(), Some(11));
        assert!(!e.is_usage());
        assert!(std::error::Error::source(&e).is_none());
        let e = Error::Call {
            call: "fi_getinfo",
            errno: 4242,
            text: "Unknown error".into(),
            provider: None,
        };
        assert_eq!(e.to_string(), "fi_getinfo: -4242 (Unknown error)");
    }

    #[test]
    fn a_completion_error_keeps_both_codes() {
        let e = Error::Completion {
            op: "fi_writedata",
            errno: 5,
            prov_errno: 13,
            text: "Remote access error (Input/output error)".into(),
            provider: Some("tcp".into()),
        };
        let s = e.to_string();
        assert_eq!(
            s,
            "fi_writedata: completed with -FI_EIO: Remote access error (Input/output error) (prov_errno 13), provider tcp"
        );
    }

    #[test]
    fn every_libfabric_code_has_its_name() {
        for (code, name) in [
            (sys::FI_EAGAIN, "FI_EAGAIN"),
            (sys::FI_ENOSYS, "FI_ENOSYS"),
            (sys::FI_EOPNOTSUPP, "FI_EOPNOTSUPP"),
            (sys::FI_EAVAIL as i32, "FI_EAVAIL"),
            (sys::FI_ETRUNC as i32, "FI_ETRUNC"),
            (sys::FI_ENORX as i32, "FI_ENORX"),
        ] {
            assert_eq!(errno_name(code), Some(name));
        }
        for code in sys::FI_ERRNO_OFFSET..sys::FI_ERRNO_MAX as i32 {
            assert!(errno_name(code).is_some(), "{code}");
        }
        assert_eq!(errno_name(0), None);
        assert_eq!(code_name(3), "-3");
    }
}
