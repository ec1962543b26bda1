//! Range checks of the buffers' copies.

use super::*;

#[test]
fn host_ranges_copy_in_and_out_and_refuse_overruns() {
    let b = HostBuffer::new(64).unwrap();
    b.write_at(8, &[1, 2, 3]).unwrap();
    let mut got = [0u8; 5];
    b.read_at(7, &mut got).unwrap();
    assert_eq!(got, [0, 1, 2, 3, 0]);
    let e = GpuBuffer::write_at(&b, 62, &[0; 4])
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside the 64-byte host buffer"), "{e}");
    // The buffer's own copy refuses the same range.
    assert!(b.write_at(62, &[0; 4]).is_err());
    assert!(b.read_at(usize::MAX, &mut got).is_err());
}

#[test]
fn pattern_ranges_fill_and_check_one_slice_each() {
    let b = HostBuffer::new(100).unwrap();
    b.fill_range(0, 40, 11).unwrap();
    b.fill_range(40, 60, 12).unwrap();
    assert_eq!(b.mismatches_in(0, 40, 11).unwrap(), 0);
    assert_eq!(b.mismatches_in(40, 60, 12).unwrap(), 0);
    // The pattern starts again at each range: the second slice is not seed 11 continued.
    assert!(b.mismatches_in(40, 60, 11).unwrap() > 0);
    let mut one = [0u8; 60];
    b.read_at(40, &mut one).unwrap();
    assert_eq!(pattern::mismatches(&one, 12), 0);
    b.write_at(44, &[0xff]).unwrap();
    assert_eq!(b.mismatches_in(40, 60, 12).unwrap(), 1);
    assert!(b.fill_range(90, 11, 1).is_err());
}

#[test]
fn word_atomic_copies_keep_neighbouring_bytes_at_every_alignment() {
    // Partial words at both ends (compare-exchange) and whole words in the middle.
    let b = HostBuffer::new(61).unwrap();
    let mut want = vec![0u8; 61];
    for (off, n) in [(0, 61), (3, 1), (5, 11), (7, 17), (16, 8), (60, 1), (1, 0)] {
        let src: Vec<u8> = (0..n).map(|i| (off * 31 + i * 7 + 1) as u8).collect();
        b.write_at(off, &src).unwrap();
        want[off..off + n].copy_from_slice(&src);
        let mut got = vec![0u8; 61];
        b.read_at(0, &mut got).unwrap();
        assert_eq!(got, want, "after writing {n} bytes at {off}");
        let mut part = vec![0u8; n];
        b.read_at(off, &mut part).unwrap();
        assert_eq!(part, src);
    }
}

#[test]
fn threads_share_a_buffer_through_copies_only() {
    // Sync is sound because shared access is word-atomic copies: threads writing disjoint
    // bytes that share words (odd offsets) must never lose each other's bytes.
    let b = std::sync::Arc::new(HostBuffer::new(4096).unwrap());
    let writers: Vec<_> = (0..4u8)
        .map(|t| {
            let b = b.clone();
            std::thread::spawn(move || {
                for round in 0..200u8 {
                    for k in 0..1024 {
                        // byte k*4+t belongs to thread t alone; its word has 3 other owners.
                        b.write_at(k * 4 + t as usize, &[round ^ t]).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let mut got = vec![0u8; 4096];
    b.read_at(0, &mut got).unwrap();
    for (i, v) in got.iter().enumerate() {
        assert_eq!(*v, 199 ^ (i % 4) as u8, "byte {i}");
    }
}

#[test]
fn host_copies_move_exact_ranges_and_treat_overlap_as_memmove() {
    let a = HostBuffer::new(4096).unwrap();
    let b = HostBuffer::new(4096).unwrap();
    let src: Vec<u8> = (0..4096).map(|i| (i * 13 + 5) as u8).collect();
    a.write_at(0, &src).unwrap();
    // Whole words between two buffers (the fast path), then an odd range (byte copies).
    for (from, to, len) in [(8, 1024, 2048), (0, 0, 8), (3, 4001, 91)] {
        copy_between(&a, from, &b, to, len).unwrap();
        let mut got = vec![0u8; len];
        b.read_at(to, &mut got).unwrap();
        assert_eq!(
            got,
            src[from..from + len],
            "{len} bytes from {from} to {to}"
        );
    }
    // Neighbours of a copied range keep their bytes.
    let mut edge = [0u8; 2];
    b.read_at(1023, &mut edge[..1]).unwrap();
    b.read_at(3072, &mut edge[1..]).unwrap();
    assert_eq!(edge, [0, 0]);
    // Overlapping ranges of one buffer copy as memmove, in both directions.
    for (from, to) in [(0usize, 64usize), (64, 0)] {
        a.write_at(0, &src).unwrap();
        copy_between(&a, from, &a, to, 512).unwrap();
        let mut got = vec![0u8; 512];
        a.read_at(to, &mut got).unwrap();
        assert_eq!(got, src[from..from + 512], "overlap {from} -> {to}");
    }
    assert!(copy_between(&a, 4000, &b, 0, 200).is_err());
}

#[test]
fn pattern_checks_of_host_memory_read_a_copy() {
    let mut b = HostBuffer::new(1000).unwrap();
    b.fill_pattern(3).unwrap();
    assert_eq!(b.mismatches(3), Ok(0));
    b.write_at(500, &[0xFF]).unwrap();
    assert_eq!(b.mismatches(3), Ok(1));
}
