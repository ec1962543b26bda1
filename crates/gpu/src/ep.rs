//! The GPU side of `efabench ep --initiator gpu`: the kernels of `kernels/ep.cu` that push one
//! command per (token, expert) into the proxy's command ring ([`crate::proxy`]), then a count
//! signal per destination and a quiet, and the combine's weighted sum over device memory.

use crate::buffer::{DeviceBuffer, GpuBuffer};
use crate::driver::{Gpu, Kernel, KernelParams, Shape, Stream, TypedKernel};
use crate::error::GpuError;
use crate::kernels::{kernel, Source};
use crate::proxy::{Command, RingMemory};
use efabench_fabric::MemoryBuffer;
use std::sync::Arc;
use std::time::{Duration, Instant};

const STATE_WORDS: usize = 16;
const FIRST_PUSH: usize = 2;
const LAST_PUSH: usize = 3;
const END: usize = 4;
const FAILED: usize = 5;
const FAILED_SEEN: usize = 6;
const FAILED_WANT: usize = 7;
/// The control word of ring 0 that asks the kernels to stop waiting (`EP_ABORT` in kernels/ep.cu;
/// between the done count at 8 and the ring's next control block at 16).
pub const ABORT_WORD: usize = 12;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct EpParams {
    slots: u64,
    ctl: u64,
    state: u64,
    cmds: u64,
    n_puts: u64,
    n_sigs: u64,
    nslots_log2: u64,
    poll_ns: u64,
    timeout_ns: u64,
}
// SAFETY: repr(C), nine u64 fields in the order of `struct EpParams` in kernels/ep.cu.
unsafe impl KernelParams for EpParams {}

/// One phase's commands in device memory: token puts, then count signals.
pub struct EpCommands {
    buf: DeviceBuffer,
    n_puts: usize,
    n_sigs: usize,
}

/// `%globaltimer` ns of one launch: the first put's push start, the last put's push end, and
/// when the last signal completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpSpan {
    pub first_push: u64,
    pub last_push: u64,
    pub end: u64,
}

/// Why a launched phase did not end as it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpStall {
    /// A push waited longer than the limit for the proxy to consume the command a lap earlier.
    Credit { tail: u64, want: u64, aborted: bool },
    /// The quiet waited longer than the limit for the proxy's done count.
    Quiet { done: u64, want: u64, aborted: bool },
}

impl std::fmt::Display for EpStall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, seen, want, aborted) = match *self {
            EpStall::Credit {
                tail,
                want,
                aborted,
            } => ("a ring slot (proxy's consumed count", tail, want, aborted),
            EpStall::Quiet {
                done,
                want,
                aborted,
            } => ("the proxy's completions (done count", done, want, aborted),
        };
        let why = if aborted {
            "stopped by the host"
        } else {
            "gave up after the time limit"
        };
        write!(
            f,
            "the kernel waited for {what} {seen}, needed {want}) and {why}"
        )
    }
}

/// Stops the kernels' waits on ring `ctl` (the proxy failed): every wait gives up at its next
/// read of host memory.
pub fn abort(ctl: &[std::sync::atomic::AtomicU64]) {
    ctl[ABORT_WORD].store(1, std::sync::atomic::Ordering::Release);
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// A command as the kernel reads it from its table: `{remote_off, local_off, fence << 62 | len,
/// dst << 16 | signal}`.
pub fn table_words(c: &Command) -> [u64; 4] {
    [
        c.remote_off,
        c.local_off,
        (c.fence as u64) << 62 | c.len as u64,
        (c.dst as u64) << 16 | c.signal as u64,
    ]
}

/// The kernels of one rank, with the ring's head (it persists across launches, so positions keep
/// counting up and the lap parity stays right).
pub struct EpProducer {
    gpu: Arc<Gpu>,
    stream: Stream,
    begin: TypedKernel<EpParams>,
    puts: TypedKernel<EpParams>,
    signal: TypedKernel<EpParams>,
    reduce: Kernel,
    state: DeviceBuffer,
}

impl EpProducer {
    pub fn new(gpu: &Arc<Gpu>) -> Result<EpProducer, GpuError> {
        gpu.bind()?;
        let k = |name: &str| kernel(gpu, Source::Ep, name);
        let state = DeviceBuffer::new(gpu, STATE_WORDS * 8)?;
        state.write_at(0, &[0u8; STATE_WORDS * 8])?;
        // SAFETY: the three kernels take exactly one EpParams by value (kernels/ep.cu).
        let (begin, puts, signal) = unsafe {
            (
                TypedKernel::bind(k("efa_ep_begin")?),
                TypedKernel::bind(k("efa_ep_puts")?),
                TypedKernel::bind(k("efa_ep_signal")?),
            )
        };
        Ok(EpProducer {
            gpu: gpu.clone(),
            stream: Stream::new(gpu)?,
            begin,
            puts,
            signal,
            reduce: k("efa_ep_reduce")?,
            state,
        })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Copies a phase's commands (`puts` then `signals`) to the device.
    pub fn upload(&self, puts: &[Command], signals: &[Command]) -> Result<EpCommands, GpuError> {
        let n = puts.len() + signals.len();
        let buf = DeviceBuffer::new(&self.gpu, n.max(1) * 32)?;
        let mut b = Vec::with_capacity(n * 32);
        for c in puts.iter().chain(signals) {
            for w in table_words(c) {
                b.extend_from_slice(&w.to_le_bytes());
            }
        }
        if !b.is_empty() {
            buf.write_at(0, &b)?;
        }
        Ok(EpCommands {
            buf,
            n_puts: puts.len(),
            n_sigs: signals.len(),
        })
    }

    /// Launches one phase (returns at once): the proxy must consume ring 0 of `mem` meanwhile;
    /// [`EpProducer::wait`] ends it. No single wait of the kernels lasts longer than `limit`
    /// (nor past [`abort`]).
    pub fn launch(
        &self,
        mem: &RingMemory,
        nslots_log2: u32,
        cmds: &EpCommands,
        poll_ns: u32,
        limit: Duration,
    ) -> Result<(), GpuError> {
        let (slots, ctl) = mem.device().ok_or_else(|| {
            GpuError::Invalid("the GPU producer needs rings it can reach (RingMemory::new)".into())
        })?;
        let p = EpParams {
            slots,
            ctl,
            state: self.state.ptr(),
            cmds: cmds.buf.ptr(),
            n_puts: cmds.n_puts as u64,
            n_sigs: cmds.n_sigs as u64,
            nslots_log2: nslots_log2 as u64,
            poll_ns: poll_ns as u64,
            timeout_ns: u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX).max(1),
        };
        let threads = 128u32;
        let blocks = (cmds.n_puts as u32).div_ceil(threads).clamp(1, 132);
        // SAFETY: every address is a live allocation of this GPU (state, cmds, sized for
        // n_puts + n_sigs commands) or the device address of ring 0 of `mem`'s mapped memory
        // (sized for 2^nslots_log2 slots), all kept alive until `wait` synchronises the stream.
        unsafe {
            self.begin
                .launch(&self.stream, Shape { grid: 1, block: 1 }, &p)?;
            if cmds.n_puts > 0 {
                self.puts.launch(
                    &self.stream,
                    Shape {
                        grid: blocks,
                        block: threads,
                    },
                    &p,
                )?;
            }
            self.signal
                .launch(&self.stream, Shape { grid: 1, block: 1 }, &p)?;
        }
        Ok(())
    }

    /// Waits, for at most `limit`, for the launched phase, and returns its GPU timestamps, or
    /// the wait of the kernels that gave up. The kernels bound their own waits (see
    /// [`EpProducer::launch`]), so `limit` only guards against a kernel that stopped otherwise.
    pub fn wait(&self, limit: Duration) -> Result<Result<EpSpan, EpStall>, GpuError> {
        let deadline = Instant::now() + limit;
        while !self.stream.is_idle()? {
            if Instant::now() >= deadline {
                return Err(GpuError::Invalid(format!(
                    "the ep kernels were still running {:.1} s after the proxy finished",
                    limit.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        let s = self.state.to_host()?;
        let w = |i: usize| u64::from_le_bytes(s[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        let (failed, seen, want) = (w(FAILED), w(FAILED_SEEN), w(FAILED_WANT));
        let aborted = failed & 4 != 0;
        match failed & 3 {
            1 => {
                return Ok(Err(EpStall::Credit {
                    tail: seen,
                    want,
                    aborted,
                }))
            }
            2 => {
                return Ok(Err(EpStall::Quiet {
                    done: seen,
                    want,
                    aborted,
                }))
            }
            _ => {}
        }
        let first = w(FIRST_PUSH);
        Ok(Ok(EpSpan {
            first_push: if first == u64::MAX { w(END) } else { first },
            last_push: w(LAST_PUSH),
            end: w(END),
        }))
    }

    /// `out[t][j] = Σ_s weights[t][s] · bf16(recv[t][s][j])` on the GPU (f32 out), synchronously.
    /// `recv` is the device address of `[tokens][slots][hidden]` bf16 values.
    pub fn reduce(
        &self,
        recv: u64,
        weights: &DeviceBuffer,
        out: &DeviceBuffer,
        tokens: usize,
        slots: usize,
        hidden: usize,
    ) -> Result<(), GpuError> {
        let need = tokens * hidden * 4;
        if out.len() < need || weights.len() < tokens * slots * 4 {
            return Err(GpuError::Invalid(format!(
                "reduce: {tokens} tokens x {slots} slots x {hidden} elements do not fit the buffers"
            )));
        }
        let n = (tokens * hidden) as u32;
        // SAFETY: recv points at tokens x slots x hidden bf16 values of a live device allocation
        // (the caller's registered receive buffer), weights and out are live and sized as
        // checked above; the stream is synchronised before returning.
        unsafe {
            self.reduce.launch(
                &self.stream,
                Shape {
                    grid: n.div_ceil(256).clamp(1, 1024),
                    block: 256,
                },
                &[
                    recv,
                    weights.ptr(),
                    out.ptr(),
                    tokens as u64,
                    slots as u64,
                    hidden as u64,
                ],
            )?;
        }
        self.stream.synchronize()
    }
}

#[cfg(test)]
mod tests {
    /// What the host side binds must be what `kernels/ep.cu` defines: no GPU here to find out.
    #[test]
    fn the_kernels_and_their_parameter_struct_match_the_source() {
        let cu = crate::kernels::Source::Ep.text();
        for k in [
            "efa_ep_begin(const EpParams p)",
            "efa_ep_puts(const EpParams p)",
            "efa_ep_signal(const EpParams p)",
            "efa_ep_reduce(efa_u64 recv, efa_u64 weights, efa_u64 out, efa_u64 tokens,",
        ] {
            assert!(
                cu.contains(&format!("extern \"C\" __global__ void {k}")),
                "{k}"
            );
        }
        // The fields of struct EpParams, in order, as the Rust struct has them.
        let body = cu
            .split("struct EpParams {")
            .nth(1)
            .and_then(|s| s.split("};").next())
            .unwrap();
        let fields: Vec<&str> = body
            .lines()
            .filter_map(|l| l.trim().strip_prefix("efa_u64 "))
            .map(|l| l.split(';').next().unwrap().trim())
            .collect();
        assert_eq!(
            fields,
            [
                "slots",
                "ctl",
                "state",
                "cmds",
                "n_puts",
                "n_sigs",
                "nslots_log2",
                "poll_ns",
                "timeout_ns"
            ]
        );
        // The command words the kernel publishes are the ones the proxy decodes.
        assert!(cu.contains("(parity << 63) | low | (c[2] & 0x40000000ffffffffull)"));
        assert!(cu.contains("(parity << 63) | low | (c[3] & 0xffffffffull)"));
        assert!(!cu.contains("#include"));
        // The word indices the host reads and writes are the kernel's.
        for (name, i) in [
            ("EP_ABORT", super::ABORT_WORD),
            ("EP_END", super::END),
            ("EP_FAILED", super::FAILED),
            ("EP_FAILED_SEEN", super::FAILED_SEEN),
            ("EP_FAILED_WANT", super::FAILED_WANT),
        ] {
            let def = format!("#define {name} {i}");
            assert!(
                cu.lines()
                    .any(|l| l == def || l.starts_with(&format!("{def} "))),
                "{name}"
            );
        }
    }

    /// The kernel's two halves (ep_push) from the table words decode to the same command.
    #[test]
    fn table_words_published_as_the_kernel_does_decode_to_the_command() {
        use crate::proxy::{decode, lap_flag, Command, Peek};
        for fence in [false, true] {
            let c = Command {
                dst: 5,
                signal: 0xFFFF,
                len: 7408,
                remote_off: 1 << 33,
                local_off: 12345,
                fence,
            };
            let t = super::table_words(&c);
            for pos in [0u64, 1, 4095, 4096, 3 << 30] {
                let parity = lap_flag(pos, 12);
                let low = (pos & 0x3fff_ffff) << 32;
                let w = [
                    t[0],
                    (parity << 63) | low | (t[2] & 0x4000_0000_ffff_ffff),
                    t[1],
                    (parity << 63) | low | (t[3] & 0xffff_ffff),
                ];
                assert_eq!(decode(w, pos, 12), Peek::Ready(c), "{pos}");
            }
        }
    }
}
