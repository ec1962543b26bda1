//! Point-to-point benchmarks: `sendrecv`, `write`, `read`, each with a `pingpong` (latency, one
//! message in flight) and a `stream` (bandwidth, a window of messages in flight) variant.
//!
//! Rank 0 measures every other rank in turn; the measured rank is the record's `peer`. Every
//! (variant, size, peer) step is bracketed by a bootstrap barrier so idle ranks never wait longer
//! than one step, and a dead rank is noticed by the bootstrap's heartbeats.
//!
//! # What is timed, and what is verified
//!
//! * **pingpong** times each round trip and reports half of it (one-way latency), except `read`,
//!   whose latency is the post-to-completion time of one read (a read is a round trip by nature).
//!   Payloads alternate between two slots so each side verifies the message it just received
//!   while the next one is already on the wire: verification never sits inside the timed path.
//! * **stream** times a window of `--window` messages (default 64) from the first post until the
//!   receiver says every message of the window landed (an acknowledgement message for send/recv
//!   and write; the local completions for read). The receiver then verifies every slot, and only
//!   then tells the sender it may start the next window (untimed). Window time / window is the
//!   per-message time in `lat_us`.
//! * Every payload carries the pattern of `(iteration, source, destination, slot)`; see
//!   [`crate::pattern`]. A write's target learns that a message landed from the remote CQ data of
//!   *that* message (window and slot in 32 bits, which EFA's 4-byte CQ data can carry), never from
//!   the last one: EFA does not order RMA, so "the last write arrived" proves nothing about the
//!   others (Libefaxx's mistake).

mod link;
mod protocol;
mod run;

pub use run::{run_p2p, BuildInfo, P2pArgs, Variant};
