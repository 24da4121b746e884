// kernels/gemm_common.cuh — what every GEMM step shares: the contract, the epilogue, the host-side argument checks.
//
// Every step (kernels/gemm_v1_naive.cuh … gemm_v6_double_buffered.cuh) computes, for row-major matrices,
//     C = act( alpha · op(A) · op(B)  +  beta · C  +  bias )        op(A): M×K, op(B): K×N, C: M×N
// where op(X) is X or Xᵀ (Transpose::yes), bias is a length-N row vector added to every row (or none), and act is
// ReLU or the identity. A is stored M×K (lda ≥ K), or K×M (lda ≥ M) when transposed; B is K×N (ldb ≥ N), or N×K
// (ldb ≥ K) when transposed. When beta == 0, C is not read (as in BLAS), so C may hold garbage or NaN. Any M, N, K
// ≥ 0 works (1, 10, 784, primes, partial tiles).
//
// The CPU reference is reference::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) in
// common/reference_ops.h; every launcher and kernel takes its arguments in that order (the transposes first, then
// the epilogue, which the reference does not have: the tests add bias and ReLU to its result).
//
// The three GEMMs of a linear layer Y = X·W (X: batch×in, W: in×out, both row-major):
//     forward          Y  = X  · W    gemm(v, Transpose::no,  Transpose::no,  batch, out, in,  ...)  + bias, ReLU
//     input gradient   dX = dY · Wᵀ   gemm(v, Transpose::no,  Transpose::yes, batch, in,  out, ...)
//     weight gradient  dW = Xᵀ · dY   gemm(v, Transpose::yes, Transpose::no,  in,    out, batch, ...)
// kernels/gemm.cuh wraps exactly these three as linear_forward / linear_backward_input / linear_backward_weight.
// (Both transposed works too; the tests run all four combinations.)
#pragma once

#include <climits>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "common/launch.h"
#include "kernels/gemm_version.h"

enum class Transpose { no, yes };

// What happens to each output after the dot product, in the same kernel (so an activation is written once):
// add a bias row vector, then apply ReLU.
struct GemmEpilogue {
    const float* bias = nullptr;  // length N, or nullptr for none
    bool relu = false;
};

// The one signature every step's launcher has, so a lesson switches steps by changing one word.
using GemmLauncher = void (*)(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                              const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue epilogue,
                              cudaStream_t stream);

// The epilogue every step applies to one finished dot product `acc` for output (row, col):
//     out = act(alpha·acc + beta·C_old + bias[col])
__device__ __forceinline__ float gemm_epilogue_value(float acc, float alpha, float beta, const float* c_old,
                                                     const float* bias, bool relu, int col) {
    float out = alpha * acc;
    if (beta != 0.0f) out += beta * *c_old;  // skipping the read when beta == 0 keeps NaN garbage in C out
    if (bias != nullptr) out += bias[col];
    if (relu) out = fmaxf(out, 0.0f);
    return out;
}

// Every kernel is instantiated once per transpose combination (template <bool kTransA, bool kTransB>), so its
// index arithmetic is fixed at compile time; the launcher picks the instantiation for (op_a, op_b).
template <typename Kernel>
Kernel gemm_pick_transposes(Transpose op_a, Transpose op_b, Kernel nn, Kernel nt, Kernel tn, Kernel tt) {
    if (op_a == Transpose::no) return op_b == Transpose::no ? nn : nt;
    return op_b == Transpose::no ? tn : tt;
}

// ---- Host-side argument checks -------------------------------------------------------------------------------------
// A launch costs a few integer comparisons on the host: the message (a std::string) is built only when an argument
// is wrong, in gemm_argument_error().

[[noreturn]] inline void gemm_argument_error(const char* who, const char* problem, int M, int N, int K, int lda,
                                             int ldb, int ldc) {
    char text[320];
    std::snprintf(text, sizeof text, "%s: %s (M=%d N=%d K=%d lda=%d ldb=%d ldc=%d)", who, problem, M, N, K, lda, ldb,
                  ldc);
    throw std::invalid_argument(text);
}

// The kernels index with int: gemm_max_rows (gemm_version.h) is the limit, with its reasons.
inline bool gemm_fits_int_indexing(int rows, int ld) {
    return rows <= gemm_max_rows(ld);
}

// std::invalid_argument with one clear message for a bad call. Returns false when there is nothing to launch (an
// empty output: M == 0 or N == 0). The pointers are only checked for null, so the fp16 GEMM (hgemm_common.cuh)
// uses the same checks.
inline bool gemm_check_arguments(const char* who, Transpose op_a, Transpose op_b, int M, int N, int K, const void* A,
                                 int lda, const void* B, int ldb, const void* C, int ldc) {
    const bool trans_a = op_a == Transpose::yes, trans_b = op_b == Transpose::yes;
    const int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;  // A as stored
    const int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    const char* problem = nullptr;
    if (M < 0 || N < 0 || K < 0) {
        problem = "negative size";
    } else if (lda < (a_cols > 0 ? a_cols : 1)) {
        problem = "lda is smaller than A's columns as stored (K, or M when op_a is Transpose::yes)";
    } else if (ldb < (b_cols > 0 ? b_cols : 1)) {
        problem = "ldb is smaller than B's columns as stored (N, or K when op_b is Transpose::yes)";
    } else if (ldc < (N > 0 ? N : 1)) {
        problem = "ldc is smaller than N, C's columns";
    } else if (M > 0 && N > 0 && (C == nullptr || (K > 0 && (A == nullptr || B == nullptr)))) {
        problem = "null matrix pointer";
    } else if (!gemm_fits_int_indexing(a_rows, lda) || !gemm_fits_int_indexing(b_rows, ldb) ||
               !gemm_fits_int_indexing(M, ldc)) {
        problem = "a matrix is too large for int index arithmetic (rows x leading dimension near 2^31)";
    }
    if (problem != nullptr) gemm_argument_error(who, problem, M, N, K, lda, ldb, ldc);
    return M > 0 && N > 0;
}

// grid.x may have 2^31 − 1 blocks, grid.y only 65535. Every step puts one output dimension's tiles on grid.y (step
// 1: N's, the others: M's); an output that would need more is refused rather than split over grid.z (MNIST's
// largest, 60000 rows, needs 7500 blocks of 8).
inline constexpr int kMaxGridY = 65535;

inline void gemm_check_grid_y(const char* who, const char* dimension, int size, int per_block) {
    const long long blocks = cuda_teach::ceil_div<long long>(size, per_block);
    if (blocks <= kMaxGridY) return;
    char text[320];
    std::snprintf(text, sizeof text, "%s: %s=%d needs %lld blocks of %d along grid.y, whose limit is %d (so %s <= %d)",
                  who, dimension, size, blocks, per_block, kMaxGridY, dimension, kMaxGridY * per_block);
    throw std::invalid_argument(text);
}

// ---- Block tiles ----------------------------------------------------------------------------------------------------
// The fp16 GEMM (hgemm_common.cuh) computes a 128×128 tile of C per block, or 64×64 when 128×128 tiles would number
// fewer than 128 (a batch-128 layer, 128×1024, is 8 of them). The fp32 steps 4–6 choose among more tiles, below.
enum class GemmTile { t64 = 64, t128 = 128 };

inline GemmTile gemm_tile_for(int M, int N) {
    const long long tiles_128 = static_cast<long long>(cuda_teach::ceil_div(M, 128)) * cuda_teach::ceil_div(N, 128);
    return tiles_128 < 128 ? GemmTile::t64 : GemmTile::t128;
}

// Steps 4–6 compute a BM×BN tile of C per block, each thread TM×TN outputs of it in registers:
//     GemmBlockTile   BM×BN     threads   TM×TN per thread
//     t128            128×128   256       8×8
//     t64              64×64     64       8×8
//     t32              32×32     64       4×4
//     t16              16×16     64       2×2
// A bigger tile reuses every value it loads more often (a thread's TM + TN operands feed TM·TN multiply-adds), but
// the grid has fewer blocks, and blocks are what an SM's warp schedulers choose between while one waits on a load
// or a barrier. At the lessons' batch of 128 a 1024-wide layer is 8 tiles of 128×128 (or 32 of 64×64, 2 warps
// each): most of an H200's 132 SMs would sit idle. So the launchers take the biggest tile that still gives every SM
// at least 2 blocks (choose_gemm_tile), and the smallest (the most blocks) when even that one cannot (the 10-wide
// output layer: 8 blocks of 16×16). No split-K: whatever the tile, each output sums its K terms in the same order
// (one fmaf per k, ascending, from 0), so every tile gives the same bits and a lesson's weights do not depend on
// the GPU it ran on. The tests force each tile through the steps' *_with_tile launchers and compare.
enum class GemmBlockTile { t16 = 16, t32 = 32, t64 = 64, t128 = 128 };

// The one switch from a block tile to its instantiation, shared by steps 4–7: calls
// launch.template operator()<kTile>() (a lambda `[&]<int kTile>() { ... }`) for tile's kTile.
template <typename Launch>
void gemm_with_block_tile(const char* who, GemmBlockTile tile, Launch&& launch) {
    switch (tile) {
        case GemmBlockTile::t16:
            return launch.template operator()<16>();
        case GemmBlockTile::t32:
            return launch.template operator()<32>();
        case GemmBlockTile::t64:
            return launch.template operator()<64>();
        case GemmBlockTile::t128:
            return launch.template operator()<128>();
    }
    throw std::invalid_argument(std::string(who) + ": a GemmBlockTile other than 16, 32, 64, 128");
}

template <int kTile>
struct GemmTileShape {
    static constexpr int BM = kTile, BN = kTile, BK = 8;
    static constexpr int TM = kTile >= 64 ? 8 : kTile / 8, TN = TM;
    static constexpr int kThreads = (BM / TM) * (BN / TN);
    // __launch_bounds__'s second argument in steps 5–6: the blocks that must fit on one SM together. 16 warps per
    // SM (2 blocks of 256 threads, 8 of 64) leaves each thread 65536 / 512 = 128 registers: room for the 8×8
    // accumulators, their operands and step 6's float4s in flight without spilling (ptxas -v, sm_90).
    static constexpr int kMinBlocksPerSm = 512 / kThreads;
    static_assert(BM % (4 * TM) == 0 && kThreads % 32 == 0, "whole float4 rows per tile, whole warps per block");
};

// The grid of an M×N output in this tile, in blocks.
inline long long gemm_block_count(GemmBlockTile tile, int M, int N) {
    const int t = static_cast<int>(tile);
    return static_cast<long long>(cuda_teach::ceil_div(M, t)) * cuda_teach::ceil_div(N, t);
}

// The tile for an M×N output on a GPU with sm_count SMs: the biggest whose grid has ≥ 2 blocks per SM, else the
// smallest. K plays no part (no split-K). Pure, so the tests pass 132 (an H100 SXM's or H200's count); the
// launchers pass gemm_sm_count(). On the CPU backend an "SM" is a worker thread (1 by default), so big tiles win
// there, which suits it: fewer, fatter threads to emulate.
inline GemmBlockTile choose_gemm_tile(int M, int N, int sm_count) {
    const long long wanted = 2LL * (sm_count > 0 ? sm_count : 1);
    for (const GemmBlockTile tile : {GemmBlockTile::t128, GemmBlockTile::t64, GemmBlockTile::t32}) {
        if (gemm_block_count(tile, M, N) >= wanted) return tile;
    }
    return GemmBlockTile::t16;
}

// The current device's SM count (a cached attribute in the runtime: cheap enough to ask at every launch), or 0 when
// there is no usable device: then the tile is chosen as for one SM, the arguments are still checked first, and the
// launch itself reports the missing device at its line.
inline int gemm_sm_count() {
    int device = 0, sm_count = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
        (void)cudaGetLastError();  // not this launch's error: clear it
        return 0;
    }
    return sm_count;
}

// ---- 16-byte accesses of steps 5–7 -------------------------------------------------------------------------------

// p[0..3], of which the first `in_bounds` exist (≤ 0: none; ≥ 4: all). One 16-byte load when all 4 exist and
// use_float4 says p is 16-byte aligned; otherwise one float at a time, the missing ones 0.
__device__ __forceinline__ float4 load_4_floats(const float* p, int in_bounds, bool use_float4) {
    if (use_float4 && in_bounds >= 4) return *reinterpret_cast<const float4*>(p);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (in_bounds > 0) v.x = p[0];
    if (in_bounds > 1) v.y = p[1];
    if (in_bounds > 2) v.z = p[2];
    if (in_bounds > 3) v.w = p[3];
    return v;
}

// out[0..n-1] = p[0..n-1] from shared memory, with 16-byte loads (n = 4 or 8), one 8-byte load (n = 2) or one float
// (n = 1): the operands a thread of steps 5–7 takes per k. p must be aligned to the load (the tiles' layout
// guarantees it).
template <int n>
__device__ __forceinline__ void load_shared_floats(const float* p, float* out) {
    if constexpr (n == 1) {
        out[0] = *p;
    } else if constexpr (n == 2) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        out[0] = v.x;
        out[1] = v.y;
    } else {
        static_assert(n % 4 == 0, "2, 4 or 8 floats");
#pragma unroll
        for (int i = 0; i < n; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(p + i);
            out[i + 0] = v.x;
            out[i + 1] = v.y;
            out[i + 2] = v.z;
            out[i + 3] = v.w;
        }
    }
}

// float4 access needs every row start 16-byte aligned. (cudaMalloc returns 256-byte aligned memory; a view at an
// offset may not be.)
inline bool gemm_can_use_float4(const float* A, int lda, const float* B, int ldb, const float* C, int ldc) {
    const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return lda % 4 == 0 && ldb % 4 == 0 && ldc % 4 == 0 && aligned(A) && aligned(B) && aligned(C);
}

// The epilogue for 4 consecutive outputs c[0..3] of a row of C (columns col..col + 3), of which the first
// `in_bounds` exist, from the finished dot products acc4[0..3]. One 16-byte store (and one 16-byte load of the old
// C when beta ≠ 0) when all 4 exist and use_float4 says c is 16-byte aligned; otherwise one float at a time.
__device__ __forceinline__ void gemm_epilogue_4(float* c, int in_bounds, bool use_float4, const float* acc4,
                                                float alpha, float beta, const float* bias, bool relu, int col) {
    if (use_float4 && in_bounds >= 4) {
        float4 old = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (beta != 0.0f) old = *reinterpret_cast<const float4*>(c);
        *reinterpret_cast<float4*>(c) =
            make_float4(gemm_epilogue_value(acc4[0], alpha, beta, &old.x, bias, relu, col),
                        gemm_epilogue_value(acc4[1], alpha, beta, &old.y, bias, relu, col + 1),
                        gemm_epilogue_value(acc4[2], alpha, beta, &old.z, bias, relu, col + 2),
                        gemm_epilogue_value(acc4[3], alpha, beta, &old.w, bias, relu, col + 3));
        return;
    }
    for (int j = 0; j < 4 && j < in_bounds; ++j)
        c[j] = gemm_epilogue_value(acc4[j], alpha, beta, c + j, bias, relu, col + j);
}
