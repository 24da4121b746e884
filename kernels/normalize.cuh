// kernels/normalize.cuh — the input layer: uint8 pixels → normalized floats (or halves, for lesson 05).
//
// computes: out[i] = normalize_pixel(pixels[i], mean, std) = (pixels[i] / 255 − mean) / std  for i < n
//           (MNIST: mean 0.1307, std 0.3081, the training set's statistics; then the inputs have roughly zero mean
//           and unit variance, which keeps the first layer's activations in a range where the initial weights work).
//           normalize_pixel() (common/normalize_pixel.h) is the very function the host uses, so the kernel's
//           output equals the CPU reference's inputs bit for bit. With an __half output, the same float rounded
//           once to half (__float2half_rn): fp16(normalize_pixel(p)), again bit for bit what the host computes.
// reference: reference::normalize_pixels(n, pixels, out, mean, std) in common/reference_ops.h.
// versions (one, for float or __half out):
//   normalize_pixels_kernel  each thread converts 4 pixels: one 4-byte load (uchar4) and one 16-byte store (float4)
//       — or one 8-byte store of 2 __half2 for halves — when the pointers allow (kVec), else 4 scalar accesses; the
//       last thread handles the n % 4 tail. Wide accesses mean fewer memory instructions per byte, which is what a
//       memory-bound kernel is limited by. (Two IEEE divisions per pixel instead of one multiply-add cost nothing
//       measurable here: the kernel waits on memory, not on arithmetic.)
// launch: 256 threads; grid ceil(ceil(n / 4) / 256).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "common/launch.h"
#include "common/normalize_pixel.h"
#include "kernels/dtype.cuh"  // float_to, store_half4

// Four results, one store: a float4 (16 bytes) or two __half2 (8 bytes, each value rounded once).
__device__ __forceinline__ void store4(float* out, float a, float b, float c, float d) {
    *reinterpret_cast<float4*>(out) = make_float4(a, b, c, d);
}
__device__ __forceinline__ void store4(__half* out, float a, float b, float c, float d) {
    store_half4(out, __floats2half2_rn(a, b), __floats2half2_rn(c, d));
}

template <bool kVec, typename Out>
__global__ void normalize_pixels_kernel(size_t n, const uint8_t* pixels, Out* out, float mean, float std) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (kVec && i + 3 < n) {
        const uchar4 p = *reinterpret_cast<const uchar4*>(pixels + i);
        store4(out + i, normalize_pixel(p.x, mean, std), normalize_pixel(p.y, mean, std),
               normalize_pixel(p.z, mean, std), normalize_pixel(p.w, mean, std));
        return;
    }
    for (size_t j = i; j < i + 4 && j < n; ++j) out[j] = float_to<Out>(normalize_pixel(pixels[j], mean, std));
}

// Out: float (every lesson) or __half (lesson 05's fp16 activations).
template <typename Out>
void normalize_pixels(const uint8_t* pixels, Out* out, size_t n, float mean = kMnistMean, float std = kMnistStd,
                      cudaStream_t stream = 0) {
    static_assert(kIsFloatOrHalf<Out>, "normalize_pixels: out must be float or __half");
    if (!(std > 0.0f)) throw std::invalid_argument("normalize_pixels: std must be > 0");
    if (n == 0) return;
    // 4 outputs per thread: 16 bytes of floats or 8 bytes of halves per store.
    const bool vec =
        reinterpret_cast<uintptr_t>(pixels) % 4 == 0 && reinterpret_cast<uintptr_t>(out) % (4 * sizeof(Out)) == 0;
    const dim3 block(256);
    const dim3 grid(static_cast<unsigned>(cuda_teach::ceil_div<size_t>(cuda_teach::ceil_div<size_t>(n, 4), block.x)));
    if (vec) {
        normalize_pixels_kernel<true, Out><<<grid, block, 0, stream>>>(n, pixels, out, mean, std);
        CUDA_CHECK(cudaGetLastError());
    } else {
        normalize_pixels_kernel<false, Out><<<grid, block, 0, stream>>>(n, pixels, out, mean, std);
        CUDA_CHECK(cudaGetLastError());
    }
}
