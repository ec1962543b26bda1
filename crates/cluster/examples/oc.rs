//! Operating characteristics of the cluster verdict: how often the real decision
//! (`efabench_cluster::decide`) names a slow node, and how often it names a healthy one, on
//! synthetic pair matrices from noise models fitted to measured `pairs` runs.
//!
//! ```text
//! cargo run -p efabench-cluster --example oc --release -- [--trials N] [--plot FILE.svg] \
//!     [--fit NAME=FILE.jsonl ...]
//! ```
//!
//! Each `--fit` reads a `pairs` JSONL file (`-o` of `efabench pairs` or `cluster`), fits the
//! noise model of `efabench_cluster::synth` to it (per-node offsets and per-pair spread on the
//! log of Gbps, by median polish) and simulates with it; a fixed sweep of pair spreads follows.
//! Prints Markdown tables (detection against slowdown, false alarms per healthy node per run,
//! each fault kind) and draws the detection curves to `--plot`.

use std::path::PathBuf;

use efabench_cluster::decide::{decide, Config, Dir, Level, Scope};
use efabench_cluster::synth::{fit, matrix, Fault, Noise, Rng};

struct Opts {
    trials: usize,
    plot: Option<PathBuf>,
    fits: Vec<(String, PathBuf)>,
}

fn opts() -> Result<Opts, String> {
    let mut o = Opts {
        trials: 200,
        plot: None,
        fits: Vec::new(),
    };
    let mut a = std::env::args().skip(1);
    while let Some(w) = a.next() {
        let mut val = || a.next().ok_or(format!("{w} needs a value"));
        match w.as_str() {
            "--trials" => {
                o.trials = val()?
                    .parse()
                    .map_err(|_| "--trials needs a count, e.g. --trials 200".to_string())?
            }
            "--plot" => o.plot = Some(PathBuf::from(val()?)),
            "--fit" => {
                let v = val()?;
                let (name, path) = v
                    .split_once('=')
                    .ok_or("--fit needs NAME=FILE.jsonl, e.g. --fit vm=pairs.jsonl")?;
                o.fits.push((name.to_string(), PathBuf::from(path)));
            }
            _ => {
                return Err(format!(
                    "unknown option {w}; see the header of examples/oc.rs"
                ))
            }
        }
    }
    Ok(o)
}

/// A `pairs` JSONL file's largest size as host-level cells (one rank per host assumed: each
/// rank is a node of the model).
fn read_pairs(path: &PathBuf) -> Result<(usize, Vec<efabench_cluster::decide::Cell>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let recs: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|r: &serde_json::Value| r["bench"] == "pairs")
        .collect();
    let size = recs
        .iter()
        .filter_map(|r| r["size_bytes"].as_u64())
        .max()
        .ok_or(format!("{}: no pairs record", path.display()))?;
    let mut n = 0;
    let mut cells = Vec::new();
    for r in recs.iter().filter(|r| r["size_bytes"] == size) {
        let (Some(src), Some(dst), Some(g)) =
            (r["src"].as_u64(), r["peer"].as_u64(), r["bw_gbps"].as_f64())
        else {
            continue;
        };
        n = n.max(src as usize + 1).max(dst as usize + 1);
        cells.push(efabench_cluster::decide::Cell {
            src: src as usize,
            dst: dst as usize,
            gbps: g,
            windows: r["window_gbps"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                .unwrap_or_default(),
            rails: Vec::new(),
        });
    }
    Ok((n, cells))
}

/// Draws a trial's faults.
type Faults = Box<dyn Fn(&mut Rng) -> Vec<Fault>>;

/// Counts over trials.
#[derive(Default, Clone, Copy)]
struct Tally {
    runs: usize,
    /// The faulty scope named at all (WARN or ISOLATE), and ISOLATE.
    named: usize,
    isolated: usize,
    /// Healthy nodes judged, and those named WARN or ISOLATE (false alarms).
    healthy: usize,
    false_warn: usize,
    false_isolate: usize,
}

impl Tally {
    /// ` 100.0% (95.0%) |`: named, and ISOLATE in brackets.
    fn detection_cell(&self) -> String {
        format!(
            " {} ({}) |",
            Tally::pct(self.named, self.runs),
            Tally::pct(self.isolated, self.runs)
        )
    }

    /// ` 0.4% | 0.0% |`: false WARN and false ISOLATE per healthy node.
    fn false_alarm_cells(&self) -> String {
        format!(
            " {} | {} |",
            Tally::pct(self.false_warn, self.healthy),
            Tally::pct(self.false_isolate, self.healthy)
        )
    }

    fn pct(a: usize, b: usize) -> String {
        if b == 0 {
            "-".into()
        } else {
            format!("{:.1}%", 100.0 * a as f64 / b as f64)
        }
    }
}

/// Runs `trials` clusters of `n` nodes with `faults(rng)`; a trial detects when `hit` says so
/// of the decision. Nodes not in `faulty` are healthy.
///
/// With `shifts`, each trial keeps the pairs of that many shifts drawn at random (pair (s, d)
/// has shift (d - s) mod n), as a `random:K` schedule measures them.
fn simulate(
    n: usize,
    noise: &Noise,
    trials: usize,
    seed: u64,
    shifts: Option<usize>,
    faults: &dyn Fn(&mut Rng) -> Vec<Fault>,
) -> Tally {
    let cfg = Config::default();
    let mut rng = Rng::new(seed);
    let mut t = Tally::default();
    for _ in 0..trials {
        let f = faults(&mut rng);
        let mut cells = matrix(n, noise, &f, &mut rng);
        if let Some(k) = shifts.filter(|&k| k + 1 < n) {
            let mut pick: Vec<usize> = (1..n).collect();
            for i in 0..k {
                let j = i + rng.below(pick.len() - i);
                pick.swap(i, j);
            }
            pick.truncate(k);
            cells.retain(|c| pick.contains(&((c.dst + n - c.src) % n)));
        }
        let d = decide(n, &cells, &cfg);
        t.runs += 1;
        let mut faulty: Vec<usize> = Vec::new();
        for x in &f {
            match *x {
                Fault::Node { node, .. }
                | Fault::Sending { node, .. }
                | Fault::Rail { node, .. } => faulty.push(node),
                Fault::Link { src, dst, .. } => faulty.extend([src, dst]),
            }
        }
        // Detection: every fault named with the right kind.
        let found = f.iter().all(|x| {
            d.findings.iter().any(|g| match (*x, g.scope) {
                (Fault::Node { node, .. }, Scope::Node { node: m, .. }) => node == m,
                (Fault::Sending { node, .. }, Scope::Node { node: m, dir }) => {
                    node == m && dir == Dir::Sending
                }
                (Fault::Link { src, dst, .. }, Scope::Link { src: a, dst: b }) => {
                    (src, dst) == (a, b)
                }
                (
                    Fault::Rail { node, rail, .. },
                    Scope::Rail {
                        node: m, rail: r, ..
                    },
                ) => (node, rail) == (m, r),
                _ => false,
            })
        });
        if !f.is_empty() && found {
            t.named += 1;
            if faulty.iter().all(|&x| d.level_of(x) == Level::Isolate) {
                t.isolated += 1;
            }
        }
        for x in (0..n).filter(|x| !faulty.contains(x)) {
            t.healthy += 1;
            match d.level_of(x) {
                Level::Warn => t.false_warn += 1,
                Level::Isolate => t.false_isolate += 1,
                Level::Pass => {}
            }
        }
    }
    t
}

/// Trials for `n` nodes: fewer for the large clusters (each is a million pairs at 1,024).
fn trials_for(n: usize, base: usize) -> usize {
    match n {
        0..=64 => base,
        65..=256 => (base / 5).max(10),
        _ => (base / 20).max(5),
    }
}

fn main() {
    let o = match opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("oc: {e}");
            std::process::exit(2);
        }
    };
    let mut profiles: Vec<(String, Noise)> = Vec::new();
    for (name, path) in &o.fits {
        match read_pairs(path) {
            Ok((n, cells)) => {
                let nz = fit(n, &cells);
                println!(
                    "fitted {name} from {} ({n} ranks, {} pairs): node offsets {:.1}%, pair spread {:.1}%, window spread {:.1}% over {} windows",
                    path.display(),
                    cells.len(),
                    nz.node_sd * 100.0,
                    nz.pair_sd * 100.0,
                    nz.window_sd * 100.0,
                    nz.windows
                );
                profiles.push((name.clone(), nz));
            }
            Err(e) => {
                eprintln!("oc: --fit {name}: {e}");
                std::process::exit(2);
            }
        }
    }
    for sd in [0.01, 0.02] {
        profiles.push((
            format!("pair spread {:.0}%", sd * 100.0),
            Noise {
                node_sd: sd / 3.0,
                pair_sd: sd,
                ..Noise::default()
            },
        ));
    }
    let sizes = [8, 16, 32, 64, 256, 1024];
    let slowdowns = [0.5, 0.7, 0.8, 0.85, 0.9, 0.95];
    let mut curves: Vec<efabench_report::plot::Series> = Vec::new();
    println!(
        "\ntrials per cell: {} up to 64 nodes, {} at 256, {} at 1,024\n",
        trials_for(8, o.trials),
        trials_for(256, o.trials),
        trials_for(1024, o.trials)
    );
    for (pi, (name, noise)) in profiles.iter().enumerate() {
        println!("### {name}\n");
        println!("Detection (named WARN or ISOLATE; ISOLATE in brackets) of one node slow both ways, by its speed as a share of its peers', and false alarms per healthy node per run (healthy clusters):\n");
        let mut head = String::from("| nodes |");
        for s in slowdowns {
            head.push_str(&format!(" {:.0}% |", s * 100.0));
        }
        head.push_str(" false WARN | false ISOLATE |");
        println!("{head}");
        println!("|{}", "---|".repeat(slowdowns.len() + 3));
        for &n in &sizes {
            let trials = trials_for(n, o.trials);
            let mut row = format!("| {n} |");
            let mut pts = Vec::new();
            for (k, &s) in slowdowns.iter().enumerate() {
                let seed = (pi * 1000 + n * 10 + k) as u64;
                let t = simulate(n, noise, trials, seed, None, &|r: &mut Rng| {
                    vec![Fault::Node {
                        node: r.below(n),
                        factor: s,
                    }]
                });
                row.push_str(&t.detection_cell());
                pts.push((s * 100.0, 100.0 * t.named as f64 / t.runs as f64));
            }
            let h = simulate(
                n,
                noise,
                trials,
                (pi * 1000 + n) as u64 + 7,
                None,
                &|_: &mut Rng| Vec::new(),
            );
            row.push_str(&h.false_alarm_cells());
            println!("{row}");
            if [8, 32, 1024].contains(&n) {
                curves.push(efabench_report::plot::Series {
                    label: format!("{name}, {n} nodes"),
                    time_sliced: false,
                    points: pts,
                });
            }
        }
        println!("\nEach fault kind at 32 nodes (named as that kind; ISOLATE in brackets; false alarms on the other nodes):\n");
        println!("| fault | detected | false WARN | false ISOLATE |\n|---|---|---|---|");
        let n = 32;
        let trials = trials_for(n, o.trials);
        let rails4 = Noise { rails: 4, ..*noise };
        let kinds: Vec<(&str, Noise, Faults)> = vec![
            (
                "one node sending only at 80%",
                *noise,
                Box::new(move |r: &mut Rng| {
                    vec![Fault::Sending {
                        node: r.below(n),
                        factor: 0.8,
                    }]
                }),
            ),
            (
                "one link at 60%",
                *noise,
                Box::new(move |r: &mut Rng| {
                    let a = r.below(n);
                    vec![Fault::Link {
                        src: a,
                        dst: (a + 1 + r.below(n - 1)) % n,
                        factor: 0.6,
                    }]
                }),
            ),
            (
                "one rail of 4 at 50%",
                rails4,
                Box::new(move |r: &mut Rng| {
                    vec![Fault::Rail {
                        node: r.below(n),
                        rail: r.below(4),
                        factor: 0.5,
                    }]
                }),
            ),
            (
                "two nodes at 80%",
                *noise,
                Box::new(move |r: &mut Rng| {
                    let a = r.below(n);
                    vec![
                        Fault::Node {
                            node: a,
                            factor: 0.8,
                        },
                        Fault::Node {
                            node: (a + 1 + r.below(n - 1)) % n,
                            factor: 0.8,
                        },
                    ]
                }),
            ),
            (
                "three nodes at 70%, 80%, 90%",
                *noise,
                Box::new(move |r: &mut Rng| {
                    let a = r.below(n);
                    vec![
                        Fault::Node {
                            node: a,
                            factor: 0.7,
                        },
                        Fault::Node {
                            node: (a + 5) % n,
                            factor: 0.8,
                        },
                        Fault::Node {
                            node: (a + 11) % n,
                            factor: 0.9,
                        },
                    ]
                }),
            ),
        ];
        for (k, (what, nz, f)) in kinds.iter().enumerate() {
            let t = simulate(n, nz, trials, (pi * 7919 + k) as u64, None, f.as_ref());
            println!("| {what} |{}{}", t.detection_cell(), t.false_alarm_cells());
        }
        println!();
    }
    schedule_by_size(&profiles, o.trials);
    if let Some(p) = &o.plot {
        if let Err(e) = efabench_report::plot::plot_xy(
            &curves,
            "efabench cluster: a slow node named (WARN or ISOLATE), by its speed",
            "the node's speed, % of its peers'",
            "runs that name it, %",
            p,
        ) {
            eprintln!("oc: {e}");
            std::process::exit(1);
        }
        println!("plot: {}", p.display());
    }
}

/// The default pairs schedule (`--pairs auto`) by cluster size, from the real option code: its
/// rounds, pair measurements and time per pair under the default 60 s budget; then the
/// decision's detection and false alarms on the pairs that schedule measures, from 64 nodes up
/// (where it stops measuring every pair).
fn schedule_by_size(profiles: &[(String, Noise)], base_trials: usize) {
    use clap::Parser;
    use efabench_bench::pairs::Plan;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: efabench_cluster::args::ClusterArgs,
    }
    let args = Cli::try_parse_from(["cluster"])
        .expect("the defaults parse")
        .a;
    println!("### The default schedule by cluster size\n");
    println!("`--pairs auto`, one rank per node, one rail, the default 60 s pairs budget (half of it shared by the rounds as `--max-time` per pair, the rest for opening, connecting and the barriers):\n");
    println!("| nodes | schedule | rounds | pair measurements | --max-time per pair |\n|---|---|---|---|---|");
    for n in [8u32, 16, 32, 63, 64, 128, 256, 512, 1024] {
        let pa = args.pairs_args(n).expect("the default pairs options");
        let (rounds, pairs) = Plan::Rounds(pa.schedule).cost(n);
        println!(
            "| {n} | {} | {rounds} | {pairs} | {:.3} s |",
            args.schedule_for(n),
            pa.max_time
        );
    }
    let shifts = efabench_cluster::args::AUTO_PARTNERS as usize + 2;
    println!("\nDetection (WARN or ISOLATE; ISOLATE in brackets) of one node slow both ways and false alarms per healthy node, on the pairs of {shifts} random shifts (the schedule's 8 plus its 2 retest rounds, drawn at random here: the real retests pair each suspect with nodes not named, which only adds clean comparisons):\n");
    println!("| profile | nodes | 70% | 80% | 85% | 90% | false WARN | false ISOLATE |\n|---|---|---|---|---|---|---|---|");
    for (pi, (name, noise)) in profiles.iter().enumerate() {
        for n in [64usize, 256, 1024] {
            let trials = trials_for(n, base_trials);
            let mut row = format!("| {name} | {n} |");
            for (k, s) in [0.7, 0.8, 0.85, 0.9].into_iter().enumerate() {
                let seed = (pi * 31 + n * 7 + k) as u64 + 5;
                let t = simulate(n, noise, trials, seed, Some(shifts), &|r: &mut Rng| {
                    vec![Fault::Node {
                        node: r.below(n),
                        factor: s,
                    }]
                });
                row.push_str(&t.detection_cell());
            }
            let h = simulate(
                n,
                noise,
                trials,
                (pi * 31 + n) as u64 + 11,
                Some(shifts),
                &|_: &mut Rng| Vec::new(),
            );
            row.push_str(&h.false_alarm_cells());
            println!("{row}");
        }
    }
    println!();
}
