// kernels/gemm.cuh — the GEMM entry point lessons call: every version behind one signature, plus the three GEMMs
// of a linear layer spelled out.
//
// defines: GemmVersion, gemm(version, ...), gemm_version_name, linear_forward, linear_backward_input,
//          linear_backward_weight (and, through the includes, gemm_naive / gemm_coalesced / gemm_tiled /
//          gemm_register_blocked, Transpose, GemmEpilogue).
//
// The versions, each one idea on top of the previous (one file each):
//   1 naive             kernels/gemm_naive.cuh             one thread per output, threadIdx.x → row
//   2 coalesced         kernels/gemm_coalesced.cuh         threadIdx.x → column: a warp's accesses coalesce
//   3 tiled             kernels/gemm_tiled.cuh             32×32 tiles staged through shared memory
//   4 register_blocked  kernels/gemm_register_blocked.cuh  8×8 outputs per thread in registers, float4 loads,
//                                                          double buffering, fused bias + ReLU epilogue
// All versions take any sizes and leading dimensions and apply the epilogue (bias, ReLU) the same way; only version 4
// is fast enough for the epilogue fusion to matter.
#pragma once

#include <stdexcept>
#include <string>

#include "kernels/gemm_coalesced.cuh"
#include "kernels/gemm_common.cuh"
#include "kernels/gemm_naive.cuh"
#include "kernels/gemm_register_blocked.cuh"
#include "kernels/gemm_tiled.cuh"

enum class GemmVersion { naive = 1, coalesced = 2, tiled = 3, register_blocked = 4 };
inline constexpr int kGemmVersionCount = 4;

inline const char* gemm_version_name(GemmVersion version) {
    switch (version) {
        case GemmVersion::naive:
            return "naive";
        case GemmVersion::coalesced:
            return "coalesced";
        case GemmVersion::tiled:
            return "tiled";
        case GemmVersion::register_blocked:
            return "register_blocked";
    }
    return "unknown";
}

// For command-line flags: 1..4 → GemmVersion, anything else → std::invalid_argument.
inline GemmVersion gemm_version_from_int(int version) {
    if (version < 1 || version > kGemmVersionCount) {
        throw std::invalid_argument("GEMM version must be 1..4, not " + std::to_string(version));
    }
    return static_cast<GemmVersion>(version);
}

inline GemmLauncher gemm_launcher(GemmVersion version) {
    switch (version) {
        case GemmVersion::naive:
            return gemm_naive;
        case GemmVersion::coalesced:
            return gemm_coalesced;
        case GemmVersion::tiled:
            return gemm_tiled;
        case GemmVersion::register_blocked:
            return gemm_register_blocked;
    }
    throw std::invalid_argument("unknown GEMM version " + std::to_string(static_cast<int>(version)));
}

// C = act(alpha·op(A)·op(B) + beta·C + bias) with the chosen version (full contract in kernels/gemm_common.cuh).
inline void gemm(GemmVersion version, Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue = {},
                 cudaStream_t stream = 0) {
    gemm_launcher(version)(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, stream);
}

// A linear layer Y = X·W + b with X: batch×in, W: in×out, b: out, Y: batch×out, all row-major and dense.

// Y = act(X·W + bias): the forward pass, bias and ReLU fused into the GEMM's epilogue.
inline void linear_forward(GemmVersion version, const float* X, const float* W, const float* bias, bool relu, float* Y,
                           int batch, int in, int out, cudaStream_t stream = 0) {
    gemm(version, Transpose::no, Transpose::no, batch, out, in, 1.0f, X, in, W, out, 0.0f, Y, out,
         GemmEpilogue{bias, relu}, stream);
}

// dX = dY·Wᵀ: the gradient flowing to the layer's input (batch×in).
inline void linear_backward_input(GemmVersion version, const float* dY, const float* W, float* dX, int batch, int in,
                                  int out, cudaStream_t stream = 0) {
    gemm(version, Transpose::no, Transpose::yes, batch, in, out, 1.0f, dY, out, W, out, 0.0f, dX, in, {}, stream);
}

// dW = Xᵀ·dY + beta·dW: the weight gradient (in×out), summed over the batch. beta = 1 accumulates into dW (gradient
// accumulation over several micro-batches); beta = 0 overwrites it.
inline void linear_backward_weight(GemmVersion version, const float* X, const float* dY, float* dW, int batch, int in,
                                   int out, float beta = 0.0f, cudaStream_t stream = 0) {
    gemm(version, Transpose::yes, Transpose::no, in, out, batch, 1.0f, X, in, dY, out, beta, dW, out, {}, stream);
}
