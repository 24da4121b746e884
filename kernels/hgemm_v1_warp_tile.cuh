// kernels/hgemm_v1_warp_tile.cuh — tensor-core GEMM step 1: one warp, one 32×32 output tile, fragments straight
// from global memory.
//
// idea:     the tensor cores multiply whole tiles: one mma.m16n8k16 (kernels/tensor_core.h) computes a 16×8 block of
//           C from a 16×16 piece of op(A) and a 16×8 piece of op(B), 4096 flops in one warp-wide instruction. No
//           lane owns an output: each of the 32 lanes holds a few elements of each operand (its "fragment") and
//           of the result. Here every lane fetches its fragment elements from global memory itself, at the
//           positions the PTX ISA gives (g = lane/4, t = lane%4):
//               A fragment, register r: op(A) rows g + 8·(r%2), columns 2t + 8·(r/2) and +1 (of this k-step's 16)
//               B fragment, register r: op(B) rows 2t + 8·r and +1, column g
//               accumulator d[i]:       C row g + 8·(i/2), column 2t + i%2
//           A warp computes a 32×32 tile as 2 × 4 mma tiles, so each A fragment serves 4 mma's and each B
//           fragment 2.
// costs:    every fragment element is its own 2-byte global load, and the four warps of a block load the same
//           rows of op(A) and columns of op(B) separately (nothing is shared through shared memory): the tensor
//           cores wait on memory almost all the time. Steps 2–3 fix that.
// edges:    all 32 lanes must execute each mma, so elements outside op(A) or op(B) are loaded as 0 (every M, N, K
//           works), mma tiles wholly outside C are skipped by the whole warp, and only outputs inside C are
//           stored.
// computes: C = act(alpha·op(A)·op(B) + bias), the contract in kernels/hgemm_common.cuh; the same bits as steps 2
//           and 3 (the same mma's on the same fragments, k ascending).
// reference: reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), common/reference_ops.h.
// launch:   128 threads (4 warps: a 64×64 block tile, 2 × 2 warp tiles); grid (ceil(N / 64), ceil(M / 64));
//           M ≤ 65535·64.
#pragma once

#include "kernels/hgemm_common.cuh"

// op(X)[row][col] for X stored row-major with leading dimension ld (op(X) = X, or Xᵀ when kTrans); 0 outside
// op(X)'s rows × cols.
template <bool kTrans>
__device__ __forceinline__ __half hgemm_op_element(const __half* X, int ld, int row, int col, int rows, int cols) {
    if (row >= rows || col >= cols) return __float2half(0.0f);
    return kTrans ? X[col * ld + row] : X[row * ld + col];
}

template <typename OutT, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(128)
    hgemm_warp_tile_kernel(int M, int N, int K, float alpha, const __half* A, int lda, const __half* B, int ldb,
                           OutT* C, int ldc, const __half* bias, bool relu) {
    constexpr int MI = 2, NI = 4;  // the warp tile: 2 × 4 mma tiles of 16×8 = 32×32 outputs
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int row0 = blockIdx.y * 64 + (warp / 2) * 32, col0 = blockIdx.x * 64 + (warp % 2) * 32;
    // A warp whose whole tile is outside C has nothing to do. (Warp 0 never is: the CPU backend needs thread 0 to
    // reach the mma's when any thread does, see common/cpu_backend/runtime.h.)
    if (row0 >= M || col0 >= N) return;

    float acc[MI][NI][4] = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[MI][4], b[NI][2];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            // One load of the warp: A stored M×K reads 8 rows (g) at 4 k 2 halves apart (t), 8 sectors; Aᵀ stored
            // K×M reads 4 rows (k = 2t..) of 8 consecutive m (g), 4 sectors.
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int row = row0 + 16 * mi + g + 8 * (r % 2), k = k0 + 2 * t + 8 * (r / 2);
                a[mi][r] = pack_halves(hgemm_op_element<kTransA>(A, lda, row, k, M, K),
                                       hgemm_op_element<kTransA>(A, lda, row, k + 1, M, K));
            }
        }
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
            // B stored K×N: 4 rows (k = 2t..) of 8 consecutive n (g), 4 sectors; Bᵀ stored N×K: 8 rows (g) at 4 k
            // 2 halves apart (t), 8 sectors.
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int k = k0 + 2 * t + 8 * r, col = col0 + 8 * ni + g;
                b[ni][r] = pack_halves(hgemm_op_element<kTransB>(B, ldb, k, col, K, N),
                                       hgemm_op_element<kTransB>(B, ldb, k + 1, col, K, N));
            }
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                // Skipped by all 32 lanes together (the condition is the same for the whole warp).
                if (row0 + 16 * mi < M && col0 + 8 * ni < N) {
                    mma_m16n8k16_f16_f32(acc[mi][ni], a[mi], b[ni], acc[mi][ni]);  // accumulate in place
                }
            }
        }
    }

#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
            hgemm_store_accumulators(C, ldc, M, N, row0 + 16 * mi, col0 + 8 * ni, acc[mi][ni], alpha, bias, relu);
        }
    }
}

template <typename OutT>
void hgemm_warp_tile(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const __half* A, int lda,
                     const __half* B, int ldb, OutT* C, int ldc, HgemmEpilogue epilogue, cudaStream_t stream) {
    if (!hgemm_check_arguments("hgemm_warp_tile", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    gemm_check_grid_y("hgemm_warp_tile", "M", M, 64);
    const auto kernel = gemm_pick_transposes(
        op_a, op_b, hgemm_warp_tile_kernel<OutT, false, false>, hgemm_warp_tile_kernel<OutT, false, true>,
        hgemm_warp_tile_kernel<OutT, true, false>, hgemm_warp_tile_kernel<OutT, true, true>);
    kernel<<<dim3(cuda_teach::ceil_div(N, 64), cuda_teach::ceil_div(M, 64)), dim3(128), 0, stream>>>(
        M, N, K, alpha, A, lda, B, ldb, C, ldc, epilogue.bias, epilogue.relu);
    CUDA_CHECK(cudaGetLastError());
}
