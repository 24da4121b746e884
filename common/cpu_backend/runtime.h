// common/cpu_backend/runtime.h — the CPU execution backend: CUDA's kernel language and runtime API, run on a CPU.
//
// Included (through common/launch.h) instead of <cuda_runtime.h> when the cpu flavor is built. The same kernel
// source then compiles with the host C++ compiler and runs here:
//   - every CUDA thread is a fiber (Boost.Context); a block runs wholly on one OS thread, so __syncthreads is a
//     fiber switch and `__shared__` is a `static thread_local` (one copy per worker, one block at a time);
//   - a block whose thread 0 finishes without reaching any barrier or warp collective runs the rest of its threads
//     as a plain loop (the barrier-free fast path): no fibers, a few ns per thread;
//   - warp collectives (__shfl_*_sync, __ballot_sync, __syncwarp, mma, ldmatrix) post each lane's input and yield;
//     once every live lane of the mask has arrived the scheduler computes all results at once, with the PTX rules;
//   - the host API is synchronous by default: a launch runs to completion, async copies are memcpy, events read the
//     host clock. With CUDA_CPU_ASYNC=1 each stream is a queue run by its own worker thread (streams.cpp), so calls
//     return before their work runs and a missing wait gives wrong results, as on a GPU.
// Environment: CUDA_CPU_WORKERS (OS threads running blocks, default 1: deterministic), CUDA_CPU_FUZZ=<seed>
// (shuffle fiber order between sync points and the order of blocks, to expose missing barriers; in asynchronous mode
// also delay each stream's work by seeded random amounts), CUDA_CPU_ASYNC (0 or 1), CUDA_CPU_MEMORY (emulated device
// memory capacity, e.g. 512M or 8G, default 8G or half the host's RAM), CUDA_CPU_STACK_KB (fiber stack size).
// The race build (-DRACECHECK=ON, `make test-race`) runs every CUDA thread on a fiber under ThreadSanitizer: see
// scheduler.cpp.
#pragma once

// libstdc++'s shared_ptr_base.h writes __attribute__((__noinline__)), which CUDA's __noinline__ macro would break:
// include it before any CUDA header, so a standard header included after this one still compiles.
#include <memory>

// CUDA's own headers next: they define __half, dim3, float4, cudaError_t, cudaDeviceProp... (plain host code), but
// crt/host_defines.h also defines __shared__ and friends as nothing under g++, which would silently turn a shared
// tile into a per-thread local array. So include them, then redefine the qualifiers below.
#include <cuda_fp16.h>
#include <driver_types.h>
#include <vector_functions.h>
#include <vector_types.h>

#include "common/launch_grid.h"

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <array>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __grid_constant__

// The sanitizer build gives every kernel internal linkage: a function-local static of a template instantiation with
// external linkage (a GNU-unique COMDAT symbol) gets no redzones from GCC's AddressSanitizer, so an out-of-bounds
// access to `__shared__` in a template kernel (every GEMM, softmax, ...) would pass unseen. Internal, it is an
// ordinary local static with redzones. (A kernel that is already internal is written in an anonymous namespace, not
// `static __global__`, which would read `static static` here.)
// `unused`: a kernel that a file defines but does not launch is not a warning (nvcc gives none; and g++ does not
// see the use of one named only in a <<<>>> launch of a template that this file does not instantiate).
#if defined(CUDA_TEACH_SANITIZE)
#define __global__ static __attribute__((unused))
#else
#define __global__ __attribute__((unused))
#endif
#define __device__
#define __host__
#define __constant__ static
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
// One copy per worker thread, and a worker runs one block at a time: exactly the lifetime of shared memory.
// AddressSanitizer does not instrument thread-locals, so the sanitizer build (one worker) uses plain statics. So does
// the race build, as GCC's ThreadSanitizer does not instrument them either; there each starts on a page of its own,
// so that the backend can reset TSan's view of it between blocks by remapping the page (static_shared.cpp).
#if defined(CUDA_TEACH_RACECHECK)
#define __shared__ static __attribute__((aligned(4096)))
#elif defined(CUDA_TEACH_SANITIZE)
#define __shared__ static
#else
#define __shared__ static thread_local
#endif

// ---------------------------------------------------------------------------------------------------------------
// Thread and block coordinates. The scheduler sets them before it runs or resumes a CUDA thread.
// (uint3 rather than dim3 for all four: `constinit` lets the compiler read them with one TLS load, no init guard.)
extern thread_local constinit uint3 threadIdx;
extern thread_local constinit uint3 blockIdx;
extern thread_local constinit uint3 blockDim;
extern thread_local constinit uint3 gridDim;
inline constexpr int warpSize = 32;

namespace cpu_backend {

// --- the scheduler (scheduler.cpp) -----------------------------------------------------------------------------

// A kernel bound to its arguments: `run` calls the kernel once for the current CUDA thread.
struct KernelInvocation {
    void (*run)(const void* bound_kernel);
    const void* bound_kernel;
    const void* kernel_address;  // identifies the kernel (cudaFuncSetAttribute)
    // A heap copy of bound_kernel and its release: asynchronous mode runs the kernel after launch() has returned.
    const void* (*clone)(const void* bound_kernel);
    void (*destroy)(const void* bound_kernel);
    const char* launch_file;  // where launch() was called
    int launch_line;
    const char* launch_function;
    // Each argument that is a pointer (null for the others): their buffers' canaries are checked as the grid ends.
    const void* const* pointer_arguments = nullptr;
    unsigned argument_count = 0;
    const char* kernel_text =
        nullptr;               // the kernel as a <<<>>> launch spelled it (named when its address is not known)
    bool cooperative = false;  // cudaLaunchCooperativeKernel: every block runs at once, grid.sync() allowed
};

// Validates the configuration (sets the last error like CUDA does, and returns it), then runs every block to
// completion (in asynchronous mode: queues the grid on the stream).
cudaError_t run_grid(const KernelInvocation& kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream);

// This worker's dynamic shared memory for the block being run (what `extern __shared__ T s[]` names on a GPU).
unsigned char* dynamic_shared_memory();

// Block barrier: every thread of the block must reach the same call site.
void syncthreads(std::source_location site);

// Grid barrier (cooperative_groups::this_grid().sync()): every thread of every block must reach the same call site;
// only in a cooperative launch, whose blocks all run at once (each on an OS thread of its own).
void grid_sync(std::source_location site);
bool in_cooperative_launch();

// Warp collectives. Each lane posts its buffers and waits until every live lane named in `mask` has arrived at the
// same collective; then `combine` runs once with all lanes' slots (lanes[l].in is nullptr for a lane that exited)
// and each lane returns with its output written.
struct WarpLaneSlot {
    const void* in;
    void* out;
};
using WarpCombine = void (*)(WarpLaneSlot* lanes, unsigned mask);
void warp_collective(unsigned mask, WarpCombine combine, const void* in, void* out,
                     std::source_location site = std::source_location::current());

// Aborts the program with the kernel, block and thread that did something a GPU would not survive.
[[noreturn]] void kernel_fault(const char* what);

// --- launch ----------------------------------------------------------------------------------------------------

template <typename... KernelParams>
struct BoundKernel {
    void (*kernel)(KernelParams...);
    std::tuple<std::decay_t<KernelParams>...> args;  // one copy of the arguments, like CUDA's parameter space

    static void run(const void* self) {
        const auto& bound = *static_cast<const BoundKernel*>(self);
        std::apply(bound.kernel, bound.args);  // each thread gets its own copy of every by-value parameter
    }
    static const void* clone(const void* self) { return new BoundKernel(*static_cast<const BoundKernel*>(self)); }
    static void destroy(const void* self) { delete static_cast<const BoundKernel*>(self); }
};

// A pointer argument must point into memory a GPU can reach: a cudaMalloc'd buffer (or one past its end), pinned
// host memory, or null. Anything else is pageable host memory, which a kernel on a GPU cannot dereference: the
// program stops here with the argument and the launch site (host_api.cpp).
void check_kernel_pointer(const void* pointer, unsigned argument, const KernelInvocation& kernel);

template <typename T>
void check_kernel_argument(const T& value, unsigned argument, const KernelInvocation& kernel) {
    if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>)
        check_kernel_pointer((const void*)value, argument, kernel);  // C-style: drops const and volatile
}

template <typename T>
const void* pointer_argument(const T& value) {
    if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>)
        return (const void*)value;
    else
        return nullptr;
}

// Builds the invocation of a bound kernel (its pointer arguments checked) and runs or queues the grid.
template <typename Bound>
cudaError_t launch_bound_kernel(const Bound& bound, const void* kernel_address, const char* kernel_text,
                                const char* file, int line, const char* function, dim3 grid, dim3 block,
                                size_t shared_bytes, cudaStream_t stream, bool cooperative = false) {
    constexpr size_t argument_count = std::tuple_size_v<decltype(bound.args)>;
    std::array<const void*, argument_count> pointers{};
    const KernelInvocation invocation{
        &Bound::run, &bound,          kernel_address,           &Bound::clone, &Bound::destroy, file, line,
        function,    pointers.data(), unsigned(argument_count), kernel_text,   cooperative};
    std::apply(
        [&invocation, &pointers](const auto&... value) {
            unsigned argument = 0;
            ((pointers[argument] = pointer_argument(value), check_kernel_argument(value, argument, invocation),
              ++argument),
             ...);
        },
        bound.args);
    return run_grid(invocation, grid, block, shared_bytes, stream);
}

template <typename... KernelParams, typename... Args>
void launch_kernel(void (*kernel)(KernelParams...), const LaunchGrid& grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, Args&&... args) {
    const BoundKernel<KernelParams...> bound{kernel, {std::forward<Args>(args)...}};
    launch_bound_kernel(bound, reinterpret_cast<const void*>(kernel), nullptr, grid.file, grid.line, grid.function,
                        grid.dims, block, shared_bytes, stream);
}

// --- Launches written as <<<>>> ------------------------------------------------------------------------------------
// The cpu flavor compiles `kernel<<<grid, block, shared_bytes, stream>>>(args...)` after
// tools/cuda_cpu_translate.py has rewritten it into a call of launch_from_source (the translated files are under
// build/cpu/cuda_cpu_translated/). Like CUDA, the arguments are evaluated once and converted to the kernel's
// parameter types (so NULL or 0 passes as a pointer), and a template kernel may deduce its template arguments from
// them. The kernel expression is used in one of three ways, whichever compiles first:
//   1. it names one function (a kernel, kernel<T, 4>, a function pointer) and the arguments convert to its
//      parameters: single_kernel() takes its address;
//   2. it names a template or an overload set whose member taking exactly the arguments' types is a kernel;
//   3. otherwise each CUDA thread calls it with the arguments, so overload resolution, deduction and default
//      arguments are a call's.

// Where a launch was written and the kernel as it was spelled there.
struct LaunchSite {
    const char* file;
    int line;
    const char* function;
    const char* kernel_text;
};

// <<<grid, block, shared_bytes, stream>>>: what a launch configuration converts from in CUDA.
struct LaunchConfig {
    dim3 grid;
    dim3 block;
    size_t shared_bytes;
    cudaStream_t stream;
    LaunchConfig(dim3 grid_, dim3 block_, size_t shared_bytes_ = 0, cudaStream_t stream_ = nullptr)
        : grid(grid_), block(block_), shared_bytes(shared_bytes_), stream(stream_) {}
};

// Compiles only for an expression naming a single function (Tag makes the call dependent, so that elsewhere it is
// a substitution failure the translation's `requires` can test rather than an error).
template <typename Tag, typename... KernelParams>
constexpr auto single_kernel(void (*kernel)(KernelParams...)) {
    return kernel;
}

// A kernel's arguments converted to its parameter types, as a call converts them.
template <typename KernelPointer>
struct KernelArguments;
template <typename... KernelParams>
struct KernelArguments<void (*)(KernelParams...)> {
    std::tuple<std::decay_t<KernelParams>...> values;
    KernelArguments(std::decay_t<KernelParams>... arguments) : values(std::move(arguments)...) {}
};

template <typename... KernelParams>
struct BoundFromSource {
    BoundKernel<KernelParams...> bound;
    const void* address;
};

template <typename... KernelParams>
BoundFromSource<KernelParams...> bind_kernel(void (*kernel)(KernelParams...),
                                             KernelArguments<void (*)(KernelParams...)>&& arguments) {
    return {{kernel, std::move(arguments.values)}, reinterpret_cast<const void*>(kernel)};
}

// Case 3: the arguments as evaluated (decayed copies), and a callable that calls the kernel with them.
template <typename Call, typename... Args>
struct CalledKernel {
    Call call;
    std::tuple<Args...> args;

    static void run(const void* self) {
        auto bound = *static_cast<const CalledKernel*>(self);  // each thread gets its own copy of every argument
        std::apply(bound.call, bound.args);
    }
    static const void* clone(const void* self) { return new CalledKernel(*static_cast<const CalledKernel*>(self)); }
    static void destroy(const void* self) { delete static_cast<const CalledKernel*>(self); }
};
template <typename Call, typename... Args>
struct CalledFromSource {
    CalledKernel<Call, Args...> bound;
    const void* address = nullptr;
};

// Cases 2 and 3: `kernel_of_types.template operator()<A...>()` gives the kernel taking exactly A... (or nullptr).
// named_kernel: the kernel's address where the expression names one function whose arguments case 1 could not
// convert (a kernel with default arguments the launch leaves out, which only a call fills in), else nullptr; the
// launch finds the kernel's static __shared__ variables and attributes by it.
template <typename KernelOfTypes, typename Call, typename... Args>
auto bind_deduced_kernel(const void* named_kernel, KernelOfTypes kernel_of_types, Call call, Args&&... args) {
    using Found = decltype(kernel_of_types.template operator()<std::decay_t<Args>...>());
    if constexpr (!std::is_null_pointer_v<Found>) {
        const Found kernel = kernel_of_types.template operator()<std::decay_t<Args>...>();
        return BoundFromSource<std::decay_t<Args>...>{{kernel, {std::forward<Args>(args)...}},
                                                      reinterpret_cast<const void*>(kernel)};
    } else
        return CalledFromSource<Call, std::decay_t<Args>...>{{call, {std::forward<Args>(args)...}}, named_kernel};
}

template <typename Bound>
void launch_from_source(const LaunchSite& site, const LaunchConfig& config, const Bound& bound) {
    launch_bound_kernel(bound.bound, bound.address, site.kernel_text, site.file, site.line, site.function, config.grid,
                        config.block, config.shared_bytes, config.stream);
}

// `extern __shared__ T name[];` at namespace scope: the name stands for the running block's dynamic shared memory.
template <typename T>
struct DynamicShared {
    T* get() const { return reinterpret_cast<T*>(dynamic_shared_memory()); }
    operator T*() const { return get(); }
    T& operator[](size_t i) const { return get()[i]; }
};

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);

// Schedule fuzzing (what CUDA_CPU_FUZZ=<seed> turns on): shuffles the order in which fibers run between sync
// points, and the order of threads on the fast path, so a missing barrier shows up as a wrong result.
void set_schedule_fuzzing(bool enabled, uint64_t seed = 0);

// Asynchronous streams (what CUDA_CPU_ASYNC=1 turns on): each stream's work runs in order on its own worker thread
// and calls return before it runs. Switching off first waits for all queued work.
void set_async_streams(bool enabled);
bool async_streams();
// In asynchronous mode, sleep a seeded random 0–2 ms before each stream item (CUDA_CPU_FUZZ=<seed> turns it on
// together with schedule fuzzing); the same seed gives each stream the same delays.
void set_stream_fuzzing(bool enabled, uint64_t seed = 0);
// In asynchronous mode, the late schedule (what CUDA_CPU_ASYNC=late turns on): every item runs only once something
// waits for it, and a copy's or memset's destination holds poison from when it could start until it runs.
void set_late_schedule(bool enabled);
bool late_schedule_enabled();

// The emulated device memory when CUDA_CPU_MEMORY is not set, for a host with this much RAM.
size_t default_device_capacity(size_t host_ram_bytes);

}  // namespace cpu_backend

// ---------------------------------------------------------------------------------------------------------------
// Host API: CUDA's own cuda_runtime_api.h (pulled in by vector_functions.h above) declares the runtime functions
// with their exact signatures; host_api.cpp defines the subset this project uses: device queries, cudaMalloc/Free,
// pinned host memory, copies and memsets, streams, events, errors. Anything else fails to link, naming the function.
// cuda_runtime.h's C++ convenience overloads: typed pointers, and the kernel itself.
namespace cpu_backend {
// cudaMalloc, remembering where it was called (named when a kernel writes out of the buffer's bounds).
cudaError_t device_malloc(void** ptr, size_t bytes, const char* file, int line);
}  // namespace cpu_backend
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes, std::source_location site = std::source_location::current()) {
    return cpu_backend::device_malloc(reinterpret_cast<void**>(ptr), bytes, site.file_name(), int(site.line()));
}
template <typename T>
cudaError_t cudaMallocHost(T** ptr, size_t bytes, unsigned int flags = 0) {
    return cudaHostAlloc(reinterpret_cast<void**>(ptr), bytes, flags);
}
template <typename T>
cudaError_t cudaHostAlloc(T** ptr, size_t bytes, unsigned int flags) {
    return cudaHostAlloc(reinterpret_cast<void**>(ptr), bytes, flags);
}
inline cudaError_t cudaEventCreate(cudaEvent_t* event, unsigned int flags) {
    return cudaEventCreateWithFlags(event, flags);
}
template <typename... KernelParams>
cudaError_t cudaFuncSetAttribute(void (*kernel)(KernelParams...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);  // host_api.cpp
}
template <typename... KernelParams>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, void (*kernel)(KernelParams...)) {
    return cudaFuncGetAttributes(attributes, reinterpret_cast<const void*>(kernel));  // host_api.cpp
}
// An estimate from threads and shared memory only (host_api.cpp says how).
template <typename... KernelParams>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, void (*kernel)(KernelParams...), int block_size,
                                                          size_t dynamic_shared_bytes) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, reinterpret_cast<const void*>(kernel), block_size,
                                                         dynamic_shared_bytes);
}
// Launches with an array of argument addresses (args[i] points at the i-th parameter's value, as CUDA copies it):
// the kernel's own type says how many and of what type. A cooperative launch runs every block at once, so that
// this_grid().sync() can wait for all of them; it fails with cudaErrorCooperativeLaunchTooLarge when the grid has more
// blocks than the device holds at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor × multiProcessorCount).
// tools/cuda_cpu_translate.py drops a `(void *)` cast of the kernel in these calls: the backend needs its type.
namespace cpu_backend {
template <typename... KernelParams, size_t... I>
cudaError_t launch_with_argument_array(void (*kernel)(KernelParams...), dim3 grid, dim3 block, void** args,
                                       size_t shared_bytes, cudaStream_t stream, bool cooperative,
                                       const std::source_location& site, std::index_sequence<I...>) {
    if (!kernel || (sizeof...(KernelParams) > 0 && !args)) return cudaErrorInvalidValue;
    const BoundKernel<KernelParams...> bound{kernel, {*static_cast<const std::decay_t<KernelParams>*>(args[I])...}};
    return launch_bound_kernel(bound, reinterpret_cast<const void*>(kernel), nullptr, site.file_name(),
                               int(site.line()), site.function_name(), grid, block, shared_bytes, stream, cooperative);
}
}  // namespace cpu_backend
template <typename... KernelParams>
cudaError_t cudaLaunchCooperativeKernel(void (*kernel)(KernelParams...), dim3 grid, dim3 block, void** args,
                                        size_t shared_bytes = 0, cudaStream_t stream = nullptr,
                                        std::source_location site = std::source_location::current()) {
    return cpu_backend::launch_with_argument_array(kernel, grid, block, args, shared_bytes, stream, true, site,
                                                   std::index_sequence_for<KernelParams...>{});
}
template <typename... KernelParams>
cudaError_t cudaLaunchKernel(void (*kernel)(KernelParams...), dim3 grid, dim3 block, void** args,
                             size_t shared_bytes = 0, cudaStream_t stream = nullptr,
                             std::source_location site = std::source_location::current()) {
    return cpu_backend::launch_with_argument_array(kernel, grid, block, args, shared_bytes, stream, false, site,
                                                   std::index_sequence_for<KernelParams...>{});
}
// __constant__ and __device__ variables are ordinary host variables here: a copy to or from one is a memcpy, after
// the work already queued has finished (as the legacy default stream orders it). count + offset must fit the symbol.
template <typename T>
cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* source, size_t count, size_t offset = 0,
                               cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    if (!source || offset + count > sizeof(T) || kind == cudaMemcpyDeviceToHost) return cudaErrorInvalidValue;
    if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return e;
    std::memcpy(reinterpret_cast<unsigned char*>(const_cast<T*>(&symbol)) + offset, source, count);
    return cudaSuccess;
}
template <typename T>
cudaError_t cudaMemcpyFromSymbol(void* destination, const T& symbol, size_t count, size_t offset = 0,
                                 cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    if (!destination || offset + count > sizeof(T) || kind == cudaMemcpyHostToDevice) return cudaErrorInvalidValue;
    if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return e;
    std::memcpy(destination, reinterpret_cast<const unsigned char*>(&symbol) + offset, count);
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------------------------
// Device builtins.
inline void __syncthreads(std::source_location site = std::source_location::current()) {
    cpu_backend::syncthreads(site);
}
void __syncwarp(unsigned mask = 0xffffffffu, std::source_location site = std::source_location::current());
unsigned __ballot_sync(unsigned mask, int predicate, std::source_location site = std::source_location::current());
int __any_sync(unsigned mask, int predicate, std::source_location site = std::source_location::current());
int __all_sync(unsigned mask, int predicate, std::source_location site = std::source_location::current());
unsigned __activemask();

namespace cpu_backend {
enum class ShuffleMode : int { idx, up, down, bfly };
// One lane's part of a shuffle: its value's bits and the b/c operands of PTX shfl.sync (see shuffle_source_lane).
struct ShuffleRequest {
    uint64_t bits;
    ShuffleMode mode;
    int lane_operand;
    int clamp;  // c: segment mask in bits 8..12, clamp lane in bits 0..4
};
uint64_t shuffle(unsigned mask, const ShuffleRequest& request, std::source_location site);

template <typename T>
T shuffle_value(unsigned mask, T value, ShuffleMode mode, int lane_operand, int width, std::source_location site) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move at most 8 bytes");
    ShuffleRequest request{0, mode, lane_operand, 0};
    std::memcpy(&request.bits, &value, sizeof(T));
    // CUDA's own encoding of `width` into the c operand (cuda's sm_30_intrinsics.hpp): up clamps at the segment's
    // first lane, the others at its last lane.
    const int segment_mask = (warpSize - width) << 8;
    request.clamp = mode == ShuffleMode::up ? segment_mask : (segment_mask | 0x1f);
    const uint64_t bits = shuffle(mask, request, site);
    T result;
    std::memcpy(static_cast<void*>(&result), &bits, sizeof(T));  // (void*: __half has a user-declared copy)
    return result;
}
}  // namespace cpu_backend

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,
              std::source_location site = std::source_location::current()) {
    return cpu_backend::shuffle_value(mask, var, cpu_backend::ShuffleMode::idx, src_lane, width, site);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 std::source_location site = std::source_location::current()) {
    return cpu_backend::shuffle_value(mask, var, cpu_backend::ShuffleMode::up, int(delta), width, site);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   std::source_location site = std::source_location::current()) {
    return cpu_backend::shuffle_value(mask, var, cpu_backend::ShuffleMode::down, int(delta), width, site);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,
                  std::source_location site = std::source_location::current()) {
    return cpu_backend::shuffle_value(mask, var, cpu_backend::ShuffleMode::bfly, lane_mask, width, site);
}

// Atomics: real atomic read-modify-writes, because blocks may run on several workers at once.
inline int atomicAdd(int* address, int value) {
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
inline unsigned atomicAdd(unsigned* address, unsigned value) {
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
template <typename F>
F atomic_float_update(F* address, F value, F (*op)(F, F)) {
    using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
    Bits* bits_address = reinterpret_cast<Bits*>(address);
    Bits expected = __atomic_load_n(bits_address, __ATOMIC_RELAXED);
    for (;;) {
        const Bits desired = std::bit_cast<Bits>(op(std::bit_cast<F>(expected), value));
        if (__atomic_compare_exchange_n(bits_address, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return std::bit_cast<F>(expected);
    }
}
inline float atomicAdd(float* address, float value) {
    return atomic_float_update<float>(address, value, [](float a, float b) { return a + b; });
}
inline double atomicAdd(double* address, double value) {
    return atomic_float_update<double>(address, value, [](double a, double b) { return a + b; });
}
inline int atomicSub(int* address, int value) {
    return __atomic_fetch_sub(address, value, __ATOMIC_RELAXED);
}
template <typename T, typename Op>
T atomic_integer_update(T* address, T value, Op op) {
    T expected = __atomic_load_n(address, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(address, &expected, op(expected, value), false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
    return expected;
}
inline int atomicMax(int* address, int value) {
    return atomic_integer_update(address, value, [](int a, int b) { return a > b ? a : b; });
}
inline unsigned atomicMax(unsigned* address, unsigned value) {
    return atomic_integer_update(address, value, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
inline int atomicMin(int* address, int value) {
    return atomic_integer_update(address, value, [](int a, int b) { return a < b ? a : b; });
}
inline int atomicExch(int* address, int value) {
    return __atomic_exchange_n(address, value, __ATOMIC_RELAXED);
}
inline unsigned atomicExch(unsigned* address, unsigned value) {
    return __atomic_exchange_n(address, value, __ATOMIC_RELAXED);
}
inline float atomicExch(float* address, float value) {
    return std::bit_cast<float>(
        __atomic_exchange_n(reinterpret_cast<uint32_t*>(address), std::bit_cast<uint32_t>(value), __ATOMIC_RELAXED));
}
template <typename T>
T atomic_compare_and_swap(T* address, T compare, T value) {
    __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;  // the old value, whether or not the swap happened
}
inline int atomicCAS(int* address, int compare, int value) {
    return atomic_compare_and_swap(address, compare, value);
}
inline unsigned atomicCAS(unsigned* address, unsigned compare, unsigned value) {
    return atomic_compare_and_swap(address, compare, value);
}
inline unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare, unsigned long long value) {
    return atomic_compare_and_swap(address, compare, value);
}
inline void __threadfence() {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
inline void __threadfence_block() {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

// atomicInc / atomicDec: CUDA's wrapping counters. atomicInc stores ((old >= limit) ? 0 : old + 1), atomicDec
// stores ((old == 0 || old > limit) ? limit : old - 1); both return old.
inline unsigned atomicInc(unsigned* address, unsigned limit) {
    return atomic_integer_update(address, limit, [](unsigned old, unsigned l) { return old >= l ? 0u : old + 1; });
}
inline unsigned atomicDec(unsigned* address, unsigned limit) {
    return atomic_integer_update(address, limit,
                                 [](unsigned old, unsigned l) { return (old == 0 || old > l) ? l : old - 1; });
}
inline unsigned short atomicCAS(unsigned short* address, unsigned short compare, unsigned short value) {
    return atomic_compare_and_swap(address, compare, value);  // sm_70 and later
}

// __trap(): the kernel stops with a fault (a GPU reports cudaErrorLaunchFailure; here: which thread, and stop).
[[noreturn]] inline void __trap(std::source_location site = std::source_location::current()) {
    char what[512];
    std::snprintf(what, sizeof what, "__trap() was called at %s:%u (in %s)", site.file_name(), unsigned(site.line()),
                  site.function_name());
    cpu_backend::kernel_fault(what);
}

// Loads and stores with cache hints (__ldg: read-only cache; __ldca/__ldcg/__ldcs/__ldlu/__ldcv: cache all levels,
// L2 only, streaming, last use, volatile; __stwb/__stcg/__stcs/__stwt: write-back, L2 only, streaming,
// write-through). The hint changes where a GPU keeps the line, never the value: here each is a plain load or store.
// (One template covers every type CUDA declares them for: char...long long, their unsigned and vector types,
// float, double, __half, __half2.)
template <typename T>
T __ldg(const T* address) {
    return *address;
}
template <typename T>
T __ldca(const T* address) {
    return *address;
}
template <typename T>
T __ldcg(const T* address) {
    return *address;
}
template <typename T>
T __ldcs(const T* address) {
    return *address;
}
template <typename T>
T __ldlu(const T* address) {
    return *address;
}
template <typename T>
T __ldcv(const T* address) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST);  // fetched again on every use: not cached in a register across it
    return *address;
}
template <typename T>
void __stwb(T* address, T value) {
    *address = value;
}
template <typename T>
void __stcg(T* address, T value) {
    *address = value;
}
template <typename T>
void __stcs(T* address, T value) {
    *address = value;
}
template <typename T>
void __stwt(T* address, T value) {
    *address = value;
}
inline int __float_as_int(float x) {
    return std::bit_cast<int>(x);
}
inline unsigned __float_as_uint(float x) {
    return std::bit_cast<unsigned>(x);
}
inline float __int_as_float(int x) {
    return std::bit_cast<float>(x);
}
inline float __uint_as_float(unsigned x) {
    return std::bit_cast<float>(x);
}
inline int __popc(unsigned x) {
    return std::popcount(x);
}
inline int __popcll(unsigned long long x) {
    return std::popcount(x);
}
inline int __clz(int x) {
    return std::countl_zero(static_cast<unsigned>(x));
}
inline int __ffs(int x) {
    return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1;
}
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) {
    return unsigned((uint64_t(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}

// Math: the fast intrinsics are exact here (a GPU's are approximate: compare with tolerances).
inline float __expf(float x) {
    return std::exp(x);
}
inline float __logf(float x) {
    return std::log(x);
}
inline float __powf(float x, float y) {
    return std::pow(x, y);
}
inline float __fdividef(float x, float y) {
    return x / y;
}
inline float __frcp_rn(float x) {
    return 1.0f / x;
}
inline float __fsqrt_rn(float x) {
    return std::sqrt(x);
}
inline float __fadd_rn(float a, float b) {
    return a + b;
}
inline float __fmul_rn(float a, float b) {
    return a * b;
}
inline float __fmaf_rn(float a, float b, float c) {
    return std::fma(a, b, c);
}
inline float rsqrtf(float x) {
    return 1.0f / std::sqrt(x);
}
inline float __saturatef(float x) {
    return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x != x ? 0.0f : x));
}
// min/max as CUDA's math_functions.hpp provides them, mixed argument types included: integers meet in their common
// type (int with unsigned gives unsigned, as in CUDA), floating point goes through fmin/fmax.
template <typename A, typename B>
requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
inline std::common_type_t<A, B> min(A a, B b) {
    using T = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<T>)
        return std::fmin(T(a), T(b));
    else
        return T(a) < T(b) ? T(a) : T(b);
}
template <typename A, typename B>
requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
inline std::common_type_t<A, B> max(A a, B b) {
    using T = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point_v<T>)
        return std::fmax(T(a), T(b));
    else
        return T(a) > T(b) ? T(a) : T(b);
}
// expf, logf, fmaxf, sqrtf, fmaf, ... come from <math.h> in the global namespace, as in device code; the rest of
// CUDA's math API, integer intrinsics, atomics and host calls from runtime_extra.h.
#include "common/cpu_backend/runtime_extra.h"

#if __has_include("common/cpu_backend/fp16_host.h")
#include "common/cpu_backend/fp16_host.h"  // __hfma, hsqrt, hexp, ...: what cuda_fp16.h lacks on the host
#endif
