// kernels/softmax_cross_entropy.cuh — the loss layer: softmax + cross-entropy fused, forward and backward at once.
//
// computes, for `batch` rows of `classes` logits z (row-major, leading dimension = classes) and labels y:
//   row_losses[r] = logsumexp(z_r) − z_r[y_r]                  (the cross-entropy of softmax(z_r); always written)
//   dlogits[r][c] = (softmax(z_r)[c] − [c == y_r]) / batch     (d mean_loss / d z, if dlogits != nullptr)
//   *mean_loss    = (1/batch) Σ_r row_losses[r]                (if mean_loss != nullptr)
// Logits and dlogits are float or __half (lesson 05). The math is fp32 whatever the type: halves are converted on
// load, and each gradient is computed in fp32 and rounded once to the dlogits type. With loss scaling (lesson 05)
// the gradient is multiplied by *grad_scale (a device pointer to one float, so the scale can change on the device
// without a host round trip; nullptr means 1): dlogits[r][c] = scale · (softmax(z_r)[c] − [c == y_r]) / batch,
// in fp32, then rounded — a scaled value past fp16's range becomes ±inf (never clamped), which is how the loss
// scaler notices overflow. The losses stay fp32 and unscaled.
// reference: reference::softmax_cross_entropy(batch, classes, logits, ld, labels, dlogits) in
//   common/reference_ops.h (it returns the mean loss; times grad_scale for the scaled gradient).
// versions (one each):
//   softmax_cross_entropy_kernel  one group of lanes per row (row_group_width(classes) lanes: 16 for 10 classes,
//       so a warp does two rows). The group finds the row max and the sum of exponentials with shuffle reductions
//       (kernels/warp_reduce.cuh) and writes the row's loss and gradient in the same pass. Subtracting the row
//       max before exp keeps it finite for any logits (±1e4 included): every exp argument is ≤ 0 and the sum is
//       ≥ 1. The scale, when given, multiplies the finished fp32 gradient (a multiply by 1 would change no bit:
//       the fp32 results are the same with and without the parameter). launch: 256 threads; grid
//       ceil(batch / (256 / width)).
//   mean_reduce_kernel  the batch mean of row_losses with a fixed summation order (each thread sums a fixed
//       stride, then a fixed shuffle tree), so the loss is bitwise reproducible; float atomics would make it
//       depend on the order blocks finish. launch: 1 block of 1024 threads.
//   accumulate_loss_kernel  *loss_sum += rows · *mean_loss in double, one thread: the epoch's loss summed on the
//       device, so the host reads it once per epoch instead of synchronizing every step (lesson 03 on). The
//       host-side sum of lessons 01–02 does the same arithmetic (double(float loss) · rows), so they agree bitwise.
//       launch: 1 block of 1 thread (it is one addition; its cost is the launch).
// A label outside [0, classes) gives a NaN loss and NaN gradients for that row (visible, rather than silently
// reading past the row).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "common/launch.h"
#include "kernels/dtype.cuh"  // as_float, float_to, kIsFloatOrHalf
#include "kernels/warp_reduce.cuh"

// T: float or __half (logits and dlogits). grad_scale: nullptr or a device pointer to the loss scale.
template <typename T, typename Label>
__global__ void softmax_cross_entropy_kernel(int batch, int classes, int width, const T* logits, const Label* labels,
                                             T* dlogits, float* row_losses, const float* grad_scale) {
    const int rows_per_block = blockDim.x / width;
    const int lane = threadIdx.x % width;  // this thread's lane within its row's group
    const int row = blockIdx.x * rows_per_block + threadIdx.x / width;
    const bool valid = row < batch;  // no early return: the whole warp must take part in the shuffles
    const T* z = logits + static_cast<size_t>(valid ? row : 0) * classes;

    float row_max = -INFINITY;
    if (valid) {
        for (int c = lane; c < classes; c += width) row_max = fmaxf(row_max, as_float(z[c]));
    }
    row_max = group_max(row_max, width);

    float sum = 0.0f;
    if (valid) {
        for (int c = lane; c < classes; c += width) sum += expf(as_float(z[c]) - row_max);
    }
    sum = group_sum(sum, width);
    if (!valid) return;  // past the last shuffle, leaving is safe

    const int label = static_cast<int>(labels[row]);
    const bool label_ok = label >= 0 && label < classes;
    if (lane == 0) {
        // logsumexp(z) − z[y] = log(sum) + max − z[y]; the subtraction of two large logits happens exactly here
        row_losses[row] = label_ok ? logf(sum) + (row_max - as_float(z[label])) : NAN;
    }
    if (dlogits != nullptr) {
        const float inv_sum = 1.0f / sum, inv_batch = 1.0f / static_cast<float>(batch);
        const float scale = grad_scale != nullptr ? *grad_scale : 1.0f;  // one float every thread reads: cached
        T* d = dlogits + static_cast<size_t>(row) * classes;
        for (int c = lane; c < classes; c += width) {
            const float p = expf(as_float(z[c]) - row_max) * inv_sum;
            const float g = label_ok ? (p - (c == label ? 1.0f : 0.0f)) * inv_batch : NAN;
            d[c] = float_to<T>(grad_scale != nullptr ? g * scale : g);  // rounded once (to half: ±inf past 65504)
        }
    }
}

inline constexpr int kMeanReduceThreads = 1024;

// *out = scale · Σ values[i], in a fixed order. One block.
namespace {  // internal linkage, like `static __global__` (why not `static`: __global__ in runtime.h)
__global__ void mean_reduce_kernel(int n, const float* values, float scale, float* out) {
    __shared__ float warp_sums[32];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += values[i];  // fixed stride: fixed order
    sum = group_sum(sum, 32);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        const int warps = blockDim.x / 32;
        float total = static_cast<int>(threadIdx.x) < warps ? warp_sums[threadIdx.x] : 0.0f;
        total = group_sum(total, 32);
        if (threadIdx.x == 0) *out = total * scale;
    }
}
}  // namespace

// Launches the fused loss kernel and, if mean_loss is given, the deterministic mean. row_losses is caller-owned
// scratch of `batch` floats (allocated once, not per step), required. T: float or __half (logits and dlogits;
// dlogits may be nullptr: no gradient). Label: uint8_t (MNIST) or int32_t. grad_scale: a device pointer to one
// float that multiplies the gradient (loss scaling), or nullptr for 1; it comes before the stream, and the
// overload below without it keeps every fp32 call of lessons 01–04 as it was.
template <typename T, typename Label>
void softmax_cross_entropy(const T* logits, const Label* labels, std::type_identity_t<T>* dlogits, float* row_losses,
                           float* mean_loss, int batch, int classes, const float* grad_scale, cudaStream_t stream) {
    static_assert(kIsFloatOrHalf<T>, "softmax_cross_entropy: logits must be float or __half");
    if (batch < 0 || classes < 1) {
        throw std::invalid_argument("softmax_cross_entropy: need batch >= 0 and classes >= 1");
    }
    if (batch == 0) return;
    if (logits == nullptr || labels == nullptr || row_losses == nullptr) {
        throw std::invalid_argument(
            "softmax_cross_entropy: logits, labels and row_losses (caller-owned scratch of batch floats, always "
            "written) must not be null");
    }
    const int width = row_group_width(classes);
    const int threads = 256;
    const int rows_per_block = threads / width;
    softmax_cross_entropy_kernel<T, Label>
        <<<dim3(cuda_teach::ceil_div(batch, rows_per_block)), dim3(threads), 0, stream>>>(
            batch, classes, width, logits, labels, dlogits, row_losses, grad_scale);
    CUDA_CHECK(cudaGetLastError());
    if (mean_loss != nullptr) {
        mean_reduce_kernel<<<dim3(1), dim3(kMeanReduceThreads), 0, stream>>>(
            batch, static_cast<const float*>(row_losses), 1.0f / static_cast<float>(batch), mean_loss);
        CUDA_CHECK(cudaGetLastError());
    }
}

// No loss scaling (grad_scale = 1): lessons 01–04's call.
template <typename T, typename Label>
void softmax_cross_entropy(const T* logits, const Label* labels, std::type_identity_t<T>* dlogits, float* row_losses,
                           float* mean_loss, int batch, int classes, cudaStream_t stream = 0) {
    softmax_cross_entropy(logits, labels, dlogits, row_losses, mean_loss, batch, classes, nullptr, stream);
}

namespace {  // internal linkage, like `static __global__` (why not `static`: __global__ in runtime.h)
__global__ void accumulate_loss_kernel(const float* mean_loss, int rows, double* loss_sum) {
    *loss_sum += static_cast<double>(*mean_loss) * rows;  // one thread: a fixed order, no atomics
}
}  // namespace

// *loss_sum += rows · *mean_loss, on the stream, in double. loss_sum is a device double the caller zeroes.
inline void accumulate_loss(const float* mean_loss, int rows, double* loss_sum, cudaStream_t stream = 0) {
    if (mean_loss == nullptr || loss_sum == nullptr || rows < 0) {
        throw std::invalid_argument("accumulate_loss: null pointer or negative rows");
    }
    accumulate_loss_kernel<<<dim3(1), dim3(1), 0, stream>>>(mean_loss, rows, loss_sum);
    CUDA_CHECK(cudaGetLastError());
}
