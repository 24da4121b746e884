// kernels/elementwise.cuh — the element-wise pieces of a layer: bias add, ReLU forward, ReLU backward.
//
// computes:
//   bias_add       Y[r][c] += bias[c]                    (rows × cols, leading dimension ldy)
//   relu_forward   y[i] = max(x[i], 0)                   (y may be x: in place)
//   relu_backward  dx[i] = activation[i] > 0 ? dy[i] : 0 (activation: the ReLU's input or its output — both are
//                                                         positive exactly where the ReLU let its input through,
//                                                         so saving the output is enough; dx may be dy)
// versions (one each): one thread per element for bias_add (2D grid, no division per element; rows beyond the
//   grid's 65535 × 8 go round a grid-stride loop, since grid.y is limited to 65535 blocks); 4 elements per thread
//   with 16-byte float4 accesses for the ReLUs when the pointers are 16-byte aligned (kVec), the n % 4 tail done
//   element by element. These kernels move bytes and do almost no arithmetic, so the figure of merit is bandwidth
//   (bench/bench.cu compares them with cudaMemcpy). Every GEMM step can fuse bias + ReLU into its epilogue
//   (linear_forward); from lesson 04 on these are not needed in the forward pass.
// launch: bias_add: block (32, 8), grid (ceil(cols / 32), min(ceil(rows / 8), 65535)); ReLUs: 256 threads,
//         grid ceil(ceil(n / 4) / 256).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>

#include "common/launch.h"
#include "kernels/dtype.cuh"  // all_aligned16, grid_for_4_per_thread

namespace {  // internal linkage, like `static __global__` (why not `static`: __global__ in runtime.h)
__global__ void bias_add_kernel(int rows, int cols, const float* bias, float* Y, int ldy) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads, consecutive columns: coalesced
    if (c >= cols) return;
    const float b = bias[c];
    // Grid-stride loop over rows: one pass when the grid covers them all, more when rows > 65535 · 8.
    const size_t row_stride = static_cast<size_t>(gridDim.y) * blockDim.y;
    for (size_t r = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < static_cast<size_t>(rows);
         r += row_stride) {
        Y[r * ldy + c] += b;
    }
}
}  // namespace

__device__ __forceinline__ float relu_of(float x) {
    return x > 0.0f ? x : 0.0f;
}
__device__ __forceinline__ float relu_grad_of(float dy, float activation) {
    return activation > 0.0f ? dy : 0.0f;
}

template <bool kVec>
__global__ void relu_forward_kernel(size_t n, const float* x, float* y) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (kVec && i + 3 < n) {
        const float4 v = *reinterpret_cast<const float4*>(x + i);
        *reinterpret_cast<float4*>(y + i) = make_float4(relu_of(v.x), relu_of(v.y), relu_of(v.z), relu_of(v.w));
        return;
    }
    for (size_t j = i; j < i + 4 && j < n; ++j) y[j] = relu_of(x[j]);
}

template <bool kVec>
__global__ void relu_backward_kernel(size_t n, const float* dy, const float* activation, float* dx) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (kVec && i + 3 < n) {
        const float4 g = *reinterpret_cast<const float4*>(dy + i);
        const float4 a = *reinterpret_cast<const float4*>(activation + i);
        *reinterpret_cast<float4*>(dx + i) =
            make_float4(relu_grad_of(g.x, a.x), relu_grad_of(g.y, a.y), relu_grad_of(g.z, a.z), relu_grad_of(g.w, a.w));
        return;
    }
    for (size_t j = i; j < i + 4 && j < n; ++j) dx[j] = relu_grad_of(dy[j], activation[j]);
}

inline void bias_add(const float* bias, float* Y, int rows, int cols, int ldy, cudaStream_t stream = 0) {
    if (rows < 0 || cols < 0 || ldy < cols) throw std::invalid_argument("bias_add: bad sizes or ldy < cols");
    if (rows == 0 || cols == 0) return;
    const dim3 block(32, 8);
    const dim3 grid(cuda_teach::ceil_div(cols, 32),
                    std::min(cuda_teach::ceil_div(rows, 8), 65535));  // grid.y is limited to 65535 blocks
    bias_add_kernel<<<grid, block, 0, stream>>>(rows, cols, bias, Y, ldy);
    CUDA_CHECK(cudaGetLastError());
}

inline void relu_forward(const float* x, float* y, size_t n, cudaStream_t stream = 0) {
    if (n == 0) return;
    const dim3 block(256), grid = grid_for_4_per_thread(n, 256);
    if (all_aligned16({x, y})) {
        relu_forward_kernel<true><<<grid, block, 0, stream>>>(n, x, y);
        CUDA_CHECK(cudaGetLastError());
    } else {
        relu_forward_kernel<false><<<grid, block, 0, stream>>>(n, x, y);
        CUDA_CHECK(cudaGetLastError());
    }
}

inline void relu_backward(const float* dy, const float* activation, float* dx, size_t n, cudaStream_t stream = 0) {
    if (n == 0) return;
    const dim3 block(256), grid = grid_for_4_per_thread(n, 256);
    if (all_aligned16({dy, activation, dx})) {
        relu_backward_kernel<true><<<grid, block, 0, stream>>>(n, dy, activation, dx);
        CUDA_CHECK(cudaGetLastError());
    } else {
        relu_backward_kernel<false><<<grid, block, 0, stream>>>(n, dy, activation, dx);
        CUDA_CHECK(cudaGetLastError());
    }
}
