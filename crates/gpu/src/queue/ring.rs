//! The host side of the FIFO and Vyukov rings: slot words, the geometry that deals slots to
//! consumers, the views a consumer reads through, the consumers themselves and the verifier that
//! catches a command lost, doubled, torn or out of range. Nothing here needs a GPU: tests drive
//! these rings with host threads standing in for the producers.

use super::{MAX_CONSUMERS, TAIL_STRIDE, V_COMPLETED, V_HEAD, V_POSTED, V_TAIL};
use crate::pattern;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The lap-parity flag a slot at ring position `pos` carries: `(lap & 1) ^ 1`, so a zeroed ring
/// never looks written.
#[inline(always)]
pub const fn lap_flag(pos: u64, nslots_log2: u32) -> u64 {
    ((pos >> nslots_log2) & 1) ^ 1
}

/// The first word of a command: the pattern of (seq, producer, salt).
#[inline(always)]
pub fn command_fst(seq: u64, producer: u64, salt: u64) -> u64 {
    pattern::seed(seq, producer as u32, salt as u32, 0)
}

/// The second word: parity << 63 | producer << 32 | seq.
#[inline(always)]
pub const fn command_snd(seq: u64, producer: u64, pos: u64, nslots_log2: u32) -> u64 {
    (lap_flag(pos, nslots_log2) << 63) | ((producer & 0x7fff_ffff) << 32) | (seq & 0xffff_ffff)
}

/// (flag, producer, seq) of a second word.
#[inline(always)]
pub const fn decode_snd(snd: u64) -> (u64, u64, u64) {
    (snd >> 63, (snd >> 32) & 0x7fff_ffff, snd & 0xffff_ffff)
}

/// The shape of a FIFO ring: 2^nslots_log2 slots in chunks of 2^chunk_log2 slots, the chunks
/// dealt to the consumers round robin.
///
/// Ownership follows the *slot*, not the position: chunk k of every lap belongs to consumer
/// k mod consumers. So the consumer that takes position p is the one that took p − slots before
/// it, and when it arrives at p the slot holds either the command of p − slots (already taken,
/// opposite lap parity) or the command of p. A one-bit lap flag is then enough for any consumer
/// count. Had ownership followed the position (chunk p >> chunk_log2 mod consumers), a consumer
/// count that does not divide the chunks of a lap would hand position p to a consumer that never
/// saw p − slots: arriving early, it could find the command of p − 2·slots still in the slot, with
/// the parity of p, and take it a second time while p's own command was later lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub nslots_log2: u32,
    pub chunk_log2: u32,
    pub consumers: u32,
}

impl Geometry {
    pub fn new(nslots_log2: u32, chunk_log2: u32, consumers: u32) -> Result<Geometry, String> {
        if !(1..=MAX_CONSUMERS as u32).contains(&consumers) {
            return Err(format!(
                "--consumers {consumers} is out of range: use 1 to {MAX_CONSUMERS}"
            ));
        }
        if chunk_log2 > nslots_log2 || !(4..=26).contains(&nslots_log2) {
            return Err(format!(
                "ring of 2^{nslots_log2} slots with chunks of 2^{chunk_log2}: use 2^4..2^26 slots \
                 and chunks no larger than the ring"
            ));
        }
        let chunks = 1u64 << (nslots_log2 - chunk_log2);
        if chunks < consumers as u64 {
            return Err(format!(
                "a ring of 2^{nslots_log2} slots in chunks of 2^{chunk_log2} has {chunks} chunks, \
                 fewer than the {consumers} consumers: use a larger ring or fewer consumers"
            ));
        }
        Ok(Geometry {
            nslots_log2,
            chunk_log2,
            consumers,
        })
    }

    /// The geometry a run uses: chunks of up to 256 slots, small enough that every consumer owns
    /// at least one chunk, and (for a consumer count that is not a power of two) at least four
    /// chunks per consumer, so the uneven share of the last round stays under a quarter of the
    /// ring.
    pub fn for_run(nslots_log2: u32, consumers: u32) -> Result<Geometry, String> {
        let spread = if consumers.is_power_of_two() {
            consumers.trailing_zeros()
        } else {
            consumers.next_power_of_two().trailing_zeros() + 2
        };
        let chunk_log2 = 8.min(nslots_log2.saturating_sub(spread));
        Geometry::new(nslots_log2, chunk_log2, consumers)
    }

    pub fn nslots(&self) -> u64 {
        1 << self.nslots_log2
    }
    /// Chunks in one lap of the ring.
    fn chunks(&self) -> u64 {
        1 << (self.nslots_log2 - self.chunk_log2)
    }
    /// The consumer that owns position `pos` (the same for every lap of its slot).
    #[inline(always)]
    pub fn owner(&self, pos: u64) -> u32 {
        (((pos & (self.nslots() - 1)) >> self.chunk_log2) % self.consumers as u64) as u32
    }
    /// The first position consumer `c` owns.
    pub fn first_owned(&self, c: u32) -> u64 {
        (c as u64) << self.chunk_log2
    }
    /// The position consumer `c` owns after `pos` (which it owns).
    #[inline(always)]
    pub fn next_owned(&self, pos: u64) -> u64 {
        let next = pos + 1;
        if next & ((1 << self.chunk_log2) - 1) != 0 {
            return next;
        }
        // `pos` ended a chunk: the consumer's next chunk is `consumers` chunks on in this lap,
        // or its first chunk of the next lap.
        let lap = pos >> self.nslots_log2;
        let chunk = (pos & (self.nslots() - 1)) >> self.chunk_log2;
        let following = chunk + self.consumers as u64;
        let (lap, chunk) = if following < self.chunks() {
            (lap, following)
        } else {
            (lap + 1, chunk % self.consumers as u64)
        };
        (lap << self.nslots_log2) | (chunk << self.chunk_log2)
    }
}

/// A FIFO ring as the host sees it: the slot words and the consumer tails, through the CPU's
/// mapping of wherever they live.
#[derive(Clone, Copy)]
pub struct FifoView<'a> {
    /// 2 words per slot.
    pub slots: &'a [AtomicU64],
    /// `TAIL_STRIDE` words per consumer.
    pub tails: &'a [AtomicU64],
    pub geometry: Geometry,
    /// The tails are write-combined device memory (GDRCopy): flush stores with a fence.
    pub tails_write_combined: bool,
}

impl FifoView<'_> {
    /// Writes the command at `pos` as the GPU does (used by host producers in tests): fst first,
    /// then snd with the flag, release.
    pub fn host_push(&self, pos: u64, seq: u64, producer: u64, salt: u64) {
        let i = (pos & (self.geometry.nslots() - 1)) as usize;
        self.slots[2 * i].store(command_fst(seq, producer, salt), Ordering::Relaxed);
        self.slots[2 * i + 1].store(
            command_snd(seq, producer, pos, self.geometry.nslots_log2),
            Ordering::Release,
        );
    }
    /// Consumer `c`'s tail.
    pub fn tail(&self, c: u32) -> u64 {
        self.tails[c as usize * TAIL_STRIDE].load(Ordering::Acquire)
    }
    fn publish(&self, c: u32, pos: u64) {
        self.tails[c as usize * TAIL_STRIDE].store(pos, Ordering::Release);
        if self.tails_write_combined {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }
}

/// What each received command was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Ok,
    /// Received before (same producer and sequence).
    Duplicate,
    /// The pattern word does not belong to the command word: torn, stale or foreign.
    Torn,
    /// Producer or sequence outside the run.
    OutOfRange,
}

/// Per-run verification: one bit per (sequence, producer), shared by the consumers.
pub struct Verifier {
    producers: u64,
    per_producer: u64,
    salt: u64,
    bits: Vec<AtomicU64>,
    shared: bool,
}

/// Error counts of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errors {
    pub lost: u64,
    pub duplicated: u64,
    pub torn: u64,
    pub out_of_range: u64,
    /// Received although its producer says it never pushed it.
    pub phantom: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.lost + self.duplicated + self.torn + self.out_of_range + self.phantom
    }
}

impl Verifier {
    /// `shared`: more than one consumer checks concurrently (atomic bit updates).
    pub fn new(producers: u64, per_producer: u64, salt: u64, shared: bool) -> Verifier {
        let n = (producers * per_producer).div_ceil(64) as usize;
        Verifier {
            producers,
            per_producer,
            salt,
            bits: (0..n).map(|_| AtomicU64::new(0)).collect(),
            shared,
        }
    }

    /// Checks one received command and marks it received.
    #[inline]
    pub fn check(&self, fst: u64, snd: u64) -> Check {
        let (_, producer, seq) = decode_snd(snd);
        if producer >= self.producers || seq >= self.per_producer {
            return Check::OutOfRange;
        }
        let torn = fst != command_fst(seq, producer, self.salt);
        let idx = seq * self.producers + producer;
        let (w, bit) = ((idx / 64) as usize, 1u64 << (idx % 64));
        let before = if self.shared {
            self.bits[w].fetch_or(bit, Ordering::Relaxed)
        } else {
            let v = self.bits[w].load(Ordering::Relaxed);
            self.bits[w].store(v | bit, Ordering::Relaxed);
            v
        };
        if before & bit != 0 {
            Check::Duplicate
        } else if torn {
            Check::Torn
        } else {
            Check::Ok
        }
    }

    /// Commands received at least once.
    pub fn received(&self) -> u64 {
        self.bits
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as u64)
            .sum()
    }

    /// Lost and phantom counts against what each producer says it pushed.
    pub fn finish(&self, pushed: &[u32], errors: &mut Errors) {
        let full = pushed.iter().all(|&p| p as u64 == self.per_producer);
        if full && pushed.len() as u64 == self.producers {
            errors.lost += self.producers * self.per_producer - self.received();
            return;
        }
        for seq in 0..self.per_producer {
            for p in 0..self.producers {
                let idx = seq * self.producers + p;
                let set = self.bits[(idx / 64) as usize].load(Ordering::Relaxed) >> (idx % 64) & 1;
                let was_pushed = seq < pushed.get(p as usize).copied().unwrap_or(0) as u64;
                match (was_pushed, set == 1) {
                    (true, false) => errors.lost += 1,
                    (false, true) => errors.phantom += 1,
                    _ => {}
                }
            }
        }
    }
}

/// Tells consumers when to stop: after the kernel is done they consume up to the final head.
#[derive(Default)]
pub struct EndSignal {
    done: AtomicBool,
    final_head: AtomicU64,
    abandon: AtomicBool,
    yield_when_idle: bool,
}

impl EndSignal {
    /// Consumers that give their CPU away while their next slot is empty, for runs with more
    /// threads than CPUs (host-only models of the ring). A measurement keeps the default: each
    /// consumer spins on a CPU of its own.
    pub fn yielding() -> EndSignal {
        EndSignal {
            yield_when_idle: true,
            ..EndSignal::default()
        }
    }
    fn idle(&self) {
        if self.yield_when_idle {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    /// The producers are finished and claimed positions `0..final_head`.
    pub fn finish(&self, final_head: u64) {
        self.final_head.store(final_head, Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }
    /// Stop now, whatever is left (a hung run).
    pub fn abandon(&self) {
        self.abandon.store(true, Ordering::Release);
    }
    fn stop_at(&self, pos: u64) -> bool {
        self.abandon.load(Ordering::Relaxed)
            || (self.done.load(Ordering::Acquire) && pos >= self.final_head.load(Ordering::Relaxed))
    }
}

/// What one consumer saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerReport {
    pub consumed: u64,
    pub duplicated: u64,
    pub torn: u64,
    pub out_of_range: u64,
}

impl ConsumerReport {
    fn count(&mut self, c: Check) {
        self.consumed += 1;
        match c {
            Check::Ok => {}
            Check::Duplicate => self.duplicated += 1,
            Check::Torn => self.torn += 1,
            Check::OutOfRange => self.out_of_range += 1,
        }
    }
}

/// How often (commands) a busy consumer publishes its tail; an idle one publishes at once.
const PUBLISH_EVERY: u64 = 64;

/// Consumer `c` of a FIFO ring: takes its positions in order, verifies each command and
/// publishes its tail, until `end` says the producers are done and it has passed the final head.
pub fn consume_fifo(view: &FifoView<'_>, c: u32, v: &Verifier, end: &EndSignal) -> ConsumerReport {
    let g = view.geometry;
    let mask = g.nslots() - 1;
    let mut pos = g.first_owned(c);
    // Publish the starting position at once: a producer's quiet waits for every consumer's tail
    // to pass its last position, including consumers that own none of its positions.
    view.publish(c, pos);
    let mut published = pos;
    let mut r = ConsumerReport::default();
    loop {
        let i = (pos & mask) as usize;
        let snd = view.slots[2 * i + 1].load(Ordering::Acquire);
        if snd >> 63 != lap_flag(pos, g.nslots_log2) {
            if published != pos {
                view.publish(c, pos);
                published = pos;
            }
            if end.stop_at(pos) {
                break;
            }
            end.idle();
            continue;
        }
        let fst = view.slots[2 * i].load(Ordering::Relaxed);
        r.count(v.check(fst, snd));
        pos = g.next_owned(pos);
        if pos - published >= PUBLISH_EVERY * g.consumers as u64 {
            view.publish(c, pos);
            published = pos;
        }
    }
    view.publish(c, pos);
    r
}

/// Libefaxx's ring as the host sees it: Vyukov cells `{sequence, fst, snd}` and its control words.
#[derive(Clone, Copy)]
pub struct VyukovView<'a> {
    pub cells: &'a [AtomicU64],
    pub ctrl: &'a [AtomicU64],
    pub mask: u64,
}

impl VyukovView<'_> {
    /// Vyukov's pop (CAS on the tail), then `completed += 1` as Libefaxx's proxy does.
    pub fn pop(&self) -> Option<(u64, u64)> {
        let tail = &self.ctrl[V_TAIL];
        let mut pos = tail.load(Ordering::Relaxed);
        loop {
            let cell = 3 * (pos & self.mask) as usize;
            let seq = self.cells[cell].load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos + 1) as i64;
            if diff == 0 {
                match tail.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        let fst = self.cells[cell + 1].load(Ordering::Relaxed);
                        let snd = self.cells[cell + 2].load(Ordering::Relaxed);
                        self.cells[cell].store(pos + self.mask + 1, Ordering::Release);
                        self.ctrl[V_COMPLETED].fetch_add(1, Ordering::Release);
                        return Some((fst, snd));
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = tail.load(Ordering::Relaxed);
            }
        }
    }
    /// Vyukov's push from the host (tests stand in for the GPU with it).
    pub fn push(&self, fst: u64, snd: u64) -> bool {
        let head = &self.ctrl[V_HEAD];
        let mut pos = head.load(Ordering::Relaxed);
        loop {
            let cell = 3 * (pos & self.mask) as usize;
            let seq = self.cells[cell].load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos) as i64;
            if diff == 0 {
                match head.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        self.cells[cell + 1].store(fst, Ordering::Relaxed);
                        self.cells[cell + 2].store(snd, Ordering::Relaxed);
                        self.cells[cell].store(pos + 1, Ordering::Release);
                        self.ctrl[V_POSTED].fetch_add(1, Ordering::Release);
                        return true;
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return false;
            } else {
                pos = head.load(Ordering::Relaxed);
            }
        }
    }
    /// Initial cell sequences (cell i holds i), as Vyukov's constructor sets them.
    pub fn init(&self) {
        for i in 0..=self.mask {
            self.cells[3 * i as usize].store(i, Ordering::Relaxed);
        }
    }
}

/// A consumer of Libefaxx's ring: pops until the producers are done and the ring is empty.
pub fn consume_vyukov(view: &VyukovView<'_>, v: &Verifier, end: &EndSignal) -> ConsumerReport {
    let mut r = ConsumerReport::default();
    loop {
        match view.pop() {
            Some((fst, snd)) => r.count(v.check(fst, snd)),
            None => {
                if end.abandon.load(Ordering::Relaxed) {
                    break;
                }
                if end.done.load(Ordering::Acquire) {
                    // Done: every push completed before the kernel ended; drain once more.
                    match view.pop() {
                        Some((fst, snd)) => r.count(v.check(fst, snd)),
                        None => break,
                    }
                    continue;
                }
                std::hint::spin_loop();
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::super::{Mode, RingKind};
    use super::*;

    #[test]
    fn ring_kind_and_mode_names_are_their_command_line_spellings() {
        use clap::ValueEnum;
        let name = |v: clap::builder::PossibleValue| v.get_name().to_string();
        let rings: Vec<String> = RingKind::value_variants()
            .iter()
            .filter_map(|k| k.to_possible_value().map(name))
            .collect();
        assert_eq!(rings, RingKind::ALL.map(RingKind::name));
        let modes: Vec<String> = Mode::value_variants()
            .iter()
            .filter_map(|m| m.to_possible_value().map(name))
            .collect();
        assert_eq!(modes, Mode::ALL.map(Mode::name));
        assert_eq!(
            RingKind::from_str("libefaxx", false),
            Ok(RingKind::Libefaxx)
        );
        assert!(RingKind::from_str("fifo", false).is_err());
        assert!(Mode::from_str("quiet", false).is_err());
    }

    #[test]
    fn slot_words_round_trip_and_carry_the_lap_parity() {
        let log2 = 4; // 16 slots
        assert_eq!(lap_flag(0, log2), 1, "lap 0 is not the zeroed state");
        assert_eq!(lap_flag(15, log2), 1);
        assert_eq!(lap_flag(16, log2), 0);
        assert_eq!(lap_flag(32, log2), 1);
        let snd = command_snd(0xdead_beef, 0x7fff_fffe, 17, log2);
        assert_eq!(decode_snd(snd), (0, 0x7fff_fffe, 0xdead_beef));
        assert_eq!(decode_snd(command_snd(5, 3, 3, log2)), (1, 3, 5));
        assert_ne!(command_fst(1, 2, 3), command_fst(2, 1, 3));
        assert_ne!(
            command_fst(1, 2, 3),
            command_fst(1, 2, 4),
            "salt changes the pattern"
        );
    }

    #[test]
    fn consumers_own_chunks_of_slots_round_robin() {
        // 64 slots in chunks of 4: 16 chunks per lap, dealt to 3 consumers (6, 5 and 5 chunks).
        let g = Geometry::new(6, 2, 3).unwrap();
        assert_eq!(
            (g.owner(0), g.owner(3), g.owner(4), g.owner(8), g.owner(12)),
            (0, 0, 1, 2, 0)
        );
        // Chunk 15 (slots 60..63) is consumer 0's; the next lap starts again with chunk 0.
        assert_eq!((g.owner(60), g.owner(64), g.owner(68)), (0, 0, 1));
        let mut p = g.first_owned(1);
        let mut seen = vec![];
        for _ in 0..22 {
            seen.push(p);
            assert_eq!(g.owner(p), 1);
            p = g.next_owned(p);
        }
        let want: Vec<u64> = [4u64, 16, 28, 40, 52, 68]
            .iter()
            .flat_map(|&c| c..c + 4)
            .take(22)
            .collect();
        assert_eq!(seen, want);
        assert!(Geometry::new(10, 2, MAX_CONSUMERS as u32 + 1).is_err());
        assert!(Geometry::new(3, 2, 1).is_err());
        // 4 chunks cannot feed 5 consumers.
        assert!(Geometry::new(4, 2, 5).is_err());
    }

    #[test]
    fn every_position_has_one_owner_which_is_the_owner_of_its_slot() {
        for nslots_log2 in 4..=6 {
            for chunk_log2 in 0..=nslots_log2 {
                for consumers in 1..=MAX_CONSUMERS as u32 {
                    let Ok(g) = Geometry::new(nslots_log2, chunk_log2, consumers) else {
                        assert!(1u64 << (nslots_log2 - chunk_log2) < consumers as u64);
                        continue;
                    };
                    let end = 3 * g.nslots();
                    let mut owner = vec![u32::MAX; end as usize];
                    for c in 0..consumers {
                        let mut p = g.first_owned(c);
                        while p < end {
                            assert_eq!(owner[p as usize], u32::MAX, "{g:?}: {p} owned twice");
                            owner[p as usize] = c;
                            let next = g.next_owned(p);
                            assert!(next > p);
                            p = next;
                        }
                    }
                    for p in 0..end {
                        assert_eq!(owner[p as usize], g.owner(p), "{g:?} at {p}");
                        if p >= g.nslots() {
                            assert_eq!(g.owner(p), g.owner(p - g.nslots()));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_run_gives_every_consumer_a_share_of_the_ring() {
        for consumers in 1..=MAX_CONSUMERS as u32 {
            for ring_log2 in 4..=16 {
                let g = Geometry::for_run(ring_log2, consumers).unwrap();
                let chunks = g.chunks();
                let most = chunks.div_ceil(consumers as u64);
                let least = chunks / consumers as u64;
                assert!(least >= 1, "{g:?}");
                if chunks >= 4 * consumers as u64 {
                    assert!(4 * (most - least) <= most, "{g:?}");
                }
            }
        }
    }

    #[test]
    fn verifier_catches_duplicates_tears_and_losses() {
        let v = Verifier::new(3, 4, 9, false);
        assert_eq!(
            v.check(command_fst(0, 1, 9), command_snd(0, 1, 0, 4)),
            Check::Ok
        );
        assert_eq!(
            v.check(command_fst(0, 1, 9), command_snd(0, 1, 5, 4)),
            Check::Duplicate
        );
        assert_eq!(
            v.check(command_fst(1, 1, 9), command_snd(2, 1, 0, 4)),
            Check::Torn
        );
        assert_eq!(
            v.check(command_fst(0, 1, 8), command_snd(0, 2, 0, 4)),
            Check::Torn
        );
        assert_eq!(v.check(0, command_snd(4, 0, 0, 4)), Check::OutOfRange);
        assert_eq!(v.check(0, command_snd(0, 3, 0, 4)), Check::OutOfRange);
        let mut e = Errors::default();
        v.finish(&[4, 4, 4], &mut e);
        assert_eq!(e.lost, 12 - 3);
        // Producer 0 says it pushed nothing, producer 2's seq 0 was received: a phantom.
        let mut e = Errors::default();
        v.finish(&[0, 4, 0], &mut e);
        assert_eq!((e.lost, e.phantom), (2, 1));
    }
}
