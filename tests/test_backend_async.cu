// tests/test_backend_async.cu — streams and events: CUDA's ordering rules, and the missing waits they catch.
// On the cpu flavor these run the backend in asynchronous mode (each stream a queue on its own worker thread, as
// CUDA_CPU_ASYNC=1 does), with seeded random delays before each stream item (as CUDA_CPU_FUZZ does), so that a
// missing cudaStreamSynchronize / cudaStreamWaitEvent / cudaEventSynchronize gives wrong data here as on a GPU.
// The must-fail programs are CPU-only (on a GPU they would be flaky, not wrong every time); the correct versions and
// the ordering rules run on a GPU too.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "tests/test_support.h"

using test_support::DeviceBuffer;

namespace {

constexpr int kCount = 1 << 16;
constexpr size_t kBytes = kCount * sizeof(int);

__global__ void add_one(const int* in, int* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + 1;
}

// One step of a sequence whose result depends on the order of the steps: x = 3x + k.
__global__ void step(unsigned* x, unsigned k) {
    if (threadIdx.x == 0) *x = *x * 3u + k;
}

unsigned host_step(unsigned x, unsigned k) {
    return x * 3u + k;
}

#if defined(CUDA_TEACH_CPU)
// Holds its stream until the host sets *flag (CPU backend only: the kernel reads host memory directly).
__global__ void wait_for_flag(const int* flag) {
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0) std::this_thread::yield();
}

// Asynchronous streams for one test (without the late schedule, even under CUDA_CPU_ASYNC=late: these tests are
// about the fuzzed schedule), restored afterwards.
struct AsyncStreams {
    AsyncStreams() : was_async(cpu_backend::async_streams()), was_late(cpu_backend::late_schedule_enabled()) {
        cpu_backend::set_late_schedule(false);
        cpu_backend::set_async_streams(true);
    }
    ~AsyncStreams() {
        cpu_backend::set_stream_fuzzing(false);
        cpu_backend::set_late_schedule(was_late);
        cpu_backend::set_async_streams(was_async);
    }
    bool was_async, was_late;
};
#endif

constexpr uint64_t kSeeds = 8;

// Runs `scenario` once per fuzz seed (CPU backend, asynchronous mode; once unfuzzed too), or once on a GPU; returns
// each run's result.
template <typename Scenario>
std::vector<size_t> per_seed(Scenario scenario, uint64_t seeds = kSeeds) {
    std::vector<size_t> results;
#if defined(CUDA_TEACH_CPU)
    AsyncStreams async;
    for (uint64_t seed = 1; seed <= seeds; ++seed) {
        cpu_backend::set_stream_fuzzing(true, seed);
        results.push_back(scenario());
    }
    cpu_backend::set_stream_fuzzing(false);
#endif
    results.push_back(scenario());
    return results;
}

size_t runs_with_errors(const std::vector<size_t>& results) {
    return size_t(std::count_if(results.begin(), results.end(), [](size_t wrong) { return wrong > 0; }));
}

struct PinnedInts {
    int* p = nullptr;
    PinnedInts() { CUDA_CHECK(cudaMallocHost(&p, kBytes)); }
    ~PinnedInts() { CUDA_CHECK(cudaFreeHost(p)); }
    PinnedInts(const PinnedInts&) = delete;
    PinnedInts& operator=(const PinnedInts&) = delete;
};

struct Stream {
    cudaStream_t s = nullptr;
    explicit Stream(unsigned flags = cudaStreamNonBlocking) { CUDA_CHECK(cudaStreamCreateWithFlags(&s, flags)); }
    ~Stream() { CUDA_CHECK(cudaStreamDestroy(s)); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
};

struct Event {
    cudaEvent_t e = nullptr;
    explicit Event(unsigned flags = cudaEventDefault) { CUDA_CHECK(cudaEventCreateWithFlags(&e, flags)); }
    ~Event() { CUDA_CHECK(cudaEventDestroy(e)); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
};

std::vector<int> iota_ints(int first) {
    std::vector<int> v(kCount);
    std::iota(v.begin(), v.end(), first);
    return v;
}

// A device-to-host copy into pinned memory, read by the host right after cudaMemcpyAsync returns (or after
// cudaStreamSynchronize). Returns how many elements the host saw wrong.
size_t pinned_download_read_early(bool synchronize) {
    DeviceBuffer<int> device(iota_ints(1));
    // cudaMemcpy from pageable memory returns once the source is staged, not once it has landed ("API
    // synchronization behavior"), and the non-blocking stream below does not wait for stream 0: wait here.
    CUDA_CHECK(cudaDeviceSynchronize());
    PinnedInts host;
    std::fill_n(host.p, kCount, 0);
    Stream stream;
    CUDA_CHECK(cudaMemcpyAsync(host.p, device.get(), kBytes, cudaMemcpyDeviceToHost, stream.s));
    if (synchronize) CUDA_CHECK(cudaStreamSynchronize(stream.s));
    size_t wrong = 0;
    for (int i = 0; i < kCount; ++i) wrong += host.p[i] != i + 1;  // the bug, when not synchronized
    CUDA_CHECK(cudaStreamSynchronize(stream.s));
    return wrong;
}

// A copy on one stream and the kernel that reads its destination on another, with or without the event between
// them. Returns how many outputs are wrong. (The streams outlive the runs: on the CPU backend a stream's first
// fibered kernel allocates its fiber stacks, a start-up delay that would otherwise favor the copy.)
size_t kernel_on_other_stream(bool wait, cudaStream_t copy, cudaStream_t compute) {
    PinnedInts staging;
    std::iota(staging.p, staging.p + kCount, 0);
    DeviceBuffer<int> in(kCount), out(kCount);
    CUDA_CHECK(cudaDeviceSynchronize());  // the poisoning memsets (stream 0) are over: non-blocking streams skip them
    Event copied(cudaEventDisableTiming);
    CUDA_CHECK(cudaMemcpyAsync(in.get(), staging.p, kBytes, cudaMemcpyHostToDevice, copy));
    CUDA_CHECK(cudaEventRecord(copied.e, copy));
    if (wait) CUDA_CHECK(cudaStreamWaitEvent(compute, copied.e, 0));
    launch(add_one, kCount / 256, 256, 0, compute, in.get(), out.get(), kCount);
    CUDA_CHECK(cudaStreamSynchronize(compute));
    CUDA_CHECK(cudaStreamSynchronize(copy));
    const std::vector<int> got = out.download();
    size_t wrong = 0;
    for (int i = 0; i < kCount; ++i) wrong += got[i] != i + 1;
    return wrong;
}

// A pinned staging buffer refilled with the next batch, with or without waiting for the copy of the previous one.
// Returns how many elements of the first batch's copy are wrong.
size_t staging_refilled(bool wait) {
    PinnedInts staging;
    DeviceBuffer<int> slot(kCount);
    CUDA_CHECK(cudaDeviceSynchronize());
    Stream copy;
    Event copied(cudaEventDisableTiming);
    std::iota(staging.p, staging.p + kCount, 0);  // batch 1
    CUDA_CHECK(cudaMemcpyAsync(slot.get(), staging.p, kBytes, cudaMemcpyHostToDevice, copy.s));
    CUDA_CHECK(cudaEventRecord(copied.e, copy.s));
    if (wait) CUDA_CHECK(cudaEventSynchronize(copied.e));
    std::iota(staging.p, staging.p + kCount, -kCount);  // batch 2, into the same staging buffer
    CUDA_CHECK(cudaStreamSynchronize(copy.s));
    const std::vector<int> got = slot.download();
    size_t wrong = 0;
    for (int i = 0; i < kCount; ++i) wrong += got[i] != i;
    return wrong;
}

// A synchronous cudaMemcpy from pageable memory, then a kernel on a non-blocking stream that reads its destination,
// with or without an event recorded on stream 0 after the copy between them. Returns how many outputs are wrong.
size_t kernel_after_pageable_cudaMemcpy(bool wait, cudaStream_t compute) {
    DeviceBuffer<int> in(kCount), out(kCount);
    CUDA_CHECK(cudaDeviceSynchronize());  // the poisoning memsets (stream 0) are over: non-blocking streams skip them
    const std::vector<int> source = iota_ints(0);
    CUDA_CHECK(cudaMemcpy(in.get(), source.data(), kBytes, cudaMemcpyHostToDevice));  // may still be copying
    Event copied(cudaEventDisableTiming);
    CUDA_CHECK(cudaEventRecord(copied.e, 0));
    if (wait) CUDA_CHECK(cudaStreamWaitEvent(compute, copied.e, 0));
    launch(add_one, kCount / 256, 256, 0, compute, in.get(), out.get(), kCount);
    CUDA_CHECK(cudaStreamSynchronize(compute));
    const std::vector<int> got = out.download();
    size_t wrong = 0;
    for (int i = 0; i < kCount; ++i) wrong += got[i] != i + 1;
    return wrong;
}

// A copy on this host thread's cudaStreamPerThread, then a kernel that reads its destination on `compute`, a
// blocking stream the program created (which waits for stream 0, not for per-thread streams), or on stream 0 itself
// (which waits for every blocking stream, per-thread ones included). Returns how many outputs are wrong.
size_t kernel_after_per_thread_copy(cudaStream_t compute) {
    PinnedInts staging;
    std::iota(staging.p, staging.p + kCount, 0);
    DeviceBuffer<int> in(kCount), out(kCount);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpyAsync(in.get(), staging.p, kBytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
    launch(add_one, kCount / 256, 256, 0, compute, in.get(), out.get(), kCount);
    CUDA_CHECK(cudaStreamSynchronize(compute));
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    const std::vector<int> got = out.download();
    size_t wrong = 0;
    for (int i = 0; i < kCount; ++i) wrong += got[i] != i + 1;
    return wrong;
}

}  // namespace

// --- the correct programs: right for every seed ------------------------------------------------------------------

TEST_CASE("async: a pinned download read after cudaStreamSynchronize is right", "[backend][async]") {
    REQUIRE_DEVICE();
    const auto results = per_seed([] { return pinned_download_read_early(true); });
    REQUIRE(runs_with_errors(results) == 0);
}

TEST_CASE("async: a kernel that waits for the copy stream's event reads the copied data", "[backend][async]") {
    REQUIRE_DEVICE();
    Stream copy, compute;
    const auto results = per_seed([&] { return kernel_on_other_stream(true, copy.s, compute.s); });
    REQUIRE(runs_with_errors(results) == 0);
}

TEST_CASE("async: a kernel waits for a pageable cudaMemcpy through an event, and stream 0 for cudaStreamPerThread",
          "[backend][async]") {
    REQUIRE_DEVICE();
    Stream compute;
    const auto results = per_seed([&] {
        return kernel_after_pageable_cudaMemcpy(true, compute.s) + kernel_after_per_thread_copy(0) +
               kernel_after_per_thread_copy(cudaStreamPerThread);
    });
    REQUIRE(runs_with_errors(results) == 0);
}

TEST_CASE("async: a staging buffer refilled after its copy's event completed", "[backend][async]") {
    REQUIRE_DEVICE();
    const auto results = per_seed([] { return staging_refilled(true); });
    REQUIRE(runs_with_errors(results) == 0);
}

// --- the missing waits: wrong here, as on a GPU -----------------------------------------------------------------
#if defined(CUDA_TEACH_CPU)
// CPU backend only: on a GPU a missing wait is a race whose outcome varies from run to run (flaky, not failing).
TEST_CASE("must fail: a pinned download read before synchronizing is stale", "[backend][async][must-fail]") {
    const auto results = per_seed([] { return pinned_download_read_early(false); });
    INFO("runs with stale data: " << runs_with_errors(results) << " of " << results.size());
    REQUIRE(runs_with_errors(results) > results.size() / 2);  // all but the seeds that delay the copy by 0 ms
}

TEST_CASE("must fail: a kernel on another stream without cudaStreamWaitEvent reads stale data",
          "[backend][async][must-fail]") {
    // A race between two seeded delays: the kernel goes first for about 4 seeds in 9, so try many seeds.
    Stream copy, compute;
    const auto results = per_seed([&] { return kernel_on_other_stream(false, copy.s, compute.s); }, 3 * kSeeds);
    INFO("runs with stale data: " << runs_with_errors(results) << " of " << results.size());
    REQUIRE(runs_with_errors(results) >= 3);
}

TEST_CASE("must fail: a staging buffer refilled before its copy's event completed corrupts the copy",
          "[backend][async][must-fail]") {
    const auto results = per_seed([] { return staging_refilled(false); });
    INFO("runs with a corrupted copy: " << runs_with_errors(results) << " of " << results.size());
    REQUIRE(runs_with_errors(results) > results.size() / 2);
}

// --- the late schedule (CUDA_CPU_ASYNC=late): the same missing waits, caught every time ---------------------------
// Every queued item runs only once something waits for it, and a copy's destination holds poison from when it could
// start until it runs (common/cpu_backend/streams.cpp): no seed can let the copy win the race.

namespace {
// Asynchronous streams on the late schedule for one test, restored afterwards.
struct LateSchedule {
    AsyncStreams async;
    LateSchedule() { cpu_backend::set_late_schedule(true); }
    ~LateSchedule() { cpu_backend::set_late_schedule(false); }
};
}  // namespace

TEST_CASE("late schedule: the correct programs are right", "[backend][async][late]") {
    LateSchedule late;
    Stream copy, compute;
    for (int run = 0; run < 3; ++run) {
        INFO("run " << run);
        REQUIRE(pinned_download_read_early(true) == 0);
        REQUIRE(kernel_on_other_stream(true, copy.s, compute.s) == 0);
        REQUIRE(staging_refilled(true) == 0);
    }
}

TEST_CASE("late schedule: a kernel waits for a pageable cudaMemcpy through an event, or runs on stream 0",
          "[backend][async][late]") {
    LateSchedule late;
    Stream compute, blocking(cudaStreamDefault);
    for (int run = 0; run < 3; ++run) {
        REQUIRE(kernel_after_pageable_cudaMemcpy(true, compute.s) == 0);
        REQUIRE(kernel_after_pageable_cudaMemcpy(false, blocking.s) == 0);  // a blocking stream waits for stream 0
        REQUIRE(kernel_after_per_thread_copy(0) == 0);                      // stream 0 waits for the per-thread stream
        REQUIRE(kernel_after_per_thread_copy(cudaStreamPerThread) == 0);
    }
}

// (Named "a kernel on another stream ...", as the Makefile's test-race leaves those out: TSan reports the missing
// wait as a race, stopping the program, before the poison shows.)
TEST_CASE("must fail (late schedule): a kernel on another stream reads a pageable cudaMemcpy not landed yet",
          "[backend][async][late][must-fail]") {
    LateSchedule late;
    Stream compute;
    for (int run = 0; run < 3; ++run) REQUIRE(kernel_after_pageable_cudaMemcpy(false, compute.s) == size_t(kCount));
}

TEST_CASE("must fail (late schedule): a kernel on another stream than cudaStreamPerThread's copy reads poison",
          "[backend][async][late][must-fail]") {
    LateSchedule late;
    Stream blocking(cudaStreamDefault);
    for (int run = 0; run < 3; ++run) REQUIRE(kernel_after_per_thread_copy(blocking.s) == size_t(kCount));
}

TEST_CASE("late schedule: a polling loop on cudaEventQuery and cudaStreamQuery finishes", "[backend][async][late]") {
    LateSchedule late;
    Stream stream;
    Event done(cudaEventDisableTiming);
    DeviceBuffer<int> buffer(kCount);
    CUDA_CHECK(cudaDeviceSynchronize());  // its poisoning memset is on stream 0, which a non-blocking stream skips
    CUDA_CHECK(cudaMemsetAsync(buffer.get(), 0, kBytes, stream.s));
    CUDA_CHECK(cudaEventRecord(done.e, stream.s));
    while (cudaEventQuery(done.e) == cudaErrorNotReady) std::this_thread::yield();  // a query demands the work
    REQUIRE(cudaStreamQuery(stream.s) == cudaSuccess);
    const std::vector<int> got = buffer.download();
    REQUIRE(std::count(got.begin(), got.end(), 0) == kCount);
}

TEST_CASE("must fail (late schedule): a pinned download read before synchronizing is wrong every time",
          "[backend][async][late][must-fail]") {
    LateSchedule late;
    for (int run = 0; run < 5; ++run) REQUIRE(pinned_download_read_early(false) == size_t(kCount));
}

TEST_CASE("must fail (late schedule): a kernel on another stream without cudaStreamWaitEvent reads poison every time",
          "[backend][async][late][must-fail]") {
    LateSchedule late;
    Stream copy, compute;
    for (int run = 0; run < 5; ++run) REQUIRE(kernel_on_other_stream(false, copy.s, compute.s) == size_t(kCount));
}

TEST_CASE("must fail (late schedule): a staging buffer refilled before its copy ran is reported",
          "[backend][async][late][must-fail]") {
    const test_support::ChildResult child = test_support::run_in_child([] {
        cpu_backend::set_async_streams(true);
        cpu_backend::set_late_schedule(true);
        staging_refilled(false);
    });
    INFO("child output:\n" << child.output);
    REQUIRE_FALSE(child.exited_normally);
    REQUIRE(child.output.find("the host changed the source after the call and before the copy ran") !=
            std::string::npos);
}
#endif

// --- the ordering rules -------------------------------------------------------------------------------------------

TEST_CASE("async: a stream runs its work in order", "[backend][async]") {
    REQUIRE_DEVICE();
    const auto results = per_seed([] {
        DeviceBuffer<unsigned> x(1);
        CUDA_CHECK(cudaDeviceSynchronize());
        Stream stream;
        PinnedInts pinned;  // pinned.p[0]: a value copied in halfway; pinned.p[1]: the result
        pinned.p[0] = 5;
        unsigned expected = 0;
        CUDA_CHECK(cudaMemsetAsync(x.get(), 0, sizeof(unsigned), stream.s));
        for (unsigned k = 1; k <= 16; ++k) {
            if (k == 9) {
                CUDA_CHECK(cudaMemcpyAsync(x.get(), pinned.p, sizeof(unsigned), cudaMemcpyHostToDevice, stream.s));
                expected = 5;
            }
            launch(step, 1, 32, 0, stream.s, x.get(), k);
            expected = host_step(expected, k);
        }
        CUDA_CHECK(cudaMemcpyAsync(pinned.p + 1, x.get(), sizeof(unsigned), cudaMemcpyDeviceToHost, stream.s));
        CUDA_CHECK(cudaStreamSynchronize(stream.s));
        return size_t(unsigned(pinned.p[1]) != expected);
    });
    REQUIRE(runs_with_errors(results) == 0);
}

TEST_CASE("async: the legacy default stream orders itself with blocking streams", "[backend][async]") {
    REQUIRE_DEVICE();
    const auto results = per_seed([] {
        DeviceBuffer<unsigned> x(std::vector<unsigned>{0});
        Stream first(cudaStreamDefault), second(cudaStreamDefault);
        // Two blocking streams are not ordered with each other, only through stream 0: it sits between them.
        const cudaStream_t order[] = {first.s, 0, second.s, 0, first.s, 0, 0, second.s, second.s, 0, first.s};
        unsigned expected = 0, k = 1;
        for (const cudaStream_t s : order) {
            launch(step, 1, 32, 0, s, x.get(), k);
            expected = host_step(expected, k++);
        }
        unsigned got = 0;
        CUDA_CHECK(cudaMemcpy(&got, x.get(), sizeof got, cudaMemcpyDeviceToHost));  // stream 0: after all of them
        return size_t(got != expected);
    });
    REQUIRE(runs_with_errors(results) == 0);
}

TEST_CASE("async: events: query before and after, synchronize, elapsed time", "[backend][async]") {
    REQUIRE_DEVICE();
    Event never, start, stop, untimed(cudaEventDisableTiming);
    REQUIRE(cudaEventQuery(never.e) == cudaSuccess);  // never recorded: nothing to wait for
    REQUIRE(cudaEventSynchronize(never.e) == cudaSuccess);
    const auto results = per_seed([&] {
        Stream stream;
        DeviceBuffer<int> in(iota_ints(0)), out(kCount);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaEventRecord(start.e, stream.s));
        launch(add_one, kCount / 256, 256, 0, stream.s, in.get(), out.get(), kCount);
        CUDA_CHECK(cudaEventRecord(stop.e, stream.s));
        CUDA_CHECK(cudaEventRecord(untimed.e, stream.s));
        CUDA_CHECK(cudaEventSynchronize(stop.e));
        size_t wrong = cudaEventQuery(stop.e) != cudaSuccess;
        wrong += cudaEventQuery(start.e) != cudaSuccess;  // earlier on the same stream: complete too
        float ms = -1;
        wrong += cudaEventElapsedTime(&ms, start.e, stop.e) != cudaSuccess || !(ms >= 0);
        CUDA_CHECK(cudaEventSynchronize(untimed.e));
        wrong += cudaEventElapsedTime(&ms, start.e, untimed.e) != cudaErrorInvalidResourceHandle;
        cudaGetLastError();
        return wrong;
    });
    REQUIRE(runs_with_errors(results) == 0);
}

TEST_CASE("async: pageable copies are as synchronous as CUDA makes them", "[backend][async]") {
    REQUIRE_DEVICE();
    const auto results = per_seed([] {
        DeviceBuffer<int> device(kCount);
        CUDA_CHECK(cudaDeviceSynchronize());
        Stream stream;
        std::vector<int> source = iota_ints(0), back(kCount, 0);
        // From pageable memory: staged before the call returns, so the source may be reused at once.
        CUDA_CHECK(cudaMemcpyAsync(device.get(), source.data(), kBytes, cudaMemcpyHostToDevice, stream.s));
        std::fill(source.begin(), source.end(), -1);
        // Into pageable memory: the call returns once the copy is done.
        CUDA_CHECK(cudaMemcpyAsync(back.data(), device.get(), kBytes, cudaMemcpyDeviceToHost, stream.s));
        size_t wrong = 0;
        for (int i = 0; i < kCount; ++i) wrong += back[i] != i;
        return wrong;
    });
    REQUIRE(runs_with_errors(results) == 0);
}

TEST_CASE("async: work queued and waited for from different host threads", "[backend][async]") {
    REQUIRE_DEVICE();
    const auto results = per_seed([] {
        DeviceBuffer<int> in(iota_ints(0)), out(kCount);
        CUDA_CHECK(cudaDeviceSynchronize());  // out's poisoning memset (stream 0) is over: non-blocking streams skip it
        PinnedInts host;
        Stream stream;
        Event done(cudaEventDisableTiming);
        // A kernel launched from another thread, then a loader-style thread waiting for an event the first recorded.
        std::thread([&] {
            launch(add_one, kCount / 256, 256, 0, stream.s, in.get(), out.get(), kCount);
            CUDA_CHECK(cudaMemcpyAsync(host.p, out.get(), kBytes, cudaMemcpyDeviceToHost, stream.s));
            CUDA_CHECK(cudaEventRecord(done.e, stream.s));
        }).join();
        size_t wrong = 0;
        std::thread([&] {
            CUDA_CHECK(cudaEventSynchronize(done.e));
            for (int i = 0; i < kCount; ++i) wrong += host.p[i] != i + 1;
        }).join();
        return wrong;
    });
    REQUIRE(runs_with_errors(results) == 0);
}

#if defined(CUDA_TEACH_CPU)
namespace {
// Polls until the stream has finished its work or two seconds have passed.
bool finishes(cudaStream_t stream) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (cudaStreamQuery(stream) == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}
}  // namespace

TEST_CASE("async: blocking streams wait for stream 0, non-blocking streams do not", "[backend][async]") {
    AsyncStreams async;
    cpu_backend::set_stream_fuzzing(true, 7);
    PinnedInts flag, result;
    flag.p[0] = 0;
    DeviceBuffer<int> value(1);
    CUDA_CHECK(cudaDeviceSynchronize());
    Stream blocking(cudaStreamDefault), non_blocking(cudaStreamNonBlocking);
    Event held, timed_start;
    CUDA_CHECK(cudaEventRecord(timed_start.e, 0));
    launch(wait_for_flag, 1, 1, 0, 0, flag.p);  // stream 0 is held until the flag is set
    CUDA_CHECK(cudaEventRecord(held.e, 0));
    CUDA_CHECK(cudaMemsetAsync(value.get(), 7, sizeof(int), non_blocking.s));
    CUDA_CHECK(cudaMemcpyAsync(result.p, value.get(), sizeof(int), cudaMemcpyDeviceToHost, non_blocking.s));
    CUDA_CHECK(cudaMemsetAsync(value.get(), 9, sizeof(int), blocking.s));
    const bool non_blocking_finished = finishes(non_blocking.s);
    const int seen = result.p[0];
    const cudaError_t blocking_state = cudaStreamQuery(blocking.s), legacy_state = cudaStreamQuery(0);
    const cudaError_t event_state = cudaEventQuery(held.e);
    float ms = -1;
    const cudaError_t elapsed_state = cudaEventElapsedTime(&ms, timed_start.e, held.e);
    __atomic_store_n(flag.p, 1, __ATOMIC_RELEASE);  // let stream 0 go before any REQUIRE can end the test
    CUDA_CHECK(cudaEventSynchronize(held.e));
    CHECK(non_blocking_finished);
    CHECK(seen == 0x07070707);
    CHECK(blocking_state == cudaErrorNotReady);  // its memset waits for the kernel on stream 0
    CHECK(legacy_state == cudaErrorNotReady);
    CHECK(event_state == cudaErrorNotReady);
    CHECK(elapsed_state == cudaErrorNotReady);
    CHECK(cudaEventQuery(held.e) == cudaSuccess);
    CHECK(cudaEventElapsedTime(&ms, timed_start.e, held.e) == cudaSuccess);
    CHECK(ms >= 0);
    CUDA_CHECK(cudaStreamSynchronize(blocking.s));
    CHECK(cudaStreamQuery(blocking.s) == cudaSuccess);
    CHECK(value.download()[0] == 0x09090909);
}

TEST_CASE("async: stream 0 waits for blocking streams, not for non-blocking ones", "[backend][async]") {
    AsyncStreams async;
    PinnedInts flag, result;
    flag.p[0] = 0;
    DeviceBuffer<int> value(1);
    CUDA_CHECK(cudaDeviceSynchronize());
    Stream blocking(cudaStreamDefault), non_blocking(cudaStreamNonBlocking);
    launch(wait_for_flag, 1, 1, 0, blocking.s, flag.p);  // the blocking stream is held
    CUDA_CHECK(cudaMemsetAsync(value.get(), 3, sizeof(int), 0));
    const bool legacy_finished = finishes(0);
    // A non-blocking stream is not held by a blocking one (the kernel holds the only "SM", so only copies here).
    CUDA_CHECK(cudaMemcpyAsync(result.p, flag.p + 1, sizeof(int), cudaMemcpyHostToHost, non_blocking.s));
    const bool non_blocking_finished = finishes(non_blocking.s);
    __atomic_store_n(flag.p, 1, __ATOMIC_RELEASE);
    CUDA_CHECK(cudaStreamSynchronize(0));  // stream 0: its own work and the blocking streams' earlier work
    CHECK_FALSE(legacy_finished);
    CHECK(non_blocking_finished);
    CHECK(cudaStreamQuery(blocking.s) == cudaSuccess);
    CHECK(value.download()[0] == 0x03030303);
}

TEST_CASE("async: cudaStreamPerThread is each host thread's own blocking stream", "[backend][async]") {
    AsyncStreams async;
    PinnedInts flag;
    flag.p[0] = 0;
    DeviceBuffer<int> value(1);
    CUDA_CHECK(cudaDeviceSynchronize());
    // Another host thread's per-thread stream is held (its work outlives the thread, as a destroyed stream's does).
    std::thread([&] { launch(wait_for_flag, 1, 1, 0, cudaStreamPerThread, flag.p); }).join();
    CUDA_CHECK(cudaMemsetAsync(value.get(), 5, sizeof(int), cudaStreamPerThread));
    const bool own_finished = finishes(cudaStreamPerThread);  // not the other thread's stream, nor stream 0
    CUDA_CHECK(cudaMemsetAsync(value.get(), 6, sizeof(int), 0));
    const bool legacy_finished = finishes(0);  // stream 0 waits for every blocking stream, per-thread ones too
    __atomic_store_n(flag.p, 1, __ATOMIC_RELEASE);
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(own_finished);
    CHECK_FALSE(legacy_finished);
    CHECK(value.download()[0] == 0x06060606);
}

TEST_CASE("async: cudaFree and cudaFreeHost wait for the device", "[backend][async]") {
    AsyncStreams async;
    cpu_backend::set_stream_fuzzing(true, 3);
    Stream stream;
    int* device = nullptr;
    CUDA_CHECK(cudaMalloc(&device, kBytes));
    DeviceBuffer<int> in(iota_ints(0));
    CUDA_CHECK(cudaDeviceSynchronize());
    launch(add_one, kCount / 256, 256, 0, stream.s, in.get(), device, kCount);
    CUDA_CHECK(cudaFree(device));
    CHECK(cudaStreamQuery(stream.s) == cudaSuccess);
    int* pinned = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned, kBytes));
    CUDA_CHECK(cudaMemcpyAsync(pinned, in.get(), kBytes, cudaMemcpyDeviceToHost, stream.s));
    CUDA_CHECK(cudaFreeHost(pinned));
    CHECK(cudaStreamQuery(stream.s) == cudaSuccess);
}

TEST_CASE("async: the same fuzz seed gives the same result for a correct program as synchronous mode",
          "[backend][async][determinism]") {
    const auto run = [] {
        DeviceBuffer<int> in(iota_ints(0)), out(kCount);
        CUDA_CHECK(cudaDeviceSynchronize());
        Stream stream;
        for (int r = 0; r < 4; ++r) launch(add_one, kCount / 256, 256, 0, stream.s, in.get(), in.get(), kCount);
        launch(add_one, kCount / 256, 256, 0, stream.s, in.get(), out.get(), kCount);
        CUDA_CHECK(cudaStreamSynchronize(stream.s));
        return out.download();
    };
    const std::vector<int> synchronous = run();
    AsyncStreams async;
    for (const uint64_t seed : {1u, 2u}) {
        cpu_backend::set_stream_fuzzing(true, seed);
        REQUIRE(run() == synchronous);
    }
}
#endif
