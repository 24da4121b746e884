// kernels/optimizers.cuh — the parameter update, one fused kernel per optimizer.
//
// computes (per parameter, p the weight, g its gradient):
//   sgd_momentum_step (PyTorch's SGD with momentum; weight decay as L2, added to the gradient):
//       g' = g + weight_decay·p;   v = momentum·v + g';   p -= lr·v
//   adamw_step (Loshchilov & Hutter, as torch.optim.AdamW), step t = 1, 2, ...:
//       p -= lr·weight_decay·p                   (decoupled: the decay does not go through m and v)
//       m = β1·m + (1−β1)·g;   v = β2·v + (1−β2)·g²
//       p -= lr · (m / (1−β1ᵗ)) / (sqrt(v / (1−β2ᵗ)) + eps)     (bias correction: m, v start at 0)
// versions:
//   sgd_momentum_kernel, adamw_kernel  "fused" — every value is read once and written once in a single kernel,
//       instead of one kernel per line of the formulas above. Each thread updates 4 consecutive parameters with
//       float4 accesses when all pointers are 16-byte aligned (kVec); the n % 4 tail goes element by element. The
//       bias corrections are computed once on the host (in double) and passed in.
//   adamw_general_kernel<Param, Grad>  the same per-element arithmetic (adamw_update, in fp32) for lesson 05's
//       precisions, one template: the weight `Param` is float or __half (read, widened to fp32, updated, rounded
//       back: an update below half a unit in the last place of a half rounds away), the gradient `Grad` float or
//       __half; m and v are always fp32. Three additions, each optional:
//         - an fp16 working copy of the new fp32 weight, written in the same pass (mixed precision: the fp32
//           "master" takes every small update, the fp16 copy is what the forward pass reads);
//         - the bias corrections read from a GradScalerState (common/grad_scaler.h), and the whole step skipped
//           when the scaler found an inf/NaN gradient: the host never needs to know whether a step was skipped;
//         - counters: updates (elements whose fp32 update new − old is non-zero) and stalled (of those, elements
//           whose stored weight did not change: the update rounded away). Each block adds its counts with one
//           integer atomic per counter after a shuffle + shared-memory reduction (integers: any order, same sum).
//       Entry points: adamw_step_counted (the weight updated in place: fp32, fp16-pure, fp16-weights) and
//       adamw_step_mixed (fp32 master + fp16 copy + scaler). With float weights and gradients it gives adamw_step's
//       bits exactly (tests/test_kernels_optimizers.cu checks it).
// reference: reference::sgd_momentum_step, reference::adamw_step (common/reference_ops.h, float64).
// launch: 256 threads; grid ceil(ceil(n / 4) / 256).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/grad_scaler.h"  // GradScalerState: the mixed step's skip flag and bias corrections
#include "common/launch.h"
#include "kernels/dtype.cuh"  // all_aligned16, grid_for_4_per_thread
#include "kernels/warp_reduce.cuh"  // group_sum

struct SgdParams {
    float lr = 0.01f;
    float momentum = 0.9f;
    float weight_decay = 0.0f;
};

struct AdamWParams {
    float lr = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0.01f;
};

__device__ __forceinline__ void sgd_momentum_update(float& p, float g, float& v, SgdParams h) {
    v = h.momentum * v + (g + h.weight_decay * p);
    p -= h.lr * v;
}

template <bool kVec>
__global__ void sgd_momentum_kernel(size_t n, float* param, const float* grad, float* velocity, SgdParams h) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (kVec && i + 3 < n) {
        float4 p = *reinterpret_cast<float4*>(param + i);
        float4 v = *reinterpret_cast<float4*>(velocity + i);
        const float4 g = *reinterpret_cast<const float4*>(grad + i);
        sgd_momentum_update(p.x, g.x, v.x, h);
        sgd_momentum_update(p.y, g.y, v.y, h);
        sgd_momentum_update(p.z, g.z, v.z, h);
        sgd_momentum_update(p.w, g.w, v.w, h);
        *reinterpret_cast<float4*>(param + i) = p;
        *reinterpret_cast<float4*>(velocity + i) = v;
        return;
    }
    for (size_t j = i; j < i + 4 && j < n; ++j) sgd_momentum_update(param[j], grad[j], velocity[j], h);
}

// 1 − βᵗ, computed in double and rounded to float once. adamw_step computes it on the host; update_grad_scaler
// (kernels/loss_scaling.cuh) on the device, for a step count only the device knows. The device's double pow is
// documented to within 2 ulp of the exact value, not necessarily glibc's bits; the rounded floats differ only if
// the two doubles straddle a point halfway between two floats: at most about a 2^-17 chance per step (bc2 of the
// first steps, where 1 − β2ᵗ ≈ 0.001 has the finest floats), far less later. tests/test_loss_scaling.cu compares
// the device's values with the host's for the first 2000 steps.
__host__ __device__ inline float adamw_bias_correction(float beta, int step) {
    return static_cast<float>(1.0 - pow(static_cast<double>(beta), static_cast<double>(step)));
}

// bc1 = 1 − β1ᵗ, bc2 = 1 − β2ᵗ
__device__ __forceinline__ void adamw_update(float& p, float g, float& m, float& v, AdamWParams h, float bc1,
                                             float bc2) {
    m = h.beta1 * m + (1.0f - h.beta1) * g;
    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
    p -= h.lr * h.weight_decay * p;
    p -= h.lr * (m / bc1) / (sqrtf(v / bc2) + h.eps);
}

template <bool kVec>
__global__ void adamw_kernel(size_t n, float* param, const float* grad, float* m, float* v, AdamWParams h, float bc1,
                             float bc2) {
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (kVec && i + 3 < n) {
        float4 p = *reinterpret_cast<float4*>(param + i);
        float4 mm = *reinterpret_cast<float4*>(m + i);
        float4 vv = *reinterpret_cast<float4*>(v + i);
        const float4 g = *reinterpret_cast<const float4*>(grad + i);
        adamw_update(p.x, g.x, mm.x, vv.x, h, bc1, bc2);
        adamw_update(p.y, g.y, mm.y, vv.y, h, bc1, bc2);
        adamw_update(p.z, g.z, mm.z, vv.z, h, bc1, bc2);
        adamw_update(p.w, g.w, mm.w, vv.w, h, bc1, bc2);
        *reinterpret_cast<float4*>(param + i) = p;
        *reinterpret_cast<float4*>(m + i) = mm;
        *reinterpret_cast<float4*>(v + i) = vv;
        return;
    }
    for (size_t j = i; j < i + 4 && j < n; ++j) adamw_update(param[j], grad[j], m[j], v[j], h, bc1, bc2);
}

inline void sgd_momentum_step(float* param, const float* grad, float* velocity, size_t n, SgdParams h,
                              cudaStream_t stream = 0) {
    if (n == 0) return;
    const dim3 block(256), grid = grid_for_4_per_thread(n, 256);
    if (all_aligned16({param, grad, velocity})) {
        sgd_momentum_kernel<true><<<grid, block, 0, stream>>>(n, param, grad, velocity, h);
        CUDA_CHECK(cudaGetLastError());
    } else {
        sgd_momentum_kernel<false><<<grid, block, 0, stream>>>(n, param, grad, velocity, h);
        CUDA_CHECK(cudaGetLastError());
    }
}

// `step` counts updates from 1 (the bias correction needs it); m and v start zeroed.
inline void adamw_step(float* param, const float* grad, float* m, float* v, size_t n, AdamWParams h, int step,
                       cudaStream_t stream = 0) {
    if (step < 1) throw std::invalid_argument("adamw_step: step counts from 1");
    if (n == 0) return;
    const float bc1 = adamw_bias_correction(h.beta1, step);
    const float bc2 = adamw_bias_correction(h.beta2, step);
    const dim3 block(256), grid = grid_for_4_per_thread(n, 256);
    if (all_aligned16({param, grad, m, v})) {
        adamw_kernel<true><<<grid, block, 0, stream>>>(n, param, grad, m, v, h, bc1, bc2);
        CUDA_CHECK(cudaGetLastError());
    } else {
        adamw_kernel<false><<<grid, block, 0, stream>>>(n, param, grad, m, v, h, bc1, bc2);
        CUDA_CHECK(cudaGetLastError());
    }
}

// ---- lesson 05: one kernel for every precision -------------------------------------------------------------------

// fp32 from the stored type and back (round to nearest even); distinct names so no other header's helpers clash.
__device__ __forceinline__ float adamw_load(float x) {
    return x;
}
__device__ __forceinline__ float adamw_load(__half x) {
    return __half2float(x);
}
template <typename T>
__device__ __forceinline__ T adamw_store(float x) {
    if constexpr (std::is_same_v<T, float>) {
        return x;
    } else {
        return __float2half_rn(x);
    }
}
template <typename T>
__device__ __forceinline__ bool adamw_same_bits(T a, T b) {
    if constexpr (std::is_same_v<T, float>) {
        return __float_as_uint(a) == __float_as_uint(b);
    } else {
        return __half_as_ushort(a) == __half_as_ushort(b);
    }
}

// One element: the fp32 arithmetic of adamw_update, the weight stored back as Param, the fp16 copy if asked for,
// and the two counts.
template <typename Param, typename Grad>
__device__ __forceinline__ void adamw_general_update(Param& param, Grad grad, float& m, float& v, __half* copy,
                                                     AdamWParams h, float bc1, float bc2, int& updates, int& stalled) {
    const float old = adamw_load(param);
    float p = old;
    adamw_update(p, adamw_load(grad), m, v, h, bc1, bc2);
    const Param stored = adamw_store<Param>(p);
    if (p - old != 0.0f) {
        updates += 1;
        if (adamw_same_bits(stored, param)) stalled += 1;  // computed a change, stored none: it rounded away
    }
    param = stored;
    if (copy != nullptr) *copy = __float2half_rn(p);
}

// counters[0] += Σ updates, counters[1] += Σ stalled over the block: shuffles within each warp, then one thread adds
// the warps' sums and does one integer atomic per counter. Every thread of the block must call it.
__device__ __forceinline__ void adamw_add_counts(int updates, int stalled, unsigned long long* counters) {
    __shared__ int warp_counts[32][2];
    updates = group_sum(updates, 32);
    stalled = group_sum(stalled, 32);
    if (threadIdx.x % 32 == 0) {
        warp_counts[threadIdx.x / 32][0] = updates;
        warp_counts[threadIdx.x / 32][1] = stalled;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long block_updates = 0, block_stalled = 0;
        for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
            block_updates += warp_counts[w][0];
            block_stalled += warp_counts[w][1];
        }
        if (block_updates > 0) atomicAdd(&counters[0], block_updates);
        if (block_stalled > 0) atomicAdd(&counters[1], block_stalled);
    }
}

// kVec: float weights and gradients, 16-byte aligned float pointers (and a 4-byte aligned copy): float4 accesses.
// kCount: counters given; the block reduction needs every thread, so no thread may return before it.
template <typename Param, typename Grad, bool kVec, bool kCount>
__global__ void adamw_general_kernel(size_t n, Param* param, const Grad* grad, float* m, float* v, __half* copy,
                                     AdamWParams h, float bc1, float bc2, const GradScalerState* scaler,
                                     unsigned long long* counters) {
    if (scaler != nullptr) {
        // Every thread reads the same flag (one broadcast load), so the whole grid leaves together or not at all:
        // nothing is read or written, and no thread waits at adamw_add_counts' barrier for one that left.
        if (scaler->step_skipped) return;
        bc1 = scaler->bias_correction1;
        bc2 = scaler->bias_correction2;
    }
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    int updates = 0, stalled = 0;
    if (kVec && i + 3 < n) {
        float4 p = *reinterpret_cast<float4*>(param + i);  // consecutive threads, consecutive 16 bytes: coalesced
        float4 mm = *reinterpret_cast<float4*>(m + i);
        float4 vv = *reinterpret_cast<float4*>(v + i);
        const float4 g = *reinterpret_cast<const float4*>(grad + i);
        __half q[4];  // the fp16 copy of the 4 new weights, stored below as two __half2
        adamw_general_update(p.x, g.x, mm.x, vv.x, &q[0], h, bc1, bc2, updates, stalled);
        adamw_general_update(p.y, g.y, mm.y, vv.y, &q[1], h, bc1, bc2, updates, stalled);
        adamw_general_update(p.z, g.z, mm.z, vv.z, &q[2], h, bc1, bc2, updates, stalled);
        adamw_general_update(p.w, g.w, mm.w, vv.w, &q[3], h, bc1, bc2, updates, stalled);
        *reinterpret_cast<float4*>(param + i) = p;
        *reinterpret_cast<float4*>(m + i) = mm;
        *reinterpret_cast<float4*>(v + i) = vv;
        if (copy != nullptr) {  // 8 bytes per thread, contiguous across the warp
            reinterpret_cast<__half2*>(copy + i)[0] = __halves2half2(q[0], q[1]);
            reinterpret_cast<__half2*>(copy + i)[1] = __halves2half2(q[2], q[3]);
        }
    } else {
        for (size_t j = i; j < i + 4 && j < n; ++j) {
            adamw_general_update(param[j], grad[j], m[j], v[j], copy != nullptr ? copy + j : nullptr, h, bc1, bc2,
                                 updates, stalled);
        }
    }
    if constexpr (kCount) adamw_add_counts(updates, stalled, counters);
}

template <typename Param, typename Grad, bool kVec>
void adamw_general_launch(Param* param, const Grad* grad, float* m, float* v, __half* copy, size_t n, AdamWParams h,
                          float bc1, float bc2, const GradScalerState* scaler, unsigned long long* counters,
                          cudaStream_t stream) {
    const dim3 block(256), grid = grid_for_4_per_thread(n, 256);
    if (counters != nullptr) {
        adamw_general_kernel<Param, Grad, kVec, true>
            <<<grid, block, 0, stream>>>(n, param, grad, m, v, copy, h, bc1, bc2, scaler, counters);
        CUDA_CHECK(cudaGetLastError());
    } else {
        adamw_general_kernel<Param, Grad, kVec, false>
            <<<grid, block, 0, stream>>>(n, param, grad, m, v, copy, h, bc1, bc2, scaler, counters);
        CUDA_CHECK(cudaGetLastError());
    }
}

// The one launcher behind adamw_step_counted and adamw_step_mixed: bias corrections from `step` (host) when
// scaler is null, else from the scaler's state.
template <typename Param, typename Grad>
void adamw_general(const char* who, Param* param, const Grad* grad, float* m, float* v, __half* copy, size_t n,
                   AdamWParams h, int step, const GradScalerState* scaler, unsigned long long* counters,
                   cudaStream_t stream) {
    static_assert(std::is_same_v<Param, float> || std::is_same_v<Param, __half>, "weights: float or __half");
    static_assert(std::is_same_v<Grad, float> || std::is_same_v<Grad, __half>, "gradients: float or __half");
    if (n == 0) return;
    if (param == nullptr || grad == nullptr || m == nullptr || v == nullptr) {
        throw std::invalid_argument(std::string(who) + ": param, grad, m and v must not be null");
    }
    float bc1 = 0.0f, bc2 = 0.0f;  // read from the scaler's state by the kernel when there is one
    if (scaler == nullptr) {
        bc1 = adamw_bias_correction(h.beta1, step);
        bc2 = adamw_bias_correction(h.beta2, step);
    }
    if constexpr (std::is_same_v<Param, float> && std::is_same_v<Grad, float>) {
        if (all_aligned16({param, grad, m, v}) && reinterpret_cast<uintptr_t>(copy) % 4 == 0) {
            adamw_general_launch<Param, Grad, true>(param, grad, m, v, copy, n, h, bc1, bc2, scaler, counters, stream);
            return;
        }
    }
    adamw_general_launch<Param, Grad, false>(param, grad, m, v, copy, n, h, bc1, bc2, scaler, counters, stream);
}

// AdamW on weights stored as Param (float: lesson 04's arithmetic; __half: fp16-pure with Grad = __half,
// fp16-weights with Grad = float), updated in place; step counts from 1, m and v start zeroed. counters: a device
// array of 2 (updates, stalled) this step adds to, or nullptr. With float/float and no counters it is adamw_step.
template <typename Param, typename Grad>
void adamw_step_counted(Param* param, const Grad* grad, float* m, float* v, size_t n, AdamWParams h, int step,
                        unsigned long long* counters, cudaStream_t stream = 0) {
    if (step < 1) throw std::invalid_argument("adamw_step_counted: step counts from 1");
    adamw_general("adamw_step_counted", param, grad, m, v, static_cast<__half*>(nullptr), n, h, step,
                  static_cast<const GradScalerState*>(nullptr), counters, stream);
}

// Mixed precision: the fp32 master weights take the update and `working` (fp16, n elements) is rewritten as
// __float2half_rn of each new master value in the same kernel. The step's count and bias corrections come from
// `scaler` (after update_grad_scaler, kernels/loss_scaling.cuh), and when the scaler found an inf/NaN gradient the
// kernel returns at once: master, m, v and working keep their bits. counters as adamw_step_counted's (the stored
// master is the computed fp32 value, so `stalled` stays 0: nothing rounds away that was counted as an update).
inline void adamw_step_mixed(float* master, __half* working, const float* grad, float* m, float* v, size_t n,
                             AdamWParams h, const GradScalerState* scaler, unsigned long long* counters,
                             cudaStream_t stream = 0) {
    if (n > 0 && (working == nullptr || scaler == nullptr)) {
        throw std::invalid_argument("adamw_step_mixed: the fp16 working copy and the scaler state must not be null");
    }
    adamw_general("adamw_step_mixed", master, grad, m, v, working, n, h, 0, scaler, counters, stream);
}
