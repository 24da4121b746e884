// lessons/03_pinned_async/copy_figures.cu — see copy_figures.h.
#include "lessons/03_pinned_async/copy_figures.h"

#include <algorithm>
#include <cstdio>
#include <string>

void print_h2d_bandwidth_probe(Lesson& lesson, size_t batch_bytes) {
    constexpr size_t kLarge = size_t{64} << 20;
    MemoryLedger probe;  // its own buffers, freed on return: the lesson's memory table stays about the lesson
    uint8_t* device = probe.allocate<uint8_t>(MemoryCategory::workspace, "probe", kLarge);
    uint8_t* pinned = probe.allocate_host<uint8_t>(MemoryCategory::workspace, "probe", kLarge, HostMemory::pinned);
    uint8_t* pageable = probe.allocate_host<uint8_t>(MemoryCategory::workspace, "probe", kLarge, HostMemory::pageable);
    std::fill_n(pinned, kLarge, uint8_t{1});  // touch every page, so the first copy does not pay for page faults
    std::fill_n(pageable, kLarge, uint8_t{1});
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    const auto gb_per_s = [&](const uint8_t* source, size_t bytes) {
        const int repeats = bytes < (size_t{1} << 20) ? 100 : 10;
        CUDA_CHECK(cudaMemcpyAsync(device, source, bytes, cudaMemcpyHostToDevice, 0));  // warm-up
        CUDA_CHECK(cudaEventRecord(start, 0));
        for (int i = 0; i < repeats; ++i) CUDA_CHECK(cudaMemcpyAsync(device, source, bytes, cudaMemcpyHostToDevice, 0));
        CUDA_CHECK(cudaEventRecord(stop, 0));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        return EpochTiming::gb_per_s(uint64_t(bytes) * repeats, ms);
    };
    TextTable table({"copy size", "from pageable", "from pinned"}, "lrr");
    for (const size_t bytes : {batch_bytes, kLarge}) {
        const double from_pageable = gb_per_s(pageable, bytes), from_pinned = gb_per_s(pinned, bytes);
        char cells[2][32];
        std::snprintf(cells[0], sizeof cells[0], "%.2f GB/s", from_pageable);
        std::snprintf(cells[1], sizeof cells[1], "%.2f GB/s", from_pinned);
        table.add_row({format_bytes(bytes) + (bytes == batch_bytes ? " (one batch)" : ""), cells[0], cells[1]});
        const std::string size = bytes == batch_bytes ? "batch" : "64mib";
        if (bytes == kLarge) lesson.set_h2d_peak(from_pinned * 1e9);  // the h2d phase's limit in the final table
        lesson.add_result("h2d_probe_pageable_gb_per_s_" + size, from_pageable);
        lesson.add_result("h2d_probe_pinned_gb_per_s_" + size, from_pinned);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    print_flushed("host→device bandwidth probe (cudaMemcpyAsync, timed with CUDA events" +
                  std::string(lesson.on_cpu_backend() ? "; CPU backend: a memcpy, not PCIe" : "") + "):\n" +
                  table.render() + "\n");
}

void report_copies(Lesson& lesson, const PhaseTimer& timer, uint64_t image_bytes_per_epoch, bool resident) {
    // How much of the copy time the compute stream never saw: copy time minus the time it stood waiting.
    const EpochTiming total = timer.total();
    const double copy_ms = total[Phase::h2d].ms, wait_ms = total[Phase::input_wait].ms;
    std::printf("\nimage bytes copied per epoch: %s%s\n", format_bytes(image_bytes_per_epoch).c_str(),
                resident ? " (--resident: only the epoch's order crosses, 4 bytes per image)" : " (1 byte per pixel)");
    if (!resident && !lesson.streams_overlap()) {
        std::printf(
            "copy time hidden behind compute: not measurable here (the CPU backend runs streams one after "
            "the other unless CUDA_CPU_ASYNC=1; %.2f ms of copies)\n",
            copy_ms);
    } else if (!resident) {
        const double hidden = copy_ms > 0 ? std::max(0.0, copy_ms - wait_ms) / copy_ms : 0.0;
        std::printf(
            "copy time hidden behind compute: %.1f%% (copies %.2f ms on the copy stream; the compute stream "
            "waited %.2f ms for its input)\n",
            100.0 * hidden, copy_ms, wait_ms);
        lesson.add_result("copy_hidden_fraction", hidden);
    }
    lesson.add_result("image_bytes_per_epoch", int64_t(image_bytes_per_epoch));
}
