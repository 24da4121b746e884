// kernels/gemm_v4_register_blocked.cuh — GEMM step 4: step 3 plus 2-D register blocking (8×8 outputs per thread).
//
// idea:     in step 3 every multiply-add costs two shared-memory reads, so shared memory, not arithmetic, is the
//           limit. Here each thread computes an 8×8 block of C held in 64 registers: per k it reads 8 values of op(A)
//           (a column of its rows) and 8 of op(B) (a row of its columns) into registers and does all 8 × 8 = 64
//           multiply-adds with them: 16 shared-memory reads per 64 FMAs instead of 128. The block tile grows to
//           BM×BN = 128×128 (or 64×64, see GemmTile in gemm_common.cuh) and K is walked in steps of BK = 8.
// costs:    64 accumulators + 16 operands in registers per thread; 64 outputs per thread means 64× fewer threads,
//           so a small output (8 tiles at batch 128) leaves most SMs idle, hence the 64×64 tile for small outputs.
//           The shared-memory reads of op(B) still conflict (noted below), and every access moves 4 bytes: step 5
//           fixes both.
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias), the contract in kernels/gemm_common.cuh; any M, N, K
//           (element-wise loads with bounds checks, zero fill past an edge).
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   BM·BN/64 threads (256, or 64 for 64×64); grid (ceil(N / BN), ceil(M / BM)); M ≤ 65535·BM.
#pragma once

#include "kernels/gemm_common.cuh"

template <int kTile, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kTile* kTile / 64)
    gemm_register_blocked_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                                 float beta, float* C, int ldc, const float* bias, bool relu) {
    constexpr int BM = kTile, BN = kTile, BK = 8, TM = 8, TN = 8;
    constexpr int kThreads = (BM / TM) * (BN / TN);
    // a_tile is m-major as in step 3; +1 keeps the transposed stores of op_a = T conflict-free (address 9m + k).
    // b_tile rows are padded by 4: the transposed stores of op_b = T (4 n × 8 k per warp) land in banks 4k + n.
    __shared__ float a_tile[BM][BK + 1];  // a_tile[m][k] = op(A)[row0 + m][k0 + k]
    __shared__ float b_tile[BK][BN + 4];  // b_tile[k][n] = op(B)[k0 + k][col0 + n]

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);  // this thread's outputs: rows 8ty.., columns 8tx..
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Each thread copies BM·BK / kThreads elements of each tile, consecutive threads on consecutive addresses.
        for (int i = tid; i < BM * BK; i += kThreads) {
            if (!kTransA) {  // A stored M×K: a warp reads 8 consecutive k of 4 rows (32 bytes each); its stores
                             // (address 9m + k) hit 3 of the 32 banks twice: a 2-way conflict
                const int m = i / BK, k = i % BK;
                a_tile[m][k] = (row0 + m < M && k0 + k < K) ? A[(row0 + m) * lda + k0 + k] : 0.0f;
            } else {  // stored K×M (Xᵀ): a warp reads 32 consecutive m of row k0 + k: coalesced
                const int k = i / BM, m = i % BM;
                a_tile[m][k] = (row0 + m < M && k0 + k < K) ? A[(k0 + k) * lda + row0 + m] : 0.0f;
            }
        }
        for (int i = tid; i < BN * BK; i += kThreads) {
            if (!kTransB) {  // B stored K×N: a warp reads 32 consecutive n of row k0 + k: coalesced
                const int k = i / BN, n = i % BN;
                b_tile[k][n] = (k0 + k < K && col0 + n < N) ? B[(k0 + k) * ldb + col0 + n] : 0.0f;
            } else {  // stored N×K (Wᵀ): a warp reads 8 consecutive k of 4 rows (32 bytes each)
                const int n = i / BK, k = i % BK;
                b_tile[k][n] = (k0 + k < K && col0 + n < N) ? B[(col0 + n) * ldb + k0 + k] : 0.0f;
            }
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            // a_tile[8ty + i][k]: a warp holds 2 (64×64 tile: 4) values of ty, 72 words apart: different banks,
            // and the lanes that share ty read one address (a broadcast). Conflict-free.
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = a_tile[TM * ty + i][k];
                // b_tile[k][8tx + j]: 16 (64×64 tile: 8) values of tx, 8 words apart, fall into only 4 banks: a 4-way
                // (2-way) bank conflict. Step 5 reads float4s with a different column split to remove it.
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = b_tile[k][TN * tx + j];
                // fmaf, k ascending: one rounding per term in a fixed order, so steps 4–6 and both tiles agree bitwise.
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
        __syncthreads();  // everyone is done reading before the next iteration overwrites the tiles
    }

    // C[8ty + i][8tx + j]: one store instruction writes 1 float in each of 32 sectors (lanes 8 floats apart); the
    // 8 instructions of j = 0..7 complete those sectors.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + TM * ty + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = col0 + TN * tx + j;
            if (row < M && col < N) {
                float* c = C + row * ldc + col;
                *c = gemm_epilogue_value(acc[i][j], alpha, beta, c, bias, relu, col);
            }
        }
    }
}

// Runs step 4 with the given block tile (the tests force each; gemm_register_blocked picks by output size).
inline void gemm_register_blocked_with_tile(GemmTile tile, Transpose op_a, Transpose op_b, int M, int N, int K,
                                            float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                                            float* C, int ldc, GemmEpilogue epilogue, cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_register_blocked", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    const int bt = static_cast<int>(tile);
    gemm_check_grid_y("gemm_register_blocked", "M", M, bt);
    const auto kernel = tile == GemmTile::t64
                            ? gemm_pick_transposes(op_a, op_b, gemm_register_blocked_kernel<64, false, false>,
                                                   gemm_register_blocked_kernel<64, false, true>,
                                                   gemm_register_blocked_kernel<64, true, false>,
                                                   gemm_register_blocked_kernel<64, true, true>)
                            : gemm_pick_transposes(op_a, op_b, gemm_register_blocked_kernel<128, false, false>,
                                                   gemm_register_blocked_kernel<128, false, true>,
                                                   gemm_register_blocked_kernel<128, true, false>,
                                                   gemm_register_blocked_kernel<128, true, true>);
    launch(kernel, dim3(ceil_div(N, bt), ceil_div(M, bt)), dim3(bt * bt / 64), 0, stream, M, N, K, alpha, A, lda, B,
           ldb, beta, C, ldc, epilogue.bias, epilogue.relu);
}

inline void gemm_register_blocked(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A,
                                  int lda, const float* B, int ldb, float beta, float* C, int ldc,
                                  GemmEpilogue epilogue, cudaStream_t stream) {
    gemm_register_blocked_with_tile(gemm_tile_for(M, N), op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                                    epilogue, stream);
}
