// tests/test_kernels_gemm.cu — every GEMM version, every transpose, against the float64 reference.
//
// Sizes: 1×1×1, the MLP's shapes at batch 97 (784 → 1024, its two backward GEMMs), 10-wide outputs, primes,
// and sizes one off every tile boundary (8: v4's BK, 32: v1-v3, 64 and 128: v4's tiles). Padding and
// misaligned pointers exercise v4's element-wise fallback. Input padding holds NaN (a kernel that reads it
// fails), output padding must come back untouched, and the output starts as NaN (a kernel that skips an
// element fails).
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/reference_ops.h"
#include "kernels/gemm.cuh"

namespace {

using test_support::DeviceBuffer;

constexpr uint32_t kPoisonBits = 0xFFFFFFFFu;  // what DeviceBuffer's 0xFF poison makes of a float (a NaN)
const float kPoison = std::bit_cast<float>(kPoisonBits);

struct GemmCase {
    int M, N, K;
    int pad = 0;     // extra columns in every leading dimension
    int offset = 0;  // floats between the allocation and the matrix (1 → misaligned for float4)
    float alpha = 1.0f, beta = 0.0f;
    bool bias = false, relu = false;
};

std::string describe(GemmVersion v, Transpose ta, Transpose tb, const GemmCase& c) {
    std::ostringstream s;
    s << "gemm " << gemm_version_name(v) << " op_a=" << (ta == Transpose::yes ? "T" : "N")
      << " op_b=" << (tb == Transpose::yes ? "T" : "N") << " M=" << c.M << " N=" << c.N << " K=" << c.K
      << " pad=" << c.pad << " offset=" << c.offset << " alpha=" << c.alpha << " beta=" << c.beta << " bias=" << c.bias
      << " relu=" << c.relu;
    return s.str();
}

// A rows×cols matrix with leading dimension ld at `offset`: random values inside, poison everywhere else.
std::vector<float> make_matrix(std::mt19937_64& rng, int rows, int cols, int ld, int offset) {
    std::vector<float> m(static_cast<size_t>(offset) + static_cast<size_t>(rows) * ld + 1, kPoison);
    const std::vector<float> values = test_support::random_floats(rng, static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c)
            m[offset + static_cast<size_t>(r) * ld + c] = values[static_cast<size_t>(r) * cols + c];
    }
    return m;
}

void check_gemm(GemmVersion v, Transpose ta, Transpose tb, const GemmCase& c, std::mt19937_64& rng) {
    INFO(describe(v, ta, tb, c));
    const bool trans_a = ta == Transpose::yes, trans_b = tb == Transpose::yes;
    const int a_rows = trans_a ? c.K : c.M, a_cols = trans_a ? c.M : c.K;
    const int b_rows = trans_b ? c.N : c.K, b_cols = trans_b ? c.K : c.N;
    const int lda = std::max(a_cols, 1) + c.pad, ldb = std::max(b_cols, 1) + c.pad, ldc = std::max(c.N, 1) + c.pad;

    const std::vector<float> a = make_matrix(rng, a_rows, a_cols, lda, c.offset);
    const std::vector<float> b = make_matrix(rng, b_rows, b_cols, ldb, c.offset);
    // With beta == 0 the output starts as all poison; otherwise random values inside, poison in the padding.
    std::vector<float> c_init = c.beta != 0.0f
                                    ? make_matrix(rng, c.M, c.N, ldc, c.offset)
                                    : std::vector<float>(c.offset + static_cast<size_t>(c.M) * ldc + 1, kPoison);
    const std::vector<float> bias = test_support::random_floats(rng, std::max(c.N, 1));

    DeviceBuffer<float> d_a(a), d_b(b), d_c(c_init), d_bias(bias);
    const GemmEpilogue epilogue{c.bias ? d_bias.get() : nullptr, c.relu};
    gemm(v, ta, tb, c.M, c.N, c.K, c.alpha, d_a.get() + c.offset, lda, d_b.get() + c.offset, ldb, c.beta,
         d_c.get() + c.offset, ldc, epilogue);
    const std::vector<float> got_all = d_c.download();

    std::vector<double> ref(static_cast<size_t>(c.M) * c.N);
    std::vector<float> got(ref.size());
    std::vector<double> c_old(c_init.begin() + c.offset, c_init.end());
    reference::gemm<float, double>(trans_a, trans_b, c.M, c.N, c.K, c.alpha, a.data() + c.offset, lda,
                                   b.data() + c.offset, ldb, c.beta, c_old.data(), ldc);
    for (int r = 0; r < c.M; ++r) {
        for (int col = 0; col < c.N; ++col) {
            double value = c_old[static_cast<size_t>(r) * ldc + col];
            if (c.bias) value += bias[col];
            if (c.relu) value = std::max(value, 0.0);
            ref[static_cast<size_t>(r) * c.N + col] = value;
            got[static_cast<size_t>(r) * c.N + col] = got_all[c.offset + static_cast<size_t>(r) * ldc + col];
        }
    }
    // Each output sums K products of values in [-1, 1]: the float rounding error grows with K.
    const double abs_tol = 1e-6 * c.K + 1e-6, rel_tol = 1e-5;
    REQUIRE(test_support::count_mismatches(got, ref, abs_tol, rel_tol, "C") == 0);

    // Nothing outside the matrix was written: the offset, the padding columns and the element past the end.
    size_t touched = 0;
    for (size_t i = 0; i < got_all.size(); ++i) {
        const bool inside = i >= static_cast<size_t>(c.offset) && (i - c.offset) / ldc < static_cast<size_t>(c.M) &&
                            static_cast<int>((i - c.offset) % ldc) < c.N;
        if (!inside && std::bit_cast<uint32_t>(got_all[i]) != kPoisonBits) ++touched;
    }
    REQUIRE(touched == 0);
}

constexpr Transpose kTransposes[2] = {Transpose::no, Transpose::yes};

// Small awkward sizes, every transpose combination.
void check_small_sizes(GemmVersion v) {
    auto rng = test_support::rng_for_test();
    const GemmCase cases[] = {
        {1, 1, 1},    {2, 3, 1},      {1, 10, 7},   {37, 41, 43},   {97, 10, 13},  {10, 10, 10},
        {31, 33, 7},  {33, 31, 9},    {63, 65, 15}, {65, 63, 17},   {127, 129, 8}, {129, 127, 16},
        {64, 64, 64}, {128, 128, 32}, {5, 6, 0},    {97, 10, 1024},
    };
    for (const GemmCase& c : cases) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) check_gemm(v, ta, tb, c, rng);
        }
    }
}

// Leading dimensions with padding (both aligned to 4 and not), misaligned pointers, and the whole epilogue.
void check_layouts_and_epilogue(GemmVersion v) {
    auto rng = test_support::rng_for_test();
    const GemmCase cases[] = {
        {67, 129, 33, /*pad=*/3},
        {67, 129, 36, /*pad=*/4},
        {64, 128, 32, /*pad=*/0, /*offset=*/1},
        {64, 128, 32, /*pad=*/4, /*offset=*/4},
        {97, 70, 61, 0, 0, /*alpha=*/0.5f, /*beta=*/-1.5f},
        {97, 72, 64, 0, 0, 1.0f, 0.0f, /*bias=*/true, /*relu=*/true},
        {97, 10, 65, 0, 0, 1.0f, 0.0f, /*bias=*/true, /*relu=*/false},
        {61, 132, 16, 4, 0, 2.0f, 1.0f, /*bias=*/true, /*relu=*/true},
        {61, 130, 17, 1, 1, 2.0f, 1.0f, /*bias=*/true, /*relu=*/true},
    };
    for (const GemmCase& c : cases) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) check_gemm(v, ta, tb, c, rng);
        }
    }
}

// The MLP's first layer (784 → 1024) at a partial batch of 97, one transpose combination per test case (each
// is ≈ 78 M multiply-adds, seconds on the CPU backend): forward Y = X·W with bias + ReLU (N,N), input
// gradient dX = dY·Wᵀ (N,T), weight gradient dW = Xᵀ·dY (T,N), and (T,T) for completeness.
void check_mlp_shape(GemmVersion v, Transpose ta, Transpose tb) {
    auto rng = test_support::rng_for_test();
    if (ta == Transpose::no && tb == Transpose::no) {
        check_gemm(v, ta, tb, {97, 1024, 784, 0, 0, 1.0f, 0.0f, /*bias=*/true, /*relu=*/true}, rng);
    } else if (ta == Transpose::no) {
        check_gemm(v, ta, tb, {97, 784, 1024}, rng);
    } else if (tb == Transpose::no) {
        check_gemm(v, ta, tb, {784, 1024, 97}, rng);
    } else {
        check_gemm(v, ta, tb, {97, 1024, 784}, rng);
    }
}

}  // namespace

TEST_CASE("gemm naive (v1) matches the float64 reference at small awkward sizes", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    check_small_sizes(GemmVersion::naive);
}
TEST_CASE("gemm coalesced (v2) matches the float64 reference at small awkward sizes", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    check_small_sizes(GemmVersion::coalesced);
}
TEST_CASE("gemm tiled (v3) matches the float64 reference at small awkward sizes", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    check_small_sizes(GemmVersion::tiled);
}
TEST_CASE("gemm register_blocked (v4) matches the float64 reference at small awkward sizes", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    check_small_sizes(GemmVersion::register_blocked);
}

TEST_CASE("gemm naive (v1) handles padded and misaligned layouts and the bias/ReLU/beta epilogue", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    check_layouts_and_epilogue(GemmVersion::naive);
}
TEST_CASE("gemm coalesced (v2) handles padded and misaligned layouts and the bias/ReLU/beta epilogue",
          "[kernels][gemm]") {
    REQUIRE_DEVICE();
    check_layouts_and_epilogue(GemmVersion::coalesced);
}
TEST_CASE("gemm tiled (v3) handles padded and misaligned layouts and the bias/ReLU/beta epilogue", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    check_layouts_and_epilogue(GemmVersion::tiled);
}
TEST_CASE("gemm register_blocked (v4) handles padded and misaligned layouts and the bias/ReLU/beta epilogue",
          "[kernels][gemm]") {
    REQUIRE_DEVICE();
    check_layouts_and_epilogue(GemmVersion::register_blocked);
}

#define GEMM_MLP_SHAPE_TEST(VERSION, LABEL, OP_A, OP_B, OPS, WHAT)                                      \
    TEST_CASE("gemm " LABEL " matches the reference at the MLP shape " OPS " (" WHAT ") with batch 97", \
              "[kernels][gemm][mlp_shapes]") {                                                          \
        REQUIRE_DEVICE();                                                                               \
        check_mlp_shape(GemmVersion::VERSION, Transpose::OP_A, Transpose::OP_B);                        \
    }
#define GEMM_MLP_SHAPE_TESTS(VERSION, LABEL)                              \
    GEMM_MLP_SHAPE_TEST(VERSION, LABEL, no, no, "NN", "forward")          \
    GEMM_MLP_SHAPE_TEST(VERSION, LABEL, no, yes, "NT", "input gradient")  \
    GEMM_MLP_SHAPE_TEST(VERSION, LABEL, yes, no, "TN", "weight gradient") \
    GEMM_MLP_SHAPE_TEST(VERSION, LABEL, yes, yes, "TT", "both transposed")

GEMM_MLP_SHAPE_TESTS(naive, "naive (v1)")
GEMM_MLP_SHAPE_TESTS(coalesced, "coalesced (v2)")
GEMM_MLP_SHAPE_TESTS(tiled, "tiled (v3)")
GEMM_MLP_SHAPE_TESTS(register_blocked, "register_blocked (v4)")

// v4 switches to 128×128 tiles once the output has ≥ 128 of them: cover that path with edges in M, N and K,
// with the float4 path (leading dimensions padded to multiples of 4) and without it.
TEST_CASE("gemm register_blocked (v4) 128x128-tile path is correct at prime sizes", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    // 1409 and 1297 are primes: 12 × 11 = 132 tiles of 128×128; K = 9 is one past v4's BK.
    for (Transpose ta : kTransposes) {
        for (Transpose tb : kTransposes) check_gemm(GemmVersion::register_blocked, ta, tb, {1409, 1297, 9}, rng);
    }
}

TEST_CASE("gemm register_blocked (v4) 128x128-tile path takes float4 loads with padded leading dimensions",
          "[kernels][gemm]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    // pad 3 makes every leading dimension (9+3, 1409+3, 1297+3) a multiple of 4: the float4 path, with edges.
    for (Transpose ta : kTransposes) {
        for (Transpose tb : kTransposes) {
            check_gemm(GemmVersion::register_blocked, ta, tb, {1409, 1297, 9, /*pad=*/3}, rng);
        }
    }
    check_gemm(GemmVersion::register_blocked, Transpose::no, Transpose::no,
               {1409, 1297, 9, 3, 0, 1.0f, 0.5f, /*bias=*/true, /*relu=*/true}, rng);
}

// v4 claims its 64×64 and 128×128 tiles give the same bits (each output's k-terms are summed in the same order):
// force each tile on the same inputs and compare bit for bit, on the float4 path (aligned leading dimensions) and
// the element-wise one, every transpose, with the whole epilogue. The 128×128 result is also checked against the
// reference, so two identically wrong results (e.g. both left as poison) cannot pass.
TEST_CASE("gemm register_blocked (v4) 64x64 and 128x128 tiles give bitwise identical results",
          "[kernels][gemm][determinism]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    struct Shape {
        int M, N, K, pad;
    };
    for (Shape s : {Shape{200, 136, 36, 0}, Shape{131, 67, 97, 0}, Shape{129, 130, 17, 3}}) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) {
                const bool trans_a = ta == Transpose::yes, trans_b = tb == Transpose::yes;
                INFO("M=" << s.M << " N=" << s.N << " K=" << s.K << " pad=" << s.pad << " op_a=" << trans_a
                          << " op_b=" << trans_b);
                const int lda = (trans_a ? s.M : s.K) + s.pad, ldb = (trans_b ? s.K : s.N) + s.pad, ldc = s.N + s.pad;
                const std::vector<float> a = make_matrix(rng, trans_a ? s.K : s.M, trans_a ? s.M : s.K, lda, 0);
                const std::vector<float> b = make_matrix(rng, trans_b ? s.N : s.K, trans_b ? s.K : s.N, ldb, 0);
                const std::vector<float> c_old = make_matrix(rng, s.M, s.N, ldc, 0);
                const std::vector<float> bias = test_support::random_floats(rng, s.N);
                DeviceBuffer<float> d_a(a), d_b(b), d_bias(bias), c64(c_old), c128(c_old);
                const GemmEpilogue epilogue{d_bias.get(), /*relu=*/true};
                gemm_register_blocked_with_tile(GemmTile::t64, ta, tb, s.M, s.N, s.K, 0.75f, d_a.get(), lda, d_b.get(),
                                                ldb, 0.5f, c64.get(), ldc, epilogue, 0);
                gemm_register_blocked_with_tile(GemmTile::t128, ta, tb, s.M, s.N, s.K, 0.75f, d_a.get(), lda, d_b.get(),
                                                ldb, 0.5f, c128.get(), ldc, epilogue, 0);
                const std::vector<float> r64 = c64.download(), r128 = c128.download();
                REQUIRE(std::memcmp(r64.data(), r128.data(), r64.size() * sizeof(float)) == 0);

                std::vector<double> ref(c_old.begin(), c_old.end());
                reference::gemm<float, double>(trans_a, trans_b, s.M, s.N, s.K, 0.75, a.data(), lda, b.data(), ldb, 0.5,
                                               ref.data(), ldc);
                std::vector<double> ref_c;
                std::vector<float> got_c;
                for (int r = 0; r < s.M; ++r) {
                    for (int col = 0; col < s.N; ++col) {
                        const size_t i = static_cast<size_t>(r) * ldc + col;
                        ref_c.push_back(std::max(ref[i] + bias[col], 0.0));
                        got_c.push_back(r128[i]);
                    }
                }
                REQUIRE(test_support::count_mismatches(got_c, ref_c, 1e-6 * s.K + 1e-6, 1e-5, "C") == 0);
            }
        }
    }
}

// Grid y and z hold at most 65535 blocks each. v1 puts N's tiles of 8 rows on grid y, v2 M's: an output 600,001 long
// in that direction needs 75,001 of them, so gemm_grid must spread them over grid z (a plain grid.y fails to launch).
// K = 1 and the other dimension 1 keep it cheap. v3 and v4 use the same gemm_grid / gemm_tile_y, but reach the limit
// only at M > 2,097,120 (v3) or 8,388,480 (v4): about 15 s on the CPU backend for v3, too slow for a unit test.
TEST_CASE("gemm naive (v1) handles N = 600001, beyond grid.y's 65535 blocks", "[kernels][gemm][large]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    check_gemm(GemmVersion::naive, Transpose::no, Transpose::no, {1, 600001, 1}, rng);
}
TEST_CASE("gemm coalesced (v2) handles M = 600001, beyond grid.y's 65535 blocks", "[kernels][gemm][large]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    check_gemm(GemmVersion::coalesced, Transpose::no, Transpose::yes, {600001, 1, 1, 0, 0, 1.0f, 0.0f, true, true},
               rng);
}
TEST_CASE("gemm rejects bad leading dimensions and negative sizes with a clear message", "[kernels][gemm]") {
    // Host-side checks only: nothing is launched, so no device is needed.
    float* p = reinterpret_cast<float*>(uintptr_t{256});
    for (int version = 1; version <= kGemmVersionCount; ++version) {
        const GemmVersion v = gemm_version_from_int(version);
        REQUIRE_THROWS_AS(gemm(v, Transpose::no, Transpose::no, 4, 4, 4, 1.0f, p, 3, p, 4, 0.0f, p, 4),
                          std::invalid_argument);
        REQUIRE_THROWS_AS(gemm(v, Transpose::yes, Transpose::no, 4, 5, 6, 1.0f, p, 3, p, 5, 0.0f, p, 5),
                          std::invalid_argument);
        REQUIRE_THROWS_AS(gemm(v, Transpose::no, Transpose::yes, 4, 5, 6, 1.0f, p, 6, p, 5, 0.0f, p, 5),
                          std::invalid_argument);
        REQUIRE_THROWS_AS(gemm(v, Transpose::no, Transpose::no, 4, 5, 6, 1.0f, p, 6, p, 5, 0.0f, p, 4),
                          std::invalid_argument);
        REQUIRE_THROWS_AS(gemm(v, Transpose::no, Transpose::no, -1, 5, 6, 1.0f, p, 6, p, 5, 0.0f, p, 5),
                          std::invalid_argument);
    }
    REQUIRE_THROWS_AS(gemm_version_from_int(5), std::invalid_argument);
    REQUIRE_THROWS_AS(gemm_version_from_int(0), std::invalid_argument);
}
