// tests/test_backend_semantics.cu — the CUDA execution model, checked against plain C++ computations.
// On the cpu flavor these test the CPU backend; on a GPU they test that the backend's rules are the hardware's.
#include <cooperative_groups.h>

#include <algorithm>
#include <numeric>

#include "tests/test_support.h"

namespace cg = cooperative_groups;
using test_support::DeviceBuffer;

namespace {

// Each thread writes its global 3-D coordinates, so any mix-up of x/y/z, blocks or threads shows.
__global__ void write_coordinates(unsigned* out) {
    const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    const unsigned threads_per_block = blockDim.x * blockDim.y * blockDim.z;
    unsigned* slot = out + 6 * (block * threads_per_block + thread);
    slot[0] = threadIdx.x;
    slot[1] = threadIdx.y;
    slot[2] = threadIdx.z;
    slot[3] = blockIdx.x;
    slot[4] = blockIdx.y;
    slot[5] = blockIdx.z;
}

// Reverses each block's slice through shared memory: correct only if the barrier separates writes from reads.
__global__ void reverse_in_block(const float* in, float* out) {
    __shared__ float tile[256];
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = tile[blockDim.x - 1 - threadIdx.x];
}

// Same with dynamic shared memory, and several rounds of barriers: rotate by one, `rounds` times.
__global__ void rotate_in_block(const float* in, float* out, int rounds) {
    float* tile = dynamic_shared<float>();
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    float value = in[i];
    for (int r = 0; r < rounds; ++r) {
        tile[threadIdx.x] = value;
        __syncthreads();
        value = tile[(threadIdx.x + 1) % blockDim.x];
        __syncthreads();  // nobody overwrites the tile before everyone has read it
    }
    out[i] = value;
}

enum class Shuffle { idx, up, down, bfly };

template <typename T>
__global__ void shuffle_kernel(const T* in, T* out, Shuffle kind, int operand, int width) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    const T value = in[i];
    T result{};
    switch (kind) {
        case Shuffle::idx:
            result = __shfl_sync(0xffffffffu, value, operand, width);
            break;
        case Shuffle::up:
            result = __shfl_up_sync(0xffffffffu, value, unsigned(operand), width);
            break;
        case Shuffle::down:
            result = __shfl_down_sync(0xffffffffu, value, unsigned(operand), width);
            break;
        case Shuffle::bfly:
            result = __shfl_xor_sync(0xffffffffu, value, operand, width);
            break;
    }
    out[i] = result;
}

// Which lane a lane reads, as CUDA's programming guide words it for each shuffle (written independently of the
// backend's PTX-based rule).
int expected_source(Shuffle kind, int lane, int operand, int width) {
    const int segment_start = lane / width * width;
    switch (kind) {
        case Shuffle::idx:
            return segment_start + ((operand % width) + width) % width;
        case Shuffle::up:
            return lane - segment_start >= operand ? lane - operand : lane;
        case Shuffle::down:
            return lane - segment_start + operand < width ? lane + operand : lane;
        case Shuffle::bfly: {
            const int source = lane ^ operand;
            return source < segment_start + width ? source : lane;  // earlier groups readable, later ones not
        }
    }
    return -1;
}

// Lanes of each half-warp sum their values with a mask naming only their half: two independent collectives.
__global__ void half_warp_sums(const int* in, int* out) {
    const unsigned lane = threadIdx.x % 32;
    const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    int value = in[threadIdx.x];
    for (int offset = 8; offset > 0; offset /= 2) value += __shfl_xor_sync(mask, value, offset, 16);
    out[threadIdx.x] = value;
}

__global__ void votes(const int* predicate, unsigned* ballot, int* any, int* all) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    const int p = predicate[i];
    ballot[i] = __ballot_sync(0xffffffffu, p);
    any[i] = __any_sync(0xffffffffu, p);
    all[i] = __all_sync(0xffffffffu, p);
    __syncwarp();
}

// Warp collectives after a bounds-check return, with the full mask: legal CUDA, since the PTX ISA asks only the
// non-exited lanes named in the mask to arrive (shfl.sync, vote.sync, bar.warp.sync). Exited lanes contribute no
// ballot bit and no vote; each shuffle here reads only live lanes, or discards what it read from an exited one.
__global__ void collectives_after_return(const int* in, int n, unsigned* ballot, int* any, int* all, int* first,
                                         int* sum, int* tile_any) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int lane = int(threadIdx.x % 32), warp_start = int(threadIdx.x / 32 * 32);
    const int live = n - warp_start < 32 ? n - warp_start : 32;  // the warp's lanes that have not returned
    const int v = in[i];
    ballot[i] = __ballot_sync(0xffffffffu, v > 0);
    any[i] = __any_sync(0xffffffffu, v > 0);
    all[i] = __all_sync(0xffffffffu, v > 0);
    __syncwarp();
    first[i] = __shfl_sync(0xffffffffu, v, 0);  // lane 0 is live
    int s = v;
    for (int offset = 16; offset > 0; offset /= 2) {
        const int other = __shfl_down_sync(0xffffffffu, s, offset);
        if (lane + offset < live) s += other;  // a source past the live lanes is read, never used
    }
    sum[i] = __shfl_sync(0xffffffffu, s, 0);
    const cg::thread_block_tile<8> tile = cg::tiled_partition<8>(cg::this_thread_block());
    tile_any[i] = tile.any(v > 0);
}

__global__ void atomics(const int* values, int n, int* histogram, float* sum, int* maximum, unsigned* counter,
                        int* exchanged) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(&histogram[values[i] % 16], 1);
    atomicAdd(sum, float(values[i]));  // integers below 2^24 in total: exact whatever the order
    atomicMax(maximum, values[i]);
    // A CAS loop that increments: the classic way to build any atomic from atomicCAS. The first guess is read
    // atomically too: a plain `*counter` would race with the other threads' atomicCAS (the race build says so).
    unsigned old = atomicAdd(counter, 0u), assumed;
    do {
        assumed = old;
        old = atomicCAS(counter, assumed, assumed + 1);
    } while (old != assumed);
    if (values[i] == 7) atomicExch(exchanged, i);
}

// Reduces each block to one number with shared memory and shuffles; used to check bitwise determinism.
__global__ void block_sums(const float* in, int n, float* out) {
    __shared__ float warp_sums[32];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] * in[i] + 0.1f : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (threadIdx.x == 0) out[blockIdx.x] = v;
    }
}

// The same name and signature as a kernel in test_backend_faults.cu, both in an anonymous namespace: two kernels of
// one mangled name, each with static shared memory of its own (36 KiB here, 40 KiB there). The backend must count and
// fill only this one's.
__global__ void static_and_dynamic_shared(float* out) {
    __shared__ float tile[9 * 1024];
    float* extra = dynamic_shared<float>();
    tile[threadIdx.x] = float(threadIdx.x);
    extra[threadIdx.x] = 0.5f;
    __syncthreads();
    out[threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x] + extra[(threadIdx.x + 1) % blockDim.x];
}

}  // namespace

TEST_CASE("thread and block coordinates cover a 3-D grid exactly once", "[backend]") {
    REQUIRE_DEVICE();
    const dim3 grid(3, 2, 2), block(5, 3, 2);  // 12 blocks of 30 threads: nothing a power of two
    const size_t threads = 12 * 30;
    DeviceBuffer<unsigned> out(6 * threads);
    launch(write_coordinates, grid, block, 0, 0, out.get());
    const std::vector<unsigned> got = out.download();
    size_t k = 0;
    for (unsigned bz = 0; bz < 2; ++bz)
        for (unsigned by = 0; by < 2; ++by)
            for (unsigned bx = 0; bx < 3; ++bx)
                for (unsigned tz = 0; tz < 2; ++tz)
                    for (unsigned ty = 0; ty < 3; ++ty)
                        for (unsigned tx = 0; tx < 5; ++tx, k += 6) {
                            const std::vector<unsigned> expected{tx, ty, tz, bx, by, bz};
                            REQUIRE(std::vector<unsigned>(got.begin() + k, got.begin() + k + 6) == expected);
                        }
}

TEST_CASE("a barrier separates shared-memory writes from reads", "[backend][barrier]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int blocks = 7, threads = 256;
    const std::vector<float> input = test_support::random_floats(rng, blocks * threads);
    DeviceBuffer<float> in(input), out(input.size());
    launch(reverse_in_block, blocks, threads, 0, 0, in.get(), out.get());
    const std::vector<float> got = out.download();
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < threads; ++t) REQUIRE(got[b * threads + t] == input[b * threads + threads - 1 - t]);
}

TEST_CASE("dynamic shared memory across repeated barriers", "[backend][barrier]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int blocks = 5, threads = 97, rounds = 13;  // 97 threads: four warps, the last one partial
    const std::vector<float> input = test_support::random_floats(rng, blocks * threads);
    DeviceBuffer<float> in(input), out(input.size());
    launch(rotate_in_block, blocks, threads, threads * sizeof(float), 0, in.get(), out.get(), rounds);
    const std::vector<float> got = out.download();
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < threads; ++t) REQUIRE(got[b * threads + t] == input[b * threads + (t + rounds) % threads]);
}

TEST_CASE("more than 48 KiB of dynamic shared memory needs cudaFuncSetAttribute", "[backend][launch]") {
    REQUIRE_DEVICE();
    const int threads = 64;
    const size_t big = 64 * 1024;
    DeviceBuffer<float> in(std::vector<float>(threads, 1.0f)), out(threads);
    REQUIRE(try_launch(rotate_in_block, 1, threads, big, 0, in.get(), out.get(), 1) != cudaSuccess);
    CUDA_CHECK(cudaFuncSetAttribute(rotate_in_block, cudaFuncAttributeMaxDynamicSharedMemorySize, int(big)));
    REQUIRE(try_launch(rotate_in_block, 1, threads, big, 0, in.get(), out.get(), 1) == cudaSuccess);
    REQUIRE(out.download() == std::vector<float>(threads, 1.0f));
}

TEST_CASE("static shared memory is counted per kernel, not per name (36 KiB static + 12 KiB dynamic fit)",
          "[backend][launch]") {
    REQUIRE_DEVICE();
    const int threads = 32;
    DeviceBuffer<float> out(threads);
    REQUIRE(try_launch(static_and_dynamic_shared, 1, threads, 12 * 1024, 0, out.get()) == cudaSuccess);
    const std::vector<float> got = out.download();
    for (int t = 0; t < threads; ++t) REQUIRE(got[t] == float((t + 1) % threads) + 0.5f);
    // One float more is over the default 48 KiB that static and dynamic shared memory share.
    REQUIRE(try_launch(static_and_dynamic_shared, 1, threads, 12 * 1024 + 4, 0, out.get()) != cudaSuccess);
}

TEST_CASE("launch configurations a GPU rejects are rejected", "[backend][launch]") {
    REQUIRE_DEVICE();
    DeviceBuffer<unsigned> out(6 * 2048);
    CHECK(try_launch(write_coordinates, 1, 1025, 0, 0, out.get()) == cudaErrorInvalidConfiguration);
    CHECK(try_launch(write_coordinates, 1, dim3(32, 32, 2), 0, 0, out.get()) == cudaErrorInvalidConfiguration);
    CHECK(try_launch(write_coordinates, 0, 32, 0, 0, out.get()) == cudaErrorInvalidConfiguration);
    CHECK(try_launch(write_coordinates, dim3(1, 70000), 32, 0, 0, out.get()) == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaSuccess);  // try_launch consumed each error
}

TEMPLATE_TEST_CASE("every shuffle variant, every width, out-of-range lanes", "[backend][warp]", int, float, double) {
    REQUIRE_DEVICE();
    const int warps = 2, n = 32 * warps;
    std::vector<TestType> input(n);
    for (int i = 0; i < n; ++i) input[i] = TestType(1000 + 7 * i);
    DeviceBuffer<TestType> in(input), out(n);
    for (const Shuffle kind : {Shuffle::idx, Shuffle::up, Shuffle::down, Shuffle::bfly}) {
        for (const int width : {32, 16, 8, 4, 2, 1}) {
            for (const int operand : {0, 1, 3, 5, 15, 16, 31, 33, -3}) {
                // Deltas are unsigned, so only __shfl_sync takes a negative or >= 32 lane (CUDA keeps its low bits).
                if (kind != Shuffle::idx && (operand < 0 || operand >= 32)) continue;
                out.poison();
                launch(shuffle_kernel<TestType>, warps, 32, 0, 0, in.get(), out.get(), kind, operand, width);
                const std::vector<TestType> got = out.download();
                for (int i = 0; i < n; ++i) {
                    const int lane = i % 32, warp_start = i - lane;
                    const TestType expected = input[warp_start + expected_source(kind, lane, operand, width)];
                    INFO("kind " << int(kind) << " width " << width << " operand " << operand << " lane " << lane);
                    REQUIRE(got[i] == expected);
                }
            }
        }
    }
}

TEST_CASE("shuffles with a half-warp mask form independent groups", "[backend][warp]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    std::vector<int> input(64);
    for (int& v : input) v = int(rng() % 1000);
    DeviceBuffer<int> in(input), out(64);
    launch(half_warp_sums, 1, 64, 0, 0, in.get(), out.get());
    const std::vector<int> got = out.download();
    for (int i = 0; i < 64; ++i) {
        const int start = i / 16 * 16;
        REQUIRE(got[i] == std::accumulate(input.begin() + start, input.begin() + start + 16, 0));
    }
}

TEST_CASE("ballot, any and all", "[backend][warp]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int n = 32 * 5;
    std::vector<int> predicate(n);
    for (int i = 0; i < n; ++i) predicate[i] = int(rng() % 3 == 0) * int(1 + rng() % 5);  // not just 0/1
    for (int i = 32; i < 64; ++i) predicate[i] = 0;          // a warp where nobody votes true
    for (int i = 64; i < 96; ++i) predicate[i] = 1 + i % 2;  // a warp where everyone does
    DeviceBuffer<int> pred(predicate), any(n), all(n);
    DeviceBuffer<unsigned> ballot(n);
    launch(votes, 5, 32, 0, 0, pred.get(), ballot.get(), any.get(), all.get());
    const auto got_ballot = ballot.download();
    const auto got_any = any.download();
    const auto got_all = all.download();
    for (int w = 0; w < 5; ++w) {
        unsigned expected = 0;
        for (int l = 0; l < 32; ++l) expected |= unsigned(predicate[32 * w + l] != 0) << l;
        for (int l = 0; l < 32; ++l) {
            REQUIRE(got_ballot[32 * w + l] == expected);
            REQUIRE(got_any[32 * w + l] == int(expected != 0));
            REQUIRE(got_all[32 * w + l] == int(expected == 0xffffffffu));
        }
    }
}

TEST_CASE("warp collectives with a full mask after lanes returned early, and past a partial last warp",
          "[backend][warp]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int threads = 72;  // warp 2 has 8 threads: lanes 8-31 do not exist, as if exited
    for (const int n : {72, 45, 70, 33}) {
        std::vector<int> values(threads, 0);
        for (int i = 0; i < n; ++i) values[i] = int(rng() % 4) - 1;  // -1, 0, 1 or 2
        DeviceBuffer<int> in(values), any(threads), all(threads), first(threads), sum(threads), tile_any(threads);
        DeviceBuffer<unsigned> ballot(threads);
        launch(collectives_after_return, 1, threads, 0, 0, in.get(), n, ballot.get(), any.get(), all.get(), first.get(),
               sum.get(), tile_any.get());
        const auto got_ballot = ballot.download();
        const auto got_any = any.download(), got_all = all.download(), got_first = first.download();
        const auto got_sum = sum.download(), got_tile_any = tile_any.download();
        for (int i = 0; i < n; ++i) {
            INFO("n = " << n << ", thread " << i);
            const int base = i / 32 * 32, end = std::min(n, base + 32);
            unsigned expected = 0;
            for (int j = base; j < end; ++j) expected |= unsigned(values[j] > 0) << (j - base);
            const unsigned live = end - base == 32 ? 0xffffffffu : (1u << (end - base)) - 1u;
            CHECK(got_ballot[i] == expected);  // exited lanes: no bit
            CHECK(got_any[i] == int(expected != 0));
            CHECK(got_all[i] == int(expected == live));  // exited lanes do not vote
            CHECK(got_first[i] == values[base]);
            CHECK(got_sum[i] == std::accumulate(values.begin() + base, values.begin() + end, 0));
            const int tile = i / 8 * 8;
            CHECK(got_tile_any[i] == int(std::any_of(values.begin() + tile, values.begin() + std::min(n, tile + 8),
                                                     [](int v) { return v > 0; })));
        }
    }
}

TEST_CASE("atomics from many blocks", "[backend][atomics]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int n = 10007;  // prime
    std::vector<int> values(n);
    for (int& v : values) v = int(rng() % 1000);
    values[1234] = 7;
    values[4321] = 7;
    DeviceBuffer<int> in(values), histogram(std::vector<int>(16, 0)), maximum(std::vector<int>{-1});
    DeviceBuffer<int> exchanged(std::vector<int>{-1});
    DeviceBuffer<float> sum(std::vector<float>{0.0f});
    DeviceBuffer<unsigned> counter(std::vector<unsigned>{0});
    launch(atomics, ceil_div(n, 128), 128, 0, 0, in.get(), n, histogram.get(), sum.get(), maximum.get(), counter.get(),
           exchanged.get());
    std::vector<int> expected_histogram(16, 0);
    for (int v : values) expected_histogram[v % 16]++;
    REQUIRE(histogram.download() == expected_histogram);
    REQUIRE(sum.download()[0] == float(std::accumulate(values.begin(), values.end(), 0LL)));
    REQUIRE(maximum.download()[0] == *std::max_element(values.begin(), values.end()));
    REQUIRE(counter.download()[0] == unsigned(n));
    const int who = exchanged.download()[0];
    REQUIRE(who >= 0);
    REQUIRE(values[who] == 7);
}

TEST_CASE("same inputs, bitwise-same outputs, whatever the schedule", "[backend][determinism]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int n = 100003, threads = 256, blocks = ceil_div(n, threads);
    DeviceBuffer<float> in(test_support::random_floats(rng, n)), first(blocks), again(blocks);
    launch(block_sums, blocks, threads, 0, 0, in.get(), n, first.get());
    const auto expected = first.download();
    REQUIRE(std::none_of(expected.begin(), expected.end(), [](float v) { return std::isnan(v); }));
    // A correct kernel's result must not depend on the order in which the backend runs its threads: compare with
    // shuffled schedules (on a GPU: with a second run).
#if defined(CUDA_TEACH_CPU)
    for (const uint64_t seed : {1u, 2u, 3u}) {
        cpu_backend::set_schedule_fuzzing(true, seed);
#else
    for (int run = 0; run < 1; ++run) {
#endif
        again.poison();
        launch(block_sums, blocks, threads, 0, 0, in.get(), n, again.get());
        const auto got = again.download();
        REQUIRE(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);
    }
#if defined(CUDA_TEACH_CPU)
    cpu_backend::set_schedule_fuzzing(false);
#endif
}

TEST_CASE("cudaMalloc beyond the device's memory returns cudaErrorMemoryAllocation", "[backend][memory]") {
    REQUIRE_DEVICE();
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    REQUIRE(total_bytes > 0);
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, total_bytes + (size_t(1) << 30)) == cudaErrorMemoryAllocation);
    REQUIRE(p == nullptr);
    REQUIRE(cudaGetLastError() == cudaErrorMemoryAllocation);
    REQUIRE(cudaGetLastError() == cudaSuccess);  // not sticky: the device is still usable
    REQUIRE(cudaMalloc(&p, 1024) == cudaSuccess);
    CUDA_CHECK(cudaFree(p));
}

// CPU backend only: on a GPU (unified addressing) a swapped kind or an overrun is undefined, not a reported error.
#if defined(CUDA_TEACH_CPU)
TEST_CASE("copies whose kind does not match the pointers are refused", "[backend][memory]") {
    REQUIRE_DEVICE();
    DeviceBuffer<float> device(16);
    std::vector<float> host(16, 1.0f);
    // Swapped kinds: the classic mistake; on a GPU these fail too (or corrupt memory), never silently succeed.
    CHECK(cudaMemcpy(device.get(), host.data(), 64, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
    CHECK(cudaMemcpy(host.data(), device.get(), 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    // A device side that runs past the end of its buffer.
    CHECK(cudaMemcpy(device.get() + 8, host.data(), 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    CHECK(cudaMemset(host.data(), 0, 64) == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaMemcpy(device.get(), host.data(), 64, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(device.download() == host);
}
#endif
