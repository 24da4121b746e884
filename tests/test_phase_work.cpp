// tests/test_phase_work.cpp — each phase's work (common/phase_work.h) against hand counts for a small model, the
// device peaks (common/device_peaks.h) against published figures, the final table's rate columns, and the
// PhaseTimer's --trace slices. No test asserts a speed.
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_support.h"

#include "common/device_peaks.h"
#include "common/phase_timer.h"
#include "common/phase_work.h"
#include "common/report.h"

TEST_CASE("phase work: FLOPs and device bytes of a small MLP epoch, by hand", "[work]") {
    // 784-16-10, 100 images in batches of 32: 4 steps (the last of 4 images), AdamW.
    const EpochWork w = mlp_epoch_work(WorkShape{{784, 16, 10}, 100, 32, OptimizerKind::adamw, 4, false});
    const double rows = 100, steps = 4;
    // normalize: 2 FLOPs and 1 + 4 bytes per pixel.
    CHECK(w[int(Phase::normalize)].flops == 2 * rows * 784);
    CHECK(w[int(Phase::normalize)].bytes_device == rows * 784 * 5);
    // forward: 2·rows·in·out per layer; X, Y per row, W and b once per step.
    CHECK(w[int(Phase::forward)].flops == 2 * rows * (784 * 16 + 16 * 10));
    CHECK(w[int(Phase::forward)].bytes_device ==
          4 * (rows * 784 + steps * (784 * 16 + 16) + rows * 16) + 4 * (rows * 16 + steps * (16 * 10 + 10) + rows * 10));
    // backward: dW and db for both layers, dX for the second only (no gradient of the input).
    CHECK(w[int(Phase::backward)].flops ==
          2 * rows * 784 * 16 + rows * 16 + 2 * rows * 16 * 10 + rows * 10 + 2 * rows * 16 * 10);
    CHECK(w[int(Phase::backward)].bytes_device ==
          4 * (rows * 16 + rows * 784 + steps * (784 * 16 + 16)) +
              4 * (rows * 10 + rows * 16 + steps * (16 * 10 + 10)) +
              4 * (rows * 10 + steps * 16 * 10 + 2 * rows * 16));  // dX of layer 2: dY, W, the ReLU input; dX
    // loss: logits in, labels (1 byte) in, dlogits out; no FLOPs counted.
    CHECK(w[int(Phase::loss)].flops == 0);
    CHECK(w[int(Phase::loss)].bytes_device == rows * (2 * 4 * 10 + 1));
    // AdamW: 13 FLOPs and 7 fp32 values per parameter per step.
    const double parameters = 784 * 16 + 16 + 16 * 10 + 10;
    CHECK(w[int(Phase::optimizer)].flops == steps * parameters * 13);
    CHECK(w[int(Phase::optimizer)].bytes_device == steps * parameters * 28);
    CHECK(model_flops(w) == w[int(Phase::forward)].flops + w[int(Phase::backward)].flops);
    // SGD: 6 FLOPs, 5 values; fp16 operands halve the activation and weight bytes, not the optimizer's.
    const EpochWork s = mlp_epoch_work(WorkShape{{784, 16, 10}, 100, 32, OptimizerKind::sgd, 2, true});
    CHECK(s[int(Phase::optimizer)].flops == steps * parameters * 6);
    CHECK(s[int(Phase::optimizer)].bytes_device == steps * parameters * 20);
    CHECK(s[int(Phase::forward)].bytes_device == w[int(Phase::forward)].bytes_device / 2);
    CHECK(s[int(Phase::forward)].tensor_core);
    CHECK(s[int(Phase::forward)].flops == w[int(Phase::forward)].flops);
    // Nothing to count: no work.
    CHECK(mlp_epoch_work(WorkShape{{784, 10}, 0, 32}).at(int(Phase::forward)).flops == 0);
}

TEST_CASE("device peaks: published figures of two architectures from SMs, clocks and bus width", "[work]") {
    // A100 SXM4 40 GB (Ampere GA100 whitepaper): 108 SMs, 1410 MHz boost, HBM2 at 1215 MHz on 5120 bits:
    // 19.5 TFLOPS fp32, 312 TFLOPS fp16 tensor (dense), 1555 GB/s.
    const DevicePeaks a100 = peaks_for(8, 0, 108, 1410e3, 1215e3, 5120);
    REQUIRE(a100.known);
    CHECK(std::abs(a100.fp32_flops / 1e12 - 19.5) < 0.1);
    CHECK(std::abs(a100.fp16_tensor_flops / 1e12 - 312.0) < 1.0);
    CHECK(std::abs(a100.dram_bytes_per_s / 1e9 - 1555.0) < 2.0);
    // H100 SXM5 (Hopper whitepaper): 132 SMs; 989.4 TFLOPS fp16 tensor (dense) at 1830 MHz; 67 TFLOPS fp32 at the
    // 1980 MHz boost; HBM3 at 2619 MHz on 5120 bits: 3.35 TB/s.
    const DevicePeaks h100 = peaks_for(9, 0, 132, 1830e3, 2619e3, 5120);
    CHECK(std::abs(h100.fp16_tensor_flops / 1e12 - 989.4) < 1.0);
    CHECK(std::abs(h100.dram_bytes_per_s / 1e12 - 3.35) < 0.01);
    CHECK(std::abs(peaks_for(9, 0, 132, 1980e3, 2619e3, 5120).fp32_flops / 1e12 - 66.9) < 0.1);
    // Unknown architectures and missing clocks: no peak, and a reason.
    CHECK_FALSE(peaks_for(12, 0, 100, 2000e3, 1000e3, 512).known);
    CHECK_FALSE(peaks_for(12, 0, 100, 2000e3, 1000e3, 512).why_unknown.empty());
    CHECK_FALSE(peaks_for(8, 0, 108, 0, 1215e3, 5120).known);
    // The bound: at least 20 % of a limit, else latency; unknown peaks: nothing said.
    CHECK(bound_kind(a100, 0.5 * a100.fp32_flops, 0.1 * a100.dram_bytes_per_s, false) == "compute");
    CHECK(bound_kind(a100, 0.01 * a100.fp32_flops, 0.6 * a100.dram_bytes_per_s, false) == "memory");
    CHECK(bound_kind(a100, 0.01 * a100.fp32_flops, 0.01 * a100.dram_bytes_per_s, false) == "latency");
    CHECK(bound_kind(a100, 0.1 * a100.fp16_tensor_flops, 0, true) == "latency");  // 10 % of the tensor peak
    CHECK(bound_kind(DevicePeaks{}, 1e12, 1e12, false).empty());
}

TEST_CASE("timing table with work: GFLOP/s, device GB/s, and % of peak only where the peak is known", "[work]") {
    EpochTiming t;
    t.clock = "test clock";
    t.phases[int(Phase::forward)] = {2.0, 4, 0};  // 2 ms
    t.wall_ms = 3.0;
    EpochWork w{};
    w[int(Phase::forward)] = {4e9, 1e9, false};  // 4 GFLOP and 1 GB in 2 ms: 2000 GFLOP/s, 500 GB/s
    const std::string cpu = timing_table(t, "title", w, DevicePeaks{false, "percentages need a GPU"});
    CHECK(cpu.find("2000.00") != std::string::npos);
    CHECK(cpu.find("500.00") != std::string::npos);
    CHECK(cpu.find("percentages need a GPU") != std::string::npos);
    const DevicePeaks a100 = peaks_for(8, 0, 108, 1410e3, 1215e3, 5120);
    const std::string gpu = timing_table(t, "title", w, a100);
    // 2 TFLOP/s of 19.49 fp32: 10.3 %, and 500 GB/s of 1555.2: 32.15 %: memory-bound, so 32.2 % of peak.
    CHECK(gpu.find("memory") != std::string::npos);
    CHECK(gpu.find(" 32.2 ") != std::string::npos);
    // h2d against the bandwidth probe's measurement: 2.5 GB in 100 ms = 25 GB/s of a measured 50: 50 %, PCIe.
    t.phases[int(Phase::h2d)] = {100.0, 10, 2'500'000'000};
    DevicePeaks probed = a100;
    CHECK(timing_table(t, "title", w, probed).find("PCIe") == std::string::npos);  // no probe: no figure
    probed.h2d_bytes_per_s = 50e9;
    const std::string with_probe = timing_table(t, "title", w, probed);
    CHECK(with_probe.find(" 50.0   PCIe") != std::string::npos);
    CHECK(with_probe.find("bandwidth probe's 64 MiB pinned copy, 50.00 GB/s") != std::string::npos);
}

TEST_CASE("phase timer trace: the first N steps of each epoch, steps ending at the optimizer", "[work][timer]") {
    PhaseTimer timer(TimerClock::host);
    timer.enable_trace(2);
    for (int epoch = 1; epoch <= 2; ++epoch) {
        timer.begin_epoch(epoch);
        for (int step = 0; step < 4; ++step) {
            for (Phase p : {Phase::h2d, Phase::forward, Phase::backward, Phase::optimizer}) {
                timer.begin(p);
                timer.end(p, 0, p == Phase::h2d ? 100 : 0);
            }
        }
        timer.end_epoch();
    }
    const auto& slices = timer.trace_slices();
    REQUIRE(slices.size() == 2 * 2 * 4);  // 2 epochs × 2 steps × 4 phases
    for (size_t i = 0; i < slices.size(); ++i) {
        CHECK(slices[i].epoch == int(i / 8) + 1);
        CHECK(slices[i].step == int(i % 8) / 4);
        CHECK(slices[i].phase == std::vector{Phase::h2d, Phase::forward, Phase::backward, Phase::optimizer}[i % 4]);
        if (i > 0) CHECK(slices[i].start_us >= slices[i - 1].start_us);
    }
    CHECK(slices[0].bytes == 100);
    CHECK_THROWS_AS(timer.enable_trace(3), std::logic_error);  // after the first epoch
    PhaseTimer other(TimerClock::host);
    CHECK_THROWS_AS(other.enable_trace(0), std::invalid_argument);
    // The file: Trace Event JSON with the slices as complete events.
    test_support::TempDir dir;
    timer.write_trace(dir.file("t.json"), "test");
    std::ifstream in(dir.file("t.json"));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.find("\"traceEvents\"") != std::string::npos);
    CHECK(text.find("\"ph\": \"X\"") != std::string::npos);
    CHECK(text.find("first 2 training steps") != std::string::npos);
}
