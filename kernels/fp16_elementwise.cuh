// kernels/fp16_elementwise.cuh — the element-wise kernels of the mixed-precision path (lesson 05): the fp32 → fp16
// cast that writes the fp16 working copy of the master weights, and ReLU backward on fp16 gradients. (The fp32/fp16
// load and store helpers the templated kernels share are in kernels/dtype.cuh; bias + ReLU on fp16 activations is
// fused into the HGEMM's epilogue.)
//
// computes:
//   cast_to_half        dst[i] = fp16(src[i])      (the fp32 master weights → their fp16 working copy; round to
//                                                   nearest even, so |x| ≥ 65520 becomes ±inf and |x| ≤ 2^-25
//                                                   becomes ±0: the range loss scaling has to respect)
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
// launch: 256 threads; grid ceil(ceil(n / 8) / 256).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "common/launch.h"
#include "kernels/dtype.cuh"  // as_float, float_to, Half8, all_aligned16, grid_for_8_per_thread

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
