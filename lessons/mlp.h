// lessons/mlp.h — the model every lesson trains: its device buffers, allocated and initialized, and its fp32 passes
// with the fast kernels (lesson 04 on). Lesson 01 writes the allocation out in its main.cu; lessons 01–03 write their
// passes out (the simple kernels); the fp16 twin of the model is lessons/mixed_precision.h's (lessons 05–07).
//
// defines: MlpBuffers<Param, Act, Grad> (Mlp: all fp32), allocate_mlp(), allocate_initialized_model(),
//          initialize_model(), download_parameters(), forward_fast(), backward_fast(), optimizer_update(),
//          training_step_gemm_flops().
// Readable by a host compiler (no __half here): .cpp files and tests include it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.h"  // TrainOptions, OptimizerKind
#include "common/memory_ledger.h"
#include "kernels/gemm_version.h"  // GemmVersion (host-only)

// The canonical device buffer set of an MLP (what allocate_mlp() allocates and predict_device_memory() predicts),
// for layers l = 1..L of shape in_l → out_l and batch B: see predict_device_memory() in common/memory_ledger.h.
template <typename Param = float, typename Act = float, typename Grad = Param>
struct MlpBuffers {
    using ParamType = Param;
    using ActType = Act;
    using GradType = Grad;
    struct Layer {
        int in = 0, out = 0;
        Param* weight = nullptr;  // [in × out], row-major: y = x·W + b
        Param* bias = nullptr;    // [out]
        Grad* weight_grad = nullptr;
        Grad* bias_grad = nullptr;
        float* weight_m = nullptr;  // sgd: velocity; adamw: first moment
        float* bias_m = nullptr;
        float* weight_v = nullptr;  // adamw: second moment (null for sgd)
        float* bias_v = nullptr;
        float* master_weight = nullptr;  // only with master weights
        float* master_bias = nullptr;
        Act* output = nullptr;       // [batch × out]: pre-softmax logits for the last layer
        Act* output_grad = nullptr;  // [batch × out]
    };
    std::vector<Layer> layers;
    Act* input = nullptr;              // [batch × in_1] normalized images
    uint8_t* staged_pixels = nullptr;  // [staging_slots × batch × in_1]: slot s starts at s · batch · in_1
    uint8_t* staged_labels = nullptr;  // [staging_slots × batch]
    float* row_losses = nullptr;       // [batch] per-row losses (softmax_cross_entropy's scratch)
    float* mean_loss = nullptr;        // [1] the batch's mean loss
    int* correct = nullptr;            // [1]
};

// Allocates the buffers predict_device_memory(shape) describes, through the ledger. sizeof(Param) and
// sizeof(Act) and sizeof(Grad) must equal shape.parameter_bytes, shape.activation_bytes and
// shape.gradient_element_bytes().
template <typename Param = float, typename Act = float, typename Grad = Param>
MlpBuffers<Param, Act, Grad> allocate_mlp(MemoryLedger& ledger, const ModelShape& shape) {
    if (sizeof(Param) != shape.parameter_bytes || sizeof(Act) != shape.activation_bytes ||
        sizeof(Grad) != shape.gradient_element_bytes() || shape.batch <= 0 || shape.staging_slots < 1 ||
        shape.layer_sizes.size() < 2) {
        throw std::invalid_argument("allocate_mlp: the element types or the shape do not match the ModelShape");
    }
    using C = MemoryCategory;
    const size_t batch = static_cast<size_t>(shape.batch);
    MlpBuffers<Param, Act, Grad> m;
    m.input = ledger.allocate<Act>(C::activations, "X", batch * shape.layer_sizes[0]);
    for (size_t l = 0; l + 1 < shape.layer_sizes.size(); ++l) {
        typename MlpBuffers<Param, Act, Grad>::Layer layer;
        layer.in = shape.layer_sizes[l];
        layer.out = shape.layer_sizes[l + 1];
        const size_t weights = size_t(layer.in) * layer.out, biases = size_t(layer.out);
        const std::string n = std::to_string(l + 1);
        layer.weight = ledger.allocate<Param>(C::parameters, "W" + n, weights);
        layer.bias = ledger.allocate<Param>(C::parameters, "b" + n, biases);
        layer.weight_grad = ledger.allocate<Grad>(C::gradients, "dW" + n, weights);
        layer.bias_grad = ledger.allocate<Grad>(C::gradients, "db" + n, biases);
        const bool adamw = shape.optimizer == OptimizerKind::adamw;
        layer.weight_m = ledger.allocate<float>(C::optimizer_state, (adamw ? "m_W" : "velocity_W") + n, weights);
        layer.bias_m = ledger.allocate<float>(C::optimizer_state, (adamw ? "m_b" : "velocity_b") + n, biases);
        if (adamw) {
            layer.weight_v = ledger.allocate<float>(C::optimizer_state, "v_W" + n, weights);
            layer.bias_v = ledger.allocate<float>(C::optimizer_state, "v_b" + n, biases);
        }
        if (shape.master_weights) {
            layer.master_weight = ledger.allocate<float>(C::master_weights, "master_W" + n, weights);
            layer.master_bias = ledger.allocate<float>(C::master_weights, "master_b" + n, biases);
        }
        layer.output = ledger.allocate<Act>(C::activations, "Y" + n, batch * layer.out);
        layer.output_grad = ledger.allocate<Act>(C::activations, "dY" + n, batch * layer.out);
        m.layers.push_back(layer);
    }
    const size_t slots = static_cast<size_t>(shape.staging_slots);
    if (shape.stage_raw_pixels) {
        m.staged_pixels = ledger.allocate<uint8_t>(C::input_staging, "pixels", slots * batch * shape.layer_sizes[0]);
    }
    m.staged_labels = ledger.allocate<uint8_t>(C::input_staging, "labels", slots * batch);
    m.row_losses = ledger.allocate<float>(C::workspace, "row_losses", batch);
    m.mean_loss = ledger.allocate<float>(C::workspace, "mean_loss", 1);
    m.correct = ledger.allocate<int>(C::workspace, "correct", 1);
    return m;
}

using Mlp = MlpBuffers<float, float>;

// Allocates the buffers of `shape` through `ledger` (allocate_mlp) and initializes them from the same Philox
// initialization as every lesson (init_parameters): fp32 parameters are uploaded as they are; with master weights
// (mixed) the masters are uploaded and the fp16 copy made on the device (cast_to_half); fp16 parameters without
// masters are rounded on the host. Optimizer state and the correct counter zeroed. Param/Grad: float/float (the
// fp32 model), __half/__half (fp16-pure), __half/float (fp16-weights, mixed).
template <typename Param, typename Grad>
MlpBuffers<Param, Param, Grad> allocate_initialized_model(MemoryLedger& ledger, const ModelShape& shape, uint64_t seed);
// allocate_initialized_model's second half, for a model whose buffers are laid out otherwise (lesson 06's
// checkpointed one): the parameters from init_parameters(seed), optimizer state and the correct counter zeroed.
template <typename Param, typename Grad>
void initialize_model(MemoryLedger& ledger, MlpBuffers<Param, Param, Grad>& net, uint64_t seed);

// The parameters as fp32 host vectors (W_1, b_1, W_2, ...): the master weights when the model has them, the stored
// weights widened otherwise. For the checksum, comparisons and the underflow probe. Waits for the device.
template <typename Param, typename Act, typename Grad>
std::vector<std::vector<float>> download_parameters(MemoryLedger& ledger, MlpBuffers<Param, Act, Grad>& net);

// A device tensor of floats or halves as fp32 host values, copied on `stream` (the stream of the kernels that wrote
// it: a copy on stream 0 would not wait for a non-blocking stream's kernels) and waited for.
std::vector<float> download_floats(MemoryLedger& ledger, const float* device, size_t count, cudaStream_t stream);
std::vector<float> download_floats(MemoryLedger& ledger, const __half* device, size_t count, cudaStream_t stream);

// ---- The model with the fast kernels (lesson 04 on): any step of the GEMM staircase (kernels/gemm.cuh). ----

// Y_l = relu(X_l·W_l + b_l) in one kernel per layer: bias and ReLU fused into the GEMM's epilogue.
void forward_fast(Mlp& net, int rows, GemmVersion gemm_version, cudaStream_t stream);
// dW = Xᵀ·dY, db = Σ dY, dX = dY·Wᵀ masked by the previous ReLU (lessons 01–03's backward), with `gemm_version` for
// the two GEMMs per layer and the two-pass bias gradient
// (bias_grad_two_pass) in `workspace` (bias_grad_workspace_floats(batch, widest layer) floats).
void backward_fast(Mlp& net, int rows, GemmVersion gemm_version, float* workspace, size_t workspace_floats,
                   cudaStream_t stream);
// The same with the top of the staircase, under the spelling lessons/mixed_precision.h gives every precision's model.
inline void forward_fastest_kernels(Mlp& net, int rows, cudaStream_t stream) {
    forward_fast(net, rows, kFastestGemm, stream);
}
inline void backward_fastest_kernels(Mlp& net, int rows, float* workspace, size_t workspace_floats,
                                     cudaStream_t stream) {
    backward_fast(net, rows, kFastestGemm, workspace, workspace_floats, stream);
}

// The GEMM floating-point operations of one training step as forward_fast and backward_fast run it, 2·rows·in·out per
// GEMM: the forward Y = X·W and the backward dW = Xᵀ·dY in every layer, and dX = dY·Wᵀ in every layer but the first
// (the images need no gradient, so backward_fast skips it). layer_sizes: 784, hidden..., 10.
struct StepGemmFlops {
    double forward = 0;
    double backward = 0;
};
StepGemmFlops training_step_gemm_flops(const std::vector<int>& layer_sizes, int rows);

// One optimizer step on every weight and bias (kernels/optimizers.cuh): AdamW, or momentum SGD with --optimizer
// sgd; step counts from 1. (Lesson 01's optimizer_step, written out there.)
void optimizer_update(Mlp& net, const TrainOptions& options, double lr, int step, cudaStream_t stream);
