// kernels/augment.cuh — lesson 08: the training images augmented and normalized on the device, after the uint8 copy.
//
// computes: out[r·784 + y·28 + x] = normalize_pixel(affine_pixel(image r, inverse_affine(augment_params(key, epoch,
//           samples[r])), x, y))   for r < rows: torchvision's RandomAffine(degrees=10, translate=(0.1, 0.1),
//           scale=(0.9, 1.1), interpolation=BILINEAR), fill 0, rounded to uint8, then normalized (common/augment.h has the
//           transform and why it is written with fmaf; common/normalize_pixel.h the normalization).
// reference: augment_image() (common/augment.h) on the host, which lesson 08's loader workers run, then
//   normalize_pixel(): tests/test_augment.cu checks the two bit for bit on the CPU backend.
// idea: lesson 02's trick a second time. Per-image work that is arithmetic on pixels moves from the host's loader to
//   the device, after the copy: the copy still carries 1 byte per pixel (the originals), the loader only gathers,
//   and the GPU samples every image of the batch at once, where a CPU core spends 20–26 µs on each (lesson
//   08's README; no GPU has timed this kernel yet).
// versions (one): a block per image, 256 threads, in three parts that overlap where they can:
//   * staging: the original image into shared memory, because the bilinear reads that follow go wherever the rotation
//     sends them: four scattered byte reads per output pixel, which from global memory would touch a new 32-byte
//     sector for most lanes, and from shared memory cost at most a few bank conflicts (four bytes share a bank word,
//     and neighbouring output pixels read neighbouring input pixels). A row is 784 = 49 · 16 bytes, so every image
//     of a 16-byte aligned batch starts 16-byte aligned: threads 0–48 load one uint4 each, 2 warp requests (with
//     uchar4, 196 lanes: 7), 25 sectors of 32 bytes, 26 when the image starts mid-sector (every other image). A batch
//     that is only 4-byte aligned takes the uchar4 loads (7 requests).
//   * the parameters: one Philox block and the inverse matrix, a serial chain (the samples load, then the draw) that
//     thread 224, lane 0 of the last warp, runs while warps 0–1 stage the image: it issues its samples[r] load first,
//     and no staging load waits behind it or it behind them. The barrier then publishes both.
//   * output: 196 threads (warps 0–6) each sample 4 consecutive pixels of one row (28 = 7 · 4) and store them as one
//     float4: one pass, 196 lanes busy, 16-byte coalesced stores (256 threads one pixel at a time took 4 passes, the
//     last with 16 lanes). Float stores when `out` is not 16-byte aligned.
// launch: grid rows, block 256.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "common/augment.h"
#include "common/launch.h"
#include "common/mnist.h"  // kMnistPixels
#include "common/normalize_pixel.h"

namespace {  // internal linkage, like `static __global__` (why not `static`: __global__ in runtime.h)
constexpr int kAugmentThreads = 256;
constexpr int kAugmentParamThread = kAugmentThreads - 32;  // lane 0 of the last warp: no staging, no output

__global__ void augment_normalize_kernel(const uint8_t* pixels, const uint32_t* samples, PhiloxKey key, int epoch,
                                         float* out, float mean, float std, bool aligned16) {
    __shared__ __align__(16) uint8_t image[kMnistPixels];  // the original image r, 784 bytes
    __shared__ AffineMatrix matrix;                        // its inverse map, drawn once per block
    const size_t r = blockIdx.x;
    const int t = threadIdx.x;
    if (t == kAugmentParamThread) {  // the chain: samples[r] (global read), then one Philox block and the inverse
        matrix = inverse_affine(augment_params(key, epoch, samples[r]));
    } else if (aligned16) {  // global read, 16 bytes per lane, threads 0..48: 2 requests
        const uint4* src = reinterpret_cast<const uint4*>(pixels + r * kMnistPixels);
        if (t < kMnistPixels / 16) reinterpret_cast<uint4*>(image)[t] = src[t];
    } else {  // only 4-byte aligned: 4 bytes per lane, threads 0..195 (7 requests)
        const uchar4* src = reinterpret_cast<const uchar4*>(pixels + r * kMnistPixels);
        if (t < kMnistPixels / 4) reinterpret_cast<uchar4*>(image)[t] = src[t];
    }
    __syncthreads();  // the image and the matrix are in shared memory for every thread
    if (t >= kMnistPixels / 4) return;
    const int i = 4 * t, y = i / kAugmentSide, x = i % kAugmentSide;  // pixels i..i+3 of row y (28 = 7 · 4)
    float v[4];
    for (int j = 0; j < 4; ++j)  // four scattered shared-memory byte reads per pixel
        v[j] = normalize_pixel(affine_pixel(image, matrix, x + j, y), mean, std);
    float* dst = out + r * kMnistPixels + i;
    if (reinterpret_cast<uintptr_t>(out) % 16 == 0) {  // global write: consecutive lanes, consecutive float4s
        *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        for (int j = 0; j < 4; ++j) dst[j] = v[j];
    }
}
}  // namespace

// out [rows × 784] floats from the batch's uint8 originals `pixels` [rows × 784] and their training-set indices
// `samples` [rows] (both on the device), for epoch `epoch` of seed `seed`.
inline void augment_normalize(const uint8_t* pixels, const uint32_t* samples, int rows, uint64_t seed, int epoch,
                              float* out, cudaStream_t stream = 0, float mean = kMnistMean, float std = kMnistStd) {
    if (rows < 0) throw std::invalid_argument("augment_normalize: rows must be >= 0");
    if (reinterpret_cast<uintptr_t>(pixels) % 4 != 0)
        throw std::invalid_argument("augment_normalize: pixels must be 4-byte aligned (the kernel loads uchar4)");
    if (rows == 0) return;
    if (pixels == nullptr || samples == nullptr || out == nullptr)
        throw std::invalid_argument("augment_normalize: pixels, samples and out must be device pointers");
    const bool aligned16 = reinterpret_cast<uintptr_t>(pixels) % 16 == 0;  // then every row is (784 = 49 · 16)
    augment_normalize_kernel<<<dim3(unsigned(rows)), dim3(kAugmentThreads), 0, stream>>>(
        pixels, samples, philox_key(seed), epoch, out, mean, std, aligned16);
    CUDA_CHECK(cudaGetLastError());
}
