//! The classes of bad input, as a table: every command line below must exit 2 with one
//! line on stderr that names the problem (the needle), no panic, no backtrace, nothing echoed at
//! length. Each case runs one process and touches no hardware: options are checked first.
//! (Cases that need ranks — an unknown `--domain`, ranks with different options — are in
//! `rails.rs` and `faults_*.rs`.)

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_efabench");

/// (class, command line, a word the message must contain)
const CASES: &[(&str, &str, &str)] = &[
    // numeric options at their type's limits
    ("limit", "sendrecv -n 18446744073709551615", "1 to 10000000"),
    ("limit", "sendrecv -n 4000000000", "1 to 10000000"),
    ("limit", "sendrecv -n 99999999999999999999999", "too large"),
    (
        "limit",
        "sendrecv -w 18446744073709551615 -n 10",
        "0 to 1000000",
    ),
    ("limit", "sendrecv --timeout 1e300", "at most 86400"),
    ("limit", "sendrecv --timeout inf", "at most 86400"),
    ("limit", "sendrecv --timeout NaN", "above 0"),
    ("limit", "sendrecv -e 100G", "64G"),
    ("limit", "sendrecv --window 5000", "1 to 4096"),
    ("limit", "sendrecv --footprint 0", "1 to 64G"),
    ("limit", "sendrecv --rails 100000", "1 to 64"),
    ("limit", "ipc --samples 0", "--samples"),
    ("limit", "proxy --puts 0", "--puts"),
    ("limit", "pairs --max-time 0", "0.001 to 3600"),
    ("limit", "pairs --max-time inf", "--max-time"),
    ("limit", "pairs --suspect-below 150", "--suspect-below"),
    ("limit", "proxy --quiet-poll-ns 20000", "0 to 10000"),
    // negative numbers reach the option's own check
    ("negative", "sendrecv -n -1", "negative"),
    ("negative", "sendrecv --timeout -1", "--timeout"),
    ("negative", "sendrecv -f -3", "negative"),
    ("negative", "counters --watch -1", "--watch"),
    // typed values: the valid ones are listed
    (
        "typed",
        "sendrecv --mem gpu",
        "host, huge, pinned, cuda, managed",
    ),
    (
        "typed",
        "sendrecv --format xml",
        "possible values: table, json, csv",
    ),
    ("typed", "sendrecv --strategy zigzag", "split, round-robin"),
    ("typed", "sendrecv --mr foo", "auto, dmabuf, va"),
    ("typed", "sendrecv --gpu abc", "GPU index"),
    ("typed", "sendrecv -b 1X", "K, M or G"),
    ("typed", "queue --producers 0x0", "BLOCKSxTHREADS"),
    ("typed", "proxy --proxy-threads nic", "rail, gpu"),
    ("typed", "proxy --payload-fence never", "per-put, once"),
    (
        "typed",
        "proxy --ring spsc",
        "possible values: pinned, managed, gdr, hybrid",
    ),
    (
        "typed",
        "proxy --ring libefaxx",
        "possible values: pinned, managed, gdr, hybrid",
    ),
    (
        "typed",
        "ipc --variant store",
        "possible values: copy-engine, push, pull, tma",
    ),
    ("typed", "ipc --shapes 128", "GRIDxBLOCK"),
    ("typed", "ipc --tma-grids x", "--tma-grids"),
    // options of groups a benchmark does not take are refused by clap, before any hardware probe
    ("refused", "ipc --rails 2", "unexpected argument '--rails'"),
    (
        "refused",
        "ipc --provider tcp",
        "unexpected argument '--provider'",
    ),
    ("refused", "ipc --mem pinned", "unexpected argument '--mem'"),
    ("refused", "queue -b 8", "unexpected argument '-b'"),
    ("refused", "h2d -p tcp", "unexpected argument '-p'"),
    ("typed", "h2d --dir up", "h2d, d2h, both"),
    ("typed", "h2d --engine dma", "possible values: ce, sm"),
    ("typed", "h2d --scope some", "possible values: each, all"),
    (
        "typed",
        "h2d --placement NEAR",
        "possible values: near, far",
    ),
    (
        "typed",
        "queue --ring fifo",
        "possible values: pinned, managed, gdr, hybrid, libefaxx",
    ),
    (
        "typed",
        "queue --mode quiet",
        "possible values: nbi, blocking",
    ),
    (
        "typed",
        "queue --tail-poll never",
        "possible values: cached, direct",
    ),
    ("typed", "h2d --gpus 0,0", "list each GPU once"),
    ("limit", "h2d --samples 0", "--samples"),
    ("limit", "h2d -b 24 -e 24", "multiple of 16"),
    ("refused", "queue -p tcp", "unexpected argument '-p'"),
    ("refused", "ipc -b 8", "multiple of 16"),
    (
        "refused",
        "ipc --nvbw device_to_device_copy",
        "is not an nvbandwidth testcase",
    ),
    ("refused", "ipc --variant push --nvbw all,x", "ipc --help"),
    ("refused", "sendrecv -b 1M -e 8", "-b/--min-bytes"),
    // options of a shared group that a benchmark would not honour
    ("refused", "ep --strategy split", "does not apply to ep"),
    ("refused", "ep --per-rail", "does not apply to ep"),
    ("refused", "proxy --per-rail", "does not apply to proxy"),
    (
        "refused",
        "queue --poll-sleep-ns 200",
        "applies to --tail-poll direct only",
    ),
    (
        "refused",
        "queue --mode blocking --batch 16",
        "applies to nbi points only",
    ),
    ("refused", "queue --mode nbi --no-floor", "drop --no-floor"),
    (
        "refused",
        "proxy --producer host --ring hybrid",
        "drop --ring",
    ),
    // garbage files are not accepted as fi_info output
    ("input", "topo --fi-info /etc/passwd", "not fi_info output"),
    (
        "input",
        "doctor --fi-info /etc/passwd",
        "not fi_info output",
    ),
    // launch refuses what it cannot run
    ("launch", "launch -n 2 -- plot x.jsonl", "not a benchmark"),
    (
        "launch",
        "launch -n 2 -- sendrecv --rank 1",
        "must not have --rank",
    ),
    (
        "launch",
        "launch -n 2 -- write --rdzv=h:1",
        "must not have --rdzv",
    ),
    ("launch", "launch -n 0 -- sendrecv", "-n 0"),
    // one rank alone is told how to start two
    ("ranks", "sendrecv", "efabench launch -n 2"),
];

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("EFABENCH_RANK")
        .stdin(Stdio::null())
        .output()
        .expect("start efabench")
}

fn check(class: &str, args: &[&str], needle: &str) {
    let o = run(args);
    // Name the case without echoing a 100 KB argument into the test log.
    let shown: Vec<String> = args.iter().map(|a| a.chars().take(40).collect()).collect();
    let args = &shown;
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(o.status.code(), Some(2), "[{class}] {args:?}: {err}");
    assert_eq!(
        lines.len(),
        1,
        "[{class}] {args:?}: one line expected: {err}"
    );
    assert!(
        lines[0].starts_with("efabench"),
        "[{class}] {args:?}: {err}"
    );
    assert!(
        lines[0].contains(needle),
        "[{class}] {args:?}: no `{needle}` in: {err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert!(
        lines[0].len() < 400,
        "[{class}] {args:?}: {} bytes",
        lines[0].len()
    );
}

#[test]
fn every_class_of_bad_input_exits_2_with_one_line() {
    for (class, line, needle) in CASES {
        let args: Vec<&str> = line.split_whitespace().collect();
        check(class, &args, needle);
    }
}

#[test]
fn a_huge_argument_is_not_echoed_whole() {
    let huge = "9".repeat(100_000);
    for opt in ["-n", "-b", "--timeout", "--window"] {
        check("echo", &["sendrecv", opt, &huge], "efabench");
    }
    let junk = "x".repeat(100_000);
    check("echo", &["sendrecv", "--mem", &junk], "--mem");
    check(
        "echo",
        &["launch", "-n", "2", "--", &junk],
        "not a benchmark",
    );
}
