// GPU-initiated puts through a CPU proxy (`efabench proxy`; host side: crates/gpu/src/proxy.rs
// and crates/bench/src/proxy.rs).
//
// Device API: efa_put_nbi(dst_rank, remote_off, local_off, len, signal), efa_quiet(), efa_fence().
// A put becomes one command per rail stripe (the schedule of crates/fabric/src/route.rs: no split
// up to 128 KiB, then up to `rails` stripes aligned to 128 bytes, rotating the first rail) pushed
// into that rail's ring; one CPU proxy thread per rail pops its ring and posts fi_writemsg.
//
// Ring (one per rail): the FIFO ring of kernels/queue.cu with 32-byte commands. A command does not fit the
// queue ring's 16-byte slot (two 64-bit offsets, a length, a rank and a signal), so a slot is two
// 16-byte halves, each written with one 16-byte store and each carrying the lap parity and the
// low 30 bits of the position: the host takes a command once both halves show the lap it
// expects, so it never reads a half-written command and never clears a slot.
//   half A = { remote_off, parity << 63 | fence << 62 | (pos & 2^30-1) << 32 | len }
//   half B = { local_off,  parity << 63 | (pos & 2^30-1) << 32 | dst << 16 | signal }
// The head of each ring lives in device memory (state block); the proxy's consumed count (tail,
// for credits) and completed count (done, for quiet) live in mapped pinned host memory, 64 bytes
// apart, and the GPU reads them only when it runs out of credits or waits in quiet.
#include "pattern.cuh"

#define P_CTL_STRIDE 16   // u64 words of control per ring: tail at 0, done at 8
#define P_NEXT_RAIL 64    // state word: first rail of the next put
#define P_FENCE 65        // state word: 1 = the next command carries the fence bit
#define P_TAIL_CACHE 72   // state words [72, 80): last tail of ring r read from host memory
#define P_POS_MASK 0x3fffffffull

struct ProxyParams {
    efa_u64 slots;       // rings back to back, 4 u64 per slot (mapped pinned host memory)
    efa_u64 ctl;         // control words, P_CTL_STRIDE per ring (mapped pinned host memory)
    efa_u64 state;       // device memory: head of ring r at [r * 8], P_NEXT_RAIL, P_FENCE
    efa_u64 ts;          // device memory: u64 per put: push start [p], quiet returned [puts + p]
    efa_u64 span;        // device memory: [0] first push, [1] last quiet returned
    efa_u64 nslots_log2;
    efa_u64 rails;
    efa_u64 split;       // 1: stripe puts above 128 KiB over the rails; 0: whole puts round robin
    efa_u64 first_rail;
    efa_u64 puts;
    efa_u64 size;
    efa_u64 dst;
    efa_u64 blocking;    // quiet after each put
    efa_u64 poll_ns;     // pause between two reads of host memory while waiting (0: spin)
    efa_u64 fence_each;  // 1: a system-scope fence before every put; 0: one before the first
};

// One pause of a wait on host memory: every read of a mapped pinned word is a PCIe (or C2C) round
// trip, and a thread spinning on one keeps the link busy with reads that the proxy's own copies
// and the NIC compete with; a pause of poll_ns bounds that at one read per pause.
__device__ __forceinline__ void efa_pause(const ProxyParams& p) {
    if (p.poll_ns != 0) __nanosleep((unsigned)p.poll_ns);
}

__device__ __forceinline__ efa_u64 efa_now() {
    efa_u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ efa_u64 efa_ld(const efa_u64* p) { return *(const volatile efa_u64*)p; }
__device__ __forceinline__ void efa_st16(efa_u64* p, efa_u64 a, efa_u64 b) {
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

// Pushes one command into ring r (any thread; the head is claimed with one atomic).
__device__ void efa_push(const ProxyParams& p, efa_u64 r, efa_u64 remote_off, efa_u64 local_off,
                         efa_u64 len, efa_u64 dst, efa_u64 signal, efa_u64 fence) {
    efa_u64* st = (efa_u64*)p.state;
    const efa_u64 nslots = 1ull << p.nslots_log2;
    const efa_u64 pos = atomicAdd((unsigned long long*)(st + r * 8), 1ull);
    const efa_u64* tail = (const efa_u64*)p.ctl + r * P_CTL_STRIDE;
    // Credit: the slot is free once the proxy consumed the command of the previous lap. The
    // last tail read is cached in device memory, so host memory is read over PCIe only when the
    // cache does not already grant the slot (an H100 run that read it on every push after the
    // first lap spent ~1 us a put there).
    if (pos >= nslots && efa_ld(st + P_TAIL_CACHE + r) <= pos - nslots) {
        efa_u64 t;
        while ((t = efa_ld(tail)) <= pos - nslots) {
            efa_pause(p);
        }
        atomicMax((unsigned long long*)(st + P_TAIL_CACHE + r), (unsigned long long)t);
    }
    const efa_u64 parity = ((pos >> p.nslots_log2) & 1ull) ^ 1ull;
    const efa_u64 low = (pos & P_POS_MASK) << 32;
    efa_u64* s = (efa_u64*)p.slots + (r << p.nslots_log2) * 4 + (pos & (nslots - 1)) * 4;
    efa_st16(s, remote_off, (parity << 63) | (fence << 62) | low | (len & 0xffffffffull));
    efa_st16(s + 2, local_off, (parity << 63) | low | ((dst & 0xffffull) << 16) | (signal & 0xffffull));
}

// route::stripe_count: no split up to 128 KiB, else ceil(len / 128 KiB) capped at the rail count
// and lowered to a divisor of it.
__device__ efa_u64 efa_stripe_count(efa_u64 len, efa_u64 rails) {
    efa_u64 wanted = (len + (128ull << 10) - 1) >> 17;
    if (wanted < 1) wanted = 1;
    if (wanted > rails) wanted = rails;
    for (efa_u64 k = wanted; k > 1; --k)
        if (rails % k == 0) return k;
    return 1;
}

// Non-blocking put: returns once the command(s) are in the rings. The payload must be written
// before the call; the system-scope fence makes it visible to the NIC before the command is.
// With fence_each = 0 the caller promises that the payload was written before its last fence
// (the benchmark writes every payload before the launch and fences once): a system-scope fence
// waits for the GPU's earlier stores to reach host memory, about a PCIe round trip per put.
__device__ void efa_put_nbi(const ProxyParams& p, efa_u64 dst, efa_u64 remote_off, efa_u64 local_off,
                            efa_u64 len, efa_u64 signal) {
    efa_u64* st = (efa_u64*)p.state;
    if (p.fence_each) asm volatile("fence.acq_rel.sys;" ::: "memory");
    const efa_u64 rails = p.rails;
    const efa_u64 n = p.split ? efa_stripe_count(len, rails) : 1;
    const efa_u64 first = st[P_NEXT_RAIL] % rails;
    const efa_u64 fence = st[P_FENCE];
    st[P_FENCE] = 0;
    if (n == 1) {
        efa_push(p, first, remote_off, local_off, len, dst, signal, fence);
        st[P_NEXT_RAIL] = (first + 1) % rails;
        return;
    }
    const efa_u64 chunk = (((len + n - 1) / n + 127) / 128) * 128;
    efa_u64 off = 0, last = first;
    for (efa_u64 i = 0; i < n && off < len; ++i) {
        const efa_u64 l = min(chunk, len - off);
        last = (first + i) % rails;
        // A fence orders against every earlier put, so every rail's first stripe carries it.
        efa_push(p, last, remote_off + off, local_off + off, l, dst, signal, fence);
        off += l;
    }
    st[P_NEXT_RAIL] = (last + 1) % rails;
}

// Returns when every put pushed before the call has completed remotely: the proxy counts a
// command done when its write's FI_DELIVERY_COMPLETE completion arrived.
__device__ void efa_quiet(const ProxyParams& p) {
    const efa_u64* st = (const efa_u64*)p.state;
    for (efa_u64 r = 0; r < p.rails; ++r) {
        const efa_u64 head = efa_ld(st + r * 8);
        const efa_u64* done = (const efa_u64*)p.ctl + r * P_CTL_STRIDE + 8;
        while (efa_ld(done) < head) {
            efa_pause(p);
        }
    }
}

// Orders the puts before it before the puts after it: the proxy drains the writes in flight on a
// ring before it posts a command that carries the fence bit.
__device__ void efa_fence(const ProxyParams& p) { ((efa_u64*)p.state)[P_FENCE] = 1; }

// One iteration of the benchmark from one thread: `puts` puts of `size` bytes to `dst`, put i
// from local and remote offset i * size with signal i, and a quiet after each (`blocking`) or one
// at the end (`nbi`). Push and quiet times are %globaltimer nanoseconds.
extern "C" __global__ void efa_proxy_puts(const ProxyParams p) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    efa_u64* st = (efa_u64*)p.state;
    efa_u64* ts = (efa_u64*)p.ts;
    st[P_NEXT_RAIL] = p.first_rail;
    st[P_FENCE] = 0;
    if (!p.fence_each) asm volatile("fence.acq_rel.sys;" ::: "memory");
    const efa_u64 t0 = efa_now();
    for (efa_u64 i = 0; i < p.puts; ++i) {
        ts[i] = efa_now();
        efa_put_nbi(p, p.dst, i * p.size, i * p.size, p.size, i);
        if (p.blocking) {
            efa_quiet(p);
            ts[p.puts + i] = efa_now();
        }
    }
    efa_quiet(p);
    const efa_u64 t1 = efa_now();
    if (!p.blocking)
        for (efa_u64 i = 0; i < p.puts; ++i) ts[p.puts + i] = t1;
    ((efa_u64*)p.span)[0] = t0;
    ((efa_u64*)p.span)[1] = t1;
}

// Clock alignment: the host writes k to word 0 (mapped pinned), the kernel answers with its
// %globaltimer in word 2 and k in word 1; the host brackets each exchange with its own clock.
extern "C" __global__ void efa_proxy_ping(efa_u64 words, efa_u64 n) {
    efa_u64* w = (efa_u64*)words;
    for (efa_u64 k = 1; k <= n; ++k) {
        while (efa_ld(w) != k) {
        }
        const efa_u64 t = efa_now();
        *(volatile efa_u64*)(w + 2) = t;
        asm volatile("fence.acq_rel.sys;" ::: "memory");
        *(volatile efa_u64*)(w + 1) = k;
    }
}
