// kernels/gemm_register_blocked.cuh — GEMM version 4: version 3 plus 2D register blocking, 16-byte loads, double
// buffering and a fused bias + ReLU epilogue.
//
// computes: C = act(alpha·op(A)·op(B) + beta·C + bias)   (contract in kernels/gemm_common.cuh)
// idea:     in version 3 every multiply-add needs two shared-memory reads, and shared memory, not arithmetic, is
//           the limit. Here each thread computes an 8×8 block of outputs held in 64 registers: per step of k it
//           reads 8 values of op(A) and 8 of op(B) (four float4 reads) and does 64 multiply-adds with them, an 8×
//           better ratio. Around that core:
//           * the block tile is BM×BN = 128×128 (64×64 when the output is too small to fill the GPU), BK = 8;
//           * the op(A) tile is stored k-major (a_s[k][m]) so a thread's 8 values of a column are two float4s;
//           * a thread's 8 rows are two groups of 4, BM/2 apart (likewise columns), so the float4 reads of a warp
//             from shared memory hit distinct banks, and a warp's 32 threads form a 4×8 patch that needs only 12
//             distinct float4s per step;
//           * global loads are 16-byte float4 loads when the leading dimensions and pointers allow (kVec);
//             otherwise, and at every matrix edge, one element at a time with bounds checks (zero fill), so any
//             M, N, K, lda, ldb, ldc works;
//           * double buffering: the next tiles are fetched into registers while this tile is multiplied, then
//             written to the other shared-memory buffer, so one __syncthreads per k-step suffices;
//           * the epilogue adds beta·C, the bias and applies ReLU before the single store of each output, so a
//             layer's forward pass writes its activation once.
// launch:   BM·BN/64 threads (256 for 128×128, 64 for 64×64); grid (ceil(N / BN), ceil(M / BM)), the M tiles spread
//           over grid y and z (gemm_grid); 2·BK·(BM+BN+8)·4 bytes of static shared memory (16.5 KiB for 128×128).
#pragma once

#include "kernels/gemm_common.cuh"

inline constexpr int kRegisterGemmBK = 8;  // k-depth of one shared-memory tile
inline constexpr int kRegisterGemmTM = 8;  // outputs per thread, rows
inline constexpr int kRegisterGemmTN = 8;  // outputs per thread, columns

// Loads 4 consecutive elements base[0..3] of a row whose first `valid` elements (≤ 4) are in bounds, zero-filling
// the rest; one float4 load when all 4 are valid and kVec says the address is 16-byte aligned.
template <bool kVec>
__device__ __forceinline__ float4 gemm_load4(const float* base, int valid) {
    if (kVec && valid >= 4) return *reinterpret_cast<const float4*>(base);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (valid > 0) v.x = base[0];
    if (valid > 1) v.y = base[1];
    if (valid > 2) v.z = base[2];
    if (valid > 3) v.w = base[3];
    return v;
}

// One operand tile of BK × BMN elements (BMN = BM for A, BN for B), staged from global memory through registers
// into shared memory laid out k-major: smem[k][mn] (row pitch BMN + 4).
//   kKContiguous: the operand is stored with k contiguous (A not transposed, or B transposed): each float4 holds
//                 4 consecutive k of one mn and is written transposed (4 scalar stores).
//   otherwise:    mn is contiguous (A transposed, or B not transposed): each float4 is 4 consecutive mn of one k
//                 and is written as one float4.
// The +4 padding keeps float4 alignment and spreads the transposed stores of a warp over all 32 banks.
template <int BMN, int kThreads, bool kKContiguous, bool kVec>
struct GemmTileLoader {
    static constexpr int BK = kRegisterGemmBK;
    static constexpr int kPitch = BMN + 4;
    static constexpr int kLoads = BMN * BK / 4 / kThreads;  // float4s per thread per tile
    static_assert(kLoads * 4 * kThreads == BMN * BK, "tile must split evenly into float4s over the threads");

    float4 regs[kLoads];

    // Reads the tile whose top-left element (in the op() coordinates) is (mn0, k0) into registers.
    __device__ __forceinline__ void fetch(const float* X, int ld, int mn0, int k0, int MN, int K, int tid) {
#pragma unroll
        for (int l = 0; l < kLoads; ++l) {
            const int idx = tid + l * kThreads;
            if (kKContiguous) {
                const int mn = mn0 + idx / (BK / 4), k = k0 + (idx % (BK / 4)) * 4;
                const int valid = mn < MN ? min(K - k, 4) : 0;
                regs[l] = gemm_load4<kVec>(X + static_cast<size_t>(mn) * ld + k, valid);
            } else {
                const int k = k0 + idx / (BMN / 4), mn = mn0 + (idx % (BMN / 4)) * 4;
                const int valid = k < K ? min(MN - mn, 4) : 0;
                regs[l] = gemm_load4<kVec>(X + static_cast<size_t>(k) * ld + mn, valid);
            }
        }
    }

    __device__ __forceinline__ void store(float* smem, int tid) const {
#pragma unroll
        for (int l = 0; l < kLoads; ++l) {
            const int idx = tid + l * kThreads;
            if (kKContiguous) {
                const int mn = idx / (BK / 4), k = (idx % (BK / 4)) * 4;
                smem[(k + 0) * kPitch + mn] = regs[l].x;
                smem[(k + 1) * kPitch + mn] = regs[l].y;
                smem[(k + 2) * kPitch + mn] = regs[l].z;
                smem[(k + 3) * kPitch + mn] = regs[l].w;
            } else {
                const int k = idx / (BMN / 4), mn = (idx % (BMN / 4)) * 4;
                *reinterpret_cast<float4*>(smem + k * kPitch + mn) = regs[l];
            }
        }
    }
};

template <int BM, int BN, bool kTransA, bool kTransB, bool kVec>
__global__ void __launch_bounds__(BM* BN / 64)
    gemm_register_blocked_kernel(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                                 float beta, float* C, int ldc, const float* bias, bool relu) {
    constexpr int BK = kRegisterGemmBK, TM = kRegisterGemmTM, TN = kRegisterGemmTN;
    constexpr int kThreads = (BM / TM) * (BN / TN);
    constexpr int kWarpsN = (BN / TN) / 8;  // a warp is a 4 (rows) × 8 (columns) patch of threads
    static_assert((BM / TM) % 4 == 0 && (BN / TN) % 8 == 0, "tile must split into 4×8-thread warps");

    using LoaderA = GemmTileLoader<BM, kThreads, !kTransA, kVec>;
    using LoaderB = GemmTileLoader<BN, kThreads, kTransB, kVec>;
    __shared__ __align__(16) float a_s[2][BK * LoaderA::kPitch];  // a_s[buf][k * pitch + m]
    __shared__ __align__(16) float b_s[2][BK * LoaderB::kPitch];  // b_s[buf][k * pitch + n]

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int ty = (warp / kWarpsN) * 4 + lane / 8;  // this thread's rows: 4ty..4ty+3 and BM/2 + 4ty..+3
    const int tx = (warp % kWarpsN) * 8 + lane % 8;  // this thread's columns: 4tx..4tx+3 and BN/2 + 4tx..+3
    const int row0 = gemm_tile_y() * BM, col0 = blockIdx.x * BN;

    LoaderA load_a;
    LoaderB load_b;
    float acc[TM][TN] = {};

    // Prologue: the first tiles go straight into buffer 0.
    load_a.fetch(A, lda, row0, 0, M, K, tid);
    load_b.fetch(B, ldb, col0, 0, N, K, tid);
    load_a.store(a_s[0], tid);
    load_b.store(b_s[0], tid);
    __syncthreads();

    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) {  // start the global loads for the next tile now; their latency hides behind the math
            load_a.fetch(A, lda, row0, k0 + BK, M, K, tid);
            load_b.fetch(B, ldb, col0, k0 + BK, N, K, tid);
        }

        const float* a_tile = a_s[buf];
        const float* b_tile = b_s[buf];
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a_lo = *reinterpret_cast<const float4*>(a_tile + k * LoaderA::kPitch + 4 * ty);
            const float4 a_hi = *reinterpret_cast<const float4*>(a_tile + k * LoaderA::kPitch + BM / 2 + 4 * ty);
            const float4 b_lo = *reinterpret_cast<const float4*>(b_tile + k * LoaderB::kPitch + 4 * tx);
            const float4 b_hi = *reinterpret_cast<const float4*>(b_tile + k * LoaderB::kPitch + BN / 2 + 4 * tx);
            const float a[TM] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
            const float b[TN] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }

        if (has_next) {
            // The other buffer was last read in the previous iteration, and every thread has passed the barrier
            // at the end of it, so it is free to overwrite.
            load_a.store(a_s[buf ^ 1], tid);
            load_b.store(b_s[buf ^ 1], tid);
        }
        __syncthreads();  // the next tile is complete (and this one no longer needed) before anyone moves on
        buf ^= 1;
    }

    // Epilogue: each output is finished in registers (alpha, beta·C, bias, ReLU) and stored once.
    const bool vec_c = kVec;  // kVec also guarantees C and ldc allow float4 stores (see the launcher)
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + (i < 4 ? 4 * ty + i : BM / 2 + 4 * ty + (i - 4));
        if (row >= M) continue;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int col = col0 + (half == 0 ? 4 * tx : BN / 2 + 4 * tx);
            float* c = C + static_cast<size_t>(row) * ldc + col;
            float out[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) out[j] = acc[i][half * 4 + j];
            if (vec_c && col + 3 < N) {
                float4 old = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (beta != 0.0f) old = *reinterpret_cast<const float4*>(c);
                const float old_v[4] = {old.x, old.y, old.z, old.w};
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    out[j] = gemm_epilogue_value(out[j], alpha, beta, &old_v[j], bias, relu, col + j);
                *reinterpret_cast<float4*>(c) = make_float4(out[0], out[1], out[2], out[3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (col + j < N) c[j] = gemm_epilogue_value(out[j], alpha, beta, c + j, bias, relu, col + j);
                }
            }
        }
    }
}

// Which block tile gemm_register_blocked_with_tile runs; GemmTile::automatic is what gemm_register_blocked does.
enum class GemmTile { automatic, t64, t128 };

// 128×128 tiles leave most of a large GPU idle when the output is small (batch 128 × 1024 is 8 tiles); 64×64 tiles
// give 4× as many blocks.
inline GemmTile gemm_register_blocked_tile_for(int M, int N) {
    const bool small = static_cast<long long>(ceil_div(M, 128)) * ceil_div(N, 128) < 128;
    return small ? GemmTile::t64 : GemmTile::t128;
}

// Picks the vectorized or element-wise variant and runs it with the given block tile. Both tiles sum each output's
// k-terms in the same order (one fmaf per k, k ascending, BK = 8 either way), so the result is the same bit for bit
// whichever runs; tests/test_kernels_gemm.cu forces each to check that.
inline void gemm_register_blocked_with_tile(GemmTile tile, Transpose op_a, Transpose op_b, int M, int N, int K,
                                            float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                                            float* C, int ldc, GemmEpilogue epilogue, cudaStream_t stream) {
    if (!gemm_check_arguments("gemm_register_blocked", op_a, op_b, M, N, K, A, lda, B, ldb, C, ldc)) return;
    // float4 access needs every row start 16-byte aligned: aligned base pointers and leading dimensions that are
    // multiples of 4 floats. (cudaMalloc returns 256-byte aligned memory; an offset view may not be.)
    const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const bool vec = lda % 4 == 0 && ldb % 4 == 0 && ldc % 4 == 0 && aligned16(A) && aligned16(B) && aligned16(C);
    if (tile == GemmTile::automatic) tile = gemm_register_blocked_tile_for(M, N);
    gemm_dispatch_transposes(op_a, op_b, [&](auto trans_a, auto trans_b) {
        constexpr bool ta = decltype(trans_a)::value, tb = decltype(trans_b)::value;
        const auto run = [&](auto kernel, int bm, int bn) {
            const dim3 grid = gemm_grid(ceil_div(N, bn), ceil_div(M, bm));
            launch(kernel, grid, dim3(bm * bn / 64), 0, stream, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                   epilogue.bias, epilogue.relu);
        };
        if (tile == GemmTile::t64) {
            vec ? run(gemm_register_blocked_kernel<64, 64, ta, tb, true>, 64, 64)
                : run(gemm_register_blocked_kernel<64, 64, ta, tb, false>, 64, 64);
        } else {
            vec ? run(gemm_register_blocked_kernel<128, 128, ta, tb, true>, 128, 128)
                : run(gemm_register_blocked_kernel<128, 128, ta, tb, false>, 128, 128);
        }
    });
}

// The version-4 launcher (the GemmLauncher signature): the tile size chosen from the output's size.
inline void gemm_register_blocked(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A,
                                  int lda, const float* B, int ldb, float beta, float* C, int ldc,
                                  GemmEpilogue epilogue, cudaStream_t stream) {
    gemm_register_blocked_with_tile(GemmTile::automatic, op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                                    epilogue, stream);
}
