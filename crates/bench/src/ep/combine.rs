//! Combine's work at the token's source: the weighted sum of the slots that came back (on the
//! GPU for device memory, on the CPU otherwise) and its check against the expected sum.

use efabench_gpu::ep::EpProducer;
use efabench_gpu::DeviceBuffer;

use crate::ep::layout::Plan;
use crate::ep::verify::{
    combined_mismatches, decode_token, fill_message, reduce_token, token_seed,
};
use crate::error::BenchError;
use crate::mesh::Payload;
use crate::pattern::Stream;

fn gpu(what: &str, e: efabench_gpu::GpuError) -> BenchError {
    BenchError::failed(format!("{what}: {e}"))
}

/// Where the reduction runs.
pub enum Reducer {
    Cpu,
    /// The kernel, the weights `[token][slot]` and the f32 output in device memory.
    Gpu {
        weights: DeviceBuffer,
        out: DeviceBuffer,
    },
}

impl Reducer {
    pub fn gpu(prod: &EpProducer, plan: &Plan) -> Result<Reducer, BenchError> {
        let w: Vec<u8> = plan
            .comb_weights
            .iter()
            .flatten()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let weights = DeviceBuffer::new(prod.gpu(), w.len().max(4))
            .map_err(|e| gpu("allocating the combine weights", e))?;
        efabench_gpu::GpuBuffer::write_at(&weights, 0, &w)
            .map_err(|e| gpu("copying the combine weights", e))?;
        let out = DeviceBuffer::new(prod.gpu(), (plan.tokens * plan.hidden * 4).max(4))
            .map_err(|e| gpu("allocating the combine output", e))?;
        Ok(Reducer::Gpu { weights, out })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Reducer::Cpu => "cpu",
            Reducer::Gpu { .. } => "gpu",
        }
    }

    /// The weighted sum of every token (the timed part of combine's end). The result stays
    /// where it was computed; [`Reducer::result`] fetches it.
    pub fn reduce(
        &self,
        plan: &Plan,
        recv: &Payload,
        prod: Option<&EpProducer>,
        host_out: &mut Vec<f32>,
    ) -> Result<(), BenchError> {
        let g = &plan.regions;
        match (self, prod) {
            (Reducer::Gpu { weights, out }, Some(p)) => {
                let base = recv.device_ptr().ok_or_else(|| {
                    BenchError::failed("the combine buffer has no device address")
                })?;
                p.reduce(
                    base + g.comb_recv as u64,
                    weights,
                    out,
                    plan.tokens,
                    plan.slots,
                    plan.hidden,
                )
                .map_err(|e| gpu("the combine reduction kernel", e))
            }
            _ => {
                let per = plan.slots * plan.out;
                let mut region = vec![0u8; plan.tokens * per];
                recv.read_at(g.comb_recv, &mut region)
                    .map_err(|e| gpu("reading the combine receive buffer", e))?;
                host_out.resize(plan.tokens * plan.hidden, 0.0);
                for t in 0..plan.tokens {
                    reduce_token(
                        &region[t * per..(t + 1) * per],
                        &plan.comb_weights[t],
                        plan.hidden,
                        &mut host_out[t * plan.hidden..(t + 1) * plan.hidden],
                    );
                }
                Ok(())
            }
        }
    }

    /// The combined tokens on the host (a copy from the device for the GPU reduction).
    pub fn result(&self, host_out: &mut Vec<f32>) -> Result<(), BenchError> {
        if let Reducer::Gpu { out, .. } = self {
            let b = out
                .to_host()
                .map_err(|e| gpu("copying the combined tokens", e))?;
            *host_out = b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
        }
        Ok(())
    }
}

/// Flips one bit of the first combine slot that holds a message (test hook), so the check must
/// report that element.
pub fn corrupt(plan: &Plan, recv: &Payload) -> Result<(), BenchError> {
    for (t, w) in plan.comb_weights.iter().enumerate() {
        if let Some(s) = w.iter().position(|x| *x != 0.0) {
            let at = plan.regions.comb_recv + (t * plan.slots + s) * plan.out + 15;
            let mut b = [0u8; 1];
            recv.read_at(at, &mut b).map_err(|e| gpu("test hook", e))?;
            b[0] ^= 0x40;
            recv.write_at(at, &b).map_err(|e| gpu("test hook", e))?;
            return Ok(());
        }
    }
    Ok(())
}

/// Elements of the combined tokens that are off their expected weighted sum.
pub fn check(plan: &Plan, y: &[f32], iter: u64, st: &mut Stream) -> u64 {
    let mut msg = vec![0u8; plan.msg];
    let h = plan.hidden;
    let mut errors = 0;
    for t in 0..plan.tokens {
        fill_message(
            &mut msg,
            plan.dtype,
            h,
            [0; 4],
            token_seed(iter, plan.me, t as u32),
            st,
        );
        let x = decode_token(&msg, plan.dtype, h);
        match y.get(t * h..(t + 1) * h) {
            Some(got) => errors += combined_mismatches(got, &x, &plan.coef[t]),
            None => errors += h as u64,
        }
    }
    errors
}
