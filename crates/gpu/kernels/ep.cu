// GPU-initiated expert-parallel dispatch and combine (`efabench ep --initiator gpu`; host side:
// crates/gpu/src/ep.rs and crates/bench/src/ep/).
//
// The command ring is the one of kernels/proxy.cu (32-byte commands in two 16-byte halves, each
// with the lap parity and the low 30 bits of the position; head in device memory, the proxy's
// consumed count `tail` at ctl[0] and completed count `done` at ctl[8] in mapped pinned memory):
//   half A = { remote_off, parity << 63 | fence << 62 | (pos & 2^30-1) << 32 | len }
//   half B = { local_off,  parity << 63 | (pos & 2^30-1) << 32 | dst << 16 | signal }
// A token put has no fence and `signal` = its receive channel (the local expert); a count signal
// has the fence bit (it marks the command a signal; nothing waits on it) and `signal` = the
// number of writes it announces to its destination.
//
// efa_ep_begin resets the span words; efa_ep_puts pushes one command per (token, expert) from
// one thread each (the head claimed with one atomic); efa_ep_signal, launched after it on the same
// stream (so every put has been pushed, and the ring holds them before any signal), pushes one
// count signal per destination at once and then waits in quiet until the proxy completed every
// command. A signal needs no quiet before it: the receiver counts the writes its signal announces
// (efabench's arrival rule), so a signal that overtakes its puts only waits for them there, as
// with the CPU initiator. efa_ep_reduce is the combine's weighted sum over bf16 slots.
//
// No wait here is unbounded: a wait for a credit or in quiet gives up when the host raised the
// abort word (ctl[EP_ABORT], the proxy failed) or after `timeout_ns` of %globaltimer, and records
// which wait gave up in state[EP_FAILED] with the counts it saw. A kernel that can spin forever
// would hold every later CUDA call of the process (a context synchronise, the teardown), so a
// dead proxy or peer would turn into a hung job instead of a named failure.
#include "pattern.cuh"

#define EP_DONE 8          // ctl word: commands completed
#define EP_ABORT 12        // ctl word: nonzero when the host asks the kernels to stop waiting
#define EP_HEAD 0          // state words
#define EP_TAIL_CACHE 1
#define EP_FIRST_PUSH 2
#define EP_LAST_PUSH 3
#define EP_END 4
#define EP_FAILED 5        // 0, or 1 (a credit wait gave up) / 2 (quiet gave up) / +4 (aborted)
#define EP_FAILED_SEEN 6   // the tail (credit) or done (quiet) count the wait last read
#define EP_FAILED_WANT 7   // the count it waited for
#define EP_POS_MASK 0x3fffffffull

struct EpParams {
    efa_u64 slots;        // the ring's slots (mapped pinned host memory, device address)
    efa_u64 ctl;          // tail at [0], done at [8]
    efa_u64 state;        // device memory, EP_* words
    efa_u64 cmds;         // device memory: 4 u64 per command {remote_off, local_off, fence << 62 | len, dst << 16 | signal}
    efa_u64 n_puts;       // token puts first, then n_sigs signals
    efa_u64 n_sigs;
    efa_u64 nslots_log2;
    efa_u64 poll_ns;      // pause between two reads of host memory while waiting (0: spin)
    efa_u64 timeout_ns;   // longest single wait before the kernels give up (0: no limit)
};

__device__ __forceinline__ efa_u64 ep_now() {
    efa_u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ efa_u64 ep_ld(const efa_u64* p) { return *(const volatile efa_u64*)p; }
__device__ __forceinline__ void ep_st16(efa_u64* p, efa_u64 a, efa_u64 b) {
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void ep_pause(const EpParams& p) {
    if (p.poll_ns != 0) __nanosleep((unsigned)p.poll_ns);
}

// Whether a wait that started at `t0`, last reading `seen` while it wants `want`, must give up
// (kind 1: credit, 2: quiet). The first thread to give up records why; the others see the word.
__device__ bool ep_give_up(const EpParams& p, efa_u64 t0, efa_u64 kind, efa_u64 seen, efa_u64 want) {
    efa_u64* st = (efa_u64*)p.state;
    if (ep_ld(st + EP_FAILED) != 0) return true;
    const bool aborted = ep_ld((const efa_u64*)p.ctl + EP_ABORT) != 0;
    if (!aborted && (p.timeout_ns == 0 || ep_now() - t0 < p.timeout_ns)) return false;
    if (atomicCAS((unsigned long long*)(st + EP_FAILED), 0ull, kind | (aborted ? 4ull : 0ull)) == 0ull) {
        st[EP_FAILED_SEEN] = seen;
        st[EP_FAILED_WANT] = want;
    }
    return true;
}

// Pushes command `c` (any thread); false when the wait for a credit gave up. The slot is free once
// the proxy consumed the command of the previous lap; the last tail read is cached in device
// memory so most pushes never read host memory.
__device__ bool ep_push(const EpParams& p, const efa_u64* c) {
    efa_u64* st = (efa_u64*)p.state;
    const efa_u64 nslots = 1ull << p.nslots_log2;
    const efa_u64 pos = atomicAdd((unsigned long long*)(st + EP_HEAD), 1ull);
    const efa_u64* tail = (const efa_u64*)p.ctl;
    if (pos >= nslots && ep_ld(st + EP_TAIL_CACHE) <= pos - nslots) {
        const efa_u64 t0 = ep_now();
        efa_u64 t;
        while ((t = ep_ld(tail)) <= pos - nslots) {
            if (ep_give_up(p, t0, 1, t, pos - nslots + 1)) return false;
            ep_pause(p);
        }
        atomicMax((unsigned long long*)(st + EP_TAIL_CACHE), (unsigned long long)t);
    }
    const efa_u64 parity = ((pos >> p.nslots_log2) & 1ull) ^ 1ull;
    const efa_u64 low = (pos & EP_POS_MASK) << 32;
    efa_u64* s = (efa_u64*)p.slots + (pos & (nslots - 1)) * 4;
    ep_st16(s, c[0], (parity << 63) | low | (c[2] & 0x40000000ffffffffull));
    ep_st16(s + 2, c[1], (parity << 63) | low | (c[3] & 0xffffffffull));
    return true;
}

// Waits until the proxy completed every command pushed so far; false when the wait gave up.
__device__ bool ep_quiet(const EpParams& p) {
    const efa_u64 head = ep_ld((const efa_u64*)p.state + EP_HEAD);
    const efa_u64* done = (const efa_u64*)p.ctl + EP_DONE;
    const efa_u64 t0 = ep_now();
    efa_u64 d;
    while ((d = ep_ld(done)) < head) {
        if (ep_give_up(p, t0, 2, d, head)) return false;
        ep_pause(p);
    }
    return true;
}

extern "C" __global__ void efa_ep_begin(const EpParams p) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    efa_u64* st = (efa_u64*)p.state;
    st[EP_FIRST_PUSH] = ~0ull;
    st[EP_LAST_PUSH] = 0;
    st[EP_END] = 0;
    st[EP_FAILED] = 0;
}

extern "C" __global__ void efa_ep_puts(const EpParams p) {
    efa_u64* st = (efa_u64*)p.state;
    const efa_u64* cmds = (const efa_u64*)p.cmds;
    // The payloads were written before the launch; one system-scope fence per thread orders
    // them before the commands the proxy reads.
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    const efa_u64 stride = (efa_u64)gridDim.x * blockDim.x;
    for (efa_u64 i = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x; i < p.n_puts; i += stride) {
        const efa_u64 t0 = ep_now();
        atomicMin((unsigned long long*)(st + EP_FIRST_PUSH), (unsigned long long)t0);
        if (!ep_push(p, cmds + i * 4)) return;
        atomicMax((unsigned long long*)(st + EP_LAST_PUSH), (unsigned long long)ep_now());
    }
}

extern "C" __global__ void efa_ep_signal(const EpParams p) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    efa_u64* st = (efa_u64*)p.state;
    const efa_u64* cmds = (const efa_u64*)p.cmds;
    for (efa_u64 i = 0; i < p.n_sigs; ++i)
        if (!ep_push(p, cmds + (p.n_puts + i) * 4)) return;
    if (!ep_quiet(p)) return;
    st[EP_END] = ep_now();
}

// out[t][j] = sum_s weights[t][s] * bf16(recv[t][s][j]) for tokens x hidden elements.
extern "C" __global__ void efa_ep_reduce(efa_u64 recv, efa_u64 weights, efa_u64 out, efa_u64 tokens,
                                         efa_u64 slots, efa_u64 hidden) {
    const unsigned short* r = (const unsigned short*)recv;
    const float* w = (const float*)weights;
    float* o = (float*)out;
    const efa_u64 n = tokens * hidden;
    for (efa_u64 i = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (efa_u64)gridDim.x * blockDim.x) {
        const efa_u64 t = i / hidden, j = i % hidden;
        float acc = 0.0f;
        for (efa_u64 s = 0; s < slots; ++s) {
            const float ws = w[t * slots + s];
            if (ws != 0.0f) acc += ws * __uint_as_float(((unsigned)r[(t * slots + s) * hidden + j]) << 16);
        }
        o[i] = acc;
    }
}
