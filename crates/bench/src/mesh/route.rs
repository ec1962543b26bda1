//! Which rail carries which bytes: the one router of every benchmark that posts over several
//! rails (the mesh's collectives and point-to-point benchmarks, ep's puts, the host side of the
//! GPU proxy's schedule). A [`Router`] maps a [`Message`] (its number in its stream, the pair of
//! ranks it travels between, its size) to its stripes by `--strategy`:
//!
//! * The message starts on rail `(a + b + n) % rails`: symmetric in the two ranks, so the
//!   receiver computes the sender's route, and senders do not all pile onto rail 0 of a
//!   receiver (Libefaxx's channel choice); the number `n` rotates successive messages of one
//!   pair (point-to-point streams, ep's channels) over the rails.
//! * `round-robin` puts the whole message on that rail; `split` cuts it with
//!   [`efabench_fabric::split`] (aws-ofi-nccl's threshold scheduler) starting there.
//!
//! A mesh's own routes ([`Mesh::route`], [`Mesh::route_nth`]) are this router over its rails and
//! `--strategy`.
//!
//! A message that goes whole to one rail (every round-robin message, and every message below the
//! minimum stripe) needs no allocation: a ping-pong posts two or three per round trip, and a heap
//! allocation each was a measurable part of an 8-byte round trip.

use efabench_fabric::route::{split, stripe_count};
use efabench_fabric::Stripe;

use super::Mesh;
use crate::harness::Strategy;

/// A message to route: its number `n` in its stream, the ranks it travels between (in either
/// order) and its size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    pub n: u64,
    pub pair: (u32, u32),
    pub size: usize,
}

/// Maps messages to stripes over a number of rails by a strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Router {
    strategy: Strategy,
    rails: usize,
}

/// The stripes of one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    One([Stripe; 1]),
    Many(Vec<Stripe>),
}

impl Route {
    #[inline]
    pub fn stripes(&self) -> &[Stripe] {
        match self {
            Route::One(s) => s,
            Route::Many(v) => v,
        }
    }
}

impl Router {
    /// A router over `rails` rails (0 counts as 1).
    pub fn new(strategy: Strategy, rails: usize) -> Router {
        Router {
            strategy,
            rails: rails.max(1),
        }
    }

    pub fn rails(self) -> usize {
        self.rails
    }

    /// Stripes a message of `size` bytes is cut into (1 for round-robin).
    #[inline]
    pub fn stripe_count(self, size: usize) -> usize {
        match self.strategy {
            Strategy::Split => stripe_count(size, self.rails),
            Strategy::RoundRobin => 1,
        }
    }

    /// The rail message `m` starts on.
    #[inline]
    pub fn first_rail(self, m: Message) -> usize {
        let key = (u64::from(m.pair.0) + u64::from(m.pair.1)).wrapping_add(m.n);
        (key % self.rails as u64) as usize
    }

    /// The stripes of message `m`.
    #[inline]
    pub fn route(self, m: Message) -> Route {
        // One rail: every strategy puts the whole message on it (no division on the hot path).
        if self.rails == 1 {
            return whole(0, m.size);
        }
        let first = self.first_rail(m);
        match self.strategy {
            Strategy::Split if stripe_count(m.size, self.rails) > 1 => {
                Route::Many(split(m.size, self.rails, first))
            }
            // What `split` gives a single stripe: the whole message on the first rail.
            Strategy::Split | Strategy::RoundRobin => whole(first, m.size),
        }
    }
}

#[inline]
fn whole(rail: usize, len: usize) -> Route {
    Route::One([Stripe { rail, off: 0, len }])
}

impl Mesh {
    /// The router of this mesh's rails and `--strategy`.
    #[inline]
    pub fn router(&self) -> Router {
        Router::new(self.strategy, self.group.len())
    }

    /// The stripes of a `len`-byte message between `a` and `b` (symmetric in the two ranks, so
    /// the receiver computes the sender's route). `sends` starts every split at rail 0.
    pub fn route(&self, a: u32, b: u32, len: usize, sends: bool) -> Vec<Stripe> {
        let from_zero = sends && self.strategy == Strategy::Split;
        let pair = if from_zero { (0, 0) } else { (a, b) };
        let m = Message {
            n: 0,
            pair,
            size: len,
        };
        self.router().route(m).stripes().to_vec()
    }

    /// The stripes of message number `n` of `size` bytes in a stream of messages to one peer
    /// (the point-to-point benchmarks): the first rail rotates with `n`, so both ends derive
    /// the route from the message's number.
    #[inline]
    pub fn route_nth(&self, n: u64, size: usize) -> Route {
        let m = Message {
            n,
            pair: (0, 0),
            size,
        };
        self.router().route(m)
    }

    /// Stripes a message of `size` bytes is cut into by [`Mesh::route_nth`] (1 for round-robin).
    pub fn stripe_count(&self, size: usize) -> usize {
        self.router().stripe_count(size)
    }

    /// Whether a message of `size` bytes can go by `fi_inject` (no completion to reap; the
    /// buffer is reusable as soon as the call returns).
    pub fn can_inject(&self, size: usize) -> bool {
        let g = &self.group;
        self.stripe_count(size) == 1
            && (0..g.len()).all(|r| size as u64 <= g.rail(r).info().inject_size)
    }
}

#[cfg(test)]
mod tests {
    use efabench_fabric::route::{next_first_rail, round_robin_rail};

    use super::*;

    const SIZES: [usize; 7] = [0, 8, 4096, 128 << 10, (128 << 10) + 1, 1 << 20, 16 << 20];

    #[test]
    fn routes_match_the_fabric_schedule() {
        for rails in 1..=8 {
            for size in SIZES {
                for n in 0..10u64 {
                    for pair in [(0, 0), (3, 5), (7, 2)] {
                        let m = Message { n, pair, size };
                        let first = (pair.0 + pair.1) as usize + n as usize;
                        let split = split(size, rails, first % rails);
                        let r = Router::new(Strategy::Split, rails).route(m);
                        assert_eq!(r.stripes(), &split[..], "{m:?} over {rails} rails");
                        let rr = Router::new(Strategy::RoundRobin, rails).route(m);
                        let rail = round_robin_rail(first as u64, rails);
                        assert_eq!(
                            rr.stripes(),
                            &[Stripe {
                                rail,
                                off: 0,
                                len: size
                            }]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn numbering_messages_by_stripes_continues_after_the_last_stripe() {
        // A stream whose next message starts on the rail after the previous one's last stripe
        // (the GPU proxy's schedule) is message `p * stripe_count` of the stream.
        for rails in 1..=8 {
            for size in SIZES {
                for strategy in [Strategy::Split, Strategy::RoundRobin] {
                    let router = Router::new(strategy, rails);
                    let mut first = 0;
                    for p in 0..12u64 {
                        let n = p * router.stripe_count(size) as u64;
                        let r = router.route(Message {
                            n,
                            pair: (0, 0),
                            size,
                        });
                        assert_eq!(r.stripes()[0].rail, first, "{strategy:?} {size} B {p}");
                        first = next_first_rail(r.stripes(), rails);
                    }
                }
            }
        }
    }

    #[test]
    fn a_route_is_the_same_from_either_end() {
        let router = Router::new(Strategy::Split, 4);
        for size in SIZES {
            let m = |pair| Message { n: 5, pair, size };
            assert_eq!(router.route(m((1, 6))), router.route(m((6, 1))));
        }
    }
}
