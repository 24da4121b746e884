// kernels/hgemm_common.cuh — what every tensor-core GEMM step shares: the contract, the epilogue, the argument checks.
//
// Every step (kernels/hgemm_v1_warp_tile.cuh … hgemm_v3_pipelined.cuh) computes, for row-major matrices,
//     C = act( alpha · op(A) · op(B)  +  bias )        op(A): M×K, op(B): K×N, C: M×N
// with A, B and bias in fp16 (__half) and every product accumulated in fp32 by the tensor cores' mma.m16n8k16
// (kernels/tensor_core.h). op(X) is X or Xᵀ (Transpose::yes), as in the fp32 GEMM (kernels/gemm_common.cuh): A is
// stored M×K (lda ≥ K), or K×M (lda ≥ M) when transposed; B is K×N (ldb ≥ N), or N×K (ldb ≥ K). C is written as
// OutT: float, or __half rounded once from the fp32 result (to nearest; beyond ±65504 it becomes ±inf, as
// __float2half_rn does). There is no beta: C is never read. Any M, N, K ≥ 0 and any leading dimensions work.
//
// Deterministic: each output's K products are summed in a fixed order (16 k at a time by one mma, the mma's in
// ascending k), so the same inputs give the same bits on every run. Not the same bits as the fp32 GEMM: the inputs
// are rounded to fp16 first, and a GPU's tensor cores add in their own order and precision.
//
// The CPU reference is reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) in
// common/reference_ops.h, run on the fp16 inputs converted to float (exactly); every launcher and kernel takes its
// arguments in that order (without beta; the tests add bias and ReLU to the reference's result).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/tensor_core.h"
#include "kernels/gemm_common.cuh"  // Transpose, gemm_pick_transposes, GemmTile, gemm_tile_for, the grid and int checks

// What happens to each output after the dot product, in the same kernel: add a bias row vector (fp16, added in
// fp32), then apply ReLU, then round once to the output type.
struct HgemmEpilogue {
    const __half* bias = nullptr;  // length N, or nullptr for none
    bool relu = false;
};

// The one signature every step's launcher has (per output type), so a lesson switches steps by changing one word.
template <typename OutT>
using HgemmLauncher = void (*)(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const __half* A,
                               int lda, const __half* B, int ldb, OutT* C, int ldc, HgemmEpilogue epilogue,
                               cudaStream_t stream);

// ---- The epilogue ------------------------------------------------------------------------------------------------

// One output written as float, or as __half rounded to nearest (±inf past ±65504).
__device__ __forceinline__ void hgemm_write(float* c, float value) {
    *c = value;
}
__device__ __forceinline__ void hgemm_write(__half* c, float value) {
    *c = __float2half_rn(value);
}

// The 16×8 fp32 accumulator tile d[0..3] of one mma (rows row..row+15, columns col..col+7 of C), finished and
// stored: out = act(alpha·acc + bias[col]). Lane (g = lane/4, t = lane%4) holds rows g and g+8, columns 2t and
// 2t+1 (the C layout in kernels/tensor_core.h). A warp's stores: 8 rows × 8 consecutive outputs (16 or 32 bytes
// each); only outputs inside C are written.
template <typename OutT>
__device__ __forceinline__ void hgemm_store_accumulators(OutT* C, int ldc, int M, int N, int row, int col,
                                                         const float (&d)[4], float alpha, const __half* bias,
                                                         bool relu) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = row + g + 8 * (i / 2), c = col + 2 * t + i % 2;
        if (r < M && c < N) {
            float out = alpha * d[i];
            if (bias != nullptr) out += __half2float(bias[c]);
            if (relu) out = fmaxf(out, 0.0f);
            hgemm_write(C + r * ldc + c, out);  // C[r][c]
        }
    }
}

// ---- 16-byte loads of steps 2–3 ---------------------------------------------------------------------------------

// Steps 2–3 copy 8 halves (16 bytes) with one instruction when every row start is 16-byte aligned: aligned base
// pointers and leading dimensions that are multiples of 8 (784 and 1024 are; 10 is not). Otherwise they copy one
// half at a time.
// 8 halves, src → dst, both 16-byte aligned: one 16-byte load and one 16-byte store on a GPU.
__device__ __forceinline__ void hgemm_copy_16_bytes(__half* dst, const __half* src) {
#if defined(CUDA_TEACH_CPU)
    std::memcpy(dst, src, 16);  // the same copy; a uint4 access to __half storage would break C++'s aliasing rules
#else
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}

inline bool hgemm_can_use_16_bytes(const __half* A, int lda, const __half* B, int ldb) {
    const auto aligned = [](const __half* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return lda % 8 == 0 && ldb % 8 == 0 && aligned(A) && aligned(B);
}

// ---- Host-side argument checks -----------------------------------------------------------------------------------
// gemm_check_arguments (kernels/gemm_common.cuh): the same checks and messages as the fp32 GEMM's. Returns false when
// there is nothing to launch.
inline bool hgemm_check_arguments(const char* who, Transpose op_a, Transpose op_b, int M, int N, int K, const __half* A,
                                  int lda, const __half* B, int ldb, const void* C, int ldc) {
    return gemm_check_arguments(who, op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc);
}
