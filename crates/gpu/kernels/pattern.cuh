// The verification pattern, device side. Keep in step with crates/bench/src/pattern.rs
// (mix, seed, word): a GPU test (crates/gpu/tests/gpu.rs) compares these words with the Rust
// ones, and a CPU test checks that the constants below appear in both files.
#pragma once

typedef unsigned long long efa_u64;

// SplitMix64's finaliser: a cheap bijective mix of 64 bits.
__device__ __forceinline__ efa_u64 efa_mix(efa_u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133D11EBull;
    return z ^ (z >> 31);
}

// The seed of one payload: iteration, sender, receiver and slot inside a window.
__device__ __forceinline__ efa_u64 efa_seed(efa_u64 iter, unsigned src, unsigned dst, unsigned slot) {
    return efa_mix((iter * 0x00000100000001B3ull) ^ ((efa_u64)src << 48) ^ ((efa_u64)dst << 32) ^
                   ((efa_u64)slot << 8) ^ 0xEFA0BE4Cull);
}

// 64-bit word `i` of the payload with this seed (little-endian bytes in memory): the position
// stream mix(i * phi ^ SALT) XOR the seed (pattern.rs: base_word, word).
__device__ __forceinline__ efa_u64 efa_word(efa_u64 seed, efa_u64 i) {
    return efa_mix((i * 0x9E3779B97F4A7C15ull) ^ 0x5EED0FEFA0BE4C00ull) ^ seed;
}

// Sum of a per-thread count over the warp, added once per warp to a global counter.
__device__ __forceinline__ void efa_add_count(efa_u64 bad, efa_u64* count) {
    for (int off = 16; off > 0; off >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, off);
    if ((threadIdx.x & 31) == 0 && bad != 0) atomicAdd(count, bad);
}
