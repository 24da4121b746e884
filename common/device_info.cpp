// common/device_info.cpp — see device_info.h.
#include "common/device_info.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "common/launch.h"

namespace {

// Where the cpu build of this same program is: build/cuda/bench/bench -> build/cpu/bench/bench (relative to the
// current directory when it can be), or "" when this executable is not in a tree named build/cuda.
std::string cpu_build_twin() {
    namespace fs = std::filesystem;
    std::error_code error;
    std::string path = fs::read_symlink("/proc/self/exe", error).string();
    const std::string cuda_tree = "/build/cuda/";
    const size_t at = path.rfind(cuda_tree);
    if (error || at == std::string::npos) return "";
    path.replace(at, cuda_tree.size(), "/build/cpu/");
    return fs::proximate(path, error).string();
}

}  // namespace

void require_device_or_exit(const char* program) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaSuccess && count > 0) return;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);  // 0 when no NVIDIA driver is installed
    cudaRuntimeGetVersion(&runtime);
    const char* detail = status != cudaSuccess ? cudaGetErrorName(status) : "0 devices";
    const std::string twin = cpu_build_twin();
    std::string cpu_program = "the program of the same name under build/cpu/";
    if (!twin.empty()) cpu_program = std::filesystem::exists(twin) ? twin : twin + " (`make cpu` builds it)";
    if (status == cudaErrorInsufficientDriver && driver > 0) {
        // A GPU may well be there, behind a driver older than the CUDA runtime this program was built with (and
        // `make run` would pick this build again, as nvidia-smi sees the GPU).
        std::fprintf(stderr,
                     "%s: the NVIDIA driver supports CUDA up to %d.%d, this cuda build needs %d.%d "
                     "(cudaGetDeviceCount: %s).\n  Update the driver or build with an older CUDA toolkit; until then "
                     "the cpu build runs the same program on the CPU backend: %s.\n",
                     program, driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10, detail,
                     cpu_program.c_str());
    } else {
        std::fprintf(stderr,
                     "%s: no CUDA GPU found (cudaGetDeviceCount: %s).\n  This is the cuda build; the cpu build runs "
                     "the same program on the CPU backend, no GPU needed: `make run` picks it automatically, or run "
                     "%s.\n",
                     program, detail, cpu_program.c_str());
    }
    std::exit(EXIT_FAILURE);
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
