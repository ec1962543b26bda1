//! Tests of one ep phase's pieces.

use super::*;

#[test]
fn cq_data_round_trips_in_32_bits() {
    for (k, it, src, idx) in [
        (Kind::DispatchMsg, 0u64, 0u32, 0u16),
        (Kind::DispatchSignal, 15, 1023, 65535),
        (Kind::CombineMsg, 16 + 3, 7, 511),
        (Kind::CombineSignal, 9, 3, 2),
    ] {
        let d = cq_data(k, it, src, idx);
        assert!(d < 1 << 32);
        assert_eq!(parse_cq_data(d), Some((k, it & 0xF, src, idx)));
    }
    assert_eq!(parse_cq_data(1 << 32), None);
}

#[test]
fn a_source_is_complete_on_its_announced_writes_whatever_the_order() {
    let expect = vec![vec![2u32, 1], vec![0, 3]];
    let mut a = Arrivals::new(Phase::Dispatch, 5, 2, 2);
    a.local(1, &expect[1]);
    assert!(!a.complete());
    // The signal first, then the writes (EFA may deliver them in any order).
    a.take(cq_data(Kind::DispatchSignal, 5, 0, 2));
    assert!(!a.complete());
    a.take(cq_data(Kind::DispatchMsg, 5, 0, 0));
    assert!(!a.complete());
    a.take(cq_data(Kind::DispatchMsg, 5, 0, 1));
    assert!(a.complete());
    assert_eq!(a.errors, 0);
    // Rank 0 merged its two channel-0 messages into one write: the block says so.
    let blocks = vec![vec![(2, 1), (1, 1)], vec![(0, 0), (3, 3)]];
    assert_eq!(a.check_blocks(1, &blocks, &expect), 0);
    // A write of another iteration or a combine write is an error, not an arrival.
    a.take(cq_data(Kind::DispatchMsg, 6, 0, 1));
    a.take(cq_data(Kind::CombineMsg, 5, 0, 0));
    assert_eq!(a.errors, 2);
    assert!(a.complete());
}

#[test]
fn the_clock_charges_every_instant_to_one_stage() {
    let t0 = Instant::now();
    let mut c = Clock::start_at(t0, Stage::Launch);
    let ms = Duration::from_millis(1);
    c.enter_at(t0 + ms, Stage::Feed);
    let was = c.enter_at(t0 + 2 * ms, Stage::Post);
    assert_eq!(was, Stage::Feed);
    c.enter_at(t0 + 5 * ms, was);
    c.enter_at(t0 + 6 * ms, Stage::Quiet);
    c.enter_at(t0 + 9 * ms, Stage::Network);
    c.enter_at(t0 + 10 * ms, Stage::Arrival);
    c.enter_at(t0 + 12 * ms, Stage::Settle);
    let mut t = PhaseTimes::default();
    c.finish(&mut t);
    let ms = |n: u64| n * 1_000_000;
    assert_eq!(
        (t.launch_ns, t.feed_ns, t.post_ns, t.quiet_ns),
        (ms(1), ms(2), ms(3), ms(3))
    );
    assert_eq!((t.network_ns, t.arrival_ns), (ms(1), ms(2)));
    // `finish` closes Settle now: whatever it took, the stages add up to the total.
    assert!(t.total_ns >= ms(12));
    assert_eq!(t.stage_sum_ns(), t.total_ns);
}

fn put(dst: u32, index: u16, local_off: usize, remote_off: usize, len: usize) -> Put {
    Put {
        dst,
        local_off,
        remote_off,
        len,
        index,
        signal: false,
    }
}

#[test]
fn the_proxy_merges_only_contiguous_puts_of_one_destination_and_channel() {
    let mut m = Merger {
        pending: None,
        limit: 300,
    };
    assert_eq!(m.offer(put(1, 0, 0, 1000, 100)), None);
    // Contiguous on both sides: merged.
    assert_eq!(m.offer(put(1, 0, 100, 1100, 100)), None);
    // Another channel: the pending write goes out.
    assert_eq!(
        m.offer(put(1, 1, 200, 1200, 100)),
        Some((put(1, 0, 0, 1000, 200), 2))
    );
    // Another destination, a gap on the remote side, a gap on the local side.
    assert_eq!(
        m.offer(put(2, 1, 300, 1300, 100)),
        Some((put(1, 1, 200, 1200, 100), 1))
    );
    assert_eq!(
        m.offer(put(2, 1, 400, 1500, 100)),
        Some((put(2, 1, 300, 1300, 100), 1))
    );
    assert_eq!(
        m.offer(put(2, 1, 600, 1600, 100)),
        Some((put(2, 1, 400, 1500, 100), 1))
    );
    // Up to the provider's largest message, not beyond.
    assert_eq!(m.offer(put(2, 1, 700, 1700, 100)), None);
    assert_eq!(m.offer(put(2, 1, 800, 1800, 100)), None);
    assert_eq!(
        m.offer(put(2, 1, 900, 1900, 100)),
        Some((put(2, 1, 600, 1600, 300), 3))
    );
    assert_eq!(m.flush(), Some((put(2, 1, 900, 1900, 100), 1)));
    assert_eq!(m.flush(), None);
}

#[test]
fn count_blocks_that_disagree_with_the_routing_or_the_cq_data_are_errors() {
    let expect = vec![vec![2u32], vec![0]];
    let mut a = Arrivals::new(Phase::Combine, 0, 2, 1);
    a.local(1, &expect[1]);
    a.take(cq_data(Kind::CombineSignal, 0, 0, 2));
    a.take(cq_data(Kind::CombineMsg, 0, 0, 0));
    a.take(cq_data(Kind::CombineMsg, 0, 0, 0));
    assert!(a.complete());
    assert_eq!(a.check_blocks(1, &[vec![(3, 2)], vec![(0, 0)]], &expect), 1);
    assert_eq!(a.check_blocks(1, &[vec![(2, 1)], vec![(0, 0)]], &expect), 1);
    // A write beyond the announced count reopens the source.
    a.take(cq_data(Kind::CombineMsg, 0, 0, 0));
    assert!(!a.complete());
}
