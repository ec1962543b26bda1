//! Property tests of the rendezvous wire format: whatever bytes arrive on the port, decoding
//! never panics and never allocates more than the bytes that arrived justify; whatever a rank
//! encodes, rank 0 decodes to the same value.
//!
//! Anything can connect to a rendezvous port, so these decoders see hostile input in the field.
//! Allocation is checked through what the decoders hand back (lengths and capacities), since a
//! counting allocator would need `unsafe`, which this crate forbids. Cases are bounded so the
//! suite stays fast in CI.

use std::io::Cursor;
use std::time::Duration;

use efabench_bootstrap::wire::{self, Hello, Op};
use efabench_bootstrap::BootstrapError;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        ..ProptestConfig::default()
    }
}

fn any_error() -> impl Strategy<Value = BootstrapError> {
    let text = "[ -~]{0,200}";
    let ranks = proptest::collection::vec(any::<u32>(), 0..20);
    prop_oneof![
        text.prop_map(BootstrapError::Usage),
        (any::<u32>(), text, text).prop_map(|(rank, host, detail)| BootstrapError::PeerDied {
            rank,
            host,
            detail
        }),
        (any::<u32>(), text, 0u64..10_000_000).prop_map(|(rank, host, ms)| {
            BootstrapError::PeerSilent {
                rank,
                host,
                silent_for: Duration::from_millis(ms),
            }
        }),
        (any::<u32>(), text).prop_map(|(rank, reason)| BootstrapError::Aborted { rank, reason }),
        (text, ranks, 0u64..10_000_000).prop_map(|(op, waiting_for, ms)| {
            BootstrapError::Timeout {
                op,
                waiting_for,
                after: Duration::from_millis(ms),
            }
        }),
        (any::<u32>(), text).prop_map(|(rank, detail)| BootstrapError::Protocol { rank, detail }),
        (any::<u32>(), text).prop_map(|(rank, op)| BootstrapError::Left { rank, op }),
        text.prop_map(BootstrapError::local),
        (text, text)
            .prop_map(|(what, cause)| BootstrapError::io(what, std::io::Error::other(cause))),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..2048), expect in 0u32..100_000) {
        if let Ok(h) = Hello::decode(&bytes) {
            prop_assert!(h.token.len() + h.host.len() <= bytes.len());
        }
        if let Ok(t) = wire::decode_table(&bytes, expect) {
            prop_assert!(t.capacity() * 4 <= bytes.len());
            prop_assert!(t.iter().map(Vec::len).sum::<usize>() <= bytes.len());
        }
        if let Ok(e) = wire::decode_error(&bytes) {
            prop_assert!(e.to_string().len() <= 4 * bytes.len() + 600);
        }
        if let Ok((_, _, blob)) = wire::decode_contrib(&bytes) {
            prop_assert!(blob.len() <= bytes.len());
        }
    }

    #[test]
    fn frames_cost_only_the_bytes_that_arrive(bytes in proptest::collection::vec(any::<u8>(), 0..4096), max in 1u32..wire::MAX_FRAME) {
        let mut r = Cursor::new(&bytes);
        if let Ok((_, payload)) = wire::read_frame(&mut r, max) {
            prop_assert!(payload.len() < max as usize);
            prop_assert!(payload.len() + 5 <= bytes.len());
            prop_assert!(payload.capacity() <= (64 << 10).max(payload.len()));
        }
        prop_assert!(r.position() as usize <= bytes.len());
    }

    #[test]
    fn a_huge_claimed_length_is_refused_or_read_incrementally(len in any::<u32>(), tail in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut f = len.to_le_bytes().to_vec();
        f.push(wire::T_CONTRIB);
        f.extend_from_slice(&tail);
        if let Ok((_, p)) = wire::read_frame(&mut Cursor::new(&f), wire::MAX_FRAME) {
            prop_assert_eq!(p.len() as u64 + 1, u64::from(len));
        }
    }

    #[test]
    fn hellos_round_trip(rank in any::<u32>(), world in any::<u32>(), pid in any::<u32>(), token in "[0-9a-f]{0,256}", host in "[a-z0-9.-]{0,255}") {
        let h = Hello { rank, world, pid, token, host };
        let bytes = h.encode();
        prop_assert!(bytes.len() <= wire::MAX_HELLO as usize);
        prop_assert_eq!(Hello::decode(&bytes).unwrap(), h);
    }

    #[test]
    fn tables_round_trip(blobs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..32)) {
        let t = wire::encode_table(blobs.iter().map(Vec::as_slice));
        prop_assert_eq!(wire::decode_table(&t, blobs.len() as u32).unwrap(), blobs.clone());
        prop_assert!(wire::decode_table(&t, blobs.len() as u32 + 1).is_err());
        // Cut anywhere: an error, never a short table.
        for cut in [0, t.len() / 2, t.len().saturating_sub(1)] {
            if cut < t.len() {
                prop_assert!(wire::decode_table(&t[..cut], blobs.len() as u32).is_err());
            }
        }
    }

    #[test]
    fn errors_round_trip(e in any_error()) {
        let bytes = wire::encode_error(&e);
        prop_assert_eq!(wire::decode_error(&bytes).unwrap(), e);
    }

    #[test]
    fn contributions_round_trip(seq in any::<u64>(), op in 1u8..=5, blob in proptest::collection::vec(any::<u8>(), 0..512)) {
        let op = Op::from_u8(op).unwrap();
        let bytes = wire::encode_contrib(seq, op, &blob);
        let (s, o, b) = wire::decode_contrib(&bytes).unwrap();
        prop_assert_eq!((s, o, b), (seq, op, blob.as_slice()));
        let f = wire::frame(wire::T_CONTRIB, &bytes);
        let (k, p) = wire::read_frame(&mut Cursor::new(&f), wire::MAX_FRAME).unwrap();
        prop_assert_eq!((k, p), (wire::T_CONTRIB, bytes));
    }
}
