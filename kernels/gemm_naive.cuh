// kernels/gemm_naive.cuh — GEMM version 1: one thread per output element, the direct port of the triple loop.
//
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias)   (contract in kernels/gemm_common.cuh)
// idea:     each thread owns one C[row][col] and walks K, reading op(A)'s row and op(B)'s column from global memory.
// mapping:  threadIdx.x → ROW. The 32 threads of a warp therefore handle 32 different rows: their reads of A and
//           their writes to C are 32 separate memory transactions (uncoalesced). Version 2 fixes exactly that.
// launch:   block (32, 8); grid (ceil(M / 32), ceil(N / 8)), the N tiles spread over grid y and z (gemm_grid).
#pragma once

#include "kernels/gemm_common.cuh"

template <bool kTransA, bool kTransB>
__global__ void gemm_naive_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                                  float beta, float* C, int ldc, const float* bias, bool relu) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = gemm_tile_y() * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;  // the grid is rounded up to whole blocks

    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += gemm_load<kTransA>(A, lda, row, k) * gemm_load<kTransB>(B, ldb, k, col);
    }
    float* c = C + static_cast<size_t>(row) * ldc + col;
    *c = gemm_epilogue_value(acc, alpha, beta, c, bias, relu, col);
}

inline void gemm_naive(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                       const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                       cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_naive", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    const dim3 block(32, 8);
    const dim3 grid = gemm_grid(ceil_div(M, 32), ceil_div(N, 8));
    gemm_dispatch_transposes(op_a, op_b, [&](auto trans_a, auto trans_b) {
        launch(gemm_naive_kernel<decltype(trans_a)::value, decltype(trans_b)::value>, grid, block, 0, stream, M, N, K,
               alpha, A, lda, B, ldb, beta, C, ldc, epilogue.bias, epilogue.relu);
    });
}
