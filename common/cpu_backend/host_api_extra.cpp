// common/cpu_backend/host_api_extra.cpp — runtime API calls that public CUDA programs make (cuda-samples' helpers,
// profiling brackets, callbacks, zero-copy and managed memory) beyond what host_api.cpp defines for this project.
// Each does what CUDA documents, or reports an error where the CPU has nothing to give.
#include <cuda_profiler_api.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/cpu_backend/internal.h"

using cpu_backend::record_error;

namespace {
std::array<std::atomic<size_t>, 8> limits = {1024, 1 << 20, 8 << 20, 2, 2048, 0, 0, 0};  // CUDA's defaults
std::atomic<unsigned> device_flags{0};

// Whether [pointer, pointer + 1) lies in a cudaMalloc'd or pinned buffer.
bool is_backend_memory(const void* pointer) {
    bool found = false;
    cpu_backend::for_each_device_range([&](const void* start, size_t bytes) {
        const auto* p = static_cast<const char*>(pointer);
        const auto* s = static_cast<const char*>(start);
        if (p >= s && p < s + bytes) found = true;
    });
    return found;
}
}  // namespace

// Time in a kernel (runtime_extra.h): nanoseconds are cycles of the nominal 1 GHz clock cudaDevAttrClockRate gives.
long long clock64() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
void __nanosleep(unsigned) {
    std::this_thread::yield();  // a sleep of 0 ns is within CUDA's "approximately 0 to 2·ns"
}

// Profiler brackets: there is no profiler to start; the program's timings go on.
cudaError_t cudaProfilerStart() {
    return cudaSuccess;
}
cudaError_t cudaProfilerStop() {
    return cudaSuccess;
}

// Limits are remembered and reported back; none binds here (a kernel's printf and malloc are the host's).
cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
    if (size_t(limit) >= limits.size()) return record_error(cudaErrorUnsupportedLimit);
    limits[size_t(limit)] = value;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
    if (!value) return record_error(cudaErrorInvalidValue);
    if (size_t(limit) >= limits.size()) return record_error(cudaErrorUnsupportedLimit);
    *value = limits[size_t(limit)];
    return cudaSuccess;
}

// Scheduling flags (spin, yield, blocking sync) and cudaDeviceMapHost: how a host thread waits, and whether pinned
// memory is mapped, which it always is here (the device's memory is the host's).
cudaError_t cudaSetDeviceFlags(unsigned flags) {
    if (flags & ~unsigned(cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax))
        return record_error(cudaErrorInvalidValue);
    device_flags = flags;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceFlags(unsigned* flags) {
    if (!flags) return record_error(cudaErrorInvalidValue);
    *flags = device_flags | cudaDeviceMapHost;
    return cudaSuccess;
}
cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) {
    return cudaSuccess;  // an L1/shared split preference: nothing to split on the CPU
}
cudaError_t cudaFuncSetCacheConfig(const void*, cudaFuncCache) {
    return cudaSuccess;
}
cudaError_t cudaChooseDevice(int* device, const cudaDeviceProp* prop) {
    if (!device || !prop) return record_error(cudaErrorInvalidValue);
    *device = 0;  // the only one
    return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;  // one priority level, as a device without priorities reports
    if (greatest) *greatest = 0;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned flags, int) {
    return cudaStreamCreateWithFlags(stream, flags);
}

// A launch given only the kernel's address (a void* the translation could not see through): the backend needs the
// kernel's type to read its arguments. runtime.h's overloads take the kernel itself.
static cudaError_t launch_needs_the_kernel(const char* call) {
    cpu_backend::fatal(
        "%s was given the kernel as a void* (a variable or a cast tools/cuda_cpu_translate.py does not "
        "remove): the CPU backend needs the kernel's type to read its arguments; pass the kernel itself, "
        "e.g. %s(my_kernel, grid, block, args)",
        call, call);
}
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
    return launch_needs_the_kernel("cudaLaunchKernel");
}
cudaError_t cudaLaunchCooperativeKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
    return launch_needs_the_kernel("cudaLaunchCooperativeKernel");
}

// A host function in stream order: queued behind the stream's work in asynchronous mode; in synchronous mode that
// work is already done, so it runs now.
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
    if (!fn) return record_error(cudaErrorInvalidValue);
    if (cpu_backend::async_mode())
        cpu_backend::enqueue(stream, [fn, user_data] { fn(user_data); });
    else
        fn(user_data);
    return cudaSuccess;
}
cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* user_data, unsigned flags) {
    if (!callback || flags != 0) return record_error(cudaErrorInvalidValue);
    if (cpu_backend::async_mode())
        cpu_backend::enqueue(stream, [stream, callback, user_data] { callback(stream, cudaSuccess, user_data); });
    else
        callback(stream, cudaSuccess, user_data);
    return cudaSuccess;
}

// Zero-copy: pinned memory is mapped at the same address (unified addressing), so its device pointer is itself.
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags) {
    if (!device || flags != 0) return record_error(cudaErrorInvalidValue);
    if (!is_backend_memory(host)) return record_error(cudaErrorInvalidValue);
    *device = host;
    return cudaSuccess;
}
cudaError_t cudaMallocManaged(void** ptr, size_t bytes, unsigned flags) {
    return cudaMallocManaged(ptr, bytes, flags, std::source_location::current());
}
// Hints about where managed memory should live: there is only one place.
cudaError_t cudaMemPrefetchAsync(const void*, size_t, cudaMemLocation, unsigned, cudaStream_t) {
    return cudaSuccess;
}
cudaError_t cudaMemAdvise(const void*, size_t, cudaMemoryAdvise, cudaMemLocation) {
    return cudaSuccess;
}
cudaError_t cudaStreamAttachMemAsync(cudaStream_t, void*, size_t, unsigned) {
    return cudaSuccess;
}

// Peer access: there is one device, so a peer is always a device that does not exist (as on a one-GPU machine,
// where multi-GPU programs find too few devices and stop or skip), and a "peer" copy within device 0 is a copy.
cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer) {
    if (!can_access) return record_error(cudaErrorInvalidValue);
    if (device != 0 || peer != 0) return record_error(cudaErrorInvalidDevice);
    *can_access = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) {
    return record_error(cudaErrorInvalidDevice);
}
cudaError_t cudaDeviceDisablePeerAccess(int) {
    return record_error(cudaErrorPeerAccessNotEnabled);
}
cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr, int device, int peer) {
    if (!value) return record_error(cudaErrorInvalidValue);
    if (device != 0 || peer != 0 || device == peer) return record_error(cudaErrorInvalidDevice);
    return cudaSuccess;
}
cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
    if (dst_device != 0 || src_device != 0) return record_error(cudaErrorInvalidDevice);
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
    if (dst_device != 0 || src_device != 0) return record_error(cudaErrorInvalidDevice);
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
}

// Stream attributes (the L2 access policy window, synchronization policy, priority): hints, accepted and read
// back as set; a GPU without persisting L2 ignores the window too.
cudaError_t cudaStreamSetAttribute(cudaStream_t, cudaStreamAttrID, const cudaStreamAttrValue* value) {
    return value ? cudaSuccess : record_error(cudaErrorInvalidValue);
}
cudaError_t cudaStreamGetAttribute(cudaStream_t, cudaStreamAttrID, cudaStreamAttrValue* value) {
    if (!value) return record_error(cudaErrorInvalidValue);
    std::memset(static_cast<void*>(value), 0, sizeof *value);
    return cudaSuccess;
}
cudaError_t cudaCtxResetPersistingL2Cache() {
    return cudaSuccess;  // no persisting lines: there is no L2 to reset
}

namespace cpu_backend {
cudaError_t more_device_attributes(int* value, cudaDeviceAttr attr) {
    switch (attr) {
        case cudaDevAttrComputeMode:
            *value = cudaComputeModeDefault;
            break;
        case cudaDevAttrClockRate:
            *value = 1000000;
            break;  // kHz: nominal (1 GHz), for helpers that rank GPUs
        case cudaDevAttrMemoryClockRate:
            *value = 1000000;
            break;
        case cudaDevAttrGlobalMemoryBusWidth:
            *value = 64;
            break;
        case cudaDevAttrMaxBlockDimX:
        case cudaDevAttrMaxBlockDimY:
            *value = 1024;
            break;
        case cudaDevAttrMaxBlockDimZ:
            *value = 64;
            break;
        case cudaDevAttrMaxGridDimX:
            *value = 2147483647;
            break;
        case cudaDevAttrMaxGridDimY:
        case cudaDevAttrMaxGridDimZ:
            *value = 65535;
            break;
        case cudaDevAttrMaxRegistersPerBlock:
        case cudaDevAttrMaxRegistersPerMultiprocessor:
            *value = 65536;
            break;
        case cudaDevAttrTotalConstantMemory:
            *value = 65536;
            break;
        case cudaDevAttrMaxThreadsPerMultiProcessor:
            *value = 1024;
            break;
        case cudaDevAttrMaxBlocksPerMultiprocessor:
            *value = 32;
            break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
            *value = int(kMaxSharedBytes);
            break;
        case cudaDevAttrL2CacheSize:
            *value = 0;
            break;
        case cudaDevAttrUnifiedAddressing:
        case cudaDevAttrCanMapHostMemory:
        case cudaDevAttrManagedMemory:
            *value = 1;  // one address space: the host's
            break;
        case cudaDevAttrAsyncEngineCount:
        case cudaDevAttrGpuOverlap:
            *value = 1;
            break;  // (CUDA_CPU_ASYNC=1)
        case cudaDevAttrGlobalL1CacheSupported:
        case cudaDevAttrLocalL1CacheSupported:
        case cudaDevAttrCooperativeLaunch:  // cudaLaunchCooperativeKernel (runtime.h)
            *value = 1;
            break;
        // What the backend does not have: concurrent kernels (one grid runs at a time), host
        // access to managed memory while kernels run, pageable memory access, memory pools, an integrated GPU, ECC,
        // a watchdog, TCC.
        case cudaDevAttrConcurrentKernels:
        case cudaDevAttrConcurrentManagedAccess:
        case cudaDevAttrPageableMemoryAccess:
        case cudaDevAttrMemoryPoolsSupported:
        case cudaDevAttrIntegrated:
        case cudaDevAttrEccEnabled:
        case cudaDevAttrKernelExecTimeout:
        case cudaDevAttrTccDriver:
        case cudaDevAttrPciBusId:
        case cudaDevAttrPciDeviceId:
        case cudaDevAttrPciDomainId:
        case cudaDevAttrHostNativeAtomicSupported:
        case cudaDevAttrDirectManagedMemAccessFromHost:
            *value = 0;
            break;
        default:
            return record_error(cudaErrorNotSupported);
    }
    return cudaSuccess;
}
}  // namespace cpu_backend
