//! The report layer's error: one line that says what is wrong and how to fix it, plus whether
//! the fault is in the caller's input (a bad path, file, field or option: the CLI exits 2) or in
//! the run itself (a write that failed half-way, a backend that could not draw: exit 1).

use std::fmt;

/// Whether an [`Error`] is the user's input or a failure while doing the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input: a path that cannot be opened, a malformed record, an unknown field or format.
    BadInput,
    /// The work failed part-way (an I/O error after opening, a drawing backend error).
    Failed,
}

/// A one-line error message with its [`ErrorKind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    msg: String,
}

impl Error {
    pub fn bad_input(msg: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadInput, msg)
    }
    pub fn failed(msg: impl Into<String>) -> Self {
        Self::new(ErrorKind::Failed, msg)
    }
    fn new(kind: ErrorKind, msg: impl Into<String>) -> Self {
        // Keep the promise of one line even when a lower layer's message had several.
        let msg: String = msg.into();
        let msg = msg
            .split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        Error { kind, msg }
    }
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

/// `std::io::Error`'s Display adds " (os error 2)"; users only need the reason.
pub fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
