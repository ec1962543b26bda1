//! The decision on synthetic matrices ([`crate::synth`]): each fault kind is named as such,
//! healthy clusters name nobody, and the edge sizes (2, 3 and 1,024 nodes) hold.

use super::*;
use crate::synth::{matrix, Fault, Noise, Rng};

fn names(d: &Decision) -> Vec<(Scope, Level)> {
    d.findings.iter().map(|f| (f.scope, f.level)).collect()
}

fn run(n: usize, noise: Noise, faults: &[Fault], seed: u64) -> Decision {
    let cells = matrix(n, &noise, faults, &mut Rng::new(seed));
    decide(n, &cells, &Config::default())
}

#[test]
fn healthy_clusters_name_nobody() {
    for (n, seed) in [(3, 1), (4, 2), (8, 3), (8, 4), (16, 5), (32, 6)] {
        let d = run(n, Noise::default(), &[], seed);
        assert!(d.findings.is_empty(), "{n} nodes: {:?}", names(&d));
        assert!(d.nodes.iter().all(|e| e[0].is_some() && e[1].is_some()));
        // Every estimate is near 1, its interval around it.
        for e in d.nodes.iter().flatten().flatten() {
            assert!(e.low <= e.ratio && e.ratio <= e.high, "{e:?}");
            assert!((0.9..1.1).contains(&e.ratio), "{e:?}");
        }
    }
}

#[test]
fn a_node_at_80_percent_both_ways_is_isolated_with_its_interval() {
    let d = run(
        8,
        Noise::default(),
        &[Fault::Node {
            node: 4,
            factor: 0.8,
        }],
        7,
    );
    assert_eq!(
        names(&d),
        [(
            Scope::Node {
                node: 4,
                dir: Dir::Both
            },
            Level::Isolate
        )]
    );
    let e = d.findings[0].estimate;
    assert!(e.low < 0.8 && 0.8 < e.high && e.high < 0.85, "{e:?}");
    assert_eq!(e.pairs, 14);
    assert_eq!(e.below_slowest, 14, "{e:?}");
    let line = e.describe();
    assert!(line.contains("% of its peers ["), "{line}");
    assert!(
        line.ends_with("14 of 14 pairs below the slowest healthy pair"),
        "{line}"
    );
    assert_eq!(d.level_of(4), Level::Isolate);
    assert_eq!(d.level_of(0), Level::Pass);
}

#[test]
fn a_node_at_90_percent_is_warned_about_not_isolated() {
    let d = run(
        16,
        Noise::default(),
        &[Fault::Node {
            node: 9,
            factor: 0.9,
        }],
        8,
    );
    assert_eq!(
        names(&d),
        [(
            Scope::Node {
                node: 9,
                dir: Dir::Both
            },
            Level::Warn
        )]
    );
}

#[test]
fn one_direction_is_named_as_such() {
    let d = run(
        8,
        Noise::default(),
        &[Fault::Sending {
            node: 2,
            factor: 0.7,
        }],
        9,
    );
    assert_eq!(
        names(&d),
        [(
            Scope::Node {
                node: 2,
                dir: Dir::Sending
            },
            Level::Isolate
        )]
    );
}

#[test]
fn one_link_is_named_as_a_link_and_neither_end_is_isolated() {
    let d = run(
        8,
        Noise::default(),
        &[Fault::Link {
            src: 1,
            dst: 6,
            factor: 0.6,
        }],
        10,
    );
    assert_eq!(names(&d), [(Scope::Link { src: 1, dst: 6 }, Level::Warn)]);
    assert!((0.5..0.7).contains(&d.findings[0].estimate.ratio));
}

#[test]
fn one_rail_of_four_is_named_by_its_index() {
    let noise = Noise {
        rails: 4,
        ..Noise::default()
    };
    let d = run(
        8,
        noise,
        &[Fault::Rail {
            node: 3,
            rail: 2,
            factor: 0.5,
        }],
        11,
    );
    assert!(
        d.findings.iter().any(|f| f.scope
            == Scope::Rail {
                node: 3,
                rail: 2,
                dir: Dir::Both
            }
            && f.level == Level::Isolate),
        "{:?}",
        names(&d)
    );
    // No other rail, and no other node.
    for f in &d.findings {
        match f.scope {
            Scope::Rail { node, rail, .. } => assert_eq!((node, rail), (3, 2)),
            Scope::Node { node, .. } => assert_eq!(node, 3),
            Scope::Link { .. } => panic!("{:?}", names(&d)),
        }
    }
}

#[test]
fn two_slow_nodes_of_eight_do_not_hide_each_other() {
    let d = run(
        8,
        Noise::default(),
        &[
            Fault::Node {
                node: 1,
                factor: 0.7,
            },
            Fault::Node {
                node: 6,
                factor: 0.8,
            },
        ],
        12,
    );
    let mut got = names(&d);
    got.sort_by_key(|(s, _)| format!("{s:?}"));
    assert_eq!(
        got,
        [
            (
                Scope::Node {
                    node: 1,
                    dir: Dir::Both
                },
                Level::Isolate
            ),
            (
                Scope::Node {
                    node: 6,
                    dir: Dir::Both
                },
                Level::Isolate
            )
        ]
    );
}

#[test]
fn two_nodes_cannot_be_told_apart_and_three_can() {
    let d = run(
        2,
        Noise::default(),
        &[Fault::Node {
            node: 1,
            factor: 0.3,
        }],
        13,
    );
    assert!(d.findings.is_empty());
    assert!(d.nodes.iter().all(|e| e[0].is_none()));
    // Three nodes: two own pairs and two reference pairs per direction; a deep cut is named.
    let d = run(
        3,
        Noise::default(),
        &[Fault::Node {
            node: 1,
            factor: 0.3,
        }],
        14,
    );
    assert_eq!(
        names(&d),
        [(
            Scope::Node {
                node: 1,
                dir: Dir::Both
            },
            Level::Isolate
        )]
    );
}

#[test]
fn a_thousand_and_twenty_four_nodes_healthy_and_one_at_90_percent() {
    // A million pairs each; no windows, to keep the test short (they only bound the noise).
    let noise = Noise {
        windows: 0,
        ..Noise::default()
    };
    let d = run(1024, noise, &[], 15);
    assert!(
        d.findings.is_empty(),
        "{:?}",
        &names(&d)[..names(&d).len().min(5)]
    );
    let d = run(
        1024,
        noise,
        &[Fault::Node {
            node: 700,
            factor: 0.9,
        }],
        16,
    );
    assert_eq!(
        names(&d),
        [(
            Scope::Node {
                node: 700,
                dir: Dir::Both
            },
            Level::Warn
        )]
    );
}

#[test]
fn the_quantiles_match_their_tables() {
    assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-5);
    assert!((normal_quantile(0.001) + 3.090_232).abs() < 1e-5);
    assert!((t_quantile(0.975, 1.0) - 12.706).abs() < 1e-2);
    assert!((t_quantile(0.975, 2.0) - 4.303).abs() < 1e-3);
    assert!((t_quantile(0.975, 10.0) - 2.228).abs() < 1e-2);
    assert!((t_quantile(0.975, 4.0) - 2.776).abs() < 1e-3);
    assert!((t_quantile(0.9995, 4.0) - 8.610).abs() < 1e-2);
    assert!((t_quantile(0.999, 40.0) - 3.307).abs() < 3e-2);
}
