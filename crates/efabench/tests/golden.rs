//! Record keys stay stable: `pairs` and `proxy --producer host` run on loopback and the union of
//! their records' field names must equal `tests/golden/<bench>.keys`. (The GPU-only benchmarks
//! compare their typed record fields with their golden files in their unit tests.)

mod common;
use common::*;

#[test]
fn pairs_records_keep_their_keys() {
    let args = words("pairs -p shm --rails 2 -b 4K -e 4K -n 3 -w 1 --min-bw 0");
    let run = recorded("golden-pairs", 3, &args);
    all_ok(&run.outs, "pairs");
    assert_golden_keys("pairs", &record_keys(&run.out));
}

#[test]
fn proxy_records_keep_their_keys() {
    let args =
        words("proxy --producer host -p shm -b 64 -e 4K -f 64 -n 3 -w 1 --puts 4 --ring-slots 16");
    let run = recorded("golden-proxy", 2, &args);
    all_ok(&run.outs, "proxy");
    assert_golden_keys("proxy", &record_keys(&run.out));
}
