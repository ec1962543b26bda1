// Bulk-copy (TMA) variant of the NVLink push, sm_90 and newer: each block computes a 16 KiB chunk
// of the pattern into shared memory and hands it to the copy engine of its SM with
// `cp.async.bulk.global.shared::cta`, writing straight into the peer GPU's buffer. Two stages:
// the block fills one while the previous chunk is still being sent.
#include "pattern.cuh"

#define EFA_TMA_CHUNK 16384u

// len must be a multiple of 16 (the bulk-copy granule); dst 16-byte aligned.
extern "C" __global__ void __launch_bounds__(256) efa_tma_push(unsigned char* dst, efa_u64 len, efa_u64 seed) {
    __shared__ __align__(128) ulonglong2 stage[2][EFA_TMA_CHUNK / 16];
    efa_u64 nchunks = (len + EFA_TMA_CHUNK - 1) / EFA_TMA_CHUNK;
    int s = 0;
    for (efa_u64 c = blockIdx.x; c < nchunks; c += gridDim.x, s ^= 1) {
        efa_u64 off = c * EFA_TMA_CHUNK;
        unsigned bytes = (unsigned)((len - off) < EFA_TMA_CHUNK ? (len - off) : EFA_TMA_CHUNK);
        // The copy that last read stage[s] was committed two chunks ago: wait until at most the
        // most recent group is still reading shared memory.
        if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        __syncthreads();
        efa_u64 base = off / 8;
        for (unsigned j = threadIdx.x; j < bytes / 16; j += blockDim.x) {
            ulonglong2 v;
            v.x = efa_word(seed, base + 2 * j);
            v.y = efa_word(seed, base + 2 * j + 1);
            stage[s][j] = v;
        }
        // Ordinary shared-memory stores that the async proxy reads next need this fence.
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned smem = (unsigned)__cvta_generic_to_shared(&stage[s][0]);
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                         :: "l"(dst + off), "r"(smem), "r"(bytes) : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
    }
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
