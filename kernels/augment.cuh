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
// versions (one): a block per image. Its threads first stage the image in shared memory — 196 coalesced 4-byte
//   loads, each lane a consecutive uchar4 (784-byte rows: every other image starts 16 bytes into a 32-byte sector,
//   so its loads touch 32 sectors instead of 26) — because the bilinear reads that follow go wherever the rotation sends
//   them: four scattered byte reads per output pixel, which from global memory would touch a new 32-byte sector
//   for most lanes, and from shared memory cost at most a few bank conflicts (four bytes share a bank word, and
//   neighbouring output pixels read neighbouring input pixels). Thread 0 draws the image's parameters (one Philox
//   block) into shared memory; after the barrier each thread writes output pixels i, i + 256, ...: consecutive
//   lanes, consecutive floats, coalesced stores.
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
__global__ void augment_normalize_kernel(const uint8_t* pixels, const uint32_t* samples, PhiloxKey key, int epoch,
                                         float* out, float mean, float std) {
    __shared__ __align__(16) uint8_t image[kMnistPixels];  // the original image r, 784 bytes
    __shared__ AffineMatrix matrix;                        // its inverse map, drawn once per block
    const size_t r = blockIdx.x;
    const uchar4* src = reinterpret_cast<const uchar4*>(pixels + r * kMnistPixels);  // 784 = 4·196: aligned rows
    for (int i = threadIdx.x; i < kMnistPixels / 4; i += blockDim.x)
        reinterpret_cast<uchar4*>(image)[i] = src[i];  // global read, 4 bytes per lane, consecutive: coalesced
    if (threadIdx.x == 0) matrix = inverse_affine(augment_params(key, epoch, samples[r]));  // one Philox block
    __syncthreads();  // the image and the matrix are in shared memory for every thread
    for (int i = threadIdx.x; i < kMnistPixels; i += blockDim.x) {
        const int y = i / kAugmentSide, x = i % kAugmentSide;
        const uint8_t pixel = affine_pixel(image, matrix, x, y);        // four scattered shared-memory byte reads
        out[r * kMnistPixels + i] = normalize_pixel(pixel, mean, std);  // global write: coalesced floats
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
    augment_normalize_kernel<<<dim3(unsigned(rows)), dim3(256), 0, stream>>>(pixels, samples, philox_key(seed), epoch,
                                                                             out, mean, std);
    CUDA_CHECK(cudaGetLastError());
}
