// tests/test_access_counters.cu — the counting build's memory counters (common/access_counters.h) against answers
// derived by hand: global sectors per request for the canonical access patterns, shared-memory wavefronts (bank
// conflicts) by the hardware's rules.
//
// Three parts: the counting rules on hand-made warp addresses (every cpu tree: the arithmetic is plain code); the
// same patterns made by real kernels (the counting tree, build/cpu-counters, where every access is seen); and, in
// every other build, that nothing claims to count.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/access_counters.h"
#include "kernels/gemm.cuh"
#include "kernels/tensor_core.h"
#if defined(CUDA_TEACH_CPU)
#include "common/cpu_backend/internal.h"
#endif

using test_support::DeviceBuffer;

#if defined(CUDA_TEACH_CPU)
namespace {

// One warp instruction: lane l (of those in `lanes`) accesses base + l * stride_bytes.
AccessCounts warp_access(bool shared, unsigned size, uintptr_t base, uintptr_t stride_bytes,
                         uint32_t lanes = 0xffffffffu) {
    std::array<uintptr_t, 32> addresses{};
    for (unsigned l = 0; l < 32; ++l) addresses[l] = base + l * stride_bytes;
    AccessCounts counts;
    cpu_backend::counting::count_warp_instruction(shared, size, lanes, addresses.data(), counts);
    return counts;
}

constexpr uintptr_t kBase = 0x10000;  // 256-byte aligned, as cudaMalloc's buffers are

}  // namespace

TEST_CASE("counting rules: global sectors per request for the canonical patterns", "[counters]") {
    // 32 consecutive floats: 128 bytes, 4 sectors, all of them used.
    AccessCounts c = warp_access(false, 4, kBase, 4);
    REQUIRE(c.requests == 1);
    REQUIRE(c.transactions == 4);
    REQUIRE(c.ideal_transactions == 4);
    REQUIRE(c.bytes_requested == 128);
    // Stride 2 floats: 256 bytes spanned, 8 sectors for 4 sectors' worth of data (50 %).
    c = warp_access(false, 4, kBase, 8);
    REQUIRE(c.transactions == 8);
    REQUIRE(c.ideal_transactions == 4);
    // Stride 32 floats (a column of a row-major 32-wide matrix): every lane its own sector.
    c = warp_access(false, 4, kBase, 128);
    REQUIRE(c.transactions == 32);
    REQUIRE(c.ideal_transactions == 4);
    // Coalesced but one float off: the 128 bytes straddle 5 sectors.
    c = warp_access(false, 4, kBase + 4, 4);
    REQUIRE(c.transactions == 5);
    REQUIRE(c.ideal_transactions == 4);
    // float4, coalesced: 512 bytes, 16 sectors in one request.
    c = warp_access(false, 16, kBase, 16);
    REQUIRE(c.requests == 1);
    REQUIRE(c.transactions == 16);
    REQUIRE(c.ideal_transactions == 16);
    // One address for every lane: one sector (and ideal, since the distinct bytes fit one).
    c = warp_access(false, 4, kBase + 64, 0);
    REQUIRE(c.transactions == 1);
    REQUIRE(c.ideal_transactions == 1);
    REQUIRE(c.bytes_requested == 128);
    // Half the lanes (0-15) active, consecutive: 64 bytes, 2 sectors.
    c = warp_access(false, 4, kBase, 4, 0x0000ffffu);
    REQUIRE(c.lane_accesses == 16);
    REQUIRE(c.transactions == 2);
    // Every other lane active: the 16 floats still span 4 sectors, half of each unused.
    c = warp_access(false, 4, kBase, 4, 0x55555555u);
    REQUIRE(c.transactions == 4);
    REQUIRE(c.ideal_transactions == 2);
    // No active lane: no request at all.
    c = warp_access(false, 4, kBase, 4, 0);
    REQUIRE(c.requests == 0);
}

TEST_CASE("counting rules: shared-memory wavefronts by the bank rules", "[counters]") {
    // 32 banks of 4 bytes. Consecutive floats: one bank each, one wavefront.
    AccessCounts c = warp_access(true, 4, kBase, 4);
    REQUIRE(c.transactions == 1);
    REQUIRE(c.replays() == 0);
    // Stride 2 floats: lanes l and l + 16 share a bank with different words: 2-way conflict.
    c = warp_access(true, 4, kBase, 8);
    REQUIRE(c.transactions == 2);
    REQUIRE(c.replays() == 1);
    // Stride 32 floats (a column of an unpadded 32-wide tile): every lane in bank 0, 32 wavefronts.
    c = warp_access(true, 4, kBase, 128);
    REQUIRE(c.transactions == 32);
    REQUIRE(c.replays() == 31);
    // Stride 33 (the column of a tile padded by one float): 33 l mod 32 = l, every bank once.
    c = warp_access(true, 4, kBase, 132);
    REQUIRE(c.transactions == 1);
    // Every lane the same word: a broadcast, one wavefront.
    c = warp_access(true, 4, kBase + 8, 0);
    REQUIRE(c.transactions == 1);
    REQUIRE(c.replays() == 0);
    // Two lanes per word (stride 2 bytes, 2-byte halves): same-word accesses never conflict.
    c = warp_access(true, 2, kBase, 2);
    REQUIRE(c.transactions == 1);
    // 8-byte accesses: two half-warp phases; consecutive: 2 wavefronts, no conflict.
    c = warp_access(true, 8, kBase, 8);
    REQUIRE(c.transactions == 2);
    REQUIRE(c.ideal_transactions == 2);
    // 8-byte, stride 16 bytes: in each half-warp, lanes l and l + 8 meet in the same banks: 2 per phase.
    c = warp_access(true, 8, kBase, 16);
    REQUIRE(c.transactions == 4);
    REQUIRE(c.replays() == 2);
    // 16-byte accesses: four quarter-warp phases of 8 lanes × 16 bytes = 128 bytes; consecutive: 4, no conflict.
    c = warp_access(true, 16, kBase, 16);
    REQUIRE(c.transactions == 4);
    REQUIRE(c.replays() == 0);
    // 16-byte, stride 32 bytes: each quarter-warp spans 256 bytes, every bank twice: 8 wavefronts.
    c = warp_access(true, 16, kBase, 32);
    REQUIRE(c.transactions == 8);
    REQUIRE(c.replays() == 4);
    // float4 down a column of 20-float rows (16 floats padded by 4), lane = row: in a phase, row r starts at bank
    // 20 r mod 32 = 0, 20, 8, 28, 16, 4, 24, 12, and its 4 words fill the next 4 banks: every bank once, no conflict.
    c = warp_access(true, 16, kBase, 80);
    REQUIRE(c.transactions == 4);
    // Unpadded (16-float rows): rows r and r + 2 start at the same bank, 4 rows per bank group: 4-way in each phase.
    c = warp_access(true, 16, kBase, 64);
    REQUIRE(c.transactions == 4 * 4);
    // Only the lanes of one quarter active: one phase, one wavefront.
    c = warp_access(true, 16, kBase, 16, 0x000000ffu);
    REQUIRE(c.transactions == 1);
    // 16-byte loads whose lanes pair up on one address (n with n^1, or n with n^2) are served a half-warp at a
    // time: each half-warp broadcasting one float4 is 2 wavefronts, not 4; so is a broadcast per quarter-warp (GEMM
    // step 5's a_tile reads) and one to the whole warp. Stores, and loads that do not pair up, keep 4 phases.
    const auto sixteen_bytes = [](unsigned (*row)(unsigned), bool load) {
        std::array<uintptr_t, 32> addresses{};
        for (unsigned l = 0; l < 32; ++l) addresses[l] = kBase + 16 * row(l);
        AccessCounts counts;
        cpu_backend::counting::count_warp_instruction(true, 16, 0xffffffffu, addresses.data(), counts, load);
        return counts;
    };
    c = sixteen_bytes([](unsigned l) { return l / 16; }, true);
    REQUIRE(c.transactions == 2);
    REQUIRE(c.replays() == 0);
    REQUIRE(sixteen_bytes([](unsigned l) { return l / 8; }, true).transactions == 2);
    REQUIRE(sixteen_bytes([](unsigned) { return 0u; }, true).transactions == 2);
    REQUIRE(sixteen_bytes([](unsigned l) { return l / 2; }, true).transactions == 2);    // n and n^1: 8 rows a phase
    REQUIRE(sixteen_bytes([](unsigned l) { return l / 16; }, false).transactions == 4);  // a store
    REQUIRE(sixteen_bytes([](unsigned l) { return l % 4; }, true).transactions == 4);    // no pairs
}
#endif

#if defined(CUDA_TEACH_COUNTERS)
namespace {

// Lane `lane` loads in[lane * stride + offset] (if lane < active) and stores it to out[lane].
__global__ void load_with_stride(const float* in, float* out, int stride, int offset, int active) {
    const int lane = threadIdx.x;
    if (lane < active) out[lane] = in[lane * stride + offset];
}

__global__ void copy_float4(const float4* in, float4* out) {
    out[threadIdx.x] = in[threadIdx.x];
}

// Each lane writes then reads tile[(lane * stride) % 1056]: the same bank pattern both ways.
__global__ void shared_with_stride(float* out, int stride) {
    __shared__ float tile[32 * 33];
    const int at = (threadIdx.x * stride) % (32 * 33);
    tile[at] = float(threadIdx.x);
    __syncthreads();
    out[threadIdx.x] = tile[at];
}

// The same for 8- and 16-byte elements, lane `lane` at element lane * stride.
__global__ void shared_float2_with_stride(float* out, int stride) {
    __shared__ float2 tile[64];
    tile[threadIdx.x * stride] = make_float2(1.0f, float(threadIdx.x));
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x * stride].y;
}
__global__ void shared_float4_with_stride(float* out, int stride) {
    __shared__ float4 tile[64];
    tile[threadIdx.x * stride] = make_float4(1.0f, 2.0f, 3.0f, float(threadIdx.x));
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x * stride].w;
}

// cp.async: each lane copies 16 bytes of global memory into shared memory (lane l: bytes 16 l ..), waits, and reads
// them back with ldmatrix.x4 (lane l names row l: 16 bytes, 8 rows per matrix).
__global__ void cp_async_then_ldmatrix(const float4* in, float* out) {
    __shared__ __align__(16) float4 tile[32];
    cp_async_16(&tile[threadIdx.x], &in[threadIdx.x]);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t r[4];
    ldmatrix_x4(r, &tile[threadIdx.x]);
    out[threadIdx.x] = float(r[0] & 1u);
}

KernelAccessCounts counts_of(const std::string& kernel) {
    for (const KernelAccessCounts& k : access_counts())
        if (k.kernel == kernel) return k;
    FAIL("no counts for kernel " << kernel);
    return {};
}

}  // namespace

TEST_CASE("counting build: global loads of real kernels, sectors per request", "[counters]") {
    REQUIRE(access_counting_available());
    DeviceBuffer<float> in(32 * 32 + 8), out(32);
    struct Pattern {
        int stride, offset, active;
        uint64_t sectors, lanes;
    };
    for (const Pattern p : {Pattern{1, 0, 32, 4, 32}, Pattern{2, 0, 32, 8, 32}, Pattern{32, 0, 32, 32, 32},
                            Pattern{1, 1, 32, 5, 32}, Pattern{0, 5, 32, 1, 32}, Pattern{1, 0, 16, 2, 16},
                            Pattern{1, 0, 1, 1, 1}, Pattern{3, 0, 29, 11, 29}}) {
        INFO("stride " << p.stride << " offset " << p.offset << " active lanes " << p.active);
        reset_access_counts();
        load_with_stride<<<1, 32>>>(in.get(), out.get(), p.stride, p.offset, p.active);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        const KernelAccessCounts k = counts_of("load_with_stride");
        REQUIRE(k.launches == 1);
        REQUIRE(k.global_load.requests == 1);
        REQUIRE(k.global_load.lane_accesses == p.lanes);
        REQUIRE(k.global_load.transactions == p.sectors);
        REQUIRE(k.global_store.requests == 1);
        REQUIRE(k.global_store.transactions == (p.lanes * 4 + 31) / 32);
        REQUIRE(k.shared_load.requests == 0);
    }
    // Two warps, two blocks: a request per warp per block.
    reset_access_counts();
    load_with_stride<<<2, 64>>>(in.get(), out.get(), 0, 0, 32);  // lanes 32-63 inactive in each block
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(counts_of("load_with_stride").global_load.requests == 2);

    reset_access_counts();
    DeviceBuffer<float4> in4(32), out4(32);
    copy_float4<<<1, 32>>>(in4.get(), out4.get());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const KernelAccessCounts k = counts_of("copy_float4");
    REQUIRE(k.global_load.requests == 1);
    REQUIRE(k.global_load.transactions == 16);
    REQUIRE(k.global_store.transactions == 16);
}

TEST_CASE("counting build: shared memory bank conflicts of real kernels", "[counters]") {
    REQUIRE(access_counting_available());
    DeviceBuffer<float> out(32);
    struct Pattern {
        int stride;
        uint64_t wavefronts;
    };
    for (const Pattern p : {Pattern{1, 1}, Pattern{2, 2}, Pattern{32, 32}, Pattern{33, 1}, Pattern{0, 1},
                            Pattern{4, 4}, Pattern{16, 16}, Pattern{3, 1}}) {
        INFO("stride " << p.stride);
        reset_access_counts();
        shared_with_stride<<<1, 32>>>(out.get(), p.stride);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        const KernelAccessCounts k = counts_of("shared_with_stride");
        REQUIRE(k.shared_store.requests == 1);
        REQUIRE(k.shared_load.requests == 1);
        REQUIRE(k.shared_load.transactions == p.wavefronts);
        REQUIRE(k.shared_store.transactions == p.wavefronts);
        REQUIRE(k.global_store.transactions == 4);
    }
    for (const Pattern p : {Pattern{1, 2}, Pattern{2, 4}}) {
        INFO("float2, stride " << p.stride);
        reset_access_counts();
        shared_float2_with_stride<<<1, 32>>>(out.get(), p.stride);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        const KernelAccessCounts k = counts_of("shared_float2_with_stride");
        REQUIRE(k.shared_store.requests == 1);
        REQUIRE(k.shared_store.transactions == p.wavefronts);
    }
    for (const Pattern p : {Pattern{1, 4}, Pattern{2, 8}}) {
        INFO("float4, stride " << p.stride);
        reset_access_counts();
        shared_float4_with_stride<<<1, 32>>>(out.get(), p.stride);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        const KernelAccessCounts k = counts_of("shared_float4_with_stride");
        REQUIRE(k.shared_store.requests == 1);
        REQUIRE(k.shared_store.transactions == p.wavefronts);
    }
}

namespace {

// One GEMM step at M = N = K = 64, C = A·B (row-major, no transposes, beta = 0: C is not read), the register-blocked
// steps forced to the 64×64 tile (2 warps of 32 threads, 8×8 outputs each); the sum of its GEMM kernels' counts.
KernelAccessCounts gemm_counts(int version) {
    constexpr int n = 64;
    auto rng = test_support::rng_for_test();
    DeviceBuffer<float> a(test_support::random_floats(rng, n * n)), b(test_support::random_floats(rng, n * n)), c(n * n);
    reset_access_counts();
    const auto none = Transpose::no;
    switch (version) {
        case 4:
            gemm_register_blocked_with_tile(GemmBlockTile::t64, none, none, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f,
                                            c.get(), n, {}, nullptr);
            break;
        case 5:
            gemm_vectorized_with_tile(GemmBlockTile::t64, none, none, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f,
                                      c.get(), n, {}, nullptr);
            break;
        case 6:
            gemm_double_buffered_with_tile(GemmBlockTile::t64, none, none, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f,
                                           c.get(), n, {}, nullptr);
            break;
        default:
            gemm(gemm_version_from_int(version), none, none, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f, c.get(), n);
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    return total_access_counts();
}

struct Expected {
    uint64_t global_load_requests, global_load_sectors, global_store_requests, global_store_sectors;
    uint64_t shared_load_requests, shared_load_wavefronts, shared_store_requests, shared_store_wavefronts;
};

void require_counts(const KernelAccessCounts& got, const Expected& want) {
    CHECK(got.global_load.requests == want.global_load_requests);
    CHECK(got.global_load.transactions == want.global_load_sectors);
    CHECK(got.global_store.requests == want.global_store_requests);
    CHECK(got.global_store.transactions == want.global_store_sectors);
    CHECK(got.shared_load.requests == want.shared_load_requests);
    CHECK(got.shared_load.transactions == want.shared_load_wavefronts);
    CHECK(got.shared_store.requests == want.shared_store_requests);
    CHECK(got.shared_store.transactions == want.shared_store_wavefronts);
}

}  // namespace

// The kernels' comments, as numbers. 64 × 64 outputs, K = 64: 262,144 multiply-adds. Each figure below is derived
// from the kernel's source (which warp reads which addresses), not copied from a run.
TEST_CASE("counting build: each GEMM step's requests, sectors and wavefronts match a hand count", "[counters]") {
    REQUIRE(access_counting_available());
    SECTION("v1 naive: a warp is 32 rows of one column") {
        // 128 warps (64 columns × 2 groups of 32 rows), 64 k each: A[row][k] is 32 rows 256 bytes apart (32
        // sectors), B[k][col] one address (1 sector); C[row][col] stored 32 rows apart: 32 sectors.
        require_counts(gemm_counts(1), {128 * 64 * 2, 128 * 64 * (32 + 1), 128, 128 * 32, 0, 0, 0, 0});
    }
    SECTION("v2 coalesced: a warp is 32 columns of one row") {
        // Same requests; A[row][k] a broadcast (1 sector), B[k][col..col+31] 128 contiguous bytes (4); C: 4.
        require_counts(gemm_counts(2), {128 * 64 * 2, 128 * 64 * (1 + 4), 128, 128 * 4, 0, 0, 0, 0});
    }
    SECTION("v3 shared-memory tiles: 32x fewer global requests, 2 shared reads per multiply-add") {
        // 4 blocks × 32 warps, 2 k-steps: per warp and k-step one coalesced row of each tile (2 requests, 4 sectors
        // each) and 2 conflict-free stores; then 32 k × (a_tile[ty][k], a broadcast + b_tile[k][tx], 32 banks).
        const uint64_t warp_steps = 4 * 32 * 2;
        require_counts(gemm_counts(3), {warp_steps * 2, warp_steps * 2 * 4, 128, 128 * 4, warp_steps * 64,
                                        warp_steps * 64, warp_steps * 2, warp_steps * 2});
    }
    SECTION("v4 register blocking: 8x8 outputs per thread") {
        // 1 block, 2 warps, 8 k-steps. Per warp and k-step: 8 requests of A (4 rows × 32 bytes: 4 sectors) stored
        // at 9m + k (a 2-way conflict: 2 wavefronts), 8 of B (a coalesced row: 4 sectors, 1 wavefront). Per k:
        // 8 reads of a_tile (4 distinct words, 1 wavefront) and 8 scalar reads of b_tile[k][8tx + j] (8 words 32
        // bytes apart: a 2-way conflict). Epilogue: 64 stores per warp, each 32 floats 32 bytes apart (32 sectors).
        // (nvcc reads b_tile as 2 16-byte loads per k, as the kernel's comment says; g++ here, 8 scalar ones.)
        const uint64_t warp_steps = 2 * 8;
        require_counts(gemm_counts(4), {warp_steps * 16, warp_steps * 16 * 4, 2 * 64, 2 * 64 * 32,
                                        warp_steps * 8 * 16, warp_steps * 8 * (8 * 1 + 8 * 2), warp_steps * 16,
                                        warp_steps * (8 * 2 + 8 * 1)});
    }
    SECTION("v5 float4: a quarter of the requests, no conflicts") {
        // Per warp and k-step: 2 float4 requests of A (16 rows × 32 bytes: 16 sectors) and 2 of B (2 rows × 256
        // bytes: 16), A stored as 4 scalar transposed stores each (1 wavefront), B as 1 float4 store (4 phases of
        // 8 lanes, 1 wavefront each). Per k: 4 float4 reads: 2 of a_tile (a broadcast per quarter-warp: lanes pair
        // up, so 2 half-warp phases of 2 addresses, 2 wavefronts each) and 2 of b_tile (8 consecutive float4s per
        // quarter-warp: 4 wavefronts each). Epilogue: 16 float4 stores per warp, 4 rows × 128 bytes (16 sectors).
        const uint64_t warp_steps = 2 * 8;
        require_counts(gemm_counts(5),
                       {warp_steps * 4, warp_steps * 4 * 16, 2 * 16, 2 * 16 * 16, warp_steps * 8 * 4,
                        warp_steps * 8 * (2 * 2 + 2 * 4), warp_steps * (2 * 4 + 2), warp_steps * (8 + 2 * 4)});
    }
    SECTION("v6 double buffering: step 5's requests, one barrier per k-step") {
        const uint64_t warp_steps = 2 * 8;
        require_counts(gemm_counts(6),
                       {warp_steps * 4, warp_steps * 4 * 16, 2 * 16, 2 * 16 * 16, warp_steps * 8 * 4,
                        warp_steps * 8 * (2 * 2 + 2 * 4), warp_steps * (2 * 4 + 2), warp_steps * (8 + 2 * 4)});
    }
}

// Step 7 at its design point (the 128×128 tile: 4 warps of 64×64, 8×16 outputs per lane) against step 6 with the
// same tile (8 warps, 8×8 per thread), at M = N = K = 128: one block each, 16 k-steps, 2,097,152 multiply-adds.
TEST_CASE("counting build: warp tiling (step 7) reads shared memory 5/6 as often per multiply-add as step 6",
          "[counters]") {
    REQUIRE(access_counting_available());
    constexpr int n = 128;
    auto rng = test_support::rng_for_test();
    DeviceBuffer<float> a(test_support::random_floats(rng, n * n)), b(test_support::random_floats(rng, n * n)), c(n * n);
    const auto none = Transpose::no;
    reset_access_counts();
    gemm_warp_tiled_with_tile(GemmBlockTile::t128, none, none, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f, c.get(), n,
                              {}, nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const KernelAccessCounts v7 = total_access_counts();
    reset_access_counts();
    gemm_double_buffered_with_tile(GemmBlockTile::t128, none, none, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f,
                                   c.get(), n, {}, nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const KernelAccessCounts v6 = total_access_counts();
    // Step 7, per warp and k-step (4 warps × 16 = 64): step 6's loads with 128 threads, i.e. 2 float4s of A (16
    // rows × 32 bytes: 16 sectors each) and 2 of B (one 512-byte row: 16), stored as 2 × 4 transposed scalars (1
    // wavefront each) and 2 float4s (4 each); per k, 2 + 4 float4 reads, no conflict: the 2 of A, whose lanes
    // 4m..4m+3 share an address (they pair up), 2 wavefronts each, the 4 of B 4 each. Epilogue: 8 rows × 4 float4s per lane, 32 store instructions per
    // warp, each 8 rows × 64 contiguous bytes (16 sectors).
    const uint64_t warp_steps = 4 * 16;
    require_counts(v7, {warp_steps * 4, warp_steps * 4 * 16, 4 * 32, 4 * 32 * 16, warp_steps * 8 * 6,
                        warp_steps * 8 * (4 * 4 + 2 * 2),  // the 2 A reads: lanes pair up, 2 wavefronts each
                        warp_steps * (2 * 4 + 2), warp_steps * (8 + 2 * 4)});
    // Step 6 with the same tile: 8 warps, 4 float4 reads per k each (8 × 16 × 8 × 4 = 4096 requests).
    CHECK(v6.shared_load.requests == 8 * 16 * 8 * 4);
    CHECK(v6.shared_load.transactions == 8 * 16 * 8 * (2 * 4 + 2 * 2));  // 2 of the 4 pair up: 2 wavefronts each
    // Per multiply-add: 3/512 wavefronts (step 6), 5/1024 (step 7).
    CHECK(6 * v7.shared_load.transactions == 5 * v6.shared_load.transactions);
    CHECK(v7.shared_load.replays() == 0);
    CHECK(v7.shared_store.replays() == 0);
}

TEST_CASE("counting build: the transposed tile stores the comments call conflict-free are", "[counters]") {
    REQUIRE(access_counting_available());
    constexpr int n = 64;
    auto rng = test_support::rng_for_test();
    DeviceBuffer<float> a(test_support::random_floats(rng, n * n)), b(test_support::random_floats(rng, n * n)), c(n * n);
    for (int version : {3, 5, 6, 7}) {
        INFO("GEMM step " << version << ", A and B transposed");
        reset_access_counts();
        const auto t = Transpose::yes;
        if (version == 3)
            gemm(GemmVersion::smem_tiled, t, t, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f, c.get(), n);
        else if (version == 5)
            gemm_vectorized_with_tile(GemmBlockTile::t64, t, t, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f, c.get(),
                                      n, {}, nullptr);
        else if (version == 6)
            gemm_double_buffered_with_tile(GemmBlockTile::t64, t, t, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f,
                                           c.get(), n, {}, nullptr);
        else
            gemm_warp_tiled_with_tile(GemmBlockTile::t64, t, t, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f, c.get(), n,
                                      {}, nullptr);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        const KernelAccessCounts k = total_access_counts();
        REQUIRE(k.shared_store.requests > 0);
        CHECK(k.shared_store.replays() == 0);
        CHECK(k.shared_load.replays() == 0);
        CHECK(k.global_load.efficiency() == 1.0);  // every layout read coalesced
    }
}

TEST_CASE("counting build: cp.async and ldmatrix count as the instructions a GPU issues", "[counters]") {
    REQUIRE(access_counting_available());
    DeviceBuffer<float4> in(32);
    DeviceBuffer<float> out(32);
    reset_access_counts();
    cp_async_then_ldmatrix<<<1, 32>>>(in.get(), out.get());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const KernelAccessCounts k = counts_of("cp_async_then_ldmatrix");
    // The copy: one 16-byte global load per lane, 512 coalesced bytes (16 sectors), as Nsight Compute's
    // ..._global_op_ldgsts counts it. Its write into shared memory is the LDGSTS's own, not a shared store (STS):
    // Nsight Compute's ..._shared_op_st does not count it, and neither does this build; nor the poison the backend
    // writes until the copy lands, which is no store a GPU makes.
    CHECK(k.global_load.requests == 1);
    CHECK(k.global_load.transactions == 16);
    CHECK(k.shared_store.requests == 0);
    CHECK(k.shared_store.transactions == 0);
    // ldmatrix.x4: each lane's 16-byte row, 4 matrices of 8 contiguous rows: 4 wavefronts, no conflict.
    CHECK(k.shared_load.requests == 1);
    CHECK(k.shared_load.transactions == 4);
    CHECK(k.shared_load.replays() == 0);
}
#else
TEST_CASE("only the counting build claims to count memory transactions", "[counters]") {
    REQUIRE_FALSE(access_counting_available());
    REQUIRE(access_counts().empty());
    REQUIRE(total_access_counts().launches == 0);
}
#endif
