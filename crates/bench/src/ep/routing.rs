//! Which experts each token goes to, and with what weight: the same on every rank (seeded, or
//! read from one file every rank has), so every rank knows every rank's routing and can check
//! the counts its peers announce.
//!
//! * `uniform`: each token draws `K` distinct experts uniformly at random.
//! * `zipf:S`: each draw picks expert `e` with weight `1/(e+1)^S`, so the first experts, and the
//!   rank that holds them, are hot destinations; a token never picks one expert twice.
//! * `hot:E:P`: expert `E` is among a token's `K` choices with probability `P` (one draw per
//!   token); the other choices are uniform among the other experts. The rank holding `E` receives
//!   a share `P` of the tokens from every rank on top of its even share: the one-hot-expert skew
//!   that a popular expert of a trained model puts on one rank.
//! * `file:PATH`: one line per token, `world × tokens` lines in rank order (rank 0's tokens
//!   first), each with `K` expert numbers separated by spaces or commas; `#` starts a comment and
//!   blank lines are skipped. The weights are still drawn from `--seed`.
//!
//! Weights are `k/1024` with `k` in 1..=1024 (exact in f32), like DeepEP's positive random
//! weights.

use std::path::Path;

use crate::ep::args::RoutingSpec;
use crate::pattern::mix;

/// Every rank's routing: `experts[rank][token]` holds `K` distinct global expert numbers,
/// `weights[rank][token]` their weights.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    pub world: u32,
    pub tokens: u32,
    pub topk: u32,
    pub experts: u32,
    pub idx: Vec<Vec<Vec<u32>>>,
    pub weights: Vec<Vec<Vec<f32>>>,
}

/// A counter-based random number in [0, 1) for (seed, rank, token, draw).
fn uniform01(seed: u64, rank: u32, token: u32, draw: u32) -> f64 {
    let z = mix(seed ^ mix(((rank as u64) << 40) ^ ((token as u64) << 8) ^ draw as u64 ^ 0xE9));
    (z >> 11) as f64 / (1u64 << 53) as f64
}

impl Routing {
    /// Draws (or reads) the routing. Errors are usage errors: a line that says what to fix.
    pub fn build(
        spec: &RoutingSpec,
        world: u32,
        tokens: u32,
        topk: u32,
        experts: u32,
        seed: u64,
    ) -> Result<Routing, String> {
        if topk > experts {
            return Err(format!(
                "--topk {topk} is more than the {experts} experts: a token picks distinct experts; lower --topk or raise --experts"
            ));
        }
        let idx = match spec {
            RoutingSpec::Uniform => draw(world, tokens, topk, experts, seed, |_| 1.0),
            RoutingSpec::Zipf(s) => {
                let s = *s;
                draw(world, tokens, topk, experts, seed, move |e| {
                    1.0 / ((e + 1) as f64).powf(s)
                })
            }
            RoutingSpec::Hot { expert, share } => {
                if *expert >= experts {
                    return Err(format!(
                        "--routing hot:{expert}:{share} names expert {expert}, but there are {experts} (0 to {}); pick one of them",
                        experts - 1
                    ));
                }
                hot(world, tokens, topk, experts, seed, *expert, *share)
            }
            RoutingSpec::File(p) => read_file(p, world, tokens, topk, experts)?,
        };
        let weights = (0..world)
            .map(|r| {
                (0..tokens)
                    .map(|t| {
                        (0..topk)
                            .map(|k| {
                                let z = mix(seed.wrapping_add(0x5749)
                                    ^ mix(((r as u64) << 40) ^ ((t as u64) << 8) ^ k as u64));
                                ((z % 1024) + 1) as f32 / 1024.0
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Ok(Routing {
            world,
            tokens,
            topk,
            experts,
            idx,
            weights,
        })
    }

    /// Experts per rank.
    pub fn local_experts(&self) -> u32 {
        self.experts / self.world
    }

    /// The rank that holds global expert `e`.
    pub fn owner(&self, e: u32) -> u32 {
        e / self.local_experts()
    }

    /// (token, expert) pairs every rank receives, over the whole job (index: destination rank).
    pub fn pairs_per_rank(&self) -> Vec<u64> {
        let mut load = vec![0u64; self.world as usize];
        for r in &self.idx {
            for t in r {
                for &e in t {
                    load[self.owner(e) as usize] += 1;
                }
            }
        }
        load
    }

    /// (token, expert) pairs every expert receives.
    pub fn pairs_per_expert(&self) -> Vec<u64> {
        let mut load = vec![0u64; self.experts as usize];
        for r in &self.idx {
            for t in r {
                for &e in t {
                    load[e as usize] += 1;
                }
            }
        }
        load
    }

    /// The distinct ranks token `t` of `src` goes to, ascending.
    pub fn dest_ranks(&self, src: u32, t: u32) -> Vec<u32> {
        let mut d: Vec<u32> = self.idx[src as usize][t as usize]
            .iter()
            .map(|&e| self.owner(e))
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }
}

/// max / mean of a load (1.0 = perfectly even; 0 when nothing is loaded).
pub fn imbalance(load: &[u64]) -> f64 {
    let sum: u64 = load.iter().sum();
    if sum == 0 || load.is_empty() {
        return 0.0;
    }
    let mean = sum as f64 / load.len() as f64;
    *load.iter().max().unwrap_or(&0) as f64 / mean
}

fn draw(
    world: u32,
    tokens: u32,
    topk: u32,
    experts: u32,
    seed: u64,
    weight: impl Fn(u32) -> f64,
) -> Vec<Vec<Vec<u32>>> {
    let w: Vec<f64> = (0..experts).map(&weight).collect();
    let mut cum = Vec::with_capacity(w.len());
    let mut acc = 0.0;
    for x in &w {
        acc += x;
        cum.push(acc);
    }
    (0..world)
        .map(|r| {
            (0..tokens)
                .map(|t| {
                    let mut chosen: Vec<u32> = Vec::with_capacity(topk as usize);
                    let mut d = 0u32;
                    while chosen.len() < topk as usize {
                        let u = uniform01(seed, r, t, d) * acc;
                        d += 1;
                        let mut e = cum.partition_point(|&c| c <= u) as u32;
                        e = e.min(experts - 1);
                        // A hot expert drawn again: after a few tries, take the next free one
                        // (so the loop ends however skewed the weights are).
                        if chosen.contains(&e) {
                            if d < 64 * topk {
                                continue;
                            }
                            while chosen.contains(&e) {
                                e = (e + 1) % experts;
                            }
                        }
                        chosen.push(e);
                    }
                    chosen
                })
                .collect()
        })
        .collect()
}

/// `hot:E:P`: per token, one draw decides whether `hot` is among its experts; the other
/// choices are drawn uniformly among the rest.
fn hot(
    world: u32,
    tokens: u32,
    topk: u32,
    experts: u32,
    seed: u64,
    hot: u32,
    share: f64,
) -> Vec<Vec<Vec<u32>>> {
    // Uniform draws over every expert but `hot`, then `hot` put in the first place of the
    // tokens that pick it (the last choice makes room).
    let rest = draw(world, tokens, topk, experts, seed, |e| {
        if e == hot {
            0.0
        } else {
            1.0
        }
    });
    rest.into_iter()
        .enumerate()
        .map(|(r, toks)| {
            toks.into_iter()
                .enumerate()
                .map(|(t, mut chosen)| {
                    // (`draw` gives `hot` only as a last resort, when nothing else is free.)
                    if !chosen.contains(&hot)
                        && uniform01(seed ^ 0x407, r as u32, t as u32, u32::MAX) < share
                    {
                        chosen.pop();
                        chosen.insert(0, hot);
                    }
                    chosen
                })
                .collect()
        })
        .collect()
}

fn read_file(
    p: &Path,
    world: u32,
    tokens: u32,
    topk: u32,
    experts: u32,
) -> Result<Vec<Vec<Vec<u32>>>, String> {
    let text = std::fs::read_to_string(p).map_err(|e| {
        format!(
            "--routing file:{}: {e}; give a file with one line of {topk} expert numbers per token",
            p.display()
        )
    })?;
    parse_file(
        &text,
        &p.display().to_string(),
        world,
        tokens,
        topk,
        experts,
    )
}

/// Parses the routing file format (see the module documentation).
pub fn parse_file(
    text: &str,
    name: &str,
    world: u32,
    tokens: u32,
    topk: u32,
    experts: u32,
) -> Result<Vec<Vec<Vec<u32>>>, String> {
    let want = world as usize * tokens as usize;
    let mut rows: Vec<Vec<u32>> = Vec::with_capacity(want);
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if rows.len() == want {
            return Err(format!(
                "--routing file:{name}: line {} is one token too many: the file needs {want} token lines ({world} ranks x {tokens} tokens)",
                n + 1
            ));
        }
        let mut row = Vec::with_capacity(topk as usize);
        for w in line.split(|c: char| c == ',' || c.is_whitespace()) {
            if w.is_empty() {
                continue;
            }
            let e: u32 = w.parse().map_err(|_| {
                format!(
                    "--routing file:{name}: line {}: '{}' is not an expert number",
                    n + 1,
                    crate::size::clip(w)
                )
            })?;
            if e >= experts {
                return Err(format!(
                    "--routing file:{name}: line {}: expert {e} does not exist (--experts {experts}: use 0 to {})",
                    n + 1,
                    experts - 1
                ));
            }
            if row.contains(&e) {
                return Err(format!(
                    "--routing file:{name}: line {}: expert {e} is listed twice; a token picks distinct experts",
                    n + 1
                ));
            }
            row.push(e);
        }
        if row.len() != topk as usize {
            return Err(format!(
                "--routing file:{name}: line {} has {} experts; --topk is {topk}",
                n + 1,
                row.len()
            ));
        }
        rows.push(row);
    }
    if rows.len() != want {
        return Err(format!(
            "--routing file:{name} has {} token lines; {world} ranks x {tokens} tokens need {want}",
            rows.len()
        ));
    }
    let mut it = rows.into_iter();
    Ok((0..world)
        .map(|_| (0..tokens).map(|_| it.next().unwrap_or_default()).collect())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_routing_is_seeded_distinct_and_even() {
        let a = Routing::build(&RoutingSpec::Uniform, 4, 256, 8, 64, 7).unwrap();
        let b = Routing::build(&RoutingSpec::Uniform, 4, 256, 8, 64, 7).unwrap();
        assert_eq!(a, b, "same seed, same routing on every rank");
        let c = Routing::build(&RoutingSpec::Uniform, 4, 256, 8, 64, 8).unwrap();
        assert_ne!(a.idx, c.idx);
        for r in &a.idx {
            for t in r {
                let mut s = t.clone();
                s.sort_unstable();
                s.dedup();
                assert_eq!(s.len(), 8, "distinct experts");
            }
        }
        assert!(imbalance(&a.pairs_per_rank()) < 1.2);
        for w in a.weights.iter().flatten().flatten() {
            assert!(*w > 0.0 && *w <= 1.0);
        }
    }

    #[test]
    fn zipf_makes_the_first_rank_hot() {
        let z = Routing::build(&RoutingSpec::Zipf(1.5), 4, 256, 4, 64, 1).unwrap();
        let load = z.pairs_per_rank();
        assert_eq!(load.iter().sum::<u64>(), 4 * 256 * 4);
        assert!(imbalance(&load) > 1.5, "{load:?}");
        assert_eq!(
            load.iter().enumerate().max_by_key(|x| x.1).unwrap().0,
            0,
            "{load:?}"
        );
        // Even a weight that piles on one expert ends with distinct experts.
        let z = Routing::build(&RoutingSpec::Zipf(8.0), 2, 64, 8, 8, 1).unwrap();
        for t in z.idx.iter().flatten() {
            let mut s = t.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 8);
        }
    }

    #[test]
    fn one_hot_expert_takes_its_share_of_the_tokens() {
        let spec = RoutingSpec::Hot {
            expert: 5,
            share: 0.5,
        };
        let h = Routing::build(&spec, 4, 1024, 4, 64, 3).unwrap();
        let per_expert = h.pairs_per_expert();
        let tokens = 4 * 1024;
        let got = per_expert[5] as f64 / tokens as f64;
        assert!((got - 0.5).abs() < 0.03, "{got}");
        for t in h.idx.iter().flatten() {
            let mut s = t.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 4, "distinct experts: {t:?}");
        }
        // Every other expert stays near the even share of the remaining choices.
        let even = (tokens as f64 * 4.0 - per_expert[5] as f64) / 63.0;
        for (e, &n) in per_expert.iter().enumerate().filter(|x| x.0 != 5) {
            assert!(
                (n as f64 - even).abs() < even * 0.35,
                "expert {e}: {n} vs {even}"
            );
        }
        // The rank holding expert 5 (rank 0 of 4, 16 experts each) is the hottest.
        let load = h.pairs_per_rank();
        assert_eq!(load.iter().enumerate().max_by_key(|x| x.1).unwrap().0, 0);
        // Every token picks it with share 1; an expert that does not exist is refused.
        let all = Routing::build(
            &RoutingSpec::Hot {
                expert: 63,
                share: 1.0,
            },
            2,
            64,
            2,
            64,
            1,
        )
        .unwrap();
        assert!(all.idx.iter().flatten().all(|t| t.contains(&63)));
        let e = Routing::build(
            &RoutingSpec::Hot {
                expert: 64,
                share: 0.5,
            },
            2,
            8,
            2,
            64,
            1,
        )
        .unwrap_err();
        assert!(e.contains("names expert 64, but there are 64"), "{e}");
    }

    #[test]
    fn files_parse_and_bad_files_are_named() {
        let ok = "# rank 0\n0 1\n2,3\n\n# rank 1\n1 0\n3 2\n";
        let r = parse_file(ok, "f", 2, 2, 2, 4).unwrap();
        assert_eq!(r[1][1], vec![3, 2]);
        for (bad, needle) in [
            ("0 1\n2 3\n1 0\n", "3 token lines"),
            ("0 1\n2 3\n1 0\n3 9\n", "expert 9 does not exist"),
            ("0 0\n2 3\n1 0\n3 2\n", "listed twice"),
            ("0\n2 3\n1 0\n3 2\n", "line 1 has 1 experts"),
            ("0 x\n", "not an expert number"),
            ("0 1\n2 3\n1 0\n3 2\n0 1\n", "one token too many"),
        ] {
            let e = parse_file(bad, "f", 2, 2, 2, 4).unwrap_err();
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
    }

    #[test]
    fn too_many_topk_is_refused() {
        let e = Routing::build(&RoutingSpec::Uniform, 2, 4, 9, 8, 1).unwrap_err();
        assert!(e.contains("--topk 9"), "{e}");
    }
}
