// common/device_peaks.h — what the device could do at most: the limits each phase's achieved rate is set against.
//
// defines: DevicePeaks, ArchThroughput, arch_throughput(), peaks_for(), query_device_peaks(), bound_kind().
//
// A time alone does not say whether a phase is slow: `forward 3.1 ms` means something only beside what the
// hardware could do in 3.1 ms. The peaks are computed, not looked up by product name: SM count, SM clock, memory
// clock and bus width come from the device (cudaDeviceGetAttribute), and the per-SM, per-clock throughputs of each
// architecture from a small table (arch_throughput, each figure's source in device_peaks.cpp). On the CPU backend
// there is no such limit to compare with: the peaks are unknown and the tables say the percentages need a GPU.
#pragma once

#include <string>

struct ArchThroughput {
    int major, minor;             // compute capability
    int fp32_fma_per_clock;       // per SM: FP32 fused multiply-adds per clock (2 FLOPs each)
    int fp16_tensor_fma_per_clock;  // per SM: dense FP16 tensor-core multiply-adds per clock, FP32 accumulation
    const char* source;           // where the figures come from
};
// The table's row for a compute capability, or nullptr when it has none (an architecture newer than sm_90, or one
// this project does not build for).
const ArchThroughput* arch_throughput(int major, int minor);

struct DevicePeaks {
    bool known = false;
    std::string why_unknown;  // when !known: "percentages need a GPU (CPU backend)", an unknown architecture, ...
    int major = 0, minor = 0, sm_count = 0, bus_width_bits = 0;
    double sm_clock_hz = 0, memory_clock_hz = 0;
    double fp32_flops = 0;         // per second
    double fp16_tensor_flops = 0;  // per second
    double dram_bytes_per_s = 0;   // 2 transfers per memory clock (DDR / HBM) × bus width
    double h2d_bytes_per_s = 0;    // measured: the lesson's bandwidth probe, 64 MiB from pinned memory (0: not run)
};
// The peaks of a device with these properties (pure: the tests check it against published figures).
DevicePeaks peaks_for(int major, int minor, int sm_count, double sm_clock_khz, double memory_clock_khz,
                      int bus_width_bits);
// The current device's (cudaDeviceGetAttribute); on the CPU backend, unknown.
DevicePeaks query_device_peaks();

// A phase at `flops` per second and `bytes` per second against the peaks: "compute" or "memory" when it reaches
// at least 20 % of that limit (the larger fraction wins), else "latency" (far below both: launch- or
// latency-bound). "" when the peaks are unknown.
std::string bound_kind(const DevicePeaks& peaks, double flops_per_s, double bytes_per_s, bool tensor_core);
