//! Record keys stay stable: `pairs` and `proxy --producer host` run on loopback and the union of
//! their records' field names must equal `tests/golden/<bench>.keys`. (The GPU-only benchmarks
//! compare their typed record fields with their golden files in their unit tests.)

mod common;
use common::*;

#[path = "../../bench/src/golden.rs"]
#[allow(dead_code)]
mod golden;

fn keys_of_run(path: &std::path::Path) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(path).expect("records file");
    assert!(!text.trim().is_empty(), "no records in {}", path.display());
    text.lines()
        .flat_map(|l| golden::key_paths(&serde_json::from_str(l).expect("a JSON record")))
        .collect()
}

fn check(bench: &str, got: &std::collections::BTreeSet<String>) {
    let file = format!("{}/tests/golden/{bench}.keys", env!("CARGO_MANIFEST_DIR"));
    let want = golden::golden(&std::fs::read_to_string(&file).expect("golden file"));
    if let Some(e) = golden::differs(&want, got) {
        panic!("{bench}: {e}");
    }
}

#[test]
fn pairs_records_keep_their_keys() {
    let dir = tmp("golden-pairs");
    let out = dir.join("r.jsonl");
    let outs = job(
        3,
        &[
            "pairs",
            "-p",
            "shm",
            "--rails",
            "2",
            "-b",
            "4K",
            "-e",
            "4K",
            "-n",
            "3",
            "-w",
            "1",
            "--min-bw",
            "0",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    all_ok(&outs, "pairs");
    check("pairs", &keys_of_run(&out));
}

#[test]
fn proxy_records_keep_their_keys() {
    let dir = tmp("golden-proxy");
    let out = dir.join("r.jsonl");
    let outs = job(
        2,
        &[
            "proxy",
            "--producer",
            "host",
            "-p",
            "shm",
            "-b",
            "64",
            "-e",
            "4K",
            "-f",
            "64",
            "-n",
            "3",
            "-w",
            "1",
            "--puts",
            "4",
            "--ring-slots",
            "16",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    all_ok(&outs, "proxy");
    check("proxy", &keys_of_run(&out));
}
