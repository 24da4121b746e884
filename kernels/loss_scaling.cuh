// kernels/loss_scaling.cuh — dynamic loss scaling on the device (PyTorch's torch.amp.GradScaler): the state machine
// of common/grad_scaler.h (read its header first: why a scale, and every transition) as three small kernels, so a
// training step never waits for the host to learn whether its gradients overflowed.
//
// computes (one step, in stream order: backward from scale · loss, unscale_and_check, update_grad_scaler, then
// adamw_step_mixed in kernels/optimizers.cuh, which reads the verdict and the bias corrections from the state):
//   init_grad_scaler    *state = the start: scale = init_scale, every counter and the log 0, step_skipped = 1
//   unscale_and_check   g[i] *= inv_scale in every gradient tensor, inv_scale = float(1 / double(scale)) as PyTorch
//                       computes it; state->found_inf = 1 if any g[i] was inf or NaN (checked before the multiply)
//   update_grad_scaler  torch._amp_update_scale_: back off (found_inf) or count a clean step and grow after
//                       growth_interval of them; the optimizer's step count and bias corrections; found_inf cleared
//                       for the next step; a changed scale logged (the first kGradScalerLogSize changes)
// reference: GradScalerReference (common/grad_scaler.h), the same transitions on the host;
//   tests/test_loss_scaling.cu runs both on the same steps and compares the whole state bitwise.
// versions (one each):
//   unscale_and_check_kernel  "multi-tensor apply": ONE launch for up to kUnscaleMaxTensors gradient tensors, instead
//       of one per tensor (an MLP has two per layer, and a launch costs more than unscaling a bias vector). The
//       tensors' pointers and lengths travel by value in the kernel's argument struct (UnscaleTensorList, 1.3 KB, under
//       the 4 KB kernel-argument limit of older toolkits); tensor t gets ceil(count_t / 1024) consecutive blocks, and
//       a block finds its tensor by scanning the table of first blocks (at most 64 entries, the same for every thread
//       of the block). Each thread takes 4 elements, float4 when the tensor is 16-byte aligned. A model with more
//       than 64 tensors gets one launch per 64: found_inf is cleared only by update_grad_scaler, so the launches of
//       one step add up. The inf/NaN test reads the exponent bits (all ones: inf or NaN); a thread that finds one
//       does an integer atomicExch of 1, which is the same whatever the order and happens only on overflow steps.
//   init_grad_scaler_kernel, update_grad_scaler_kernel  one thread: a handful of scalar updates, whose cost is the
//       launch. Done on the device so that the flag the unscale kernel raised never travels to the host.
// launch: unscale: 256 threads; grid Σ_t ceil(count_t / 1024) (tensors of 0 elements get no blocks).
//         init, update: 1 block of 1 thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "common/grad_scaler.h"
#include "common/launch.h"
#include "kernels/optimizers.cuh"  // adamw_bias_correction

// One gradient tensor for unscale_and_check: `count` floats at `data` (the layer's dW or db).
struct GradientTensor {
    float* data;
    size_t count;
};

inline constexpr int kUnscaleMaxTensors = 64;
inline constexpr int kUnscaleThreads = 256;
inline constexpr size_t kUnscaleElementsPerBlock = 4 * kUnscaleThreads;

// The kernel's argument: up to 64 tensors. Tensor t owns blocks [first_block[t], first_block[t + 1]).
struct UnscaleTensorList {
    float* data[kUnscaleMaxTensors];
    size_t count[kUnscaleMaxTensors];
    unsigned first_block[kUnscaleMaxTensors + 1];
    int tensors;
};

// inf and NaN are the floats whose 8 exponent bits are all ones.
__device__ __forceinline__ bool is_inf_or_nan(float x) {
    return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
}

namespace {  // internal linkage, like `static __global__` (why not `static`: __global__ in runtime.h)
__global__ void unscale_and_check_kernel(UnscaleTensorList list, GradScalerState* state) {
    int t = 0;
    while (blockIdx.x >= list.first_block[t + 1]) ++t;  // ends: blockIdx.x < first_block[list.tensors]
    float* g = list.data[t];
    const size_t n = list.count[t];
    const size_t i = (static_cast<size_t>(blockIdx.x - list.first_block[t]) * blockDim.x + threadIdx.x) * 4;
    // Every thread reads the same 4 bytes (one broadcast): the inverse was computed once, by the one-thread update
    // kernel, so no thread here divides (a double division per thread would run at 1/64 rate on consumer GPUs).
    const float inv_scale = state->inv_scale;
    bool bad = false;
    if (i + 3 < n && reinterpret_cast<uintptr_t>(g) % 16 == 0) {
        float4 v = *reinterpret_cast<float4*>(g + i);  // consecutive threads, consecutive 16 bytes: coalesced
        bad = is_inf_or_nan(v.x) || is_inf_or_nan(v.y) || is_inf_or_nan(v.z) || is_inf_or_nan(v.w);
        v.x *= inv_scale;
        v.y *= inv_scale;
        v.z *= inv_scale;
        v.w *= inv_scale;
        *reinterpret_cast<float4*>(g + i) = v;
    } else {
        for (size_t j = i; j < i + 4 && j < n; ++j) {  // the n % 4 tail, or a misaligned tensor
            bad = bad || is_inf_or_nan(g[j]);
            g[j] *= inv_scale;
        }
    }
    if (bad) atomicExch(&state->found_inf, 1);
}

__global__ void init_grad_scaler_kernel(GradScalerState* state, GradScalerOptions options) {
    GradScalerState& s = *state;
    s.scale = options.init_scale;
    s.inv_scale = inverse_of_scale(options.init_scale);
    s.growth_tracker = 0;
    s.found_inf = 0;
    s.step_skipped = 1;  // no verdict yet: an optimizer launched before the first update does nothing
    s.iteration = 0;
    s.optimizer_steps = 0;
    s.skipped_steps = 0;
    s.bias_correction1 = 0.0f;
    s.bias_correction2 = 0.0f;
    s.change_count = 0;
    for (ScaleChange& c : s.changes) c = ScaleChange{0, 0.0f, 0.0f, 0};
}

__global__ void update_grad_scaler_kernel(GradScalerState* state, GradScalerOptions options, float beta1, float beta2) {
    GradScalerState& s = *state;
    const float old_scale = s.scale;
    const bool found_inf = s.found_inf != 0;
    bool grew = false;
    if (found_inf) {  // this step's gradients are unusable: skip it, and try a smaller scale next time
        s.scale = old_scale * options.backoff_factor;
        s.growth_tracker = 0;
        s.skipped_steps += 1;
    } else {
        s.growth_tracker += 1;
        if (s.growth_tracker == options.growth_interval) {  // growth_interval clean steps in a row: try a larger one
            const float grown = old_scale * options.growth_factor;
            if (!is_inf_or_nan(grown)) {  // never grow to inf (PyTorch keeps the scale then)
                s.scale = grown;
                grew = true;
            }
            s.growth_tracker = 0;
        }
        s.optimizer_steps += 1;
        s.bias_correction1 = adamw_bias_correction(beta1, s.optimizer_steps);
        s.bias_correction2 = adamw_bias_correction(beta2, s.optimizer_steps);
    }
    if (s.scale != old_scale) {
        if (s.change_count < kGradScalerLogSize) {
            s.changes[s.change_count] = ScaleChange{s.iteration, old_scale, s.scale, grew ? 1 : 0};
        }
        s.change_count += 1;
    }
    s.inv_scale = inverse_of_scale(s.scale);  // once here, for every thread of the next step's unscale launches
    s.step_skipped = found_inf ? 1 : 0;       // what adamw_step_mixed reads
    s.found_inf = 0;                          // consumed: the next step's unscale launches start from a clean flag
    s.iteration += 1;
}
}  // namespace

// Sets *state (device memory) to the start of the machine, on the stream (no host copy: the options travel as a
// kernel argument).
inline void init_grad_scaler(GradScalerState* state, const GradScalerOptions& options, cudaStream_t stream = 0) {
    check_grad_scaler_options(options, "init_grad_scaler");
    if (state == nullptr) throw std::invalid_argument("init_grad_scaler: state must not be null");
    init_grad_scaler_kernel<<<dim3(1), dim3(1), 0, stream>>>(state, options);
    CUDA_CHECK(cudaGetLastError());
}

// Unscales `count` gradient tensors (tensors: a host array) and raises state->found_inf on any inf/NaN: one launch
// per kUnscaleMaxTensors tensors. Tensors of 0 elements may have a null pointer.
inline void unscale_and_check(const GradientTensor* tensors, int count, GradScalerState* state,
                              cudaStream_t stream = 0) {
    if (count < 0 || (count > 0 && tensors == nullptr) || state == nullptr) {
        throw std::invalid_argument("unscale_and_check: need count >= 0, a tensor array and a state");
    }
    for (int first = 0; first < count; first += kUnscaleMaxTensors) {
        UnscaleTensorList list{};
        list.tensors = count - first < kUnscaleMaxTensors ? count - first : kUnscaleMaxTensors;
        uint64_t blocks = 0;
        for (int t = 0; t < list.tensors; ++t) {
            const GradientTensor& tensor = tensors[first + t];
            if (tensor.count > 0 && tensor.data == nullptr) {
                throw std::invalid_argument("unscale_and_check: a tensor with elements has a null pointer");
            }
            list.data[t] = tensor.data;
            list.count[t] = tensor.count;
            list.first_block[t] = static_cast<unsigned>(blocks);
            blocks += cuda_teach::ceil_div<uint64_t>(tensor.count, kUnscaleElementsPerBlock);
            if (blocks > 0x7fffffffu) {  // grid.x holds 2^31 − 1 blocks
                throw std::invalid_argument(
                    "unscale_and_check: more than 2^31 - 1 blocks of 1024 elements in one "
                    "launch; pass fewer tensors per call");
            }
        }
        for (int t = list.tensors; t <= kUnscaleMaxTensors; ++t) list.first_block[t] = static_cast<unsigned>(blocks);
        if (blocks == 0) continue;
        unscale_and_check_kernel<<<dim3(static_cast<unsigned>(blocks)), dim3(kUnscaleThreads), 0, stream>>>(list,
                                                                                                            state);
        CUDA_CHECK(cudaGetLastError());
    }
}

// The transition of one step (common/grad_scaler.h); beta1/beta2 are AdamW's (the state's bias corrections).
inline void update_grad_scaler(GradScalerState* state, const GradScalerOptions& options, float beta1, float beta2,
                               cudaStream_t stream = 0) {
    check_grad_scaler_options(options, "update_grad_scaler");
    if (state == nullptr || !(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f)) {
        throw std::invalid_argument("update_grad_scaler: need a state and 0 <= beta1, beta2 < 1");
    }
    update_grad_scaler_kernel<<<dim3(1), dim3(1), 0, stream>>>(state, options, beta1, beta2);
    CUDA_CHECK(cudaGetLastError());
}
