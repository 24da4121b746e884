// tests/test_kernels_optimizers.cu — SGD with momentum and AdamW, several steps, against the float64
// reference, at sizes that exercise the float4 body and the element-wise tail, aligned and misaligned. Then lesson
// 05's AdamW kernel: bitwise adamw_step for fp32 (counted and mixed, the fp16 copy of the master), fp16 weights
// against the reference up to fp16 rounding, and the update/stall counters on cases built to stall or not.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/grad_scaler.h"
#include "common/reference_ops.h"
#include "kernels/loss_scaling.cuh"  // init_grad_scaler, update_grad_scaler: the mixed step's state
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

// ---- lesson 05: adamw_step_counted / adamw_step_mixed (the templated kernel behind them) ------------------------

namespace {

uint32_t float_bits(float x) {
    return std::bit_cast<uint32_t>(x);
}
size_t count_bit_mismatches(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    REQUIRE(got.size() == want.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (float_bits(got[i]) == float_bits(want[i])) continue;
        if (mismatches++ < 5) UNSCOPED_INFO(what << "[" << i << "]: got " << got[i] << ", want " << want[i]);
    }
    return mismatches;
}
std::vector<__half> to_half(const std::vector<float>& v) {
    std::vector<__half> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = __float2half_rn(v[i]);
    return h;
}
std::vector<float> widen(const std::vector<__half>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = __half2float(v[i]);
    return f;
}
float value_of(float x) {
    return x;
}
float value_of(__half x) {
    return __half2float(x);
}
template <typename T>
std::vector<T> random_values(std::mt19937_64& rng, size_t n) {
    const std::vector<float> f = test_support::random_floats(rng, n);
    if constexpr (std::is_same_v<T, float>) {
        return f;
    } else {
        return to_half(f);
    }
}

}  // namespace

TEST_CASE("adamw_step_counted with float weights gives adamw_step's bits and counts the weights that changed",
          "[kernels][optimizers]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (size_t n : {size_t{1}, size_t{7}, size_t{10}, size_t{1003}, size_t{784 * 16 + 3}}) {
        for (int offset : {0, 1}) {
            for (bool count : {false, true}) {
                INFO("n=" << n << " offset=" << offset << " counters=" << count);
                const AdamWParams h{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
                const std::vector<float> p0 = test_support::random_floats(rng, n + offset);
                DeviceBuffer<float> d_p(p0), d_m(n + offset), d_v(n + offset), d_g(n + offset);
                DeviceBuffer<float> r_p(p0), r_m(n + offset), r_v(n + offset);  // the same steps through adamw_step
                for (float* x : {d_m.get(), d_v.get(), r_m.get(), r_v.get()}) {
                    CUDA_CHECK(cudaMemset(x, 0, (n + offset) * sizeof(float)));
                }
                DeviceBuffer<unsigned long long> d_counters(2);
                CUDA_CHECK(cudaMemset(d_counters.get(), 0, d_counters.bytes()));
                unsigned long long changed = 0;
                for (int step = 1; step <= 3; ++step) {
                    d_g.upload(test_support::random_floats(rng, n + offset));
                    const std::vector<float> before = d_p.download();
                    adamw_step_counted(d_p.get() + offset, d_g.get() + offset, d_m.get() + offset, d_v.get() + offset,
                                       n, h, step, count ? d_counters.get() : nullptr);
                    adamw_step(r_p.get() + offset, d_g.get() + offset, r_m.get() + offset, r_v.get() + offset, n, h,
                               step);
                    const std::vector<float> after = d_p.download();
                    for (size_t i = offset; i < n + offset; ++i)
                        changed += float_bits(after[i]) != float_bits(before[i]);
                }
                REQUIRE(count_bit_mismatches(d_p.download(), r_p.download(), "param") == 0);
                REQUIRE(count_bit_mismatches(d_m.download(), r_m.download(), "m") == 0);
                REQUIRE(count_bit_mismatches(d_v.download(), r_v.download(), "v") == 0);
                const std::vector<unsigned long long> counters = d_counters.download();
                REQUIRE(counters[0] == (count ? changed : 0));
                REQUIRE(counters[1] == 0);  // an fp32 weight stores exactly what was computed
                REQUIRE(changed > 0);
            }
        }
    }
}

TEST_CASE("adamw_step_mixed gives adamw_step's bits on the master and writes its fp16 copy", "[kernels][optimizers]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const GradScalerOptions scaling;
    for (size_t n : {size_t{1}, size_t{7}, size_t{10}, size_t{1003}, size_t{784 * 16 + 3}}) {
        for (int offset : {0, 1}) {  // 1: every pointer misaligned, the element-wise path
            INFO("n=" << n << " offset=" << offset);
            const AdamWParams h{2e-3f, 0.8f, 0.99f, 1e-8f, 0.05f};
            const std::vector<float> p0 = test_support::random_floats(rng, n + offset);
            DeviceBuffer<float> d_p(p0), d_m(n + offset), d_v(n + offset), d_g(n + offset);
            DeviceBuffer<float> r_p(p0), r_m(n + offset), r_v(n + offset);
            for (float* x : {d_m.get(), d_v.get(), r_m.get(), r_v.get()}) {
                CUDA_CHECK(cudaMemset(x, 0, (n + offset) * sizeof(float)));
            }
            DeviceBuffer<__half> d_working(n + offset);  // poisoned: NaN until the kernel writes it
            DeviceBuffer<GradScalerState> d_state(1);
            init_grad_scaler(d_state.get(), scaling);
            for (int step = 1; step <= 3; ++step) {
                d_g.upload(test_support::random_floats(rng, n + offset));
                // No unscale launch: found_inf stays clear and the update takes a clean step with t = step.
                update_grad_scaler(d_state.get(), scaling, h.beta1, h.beta2);
                adamw_step_mixed(d_p.get() + offset, d_working.get() + offset, d_g.get() + offset, d_m.get() + offset,
                                 d_v.get() + offset, n, h, d_state.get(), nullptr);
                adamw_step(r_p.get() + offset, d_g.get() + offset, r_m.get() + offset, r_v.get() + offset, n, h, step);
            }
            const std::vector<float> master = d_p.download();
            REQUIRE(count_bit_mismatches(master, r_p.download(), "master") == 0);
            REQUIRE(count_bit_mismatches(d_m.download(), r_m.download(), "m") == 0);
            REQUIRE(count_bit_mismatches(d_v.download(), r_v.download(), "v") == 0);
            const std::vector<__half> working = d_working.download();
            size_t mismatches = 0;
            for (size_t i = offset; i < n + offset; ++i) {
                mismatches += __half_as_ushort(working[i]) != __half_as_ushort(__float2half_rn(master[i]));
            }
            REQUIRE(mismatches == 0);
            if (offset == 1) REQUIRE((__half_as_ushort(working[0]) & 0x7fff) > 0x7c00);  // before the range: still NaN
        }
    }
}

// fp16-pure (Grad = __half) and fp16-weights (Grad = float): fp32 arithmetic, the weight rounded back to half.
// Each step is compared with the float64 reference run from the kernel's own previous state, so rounding does not
// accumulate between the two. Tolerances: the stored weight is within half's unit roundoff 2^-11 (relative) of the
// fp32 result, or 2^-25 (absolute) among subnormal halves; the fp32 result is within a few 2^-24 (relative) of the
// exact one, plus the update's relative error (≤ 1e-5, the m and v tolerance) times its size lr.
TEMPLATE_TEST_CASE("adamw_step_counted on fp16 weights matches the reference up to fp16 rounding",
                   "[kernels][optimizers]", __half, float) {
    using Grad = TestType;
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (size_t n : {size_t{1}, size_t{7}, size_t{1003}, size_t{784 * 10 + 3}}) {
        INFO("n=" << n);
        const AdamWParams h{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
        DeviceBuffer<__half> d_p(random_values<__half>(rng, n));
        DeviceBuffer<Grad> d_g(n);
        DeviceBuffer<float> d_m(n), d_v(n);
        CUDA_CHECK(cudaMemset(d_m.get(), 0, d_m.bytes()));
        CUDA_CHECK(cudaMemset(d_v.get(), 0, d_v.bytes()));
        for (int step = 1; step <= 3; ++step) {
            INFO("step=" << step);
            const std::vector<Grad> g = random_values<Grad>(rng, n);
            d_g.upload(g);
            std::vector<double> p, m, v, g_d;
            for (float x : widen(d_p.download())) p.push_back(x);
            for (float x : d_m.download()) m.push_back(x);
            for (float x : d_v.download()) v.push_back(x);
            for (Grad x : g) g_d.push_back(value_of(x));
            adamw_step_counted(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, h, step, nullptr);
            reference::adamw_step(n, p.data(), g_d.data(), m.data(), v.data(), h.lr, h.beta1, h.beta2, h.eps,
                                  h.weight_decay, step);
            const double half_u = std::ldexp(1.0, -11), half_subnormal = std::ldexp(1.0, -25);
            REQUIRE(count_mismatches(widen(d_p.download()), p, half_subnormal + 1e-5 * h.lr, half_u + 4 * 0x1p-24,
                                     "fp16 param") == 0);
            REQUIRE(count_mismatches(d_m.download(), m, 1e-7, 1e-5, "m") == 0);
            REQUIRE(count_mismatches(d_v.download(), v, 1e-8, 1e-5, "v") == 0);
        }
    }
}

// Half weights of 1.0: the spacing of halves is 2^-11 just below 1 and 2^-10 above, so an AdamW step of about lr =
// 1e-4 (the first step moves each weight by lr · g / (|g| + eps) ≈ ±lr, plus lr·weight_decay) is below half of it
// and rounds away; lr = 1e-2 is several units and does not. Weights of 1/16 in the same tensor have 16× finer
// halves (2^-15 below 1/16), so 1e-4 moves them. The host reference is the same fp32 formula per element.
TEMPLATE_TEST_CASE("the stall counter counts exactly the updates that round away on fp16 weights",
                   "[kernels][optimizers]", __half, float) {
    using Grad = TestType;
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (size_t n : {size_t{1}, size_t{1003}}) {  // n = 1: one block with exactly one stall
        std::vector<float> p0(n);
        size_t ones = 0;
        for (size_t i = 0; i < n; ++i) {
            p0[i] = i % 3 == 1 ? 0.0625f : 1.0f;  // 1003: 334 small weights, 669 of 1.0
            ones += p0[i] == 1.0f;
        }
        const std::vector<float> g = test_support::random_floats(rng, n, 0.1f, 1.0f);
        std::vector<Grad> g_signed(n);
        for (size_t i = 0; i < n; ++i) {
            const float gi = i % 2 ? g[i] : -g[i];  // weights pushed up and down
            if constexpr (std::is_same_v<Grad, float>) {
                g_signed[i] = gi;
            } else {
                g_signed[i] = __float2half_rn(gi);
            }
        }
        for (float lr : {1e-4f, 1e-2f}) {
            INFO("n=" << n << " lr=" << lr);
            const AdamWParams h{lr, 0.9f, 0.999f, 1e-8f, 0.01f};
            DeviceBuffer<__half> d_p(to_half(p0));
            DeviceBuffer<Grad> d_g(g_signed);
            DeviceBuffer<float> d_m(n), d_v(n);
            CUDA_CHECK(cudaMemset(d_m.get(), 0, d_m.bytes()));
            CUDA_CHECK(cudaMemset(d_v.get(), 0, d_v.bytes()));
            DeviceBuffer<unsigned long long> d_counters(2);
            CUDA_CHECK(cudaMemset(d_counters.get(), 0, d_counters.bytes()));
            adamw_step_counted(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, h, 1, d_counters.get());

            // The host reference: adamw_update's formula in fp32 for step 1, then the half rounding.
            const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), 1));
            const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), 1));
            unsigned long long updates = 0, stalled = 0;
            for (size_t i = 0; i < n; ++i) {
                const float gi = value_of(g_signed[i]);
                const float m = (1.0f - h.beta1) * gi, v = (1.0f - h.beta2) * gi * gi;
                float p = p0[i];
                p -= h.lr * h.weight_decay * p;
                p -= h.lr * (m / bc1) / (std::sqrt(v / bc2) + h.eps);
                if (p - p0[i] != 0.0f) {
                    ++updates;
                    stalled += __half_as_ushort(__float2half_rn(p)) == __half_as_ushort(__float2half_rn(p0[i]));
                }
            }
            const std::vector<unsigned long long> counters = d_counters.download();
            REQUIRE(updates == n);  // every weight had a non-zero fp32 update
            REQUIRE(counters[0] == updates);
            REQUIRE(counters[1] == stalled);
            REQUIRE(stalled == (lr < 1e-3f ? ones : 0));  // with lr 1e-4: exactly the weights of 1.0
            const std::vector<float> p = widen(d_p.download());
            size_t unchanged = 0;
            for (size_t i = 0; i < n; ++i) unchanged += p[i] == p0[i];
            REQUIRE(unchanged == stalled);
        }
    }
}

TEST_CASE("the mixed step keeps the small updates that fp16 weights lose", "[kernels][optimizers]") {
    REQUIRE_DEVICE();
    // 20 steps of lr 1e-4 on weights of 1.0 with a constant gradient: AdamW moves each weight by about lr per step.
    const size_t n = 1003;
    const AdamWParams h{1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f};
    const std::vector<float> ones(n, 1.0f), g(n, 0.5f);
    DeviceBuffer<float> d_g(g), d_master(ones), d_m(n), d_v(n), d_m2(n), d_v2(n);
    DeviceBuffer<__half> d_working(n), d_half(to_half(ones));
    for (float* x : {d_m.get(), d_v.get(), d_m2.get(), d_v2.get()}) CUDA_CHECK(cudaMemset(x, 0, n * sizeof(float)));
    DeviceBuffer<GradScalerState> d_state(1);
    DeviceBuffer<unsigned long long> c_mixed(2), c_half(2);
    CUDA_CHECK(cudaMemset(c_mixed.get(), 0, c_mixed.bytes()));
    CUDA_CHECK(cudaMemset(c_half.get(), 0, c_half.bytes()));
    init_grad_scaler(d_state.get(), GradScalerOptions{});
    for (int step = 1; step <= 20; ++step) {
        update_grad_scaler(d_state.get(), GradScalerOptions{}, h.beta1, h.beta2);
        adamw_step_mixed(d_master.get(), d_working.get(), d_g.get(), d_m.get(), d_v.get(), n, h, d_state.get(),
                         c_mixed.get());
        adamw_step_counted(d_half.get(), d_g.get(), d_m2.get(), d_v2.get(), n, h, step, c_half.get());
    }
    const std::vector<float> master = d_master.download(), working = widen(d_working.download()),
                             half = widen(d_half.download());
    for (size_t i = 0; i < n; ++i) {
        INFO("i=" << i);
        REQUIRE(half[i] == 1.0f);                                    // every update rounded away
        REQUIRE(std::fabs(master[i] - (1.0f - 20 * h.lr)) < 1e-5f);  // the master kept all of them: ≈ 0.998
        REQUIRE(working[i] == __half2float(__float2half_rn(master[i])));
        REQUIRE(working[i] < 1.0f);  // and the fp16 copy shows them
    }
    const std::vector<unsigned long long> mixed = c_mixed.download(), fp16 = c_half.download();
    REQUIRE(mixed[0] == 20 * n);
    REQUIRE(mixed[1] == 0);
    REQUIRE(fp16[0] == 20 * n);
    REQUIRE(fp16[1] == 20 * n);
}

TEST_CASE("adamw_step_counted rejects step 0 and null pointers", "[kernels][optimizers]") {
    float* p = reinterpret_cast<float*>(uintptr_t{256});
    __half* hp = reinterpret_cast<__half*>(uintptr_t{256});
    REQUIRE_THROWS_AS(adamw_step_counted(p, p, p, p, 4, AdamWParams{}, 0, nullptr), std::invalid_argument);
    REQUIRE_THROWS_AS(adamw_step_counted(hp, hp, p, p, 4, AdamWParams{}, 0, nullptr), std::invalid_argument);
    REQUIRE_THROWS_AS(adamw_step_counted(hp, static_cast<const float*>(nullptr), p, p, 4, AdamWParams{}, 1, nullptr),
                      std::invalid_argument);
}
