// NVLink kernels of `efabench ipc`: one GPU moves a buffer to a peer GPU through a CUDA IPC
// mapping. Every kernel moves 16 bytes per thread per step (Libefaxx used 4-byte stores) and
// computes the verification pattern instead of reading a local copy, so each iteration carries
// its own seed and nothing but NVLink traffic is timed.
#include "pattern.cuh"

// push: store the pattern of `seed` into `dst`, a peer GPU's buffer (n16 16-byte vectors).
extern "C" __global__ void efa_push(ulonglong2* dst, efa_u64 n16, efa_u64 seed) {
    efa_u64 stride = (efa_u64)gridDim.x * blockDim.x;
    for (efa_u64 i = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        ulonglong2 v;
        v.x = efa_word(seed, 2 * i);
        v.y = efa_word(seed, 2 * i + 1);
        dst[i] = v;
    }
}

// pull: load `src`, a peer GPU's buffer, and compare every word with the pattern of `seed` on
// the loading (receiving) GPU; mismatches are added to *errors. Four loads are in flight per
// thread before the first compare, so a few warps per SM keep NVLink busy.
extern "C" __global__ void efa_pull(const ulonglong2* src, efa_u64 n16, efa_u64 seed, efa_u64* errors) {
    efa_u64 stride = (efa_u64)gridDim.x * blockDim.x;
    efa_u64 i = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x;
    efa_u64 bad = 0;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        ulonglong2 v0 = __ldcg(&src[i]);
        ulonglong2 v1 = __ldcg(&src[i + stride]);
        ulonglong2 v2 = __ldcg(&src[i + 2 * stride]);
        ulonglong2 v3 = __ldcg(&src[i + 3 * stride]);
        bad += (v0.x != efa_word(seed, 2 * i)) + (v0.y != efa_word(seed, 2 * i + 1));
        efa_u64 j = i + stride;
        bad += (v1.x != efa_word(seed, 2 * j)) + (v1.y != efa_word(seed, 2 * j + 1));
        j += stride;
        bad += (v2.x != efa_word(seed, 2 * j)) + (v2.y != efa_word(seed, 2 * j + 1));
        j += stride;
        bad += (v3.x != efa_word(seed, 2 * j)) + (v3.y != efa_word(seed, 2 * j + 1));
    }
    for (; i < n16; i += stride) {
        ulonglong2 v = __ldcg(&src[i]);
        bad += (v.x != efa_word(seed, 2 * i)) + (v.y != efa_word(seed, 2 * i + 1));
    }
    efa_add_count(bad, errors);
}

// copy: nvbandwidth's SM copy (device_to_device_memcpy_*_sm): load 16-byte vectors from `src`
// and store them to `dst`, either of which may be a peer GPU's buffer. Four loads are in flight
// per thread before the stores.
extern "C" __global__ void efa_copy(ulonglong2* dst, const ulonglong2* src, efa_u64 n16) {
    efa_u64 stride = (efa_u64)gridDim.x * blockDim.x;
    efa_u64 i = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        ulonglong2 v0 = __ldcg(&src[i]);
        ulonglong2 v1 = __ldcg(&src[i + stride]);
        ulonglong2 v2 = __ldcg(&src[i + 2 * stride]);
        ulonglong2 v3 = __ldcg(&src[i + 3 * stride]);
        dst[i] = v0;
        dst[i + stride] = v1;
        dst[i + 2 * stride] = v2;
        dst[i + 3 * stride] = v3;
    }
    for (; i < n16; i += stride) {
        dst[i] = __ldcg(&src[i]);
    }
}

// The pointer-chase list of nvbandwidth's device_to_device_latency_sm: 8-byte nodes, node i
// points at node (i + stride) % n. The addresses are those of the launching GPU's context, so
// the list is built by the GPU that chases it, through its mapping of the peer's buffer.
struct efa_node {
    efa_node* next;
};

extern "C" __global__ void efa_chase_init(efa_node* list, efa_u64 n, efa_u64 stride) {
    efa_u64 step = (efa_u64)gridDim.x * blockDim.x;
    for (efa_u64 i = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        list[i].next = &list[(i + stride) % n];
    }
}

// One thread of block `target` follows `hops` dependent loads from list[0]; the other blocks
// return at once (nvbandwidth runs one launch per SM this way). The last node's address goes to
// *end, so the loads cannot be optimised away and the host checks where the chase stopped.
extern "C" __global__ void efa_chase(efa_node* list, efa_u64 hops, efa_u64 target, efa_u64* end) {
    if (blockIdx.x != target || threadIdx.x != 0) return;
    efa_node* p = list;
    for (efa_u64 k = 0; k < hops; k++) {
        p = p->next;
    }
    *end = (efa_u64)p;
}
