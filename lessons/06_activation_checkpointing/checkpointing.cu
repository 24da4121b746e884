// lessons/06_activation_checkpointing/checkpointing.cu — see checkpointing.h. Compiled once into lesson_common.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <type_traits>

#include "lessons/06_activation_checkpointing/checkpointing.h"

#include "common/reference_mlp.h"  // init_parameters
#include "common/report.h"         // format_bytes
#include "kernels/bias_grad.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/fp16_elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/hgemm.cuh"

CheckpointPolicy parse_checkpoint_policy(const std::string& text, int layers) {
    if (layers < 1) throw std::invalid_argument("parse_checkpoint_policy: the model has no layer");
    if (text == "none") return {text, 0};
    if (text == "sqrt") return {text, int(std::ceil(std::sqrt(double(layers))))};
    const std::string prefix = "every=";
    if (text.rfind(prefix, 0) == 0) {
        const std::string digits = text.substr(prefix.size());
        const bool all_digits = !digits.empty() && digits.size() <= 9 &&
                                std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (all_digits && std::stoi(digits) >= 1) return {text, std::stoi(digits)};
    }
    throw std::invalid_argument("--checkpoint '" + text +
                                "': expected none, sqrt or every=K with K a whole number from 1 (keep the input of "
                                "every K-th layer)");
}

// ---- The plan ----

CheckpointPlan plan_checkpoints(const ModelShape& shape, const CheckpointPolicy& policy) {
    if (shape.layer_sizes.size() < 2 || shape.batch < 1 || policy.stride < 0) {
        throw std::invalid_argument("plan_checkpoints: a model needs a layer and a batch, a policy a stride >= 0");
    }
    CheckpointPlan plan;
    plan.policy = policy;
    plan.layer_sizes = shape.layer_sizes;
    plan.batch = shape.batch;
    plan.element_bytes = shape.activation_bytes;
    const int L = plan.layers();
    const auto out = [&](int l) { return shape.layer_sizes[size_t(l) + 1]; };
    if (plan.keeps_everything()) {  // lesson 05's buffers: one segment, nothing recomputed
        plan.segments.push_back({0, L});
        for (int l = 0; l < L; ++l) plan.kept_inputs.push_back(l);
        return plan;
    }
    const int k = policy.stride;
    for (int first = 0; first < L; first += k) {
        const CheckpointSegment segment{first, std::min(first + k, L)};
        plan.segments.push_back(segment);
        plan.kept_inputs.push_back(first);
        // Slots hold the outputs of the segment's layers but the last (that one is the next checkpoint, or the logits).
        for (int l = segment.first; l + 1 < segment.end; ++l) {
            const size_t j = size_t(l - segment.first);
            if (plan.slot_widths.size() <= j) plan.slot_widths.push_back(0);
            plan.slot_widths[j] = std::max(plan.slot_widths[j], out(l));
        }
    }
    for (int l = 0; l < L; ++l) {  // dY_l lives in buffer (L - 1 - l) % 2: neighbours never share one
        int& width = plan.gradient_widths[size_t((L - 1 - l) % 2)];
        width = std::max(width, out(l));
    }
    return plan;
}

size_t CheckpointPlan::elements_per_row() const {
    const int L = layers();
    size_t elements = 0;
    if (keeps_everything()) {  // X, and Y_l and dY_l for every layer (predict_device_memory's formula)
        elements = size_t(layer_sizes[0]);
        for (int l = 0; l < L; ++l) elements += 2 * size_t(layer_sizes[size_t(l) + 1]);
        return elements;
    }
    for (const int l : kept_inputs) elements += size_t(layer_sizes[size_t(l)]);  // X and the checkpoints
    elements += size_t(layer_sizes.back());                                      // the logits
    for (const int width : slot_widths) elements += size_t(width);               // the segment buffer
    elements += size_t(gradient_widths[0]) + size_t(gradient_widths[1]);         // the two dY buffers
    return elements;
}

size_t CheckpointPlan::activation_bytes() const {
    return size_t(batch) * elements_per_row() * element_bytes;
}

double CheckpointPlan::forward_macs_per_row() const {
    double macs = 0;
    for (int l = 0; l < layers(); ++l) macs += double(layer_sizes[size_t(l)]) * layer_sizes[size_t(l) + 1];
    return macs;
}

double CheckpointPlan::recomputed_macs_per_row() const {
    double macs = 0;
    for (size_t s = 0; s + 1 < segments.size(); ++s) {  // not the last segment: its activations are still there
        for (int l = segments[s].first; l + 1 < segments[s].end; ++l) {
            macs += double(layer_sizes[size_t(l)]) * layer_sizes[size_t(l) + 1];
        }
    }
    return macs;
}

std::string CheckpointPlan::describe() const {
    const int L = layers();
    if (keeps_everything()) {
        return "keeps every layer's output and its gradient (lesson 05's buffers), recomputes nothing";
    }
    std::string kept, spans;
    // Layers counted from 0, as in the code (net.layers[l]) and the README.
    for (size_t i = 0; i < kept_inputs.size(); ++i) kept += (i > 0 ? ", " : "") + std::to_string(kept_inputs[i]);
    for (size_t s = 0; s < segments.size(); ++s) {
        const int first = segments[s].first, last = segments[s].end - 1;  // inclusive
        char span[32];
        std::snprintf(span, sizeof span, last > first ? "%s%d-%d" : "%s%d", s > 0 ? ", " : "", first, last);
        spans += span;
    }
    char tail[160];
    std::snprintf(tail, sizeof tail, "; a segment buffer of %zu slot%s; recomputes %+.1f%% of a forward pass per step",
                  slot_widths.size(), slot_widths.size() == 1 ? "" : "s", 100.0 * extra_forward_fraction());
    return "keeps the inputs of layers " + kept + " (layers 0-" + std::to_string(L - 1) + "); segments " + spans + tail;
}

MemoryPrediction predict_checkpointed_memory(const ModelShape& shape, const CheckpointPolicy& policy) {
    MemoryPrediction prediction = predict_device_memory(shape);
    prediction.bytes[static_cast<int>(MemoryCategory::activations)] =
        plan_checkpoints(shape, policy).activation_bytes();
    return prediction;
}

int largest_checkpointed_batch(ModelShape shape, const CheckpointPolicy& policy,
                               const std::function<size_t(int batch)>& extra_bytes, size_t available_bytes,
                               int max_batch) {
    const auto fits = [&](int batch) {
        shape.batch = batch;
        return predict_checkpointed_memory(shape, policy).total() + extra_bytes(batch) <= available_bytes;
    };
    if (max_batch < 1 || !fits(1)) return 0;
    int lo = 1, hi = max_batch;  // fits(lo) holds; bisect for the last batch that fits
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (fits(mid)) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

std::string check_checkpointed_fits(const ModelShape& shape, const CheckpointPolicy& policy, size_t extra_bytes,
                                    const std::string& extra_name, size_t available_bytes) {
    const MemoryPrediction prediction = predict_checkpointed_memory(shape, policy);
    if (prediction.total() + extra_bytes <= available_bytes) return "";
    using C = MemoryCategory;
    const size_t model_bytes = prediction[C::parameters] + prediction[C::gradients] + prediction[C::optimizer_state] +
                               prediction[C::master_weights] + extra_bytes;
    std::string message = "with --checkpoint " + policy.name + " the model needs " +
                          format_bytes(prediction.total() + extra_bytes) + " of device memory (activations " +
                          format_bytes(prediction[C::activations]) + " for --batch " + std::to_string(shape.batch) +
                          ", " + extra_name + " " + format_bytes(extra_bytes) + ") but only " +
                          format_bytes(available_bytes) + " can be used; ";
    message += model_bytes > available_bytes ? "the parameters and their state are what overflows. "
                                             : "the batch's buffers are what overflows. ";
    const int largest = largest_checkpointed_batch(
        shape, policy, [&](int) { return extra_bytes; }, available_bytes, shape.batch);
    if (largest > 0) {
        message += "The largest batch that fits with this policy is --batch " + std::to_string(largest) +
                   " (or keep fewer activations: --checkpoint sqrt).";
    } else {
        message += "No batch fits: use a smaller --hidden.";
    }
    return message;
}

// ---- The model ----

template <typename Param, typename Grad>
MlpBuffers<Param, Param, Grad> allocate_checkpointed_model(MemoryLedger& ledger, const ModelShape& shape,
                                                           const CheckpointPlan& plan, uint64_t seed) {
    if (plan.layer_sizes != shape.layer_sizes || plan.batch != shape.batch ||
        plan.element_bytes != shape.activation_bytes) {
        throw std::invalid_argument("allocate_checkpointed_model: the plan was made for another shape");
    }
    if (plan.keeps_everything())
        return allocate_initialized_model<Param, Grad>(ledger, shape, seed);  // lesson 05's model
    if (sizeof(Param) != shape.parameter_bytes || sizeof(Param) != shape.activation_bytes ||
        sizeof(Grad) != shape.gradient_element_bytes() || shape.staging_slots < 1) {
        throw std::invalid_argument("allocate_checkpointed_model: the element types do not match the ModelShape");
    }
    using C = MemoryCategory;
    using Net = MlpBuffers<Param, Param, Grad>;
    const size_t batch = size_t(shape.batch);
    const int L = plan.layers(), k = plan.policy.stride;
    Net m;
    // The activations: the plan's buffers and nothing else (allocate_mlp would allocate Y_l and dY_l per layer).
    m.input = ledger.allocate<Param>(C::activations, "X", batch * size_t(shape.layer_sizes[0]));
    std::vector<Param*> slots;
    for (size_t j = 0; j < plan.slot_widths.size(); ++j) {
        slots.push_back(ledger.allocate<Param>(C::activations, "segment slot " + std::to_string(j + 1),
                                               batch * size_t(plan.slot_widths[j])));
    }
    Param* gradients[2];
    for (int p = 0; p < 2; ++p) {
        gradients[p] = ledger.allocate<Param>(C::activations, p == 0 ? "dY (even)" : "dY (odd)",
                                              batch * size_t(plan.gradient_widths[size_t(p)]));
    }
    const bool adamw = shape.optimizer == OptimizerKind::adamw;
    for (int l = 0; l < L; ++l) {
        typename Net::Layer layer;
        layer.in = shape.layer_sizes[size_t(l)];
        layer.out = shape.layer_sizes[size_t(l) + 1];
        const size_t weights = size_t(layer.in) * layer.out, biases = size_t(layer.out);
        const std::string n = std::to_string(l + 1);
        layer.weight = ledger.allocate<Param>(C::parameters, "W" + n, weights);
        layer.bias = ledger.allocate<Param>(C::parameters, "b" + n, biases);
        layer.weight_grad = ledger.allocate<Grad>(C::gradients, "dW" + n, weights);
        layer.bias_grad = ledger.allocate<Grad>(C::gradients, "db" + n, biases);
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
        // Where layer l writes its output: the logits, a checkpoint (the next segment's input), or a slot.
        if (l == L - 1) {
            layer.output = ledger.allocate<Param>(C::activations, "logits", batch * biases);
        } else if ((l + 1) % k == 0) {
            layer.output = ledger.allocate<Param>(C::activations, "Y" + n + " (checkpoint)", batch * biases);
        } else {
            layer.output = slots[size_t(l % k)];  // slot j of the segment that holds layer l
        }
        layer.output_grad = gradients[(L - 1 - l) % 2];
        m.layers.push_back(layer);
    }
    const size_t staging_slots = size_t(shape.staging_slots);
    if (shape.stage_raw_pixels) {
        m.staged_pixels =
            ledger.allocate<uint8_t>(C::input_staging, "pixels", staging_slots * batch * shape.layer_sizes[0]);
    }
    m.staged_labels = ledger.allocate<uint8_t>(C::input_staging, "labels", staging_slots * batch);
    m.row_losses = ledger.allocate<float>(C::workspace, "row_losses", batch);
    m.mean_loss = ledger.allocate<float>(C::workspace, "mean_loss", 1);
    m.correct = ledger.allocate<int>(C::workspace, "correct", 1);

    // allocate_initialized_model's initialization (lessons/mlp.cu): every policy starts from the same bits as lesson
    // 05's model.
    initialize_model(ledger, m, seed);
    return m;
}

template Mlp allocate_checkpointed_model<float, float>(MemoryLedger&, const ModelShape&, const CheckpointPlan&,
                                                       uint64_t);
template HalfMlp<float> allocate_checkpointed_model<__half, float>(MemoryLedger&, const ModelShape&,
                                                                   const CheckpointPlan&, uint64_t);

// ---- The backward pass ----

namespace {

// One layer's kernels, spelled once for fp32 (lesson 04's calls) and once for fp16 (lesson 05's), so that the
// segment loop below is written once. Each is the exact call forward_fast / backward_fast (or the _half ones) make.
template <typename Layer>
void recompute_layer(Layer& layer, const float* x, int rows, GemmVersion version, cudaStream_t stream) {
    linear_forward(version, x, layer.weight, layer.bias, /*relu=*/true, layer.output, rows, layer.in, layer.out,
                   stream);
}
template <typename Layer>
void recompute_layer(Layer& layer, const __half* x, int rows, HgemmVersion version, cudaStream_t stream) {
    linear_forward_half(version, x, layer.weight, layer.bias, /*relu=*/true, layer.output, rows, layer.in, layer.out,
                        stream);
}

template <typename Layer>
void backward_layer(Layer& layer, const float* x, Layer* previous, int rows, GemmVersion version, float* workspace,
                    size_t workspace_floats, cudaStream_t stream) {
    linear_backward_weight(version, x, layer.output_grad, layer.weight_grad, rows, layer.in, layer.out, 0.0f,
                           stream);  // dW = Xᵀ·dY
    bias_grad_two_pass(layer.output_grad, layer.bias_grad, rows, layer.out, layer.out, 0.0f, workspace,
                       workspace_floats, stream);  // db = Σ dY
    if (previous != nullptr) {
        linear_backward_input(version, layer.output_grad, layer.weight, previous->output_grad, rows, layer.in,
                              layer.out, stream);  // dX = dY·Wᵀ
        relu_backward(previous->output_grad, previous->output, previous->output_grad, size_t(rows) * layer.in, stream);
    }
}
template <typename Layer>
void backward_layer(Layer& layer, const __half* x, Layer* previous, int rows, HgemmVersion version, float* workspace,
                    size_t workspace_floats, cudaStream_t stream) {
    linear_backward_weight_half(version, x, layer.output_grad, layer.weight_grad, rows, layer.in, layer.out,
                                stream);  // dW = Xᵀ·dY, fp32 accumulation
    bias_grad_two_pass(layer.output_grad, layer.bias_grad, rows, layer.out, layer.out, 0.0f, workspace,
                       workspace_floats, stream);  // db = Σ dY, summed in fp32
    if (previous != nullptr) {
        linear_backward_input_half(version, layer.output_grad, layer.weight, previous->output_grad, rows, layer.in,
                                   layer.out, stream);  // dX = dY·Wᵀ, fp16
        relu_backward_half(previous->output_grad, previous->output, previous->output_grad, size_t(rows) * layer.in,
                           stream);
    }
}

template <typename Net, typename Version>
void recompute_segment_with(Net& net, const CheckpointSegment& segment, int rows, Version version,
                            cudaStream_t stream) {
    for (int l = segment.first; l + 1 < segment.end; ++l) {
        recompute_layer(net.layers[size_t(l)], l == 0 ? net.input : net.layers[size_t(l) - 1].output, rows, version,
                        stream);
    }
}

template <typename Net, typename Version>
void backward_segment_with(Net& net, const CheckpointSegment& segment, int rows, Version version, float* workspace,
                           size_t workspace_floats, cudaStream_t stream) {
    for (int l = segment.end; l-- > segment.first;) {
        auto* previous = l > 0 ? &net.layers[size_t(l) - 1] : nullptr;
        backward_layer(net.layers[size_t(l)], l == 0 ? net.input : previous->output, previous, rows, version, workspace,
                       workspace_floats, stream);
    }
}

template <typename Net, typename Version>
void backward_segments(Net& net, const CheckpointPlan& plan, int rows, Version version, float* workspace,
                       size_t workspace_floats, cudaStream_t stream) {
    if (int(net.layers.size()) != plan.layers() || rows < 1 || rows > plan.batch) {
        throw std::invalid_argument(
            "backward_checkpointed: the plan does not match the model, or rows is not in "
            "1..batch");
    }
    for (size_t s = plan.segments.size(); s-- > 0;) {
        // Recompute the segment from its checkpoint into the slots: the same kernel on the same input as the forward
        // pass, so the same bits. Not the last segment: the forward pass has just left its activations in the slots.
        if (s + 1 < plan.segments.size()) recompute_segment_with(net, plan.segments[s], rows, version, stream);
        backward_segment_with(net, plan.segments[s], rows, version, workspace, workspace_floats, stream);
    }
}

}  // namespace

void backward_checkpointed(Mlp& net, const CheckpointPlan& plan, int rows, GemmVersion version, float* workspace,
                           size_t workspace_floats, cudaStream_t stream) {
    backward_segments(net, plan, rows, version, workspace, workspace_floats, stream);
}

void backward_checkpointed(HalfMlp<float>& net, const CheckpointPlan& plan, int rows, HgemmVersion version,
                           float* workspace, size_t workspace_floats, cudaStream_t stream) {
    backward_segments(net, plan, rows, version, workspace, workspace_floats, stream);
}

void recompute_segment(Mlp& net, const CheckpointSegment& segment, int rows, cudaStream_t stream) {
    recompute_segment_with(net, segment, rows, kFastestGemm, stream);
}
void recompute_segment(HalfMlp<float>& net, const CheckpointSegment& segment, int rows, cudaStream_t stream) {
    recompute_segment_with(net, segment, rows, kFastestHgemm, stream);
}
void backward_segment(Mlp& net, const CheckpointSegment& segment, int rows, float* workspace, size_t workspace_floats,
                      cudaStream_t stream) {
    backward_segment_with(net, segment, rows, kFastestGemm, workspace, workspace_floats, stream);
}
void backward_segment(HalfMlp<float>& net, const CheckpointSegment& segment, int rows, float* workspace,
                      size_t workspace_floats, cudaStream_t stream) {
    backward_segment_with(net, segment, rows, kFastestHgemm, workspace, workspace_floats, stream);
}
