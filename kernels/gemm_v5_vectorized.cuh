// kernels/gemm_v5_vectorized.cuh — GEMM step 5: step 4 with 16-byte (float4) accesses, conflict-free shared memory.
//
// idea:     step 4 moves every value with a 4-byte instruction and its reads of b_tile conflict. Here:
//           * global loads are float4: one instruction fetches 4 consecutive floats of the stored matrix;
//           * the op(A) tile is stored k-major, a_tile[k][m], like b_tile[k][n]: a thread's 8 values of op(A) at
//             one k are then contiguous, and it reads its 8 + 8 operands with 4 float4 reads instead of 16;
//           * a thread's 8 columns are two groups of 4, BN/2 apart (4tx.. and BN/2 + 4tx..), so that the 8 lanes of
//             a quarter-warp (a 16-byte access is served a quarter-warp at a time) read 8 consecutive float4s:
//             128 contiguous bytes, every bank once (8 consecutive columns per thread would be 32 bytes apart per
//             lane: a 2-way conflict);
//           * the epilogue stores float4s.
//           The small-output tiles (choose_gemm_plan, as in step 4) work the same way: a thread of a 32×32 tile (4×4
//           outputs) reads one float4 of each operand per k, of a 16×16 tile (2×2) one float2, and stores floats.
// costs:    an operand stored with k contiguous (A not transposed, B transposed) arrives as 4 k of one m or n and
//           is transposed into its k-major tile with 4 scalar stores (conflict-free: see the padding below).
// fallback: float4 needs 16-byte aligned addresses: aligned base pointers and every leading dimension a multiple of
//           4. Otherwise (784 + 1 padding, an offset view, the 10-wide output layer's W and C), and at every matrix
//           edge, load_4_floats (gemm_common.cuh) reads the same addresses one float at a time with bounds checks
//           and zero fill, and the epilogue stores one float at a time: any M, N, K, lda, ldb, ldc works.
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias), the contract in kernels/gemm_common.cuh.
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   GemmTileShape<tile>::kThreads threads (256 for 128×128, 64 for the others); grid (ceil(N / BN),
//           ceil(M / BM), split-K slices); M ≤ 65535·BM. Split-K and the tile: choose_gemm_plan (gemm_common.cuh).
#pragma once

#include "kernels/gemm_common.cuh"

// __launch_bounds__: at most kThreads per block, and kMinBlocksPerSm of them resident per SM (a 128-register cap).
template <int kTile, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(GemmTileShape<kTile>::kThreads, GemmTileShape<kTile>::kMinBlocksPerSm)
    gemm_vectorized_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                           float beta, float* C, int ldc, const float* bias, bool relu, bool use_float4, int k_slice,
                           int c_slice) {
    using Shape = GemmTileShape<kTile>;
    gemm_split_k_slice<kTransA, kTransB>(A, lda, B, ldb, K, C, k_slice, c_slice);  // split-K: this block's slice
    constexpr int BM = Shape::BM, BN = Shape::BN, BK = Shape::BK, TM = Shape::TM, TN = Shape::TN;
    constexpr int kThreads = Shape::kThreads;
    // A thread's TN columns: TN / kVec groups of kVec consecutive ones, BN / kGroups apart (8: 4tx.. and BN/2 + 4tx..).
    constexpr int kVec = TN >= 4 ? 4 : TN, kGroups = TN / kVec;
    // Rows padded by 4 floats: still 16-byte aligned, and since BM + 4 ≡ 4 (mod 8), the transposed stores (a warp:
    // 16 m × 2 groups of 4 k, the groups 4 rows = 16 banks apart) land in 32 different banks.
    __shared__ __align__(16) float a_tile[BK][BM + 4];  // a_tile[k][m] = op(A)[row0 + m][k0 + k]
    __shared__ __align__(16) float b_tile[BK][BN + 4];  // b_tile[k][n] = op(B)[k0 + k][col0 + n]

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);  // rows TM·ty..; columns kVec·tx.. in each group
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};

    for (int k0 = 0; k0 < K; k0 += BK) {
        // f: which float4 of the tile (1 per thread at 128×128 and 32×32, 2 at 64×64; at 16×16 half the threads)
        for (int f = tid; f < BM * BK / 4; f += kThreads) {
            if (!kTransA) {  // A stored M×K: 4 k of row m; a warp reads 16 rows × 32 bytes; 4 transposed stores
                const int m = f / (BK / 4), k = f % (BK / 4) * 4;
                const float4 v =
                    load_4_floats(A + (row0 + m) * lda + k0 + k, row0 + m < M ? K - k0 - k : 0, use_float4);
                a_tile[k + 0][m] = v.x;
                a_tile[k + 1][m] = v.y;
                a_tile[k + 2][m] = v.z;
                a_tile[k + 3][m] = v.w;
            } else {  // stored K×M (Xᵀ): 4 m of row k; consecutive lanes, consecutive float4s: coalesced; 1 store
                const int k = f / (BM / 4), m = f % (BM / 4) * 4;
                const float4 v =
                    load_4_floats(A + (k0 + k) * lda + row0 + m, k0 + k < K ? M - row0 - m : 0, use_float4);
                *reinterpret_cast<float4*>(&a_tile[k][m]) = v;
            }
        }
        for (int f = tid; f < BN * BK / 4; f += kThreads) {
            if (!kTransB) {  // B stored K×N: 4 n of row k; consecutive lanes, consecutive float4s: coalesced; 1 store
                const int k = f / (BN / 4), n = f % (BN / 4) * 4;
                const float4 v =
                    load_4_floats(B + (k0 + k) * ldb + col0 + n, k0 + k < K ? N - col0 - n : 0, use_float4);
                *reinterpret_cast<float4*>(&b_tile[k][n]) = v;
            } else {  // stored N×K (Wᵀ): 4 k of row n; a warp reads 16 rows × 32 bytes; 4 transposed stores
                const int n = f / (BK / 4), k = f % (BK / 4) * 4;
                const float4 v =
                    load_4_floats(B + (col0 + n) * ldb + k0 + k, col0 + n < N ? K - k0 - k : 0, use_float4);
                b_tile[k + 0][n] = v.x;
                b_tile[k + 1][n] = v.y;
                b_tile[k + 2][n] = v.z;
                b_tile[k + 3][n] = v.w;
            }
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            // A quarter-warp's 8 lanes share ty (a_tile: one address, a broadcast) and have consecutive tx (b_tile:
            // 8 consecutive float4s). Conflict-free. (TN = 2: 8-byte loads, a half-warp at a time: 2 ty, 8 float2s.)
            float a[TM], b[TN];
            load_shared_floats<TM>(&a_tile[k][TM * ty], a);
#pragma unroll
            for (int g = 0; g < kGroups; ++g)
                load_shared_floats<kVec>(&b_tile[k][g * (BN / kGroups) + kVec * tx], &b[kVec * g]);
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);  // as in step 4: same bits
            }
        }
        __syncthreads();
    }

    // acc[i][kVec·g + j] is C[TM·ty + i][g·BN/kGroups + kVec·tx + j]: a quarter-warp's float4 stores cover 128
    // contiguous bytes (gemm_epilogue_4 in gemm_common.cuh; one float at a time where unaligned, at the right edge,
    // and for the 2 columns of a 16×16 tile's thread).
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + TM * ty + i;
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
            const int col = col0 + g * (BN / kGroups) + kVec * tx;
            if (row < M && col < N) {
                gemm_epilogue_4(C + row * ldc + col, N - col < kVec ? N - col : kVec, use_float4 && kVec == 4,
                                &acc[i][kVec * g], alpha, beta, bias, relu, col);
            }
        }
    }
}

template <int kTile>
void gemm_vectorized_launch(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                            const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                            cudaStream_t stream) {
    const auto kernel = gemm_pick_transposes(
        op_a, op_b, gemm_vectorized_kernel<kTile, false, false>, gemm_vectorized_kernel<kTile, false, true>,
        gemm_vectorized_kernel<kTile, true, false>, gemm_vectorized_kernel<kTile, true, true>);
    // split-K (gemm_common.cuh): for M ≤ 128 the kernel writes partial sums, and a second kernel adds them.
    const GemmSplitTarget t = gemm_split_k_target(gemm_split_k(M, K), M, N, alpha, beta, C, ldc, epilogue, stream);
    kernel<<<dim3(cuda_teach::ceil_div(N, kTile), cuda_teach::ceil_div(M, kTile), t.splits),
             dim3(GemmTileShape<kTile>::kThreads), 0, stream>>>(
        M, N, K, t.alpha, A, lda, B, ldb, t.beta, t.C, t.ldc, t.epilogue.bias, t.epilogue.relu,
        gemm_can_use_float4(A, lda, B, ldb, t.C, t.ldc), t.k_slice, t.c_slice);
    CUDA_CHECK(cudaGetLastError());
    gemm_split_k_finish(t, M, N, alpha, beta, C, ldc, epilogue, stream);
}

// Runs step 5 with the given block tile (the tests force each; gemm_vectorized lets choose_gemm_plan pick) and the
// shape's split-K (gemm_split_k).
inline void gemm_vectorized_with_tile(GemmBlockTile tile, Transpose op_a, Transpose op_b, int M, int N, int K,
                                      float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                                      float* C, int ldc, GemmEpilogue epilogue, cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_vectorized", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    gemm_check_grid_y("gemm_vectorized", "M", M, static_cast<int>(tile));
    gemm_with_block_tile("gemm_vectorized", tile, [&]<int kTile>() {
        gemm_vectorized_launch<kTile>(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, stream);
    });
}

inline void gemm_vectorized(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                            const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                            cudaStream_t stream) {
    gemm_vectorized_with_tile(choose_gemm_plan(M, N, K, gemm_sm_count(), gemm_register_blocked_warps).tile, op_a, op_b,
                              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, stream);
}
