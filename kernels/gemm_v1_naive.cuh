// kernels/gemm_v1_naive.cuh — GEMM step 1: one thread per output element, the triple loop ported as it is.
//
// idea:     each thread owns one C[row][col] and walks k = 0..K-1, reading op(A)'s row and op(B)'s column straight
//           from global memory. threadIdx.x → ROW: the 32 threads of a warp take 32 consecutive rows of one column.
// costs:    every input element is fetched from global memory once per output that uses it (M·N·K loads of each
//           operand in all), and with x → row most of a warp's accesses are uncoalesced: a warp touches a separate
//           32-byte sector per thread where it could have shared a few (the notes at each access say which, per
//           transpose case). Step 2 swaps x and y and fixes most of it.
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias), the contract in kernels/gemm_common.cuh; any M, N, K.
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   block (32, 8); grid (ceil(M / 32), ceil(N / 8)); N ≤ 524,280 (grid.y ≤ 65535 blocks of 8).
#pragma once

#include "kernels/gemm_common.cuh"

template <bool kTransA, bool kTransB>
__global__ void gemm_naive_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                                  float beta, float* C, int ldc, const float* bias, bool relu) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads of a warp: consecutive rows
    const int col = blockIdx.y * blockDim.y + threadIdx.y;  // the same column for the whole warp
    if (row >= M || col >= N) return;                       // the grid is rounded up to whole blocks

    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        // op(A)[row][k]. A stored M×K: the warp's 32 rows lie lda floats apart, a separate sector each (lda ≥ 8):
        // uncoalesced (forward, input gradient). Stored K×M (op_a = T, weight gradient Xᵀ): the 32 rows are
        // neighbours in memory, 128 contiguous bytes: coalesced.
        const float a = kTransA ? A[k * lda + row] : A[row * lda + k];
        // op(B)[k][col]. Either layout: one address for the whole warp (a single column): a broadcast.
        const float b = kTransB ? B[col * ldb + k] : B[k * ldb + col];
        acc += a * b;
    }
    // C[row][col]: 32 rows ldc floats apart, a separate sector per thread (ldc ≥ 8): an uncoalesced store, in
    // every transpose case. bias[col] is one address per warp (a broadcast).
    float* c = C + row * ldc + col;
    *c = gemm_epilogue_value(acc, alpha, beta, c, bias, relu, col);
}

inline void gemm_naive(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                       const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                       cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_naive", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    gemm_check_grid_y("gemm_naive", "N", N, 8);
    const auto kernel =
        gemm_pick_transposes(op_a, op_b, gemm_naive_kernel<false, false>, gemm_naive_kernel<false, true>,
                             gemm_naive_kernel<true, false>, gemm_naive_kernel<true, true>);
    kernel<<<dim3(cuda_teach::ceil_div(M, 32), cuda_teach::ceil_div(N, 8)), dim3(32, 8), 0, stream>>>(
        M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue.bias, epilogue.relu);
    CUDA_CHECK(cudaGetLastError());
}
