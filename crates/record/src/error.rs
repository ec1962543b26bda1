//! The report layer's error: one line that says what is wrong and how to fix it, plus whether
//! the fault is in the caller's input (a bad path, file, field or option: the CLI exits 2) or in
//! the run itself (a write that failed half-way, a backend that could not draw: exit 1).

/// Whether an [`Error`] is the user's input or a failure while doing the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input: a path that cannot be opened, a malformed record, an unknown field or format.
    BadInput,
    /// The work failed part-way (an I/O error after opening, a drawing backend error).
    Failed,
}

/// A one-line error message with its [`ErrorKind`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
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

/// `std::io::Error`'s Display adds " (os error 2)"; users only need the reason.
pub fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// An error and its causes on one line, outermost first: `rank 1: fabric: fi_writemsg failed:
/// Resource temporarily unavailable (-11)`.
///
/// This walks `source()` and joins the messages with `": "`. A cause whose words the message so
/// far already holds is not repeated (the project's errors print their cause in their own
/// message, at its end or in the middle, so that `{e}` alone is complete; foreign errors may
/// not), and every message is cut to its first line, so the result stays one line whatever a
/// lower layer produced.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("");
        if !line.is_empty() && !out.contains(line) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(line);
        }
        next = err.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn a_chain_prints_outermost_first_on_one_line() {
        let e = Layer(
            "rank 1",
            Some(Box::new(Layer(
                "fabric",
                Some(Box::new(Layer(
                    "fi_writemsg failed: busy (-11)\nmore",
                    None,
                ))),
            ))),
        );
        assert_eq!(chain(&e), "rank 1: fabric: fi_writemsg failed: busy (-11)");
        // A layer that already quotes its cause is not printed twice.
        let e = Layer("cannot open x: gone", Some(Box::new(Layer("gone", None))));
        assert_eq!(chain(&e), "cannot open x: gone");
        let e = Layer(
            "record 2 has a malformed field (missing `x`); pass other records",
            Some(Box::new(Layer("missing `x`", None))),
        );
        assert_eq!(
            chain(&e),
            "record 2 has a malformed field (missing `x`); pass other records"
        );
        let io = std::io::Error::other("disk on fire");
        assert_eq!(chain(&io), "disk on fire");
    }
}
