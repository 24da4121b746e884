// kernels/optimizers.cuh — the parameter update, one fused kernel per optimizer.
//
// computes (per parameter, p the weight, g its gradient):
//   sgd_momentum_step (PyTorch's SGD with momentum; weight decay as L2, added to the gradient):
//       g' = g + weight_decay·p;   v = momentum·v + g';   p -= lr·v
//   adamw_step (Loshchilov & Hutter, as torch.optim.AdamW), step t = 1, 2, ...:
//       p -= lr·weight_decay·p                   (decoupled: the decay does not go through m and v)
//       m = β1·m + (1−β1)·g;   v = β2·v + (1−β2)·g²
//       p -= lr · (m / (1−β1ᵗ)) / (sqrt(v / (1−β2ᵗ)) + eps)     (bias correction: m, v start at 0)
// versions (one each): "fused" — every value is read once and written once in a single kernel, instead of one
//   kernel per line of the formulas above. Each thread updates 4 consecutive parameters with float4 accesses
//   when all pointers are 16-byte aligned (kVec); the n % 4 tail goes element by element. The bias
//   corrections are computed once on the host (in double) and passed in.
// launch: 256 threads; grid ceil(ceil(n / 4) / 256).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "common/launch.h"
#include "kernels/elementwise.cuh"  // all_aligned16, grid_for_4_per_thread

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
        launch(sgd_momentum_kernel<true>, grid, block, 0, stream, n, param, grad, velocity, h);
    } else {
        launch(sgd_momentum_kernel<false>, grid, block, 0, stream, n, param, grad, velocity, h);
    }
}

// `step` counts updates from 1 (the bias correction needs it); m and v start zeroed.
inline void adamw_step(float* param, const float* grad, float* m, float* v, size_t n, AdamWParams h, int step,
                       cudaStream_t stream = 0) {
    if (step < 1) throw std::invalid_argument("adamw_step: step counts from 1");
    if (n == 0) return;
    const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), step));
    const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), step));
    const dim3 block(256), grid = grid_for_4_per_thread(n, 256);
    if (all_aligned16({param, grad, m, v})) {
        launch(adamw_kernel<true>, grid, block, 0, stream, n, param, grad, m, v, h, bc1, bc2);
    } else {
        launch(adamw_kernel<false>, grid, block, 0, stream, n, param, grad, m, v, h, bc1, bc2);
    }
}
