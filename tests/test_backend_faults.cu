// tests/test_backend_faults.cu — must-fail tests: kernel bugs the CPU backend has to expose, not hide.
// A missing barrier must give wrong results; a divergent barrier, an early exit before a barrier and a warp
// collective that can never complete must abort with the kernel's line; an out-of-bounds write must be caught
// by the sanitizer build. These are properties of the CPU backend, so most run in the cpu flavor only.
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/tensor_core.h"
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
#if defined(__SANITIZE_THREAD__)
constexpr int kGemmTileReadLine = __LINE__ - 6;  // the read of the tiles, which the missing barrier races with
#endif

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

#if !defined(__SANITIZE_THREAD__)
__global__ void barrier_after_thread_zero_skips(float* out) {
    if (threadIdx.x > 0) __syncthreads();  // thread 0 finishes first, barrier-free: the fast path is chosen
    out[threadIdx.x] = 1.0f;
}

// Thread 0 exits (the fast path is taken), then lanes of warp 0 meet at two different collectives: lane 5 at a
// ballot, the others at a __syncwarp. Both name lane 5 and the others, which are live: neither can complete.
__global__ void collectives_disagree_after_thread_zero_exits(float* out) {
    if (threadIdx.x == 0) return;
    if (threadIdx.x % 32 == 5)
        out[threadIdx.x] = float(__ballot_sync(0xffffffff, 1));
    else
        __syncwarp();
}
#endif

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

// Lanes 16-31 return; lanes 0-15 add the value 8 lanes down. Lanes 0-7 read live lanes 8-15 (legal and right);
// lanes 8-15 read lanes 16-23, which have exited: the instruction is legal, the value unpredictable (PTX ISA,
// shfl.sync), and using it, as here, is the bug. `guarded` discards it, as correct code does.
template <bool guarded>
__global__ void shuffle_from_exited_lanes(float* out) {
    if (threadIdx.x >= 16) return;
    float v = float(threadIdx.x);
    const float other = __shfl_down_sync(0xffffffffu, v, 8);
    if (!guarded || threadIdx.x + 8 < 16) v += other;
    out[threadIdx.x] = v;
}

__global__ void lanes_at_different_collectives(float* out) {
    if (threadIdx.x < 16) {
        __syncwarp();  // the lower half here, the upper half at a ballot: neither can complete
    } else {
        out[threadIdx.x] = float(__ballot_sync(0xffffffffu, 1));
    }
}

// Each thread starts a cp.async of its 16 bytes, then (`early`) overwrites them before its wait retires the group:
// on a GPU the copy may read them at any time until that wait. Writing them after the wait is correct.
template <bool early>
__global__ void cp_async_source_written(float* data, float* out) {
    __shared__ __align__(16) float tile[32 * 4];
    float* mine = data + 4 * threadIdx.x;
    cp_async_16(&tile[4 * threadIdx.x], mine);
    cp_async_commit();
    if constexpr (early) mine[1] = -1.0f;  // the bug: the copy may not have read it yet
    cp_async_wait<0>();
    if constexpr (!early) mine[1] = -1.0f;
    __syncthreads();
    out[threadIdx.x] = tile[(4 * threadIdx.x + 5) % (32 * 4)];
}
constexpr int kEarlySourceWriteLine = __LINE__ - 8;  // the cp_async_16

float* fault_buffer() {
    float* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, 64 * sizeof(float)));
    return p;
}

// The backend must stop the child with abort() and a message holding every one of `parts`.
void expect_abort(void (*body)(), std::initializer_list<std::string> parts) {
    const test_support::ChildResult child = test_support::run_in_child(body);
    INFO("child output:\n" << child.output);
    REQUIRE_FALSE(child.exited_normally);
    REQUIRE(child.signal == SIGABRT);
    for (const std::string& part : parts) REQUIRE(child.output.find(part) != std::string::npos);
}

void expect_kernel_fault(void (*body)(), const std::string& message_part, const std::string& line_part) {
    expect_abort(body, {"CPU backend: kernel fault", message_part, line_part});
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

// CPU backend only: on a GPU a race or a barrier not all threads reach is undefined (a hang, or any result). The race
// build reports these as races (below).
#if defined(CUDA_TEACH_CPU) && !defined(__SANITIZE_THREAD__)
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
#endif

#if defined(CUDA_TEACH_CPU)
TEST_CASE("must fail: a barrier reached by only some threads aborts", "[backend][must-fail]") {
    cpu_backend::set_schedule_fuzzing(false);  // the second case is about the fast path, which fuzzing turns off
    expect_kernel_fault([] { launch(barrier_in_branch, 1, 64, 0, 0, fault_buffer()); },
                        "without reaching the __syncthreads", "barrier_in_branch");
#if !defined(__SANITIZE_THREAD__)  // the race build has no fast path: this is then the case above
    // The plain call that reaches the barrier becomes a fiber thread; thread 0 has finished without reaching it.
    expect_kernel_fault([] { launch(barrier_after_thread_zero_skips, 1, 64, 0, 0, fault_buffer()); },
                        "thread (0,0,0) finished the kernel without reaching the __syncthreads",
                        "barrier_after_thread_zero_skips");
#endif
}

#if !defined(__SANITIZE_THREAD__)
TEST_CASE("must fail: after thread 0 exits, live lanes at different warp collectives abort", "[backend][must-fail]") {
    cpu_backend::set_schedule_fuzzing(false);  // the fast path: thread 0 exits first, the rest start as plain calls
    expect_kernel_fault([] { launch(collectives_disagree_after_thread_zero_exits, 1, 64, 0, 0, fault_buffer()); },
                        "can never complete", "collectives_disagree_after_thread_zero_exits");
}
#endif

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

TEST_CASE("must fail: a shuffle's value read from an exited lane is NaN, and using it shows", "[backend][must-fail]") {
    for (const bool fuzz : {false, true}) {
        cpu_backend::set_schedule_fuzzing(fuzz, 3);
        DeviceBuffer<float> used(32), discarded(32);
        launch(shuffle_from_exited_lanes<false>, 1, 32, 0, 0, used.get());
        launch(shuffle_from_exited_lanes<true>, 1, 32, 0, 0, discarded.get());
        const std::vector<float> got = used.download(), right = discarded.download();
        for (int lane = 0; lane < 16; ++lane) {
            INFO("lane " << lane << (fuzz ? ", fuzzed" : ""));
            CHECK(right[lane] == float(lane < 8 ? 2 * lane + 8 : lane));  // the guarded kernel: correct, no fault
            if (lane < 8) {
                CHECK(got[lane] == float(2 * lane + 8));  // read from live lanes 8-15
            } else {
                CHECK(std::isnan(got[lane]));  // read from exited lanes 16-23: poison, not a plausible number
            }
        }
    }
    cpu_backend::set_schedule_fuzzing(false);
}

TEST_CASE("must fail: a warp whose lanes wait at different collectives aborts", "[backend][must-fail]") {
    expect_kernel_fault([] { launch(lanes_at_different_collectives, 1, 32, 0, 0, fault_buffer()); },
                        "can never complete", "is waiting at a warp collective at");
}

TEST_CASE("must fail: a cp.async source written before the wait that retires its copy aborts",
          "[backend][must-fail][tensor-core]") {
    expect_kernel_fault(
        [] {
            float* data = nullptr;  // 32 threads × 16 bytes (fault_buffer's 256 bytes are half of it)
            CUDA_CHECK(cudaMalloc(&data, 32 * 4 * sizeof(float)));
            launch(cp_async_source_written<true>, 1, 32, 0, 0, data, fault_buffer());
        },
        "was written after the copy was issued and before cp_async_wait retired its group",
        "test_backend_faults.cu:" + std::to_string(kEarlySourceWriteLine));
    std::vector<float> values(32 * 4);
    for (size_t i = 0; i < values.size(); ++i) values[i] = float(i);
    DeviceBuffer<float> data(values), out(32);
    launch(cp_async_source_written<false>, 1, 32, 0, 0, data.get(), out.get());  // written after the wait: fine
    const std::vector<float> got = out.download();
    for (int t = 0; t < 32; ++t) CHECK(got[t] == float((4 * t + 5) % (32 * 4)));
}

TEST_CASE("must fail: an mma.sync that a lane skips aborts", "[backend][must-fail][tensor-core]") {
    expect_kernel_fault([] { launch(mma_with_a_lane_missing, 1, 32, 0, 0, fault_buffer()); }, "all 32 lanes",
                        "0xfffffff7");  // every lane but lane 3
}

// --- static shared memory: filled for every block, and counted in the launch limit ------------------------------
namespace {
__global__ void read_what_block_zero_wrote(float* out) {
    __shared__ float value;
    if (blockIdx.x == 0 && threadIdx.x == 0) value = 42.0f;  // only block 0 writes it
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = value;
}

__global__ void too_much_static_shared(float* out) {
    __shared__ float big[16 * 1024];  // 64 KiB: nvcc refuses more than 48 KiB of static shared memory
    big[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = big[(threadIdx.x + 1) % blockDim.x];
}

__global__ void static_and_dynamic_shared(float* out) {
    __shared__ float tile[10 * 1024];  // 40 KiB static, plus whatever dynamic shared memory the launch asks for
    float* extra = dynamic_shared<float>();
    tile[threadIdx.x] = 1.0f;
    extra[threadIdx.x] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x] + extra[(threadIdx.x + 1) % blockDim.x];
}
}  // namespace

TEST_CASE("must fail: a block reading static shared memory it never wrote gets NaN, not the last block's values",
          "[backend][must-fail]") {
    const int blocks = 4;
    DeviceBuffer<float> out(blocks);
    launch(read_what_block_zero_wrote, blocks, 32, 0, 0, out.get());
    const std::vector<float> got = out.download();
    CHECK(got[0] == 42.0f);
    for (int b = 1; b < blocks; ++b) CHECK(std::isnan(got[b]));  // filled with 0xFF bytes, as on a GPU: garbage
}

TEST_CASE("must fail: static shared memory counts in the launch limits", "[backend][must-fail]") {
    expect_abort([] { launch(too_much_static_shared, 1, 32, 0, 0, fault_buffer()); },
                 {"65536 bytes of static __shared__ memory", "test_backend_faults.cu"});  // and the launch site
    // 40 KiB static leaves 8 KiB of the default 48 KiB for dynamic shared memory.
    DeviceBuffer<float> out(32);
    CHECK(try_launch(static_and_dynamic_shared, 1, 32, 8 * 1024, 0, out.get()) == cudaSuccess);
    CHECK(out.download()[0] == 3.0f);
    CHECK(try_launch(static_and_dynamic_shared, 1, 32, 8 * 1024 + 4, 0, out.get()) == cudaErrorInvalidValue);
}

// --- a stack overflow in a kernel is reported, not a bare SIGSEGV or silent corruption -------------------------------
namespace {
constexpr int kHugeLocal = 512 * 1024;  // 2 MiB of floats: more than a fiber's stack (256 KiB, 1 MiB with ASan)

__global__ void huge_local_array(float* out) {
    float local[kHugeLocal];  // legal on a GPU (spilled to local memory), too big for the CPU backend's stack
    for (int i = 0; i < kHugeLocal; i += 1024) local[(i + threadIdx.x) % kHugeLocal] = float(i);
    out[threadIdx.x] = local[(threadIdx.x * 1024) % kHugeLocal];
}
}  // namespace

TEST_CASE("must fail: a stack overflow in a kernel names the kernel, block and thread", "[backend][must-fail]") {
    expect_abort([] { launch(huge_local_array, 1, 32, 0, 0, fault_buffer()); },
                 {"kernel fault in block (0,0,0)", ") overflowed its stack",  // "thread (x,y,z) overflowed ..."
                  "CUDA_CPU_STACK_KB", "test_backend_faults.cu"});            // and the launch site
}

// --- a pageable host pointer passed to a kernel stops the program, as it would fail on a GPU ------------------------
namespace {
__global__ void add_one(float* data, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1.0f;
}
}  // namespace

TEST_CASE("must fail: a kernel given a pageable host pointer stops at the launch", "[backend][must-fail]") {
    expect_abort(
        [] {
            std::vector<float> host(64, 1.0f);
            launch(add_one, 1, 64, 0, 0, host.data(), 64);  // the bug: host memory where device memory belongs
        },
        {"argument 0 of the kernel launched at", "pageable host pointer"});
    // Pinned host memory is reachable from a GPU (mapped), and one past the end of a device buffer is a valid pointer.
    float* pinned = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned, 64 * sizeof(float)));
    for (int i = 0; i < 64; ++i) pinned[i] = float(i);
    launch(add_one, 1, 64, 0, 0, pinned, 64);
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(pinned[63] == 64.0f);
    CUDA_CHECK(cudaFreeHost(pinned));
    DeviceBuffer<float> device(64);
    launch(add_one, 1, 64, 0, 0, device.get() + 64, 0);
}

// --- smaller ones --------------------------------------------------------------------------------------------------
namespace {
__global__ void shuffle_from_two_call_sites(int* out) {
    int v = int(threadIdx.x);
    if (threadIdx.x < 16) {
        v = __shfl_xor_sync(0xffffffffu, v, 16);  // the lower half here ...
    } else {
        v = __shfl_xor_sync(0xffffffffu, v, 16);  // ... the upper half here: one collective since sm_70
    }
    out[threadIdx.x] = v;
}

template <bool barrier>
__global__ void throw_in_thread_three(float* out) {
    if constexpr (barrier) __syncthreads();  // every thread on a fiber; without it, the fast path
    if (threadIdx.x == 3) throw std::runtime_error("boom");
    out[threadIdx.x] = 1.0f;
}
}  // namespace

TEST_CASE("a shuffle reached from two call sites by different lanes completes", "[backend]") {
    DeviceBuffer<int> out(32);
    launch(shuffle_from_two_call_sites, 1, 32, 0, 0, out.get());
    const std::vector<int> got = out.download();
    for (int lane = 0; lane < 32; ++lane) CHECK(got[lane] == (lane ^ 16));
}

TEST_CASE("must fail: an exception escaping a kernel is reported alike on the fast path and on a fiber",
          "[backend][must-fail]") {
    cpu_backend::set_schedule_fuzzing(false);
    expect_kernel_fault([] { launch(throw_in_thread_three<false>, 1, 32, 0, 0, fault_buffer()); },
                        "thread (3,0,0) let an exception escape the kernel (boom)", "device code cannot throw");
    expect_kernel_fault([] { launch(throw_in_thread_three<true>, 1, 32, 0, 0, fault_buffer()); },
                        "thread (3,0,0) let an exception escape the kernel (boom)", "device code cannot throw");
}

TEST_CASE("the emulated device memory is at most half the host's RAM by default", "[backend]") {
    const size_t gib = size_t{1} << 30;
    CHECK(cpu_backend::default_device_capacity(4 * gib) == 2 * gib);  // a small machine: half its RAM
    CHECK(cpu_backend::default_device_capacity(15 * gib) == 15 * gib / 2);
    CHECK(cpu_backend::default_device_capacity(64 * gib) == 8 * gib);  // a large one: 8 GiB

    if (std::getenv("CUDA_CPU_MEMORY")) return;  // set by hand: whatever was asked for
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t ram = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
    CHECK(total_bytes == cpu_backend::default_device_capacity(ram));  // what this machine got
}

#if defined(CUDA_TEACH_CPU) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// --- out-of-bounds device accesses without a sanitizer: guard pages and canaries (host_api.cpp) ---------------------
// The sanitizer build keeps malloc'd buffers, which AddressSanitizer watches byte by byte (the tests below it). The
// race build has the guard pages too; CI checks them there on a planted overflow (make check-playground).
namespace {
__global__ void store_unchecked(float* out) {  // no bounds check: the grid covers more than the buffer
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}
constexpr int kUncheckedStoreLine = __LINE__ - 2;

__global__ void store_up_to_n(float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 2.0f;  // `<=`: the off-by-one
}
constexpr int kOffByOneLine = __LINE__ - 2;

__global__ void store_before_the_start(float* out) {
    out[int(threadIdx.x) - 1] = 3.0f;  // thread 0 writes out[-1]
}

__global__ void store_through_table(float* const* table) {  // the buffer is reached through device memory
    table[0][100] = 4.0f;
}

float* device_floats(int n) {
    float* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
    return p;
}
}  // namespace

TEST_CASE("device buffers end at a guard page without changing what is counted", "[backend]") {
    size_t free_before = 0, free_during = 0, free_after = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    char *small = nullptr, *aligned = nullptr, *large = nullptr;
    CUDA_CHECK(cudaMalloc(&small, 1000));
    CUDA_CHECK(cudaMalloc(&aligned, 4096));
    CUDA_CHECK(cudaMalloc(&large, size_t{300} << 20));  // over the 0xFF-fill limit: lazily mapped zero pages
    CUDA_CHECK(cudaMemGetInfo(&free_during, &total));
    CHECK(free_before - free_during == 1000 + 4096 + (size_t{300} << 20));  // exactly what was asked for
    for (const char* p : {small, aligned, large}) CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);  // as CUDA's
    // Sizes rounded up to 256 bytes end at a page boundary (the guard page), the start staying 256-byte aligned.
    CHECK(reinterpret_cast<uintptr_t>(small + 1024) % 4096 == 0);
    CHECK(reinterpret_cast<uintptr_t>(aligned + 4096) % 4096 == 0);
    CHECK(static_cast<unsigned char>(small[999]) == 0xFF);  // still filled as a GPU's garbage would look
    CHECK(large[(size_t{300} << 20) - 1] == 0);
    launch(store_unchecked, 4, 256, 0, 0, reinterpret_cast<float*>(aligned));  // exactly the buffer: no fault
    CUDA_CHECK(cudaDeviceSynchronize());
    for (char* p : {small, aligned, large}) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    CHECK(free_after == free_before);
}

TEST_CASE("must fail: a kernel without a bounds check faults at the guard page, at its line", "[backend][must-fail]") {
    // 1000 floats (4000 bytes, rounded up to 4096) and a grid of 5 × 256 threads: block 3's last threads store into
    // the slack up to 4096, every thread of block 4 into the guard page (which one first, so the offset, 4096 to 5116,
    // depends on CUDA_CPU_FUZZ).
    expect_abort(
        [] { launch(store_unchecked, 5, 256, 0, 0, device_floats(1000)); },
        {"CPU backend: kernel fault in block (4,0,0)", ") wrote past the end of a 4000-byte device buffer",
         "byte offset ", "cudaMalloc at ", "test_backend_faults.cu:" + std::to_string(kUncheckedStoreLine) + " (in ",
         "store_unchecked", "Invalid __global__ write"});
}

TEST_CASE("must fail: a write one past a 256-byte-aligned end faults at the kernel's line", "[backend][must-fail]") {
    // 256 floats: 1024 bytes, so out[256] is the first byte of the guard page.
    expect_abort(
        [] { launch(store_up_to_n, 2, 256, 0, 0, device_floats(256), 256); },
        {"CPU backend: kernel fault in block (1,0,0)", "thread (0,0,0) wrote past the end of a 1024-byte",
         "byte offset 1024", "test_backend_faults.cu:" + std::to_string(kOffByOneLine) + " (in ", "store_up_to_n"});
}

TEST_CASE("must fail: a write into the slack after a buffer's end is found as the grid ends", "[backend][must-fail]") {
    // 100 floats: 400 bytes, rounded up to 512; out[100] lands in the canary between them, which cannot fault.
    expect_abort(
        [] { launch(store_up_to_n, 1, 128, 0, 0, device_floats(100), 100); },
        {"CPU backend: kernel fault: the kernel ", "store_up_to_n(float*, int) launched at", "test_backend_faults.cu",
         "wrote past the end of a 400-byte device buffer", "byte offset 400", "cudaMalloc at "});
    // A buffer the kernel was not given as an argument: found at the next synchronization point.
    expect_abort(
        [] {
            float* buffer = device_floats(100);
            float** table = nullptr;
            CUDA_CHECK(cudaMalloc(&table, sizeof(float*)));
            CUDA_CHECK(cudaMemcpy(table, &buffer, sizeof(float*), cudaMemcpyHostToDevice));
            launch(store_through_table, 1, 1, 0, 0, table);
            std::fputs("the launch returned\n", stderr);
            CUDA_CHECK(cudaDeviceSynchronize());
        },
        {"the launch returned", "CPU backend: kernel fault: cudaDeviceSynchronize found that a kernel",
         "past the end of a 400-byte device buffer", "byte offset 400", "store_through_table"});
    // Before the start: the canary below it (a whole page below, the lower guard page).
    expect_abort([] { launch(store_before_the_start, 1, 32, 0, 0, device_floats(100)); },
                 {"wrote before the start of a 400-byte device buffer", "byte offset -4"});
}
#endif

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
// A template kernel, like every GEMM and softmax kernel: its __shared__ array is a static of a template instance,
// which AddressSanitizer protects only because the sanitizer build gives kernels internal linkage (runtime.h). The
// store goes through a pointer into a function that is not inlined, as a vectorized GEMM's float4 stores go through
// a cast pointer: UBSan's bounds and object-size checks cannot follow it there, only ASan's redzone sees it.
__device__ __noinline__ void store_through(float* destination, float value) {
    *destination = value;
}

template <int kTile>
__global__ void shared_tile_off_by_one(const float* in, float* out) {
    __shared__ float tile[kTile];
    store_through(tile + threadIdx.x + 1, in[threadIdx.x]);  // the bug: thread kTile - 1 writes tile[kTile]
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x];
}
constexpr int kSharedOutOfBoundsLine = __LINE__ - 4;

TEST_CASE("must fail: an out-of-bounds shared-memory write in a template kernel is caught by AddressSanitizer",
          "[backend][must-fail]") {
    const test_support::ChildResult child = test_support::run_in_child([] {
        float* p = nullptr;
        CUDA_CHECK(cudaMalloc(&p, 64 * sizeof(float)));
        CUDA_CHECK(cudaMemset(p, 0, 64 * sizeof(float)));
        launch(shared_tile_off_by_one<64>, 1, 64, 0, 0, p, p);
    });
    INFO("child output:\n" << child.output);
    REQUIRE_FALSE(child.exit_code == 0);
    REQUIRE(child.output.find("global-buffer-overflow") != std::string::npos);
    REQUIRE(child.output.find("'tile'") != std::string::npos);  // "... to the right of global variable 'tile'"
    const std::string kernel_line = "test_backend_faults.cu:" + std::to_string(kSharedOutOfBoundsLine);
    REQUIRE(child.output.find(kernel_line) != std::string::npos);  // reported at the kernel's source line
}
#endif

#if defined(__SANITIZE_THREAD__)
// --- the race build (make test-race): ThreadSanitizer reports a race at the kernel's line and stops ------------
namespace {
constexpr int kRaceN = 1000;  // 4 blocks of 256 threads, the last one partial

__global__ void histogram_without_atomics(const int* values, int n, int* bins) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) bins[values[i]] += 1;  // not atomicAdd: threads with the same value lose each other's updates
}
constexpr int kRacyHistogramLine = __LINE__ - 2;

__global__ void histogram_with_atomics(const int* values, int n, int* bins) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[values[i]], 1);
}

__global__ void sum_without_atomics(const int* values, int n, int* total) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) *total += values[i];  // every thread updates one counter: atomicAdd is the fix
}
constexpr int kRacyCounterLine = __LINE__ - 2;

// Thread 0 of each block adds its block's count: no race inside a block, but the blocks race with each other.
__global__ void block_counts_without_atomics(int n, int* total) {
    if (threadIdx.x == 0) *total += min(int(blockDim.x), n - int(blockIdx.x * blockDim.x));
}
constexpr int kRacyBlockCounterLine = __LINE__ - 2;

template <bool barrier>
__global__ void read_neighbour(const int* in, int* out, int n) {
    __shared__ int tile[256];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0;
    if constexpr (barrier) __syncthreads();
    if (i < n) out[i] = tile[(threadIdx.x + 1) % blockDim.x];  // the neighbour's value: written before the barrier
}
constexpr int kNeighbourReadLine = __LINE__ - 2;

// A block sum through a helper that declares the shared memory itself (a common idiom): each block has its own on a
// GPU, so blocks reusing the helper's static one here are no race.
__device__ __forceinline__ int block_sum_in_helper(int value) {
    __shared__ int partial[256];
    partial[threadIdx.x] = value;
    __syncthreads();
    int sum = 0;
    if (threadIdx.x == 0)
        for (unsigned t = 0; t < blockDim.x; ++t) sum += partial[t];
    return sum;
}

__global__ void block_sums_through_helper(const int* in, int n, int* sums) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int sum = block_sum_in_helper(i < n ? in[i] : 0);
    if (threadIdx.x == 0) sums[blockIdx.x] = sum;
}

// A 16×16 fp16 tile stored by warp 1 and read by warp 0 through ldmatrix (then an mma), then the next tile stored
// over it: the two barriers are what order the stores before the tensor-core read and the read before the overwrite.
template <bool kBarrierBefore, bool kBarrierAfter>
__global__ void tile_through_ldmatrix(const __half* in, float* out) {
    __shared__ __align__(16) __half tile[16][16];
    const unsigned lane = threadIdx.x % 32;
    if (threadIdx.x >= 32) {
        for (int e = 0; e < 8; ++e) tile[lane / 2][(lane % 2) * 8 + e] = in[lane * 8 + e];  // 8 halves per lane
    }
    if constexpr (kBarrierBefore) __syncthreads();
    float d[4] = {};
    if (threadIdx.x < 32) {
        uint32_t a[4];
        ldmatrix_x4(a, &tile[lane % 16][8 * (lane / 16)]);
        const uint32_t b[2] = {a[0], a[1]};  // any B: the read of the tile is what matters here
        mma_m16n8k16_f16_f32(d, a, b, d);
    }
    if constexpr (kBarrierAfter) __syncthreads();
    if (threadIdx.x >= 32) {
        for (int e = 0; e < 8; ++e) tile[lane / 2][(lane % 2) * 8 + e] = in[256 + lane * 8 + e];  // the next tile
    }
    if (threadIdx.x < 32)
        for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = d[i];
}
constexpr int kTileStoreLine = __LINE__ - 17;
constexpr int kLdmatrixLine = __LINE__ - 12;
constexpr int kNextTileStoreLine = __LINE__ - 7;

template <bool kBarrierBefore, bool kBarrierAfter>
void tile_through_ldmatrix_once() {
    __half* in = nullptr;
    float* out = nullptr;
    CUDA_CHECK(cudaMalloc(&in, 512 * sizeof(__half)));
    CUDA_CHECK(cudaMemset(in, 0x3c, 512 * sizeof(__half)));  // 0x3c3c: 1.06 as a half
    CUDA_CHECK(cudaMalloc(&out, 128 * sizeof(float)));
    launch(tile_through_ldmatrix<kBarrierBefore, kBarrierAfter>, 1, 64, 0, 0, in, out);
    CUDA_CHECK(cudaDeviceSynchronize());
}

// Inputs for the children below: values in [0, 10), so many threads share a histogram bin.
int* race_values() {
    std::vector<int> values(kRaceN);
    for (int i = 0; i < kRaceN; ++i) values[i] = (i * 7) % 10;
    int* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, kRaceN * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d, values.data(), kRaceN * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}
int* zeroed_ints(int n) {
    int* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
    CUDA_CHECK(cudaMemset(d, 0, n * sizeof(int)));
    return d;
}
constexpr int kRaceBlocks = (kRaceN + 255) / 256;

// `other_line`: the other access's line too, when the test knows it.
void expect_race_report(void (*body)(), int kernel_line, int other_line = 0) {
    const test_support::ChildResult child = test_support::run_in_child(body);
    INFO("child output:\n" << child.output);
    REQUIRE_FALSE(child.exit_code == 0);  // halt_on_error: the program stops at the first race
    REQUIRE(child.output.find("WARNING: ThreadSanitizer: data race") != std::string::npos);
    const std::string line = "test_backend_faults.cu:" + std::to_string(kernel_line);
    REQUIRE(child.output.find(line) != std::string::npos);  // at the kernel's source line
    if (other_line)
        REQUIRE(child.output.find("test_backend_faults.cu:" + std::to_string(other_line)) != std::string::npos);
    REQUIRE(child.output.find("CUDA thread (") != std::string::npos);  // naming the CUDA threads involved
}

void expect_no_race(void (*body)()) {
    const test_support::ChildResult child = test_support::run_in_child(body);
    INFO("child output:\n" << child.output);
    REQUIRE(child.output.find("ThreadSanitizer") == std::string::npos);
    REQUIRE(child.exit_code == 0);
}
}  // namespace

TEST_CASE("must fail: the race build reports a histogram without atomics at its line", "[backend][race][must-fail]") {
    expect_race_report(
        [] { launch(histogram_without_atomics, kRaceBlocks, 256, 0, 0, race_values(), kRaceN, zeroed_ints(10)); },
        kRacyHistogramLine);
    expect_no_race([] {
        int* bins = zeroed_ints(10);
        launch(histogram_with_atomics, kRaceBlocks, 256, 0, 0, race_values(), kRaceN, bins);
        int counts[10];
        CUDA_CHECK(cudaMemcpy(counts, bins, sizeof counts, cudaMemcpyDeviceToHost));  // the host reads after the launch
        if (counts[0] != kRaceN / 10) std::abort();
    });
}

TEST_CASE("must fail: the race build reports a counter updated without atomics at its line",
          "[backend][race][must-fail]") {
    expect_race_report(
        [] { launch(sum_without_atomics, kRaceBlocks, 256, 0, 0, race_values(), kRaceN, zeroed_ints(1)); },
        kRacyCounterLine);
    // One writer per block: the race is between blocks, which a GPU runs in any order or at once.
    expect_race_report([] { launch(block_counts_without_atomics, kRaceBlocks, 256, 0, 0, kRaceN, zeroed_ints(1)); },
                       kRacyBlockCounterLine);
}

TEST_CASE("the race build sees no race in blocks reusing a helper's __shared__ memory", "[backend][race]") {
    expect_no_race([] {
        int* sums = zeroed_ints(kRaceBlocks);
        launch(block_sums_through_helper, kRaceBlocks, 256, 0, 0, race_values(), kRaceN, sums);
        int got[kRaceBlocks];
        CUDA_CHECK(cudaMemcpy(got, sums, sizeof got, cudaMemcpyDeviceToHost));
        if (got[0] != 1150) std::abort();  // (7i mod 10) over i < 256: 25 rounds of 0..9 (1125), then 0 7 4 1 8 5
    });
}

TEST_CASE("must fail: the race build reports a missing __syncthreads at its line", "[backend][race][must-fail]") {
    expect_race_report(
        [] { launch(read_neighbour<false>, kRaceBlocks, 256, 0, 0, race_values(), zeroed_ints(kRaceN), kRaceN); },
        kNeighbourReadLine);
    expect_no_race(
        [] { launch(read_neighbour<true>, kRaceBlocks, 256, 0, 0, race_values(), zeroed_ints(kRaceN), kRaceN); });
    // The tiled GEMM above without its second barrier: a fast thread overwrites a tile others still read.
    expect_race_report([] { matmul_mismatches(false); }, kGemmTileReadLine);
    expect_no_race([] { matmul_mismatches(true); });
}

// ldmatrix reads shared memory in the scheduler, on behalf of the warp: each lane's row is recorded as its read.
TEST_CASE("must fail: the race build reports a missing __syncthreads around a tensor-core tile at both lines",
          "[backend][race][must-fail]") {
    expect_race_report(tile_through_ldmatrix_once<false, true>, kLdmatrixLine, kTileStoreLine);
    expect_race_report(tile_through_ldmatrix_once<true, false>, kLdmatrixLine, kNextTileStoreLine);
    expect_no_race(tile_through_ldmatrix_once<true, true>);
}
#endif
#endif
