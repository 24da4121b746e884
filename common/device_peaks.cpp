// common/device_peaks.cpp — see device_peaks.h.
#include "common/device_peaks.h"

#include "common/launch.h"

namespace {

// Per SM and per clock. FP32: the CUDA Programming Guide's "Arithmetic Instructions" throughput table (32-bit
// floating-point add, multiply, multiply-add: 64 results per clock per SM for 7.x and 8.0, 128 for 8.6, 8.9 and
// 9.0). Tensor cores, dense FP16 in with FP32 accumulation: the architecture whitepapers' peak tables divided by
// SMs × boost clock — V100 (Volta whitepaper): 125 TFLOPS / (80 SMs × 1.53 GHz) = 1024 FLOPs = 512 FMA; A100
// (Ampere GA100 whitepaper): 312 TFLOPS / (108 × 1.41 GHz) = 2048 FLOPs = 1024 FMA; H100 SXM5 (Hopper
// whitepaper): 989.4 TFLOPS / (132 × 1.83 GHz) = 4096 FLOPs = 2048 FMA. Turing (7.5), and GeForce/workstation
// Ampere and Ada (8.6, 8.9), run FP32 accumulation at a rate that differs by product (half on GeForce), so their
// tensor figure is left out (0: no percentage, no MFU for tensor-core runs).
// The clock is the device's maximum (cudaDevAttrClockRate): the figure NVIDIA's FP32 peaks use. Its tensor peaks
// sometimes use a lower one (H100 SXM5: 1830 MHz against a 1980 MHz maximum), so a tensor-core peak here can be
// up to ~8 % above the published one, and an MFU that much lower.
constexpr ArchThroughput kTable[] = {
    {7, 0, 64, 512, "Volta whitepaper (V100); CUDA Programming Guide throughput table"},
    {7, 5, 64, 0, "CUDA Programming Guide throughput table (tensor rate with FP32 accumulation varies by product)"},
    {8, 0, 64, 1024, "Ampere GA100 whitepaper (A100); CUDA Programming Guide throughput table"},
    {8, 6, 128, 0, "CUDA Programming Guide throughput table (tensor rate varies by product)"},
    {8, 9, 128, 0, "CUDA Programming Guide throughput table (tensor rate varies by product)"},
    {9, 0, 128, 2048, "Hopper whitepaper (H100 SXM5); CUDA Programming Guide throughput table"},
};

}  // namespace

const ArchThroughput* arch_throughput(int major, int minor) {
    for (const ArchThroughput& row : kTable)
        if (row.major == major && row.minor == minor) return &row;
    return nullptr;
}

DevicePeaks peaks_for(int major, int minor, int sm_count, double sm_clock_khz, double memory_clock_khz,
                      int bus_width_bits) {
    DevicePeaks p;
    p.major = major;
    p.minor = minor;
    p.sm_count = sm_count;
    p.sm_clock_hz = sm_clock_khz * 1e3;
    p.memory_clock_hz = memory_clock_khz * 1e3;
    p.bus_width_bits = bus_width_bits;
    const ArchThroughput* arch = arch_throughput(major, minor);
    if (!arch) {
        p.why_unknown = "sm_" + std::to_string(major) + std::to_string(minor) +
                        " is not in common/device_peaks.cpp's table";
        return p;
    }
    if (sm_count <= 0 || sm_clock_khz <= 0 || memory_clock_khz <= 0 || bus_width_bits <= 0) {
        p.why_unknown = "the device did not report its clocks and bus width";
        return p;
    }
    p.known = true;
    p.fp32_flops = 2.0 * arch->fp32_fma_per_clock * sm_count * p.sm_clock_hz;
    p.fp16_tensor_flops = 2.0 * arch->fp16_tensor_fma_per_clock * sm_count * p.sm_clock_hz;
    p.dram_bytes_per_s = 2.0 * p.memory_clock_hz * bus_width_bits / 8.0;
    return p;
}

DevicePeaks query_device_peaks() {
#if defined(CUDA_TEACH_CPU)
    DevicePeaks p;
    p.why_unknown = "percentages of a limit need a GPU (this is the CPU backend)";
    return p;
#else
    int device = 0, major = 0, minor = 0, sms = 0, clock_khz = 0, memory_khz = 0, bus = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, device));
    return peaks_for(major, minor, sms, clock_khz, memory_khz, bus);
#endif
}

std::string bound_kind(const DevicePeaks& peaks, double flops_per_s, double bytes_per_s, bool tensor_core) {
    if (!peaks.known) return "";
    const double flop_peak = tensor_core && peaks.fp16_tensor_flops > 0 ? peaks.fp16_tensor_flops : peaks.fp32_flops;
    const double compute = flop_peak > 0 ? flops_per_s / flop_peak : 0.0;
    const double memory = peaks.dram_bytes_per_s > 0 ? bytes_per_s / peaks.dram_bytes_per_s : 0.0;
    if (compute < 0.2 && memory < 0.2) return "latency";
    return compute >= memory ? "compute" : "memory";
}
