// lessons/mixed_precision.h — the fp16 model of lessons 05–07, beside lessons/mlp.h's fp32 one.
//
// defines: Precision (--precision's four ways to train) with its names, HalfMlp<Grad>, half_model_shape(),
//          forward_half(), backward_half(), the optimizer step of each precision (optimizer_step),
//          forward_fastest_kernels()/backward_fastest_kernels()/test_set_evaluator() for any precision's model,
//          gradient_tensors(), require_adamw_or_exit(), GradScalerFlags, probe_gradient_underflow().
//
// The four ways (lesson 05's README explains why only the last one is right):
//   fp32          lesson 04: fp32 everything.
//   fp16-pure     fp16 weights, activations and gradients; AdamW updates the fp16 weights in place; no loss
//                 scaling. Small gradients flush to zero, small updates round away.
//   fp16-weights  the advice "store the weights in fp16, keep the gradients in fp32": fp32 gradients, but the
//                 update still lands on an fp16 weight, so lr·g below half a unit in the last place rounds away.
//   mixed         fp32 master weights (updated by AdamW) and an fp16 working copy written by the same kernel; fp16
//                 activations; fp32 gradients from a scaled loss, unscaled and checked for inf/NaN in one kernel;
//                 dynamic loss scaling (kernels/loss_scaling.cuh). Micikevicius et al. 2018; PyTorch AMP.
// Included by the lessons' .cu files only (it names __half); lesson.h stays readable by a host compiler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lessons/lesson.h"

#include "common/launch.h"
#include "kernels/count_correct.cuh"
#include "kernels/hgemm_version.h"
#include "kernels/loss_scaling.cuh"
#include "kernels/normalize.cuh"

enum class Precision { fp32, fp16_pure, fp16_weights, mixed };
inline constexpr Precision kAllPrecisions[] = {Precision::fp32, Precision::fp16_pure, Precision::fp16_weights,
                                               Precision::mixed};
const char* precision_name(Precision precision);         // "fp32", "fp16-pure", "fp16-weights", "mixed"
Precision precision_from_name(const std::string& name);  // throws std::invalid_argument for anything else

// GradScaler's knobs as flags (--init-scale, --growth-factor, --backoff-factor, --growth-interval; PyTorch's
// defaults): add() them to the command line in Lesson's flag callback, then options() after parsing.
struct GradScalerFlags {
    GradScalerOptions defaults;
    double init_scale = defaults.init_scale, growth = defaults.growth_factor, backoff = defaults.backoff_factor;
    int interval = defaults.growth_interval;
    void add(Cli& cli);
    GradScalerOptions options() const;
    void record_config(Lesson& lesson) const;  // into the JSON config
};

// The fp16 optimizer kernels are AdamW's (kernels/optimizers.cuh): --optimizer sgd gets one message and exit 2.
void require_adamw_or_exit(const Lesson& lesson);

// fp16 weights and activations; gradients float (mixed, fp16-weights) or __half (fp16-pure).
template <typename Grad>
using HalfMlp = MlpBuffers<__half, __half, Grad>;

// The ModelShape of `precision` for the lesson's flags: 2-byte parameters and activations, `Grad`-sized gradients,
// fp32 master weights for mixed. (fp32: lesson.model_shape() as it is.)
ModelShape half_model_shape(const Lesson& lesson, Precision precision, int staging_slots);

// Y_l = relu(X_l·W_l + b_l) on tensor cores (kernels/hgemm.cuh): fp16 in, fp32 accumulation, fp16 out, bias and
// ReLU in the epilogue.
template <typename Grad>
void forward_half(HalfMlp<Grad>& net, int rows, HgemmVersion version, cudaStream_t stream);
// From the (scaled) dlogits in net.layers.back().output_grad: dW_l = X_lᵀ·dY_l (fp32 accumulation, stored as Grad),
// db_l = Σ dY_l (bias_grad_two_pass into Grad, summed in fp32), dX_l = dY_l·W_lᵀ in fp16, masked by the previous
// layer's ReLU (relu_backward_half).
template <typename Grad>
void backward_half(HalfMlp<Grad>& net, int rows, HgemmVersion version, float* workspace, size_t workspace_floats,
                   cudaStream_t stream);

// The fastest kernels of each model under one spelling, so that a training loop reads the same for every precision:
// lesson 04's top GEMM step (lessons/mlp.h), or the pipelined HGEMM on tensor cores.
template <typename Grad>
void forward_fastest_kernels(HalfMlp<Grad>& net, int rows, cudaStream_t stream) {
    forward_half(net, rows, kFastestHgemm, stream);
}
template <typename Grad>
void backward_fastest_kernels(HalfMlp<Grad>& net, int rows, float* workspace, size_t workspace_floats,
                              cudaStream_t stream) {
    backward_half(net, rows, kFastestHgemm, workspace, workspace_floats, stream);
}

// Test-set evaluation for Lesson::finish_epoch with any of these models: normalize a chunk of the device-resident
// test set into net.input, forward_fastest_kernels, count_correct into `correct`. `net` must outlive the function.
template <typename Net>
Lesson::EvaluateBatch test_set_evaluator(Net& net);

// Device counters the optimizer kernels add to (kernels/optimizers.cuh): `updates` computed non-zero, and of
// those `stalled`, the ones whose stored weight did not change (the update rounded away).
struct UpdateCounters {
    unsigned long long* device = nullptr;  // [2]: updates, stalled
};

// One AdamW step for each precision (step counts from 1), adding to `counters`. mixed (HalfMlp<float> with master
// weights): the fp32 masters take the update and the fp16 copy is rewritten from them in the same kernel, which
// does nothing when `scaler` saw an inf/NaN (and takes the bias corrections from the scaler's state, so the host
// never needs to know whether a step was skipped). The others update the stored weights directly; `scaler` must be
// null for them.
void optimizer_step(Mlp& net, const TrainOptions& options, double lr, int step, UpdateCounters counters,
                    const GradScalerState* scaler, cudaStream_t stream);
void optimizer_step(HalfMlp<__half>& net, const TrainOptions& options, double lr, int step, UpdateCounters counters,
                    const GradScalerState* scaler, cudaStream_t stream);
void optimizer_step(HalfMlp<float>& net, const TrainOptions& options, double lr, int step, UpdateCounters counters,
                    const GradScalerState* scaler, cudaStream_t stream);

// Every gradient tensor of the model, for unscale_and_check (kernels/loss_scaling.cuh).
std::vector<GradientTensor> gradient_tensors(HalfMlp<float>& net);

// On one batch (device pixels/labels), with the given parameters: the weight and bias gradients in fp32 (lesson
// 04's kernels) and in fp16 (this file's, gradients stored as fp16 like fp16-pure), once with the loss unscaled and
// once multiplied by `scale`. Of the elements whose fp32 gradient is non-zero, the fraction that are zero in fp16.
// Its buffers are its own (not in the lesson's memory table).
struct UnderflowProbe {
    double unscaled = 0;            // fraction flushed to zero without loss scaling
    double scaled = 0;              // ... with the loss multiplied by `scale`
    double overflowed_scaled = 0;   // ... and the fraction that became inf with the scale
    uint64_t nonzero_elements = 0;  // fp32 gradient elements that are non-zero
    float scale = 0;
};
UnderflowProbe probe_gradient_underflow(const Lesson& lesson, const std::vector<std::vector<float>>& parameters,
                                        const uint8_t* pixels, const uint8_t* labels, int rows, float scale,
                                        cudaStream_t stream);

template <typename Net>
Lesson::EvaluateBatch test_set_evaluator(Net& net) {
    return [&net](const uint8_t* pixels, const uint8_t* labels, int rows, int* correct, cudaStream_t stream) {
        normalize_pixels(pixels, net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, stream);
        forward_fastest_kernels(net, rows, stream);
        count_correct(net.layers.back().output, labels, correct, rows, kMnistClasses, nullptr, stream);
    };
}
