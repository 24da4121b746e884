// tests/test_reference_mlp.cpp — the CPU reference trainer: Philox initialization and batch order (what
// lessons reproduce), gradients against finite differences in float64, loss going down, and bitwise
// determinism.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "tests/test_support.h"

#include "common/philox.h"
#include "common/reference_mlp.h"

using test_support::mnist_dir_for_tests;
using test_support::synthetic_split;

TEST_CASE("reference: Philox initialization is reproducible, bounded and per layer", "[reference][init]") {
    const std::vector<int> sizes = {784, 256, 10};
    const std::vector<LayerParameters> a = init_parameters(7, sizes);
    const std::vector<LayerParameters> b = init_parameters(7, sizes);
    const std::vector<LayerParameters> c = init_parameters(8, sizes);
    REQUIRE(a.size() == 2);
    CHECK(a[0].in == 784);
    CHECK(a[0].out == 256);
    CHECK(a[0].weight.size() == 784 * 256);
    CHECK(a[1].bias.size() == 10);
    CHECK(init_bound(784, false) == std::sqrt(6.0f / 784.0f));
    CHECK(init_bound(256, true) == std::sqrt(3.0f / 256.0f));
    for (size_t l = 0; l < a.size(); ++l) {
        CHECK(std::memcmp(a[l].weight.data(), b[l].weight.data(), a[l].weight.size() * sizeof(float)) == 0);
        CHECK(a[l].weight != c[l].weight);
        const float bound = init_bound(a[l].in, l + 1 == a.size());
        double sum = 0, square = 0;
        for (float w : a[l].weight) {
            REQUIRE(std::abs(w) <= bound);
            sum += w;
            square += double(w) * w;
        }
        const double n = double(a[l].weight.size());
        CHECK(std::abs(sum / n) < 0.05 * bound);
        CHECK(std::abs(square / n - bound * bound / 3.0) < 0.1 * bound * bound / 3.0);  // uniform: variance b²/3
        CHECK(std::all_of(a[l].bias.begin(), a[l].bias.end(), [](float x) { return x == 0.0f; }));
    }
    // Element i of layer l is exactly philox_uniform(seed, init stream, l, i) mapped to ±bound: what a kernel
    // initializing the weights on the device computes.
    const float u = philox_uniform(philox_key(7), kPhiloxStreamInit, 1, 123);
    CHECK(a[1].weight[123] == (2.0f * u - 1.0f) * init_bound(256, true));
    CHECK(init_parameters(7, {784, 100, 10})[0].weight[5] == a[0].weight[5]);  // same stream: same prefix
}

TEST_CASE("reference: epoch order is a permutation, reproducible, new each epoch", "[reference][shuffle]") {
    for (size_t n : {size_t{1}, size_t{2}, size_t{17}, size_t{60000}}) {
        const std::vector<uint32_t> order = epoch_order(3, 1, n);
        std::vector<uint32_t> sorted = order;
        std::sort(sorted.begin(), sorted.end());
        std::vector<uint32_t> identity(n);
        std::iota(identity.begin(), identity.end(), 0u);
        CHECK(sorted == identity);
        CHECK(order == epoch_order(3, 1, n));
    }
    const std::vector<uint32_t> e1 = epoch_order(3, 1, 1000), e2 = epoch_order(3, 2, 1000);
    CHECK(e1 != e2);
    CHECK(e1 != epoch_order(4, 1, 1000));
    size_t fixed_points = 0;  // a random permutation has about one
    for (size_t i = 0; i < e1.size(); ++i) fixed_points += e1[i] == i;
    CHECK(fixed_points < 10);
    CHECK(batch_count(60000, 128) == 469);
    CHECK(batch_count(60000, 60000) == 1);
    CHECK(batch_count(5, 2) == 3);

    auto rng = test_support::rng_for_test();
    const MnistSplit split = synthetic_split(rng, 20);
    std::vector<uint8_t> pixels(3 * kMnistPixels), labels(3);
    const std::vector<uint32_t> order = epoch_order(3, 1, 20);
    gather_batch(split, order, 17, 3, pixels.data(), labels.data());  // the last, partial batch of 2 × 8 + 3
    for (int r = 0; r < 3; ++r) {
        CHECK(labels[r] == split.labels[order[17 + r]]);
        CHECK(std::memcmp(pixels.data() + r * kMnistPixels, split.image(order[17 + r]), kMnistPixels) == 0);
    }
    CHECK_THROWS(gather_batch(split, order, 18, 3, pixels.data(), labels.data()));
}

TEST_CASE("reference: backpropagation matches finite differences in float64", "[reference][gradcheck]") {
    auto rng = test_support::rng_for_test();
    for (const OptimizerKind optimizer : {OptimizerKind::sgd, OptimizerKind::adamw}) {
        ReferenceConfig config;
        config.layer_sizes = {7, 5, 6, 3};  // two ReLU layers, odd sizes
        config.batch = 4;
        config.optimizer = optimizer;
        config.seed = rng();
        ReferenceMlp model(config);
        const std::vector<float> x = test_support::random_floats(rng, 4 * 7, -2.0f, 2.0f);
        const std::vector<double> inputs(x.begin(), x.end());
        const std::vector<uint8_t> labels = {0, 2, 1, 2};
        model.compute_gradients(inputs.data(), labels.data(), 4);
        size_t checked = 0, mismatches = 0;
        for (int l = 0; l < model.layers(); ++l) {
            const size_t counts[2] = {model.weight_count(l), size_t(config.layer_sizes[l + 1])};
            for (int which = 0; which < 2; ++which) {
                double* params = which == 0 ? model.weight(l) : model.bias(l);
                const std::vector<double> analytic(
                    which == 0 ? model.weight_grad(l) : model.bias_grad(l),
                    (which == 0 ? model.weight_grad(l) : model.bias_grad(l)) + counts[which]);
                for (size_t i = 0; i < counts[which]; ++i) {
                    const double saved = params[i], h = 1e-6;
                    params[i] = saved + h;
                    const double up = model.loss(inputs.data(), labels.data(), 4);
                    params[i] = saved - h;
                    const double down = model.loss(inputs.data(), labels.data(), 4);
                    params[i] = saved;
                    const double numeric = (up - down) / (2 * h);
                    ++checked;
                    if (!test_support::close_enough(analytic[i], numeric, 1e-7, 1e-5)) {
                        if (mismatches++ < 5) {
                            UNSCOPED_INFO("layer " << l << (which ? " bias " : " weight ") << i << ": analytic "
                                                   << analytic[i] << ", numeric " << numeric);
                        }
                    }
                }
            }
        }
        CHECK(checked == 7 * 5 + 5 + 5 * 6 + 6 + 6 * 3 + 3);
        CHECK(mismatches == 0);
    }
}

TEST_CASE("reference: training lowers the loss with SGD and AdamW, last batch partial", "[reference][train]") {
    auto rng = test_support::rng_for_test();
    const MnistSplit train = synthetic_split(rng, 500);  // 500 = 7 batches of 64 + 52
    const MnistSplit test = synthetic_split(rng, 200);
    for (const OptimizerKind optimizer : {OptimizerKind::sgd, OptimizerKind::adamw}) {
        ReferenceConfig config;
        config.layer_sizes = {784, 32, 10};
        config.batch = 64;
        config.optimizer = optimizer;
        config.lr = optimizer == OptimizerKind::sgd ? 0.05 : 1e-3;
        ReferenceMlp model(config);
        const double before = model.evaluate(test);
        PhaseTimer timer(TimerClock::host);
        timer.begin_epoch(1);
        const EpochResult first = model.train_epoch(train, 1, &timer);
        const EpochTiming& timing = timer.end_epoch();
        CHECK(first.samples == 500);
        CHECK(first.steps == 8);
        CHECK(model.steps_taken() == 8);
        CHECK(timing[Phase::forward].calls == 8);
        CHECK(timing[Phase::normalize].calls == 8);
        CHECK(timing[Phase::optimizer].calls == 8);
        EpochResult last = first;
        for (int epoch = 2; epoch <= 3; ++epoch) last = model.train_epoch(train, epoch);
        INFO(optimizer_name(optimizer) << ": loss " << first.mean_loss << " → " << last.mean_loss << ", test " << before
                                       << " → " << model.evaluate(test));
        CHECK(last.mean_loss < 0.5 * first.mean_loss);
        CHECK(model.evaluate(test) > 0.9);
        CHECK(model.evaluate(test) > before);
    }
}

TEST_CASE("reference: two runs with the same seed are bitwise identical", "[reference][determinism]") {
    auto rng = test_support::rng_for_test();
    const MnistSplit train = synthetic_split(rng, 300);
    ReferenceConfig config;
    config.layer_sizes = {784, 24, 10};
    config.batch = 50;
    config.seed = 99;
    ReferenceMlp a(config), b(config);
    config.seed = 100;
    ReferenceMlp c(config);
    const EpochResult ra = a.train_epoch(train, 1), rb = b.train_epoch(train, 1);
    c.train_epoch(train, 1);
    CHECK(ra.mean_loss == rb.mean_loss);
    for (int l = 0; l < a.layers(); ++l) {
        CHECK(std::memcmp(a.weight(l), b.weight(l), a.weight_count(l) * sizeof(double)) == 0);
        CHECK(std::memcmp(a.weight(l), c.weight(l), a.weight_count(l) * sizeof(double)) != 0);
    }
}

TEST_CASE("reference: the memory table categories match the model", "[reference][memory]") {
    ReferenceConfig config;
    config.layer_sizes = {784, 16, 10};
    config.batch = 8;
    ReferenceMlp model(config);
    const size_t params = parameter_count(config.layer_sizes);
    const auto host = [&](MemoryCategory c) { return model.memory().current(c, MemorySpace::host_pageable); };
    CHECK(host(MemoryCategory::parameters) == params * sizeof(double));
    CHECK(host(MemoryCategory::gradients) == params * sizeof(double));
    CHECK(host(MemoryCategory::optimizer_state) == params * sizeof(double));
    CHECK(host(MemoryCategory::activations) == 8 * (784 + 2 * (16 + 10)) * sizeof(double));
    CHECK(model.memory().total_current(MemorySpace::device) == 0);

    // predicted_bytes() (what `reference` checks before allocating) is exactly what the constructor allocates.
    for (const OptimizerKind optimizer : {OptimizerKind::sgd, OptimizerKind::adamw}) {
        ReferenceConfig other;
        other.layer_sizes = {784, 33, 7, 10};
        other.batch = 5;
        other.optimizer = optimizer;
        const ReferenceMlp sized(other);
        CHECK(ReferenceMlp::predicted_bytes(other) == double(sized.memory().total_peak(MemorySpace::host_pageable)));
    }
    // The largest model the flags allow is predicted without overflow (and would need petabytes).
    ReferenceConfig huge;
    huge.layer_sizes.assign(1000, 65536);
    huge.batch = 1 << 24;
    CHECK(ReferenceMlp::predicted_bytes(huge) > 1e15);
}

TEST_CASE("reference: learns real MNIST from a subset (MNIST_DIR)", "[reference][real]") {
    const std::string dir = mnist_dir_for_tests();
    if (dir.empty()) test_support::exit_skipped("MNIST_DIR is not set");
    const MnistDataset data = load_mnist(dir, 5000);
    ReferenceConfig config;  // the default model and optimizer on 5000 images, two epochs: a few seconds
    ReferenceMlp model(config);
    model.train_epoch(data.train, 1);
    const EpochResult result = model.train_epoch(data.train, 2);
    const double accuracy = model.evaluate(data.test);
    INFO("loss " << result.mean_loss << ", test accuracy " << accuracy);
    CHECK(result.mean_loss < 0.5);
    CHECK(accuracy > 0.88);  // measured 0.904
}
