//! Synthetic pair matrices for judging the decision ([`crate::decide`]): its unit tests and
//! the operating-characteristics simulator (`examples/oc.rs`) draw clusters from one noise
//! model, with faults of each kind, and feed them to the real decision code.
//!
//! The model, on the log of Gbps: `base + send[src] + recv[dst] + pair + window`, where a
//! node's own send and receive offsets (`node_sd`: healthy nodes are not all alike), each
//! pair's offset (`pair_sd`) and each timed window's (`window_sd`) are normal. With several
//! rails each rail gets its own pair offset, and the striped figure is the slowest rail's times
//! the rail count (equal stripes finish with the slowest rail).

use crate::decide::Cell;

/// A small deterministic generator (SplitMix64), so every run of a test or the simulator
/// draws the same clusters from the same seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize % n.max(1)
    }
}

/// The noise of a healthy cluster (log units, ~ relative standard deviations).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Noise {
    pub gbps: f64,
    pub node_sd: f64,
    pub pair_sd: f64,
    pub window_sd: f64,
    pub windows: usize,
    pub rails: usize,
}

impl Default for Noise {
    fn default() -> Noise {
        Noise {
            gbps: 100.0,
            node_sd: 0.01,
            pair_sd: 0.03,
            window_sd: 0.05,
            windows: 8,
            rails: 1,
        }
    }
}

/// A fault: which pairs run at `factor` of their healthy speed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// Everything the node sends and receives.
    Node { node: usize, factor: f64 },
    /// What the node sends only.
    Sending { node: usize, factor: f64 },
    /// One ordered pair.
    Link { src: usize, dst: usize, factor: f64 },
    /// One rail (NIC) of the node, both ways.
    Rail {
        node: usize,
        rail: usize,
        factor: f64,
    },
}

/// A full matrix of `n` hosts (every ordered pair) drawn from `noise`, with `faults`.
pub fn matrix(n: usize, noise: &Noise, faults: &[Fault], rng: &mut Rng) -> Vec<Cell> {
    let send: Vec<f64> = (0..n).map(|_| noise.node_sd * rng.normal()).collect();
    let recv: Vec<f64> = (0..n).map(|_| noise.node_sd * rng.normal()).collect();
    let rails = noise.rails.max(1);
    let mut out = Vec::with_capacity(n * n.saturating_sub(1));
    for (s, own) in send.iter().enumerate() {
        for d in (0..n).filter(|&d| d != s) {
            let level = noise.gbps.ln() + own + recv[d];
            let mut rail_g: Vec<f64> = (0..rails)
                .map(|r| {
                    let mut g = (level + noise.pair_sd * rng.normal()).exp() / rails as f64;
                    for f in faults {
                        if let Fault::Rail { node, rail, factor } = *f {
                            if rail == r && (node == s || node == d) {
                                g *= factor;
                            }
                        }
                    }
                    g
                })
                .collect();
            let mut factor = 1.0;
            for f in faults {
                match *f {
                    Fault::Node { node, factor: x } if node == s || node == d => factor *= x,
                    Fault::Sending { node, factor: x } if node == s => factor *= x,
                    Fault::Link {
                        src,
                        dst,
                        factor: x,
                    } if src == s && dst == d => factor *= x,
                    _ => {}
                }
            }
            for g in &mut rail_g {
                *g *= factor;
            }
            let gbps = if rails == 1 {
                rail_g[0]
            } else {
                rail_g.iter().copied().fold(f64::INFINITY, f64::min) * rails as f64
            };
            let windows = (0..noise.windows)
                .map(|_| gbps * (noise.window_sd * rng.normal()).exp())
                .collect();
            out.push(Cell {
                src: s,
                dst: d,
                gbps,
                windows,
                rails: if rails == 1 { Vec::new() } else { rail_g },
            });
        }
    }
    out
}
