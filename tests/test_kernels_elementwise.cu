// tests/test_kernels_elementwise.cu — normalize, bias add and ReLU forward/backward against the float64 reference,
// at awkward sizes, aligned (float4 path) and misaligned (element-wise path). The bias gradient has its own file,
// tests/test_kernels_bias_grad.cu.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/reference_ops.h"
#include "kernels/elementwise.cuh"
#include "kernels/normalize.cuh"

using test_support::count_mismatches;
using test_support::DeviceBuffer;

namespace {

std::vector<double> to_double(const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
}

// Values with both signs and some exact zeros (the ReLU's boundary).
std::vector<float> signed_values(std::mt19937_64& rng, size_t n) {
    std::vector<float> v = test_support::random_floats(rng, n, -2.0f, 2.0f);
    for (size_t i = 0; i < n; i += 7) v[i] = 0.0f;
    return v;
}

}  // namespace

TEST_CASE("normalize_pixels matches the reference for aligned and misaligned buffers", "[kernels][normalize]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t n : {size_t{1}, size_t{3}, size_t{5}, size_t{784}, size_t{97 * 784 + 3}}) {
        for (int offset : {0, 1}) {  // 1 byte / 1 float off: the element-wise path
            INFO("n=" << n << " offset=" << offset);
            std::vector<uint8_t> pixels(n + offset);
            for (auto& p : pixels) p = static_cast<uint8_t>(byte(rng));
            pixels[offset] = 0;
            pixels[n - 1 + offset] = 255;  // both ends of the range
            DeviceBuffer<uint8_t> d_pixels(pixels);
            DeviceBuffer<float> d_out(n + offset + 1);  // + 1: check nothing is written past the end
            const float mean = offset == 0 ? 0.1307f : 0.5f, std = offset == 0 ? 0.3081f : 0.25f;
            normalize_pixels(d_pixels.get() + offset, d_out.get() + offset, n, mean, std);
            const std::vector<float> all = d_out.download();
            std::vector<double> ref(n);
            reference::normalize_pixels(n, pixels.data() + offset, ref.data(), mean, std);
            const std::vector<float> got(all.begin() + offset, all.begin() + offset + n);
            REQUIRE(count_mismatches(got, ref, 1e-6, 1e-6, "normalized") == 0);
            REQUIRE(std::isnan(all.back()));
            if (offset == 1) REQUIRE(std::isnan(all.front()));
        }
    }
}

TEST_CASE("normalize_pixels equals the host's normalize_pixel bitwise for all 256 pixel values",
          "[kernels][normalize]") {
    REQUIRE_DEVICE();
    // Lessons and the CPU reference must see the same input numbers: the kernel and normalize_pixel() (the host's
    // formula, common/normalize_pixel.h) must agree to the last bit, not just within a tolerance.
    for (int offset : {0, 1}) {  // the vectorized and the element-wise path
        INFO("offset=" << offset);
        std::vector<uint8_t> pixels(256 + offset, 0);
        for (int p = 0; p < 256; ++p) pixels[offset + p] = static_cast<uint8_t>(p);
        DeviceBuffer<uint8_t> d_pixels(pixels);
        DeviceBuffer<float> d_out(256 + offset);
        normalize_pixels(d_pixels.get() + offset, d_out.get() + offset, 256);
        const std::vector<float> got = d_out.download();
        int differ = 0;
        for (int p = 0; p < 256; ++p) {
            const float host = normalize_pixel(static_cast<uint8_t>(p));
            if (std::memcmp(&got[offset + p], &host, sizeof host) != 0) {
                if (differ++ < 5) UNSCOPED_INFO("pixel " << p << ": kernel " << got[offset + p] << ", host " << host);
            }
        }
        REQUIRE(differ == 0);
    }
}

TEST_CASE("bias_add matches the reference for 1x1 and batch-97 layers with padded rows", "[kernels][elementwise]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    struct Shape {
        int rows, cols, ldy;
    };
    for (Shape s : {Shape{1, 1, 1}, Shape{97, 1024, 1024}, Shape{97, 10, 10}, Shape{33, 37, 41}}) {
        INFO("rows=" << s.rows << " cols=" << s.cols << " ldy=" << s.ldy);
        const std::vector<float> y = test_support::random_floats(rng, static_cast<size_t>(s.rows) * s.ldy);
        const std::vector<float> bias = test_support::random_floats(rng, s.cols);
        DeviceBuffer<float> d_y(y), d_bias(bias);
        bias_add(d_bias.get(), d_y.get(), s.rows, s.cols, s.ldy);
        std::vector<double> ref = to_double(y), bias_d = to_double(bias);
        reference::bias_add(s.rows, s.cols, bias_d.data(), ref.data(), s.ldy);
        // The padding columns (ldy > cols) are left alone, so they compare equal to the untouched input too.
        REQUIRE(count_mismatches(d_y.download(), ref, 1e-6, 1e-6, "Y") == 0);
    }
}

// The grid's y dimension is limited to 65535 blocks of 8 rows = 524,280 rows: past that the kernel's grid-stride
// loop over rows must cover the rest (a grid of ceil(rows / 8) blocks would fail to launch). One column keeps it
// cheap; two row-strided columns (ldy = 2) check the untouched padding too.
TEST_CASE("bias_add covers more rows than grid.y can hold (600001 x 1, ldy 2)", "[kernels][elementwise][large]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int rows = 600001, cols = 1, ldy = 2;
    const std::vector<float> y = test_support::random_floats(rng, static_cast<size_t>(rows) * ldy);
    const std::vector<float> bias = test_support::random_floats(rng, cols);
    DeviceBuffer<float> d_y(y), d_bias(bias);
    bias_add(d_bias.get(), d_y.get(), rows, cols, ldy);
    std::vector<double> ref = to_double(y), bias_d = to_double(bias);
    reference::bias_add(rows, cols, bias_d.data(), ref.data(), ldy);
    REQUIRE(count_mismatches(d_y.download(), ref, 1e-6, 1e-6, "Y") == 0);
}

TEST_CASE("relu_forward and relu_backward match the reference exactly at any size and alignment",
          "[kernels][elementwise]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (size_t n : {size_t{1}, size_t{4}, size_t{7}, size_t{4099}, size_t{97 * 1024}}) {
        for (int offset : {0, 1}) {
            INFO("n=" << n << " offset=" << offset);
            const std::vector<float> x = signed_values(rng, n + offset), dy = signed_values(rng, n + offset);
            DeviceBuffer<float> d_x(x), d_dy(dy), d_y(n + offset), d_dx(n + offset);
            relu_forward(d_x.get() + offset, d_y.get() + offset, n);
            // backward, masked by the forward output (the usual case) …
            relu_backward(d_dy.get() + offset, d_y.get() + offset, d_dx.get() + offset, n);
            std::vector<double> y_ref(n), dx_ref(n);
            const std::vector<double> x_d(x.begin() + offset, x.end()), dy_d(dy.begin() + offset, dy.end());
            reference::relu_forward(n, x_d.data(), y_ref.data());
            reference::relu_backward(n, dy_d.data(), y_ref.data(), dx_ref.data());
            const std::vector<float> y_all = d_y.download(), dx_all = d_dx.download();
            REQUIRE(count_mismatches({y_all.begin() + offset, y_all.end()}, y_ref, 0.0, 0.0, "y") == 0);
            REQUIRE(count_mismatches({dx_all.begin() + offset, dx_all.end()}, dx_ref, 0.0, 0.0, "dx") == 0);
            // … and by the pre-activation, in place (dx aliases dy): the same mask.
            relu_backward(d_dy.get() + offset, d_x.get() + offset, d_dy.get() + offset, n);
            const std::vector<float> in_place = d_dy.download();
            REQUIRE(count_mismatches({in_place.begin() + offset, in_place.end()}, dx_ref, 0.0, 0.0, "dx in place") ==
                    0);
            // relu_forward in place.
            relu_forward(d_x.get() + offset, d_x.get() + offset, n);
            const std::vector<float> x_in_place = d_x.download();
            REQUIRE(count_mismatches({x_in_place.begin() + offset, x_in_place.end()}, y_ref, 0.0, 0.0, "y in place") ==
                    0);
        }
    }
}
