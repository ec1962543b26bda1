//! Where every message of a run lives: the regions of the send and receive buffers, every
//! (token, expert) pair's place on both sides, and what each rank expects from each peer. All of
//! it follows from the routing, which every rank knows, so it is computed once per run.
//!
//! Receive buffer (registered on every rail): `[dispatch receive | dispatch counts | combine
//! receive | combine counts]`.
//! * dispatch receive, `ll`: `[local expert][source rank][slot]` messages, `tokens` slots each
//!   (a token picks an expert once); `per-rank`: `[source rank][slot]`.
//! * dispatch counts: `[source rank][channel]` of `(messages u32, writes u32)`, written by each
//!   source's signal (`ll`: a channel per local expert: DeepEP's per-expert count; `per-rank`:
//!   one).
//! * combine receive, at the token's source: `[token][slot]` bf16 vectors: `ll`: slot = the
//!   expert's place `k` in the token's top-k; `per-rank`: slot = the sending rank.
//! * combine counts: `[rank]` of `(messages, writes)`.
//!
//! Send buffer: `[dispatch staging | dispatch counts | combine staging | combine counts]`, the
//! staging areas dense, in the order of the puts (by destination, then channel, then slot), so
//! the CPU initiator can merge the puts of one destination and channel into one write.

use crate::ep::args::{Dtype, Layout};
use crate::ep::routing::Routing;
use crate::ep::verify::{expert_factor, payload_bytes, HEADER};

/// One RDMA write (or one command of the ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Put {
    pub dst: u32,
    pub local_off: usize,
    pub remote_off: usize,
    pub len: usize,
    /// The channel (local expert, or 0) the receiver counts it under; for a count signal, the
    /// number of writes it announces.
    pub index: u16,
    /// A count signal (posted after the destination's other writes: a fence in the ring).
    pub signal: bool,
}

/// A message this rank sends in dispatch.
#[derive(Clone, Debug)]
pub struct SendMsg {
    pub token: u32,
    pub tag: u32,
    pub put: Put,
}

/// A message this rank receives in dispatch and answers in combine.
#[derive(Clone, Debug)]
pub struct RecvMsg {
    pub src: u32,
    pub token: u32,
    pub tag: u32,
    pub recv_off: usize,
    /// `w_k · f(e_k)` of every expert of this rank the message stands for (one in `ll`).
    pub coef: Vec<f32>,
    /// The combine write that returns the expert's output.
    pub back: Put,
}

/// Offsets of the regions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Regions {
    pub disp_recv: usize,
    pub disp_counts: usize,
    pub comb_recv: usize,
    pub comb_counts: usize,
    pub recv_len: usize,
    pub disp_stage: usize,
    pub disp_counts_stage: usize,
    pub comb_stage: usize,
    pub comb_counts_stage: usize,
    pub send_len: usize,
}

/// One phase as the initiators and the arrival counter see it.
#[derive(Clone, Debug)]
pub struct PhaseLayout {
    /// Counting channels per source.
    pub channels: usize,
    /// This rank's puts, in staging order (grouped by destination).
    pub puts: Vec<Put>,
    /// Messages expected from each source, per channel: `[src][channel]`.
    pub expect: Vec<Vec<u32>>,
    /// Where this rank's count block for `dst` is staged, and where a source's lands here.
    pub counts_stage: usize,
    pub counts_recv: usize,
    /// Bytes of one message (for the statistics).
    pub msg_bytes: usize,
}

impl PhaseLayout {
    /// The count signal to `dst`, announcing `writes` writes.
    pub fn signal(&self, me: u32, dst: u32, writes: u16) -> Put {
        let c = self.channels * 8;
        Put {
            dst,
            local_off: self.counts_stage + dst as usize * c,
            remote_off: self.counts_recv + me as usize * c,
            len: c,
            index: writes,
            signal: true,
        }
    }
}

/// Everything of one rank's run that follows from the routing.
#[derive(Clone, Debug)]
pub struct Plan {
    pub layout: Layout,
    pub dtype: Dtype,
    pub hidden: usize,
    pub tokens: usize,
    pub world: u32,
    pub me: u32,
    /// Dispatch message bytes (header + payload) and combine message bytes (bf16 vector).
    pub msg: usize,
    pub out: usize,
    /// Combine slots per token at the source.
    pub slots: usize,
    pub regions: Regions,
    pub sends: Vec<SendMsg>,
    pub recvs: Vec<RecvMsg>,
    pub dispatch: PhaseLayout,
    pub combine: PhaseLayout,
    /// `[token][slot]` reduction weights at the source (0: no message in that slot).
    pub comb_weights: Vec<Vec<f32>>,
    /// `[token]`: `w_k · f(e_k)` over the token's experts (what the combined token must equal,
    /// times the token).
    pub coef: Vec<Vec<f32>>,
    /// (token, expert) pairs of this rank (what DeepEP counts as selections).
    pub selections: u64,
}

fn align(x: usize) -> usize {
    x.div_ceil(64) * 64
}

impl Plan {
    pub fn new(r: &Routing, me: u32, layout: Layout, dtype: Dtype, hidden: usize) -> Plan {
        let world = r.world as usize;
        let tokens = r.tokens as usize;
        let l = r.local_experts() as usize;
        let msg = HEADER + payload_bytes(dtype, hidden);
        let out = 2 * hidden;
        let (channels, slots) = match layout {
            Layout::LowLatency => (l, r.topk as usize),
            Layout::PerRank => (1, world),
        };
        // Receive regions.
        let disp_recv_len = match layout {
            Layout::LowLatency => l * world * tokens * msg,
            Layout::PerRank => world * tokens * msg,
        };
        let mut g = Regions::default();
        g.disp_recv = 0;
        g.disp_counts = align(disp_recv_len);
        g.comb_recv = g.disp_counts + align(world * channels * 8);
        g.comb_counts = g.comb_recv + align(tokens * slots * out);
        g.recv_len = g.comb_counts + align(world * 8);

        // What each source sends each destination: for every source (all ranks, so the
        // receiver knows its expectations), the messages in (dst, channel, slot) order.
        // msgs[src] = Vec<(dst, channel, slot, token, tag)>.
        let mut expect_disp = vec![vec![0u32; channels]; world];
        let mut sends = Vec::new();
        let mut recvs_unsorted: Vec<(u32, u32, u32, usize, Vec<f32>, usize)> = Vec::new();
        for src in 0..r.world {
            let mut list: Vec<(u32, u32, u32, u32)> = Vec::new(); // (dst, channel, token, tag)
            for t in 0..r.tokens {
                match layout {
                    Layout::LowLatency => {
                        for &e in &r.idx[src as usize][t as usize] {
                            list.push((r.owner(e), e % l as u32, t, e));
                        }
                    }
                    Layout::PerRank => {
                        for d in r.dest_ranks(src, t) {
                            list.push((d, 0, t, d));
                        }
                    }
                }
            }
            list.sort_by_key(|&(d, c, t, _)| (d, c, t));
            let mut slot_of = std::collections::HashMap::new();
            for (i, &(dst, c, t, tag)) in list.iter().enumerate() {
                let slot = {
                    let s = slot_of.entry((dst, c)).or_insert(0usize);
                    *s += 1;
                    *s - 1
                };
                let recv_off = g.disp_recv
                    + match layout {
                        Layout::LowLatency => {
                            ((c as usize * world + src as usize) * tokens + slot) * msg
                        }
                        Layout::PerRank => (src as usize * tokens + slot) * msg,
                    };
                if src == me {
                    sends.push(SendMsg {
                        token: t,
                        tag,
                        put: Put {
                            dst,
                            local_off: i * msg,
                            remote_off: recv_off,
                            len: msg,
                            index: c as u16,
                            signal: false,
                        },
                    });
                }
                if dst == me {
                    expect_disp[src as usize][c as usize] += 1;
                    let ks: Vec<usize> = match layout {
                        Layout::LowLatency => vec![r.idx[src as usize][t as usize]
                            .iter()
                            .position(|&x| x == tag)
                            .unwrap_or(0)],
                        Layout::PerRank => r.idx[src as usize][t as usize]
                            .iter()
                            .enumerate()
                            .filter(|(_, &e)| r.owner(e) == me)
                            .map(|(k, _)| k)
                            .collect(),
                    };
                    let coef = ks
                        .iter()
                        .map(|&k| {
                            r.weights[src as usize][t as usize][k]
                                * expert_factor(r.idx[src as usize][t as usize][k])
                        })
                        .collect();
                    let slot_at_src = match layout {
                        Layout::LowLatency => ks[0],
                        Layout::PerRank => me as usize,
                    };
                    recvs_unsorted.push((src, t, tag, recv_off, coef, slot_at_src));
                }
            }
        }
        let disp_stage_len = sends.len() * msg;
        g.disp_stage = 0;
        g.disp_counts_stage = align(disp_stage_len);
        g.comb_stage = g.disp_counts_stage + align(world * channels * 8);
        // Combine: answer every received message, in (src, token) order, to the source's slot.
        recvs_unsorted.sort_by_key(|x| (x.0, x.1, x.5));
        let mut expect_comb = vec![vec![0u32; 1]; world];
        let recvs: Vec<RecvMsg> = recvs_unsorted
            .into_iter()
            .enumerate()
            .map(|(i, (src, t, tag, recv_off, coef, slot))| RecvMsg {
                src,
                token: t,
                tag,
                recv_off,
                coef,
                back: Put {
                    dst: src,
                    local_off: g.comb_stage + i * out,
                    remote_off: g.comb_recv + (t as usize * slots + slot) * out,
                    len: out,
                    index: 0,
                    signal: false,
                },
            })
            .collect();
        g.comb_counts_stage = g.comb_stage + align(recvs.len() * out);
        g.send_len = g.comb_counts_stage + align(world * 8);
        // Combine expectations and weights at this rank as a source.
        let mut comb_weights = vec![vec![0f32; slots]; tokens];
        let mut coef = vec![Vec::new(); tokens];
        for t in 0..tokens {
            let ex = &r.idx[me as usize][t];
            let w = &r.weights[me as usize][t];
            coef[t] = ex
                .iter()
                .zip(w)
                .map(|(e, w)| w * expert_factor(*e))
                .collect();
            match layout {
                Layout::LowLatency => {
                    for (k, e) in ex.iter().enumerate() {
                        comb_weights[t][k] = w[k];
                        expect_comb[r.owner(*e) as usize][0] += 1;
                    }
                }
                Layout::PerRank => {
                    for d in r.dest_ranks(me, t as u32) {
                        comb_weights[t][d as usize] = 1.0;
                        expect_comb[d as usize][0] += 1;
                    }
                }
            }
        }
        let dispatch = PhaseLayout {
            channels,
            puts: sends.iter().map(|s| s.put).collect(),
            expect: expect_disp,
            counts_stage: g.disp_counts_stage,
            counts_recv: g.disp_counts,
            msg_bytes: msg,
        };
        let mut back: Vec<Put> = recvs.iter().map(|m| m.back).collect();
        back.sort_by_key(|p| (p.dst, p.remote_off));
        let combine = PhaseLayout {
            channels: 1,
            puts: back,
            expect: expect_comb,
            counts_stage: g.comb_counts_stage,
            counts_recv: g.comb_counts,
            msg_bytes: out,
        };
        Plan {
            layout,
            dtype,
            hidden,
            tokens,
            world: r.world,
            me,
            msg,
            out,
            slots,
            regions: g,
            sends,
            recvs,
            dispatch,
            combine,
            comb_weights,
            coef,
            selections: (tokens * r.topk as usize) as u64,
        }
    }
}

/// Writes to each destination (what its count signal announces).
pub fn writes_to(world: u32, writes: &[Put]) -> Vec<u32> {
    let mut n = vec![0u32; world as usize];
    for p in writes {
        n[p.dst as usize] += 1;
    }
    n
}

/// Merges consecutive puts to one destination and channel whose bytes are contiguous on both
/// sides (the CPU initiator's batching). Returns the writes.
pub fn coalesce(puts: &[Put]) -> Vec<Put> {
    let mut out: Vec<Put> = Vec::new();
    for p in puts {
        if let Some(last) = out.last_mut() {
            if last.dst == p.dst
                && last.index == p.index
                && last.local_off + last.len == p.local_off
                && last.remote_off + last.len == p.remote_off
            {
                last.len += p.len;
                continue;
            }
        }
        out.push(*p);
    }
    out
}

/// The count block a rank stages for each destination: `[dst][channel]` of (messages, writes)
/// for the messages `puts` carry and the writes `writes` post.
pub fn count_block(world: u32, channels: usize, puts: &[Put], writes: &[Put]) -> Vec<u8> {
    let mut msgs = vec![0u32; world as usize * channels];
    let mut wr = vec![0u32; world as usize * channels];
    for p in puts {
        msgs[p.dst as usize * channels + p.index as usize] += 1;
    }
    for p in writes {
        wr[p.dst as usize * channels + p.index as usize] += 1;
    }
    let mut b = Vec::with_capacity(msgs.len() * 8);
    for (m, w) in msgs.iter().zip(&wr) {
        b.extend_from_slice(&m.to_le_bytes());
        b.extend_from_slice(&w.to_le_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ep::args::RoutingSpec;

    fn plans(layout: Layout, world: u32) -> (Routing, Vec<Plan>) {
        let r = Routing::build(&RoutingSpec::Zipf(1.0), world, 16, 3, 4 * world, 5).unwrap();
        let p = (0..world)
            .map(|me| Plan::new(&r, me, layout, Dtype::Bf16, 128))
            .collect();
        (r, p)
    }

    #[test]
    fn every_pair_has_one_place_and_expectations_match_the_senders() {
        for layout in [Layout::LowLatency, Layout::PerRank] {
            let (r, plans) = plans(layout, 3);
            for p in &plans {
                // Dispatch: what every source puts to me is what I expect, channel by channel.
                let mut got = vec![vec![0u32; p.dispatch.channels]; 3];
                let mut places = std::collections::HashSet::new();
                for q in &plans {
                    for put in q.dispatch.puts.iter().filter(|x| x.dst == p.me) {
                        got[q.me as usize][put.index as usize] += 1;
                        assert!(
                            places.insert(put.remote_off),
                            "{layout:?}: two messages, one slot"
                        );
                        assert!(put.remote_off + put.len <= p.regions.disp_counts);
                    }
                }
                assert_eq!(got, p.dispatch.expect, "{layout:?}");
                // Combine: every answer to me lands in a slot I reduce with a nonzero weight.
                let mut n = vec![0u32; 3];
                for q in &plans {
                    for b in q.combine.puts.iter().filter(|x| x.dst == p.me) {
                        n[q.me as usize] += 1;
                        let slot = (b.remote_off - p.regions.comb_recv) / p.out;
                        assert!(p.comb_weights[slot / p.slots][slot % p.slots] > 0.0);
                    }
                }
                assert_eq!(n, p.combine.expect.iter().map(|v| v[0]).collect::<Vec<_>>());
            }
            let total: usize = plans.iter().map(|p| p.recvs.len()).sum();
            match layout {
                Layout::LowLatency => assert_eq!(total, 3 * 16 * 3),
                Layout::PerRank => assert!((3 * 16..=3 * 16 * 3).contains(&total)),
            }
            let _ = r;
        }
    }

    #[test]
    fn the_cpu_initiator_merges_one_write_per_destination_and_expert() {
        let (_, plans) = plans(Layout::LowLatency, 2);
        let p = &plans[0];
        let w = coalesce(&p.dispatch.puts);
        let mut keys: Vec<(u32, u16)> = p.dispatch.puts.iter().map(|x| (x.dst, x.index)).collect();
        keys.dedup();
        assert_eq!(w.len(), keys.len());
        assert_eq!(
            w.iter().map(|x| x.len).sum::<usize>(),
            p.dispatch.puts.len() * p.msg
        );
        let b = count_block(2, p.dispatch.channels, &p.dispatch.puts, &w);
        assert_eq!(b.len(), 2 * p.dispatch.channels * 8);
    }
}
