// tests/test_kernels_optimizers.cu — SGD with momentum and AdamW, several steps, against the float64
// reference, at sizes that exercise the float4 body and the element-wise tail, aligned and misaligned.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <vector>

#include "common/reference_ops.h"
#include "kernels/optimizers.cuh"

using test_support::count_mismatches;
using test_support::DeviceBuffer;

namespace {

std::vector<float> slice(const std::vector<float>& v, int offset) {
    return {v.begin() + offset, v.end()};
}
std::vector<double> to_double(const std::vector<float>& v, int offset) {
    return {v.begin() + offset, v.end()};
}

}  // namespace

TEST_CASE("sgd_momentum_step matches the reference over several steps", "[kernels][optimizers]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (size_t n : {size_t{1}, size_t{7}, size_t{1003}, size_t{784 * 16}}) {
        for (int offset : {0, 1}) {
            for (float weight_decay : {0.0f, 5e-4f}) {
                INFO("n=" << n << " offset=" << offset << " weight_decay=" << weight_decay);
                const SgdParams h{0.05f, 0.9f, weight_decay};
                const std::vector<float> p0 = test_support::random_floats(rng, n + offset);
                // Velocity starts non-zero, as it is after the first step.
                const std::vector<float> v0 = test_support::random_floats(rng, n + offset, -0.1f, 0.1f);
                DeviceBuffer<float> d_p(p0), d_v(v0), d_g(n + offset);
                std::vector<double> p = to_double(p0, offset), v = to_double(v0, offset);
                for (int step = 0; step < 3; ++step) {
                    const std::vector<float> g = test_support::random_floats(rng, n + offset);  // fresh gradient
                    d_g.upload(g);
                    sgd_momentum_step(d_p.get() + offset, d_g.get() + offset, d_v.get() + offset, n, h);
                    const std::vector<double> g_d = to_double(g, offset);
                    reference::sgd_momentum_step(n, p.data(), g_d.data(), v.data(), h.lr, h.momentum, h.weight_decay);
                }
                REQUIRE(count_mismatches(slice(d_p.download(), offset), p, 1e-6, 1e-5, "param") == 0);
                REQUIRE(count_mismatches(slice(d_v.download(), offset), v, 1e-6, 1e-5, "velocity") == 0);
            }
        }
    }
}

TEST_CASE("adamw_step matches the reference over several steps with bias correction and weight decay",
          "[kernels][optimizers]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (size_t n : {size_t{1}, size_t{7}, size_t{1003}, size_t{784 * 16}}) {
        for (int offset : {0, 1}) {
            INFO("n=" << n << " offset=" << offset);
            const AdamWParams h{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
            const std::vector<float> p0 = test_support::random_floats(rng, n + offset);
            DeviceBuffer<float> d_p(p0), d_m(n + offset), d_v(n + offset), d_g(n + offset);
            CUDA_CHECK(cudaMemset(d_m.get(), 0, d_m.bytes()));  // Adam's moments start at zero
            CUDA_CHECK(cudaMemset(d_v.get(), 0, d_v.bytes()));
            std::vector<double> p = to_double(p0, offset), m(n, 0.0), v(n, 0.0);
            for (int step = 1; step <= 4; ++step) {
                const std::vector<float> g = test_support::random_floats(rng, n + offset);
                d_g.upload(g);
                adamw_step(d_p.get() + offset, d_g.get() + offset, d_m.get() + offset, d_v.get() + offset, n, h, step);
                const std::vector<double> g_d = to_double(g, offset);
                reference::adamw_step(n, p.data(), g_d.data(), m.data(), v.data(), h.lr, h.beta1, h.beta2, h.eps,
                                      h.weight_decay, step);
            }
            // The first steps move every parameter by ≈ lr, so compare with a tolerance well below lr.
            REQUIRE(count_mismatches(slice(d_p.download(), offset), p, 1e-6, 1e-6, "param") == 0);
            REQUIRE(count_mismatches(slice(d_m.download(), offset), m, 1e-7, 1e-5, "m") == 0);
            REQUIRE(count_mismatches(slice(d_v.download(), offset), v, 1e-8, 1e-5, "v") == 0);
        }
    }
}

TEST_CASE("adamw_step rejects step 0", "[kernels][optimizers]") {
    float* p = reinterpret_cast<float*>(uintptr_t{256});
    REQUIRE_THROWS_AS(adamw_step(p, p, p, p, 4, AdamWParams{}, 0), std::invalid_argument);
}
