//! The one error type of the bootstrap layer.
//!
//! Every failure has to end up as a single line that a cluster engineer can act on, and every
//! rank of a failed job should print the *same* cause ("rank 3 stopped answering"), not a chain of
//! secondary effects ("connection reset"). So the rank that first notices a problem turns it into a
//! [`BootstrapError`], rank 0 sends that value to every other rank, and they all report it.
//!
//! [`BootstrapError::is_usage`] separates configuration mistakes (bad or missing launcher
//! variables, no rendezvous address: exit status 2) from failures at run time (exit status 1).

use std::io;
use std::sync::Arc;
use std::time::Duration;

/// What went wrong while finding our rank or talking to the other ranks.
///
/// Every rank of a failed job reports the value rank 0 sent it, so the variants hold plain data
/// that crosses the wire (`wire::encode_error`); only [`BootstrapError::Io`] has a cause, the
/// local `io::Error` (its words travel as text and come back as an `io::Error` of kind `Other`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum BootstrapError {
    /// Bad flags or launcher variables, or no rendezvous address: the user has to fix the
    /// command line or the environment (exit status 2).
    #[error("{}", one_line(.0))]
    Usage(String),
    /// A rank's connection ended without a goodbye: the process exited or was killed. `host`
    /// is the host it said it ran on when it joined (empty where unknown).
    #[error(
        "rank {rank}{} died: {} (look at rank {rank}'s own output for why it exited)",
        on_host(.host),
        one_line(.detail)
    )]
    PeerDied {
        rank: u32,
        host: String,
        detail: String,
    },
    /// A rank sent nothing, not even a heartbeat, for `silent_for`: frozen, stopped or cut off.
    #[error(
        "rank {rank}{} stopped answering (no heartbeat for {}): the process is frozen, stopped \
         or cut off from the network; raise --timeout if it is only overloaded",
        on_host(.host),
        secs_ref(.silent_for)
    )]
    PeerSilent {
        rank: u32,
        host: String,
        silent_for: Duration,
    },
    /// A rank called `abort` (or failed and said why).
    #[error("rank {rank} aborted the job: {}", one_line(.reason))]
    Aborted { rank: u32, reason: String },
    /// A collective (or the initial connect) waited longer than the timeout for some ranks.
    #[error("{}", timeout_message(.op, .waiting_for, .after))]
    Timeout {
        op: String,
        waiting_for: Vec<u32>,
        after: Duration,
    },
    /// Rank 0's rendezvous could not be reached before the deadline.
    #[error(
        "could not reach rank 0's rendezvous at {addr}: {}; check that rank 0 runs on that host \
         and that the port is reachable (--rdzv / MASTER_ADDR / MASTER_PORT)",
        one_line(.detail)
    )]
    Connect { addr: String, detail: String },
    /// Rank 0's rendezvous answered but refused this rank (wrong job token, world size, ...).
    #[error("the rendezvous at {addr} refused this rank: {}", one_line(.reason))]
    Refused { addr: String, reason: String },
    /// A rank sent something that is not a valid message of this protocol.
    #[error(
        "rank {rank} sent an invalid bootstrap message ({}); are all ranks the same efabench \
         version?",
        one_line(.detail)
    )]
    Protocol { rank: u32, detail: String },
    /// A rank closed its bootstrap normally, but a collective still needs it.
    #[error(
        "rank {rank} already left the job but {} still needs it; every rank must call the same \
         collectives in the same order",
        one_line(.op)
    )]
    Left { rank: u32, op: String },
    /// A local failure (the rendezvous port is already in use, a thread cannot start, a message
    /// too large): `what` says what we were doing, `source` is the operating system's reason.
    #[error("{}{}", one_line(.what), cause(.source))]
    Io {
        what: String,
        #[source]
        source: Option<Arc<io::Error>>,
    },
}

impl BootstrapError {
    /// True for mistakes in the command line or environment (the CLI exits 2 for these).
    pub fn is_usage(&self) -> bool {
        matches!(self, BootstrapError::Usage(_))
    }

    /// The rank this error is about, when it is about one rank.
    pub fn failed_rank(&self) -> Option<u32> {
        match self {
            BootstrapError::PeerDied { rank, .. }
            | BootstrapError::PeerSilent { rank, .. }
            | BootstrapError::Aborted { rank, .. }
            | BootstrapError::Protocol { rank, .. }
            | BootstrapError::Left { rank, .. } => Some(*rank),
            BootstrapError::Timeout { waiting_for, .. } if waiting_for.len() == 1 => {
                Some(waiting_for[0])
            }
            _ => None,
        }
    }

    pub(crate) fn usage(msg: impl Into<String>) -> Self {
        BootstrapError::Usage(msg.into())
    }

    /// A local I/O failure while doing `what`, keeping the operating system's error as the cause.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        BootstrapError::Io {
            what: what.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// A local failure that has no operating-system cause.
    pub fn local(what: impl Into<String>) -> Self {
        BootstrapError::Io {
            what: what.into(),
            source: None,
        }
    }

    /// The whole message with its cause, on one line: what a rank prints and what it sends.
    pub fn message(&self) -> String {
        efabench_record::chain(self)
    }
}

/// Two failures are equal when they would say the same thing on the wire (an `io::Error`
/// cannot be compared, its words can).
impl PartialEq for BootstrapError {
    fn eq(&self, other: &Self) -> bool {
        crate::wire::encode_error(self) == crate::wire::encode_error(other)
    }
}

impl Eq for BootstrapError {}

/// "3", "3 and 5", "1, 2, 4 and 7 more": short lists of ranks for messages.
pub(crate) fn rank_list(ranks: &[u32]) -> String {
    const SHOWN: usize = 8;
    let shown: Vec<String> = ranks.iter().take(SHOWN).map(|r| r.to_string()).collect();
    let mut s = match shown.len() {
        0 => String::from("none"),
        1 => shown[0].clone(),
        _ if ranks.len() <= SHOWN => {
            format!(
                "{} and {}",
                shown[..shown.len() - 1].join(", "),
                shown[shown.len() - 1]
            )
        }
        _ => shown.join(", "),
    };
    if ranks.len() > SHOWN {
        s.push_str(&format!(" and {} more", ranks.len() - SHOWN));
    }
    s
}

fn secs_ref(d: &Duration) -> String {
    secs(*d)
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 || s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// At most `max` characters of `s` (control characters dropped), with "..." when cut: user
/// input echoed in a message must not make it long.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    let clean: String = s.chars().filter(|c| !c.is_control()).collect();
    if clean.chars().count() <= max {
        clean
    } else {
        let mut cut: String = clean.chars().take(max).collect();
        cut.push_str("...");
        cut
    }
}

/// " on HOST" for a known host, nothing for an unknown one.
fn on_host(host: &str) -> String {
    if host.is_empty() {
        String::new()
    } else {
        format!(" on {}", shorten(host, 64))
    }
}

/// ": the reason" for a known cause.
fn cause(source: &Option<Arc<io::Error>>) -> String {
    match source {
        Some(e) => format!(": {}", one_line(&e.to_string())),
        None => String::new(),
    }
}

/// Keep messages on one line whatever a peer sent us.
fn one_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    line.chars().filter(|c| !c.is_control()).take(400).collect()
}

fn timeout_message(op: &str, waiting_for: &[u32], after: &Duration) -> String {
    let who = if waiting_for.len() == 1 {
        "rank"
    } else {
        "ranks"
    };
    if op == "connect" {
        format!(
            "{who} {} did not join the job within {}: not started, crashed during start-up, or \
             given another rendezvous address or job token",
            rank_list(waiting_for),
            secs(*after)
        )
    } else {
        format!(
            "{} timed out waiting for {who} {}: no rank made progress for {}; they are alive \
             (heartbeats arrive) but stuck, or busy in work that reports no progress (raise \
             --timeout if so)",
            one_line(op),
            rank_list(waiting_for),
            secs(*after)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists_read_naturally() {
        assert_eq!(rank_list(&[3]), "3");
        assert_eq!(rank_list(&[3, 5]), "3 and 5");
        assert_eq!(rank_list(&[1, 2, 4]), "1, 2 and 4");
        let many: Vec<u32> = (0..20).collect();
        assert_eq!(rank_list(&many), "0, 1, 2, 3, 4, 5, 6, 7 and 12 more");
    }

    #[test]
    fn messages_are_one_line_and_name_the_rank() {
        let e = BootstrapError::PeerSilent {
            rank: 3,
            host: String::new(),
            silent_for: Duration::from_secs(10),
        };
        let s = e.to_string();
        assert!(
            s.starts_with("rank 3 stopped answering (no heartbeat for 10 s)"),
            "{s}"
        );
        assert_eq!(e.failed_rank(), Some(3));
        let e = BootstrapError::Aborted {
            rank: 2,
            reason: "bad\nsecond line\u{7}".into(),
        };
        assert_eq!(e.to_string(), "rank 2 aborted the job: bad");
        assert!(!e.is_usage());
        assert!(BootstrapError::usage("x").is_usage());
    }

    #[test]
    fn a_local_failure_keeps_its_cause() {
        let e = BootstrapError::io(
            "rank 0 cannot listen on h:1",
            io::Error::new(io::ErrorKind::AddrInUse, "address in use"),
        );
        assert_eq!(e.to_string(), "rank 0 cannot listen on h:1: address in use");
        assert_eq!(e.message(), e.to_string());
        assert!(std::error::Error::source(&e).is_some());
    }
}
