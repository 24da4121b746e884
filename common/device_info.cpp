// common/device_info.cpp — see device_info.h.
#include "common/device_info.h"

#include <cstdio>
#include <cstdlib>

#include "common/launch.h"

void require_device_or_exit(const char* program) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        std::fprintf(stderr,
                     "%s: no CUDA device found (%s). This is the cuda build; on a machine without an NVIDIA GPU "
                     "run the cpu build instead (make run picks it automatically).\n",
                     program, status != cudaSuccess ? cudaGetErrorString(status) : "device count is 0");
        std::exit(EXIT_FAILURE);
    }
}

std::string device_summary() {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
#if defined(CUDA_TEACH_CPU)
    return std::string(prop.name) + ", no GPU: timings are CPU timings";
#endif
    int driver = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    char line[512];
    std::snprintf(line, sizeof line, "%s (sm_%d%d, %d SMs, %.1f GiB, driver %d.%d)", prop.name, prop.major, prop.minor,
                  prop.multiProcessorCount, prop.totalGlobalMem / double(1u << 30), driver / 1000,
                  (driver % 1000) / 10);
    return line;
}
