// kernels/hgemm_v3_pipelined.cuh — tensor-core GEMM step 3: step 2 with cp.async double buffering, the next tiles'
// copies in flight while this tile is multiplied.
//
// idea:     in step 2 each k-step copies its tiles, waits at a barrier, multiplies, and waits at a second barrier
//           before the next copy may overwrite them: while a copy is in flight (hundreds of cycles) the tensor
//           cores of the block idle. Here the copies are cp.async (kernels/tensor_core.h): a thread starts its
//           16-byte global → shared copies and goes on without waiting for them, into a second pair of buffers.
//           So each k-step starts the copies of the *next* tiles, multiplies this one while they are in flight,
//           and only then waits for them:
//               start copies of tile 0 → buffer 0
//               for each tile t:  wait for my copies;  __syncthreads   (tile t is complete, and every warp is
//                                                                       done with tile t−1, whose buffer is next)
//                                 start copies of tile t+1 → the other buffer
//                                 multiply tile t (step 2's hgemm_multiply_tile, unchanged)
//           One barrier per k-step: the buffer refilled in step t was last read in step t−1, before that barrier.
//           The copy needs no registers either (step 2 goes global → registers → shared; cp.async goes straight
//           to shared memory).
// costs:    twice the shared memory (34–40 KiB at 128×128, 18–20 KiB at 64×64): fewer blocks fit on an SM.
// fallback: as step 2: where a 16-byte copy is not possible (unaligned rows, the matrix edge) the chunk is copied
//           one half at a time with plain loads and stores, zero-filled outside the matrix. Those finish before the
//           thread goes on, which is always allowed; the barrier publishes them with the cp.async copies.
// computes: C = act(alpha·op(A)·op(B) + bias), the contract in kernels/hgemm_common.cuh; the same bits as step 2
//           and step 1 (the same mma's in the same order).
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   2·kTile threads (256 or 128); grid (ceil(N / kTile), ceil(M / kTile)); M ≤ 65535·kTile.
#pragma once

#include "kernels/hgemm_common.cuh"
#include "kernels/hgemm_v2_block_tile.cuh"  // HgemmBlockTile, hgemm_multiply_tile

// Step 2's hgemm_copy_tile with cp.async: the same chunks, started rather than completed. The caller commits them
// as a group and waits for the group (cp_async_commit, cp_async_wait) before the barrier that publishes the tile.
template <int kRows, int kCols, int kPad, int kThreads>
__device__ __forceinline__ void hgemm_copy_tile_async(__half (*tile)[kCols + kPad], const __half* src, int ld,
                                                      int rows_left, int cols_left, bool use_16_bytes) {
    constexpr int kChunksPerRow = kCols / 8;
    for (int f = threadIdx.x; f < kRows * kChunksPerRow; f += kThreads) {
        const int r = f / kChunksPerRow, c = f % kChunksPerRow * 8;
        if (use_16_bytes && r < rows_left && c + 8 <= cols_left) {
            cp_async_16(&tile[r][c], src + r * ld + c);  // in flight until this thread's cp_async_wait
        } else {  // one half at a time: unaligned rows, or the chunk crosses the matrix edge
            for (int e = 0; e < 8; ++e)
                tile[r][c + e] = r < rows_left && c + e < cols_left ? src[r * ld + c + e] : __float2half(0.0f);
        }
    }
}

template <typename OutT, int kTile, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(2 * kTile)
    hgemm_pipelined_kernel(int M, int N, int K, float alpha, const __half* A, int lda, const __half* B, int ldb,
                           OutT* C, int ldc, const __half* bias, bool relu, bool use_16_bytes) {
    using T = HgemmBlockTile<kTile, kTransA, kTransB>;
    __shared__ __align__(16) __half a_tile[2][T::kARows][T::kACols + T::kPad];  // [buffer][row][column]
    __shared__ __align__(16) __half b_tile[2][T::kBRows][T::kBCols + T::kPad];

    const int warp = threadIdx.x / 32;
    const int row0 = blockIdx.y * T::BM, col0 = blockIdx.x * T::BN;
    const int warp_row = warp / T::kWarpsN * T::WM, warp_col = warp % T::kWarpsN * T::WN;
    float acc[T::MI][T::NI][4] = {};

    // Starts the copies of the tiles at k0 into buffer `buf` (the same tiles as step 2 copies).
    const auto start_copies = [&](int k0, int buf) {
        if (!kTransA) {
            hgemm_copy_tile_async<T::kARows, T::kACols, T::kPad, T::kThreads>(a_tile[buf], A + row0 * lda + k0, lda,
                                                                              M - row0, K - k0, use_16_bytes);
        } else {
            hgemm_copy_tile_async<T::kARows, T::kACols, T::kPad, T::kThreads>(a_tile[buf], A + k0 * lda + row0, lda,
                                                                              K - k0, M - row0, use_16_bytes);
        }
        if (!kTransB) {
            hgemm_copy_tile_async<T::kBRows, T::kBCols, T::kPad, T::kThreads>(b_tile[buf], B + k0 * ldb + col0, ldb,
                                                                              K - k0, N - col0, use_16_bytes);
        } else {
            hgemm_copy_tile_async<T::kBRows, T::kBCols, T::kPad, T::kThreads>(b_tile[buf], B + col0 * ldb + k0, ldb,
                                                                              N - col0, K - k0, use_16_bytes);
        }
        cp_async_commit();  // this thread's copies of these tiles: one group
    };

    if (K > 0) start_copies(0, 0);
    for (int k0 = 0, buf = 0; k0 < K; k0 += T::BK, buf ^= 1) {
        cp_async_wait<0>();  // this thread's copies of tiles[buf] have landed...
        __syncthreads();     // ...and everyone's; and every warp is done with tiles[buf ^ 1] (the previous k-step)
        if (k0 + T::BK < K) start_copies(k0 + T::BK, buf ^ 1);  // in flight during the mma's below
        hgemm_multiply_tile<T>(a_tile[buf], b_tile[buf], warp_row, warp_col, M - row0 - warp_row, N - col0 - warp_col,
                               K - k0, acc);
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

// Runs step 3 with the given block tile (the tests force each; hgemm_pipelined picks by output size).
template <typename OutT>
void hgemm_pipelined_with_tile(GemmTile tile, Transpose op_a, Transpose op_b, int M, int N, int K, float alpha,
                               const __half* A, int lda, const __half* B, int ldb, OutT* C, int ldc,
                               HgemmEpilogue epilogue, cudaStream_t stream) {
    if (!hgemm_check_arguments("hgemm_pipelined", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    const int bt = static_cast<int>(tile);
    gemm_check_grid_y("hgemm_pipelined", "M", M, bt);
    const auto kernel = tile == GemmTile::t64
                            ? gemm_pick_transposes(op_a, op_b, hgemm_pipelined_kernel<OutT, 64, false, false>,
                                                   hgemm_pipelined_kernel<OutT, 64, false, true>,
                                                   hgemm_pipelined_kernel<OutT, 64, true, false>,
                                                   hgemm_pipelined_kernel<OutT, 64, true, true>)
                            : gemm_pick_transposes(op_a, op_b, hgemm_pipelined_kernel<OutT, 128, false, false>,
                                                   hgemm_pipelined_kernel<OutT, 128, false, true>,
                                                   hgemm_pipelined_kernel<OutT, 128, true, false>,
                                                   hgemm_pipelined_kernel<OutT, 128, true, true>);
    kernel<<<dim3(cuda_teach::ceil_div(N, bt), cuda_teach::ceil_div(M, bt)), dim3(2 * bt), 0, stream>>>(
        M, N, K, alpha, A, lda, B, ldb, C, ldc, epilogue.bias, epilogue.relu, hgemm_can_use_16_bytes(A, lda, B, ldb));
    CUDA_CHECK(cudaGetLastError());
}

template <typename OutT>
void hgemm_pipelined(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const __half* A, int lda,
                     const __half* B, int ldb, OutT* C, int ldc, HgemmEpilogue epilogue, cudaStream_t stream) {
    hgemm_pipelined_with_tile(gemm_tile_for(M, N, gemm_sm_count()), op_a, op_b, M, N, K, alpha, A, lda, B, ldb, C,
                              ldc, epilogue, stream);
}
