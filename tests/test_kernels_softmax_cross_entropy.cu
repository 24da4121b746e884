// tests/test_kernels_softmax_cross_entropy.cu — the fused loss and the on-device accuracy count against the
// float64 reference: 10 classes (MNIST), 1 class, rows wider than a warp, partial batches, extreme logits.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/reference_ops.h"
#include "kernels/count_correct.cuh"
#include "kernels/softmax_cross_entropy.cuh"

using test_support::count_mismatches;
using test_support::DeviceBuffer;

namespace {

template <typename Label>
std::vector<Label> random_labels(std::mt19937_64& rng, int batch, int classes) {
    std::uniform_int_distribution<int> dist(0, classes - 1);
    std::vector<Label> labels(batch);
    for (auto& l : labels) l = static_cast<Label>(dist(rng));
    return labels;
}

struct LossResult {
    float mean_loss;
    std::vector<float> row_losses, dlogits;
};

template <typename Label>
LossResult run_loss(const std::vector<float>& logits, const std::vector<Label>& labels, int batch, int classes) {
    DeviceBuffer<float> d_logits(logits), d_dlogits(logits.size()), d_rows(batch), d_mean(1);
    DeviceBuffer<Label> d_labels(labels);
    softmax_cross_entropy(d_logits.get(), d_labels.get(), d_dlogits.get(), d_rows.get(), d_mean.get(), batch, classes);
    return {d_mean.download()[0], d_rows.download(), d_dlogits.download()};
}

template <typename Label>
void check_loss(std::mt19937_64& rng, int batch, int classes, float scale) {
    INFO("batch=" << batch << " classes=" << classes << " logit scale=" << scale);
    const std::vector<float> logits =
        test_support::random_floats(rng, static_cast<size_t>(batch) * classes, -scale, scale);
    const std::vector<Label> labels = random_labels<Label>(rng, batch, classes);
    const LossResult got = run_loss(logits, labels, batch, classes);

    const std::vector<double> logits_d(logits.begin(), logits.end());
    std::vector<double> dlogits_ref(logits.size());
    const double loss_ref =
        reference::softmax_cross_entropy(batch, classes, logits_d.data(), classes, labels.data(), dlogits_ref.data());
    std::vector<double> rows_ref(batch);
    for (int r = 0; r < batch; ++r) {
        rows_ref[r] = reference::softmax_cross_entropy(1, classes, logits_d.data() + static_cast<size_t>(r) * classes,
                                                       classes, labels.data() + r, static_cast<double*>(nullptr));
    }
    // Float rounding of logits of size `scale`: the loss is a difference of such numbers.
    const double loss_abs = 1e-6 * (1.0 + scale) * std::log2(classes + 1.0);
    REQUIRE(std::isfinite(got.mean_loss));
    REQUIRE(count_mismatches({got.mean_loss}, {loss_ref}, loss_abs, 1e-5, "mean loss") == 0);
    REQUIRE(count_mismatches(got.row_losses, rows_ref, loss_abs, 1e-5, "row loss") == 0);
    // Gradients are (p - onehot) / batch with p ∈ [0, 1].
    REQUIRE(count_mismatches(got.dlogits, dlogits_ref, 1e-6 / batch, 1e-5, "dlogits") == 0);
}

}  // namespace

TEST_CASE("softmax_cross_entropy matches the reference for 10 classes at batch 97 and 128", "[kernels][softmax]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    check_loss<uint8_t>(rng, 97, 10, 5.0f);
    check_loss<uint8_t>(rng, 128, 10, 5.0f);
    check_loss<int32_t>(rng, 97, 10, 5.0f);
}

TEST_CASE("softmax_cross_entropy matches the reference for 1 class and wide rows and tiny batches",
          "[kernels][softmax]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    check_loss<int32_t>(rng, 1, 1, 3.0f);    // one class: loss 0, gradient 0
    check_loss<int32_t>(rng, 1, 10, 3.0f);   // a single row: one group, most lanes idle
    check_loss<int32_t>(rng, 7, 3, 3.0f);    // 4 lanes per row
    check_loss<int32_t>(rng, 33, 32, 3.0f);  // exactly a warp per row
    check_loss<int32_t>(rng, 5, 33, 3.0f);   // one more than a warp: lanes loop
    check_loss<int32_t>(rng, 3, 1000, 3.0f);
    check_loss<uint8_t>(rng, 1031, 10, 3.0f);  // several blocks, a partial last one
}

TEST_CASE("softmax_cross_entropy stays finite and accurate for logits of +-1e4", "[kernels][softmax]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    check_loss<uint8_t>(rng, 97, 10, 1e4f);
    // Hand-made extremes: the label at the max (loss ≈ 0), at the min (loss ≈ 2e4), and ties at ±1e4.
    const int batch = 4, classes = 10;
    std::vector<float> logits(batch * classes, -1e4f);
    logits[0 * classes + 3] = 1e4f;
    logits[1 * classes + 5] = 1e4f;
    for (int c = 0; c < classes; ++c) logits[2 * classes + c] = (c % 2) ? 1e4f : -1e4f;
    for (int c = 0; c < classes; ++c) logits[3 * classes + c] = 1e4f;
    const std::vector<uint8_t> labels = {3, 0, 1, 9};
    const LossResult got = run_loss(logits, labels, batch, classes);
    const std::vector<double> logits_d(logits.begin(), logits.end());
    std::vector<double> dlogits_ref(logits.size());
    const double loss_ref =
        reference::softmax_cross_entropy(batch, classes, logits_d.data(), classes, labels.data(), dlogits_ref.data());
    REQUIRE(std::isfinite(got.mean_loss));
    for (float v : got.row_losses) REQUIRE(std::isfinite(v));
    for (float v : got.dlogits) REQUIRE(std::isfinite(v));
    REQUIRE(count_mismatches({got.mean_loss}, {loss_ref}, 1e-3, 1e-6, "mean loss") == 0);
    REQUIRE(count_mismatches(got.dlogits, dlogits_ref, 1e-7, 1e-5, "dlogits") == 0);
}

TEST_CASE("softmax_cross_entropy loss is bitwise reproducible and skips the gradient when asked",
          "[kernels][softmax][determinism]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int batch = 3000, classes = 10;  // 3000 rows: the mean reduction's stride loop runs several times
    const std::vector<float> logits = test_support::random_floats(rng, batch * classes, -4.0f, 4.0f);
    const std::vector<uint8_t> labels = random_labels<uint8_t>(rng, batch, classes);
    const LossResult a = run_loss(logits, labels, batch, classes), b = run_loss(logits, labels, batch, classes);
    REQUIRE(std::memcmp(&a.mean_loss, &b.mean_loss, sizeof(float)) == 0);
    REQUIRE(std::memcmp(a.dlogits.data(), b.dlogits.data(), a.dlogits.size() * sizeof(float)) == 0);

    // dlogits == nullptr: loss only (evaluation), the same loss.
    DeviceBuffer<float> d_logits(logits), d_rows(batch), d_mean(1);
    DeviceBuffer<uint8_t> d_labels(labels);
    softmax_cross_entropy(d_logits.get(), d_labels.get(), static_cast<float*>(nullptr), d_rows.get(), d_mean.get(),
                          batch, classes);
    const float loss_only = d_mean.download()[0];
    REQUIRE(std::memcmp(&loss_only, &a.mean_loss, sizeof(float)) == 0);
}

TEST_CASE("softmax_cross_entropy rejects a null row_losses (or logits, labels) with a clear message",
          "[kernels][softmax]") {
    // Host-side checks only: nothing is launched, so no device is needed.
    const float* logits = reinterpret_cast<const float*>(uintptr_t{256});
    const uint8_t* labels = reinterpret_cast<const uint8_t*>(uintptr_t{512});
    float* out = reinterpret_cast<float*>(uintptr_t{768});
    std::string message;
    try {
        softmax_cross_entropy(logits, labels, out, static_cast<float*>(nullptr), out, 4, 10);
    } catch (const std::invalid_argument& e) {
        message = e.what();
    }
    REQUIRE(message.find("row_losses") != std::string::npos);
    REQUIRE_THROWS_AS(softmax_cross_entropy(logits, labels, out, static_cast<float*>(nullptr), out, 4, 10),
                      std::invalid_argument);
    REQUIRE_THROWS_AS(softmax_cross_entropy(static_cast<const float*>(nullptr), labels, out, out, out, 4, 10),
                      std::invalid_argument);
    REQUIRE_THROWS_AS(softmax_cross_entropy(logits, static_cast<const uint8_t*>(nullptr), out, out, out, 4, 10),
                      std::invalid_argument);
    REQUIRE_THROWS_AS(softmax_cross_entropy(logits, labels, out, out, out, -1, 10), std::invalid_argument);
}

TEST_CASE("softmax_cross_entropy marks an out-of-range label with NaN", "[kernels][softmax]") {
    REQUIRE_DEVICE();
    const std::vector<float> logits(2 * 10, 0.5f);
    const std::vector<int32_t> labels = {2, 10};
    const LossResult got = run_loss(logits, labels, 2, 10);
    REQUIRE(std::isfinite(got.row_losses[0]));
    REQUIRE(std::isnan(got.row_losses[1]));
    REQUIRE(std::isnan(got.mean_loss));
    REQUIRE(std::isnan(got.dlogits[10]));
}

namespace {

template <typename Label>
void check_count_correct(std::mt19937_64& rng, int batch, int classes) {
    INFO("batch=" << batch << " classes=" << classes);
    std::vector<float> logits = test_support::random_floats(rng, static_cast<size_t>(batch) * classes);
    // Quantize some rows so ties happen (the lowest index must win, as in the reference).
    for (int r = 0; r < batch; r += 3) {
        for (int c = 0; c < classes; ++c) {
            float& v = logits[static_cast<size_t>(r) * classes + c];
            v = std::round(v);
        }
    }
    std::vector<Label> labels = random_labels<Label>(rng, batch, classes);
    std::vector<int32_t> pred_ref(batch);
    reference::argmax_rows(batch, classes, logits.data(), classes, pred_ref.data());
    for (int r = 0; r < batch; r += 2) labels[r] = static_cast<Label>(pred_ref[r]);  // plenty of correct rows
    const int correct_ref = reference::count_correct(batch, classes, logits.data(), classes, labels.data());

    DeviceBuffer<float> d_logits(logits);
    DeviceBuffer<Label> d_labels(labels);
    DeviceBuffer<int> d_correct(1);
    DeviceBuffer<int32_t> d_pred(batch);
    CUDA_CHECK(cudaMemset(d_correct.get(), 0, sizeof(int)));
    count_correct(d_logits.get(), d_labels.get(), d_correct.get(), batch, classes, d_pred.get());
    REQUIRE(d_correct.download()[0] == correct_ref);
    REQUIRE(d_pred.download() == pred_ref);
    // A second call accumulates (an epoch is many batches, one count).
    count_correct(d_logits.get(), d_labels.get(), d_correct.get(), batch, classes);
    REQUIRE(d_correct.download()[0] == 2 * correct_ref);
}

}  // namespace

TEST_CASE("count_correct matches the reference argmax and count including ties", "[kernels][evaluate]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    check_count_correct<uint8_t>(rng, 97, 10);
    check_count_correct<uint8_t>(rng, 1, 10);
    check_count_correct<int32_t>(rng, 1, 1);
    check_count_correct<int32_t>(rng, 100, 3);
    check_count_correct<int32_t>(rng, 37, 33);
    check_count_correct<uint8_t>(rng, 2053, 10);  // several blocks, a partial last one
}
