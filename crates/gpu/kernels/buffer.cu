// Fill and check a buffer with the verification pattern (crates/bench/src/pattern.rs), on the
// GPU that owns it, so device and managed buffers never have to travel to the host to be checked.
#include "pattern.cuh"

// Word i of the pattern for `seed` into every 8-byte word; a trailing partial word takes the
// low bytes of its word (as pattern::fill does).
extern "C" __global__ void efa_fill(unsigned char* buf, efa_u64 len, efa_u64 seed) {
    efa_u64 nwords = len / 8;
    efa_u64* w = (efa_u64*)buf;
    efa_u64 stride = (efa_u64)gridDim.x * blockDim.x;
    for (efa_u64 i = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride) {
        w[i] = efa_word(seed, i);
    }
    efa_u64 rest = len - nwords * 8;
    if (rest != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
        efa_u64 v = efa_word(seed, nwords);
        for (efa_u64 k = 0; k < rest; k++) buf[nwords * 8 + k] = (unsigned char)(v >> (8 * k));
    }
}

// Adds to *count the number of 8-byte words (a trailing partial word counts as one) that differ
// from the pattern (as pattern::mismatches counts them).
extern "C" __global__ void efa_mismatches(const unsigned char* buf, efa_u64 len, efa_u64 seed,
                                          efa_u64* count) {
    efa_u64 nwords = len / 8;
    const efa_u64* w = (const efa_u64*)buf;
    efa_u64 stride = (efa_u64)gridDim.x * blockDim.x;
    efa_u64 bad = 0;
    for (efa_u64 i = (efa_u64)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride) {
        bad += (w[i] != efa_word(seed, i)) ? 1 : 0;
    }
    efa_u64 rest = len - nwords * 8;
    if (rest != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
        efa_u64 v = efa_word(seed, nwords);
        unsigned diff = 0;
        for (efa_u64 k = 0; k < rest; k++) diff |= buf[nwords * 8 + k] ^ (unsigned char)(v >> (8 * k));
        bad += diff != 0 ? 1 : 0;
    }
    efa_add_count(bad, count);
}
