// tests/test_loss_scaling.cu — dynamic loss scaling (kernels/loss_scaling.cuh, common/grad_scaler.h): the state
// machine on the host against a trajectory written out by hand; the device kernels against the host machine, the
// whole state compared bitwise after every step; the multi-tensor unscale at awkward lengths and alignments; the
// inf/NaN flag from any one element; and the mixed AdamW step skipped on overflow with every buffer unchanged.
//
// Everything here is exact: scales, unscaled gradients (one float multiply each), bias corrections (the same double
// formula) and the skipped step's buffers are compared bit for bit, so no tolerance is needed.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/grad_scaler.h"
#include "kernels/loss_scaling.cuh"
#include "kernels/optimizers.cuh"

using test_support::DeviceBuffer;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f;

uint32_t bits(float x) {
    return std::bit_cast<uint32_t>(x);
}

// Elements whose bits differ; prints the first few.
size_t count_bit_mismatches(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    REQUIRE(got.size() == want.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (bits(got[i]) == bits(want[i])) continue;
        if (mismatches++ < 5) UNSCOPED_INFO(what << "[" << i << "]: got " << got[i] << ", want " << want[i]);
    }
    return mismatches;
}
size_t count_bit_mismatches(const std::vector<__half>& got, const std::vector<__half>& want, const char* what) {
    REQUIRE(got.size() == want.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (__half_as_ushort(got[i]) == __half_as_ushort(want[i])) continue;
        if (mismatches++ < 5) {
            UNSCOPED_INFO(what << "[" << i << "]: got " << __half2float(got[i]) << ", want " << __half2float(want[i]));
        }
    }
    return mismatches;
}

GradScalerState download_state(const DeviceBuffer<GradScalerState>& d_state) {
    return d_state.download()[0];
}

// Every field, so a failure names the one that differs; then all bytes (the log included).
void require_same_state(const GradScalerState& got, const GradScalerState& want) {
    CHECK(bits(got.scale) == bits(want.scale));
    CHECK(bits(got.inv_scale) == bits(want.inv_scale));
    CHECK(got.growth_tracker == want.growth_tracker);
    CHECK(got.found_inf == want.found_inf);
    CHECK(got.step_skipped == want.step_skipped);
    CHECK(got.iteration == want.iteration);
    CHECK(got.optimizer_steps == want.optimizer_steps);
    CHECK(got.skipped_steps == want.skipped_steps);
    CHECK(bits(got.bias_correction1) == bits(want.bias_correction1));
    CHECK(bits(got.bias_correction2) == bits(want.bias_correction2));
    CHECK(got.change_count == want.change_count);
    REQUIRE(std::memcmp(&got, &want, sizeof got) == 0);
}

// The trajectory of the growth-interval-3 tests: 'c' a clean step, 'o' an overflowing one, and the scale and
// growth tracker after each step, worked out by hand from the rules in common/grad_scaler.h (start: 1024).
struct Expected {
    char kind;
    float scale;
    int tracker;
};
const std::vector<Expected>& interval3_trajectory() {
    static const std::vector<Expected> steps = {
        {'c', 1024, 1}, {'c', 1024, 2}, {'c', 2048, 0},  // three clean steps in a row: doubled
        {'o', 1024, 0},                                  // overflow: halved, tracker reset
        {'c', 1024, 1}, {'c', 1024, 2}, {'o', 512, 0},   // two clean, then an overflow: no growth, halved
        {'c', 512, 1},  {'c', 512, 2},  {'c', 1024, 0},  // the count starts again from the overflow
        {'c', 1024, 1}, {'c', 1024, 2}, {'c', 2048, 0},  // and again
        {'o', 1024, 0}, {'o', 512, 0},                   // two overflows in a row: halved twice
        {'c', 512, 1},
    };
    return steps;
}
GradScalerOptions interval3_options() {
    return GradScalerOptions{1024.0f, 2.0f, 0.5f, 3};
}

// A few gradient tensors at awkward lengths, laid out in one buffer with guard elements between them: tensors
// 0, 2, 4, ... start 16-byte aligned (the kernel's float4 path), 1, 3, 5, ... one float past that (element-wise).
struct TensorLayout {
    std::vector<size_t> offset, length;
    size_t total = 0;
};
TensorLayout layout_for(const std::vector<size_t>& lengths) {
    TensorLayout l;
    size_t at = 1;  // element 0 is a guard too
    for (size_t n : lengths) {
        at = (at + 4) / 4 * 4 + l.offset.size() % 2;  // at least one guard before each tensor
        l.offset.push_back(at);
        l.length.push_back(n);
        at += n;
    }
    at += 1;  // and one after the last
    l.total = at;
    return l;
}
std::vector<GradientTensor> tensors_in(float* base, const TensorLayout& l) {
    std::vector<GradientTensor> tensors;
    for (size_t t = 0; t < l.offset.size(); ++t) tensors.push_back({base + l.offset[t], l.length[t]});
    return tensors;
}
bool inside_a_tensor(const TensorLayout& l, size_t i) {
    for (size_t t = 0; t < l.offset.size(); ++t) {
        if (i >= l.offset[t] && i < l.offset[t] + l.length[t]) return true;
    }
    return false;
}

constexpr float kGuard = 12345.0f;  // what the guards hold: must come back unchanged

// Random gradients of size ~scale in the tensors (never zero), kGuard elsewhere.
std::vector<float> fill(std::mt19937_64& rng, const TensorLayout& l, float scale) {
    std::vector<float> values = test_support::random_floats(rng, l.total, 0.25f * scale, scale);
    std::uniform_int_distribution<int> coin(0, 1);
    for (size_t i = 0; i < l.total; ++i)
        values[i] = inside_a_tensor(l, i) ? (coin(rng) ? values[i] : -values[i]) : kGuard;
    return values;
}

// The host side of unscale_and_check on the same buffer: every tensor through the reference.
void reference_unscale(GradScalerReference& ref, std::vector<float>& values, const TensorLayout& l) {
    for (size_t t = 0; t < l.offset.size(); ++t) ref.unscale_and_check(values.data() + l.offset[t], l.length[t]);
}

const std::vector<size_t> kAwkwardLengths = {1, 7, 10, 784 * 10 + 3, 1003, 4, 1024, 1025, 2};

}  // namespace

TEST_CASE("GradScalerReference follows the hand-written scale trajectory with a growth interval of 3",
          "[loss_scaling]") {
    GradScalerReference ref(interval3_options());
    REQUIRE(ref.state().scale == 1024.0f);
    REQUIRE(ref.state().step_skipped == 1);  // nothing to apply before the first update
    int clean = 0, overflowed = 0;
    for (size_t s = 0; s < interval3_trajectory().size(); ++s) {
        const Expected& e = interval3_trajectory()[s];
        INFO("step " << s << " (" << e.kind << ")");
        std::vector<float> g = {0.5f, -2.0f, 3.0f};
        if (e.kind == 'o') g[s % 3] = (s % 2) ? kInf : kNaN;
        ref.unscale_and_check(g.data(), g.size());
        REQUIRE(ref.state().found_inf == (e.kind == 'o' ? 1 : 0));
        ref.update(kBeta1, kBeta2);
        (e.kind == 'c' ? clean : overflowed) += 1;
        const GradScalerState& st = ref.state();
        REQUIRE(st.scale == e.scale);
        REQUIRE(st.growth_tracker == e.tracker);
        REQUIRE(st.found_inf == 0);  // consumed by the update
        REQUIRE(st.step_skipped == (e.kind == 'o' ? 1 : 0));
        REQUIRE(st.iteration == static_cast<int>(s) + 1);
        REQUIRE(st.optimizer_steps == clean);
        REQUIRE(st.skipped_steps == overflowed);
        REQUIRE(st.bias_correction1 == static_cast<float>(1.0 - std::pow(static_cast<double>(kBeta1), clean)));
        REQUIRE(st.bias_correction2 == static_cast<float>(1.0 - std::pow(static_cast<double>(kBeta2), clean)));
    }
    // The changes, in order: (step index, old, new, grew).
    const std::vector<ScaleChange> want = {{2, 1024, 2048, 1}, {3, 2048, 1024, 0},  {6, 1024, 512, 0},
                                           {9, 512, 1024, 1},  {12, 1024, 2048, 1}, {13, 2048, 1024, 0},
                                           {14, 1024, 512, 0}};
    REQUIRE(ref.state().change_count == static_cast<int>(want.size()));
    for (size_t k = 0; k < want.size(); ++k) {
        INFO("change " << k);
        const ScaleChange& c = ref.state().changes[k];
        REQUIRE(c.iteration == want[k].iteration);
        REQUIRE(c.old_scale == want[k].old_scale);
        REQUIRE(c.new_scale == want[k].new_scale);
        REQUIRE(c.grew == want[k].grew);
    }
}

TEST_CASE("the device scaler matches GradScalerReference bitwise after every step of the interval-3 trajectory",
          "[loss_scaling]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const TensorLayout layout = layout_for(kAwkwardLengths);
    DeviceBuffer<GradScalerState> d_state(1);  // poisoned: init must write every byte
    DeviceBuffer<float> d_grads(layout.total);
    const std::vector<GradientTensor> tensors = tensors_in(d_grads.get(), layout);
    init_grad_scaler(d_state.get(), interval3_options());
    GradScalerReference ref(interval3_options());
    require_same_state(download_state(d_state), ref.state());

    std::uniform_int_distribution<size_t> pick_tensor(0, layout.offset.size() - 1);
    for (size_t s = 0; s < interval3_trajectory().size(); ++s) {
        const Expected& e = interval3_trajectory()[s];
        INFO("step " << s << " (" << e.kind << ")");
        std::vector<float> g = fill(rng, layout, ref.state().scale);  // gradients of a scaled loss
        if (e.kind == 'o') {
            const size_t t = pick_tensor(rng);
            std::uniform_int_distribution<size_t> pick_element(0, layout.length[t] - 1);
            g[layout.offset[t] + pick_element(rng)] = (s % 2) ? -kInf : kNaN;
        }
        d_grads.upload(g);
        unscale_and_check(tensors.data(), static_cast<int>(tensors.size()), d_state.get());
        reference_unscale(ref, g, layout);
        REQUIRE(count_bit_mismatches(d_grads.download(), g, "unscaled gradient") == 0);
        require_same_state(download_state(d_state), ref.state());  // found_inf raised, nothing else changed

        update_grad_scaler(d_state.get(), interval3_options(), kBeta1, kBeta2);
        ref.update(kBeta1, kBeta2);
        require_same_state(download_state(d_state), ref.state());
        REQUIRE(ref.state().scale == e.scale);
    }
}

TEST_CASE("with the default options the scale grows exactly after 2000 clean steps, device and host alike",
          "[loss_scaling]") {
    REQUIRE_DEVICE();
    const GradScalerOptions defaults;
    REQUIRE(defaults.init_scale == 65536.0f);
    REQUIRE(defaults.growth_interval == 2000);
    DeviceBuffer<GradScalerState> d_state(1);
    init_grad_scaler(d_state.get(), defaults);
    GradScalerReference ref(defaults);
    // Steps without an unscale launch: found_inf stays 0, so every step is clean. Every step's bias corrections are
    // compared too (computed by the device's double pow, against the host's).
    for (int step = 1; step <= 2001; ++step) {
        update_grad_scaler(d_state.get(), defaults, kBeta1, kBeta2);
        ref.update(kBeta1, kBeta2);
        const GradScalerState got = download_state(d_state);
        INFO("step " << step);
        if (std::memcmp(&got, &ref.state(), sizeof got) != 0) require_same_state(got, ref.state());
        REQUIRE(got.scale == (step < 2000 ? 65536.0f : 131072.0f));
    }
    const GradScalerState st = ref.state();
    REQUIRE(st.growth_tracker == 1);
    REQUIRE(st.optimizer_steps == 2001);
    REQUIRE(st.change_count == 1);
    REQUIRE(st.changes[0].iteration == 1999);  // the 2000th update (counted from 0)
    REQUIRE(st.changes[0].old_scale == 65536.0f);
    REQUIRE(st.changes[0].new_scale == 131072.0f);
    REQUIRE(st.changes[0].grew == 1);
}

TEST_CASE("the change log keeps the first 64 changes and the scale never grows to inf", "[loss_scaling]") {
    REQUIRE_DEVICE();
    SECTION("70 overflows in a row") {
        const GradScalerOptions o;  // 2^16, halved 70 times: 2^-54, still a normal float
        DeviceBuffer<GradScalerState> d_state(1);
        DeviceBuffer<float> d_grad(std::vector<float>{1.0f, kInf, 2.0f});
        const GradientTensor tensor{d_grad.get(), 3};
        init_grad_scaler(d_state.get(), o);
        GradScalerReference ref(o);
        for (int step = 0; step < 70; ++step) {
            d_grad.upload({1.0f, kInf, 2.0f});
            unscale_and_check(&tensor, 1, d_state.get());
            update_grad_scaler(d_state.get(), o, kBeta1, kBeta2);
            std::vector<float> g = {1.0f, kInf, 2.0f};
            ref.unscale_and_check(g.data(), g.size());
            ref.update(kBeta1, kBeta2);
        }
        const GradScalerState got = download_state(d_state);
        require_same_state(got, ref.state());
        REQUIRE(got.scale == std::ldexp(1.0f, -54));
        REQUIRE(got.change_count == 70);
        REQUIRE(got.skipped_steps == 70);
        REQUIRE(got.optimizer_steps == 0);
        REQUIRE(got.changes[63].iteration == 63);  // the 64th change is the last one kept
        REQUIRE(got.changes[63].old_scale == std::ldexp(1.0f, -47));
        REQUIRE(got.changes[63].new_scale == std::ldexp(1.0f, -48));
        REQUIRE(got.changes[63].grew == 0);
    }
    SECTION("growth from 2^127 would overflow: the scale stays") {
        const GradScalerOptions o{std::ldexp(1.0f, 127), 2.0f, 0.5f, 1};
        DeviceBuffer<GradScalerState> d_state(1);
        init_grad_scaler(d_state.get(), o);
        GradScalerReference ref(o);
        for (int step = 0; step < 3; ++step) {
            update_grad_scaler(d_state.get(), o, kBeta1, kBeta2);
            ref.update(kBeta1, kBeta2);
        }
        const GradScalerState got = download_state(d_state);
        require_same_state(got, ref.state());
        REQUIRE(got.scale == std::ldexp(1.0f, 127));
        REQUIRE(got.growth_tracker == 0);  // reset even though the scale did not grow, as PyTorch does
        REQUIRE(got.change_count == 0);
    }
}

TEST_CASE("unscale_and_check multiplies every tensor by inv_scale exactly and touches nothing else", "[loss_scaling]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const TensorLayout layout = layout_for(kAwkwardLengths);
    // 2^16 and 2^-3: inv_scale exact; 3 and 1000: float(1 / double(scale)) is rounded, and must be PyTorch's.
    for (float scale : {65536.0f, 0.125f, 3.0f, 1000.0f}) {
        INFO("scale=" << scale);
        const GradScalerOptions o{scale, 2.0f, 0.5f, 2000};
        DeviceBuffer<GradScalerState> d_state(1);
        DeviceBuffer<float> d_grads(layout.total);
        init_grad_scaler(d_state.get(), o);
        std::vector<float> g = fill(rng, layout, scale);
        d_grads.upload(g);
        const std::vector<GradientTensor> tensors = tensors_in(d_grads.get(), layout);
        unscale_and_check(tensors.data(), static_cast<int>(tensors.size()), d_state.get());

        const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale));
        for (size_t i = 0; i < g.size(); ++i) {
            if (inside_a_tensor(layout, i)) g[i] *= inv_scale;  // the guards keep kGuard
        }
        REQUIRE(count_bit_mismatches(d_grads.download(), g, "gradient") == 0);
        REQUIRE(download_state(d_state).found_inf == 0);
    }
}

TEST_CASE("unscale_and_check with more than 64 tensors unscales each once and keeps found_inf across launches",
          "[loss_scaling]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    std::vector<size_t> lengths;
    for (size_t t = 0; t < 70; ++t) lengths.push_back(t % 9 + 1 + (t == 40 ? 2000 : 0));
    const TensorLayout layout = layout_for(lengths);
    const GradScalerOptions o{4096.0f, 2.0f, 0.5f, 2000};
    const float inv_scale = 1.0f / 4096.0f;
    DeviceBuffer<GradScalerState> d_state(1);
    DeviceBuffer<float> d_grads(layout.total);
    std::vector<GradientTensor> tensors = tensors_in(d_grads.get(), layout);
    tensors.insert(tensors.begin() + 10, GradientTensor{nullptr, 0});  // an empty tensor: no blocks, no access

    SECTION("all finite") {
        init_grad_scaler(d_state.get(), o);
        std::vector<float> g = fill(rng, layout, 4096.0f);
        d_grads.upload(g);
        unscale_and_check(tensors.data(), static_cast<int>(tensors.size()), d_state.get());
        for (size_t i = 0; i < g.size(); ++i) {
            if (inside_a_tensor(layout, i)) g[i] *= inv_scale;  // once: a second multiply would change the bits
        }
        REQUIRE(count_bit_mismatches(d_grads.download(), g, "gradient") == 0);
        REQUIRE(download_state(d_state).found_inf == 0);
    }
    for (size_t bad_tensor : {size_t{0}, size_t{69}}) {  // in the first launch's tensors, in the second's
        DYNAMIC_SECTION("inf in tensor " << bad_tensor) {
            init_grad_scaler(d_state.get(), o);
            std::vector<float> g = fill(rng, layout, 4096.0f);
            g[layout.offset[bad_tensor]] = kInf;
            d_grads.upload(g);
            unscale_and_check(tensors.data(), static_cast<int>(tensors.size()), d_state.get());
            REQUIRE(download_state(d_state).found_inf == 1);
        }
    }
}

TEST_CASE("a single inf or NaN anywhere raises found_inf, and the update clears it and backs off", "[loss_scaling]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const TensorLayout layout = layout_for(kAwkwardLengths);
    // Tensor 2 (10 elements) and tensor 4 (1003) are aligned: a float4 body and a tail; tensor 3 (7843) is not.
    const size_t last = layout.offset.size() - 1, big = 3;
    REQUIRE(layout.offset[4] % 4 == 0);
    struct Place {
        const char* name;
        size_t index;
    };
    const std::vector<Place> places = {
        {"first element of the first tensor", layout.offset[0]},
        {"last element of the last tensor", layout.offset[last] + layout.length[last] - 1},
        {"middle of the last tensor", layout.offset[last] + layout.length[last] / 2},
        {"inside the big tensor", layout.offset[big] + 4001},
        {"last element of the big tensor", layout.offset[big] + layout.length[big] - 1},
        {"last element of the 10-element tensor", layout.offset[2] + 9},
        {"float4 lane x of the 1003-element tensor", layout.offset[4] + 500},
        {"float4 lane y of the 1003-element tensor", layout.offset[4] + 501},
        {"float4 lane z of the 1003-element tensor", layout.offset[4] + 502},
        {"float4 lane w of the 1003-element tensor", layout.offset[4] + 503},
        {"the tail of the 1003-element tensor", layout.offset[4] + 1001},
    };
    const GradScalerOptions o;
    DeviceBuffer<GradScalerState> d_state(1);
    DeviceBuffer<float> d_grads(layout.total);
    const std::vector<GradientTensor> tensors = tensors_in(d_grads.get(), layout);
    for (const Place& place : places) {
        for (float bad : {kInf, -kInf, kNaN}) {
            INFO(place.name << " = " << bad);
            init_grad_scaler(d_state.get(), o);
            std::vector<float> g = fill(rng, layout, o.init_scale);
            g[place.index] = bad;
            d_grads.upload(g);
            unscale_and_check(tensors.data(), static_cast<int>(tensors.size()), d_state.get());
            REQUIRE(download_state(d_state).found_inf == 1);
            update_grad_scaler(d_state.get(), o, kBeta1, kBeta2);
            const GradScalerState st = download_state(d_state);
            REQUIRE(st.found_inf == 0);  // cleared for the next step
            REQUIRE(st.step_skipped == 1);
            REQUIRE(st.scale == o.init_scale * 0.5f);
        }
    }
    SECTION("large but finite values do not") {
        init_grad_scaler(d_state.get(), o);
        std::vector<float> g = fill(rng, layout, o.init_scale);
        g[layout.offset[big] + 17] = std::numeric_limits<float>::max();
        g[layout.offset[last]] = -std::numeric_limits<float>::max();
        d_grads.upload(g);
        unscale_and_check(tensors.data(), static_cast<int>(tensors.size()), d_state.get());
        REQUIRE(download_state(d_state).found_inf == 0);
    }
}

TEST_CASE("an inf gradient skips adamw_step_mixed bitwise while the scale backs off, and clean steps match adamw_step",
          "[loss_scaling][optimizers]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const AdamWParams h{1e-3f, kBeta1, kBeta2, 1e-8f, 0.01f};
    const GradScalerOptions o;
    for (size_t n : {size_t{1}, size_t{10}, size_t{784 * 10 + 3}}) {
        INFO("n=" << n);
        const std::vector<float> p0 = test_support::random_floats(rng, n);
        DeviceBuffer<float> d_master(p0), d_m(n), d_v(n), d_grad(n);
        DeviceBuffer<__half> d_working(n);  // poisoned: the first clean step must write all of it
        DeviceBuffer<float> r_param(p0), r_m(n), r_v(n), r_grad(n);  // the same steps through adamw_step
        for (float* p : {d_m.get(), d_v.get(), r_m.get(), r_v.get()}) CUDA_CHECK(cudaMemset(p, 0, n * sizeof(float)));
        DeviceBuffer<GradScalerState> d_state(1);
        DeviceBuffer<unsigned long long> d_counters(2);
        CUDA_CHECK(cudaMemset(d_counters.get(), 0, d_counters.bytes()));
        init_grad_scaler(d_state.get(), o);
        const GradientTensor tensor{d_grad.get(), n};

        // Before any update the verdict is "skip": the optimizer does nothing.
        adamw_step_mixed(d_master.get(), d_working.get(), d_grad.get(), d_m.get(), d_v.get(), n, h, d_state.get(),
                         d_counters.get());
        REQUIRE(count_bit_mismatches(d_master.download(), p0, "master before the first update") == 0);

        // Steps: clean, overflow (skipped), clean. t counts the clean ones only.
        int t = 0;
        for (bool overflow : {false, true, false}) {
            INFO("overflow=" << overflow);
            const float scale = download_state(d_state).scale;
            std::vector<float> g = test_support::random_floats(rng, n, -scale, scale);  // a scaled gradient
            if (overflow) g[n / 2] = kInf;
            d_grad.upload(g);
            const std::vector<float> master_before = d_master.download(), m_before = d_m.download(),
                                     v_before = d_v.download();
            const std::vector<__half> working_before = d_working.download();
            const std::vector<unsigned long long> counters_before = d_counters.download();

            unscale_and_check(&tensor, 1, d_state.get());
            update_grad_scaler(d_state.get(), o, h.beta1, h.beta2);
            adamw_step_mixed(d_master.get(), d_working.get(), d_grad.get(), d_m.get(), d_v.get(), n, h, d_state.get(),
                             d_counters.get());
            const GradScalerState st = download_state(d_state);
            const std::vector<float> master = d_master.download();
            if (overflow) {
                REQUIRE(st.step_skipped == 1);
                REQUIRE(st.scale == scale * 0.5f);
                REQUIRE(st.skipped_steps == 1);
                REQUIRE(count_bit_mismatches(master, master_before, "master") == 0);
                REQUIRE(count_bit_mismatches(d_m.download(), m_before, "m") == 0);
                REQUIRE(count_bit_mismatches(d_v.download(), v_before, "v") == 0);
                REQUIRE(count_bit_mismatches(d_working.download(), working_before, "fp16 copy") == 0);
                REQUIRE(d_counters.download() == counters_before);
                continue;
            }
            ++t;
            REQUIRE(st.step_skipped == 0);
            REQUIRE(st.optimizer_steps == t);
            r_grad.upload(d_grad.download());  // the unscaled gradient
            adamw_step(r_param.get(), r_grad.get(), r_m.get(), r_v.get(), n, h, t);
            REQUIRE(count_bit_mismatches(master, r_param.download(), "master vs adamw_step") == 0);
            REQUIRE(count_bit_mismatches(d_m.download(), r_m.download(), "m vs adamw_step") == 0);
            REQUIRE(count_bit_mismatches(d_v.download(), r_v.download(), "v vs adamw_step") == 0);
            std::vector<__half> want_working(n);
            for (size_t i = 0; i < n; ++i) want_working[i] = __float2half_rn(master[i]);
            REQUIRE(count_bit_mismatches(d_working.download(), want_working, "fp16 copy") == 0);
            // The updates counter counts the master weights that moved (nearly all: each moves by about lr, unless
            // the decay and the Adam step happen to cancel), and nothing stalled (fp32 keeps every update).
            size_t changed = 0;
            for (size_t i = 0; i < n; ++i) changed += bits(master[i]) != bits(master_before[i]);
            const std::vector<unsigned long long> counters = d_counters.download();
            REQUIRE(changed > n / 2);
            REQUIRE(counters[0] == counters_before[0] + changed);
            REQUIRE(counters[1] == 0);
        }
    }
}

TEST_CASE("the scaler and mixed-step launchers reject bad arguments", "[loss_scaling]") {
    GradScalerState* state = reinterpret_cast<GradScalerState*>(uintptr_t{256});  // never dereferenced
    for (const GradScalerOptions& bad :
         {GradScalerOptions{0.0f, 2.0f, 0.5f, 2000}, GradScalerOptions{kInf, 2.0f, 0.5f, 2000},
          GradScalerOptions{kNaN, 2.0f, 0.5f, 2000}, GradScalerOptions{65536.0f, 1.0f, 0.5f, 2000},
          GradScalerOptions{65536.0f, 2.0f, 1.0f, 2000}, GradScalerOptions{65536.0f, 2.0f, 0.0f, 2000},
          GradScalerOptions{65536.0f, 2.0f, 0.5f, 0}}) {
        REQUIRE_THROWS_AS(init_grad_scaler(state, bad), std::invalid_argument);
        REQUIRE_THROWS_AS(update_grad_scaler(state, bad, kBeta1, kBeta2), std::invalid_argument);
        REQUIRE_THROWS_AS(GradScalerReference(bad), std::invalid_argument);
    }
    REQUIRE_THROWS_AS(init_grad_scaler(nullptr, GradScalerOptions{}), std::invalid_argument);
    REQUIRE_THROWS_AS(update_grad_scaler(state, GradScalerOptions{}, 1.0f, kBeta2), std::invalid_argument);
    REQUIRE_THROWS_AS(update_grad_scaler(state, GradScalerOptions{}, kBeta1, -0.5f), std::invalid_argument);
    const GradientTensor null_data{nullptr, 5};
    REQUIRE_THROWS_AS(unscale_and_check(&null_data, 1, state), std::invalid_argument);
    REQUIRE_THROWS_AS(unscale_and_check(&null_data, -1, state), std::invalid_argument);
    REQUIRE_THROWS_AS(unscale_and_check(&null_data, 1, nullptr), std::invalid_argument);
    float* p = reinterpret_cast<float*>(uintptr_t{256});
    REQUIRE_THROWS_AS(adamw_step_mixed(p, nullptr, p, p, p, 4, AdamWParams{}, state, nullptr), std::invalid_argument);
    REQUIRE_THROWS_AS(adamw_step_mixed(p, reinterpret_cast<__half*>(p), p, p, p, 4, AdamWParams{}, nullptr, nullptr),
                      std::invalid_argument);
}
