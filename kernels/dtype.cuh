// kernels/dtype.cuh — the small helpers every templated kernel shares: a value of either element type (float or
// __half) as fp32 and back, 16- and 8-byte vector loads and stores of halves, the alignment test that picks a vector
// path, and the grids of the element-wise kernels (4 floats or 8 halves per thread). No kernels here.
//
// Used by normalize, bias_grad, softmax_cross_entropy, count_correct, the element-wise kernels and the optimizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "common/launch.h"

// T is float (the fp32 path) or __half (the fp16 path).
template <typename T>
inline constexpr bool kIsFloatOrHalf = std::is_same_v<T, float> || std::is_same_v<T, __half>;

// A value as fp32, where all arithmetic happens (exact for both types).
__host__ __device__ __forceinline__ float as_float(float x) {
    return x;
}
__host__ __device__ __forceinline__ float as_float(__half x) {
    return __half2float(x);
}

// An fp32 result stored as T: unchanged for float, rounded to nearest even for __half (the one rounding).
template <typename T>
__host__ __device__ __forceinline__ T float_to(float x) {
    static_assert(kIsFloatOrHalf<T>, "float_to: T must be float or __half");
    if constexpr (std::is_same_v<T, __half>) {
        return __float2half_rn(x);
    } else {
        return x;
    }
}

// 8 halves = 16 bytes: one vector load or store. The memory is accessed as uint4 (that is what makes the compiler
// emit one 128-bit instruction: a struct of four __half2 would be copied as four 32-bit words) and its bits moved
// into the __half2s with memcpy, which compiles to nothing (registers are renamed) and is the type-safe way to
// reinterpret bits in C++.
struct Half8 {
    __half2 h[4];
};
__device__ __forceinline__ Half8 load_half8(const __half* p) {  // p: 16-byte aligned
    const uint4 bits = *reinterpret_cast<const uint4*>(p);
    Half8 v;
    std::memcpy(static_cast<void*>(&v), &bits, sizeof v);  // (void*: __half2 has a user-declared copy)
    return v;
}
__device__ __forceinline__ void store_half8(__half* p, const Half8& v) {  // p: 16-byte aligned
    uint4 bits;
    std::memcpy(&bits, static_cast<const void*>(&v), sizeof bits);
    *reinterpret_cast<uint4*>(p) = bits;
}
// 4 halves = 8 bytes: one store (normalize_pixels' uchar4 → 2 × __half2).
__device__ __forceinline__ void store_half4(__half* p, __half2 low, __half2 high) {  // p: 8-byte aligned
    const __half2 v[2] = {low, high};
    uint2 bits;
    std::memcpy(&bits, static_cast<const void*>(v), sizeof bits);
    *reinterpret_cast<uint2*>(p) = bits;
}

// ... and 8 halves (16 bytes) per thread.
inline dim3 grid_for_8_per_thread(size_t n, unsigned threads) {
    return dim3(static_cast<unsigned>(cuda_teach::ceil_div<size_t>(cuda_teach::ceil_div<size_t>(n, 8), threads)));
}

// True when every pointer is 16-byte aligned: the kernels' vector (float4 / 8-half) path may be taken.
inline bool all_aligned16(std::initializer_list<const void*> pointers) {
    for (const void* p : pointers) {
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    }
    return true;
}

// Element-wise kernels: 4 floats (one float4) per thread.
inline dim3 grid_for_4_per_thread(size_t n, unsigned threads) {
    return dim3(static_cast<unsigned>(cuda_teach::ceil_div<size_t>(cuda_teach::ceil_div<size_t>(n, 4), threads)));
}
