// tests/test_mixed_precision.cu — lessons/mixed_precision.h's gradient list: gradient_tensors names every weight and
// bias gradient of the model exactly once, with its element count (a gradient left out is never unscaled: AdamW
// barely notices a constant factor, so training alone does not show it), and one mixed-precision step (fp16 forward
// and backward from a scaled loss, then unscale_and_check over that list) gives, tensor by tensor, the fp32
// backward's gradients of the same weights to fp16's precision.
//
// A small model with awkward widths (784 → 61 → 33 → 10) at a partial batch of 29 rows of random MNIST-like pixels.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"

#include "kernels/bias_grad.cuh"
#include "kernels/gemm.cuh"
#include "kernels/hgemm.cuh"
#include "kernels/loss_scaling.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

using test_support::DeviceBuffer;

namespace {

constexpr int kBatch = 32, kRows = 29;
constexpr uint64_t kSeed = 11;
const std::vector<int> kLayers = {784, 61, 33, 10};

ModelShape shape_of(bool mixed) {
    ModelShape shape{kLayers, kBatch, 4, 4, OptimizerKind::adamw, false};
    if (mixed) {  // half_model_shape's mixed precision: fp16 parameters and activations, fp32 gradients and masters
        shape.parameter_bytes = shape.activation_bytes = sizeof(__half);
        shape.gradient_bytes = sizeof(float);
        shape.master_weights = true;
    }
    shape.stage_raw_pixels = false;  // pixels are normalized from the test's own buffer; only labels are staged
    return shape;
}

template <typename T>
std::vector<T> download(const T* device, size_t count) {
    std::vector<T> host(count);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}

// The fp16 parameters widened into the fp32 model: both backward passes then differentiate the same function, and
// only the fp16 arithmetic (activations, dX) separates their gradients.
void copy_half_parameters(const __half* from, float* to, size_t count) {
    const std::vector<__half> halves = download(from, count);
    std::vector<float> widened(count);
    std::transform(halves.begin(), halves.end(), widened.begin(), [](__half h) { return __half2float(h); });
    CUDA_CHECK(cudaMemcpy(to, widened.data(), count * sizeof(float), cudaMemcpyHostToDevice));
}

}  // namespace

TEST_CASE("mixed precision: gradient_tensors lists every gradient once, and the unscaled step equals fp32's",
          "[mixed][loss_scaling]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    MemoryLedger ledger;
    HalfMlp<float> half = allocate_initialized_model<__half, float>(ledger, shape_of(true), kSeed);
    Mlp full = allocate_initialized_model<float, float>(ledger, shape_of(false), kSeed);
    const int L = int(half.layers.size());
    REQUIRE(L == int(kLayers.size()) - 1);

    // Every weight and bias gradient exactly once, with its element count, and nothing else.
    const std::vector<GradientTensor> tensors = gradient_tensors(half);
    CHECK(tensors.size() == size_t(2 * L));
    for (int l = 0; l < L; ++l) {
        const auto& layer = half.layers[size_t(l)];
        const auto listed = [&tensors](const float* data, size_t count) {
            return std::count_if(tensors.begin(), tensors.end(),
                                 [&](const GradientTensor& t) { return t.data == data && t.count == count; });
        };
        INFO("layer " << l + 1 << " of " << L);
        CHECK(listed(layer.weight_grad, size_t(layer.in) * layer.out) == 1);
        CHECK(listed(layer.bias_grad, size_t(layer.out)) == 1);
    }

    // One batch through both models.
    for (int l = 0; l < L; ++l) {
        const auto& h = half.layers[size_t(l)];
        copy_half_parameters(h.weight, full.layers[size_t(l)].weight, size_t(h.in) * h.out);
        copy_half_parameters(h.bias, full.layers[size_t(l)].bias, size_t(h.out));
        // Gradients poisoned: a tensor the backward pass skipped shows as NaN.
        CUDA_CHECK(cudaMemset(h.weight_grad, 0xFF, size_t(h.in) * h.out * sizeof(float)));
        CUDA_CHECK(cudaMemset(h.bias_grad, 0xFF, size_t(h.out) * sizeof(float)));
    }
    std::vector<uint8_t> pixels(size_t(kRows) * kMnistPixels), labels(kRows);
    for (uint8_t& p : pixels) p = rng() % 5 == 0 ? uint8_t(1 + rng() % 255) : 0;  // MNIST-like: 4 in 5 background
    for (uint8_t& label : labels) label = uint8_t(rng() % kMnistClasses);
    DeviceBuffer<uint8_t> d_pixels(pixels);
    int widest = 0;
    for (const auto& layer : half.layers) widest = std::max(widest, layer.out);
    const size_t workspace_floats = bias_grad_workspace_floats(kBatch, widest);
    DeviceBuffer<float> workspace(workspace_floats);

    // fp32: lesson 04's forward and backward.
    CUDA_CHECK(cudaMemcpy(full.staged_labels, labels.data(), labels.size(), cudaMemcpyHostToDevice));
    normalize_pixels(d_pixels.get(), full.input, pixels.size(), kMnistMean, kMnistStd);
    forward_fast(full, kRows, kFastestGemm, 0);
    softmax_cross_entropy(full.layers.back().output, full.staged_labels, full.layers.back().output_grad,
                          full.row_losses, full.mean_loss, kRows, kMnistClasses, nullptr, 0);
    backward_fast(full, kRows, kFastestGemm, workspace.get(), workspace_floats, 0);

    // mixed: lesson 05's step up to the optimizer, from a loss scaled by the scaler's initial 2^16.
    DeviceBuffer<GradScalerState> scaler(1);
    init_grad_scaler(scaler.get(), GradScalerOptions{});
    CUDA_CHECK(cudaMemcpy(half.staged_labels, labels.data(), labels.size(), cudaMemcpyHostToDevice));
    normalize_pixels(d_pixels.get(), half.input, pixels.size(), kMnistMean, kMnistStd);
    forward_half(half, kRows, kFastestHgemm, 0);
    softmax_cross_entropy(half.layers.back().output, half.staged_labels, half.layers.back().output_grad,
                          half.row_losses, half.mean_loss, kRows, kMnistClasses, &scaler.get()->scale, 0);
    backward_half(half, kRows, kFastestHgemm, workspace.get(), workspace_floats, 0);
    unscale_and_check(tensors.data(), int(tensors.size()), scaler.get());
    const GradScalerState state = download(scaler.get(), 1)[0];
    REQUIRE(state.found_inf == 0);
    REQUIRE(state.scale == 65536.0f);  // so a gradient left scaled is 2^16 times too large

    // Tensor by tensor: within 2% of the tensor's largest fp32 gradient (fp16 activations and dX round at 2^-11
    // relative per step; a gradient left scaled is off by 2^16, a wrong or missing one by about its own size).
    for (int l = 0; l < L; ++l) {
        const auto& h = half.layers[size_t(l)];
        const auto& f = full.layers[size_t(l)];
        const struct {
            const char* what;
            const float *got, *want;
            size_t count;
        } pairs[] = {{"dW", h.weight_grad, f.weight_grad, size_t(h.in) * h.out},
                     {"db", h.bias_grad, f.bias_grad, size_t(h.out)}};
        for (const auto& pair : pairs) {
            const std::vector<float> got = download(pair.got, pair.count), want = download(pair.want, pair.count);
            double largest = 0;
            for (float g : want) largest = std::max(largest, double(std::fabs(g)));
            INFO("layer " << l + 1 << " " << pair.what << ": largest fp32 gradient " << largest);
            REQUIRE(largest > 0);  // a real gradient
            const std::vector<double> reference(want.begin(), want.end());
            CHECK(test_support::count_mismatches(got, reference, 0.02 * largest, 0.0, pair.what) == 0);
        }
    }
}
