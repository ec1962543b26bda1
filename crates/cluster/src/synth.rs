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

fn median(v: &mut [f64]) -> f64 {
    efabench_record::stats::sample_median(v).unwrap_or(0.0)
}

fn robust_sd(v: &[f64]) -> f64 {
    efabench_record::stats::robust_sd(v).unwrap_or(0.0)
}

/// The model fitted to a measured matrix of `n` nodes (every ordered pair once): on the log of
/// Gbps, a median polish (a few sweeps taking each sender's and each receiver's median out)
/// gives the node offsets and the pairs' residuals; their robust spreads are `node_sd` and
/// `pair_sd` (the offsets' less their own estimation noise, the residuals' corrected for the
/// offsets fitted), and the windows' robust spread around their pair is `window_sd`.
pub fn fit(n: usize, cells: &[Cell]) -> Noise {
    let ok: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.gbps > 0.0 && c.src < n && c.dst < n)
        .collect();
    let mut res: Vec<f64> = ok.iter().map(|c| c.gbps.ln()).collect();
    let base = median(&mut res.clone());
    for r in &mut res {
        *r -= base;
    }
    let (mut send, mut recv) = (vec![0.0; n], vec![0.0; n]);
    for _ in 0..4 {
        for (eff, by_src) in [(&mut send, true), (&mut recv, false)] {
            for (node, e) in eff.iter_mut().enumerate() {
                let mut mine: Vec<f64> = ok
                    .iter()
                    .zip(&res)
                    .filter(|(c, _)| if by_src { c.src == node } else { c.dst == node })
                    .map(|(_, r)| *r)
                    .collect();
                let m = median(&mut mine);
                *e += m;
                for (c, r) in ok.iter().zip(res.iter_mut()) {
                    if (by_src && c.src == node) || (!by_src && c.dst == node) {
                        *r -= m;
                    }
                }
            }
        }
    }
    // Below eight nodes the polish has too few pairs per node to tell a node's offset from its
    // pairs' noise (at four, it fits 7 offsets to 12 pairs): all the spread is taken as the
    // pairs', the conservative reading.
    if n < 8 {
        let raw: Vec<f64> = ok.iter().map(|c| c.gbps.ln()).collect();
        send.iter_mut()
            .chain(recv.iter_mut())
            .for_each(|x| *x = 0.0);
        res = raw;
    }
    let nodes: Vec<f64> = send.iter().chain(&recv).copied().collect();
    let win: Vec<f64> = ok
        .iter()
        .flat_map(|c| {
            c.windows
                .iter()
                .filter(|w| **w > 0.0)
                .map(move |w| w.ln() - c.gbps.ln())
        })
        .collect();
    let windows = if ok.is_empty() {
        0
    } else {
        ok.iter().map(|c| c.windows.len()).sum::<usize>() / ok.len()
    };
    // The polish spends 2n - 1 of the pairs' degrees of freedom on the offsets: scale the
    // residuals' spread back up (a small matrix would otherwise look quieter than it is).
    let free = if n < 8 {
        ok.len() as f64 - 1.0
    } else {
        ok.len() as f64 - (2 * n) as f64 + 1.0
    };
    let dof = if free >= 1.0 {
        (ok.len() as f64 / free).sqrt()
    } else {
        1.0
    };
    // Each fitted offset is a median of n - 1 noisy pairs: take that estimation noise
    // (1.2533 pair_sd / sqrt(n - 1)) out of the offsets' spread.
    let pair_sd = robust_sd(&res) * dof;
    let seen = robust_sd(&nodes);
    let est = 1.2533 * pair_sd / ((n.max(2) - 1) as f64).sqrt();
    Noise {
        gbps: base.exp(),
        node_sd: (seen * seen - est * est).max(0.0).sqrt(),
        pair_sd,
        window_sd: if win.len() > 2 { robust_sd(&win) } else { 0.0 },
        windows,
        rails: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_the_model_it_is_given() {
        let truth = Noise {
            node_sd: 0.02,
            pair_sd: 0.05,
            ..Noise::default()
        };
        let cells = matrix(32, &truth, &[], &mut Rng::new(1));
        let f = fit(32, &cells);
        assert!((f.pair_sd - 0.05).abs() < 0.01, "{f:?}");
        assert!((f.node_sd - 0.02).abs() < 0.012, "{f:?}");
        assert!((f.window_sd - 0.05).abs() < 0.01, "{f:?}");
        assert!((f.gbps / 100.0 - 1.0).abs() < 0.02, "{f:?}");
        assert_eq!(f.windows, 8);
    }
}
