// common/philox.h — Philox4x32-10, a counter-based random number generator (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011; the generator behind cuRAND's Philox and Random123).
//
// defines: PhiloxKey, philox4x32_10(counter, key), philox_uint32(...), philox_uniform(...), philox_key(seed),
//          PhiloxStream (which random sequence a value belongs to).
//
// Why counter-based: the n-th random number is a pure function f(key, n). No generator state is carried from
// one call to the next, so a CUDA thread can compute "the random number for weight i" directly, the host can
// compute the same number, and the order in which threads run does not matter. That is what lets a lesson
// compare its first training steps with the CPU reference number for number.
//
// Every function is `__host__ __device__` (empty macros in the cpu flavor) and uses only 32/64-bit integer
// arithmetic, so host and device produce the same bits.
#pragma once

#include <cstdint>

#include "common/launch.h"

struct PhiloxKey {
    uint32_t k0, k1;
};

struct PhiloxBlock {
    uint32_t v[4];
};

// A 64-bit seed is the 2×32-bit key.
__host__ __device__ inline PhiloxKey philox_key(uint64_t seed) {
    return PhiloxKey{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}

// One Philox4x32 round: two 32×32→64 multiplications, and the halves mixed with the other words and the key.
__host__ __device__ inline void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, PhiloxKey key) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c0;
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ key.k0;
    const uint32_t n2 = hi0 ^ c3 ^ key.k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
}

// Philox4x32 with 10 rounds: 4 random 32-bit words for a 128-bit counter and a 64-bit key.
// Known answer (Random123 kat_vectors): counter 0, key 0 → 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
__host__ __device__ inline PhiloxBlock philox4x32_10(PhiloxBlock counter, PhiloxKey key) {
    uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {  // the key schedule: add the Weyl constants (golden ratio, sqrt(3)-1) before each round
            key.k0 += 0x9E3779B9u;
            key.k1 += 0xBB67AE85u;
        }
        philox_round(c0, c1, c2, c3, key);
    }
    return PhiloxBlock{{c0, c1, c2, c3}};
}

// Which sequence a random number belongs to: the third counter word. Distinct streams never share a counter,
// so the initial weights of layer 2 are independent of the shuffle of epoch 2.
enum PhiloxStream : uint32_t {
    kPhiloxStreamInit = 0x1u,     // parameter initialization; the fourth word is the layer index
    kPhiloxStreamShuffle = 0x2u,  // per-epoch shuffle; the fourth word is the epoch
    kPhiloxStreamAugment = 0x3u,  // lesson 08's augmentation (common/augment.h); the fourth word is the epoch
    kPhiloxStreamUser = 0x100u,   // first stream free for lessons (dropout, ...)
};

// The random 32-bit word for element `index` of sequence (stream, substream): counter = {index lo, index hi,
// stream, substream}, first output word.
__host__ __device__ inline uint32_t philox_uint32(PhiloxKey key, uint32_t stream, uint32_t substream, uint64_t index) {
    const PhiloxBlock counter{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), stream, substream}};
    return philox4x32_10(counter, key).v[0];
}

// Same counter, 64 bits (first two output words), for unbiased-enough integer ranges.
__host__ __device__ inline uint64_t philox_uint64(PhiloxKey key, uint32_t stream, uint32_t substream, uint64_t index) {
    const PhiloxBlock counter{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), stream, substream}};
    const PhiloxBlock out = philox4x32_10(counter, key);
    return (uint64_t{out.v[1]} << 32) | out.v[0];
}

// A float in [0, 1): the top 24 bits of a word times 2^-24 (exact in float32, identical on host and device).
__host__ __device__ inline float philox_to_unit_float(uint32_t word) {
    return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

__host__ __device__ inline float philox_uniform(PhiloxKey key, uint32_t stream, uint32_t substream, uint64_t index) {
    return philox_to_unit_float(philox_uint32(key, stream, substream, index));
}
