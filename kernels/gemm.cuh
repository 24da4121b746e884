// kernels/gemm.cuh — the GEMM entry point lessons call: every step behind one signature, plus the three GEMMs of a
// linear layer spelled out.
//
// defines: gemm(version, ...), linear_forward, linear_backward_input, linear_backward_weight; and, through the
//          includes, GemmVersion, kGemmVersionCount, kFastestGemm, gemm_version_name, gemm_version_from_int
//          (kernels/gemm_version.h, host-only: a .cpp file may include it), each step's launcher, Transpose,
//          GemmEpilogue.
//
// The staircase, each step one idea on top of the previous (one file each, read in this order):
//   1 naive             gemm_v1_naive.cuh             one thread per output, threadIdx.x → row (mostly uncoalesced)
//   2 coalesced         gemm_v2_coalesced.cuh         threadIdx.x → column: a warp's accesses coalesce
//   3 smem_tiled        gemm_v3_smem_tiled.cuh        32×32 tiles staged through shared memory
//   4 register_blocked  gemm_v4_register_blocked.cuh  8×8 outputs per thread in registers (128×128 tiles; smaller
//                                                     ones when the output is too small to give every SM 2 blocks)
//   5 vectorized        gemm_v5_vectorized.cuh        float4 loads and stores, k-major A tile: conflict-free
//   6 double_buffered   gemm_v6_double_buffered.cuh   the next tiles load while this one is multiplied
//   7 warp_tiled        gemm_v7_warp_tiled.cuh        each warp owns a sub-tile: less shared traffic per FMA
// Every step takes any M, N, K and leading dimensions and applies the epilogue (bias, ReLU, alpha, beta) the same
// way (contract: gemm_common.cuh). Steps 4–7 give the same bits as each other, whatever tile they choose
// (choose_gemm_plan in gemm_common.cuh: split-K for M ≤ 128 by the shape alone, then the biggest of 128, 64, 32, 16
// whose grid gives every SM of this GPU 8 warps).
#pragma once

#include <stdexcept>

#include "kernels/gemm_common.cuh"
#include "kernels/gemm_version.h"
#include "kernels/gemm_v1_naive.cuh"
#include "kernels/gemm_v2_coalesced.cuh"
#include "kernels/gemm_v3_smem_tiled.cuh"
#include "kernels/gemm_v4_register_blocked.cuh"
#include "kernels/gemm_v5_vectorized.cuh"
#include "kernels/gemm_v6_double_buffered.cuh"
#include "kernels/gemm_v7_warp_tiled.cuh"

inline GemmLauncher gemm_launcher(GemmVersion version) {
    switch (version) {
        case GemmVersion::naive:
            return gemm_naive;
        case GemmVersion::coalesced:
            return gemm_coalesced;
        case GemmVersion::smem_tiled:
            return gemm_smem_tiled;
        case GemmVersion::register_blocked:
            return gemm_register_blocked;
        case GemmVersion::vectorized:
            return gemm_vectorized;
        case GemmVersion::double_buffered:
            return gemm_double_buffered;
        case GemmVersion::warp_tiled:
            return gemm_warp_tiled;
    }
    throw std::invalid_argument("gemm: a GemmVersion outside 1..kGemmVersionCount");
}

// C = act(alpha·op(A)·op(B) + beta·C + bias) with the chosen step (full contract in kernels/gemm_common.cuh).
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
