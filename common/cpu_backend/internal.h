// common/cpu_backend/internal.h — shared between the CPU backend's scheduler and host API; not for kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/cpu_backend/runtime.h"

namespace cpu_backend {

inline constexpr size_t kDefaultSharedBytes = 48 * 1024;  // per block, without cudaFuncSetAttribute
inline constexpr size_t kMaxSharedBytes = 227 * 1024;     // per block, the opt-in maximum of sm_90

// Stores the error for cudaGetLastError (per host thread, as in CUDA) and returns it.
cudaError_t record_error(cudaError_t error);

// Prints "CPU backend: <message>" and aborts: for misuse that a GPU would not survive either.
[[noreturn]] void fatal(const char* format, ...) __attribute__((format(printf, 1, 2)));

unsigned configured_workers();
// The SM count the device reports (host_api.cpp): CUDA_CPU_SM_COUNT if set (1-1024); else the workers (an "SM" is
// a worker thread), and in the counting build 1, so that kernels that choose their launch by SM count (the GEMM
// tiles) choose the same on every machine: the largest tiles. CUDA_CPU_SM_COUNT=132 makes them choose as on an
// H100 or H200.
int reported_sm_count();

// --- guarded device buffers (host_api.cpp) ---------------------------------------------------------------------------
// Checks the canaries around the device buffers that `kernel` was given; stops the program naming it if one changed.
void check_canaries_after_grid(const KernelInvocation& kernel);
// Checks every device buffer's canaries (at synchronization points, named by `where`).
void check_all_canaries(const char* where);
struct GuardHit {
    const char* start;  // the buffer whose guard page was hit
    size_t bytes;
    const char* file;  // where cudaMalloc was called, or null
    int line;
};
// Whether `address` lies in a device buffer's guard page. For the SIGSEGV handler: never blocks for long.
bool guard_page_hit(const void* address, GuardHit& hit);

// --- a kernel's static __shared__ variables (static_shared.cpp) ----------------------------------------------------
inline constexpr size_t kMaxStaticSharedBytes = 48 * 1024;  // what nvcc accepts in one kernel's static __shared__
struct StaticSharedVariable {
    uint64_t address;  // link-time address (plain statics) or offset in the TLS block (thread_local)
    size_t bytes;
};
struct StaticShared {
    std::string kernel_name;  // mangled; empty when the kernel was not found (a stripped executable)
    size_t bytes = 0;
    std::vector<StaticSharedVariable> variables;
};
// Found in the executable's symbol table at the kernel's first launch, then cached. Thread-safe.
const StaticShared& static_shared_of(const void* kernel_address);
// The dynamic shared memory a launch of this kernel may ask for (cudaFuncSetAttribute's, or what 48 KiB leaves).
size_t max_dynamic_shared_of(const void* kernel, size_t static_bytes);
// Whether the calling thread is running a CUDA thread of a kernel (a fiber or the barrier-free loop).
bool in_kernel();
// Where a variable is for the calling thread (its own copy, in the thread_local build); null if unknown.
unsigned char* static_shared_address(const StaticSharedVariable& variable);
#if defined(CUDA_TEACH_RACECHECK)
// The race build: the `__shared__` variables of inlined __device__ helpers, which belong to no kernel's symbol.
const std::vector<StaticSharedVariable>& helper_shared_variables();
#endif

// --- asynchronous streams (streams.cpp) ----------------------------------------------------------------------------
// Whether CUDA_CPU_ASYNC=1 (or set_async_streams) put the backend in asynchronous mode. The functions below are for
// that mode only: in synchronous mode the caller does the work inline.
bool async_mode();
using Work = std::function<void()>;
// The bytes a queued copy or memset writes: under the late schedule (CUDA_CPU_ASYNC=late) they hold poison from when
// the work could start until it runs.
struct WrittenRange {
    void* data = nullptr;
    size_t bytes = 0;
};
// Queues work on a stream (0: the legacy default stream) and returns at once.
void enqueue(cudaStream_t stream, Work work, WrittenRange writes = {});
// Whether asynchronous mode runs the late schedule (streams.cpp's header).
bool late_mode();
// Queues work and waits until it has run (a copy to pageable memory, a synchronous cudaMemcpy).
void enqueue_and_wait(cudaStream_t stream, Work work);
// The work of a queued copy: a plain memmove, except under stream fuzzing on a stream other than stream 0, where the
// copy lands in two halves, the second once no other stream has work it could run (streams.cpp's header).
void copy_in_parts(void* dst, const void* src, size_t bytes);
// Copies a pageable source aside now, then queues the copy from there: the caller may reuse its buffer at once.
void enqueue_staged_copy(cudaStream_t stream, void* dst, const void* src, size_t bytes);
// Waits until every stream has finished all work queued so far (cudaDeviceSynchronize).
void synchronize_device();

// Calls f(start, bytes) for every cudaMalloc'd and pinned buffer (host_api.cpp): what a kernel's global accesses reach.
void for_each_device_range(const std::function<void(const void*, size_t)>& f);

// --- the counting build's memory-access counters (access_counting.cpp) -----------------------------------------------
}  // namespace cpu_backend
struct AccessCounts;
struct KernelAccessCounts;
namespace cpu_backend::counting {
// Whether kernels are counted: the counting build (CUDA_TEACH_COUNTERS) with CUDA_CPU_COUNTERS not `off`.
bool enabled();
// The scheduler brackets each counted grid, each block, and tells each __syncthreads' release.
void begin_launch(const KernelInvocation& kernel, dim3 grid, dim3 block);
void end_launch();
void begin_block(const unsigned char* dynamic_shared, size_t dynamic_bytes, const StaticShared& static_shared);
void at_barrier();
void end_block();
std::vector<KernelAccessCounts> by_kernel();
void reset();
// Between these (nested), this OS thread's accesses are not counted: the backend's own work inside a block.
void ignore_begin();
void ignore_end();
// ignore_begin() while it exists (the scheduler's warp collectives).
class Paused {
  public:
    Paused() { ignore_begin(); }
    ~Paused() { ignore_end(); }
    Paused(const Paused&) = delete;
    Paused& operator=(const Paused&) = delete;
};
// The counting rules for one warp-level instruction: its active lanes' addresses, one access size; `load` false for
// a store.
void count_warp_instruction(bool shared, unsigned size, uint32_t lanes, const uintptr_t* addresses, AccessCounts& out,
                            bool load = true);

}  // namespace cpu_backend
