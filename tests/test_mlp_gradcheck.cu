// tests/test_mlp_gradcheck.cu — a whole tiny MLP built from the kernels (normalize → [GEMM + bias + ReLU] × 2
// → GEMM + bias → softmax cross-entropy, then the backward pass), its gradients checked against central
// finite differences of the loss computed in float64 with the reference ops.
//
// This is the test that catches what the per-kernel tests cannot: a wrong transpose flag or leading dimension
// in how the kernels are wired together, a missing 1/batch, the ReLU mask taken from the wrong tensor.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/reference_ops.h"
#include "kernels/bias_grad.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

using test_support::count_mismatches;
using test_support::DeviceBuffer;

namespace {

constexpr int kBatch = 6, kIn = 9, kHidden1 = 7, kHidden2 = 5, kClasses = 4;
constexpr int kLayers = 3;
constexpr int kFanIn[kLayers] = {kIn, kHidden1, kHidden2};
constexpr int kFanOut[kLayers] = {kHidden1, kHidden2, kClasses};

// Parameters in float64: W[l] is fan_in × fan_out, b[l] is fan_out.
struct Params {
    std::vector<double> W[kLayers], b[kLayers];
};

// The loss of the whole MLP in float64 (reference ops only).
double reference_loss(const Params& p, const std::vector<double>& x, const std::vector<uint8_t>& labels) {
    std::vector<double> act = x;
    for (int l = 0; l < kLayers; ++l) {
        std::vector<double> z(static_cast<size_t>(kBatch) * kFanOut[l]);
        reference::gemm<double, double>(false, false, kBatch, kFanOut[l], kFanIn[l], 1.0, act.data(), kFanIn[l],
                                        p.W[l].data(), kFanOut[l], 0.0, z.data(), kFanOut[l]);
        reference::bias_add(kBatch, kFanOut[l], p.b[l].data(), z.data(), kFanOut[l]);
        if (l + 1 < kLayers) reference::relu_forward(z.size(), z.data(), z.data());
        act = std::move(z);
    }
    return reference::softmax_cross_entropy(kBatch, kClasses, act.data(), kClasses, labels.data(),
                                            static_cast<double*>(nullptr));
}

struct KernelResult {
    float loss;
    std::vector<float> dW[kLayers], db[kLayers];
};

// Forward and backward with the kernels. Steps 1–3 use the separate bias_add and relu_forward kernels and the
// one-pass bias_grad (as lessons 01–03 do); steps 4–6 fuse bias + ReLU into the GEMM's epilogue and take the bias
// gradient with the two-pass reduction (as lesson 04 does). Every step supports both; this covers both.
KernelResult kernel_gradients(GemmVersion version, const Params& p, const DeviceBuffer<float>& x,
                              const std::vector<uint8_t>& labels) {
    const bool fused = static_cast<int>(version) >= static_cast<int>(GemmVersion::register_blocked);
    using Buffer = std::unique_ptr<DeviceBuffer<float>>;
    Buffer W[kLayers], b[kLayers], dW[kLayers], db[kLayers];
    Buffer act[kLayers];  // act[l]: layer l's output (after ReLU for hidden layers; the logits for the last)
    for (int l = 0; l < kLayers; ++l) {
        W[l] = std::make_unique<DeviceBuffer<float>>(std::vector<float>(p.W[l].begin(), p.W[l].end()));
        b[l] = std::make_unique<DeviceBuffer<float>>(std::vector<float>(p.b[l].begin(), p.b[l].end()));
        act[l] = std::make_unique<DeviceBuffer<float>>(static_cast<size_t>(kBatch) * kFanOut[l]);
        dW[l] = std::make_unique<DeviceBuffer<float>>(p.W[l].size());
        db[l] = std::make_unique<DeviceBuffer<float>>(p.b[l].size());
    }
    DeviceBuffer<uint8_t> d_labels(labels);
    DeviceBuffer<float> row_losses(kBatch), loss(1);
    DeviceBuffer<float> grad_buffer_a(static_cast<size_t>(kBatch) * kHidden1);
    DeviceBuffer<float> grad_buffer_b(static_cast<size_t>(kBatch) * kHidden1);
    float* grad_a = grad_buffer_a.get();  // dL/d(pre-activation) of the layer being differentiated
    float* grad_b = grad_buffer_b.get();  // dL/d(its input)
    const size_t workspace_floats = bias_grad_workspace_floats(kBatch, kHidden1);  // the widest layer
    DeviceBuffer<float> bias_grad_workspace(workspace_floats);

    // Forward.
    for (int l = 0; l < kLayers; ++l) {
        const float* input = l == 0 ? x.get() : act[l - 1]->get();
        const bool relu = l + 1 < kLayers;
        if (fused) {
            linear_forward(version, input, W[l]->get(), b[l]->get(), relu, act[l]->get(), kBatch, kFanIn[l],
                           kFanOut[l]);
        } else {
            linear_forward(version, input, W[l]->get(), nullptr, false, act[l]->get(), kBatch, kFanIn[l], kFanOut[l]);
            bias_add(b[l]->get(), act[l]->get(), kBatch, kFanOut[l], kFanOut[l]);
            if (relu) relu_forward(act[l]->get(), act[l]->get(), act[l]->size());
        }
    }
    // Loss and dlogits (into grad_a).
    softmax_cross_entropy(act[kLayers - 1]->get(), d_labels.get(), grad_a, row_losses.get(), loss.get(), kBatch,
                          kClasses);
    // Backward: grad_a holds dL/d(pre-activation of layer l) on entry to iteration l.
    for (int l = kLayers - 1; l >= 0; --l) {
        const float* input = l == 0 ? x.get() : act[l - 1]->get();
        linear_backward_weight(version, input, grad_a, dW[l]->get(), kBatch, kFanIn[l], kFanOut[l]);
        if (fused) {
            bias_grad_two_pass(grad_a, db[l]->get(), kBatch, kFanOut[l], kFanOut[l], 0.0f, bias_grad_workspace.get(),
                               workspace_floats);
        } else {
            bias_grad(grad_a, db[l]->get(), kBatch, kFanOut[l], kFanOut[l]);
        }
        if (l == 0) break;
        linear_backward_input(version, grad_a, W[l]->get(), grad_b, kBatch, kFanIn[l], kFanOut[l]);
        // Through layer l-1's ReLU, masked by its saved output; in place.
        relu_backward(grad_b, act[l - 1]->get(), grad_b, static_cast<size_t>(kBatch) * kFanIn[l]);
        std::swap(grad_a, grad_b);
    }

    KernelResult result{loss.download()[0], {}, {}};
    for (int l = 0; l < kLayers; ++l) {
        result.dW[l] = dW[l]->download();
        result.db[l] = db[l]->download();
    }
    return result;
}

}  // namespace

TEST_CASE("gradients of a tiny MLP built from the kernels match float64 finite differences for every GEMM version",
          "[kernels][gradcheck]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();

    // Inputs: random pixels through the normalize kernel, then the same floats in float64 for the reference.
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<uint8_t> pixels(static_cast<size_t>(kBatch) * kIn);
    for (auto& v : pixels) v = static_cast<uint8_t>(byte(rng));
    DeviceBuffer<uint8_t> d_pixels(pixels);
    DeviceBuffer<float> d_x(pixels.size());
    normalize_pixels(d_pixels.get(), d_x.get(), pixels.size());
    const std::vector<float> x_float = d_x.download();
    const std::vector<double> x(x_float.begin(), x_float.end());

    std::vector<uint8_t> labels(kBatch);
    for (int r = 0; r < kBatch; ++r) labels[r] = static_cast<uint8_t>(r % kClasses);

    // Parameters are float values (exactly representable), so the kernels and the reference see the same
    // numbers.
    Params p;
    for (int l = 0; l < kLayers; ++l) {
        const auto w = test_support::random_floats(rng, static_cast<size_t>(kFanIn[l]) * kFanOut[l], -0.6f, 0.6f);
        const auto b = test_support::random_floats(rng, kFanOut[l], -0.2f, 0.2f);
        p.W[l].assign(w.begin(), w.end());
        p.b[l].assign(b.begin(), b.end());
    }

    // Central differences in float64: truncation error O(h²) ≈ 1e-12, rounding ≈ 1e-16 / h ≈ 1e-10.
    const double h = 1e-6;
    const double loss_ref = reference_loss(p, x, labels);
    Params fd;
    for (int l = 0; l < kLayers; ++l) {
        for (auto [param, grad] : {std::pair{&p.W[l], &fd.W[l]}, std::pair{&p.b[l], &fd.b[l]}}) {
            grad->resize(param->size());
            for (size_t i = 0; i < param->size(); ++i) {
                const double saved = (*param)[i];
                (*param)[i] = saved + h;
                const double up = reference_loss(p, x, labels);
                (*param)[i] = saved - h;
                const double down = reference_loss(p, x, labels);
                (*param)[i] = saved;
                (*grad)[i] = (up - down) / (2 * h);
            }
        }
    }

    for (int version = 1; version <= kGemmVersionCount; ++version) {
        const GemmVersion v = gemm_version_from_int(version);
        INFO("GEMM version " << gemm_version_name(v));
        const KernelResult got = kernel_gradients(v, p, d_x, labels);
        REQUIRE(count_mismatches({got.loss}, {loss_ref}, 1e-6, 1e-6, "loss") == 0);
        for (int l = 0; l < kLayers; ++l) {
            INFO("layer " << l);
            // The kernels compute in float: allow float rounding on gradients of size ≲ 1.
            REQUIRE(count_mismatches(got.dW[l], fd.W[l], 2e-6, 1e-4, "dW") == 0);
            REQUIRE(count_mismatches(got.db[l], fd.b[l], 2e-6, 1e-4, "db") == 0);
        }
    }
}
