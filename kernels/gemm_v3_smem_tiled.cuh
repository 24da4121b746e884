// kernels/gemm_v3_smem_tiled.cuh — GEMM step 3: step 2 plus tiles staged through shared memory.
//
// idea:     a block of 32×32 threads computes a 32×32 tile of C. It walks K in steps of 32: the whole block copies a
//           32×32 tile of op(A) and one of op(B) into shared memory (one element of each per thread), waits, and
//           every thread then takes its 32 multiply-adds from shared memory. Each element fetched from global
//           memory now serves 32 outputs instead of one: 32× fewer global loads. The copy is written per layout
//           so that consecutive threads always read consecutive addresses (a transposed operand is transposed on
//           its way into shared memory), which also fixes step 2's uncoalesced reads of a transposed B.
// costs:    two __syncthreads per k-step, and 2 × 32 × 33 floats (8.25 KiB) of shared memory per block. Each
//           multiply-add now needs two shared-memory reads: shared memory bandwidth, not arithmetic, is the limit
//           (step 4's register blocking attacks that).
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias), the contract in kernels/gemm_common.cuh; any M, N, K
//           (elements past an edge are loaded as 0, so they add nothing).
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   block (32, 32) = 1024 threads; grid (ceil(N / 32), ceil(M / 32)); M ≤ 2,097,120 (grid.y ≤ 65535).
#pragma once

#include "kernels/gemm_common.cuh"

inline constexpr int kSmemTile = 32;

template <bool kTransA, bool kTransB>
__global__ void gemm_smem_tiled_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                                       int ldb, float beta, float* C, int ldc, const float* bias, bool relu) {
    constexpr int T = kSmemTile;
    // A warp is one ty with tx = 0..31. The +1 column of padding puts a_tile[tx][ty] for tx = 0..31 in 32 different
    // banks (address 33·tx + ty), so the transposed stores below are conflict-free too.
    __shared__ float a_tile[T][T + 1];  // a_tile[m][k] = op(A)[row0 + m][k0 + k]
    __shared__ float b_tile[T][T + 1];  // b_tile[k][n] = op(B)[k0 + k][col0 + n]

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * T, col0 = blockIdx.x * T;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {
        if (!kTransA) {  // A stored M×K: row row0 + ty, 32 consecutive k: a coalesced read, a conflict-free store
            const int m = row0 + ty, k = k0 + tx;
            a_tile[ty][tx] = (m < M && k < K) ? A[m * lda + k] : 0.0f;
        } else {  // stored K×M (Xᵀ): row k0 + ty, 32 consecutive m: a coalesced read, stored transposed (padded)
            const int k = k0 + ty, m = row0 + tx;
            a_tile[tx][ty] = (m < M && k < K) ? A[k * lda + m] : 0.0f;
        }
        if (!kTransB) {  // B stored K×N: row k0 + ty, 32 consecutive n: a coalesced read, a conflict-free store
            const int k = k0 + ty, n = col0 + tx;
            b_tile[ty][tx] = (k < K && n < N) ? B[k * ldb + n] : 0.0f;
        } else {  // stored N×K (Wᵀ): row col0 + ty, 32 consecutive k: a coalesced read, stored transposed (padded)
            const int n = col0 + ty, k = k0 + tx;
            b_tile[tx][ty] = (k < K && n < N) ? B[n * ldb + k] : 0.0f;
        }
        __syncthreads();  // the tiles are complete before anyone reads them

        // a_tile[ty][k]: one address for the warp (a broadcast); b_tile[k][tx]: 32 consecutive words, 32 banks.
#pragma unroll
        for (int k = 0; k < T; ++k) acc += a_tile[ty][k] * b_tile[k][tx];

        __syncthreads();  // everyone is done reading before the next iteration overwrites the tiles
    }

    const int row = row0 + ty, col = col0 + tx;
    if (row < M && col < N) {  // C[row][col]: 32 neighbouring floats of one row: a coalesced store
        float* c = C + row * ldc + col;
        *c = gemm_epilogue_value(acc, alpha, beta, c, bias, relu, col);
    }
}

inline void gemm_smem_tiled(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                            const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                            cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_smem_tiled", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    gemm_check_grid_y("gemm_smem_tiled", "M", M, kSmemTile);
    const auto kernel =
        gemm_pick_transposes(op_a, op_b, gemm_smem_tiled_kernel<false, false>, gemm_smem_tiled_kernel<false, true>,
                             gemm_smem_tiled_kernel<true, false>, gemm_smem_tiled_kernel<true, true>);
    kernel<<<dim3(cuda_teach::ceil_div(N, kSmemTile), cuda_teach::ceil_div(M, kSmemTile)), dim3(kSmemTile, kSmemTile),
             0, stream>>>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue.bias, epilogue.relu);
    CUDA_CHECK(cudaGetLastError());
}
