// tests/test_memory_ledger.cpp — current and peak bytes per category, pinned vs pageable host buffers, copies
// by direction, the prediction from model shapes, and the out-of-memory message.
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/test_support.h"

#include "common/memory_ledger.h"
#include "lessons/mlp.h"  // allocate_mlp: the buffers predict_device_memory describes

TEST_CASE("memory ledger: current and peak per category and space", "[memory]") {
    REQUIRE_DEVICE();
    using C = MemoryCategory;
    MemoryLedger ledger;
    float* w = ledger.allocate<float>(C::parameters, "W1", 1000);
    float* a1 = ledger.allocate<float>(C::activations, "A1", 300);
    double* a2 = ledger.allocate<double>(C::activations, "A2", 50);
    REQUIRE(w != nullptr);
    CHECK(ledger.current(C::parameters) == 4000);
    CHECK(ledger.current(C::activations) == 1200 + 400);
    CHECK(ledger.total_current() == 5600);
    ledger.free(a1);
    CHECK(ledger.current(C::activations) == 400);
    CHECK(ledger.peak(C::activations) == 1600);
    float* a3 = ledger.allocate<float>(C::activations, "A3", 100);  // below the old peak
    CHECK(ledger.current(C::activations) == 800);
    CHECK(ledger.peak(C::activations) == 1600);
    CHECK(ledger.total_peak() == 5600);
    CHECK(ledger.current(C::gradients) == 0);
    int* empty = ledger.allocate<int>(C::workspace, "empty", 0);  // size 0 is legal and distinct
    CHECK(empty != nullptr);
    CHECK(ledger.current(C::workspace) == 0);

    uint8_t* pinned = ledger.allocate_host<uint8_t>(C::input_staging, "pixels", 4096, HostMemory::pinned);
    uint8_t* pageable = ledger.allocate_host<uint8_t>(C::input_staging, "labels", 100, HostMemory::pageable);
    std::memset(pinned, 1, 4096);  // host memory is usable
    std::memset(pageable, 2, 100);
    CHECK(ledger.current(C::input_staging, MemorySpace::host_pinned) == 4096);
    CHECK(ledger.current(C::input_staging, MemorySpace::host_pageable) == 100);
    CHECK(ledger.current(C::input_staging, MemorySpace::device) == 0);
    CHECK(ledger.total_current() == 4800);  // host buffers are not device memory
    CHECK(ledger.is_pinned(pinned));
    CHECK(ledger.is_pinned(pinned + 4095));
    CHECK_FALSE(ledger.is_pinned(pinned + 4096));
    CHECK_FALSE(ledger.is_pinned(pageable));
    CHECK(ledger.describe_current().find("parameters 3.91 KiB") != std::string::npos);

    int not_from_ledger = 0;
    CHECK_THROWS_AS(ledger.free(&not_from_ledger), std::invalid_argument);
    ledger.free(w);
    ledger.free(a2);
    ledger.free(a3);
    ledger.free(pinned);
    CHECK(ledger.total_current() == 0);
    CHECK(ledger.total_current(MemorySpace::host_pinned) == 0);
    CHECK(ledger.current(C::input_staging, MemorySpace::host_pageable) == 100);  // freed by the destructor

    const MemorySnapshot s = ledger.snapshot();
    CHECK(s.device_queried);
    CHECK(s.device_total_before > 0);
    CHECK(s.device_free_before <= s.device_total_before);
    CHECK(s.usage(MemorySpace::device, C::parameters).peak == 4000);
    CHECK(s.total[int(MemorySpace::host_pinned)].peak == 4096);
}

TEST_CASE("memory ledger: copies counted by direction and pinned vs pageable, data intact", "[memory]") {
    REQUIRE_DEVICE();
    using C = MemoryCategory;
    MemoryLedger ledger;
    auto rng = test_support::rng_for_test();
    const size_t n = 1000;
    const std::vector<float> values = test_support::random_floats(rng, n);
    float* device = ledger.allocate<float>(C::activations, "x", n);
    float* pinned = ledger.allocate_host<float>(C::input_staging, "staging", n, HostMemory::pinned);
    std::memcpy(pinned, values.data(), n * sizeof(float));

    ledger.copy_to_device(device, pinned, n * sizeof(float));          // pinned H2D
    ledger.copy_to_device(device, values.data(), 10 * sizeof(float));  // pageable H2D (a std::vector)
    std::vector<float> back(n, -1.0f);
    ledger.copy_to_host(back.data(), device, n * sizeof(float));  // pageable D2H
    std::fill_n(pinned, n, -1.0f);
    ledger.copy_to_host(pinned + 500, device + 500, 500 * sizeof(float));  // pinned D2H, interior pointer
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(back == values);
    CHECK(pinned[0] == -1.0f);
    CHECK(std::memcmp(pinned + 500, values.data() + 500, 500 * sizeof(float)) == 0);
    ledger.record_copy(CopyDirection::device_to_host, 7, HostMemory::pageable);

    const MemorySnapshot s = ledger.snapshot();
    CHECK(s.h2d_pinned_bytes == 4000);
    CHECK(s.h2d_pageable_bytes == 40);
    CHECK(s.h2d_copies == 2);
    CHECK(s.d2h_pageable_bytes == 4007);
    CHECK(s.d2h_pinned_bytes == 2000);
    CHECK(s.d2h_copies == 3);
}

TEST_CASE("memory ledger: the prediction from model shapes equals what allocate_mlp records", "[memory]") {
    REQUIRE_DEVICE();
    // Worked by hand for 784-256-10, batch 128, SGD: 203530 parameters.
    CHECK(parameter_count({784, 256, 10}) == 784 * 256 + 256 + 256 * 10 + 10);
    const MemoryPrediction hand = predict_device_memory(ModelShape{{784, 256, 10}, 128});
    CHECK(hand[MemoryCategory::parameters] == 203530 * 4);
    CHECK(hand[MemoryCategory::optimizer_state] == 203530 * 4);
    CHECK(hand[MemoryCategory::master_weights] == 0);
    CHECK(hand[MemoryCategory::activations] == 128 * (784 + 2 * (256 + 10)) * 4);
    CHECK(hand[MemoryCategory::input_staging] == 128 * 785);
    CHECK(hand[MemoryCategory::workspace] == 128 * 4 + 4 + 4);  // row_losses, mean_loss, correct

    const std::vector<ModelShape> shapes = {
        {{784, 256, 10}, 128, 4, 4, OptimizerKind::sgd, false},
        {{784, 1024, 1024, 10}, 7, 4, 4, OptimizerKind::adamw, false},
        {{784, 33, 10}, 1, 2, 2, OptimizerKind::adamw, true},  // 2-byte parameters with fp32 master weights
        {{5, 3}, 3, 2, 4, OptimizerKind::sgd, true},
        // lesson 05's mixed precision: 2-byte parameters and activations, fp32 gradients and master weights
        {{784, 31, 10}, 3, 2, 2, OptimizerKind::adamw, true, 2, true, 4},
    };
    for (const ModelShape& shape : shapes) {
        MemoryLedger ledger;
        if (shape.parameter_bytes == 4) {
            allocate_mlp<float, float>(ledger, shape);
        } else if (shape.gradient_element_bytes() == 4) {
            allocate_mlp<uint16_t, uint16_t, float>(ledger, shape);
        } else if (shape.activation_bytes == 2) {
            allocate_mlp<uint16_t, uint16_t>(ledger,
                                             shape);  // stands in for __half: only the size matters here
        } else {
            allocate_mlp<uint16_t, float>(ledger, shape);
        }
        const MemoryPrediction predicted = predict_device_memory(shape);
        for (int c = 0; c < kMemoryCategoryCount; ++c) {
            INFO("layers " << shape.layer_sizes.size() << ", batch " << shape.batch << ", category "
                           << memory_category_name(MemoryCategory(c)));
            CHECK(ledger.current(MemoryCategory(c)) == predicted.bytes[c]);
        }
        CHECK(ledger.total_current() == predicted.total());
    }
    MemoryLedger ledger;
    CHECK_THROWS_AS((allocate_mlp<float, float>(ledger, ModelShape{{784, 10}, 4, 2, 4})), std::invalid_argument);
}

TEST_CASE("memory ledger: a failed allocation names category, name, size and what is in use", "[memory]") {
    REQUIRE_DEVICE();
    MemoryLedger ledger;
    float* weights = ledger.allocate<float>(MemoryCategory::parameters, "W1", 1 << 20);
    REQUIRE(weights != nullptr);
    const size_t huge = size_t{1} << 44;  // 16 TiB: beyond the CPU backend's emulated memory and any GPU
    std::string message;
    try {
        ledger.allocate<uint8_t>(MemoryCategory::activations, "huge_activations", huge);
    } catch (const OutOfMemoryError& error) {
        message = error.what();
    }
    INFO(message);
    CHECK(message.find("activations 'huge_activations'") != std::string::npos);
    CHECK(message.find("16.0 TiB") != std::string::npos);
    CHECK(message.find(std::to_string(huge) + " bytes") != std::string::npos);
    CHECK(message.find("cudaErrorMemoryAllocation") != std::string::npos);
    CHECK(message.find("parameters 4.00 MiB") != std::string::npos);
    CHECK(message.find("free of") != std::string::npos);
    CHECK(cudaGetLastError() == cudaSuccess);  // the error state was cleared
    CHECK(ledger.current(MemoryCategory::activations) == 0);
    CHECK(ledger.allocate<float>(MemoryCategory::workspace, "after", 16) != nullptr);  // still usable

    // An element count whose byte size overflows size_t is refused before asking CUDA.
    CHECK_THROWS_AS(ledger.allocate<double>(MemoryCategory::workspace, "overflow", SIZE_MAX / 4), OutOfMemoryError);
}

TEST_CASE("memory ledger: pageable host memory needs no device (the CPU reference)", "[memory]") {
    MemoryLedger ledger;  // no REQUIRE_DEVICE: no CUDA call is made
    double* p = ledger.allocate_host<double>(MemoryCategory::parameters, "W", 10, HostMemory::pageable);
    p[9] = 1.0;
    CHECK(ledger.current(MemoryCategory::parameters, MemorySpace::host_pageable) == 80);
    const MemorySnapshot s = ledger.snapshot();
    CHECK_FALSE(s.device_queried);
    CHECK(s.total[int(MemorySpace::device)].peak == 0);
}

TEST_CASE("memory ledger: the fit check names the overflowing category and the largest batch that fits", "[memory]") {
    ModelShape shape{{784, 1024, 1024, 10}, 128, 4, 4, OptimizerKind::adamw, false};
    const size_t need = predict_device_memory(shape).total();
    CHECK(check_device_fits(shape, 1000, "the test set", need + 1000).empty());  // exactly enough

    // Room for everything but a batch of 128's activations: the activations overflow; a smaller batch fits.
    const std::string message = check_device_fits(shape, 0, "the test set", need - 1);
    INFO(message);
    CHECK(message.find("activations is what overflows") != std::string::npos);
    const int largest = largest_batch_that_fits(shape, 0, need - 1, 128);
    CHECK(largest == 127);
    CHECK(message.find("--batch 127") != std::string::npos);
    ModelShape at_largest = shape;
    at_largest.batch = largest;
    CHECK(predict_device_memory(at_largest).total() <= need - 1);

    // Not even the model's own state fits: no batch does; AdamW's two moments are its biggest part.
    const std::string hopeless = check_device_fits(shape, 0, "the test set", 1 << 20);
    INFO(hopeless);
    CHECK(hopeless.find("optimizer state is what overflows") != std::string::npos);
    CHECK(hopeless.find("No batch fits: what does not depend on the batch") != std::string::npos);
    CHECK(largest_batch_that_fits(shape, 0, 1 << 20, 128) == 0);

    // The extra (a resident test set) can be what overflows: the model's part no longer fits, and it is the biggest.
    const std::string extra = check_device_fits(shape, 10 * need, "the test set", need + 10);
    INFO(extra);
    CHECK(extra.find("the test set is what overflows") != std::string::npos);

    // The margin: never more than what is free, and nothing when less than the margin is free.
    CHECK(usable_device_bytes(size_t(8) << 30, size_t(8) << 30) < (size_t(8) << 30));
    CHECK(usable_device_bytes(size_t(1) << 20, size_t(8) << 30) == 0);
    CHECK(usable_device_bytes(size_t(48) << 20, size_t(48) << 20) == (size_t(45) << 20));  // 1/16 on a small device
}

TEST_CASE("memory ledger: staging slots and float-only staging change the prediction and the allocation alike",
          "[memory]") {
    REQUIRE_DEVICE();
    for (const int slots : {1, 2, 3}) {
        for (const bool raw : {true, false}) {
            ModelShape shape{{784, 64, 10}, 33, 4, 4, OptimizerKind::sgd, false};
            shape.staging_slots = slots;
            shape.stage_raw_pixels = raw;
            MemoryLedger ledger;
            const auto buffers = allocate_mlp<float, float>(ledger, shape);
            INFO("slots=" << slots << " raw=" << raw);
            CHECK(ledger.current(MemoryCategory::input_staging) ==
                  predict_device_memory(shape)[MemoryCategory::input_staging]);
            CHECK(ledger.current(MemoryCategory::input_staging) == size_t(slots) * (raw ? 33 * 785 : 33));
            CHECK((buffers.staged_pixels == nullptr) == !raw);
        }
    }
}
