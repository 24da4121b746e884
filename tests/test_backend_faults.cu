// tests/test_backend_faults.cu — must-fail tests: kernel bugs the CPU backend has to expose, not hide.
// A missing barrier must give wrong results; a divergent barrier, an early exit before a barrier and a warp
// collective that can never complete must abort with the kernel's line; an out-of-bounds write must be caught
// by the sanitizer build. These are properties of the CPU backend, so most run in the cpu flavor only.
#include <csignal>

#include "common/tensor_core.h"
#include "tests/test_support.h"

using test_support::DeviceBuffer;

namespace {

constexpr int kTile = 16;

// C = A·B for n×n matrices with shared-memory tiles (n a multiple of kTile, to keep the test about barriers).
// `second_barrier` false drops the barrier that stops fast threads overwriting a tile others still read.
template <bool second_barrier>
__global__ void tiled_matmul(const float* a, const float* b, float* c, int n) {
    __shared__ float a_tile[kTile][kTile];
    __shared__ float b_tile[kTile][kTile];
    const int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
    float sum = 0.0f;
    for (int k0 = 0; k0 < n; k0 += kTile) {
        a_tile[threadIdx.y][threadIdx.x] = a[row * n + k0 + threadIdx.x];
        b_tile[threadIdx.y][threadIdx.x] = b[(k0 + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < kTile; ++k) sum += a_tile[threadIdx.y][k] * b_tile[k][threadIdx.x];
        if constexpr (second_barrier) __syncthreads();
    }
    c[row * n + col] = sum;
}

size_t matmul_mismatches(bool second_barrier) {
    const int n = 64;
    auto rng = test_support::rng_for_test();
    const std::vector<float> a = test_support::random_floats(rng, n * n), b = test_support::random_floats(rng, n * n);
    std::vector<double> expected(n * n, 0.0);
    for (int i = 0; i < n; ++i)
        for (int k = 0; k < n; ++k)
            for (int j = 0; j < n; ++j) expected[i * n + j] += double(a[i * n + k]) * b[k * n + j];
    DeviceBuffer<float> da(a), db(b), dc(n * n);
    const dim3 grid(n / kTile, n / kTile), block(kTile, kTile);
    if (second_barrier) {
        launch(tiled_matmul<true>, grid, block, 0, 0, da.get(), db.get(), dc.get(), n);
    } else {
        launch(tiled_matmul<false>, grid, block, 0, 0, da.get(), db.get(), dc.get(), n);
    }
    return test_support::count_mismatches(dc.download(), expected, 1e-5, n * 1e-6, "C");
}

// Thread 0 loads a value into shared memory for its block; without the barrier the others may read it too early
// (or read the previous block's value).
template <bool barrier>
__global__ void broadcast_from_thread_zero(const float* in, float* out) {
    __shared__ float value;
    if (threadIdx.x == 0) value = in[blockIdx.x];
    if constexpr (barrier) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = value;
}

template <bool barrier>
size_t broadcast_mismatches() {
    const int blocks = 16, threads = 64;
    auto rng = test_support::rng_for_test();
    const std::vector<float> in = test_support::random_floats(rng, blocks);
    DeviceBuffer<float> d_in(in), d_out(blocks * threads);
    launch(broadcast_from_thread_zero<barrier>, blocks, threads, 0, 0, d_in.get(), d_out.get());
    const std::vector<float> out = d_out.download();
    size_t wrong = 0;
    for (int i = 0; i < blocks * threads; ++i) wrong += out[i] != in[i / threads];
    return wrong;
}

#if defined(CUDA_TEACH_CPU)
__global__ void barrier_in_branch(float* out) {
    if (threadIdx.x % 2 == 0) __syncthreads();  // only even threads: a bug on a GPU too
    out[threadIdx.x] = 1.0f;
}

__global__ void barrier_after_thread_zero_skips(float* out) {
    if (threadIdx.x > 0) __syncthreads();  // thread 0 finishes first, barrier-free: the fast path is chosen
    out[threadIdx.x] = 1.0f;
}

__global__ void early_return_before_barrier(float* out, int n) {
    if (int(threadIdx.x) >= n) return;  // the classic bug: threads past the end leave, the rest wait forever
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

__global__ void two_barrier_sites(float* out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}

__global__ void shuffle_while_lane_waits_at_barrier(float* out) {
    float v = float(threadIdx.x);
    if (threadIdx.x != 5) {
        v = __shfl_down_sync(0xffffffffu, v, 1);  // lane 5 never comes: it waits at the barrier below
    }
    __syncthreads();
    out[threadIdx.x] = v;
}

__global__ void mma_with_a_lane_missing(float* out) {
    const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    const float c[4] = {0, 0, 0, 0};
    float d[4];
    if (threadIdx.x == 3) return;  // lane 3 skips the warp-wide instruction
    mma_m16n8k16_f16_f32(d, a, b, c);
    out[threadIdx.x] = d[0];
}

float* fault_buffer() {
    float* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, 64 * sizeof(float)));
    return p;
}

void expect_kernel_fault(void (*body)(), const std::string& message_part, const std::string& line_part) {
    const test_support::ChildResult child = test_support::run_in_child(body);
    INFO("child output:\n" << child.output);
    REQUIRE_FALSE(child.exited_normally);
    REQUIRE(child.signal == SIGABRT);
    REQUIRE(child.output.find("CPU backend: kernel fault") != std::string::npos);
    REQUIRE(child.output.find(message_part) != std::string::npos);
    REQUIRE(child.output.find(line_part) != std::string::npos);
}
#endif

}  // namespace

TEST_CASE("a tiled GEMM with both barriers is right under schedule fuzzing", "[backend][fuzz]") {
    REQUIRE_DEVICE();
#if defined(CUDA_TEACH_CPU)
    for (const uint64_t seed : {1u, 2u, 3u}) {
        cpu_backend::set_schedule_fuzzing(true, seed);
        REQUIRE(matmul_mismatches(true) == 0);
    }
    cpu_backend::set_schedule_fuzzing(false);
#endif
    REQUIRE(matmul_mismatches(true) == 0);
}

// CPU backend only: on a GPU a race or a barrier not all threads reach is undefined (a hang, or any result).
#if defined(CUDA_TEACH_CPU)
TEST_CASE("must fail: a GEMM missing its second __syncthreads gives wrong results", "[backend][fuzz][must-fail]") {
    // Deterministic order already breaks it (the first thread runs ahead and overwrites the tile) ...
    REQUIRE(matmul_mismatches(false) > 0);
    // ... and so does every fuzzed order.
    for (const uint64_t seed : {1u, 2u, 3u}) {
        cpu_backend::set_schedule_fuzzing(true, seed);
        REQUIRE(matmul_mismatches(false) > 0);
    }
    cpu_backend::set_schedule_fuzzing(false);
}

TEST_CASE("must fail: a broadcast from thread 0 without its barrier is wrong under fuzzing",
          "[backend][fuzz][must-fail]") {
    for (const uint64_t seed : {1u, 2u, 3u}) {
        cpu_backend::set_schedule_fuzzing(true, seed);
        CHECK(broadcast_mismatches<false>() > 0);
        CHECK(broadcast_mismatches<true>() == 0);
    }
    cpu_backend::set_schedule_fuzzing(false);
}

TEST_CASE("must fail: a barrier reached by only some threads aborts", "[backend][must-fail]") {
    cpu_backend::set_schedule_fuzzing(false);  // the second case is about the fast path, which fuzzing turns off
    expect_kernel_fault([] { launch(barrier_in_branch, 1, 64, 0, 0, fault_buffer()); }, "exited while thread",
                        "barrier_in_branch");
    expect_kernel_fault([] { launch(barrier_after_thread_zero_skips, 1, 64, 0, 0, fault_buffer()); },
                        "divergent barrier", "barrier_after_thread_zero_skips");
}

TEST_CASE("must fail: an early return before a barrier aborts", "[backend][must-fail]") {
    expect_kernel_fault([] { launch(early_return_before_barrier, 1, 64, 0, 0, fault_buffer(), 40); },
                        "every thread of a block must reach each barrier", "early_return_before_barrier");
}

TEST_CASE("must fail: different __syncthreads call sites in one block abort", "[backend][must-fail]") {
    expect_kernel_fault([] { launch(two_barrier_sites, 1, 32, 0, 0, fault_buffer()); }, "different __syncthreads",
                        "two_barrier_sites");
}

TEST_CASE("must fail: a warp collective whose mask can never complete aborts", "[backend][must-fail]") {
    expect_kernel_fault([] { launch(shuffle_while_lane_waits_at_barrier, 1, 32, 0, 0, fault_buffer()); },
                        "can never complete", "lane 5");
}

TEST_CASE("must fail: an mma.sync that a lane skips aborts", "[backend][must-fail][tensor-core]") {
    expect_kernel_fault([] { launch(mma_with_a_lane_missing, 1, 32, 0, 0, fault_buffer()); }, "all 32 lanes",
                        "0xfffffff7");  // every lane but lane 3
}

#if defined(__SANITIZE_ADDRESS__)
namespace {
__global__ void write_one_past_the_end(float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;  // `<=`: the off-by-one this test is about
}
constexpr int kOutOfBoundsLine = __LINE__ - 2;
}  // namespace

TEST_CASE("must fail: an out-of-bounds write in a kernel is caught by AddressSanitizer", "[backend][must-fail]") {
    const test_support::ChildResult child = test_support::run_in_child([] {
        float* p = nullptr;
        CUDA_CHECK(cudaMalloc(&p, 100 * sizeof(float)));
        launch(write_one_past_the_end, 1, 128, 0, 0, p, 100);
    });
    INFO("child output:\n" << child.output);
    REQUIRE_FALSE(child.exit_code == 0);
    REQUIRE(child.output.find("heap-buffer-overflow") != std::string::npos);
    const std::string kernel_line = "test_backend_faults.cu:" + std::to_string(kOutOfBoundsLine);
    REQUIRE(child.output.find(kernel_line) != std::string::npos);  // reported at the kernel's source line
}
#endif
#endif
