// kernels/hgemm.cuh — the tensor-core GEMM entry point lessons call (fp16 inputs, fp32 accumulation): every step
// behind one signature, plus the three GEMMs of a linear layer spelled out.
//
// defines: hgemm(version, ...), linear_forward_half, linear_backward_input_half, linear_backward_weight_half; and,
//          through the includes, HgemmVersion, kHgemmVersionCount, kFastestHgemm, hgemm_version_name,
//          hgemm_version_from_int (kernels/hgemm_version.h, host-only: a .cpp file may include it), each step's
//          launcher, HgemmEpilogue, Transpose.
//
// The staircase, each step one idea on top of the previous (one file each, read in this order):
//   1 warp_tile   hgemm_v1_warp_tile.cuh   one warp per 32×32 tile, mma fragments loaded from global memory by hand
//   2 block_tile  hgemm_v2_block_tile.cuh  128×128 (or 64×64) block tiles through padded shared memory, ldmatrix
//   3 pipelined   hgemm_v3_pipelined.cuh   cp.async double buffering: the next tiles copy while this one multiplies
// Every step takes any M, N, K and leading dimensions, all four transpose combinations, and writes float or __half
// (contract: hgemm_common.cuh). All three give the same bits (the same mma's in the same order).
#pragma once

#include <stdexcept>
#include <type_traits>

#include "kernels/hgemm_common.cuh"
#include "kernels/hgemm_version.h"
#include "kernels/hgemm_v1_warp_tile.cuh"
#include "kernels/hgemm_v2_block_tile.cuh"
#include "kernels/hgemm_v3_pipelined.cuh"

template <typename OutT>
HgemmLauncher<OutT> hgemm_launcher(HgemmVersion version) {
    static_assert(std::is_same_v<OutT, float> || std::is_same_v<OutT, __half>, "hgemm writes float or __half");
    switch (version) {
        case HgemmVersion::warp_tile:
            return hgemm_warp_tile<OutT>;
        case HgemmVersion::block_tile:
            return hgemm_block_tile<OutT>;
        case HgemmVersion::pipelined:
            return hgemm_pipelined<OutT>;
    }
    throw std::invalid_argument("hgemm: an HgemmVersion outside 1..kHgemmVersionCount");
}

// C = act(alpha·op(A)·op(B) + bias) with the chosen step, A and B fp16, fp32 accumulation, C float or __half (full
// contract in kernels/hgemm_common.cuh).
template <typename OutT>
void hgemm(HgemmVersion version, Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const __half* A,
           int lda, const __half* B, int ldb, OutT* C, int ldc, HgemmEpilogue epilogue = {}, cudaStream_t stream = 0) {
    hgemm_launcher<OutT>(version)(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, epilogue, stream);
}

// A linear layer Y = X·W + b in fp16 with X: batch×in, W: in×out, b: out, Y: batch×out, all row-major and dense
// (the fp32 versions are in kernels/gemm.cuh).

// Y = act(X·W + bias): the forward pass, bias and ReLU fused into the GEMM's epilogue, Y rounded to fp16 once.
inline void linear_forward_half(HgemmVersion version, const __half* X, const __half* W, const __half* bias, bool relu,
                                __half* Y, int batch, int in, int out, cudaStream_t stream = 0) {
    hgemm(version, Transpose::no, Transpose::no, batch, out, in, 1.0f, X, in, W, out, Y, out, HgemmEpilogue{bias, relu},
          stream);
}

// dX = dY·Wᵀ: the gradient flowing to the layer's input (batch×in), in fp16.
inline void linear_backward_input_half(HgemmVersion version, const __half* dY, const __half* W, __half* dX, int batch,
                                       int in, int out, cudaStream_t stream = 0) {
    hgemm(version, Transpose::no, Transpose::yes, batch, in, out, 1.0f, dY, out, W, out, dX, in, {}, stream);
}

// dW = Xᵀ·dY: the weight gradient (in×out), summed over the batch in fp32. GradT float keeps it in fp32 (mixed
// precision: the update goes to fp32 master weights); __half rounds it to fp16 ("pure fp16" training).
template <typename GradT>
void linear_backward_weight_half(HgemmVersion version, const __half* X, const __half* dY, GradT* dW, int batch, int in,
                                 int out, cudaStream_t stream = 0) {
    hgemm(version, Transpose::yes, Transpose::no, in, out, batch, 1.0f, X, in, dY, out, dW, out, {}, stream);
}
