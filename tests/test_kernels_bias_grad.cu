// tests/test_kernels_bias_grad.cu — the bias gradient (column sums over the batch), one-pass and two-pass, against
// the float64 reference: awkward sizes, padded rows, beta, bitwise reproducibility, and the workspace contract.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/reference_ops.h"
#include "kernels/bias_grad.cuh"

using test_support::count_mismatches;
using test_support::DeviceBuffer;

namespace {

std::vector<double> to_double(const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
}

// A float column sum of `rows` values in [-1, 1]: each addition rounds relative to a partial sum of at most `rows`
// in magnitude; a missing or doubled row is off by up to 1 instead.
double sum_tolerance(int rows) {
    return 4.0 * std::numeric_limits<float>::epsilon() * rows + 1e-7;
}

}  // namespace

TEST_CASE("bias_grad column sums match the reference and are bitwise reproducible", "[kernels][bias_grad]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    struct Shape {
        int rows, cols, ldy;
    };
    for (Shape s : {Shape{1, 1, 1}, Shape{97, 1024, 1024}, Shape{1024, 10, 10}, Shape{33, 65, 67}, Shape{0, 5, 5},
                    Shape{31, 31, 32}}) {
        INFO("rows=" << s.rows << " cols=" << s.cols << " ldy=" << s.ldy);
        const std::vector<float> dy = test_support::random_floats(rng, static_cast<size_t>(s.rows) * s.ldy + 1);
        DeviceBuffer<float> d_dy(dy), d_db(s.cols + 1), d_db2(s.cols + 1);
        bias_grad(d_dy.get(), d_db.get(), s.rows, s.cols, s.ldy);
        bias_grad(d_dy.get(), d_db2.get(), s.rows, s.cols, s.ldy);
        std::vector<double> ref(s.cols);
        const std::vector<double> dy_d = to_double(dy);
        reference::bias_grad(s.rows, s.cols, dy_d.data(), s.ldy, ref.data());
        std::vector<float> got = d_db.download();
        const std::vector<float> again = d_db2.download();
        REQUIRE(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)) == 0);
        REQUIRE(std::isnan(got.back()));  // nothing written past cols
        got.pop_back();
        REQUIRE(count_mismatches(got, ref, sum_tolerance(s.rows), 1e-6, "db") == 0);
    }
}

TEST_CASE("bias_grad with beta accumulates into the existing gradient", "[kernels][bias_grad]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int rows = 50, cols = 70;
    const std::vector<float> dy = test_support::random_floats(rng, rows * cols);
    const std::vector<float> db0 = test_support::random_floats(rng, cols);
    DeviceBuffer<float> d_dy(dy), d_db(db0);
    bias_grad(d_dy.get(), d_db.get(), rows, cols, cols, /*beta=*/0.5f);
    std::vector<double> ref(cols);
    const std::vector<double> dy_d = to_double(dy);
    reference::bias_grad(rows, cols, dy_d.data(), cols, ref.data());
    for (int c = 0; c < cols; ++c) ref[c] += 0.5 * db0[c];
    REQUIRE(count_mismatches(d_db.download(), ref, 1e-5, 1e-6, "db") == 0);
}

// 1, 10 and 1024 columns (one partial block of 32, the output layer, a hidden layer) × 1, 127 and 60000 rows (one
// row, one partial chunk of 256, the whole MNIST training set: 235 chunks), rows padded for some. The workspace is
// exactly bias_grad_workspace_floats and starts as NaN (DeviceBuffer's poison): pass 1 must write every partial
// that pass 2 reads. Two runs must give the same bits.
TEST_CASE("bias_grad_two_pass matches the reference and is bitwise reproducible up to 60000 rows",
          "[kernels][bias_grad]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (int rows : {1, 127, 60000}) {
        for (int cols : {1, 10, 1024}) {
            const int ldy = cols == 10 ? 13 : cols;  // a padded row for the 10-wide case
            INFO("rows=" << rows << " cols=" << cols << " ldy=" << ldy);
            const std::vector<float> dy = test_support::random_floats(rng, static_cast<size_t>(rows) * ldy);
            const size_t workspace_floats = bias_grad_workspace_floats(rows, cols);
            DeviceBuffer<float> d_dy(dy), d_db(cols + 1), d_db2(cols + 1), workspace(workspace_floats);
            bias_grad_two_pass(d_dy.get(), d_db.get(), rows, cols, ldy, 0.0f, workspace.get(), workspace_floats);
            workspace.poison();
            bias_grad_two_pass(d_dy.get(), d_db2.get(), rows, cols, ldy, 0.0f, workspace.get(), workspace_floats);
            std::vector<float> got = d_db.download();
            const std::vector<float> again = d_db2.download();
            REQUIRE(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)) == 0);
            REQUIRE(std::isnan(got.back()));  // nothing written past cols
            got.pop_back();
            std::vector<double> ref(cols);
            reference::bias_grad(rows, cols, to_double(dy).data(), ldy, ref.data());
            REQUIRE(count_mismatches(got, ref, sum_tolerance(rows), 1e-6, "db") == 0);
        }
    }
}

TEST_CASE("bias_grad_two_pass with beta accumulates and zero rows leave beta times db", "[kernels][bias_grad]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (int rows : {0, 300}) {
        INFO("rows=" << rows);
        const int cols = 70;
        const std::vector<float> dy = test_support::random_floats(rng, static_cast<size_t>(rows) * cols + 1);
        const std::vector<float> db0 = test_support::random_floats(rng, cols);
        const size_t workspace_floats = bias_grad_workspace_floats(rows, cols);
        DeviceBuffer<float> d_dy(dy), d_db(db0), workspace(workspace_floats);
        bias_grad_two_pass(d_dy.get(), d_db.get(), rows, cols, cols, 0.5f, rows == 0 ? nullptr : workspace.get(),
                           workspace_floats);
        std::vector<double> ref(cols);
        reference::bias_grad(rows, cols, to_double(dy).data(), cols, ref.data());
        for (int c = 0; c < cols; ++c) ref[c] += 0.5 * db0[c];
        REQUIRE(count_mismatches(d_db.download(), ref, 1e-5, 1e-6, "db") == 0);
    }
}

// Host-side checks only: nothing is launched.
TEST_CASE("bias_grad_two_pass sizes its workspace and rejects one that is too small", "[kernels][bias_grad]") {
    CHECK(bias_grad_workspace_floats(0, 10) == 0);
    CHECK(bias_grad_workspace_floats(1, 10) == 10);
    CHECK(bias_grad_workspace_floats(256, 10) == 10);
    CHECK(bias_grad_workspace_floats(257, 10) == 20);
    CHECK(bias_grad_workspace_floats(60000, 1024) == 235 * 1024);
    float* p = reinterpret_cast<float*>(uintptr_t{256});
    const size_t needed = bias_grad_workspace_floats(1000, 64);
    REQUIRE_THROWS_AS(bias_grad_two_pass(p, p, 1000, 64, 64, 0.0f, p, needed - 1), std::invalid_argument);
    REQUIRE_THROWS_AS(bias_grad_two_pass(p, p, 1000, 64, 64, 0.0f, nullptr, needed), std::invalid_argument);
    REQUIRE_THROWS_AS(bias_grad_two_pass(p, p, 1000, 64, 63, 0.0f, p, needed), std::invalid_argument);
    REQUIRE_THROWS_AS(bias_grad_two_pass(p, p, -1, 64, 64, 0.0f, p, needed), std::invalid_argument);
    try {
        bias_grad_two_pass(p, p, 1000, 64, 64, 0.0f, p, 10);
        FAIL("no exception");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("256") != std::string::npos);  // names the size it needs: 4 · 64
    }
}
