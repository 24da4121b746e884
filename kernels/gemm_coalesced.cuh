// kernels/gemm_coalesced.cuh — GEMM version 2: version 1 with the thread mapping swapped for coalesced access.
//
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias)   (contract in kernels/gemm_common.cuh)
// idea:     threadIdx.x → COLUMN. The 32 threads of a warp now share one row: they all read the same element of
//           op(A) (one broadcast), read 32 neighbouring elements of a row of B and write 32 neighbouring elements
//           of C — one or two memory transactions each instead of 32.
// limits:   when B is transposed (dX = dY·Wᵀ) the warp's B reads walk down a column of the stored B and stay
//           uncoalesced; version 3 stages tiles through shared memory, where every layout can be loaded coalesced.
// launch:   block (32, 8); grid (ceil(N / 32), ceil(M / 8)), the M tiles spread over grid y and z (gemm_grid).
#pragma once

#include "kernels/gemm_common.cuh"

template <bool kTransA, bool kTransB>
__global__ void gemm_coalesced_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                                      int ldb, float beta, float* C, int ldc, const float* bias, bool relu) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // the only change from version 1: x ↔ y
    const int row = gemm_tile_y() * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;

    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += gemm_load<kTransA>(A, lda, row, k) * gemm_load<kTransB>(B, ldb, k, col);
    }
    float* c = C + static_cast<size_t>(row) * ldc + col;
    *c = gemm_epilogue_value(acc, alpha, beta, c, bias, relu, col);
}

inline void gemm_coalesced(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                           cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_coalesced", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    const dim3 block(32, 8);
    const dim3 grid = gemm_grid(ceil_div(N, 32), ceil_div(M, 8));
    gemm_dispatch_transposes(op_a, op_b, [&](auto trans_a, auto trans_b) {
        launch(gemm_coalesced_kernel<decltype(trans_a)::value, decltype(trans_b)::value>, grid, block, 0, stream, M, N,
               K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue.bias, epilogue.relu);
    });
}
