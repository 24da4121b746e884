// kernels/gemm_v6_double_buffered.cuh — GEMM step 6: step 5 with double buffering, global loads overlapping the math.
//
// idea:     in step 5 each k-step loads its tiles, waits at a barrier until they are in shared memory, multiplies,
//           and waits at a second barrier before the next load may overwrite them: while the loads are in flight
//           (hundreds of cycles) the block does no arithmetic. Here the loads of step 5 are cut in two: the next
//           tiles' float4s are fetched from global memory into registers *before* this tile's multiply-adds (their
//           latency hides behind 512 FMAs per thread) and written into a second shared-memory buffer after them.
//           With two buffers one __syncthreads per k-step suffices: it publishes the new tiles, and since the buffer
//           written next was last read before that same barrier, nobody can still be reading it.
// costs:    twice the shared memory (2 × 8.25 KiB at 128×128), and the fetched float4s stay live in registers across
//           the multiply-adds (1 + 1 per thread at 128×128, 2 + 2 at 64×64). Registers are the budget here: the
//           kernel's __launch_bounds__ asks for 2 blocks of 256 threads per SM (8 of 64), i.e. ≤ 128 per thread.
// fallback: as step 5: load_4_floats reads one float at a time (bounds-checked, zero fill) when a leading dimension
//           is not a multiple of 4 or a pointer is not 16-byte aligned, and at every edge: any M, N, K works.
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias), the contract in kernels/gemm_common.cuh; the same bits as
//           steps 4 and 5 (each output's terms are summed in the same order).
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   GemmTileShape<tile>::kThreads threads (256 for 128×128, 64 for the others); grid (ceil(N / BN),
//           ceil(M / BM), split-K slices); M ≤ 65535·BM. Split-K and the tile: choose_gemm_plan, as in steps 4–5.
#pragma once

#include "kernels/gemm_common.cuh"

// __launch_bounds__: at most kThreads per block, and kMinBlocksPerSm of them resident per SM (a 128-register cap:
// the 8×8 accumulators, 16 operands and the float4s in flight fit without spilling).
template <int kTile, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(GemmTileShape<kTile>::kThreads, GemmTileShape<kTile>::kMinBlocksPerSm)
    gemm_double_buffered_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                                float beta, float* C, int ldc, const float* bias, bool relu, bool use_float4,
                                int k_slice, int c_slice) {
    using Shape = GemmTileShape<kTile>;
    gemm_split_k_slice<kTransA, kTransB>(A, lda, B, ldb, K, C, k_slice, c_slice);  // split-K: this block's slice
    constexpr int BM = Shape::BM, BN = Shape::BN, BK = Shape::BK, TM = Shape::TM, TN = Shape::TN;
    constexpr int kThreads = Shape::kThreads;
    constexpr int kVec = TN >= 4 ? 4 : TN, kGroups = TN / kVec;  // a thread's columns, as in step 5
    // float4s of each tile, and per thread (rounded up: at 16×16, 32 float4s for 64 threads, half of them idle)
    constexpr int kTileA = BM * BK / 4, kTileB = BN * BK / 4;
    constexpr int kLoadsA = cuda_teach::ceil_div(kTileA, kThreads), kLoadsB = cuda_teach::ceil_div(kTileB, kThreads);
    __shared__ __align__(16) float a_tile[2][BK][BM + 4];  // a_tile[buffer][k][m], padded as in step 5
    __shared__ __align__(16) float b_tile[2][BK][BN + 4];  // b_tile[buffer][k][n]

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);  // rows TM·ty..; columns kVec·tx.. in each group
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    // The tiles in flight: global memory → registers → shared memory. (Zeroed: g++ cannot see that the f < kTileA
    // guards skip the same slots in fetch_tiles and store_tiles; nvcc drops the dead stores.)
    float4 a_next[kLoadsA] = {}, b_next[kLoadsB] = {};

    // The first half of step 5's loads: this thread's float4s of the tiles at k0, global memory → registers.
    const auto fetch_tiles = [&](int k0) {
        for (int l = 0; l < kLoadsA; ++l) {
            const int f = tid + l * kThreads;
            if (f >= kTileA) break;
            if (!kTransA) {  // A stored M×K: 4 k of row m; a warp reads 16 rows × 32 bytes
                const int m = f / (BK / 4), k = f % (BK / 4) * 4;
                a_next[l] = load_4_floats(A + (row0 + m) * lda + k0 + k, row0 + m < M ? K - k0 - k : 0, use_float4);
            } else {  // stored K×M (Xᵀ): 4 m of row k; consecutive lanes, consecutive float4s: coalesced
                const int k = f / (BM / 4), m = f % (BM / 4) * 4;
                a_next[l] = load_4_floats(A + (k0 + k) * lda + row0 + m, k0 + k < K ? M - row0 - m : 0, use_float4);
            }
        }
        for (int l = 0; l < kLoadsB; ++l) {
            const int f = tid + l * kThreads;
            if (f >= kTileB) break;
            if (!kTransB) {  // B stored K×N: 4 n of row k; consecutive lanes, consecutive float4s: coalesced
                const int k = f / (BN / 4), n = f % (BN / 4) * 4;
                b_next[l] = load_4_floats(B + (k0 + k) * ldb + col0 + n, k0 + k < K ? N - col0 - n : 0, use_float4);
            } else {  // stored N×K (Wᵀ): 4 k of row n; a warp reads 16 rows × 32 bytes
                const int n = f / (BK / 4), k = f % (BK / 4) * 4;
                b_next[l] = load_4_floats(B + (col0 + n) * ldb + k0 + k, col0 + n < N ? K - k0 - k : 0, use_float4);
            }
        }
    };
    // The second half: registers → shared-memory buffer `buf`, transposed where step 5 transposes (conflict-free).
    const auto store_tiles = [&](int buf) {
        for (int l = 0; l < kLoadsA; ++l) {
            const int f = tid + l * kThreads;
            if (f >= kTileA) break;
            if (!kTransA) {  // 4 k of one m: down a column of the k-major tile
                const int m = f / (BK / 4), k = f % (BK / 4) * 4;
                a_tile[buf][k + 0][m] = a_next[l].x;
                a_tile[buf][k + 1][m] = a_next[l].y;
                a_tile[buf][k + 2][m] = a_next[l].z;
                a_tile[buf][k + 3][m] = a_next[l].w;
            } else {  // 4 m of one k: one float4 store
                const int k = f / (BM / 4), m = f % (BM / 4) * 4;
                *reinterpret_cast<float4*>(&a_tile[buf][k][m]) = a_next[l];
            }
        }
        for (int l = 0; l < kLoadsB; ++l) {
            const int f = tid + l * kThreads;
            if (f >= kTileB) break;
            if (!kTransB) {  // 4 n of one k: one float4 store
                const int k = f / (BN / 4), n = f % (BN / 4) * 4;
                *reinterpret_cast<float4*>(&b_tile[buf][k][n]) = b_next[l];
            } else {  // 4 k of one n: down a column
                const int n = f / (BK / 4), k = f % (BK / 4) * 4;
                b_tile[buf][k + 0][n] = b_next[l].x;
                b_tile[buf][k + 1][n] = b_next[l].y;
                b_tile[buf][k + 2][n] = b_next[l].z;
                b_tile[buf][k + 3][n] = b_next[l].w;
            }
        }
    };

    fetch_tiles(0);
    for (int k0 = 0, buf = 0; k0 < K; k0 += BK, buf ^= 1) {
        // Buffer `buf` was last read two k-steps ago, before the previous iteration's barrier: free to overwrite.
        store_tiles(buf);
        __syncthreads();                        // the only barrier: tiles[buf] is complete
        if (k0 + BK < K) fetch_tiles(k0 + BK);  // in flight during the multiply-adds below

#pragma unroll
        for (int k = 0; k < BK; ++k) {  // exactly step 5's conflict-free float4 reads and FMAs, from buffer `buf`
            float a[TM], b[TN];
            load_shared_floats<TM>(&a_tile[buf][k][TM * ty], a);
#pragma unroll
            for (int g = 0; g < kGroups; ++g)
                load_shared_floats<kVec>(&b_tile[buf][k][g * (BN / kGroups) + kVec * tx], &b[kVec * g]);
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
    }

    // The epilogue of step 5: float4 stores where aligned and inside the matrix, one float at a time otherwise.
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
void gemm_double_buffered_launch(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A,
                                 int lda, const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                                 cudaStream_t stream) {
    const auto kernel = gemm_pick_transposes(
        op_a, op_b, gemm_double_buffered_kernel<kTile, false, false>, gemm_double_buffered_kernel<kTile, false, true>,
        gemm_double_buffered_kernel<kTile, true, false>, gemm_double_buffered_kernel<kTile, true, true>);
    // split-K (gemm_common.cuh): for M ≤ 128 the kernel writes partial sums, and a second kernel adds them.
    const GemmSplitTarget t = gemm_split_k_target(gemm_split_k(M, K), M, N, alpha, beta, C, ldc, epilogue, stream);
    kernel<<<dim3(cuda_teach::ceil_div(N, kTile), cuda_teach::ceil_div(M, kTile), t.splits),
             dim3(GemmTileShape<kTile>::kThreads), 0, stream>>>(
        M, N, K, t.alpha, A, lda, B, ldb, t.beta, t.C, t.ldc, t.epilogue.bias, t.epilogue.relu,
        gemm_can_use_float4(A, lda, B, ldb, t.C, t.ldc), t.k_slice, t.c_slice);
    CUDA_CHECK(cudaGetLastError());
    gemm_split_k_finish(t, M, N, alpha, beta, C, ldc, epilogue, stream);
}

// Runs step 6 with the given block tile (the tests force each; gemm_double_buffered lets choose_gemm_plan pick) and the
// shape's split-K (gemm_split_k).
inline void gemm_double_buffered_with_tile(GemmBlockTile tile, Transpose op_a, Transpose op_b, int M, int N, int K,
                                           float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                                           float* C, int ldc, GemmEpilogue epilogue, cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_double_buffered", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    gemm_check_grid_y("gemm_double_buffered", "M", M, static_cast<int>(tile));
    gemm_with_block_tile("gemm_double_buffered", tile, [&]<int kTile>() {
        gemm_double_buffered_launch<kTile>(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, stream);
    });
}

inline void gemm_double_buffered(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A,
                                 int lda, const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                                 cudaStream_t stream) {
    gemm_double_buffered_with_tile(choose_gemm_plan(M, N, K, gemm_sm_count(), gemm_register_blocked_warps).tile, op_a,
                                   op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, stream);
}
