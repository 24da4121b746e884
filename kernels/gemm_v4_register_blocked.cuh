// kernels/gemm_v4_register_blocked.cuh — GEMM step 4: step 3 plus 2-D register blocking (8×8 outputs per thread).
//
// idea:     in step 3 every multiply-add costs two shared-memory reads, so shared memory, not arithmetic, is the
//           limit. Here each thread computes an 8×8 block of C held in 64 registers: per k it reads 8 values of op(A)
//           (a column of its rows) and 8 of op(B) (a row of its columns) into registers and does all 8 × 8 = 64
//           multiply-adds with them: 16 shared-memory reads per 64 FMAs instead of 128. The block tile grows to
//           BM×BN = 128×128 and K is walked in steps of BK = 8.
// costs:    64 accumulators + 16 operands in registers per thread; 64 outputs per thread means 64× fewer threads,
//           so a small output (8 tiles of 128×128 at batch 128) leaves most SMs idle. The launcher therefore picks
//           the biggest tile that gives every SM ≥ 2 blocks, down to 16×16 tiles of 2×2 outputs per thread
//           (GemmBlockTile and choose_gemm_plan in gemm_common.cuh); every tile gives the same bits. The
//           shared-memory reads of op(B) still conflict (noted below), and every global access moves 4 bytes: step 5
//           fixes both.
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias), the contract in kernels/gemm_common.cuh; any M, N, K
//           (element-wise loads with bounds checks, zero fill past an edge).
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   GemmTileShape<tile>::kThreads threads (256 for 128×128, 64 for the others); grid (ceil(N / BN),
//           ceil(M / BM), split-K slices); M ≤ 65535·BM. Split-K and the tile: choose_gemm_plan (gemm_common.cuh).
#pragma once

#include "kernels/gemm_common.cuh"

// __launch_bounds__: at most kThreads per block, and no minimum of blocks per SM: at 8×8 outputs per thread this
// step takes about 140 registers on sm_90 (its 64 scalar reads of a_tile per k-step keep many addresses live), and
// the 128-register cap that gives steps 5–6 two 256-thread blocks per SM made it spill; one such block fits here.
template <int kTile, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(GemmTileShape<kTile>::kThreads)
    gemm_register_blocked_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                                 float beta, float* C, int ldc, const float* bias, bool relu, int k_slice,
                                 int c_slice) {
    using Shape = GemmTileShape<kTile>;
    gemm_split_k_slice<kTransA, kTransB>(A, lda, B, ldb, K, C, k_slice, c_slice);  // split-K: this block's slice
    constexpr int BM = Shape::BM, BN = Shape::BN, BK = Shape::BK, TM = Shape::TM, TN = Shape::TN;
    constexpr int kThreads = Shape::kThreads;
    // a_tile is m-major as in step 3; +1 keeps the transposed stores of op_a = T conflict-free (address 9m + k;
    // with BM = 16 a warp stores 16 m of 2 k and a few banks are hit twice).
    // b_tile is 16-byte aligned with rows of BN + 4 floats (a multiple of 4: every row stays 16-byte aligned), so
    // a thread's TN consecutive values b_tile[k][TN·tx..] are read with 16-byte loads (8-byte for TN = 2). The +4
    // (rather than +1) also keeps the transposed stores of op_b = T (4 n × 8 k per warp) conflict-free: BN + 4 is
    // 4 × an odd number, so the 8 rows start in 8 different groups of 4 banks.
    __shared__ float a_tile[BM][BK + 1];                // a_tile[m][k] = op(A)[row0 + m][k0 + k]
    __shared__ __align__(16) float b_tile[BK][BN + 4];  // b_tile[k][n] = op(B)[k0 + k][col0 + n]

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);  // this thread's outputs: rows TM·ty.., columns TN·tx..
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Each thread copies BM·BK / kThreads elements of each tile, consecutive threads on consecutive addresses.
        for (int i = tid; i < BM * BK; i += kThreads) {
            if (!kTransA) {  // A stored M×K: a warp reads 8 consecutive k of 4 rows (32 bytes each); its stores
                             // (address 9m + k) hit 3 of the 32 banks twice: a 2-way conflict
                const int m = i / BK, k = i % BK;
                a_tile[m][k] = (row0 + m < M && k0 + k < K) ? A[(row0 + m) * lda + k0 + k] : 0.0f;
            } else {  // stored K×M (Xᵀ): a warp reads consecutive m of row k0 + k (2 rows if BM = 16): coalesced
                const int k = i / BM, m = i % BM;
                a_tile[m][k] = (row0 + m < M && k0 + k < K) ? A[(k0 + k) * lda + row0 + m] : 0.0f;
            }
        }
        for (int i = tid; i < BN * BK; i += kThreads) {
            if (!kTransB) {  // B stored K×N: a warp reads consecutive n of row k0 + k (2 rows if BN = 16): coalesced
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
            // a_tile[TM·ty + i][k]: a warp holds 2 (128×128 tile) or 4 values of ty, 9·TM words apart: different
            // banks, and the lanes that share ty read one address (a broadcast). Conflict-free.
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = a_tile[TM * ty + i][k];
                // b_tile[k][TN·tx + j], j = 0..TN-1: contiguous and aligned, so the compiler reads it as TN/4 16-byte
                // loads, served 8 lanes at a time. With TN = 8 those 8 lanes (consecutive tx) are 32 bytes apart and
                // touch every bank twice: a 2-way conflict (step 5 splits the columns to remove it). With TN = 4 they
                // read 128 contiguous bytes and with TN = 2 (8-byte loads, 16 lanes at a time, 8 tx) 64: conflict-free.
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = b_tile[k][TN * tx + j];
                // fmaf, k ascending: one rounding per term in a fixed order, so steps 4–7 and every tile agree bitwise.
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
        __syncthreads();  // everyone is done reading before the next iteration overwrites the tiles
    }

    // C[TM·ty + i][TN·tx + j]: one store instruction writes 1 float in each of the warp's sectors (lanes TN floats
    // apart); the TN instructions of j = 0..TN-1 complete those sectors.
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

template <int kTile>
void gemm_register_blocked_launch(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A,
                                  int lda, const float* B, int ldb, float beta, float* C, int ldc,
                                  GemmEpilogue epilogue, cudaStream_t stream) {
    const auto kernel = gemm_pick_transposes(
        op_a, op_b, gemm_register_blocked_kernel<kTile, false, false>, gemm_register_blocked_kernel<kTile, false, true>,
        gemm_register_blocked_kernel<kTile, true, false>, gemm_register_blocked_kernel<kTile, true, true>);
    // split-K (gemm_common.cuh): for M ≤ 128 the kernel writes partial sums, and a second kernel adds them.
    const GemmSplitTarget t = gemm_split_k_target(gemm_split_k(M, K), M, N, alpha, beta, C, ldc, epilogue, stream);
    kernel<<<dim3(cuda_teach::ceil_div(N, kTile), cuda_teach::ceil_div(M, kTile), t.splits),
             dim3(GemmTileShape<kTile>::kThreads), 0, stream>>>(M, N, K, t.alpha, A, lda, B, ldb, t.beta, t.C, t.ldc,
                                                                t.epilogue.bias, t.epilogue.relu, t.k_slice, t.c_slice);
    CUDA_CHECK(cudaGetLastError());
    gemm_split_k_finish(t, M, N, alpha, beta, C, ldc, epilogue, stream);
}

// Runs step 4 with the given block tile (the tests force each; gemm_register_blocked lets choose_gemm_plan pick)
// and the shape's split-K (gemm_split_k).
inline void gemm_register_blocked_with_tile(GemmBlockTile tile, Transpose op_a, Transpose op_b, int M, int N, int K,
                                            float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                                            float* C, int ldc, GemmEpilogue epilogue, cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_register_blocked", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    gemm_check_grid_y("gemm_register_blocked", "M", M, static_cast<int>(tile));
    gemm_with_block_tile("gemm_register_blocked", tile, [&]<int kTile>() {
        gemm_register_blocked_launch<kTile>(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, stream);
    });
}

inline void gemm_register_blocked(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A,
                                  int lda, const float* B, int ldb, float beta, float* C, int ldc,
                                  GemmEpilogue epilogue, cudaStream_t stream) {
    gemm_register_blocked_with_tile(choose_gemm_plan(M, N, K, gemm_sm_count(), gemm_register_blocked_warps).tile, op_a,
                                    op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, stream);
}
