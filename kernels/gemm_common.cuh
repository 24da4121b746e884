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

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

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
// The fp16 GEMM (hgemm_common.cuh) computes a 128×128 tile of C per block (8 warps), or 64×64 (4 warps): the
// 128×128 tile when its grid gives every SM kWantedWarpsPerSm warps (below, as the fp32 steps count them), else
// 64×64. It does not split K: a batch-128 layer, 128×1024, is 32 blocks of 64×64 (a quarter of an H200's SMs).
// The fp32 steps 4–7 choose among more tiles and split K, below.
enum class GemmTile { t64 = 64, t128 = 128 };
inline constexpr int kHgemmWantedWarpsPerSm = 8;  // = kWantedWarpsPerSm (defined with the fp32 plan below)

inline GemmTile gemm_tile_for(int M, int N, int sm_count) {
    const long long tiles_128 = static_cast<long long>(cuda_teach::ceil_div(M, 128)) * cuda_teach::ceil_div(N, 128);
    return tiles_128 * 8 >= static_cast<long long>(kHgemmWantedWarpsPerSm) * (sm_count > 0 ? sm_count : 1)
               ? GemmTile::t128
               : GemmTile::t64;
}

// Steps 4–6 compute a BM×BN tile of C per block, each thread TM×TN outputs of it in registers (step 7: 128 threads
// at every tile, gemm_v7_warp_tiled.cuh):
//     GemmBlockTile   BM×BN     threads   TM×TN per thread
//     t128            128×128   256       8×8
//     t64              64×64     64       8×8
//     t32              32×32     64       4×4
//     t16              16×16     64       2×2
// A bigger tile reuses every value it loads more often (a thread's TM + TN operands feed TM·TN multiply-adds), but
// the grid has fewer blocks, hence fewer warps, and warps are what an SM's 4 schedulers choose between while one
// waits on a load or a barrier. The plan (choose_gemm_plan, below) counts warps, not blocks, and cuts K when the
// output is too small to give the GPU enough of them (split-K). Whatever the tile, each output sums its terms in
// the same order, so every tile gives the same bits; the tests force each tile through the steps' *_with_tile
// launchers and compare.
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

// ---- The plan of steps 4–7: split-K and the block tile ------------------------------------------------------------
// A block walks its K in k-steps of BK = 8, one after another (each waits for its tiles and a barrier), so without
// help a 128×1024×784 layer is 98 dependent k-steps on every block whatever the tile, on a grid too small for the
// GPU (8 tiles of 128×128, 32 of 64×64). Two fixes, in this order:
//
// split-K (gemm_split_k): when M ≤ 128 (a batch of 128 or less) and K > 128, K is cut into `splits` slices of
// k_slice terms (a multiple of BK, so 16-byte alignment holds), ceil(K / 128) of them and at most 16; each slice is
// a block of its own (grid.z) that writes its raw partial sums to a workspace, and gemm_split_k_reduce_kernel adds
// the slices in the fixed order 0, 1, …, splits − 1 and applies the epilogue. The split depends on the shape only,
// never on the GPU: the sum's order, hence its bits, is the same on every GPU and on the CPU backend, run after run,
// for every tile and every step 4–7. It is not the unsplit sum's bits ((p0 + p1) + … groups the terms otherwise):
// the lessons' numerics changed when split-K came in (tests/lesson_pins.json was recorded again).
//
// the tile (choose_gemm_plan): the biggest whose grid, splits included, gives every SM kWantedWarpsPerSm warps (2
// per scheduler: one issues while the other waits), else the smallest. Pure, so the tests pass 132 (an H100 SXM's or
// H200's count); the launchers pass gemm_sm_count(). On the CPU backend an "SM" is a worker thread (1 by default),
// so big tiles win there, which suits it: fewer, fatter threads to emulate.
inline constexpr int kWantedWarpsPerSm = kHgemmWantedWarpsPerSm;
inline constexpr int kSplitKMaxRows = 128, kSplitKTargetSlice = 128, kSplitKMaxSplits = 16;

struct GemmSplitK {
    int splits = 1;   // grid.z
    int k_slice = 0;  // terms per slice (the last may have fewer); K when unsplit
};

inline GemmSplitK gemm_split_k(int M, int K) {
    if (M > kSplitKMaxRows || K <= kSplitKTargetSlice) return {1, K};
    const int wanted = std::min(kSplitKMaxSplits, cuda_teach::ceil_div(K, kSplitKTargetSlice));
    const int k_slice = cuda_teach::ceil_div(cuda_teach::ceil_div(K, wanted), 8) * 8;  // whole k-steps
    return {cuda_teach::ceil_div(K, k_slice), k_slice};
}

struct GemmPlan {
    GemmBlockTile tile;
    GemmSplitK split;
};

// Warps per block of steps 4–6 (GemmTileShape) and of step 7 (always 2 × 2 warps).
inline int gemm_register_blocked_warps(GemmBlockTile tile) {
    return tile == GemmBlockTile::t128 ? 8 : 2;
}
inline int gemm_warp_tiled_warps(GemmBlockTile) {
    return 4;
}

// The warps an M×N output's grid has in this tile with `splits` slices of K.
inline long long gemm_warp_count(GemmBlockTile tile, int M, int N, int splits, int (*warps_per_block)(GemmBlockTile)) {
    return gemm_block_count(tile, M, N) * splits * warps_per_block(tile);
}

inline GemmPlan choose_gemm_plan(int M, int N, int K, int sm_count, int (*warps_per_block)(GemmBlockTile)) {
    const GemmSplitK split = gemm_split_k(M, K);
    const long long wanted = static_cast<long long>(kWantedWarpsPerSm) * (sm_count > 0 ? sm_count : 1);
    for (const GemmBlockTile tile : {GemmBlockTile::t128, GemmBlockTile::t64, GemmBlockTile::t32}) {
        if (gemm_warp_count(tile, M, N, split.splits, warps_per_block) >= wanted) return {tile, split};
    }
    return {GemmBlockTile::t16, split};
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

// ---- Split-K: the kernels' side, the workspace, the reduction --------------------------------------------------

// The first lines of steps 4–7's kernels: block z of a split-K grid computes op(A)[:, k_begin..] · op(B)[k_begin.., :]
// for its slice only (K becomes the slice's length) into its own M×N matrix of the workspace (C + z·c_slice).
// Unsplit (gridDim.z = 1, k_slice = K, c_slice = 0) nothing changes.
template <bool kTransA, bool kTransB>
__device__ __forceinline__ void gemm_split_k_slice(const float*& A, int lda, const float*& B, int ldb, int& K,
                                                   float*& C, int k_slice, int c_slice) {
    const int z = blockIdx.z, k_begin = z * k_slice;
    A += kTransA ? k_begin * lda : k_begin;  // op(A)'s columns from k_begin: A's columns, or its rows when stored K×M
    B += kTransB ? k_begin : k_begin * ldb;  // op(B)'s rows from k_begin
    K = std::min(K - k_begin, k_slice);
    C += z * c_slice;
}

// The workspace of the partial sums: one buffer per (device, stream), grown when a bigger split output comes along
// and kept (at most 16 · 128 · N floats: 8 MiB for N = 1024). Per stream, so concurrent GEMMs on two streams never
// share one; a launch allocates only the first time (or when growing: then the stream is synchronized first, since
// the old buffer may still be read). The one device allocation the GEMMs make, outside the lessons' MemoryLedger.
inline float* gemm_split_k_workspace(size_t floats, cudaStream_t stream) {
    struct Buffer {
        float* data = nullptr;
        size_t floats = 0;
    };
    static std::mutex mutex;
    // Never destroyed, never freed: the buffers stay reachable (not leaks) until the process ends.
    static auto& buffers = *new std::map<std::pair<int, cudaStream_t>, Buffer>;
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const std::lock_guard lock(mutex);
    Buffer& buffer = buffers[{device, stream}];
    if (buffer.floats < floats) {
        if (buffer.data != nullptr) {
            CUDA_CHECK(cudaStreamSynchronize(stream));
            CUDA_CHECK(cudaFree(buffer.data));
            buffer = {};
        }
        CUDA_CHECK(cudaMalloc(&buffer.data, floats * sizeof(float)));
        buffer.floats = floats;
    }
    return buffer.data;
}

// C = act(alpha · Σ_z partial[z] + beta · C + bias), z = 0, 1, …, splits − 1 in that order (the fixed order that makes
// split-K reproducible). One thread per output, grid (ceil(N / 128), M): a warp reads 32 consecutive floats of each
// slice (128 bytes, coalesced) and writes 32 consecutive outputs. (A template, as every GEMM kernel is, so that each
// file including this header may instantiate it.)
template <bool kRelu>
__global__ void gemm_split_k_reduce_kernel(int M, int N, int splits, const float* partial, float alpha, float beta,
                                           float* C, int ldc, const float* bias) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
    if (col >= N) return;
    const float* p = partial + row * N + col;  // partial[z][row][col], slices M·N apart
    float sum = p[0];
    for (int z = 1; z < splits; ++z) sum += p[z * M * N];
    float* c = C + row * ldc + col;
    *c = gemm_epilogue_value(sum, alpha, beta, c, bias, kRelu, col);
}

// Where a step's kernel writes: C itself (unsplit), or the workspace (split-K: raw sums, alpha 1, beta 0, no
// epilogue, leading dimension N, slices M·N apart).
struct GemmSplitTarget {
    float* C;
    int ldc;
    float alpha, beta;
    GemmEpilogue epilogue;
    int splits, k_slice, c_slice;
};

inline GemmSplitTarget gemm_split_k_target(GemmSplitK split, int M, int N, float alpha, float beta, float* C, int ldc,
                                           GemmEpilogue epilogue, cudaStream_t stream) {
    if (split.splits <= 1) return {C, ldc, alpha, beta, epilogue, 1, split.k_slice, 0};
    float* partial = gemm_split_k_workspace(static_cast<size_t>(split.splits) * M * N, stream);
    return {partial, N, 1.0f, 0.0f, GemmEpilogue{}, split.splits, split.k_slice, M * N};
}

// After a step's kernel: the reduction, when it wrote to the workspace.
inline void gemm_split_k_finish(const GemmSplitTarget& target, int M, int N, float alpha, float beta, float* C, int ldc,
                                GemmEpilogue epilogue, cudaStream_t stream) {
    if (target.splits <= 1) return;
    const auto kernel = epilogue.relu ? gemm_split_k_reduce_kernel<true> : gemm_split_k_reduce_kernel<false>;
    kernel<<<dim3(cuda_teach::ceil_div(N, 128), M), dim3(128), 0, stream>>>(M, N, target.splits, target.C, alpha, beta,
                                                                            C, ldc, epilogue.bias);
    CUDA_CHECK(cudaGetLastError());
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
