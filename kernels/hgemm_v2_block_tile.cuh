// kernels/hgemm_v2_block_tile.cuh — tensor-core GEMM step 2: block tiles staged through shared memory, fragments
// loaded with ldmatrix.
//
// idea:     in step 1 every warp fetches its own fragments from global memory, 2 bytes per load. Here a block of
//           8 warps first copies a 128×32 tile of op(A) and a 32×128 tile of op(B) into shared memory (16 bytes per
//           load, coalesced), and every warp then takes its fragments from there with ldmatrix: one instruction
//           hands each lane its pieces of four 8×8 matrices, already in the mma layout. Each tile element now
//           comes from global memory once per block instead of once per warp that needs it.
//           * The tiles keep the layout of the stored matrix (a row of A holds k, a row of Aᵀ holds m, ...), so the
//             copy is a plain row-by-row copy for every transpose case; the transpose happens in ldmatrix: .trans
//             when a tile's rows run along m or n (Aᵀ, B), plain when they run along k (A, Bᵀ). See
//             hgemm_multiply_tile below.
//           * ldmatrix reads 8 rows of 16 bytes per matrix; they must fall in 8 different 16-byte bank groups or
//             the read is split. Every tile row is padded by 8 halves (16 bytes), so consecutive rows start 80
//             bytes (rows of 32 k) or 272 / 144 bytes (rows of 128 / 64 m or n) apart: 5 or 1 groups on, and 8
//             consecutive rows hit 8 different groups. Conflict-free.
//           * A warp computes 64×32 outputs (4 × 4 mma tiles): per 16 k, 4 ldmatrix.x4 for op(A) and 2 for op(B)
//             feed 16 mma's.
// costs:    two __syncthreads per 32 k, and while a tile is being copied in the tensor cores wait (step 3 overlaps
//           the two); the 16-byte stores into rows of 32 k are 2-way bank-conflicted (8 lanes store 2 rows
//           80 bytes apart); 17–20 KiB of shared memory at 128×128 (9–10 KiB at 64×64).
// tiles:    128×128 (8 warps of 64×32), or 64×64 (4 warps of 32×32) when 128×128 tiles would give the SMs fewer
//           than 8 warps each (gemm_tile_for in kernels/gemm_common.cuh: a batch-128 layer would otherwise fill 8
//           of 132 SMs).
// fallback: a 16-byte copy needs 16-byte aligned rows: aligned pointers and leading dimensions that are multiples
//           of 8 (hgemm_can_use_16_bytes). Otherwise, and at every matrix edge, the same chunk is copied one half at
//           a time, zero-filled outside the matrix: any M, N, K, lda, ldb works. K-steps and mma tiles that lie
//           wholly in that zero padding are skipped.
// computes: C = act(alpha·op(A)·op(B) + bias), the contract in kernels/hgemm_common.cuh; the same bits as steps 1
//           and 3, with either tile (the same mma's on the same fragments, k ascending).
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   2·kTile threads (256 or 128); grid (ceil(N / kTile), ceil(M / kTile)); M ≤ 65535·kTile.
#pragma once

#include "kernels/hgemm_common.cuh"

// The block and warp tiles of steps 2–3, and the shared-memory tiles: op(A)'s and op(B)'s tiles as stored (rows ×
// columns before padding).
template <int kTile, bool kTransA_, bool kTransB_>
struct HgemmBlockTile {
    static constexpr bool kTransA = kTransA_, kTransB = kTransB_;
    static constexpr int BM = kTile, BN = kTile, BK = 32;
    static constexpr int WM = kTile / 2, WN = 32;              // a warp's outputs: 64×32 or 32×32
    static constexpr int MI = WM / 16, NI = WN / 8;            // a warp's mma tiles: 4 × 4 or 2 × 4
    static constexpr int kWarpsN = BN / WN;                    // warps side by side along N (4 or 2), 2 along M
    static constexpr int kThreads = 32 * (BM / WM) * kWarpsN;  // 256 or 128
    static constexpr int kPad = 8;                             // halves of padding per row (16 bytes)
    static constexpr int kARows = kTransA ? BK : BM, kACols = kTransA ? BM : BK;  // A: BM × BK, Aᵀ: BK × BM
    static constexpr int kBRows = kTransB ? BN : BK, kBCols = kTransB ? BK : BN;  // B: BK × BN, Bᵀ: BN × BK
};

// One warp's share of one shared-memory k-tile: acc[mi][ni] += op(A)[16 rows] · op(B)[16 k × 8 columns], for the
// warp's MI × NI mma tiles, 16 k at a time. m_left, n_left: rows and columns of C from the warp's tile corner
// (tiles past them are skipped); k_left: k from the tile's start (k-steps past it are skipped). Each lane passes
// ldmatrix one row address: lane 8j + r gives row r of matrix j.
template <typename Tile>
__device__ __forceinline__ void hgemm_multiply_tile(const __half (*a_tile)[Tile::kACols + Tile::kPad],
                                                    const __half (*b_tile)[Tile::kBCols + Tile::kPad], int warp_row,
                                                    int warp_col, int m_left, int n_left, int k_left,
                                                    float (&acc)[Tile::MI][Tile::NI][4]) {
    constexpr bool kTransA = Tile::kTransA, kTransB = Tile::kTransB;
    const int lane = threadIdx.x % 32, j = lane / 8, r = lane % 8;
#pragma unroll
    for (int kk = 0; kk < Tile::BK; kk += 16) {
        if (kk >= k_left) break;  // only zero padding left in this tile (the same for the whole block)
        uint32_t a[Tile::MI][4], b[Tile::NI][2];
#pragma unroll
        for (int mi = 0; mi < Tile::MI; ++mi) {
            if (16 * mi >= m_left) break;  // the same for the whole warp
            // The 4 matrices are the 16×16 fragment's quarters: rows +0/+8 (j%2), k +0/+8 (j/2) → a[mi][0..3].
            const int m = warp_row + 16 * mi + 8 * (j % 2), k = kk + 8 * (j / 2);
            if (!kTransA) {
                ldmatrix_x4(a[mi], &a_tile[m + r][k]);  // a_tile[m][k]: a row holds 8 k of one m, as mma wants
            } else {
                ldmatrix_x4_trans(a[mi], &a_tile[k + r][m]);  // a_tile[k][m]: a row holds 8 m; .trans turns it
            }
        }
#pragma unroll
        for (int ni = 0; ni < Tile::NI; ni += 2) {
            if (8 * ni >= n_left) break;
            // Two mma tiles' B fragments: k +0/+8 (j%2), columns +0/+8 (j/2) → b[ni][0..1], b[ni + 1][0..1].
            const int n = warp_col + 8 * ni + 8 * (j / 2), k = kk + 8 * (j % 2);
            uint32_t q[4];
            if (!kTransB) {
                ldmatrix_x4_trans(q, &b_tile[k + r][n]);  // b_tile[k][n]: a row holds 8 n; .trans gives k pairs
            } else {
                ldmatrix_x4(q, &b_tile[n + r][k]);  // b_tile[n][k]: a row holds 8 k of one n, as mma wants
            }
            b[ni][0] = q[0];
            b[ni][1] = q[1];
            b[ni + 1][0] = q[2];
            b[ni + 1][1] = q[3];
        }
#pragma unroll
        for (int mi = 0; mi < Tile::MI; ++mi) {
#pragma unroll
            for (int ni = 0; ni < Tile::NI; ++ni) {
                if (16 * mi < m_left && 8 * ni < n_left) mma_m16n8k16_f16_f32(acc[mi][ni], a[mi], b[ni], acc[mi][ni]);
            }
        }
    }
}

// Copies kRows × kCols halves of a matrix stored row-major (leading dimension ld), from `src` (the tile's first
// element) into tile[kRows][kCols + pad]; rows_left, cols_left: how many of the tile's rows and columns exist in
// the matrix (the rest is filled with 0). Thread i copies 16-byte chunks i, i + kThreads, ...: consecutive lanes
// copy consecutive chunks of a row (coalesced: 64 bytes per row of 32 k, 256 per row of 128 m or n).
template <int kRows, int kCols, int kPad, int kThreads>
__device__ __forceinline__ void hgemm_copy_tile(__half (*tile)[kCols + kPad], const __half* src, int ld, int rows_left,
                                                int cols_left, bool use_16_bytes) {
    constexpr int kChunksPerRow = kCols / 8;
    for (int f = threadIdx.x; f < kRows * kChunksPerRow; f += kThreads) {
        const int r = f / kChunksPerRow, c = f % kChunksPerRow * 8;
        if (use_16_bytes && r < rows_left && c + 8 <= cols_left) {
            hgemm_copy_16_bytes(&tile[r][c], src + r * ld + c);  // hgemm_common.cuh
        } else {  // one half at a time: unaligned rows, or the chunk crosses the matrix edge
            for (int e = 0; e < 8; ++e)
                tile[r][c + e] = r < rows_left && c + e < cols_left ? src[r * ld + c + e] : __float2half(0.0f);
        }
    }
}

template <typename OutT, int kTile, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(2 * kTile)
    hgemm_block_tile_kernel(int M, int N, int K, float alpha, const __half* A, int lda, const __half* B, int ldb,
                            OutT* C, int ldc, const __half* bias, bool relu, bool use_16_bytes) {
    using T = HgemmBlockTile<kTile, kTransA, kTransB>;
    __shared__ __align__(16) __half a_tile[T::kARows][T::kACols + T::kPad];
    __shared__ __align__(16) __half b_tile[T::kBRows][T::kBCols + T::kPad];

    const int warp = threadIdx.x / 32;
    const int row0 = blockIdx.y * T::BM, col0 = blockIdx.x * T::BN;
    const int warp_row = warp / T::kWarpsN * T::WM, warp_col = warp % T::kWarpsN * T::WN;
    float acc[T::MI][T::NI][4] = {};

    for (int k0 = 0; k0 < K; k0 += T::BK) {
        // op(A)'s tile: rows row0.., k0.. of A, or rows k0.., columns row0.. of Aᵀ as stored; likewise op(B).
        if (!kTransA) {
            hgemm_copy_tile<T::kARows, T::kACols, T::kPad, T::kThreads>(a_tile, A + row0 * lda + k0, lda, M - row0,
                                                                        K - k0, use_16_bytes);
        } else {
            hgemm_copy_tile<T::kARows, T::kACols, T::kPad, T::kThreads>(a_tile, A + k0 * lda + row0, lda, K - k0,
                                                                        M - row0, use_16_bytes);
        }
        if (!kTransB) {
            hgemm_copy_tile<T::kBRows, T::kBCols, T::kPad, T::kThreads>(b_tile, B + k0 * ldb + col0, ldb, K - k0,
                                                                        N - col0, use_16_bytes);
        } else {
            hgemm_copy_tile<T::kBRows, T::kBCols, T::kPad, T::kThreads>(b_tile, B + col0 * ldb + k0, ldb, N - col0,
                                                                        K - k0, use_16_bytes);
        }
        __syncthreads();  // the tiles are complete
        hgemm_multiply_tile<T>(a_tile, b_tile, warp_row, warp_col, M - row0 - warp_row, N - col0 - warp_col, K - k0,
                               acc);
        __syncthreads();  // every warp is done reading them before the next k-step overwrites them
    }

#pragma unroll
    for (int mi = 0; mi < T::MI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < T::NI; ++ni) {
            hgemm_store_accumulators(C, ldc, M, N, row0 + warp_row + 16 * mi, col0 + warp_col + 8 * ni, acc[mi][ni],
                                     alpha, bias, relu);
        }
    }
}

// Runs step 2 with the given block tile (the tests force each; hgemm_block_tile picks by output size).
template <typename OutT>
void hgemm_block_tile_with_tile(GemmTile tile, Transpose op_a, Transpose op_b, int M, int N, int K, float alpha,
                                const __half* A, int lda, const __half* B, int ldb, OutT* C, int ldc,
                                HgemmEpilogue epilogue, cudaStream_t stream) {
    if (!hgemm_check_arguments("hgemm_block_tile", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    const int bt = static_cast<int>(tile);
    gemm_check_grid_y("hgemm_block_tile", "M", M, bt);
    const auto kernel = tile == GemmTile::t64
                            ? gemm_pick_transposes(op_a, op_b, hgemm_block_tile_kernel<OutT, 64, false, false>,
                                                   hgemm_block_tile_kernel<OutT, 64, false, true>,
                                                   hgemm_block_tile_kernel<OutT, 64, true, false>,
                                                   hgemm_block_tile_kernel<OutT, 64, true, true>)
                            : gemm_pick_transposes(op_a, op_b, hgemm_block_tile_kernel<OutT, 128, false, false>,
                                                   hgemm_block_tile_kernel<OutT, 128, false, true>,
                                                   hgemm_block_tile_kernel<OutT, 128, true, false>,
                                                   hgemm_block_tile_kernel<OutT, 128, true, true>);
    kernel<<<dim3(cuda_teach::ceil_div(N, bt), cuda_teach::ceil_div(M, bt)), dim3(2 * bt), 0, stream>>>(
        M, N, K, alpha, A, lda, B, ldb, C, ldc, epilogue.bias, epilogue.relu, hgemm_can_use_16_bytes(A, lda, B, ldb));
    CUDA_CHECK(cudaGetLastError());
}

template <typename OutT>
void hgemm_block_tile(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const __half* A, int lda,
                      const __half* B, int ldb, OutT* C, int ldc, HgemmEpilogue epilogue, cudaStream_t stream) {
    hgemm_block_tile_with_tile(gemm_tile_for(M, N, gemm_sm_count()), op_a, op_b, M, N, K, alpha, A, lda, B, ldb, C,
                               ldc, epilogue, stream);
}
