//! Where a phase's time goes: the stages of the proxy side, charged by one clock so they add up.

use super::*;

/// Where a phase's time went on this rank (ns). The proxy-side stages (`launch` to `settle`)
/// partition `total_ns` (before the combine's `reduce_ns`): every instant of the phase is charged
/// to exactly one of them by [`Clock`]. `push_ns` is the producer's own span; it overlaps them.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PhaseTimes {
    /// Start of the phase to its end (every arrival counted, every own write completed, queued
    /// device copies settled), plus `reduce_ns` for the combine.
    pub total_ns: u64,
    /// The producer's first push to its last put (ring initiators; 0 for `cpu`). Overlaps the
    /// stages below; not part of their sum.
    pub push_ns: u64,
    /// Ring initiators: start of the phase (just before the kernel launch or the producer
    /// thread's start) to the first command the proxy reads: the launch, the kernel being
    /// scheduled (under MPS, next to the other rank's), its first push.
    pub launch_ns: u64,
    /// Time spent inside the post calls.
    pub post_ns: u64,
    /// Time spent copying this rank's messages to itself.
    pub copy_ns: u64,
    /// The rest of the posting time: the proxy polling completions between posts, and waiting
    /// for the producer's next command while some of its puts are still to come.
    pub feed_ns: u64,
    /// Ring initiators: every put read, waiting for the producer's count signals, i.e. its
    /// quiet: the completion of every put it pushed (the proxy polls completions meanwhile).
    pub quiet_ns: u64,
    /// Everything posted to the last local completion of this rank's writes.
    pub network_ns: u64,
    /// Last local completion to the last expected arrival (0 when the arrivals came first).
    pub arrival_ns: u64,
    /// Waiting for the device copies this process queued (shm's CUDA path) to land.
    pub settle_ns: u64,
    /// The combine's weighted sum at the source (included in `total_ns`).
    pub reduce_ns: u64,
    /// Writes posted (remote ones, signals included).
    pub writes: u64,
    /// Ring commands the proxy merged into the write before them (contiguous puts to the same
    /// destination and channel); 0 without merging.
    pub merged: u64,
    /// CQ data that did not belong to this phase, or counts that disagree with the routing.
    pub errors: u64,
}

impl PhaseTimes {
    /// The sum of the proxy-side stages (= `total_ns - reduce_ns` when measured by [`Clock`]).
    pub fn stage_sum_ns(&self) -> u64 {
        self.launch_ns
            + self.post_ns
            + self.copy_ns
            + self.feed_ns
            + self.quiet_ns
            + self.network_ns
            + self.arrival_ns
            + self.settle_ns
    }
}

/// A stage of the proxy side of a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Launch,
    Post,
    Copy,
    Feed,
    Quiet,
    Network,
    Arrival,
    Settle,
}

/// Charges every instant from its start to exactly one stage: [`Clock::enter`] closes the
/// current stage at `now` and opens the next one there, so the stages add up to the elapsed time.
#[derive(Clone, Debug)]
pub struct Clock {
    pub(super) start: Instant,
    mark: Instant,
    stage: Stage,
    ns: [u64; 8],
}

impl Clock {
    pub fn start_at(start: Instant, stage: Stage) -> Clock {
        Clock {
            start,
            mark: start,
            stage,
            ns: [0; 8],
        }
    }

    /// Closes the current stage now and opens `next`; returns the stage it closed.
    pub fn enter(&mut self, next: Stage) -> Stage {
        self.enter_at(Instant::now(), next)
    }

    pub(super) fn enter_at(&mut self, now: Instant, next: Stage) -> Stage {
        let d = now.saturating_duration_since(self.mark).as_nanos() as u64;
        self.ns[self.stage as usize] += d;
        self.mark = now.max(self.mark);
        std::mem::replace(&mut self.stage, next)
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// Closes the current stage and writes every stage and the total into `t`.
    pub fn finish(&mut self, t: &mut PhaseTimes) {
        let s = self.stage;
        self.enter(s);
        let n = |s: Stage| self.ns[s as usize];
        t.launch_ns = n(Stage::Launch);
        t.post_ns = n(Stage::Post);
        t.copy_ns = n(Stage::Copy);
        t.feed_ns = n(Stage::Feed);
        t.quiet_ns = n(Stage::Quiet);
        t.network_ns = n(Stage::Network);
        t.arrival_ns = n(Stage::Arrival);
        t.settle_ns = n(Stage::Settle);
        t.total_ns = self.mark.saturating_duration_since(self.start).as_nanos() as u64;
    }
}
