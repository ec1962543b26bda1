//! Counting one phase's arrivals: writes by CQ data, count signals per source.

use super::*;

/// Counts one phase's arrivals.
pub(super) struct Arrivals {
    pub(super) msg: Kind,
    pub(super) sig: Kind,
    pub(super) iter: u64,
    pub(super) channels: usize,
    /// Writes counted per source and channel, and per source.
    pub(super) got: Vec<Vec<u32>>,
    pub(super) got_total: Vec<u32>,
    /// Writes each source announced, once its signal arrived.
    pub(super) announced: Vec<Option<u32>>,
    /// When each source became complete (its signal and every write it announced).
    pub(super) done_at: Vec<Option<Instant>>,
    pub(super) missing_sources: usize,
    pub(super) errors: u64,
}

impl Arrivals {
    pub(super) fn new(phase: Phase, iter: u64, world: usize, channels: usize) -> Arrivals {
        let (msg, sig) = phase.kinds();
        Arrivals {
            msg,
            sig,
            iter,
            channels,
            got: vec![vec![0; channels]; world],
            got_total: vec![0; world],
            announced: vec![None; world],
            done_at: vec![None; world],
            missing_sources: world,
            errors: 0,
        }
    }

    pub(super) fn source_done(&self, src: usize) -> bool {
        self.announced[src] == Some(self.got_total[src])
    }

    /// One CQ data word.
    pub(super) fn take(&mut self, d: u64) {
        let Some((kind, it, src, idx)) = parse_cq_data(d) else {
            self.errors += 1;
            return;
        };
        let src = src as usize;
        if it != self.iter & 0xF || src >= self.got.len() {
            self.errors += 1;
            return;
        }
        let was = self.source_done(src);
        if kind == self.msg && (idx as usize) < self.channels {
            self.got[src][idx as usize] += 1;
            self.got_total[src] += 1;
        } else if kind == self.sig && self.announced[src].is_none() {
            self.announced[src] = Some(idx as u32);
        } else {
            self.errors += 1;
            return;
        }
        if !was && self.source_done(src) {
            self.missing_sources -= 1;
            self.done_at[src] = Some(Instant::now());
        } else if was && !self.source_done(src) {
            // A write beyond what the signal announced.
            self.missing_sources += 1;
        }
    }

    /// This rank's own messages, copied locally: arrived at once.
    pub(super) fn local(&mut self, me: usize, expect: &[u32]) {
        let was = self.source_done(me);
        self.got[me] = expect.to_vec();
        self.got_total[me] = expect.iter().sum();
        self.announced[me] = Some(self.got_total[me]);
        if !was {
            self.missing_sources -= 1;
            self.done_at[me] = Some(Instant::now());
        }
    }

    pub(super) fn complete(&self) -> bool {
        self.missing_sources == 0
    }

    /// Errors of the count blocks (`blocks[src][channel]` = announced (messages, writes)):
    /// messages that disagree with the routing, writes that disagree with the CQ data counted.
    pub(super) fn check_blocks(
        &self,
        me: usize,
        blocks: &[Vec<(u32, u32)>],
        expect: &[Vec<u32>],
    ) -> u64 {
        let mut bad = 0;
        for (src, b) in blocks.iter().enumerate() {
            if src == me {
                continue;
            }
            for (c, (m, w)) in b.iter().enumerate() {
                bad += (*m != expect[src][c]) as u64 + (*w != self.got[src][c]) as u64;
            }
        }
        bad
    }

    pub(super) fn describe(&self) -> String {
        let waiting: Vec<String> = (0..self.got.len())
            .filter(|&s| !self.source_done(s))
            .take(8)
            .map(|s| match self.announced[s] {
                None => format!(
                    "rank {s}'s count signal ({} writes so far)",
                    self.got_total[s]
                ),
                Some(a) => format!("{} of rank {s}'s {a} writes", self.got_total[s]),
            })
            .collect();
        waiting.join(", ")
    }
}
