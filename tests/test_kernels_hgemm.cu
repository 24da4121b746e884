// tests/test_kernels_hgemm.cu — every tensor-core GEMM step (kernels/hgemm.cuh), every transpose combination, float
// and __half outputs, against the float64 reference on the same fp16 inputs.
//
// Sizes: 1×1×1, K = 0, K = 1, 7, 10, 16, 17, 127, 128 and 784 in every role (one off the mma's 16 × 8 × 16, the
// step-1 warp tile, the 64 and 128 block tiles and the 32-deep k-tiles), and the MLP's layers at batch 128 (784 →
// 1024 and 1024 → 10) through the three linear helpers, once, with the top step. Padded leading dimensions
// (multiples of 8 and not) and misaligned pointers exercise the 16-byte copies and their element-wise fallback.
// Input padding holds NaN (a kernel that reads it fails), the output starts as NaN (a kernel that skips an output
// fails) and everything around the output must come back untouched. All steps and both block tiles must give the
// same bits (the same mma's in the same order).
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/reference_ops.h"
#include "kernels/hgemm.cuh"

namespace {

using test_support::DeviceBuffer;

constexpr uint16_t kPoisonHalfBits = 0xFFFFu;  // what DeviceBuffer's 0xFF poison makes of a half (a NaN)
constexpr Transpose kTransposes[2] = {Transpose::no, Transpose::yes};

struct HgemmCase {
    int M, N, K;
    int pad = 0;     // extra columns in every leading dimension
    int offset = 0;  // halves (and outputs) between the allocation and the matrix (odd → not 16-byte aligned)
    float alpha = 1.0f;
    bool bias = false, relu = false;
    bool aligned_ld = false;  // every leading dimension rounded up to a multiple of 8 halves first (16-byte rows)
};

// Inputs of one GEMM in host memory, laid out as the kernels see them (leading dimensions, offset, NaN padding),
// and the expected result with its tolerance.
struct HgemmProblem {
    HgemmCase c;
    Transpose ta, tb;
    int lda, ldb, ldc;
    std::vector<__half> a, b, bias;
    std::vector<double> expected;   // M×N, dense: act(alpha·op(A)·op(B) + bias) in float64
    std::vector<double> tolerance;  // M×N: the fp32 bound derived below
};

std::string describe(const HgemmProblem& p) {
    std::ostringstream s;
    s << "op_a=" << (p.ta == Transpose::yes ? "T" : "N") << " op_b=" << (p.tb == Transpose::yes ? "T" : "N")
      << " M=" << p.c.M << " N=" << p.c.N << " K=" << p.c.K << " pad=" << p.c.pad << " offset=" << p.c.offset
      << " alpha=" << p.c.alpha << " bias=" << p.c.bias << " relu=" << p.c.relu;
    return s.str();
}

// A rows×cols fp16 matrix with leading dimension ld at `offset`: random values in [-1, 1] (rounded to fp16 once,
// here: the kernels and the reference see the same values), NaN everywhere else.
std::vector<__half> make_matrix(std::mt19937_64& rng, int rows, int cols, int ld, int offset) {
    std::vector<__half> m(static_cast<size_t>(offset) + static_cast<size_t>(rows) * ld + 1,
                          __ushort_as_half(kPoisonHalfBits));
    const std::vector<float> values = test_support::random_floats(rng, static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c)
            m[offset + static_cast<size_t>(r) * ld + c] = __float2half(values[static_cast<size_t>(r) * cols + c]);
    }
    return m;
}

std::vector<float> to_float(const std::vector<__half>& h, bool absolute = false) {
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = absolute ? std::fabs(__half2float(h[i])) : __half2float(h[i]);
    return f;
}

// Tolerance for one output computed in fp32 from fp16 inputs. Every product a·b of two fp16 values is exact in fp32
// (11 + 11 significant bits ≤ 24), so only the additions round. Adding the K products one by one, each addition
// errs by at most u = 2^-24 (round to nearest) of a partial sum, and every partial sum is at most Σ|a·b|:
//     |error of the sum| ≤ K·u·Σ|a·b|     (the classic bound for recursive summation, to first order)
// which is exactly how the CPU backend's mma adds. A GPU's tensor cores add each mma's 8- or 16-product blocks
// with their own alignment and truncation: fewer roundings per term (one per block) of at most 2u each, plus the
// bits lost aligning a block's terms, a few u of the block's Σ|a·b|: covered by 4 more u. The epilogue rounds
// twice more (alpha·sum, + bias): 2 u of |alpha|·Σ|a·b| + |bias|. So
//     |error| ≤ (K + 6)·2^-24·(|alpha|·Σ|a·b| + |bias|),    ReLU does not increase it (it is 1-Lipschitz).
// A wrong index or a missing product errs by about one |a·b| (0.25 on average): (K + 6)·2^-24·K/4 is 0.009 at
// K = 784. An fp16 output also rounds once to 11 significant bits: 2^-11·|value|, or 2^-25 absolute among
// fp16's subnormals; past 65520 it must be ±inf.
double fp32_tolerance(int K, double alpha, double sum_of_magnitudes, double bias) {
    return (K + 6) * std::ldexp(1.0, -24) * (std::fabs(alpha) * sum_of_magnitudes + std::fabs(bias));
}

HgemmProblem make_problem(std::mt19937_64& rng, Transpose ta, Transpose tb, const HgemmCase& c) {
    HgemmProblem p{c, ta, tb, 0, 0, 0, {}, {}, {}, {}, {}};
    const bool trans_a = ta == Transpose::yes, trans_b = tb == Transpose::yes;
    const int a_rows = trans_a ? c.K : c.M, a_cols = trans_a ? c.M : c.K;
    const int b_rows = trans_b ? c.N : c.K, b_cols = trans_b ? c.K : c.N;
    const auto ld = [&c](int cols) {
        return (c.aligned_ld ? (std::max(cols, 1) + 7) / 8 * 8 : std::max(cols, 1)) + c.pad;
    };
    p.lda = ld(a_cols);
    p.ldb = ld(b_cols);
    p.ldc = ld(c.N);
    p.a = make_matrix(rng, a_rows, a_cols, p.lda, c.offset);
    p.b = make_matrix(rng, b_rows, b_cols, p.ldb, c.offset);
    p.bias = make_matrix(rng, 1, std::max(c.N, 1), std::max(c.N, 1), 0);

    // The reference on the fp16 values (exact in float), once for the result and once on |A|, |B| for Σ|a·b|.
    const size_t outputs = static_cast<size_t>(c.M) * c.N;
    std::vector<double> sum(outputs), magnitude(outputs);
    const std::vector<float> a = to_float(p.a), b = to_float(p.b), a_abs = to_float(p.a, true),
                             b_abs = to_float(p.b, true);
    reference::gemm<float, double>(trans_a, trans_b, c.M, c.N, c.K, c.alpha, a.data() + c.offset, p.lda,
                                   b.data() + c.offset, p.ldb, 0.0, sum.data(), std::max(c.N, 1));
    reference::gemm<float, double>(trans_a, trans_b, c.M, c.N, c.K, 1.0, a_abs.data() + c.offset, p.lda,
                                   b_abs.data() + c.offset, p.ldb, 0.0, magnitude.data(), std::max(c.N, 1));
    p.expected.resize(outputs);
    p.tolerance.resize(outputs);
    for (int r = 0; r < c.M; ++r) {
        for (int col = 0; col < c.N; ++col) {
            const size_t i = static_cast<size_t>(r) * c.N + col;
            const double bias = c.bias ? __half2float(p.bias[col]) : 0.0;
            const double value = sum[i] + bias;
            p.expected[i] = c.relu ? std::max(value, 0.0) : value;
            p.tolerance[i] = fp32_tolerance(c.K, c.alpha, magnitude[i], bias);
        }
    }
    return p;
}

// Whether an output matches: within the fp32 bound (float), plus the final rounding (__half), or ±inf where the
// value is certainly beyond fp16's range.
bool output_matches(float got, double expected, double tolerance) {
    return std::fabs(got - expected) <= tolerance;
}
bool output_matches(__half got_half, double expected, double tolerance) {
    const double got = __half2float(got_half);
    constexpr double kOverflow = 65520.0;  // the midpoint of 65504 and 65536: from here on, round to nearest → inf
    if (std::fabs(expected) - tolerance >= kOverflow) return got == (expected > 0 ? INFINITY : -INFINITY);
    const double rounding = std::ldexp(std::fabs(expected) + tolerance, -11) + std::ldexp(1.0, -25);
    if (std::fabs(got - expected) <= tolerance + rounding) return true;
    return std::isinf(got) && std::fabs(expected) + tolerance >= kOverflow && (got > 0) == (expected > 0);
}

template <typename OutT>
bool is_poison(OutT v) {
    if constexpr (std::is_same_v<OutT, float>) {
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        return bits == 0xFFFFFFFFu;
    } else {
        return __half_as_ushort(v) == kPoisonHalfBits;
    }
}

// One GEMM on stream 0: a step through hgemm(), or a step with a forced block tile.
template <typename OutT>
using HgemmRun = std::function<void(Transpose, Transpose, int, int, int, float, const __half*, int, const __half*, int,
                                    OutT*, int, HgemmEpilogue)>;

template <typename OutT>
HgemmRun<OutT> run_version(HgemmVersion v) {
    return [v](Transpose ta, Transpose tb, int M, int N, int K, float alpha, const __half* A, int lda, const __half* B,
               int ldb, OutT* C, int ldc,
               HgemmEpilogue epilogue) { hgemm(v, ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, epilogue); };
}

template <typename OutT>
using WithTile = void (*)(GemmTile, Transpose, Transpose, int, int, int, float, const __half*, int, const __half*, int,
                          OutT*, int, HgemmEpilogue, cudaStream_t);

template <typename OutT>
HgemmRun<OutT> run_with_tile(WithTile<OutT> with_tile, GemmTile tile) {
    return [with_tile, tile](Transpose ta, Transpose tb, int M, int N, int K, float alpha, const __half* A, int lda,
                             const __half* B, int ldb, OutT* C, int ldc, HgemmEpilogue epilogue) {
        with_tile(tile, ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, epilogue, 0);
    };
}

// Runs the GEMM into a fresh NaN-poisoned output, checks it against the expected values and that nothing outside
// the matrix was written. Returns the whole output buffer (for bitwise comparisons).
template <typename OutT>
std::vector<OutT> run_and_check(const HgemmProblem& p, const HgemmRun<OutT>& run, const std::string& name) {
    INFO(name << " " << (std::is_same_v<OutT, float> ? "float" : "half") << " out, " << describe(p));
    const HgemmCase& c = p.c;
    DeviceBuffer<__half> d_a(p.a), d_b(p.b), d_bias(p.bias);
    DeviceBuffer<OutT> d_c(c.offset + static_cast<size_t>(c.M) * p.ldc + 1);  // poisoned: NaN
    run(p.ta, p.tb, c.M, c.N, c.K, c.alpha, d_a.get() + c.offset, p.lda, d_b.get() + c.offset, p.ldb,
        d_c.get() + c.offset, p.ldc, HgemmEpilogue{c.bias ? d_bias.get() : nullptr, c.relu});
    const std::vector<OutT> got = d_c.download();

    size_t mismatches = 0, touched = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const bool inside = i >= static_cast<size_t>(c.offset) && (i - c.offset) / p.ldc < static_cast<size_t>(c.M) &&
                            static_cast<int>((i - c.offset) % p.ldc) < c.N;
        if (!inside) {
            touched += !is_poison(got[i]);
            continue;
        }
        const size_t r = (i - c.offset) / p.ldc, col = (i - c.offset) % p.ldc, e = r * c.N + col;
        if (output_matches(got[i], p.expected[e], p.tolerance[e])) continue;
        if (mismatches++ < 5) {
            UNSCOPED_INFO("C[" << r << "][" << col << "]: got " << static_cast<double>(got[i]) << ", reference "
                               << p.expected[e] << ", fp32 tolerance " << p.tolerance[e]);
        }
    }
    REQUIRE(mismatches == 0);
    REQUIRE(touched == 0);  // the offset, the padding columns and the element past the end
    return got;
}

template <typename OutT>
bool same_bits(const std::vector<OutT>& x, const std::vector<OutT>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(OutT)) == 0;
}

// Every case, every transpose combination, both output types, with step v.
void check_cases(HgemmVersion v, std::initializer_list<HgemmCase> cases) {
    auto rng = test_support::rng_for_test();
    for (const HgemmCase& c : cases) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) {
                const HgemmProblem p = make_problem(rng, ta, tb, c);
                run_and_check(p, run_version<float>(v), hgemm_version_name(v));
                run_and_check(p, run_version<__half>(v), hgemm_version_name(v));
            }
        }
    }
}

// One off the mma tile (16 × 8 × 16), the step-1 warp tile (32), the block tiles (64, 128) and the k-tile (32);
// K = 0 (bias and ReLU only), K = 1, an empty output.
void check_small_sizes(HgemmVersion v) {
    check_cases(v, {{1, 1, 1},
                    {7, 10, 1},
                    {10, 7, 16},
                    {16, 16, 16},
                    {17, 7, 10},
                    {7, 17, 127},
                    {16, 128, 17},
                    {127, 128, 31, 0, 0, 1.0f, true, true},
                    {128, 127, 33},
                    {129, 65, 48},
                    {10, 10, 784},
                    {5, 6, 0, 0, 0, 1.0f, true, false},
                    {0, 5, 3}});
}

// Leading dimensions padded to multiples of 8 (the 16-byte copies with gaps between rows; with M, N, K ≡ 5 or 1
// (mod 8), a 16-byte chunk that crosses the matrix edge would read the NaN padding) and not (element-wise),
// misaligned pointers (element-wise), and every epilogue term.
void check_layouts_and_epilogue(HgemmVersion v) {
    check_cases(v, {
                       {64, 128, 32, /*pad=*/8},
                       {61, 69, 37, /*pad=*/3},
                       {129, 17, 33, /*pad=*/7},
                       {67, 129, 33, /*pad=*/3},
                       {128, 128, 40, /*pad=*/0, /*offset=*/1},
                       {100, 104, 48, /*pad=*/8, /*offset=*/8},
                       {97, 72, 64, 0, 0, /*alpha=*/0.5f, /*bias=*/true, /*relu=*/true},
                       {97, 10, 65, 0, 0, 1.0f, /*bias=*/true, /*relu=*/false},
                       {40, 68, 20, 0, 0, -2.0f, /*bias=*/false, /*relu=*/true},
                       {61, 130, 17, 1, 1, 2.0f, /*bias=*/true, /*relu=*/true},
                   });
}

// Every residue 1–7 (mod 8) of M, N and K on the 16-byte path: leading dimensions rounded up to a multiple of 8
// halves plus 8 more (NaN), aligned pointers. Each dimension is the copied row's length for some transpose
// combination, so a 16-byte chunk let past a row's end (an off-by-one in the "whole chunk left" test) reads the NaN
// padding at the residue that exposes it. A Latin square of residues (each dimension takes every residue once), and
// all three ≡ 7; sizes cross the 64-wide block tile and the 32-deep k-tile.
void check_every_residue(HgemmVersion v) {
    std::vector<HgemmCase> cases;
    for (int i = 0; i < 7; ++i) {
        HgemmCase c{56 + (i + 1), 64 + ((i + 3) % 7 + 1), 32 + ((i + 5) % 7 + 1), /*pad=*/8};
        c.aligned_ld = true;
        cases.push_back(c);
    }
    HgemmCase sevens{63, 71, 39, /*pad=*/8, 0, 1.0f, /*bias=*/true, /*relu=*/true};
    sevens.aligned_ld = true;
    cases.push_back(sevens);
    auto rng = test_support::rng_for_test();
    for (const HgemmCase& c : cases) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) {
                const HgemmProblem p = make_problem(rng, ta, tb, c);
                run_and_check(p, run_version<float>(v), hgemm_version_name(v));
                run_and_check(p, run_version<__half>(v), hgemm_version_name(v));
            }
        }
    }
}

}  // namespace

#define HGEMM_STEP_TESTS(VERSION, LABEL)                                                                         \
    TEST_CASE("hgemm " LABEL " matches the float64 reference at small awkward sizes", "[kernels][hgemm]") {      \
        REQUIRE_DEVICE();                                                                                        \
        check_small_sizes(HgemmVersion::VERSION);                                                                \
    }                                                                                                            \
    TEST_CASE("hgemm " LABEL " handles padded and misaligned layouts and every epilogue term (bias ReLU alpha)", \
              "[kernels][hgemm]") {                                                                              \
        REQUIRE_DEVICE();                                                                                        \
        check_layouts_and_epilogue(HgemmVersion::VERSION);                                                       \
    }                                                                                                            \
    TEST_CASE("hgemm " LABEL " takes every residue 1-7 (mod 8) of M N K with 16-byte aligned padded rows",       \
              "[kernels][hgemm]") {                                                                              \
        REQUIRE_DEVICE();                                                                                        \
        check_every_residue(HgemmVersion::VERSION);                                                              \
    }

HGEMM_STEP_TESTS(warp_tile, "warp_tile (step 1)")
HGEMM_STEP_TESTS(block_tile, "block_tile (step 2)")
HGEMM_STEP_TESTS(pipelined, "pipelined (step 3)")

// The three steps and both block tiles of steps 2–3 run the same mma's in the same order on the same fragments (k
// ascending, 16 at a time, zeros past the edges), so they must give the same bits; a second run must too
// (deterministic). Each result is also checked against the reference, so identically wrong results cannot pass.
// Sizes around the 64 and 128 tile edges, aligned (16-byte copies) and not.
TEST_CASE("hgemm steps 1 to 3 and both block tiles agree bit for bit and repeat bit for bit", "[kernels][hgemm]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const HgemmCase cases[] = {
        {200, 136, 72, 0, 0, 0.75f, true, true},  // 16-byte copies, partial tiles in M and N, a partial k-tile
        {131, 67, 97, 0, 0, 0.75f, true, true},   // odd leading dimensions: element-wise
        {129, 130, 17, 6, 0, 1.0f, true, false},  // 136 and 24: multiples of 8, edges everywhere
        {65, 63, 8, 0, 1, -2.0f, false, true},    // misaligned pointers
    };
    for (const HgemmCase& c : cases) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) {
                const HgemmProblem p = make_problem(rng, ta, tb, c);
                const std::vector<std::pair<const char*, HgemmRun<__half>>> runs = {
                    {"warp_tile", run_version<__half>(HgemmVersion::warp_tile)},
                    {"block_tile 64", run_with_tile<__half>(hgemm_block_tile_with_tile<__half>, GemmTile::t64)},
                    {"block_tile 128", run_with_tile<__half>(hgemm_block_tile_with_tile<__half>, GemmTile::t128)},
                    {"pipelined 64", run_with_tile<__half>(hgemm_pipelined_with_tile<__half>, GemmTile::t64)},
                    {"pipelined 128", run_with_tile<__half>(hgemm_pipelined_with_tile<__half>, GemmTile::t128)},
                    {"pipelined 128, again", run_with_tile<__half>(hgemm_pipelined_with_tile<__half>, GemmTile::t128)},
                };
                std::vector<__half> first;
                for (const auto& [name, run] : runs) {
                    const std::vector<__half> got = run_and_check(p, run, name);
                    if (first.empty()) first = got;
                    INFO(name << " against warp_tile, " << describe(p));
                    REQUIRE(same_bits(got, first));
                }
                // fp32 outputs too (the 64 tile: these outputs have fewer than 128 tiles of 128).
                const std::vector<float> v1 =
                    run_and_check(p, run_version<float>(HgemmVersion::warp_tile), "warp_tile");
                const std::vector<float> v3 =
                    run_and_check(p, run_version<float>(HgemmVersion::pipelined), "pipelined");
                REQUIRE(same_bits(v1, v3));
            }
        }
    }
}

// fp16 outputs: results past 65504 (scaled by alpha) must come back as ±inf, as __float2half_rn rounds them.
TEST_CASE("hgemm rounds __half outputs to nearest and overflows to inf", "[kernels][hgemm]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const HgemmProblem p = make_problem(rng, Transpose::no, Transpose::no, {33, 40, 24, 0, 0, /*alpha=*/40000.0f});
    size_t beyond = 0, within = 0;  // outputs certainly past fp16's range, and certainly inside it
    for (const double e : p.expected) {
        if (std::fabs(e) > 70000.0) ++beyond;
        if (std::fabs(e) < 60000.0) ++within;
    }
    REQUIRE(beyond > 0);  // the case exercises both sides of the overflow threshold
    REQUIRE(within > 0);
    for (int v = 1; v <= kHgemmVersionCount; ++v) {
        const HgemmVersion version = hgemm_version_from_int(v);
        const std::vector<__half> got = run_and_check(p, run_version<__half>(version), hgemm_version_name(version));
        size_t infinities = 0;
        for (const __half h : got) infinities += std::isinf(__half2float(h));
        CHECK(infinities >= beyond);
    }
}

// The MLP at batch 128 through the linear helpers, with the top step (up to 103 M multiply-adds each, about 0.2 s
// on the CPU backend; the other steps run the same mma's, checked bit for bit above): layer 1 (784 → 1024)
// forward with bias + ReLU, input gradient, weight gradient in fp32 and fp16; layer 3 (1024 → 10) forward, input
// gradient, weight gradient.
TEST_CASE("hgemm linear helpers match the reference for the MLP layers at batch 128", "[kernels][hgemm][mlp_shapes]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const HgemmVersion v = kFastestHgemm;
    const int batch = 128;
    // A run for run_and_check that calls a helper with the problem's (dense) matrices and epilogue.
    const auto helper = [](auto call) {
        return [call](Transpose, Transpose, int, int, int, float, const __half* A, int, const __half* B, int, auto* C,
                      int, HgemmEpilogue epilogue) { call(A, B, C, epilogue); };
    };
    {  // layer 1 forward: Y = relu(X·W + b), 128×1024, K = 784
        const HgemmProblem p =
            make_problem(rng, Transpose::no, Transpose::no, {batch, 1024, 784, 0, 0, 1.0f, true, true});
        run_and_check<__half>(p, helper([&](const __half* X, const __half* W, __half* Y, HgemmEpilogue e) {
                                  linear_forward_half(v, X, W, e.bias, e.relu, Y, batch, 784, 1024);
                              }),
                              "linear_forward_half L1");
    }
    {  // layer 1 input gradient: dX = dY·Wᵀ, 128×784, K = 1024
        const HgemmProblem p = make_problem(rng, Transpose::no, Transpose::yes, {batch, 784, 1024});
        run_and_check<__half>(p, helper([&](const __half* dY, const __half* W, __half* dX, HgemmEpilogue) {
                                  linear_backward_input_half(v, dY, W, dX, batch, 784, 1024);
                              }),
                              "linear_backward_input_half L1");
    }
    {  // layer 1 weight gradient: dW = Xᵀ·dY, 784×1024, K = batch
        const HgemmProblem p = make_problem(rng, Transpose::yes, Transpose::no, {784, 1024, batch});
        run_and_check<float>(p, helper([&](const __half* X, const __half* dY, float* dW, HgemmEpilogue) {
                                 linear_backward_weight_half(v, X, dY, dW, batch, 784, 1024);
                             }),
                             "linear_backward_weight_half<float> L1");
        run_and_check<__half>(p, helper([&](const __half* X, const __half* dY, __half* dW, HgemmEpilogue) {
                                  linear_backward_weight_half(v, X, dY, dW, batch, 784, 1024);
                              }),
                              "linear_backward_weight_half<__half> L1");
    }
    {  // layer 3 forward: logits = X·W + b, 128×10, K = 1024
        const HgemmProblem p =
            make_problem(rng, Transpose::no, Transpose::no, {batch, 10, 1024, 0, 0, 1.0f, true, false});
        run_and_check<__half>(p, helper([&](const __half* X, const __half* W, __half* Y, HgemmEpilogue e) {
                                  linear_forward_half(v, X, W, e.bias, e.relu, Y, batch, 1024, 10);
                              }),
                              "linear_forward_half L3");
    }
    {  // layer 3 input gradient: dX = dY·Wᵀ, 128×1024, K = 10
        const HgemmProblem p = make_problem(rng, Transpose::no, Transpose::yes, {batch, 1024, 10});
        run_and_check<__half>(p, helper([&](const __half* dY, const __half* W, __half* dX, HgemmEpilogue) {
                                  linear_backward_input_half(v, dY, W, dX, batch, 1024, 10);
                              }),
                              "linear_backward_input_half L3");
    }
    {  // layer 3 weight gradient: dW = Xᵀ·dY, 1024×10, K = batch
        const HgemmProblem p = make_problem(rng, Transpose::yes, Transpose::no, {1024, 10, batch});
        run_and_check<float>(p, helper([&](const __half* X, const __half* dY, float* dW, HgemmEpilogue) {
                                 linear_backward_weight_half(v, X, dY, dW, batch, 1024, 10);
                             }),
                             "linear_backward_weight_half<float> L3");
    }
}

TEST_CASE("hgemm versions are numbered 1 to kHgemmVersionCount with distinct names", "[kernels][hgemm]") {
    std::vector<std::string> names;
    for (int version = 1; version <= kHgemmVersionCount; ++version) {
        const HgemmVersion v = hgemm_version_from_int(version);
        REQUIRE(static_cast<int>(v) == version);
        names.push_back(hgemm_version_name(v));
        REQUIRE(names.back() != "unknown");
    }
    std::sort(names.begin(), names.end());
    REQUIRE(std::adjacent_find(names.begin(), names.end()) == names.end());
    REQUIRE(static_cast<int>(HgemmVersion::warp_tile) == 1);
    REQUIRE(static_cast<int>(kFastestHgemm) == kHgemmVersionCount);
    REQUIRE_THROWS_AS(hgemm_version_from_int(0), std::invalid_argument);
    REQUIRE_THROWS_AS(hgemm_version_from_int(kHgemmVersionCount + 1), std::invalid_argument);
}

// Host-side checks only: nothing is launched, so no device is needed.
TEST_CASE("hgemm rejects bad leading dimensions and sizes and pointers and grids with a clear message",
          "[kernels][hgemm]") {
    const __half* h = reinterpret_cast<const __half*>(uintptr_t{256});
    float* c = reinterpret_cast<float*>(uintptr_t{256});
    const auto message_of = [](const std::function<void()>& call) -> std::string {
        try {
            call();
        } catch (const std::invalid_argument& e) {
            return e.what();
        }
        return "(no exception)";
    };
    const Transpose no = Transpose::no, yes = Transpose::yes;
    for (int version = 1; version <= kHgemmVersionCount; ++version) {
        const HgemmVersion v = hgemm_version_from_int(version);
        const std::string name = std::string("hgemm_") + hgemm_version_name(v);
        INFO("version " << name);
        const std::string lda = message_of([&] { hgemm(v, no, no, 4, 4, 4, 1.0f, h, 3, h, 4, c, 4); });
        CHECK(lda.find("lda") != std::string::npos);
        CHECK(lda.find(name) != std::string::npos);
        CHECK(message_of([&] { hgemm(v, yes, no, 4, 5, 6, 1.0f, h, 3, h, 5, c, 5); }).find("lda") != std::string::npos);
        CHECK(message_of([&] { hgemm(v, no, yes, 4, 5, 6, 1.0f, h, 6, h, 5, c, 5); }).find("ldb") != std::string::npos);
        CHECK(message_of([&] { hgemm(v, no, no, 4, 5, 6, 1.0f, h, 6, h, 5, c, 4); }).find("ldc") != std::string::npos);
        CHECK(message_of([&] { hgemm(v, no, no, -1, 5, 6, 1.0f, h, 6, h, 5, c, 5); }).find("negative") !=
              std::string::npos);
        CHECK(message_of([&] { hgemm(v, no, no, 4, 5, 6, 1.0f, nullptr, 6, h, 5, c, 5); }).find("null") !=
              std::string::npos);
        CHECK(message_of([&] { hgemm(v, no, no, 100000, 1, 100000, 1.0f, h, 100000, h, 1, c, 1); }).find("int index") !=
              std::string::npos);
        CHECK(message_of([&] { hgemm(v, no, no, 10000000, 1, 1, 1.0f, h, 1, h, 1, c, 1); }).find("65535") !=
              std::string::npos);
        // Empty outputs are fine and launch nothing.
        hgemm(v, no, no, 0, 5, 6, 1.0f, nullptr, 6, nullptr, 5, static_cast<__half*>(nullptr), 5);
    }
}

// The fp16 tile (host only): 128×128 (8 warps) when its grid gives every SM 8 warps, else 64×64 (no split-K).
TEST_CASE("hgemm steps 2 and 3 take the 128x128 tile only when it gives every SM 8 warps", "[kernels][hgemm]") {
    constexpr int kH200 = 132;
    CHECK(gemm_tile_for(128, 1024, kH200) == GemmTile::t64);    // 8 tiles of 128×128: 64 warps for 1056
    CHECK(gemm_tile_for(4096, 4096, kH200) == GemmTile::t128);  // 1024 tiles: 8192 warps
    CHECK(gemm_tile_for(1536, 1408, kH200) == GemmTile::t128);  // 12 × 11 = 132 tiles: exactly 8 warps per SM
    CHECK(gemm_tile_for(1536, 1280, kH200) == GemmTile::t64);   // 120 tiles
    CHECK(gemm_tile_for(128, 1024, 1) == GemmTile::t128);       // the CPU backend's one worker
    CHECK(gemm_tile_for(128, 1024, 0) == GemmTile::t128);       // an unknown count counts as 1
    CHECK(gemm_tile_for(1, 1, 1) == GemmTile::t128);            // 1 tile of 8 warps: enough for 1 SM
}
