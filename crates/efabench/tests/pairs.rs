//! `pairs` records, one per pair of each round: a payload corrupted on one receiver is counted in
//! the record of the pair that delivered it and in no other, and fails the run.
//! (The slowed rank, `--min-bw` and `--one-at-a-time` are in `alltoall.rs`, the simulated nodes
//! in `nodes.rs`.)

mod common;
use common::failures::corrupted;
use common::*;

#[test]
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs the fault hooks: cargo test --features test-hooks"
)]
fn a_corrupted_payload_counts_in_its_pair_only() {
    // Rank 1 flips a byte of the first payload it verifies: from rank 0, in round 1 at 4K.
    let args = words("pairs -p shm -b 4K -e 8K -n 3 -w 1");
    let run = corrupted("pairs-corrupt", 3, &args, "EFABENCH_TEST_CORRUPT_PAYLOAD");
    let recs = run.records();
    assert_eq!(recs.len(), 12, "2 sizes x 6 ordered pairs");
    let bad: Vec<(u64, u64, u32)> = recs
        .iter()
        .filter(|r| r.errors > 0)
        .map(|r| {
            (
                r.size_bytes,
                r.extra["src"].as_u64().unwrap(),
                r.peer.unwrap(),
            )
        })
        .collect();
    assert_eq!(bad, [(4096, 0, 1)], "only the corrupted pair has errors");
    let r = recs
        .iter()
        .find(|r| r.errors > 0)
        .expect("the corrupted pair's record");
    assert_eq!(r.errors, 1, "exactly the corrupted word");
    // Every pair of a round carries the round's wall time.
    for round in recs.chunks(3) {
        assert!(
            round
                .iter()
                .all(|r| r.extra["wall_s"] == round[0].extra["wall_s"]),
            "{:?}",
            round.iter().map(|r| &r.extra["wall_s"]).collect::<Vec<_>>()
        );
    }
}
