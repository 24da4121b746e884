// kernels/gemm_common.cuh — what every GEMM version shares: the contract, the epilogue, argument checks, the grid.
//
// Every version computes, for row-major matrices,
//     C = act( alpha · op(A) · op(B)  +  beta · C  +  bias )        op(A): M×K, op(B): K×N, C: M×N
// where op(X) is X or Xᵀ (Transpose::yes), bias is a length-N row vector added to every row (or none), and act is
// ReLU or the identity. A is stored M×K (lda ≥ K), or K×M (lda ≥ M) when transposed; B is K×N (ldb ≥ N), or N×K
// (ldb ≥ K) when transposed. When beta == 0, C is not read (as in BLAS), so C may hold garbage or NaN.
//
// The three GEMMs of a linear layer Y = X·W (X: batch×in, W: in×out, both row-major):
//     forward          Y  = X  · W    gemm(v, Transpose::no,  Transpose::no,  batch, out, in,  ...)  + bias, ReLU
//     input gradient   dX = dY · Wᵀ   gemm(v, Transpose::no,  Transpose::yes, batch, in,  out, ...)
//     weight gradient  dW = Xᵀ · dY   gemm(v, Transpose::yes, Transpose::no,  in,    out, batch, ...)
// kernels/gemm.cuh wraps exactly these three as linear_forward / linear_backward_input / linear_backward_weight.
//
// Every version's launcher has the same signature (GemmLauncher below), so a lesson switches versions by changing
// one word, and the diff between two consecutive version files is one idea.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/launch.h"

enum class Transpose { no, yes };

// What happens to each output after the dot product, in the same kernel (so the activation is written once):
// add a bias row vector, then apply ReLU.
struct GemmEpilogue {
    const float* bias = nullptr;  // length N, or nullptr for none
    bool relu = false;
};

// The one signature every version's launcher has.
using GemmLauncher = void (*)(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                              const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                              cudaStream_t stream);

// op(X)[row][col] for a matrix stored row-major with leading dimension ld (kTrans: stored transposed).
template <bool kTrans>
__host__ __device__ __forceinline__ float gemm_load(const float* X, int ld, int row, int col) {
    return kTrans ? X[static_cast<size_t>(col) * ld + row] : X[static_cast<size_t>(row) * ld + col];
}

// The epilogue every version applies to one finished dot product `acc` for output (row, col):
//     out = act(alpha·acc + beta·C_old + bias[col])
__device__ __forceinline__ float gemm_epilogue_value(float acc, float alpha, float beta, const float* c_old,
                                                     const float* bias, bool relu, int col) {
    float out = alpha * acc;
    if (beta != 0.0f) out += beta * *c_old;  // skipping the read when beta == 0 keeps NaN garbage in C out
    if (bias != nullptr) out += bias[col];
    if (relu) out = fmaxf(out, 0.0f);
    return out;
}

// Host-side argument check shared by the launchers: one clear message instead of an out-of-bounds kernel.
// Returns false when there is nothing to do (an empty output).
inline bool gemm_check_arguments(const char* who, Transpose op_a, Transpose op_b, int M, int N, int K, const float* A,
                                 int lda, const float* B, int ldb, const float* C, int ldc) {
    std::ostringstream problem;
    const int a_cols = op_a == Transpose::no ? K : M;  // columns of A as stored
    const int b_cols = op_b == Transpose::no ? N : K;
    if (M < 0 || N < 0 || K < 0) {
        problem << "negative size M=" << M << " N=" << N << " K=" << K;
    } else if (lda < (a_cols > 0 ? a_cols : 1)) {
        problem << "lda=" << lda << " is smaller than A's " << a_cols << " columns";
    } else if (ldb < (b_cols > 0 ? b_cols : 1)) {
        problem << "ldb=" << ldb << " is smaller than B's " << b_cols << " columns";
    } else if (ldc < (N > 0 ? N : 1)) {
        problem << "ldc=" << ldc << " is smaller than C's " << N << " columns";
    } else if (M > 0 && N > 0 && (C == nullptr || (K > 0 && (A == nullptr || B == nullptr)))) {
        problem << "null matrix pointer";
    }
    const std::string message = problem.str();
    if (!message.empty()) throw std::invalid_argument(std::string(who) + ": " + message);
    return M > 0 && N > 0;
}

// Calls f(std::bool_constant<trans_a>{}, std::bool_constant<trans_b>{}) so a launcher can pick one of the four
// kernel instantiations with compile-time transposes (the index arithmetic then costs nothing at run time).
template <typename F>
void gemm_dispatch_transposes(Transpose op_a, Transpose op_b, F&& f) {
    const bool ta = op_a == Transpose::yes;
    const bool tb = op_b == Transpose::yes;
    if (!ta && !tb) f(std::false_type{}, std::false_type{});
    if (!ta && tb) f(std::false_type{}, std::true_type{});
    if (ta && !tb) f(std::true_type{}, std::false_type{});
    if (ta && tb) f(std::true_type{}, std::true_type{});
}

// The grid. Every version puts one tile coordinate on grid.x and the other on "grid y". grid.x may have 2^31 − 1
// blocks, but grid.y and grid.z only 65535 each: a plain grid.y of ceil(M / 8) would cap version 2 at 524,280 rows.
// gemm_grid() spreads the y tiles over grid.y × grid.z, and gemm_tile_y() in the kernel puts the index back together.
// The last z slice may hold a few blocks past the last tile (fewer than grid.z); they lie outside the matrix and the
// kernels' bounds checks leave them with nothing to do.
inline constexpr int kMaxGridY = 65535;

inline dim3 gemm_grid(int tiles_x, int tiles_y) {
    const int slices = ceil_div(tiles_y, kMaxGridY);  // grid.z
    return dim3(static_cast<unsigned>(tiles_x), static_cast<unsigned>(ceil_div(tiles_y, slices)),
                static_cast<unsigned>(slices));
}

__device__ __forceinline__ int gemm_tile_y() {
    return static_cast<int>(blockIdx.z * gridDim.y + blockIdx.y);
}
