// GPU -> CPU command rings for `efabench queue` (host side: crates/gpu/src/queue.rs).
//
// efa_queue_fifo: the MSCCL++-style FIFO. Slots are 16 bytes {fst, snd}; the head lives in device
// memory and is claimed once per warp (warp-aggregated pushes: one atomicAdd for every lane's
// batch); the consumers' tails live where the ring kind says (pinned host memory, managed memory,
// or device memory the host writes through GDRCopy) and the GPU keeps a cached copy of them in
// device memory, refreshed by one warp at a time, so thousands of waiting warps do not each poll
// the host over PCIe. A slot is published by one 16-byte store whose snd word carries the lap
// parity, so the host never clears a slot and a half-written slot is detectable.
//
// efa_queue_vyukov: Libefaxx's design for comparison: Dmitry Vyukov's bounded MPMC queue (a
// sequence word per cell, CAS on a shared head) with every thread pushing on its own, head, tail
// and cells in managed memory, and the posted/completed counters of its Quiet in managed memory.
//
// Both kernels record GPU timestamps (%globaltimer, ns): the earliest push start and the latest
// quiet end of the whole grid (state[S_T0], state[S_T1]) and a per-command latency array.
#include "pattern.cuh"

typedef unsigned int efa_u32;

// Layout of the device-memory state block (u64 words), shared with queue.rs.
#define S_CACHE 0   // [0, 8): cached consumer tails
#define S_LOCK 8    // the refresh lock (one refresher at a time)
#define S_CTL 9     // control: 0 run, 1 stop claiming (time budget spent), 2 kill (give up waits)
#define S_T0 10     // min push start (globaltimer ns)
#define S_T1 11     // max quiet end
#define S_HEAD 12   // the FIFO head
#define S_TICK 13   // smallest nonzero %globaltimer step seen (resolution probe)
#define TAIL_STRIDE 8  // consumer tails are 64 bytes apart

struct FifoParams {
    efa_u64 slots;       // slot array, 16 bytes a slot, as the GPU addresses it
    efa_u64 tails;       // consumer tails (u64, TAIL_STRIDE apart), as the GPU addresses them
    efa_u64 state;       // device state block
    efa_u64 pushed;      // u32 per producer: commands pushed
    efa_u64 lat;         // u32 per command (index seq * producers + producer): ns + 1, 0 = none
    efa_u64 nslots_log2;
    efa_u64 chunk_log2;  // consumers own chunks of 2^chunk_log2 slots, round robin
    efa_u64 consumers;
    efa_u64 per_producer;
    efa_u64 batch;       // nbi: commands per lane per claim (blocking: 1)
    efa_u64 blocking;
    efa_u64 release;     // how a batch is ordered after the producer's earlier writes (a real
                         // command's payload): 0 not at all, 1 fence.acq_rel.sys before each
                         // batch, 2 a release store for a batch of one command (a fence for more)
    efa_u64 salt;
    efa_u64 direct;      // poll the consumers' tails themselves (few warps) instead of the cache;
                         // above 1: nanoseconds to sleep between polls
};

struct VyukovParams {
    efa_u64 cells;       // managed: 3 u64 per cell {sequence, fst, snd}
    efa_u64 ctrl;        // managed: head at [0], tail at [16] (128 bytes apart), posted [32], completed [48]
    efa_u64 state;
    efa_u64 pushed;
    efa_u64 lat;
    efa_u64 mask;
    efa_u64 per_producer;
    efa_u64 blocking;
    efa_u64 salt;
};

__device__ __forceinline__ efa_u64 efa_now() {
    efa_u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ efa_u64 efa_ld(const efa_u64* p) {
    return *(const volatile efa_u64*)p;
}

// The two words of a command: fst is the pattern of (seq, producer, salt); snd is
// parity << 63 | producer << 32 | seq. The parity of lap L is (L & 1) ^ 1, so a zeroed slot is
// never mistaken for lap 0.
__device__ __forceinline__ efa_u64 efa_cmd_fst(efa_u64 seq, efa_u64 producer, efa_u64 salt) {
    return efa_seed(seq, (unsigned)producer, (unsigned)salt, 0);
}
__device__ __forceinline__ efa_u64 efa_cmd_snd(efa_u64 seq, efa_u64 producer, efa_u64 pos, efa_u64 log2n) {
    efa_u64 parity = ((pos >> log2n) & 1ull) ^ 1ull;
    return (parity << 63) | ((producer & 0x7fffffffull) << 32) | (seq & 0xffffffffull);
}

__device__ __forceinline__ void efa_store16(efa_u64* p, efa_u64 a, efa_u64 b) {
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

// The same 16 bytes as a system-scope release: every earlier write of this thread is visible
// system-wide before either word is. One instruction instead of a fence and a store; sm_70 and
// later accept the vector form.
__device__ __forceinline__ void efa_store16_release(efa_u64* p, efa_u64 a, efa_u64 b) {
    asm volatile("st.release.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

// Refreshes the cached tails from the consumers' tails; one refresher at a time GPU-wide.
__device__ void efa_refresh(const FifoParams& p) {
    efa_u64* st = (efa_u64*)p.state;
    unsigned* lock = (unsigned*)(st + S_LOCK);
    if (*(volatile unsigned*)lock == 0u && atomicCAS(lock, 0u, 1u) == 0u) {
        const efa_u64* tails = (const efa_u64*)p.tails;
        for (efa_u64 c = 0; c < p.consumers; ++c) {
            efa_u64 t = efa_ld(tails + c * TAIL_STRIDE);
            atomicMax(st + S_CACHE + c, t);
        }
        atomicExch(lock, 0u);  // the atomics above are performed at L2 before this one
    }
}

// The consumer that owns position pos: chunks of slots are dealt round robin, the same slots on
// every lap (queue.rs, Geometry, says why a one-bit lap flag needs that).
__device__ __forceinline__ efa_u64 efa_owner(efa_u64 pos, const FifoParams& p) {
    const efa_u64 slot = pos & ((1ull << p.nslots_log2) - 1);
    return (efa_u32)(slot >> p.chunk_log2) % (efa_u32)p.consumers;
}

// Waits until the cached tail of consumer c passes `need` (tail > need). False when killed.
// `seen` gets the tail value that ended the wait (tails only grow: a lower bound from then on).
__device__ bool efa_wait_tail(const FifoParams& p, efa_u64 c, efa_u64 need, efa_u64* seen) {
    efa_u64* st = (efa_u64*)p.state;
    unsigned spins = 0;
    efa_u64 t;
    if (p.direct) {
        // Few waiters: read the consumer's tail itself (one PCIe read per poll and warp).
        const efa_u64* tail = (const efa_u64*)p.tails + c * TAIL_STRIDE;
        while ((t = efa_ld(tail)) <= need) {
            if ((++spins & 63u) == 0 && efa_ld(st + S_CTL) >= 2) return false;
            if (p.direct > 1) __nanosleep((unsigned)p.direct);
        }
        *seen = t;
        return true;
    }
    while ((t = efa_ld(st + S_CACHE + c)) <= need) {
        efa_refresh(p);
        if ((++spins & 63u) == 0 && efa_ld(st + S_CTL) >= 2) return false;
        if (spins > 256) __nanosleep(64);
    }
    *seen = t;
    return true;
}

__device__ __forceinline__ void efa_record_times(efa_u64* st, efa_u64 t0, efa_u64 t1, unsigned mask) {
    for (int off = 16; off > 0; off >>= 1) {
        efa_u64 a = __shfl_down_sync(mask, t0, off);
        efa_u64 b = __shfl_down_sync(mask, t1, off);
        if ((threadIdx.x & 31) + off < 32 && ((mask >> ((threadIdx.x & 31) + off)) & 1u)) {
            t0 = min(t0, a);
            t1 = max(t1, b);
        }
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMin(st + S_T0, t0);
        atomicMax(st + S_T1, t1);
    }
}

__device__ __forceinline__ unsigned efa_lanes_mask(unsigned* nl_out) {
    unsigned warp_base = threadIdx.x & ~31u;
    unsigned nl = min(32u, blockDim.x - warp_base);
    *nl_out = nl;
    return nl == 32 ? 0xffffffffu : ((1u << nl) - 1u);
}

extern "C" __global__ void efa_queue_fifo(const FifoParams p) {
    efa_u64* st = (efa_u64*)p.state;
    efa_u64* slots = (efa_u64*)p.slots;
    efa_u32* lat = (efa_u32*)p.lat;
    const efa_u64 producers = (efa_u64)gridDim.x * blockDim.x;
    const efa_u64 me = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned lane = threadIdx.x & 31;
    unsigned nl;
    const unsigned wmask = efa_lanes_mask(&nl);
    const efa_u64 n = p.per_producer;
    const efa_u64 nslots = 1ull << p.nslots_log2;
    efa_u64 last = 0;  // highest position this thread wrote + 1
    efa_u64 seq = 0;
    // With one consumer, the largest tail this thread has seen: slots below it + nslots are free
    // without another look (a blocking producer knows this from its own last wait, which saves
    // a read per push: over PCIe when polling directly).
    efa_u64 known = 0;
    efa_u64 seen = 0;
    bool killed = false;
    const efa_u64 t_begin = efa_now();
    // The loop is warp-uniform (same n, b and control word for every lane), so the warp stays
    // converged for the shuffles; a killed wait only skips work and the next control read ends it.
    while (seq < n) {
        const efa_u64 b = p.blocking ? 1 : min(p.batch, n - seq);
        efa_u64 ctl = 0;
        if (lane == 0) ctl = efa_ld(st + S_CTL);
        ctl = __shfl_sync(wmask, ctl, 0);
        if (ctl != 0) break;
        const efa_u64 t0 = efa_now();
        efa_u64 base = 0;
        if (lane == 0) base = atomicAdd((unsigned long long*)(st + S_HEAD), (unsigned long long)(nl * b));
        base = __shfl_sync(wmask, base, 0);
        // Release: the producer's earlier writes (a real command's payload) become visible
        // system-wide before the slots: one acq_rel fence per batch, then plain stores; or, for a
        // batch of one command (every blocking push), the slot's own store is the release.
        const bool store_releases = p.release == 2 && b == 1;
        if (p.release != 0 && !store_releases) asm volatile("fence.acq_rel.sys;" ::: "memory");
        // Credits: one look at the cached tails for the whole batch; per-slot waits only when the
        // batch reaches past what the cache already allows.
        const efa_u64 top = base + b * nl - 1;
        bool credit = top < nslots || (p.consumers == 1 && known > top - nslots);
        if (!credit) {
            efa_u64 lo = ~0ull;
            const efa_u64* tails = p.direct ? (const efa_u64*)p.tails : st + S_CACHE;
            const efa_u64 stride = p.direct ? TAIL_STRIDE : 1;
            for (efa_u64 c = 0; c < p.consumers; ++c) lo = min(lo, efa_ld(tails + c * stride));
            credit = lo > top - nslots;
            if (p.consumers == 1) known = max(known, lo);
        }
        if (store_releases) {
            // One command, published by its own release store (kept out of the batch loop below,
            // which stays one unrolled run of plain stores).
            const efa_u64 pos = base + lane;
            if (!credit && pos >= nslots && !killed && !efa_wait_tail(p, efa_owner(pos - nslots, p), pos - nslots, &seen)) killed = true;
            if (!killed) {
                efa_store16_release(slots + 2 * (pos & (nslots - 1)), efa_cmd_fst(seq, me, p.salt), efa_cmd_snd(seq, me, pos, p.nslots_log2));
                last = pos + 1;
            }
        } else {
#pragma unroll 4
            for (efa_u64 j = 0; j < b; ++j) {
                const efa_u64 pos = base + j * nl + lane;
                // The slot is free once the consumer of its previous lap has passed it.
                if (!credit && pos >= nslots && !killed && !efa_wait_tail(p, efa_owner(pos - nslots, p), pos - nslots, &seen)) killed = true;
                if (killed) continue;
                efa_u64* s = slots + 2 * (pos & (nslots - 1));
                efa_store16(s, efa_cmd_fst(seq + j, me, p.salt), efa_cmd_snd(seq + j, me, pos, p.nslots_log2));
                last = pos + 1;
            }
        }
        if (p.blocking) {
            const efa_u64 pos = base + lane;
            if (!killed && !efa_wait_tail(p, efa_owner(pos, p), pos, &seen)) killed = true;
            if (!killed && p.consumers == 1) known = max(known, seen);
            const efa_u64 dt = efa_now() - t0;
            if (!killed) lat[seq * producers + me] = (efa_u32)min(dt + 1, 0xffffffffull);
        } else if (lane == 0) {
            const efa_u64 dt = efa_now() - t0;
            lat[seq * producers + me] = (efa_u32)min(dt + 1, 0xffffffffull);
        }
        seq += b;
        __syncwarp(wmask);
    }
    // Quiet: every command of this thread acknowledged. A consumer's tail is the first position
    // it owns and has not consumed, so tail > last - 1 for every consumer means that each has
    // consumed all of its positions up to this thread's last one.
    for (efa_u64 c = 0; c < p.consumers && last != 0 && !killed; ++c) {
        if (!efa_wait_tail(p, c, last - 1, &seen)) killed = true;
    }
    ((efa_u32*)p.pushed)[me] = (efa_u32)seq;
    const efa_u64 t_end = efa_now();
    __syncwarp(wmask);
    efa_record_times(st, t_begin, t_end, wmask);
    // Resolution probe: the first thread of the grid looks for the smallest timer step.
    if (me == 0) {
        efa_u64 a = efa_now(), best = ~0ull;
        for (int i = 0; i < 64; ++i) {
            efa_u64 b2 = efa_now();
            while (b2 == a) b2 = efa_now();
            best = min(best, b2 - a);
            a = b2;
        }
        st[S_TICK] = best;
    }
}

extern "C" __global__ void efa_queue_vyukov(const VyukovParams p) {
    efa_u64* st = (efa_u64*)p.state;
    efa_u64* cells = (efa_u64*)p.cells;
    efa_u64* ctrl = (efa_u64*)p.ctrl;
    efa_u64* head = ctrl;
    efa_u64* posted = ctrl + 32;
    const efa_u64* completed = ctrl + 48;
    efa_u32* lat = (efa_u32*)p.lat;
    const efa_u64 producers = (efa_u64)gridDim.x * blockDim.x;
    const efa_u64 me = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned nl;
    const unsigned wmask = efa_lanes_mask(&nl);
    efa_u64 seq = 0, npushed = 0;
    bool stop = false;
    const efa_u64 t_begin = efa_now();
    for (; seq < p.per_producer && !stop; ++seq) {
        const efa_u64 t0 = efa_now();
        // Push: `while (!queue->Push(x)) __threadfence_system();` as Libefaxx does.
        for (unsigned spins = 0;; ++spins) {
            if ((spins & 15u) == 0 && efa_ld(st + S_CTL) != 0) {
                stop = true;
                break;
            }
            efa_u64 pos = efa_ld(head);
            efa_u64* cell = cells + 3 * (pos & p.mask);
            efa_u64 s = efa_ld(cell);
            __threadfence_system();
            long long diff = (long long)(s - pos);
            if (diff == 0) {
                if (atomicCAS_system((unsigned long long*)head, pos, pos + 1) == pos) {
                    cell[1] = efa_cmd_fst(seq, me, p.salt);
                    cell[2] = efa_cmd_snd(seq, me, 0, 63);
                    __threadfence_system();
                    *(volatile efa_u64*)cell = pos + 1;
                    break;
                }
            } else {
                __threadfence_system();
            }
        }
        if (stop) break;
        npushed = seq + 1;
        atomicAdd_system((unsigned long long*)posted, 1ull);
        __threadfence_system();
        if (p.blocking) {
            // Quiet: `expected = *posted; while (*completed < expected)`.
            const efa_u64 expected = efa_ld(posted);
            unsigned spins = 0;
            while (efa_ld(completed) < expected) {
                __threadfence_system();
                if ((++spins & 15u) == 0 && efa_ld(st + S_CTL) >= 2) {
                    stop = true;
                    break;
                }
            }
            if (stop) break;
        }
        const efa_u64 dt = efa_now() - t0;
        lat[seq * producers + me] = (efa_u32)min(dt + 1, 0xffffffffull);
    }
    if (!p.blocking && !stop) {
        const efa_u64 expected = efa_ld(posted);
        unsigned spins = 0;
        while (efa_ld(completed) < expected) {
            __threadfence_system();
            if ((++spins & 15u) == 0 && efa_ld(st + S_CTL) >= 2) break;
        }
    }
    ((efa_u32*)p.pushed)[me] = (efa_u32)npushed;
    const efa_u64 t_end = efa_now();
    __syncwarp(wmask);
    efa_record_times(st, t_begin, t_end, wmask);
}

// efa_queue_floor: the bare round trip every blocking ring is measured against. One GPU thread
// stores a sequence number into pinned host memory and spins reading pinned host memory until a
// CPU thread has copied the number back: one posted PCIe write, the CPU's poll, and the GPU's
// PCIe reads, with no slot, claim, fence or pattern. Its p50 is the least a blocking push and wait
// can cost on this machine (`efabench queue` reports the blocking round trip as a ratio to it).
//
// With `claim` set it also does what every push of a shared ring does before its store, and
// nothing else of a ring: claim a position with one atomic on a device-memory word (the FIFO's
// head word, unused here) and order the number after earlier writes as `release` says (the
// FIFO's encoding). A ring's round trip over this probe is what its slots, credits, tails and
// verification cost; this probe over the bare one is what claiming and ordering cost.
struct FloorParams {
    efa_u64 flag;    // pinned host u64 the GPU writes
    efa_u64 answer;  // pinned host u64 the CPU writes (another cache line)
    efa_u64 state;
    efa_u64 pushed;  // u32: round trips completed
    efa_u64 lat;     // u32 per round trip: ns + 1
    efa_u64 iters;
    efa_u64 claim;   // 1: claim and order each number as a push does
    efa_u64 release; // with claim: 0 none, 1 fence.acq_rel.sys, 2 a release store
};

extern "C" __global__ void efa_queue_floor(const FloorParams p) {
    efa_u64* st = (efa_u64*)p.state;
    efa_u32* lat = (efa_u32*)p.lat;
    volatile efa_u64* flag = (volatile efa_u64*)p.flag;
    const efa_u64* answer = (const efa_u64*)p.answer;
    const efa_u64 t_begin = efa_now();
    efa_u64 done = 0;
    for (efa_u64 i = 1; i <= p.iters; ++i) {
        if (efa_ld(st + S_CTL) != 0) break;
        const efa_u64 t0 = efa_now();
        if (p.claim) {
            // The claimed position is never 2^63 or more, so `got >> 63` is 0; using it makes
            // the store wait for the atomic, as a push's slot address does.
            const efa_u64 got = atomicAdd((unsigned long long*)(st + S_HEAD), 1ull);
            const efa_u64 v = i | (got >> 63);
            if (p.release == 2) {
                asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(v) : "memory");
            } else {
                if (p.release == 1) asm volatile("fence.acq_rel.sys;" ::: "memory");
                *flag = v;
            }
        } else {
            *flag = i;
        }
        bool killed = false;
        for (unsigned spins = 0; efa_ld(answer) != i;) {
            if ((++spins & 63u) == 0 && efa_ld(st + S_CTL) >= 2) {
                killed = true;
                break;
            }
        }
        if (killed) break;
        lat[i - 1] = (efa_u32)min(efa_now() - t0 + 1, 0xffffffffull);
        done = i;
    }
    ((efa_u32*)p.pushed)[0] = (efa_u32)done;
    st[S_T0] = t_begin;
    st[S_T1] = efa_now();
}
