// tests/test_tensor_core.cu — kernels/tensor_core.h: ldmatrix (x1/x2/x4, plain and .trans) element by element
// against a plain C++ gather, mma.m16n8k16 on one tile with fragments loaded straight from the PTX layout
// formulas and through ldmatrix, a multi-tile GEMM built from them on awkward sizes, against a float64
// GEMM of the same fp16 inputs, and cp.async (two commit groups, scattered destinations) bit for bit.
//
// (Misuse — a lane that skips the mma, a warp that is not full — must stop the CPU backend with a clear
// message; those must-fail tests live with the backend's other fault tests.)
#include "tests/test_support.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/tensor_core.h"

namespace {

// ---- ldmatrix
// -----------------------------------------------------------------------------------------------------

// The source tile: 32 rows of 24 halves (48 bytes, so every 8-half row start is 16-byte aligned). Matrix m's
// row r is at tile row ldm_row(m, r), column ldm_col(m): rows deliberately scattered, as ldmatrix allows.
constexpr int kLdmRows = 32, kLdmStride = 24;
// (5x + 3) mod 32 is a permutation of 0..31.
__host__ __device__ inline int ldm_row(int m, int r) {
    return (5 * (8 * m + r) + 3) % 32;
}
__host__ __device__ inline int ldm_col(int m) {
    return 8 * (m % 3);
}

// One warp. Every lane passes the x4 address (lane 8m + r → matrix m, row r), also for x1/x2, whose upper
// lanes' addresses the instruction must ignore. out[4·lane + j] = register j.
template <int kMatrices, bool kTranspose>
__global__ void ldmatrix_kernel(const __half* in, uint32_t* out) {
    __shared__ __align__(16) __half tile[kLdmRows * kLdmStride];
    for (int i = threadIdx.x; i < kLdmRows * kLdmStride; i += blockDim.x) tile[i] = in[i];
    __syncthreads();
    const int lane = threadIdx.x % 32;
    const __half* row = &tile[ldm_row(lane / 8, lane % 8) * kLdmStride + ldm_col(lane / 8)];
    uint32_t r[kMatrices];
    if constexpr (kMatrices == 1 && !kTranspose) ldmatrix_x1(r, row);
    if constexpr (kMatrices == 2 && !kTranspose) ldmatrix_x2(r, row);
    if constexpr (kMatrices == 4 && !kTranspose) ldmatrix_x4(r, row);
    if constexpr (kMatrices == 1 && kTranspose) ldmatrix_x1_trans(r, row);
    if constexpr (kMatrices == 2 && kTranspose) ldmatrix_x2_trans(r, row);
    if constexpr (kMatrices == 4 && kTranspose) ldmatrix_x4_trans(r, row);
    for (int j = 0; j < kMatrices; ++j) out[4 * lane + j] = r[j];
}

template <int kMatrices, bool kTranspose>
void check_ldmatrix() {
    REQUIRE_DEVICE();
    INFO("ldmatrix x" << kMatrices << (kTranspose ? " .trans" : ""));
    auto rng = test_support::rng_for_test();
    std::uniform_int_distribution<int> any(0, 0xFFFF);
    std::vector<uint16_t> bits(kLdmRows * kLdmStride);
    for (auto& b : bits) b = static_cast<uint16_t>(any(rng));  // raw bit patterns: ldmatrix only moves bits
    std::vector<__half> host(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) host[i] = __ushort_as_half(bits[i]);
    test_support::DeviceBuffer<__half> in(host);
    // Poisoned: the registers an x1 or x2 load does not write must stay 0xFFFFFFFF.
    test_support::DeviceBuffer<uint32_t> out(4 * 32);
    launch(ldmatrix_kernel<kMatrices, kTranspose>, 1, 32, 0, nullptr, in.get(), out.get());
    const auto got = out.download();

    auto element = [&](int m, int row, int col) {
        return uint32_t{bits[ldm_row(m, row) * kLdmStride + ldm_col(m) + col]};
    };
    int mismatches = 0;
    for (int lane = 0; lane < 32; ++lane) {
        for (int m = 0; m < 4; ++m) {
            uint32_t want = 0xFFFFFFFFu;
            if (m < kMatrices) {
                // Row a, columns b and b+1 (transposed: column a, rows b and b+1).
                const int a = lane / 4, b = 2 * (lane % 4);
                want = kTranspose ? element(m, b, a) | element(m, b + 1, a) << 16
                                  : element(m, a, b) | element(m, a, b + 1) << 16;
            }
            if (got[4 * lane + m] != want && mismatches++ < 5)
                UNSCOPED_INFO("lane " << lane << " register " << m << ": got " << got[4 * lane + m] << ", want "
                                      << want);
        }
    }
    CHECK(mismatches == 0);
}

// ---- mma on one tile
// ----------------------------------------------------------------------------------------------

// D (16×8) = A (16×16, row-major) · B (16×8, row-major K×N) + C (16×8), one warp. The fragments come either
// straight from global memory by the PTX ISA's formulas, or from shared memory through ldmatrix (A: x4, B:
// x2.trans).
template <bool kUseLdmatrix>
__global__ void mma_tile_kernel(const __half* A, const __half* B, const float* C, float* D) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    uint32_t a[4], b[2];
    if constexpr (kUseLdmatrix) {
        __shared__ __align__(16) __half a_tile[16 * 24];  // padded rows: 48 bytes
        __shared__ __align__(16) __half b_tile[16 * 8];   // 16 bytes per row of B
        for (int i = lane; i < 256; i += 32) a_tile[(i / 16) * 24 + i % 16] = A[i];
        for (int i = lane; i < 128; i += 32) b_tile[i] = B[i];
        __syncwarp();
        // Matrices 0..3 = A's top-left, bottom-left, top-right, bottom-right 8×8 quarters → a[0..3].
        ldmatrix_x4(a, &a_tile[(lane % 16) * 24 + (lane / 16) * 8]);
        // Rows k = 0..7 and 8..15 of B, transposed: lane gets B[2t][g], B[2t+1][g] (and k + 8) — B's layout.
        ldmatrix_x2_trans(b, &b_tile[(lane % 16) * 8]);
    } else {
        for (int reg = 0; reg < 4; ++reg) {
            const int row = g + 8 * (reg % 2), col = 2 * t + 8 * (reg / 2);
            a[reg] = pack_halves(A[row * 16 + col], A[row * 16 + col + 1]);
        }
        for (int reg = 0; reg < 2; ++reg) {
            const int k = 2 * t + 8 * reg;
            b[reg] = pack_halves(B[k * 8 + g], B[(k + 1) * 8 + g]);
        }
    }
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = C[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    mma_m16n8k16_f16_f32(d, a, b, c);
    for (int i = 0; i < 4; ++i) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

// fp16 inputs in [-1, 1]: the values a kernel really sees, rounded once on the host.
std::vector<__half> random_halves(std::mt19937_64& rng, size_t count) {
    const auto values = test_support::random_floats(rng, count);
    std::vector<__half> h(count);
    for (size_t i = 0; i < count; ++i) h[i] = __float2half(values[i]);
    return h;
}

// C (M×N) = A (M×K) · B (K×N) (+ C0 if given), in float64 from the fp16 values.
std::vector<double> reference_gemm(const std::vector<__half>& A, const std::vector<__half>& B, const float* C0, int M,
                                   int N, int K) {
    std::vector<double> ref(size_t(M) * N);
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            double sum = C0 ? C0[size_t(i) * N + j] : 0.0;
            for (int k = 0; k < K; ++k)
                sum += double(__half2float(A[size_t(i) * K + k])) * __half2float(B[size_t(k) * N + j]);
            ref[size_t(i) * N + j] = sum;
        }
    }
    return ref;
}

// fp32 accumulation of K products of magnitude ≤ 1: each addition may be off by half an ulp of a partial sum
// ≤ K + 1.
double accumulation_tolerance(int K) {
    return (K + 1) * K * std::ldexp(1.0, -22);
}

template <bool kUseLdmatrix>
void check_mma_tile() {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const auto A = random_halves(rng, 16 * 16), B = random_halves(rng, 16 * 8);
    const auto C = test_support::random_floats(rng, 16 * 8);
    test_support::DeviceBuffer<__half> dA(A), dB(B);
    test_support::DeviceBuffer<float> dC(C), dD(16 * 8);
    launch(mma_tile_kernel<kUseLdmatrix>, 1, 32, 0, nullptr, dA.get(), dB.get(), dC.get(), dD.get());
    const auto ref = reference_gemm(A, B, C.data(), 16, 8, 16);
    CHECK(test_support::count_mismatches(dD.download(), ref, accumulation_tolerance(16), 1e-6, "D") == 0);
}

// ---- a GEMM from the two
// --------------------------------------------------------------------------------------------

// C (M×N, fp32) = A (M×K) · B (K×N), fp16 row-major, any sizes. A block of 4 warps computes a 32×16 tile of
// C; warp w owns the 16×8 piece at (16·(w/2), 8·(w%2)). K advances 16 at a time through shared memory,
// zero-padded past the edges, so every warp runs every mma (all 32 lanes must) and only the loads and the
// final stores check bounds.
constexpr int kGemmTileM = 32, kGemmTileN = 16, kGemmTileK = 16, kGemmPad = 8;

__global__ void tensor_core_gemm(const __half* A, const __half* B, float* C, int M, int N, int K) {
    __shared__ __align__(16) __half a_tile[kGemmTileM][kGemmTileK + kGemmPad];
    __shared__ __align__(16) __half b_tile[kGemmTileK][kGemmTileN + kGemmPad];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tile_row = blockIdx.y * kGemmTileM, tile_col = blockIdx.x * kGemmTileN;
    const int warp_row = 16 * (warp / 2), warp_col = 8 * (warp % 2);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < K; k0 += kGemmTileK) {
        for (int i = threadIdx.x; i < kGemmTileM * kGemmTileK; i += blockDim.x) {
            const int r = i / kGemmTileK, k = i % kGemmTileK;
            const bool inside = tile_row + r < M && k0 + k < K;
            a_tile[r][k] = inside ? A[size_t(tile_row + r) * K + k0 + k] : __float2half(0.0f);
        }
        for (int i = threadIdx.x; i < kGemmTileK * kGemmTileN; i += blockDim.x) {
            const int k = i / kGemmTileN, c = i % kGemmTileN;
            const bool inside = k0 + k < K && tile_col + c < N;
            b_tile[k][c] = inside ? B[size_t(k0 + k) * N + tile_col + c] : __float2half(0.0f);
        }
        __syncthreads();
        uint32_t a[4], b[2];
        ldmatrix_x4(a, &a_tile[warp_row + lane % 16][8 * (lane / 16)]);
        ldmatrix_x2_trans(b, &b_tile[lane % 16][warp_col]);
        // Accumulate in place (d may be c); then wait before the next iteration overwrites the tiles.
        mma_m16n8k16_f16_f32(acc, a, b, acc);
        __syncthreads();
    }
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
        const int r = tile_row + warp_row + g + 8 * (i / 2), c = tile_col + warp_col + 2 * t + i % 2;
        if (r < M && c < N) C[size_t(r) * N + c] = acc[i];
    }
}

void check_gemm(int M, int N, int K) {
    REQUIRE_DEVICE();
    INFO("M=" << M << " N=" << N << " K=" << K);
    auto rng = test_support::rng_for_test();
    const auto A = random_halves(rng, size_t(M) * K), B = random_halves(rng, size_t(K) * N);
    test_support::DeviceBuffer<__half> dA(A), dB(B);
    test_support::DeviceBuffer<float> dC(size_t(M) * N);
    const dim3 grid(ceil_div(N, kGemmTileN), ceil_div(M, kGemmTileM));
    launch(tensor_core_gemm, grid, 128, 0, nullptr, dA.get(), dB.get(), dC.get(), M, N, K);
    const auto ref = reference_gemm(A, B, nullptr, M, N, K);
    CHECK(test_support::count_mismatches(dC.download(), ref, accumulation_tolerance(K), 1e-6, "C") == 0);
}

// ---- cp.async
// -----------------------------------------------------------------------------------------------------

// 64 threads each copy one 16-byte chunk (8 halves) of each of two 512-half regions into shared memory, to a
// scattered chunk of the tile ((5i + 3) mod 64 is a permutation), as two commit groups. After cp_async_wait<1>
// only the first group is guaranteed to have landed, so the first region is read out then; the second after
// cp_async_wait<0>. out = the two tiles as they ended up.
constexpr int kCopyChunks = 64;
__host__ __device__ inline int copy_destination(int chunk) {
    return (5 * chunk + 3) % kCopyChunks;
}

__global__ void cp_async_kernel(const __half* in, __half* out) {
    __shared__ __align__(16) __half tile[2][kCopyChunks * 8];
    const int i = threadIdx.x;
    cp_async_16(&tile[0][8 * copy_destination(i)], in + 8 * i);
    cp_async_commit();
    cp_async_16(&tile[1][8 * copy_destination(i)], in + 8 * (kCopyChunks + i));
    cp_async_commit();
    cp_async_wait<1>();  // this thread's first group has landed (the second may still be in flight)
    __syncthreads();     // everyone's first group
    for (int e = i; e < kCopyChunks * 8; e += blockDim.x) out[e] = tile[0][e];
    cp_async_wait<0>();
    __syncthreads();
    for (int e = i; e < kCopyChunks * 8; e += blockDim.x) out[kCopyChunks * 8 + e] = tile[1][e];
}

// A software pipeline of kStages shared-memory slots: tile t is copied (cp.async, one group per tile) kStages - 1
// tiles ahead of its use; before using tile t each thread waits with cp_async_wait<kWait>, then a barrier. Each
// thread sums what its neighbour copied (so the barrier matters too). Correct: kWait = kStages - 2. kWait < 0: no
// wait at all.
template <int kStages, int kWait>
__global__ void pipelined_sum_kernel(const float4* in, float* out, int tiles) {
    __shared__ __align__(16) float4 slot[kStages][32];
    const int lane = threadIdx.x;
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < tiles) cp_async_16(&slot[s][lane], in + s * 32 + lane);
        cp_async_commit();
    }
    float sum = 0.0f;
    for (int t = 0; t < tiles; ++t) {
        if constexpr (kWait >= 0) cp_async_wait<kWait>();  // tile t's group has landed (later ones may not have)
        __syncthreads();                                   // ...everyone's
        const float4 v = slot[t % kStages][(lane + 1) % 32];
        sum += v.x + v.y + v.z + v.w;
        __syncthreads();  // the slot is read by all before it is refilled
        const int next = t + kStages - 1;
        if (next < tiles) cp_async_16(&slot[next % kStages][lane], in + next * 32 + lane);
        cp_async_commit();
    }
    out[lane] = sum;
}

// out[lane] from the pipelined kernel, and the sums it should be.
template <int kStages, int kWait>
std::pair<std::vector<float>, std::vector<float>> run_pipelined_sum(int tiles) {
    auto rng = test_support::rng_for_test();
    const std::vector<float> host = test_support::random_floats(rng, size_t(tiles) * 32 * 4);
    test_support::DeviceBuffer<float> in(host), out{size_t(32)};
    pipelined_sum_kernel<kStages, kWait><<<1, 32>>>(reinterpret_cast<const float4*>(in.get()), out.get(), tiles);
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> want(32, 0.0f);
    for (int t = 0; t < tiles; ++t) {
        for (int lane = 0; lane < 32; ++lane) {
            const float* v = &host[(size_t(t) * 32 + (lane + 1) % 32) * 4];
            want[lane] += v[0] + v[1] + v[2] + v[3];
        }
    }
    return {out.download(), want};
}

}  // namespace

TEST_CASE("tensor core: ldmatrix x1 gives each lane its piece of one 8x8 matrix", "[tensor_core][kernels]") {
    check_ldmatrix<1, false>();
}
TEST_CASE("tensor core: ldmatrix x2 gives each lane its pieces of two 8x8 matrices", "[tensor_core][kernels]") {
    check_ldmatrix<2, false>();
}
TEST_CASE("tensor core: ldmatrix x4 gives each lane its pieces of four 8x8 matrices", "[tensor_core][kernels]") {
    check_ldmatrix<4, false>();
}
TEST_CASE("tensor core: ldmatrix x1 .trans transposes the matrix", "[tensor_core][kernels]") {
    check_ldmatrix<1, true>();
}
TEST_CASE("tensor core: ldmatrix x2 .trans transposes both matrices", "[tensor_core][kernels]") {
    check_ldmatrix<2, true>();
}
TEST_CASE("tensor core: ldmatrix x4 .trans transposes all four matrices", "[tensor_core][kernels]") {
    check_ldmatrix<4, true>();
}

TEST_CASE("tensor core: mma m16n8k16 on fragments built from the PTX layout formulas", "[tensor_core][kernels]") {
    check_mma_tile<false>();
}
TEST_CASE("tensor core: mma m16n8k16 on fragments loaded with ldmatrix", "[tensor_core][kernels]") {
    check_mma_tile<true>();
}

TEST_CASE("tensor core: a GEMM of many tiles on tile multiples and on awkward sizes", "[tensor_core][kernels]") {
    check_gemm(16, 8, 16);   // one tile: three of the block's four warps compute only padding
    check_gemm(64, 32, 48);  // exact multiples, several blocks, three K steps
    check_gemm(37, 19, 40);  // nothing divides: partial tiles in M, N and K
    check_gemm(1, 1, 1);
}

TEST_CASE("tensor core: cp.async copies 16-byte chunks to shared memory in commit groups", "[tensor_core][kernels]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    std::uniform_int_distribution<int> any(0, 0xFFFF);
    std::vector<uint16_t> bits(2 * kCopyChunks * 8);
    for (auto& b : bits) b = static_cast<uint16_t>(any(rng));  // raw bit patterns: a copy only moves bits
    std::vector<__half> host(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) host[i] = __ushort_as_half(bits[i]);
    test_support::DeviceBuffer<__half> in(host), out(host.size());  // out poisoned
    launch(cp_async_kernel, 1, kCopyChunks, 0, nullptr, in.get(), out.get());
    const auto got = out.download();
    int mismatches = 0;
    for (int region = 0; region < 2; ++region) {
        for (int chunk = 0; chunk < kCopyChunks; ++chunk) {
            for (int e = 0; e < 8; ++e) {
                const size_t from = (region * kCopyChunks + chunk) * 8 + e;
                const size_t to = (region * kCopyChunks + copy_destination(chunk)) * 8 + e;
                if (__half_as_ushort(got[to]) != bits[from] && mismatches++ < 5)
                    UNSCOPED_INFO("region " << region << " chunk " << chunk << " half " << e << ": got "
                                            << __half_as_ushort(got[to]) << ", want " << bits[from]);
            }
        }
    }
    CHECK(mismatches == 0);
}

TEST_CASE("tensor core: 2- and 3-stage cp.async pipelines that wait for each tile sum it exactly",
          "[tensor_core][kernels]") {
    REQUIRE_DEVICE();
    for (int tiles : {1, 2, 7}) {
        const auto [got2, want2] = run_pipelined_sum<2, 0>(tiles);
        const auto [got3, want3] = run_pipelined_sum<3, 1>(tiles);
        for (int lane = 0; lane < 32; ++lane) {
            INFO("tiles " << tiles << ", lane " << lane);
            REQUIRE(got2[lane] == want2[lane]);  // the same additions in the same order: bitwise
            REQUIRE(got3[lane] == want3[lane]);
        }
    }
}

#if defined(CUDA_TEACH_CPU)
// On a GPU these read a tile whose copy may not have landed: stale data some of the time. The CPU backend lands a
// copy only at the wait that retires its group, so they read NaN every time.
TEST_CASE("must fail: a double buffer that waits with cp_async_wait<1> reads a tile still in flight",
          "[tensor_core][must-fail]") {
    const auto [got, want] = run_pipelined_sum<2, 1>(5);
    for (int lane = 0; lane < 32; ++lane) REQUIRE(std::isnan(got[lane]));
}
TEST_CASE("must fail: a cp.async pipeline without cp_async_wait reads tiles that never landed",
          "[tensor_core][must-fail]") {
    const auto [got, want] = run_pipelined_sum<3, -1>(5);
    for (int lane = 0; lane < 32; ++lane) REQUIRE(std::isnan(got[lane]));
}
#endif
