//! `sendrecv --loop lean` (fabtests' ping-pong loop) between two real ranks over loopback: it
//! verifies every payload over shm and tcp, reports a corrupted one, ends within `--timeout`
//! naming a killed or frozen peer, and is refused (exit 2, one line) where it does not apply.

use std::time::Duration;

mod common;
use common::failures::*;
use common::*;

/// The lean ping-pong run every case here starts from.
const LEAN: &str =
    "sendrecv -b 8 -e 64 -f 8 -n 300 -w 10 --variant pingpong --loop lean --timeout 30";

fn lean_verifies(provider: &str) {
    let mut args = words(LEAN);
    args.extend(["-p", provider]);
    let run = recorded(&format!("lean-{provider}"), 2, &args);
    let recs = run.passed(&format!("lean {provider}"));
    assert_eq!(recs.len(), 2, "8 and 64 B: {recs:?}");
    for r in &recs {
        assert_eq!((r.errors, r.verified), (0, true), "{r:?}");
        assert_eq!(r.variant, "pingpong");
        assert_eq!(r.extra["loop"], "lean", "{r:?}");
        assert!(r.lat_us.min > 0.0 && r.lat_us.min <= r.lat_us.max, "{r:?}");
        // One inject per timed iteration, on the one rail.
        let rail = &r.extra["per_rail"][0];
        assert_eq!(rail["ops"], 300, "{r:?}");
        assert_eq!(rail["bytes"], 300 * r.size_bytes, "{r:?}");
    }
    let stdout = run.stdout(0);
    assert!(stdout.contains("# loop: lean"), "{stdout}");
}

#[test]
fn lean_loop_verifies_over_shm() {
    lean_verifies("shm");
}

#[test]
fn lean_loop_verifies_over_tcp() {
    lean_verifies("tcp");
}

/// By default (`--loop auto`) the ping-pong runs fabtests' loop up to the inject size and the
/// tracked loop above it and for the stream; each record says which, and `--loop tracked` keeps
/// the tracked loop everywhere.
#[test]
fn auto_runs_the_lean_loop_where_it_applies() {
    let run = recorded(
        "lean-auto",
        2,
        &words("sendrecv -p shm -b 8 -e 64K -f 1024 -n 20"),
    );
    let recs = run.passed("auto");
    let stdout = run.stdout(0);
    assert!(
        stdout.contains("# loop: lean for the ping-pong up to 4K"),
        "{stdout}"
    );
    let loop_of = |variant: &str, size: u64| {
        recs.iter()
            .find(|r| r.variant == variant && r.size_bytes == size)
            .unwrap_or_else(|| panic!("no {variant} {size} in {recs:?}"))
            .extra["loop"]
            .clone()
    };
    assert_eq!(loop_of("pingpong", 8), "lean");
    assert_eq!(loop_of("pingpong", 65536), "tracked");
    assert_eq!(loop_of("stream", 8), "tracked");
    for r in &recs {
        assert_eq!((r.errors, r.verified), (0, true), "{r:?}");
    }

    let args = words("sendrecv -p tcp -b 8 -e 8 -n 20 --variant pingpong --loop tracked");
    let run = recorded("lean-tracked", 2, &args);
    let recs = run.passed("tracked");
    assert!(run.stdout(0).contains("# loop: tracked"));
    assert_eq!(recs.last().unwrap().extra["loop"], "tracked");
}

#[test]
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs the fault hooks: cargo test --features test-hooks"
)]
fn lean_loop_reports_a_corrupted_payload() {
    let mut args = words(LEAN);
    args.extend(["-p", "shm"]);
    let run = corrupted("lean-corrupt", 2, &args, "EFABENCH_TEST_CORRUPT_PAYLOAD");
    let recs = run.records();
    assert_eq!(recs[0].errors, 1, "one corrupted word: {:?}", recs[0]);
}

/// Rank 1 is hit (killed or frozen) in the middle of a long lean ping-pong; rank 0 must end
/// within its `--timeout` (plus start-up and slack), naming rank 1.
fn peer_hit(provider: &str, hit: fn(u32, Duration, Duration) -> Hit) {
    let line = format!(
        "sendrecv -p {provider} -b 8 -e 8 -n 10000000 --variant pingpong --loop lean --no-check \
         --timeout 3"
    );
    let hit = hit(1, Duration::from_secs(2), Duration::from_secs(15));
    the_others_name_the_hit_rank(2, &words(&line), hit);
}

#[test]
fn lean_loop_ends_when_the_peer_is_killed() {
    peer_hit("tcp", Hit::kill);
}

#[test]
fn lean_loop_ends_when_the_peer_freezes() {
    peer_hit("shm", Hit::stop);
}

fn refused(extra: &[&str], says: &str) {
    let mut args = vec![
        "sendrecv", "-p", "shm", "-b", "8", "-n", "10", "--loop", "lean",
    ];
    args.extend_from_slice(extra);
    let outs = job(2, &args);
    for (r, o) in outs.iter().enumerate() {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "rank {r} {extra:?}: {err}");
        let lines: Vec<_> = err.lines().filter(|l| l.contains("--loop lean")).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(says), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn lean_loop_is_refused_where_it_does_not_apply() {
    refused(
        &["-e", "8", "--variant", "pingpong", "--rails", "2"],
        "--rails 1",
    );
    refused(&["-e", "8", "--variant", "stream"], "--variant pingpong");
    refused(&["-e", "1M", "--variant", "pingpong"], "fi_inject");
}
