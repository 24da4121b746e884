// kernels/gemm_v7_warp_tiled.cuh — GEMM step 7: step 6 with warp tiling, each warp owning one sub-tile of the block's.
//
// idea:     in step 6 the threads of a block tile are laid out row by row (16 × 16 threads at 128×128), so one warp
//           is 2 thread rows × 16 thread columns: it covers 16 rows × 128 columns of C and reads, per k, 16 values
//           of the A tile and all 128 of the B tile. Here the block's warps split its tile into warp tiles
//           (128×128: 2 × 2 warps of 64×64) and a warp's 32 lanes are 8 (m) × 4 (n) inside its own warp tile; each
//           lane owns 8 × 16 outputs: WMITER × WNITER sub-tiles of 4×4, the sub-tiles a warp sub-tile apart (32 rows,
//           16 columns), so that at each k a warp reads
//             a_tile[k][wm0 + 32i + 4·lane_m .. +3]   (i < 2): 2 float4 reads, 8 distinct float4s = 128 bytes
//             b_tile[k][wn0 + 16j + 4·lane_n .. +3]   (j < 4): 4 float4 reads, 4 distinct float4s =  64 bytes
//           and feeds 32 lanes × 128 = 4096 multiply-adds. Per k and warp:
//                                step 6 (128×128)            step 7 (128×128)
//             FMAs               2048                        4096
//             shared reads       4 float4 per lane           6 float4 per lane
//             FMAs per read      16                          21.3
//             distinct bytes     (16 + 128)·4 = 576          (64 + 64)·4 = 512   (twice the FMAs: 0.28 → 0.125 B/FMA)
//           So the shared-memory traffic per multiply-add falls: a float4 read is 4 wavefronts (a quarter-warp each),
//           or 2 when lanes pair up on one address (the counting build's rule, common/cpu_backend/README.md): 12 per
//           2048 FMAs in step 6 (2 of its 4 reads pair up) and 20 per 4096 here (the 2 A reads pair up), 3/512 →
//           5/1024 per FMA, 5/6 of step 6's (the counting build checks both: tests/test_access_counters.cu); each
//           lane's 8 + 16 operands feed 128 FMAs from registers.
//           That is where a block tile's time goes once the loads overlap the math (step 6): issuing shared-memory
//           reads and FMAs from the same warps. The block has 128 threads, not 256: the same 128×128 tile, twice
//           the outputs per thread.
// costs:    registers: 128 accumulators, 24 operands and step 6's float4s in flight (2 + 2) per thread. The
//           __launch_bounds__ asks for 2 blocks of 128 threads per SM, a cap of 255 registers (ptxas -v on sm_90:
//           see kernels/README.md); 8 warps per SM at the 128×128 tile, fewer than step 6's 16, each with twice
//           the independent FMAs (instruction-level parallelism in place of warps).
// tiles:    the block tile (GemmBlockTile, choose_gemm_plan) is always 2 × 2 warps (128 threads); a lane's
//           outputs shrink with it: 128×128 8×16 (2×4 sub-tiles of 4×4), 64×64 4×8 (1×2 of 4×4), 32×32 2×4 (one
//           2×4: float2 reads of A), 16×16 1×2 (scalar A, float2 B). The small tiles trade reuse for warps: a
//           64×64 tile's lane reads 3 float4s per 32 FMAs (10.7 per read, step 6's 64×64 lane 16), but the block
//           has 4 warps where step 6's has 2 (the tile choice counts warps: choose_gemm_plan).
// fallback: as steps 5–6 (the same global loads and tile stores): load_4_floats reads one float at a time, bounds-
//           checked with zero fill, when a leading dimension is not a multiple of 4 or a pointer is misaligned, and
//           at every edge; the epilogue stores one float at a time there: any M, N, K works.
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias), the contract in kernels/gemm_common.cuh; the same bits as
//           steps 4–6 (each output's K terms: one fmaf per k, ascending, from 0).
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   128 threads; grid (ceil(N / BN), ceil(M / BM), split-K slices); M ≤ 65535·BM. Split-K and the tile:
//           choose_gemm_plan (gemm_common.cuh) with 4 warps per block.
#pragma once

#include "kernels/gemm_common.cuh"

// The warp-tiled layout of one block tile: 2 × 2 warps, each warp's lanes 8 (m) × 4 (n), each lane WMITER × WNITER
// sub-tiles of TMS × TNS outputs.
template <int kTile>
struct GemmWarpTileShape {
    static constexpr int BM = kTile, BN = kTile, BK = 8;
    static constexpr int kWarpsM = 2, kWarpsN = 2, kThreads = 32 * kWarpsM * kWarpsN;
    static constexpr int WM = BM / kWarpsM, WN = BN / kWarpsN;        // the warp tile
    static constexpr int kLanesM = 8, kLanesN = 4;                    // a warp's lanes over its tile
    static constexpr int TMS = WM / kLanesM >= 4 ? 4 : WM / kLanesM;  // a sub-tile's rows per lane (4, 2 or 1)
    static constexpr int TNS = WN / kLanesN >= 4 ? 4 : WN / kLanesN;  // its columns per lane (4 or 2)
    static constexpr int WMITER = WM / (kLanesM * TMS), WNITER = WN / (kLanesN * TNS);
    static constexpr int TM = WMITER * TMS, TN = WNITER * TNS;  // a lane's outputs
    // 2 blocks per SM: a 255-register cap (65536 / 256 threads), room for 128 accumulators without spilling.
    static constexpr int kMinBlocksPerSm = 2;
    static_assert(WM == kLanesM * TMS * WMITER && WN == kLanesN * TNS * WNITER, "whole sub-tiles per warp tile");
};

// __launch_bounds__: 128 threads per block, 2 blocks resident per SM.
template <int kTile, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(GemmWarpTileShape<kTile>::kThreads, GemmWarpTileShape<kTile>::kMinBlocksPerSm)
    gemm_warp_tiled_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                           float beta, float* C, int ldc, const float* bias, bool relu, bool use_float4, int k_slice,
                           int c_slice) {
    using Shape = GemmWarpTileShape<kTile>;
    gemm_split_k_slice<kTransA, kTransB>(A, lda, B, ldb, K, C, k_slice, c_slice);  // split-K: this block's slice
    constexpr int BM = Shape::BM, BN = Shape::BN, BK = Shape::BK, kThreads = Shape::kThreads;
    constexpr int WM = Shape::WM, WN = Shape::WN, TMS = Shape::TMS, TNS = Shape::TNS;
    constexpr int WMITER = Shape::WMITER, WNITER = Shape::WNITER;
    constexpr int kSubM = WM / WMITER, kSubN = WN / WNITER;  // a warp sub-tile: 8·TMS rows, 4·TNS columns
    // float4s of each tile, and per thread (rounded up: at 16×16, 32 float4s for 128 threads)
    constexpr int kTileA = BM * BK / 4, kTileB = BN * BK / 4;
    constexpr int kLoadsA = cuda_teach::ceil_div(kTileA, kThreads), kLoadsB = cuda_teach::ceil_div(kTileB, kThreads);
    // Step 6's buffers and padding: BM + 4 ≡ 4 (mod 8) keeps the transposed stores conflict-free.
    __shared__ __align__(16) float a_tile[2][BK][BM + 4];  // a_tile[buffer][k][m] = op(A)[row0 + m][k0 + k]
    __shared__ __align__(16) float b_tile[2][BK][BN + 4];  // b_tile[buffer][k][n] = op(B)[k0 + k][col0 + n]

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int wm0 = warp / Shape::kWarpsN * WM, wn0 = warp % Shape::kWarpsN * WN;  // this warp's tile in the block's
    const int lane_m = lane / Shape::kLanesN, lane_n = lane % Shape::kLanesN;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    // acc[i·TMS + r][j·TNS + c]: output (wm0 + i·kSubM + TMS·lane_m + r, wn0 + j·kSubN + TNS·lane_n + c)
    float acc[WMITER * TMS][WNITER * TNS] = {};
    float4 a_next[kLoadsA] = {}, b_next[kLoadsB] = {};  // the tiles in flight, as in step 6

    // Step 6's loads, unchanged (the warp tiling is in the multiply-adds): global memory → registers ...
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
    // ... and registers → shared-memory buffer `buf`, k-major (conflict-free, as in steps 5–6).
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
        store_tiles(buf);  // buffer `buf` was last read before the previous iteration's barrier (step 6)
        __syncthreads();
        if (k0 + BK < K) fetch_tiles(k0 + BK);

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            // The warp's operands at this k: a quarter-warp (lanes 8q..8q+7: lane_m 2q, 2q + 1; lane_n 0..3) reads
            // 2 consecutive float4s of a_tile (a broadcast to 4 lanes each) and 4 consecutive ones of b_tile (to 2
            // lanes each): 32 and 64 contiguous bytes, every bank at most once, no conflict.
            float a[WMITER * TMS], b[WNITER * TNS];
#pragma unroll
            for (int i = 0; i < WMITER; ++i)
                load_shared_floats<TMS>(&a_tile[buf][k][wm0 + i * kSubM + TMS * lane_m], &a[i * TMS]);
#pragma unroll
            for (int j = 0; j < WNITER; ++j)
                load_shared_floats<TNS>(&b_tile[buf][k][wn0 + j * kSubN + TNS * lane_n], &b[j * TNS]);
#pragma unroll
            for (int i = 0; i < WMITER * TMS; ++i) {
#pragma unroll
                for (int j = 0; j < WNITER * TNS; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
    }

    // The epilogue: TNS consecutive outputs at a time. With TNS = 4 a warp's store instruction writes 8 rows × 64
    // contiguous bytes (16 sectors, all used); float4 where aligned and inside, one float at a time otherwise.
#pragma unroll
    for (int i = 0; i < WMITER; ++i) {
#pragma unroll
        for (int r = 0; r < TMS; ++r) {
            const int row = row0 + wm0 + i * kSubM + TMS * lane_m + r;
#pragma unroll
            for (int j = 0; j < WNITER; ++j) {
                const int col = col0 + wn0 + j * kSubN + TNS * lane_n;
                if (row < M && col < N) {
                    gemm_epilogue_4(C + row * ldc + col, N - col < TNS ? N - col : TNS, use_float4 && TNS == 4,
                                    &acc[i * TMS + r][j * TNS], alpha, beta, bias, relu, col);
                }
            }
        }
    }
}

template <int kTile>
void gemm_warp_tiled_launch(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                            const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                            cudaStream_t stream) {
    const auto kernel = gemm_pick_transposes(
        op_a, op_b, gemm_warp_tiled_kernel<kTile, false, false>, gemm_warp_tiled_kernel<kTile, false, true>,
        gemm_warp_tiled_kernel<kTile, true, false>, gemm_warp_tiled_kernel<kTile, true, true>);
    // split-K (gemm_common.cuh): for M ≤ 128 the kernel writes partial sums, and a second kernel adds them.
    const GemmSplitTarget t = gemm_split_k_target(gemm_split_k(M, K), M, N, alpha, beta, C, ldc, epilogue, stream);
    kernel<<<dim3(cuda_teach::ceil_div(N, kTile), cuda_teach::ceil_div(M, kTile), t.splits),
             dim3(GemmWarpTileShape<kTile>::kThreads), 0, stream>>>(
        M, N, K, t.alpha, A, lda, B, ldb, t.beta, t.C, t.ldc, t.epilogue.bias, t.epilogue.relu,
        gemm_can_use_float4(A, lda, B, ldb, t.C, t.ldc), t.k_slice, t.c_slice);
    CUDA_CHECK(cudaGetLastError());
    gemm_split_k_finish(t, M, N, alpha, beta, C, ldc, epilogue, stream);
}

// Runs step 7 with the given block tile (the tests force each; gemm_warp_tiled lets choose_gemm_plan pick) and the
// shape's split-K (gemm_split_k).
inline void gemm_warp_tiled_with_tile(GemmBlockTile tile, Transpose op_a, Transpose op_b, int M, int N, int K,
                                      float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                                      float* C, int ldc, GemmEpilogue epilogue, cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_warp_tiled", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    gemm_check_grid_y("gemm_warp_tiled", "M", M, static_cast<int>(tile));
    gemm_with_block_tile("gemm_warp_tiled", tile, [&]<int kTile>() {
        gemm_warp_tiled_launch<kTile>(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, stream);
    });
}

inline void gemm_warp_tiled(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                            const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                            cudaStream_t stream) {
    gemm_warp_tiled_with_tile(choose_gemm_plan(M, N, K, gemm_sm_count(), gemm_warp_tiled_warps).tile, op_a, op_b, M, N,
                              K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue, stream);
}
