// tests/test_kernels_data_path.cu — the kernels of the lessons' data path that are not layers: gather_rows (a batch
// gathered from a device-resident dataset) against gather_batch(), and accumulate_loss (the epoch's loss summed on
// the device) against the host's double sum.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/reference_mlp.h"
#include "kernels/gather_rows.cuh"
#include "kernels/softmax_cross_entropy.cuh"

using test_support::DeviceBuffer;

TEST_CASE("gather_rows equals gather_batch byte for byte, also for a partial last batch", "[kernels][data]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    std::uniform_int_distribution<int> byte(0, 255);
    for (const size_t count : {size_t{1}, size_t{13}, size_t{131}}) {
        MnistSplit split;
        split.count = count;
        split.images.resize(count * kMnistPixels);
        split.labels.resize(count);
        for (auto& p : split.images) p = uint8_t(byte(rng));
        for (auto& l : split.labels) l = uint8_t(byte(rng) % 10);
        const std::vector<uint32_t> order = epoch_order(7, 1, count);
        DeviceBuffer<uint8_t> pixels(split.images), labels(split.labels);
        DeviceBuffer<uint32_t> d_order(order);
        for (const int batch : {1, 7, 64}) {
            for (size_t first = 0; first < count; first += size_t(batch)) {
                const int rows = int(std::min<size_t>(batch, count - first));
                INFO("count=" << count << " batch=" << batch << " first=" << first << " rows=" << rows);
                DeviceBuffer<uint8_t> out_pixels(size_t(batch) * kMnistPixels + 1),
                    out_labels(static_cast<size_t>(batch) + 1);
                gather_rows(pixels.get(), labels.get(), d_order.get(), first, rows, kMnistPixels, out_pixels.get(),
                            out_labels.get());
                std::vector<uint8_t> want_pixels(size_t(rows) * kMnistPixels), want_labels(static_cast<size_t>(rows));
                gather_batch(split, order, first, size_t(rows), want_pixels.data(), want_labels.data());
                const std::vector<uint8_t> got_pixels = out_pixels.download(), got_labels = out_labels.download();
                REQUIRE(std::memcmp(got_pixels.data(), want_pixels.data(), want_pixels.size()) == 0);
                REQUIRE(std::memcmp(got_labels.data(), want_labels.data(), want_labels.size()) == 0);
                REQUIRE(got_pixels[size_t(rows) * kMnistPixels] == 0xFF);  // nothing written past the batch
                REQUIRE(got_labels[size_t(rows)] == 0xFF);
            }
        }
    }
}

TEST_CASE("accumulate_loss sums rows · mean loss in double exactly as the host does", "[kernels][data]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const std::vector<float> losses = test_support::random_floats(rng, 37, 0.0f, 3.0f);
    const std::vector<int> rows = {128, 128, 97, 1, 128, 5};
    DeviceBuffer<double> sum(1);
    CUDA_CHECK(cudaMemset(sum.get(), 0, sizeof(double)));
    DeviceBuffer<float> mean_loss(1);
    double host_sum = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
        const int n = rows[i % rows.size()];
        mean_loss.upload({losses[i]});
        accumulate_loss(mean_loss.get(), n, sum.get());
        host_sum += double(losses[i]) * n;  // what lessons 01–02 do on the host after reading each step's loss
    }
    const double got = sum.download()[0];
    REQUIRE(std::memcmp(&got, &host_sum, sizeof got) == 0);  // the same operations in the same order: bitwise
    REQUIRE_THROWS_AS(accumulate_loss(nullptr, 1, sum.get()), std::invalid_argument);
}
