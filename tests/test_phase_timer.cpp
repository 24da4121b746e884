// tests/test_phase_timer.cpp — phases, call counts, bytes and GB/s arithmetic, the event pool, and misuse.
// No test asserts a speed.
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_support.h"

#include "common/phase_timer.h"
#include "common/report.h"

namespace {

// The whitespace-separated cells of the table row that starts with `first`.
std::vector<std::string> row_cells(const std::string& table, const std::string& first) {
    std::istringstream lines(table);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::vector<std::string> cells;
        for (std::string w; words >> w;) cells.push_back(w);
        if (!cells.empty() && cells[0] == first) return cells;
    }
    return {};
}

}  // namespace

TEST_CASE("phase timer: GB/s arithmetic, sums over phases and epochs", "[timer]") {
    CHECK(EpochTiming::gb_per_s(2'000'000'000, 1000.0) == 2.0);
    CHECK(EpochTiming::gb_per_s(8'000'000, 2.0) == 4.0);
    CHECK(EpochTiming::gb_per_s(123, 0.0) == 0.0);
    EpochTiming a;
    a.phases[int(Phase::h2d)] = {2.0, 4, 8'000'000};
    a.phases[int(Phase::forward)] = {6.0, 4, 0};
    a.wall_ms = 9.0;
    CHECK(a.phases_ms() == 8.0);
    EpochTiming sum = a;
    sum += a;
    CHECK(sum[Phase::h2d].calls == 8);
    CHECK(sum[Phase::h2d].bytes == 16'000'000);
    CHECK(sum.phases_ms() == 16.0);
    CHECK(sum.wall_ms == 18.0);
    CHECK(std::string(phase_name(Phase::optimizer)) == "optimizer");
}

TEST_CASE("phase timer: the timing table shows ms, %, calls, avg µs, bytes and GB/s", "[timer][report]") {
    EpochTiming t;
    t.clock = "GPU time from CUDA events";
    t.phases[int(Phase::h2d)] = {2.0, 4, 8'000'000};
    t.phases[int(Phase::forward)] = {6.0, 4, 0};
    t.wall_ms = 10.0;
    const std::string table = timing_table(t, "epoch 1");
    INFO(table);
    CHECK(table.find("epoch 1 — GPU time from CUDA events") == 0);
    CHECK(table.find("phase") != std::string::npos);
    CHECK(table.find("avg µs") != std::string::npos);
    // h2d: 2.00 ms, 25.0 %, 4 calls, 500.0 µs each, 7.63 MiB, 4.00 GB/s
    CHECK(row_cells(table, "h2d") ==
          std::vector<std::string>{"h2d", "2.00", "25.0", "4", "500.0", "7.63", "MiB", "4.00"});
    CHECK(row_cells(table, "forward") == std::vector<std::string>{"forward", "6.00", "75.0", "4", "1500.0"});
    CHECK(table.find("loss") == std::string::npos);  // phases never entered are left out
    CHECK(table.find("wall 10.00 ms") != std::string::npos);
    CHECK(table.find("2.00 ms in no phase") != std::string::npos);
}

TEST_CASE("phase timer: host clock mode counts calls and bytes per epoch", "[timer]") {
    PhaseTimer timer(TimerClock::host);
    for (int epoch = 1; epoch <= 2; ++epoch) {
        timer.begin_epoch(epoch);
        for (int step = 0; step < 5; ++step) {
            {
                auto scope = timer.scope(Phase::forward);
                std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a known minimum duration
            }
            timer.begin(Phase::h2d);
            timer.end(Phase::h2d, 0, 1000);
        }
        const EpochTiming& t = timer.end_epoch();
        CHECK(t.epoch == epoch);
        CHECK(t[Phase::forward].calls == 5);
        CHECK(t[Phase::h2d].calls == 5);
        CHECK(t[Phase::h2d].bytes == 5000);
        CHECK(t[Phase::loss].calls == 0);
        CHECK(t[Phase::forward].ms >= 5 * 2.0);  // the sleeps: sleep_for never returns early
        CHECK(t[Phase::forward].ms < t.wall_ms + 1e-6);
        CHECK(t.wall_ms + 1e-6 >= t.phases_ms());  // sequential phases inside one epoch
        CHECK(t.clock.find("CPU timings") != std::string::npos);
    }
    CHECK(timer.events_created() == 0);
    const EpochTiming total = timer.total();
    CHECK(total.epoch == 2);
    CHECK(total[Phase::h2d].bytes == 10000);
    CHECK(total[Phase::forward].calls == 10);
}

TEST_CASE("phase timer: misuse is reported", "[timer]") {
    PhaseTimer timer(TimerClock::host);
    CHECK_THROWS_AS(timer.begin(Phase::forward), std::logic_error);  // outside an epoch
    timer.begin_epoch(1);
    timer.begin(Phase::forward);
    CHECK_THROWS_AS(timer.begin(Phase::forward), std::logic_error);
    CHECK_THROWS_AS(timer.end(Phase::loss), std::logic_error);
    CHECK_THROWS_AS(timer.end_epoch(), std::logic_error);  // forward still open
    timer.end(Phase::forward);
    timer.end_epoch();
    CHECK_THROWS_AS(timer.end_epoch(), std::logic_error);
}

TEST_CASE("phase timer: CUDA events around async work with the event pool reused every epoch", "[timer]") {
    REQUIRE_DEVICE();
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    const size_t bytes = size_t{1} << 20;
    float* device = nullptr;
    CUDA_CHECK(cudaMalloc(&device, bytes));
    std::vector<unsigned char> host(bytes, 7);
    PhaseTimer timer;
    size_t events_after_first_epoch = 0;
    for (int epoch = 1; epoch <= 3; ++epoch) {
        timer.begin_epoch(epoch);
        for (int step = 0; step < 6; ++step) {
            {
                auto scope = timer.scope(Phase::h2d, stream, bytes);
                CUDA_CHECK(cudaMemcpyAsync(device, host.data(), bytes, cudaMemcpyHostToDevice, stream));
            }
            timer.begin(Phase::forward, stream);
            CUDA_CHECK(cudaMemsetAsync(device, 0, bytes, stream));
#if defined(CUDA_TEACH_CPU)
            // On the cpu backend an event is stamped when the stream reaches it: once the stream is idle (made
            // sure of here: with CUDA_CPU_ASYNC=1 it may still be behind), the pair must span at least the sleep.
            // (On a GPU the same is likely but the driver may delay submitting the first event, so only the cpu
            // flavor checks it.)
            CUDA_CHECK(cudaStreamSynchronize(stream));
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
#endif
            timer.end(Phase::forward, stream);
            auto host_work = timer.scope(Phase::host);
        }
        const EpochTiming& t = timer.end_epoch();
        CHECK(t[Phase::h2d].calls == 6);
        CHECK(t[Phase::h2d].bytes == 6 * bytes);
        CHECK(t[Phase::forward].calls == 6);
        CHECK(t[Phase::host].calls == 6);
        CHECK(t[Phase::h2d].ms > 0.0);  // 6 MiB really copied between the events: no zero-length timing
        CHECK(t[Phase::forward].ms > 0.0);
#if defined(CUDA_TEACH_CPU)
        CHECK(t[Phase::forward].ms >= 6 * 1.0);  // the sleeps inside the phase
#endif
        CHECK(t.wall_ms + 1e-3 >= t.phases_ms());  // sequential phases on one stream fit inside the epoch
#if defined(CUDA_TEACH_CPU)
        CHECK(t.clock.find("CPU timings") != std::string::npos);  // the table must not pass CPU time off as GPU time
#else
        CHECK(t.clock.find("CUDA events") != std::string::npos);
#endif
        if (epoch == 1) events_after_first_epoch = timer.events_created();
    }
    CHECK(events_after_first_epoch == 24);  // 2 phases × 6 steps × 2 events; the host phase uses none
    CHECK(timer.events_created() == events_after_first_epoch);
    CUDA_CHECK(cudaFree(device));
    CUDA_CHECK(cudaStreamDestroy(stream));
}
