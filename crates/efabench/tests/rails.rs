//! Multi-rail point-to-point runs over loopback: every benchmark × strategy × rails ∈ {1, 2, 4}
//! on tcp and shm, payloads verified, with 2 ranks, and 3 ranks for two rails. On loopback the
//! rails are virtual (several endpoints of one domain), which exercises everything a multi-NIC
//! run does except the NICs: striping, routing, per-rail completion counting, per-rail records.
//! Also `--domain` (honoured or refused with the list) and `--rails all` (says what it resolved
//! to).

mod common;
use common::*;

fn run_rails(bench: &str, provider: &str, rails: u32, strategy: &str, world: u32) {
    let line = format!(
        "{bench} -p {provider} -b 64 -e 256K -f 64 -n 16 -w 2 --window 8 --rails {rails} \
         --strategy {strategy} --timeout 30"
    );
    let run = recorded(
        &format!("{bench}-{provider}-{rails}-{strategy}-{world}"),
        world,
        &words(&line),
    );
    let what = format!("{bench}/{provider}/rails {rails}/{strategy}/{world} ranks");
    let recs = run.passed(&what);
    if rails > 1 {
        let err = run.stderr(0);
        assert!(
            err.contains("virtual"),
            "rank 0 says the rails are virtual: {err}"
        );
        assert!(
            run.stdout(0).contains(&format!("# rails: {rails} virtual")),
            "table header names the rails: {}",
            run.stdout(0)
        );
    }
    // 64, 4K, 256K × pingpong, stream × (world − 1) peers.
    assert_eq!(recs.len(), 6 * (world as usize - 1), "{recs:?}");
    for r in &recs {
        assert_eq!(r.errors, 0, "{r:?}");
        assert!(r.verified);
        assert_eq!(r.rails, rails);
        assert_eq!(r.domains.len(), rails as usize);
        assert_eq!(r.extra["strategy"], strategy);
        assert_eq!(r.extra["virtual_rails"], rails > 1);
        let per_rail = r.extra["per_rail"].as_array().expect("per_rail");
        assert_eq!(per_rail.len(), rails as usize);
        let bytes: Vec<f64> = per_rail
            .iter()
            .map(|x| x["bytes"].as_f64().unwrap())
            .collect();
        let total: f64 = bytes.iter().sum();
        assert!(total > 0.0, "{r:?}");
        // Every rail carries its share of a large stream: split stripes each message, and
        // round-robin spreads whole messages (the window is a multiple of the rail count).
        if r.variant == "stream" && r.size_bytes >= 4096 {
            let share = total / rails as f64;
            for b in &bytes {
                assert!(
                    (b - share).abs() <= 0.1 * share,
                    "unbalanced per_rail {bytes:?} in {} {} {}",
                    r.bench,
                    r.variant,
                    r.size_bytes
                );
            }
        }
    }
}

fn all_combinations(bench: &str) {
    for provider in ["tcp", "shm"] {
        for rails in [1, 2, 4] {
            for strategy in ["split", "round-robin"] {
                run_rails(bench, provider, rails, strategy, 2);
            }
        }
        for strategy in ["split", "round-robin"] {
            run_rails(bench, provider, 2, strategy, 3);
        }
    }
}

#[test]
fn sendrecv_over_rails() {
    all_combinations("sendrecv");
}

#[test]
fn write_over_rails() {
    all_combinations("write");
}

#[test]
fn read_over_rails() {
    all_combinations("read");
}

#[test]
fn unknown_domain_lists_the_offered_ones() {
    let outs = job(2, &["sendrecv", "-p", "tcp", "--domain", "nosuchnic0"]);
    let err = text(&outs[0].stderr);
    assert_eq!(outs[0].status.code(), Some(2), "{err}");
    assert!(err.contains("nosuchnic0") && err.contains("lo"), "{err}");
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("efabench:") || l.starts_with("efabench sendrecv:"))
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn tcp_on_lo_runs_on_lo() {
    let run = recorded(
        "lo",
        2,
        &words("write -p tcp --domain lo -b 4K -e 4K -n 10"),
    );
    let outs = &run.outs;
    assert!(outs[0].status.success(), "{}", text(&outs[0].stderr));
    for r in run.records() {
        assert_eq!(r.domains, vec!["lo".to_string()], "{r:?}");
    }
}

#[test]
fn rails_all_says_what_it_resolved_to() {
    let outs = job(
        2,
        &[
            "sendrecv", "-p", "shm", "--rails", "all", "-b", "64", "-e", "64", "-n", "10",
        ],
    );
    assert!(outs[0].status.success(), "{}", text(&outs[0].stderr));
    let err = text(&outs[0].stderr);
    assert!(
        err.contains("rail"),
        "rank 0 says what --rails all became: {err}"
    );
}
