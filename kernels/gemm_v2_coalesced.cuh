// kernels/gemm_v2_coalesced.cuh — GEMM step 2: step 1 with threadIdx.x → COLUMN, so a warp's accesses coalesce.
//
// idea:     the only change from step 1 is which thread index walks which dimension (the two lines marked below).
//           The 32 threads of a warp now share one row and take 32 consecutive columns: their reads of op(A) become
//           one broadcast, their reads of a row of B and their writes to C one 128-byte stretch each, instead of
//           32 separate sectors. (The order of the additions is unchanged: the results are the same bits.)
// limits:   when B is stored transposed (op_b = T, the input gradient dX = dY·Wᵀ) the warp's 32 columns of op(B)
//           are 32 rows of the stored B, ldb floats apart: those reads stay uncoalesced. Step 3 stages tiles
//           through shared memory, where every layout can be read from global memory coalesced.
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias), the contract in kernels/gemm_common.cuh; any M, N, K.
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   block (32, 8); grid (ceil(N / 32), ceil(M / 8)); M ≤ 524,280 (grid.y ≤ 65535 blocks of 8).
#pragma once

#include "kernels/gemm_common.cuh"

template <bool kTransA, bool kTransB>
__global__ void gemm_coalesced_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                                      int ldb, float beta, float* C, int ldc, const float* bias, bool relu) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // changed: consecutive threads, consecutive columns
    const int row = blockIdx.y * blockDim.y + threadIdx.y;  // changed: the same row for the whole warp
    if (row >= M || col >= N) return;

    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        // op(A)[row][k]. Either layout: one address for the whole warp (a single row): a broadcast.
        const float a = kTransA ? A[k * lda + row] : A[row * lda + k];
        // op(B)[k][col]. B stored K×N: 32 neighbouring floats of row k: coalesced (forward, weight gradient).
        // Stored N×K (op_b = T, input gradient Wᵀ): 32 rows of B, ldb floats apart: uncoalesced (ldb ≥ 8).
        const float b = kTransB ? B[col * ldb + k] : B[k * ldb + col];
        acc += a * b;
    }
    // C[row][col]: 32 neighbouring floats of one row: a coalesced store, in every transpose case.
    float* c = C + row * ldc + col;
    *c = gemm_epilogue_value(acc, alpha, beta, c, bias, relu, col);
}

inline void gemm_coalesced(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                           cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_coalesced", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    gemm_check_grid_y("gemm_coalesced", "M", M, 8);
    const auto kernel =
        gemm_pick_transposes(op_a, op_b, gemm_coalesced_kernel<false, false>, gemm_coalesced_kernel<false, true>,
                             gemm_coalesced_kernel<true, false>, gemm_coalesced_kernel<true, true>);
    kernel<<<dim3(cuda_teach::ceil_div(N, 32), cuda_teach::ceil_div(M, 8)), dim3(32, 8), 0, stream>>>(
        M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue.bias, epilogue.relu);
    CUDA_CHECK(cudaGetLastError());
}
