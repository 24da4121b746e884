// tests/test_kernels_fp16.cu — the fp16 data path of lesson 05 against CPU references: normalize_pixels to halves,
// the casts, bias + ReLU and ReLU backward on halves (kernels/fp16_elementwise.cuh), the bias gradient for every
// combination of float/__half dY and db, the loss with fp16 logits and loss scaling, and count_correct on fp16
// logits. Awkward sizes (n = 1, 3, 7, 784·128 + 5; rows 1, 10, 127, 128, 129; cols 10, 784, 1024, 1023), aligned
// (16-byte path) and misaligned (element-wise path) buffers, fp16 inputs made by rounding random floats.
//
// Two kinds of check per kernel:
//   - bitwise, against the same formula evaluated on the host (cuda_fp16.h's host conversions are correctly
//     rounded: tests/test_fp16.cu checks them), or against the fp32 kernel run on the same values and rounded
//     once: this is the contract "math in fp32, one rounding at the end";
//   - within tolerance of the float64 reference (common/reference_ops.h), with the error of one fp16 rounding,
//     kHalfRel and kHalfAbs below, added to the fp32 tolerance of the kernel's fp32 counterpart.
// The fp32 instantiations are covered by the existing tests (test_kernels_elementwise, _bias_grad,
// _softmax_cross_entropy), unchanged.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/normalize_pixel.h"
#include "common/reference_ops.h"
#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/fp16_elementwise.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

using test_support::count_mismatches;
using test_support::DeviceBuffer;

namespace {

// One rounding to fp16 (round to nearest even) is off by at most half a spacing between neighbouring halves: the
// spacing is 2^-10 relative in the normal range ([2^-14, 65504]), so 2^-11 relative, and 2^-24 absolute among the
// subnormals, so 2^-25 absolute there. |ref|·kHalfRel + kHalfAbs covers both.
constexpr double kHalfRel = 0x1p-11;
constexpr double kHalfAbs = 0x1p-25;
// One rounding to fp32: 2^-24 relative.
constexpr double kFloatRel = 0x1p-24;
// Values at least this large round to ±inf in fp16 (65504 is the largest half; 65520 is halfway to 2^16).
constexpr double kHalfOverflow = 65520.0;

uint16_t bits_of(__half h) {
    return __half_as_ushort(h);
}
bool is_nan(__half h) {  // (DeviceBuffer's poison, 0xFFFF, is one)
    return (bits_of(h) & 0x7FFF) > 0x7C00;
}

std::vector<__half> to_half(const std::vector<float>& v) {
    std::vector<__half> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = __float2half_rn(v[i]);
    return h;
}
std::vector<float> to_float(const std::vector<__half>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = __half2float(v[i]);
    return f;
}
std::vector<double> to_double(const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
}

// Random floats in [lo, hi) rounded to fp16: the inputs of the fp16 path.
std::vector<__half> random_halves(std::mt19937_64& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
    return to_half(test_support::random_floats(rng, n, lo, hi));
}

// Floats spread over fp16's whole range and past it: u · 2^k, u in [-1, 1), k in [-30, 18], so that some round to
// subnormal halves, some to zero and some to ±inf.
std::vector<float> wide_range_floats(std::mt19937_64& rng, size_t n) {
    std::vector<float> v = test_support::random_floats(rng, n, -1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-30, 18);
    for (float& x : v) x = std::ldexp(x, exponent(rng));
    return v;
}

// Positions where got and want differ in any bit (NaN included); the first few are printed.
size_t count_bit_mismatches(const std::vector<__half>& got, const std::vector<__half>& want, const char* what) {
    REQUIRE(got.size() == want.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (bits_of(got[i]) == bits_of(want[i])) continue;
        if (mismatches++ < 5) {
            UNSCOPED_INFO(what << "[" << i << "]: got " << __half2float(got[i]) << " (0x" << std::hex << bits_of(got[i])
                               << "), want " << __half2float(want[i]) << " (0x" << bits_of(want[i]) << std::dec << ")");
        }
    }
    return mismatches;
}
size_t count_bit_mismatches(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    REQUIRE(got.size() == want.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
        if (mismatches++ < 5) UNSCOPED_INFO(what << "[" << i << "]: got " << got[i] << ", want " << want[i]);
    }
    return mismatches;
}

// Positions where got is not one fp16 rounding of exact: ±inf from 65520 on, else within |exact|·2^-11 + 2^-25.
size_t count_not_rounded_once(const std::vector<__half>& got, const std::vector<double>& exact, const char* what) {
    REQUIRE(got.size() == exact.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = __half2float(got[i]), e = exact[i];
        const bool ok = std::fabs(e) >= kHalfOverflow ? g == std::copysign(INFINITY, e)
                                                      : std::fabs(g - e) <= std::fabs(e) * kHalfRel + kHalfAbs;
        if (!ok && mismatches++ < 5) UNSCOPED_INFO(what << "[" << i << "]: got " << g << ", exact " << e);
    }
    return mismatches;
}

// got[offset .. offset + n) of a downloaded buffer.
template <typename T>
std::vector<T> slice(const std::vector<T>& all, size_t offset, size_t n) {
    return std::vector<T>(all.begin() + offset, all.begin() + offset + n);
}

}  // namespace

// ---- normalize_pixels → __half --------------------------------------------------------------------------------------

TEST_CASE("normalize_pixels to fp16 is fp16 of the host's normalize_pixel for any size and alignment",
          "[kernels][fp16][normalize]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t n : {size_t{1}, size_t{3}, size_t{7}, size_t{784}, size_t{784 * 128 + 5}}) {
        for (int offset : {0, 1}) {  // 1 byte / 1 half off: the element-wise path
            INFO("n=" << n << " offset=" << offset);
            std::vector<uint8_t> pixels(n + offset);
            for (auto& p : pixels) p = static_cast<uint8_t>(byte(rng));
            pixels[offset] = 0;
            pixels[n - 1 + offset] = 255;  // both ends of the range
            DeviceBuffer<uint8_t> d_pixels(pixels);
            DeviceBuffer<__half> d_out(n + offset + 1);  // + 1: check nothing is written past the end
            const float mean = offset == 0 ? kMnistMean : 0.5f, std = offset == 0 ? kMnistStd : 0.25f;
            normalize_pixels(d_pixels.get() + offset, d_out.get() + offset, n, mean, std);
            const std::vector<__half> all = d_out.download();
            const std::vector<__half> got = slice(all, offset, n);
            std::vector<__half> want(n);
            for (size_t i = 0; i < n; ++i) want[i] = __float2half_rn(normalize_pixel(pixels[offset + i], mean, std));
            REQUIRE(count_bit_mismatches(got, want, "normalized") == 0);
            // The float64 formula: the fp32 computation (a few roundings of 2^-24) plus one fp16 rounding.
            std::vector<double> ref(n);
            reference::normalize_pixels(n, pixels.data() + offset, ref.data(), mean, std);
            REQUIRE(count_mismatches(to_float(got), ref, kHalfAbs, kHalfRel + 4 * kFloatRel, "normalized") == 0);
            REQUIRE(is_nan(all.back()));
            if (offset == 1) REQUIRE(is_nan(all.front()));
        }
    }
}

TEST_CASE("normalize_pixels to fp16 is exact for all 256 pixel values", "[kernels][fp16][normalize]") {
    REQUIRE_DEVICE();
    for (int offset : {0, 1}) {
        INFO("offset=" << offset);
        std::vector<uint8_t> pixels(256 + offset, 0);
        for (int p = 0; p < 256; ++p) pixels[offset + p] = static_cast<uint8_t>(p);
        DeviceBuffer<uint8_t> d_pixels(pixels);
        DeviceBuffer<__half> d_out(256 + offset);
        normalize_pixels(d_pixels.get() + offset, d_out.get() + offset, 256);
        std::vector<__half> want(256);
        for (int p = 0; p < 256; ++p) want[p] = __float2half_rn(normalize_pixel(static_cast<uint8_t>(p)));
        REQUIRE(count_bit_mismatches(slice(d_out.download(), offset, 256), want, "pixel") == 0);
    }
}

// ---- cast_to_half -----------------------------------------------------------------------------------------------

TEST_CASE("cast_to_half rounds to nearest even and overflows to inf", "[kernels][fp16][cast]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    struct Offsets {
        int src, dst;  // elements; anything but 0 leaves the 16-byte path
    };
    for (size_t n : {size_t{1}, size_t{3}, size_t{7}, size_t{8}, size_t{9}, size_t{784 * 128 + 5}}) {
        for (Offsets o : {Offsets{0, 0}, Offsets{1, 1}, Offsets{0, 1}, Offsets{4, 0}}) {
            INFO("n=" << n << " src offset=" << o.src << " dst offset=" << o.dst);
            const std::vector<float> x = wide_range_floats(rng, n + o.src);
            DeviceBuffer<float> d_x(x);
            DeviceBuffer<__half> d_h(n + o.dst + 1);
            cast_to_half(d_x.get() + o.src, d_h.get() + o.dst, n);
            const std::vector<__half> h_all = d_h.download();
            const std::vector<__half> h = slice(h_all, o.dst, n);
            REQUIRE(is_nan(h_all.back()));  // nothing written past n

            const std::vector<float> src = slice(x, o.src, n);
            REQUIRE(count_bit_mismatches(h, to_half(src), "half") == 0);
            // Against the value itself: one fp16 rounding, or ±inf from 65520 on.
            REQUIRE(count_not_rounded_once(h, to_double(src), "half") == 0);
            size_t infinities = 0, subnormals = 0;
            for (const __half v : h) {
                const float f = __half2float(v);
                infinities += std::isinf(f);
                subnormals += f != 0.0f && std::fabs(f) < 0x1p-14f;
            }
            if (n > 1000) {  // the wide range really reached both ends of fp16
                REQUIRE(infinities > 0);
                REQUIRE(subnormals > 0);
            }
        }
    }
}

// ---- relu_backward_half ---------------------------------------------------------------------------------------------

TEST_CASE("relu_backward_half selects dy where the activation is positive, in place too",
          "[kernels][fp16][elementwise]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const __half inf = __ushort_as_half(0x7C00), minus_inf = __ushort_as_half(0xFC00);
    const __half minus_zero = __ushort_as_half(0x8000);
    for (size_t n : {size_t{1}, size_t{3}, size_t{7}, size_t{8}, size_t{9}, size_t{4099}, size_t{784 * 128 + 5}}) {
        for (int offset : {0, 1}) {
            INFO("n=" << n << " offset=" << offset);
            std::vector<__half> activation = random_halves(rng, n + offset, -2.0f, 2.0f);
            std::vector<__half> dy = random_halves(rng, n + offset, -2.0f, 2.0f);
            for (size_t i = 0; i < activation.size(); i += 7) activation[i] = __float2half_rn(0.0f);  // the boundary
            for (size_t i = 3; i < activation.size(); i += 11) activation[i] = minus_zero;
            for (size_t i = 5; i < dy.size(); i += 13) dy[i] = i % 2 ? inf : minus_inf;  // overflowed gradients
            DeviceBuffer<__half> d_dy(dy), d_act(activation), d_dx(n + offset + 1);
            relu_backward_half(d_dy.get() + offset, d_act.get() + offset, d_dx.get() + offset, n);

            // Exactly dy (its bits) where activation > 0, else +0 — a masked inf gives 0, not NaN.
            std::vector<__half> want(n);
            std::vector<double> ref(n), dy_d(n), act_d(n);
            for (size_t i = 0; i < n; ++i) {
                const float a = __half2float(activation[offset + i]);
                want[i] = a > 0.0f ? dy[offset + i] : __float2half_rn(0.0f);
                dy_d[i] = __half2float(dy[offset + i]);
                act_d[i] = a;
            }
            reference::relu_backward(n, dy_d.data(), act_d.data(), ref.data());
            const std::vector<__half> all = d_dx.download();
            const std::vector<__half> got = slice(all, offset, n);
            REQUIRE(count_bit_mismatches(got, want, "dx") == 0);
            REQUIRE(count_mismatches(to_float(got), ref, 0.0, 0.0, "dx") == 0);
            REQUIRE(is_nan(all.back()));

            // In place: dx is dy.
            relu_backward_half(d_dy.get() + offset, d_act.get() + offset, d_dy.get() + offset, n);
            REQUIRE(count_bit_mismatches(slice(d_dy.download(), offset, n), want, "dx in place") == 0);
        }
    }
}

// ---- bias_grad with fp16 dY and/or db -------------------------------------------------------------------------------

namespace {

// As tests/test_kernels_bias_grad.cu: an fp32 column sum of `rows` values in [-1, 1].
double sum_tolerance(int rows) {
    return 4.0 * std::numeric_limits<float>::epsilon() * rows + 1e-7;
}

template <typename T>
std::vector<T> as(const std::vector<__half>& h) {
    if constexpr (std::is_same_v<T, __half>) {
        return h;
    } else {
        return to_float(h);
    }
}
template <typename T>
std::vector<float> as_floats(const std::vector<T>& v) {  // exact
    if constexpr (std::is_same_v<T, __half>) {
        return to_float(v);
    } else {
        return v;
    }
}

// Runs bias_grad (two_pass = false) or bias_grad_two_pass with dY of type TY and db of type TB, on values that are
// halves (so every type holds them exactly), and checks:
//   - bitwise: the result equals the float/float kernel's on the same values, rounded once to TB (the same fixed
//     order of fp32 additions whatever the types);
//   - the float64 reference within the fp32 sum's tolerance, plus one fp16 rounding when db is __half.
template <typename TY, typename TB>
void check_bias_grad(std::mt19937_64& rng, int rows, int cols, int ldy, float beta, bool two_pass) {
    INFO("dY " << (std::is_same_v<TY, __half> ? "half" : "float") << ", db "
               << (std::is_same_v<TB, __half> ? "half" : "float") << ": rows=" << rows << " cols=" << cols
               << " ldy=" << ldy << " beta=" << beta << (two_pass ? " two-pass" : " one-pass"));
    const std::vector<__half> dy = random_halves(rng, static_cast<size_t>(rows) * ldy + 1);
    const std::vector<__half> db0 = random_halves(rng, cols + 1);
    const size_t workspace_floats = bias_grad_workspace_floats(rows, cols);
    DeviceBuffer<float> workspace(workspace_floats);
    auto run = [&](auto* d_dy, auto* d_db) {
        if (two_pass) {
            bias_grad_two_pass(d_dy, d_db, rows, cols, ldy, beta, workspace.get(), workspace_floats);
        } else {
            bias_grad(d_dy, d_db, rows, cols, ldy, beta);
        }
    };
    DeviceBuffer<TY> d_dy(as<TY>(dy));
    DeviceBuffer<TB> d_db(as<TB>(db0));
    if (beta == 0.0f) d_db.poison();  // db is not read: NaN must not leak in
    run(d_dy.get(), d_db.get());
    const std::vector<float> got_all = as_floats(d_db.download());
    REQUIRE(std::isnan(got_all.back()) == (beta == 0.0f));  // the extra element: untouched
    const std::vector<float> got = slice(got_all, 0, cols);

    DeviceBuffer<float> f_dy(to_float(dy)), f_db(to_float(db0));
    workspace.poison();
    run(f_dy.get(), f_db.get());
    const std::vector<float> fp32 = slice(f_db.download(), 0, cols);
    const std::vector<float> want = std::is_same_v<TB, __half> ? to_float(to_half(fp32)) : fp32;
    REQUIRE(count_bit_mismatches(got, want, "db vs the fp32 kernel rounded once to db's type") == 0);

    std::vector<double> ref(cols);
    const std::vector<double> dy_d = to_double(to_float(dy));
    reference::bias_grad(rows, cols, dy_d.data(), ldy, ref.data());
    for (int c = 0; c < cols; ++c) ref[c] += static_cast<double>(beta) * __half2float(db0[c]);
    const double rel = std::is_same_v<TB, __half> ? kHalfRel + 1e-6 : 1e-6;
    const double abs = sum_tolerance(rows) + (std::is_same_v<TB, __half> ? kHalfAbs : 0.0);
    REQUIRE(count_mismatches(got, ref, abs, rel, "db") == 0);
}

template <typename TY, typename TB>
void check_bias_grad_shapes(std::mt19937_64& rng) {
    for (int rows : {1, 10, 127, 128, 129}) {
        for (int cols : {10, 784, 1024, 1023}) {
            check_bias_grad<TY, TB>(rng, rows, cols, cols, 0.0f, false);
            check_bias_grad<TY, TB>(rng, rows, cols, cols + 3, 0.0f, true);
        }
    }
    check_bias_grad<TY, TB>(rng, 300, 70, 70, 0.5f, false);  // beta: accumulate, still one rounding
    check_bias_grad<TY, TB>(rng, 300, 70, 71, 0.5f, true);
    check_bias_grad<TY, TB>(rng, 0, 70, 70, 0.5f, true);      // no rows: db = round(beta · db)
    check_bias_grad<TY, TB>(rng, 60000, 10, 10, 0.0f, true);  // the whole training set: 235 chunks
}

}  // namespace

TEST_CASE("bias_grad with fp16 dY and fp32 db sums in fp32 in the fp32 kernel's order", "[kernels][fp16][bias_grad]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    check_bias_grad_shapes<__half, float>(rng);
}

TEST_CASE("bias_grad with fp16 dY and fp16 db rounds the fp32 sum once", "[kernels][fp16][bias_grad]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    check_bias_grad_shapes<__half, __half>(rng);
}

TEST_CASE("bias_grad with fp32 dY and fp16 db rounds the fp32 sum once", "[kernels][fp16][bias_grad]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    check_bias_grad_shapes<float, __half>(rng);
}

// ---- softmax_cross_entropy with fp16 logits and loss scaling ---------------------------------------------------------

namespace {

template <typename Label>
std::vector<Label> random_labels(std::mt19937_64& rng, int batch, int classes) {
    std::uniform_int_distribution<int> dist(0, classes - 1);
    std::vector<Label> labels(batch);
    for (auto& l : labels) l = static_cast<Label>(dist(rng));
    return labels;
}

template <typename T>
struct Loss {
    float mean;
    std::vector<float> rows;
    std::vector<T> dlogits;
};

// scale < 0: no grad_scale argument (the 8-parameter overload); otherwise *grad_scale = scale on the device.
template <typename T, typename Label>
Loss<T> run_loss(const std::vector<T>& logits, const std::vector<Label>& labels, int batch, int classes, float scale) {
    DeviceBuffer<T> d_logits(logits), d_dlogits(logits.size());
    DeviceBuffer<float> d_rows(batch), d_mean(1), d_scale(std::vector<float>{scale});
    DeviceBuffer<Label> d_labels(labels);
    if (scale < 0.0f) {
        softmax_cross_entropy(d_logits.get(), d_labels.get(), d_dlogits.get(), d_rows.get(), d_mean.get(), batch,
                              classes);
    } else {
        softmax_cross_entropy(d_logits.get(), d_labels.get(), d_dlogits.get(), d_rows.get(), d_mean.get(), batch,
                              classes, d_scale.get(), cudaStream_t{0});
    }
    return {d_mean.download()[0], d_rows.download(), d_dlogits.download()};
}

template <typename Label>
void check_loss_half(std::mt19937_64& rng, int batch, int classes, float logit_range) {
    INFO("batch=" << batch << " classes=" << classes << " logits in +-" << logit_range);
    const std::vector<__half> logits =
        random_halves(rng, static_cast<size_t>(batch) * classes, -logit_range, logit_range);
    const std::vector<float> logits_f = to_float(logits);
    const std::vector<Label> labels = random_labels<Label>(rng, batch, classes);
    const Loss<__half> got = run_loss(logits, labels, batch, classes, -1.0f);
    const Loss<float> fp32 = run_loss(logits_f, labels, batch, classes, -1.0f);

    // The fp32 math on the converted logits: the losses are the fp32 kernel's bit for bit, the gradient is its
    // gradient rounded once.
    REQUIRE(count_bit_mismatches(std::vector<float>{got.mean}, {fp32.mean}, "mean loss vs fp32 kernel") == 0);
    REQUIRE(count_bit_mismatches(got.rows, fp32.rows, "row loss vs fp32 kernel") == 0);
    REQUIRE(count_bit_mismatches(got.dlogits, to_half(fp32.dlogits), "dlogits vs fp32 kernel") == 0);

    // The float64 reference on the same (fp16) values, with the fp32 test's tolerances (plus one fp16 rounding).
    const std::vector<double> logits_d = to_double(logits_f);
    std::vector<double> dlogits_ref(logits.size());
    const double loss_ref =
        reference::softmax_cross_entropy(batch, classes, logits_d.data(), classes, labels.data(), dlogits_ref.data());
    const double loss_abs = 1e-6 * (1.0 + logit_range) * std::log2(classes + 1.0);
    REQUIRE(count_mismatches({got.mean}, {loss_ref}, loss_abs, 1e-5, "mean loss") == 0);
    REQUIRE(count_mismatches(to_float(got.dlogits), dlogits_ref, 1e-6 / batch + kHalfAbs, 1e-5 + kHalfRel, "dlogits") ==
            0);

    // Loss scaling by 2^16: the fp32 gradient is scaled exactly, so the fp16 one is fp16(65536 · fp32 gradient),
    // one rounding; the losses do not change at all.
    const float scale = 65536.0f;
    const Loss<__half> scaled = run_loss(logits, labels, batch, classes, scale);
    REQUIRE(count_bit_mismatches(std::vector<float>{scaled.mean}, {got.mean}, "mean loss, scaled") == 0);
    REQUIRE(count_bit_mismatches(scaled.rows, got.rows, "row loss, scaled") == 0);
    // (A batch of 1 has gradients near 1: 65536 times them overflows to ±inf, as it must.)
    std::vector<double> scaled_fp32(fp32.dlogits.size()), scaled_fp16(fp32.dlogits.size());
    for (size_t i = 0; i < scaled_fp32.size(); ++i) {
        scaled_fp32[i] = static_cast<double>(scale) * fp32.dlogits[i];
        scaled_fp16[i] = std::fabs(scaled_fp32[i]) >= kHalfOverflow
                             ? std::copysign(INFINITY, scaled_fp32[i])
                             : static_cast<double>(scale) * __half2float(got.dlogits[i]);
    }
    REQUIRE(count_not_rounded_once(scaled.dlogits, scaled_fp32, "scaled dlogits") == 0);
    // … and so 65536 × the unscaled fp16 gradient, to fp16 rounding: that one was rounded too (two roundings: 2·2^-11,
    // and a hair more measured relative to the rounded value), with 2^16 times the absolute error among the
    // subnormals (the small gradients loss scaling exists to keep).
    REQUIRE(count_mismatches(to_float(scaled.dlogits), scaled_fp16, kHalfAbs + scale * kHalfAbs,
                             2 * kHalfRel * (1 + 2 * kHalfRel), "scaled dlogits vs scaled fp16 gradient") == 0);
    // The fp32 kernel with the same scale: exactly 2^16 times its unscaled gradient.
    const Loss<float> scaled32 = run_loss(logits_f, labels, batch, classes, scale);
    std::vector<float> times_scale(fp32.dlogits.size());
    for (size_t i = 0; i < times_scale.size(); ++i) times_scale[i] = scale * fp32.dlogits[i];
    REQUIRE(count_bit_mismatches(scaled32.dlogits, times_scale, "fp32 dlogits, scaled") == 0);
    REQUIRE(count_bit_mismatches(scaled32.rows, fp32.rows, "fp32 row loss, scaled") == 0);
}

}  // namespace

TEST_CASE("softmax_cross_entropy with fp16 logits computes in fp32 and rounds the gradient once",
          "[kernels][fp16][softmax]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (int batch : {1, 10, 127, 128, 129}) {
        for (int classes : {1, 10, 33, 1023}) check_loss_half<int32_t>(rng, batch, classes, 4.0f);
    }
    check_loss_half<uint8_t>(rng, 97, 10, 4.0f);
    check_loss_half<uint8_t>(rng, 1031, 10, 3.0f);  // several blocks, a partial last one
    check_loss_half<uint8_t>(rng, 97, 10, 1e4f);    // extreme logits (fp16 holds them: up to 65504)
}

TEST_CASE("softmax_cross_entropy with an absurd loss scale gives inf in fp16, never a clamped value",
          "[kernels][fp16][softmax]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int batch = 10, classes = 10;
    const std::vector<__half> logits = random_halves(rng, batch * classes, -4.0f, 4.0f);
    const std::vector<int32_t> labels = random_labels<int32_t>(rng, batch, classes);
    const Loss<float> fp32 = run_loss(to_float(logits), labels, batch, classes, -1.0f);
    const Loss<__half> unscaled = run_loss(logits, labels, batch, classes, -1.0f);
    for (float scale : {1048576.0f, 1e30f}) {  // 2^20: the label's gradient (≈ -0.09) overflows; 1e30: all do
        INFO("scale=" << scale);
        const Loss<__half> got = run_loss(logits, labels, batch, classes, scale);
        std::vector<double> exact(got.dlogits.size());  // the fp32 product (exact for 2^20; 1e30 overflows fp16 anyway)
        for (size_t i = 0; i < exact.size(); ++i) exact[i] = static_cast<double>(scale) * fp32.dlogits[i];
        REQUIRE(count_not_rounded_once(got.dlogits, exact, "dlogits") == 0);
        size_t infinities = 0, finite = 0;
        for (const __half g : got.dlogits) {
            infinities += std::isinf(__half2float(g));
            finite += std::isfinite(__half2float(g));
        }
        REQUIRE(infinities > 0);                // it did overflow …
        if (scale < 1e7f) REQUIRE(finite > 0);  // … and not everything
        REQUIRE(count_bit_mismatches(std::vector<float>{got.mean}, {unscaled.mean}, "mean loss, scaled") == 0);
        REQUIRE(std::isfinite(got.mean));
    }
}

// ---- count_correct on fp16 logits ------------------------------------------------------------------------------------

namespace {

template <typename Label>
void check_count_correct_half(std::mt19937_64& rng, int batch, int classes) {
    INFO("batch=" << batch << " classes=" << classes);
    std::vector<float> values = test_support::random_floats(rng, static_cast<size_t>(batch) * classes, -3.0f, 3.0f);
    // Round some rows to integers so ties happen (the lowest index must win, as in the reference).
    for (int r = 0; r < batch; r += 3) {
        for (int c = 0; c < classes; ++c)
            values[static_cast<size_t>(r) * classes + c] = std::round(values[static_cast<size_t>(r) * classes + c]);
    }
    const std::vector<__half> logits = to_half(values);
    const std::vector<float> logits_f = to_float(logits);  // what the kernel compares
    std::vector<int32_t> pred_ref(batch);
    reference::argmax_rows(batch, classes, logits_f.data(), classes, pred_ref.data());
    std::vector<Label> labels = random_labels<Label>(rng, batch, classes);
    for (int r = 0; r < batch; r += 2) labels[r] = static_cast<Label>(pred_ref[r]);  // plenty of correct rows
    const int correct_ref = reference::count_correct(batch, classes, logits_f.data(), classes, labels.data());

    DeviceBuffer<__half> d_logits(logits);
    DeviceBuffer<Label> d_labels(labels);
    DeviceBuffer<int> d_correct(1);
    DeviceBuffer<int32_t> d_pred(batch);
    CUDA_CHECK(cudaMemset(d_correct.get(), 0, sizeof(int)));
    count_correct(d_logits.get(), d_labels.get(), d_correct.get(), batch, classes, d_pred.get());
    REQUIRE(d_correct.download()[0] == correct_ref);
    REQUIRE(d_pred.download() == pred_ref);
    count_correct(d_logits.get(), d_labels.get(), d_correct.get(), batch, classes);  // accumulates
    REQUIRE(d_correct.download()[0] == 2 * correct_ref);
}

}  // namespace

TEST_CASE("count_correct on fp16 logits matches the reference argmax including ties", "[kernels][fp16][evaluate]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (int batch : {1, 10, 127, 128, 129}) {
        for (int classes : {1, 10, 33, 1023}) check_count_correct_half<int32_t>(rng, batch, classes);
    }
    check_count_correct_half<uint8_t>(rng, 2053, 10);  // several blocks, a partial last one
}
