// kernels/gemm_tiled.cuh — GEMM version 3: version 2 plus shared-memory tiling.
//
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias)   (contract in kernels/gemm_common.cuh)
// idea:     a block computes a 32×32 tile of C. It walks K in steps of 32: the whole block copies a 32×32 tile of
//           op(A) and one of op(B) into shared memory (each thread one element of each), waits, and every thread
//           then reads its 32 multiply-adds from shared memory. Each global element is now read by the block once
//           instead of 32 times. The copy is arranged so consecutive threads read consecutive addresses for every
//           layout (a transposed operand is written transposed into shared memory instead), which also fixes
//           version 2's uncoalesced reads of a transposed B.
// launch:   block (32, 32) = 1024 threads; grid (ceil(N / 32), ceil(M / 32)), the M tiles spread over grid y and z
//           (gemm_grid).
#pragma once

#include "kernels/gemm_common.cuh"

inline constexpr int kTiledGemmTile = 32;

template <bool kTransA, bool kTransB>
__global__ void gemm_tiled_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                                  float beta, float* C, int ldc, const float* bias, bool relu) {
    constexpr int T = kTiledGemmTile;
    // +1 column of padding: the transposed stores below write down a column; without it all 32 threads of a
    // warp would hit the same shared-memory bank.
    __shared__ float a_tile[T][T + 1];  // a_tile[m][k] = op(A)[row0 + m][k0 + k]
    __shared__ float b_tile[T][T + 1];  // b_tile[k][n] = op(B)[k0 + k][col0 + n]

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = gemm_tile_y() * T, col0 = blockIdx.x * T;
    const int row = row0 + ty, col = col0 + tx;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {
        // Out-of-range elements are loaded as 0, so they add nothing and the inner loop needs no bounds checks.
        if (!kTransA) {  // A is M×K: consecutive tx read consecutive k
            const int r = row0 + ty, k = k0 + tx;
            a_tile[ty][tx] = (r < M && k < K) ? A[static_cast<size_t>(r) * lda + k] : 0.0f;
        } else {  // A is stored K×M: consecutive tx read consecutive m, stored transposed
            const int k = k0 + ty, r = row0 + tx;
            a_tile[tx][ty] = (r < M && k < K) ? A[static_cast<size_t>(k) * lda + r] : 0.0f;
        }
        if (!kTransB) {  // B is K×N: consecutive tx read consecutive n
            const int k = k0 + ty, c = col0 + tx;
            b_tile[ty][tx] = (k < K && c < N) ? B[static_cast<size_t>(k) * ldb + c] : 0.0f;
        } else {  // B is stored N×K: consecutive tx read consecutive k, stored transposed
            const int c = col0 + ty, k = k0 + tx;
            b_tile[tx][ty] = (k < K && c < N) ? B[static_cast<size_t>(c) * ldb + k] : 0.0f;
        }
        __syncthreads();  // the tiles are complete before anyone reads them

#pragma unroll
        for (int k = 0; k < T; ++k) acc += a_tile[ty][k] * b_tile[k][tx];

        __syncthreads();  // everyone is done reading before the next iteration overwrites the tiles
    }

    if (row < M && col < N) {
        float* c = C + static_cast<size_t>(row) * ldc + col;
        *c = gemm_epilogue_value(acc, alpha, beta, c, bias, relu, col);
    }
}

inline void gemm_tiled(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                       const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                       cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_tiled", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    const dim3 block(kTiledGemmTile, kTiledGemmTile);
    const dim3 grid = gemm_grid(ceil_div(N, kTiledGemmTile), ceil_div(M, kTiledGemmTile));
    gemm_dispatch_transposes(op_a, op_b, [&](auto trans_a, auto trans_b) {
        launch(gemm_tiled_kernel<decltype(trans_a)::value, decltype(trans_b)::value>, grid, block, 0, stream, M, N, K,
               alpha, A, lda, B, ldb, beta, C, ldc, epilogue.bias, epilogue.relu);
    });
}
