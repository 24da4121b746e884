// kernels/count_correct.cuh — accuracy on the device: argmax of each row of logits, compared with the label, counted.
//
// computes: *correct += #{ r < batch : argmax_c logits[r][c] == labels[r] }   (ties: lowest index)
//           predictions[r] = argmax_c logits[r][c]                           (if predictions != nullptr)
//           Only one int comes back to the host per evaluation (the caller zeroes *correct, runs every batch,
//           copies the count once), instead of the whole logits matrix per batch.
//           Logits are float or __half (lesson 05); halves are compared as the floats they convert to (exactly),
//           so the argmax and its ties are those of the fp16 values.
// reference: reference::count_correct(rows, cols, logits, ld, labels) and reference::argmax_rows in
//   common/reference_ops.h.
// versions (one): a group of row_group_width(classes) lanes per row (16 for 10 classes) finds the row's argmax
//   with a shuffle reduction of (value, index) pairs; the group's first lane scores the row; the block adds its
//   rows' scores (shuffles, then shared memory across warps) and one thread does one integer atomicAdd for the
//   whole block. Integer addition is associative, so the count does not depend on the order blocks finish.
// launch: 256 threads; grid ceil(batch / (256 / width)).
#pragma once

#include <cstdint>
#include <stdexcept>

#include "common/launch.h"
#include "kernels/dtype.cuh"  // as_float, kIsFloatOrHalf
#include "kernels/warp_reduce.cuh"

// T: float or __half.
template <typename T, typename Label>
__global__ void count_correct_kernel(int batch, int classes, int width, const T* logits, const Label* labels,
                                     int* correct, int32_t* predictions) {
    __shared__ int warp_counts[32];
    const int rows_per_block = blockDim.x / width;
    const int lane = threadIdx.x % width;
    const int row = blockIdx.x * rows_per_block + threadIdx.x / width;
    const bool valid = row < batch;  // out-of-range lanes stay for the shuffles and the barrier

    float best = -INFINITY;
    int best_index = classes;  // loses every tie against a real column
    if (valid) {
        const T* z = logits + static_cast<size_t>(row) * classes;
        for (int c = lane; c < classes; c += width) {
            const float v = as_float(z[c]);
            if (v > best || best_index == classes) {  // the first column a lane sees always counts (even -inf)
                best = v;
                best_index = c;
            }
        }
    }
    group_argmax(best, best_index, width);

    int hit = 0;
    if (valid && lane == 0) {
        if (predictions != nullptr) predictions[row] = best_index;
        hit = best_index == static_cast<int>(labels[row]) ? 1 : 0;
    }
    const int warp_count = group_sum(hit, 32);
    if (threadIdx.x % 32 == 0) warp_counts[threadIdx.x / 32] = warp_count;
    __syncthreads();
    if (threadIdx.x == 0) {
        int block_count = 0;
        for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) block_count += warp_counts[w];
        if (block_count > 0) atomicAdd(correct, block_count);
    }
}

// T: float or __half. Label: uint8_t (MNIST) or int32_t. *correct is accumulated into (the caller zeroes it).
template <typename T, typename Label>
void count_correct(const T* logits, const Label* labels, int* correct, int batch, int classes,
                   int32_t* predictions = nullptr, cudaStream_t stream = 0) {
    static_assert(kIsFloatOrHalf<T>, "count_correct: logits must be float or __half");
    if (batch < 0 || classes < 1) throw std::invalid_argument("count_correct: need batch >= 0 and classes >= 1");
    if (batch == 0) return;
    const int width = row_group_width(classes);
    const int threads = 256;
    count_correct_kernel<T, Label><<<dim3(cuda_teach::ceil_div(batch, threads / width)), dim3(threads), 0, stream>>>(
        batch, classes, width, logits, labels, correct, predictions);
    CUDA_CHECK(cudaGetLastError());
}
