// kernels/gather_rows.cuh — a batch gathered on the device from a dataset that already lives there.
//
// computes: out_pixels[r][i] = pixels[order[first + r]][i]   for r < rows, i < row_bytes
//           out_labels[r]    = labels[order[first + r]]
//           (the device twin of gather_batch() in common/reference_mlp.h, which is its CPU reference: the same
//           order, the same bytes, so a batch gathered here is bitwise the batch the host would have copied.)
// idea: "the fastest copy is no copy". When the whole uint8 training set fits on the device (47 MB for MNIST), the
//   only thing that crosses PCIe per epoch is the shuffled order (4 bytes per image); each batch is a device-to-device
//   gather at device bandwidth.
// versions (one): a block per row, its threads walk the row's bytes with a block-stride loop; row r's source
//   address is read once from `order` (a broadcast: every thread of the block loads the same word). Consecutive
//   threads touch consecutive bytes of both rows: coalesced reads and writes.
// launch: grid rows, block 256.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "common/launch.h"

namespace {  // internal linkage, like `static __global__` (why not `static`: __global__ in runtime.h)
__global__ void gather_rows_kernel(const uint8_t* pixels, const uint8_t* labels, const uint32_t* order, size_t first,
                                   int row_bytes, uint8_t* out_pixels, uint8_t* out_labels) {
    const int r = blockIdx.x;
    const uint32_t sample = order[first + r];  // the same address for every thread of the block: one broadcast load
    const uint8_t* src = pixels + static_cast<size_t>(sample) * row_bytes;
    uint8_t* dst = out_pixels + static_cast<size_t>(r) * row_bytes;
    for (int i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[i] = src[i];  // consecutive threads, bytes
    if (threadIdx.x == 0) out_labels[r] = labels[sample];
}
}  // namespace

// Gathers rows order[first .. first + rows) of a device-resident dataset into a batch buffer. `order` is on the
// device; every index must be below the dataset's row count (the caller's permutation guarantees it).
inline void gather_rows(const uint8_t* pixels, const uint8_t* labels, const uint32_t* order, size_t first, int rows,
                        int row_bytes, uint8_t* out_pixels, uint8_t* out_labels, cudaStream_t stream = 0) {
    if (rows < 0 || row_bytes < 1) throw std::invalid_argument("gather_rows: need rows >= 0 and row_bytes >= 1");
    if (rows == 0) return;
    gather_rows_kernel<<<dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream>>>(pixels, labels, order, first,
                                                                                    row_bytes, out_pixels, out_labels);
    CUDA_CHECK(cudaGetLastError());
}
