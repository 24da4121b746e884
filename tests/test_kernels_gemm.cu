// tests/test_kernels_gemm.cu — every GEMM step, every transpose combination, against the float64 reference.
//
// Sizes: 1×1×1, K = 0, primes, sizes one off every tile edge of every step (8: steps 1–2's block rows and steps
// 4–7's BK; 32: steps 1–3's tiles; 64 and 128: steps 4–7's block tiles), the MLP's first layer (784 → 1024) and its
// 10-wide output layer at batch 97. Padded leading dimensions and misaligned pointers exercise steps 5–7's
// element-wise fallback; aligned ones their float4 path. Input padding holds NaN (a kernel that reads it fails),
// output padding must come back untouched, and the output starts as NaN (a kernel that skips an element fails).
// Steps 4–7 are forced through every block tile (16, 32, 64, 128) and must agree bit for bit; the tile a GPU with
// 132 SMs would choose is checked at the lessons' shapes.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/reference_ops.h"
#include "kernels/gemm.cuh"

namespace {

using test_support::DeviceBuffer;

constexpr uint32_t kPoisonBits = 0xFFFFFFFFu;  // what DeviceBuffer's 0xFF poison makes of a float (a NaN)
const float kPoison = std::bit_cast<float>(kPoisonBits);
constexpr Transpose kTransposes[2] = {Transpose::no, Transpose::yes};

struct GemmCase {
    int M, N, K;
    int pad = 0;     // extra columns in every leading dimension
    int offset = 0;  // floats between the allocation and the matrix (1 → misaligned for float4)
    float alpha = 1.0f, beta = 0.0f;
    bool bias = false, relu = false;
};

// One GEMM call with the GemmLauncher arguments (stream 0): a step through gemm(), or a step with a forced tile.
using GemmRun = std::function<void(Transpose, Transpose, int, int, int, float, const float*, int, const float*, int,
                                   float, float*, int, GemmEpilogue)>;

GemmRun run_version(GemmVersion v) {
    return [v](Transpose ta, Transpose tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc,
               GemmEpilogue epilogue) { gemm(v, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue); };
}

using WithTile = void (*)(GemmBlockTile, Transpose, Transpose, int, int, int, float, const float*, int, const float*,
                          int, float, float*, int, GemmEpilogue, cudaStream_t);

GemmRun run_with_tile(WithTile with_tile, GemmBlockTile tile) {
    return [with_tile, tile](Transpose ta, Transpose tb, int M, int N, int K, float alpha, const float* A, int lda,
                             const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue) {
        with_tile(tile, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, 0);
    };
}

constexpr GemmBlockTile kBlockTiles[4] = {GemmBlockTile::t16, GemmBlockTile::t32, GemmBlockTile::t64,
                                          GemmBlockTile::t128};
constexpr GemmBlockTile kSmallTiles[2] = {GemmBlockTile::t16, GemmBlockTile::t32};

// Steps 4–7 with the given block tiles: runs that must all give the same bits.
struct TiledRun {
    std::string name;
    GemmRun run;
};
std::vector<TiledRun> steps_4_to_7_with_tiles(std::initializer_list<GemmBlockTile> tiles) {
    const std::pair<const char*, WithTile> steps[4] = {{"register_blocked", gemm_register_blocked_with_tile},
                                                       {"vectorized", gemm_vectorized_with_tile},
                                                       {"double_buffered", gemm_double_buffered_with_tile},
                                                       {"warp_tiled", gemm_warp_tiled_with_tile}};
    std::vector<TiledRun> runs;
    for (const auto& [name, with_tile] : steps) {
        for (GemmBlockTile tile : tiles)
            runs.push_back(
                {std::string(name) + " " + std::to_string(static_cast<int>(tile)), run_with_tile(with_tile, tile)});
    }
    return runs;
}

// Inputs of one GEMM in host memory, laid out as the kernels see them (leading dimensions, offset, poison).
struct GemmProblem {
    GemmCase c;
    Transpose ta, tb;
    int lda, ldb, ldc;
    std::vector<float> a, b, c_init, bias;
};

std::string describe(const GemmProblem& p) {
    std::ostringstream s;
    s << "op_a=" << (p.ta == Transpose::yes ? "T" : "N") << " op_b=" << (p.tb == Transpose::yes ? "T" : "N")
      << " M=" << p.c.M << " N=" << p.c.N << " K=" << p.c.K << " pad=" << p.c.pad << " offset=" << p.c.offset
      << " alpha=" << p.c.alpha << " beta=" << p.c.beta << " bias=" << p.c.bias << " relu=" << p.c.relu;
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

GemmProblem make_problem(std::mt19937_64& rng, Transpose ta, Transpose tb, const GemmCase& c) {
    GemmProblem p{c, ta, tb, 0, 0, 0, {}, {}, {}, {}};
    const bool trans_a = ta == Transpose::yes, trans_b = tb == Transpose::yes;
    const int a_rows = trans_a ? c.K : c.M, a_cols = trans_a ? c.M : c.K;
    const int b_rows = trans_b ? c.N : c.K, b_cols = trans_b ? c.K : c.N;
    p.lda = std::max(a_cols, 1) + c.pad;
    p.ldb = std::max(b_cols, 1) + c.pad;
    p.ldc = std::max(c.N, 1) + c.pad;
    p.a = make_matrix(rng, a_rows, a_cols, p.lda, c.offset);
    p.b = make_matrix(rng, b_rows, b_cols, p.ldb, c.offset);
    // With beta == 0 the output starts as all poison; otherwise random values inside, poison in the padding.
    p.c_init = c.beta != 0.0f ? make_matrix(rng, c.M, c.N, p.ldc, c.offset)
                              : std::vector<float>(c.offset + static_cast<size_t>(c.M) * p.ldc + 1, kPoison);
    p.bias = test_support::random_floats(rng, std::max(c.N, 1));
    return p;
}

// Tolerance for a float result: each of the K products rounds once (float epsilon, relative), and the partial sums
// of K products of values in [-1, 1] can grow with K; a wrong index or a missed term is off by O(1) instead.
double abs_tolerance(const GemmCase& c) {
    constexpr double eps = std::numeric_limits<float>::epsilon();
    return 8.0 * eps * (std::fabs(c.alpha) * c.K + std::fabs(c.beta) + 2.0);
}
constexpr double kRelTolerance = 64.0 * std::numeric_limits<float>::epsilon();

// Runs the GEMM on the device, checks it against the float64 reference (plus bias and ReLU) and that nothing
// outside the matrix was written. Returns the whole output buffer (for bitwise comparisons).
std::vector<float> run_and_check(const GemmProblem& p, const GemmRun& run, const std::string& name) {
    INFO(name << " " << describe(p));
    const GemmCase& c = p.c;
    DeviceBuffer<float> d_a(p.a), d_b(p.b), d_c(p.c_init), d_bias(p.bias);
    const GemmEpilogue epilogue{c.bias ? d_bias.get() : nullptr, c.relu};
    run(p.ta, p.tb, c.M, c.N, c.K, c.alpha, d_a.get() + c.offset, p.lda, d_b.get() + c.offset, p.ldb, c.beta,
        d_c.get() + c.offset, p.ldc, epilogue);
    const std::vector<float> got_all = d_c.download();

    std::vector<double> c_ref(p.c_init.begin() + c.offset, p.c_init.end());
    reference::gemm<float, double>(p.ta == Transpose::yes, p.tb == Transpose::yes, c.M, c.N, c.K, c.alpha,
                                   p.a.data() + c.offset, p.lda, p.b.data() + c.offset, p.ldb, c.beta, c_ref.data(),
                                   p.ldc);
    std::vector<double> ref(static_cast<size_t>(c.M) * c.N);
    std::vector<float> got(ref.size());
    for (int r = 0; r < c.M; ++r) {
        for (int col = 0; col < c.N; ++col) {
            double value = c_ref[static_cast<size_t>(r) * p.ldc + col];
            if (c.bias) value += p.bias[col];
            if (c.relu) value = std::max(value, 0.0);
            ref[static_cast<size_t>(r) * c.N + col] = value;
            got[static_cast<size_t>(r) * c.N + col] = got_all[c.offset + static_cast<size_t>(r) * p.ldc + col];
        }
    }
    REQUIRE(test_support::count_mismatches(got, ref, abs_tolerance(c), kRelTolerance, "C") == 0);

    // Nothing outside the matrix was written: the offset, the padding columns and the element past the end.
    size_t touched = 0;
    for (size_t i = 0; i < got_all.size(); ++i) {
        const bool inside = i >= static_cast<size_t>(c.offset) && (i - c.offset) / p.ldc < static_cast<size_t>(c.M) &&
                            static_cast<int>((i - c.offset) % p.ldc) < c.N;
        if (!inside && std::bit_cast<uint32_t>(got_all[i]) != kPoisonBits) ++touched;
    }
    REQUIRE(touched == 0);
    return got_all;
}

void check_cases(GemmVersion v, std::initializer_list<GemmCase> cases) {
    auto rng = test_support::rng_for_test();
    for (const GemmCase& c : cases) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes)
                run_and_check(make_problem(rng, ta, tb, c), run_version(v), gemm_version_name(v));
        }
    }
}

// Small awkward sizes, one off every tile edge of every step, and the 10-wide output layer (1024 → 10 at batch 97:
// forward 97×10×1024, input gradient 97×1024×10, weight gradient 1024×10×97), every transpose combination.
void check_small_sizes(GemmVersion v) {
    check_cases(
        v, {{1, 1, 1},    {2, 3, 1},      {1, 10, 7},   {7, 9, 8},    {8, 8, 9},      {9, 7, 31},     {31, 33, 32},
            {33, 31, 33}, {37, 41, 43},   {10, 10, 10}, {63, 65, 15}, {65, 63, 17},   {127, 129, 8},  {129, 127, 16},
            {64, 64, 64}, {128, 128, 32}, {5, 6, 0},    {0, 5, 3},    {97, 10, 1024}, {97, 1024, 10}, {1024, 10, 97}});
}

// Leading dimensions with padding (multiples of 4 and not), misaligned pointers, and the whole epilogue.
void check_layouts_and_epilogue(GemmVersion v) {
    check_cases(v, {
                       {67, 129, 33, /*pad=*/3},
                       {67, 129, 36, /*pad=*/4},
                       {64, 128, 32, /*pad=*/0, /*offset=*/1},
                       {64, 128, 32, /*pad=*/4, /*offset=*/4},
                       {97, 70, 61, 0, 0, /*alpha=*/0.5f, /*beta=*/-1.5f},
                       {97, 72, 64, 0, 0, 1.0f, 0.0f, /*bias=*/true, /*relu=*/true},
                       {97, 10, 65, 0, 0, 1.0f, 0.0f, /*bias=*/true, /*relu=*/false},
                       {40, 68, 20, 0, 0, -1.0f, 0.0f, /*bias=*/false, /*relu=*/true},
                       {33, 65, 9, 0, 0, /*alpha=*/0.0f, /*beta=*/1.0f, /*bias=*/true, /*relu=*/true},
                       {61, 132, 16, 4, 0, 2.0f, 1.0f, /*bias=*/true, /*relu=*/true},
                       {61, 130, 17, 1, 1, 2.0f, 1.0f, /*bias=*/true, /*relu=*/true},
                   });
}

// The MLP's first layer (784 → 1024) at a partial batch of 97, one transpose combination per test case (each is
// ≈ 78 M multiply-adds, about a second on the CPU backend): forward Y = X·W with bias + ReLU (N,N), input gradient
// dX = dY·Wᵀ (N,T), weight gradient dW = Xᵀ·dY (T,N), and (T,T) for completeness.
void check_mlp_shape(GemmVersion v, Transpose ta, Transpose tb) {
    auto rng = test_support::rng_for_test();
    GemmCase c{97, 1024, 784, 0, 0, 1.0f, 0.0f, /*bias=*/true, /*relu=*/true};  // forward
    if (ta == Transpose::no && tb == Transpose::yes) c = {97, 784, 1024};       // input gradient
    if (ta == Transpose::yes && tb == Transpose::no) c = {784, 1024, 97};       // weight gradient
    if (ta == Transpose::yes && tb == Transpose::yes) c = {97, 1024, 784};
    run_and_check(make_problem(rng, ta, tb, c), run_version(v), gemm_version_name(v));
}

}  // namespace

#define GEMM_STEP_TESTS(VERSION, LABEL)                                                                              \
    TEST_CASE("gemm " LABEL " matches the float64 reference at small awkward sizes", "[kernels][gemm]") {            \
        REQUIRE_DEVICE();                                                                                            \
        check_small_sizes(GemmVersion::VERSION);                                                                     \
    }                                                                                                                \
    TEST_CASE("gemm " LABEL " handles padded and misaligned layouts and every epilogue term (bias ReLU alpha beta)", \
              "[kernels][gemm]") {                                                                                   \
        REQUIRE_DEVICE();                                                                                            \
        check_layouts_and_epilogue(GemmVersion::VERSION);                                                            \
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

GEMM_STEP_TESTS(naive, "naive (step 1)")
GEMM_STEP_TESTS(coalesced, "coalesced (step 2)")
GEMM_STEP_TESTS(smem_tiled, "smem_tiled (step 3)")
GEMM_STEP_TESTS(register_blocked, "register_blocked (step 4)")
GEMM_STEP_TESTS(vectorized, "vectorized (step 5)")
GEMM_STEP_TESTS(double_buffered, "double_buffered (step 6)")
GEMM_STEP_TESTS(warp_tiled, "warp_tiled (step 7)")

GEMM_MLP_SHAPE_TESTS(naive, "naive (step 1)")
GEMM_MLP_SHAPE_TESTS(coalesced, "coalesced (step 2)")
GEMM_MLP_SHAPE_TESTS(smem_tiled, "smem_tiled (step 3)")
GEMM_MLP_SHAPE_TESTS(register_blocked, "register_blocked (step 4)")
GEMM_MLP_SHAPE_TESTS(vectorized, "vectorized (step 5)")
GEMM_MLP_SHAPE_TESTS(double_buffered, "double_buffered (step 6)")
GEMM_MLP_SHAPE_TESTS(warp_tiled, "warp_tiled (step 7)")

// Steps 4–7 claim the same bits for every block tile and for each other (one fmaf per k, ascending, the same
// epilogue): force each tile of each step on the same inputs, check every result against the reference (so sixteen
// identically wrong results cannot pass) and compare them bit for bit. Sizes around the 16, 32, 64 and 128 tile
// edges; aligned leading dimensions (the float4 path) and padded or offset ones (the element-wise fallback).
TEST_CASE("gemm steps 4 to 7 agree bit for bit with every block tile at tile edges", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const GemmCase cases[] = {
        {200, 136, 36, 0, 0, 0.75f, 0.5f, true, true},  // float4 path, partial tiles in M and N
        {131, 67, 97, 0, 0, 0.75f, 0.5f, true, true},   // odd leading dimensions: element-wise
        {129, 130, 17, 3, 0, 1.0f, 0.0f, true, false},  // padded to multiples of 4 (float4), edges everywhere
        {127, 129, 9, 3, 0, 1.0f, 1.0f, false, true},
        {128, 64, 16, 0, 1, 1.0f, 0.0f, false, false},  // exact tiles, misaligned pointers: element-wise
        {65, 63, 8, 0, 0, -2.0f, 0.0f, true, true},
        {33, 17, 31, 0, 0, 1.0f, 0.0f, true, true},  // one past 32 and 16, K off BK
        {31, 15, 40, 1, 0, 1.0f, -1.0f, false, false},
        {1, 1, 1, 0, 0, 1.0f, 0.5f, true, true},
    };
    for (const GemmCase& c : cases) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) {
                const GemmProblem p = make_problem(rng, ta, tb, c);
                std::vector<float> first;
                for (const TiledRun& r :
                     steps_4_to_7_with_tiles({kBlockTiles[0], kBlockTiles[1], kBlockTiles[2], kBlockTiles[3]})) {
                    const std::vector<float> got = run_and_check(p, r.run, r.name);
                    if (first.empty()) first = got;
                    INFO(r.name << " against register_blocked 16, " << describe(p));
                    REQUIRE(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)) == 0);
                }
            }
        }
    }
}

// The small tiles (16×16: 2×2 outputs per thread, half the threads idle while loading; 32×32: 4×4) of each step
// against the float64 reference at awkward sizes, every transpose combination, each run twice on the same inputs:
// the second must give the first one's bits (no atomics, a fixed order: reproducible run to run).
TEST_CASE("gemm steps 4 to 7 with 16x16 and 32x32 tiles match the reference at awkward sizes, run to run bitwise",
          "[kernels][gemm]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const GemmCase cases[] = {
        {1, 1, 1},
        {1, 10, 7},
        {10, 10, 10},
        {2, 3, 0},
        {17, 15, 33},
        {37, 41, 43, 0, 0, 0.75f, 0.5f, true, true},
        {97, 10, 784, 0, 0, 1.0f, 0.0f, true, false},  // the output layer's forward, a partial batch, K = 784
        {13, 784, 11, 0, 0, 1.0f, 0.0f, true, true},   // N = 784
        {61, 68, 20, /*pad=*/4, /*offset=*/4, 2.0f, 1.0f, true, true},  // float4 path with padding
        {16, 32, 16, 0, /*offset=*/1},                                  // exact tiles, misaligned: element-wise
        {33, 65, 9, 0, 0, /*alpha=*/0.0f, /*beta=*/1.0f, true, true},
    };
    for (const GemmCase& c : cases) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) {
                const GemmProblem p = make_problem(rng, ta, tb, c);
                for (const TiledRun& r : steps_4_to_7_with_tiles({kSmallTiles[0], kSmallTiles[1]})) {
                    const std::vector<float> first = run_and_check(p, r.run, r.name);
                    const std::vector<float> again = run_and_check(p, r.run, r.name + ", again");
                    INFO(r.name << " run twice, " << describe(p));
                    REQUIRE(std::memcmp(again.data(), first.data(), again.size() * sizeof(float)) == 0);
                }
            }
        }
    }
}

// The lessons' three GEMMs of the 784 → 1024 layer at batch 128 through steps 6 and 7 (7: their default) with the
// tile an H100/H200 (132 SMs) chooses (32×32 for all three: not what the CPU backend's 1 "SM" chooses), against the
// reference and bit for bit against the 128×128 tile: the tile a GPU picks does not change the lessons' weights.
TEST_CASE("gemm steps 6 and 7 with the tile a 132-SM GPU chooses give the big tile's bits at the lessons' shapes",
          "[kernels][gemm][mlp_shapes]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const struct {
        Transpose ta, tb;
        GemmCase c;
    } layer_gemms[] = {
        {Transpose::no, Transpose::no, {128, 1024, 784, 0, 0, 1.0f, 0.0f, true, true}},  // forward
        {Transpose::no, Transpose::yes, {128, 784, 1024}},                               // input gradient
        {Transpose::yes, Transpose::no, {784, 1024, 128}},                               // weight gradient
    };
    for (const auto& g : layer_gemms) {
        const GemmProblem p = make_problem(rng, g.ta, g.tb, g.c);
        const GemmBlockTile tile = choose_gemm_plan(g.c.M, g.c.N, g.c.K, 132, gemm_register_blocked_warps).tile;
        CHECK(static_cast<int>(tile) < 128);
        const std::vector<float> small = run_and_check(p, run_with_tile(gemm_double_buffered_with_tile, tile),
                                                       "double_buffered " + std::to_string(static_cast<int>(tile)));
        const std::vector<float> big =
            run_and_check(p, run_with_tile(gemm_double_buffered_with_tile, GemmBlockTile::t128), "double_buffered 128");
        const std::vector<float> warp_tiled = run_and_check(p, run_with_tile(gemm_warp_tiled_with_tile, tile),
                                                            "warp_tiled " + std::to_string(static_cast<int>(tile)));
        INFO(describe(p));
        REQUIRE(std::memcmp(small.data(), big.data(), small.size() * sizeof(float)) == 0);
        REQUIRE(std::memcmp(warp_tiled.data(), big.data(), warp_tiled.size() * sizeof(float)) == 0);
    }
}

// Step 2 claims the same bits as step 1 (it only swaps which thread computes which output).
TEST_CASE("gemm steps 1 and 2 give bitwise identical results", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (const GemmCase& c : {GemmCase{37, 41, 43, 0, 0, 0.75f, 0.5f, true, true}, GemmCase{97, 10, 300}}) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) {
                const GemmProblem p = make_problem(rng, ta, tb, c);
                const std::vector<float> v1 = run_and_check(p, run_version(GemmVersion::naive), "naive");
                const std::vector<float> v2 = run_and_check(p, run_version(GemmVersion::coalesced), "coalesced");
                REQUIRE(std::memcmp(v1.data(), v2.data(), v1.size() * sizeof(float)) == 0);
            }
        }
    }
}

// The plan (host only). Split-K depends on the shape alone: M ≤ 128 and K > 128 give ceil(K / 128) slices (at most
// 16) of a whole number of 8-term k-steps, none empty. The tile: the biggest whose grid, slices included, gives every
// SM kWantedWarpsPerSm warps, else the smallest.
TEST_CASE("gemm steps 4 to 7 split K for small M and choose the biggest tile that gives every SM 8 warps",
          "[kernels][gemm]") {
    constexpr int kH200 = 132;
    CHECK(gemm_split_k(128, 784).splits == 7);  // the lessons' forward at batch 128: 7 slices of 112 terms
    CHECK(gemm_split_k(128, 784).k_slice == 112);
    CHECK(gemm_split_k(128, 1024).splits == 8);  // the input gradient of the 784 → 1024 layer
    CHECK(gemm_split_k(128, 10).splits == 1);    // the input gradient of the output layer (K = 10)
    CHECK(gemm_split_k(784, 128).splits == 1);   // weight gradients: M is the layer's width
    CHECK(gemm_split_k(129, 784).splits == 1);
    CHECK(gemm_split_k(128, 128).splits == 1);
    CHECK(gemm_split_k(1, 1000000).splits == 16);
    for (int M : {1, 10, 97, 128}) {
        for (int K : {129, 130, 136, 200, 784, 1000, 1024, 2047, 4097, 100003}) {
            INFO("M=" << M << " K=" << K);
            const GemmSplitK split = gemm_split_k(M, K);
            CHECK(split.splits >= 2);
            CHECK(split.splits <= kSplitKMaxSplits);
            CHECK(split.k_slice % 8 == 0);
            CHECK(static_cast<long long>(split.splits - 1) * split.k_slice < K);  // the last slice is not empty
            CHECK(static_cast<long long>(split.splits) * split.k_slice >= K);
        }
    }
    // The lessons' shapes on an H200. Forward 128 × 1024 × 784: 7 slices; 64×64 tiles would be 32 · 7 blocks, 896
    // warps of step 7 (6.8 per SM), so 32×32: 128 · 7 blocks, 3584 warps (27 per SM), 14 k-steps each.
    const GemmPlan forward = choose_gemm_plan(128, 1024, 784, kH200, gemm_warp_tiled_warps);
    CHECK(forward.tile == GemmBlockTile::t32);
    CHECK(forward.split.splits == 7);
    CHECK(choose_gemm_plan(128, 1024, 784, kH200, gemm_register_blocked_warps).tile == GemmBlockTile::t32);
    // The weight gradient 784 × 1024 × 128 is not split; 32×32 tiles: 800 blocks (64×64: 208 × 2 warps, too few).
    CHECK(choose_gemm_plan(784, 1024, 128, kH200, gemm_register_blocked_warps).tile == GemmBlockTile::t32);
    CHECK(choose_gemm_plan(784, 1024, 128, kH200, gemm_warp_tiled_warps).tile == GemmBlockTile::t32);  // 64: 832
    // The output layer 128 × 10 × 1024: 8 slices, and still no tile fills 1056 warps (16×16: 8 · 8 blocks).
    CHECK(choose_gemm_plan(128, 10, 1024, kH200, gemm_warp_tiled_warps).tile == GemmBlockTile::t16);
    // Large outputs keep the big tile (the most reuse per load): 4096² is 1024 blocks of 128×128.
    CHECK(choose_gemm_plan(4096, 4096, 4096, kH200, gemm_warp_tiled_warps).tile == GemmBlockTile::t128);
    CHECK(choose_gemm_plan(4096, 4096, 4096, kH200, gemm_register_blocked_warps).tile == GemmBlockTile::t128);
    // The CPU backend reports its worker count (1 by default): 8 warps are 2 blocks of step 7 there.
    CHECK(choose_gemm_plan(128, 1024, 784, 1, gemm_warp_tiled_warps).tile == GemmBlockTile::t128);
    CHECK(choose_gemm_plan(128, 1024, 784, 0, gemm_warp_tiled_warps).tile == GemmBlockTile::t128);  // unknown: 1
    // The rule itself, over a spread of shapes and SM counts: the chosen tile gives every SM 8 warps unless none
    // can, and the next bigger tile would not.
    for (const auto warps : {gemm_register_blocked_warps, gemm_warp_tiled_warps}) {
        for (int sm_count : {1, 8, 46, 108, 132, 148}) {
            for (int M : {1, 10, 97, 128, 784, 1000, 4096, 60000}) {
                for (int N : {1, 10, 128, 784, 1024, 4096}) {
                    for (int K : {10, 128, 784}) {
                        INFO("M=" << M << " N=" << N << " K=" << K << " SMs=" << sm_count);
                        const GemmPlan plan = choose_gemm_plan(M, N, K, sm_count, warps);
                        const long long wanted = 8LL * sm_count;
                        CHECK((gemm_warp_count(plan.tile, M, N, plan.split.splits, warps) >= wanted ||
                               plan.tile == GemmBlockTile::t16));
                        if (plan.tile != GemmBlockTile::t128) {
                            const auto bigger = static_cast<GemmBlockTile>(2 * static_cast<int>(plan.tile));
                            CHECK(gemm_warp_count(bigger, M, N, plan.split.splits, warps) < wanted);
                        }
                    }
                }
            }
        }
    }
}

// Split-K's sums: the slices added in a fixed order, so the result is the same bits run after run, with every tile
// and in every step 4–7 (they split alike: the split is the shape's), and within the float64 reference's tolerance;
// not the unsplit sum's bits (step 3 does not split), only close to them. Shapes with M ≤ 128 and K > 128: the
// lessons' batch, a partial batch, primes, leading dimensions that are not multiples of 4, a misaligned view.
TEST_CASE("gemm split-K (M <= 128) is bitwise reproducible and the same in steps 4 to 7 and every tile",
          "[kernels][gemm]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const GemmCase cases[] = {
        {128, 136, 784, 0, 0, 1.0f, 0.0f, true, true},  // 7 slices of 112
        {97, 67, 1001, 0, 0, 0.75f, 0.5f, true, true},  // 8 slices of 128, the last 105; odd ld: element-wise
        {13, 130, 257, 1, 1, 2.0f, 1.0f, false, true},  // 3 slices of 88, the last 81; misaligned
        {1, 5, 300, 3, 0, 1.0f, -1.0f, true, false},    // 3 slices of 104, the last 92; padded to multiples of 4
    };
    for (const GemmCase& c : cases) {
        for (Transpose ta : kTransposes) {
            for (Transpose tb : kTransposes) {
                const GemmProblem p = make_problem(rng, ta, tb, c);
                CHECK(gemm_split_k(c.M, c.K).splits > 1);
                std::vector<float> first;
                for (const TiledRun& r :
                     steps_4_to_7_with_tiles({kBlockTiles[0], kBlockTiles[1], kBlockTiles[2], kBlockTiles[3]})) {
                    const std::vector<float> got = run_and_check(p, r.run, r.name);
                    if (first.empty()) first = got;
                    INFO(r.name << " against register_blocked 16, " << describe(p));
                    REQUIRE(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)) == 0);
                }
                const std::vector<float> again = run_and_check(p, run_version(kFastestGemm), "top step, again");
                REQUIRE(std::memcmp(again.data(), first.data(), again.size() * sizeof(float)) == 0);
                run_and_check(p, run_version(GemmVersion::smem_tiled), "smem_tiled (unsplit)");
            }
        }
    }
}

// The top step through gemm(), with the tile this device's SM count chooses (128×128 on one CPU worker: 12 × 11 =
// 132 tiles; 64×64 on a 132-SM GPU). 1409 and 1297 are primes: edges in M, N and K; pad 3 makes every leading
// dimension a multiple of 4 (float4 path).
TEST_CASE("gemm's top step is right at a large prime shape with the tile this device chooses", "[kernels][gemm]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const GemmProblem p =
        make_problem(rng, Transpose::no, Transpose::no, {1409, 1297, 9, /*pad=*/3, 0, 1.0f, 0.5f, true, true});
    run_and_check(p, run_version(kFastestGemm), gemm_version_name(kFastestGemm));
}

TEST_CASE("gemm versions are numbered 1 to kGemmVersionCount with distinct names", "[kernels][gemm]") {
    std::vector<std::string> names;
    for (int version = 1; version <= kGemmVersionCount; ++version) {
        const GemmVersion v = gemm_version_from_int(version);
        REQUIRE(static_cast<int>(v) == version);
        names.push_back(gemm_version_name(v));
        REQUIRE(names.back() != "unknown");
    }
    std::sort(names.begin(), names.end());
    REQUIRE(std::adjacent_find(names.begin(), names.end()) == names.end());
    REQUIRE(static_cast<int>(GemmVersion::naive) == 1);
    REQUIRE(static_cast<int>(kFastestGemm) == kGemmVersionCount);
    REQUIRE_THROWS_AS(gemm_version_from_int(0), std::invalid_argument);
    REQUIRE_THROWS_AS(gemm_version_from_int(kGemmVersionCount + 1), std::invalid_argument);
}

// Host-side checks only: nothing is launched, so no device is needed.
TEST_CASE("gemm rejects bad leading dimensions and sizes and pointers and grids with a clear message",
          "[kernels][gemm]") {
    float* p = reinterpret_cast<float*>(uintptr_t{256});
    const auto message_of = [](const std::function<void()>& call) -> std::string {
        try {
            call();
        } catch (const std::invalid_argument& e) {
            return e.what();
        }
        return "(no exception)";
    };
    for (int version = 1; version <= kGemmVersionCount; ++version) {
        const GemmVersion v = gemm_version_from_int(version);
        INFO("version " << gemm_version_name(v));
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
        REQUIRE_THROWS_AS(gemm(v, Transpose::no, Transpose::no, 4, 5, 6, 1.0f, nullptr, 6, p, 5, 0.0f, p, 5),
                          std::invalid_argument);
        // A × B with A 100000 × 100000: beyond int index arithmetic.
        const std::string too_big = message_of(
            [&] { gemm(v, Transpose::no, Transpose::no, 100000, 1, 100000, 1.0f, p, 100000, p, 1, 0.0f, p, 1); });
        CHECK(too_big.find("int index") != std::string::npos);
        // Too many blocks along grid.y: N's blocks of 8 for step 1, M's for the others (steps 4–7: 128 rows each).
        const int rows = v == GemmVersion::naive ? 600001 : 10000000;
        const std::string grid = message_of([&] {
            if (v == GemmVersion::naive) {
                gemm(v, Transpose::no, Transpose::no, 1, rows, 1, 1.0f, p, 1, p, rows, 0.0f, p, rows);
            } else {
                gemm(v, Transpose::no, Transpose::no, rows, 1, 1, 1.0f, p, 1, p, 1, 0.0f, p, 1);
            }
        });
        CHECK(grid.find("65535") != std::string::npos);
        CHECK(grid.find(gemm_version_name(v)) != std::string::npos);
        // Empty outputs are fine and launch nothing.
        gemm(v, Transpose::no, Transpose::no, 0, 5, 6, 1.0f, nullptr, 6, nullptr, 5, 0.0f, nullptr, 5);
    }
}
