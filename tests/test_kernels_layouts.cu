// tests/test_kernels_layouts.cu — every fp32 GEMM step (kernels/gemm.cuh; steps 4–6 with both block tiles) at every
// residue 1–7 (mod 8) of M, N and K, on the 16-byte path: leading dimensions rounded up to a multiple of 4 floats plus
// 4 more (NaN), aligned pointers, NaN-poisoned output. Each dimension is a stored row's length for some transpose
// combination, so a float4 let past a row's end reads the NaN padding, and a store past it writes the padding.
// (The HGEMM's sweep is in test_kernels_hgemm.cu; the other GEMM layouts in test_kernels_gemm.cu.)
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/reference_ops.h"
#include "kernels/gemm.cuh"

namespace {

using test_support::DeviceBuffer;

constexpr uint32_t kPoisonBits = 0xFFFFFFFFu;  // what DeviceBuffer's 0xFF poison makes of a float (a NaN)
const float kPoison = std::bit_cast<float>(kPoisonBits);

struct Shape {
    int M, N, K;
    float beta = 0.0f;
    bool bias = false, relu = false;
};

// A Latin square of residues (each dimension takes every residue 1–7 once), and all three ≡ 7 with the whole
// epilogue; sizes cross the 64-wide block tile and the 32-deep k-tile.
std::vector<Shape> residue_shapes() {
    std::vector<Shape> shapes;
    for (int i = 0; i < 7; ++i) shapes.push_back({56 + (i + 1), 64 + ((i + 3) % 7 + 1), 32 + ((i + 5) % 7 + 1)});
    shapes.push_back({63, 71, 39, /*beta=*/-1.5f, /*bias=*/true, /*relu=*/true});
    return shapes;
}

int padded_ld(int cols) {
    return (std::max(cols, 1) + 3) / 4 * 4 + 4;
}

// rows×cols random values in [-1, 1] with leading dimension ld, NaN in the padding and one element past the end.
std::vector<float> make_matrix(std::mt19937_64& rng, int rows, int cols, int ld) {
    std::vector<float> m(static_cast<size_t>(rows) * ld + 1, kPoison);
    const std::vector<float> values = test_support::random_floats(rng, static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r)
        std::copy_n(values.begin() + static_cast<size_t>(r) * cols, cols, m.begin() + static_cast<size_t>(r) * ld);
    return m;
}

using WithTile = void (*)(GemmBlockTile, Transpose, Transpose, int, int, int, float, const float*, int, const float*,
                          int, float, float*, int, GemmEpilogue, cudaStream_t);

// One shape, one transpose combination, fresh inputs: the step's result against the float64 reference, and nothing
// outside the matrix written.
template <typename Run>
void run_and_check(std::mt19937_64& rng, const std::string& name, Transpose ta, Transpose tb, const Shape& s, Run run) {
    const bool trans_a = ta == Transpose::yes, trans_b = tb == Transpose::yes;
    const int lda = padded_ld(trans_a ? s.M : s.K), ldb = padded_ld(trans_b ? s.K : s.N), ldc = padded_ld(s.N);
    const std::vector<float> a = make_matrix(rng, trans_a ? s.K : s.M, trans_a ? s.M : s.K, lda);
    const std::vector<float> b = make_matrix(rng, trans_b ? s.N : s.K, trans_b ? s.K : s.N, ldb);
    const std::vector<float> c_init =
        s.beta != 0.0f ? make_matrix(rng, s.M, s.N, ldc) : std::vector<float>(size_t(s.M) * ldc + 1, kPoison);
    const std::vector<float> bias = test_support::random_floats(rng, s.N);
    INFO(name << " op_a=" << (trans_a ? "T" : "N") << " op_b=" << (trans_b ? "T" : "N") << " M=" << s.M << " N=" << s.N
              << " K=" << s.K << " lda=" << lda << " ldb=" << ldb << " ldc=" << ldc);

    DeviceBuffer<float> d_a(a), d_b(b), d_c(c_init), d_bias(bias);
    run(ta, tb, s.M, s.N, s.K, 1.0f, d_a.get(), lda, d_b.get(), ldb, s.beta, d_c.get(), ldc,
        GemmEpilogue{s.bias ? d_bias.get() : nullptr, s.relu});
    const std::vector<float> got_all = d_c.download();

    std::vector<double> c_ref(c_init.begin(), c_init.end());
    reference::gemm<float, double>(trans_a, trans_b, s.M, s.N, s.K, 1.0, a.data(), lda, b.data(), ldb, s.beta,
                                   c_ref.data(), ldc);
    std::vector<double> ref;
    std::vector<float> got;
    size_t touched = 0;
    for (size_t i = 0; i < got_all.size(); ++i) {
        const int r = int(i / ldc), col = int(i % ldc);
        if (r >= s.M || col >= s.N) {
            touched += std::bit_cast<uint32_t>(got_all[i]) != kPoisonBits;
            continue;
        }
        double value = c_ref[i] + (s.bias ? bias[col] : 0.0);
        ref.push_back(s.relu ? std::max(value, 0.0) : value);
        got.push_back(got_all[i]);
    }
    constexpr double eps = std::numeric_limits<float>::epsilon();
    REQUIRE(test_support::count_mismatches(got, ref, 8.0 * eps * (s.K + std::fabs(s.beta) + 2.0), 64.0 * eps, "C") ==
            0);
    REQUIRE(touched == 0);  // the padding columns and the element past the end
}

template <typename Run>
void sweep(const std::string& name, Run run) {
    auto rng = test_support::rng_for_test();
    for (const Shape& s : residue_shapes()) {
        for (Transpose ta : {Transpose::no, Transpose::yes}) {
            for (Transpose tb : {Transpose::no, Transpose::yes}) run_and_check(rng, name, ta, tb, s, run);
        }
    }
}

}  // namespace

TEST_CASE("gemm: every step takes every residue 1-7 (mod 8) of M N K with 16-byte aligned padded rows",
          "[kernels][gemm][layouts]") {
    REQUIRE_DEVICE();
    for (int i = 1; i <= kGemmVersionCount; ++i) {
        const GemmVersion v = gemm_version_from_int(i);
        sweep(gemm_version_name(v),
              [v](Transpose ta, Transpose tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                  int ldb, float beta, float* C, int ldc,
                  GemmEpilogue epilogue) { gemm(v, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue); });
    }
    // Steps 4–7 pick their block tile by the output's size and the SM count (choose_gemm_plan): every tile too.
    const struct {
        const char* name;
        WithTile with_tile;
    } tiled[] = {{"register_blocked", gemm_register_blocked_with_tile},
                 {"vectorized", gemm_vectorized_with_tile},
                 {"double_buffered", gemm_double_buffered_with_tile}};
    for (const auto& step : tiled) {
        for (GemmBlockTile tile : {GemmBlockTile::t16, GemmBlockTile::t32, GemmBlockTile::t64, GemmBlockTile::t128}) {
            sweep(std::string(step.name) + " " + std::to_string(int(tile)),
                  [&](Transpose ta, Transpose tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue) {
                      step.with_tile(tile, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, 0);
                  });
        }
    }
}
