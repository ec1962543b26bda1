//! Dispatch's work around the exchange: filling this rank's messages before the phase, and,
//! after it, checking every received message and running the experts, whose outputs are what
//! combine sends back.

use crate::ep::args::Layout;
use crate::ep::layout::Plan;
use crate::ep::verify::{
    decode_token, expert_factor, fill_message, to_bf16_bytes, token_seed, word_mismatches,
};
use crate::error::BenchError;
use crate::mesh::Payload;
use crate::pattern::Stream;

fn gpu(what: &str, e: efabench_gpu::GpuError) -> BenchError {
    BenchError::failed(format!("{what}: {e}"))
}

/// Writes every message this rank dispatches in iteration `iter` into its staging area.
pub fn fill(plan: &Plan, send: &Payload, iter: u64, st: &mut Stream) -> Result<(), BenchError> {
    let msg = plan.msg;
    let mut buf = vec![0u8; plan.sends.len() * msg];
    for (i, s) in plan.sends.iter().enumerate() {
        fill_message(
            &mut buf[i * msg..(i + 1) * msg],
            plan.dtype,
            plan.hidden,
            [plan.me, s.token, iter as u32, s.tag],
            token_seed(iter, plan.me, s.token),
            st,
        );
    }
    send.write_at(plan.regions.disp_stage, &buf)
        .map_err(|e| gpu("filling the dispatch messages", e))
}

/// Checks every message that arrived in iteration `iter` (when `verify`) and writes each
/// expert's output into the combine staging area: `ll`: `f(e) · x` in bf16; `per-rank`: the
/// weighted sum of this rank's experts of the token, `Σ w_k f(e_k) · x`, in bf16. Returns the
/// 8-byte words that differ from what the source sent. `corrupt` flips one received byte first
/// (test hook).
pub fn receive(
    plan: &Plan,
    recv: &Payload,
    send: &Payload,
    iter: u64,
    verify: bool,
    corrupt: &mut bool,
    st: &mut Stream,
) -> Result<u64, BenchError> {
    let g = &plan.regions;
    let mut region = vec![0u8; g.disp_counts - g.disp_recv];
    recv.read_at(g.disp_recv, &mut region)
        .map_err(|e| gpu("reading the dispatch receive buffer", e))?;
    let (msg, out) = (plan.msg, plan.out);
    let mut outputs = vec![0u8; plan.recvs.len() * out];
    let mut want = vec![0u8; msg];
    let mut errors = 0u64;
    for (i, m) in plan.recvs.iter().enumerate() {
        let at = m.recv_off - g.disp_recv;
        let got = &mut region[at..at + msg];
        if *corrupt {
            *corrupt = false;
            got[msg / 2] ^= 0x5A;
        }
        if verify {
            fill_message(
                &mut want,
                plan.dtype,
                plan.hidden,
                [m.src, m.token, iter as u32, m.tag],
                token_seed(iter, m.src, m.token),
                st,
            );
            errors += word_mismatches(got, &want);
        }
        let x = decode_token(got, plan.dtype, plan.hidden);
        let scale: f32 = match plan.layout {
            Layout::LowLatency => expert_factor(m.tag),
            Layout::PerRank => m.coef.iter().sum(),
        };
        let y: Vec<f32> = x.iter().map(|v| v * scale).collect();
        to_bf16_bytes(&y, &mut outputs[i * out..(i + 1) * out]);
    }
    send.write_at(g.comb_stage, &outputs)
        .map_err(|e| gpu("writing the expert outputs", e))?;
    Ok(errors)
}

/// Writes a phase's count block (what this rank announces to each destination).
pub fn stage_counts(send: &Payload, at: usize, block: &[u8]) -> Result<(), BenchError> {
    send.write_at(at, block)
        .map_err(|e| gpu("writing the count signals", e))
}
