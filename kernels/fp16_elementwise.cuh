// kernels/fp16_elementwise.cuh — the element-wise pieces of the mixed-precision path (lesson 05): fp32 ↔ fp16
// casts, bias + ReLU on fp16 activations, ReLU backward on fp16 gradients; and the fp32/fp16 load and store
// helpers that the templated kernels (normalize, bias_grad, softmax_cross_entropy, evaluate) share.
//
// computes:
//   cast_to_half        dst[i] = fp16(src[i])      (the fp32 master weights → their fp16 working copy; round to
//                                                   nearest even, so |x| ≥ 65520 becomes ±inf and |x| ≤ 2^-25
//                                                   becomes ±0: the range loss scaling has to respect)
//   cast_to_float       dst[i] = float(src[i])     (exact: every half is a float)
//   bias_relu_half      Y[r][c] = fp16(act(float(Y[r][c]) + float(bias[c])))   act = ReLU if relu, else identity;
//                                                   the sum and the ReLU in fp32, one rounding at the end
//                                                   (rows × cols, leading dimension ldy): the bias + ReLU of a
//                                                   forward pass whose GEMM has no fused epilogue
//   relu_backward_half  dx[i] = activation[i] > 0 ? dy[i] : 0   (a select, not a multiply: dy's bits pass
//                                                   through, and a masked inf or NaN gives 0, as in fp32; dx may
//                                                   be dy)
// reference: the same formulas on the host with cuda_fp16.h's host conversions (__float2half_rn, __half2float),
//   in tests/test_kernels_fp16.cu; relu_backward_half is reference::relu_backward (common/reference_ops.h) on the
//   values.
// versions (one each): the idea is the fp32 kernels' (kernels/elementwise.cuh) with half the bytes per value. A
//   16-byte access holds 8 halves (4 __half2) instead of 4 floats, so each thread takes 8 elements: one 16-byte load
//   or store of halves (two float4 for the fp32 side of a cast) when every pointer is 16-byte aligned (kVec),
//   element by element otherwise and for the n % 8 tail. A __half2 (two halves in a 32-bit register) is the unit the
//   conversions work on: __floats2half2_rn / __half22float2 convert a pair at once.
//   bias_relu_half takes 8 columns per thread when Y and bias are 16-byte aligned and ldy % 8 == 0 (then every row
//   starts 16-byte aligned), 1 otherwise; the last group of a row (cols % 8) goes element by element.
// launch: casts and relu_backward_half: 256 threads; grid ceil(ceil(n / 8) / 256). bias_relu_half: block (32, 8);
//   grid (ceil(cols / (32 · w)), min(ceil(rows / 8), 65535)), w = 8 or 1 columns per thread, rows beyond the grid
//   in a grid-stride loop (as bias_add).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "common/launch.h"
#include "kernels/elementwise.cuh"  // all_aligned16, relu_of

// ---- shared by the templated kernels: T is float (the fp32 path) or __half (the fp16 path) -----------------------

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

inline dim3 grid_for_8_per_thread(size_t n, unsigned threads) {
    return dim3(static_cast<unsigned>(cuda_teach::ceil_div<size_t>(cuda_teach::ceil_div<size_t>(n, 8), threads)));
}

// ---- the kernels --------------------------------------------------------------------------------------------------

template <bool kVec>
__global__ void cast_to_half_kernel(size_t n, const float* src, __half* dst) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
    if (kVec && i + 7 < n) {
        const float4 a = *reinterpret_cast<const float4*>(src + i);  // 32 bytes in: two 16-byte loads
        const float4 b = *reinterpret_cast<const float4*>(src + i + 4);
        Half8 v;
        v.h[0] = __floats2half2_rn(a.x, a.y);
        v.h[1] = __floats2half2_rn(a.z, a.w);
        v.h[2] = __floats2half2_rn(b.x, b.y);
        v.h[3] = __floats2half2_rn(b.z, b.w);
        store_half8(dst + i, v);  // 16 bytes out: one store
        return;
    }
    for (size_t j = i; j < i + 8 && j < n; ++j) dst[j] = __float2half_rn(src[j]);
}

template <bool kVec>
__global__ void cast_to_float_kernel(size_t n, const __half* src, float* dst) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
    if (kVec && i + 7 < n) {
        const Half8 v = load_half8(src + i);  // 16 bytes in: one load
        const float2 f0 = __half22float2(v.h[0]), f1 = __half22float2(v.h[1]);
        const float2 f2 = __half22float2(v.h[2]), f3 = __half22float2(v.h[3]);
        *reinterpret_cast<float4*>(dst + i) = make_float4(f0.x, f0.y, f1.x, f1.y);  // 32 bytes out: two stores
        *reinterpret_cast<float4*>(dst + i + 4) = make_float4(f2.x, f2.y, f3.x, f3.y);
        return;
    }
    for (size_t j = i; j < i + 8 && j < n; ++j) dst[j] = __half2float(src[j]);
}

__device__ __forceinline__ float bias_relu_of(float y, float b, bool relu) {
    const float v = y + b;
    return relu ? relu_of(v) : v;
}

// kColumns = 8 (16-byte accesses) or 1 column per thread.
template <int kColumns>
__global__ void bias_relu_half_kernel(int rows, int cols, const __half* bias, __half* Y, int ldy, bool relu) {
    const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * kColumns;  // consecutive threads, consecutive columns
    if (c0 >= cols) return;
    const bool full = c0 + kColumns <= cols;  // false only for the last group of a row (cols % 8 columns)
    Half8 b{};
    if (kColumns == 8 && full) b = load_half8(bias + c0);  // the same 8 biases for every row: loaded once
    const size_t row_stride = static_cast<size_t>(gridDim.y) * blockDim.y;
    for (size_t r = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < static_cast<size_t>(rows);
         r += row_stride) {
        __half* y = Y + r * ldy + c0;
        if (kColumns == 8 && full) {
            Half8 v = load_half8(y);  // 16 bytes of row r: a warp reads 512 consecutive bytes
            for (int k = 0; k < 4; ++k) {
                const float2 yk = __half22float2(v.h[k]), bk = __half22float2(b.h[k]);
                v.h[k] = __floats2half2_rn(bias_relu_of(yk.x, bk.x, relu), bias_relu_of(yk.y, bk.y, relu));
            }
            store_half8(y, v);
        } else {
            for (int c = 0; c < kColumns && c0 + c < cols; ++c) {
                y[c] = __float2half_rn(bias_relu_of(__half2float(y[c]), __half2float(bias[c0 + c]), relu));
            }
        }
    }
}

__device__ __forceinline__ __half relu_grad_of(__half dy, __half activation) {
    const __half zero = __ushort_as_half(0);
    return __hgt(activation, zero) ? dy : zero;
}
__device__ __forceinline__ __half2 relu_grad_of(__half2 dy, __half2 activation) {
    return __halves2half2(relu_grad_of(__low2half(dy), __low2half(activation)),
                          relu_grad_of(__high2half(dy), __high2half(activation)));
}

template <bool kVec>
__global__ void relu_backward_half_kernel(size_t n, const __half* dy, const __half* activation, __half* dx) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
    if (kVec && i + 7 < n) {
        const Half8 g = load_half8(dy + i), a = load_half8(activation + i);  // two 16-byte loads
        Half8 d;
        for (int k = 0; k < 4; ++k) d.h[k] = relu_grad_of(g.h[k], a.h[k]);
        store_half8(dx + i, d);  // one 16-byte store (dx may be dy: this thread read its 8 values already)
        return;
    }
    for (size_t j = i; j < i + 8 && j < n; ++j) dx[j] = relu_grad_of(dy[j], activation[j]);
}

// ---- the launchers ------------------------------------------------------------------------------------------------

// The fp16 working copy of fp32 values (master weights → the weights the fp16 GEMMs read).
inline void cast_to_half(const float* src, __half* dst, size_t n, cudaStream_t stream = 0) {
    if (n == 0) return;
    const dim3 block(256), grid = grid_for_8_per_thread(n, 256);
    if (all_aligned16({src, dst})) {
        cast_to_half_kernel<true><<<grid, block, 0, stream>>>(n, src, dst);
        CUDA_CHECK(cudaGetLastError());
    } else {
        cast_to_half_kernel<false><<<grid, block, 0, stream>>>(n, src, dst);
        CUDA_CHECK(cudaGetLastError());
    }
}

inline void cast_to_float(const __half* src, float* dst, size_t n, cudaStream_t stream = 0) {
    if (n == 0) return;
    const dim3 block(256), grid = grid_for_8_per_thread(n, 256);
    if (all_aligned16({src, dst})) {
        cast_to_float_kernel<true><<<grid, block, 0, stream>>>(n, src, dst);
        CUDA_CHECK(cudaGetLastError());
    } else {
        cast_to_float_kernel<false><<<grid, block, 0, stream>>>(n, src, dst);
        CUDA_CHECK(cudaGetLastError());
    }
}

// Y = act(Y + bias) in place on fp16 activations (rows × cols, leading dimension ldy; bias: cols halves).
inline void bias_relu_half(const __half* bias, __half* Y, int rows, int cols, int ldy, bool relu,
                           cudaStream_t stream = 0) {
    if (rows < 0 || cols < 0 || ldy < cols) throw std::invalid_argument("bias_relu_half: bad sizes or ldy < cols");
    if (rows == 0 || cols == 0) return;
    const dim3 block(32, 8);
    const int grid_y = std::min(cuda_teach::ceil_div(rows, 8), 65535);  // grid.y is limited to 65535 blocks
    if (all_aligned16({bias, Y}) && ldy % 8 == 0) {
        bias_relu_half_kernel<8>
            <<<dim3(cuda_teach::ceil_div(cols, 32 * 8), grid_y), block, 0, stream>>>(rows, cols, bias, Y, ldy, relu);
        CUDA_CHECK(cudaGetLastError());
    } else {
        bias_relu_half_kernel<1>
            <<<dim3(cuda_teach::ceil_div(cols, 32), grid_y), block, 0, stream>>>(rows, cols, bias, Y, ldy, relu);
        CUDA_CHECK(cudaGetLastError());
    }
}

// dx = activation > 0 ? dy : 0 on fp16 gradients (activation: the ReLU's fp16 input or output; dx may be dy).
inline void relu_backward_half(const __half* dy, const __half* activation, __half* dx, size_t n,
                               cudaStream_t stream = 0) {
    if (n == 0) return;
    const dim3 block(256), grid = grid_for_8_per_thread(n, 256);
    if (all_aligned16({dy, activation, dx})) {
        relu_backward_half_kernel<true><<<grid, block, 0, stream>>>(n, dy, activation, dx);
        CUDA_CHECK(cudaGetLastError());
    } else {
        relu_backward_half_kernel<false><<<grid, block, 0, stream>>>(n, dy, activation, dx);
        CUDA_CHECK(cudaGetLastError());
    }
}
