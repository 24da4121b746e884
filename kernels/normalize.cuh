// kernels/normalize.cuh — the input layer: uint8 pixels → normalized floats.
//
// computes: out[i] = (pixels[i] / 255 − mean) / std  for i < n   (MNIST: mean 0.1307, std 0.3081, the
// training
//           set's statistics; then the inputs have roughly zero mean and unit variance, which keeps the first
//           layer's activations in a range where the initial weights work).
// versions (one):
//   normalize_pixels_kernel  each thread converts 4 pixels: one 4-byte load (uchar4) and one 16-byte store
//       (float4) when the pointers allow (kVec), else 4 scalar accesses; the last thread handles the n % 4
//       tail. Wide accesses mean fewer memory instructions per byte, which is what a memory-bound kernel is
//       limited by. The arithmetic is folded into one multiply-add: x·scale + shift, scale = 1/(255·std),
//       shift = −mean/std.
// launch: 256 threads; grid ceil(ceil(n / 4) / 256).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "common/launch.h"

template <bool kVec>
__global__ void normalize_pixels_kernel(size_t n, const uint8_t* pixels, float* out, float scale, float shift) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (kVec && i + 3 < n) {
        const uchar4 p = *reinterpret_cast<const uchar4*>(pixels + i);
        *reinterpret_cast<float4*>(out + i) =
            make_float4(p.x * scale + shift, p.y * scale + shift, p.z * scale + shift, p.w * scale + shift);
        return;
    }
    for (size_t j = i; j < i + 4 && j < n; ++j) out[j] = pixels[j] * scale + shift;
}

inline void normalize_pixels(const uint8_t* pixels, float* out, size_t n, float mean = 0.1307f, float std = 0.3081f,
                             cudaStream_t stream = 0) {
    if (!(std > 0.0f)) throw std::invalid_argument("normalize_pixels: std must be > 0");
    if (n == 0) return;
    const float scale = 1.0f / (255.0f * std), shift = -mean / std;
    const bool vec = reinterpret_cast<uintptr_t>(pixels) % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
    const dim3 block(256);
    const dim3 grid(static_cast<unsigned>(ceil_div<size_t>(ceil_div<size_t>(n, 4), block.x)));
    if (vec) {
        launch(normalize_pixels_kernel<true>, grid, block, 0, stream, n, pixels, out, scale, shift);
    } else {
        launch(normalize_pixels_kernel<false>, grid, block, 0, stream, n, pixels, out, scale, shift);
    }
}
