//! The fields of the point-to-point benchmarks' records stay what `docs/records.md` promises: a
//! real two-rank run of `sendrecv`, `write` and `read` (both variants, tiny sizes, over tcp on
//! loopback) must produce exactly the keys in `tests/golden/<bench>.keys`.

mod common;
use common::*;

fn keys_of(bench: &str) {
    let line =
        format!("{bench} -p tcp -b 8 -e 64 -f 8 -n 5 -w 1 --window 4 --timeout 30 --format csv");
    let run = recorded(&format!("keys-{bench}"), 2, &words(&line));
    let recs = run.passed(bench);
    assert_eq!(recs.len(), 4, "{bench}: two sizes, two variants");
    assert_golden_keys(bench, &record_keys(&run.out));
}

#[test]
fn sendrecv_keys() {
    keys_of("sendrecv");
}

#[test]
fn write_keys() {
    keys_of("write");
}

#[test]
fn read_keys() {
    keys_of("read");
}
