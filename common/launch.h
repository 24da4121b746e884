// common/launch.h — the one include a kernel file, a lesson or a test needs.
//
// defines: the CUDA runtime API (real, or the CPU backend's subset with the same names), CUDA_CHECK(call),
//          BACKEND_NAME and the device builtins (__syncthreads, __shfl_*_sync, ...); for the backend's own tests,
//          launch(kernel, grid, block, shared_bytes, stream, args...), try_launch(...) and dynamic_shared<T>().
//
// Kernels are launched as CUDA writes it, `kernel<<<grid, block, shared_bytes, stream>>>(args...);` then
// `CUDA_CHECK(cudaGetLastError());`, in both flavors built from the same source:
//   cuda — compiled by nvcc;
//   cpu  — compiled by the host C++ compiler (CUDA_TEACH_CPU is defined) after tools/cuda_cpu_translate.py has
//          turned each <<<>>> into a launch on the CPU execution backend in common/cpu_backend/: one fiber per
//          CUDA thread, a block on one OS thread.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>  // before any CUDA header: its __noinline__ macro breaks libstdc++'s shared_ptr_base.h
#include <utility>

#if defined(CUDA_TEACH_CPU)
#include "common/cpu_backend/runtime.h"
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#endif

#include "common/launch_grid.h"

// Every CUDA call is checked: on failure print the call, where it was made, the error's name and text, and exit.
// A learner sees `CUDA error cudaErrorMemoryAllocation (out of memory) at lesson.cu:42: cudaMalloc(&p, bytes)`
// instead of garbage three kernels later.
#define CUDA_CHECK(call) ::cuda_teach::cuda_check((call), #call, __FILE__, __LINE__)

// The project's helpers live in namespace cuda_teach, so that a file's own ceil_div, launch... cannot clash.
namespace cuda_teach {

inline void cuda_check(cudaError_t status, const char* what, const char* file, int line) {
    if (status == cudaSuccess) return;
    std::fprintf(stderr, "CUDA error %s (%s) at %s:%d: %s\n", cudaGetErrorName(status), cudaGetErrorString(status),
                 file, line, what);
#if !defined(CUDA_TEACH_CPU)
    if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {  // (no driver at all reads as the 2nd)
        std::fprintf(
            stderr,
            "  No usable CUDA GPU here: this is the cuda build. The cpu build runs the same program on the CPU "
            "backend, no GPU needed: the executable of the same name under build/cpu/ (`make cpu`).\n");
    }
#endif
    std::exit(EXIT_FAILURE);
}

}  // namespace cuda_teach

#if defined(CUDA_TEACH_CPU)
inline constexpr const char* BACKEND_NAME = "cpu";
#else
inline constexpr const char* BACKEND_NAME = "cuda";
#endif

// The launch functions exist where kernels can be launched: in the cpu flavor, and in files nvcc compiles (a .cpp
// file of the cuda flavor is compiled by the host compiler, which has no <<< >>>).
namespace cuda_teach {

#if defined(CUDA_TEACH_CPU) || defined(__CUDACC__)
// try_launch(kernel, grid, block, shared_bytes, stream, args...) launches and returns the launch error — for code
// that handles a bad configuration itself. It is a function template rather than a macro so that the arguments are
// converted to the kernel's parameter types exactly as a call would convert them, and so the CPU backend can run
// the same kernel.
template <typename... KernelParams, typename... Args>
[[nodiscard]] cudaError_t try_launch(void (*kernel)(KernelParams...), LaunchGrid grid, dim3 block, size_t shared_bytes,
                                     cudaStream_t stream, Args&&... args) {
    static_assert(sizeof...(KernelParams) == sizeof...(Args), "launch: wrong number of kernel arguments");
#if defined(CUDA_TEACH_CPU)
    cpu_backend::launch_kernel(kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
#else
    kernel<<<grid.dims, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#endif
    return cudaGetLastError();
}

// launch(kernel, grid, block, shared_bytes, stream, args...) stands for
//     kernel<<<grid, block, shared_bytes, stream>>>(args...);  CUDA_CHECK(cudaGetLastError());
// and a failed launch (too many threads, too much shared memory) is reported at the line that called launch().
template <typename... KernelParams, typename... Args>
void launch(void (*kernel)(KernelParams...), LaunchGrid grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            Args&&... args) {
    cuda_check(try_launch(kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...),
               "kernel launch (bad configuration?)", grid.file, grid.line);
}
#endif

// Dynamic shared memory, one spelling for both flavors:  float* tile = dynamic_shared<float>();
// (`extern __shared__ float tile[];` cannot be expressed on the CPU, so kernels use this instead.)
#if defined(CUDA_TEACH_CPU)
template <typename T>
inline T* dynamic_shared() {
    return reinterpret_cast<T*>(cpu_backend::dynamic_shared_memory());
}
#elif defined(__CUDACC__)
template <typename T>
__device__ __forceinline__ T* dynamic_shared() {
    extern __shared__ __align__(16) unsigned char dynamic_shared_bytes[];
    return reinterpret_cast<T*>(dynamic_shared_bytes);
}
#endif

// Ceiling division, for grid sizes: blocks needed to cover n items with `per_block` items each.
template <typename T>
__host__ __device__ constexpr T ceil_div(T n, T per_block) {
    return (n + per_block - 1) / per_block;
}

}  // namespace cuda_teach
