// tests/test_checkpointing.cu — lesson 06's activation checkpointing (lessons/06_activation_checkpointing/checkpointing.h): the policies and
// the plan's arithmetic; gradients under every policy bitwise equal to lesson 04's backward_fast (fp32) and lesson
// 05's backward_half (mixed precision); the ledger's activation peak equal to the prediction, and sqrt at 16 hidden
// layers of 1024 at most 0.35 of none; 20 training steps with bitwise the same losses and weights under every
// policy; the largest batch that fits, by bisection on the prediction.
//
// On the CPU backend the models are 16 hidden layers of awkward small widths (64, 61, 48, 33: the segment slots then
// differ in width) at batch 32 with a partial batch of 29 rows; the default 16 × 1024 model is only allocated (its
// training steps would take minutes there). On a GPU the same tests run for real.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "lessons/06_activation_checkpointing/checkpointing.h"
#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"

#include "kernels/bias_grad.cuh"
#include "kernels/gemm.cuh"
#include "kernels/loss_scaling.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

using test_support::DeviceBuffer;

namespace {

constexpr int kBatch = 32, kRows = 29;  // the buffers' batch, and a partial batch's rows
constexpr uint64_t kSeed = 7;

// 784 → 16 hidden layers → 10, the default depth; widths that make the segment slots differ.
std::vector<int> small_layers() {
    return {784, 64, 61, 48, 64, 33, 64, 64, 61, 64, 48, 64, 64, 33, 64, 64, 61, 10};
}

ModelShape shape_of(const std::vector<int>& layers, int batch, bool mixed) {
    ModelShape shape{layers, batch, 4, 4, OptimizerKind::adamw, false};
    if (mixed) {  // half_model_shape's mixed precision: fp16 parameters and activations, fp32 gradients and masters
        shape.parameter_bytes = shape.activation_bytes = sizeof(__half);
        shape.gradient_bytes = sizeof(float);
        shape.master_weights = true;
    }
    shape.stage_raw_pixels = false;  // the tests normalize from their own device pixels; only labels are staged
    return shape;
}

// Every activation buffer set to NaN bits (0xFF bytes: NaN in fp32 and fp16), so that a read of anything the pass did
// not write first shows up in the gradients.
template <typename Net>
void poison_activations(Net& net, int batch) {
    using Act = typename Net::ActType;
    CUDA_CHECK(cudaMemset(net.input, 0xFF, size_t(batch) * net.layers[0].in * sizeof(Act)));
    for (auto& layer : net.layers) {
        CUDA_CHECK(cudaMemset(layer.output, 0xFF, size_t(batch) * layer.out * sizeof(Act)));
        CUDA_CHECK(cudaMemset(layer.output_grad, 0xFF, size_t(batch) * layer.out * sizeof(Act)));
    }
}

// The model-dependent calls of lessons 04 (fp32) and 05 (mixed).
void forward(Mlp& net, int rows) {
    forward_fast(net, rows, kFastestGemm, 0);
}
void forward(HalfMlp<float>& net, int rows) {
    forward_half(net, rows, kFastestHgemm, 0);
}
void reference_backward(Mlp& net, int rows, float* workspace, size_t workspace_floats) {
    backward_fast(net, rows, kFastestGemm, workspace, workspace_floats, 0);
}
void reference_backward(HalfMlp<float>& net, int rows, float* workspace, size_t workspace_floats) {
    backward_half(net, rows, kFastestHgemm, workspace, workspace_floats, 0);
}
void checkpointed_backward(Mlp& net, const CheckpointPlan& plan, int rows, float* workspace, size_t workspace_floats) {
    backward_checkpointed(net, plan, rows, kFastestGemm, workspace, workspace_floats, 0);
}
void checkpointed_backward(HalfMlp<float>& net, const CheckpointPlan& plan, int rows, float* workspace,
                           size_t workspace_floats) {
    backward_checkpointed(net, plan, rows, kFastestHgemm, workspace, workspace_floats, 0);
}

template <typename T>
std::vector<T> download(const T* device, size_t count) {
    std::vector<T> host(count);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
    // (memcmp may not be given an empty vector's null data(), even with 0 bytes: UBSan stops on it.)
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// A batch of MNIST-like pixels (4 in 5 are background, as in MNIST) and labels.
struct Batch {
    std::vector<uint8_t> pixels, labels;
};
Batch random_batch(std::mt19937_64& rng, int rows) {
    Batch batch{std::vector<uint8_t>(size_t(rows) * kMnistPixels), std::vector<uint8_t>(size_t(rows))};
    for (uint8_t& p : batch.pixels) p = rng() % 5 == 0 ? uint8_t(1 + rng() % 255) : 0;
    for (uint8_t& l : batch.labels) l = uint8_t(rng() % kMnistClasses);
    return batch;
}

// What one forward + loss + backward leaves: the loss, the logits' bits, and every layer's dW and db.
struct StepGradients {
    float loss = 0;
    std::vector<uint16_t> logits_half;
    std::vector<float> logits;
    std::vector<std::vector<float>> weight_grads, bias_grads;
    size_t activation_peak = 0, activation_current = 0, predicted = 0;
};

// A fresh model of `policy` (the same Philox initialization for every policy), one batch, and lesson 04/05's
// backward (reference) or the checkpointed one. `scale`: mixed precision's loss scale.
template <typename Param>
StepGradients one_step(const std::vector<int>& layers, const CheckpointPolicy& policy, bool reference,
                       const Batch& batch, int rows) {
    using Net = MlpBuffers<Param, Param, float>;
    constexpr bool mixed = std::is_same_v<Param, __half>;
    MemoryLedger ledger;
    const ModelShape shape = shape_of(layers, kBatch, mixed);
    const CheckpointPlan plan = plan_checkpoints(shape, policy);
    Net net = allocate_checkpointed_model<Param, float>(ledger, shape, plan, kSeed);
    poison_activations(net, kBatch);
    int widest = 0;
    for (const auto& layer : net.layers) widest = std::max(widest, layer.out);
    const size_t workspace_floats = bias_grad_workspace_floats(kBatch, widest);
    DeviceBuffer<float> workspace(workspace_floats), scale(std::vector<float>{1024.0f});
    DeviceBuffer<uint8_t> pixels(batch.pixels);
    CUDA_CHECK(cudaMemcpy(net.staged_labels, batch.labels.data(), size_t(rows), cudaMemcpyHostToDevice));

    normalize_pixels(pixels.get(), net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd);
    forward(net, rows);
    softmax_cross_entropy(net.layers.back().output, net.staged_labels, net.layers.back().output_grad, net.row_losses,
                          net.mean_loss, rows, kMnistClasses, mixed ? scale.get() : nullptr, 0);
    StepGradients result;
    const size_t logits = size_t(rows) * kMnistClasses;
    if constexpr (mixed) {
        const std::vector<__half> h = download(net.layers.back().output, logits);
        result.logits_half.resize(logits);
        std::memcpy(result.logits_half.data(), h.data(), logits * sizeof(__half));
    } else {
        result.logits = download(net.layers.back().output, logits);
    }
    if (reference) {
        reference_backward(net, rows, workspace.get(), workspace_floats);
    } else {
        checkpointed_backward(net, plan, rows, workspace.get(), workspace_floats);
    }
    result.loss = download(net.mean_loss, 1)[0];
    for (const auto& layer : net.layers) {
        result.weight_grads.push_back(download(layer.weight_grad, size_t(layer.in) * layer.out));
        result.bias_grads.push_back(download(layer.bias_grad, size_t(layer.out)));
    }
    result.activation_peak = ledger.peak(MemoryCategory::activations);
    result.activation_current = ledger.current(MemoryCategory::activations);
    result.predicted = plan.activation_bytes();
    return result;
}

template <typename Param>
void check_gradients_bitwise(const char* precision) {
    auto rng = test_support::rng_for_test();
    const std::vector<int> layers = small_layers();
    const int L = int(layers.size()) - 1;
    const Batch batch = random_batch(rng, kRows);
    const StepGradients want = one_step<Param>(layers, parse_checkpoint_policy("none", L), true, batch, kRows);
    REQUIRE(std::isfinite(want.loss));
    for (int l = 0; l < L; ++l) {  // the reference is a real gradient: finite and not all zero in every layer
        INFO(precision << " reference layer " << l + 1);
        const std::vector<float>& dw = want.weight_grads[size_t(l)];
        REQUIRE(std::all_of(dw.begin(), dw.end(), [](float g) { return std::isfinite(g); }));
        REQUIRE(std::any_of(dw.begin(), dw.end(), [](float g) { return g != 0.0f; }));
    }
    // every=1: all inputs kept, nothing recomputed; 2, 3, sqrt (5), 7: segments of several layers; 17: one segment.
    for (const char* name : {"none", "every=1", "every=2", "every=3", "sqrt", "every=7", "every=17"}) {
        const CheckpointPolicy policy = parse_checkpoint_policy(name, L);
        const StepGradients got = one_step<Param>(layers, policy, false, batch, kRows);
        INFO(precision << " --checkpoint " << name);
        CHECK(std::memcmp(&got.loss, &want.loss, sizeof(float)) == 0);
        CHECK(bitwise_equal(got.logits, want.logits));
        CHECK(bitwise_equal(got.logits_half, want.logits_half));
        for (int l = 0; l < L; ++l) {
            INFO("layer " << l + 1 << " of " << L);
            CHECK(bitwise_equal(got.weight_grads[size_t(l)], want.weight_grads[size_t(l)]));
            CHECK(bitwise_equal(got.bias_grads[size_t(l)], want.bias_grads[size_t(l)]));
        }
        // The buffers really are the plan's: nothing else was allocated as an activation, before or during the pass.
        CHECK(got.activation_peak == got.predicted);
        CHECK(got.activation_current == got.predicted);
    }
    CHECK(want.activation_peak == want.predicted);  // none: lesson 05's set, predict_device_memory's formula
}

// 20 training steps (lesson 06's loop without the data loader): forward, loss, checkpointed backward, the optimizer
// of the precision. Returns every step's loss and the final fp32 parameters.
struct Training {
    std::vector<float> losses;
    std::vector<std::vector<float>> parameters;
};
template <typename Param>
Training train_steps(const std::vector<int>& layers, const CheckpointPolicy& policy,
                     const std::vector<Batch>& batches) {
    using Net = MlpBuffers<Param, Param, float>;
    constexpr bool mixed = std::is_same_v<Param, __half>;
    MemoryLedger ledger;
    const ModelShape shape = shape_of(layers, kBatch, mixed);
    const CheckpointPlan plan = plan_checkpoints(shape, policy);
    Net net = allocate_checkpointed_model<Param, float>(ledger, shape, plan, kSeed);
    int widest = 0;
    for (const auto& layer : net.layers) widest = std::max(widest, layer.out);
    const size_t workspace_floats = bias_grad_workspace_floats(kBatch, widest);
    DeviceBuffer<float> workspace(workspace_floats);
    DeviceBuffer<GradScalerState> scaler(1);
    const GradScalerOptions scaling;
    init_grad_scaler(scaler.get(), scaling);
    TrainOptions options;  // lesson 06's optimizer: AdamW with weight decay, a constant rate here
    options.optimizer = OptimizerKind::adamw;
    options.weight_decay = options.adamw_weight_decay;
    const double lr = options.adamw_lr;

    Training training;
    DeviceBuffer<uint8_t> pixels(size_t(kBatch) * kMnistPixels);
    for (size_t step = 0; step < batches.size(); ++step) {
        const Batch& batch = batches[step];
        const int rows = int(batch.labels.size());
        CUDA_CHECK(cudaMemcpy(pixels.get(), batch.pixels.data(), batch.pixels.size(), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(net.staged_labels, batch.labels.data(), size_t(rows), cudaMemcpyHostToDevice));
        normalize_pixels(pixels.get(), net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd);
        forward(net, rows);
        softmax_cross_entropy(net.layers.back().output, net.staged_labels, net.layers.back().output_grad,
                              net.row_losses, net.mean_loss, rows, kMnistClasses,
                              mixed ? &scaler.get()->scale : nullptr, 0);
        training.losses.push_back(download(net.mean_loss, 1)[0]);
        checkpointed_backward(net, plan, rows, workspace.get(), workspace_floats);
        if constexpr (mixed) {
            const std::vector<GradientTensor> gradients = gradient_tensors(net);
            unscale_and_check(gradients.data(), int(gradients.size()), scaler.get());
            update_grad_scaler(scaler.get(), scaling, float(options.beta1), float(options.beta2));
            optimizer_step(net, options, lr, int(step + 1), UpdateCounters{}, scaler.get(), 0);
        } else {
            optimizer_update(net, options, lr, int(step + 1), 0);
        }
    }
    CHECK(ledger.peak(MemoryCategory::activations) == plan.activation_bytes());
    training.parameters = download_parameters(ledger, net);
    return training;
}

template <typename Param>
void check_training_identical(const char* precision) {
    auto rng = test_support::rng_for_test();
    const std::vector<int> layers = small_layers();
    const int L = int(layers.size()) - 1;
    std::vector<Batch> batches;
    for (int step = 0; step < 20; ++step) batches.push_back(random_batch(rng, step % 5 == 4 ? kRows : kBatch));
    const Training none = train_steps<Param>(layers, parse_checkpoint_policy("none", L), batches);
    REQUIRE(none.losses.size() == 20);
    REQUIRE(std::all_of(none.losses.begin(), none.losses.end(), [](float x) { return std::isfinite(x); }));
    REQUIRE(none.losses.front() != none.losses.back());  // the steps changed the model
    for (const char* name : {"sqrt", "every=2"}) {
        const Training got = train_steps<Param>(layers, parse_checkpoint_policy(name, L), batches);
        INFO(precision << " --checkpoint " << name);
        for (size_t step = 0; step < got.losses.size(); ++step) {
            INFO("step " << step + 1 << ": " << got.losses[step] << " against none's " << none.losses[step]);
            CHECK(std::memcmp(&got.losses[step], &none.losses[step], sizeof(float)) == 0);
        }
        for (size_t t = 0; t < got.parameters.size(); ++t) {
            INFO("parameter tensor " << t);
            CHECK(bitwise_equal(got.parameters[t], none.parameters[t]));
        }
    }
}

}  // namespace

TEST_CASE("checkpointing: the policies, and the plan of the default 16 hidden layers of 1024", "[checkpointing]") {
    // none keeps everything; sqrt keeps every ⌈√L⌉-th input (L weight layers); every=K every K-th.
    CHECK(parse_checkpoint_policy("none", 17).stride == 0);
    CHECK(parse_checkpoint_policy("sqrt", 17).stride == 5);
    CHECK(parse_checkpoint_policy("sqrt", 16).stride == 4);
    CHECK(parse_checkpoint_policy("sqrt", 1).stride == 1);
    CHECK(parse_checkpoint_policy("every=3", 17).stride == 3);
    CHECK(parse_checkpoint_policy("every=40", 17).stride == 40);
    for (const char* bad :
         {"", "every=0", "every=-1", "every=", "every=x", "every=3x", "SQRT", "every=99999999999", "every 3", "all"}) {
        INFO("--checkpoint '" << bad << "'");
        CHECK_THROWS_AS(parse_checkpoint_policy(bad, 17), std::invalid_argument);
    }

    // The default model, mixed precision (2-byte activations), batch 128.
    std::vector<int> layers = {784};
    for (int l = 0; l < 16; ++l) layers.push_back(1024);
    layers.push_back(10);
    const ModelShape shape = shape_of(layers, 128, true);
    const CheckpointPlan none = plan_checkpoints(shape, parse_checkpoint_policy("none", 17));
    const CheckpointPlan sqrt = plan_checkpoints(shape, parse_checkpoint_policy("sqrt", 17));
    // none: X (784) + Y_l and dY_l of every layer: 784 + 2 · (16 · 1024 + 10) = 33572 elements per row, which is
    // predict_device_memory's activations.
    CHECK(none.elements_per_row() == 33572);
    CHECK(none.activation_bytes() == predict_device_memory(shape)[MemoryCategory::activations]);
    // sqrt, k = 5: inputs of layers 0, 5, 10, 15 kept (784 + 3 · 1024), the logits (10), a segment buffer of 4 slots
    // (4 · 1024) and two dY buffers (2 · 1024): 10010 elements per row, 0.298 of none.
    REQUIRE(sqrt.segments.size() == 4);
    CHECK(sqrt.segments[3].first == 15);
    CHECK(sqrt.segments[3].end == 17);
    CHECK(sqrt.kept_inputs == std::vector<int>{0, 5, 10, 15});
    CHECK(sqrt.slot_widths == std::vector<int>{1024, 1024, 1024, 1024});
    CHECK(sqrt.gradient_widths[0] == 1024);
    CHECK(sqrt.gradient_widths[1] == 1024);
    CHECK(sqrt.elements_per_row() == 10010);
    CHECK(sqrt.activation_bytes() == 128u * 10010 * 2);
    CHECK(double(sqrt.activation_bytes()) <= 0.35 * double(none.activation_bytes()));
    CHECK(predict_checkpointed_memory(shape, sqrt.policy)[MemoryCategory::activations] == sqrt.activation_bytes());
    CHECK(predict_checkpointed_memory(shape, sqrt.policy)[MemoryCategory::parameters] ==
          predict_device_memory(shape)[MemoryCategory::parameters]);
    // Recomputed: layers 0-3, 5-8, 10-13 (not the last segment, not a segment's last layer) of one forward pass.
    const double forward = 784.0 * 1024 + 15.0 * 1024 * 1024 + 1024.0 * 10;
    CHECK(std::fabs(sqrt.extra_forward_fraction() - (784.0 * 1024 + 11.0 * 1024 * 1024) / forward) < 1e-12);
    CHECK(none.extra_forward_fraction() == 0.0);

    // L = 16 weight layers (15 hidden), k = 4: 784 + 3 · 1024 kept, 3 slots, logits, two dY: 8986 of 31524.
    std::vector<int> sixteen(layers.begin(), layers.end());
    sixteen.erase(sixteen.begin() + 1);
    const ModelShape shape16 = shape_of(sixteen, 128, true);
    const CheckpointPlan sqrt16 = plan_checkpoints(shape16, parse_checkpoint_policy("sqrt", 16));
    const CheckpointPlan none16 = plan_checkpoints(shape16, parse_checkpoint_policy("none", 16));
    CHECK(sqrt16.elements_per_row() == 8986);
    CHECK(none16.elements_per_row() == 31524);
    CHECK(double(sqrt16.activation_bytes()) <= 0.35 * double(none16.activation_bytes()));

    // every=1: every input kept, no slot, nothing recomputed. every ≥ L: one segment (the last), nothing recomputed.
    const CheckpointPlan every1 = plan_checkpoints(shape, parse_checkpoint_policy("every=1", 17));
    CHECK(every1.slot_widths.empty());
    CHECK(every1.extra_forward_fraction() == 0.0);
    CHECK(every1.elements_per_row() == 784 + 16 * 1024 + 10 + 2 * 1024);
    const CheckpointPlan one_segment = plan_checkpoints(shape, parse_checkpoint_policy("every=17", 17));
    CHECK(one_segment.segments.size() == 1);
    CHECK(one_segment.slot_widths.size() == 16);
    CHECK(one_segment.extra_forward_fraction() == 0.0);

    // Layers of different widths: each slot is as wide as the widest layer that uses it; dY buffers by parity.
    const CheckpointPlan mixed_widths =
        plan_checkpoints(shape_of({784, 64, 33, 48, 61, 20, 10}, 8, false), parse_checkpoint_policy("every=2", 6));
    CHECK(mixed_widths.slot_widths == std::vector<int>{64});  // layers 0, 2, 4 write slot 0: max(64, 48, 20)
    CHECK(mixed_widths.kept_inputs == std::vector<int>{0, 2, 4});
    CHECK(mixed_widths.gradient_widths[0] == 61);  // dY of layers 5, 3, 1: max(10, 61, 33)
    CHECK(mixed_widths.gradient_widths[1] == 64);  // layers 4, 2, 0: max(20, 48, 64)
    CHECK(mixed_widths.elements_per_row() == 784 + 33 + 61 + 10 + 64 + 61 + 64);
    CHECK(sqrt.describe().find(
              "keeps the inputs of layers 0, 5, 10, 15 (layers 0-16); segments 0-4, 5-9, 10-14, 15-16") !=
          std::string::npos);
}

TEST_CASE("checkpointing: fp32 gradients are bitwise lesson 04's under every policy", "[checkpointing]") {
    REQUIRE_DEVICE();
    check_gradients_bitwise<float>("fp32");
}

TEST_CASE("checkpointing: mixed-precision gradients are bitwise lesson 05's under every policy", "[checkpointing]") {
    REQUIRE_DEVICE();
    check_gradients_bitwise<__half>("mixed");
}

TEST_CASE("checkpointing: the ledger's activation peak is the prediction, and sqrt keeps at most 0.35 of none",
          "[checkpointing]") {
    REQUIRE_DEVICE();
    // The default model (16 hidden layers of 1024, mixed precision, batch 128), allocated: every category of the
    // ledger equals the prediction, for none (lesson 05's model) and sqrt.
    std::vector<int> layers = {784};
    for (int l = 0; l < 16; ++l) layers.push_back(1024);
    layers.push_back(10);
    ModelShape shape = shape_of(layers, 128, true);
    shape.staging_slots = 2;
    shape.stage_raw_pixels = true;
    size_t peaks[2] = {0, 0};
    int i = 0;
    for (const char* name : {"none", "sqrt"}) {
        INFO("--checkpoint " << name);
        const CheckpointPolicy policy = parse_checkpoint_policy(name, 17);
        MemoryLedger ledger;
        const CheckpointPlan plan = plan_checkpoints(shape, policy);
        HalfMlp<float> net = allocate_checkpointed_model<__half, float>(ledger, shape, plan, kSeed);
        const MemoryPrediction prediction = predict_checkpointed_memory(shape, policy);
        for (int c = 0; c < kMemoryCategoryCount; ++c) {
            INFO(memory_category_name(MemoryCategory(c)));
            CHECK(ledger.peak(MemoryCategory(c)) == prediction.bytes[size_t(c)]);
        }
        CHECK(ledger.total_peak() == prediction.total());
        peaks[i++] = ledger.peak(MemoryCategory::activations);
        CHECK(net.layers.size() == 17);
    }
    CHECK(double(peaks[1]) <= 0.35 * double(peaks[0]));
}

TEST_CASE("checkpointing: 20 fp32 training steps give bitwise the same losses and weights under every policy",
          "[checkpointing]") {
    REQUIRE_DEVICE();
    check_training_identical<float>("fp32");
}

TEST_CASE(
    "checkpointing: 20 mixed-precision training steps give bitwise the same losses and weights under every "
    "policy",
    "[checkpointing]") {
    REQUIRE_DEVICE();
    check_training_identical<__half>("mixed");
}

TEST_CASE("checkpointing: the largest batch that fits, by bisection on the prediction", "[checkpointing]") {
    const std::vector<int> layers = small_layers();
    const ModelShape shape = shape_of(layers, 128, true);
    const auto extra = [](int batch) { return size_t(batch) * 16 + 1000; };  // grows with the batch, as the lesson's
    const auto total = [&](const CheckpointPolicy& policy, int batch) {
        ModelShape s = shape;
        s.batch = batch;
        return predict_checkpointed_memory(s, policy).total() + extra(batch);
    };
    const size_t available = size_t(48) << 20;
    const CheckpointPolicy none = parse_checkpoint_policy("none", 17), sqrt = parse_checkpoint_policy("sqrt", 17);
    const int largest_none = largest_checkpointed_batch(shape, none, extra, available, 1 << 30);
    const int largest_sqrt = largest_checkpointed_batch(shape, sqrt, extra, available, 1 << 30);
    REQUIRE(largest_none > 0);
    CHECK(total(none, largest_none) <= available);
    CHECK(total(none, largest_none + 1) > available);
    CHECK(total(sqrt, largest_sqrt) <= available);
    CHECK(total(sqrt, largest_sqrt + 1) > available);
    CHECK(largest_sqrt > largest_none);
    CHECK(largest_checkpointed_batch(shape, sqrt, extra, available, 100) == 100);  // capped by max_batch
    CHECK(largest_checkpointed_batch(shape, sqrt, extra, 1000, 1 << 30) == 0);     // not even the parameters fit
    // The int-indexing limit is the GEMM's own check: the widest batch-sized operand at max_indexable_batch rows is
    // accepted, one row more is refused.
    const int indexable = max_indexable_batch(shape.layer_sizes);
    const int widest = *std::max_element(shape.layer_sizes.begin(), shape.layer_sizes.end());
    const float dummy = 0;  // the check only tests pointers for null
    CHECK_NOTHROW(gemm_check_arguments("t", Transpose::no, Transpose::no, indexable, 10, widest, &dummy, widest, &dummy,
                                       10, &dummy, 10));
    std::string refusal;
    try {
        gemm_check_arguments("t", Transpose::no, Transpose::no, indexable + 1, 10, widest, &dummy, widest, &dummy, 10,
                             &dummy, 10);
    } catch (const std::invalid_argument& error) {
        refusal = error.what();
    }
    CHECK(refusal.find("too large for int index arithmetic") != std::string::npos);
    CHECK(max_indexable_batch({784, 1024, 10}) == 2096895);  // the figure lesson 06's README quotes

    // The fit check: "" when it fits; otherwise one message with the largest batch of this policy.
    ModelShape too_big = shape;
    too_big.batch = 2 * largest_sqrt;
    CHECK(check_checkpointed_fits(shape, sqrt, 1000, "the test set", available).empty());
    const std::string message = check_checkpointed_fits(too_big, sqrt, 0, "the test set", available);
    INFO(message);
    CHECK(message.find("--checkpoint sqrt") != std::string::npos);
    CHECK(message.find("the batch's buffers are what overflows") != std::string::npos);
    CHECK(message.find("The largest batch that fits with this policy is --batch ") != std::string::npos);
    CHECK(check_checkpointed_fits(shape, sqrt, 0, "the test set", 1000).find("No batch fits") != std::string::npos);
}
