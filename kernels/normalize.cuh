// kernels/normalize.cuh — the input layer: uint8 pixels → normalized floats.
//
// computes: out[i] = normalize_pixel(pixels[i], mean, std) = (pixels[i] / 255 − mean) / std  for i < n
//           (MNIST: mean 0.1307, std 0.3081, the training set's statistics; then the inputs have roughly zero mean
//           and unit variance, which keeps the first layer's activations in a range where the initial weights work).
//           normalize_pixel() (common/normalize_pixel.h) is the very function the host uses, so the kernel's
//           output equals the CPU reference's inputs bit for bit.
// versions (one):
//   normalize_pixels_kernel  each thread converts 4 pixels: one 4-byte load (uchar4) and one 16-byte store (float4)
//       when the pointers allow (kVec), else 4 scalar accesses; the last thread handles the n % 4 tail. Wide
//       accesses mean fewer memory instructions per byte, which is what a memory-bound kernel is limited by. (Two
//       IEEE divisions per pixel instead of one multiply-add cost nothing measurable here: the kernel waits on
//       memory, not on arithmetic.)
// launch: 256 threads; grid ceil(ceil(n / 4) / 256).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "common/launch.h"
#include "common/normalize_pixel.h"

template <bool kVec>
__global__ void normalize_pixels_kernel(size_t n, const uint8_t* pixels, float* out, float mean, float std) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (kVec && i + 3 < n) {
        const uchar4 p = *reinterpret_cast<const uchar4*>(pixels + i);
        *reinterpret_cast<float4*>(out + i) =
            make_float4(normalize_pixel(p.x, mean, std), normalize_pixel(p.y, mean, std),
                        normalize_pixel(p.z, mean, std), normalize_pixel(p.w, mean, std));
        return;
    }
    for (size_t j = i; j < i + 4 && j < n; ++j) out[j] = normalize_pixel(pixels[j], mean, std);
}

inline void normalize_pixels(const uint8_t* pixels, float* out, size_t n, float mean = kMnistMean,
                             float std = kMnistStd, cudaStream_t stream = 0) {
    if (!(std > 0.0f)) throw std::invalid_argument("normalize_pixels: std must be > 0");
    if (n == 0) return;
    const bool vec = reinterpret_cast<uintptr_t>(pixels) % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
    const dim3 block(256);
    const dim3 grid(static_cast<unsigned>(ceil_div<size_t>(ceil_div<size_t>(n, 4), block.x)));
    if (vec) {
        launch(normalize_pixels_kernel<true>, grid, block, 0, stream, n, pixels, out, mean, std);
    } else {
        launch(normalize_pixels_kernel<false>, grid, block, 0, stream, n, pixels, out, mean, std);
    }
}
