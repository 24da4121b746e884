// common/cpu_backend/host_api.cpp — the CUDA runtime API subset, on the CPU.
//
// "Device" memory is host memory from malloc, counted against an emulated capacity (CUDA_CPU_MEMORY, default 8G or
// half the host's RAM) so that running out of memory behaves as on a GPU: cudaMalloc returns
// cudaErrorMemoryAllocation. A kernel's pointer arguments are checked at launch (check_kernel_pointer). By default
// everything is synchronous: a launch has finished when launch() returns and an async copy is a memcpy, which hides
// missing synchronization. With CUDA_CPU_ASYNC=1 copies and memsets are queued on their stream (streams.cpp) and
// return when CUDA's rules let them: run the suite that way, and on a GPU when you can.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "common/cpu_backend/internal.h"
#include "common/cpu_backend/runtime.h"

namespace cpu_backend {
namespace {

thread_local cudaError_t last_error = cudaSuccess;

size_t parse_capacity(const char* text) {
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    const std::string unit = end ? end : "";
    double scale = 0;
    if (unit.empty() || unit == "B")
        scale = 1;
    else if (unit == "K" || unit == "KB" || unit == "KiB")
        scale = 1024.0;
    else if (unit == "M" || unit == "MB" || unit == "MiB")
        scale = 1024.0 * 1024;
    else if (unit == "G" || unit == "GB" || unit == "GiB")
        scale = 1024.0 * 1024 * 1024;
    const double bytes = value * scale;
    if (end == text || scale == 0 || !(bytes >= 1024 * 1024) || bytes > 1e15)
        fatal("CUDA_CPU_MEMORY must be a size from 1M up, such as 512M or 8G, not '%s'", text);
    return static_cast<size_t>(bytes);
}

}  // namespace

// By default 8 GiB, but no more than half the host's RAM: "device" memory is host memory here, and running out of it
// should be cudaErrorMemoryAllocation, not the host swapping or the OOM killer. (A container's memory limit is not
// looked at: set CUDA_CPU_MEMORY there.)
size_t default_device_capacity(size_t host_ram_bytes) {
    return std::min(size_t{8} << 30, host_ram_bytes / 2);
}

namespace {

struct Memory {
    std::mutex mutex;
    size_t capacity = 8ull << 30;
    size_t used = 0;
    std::map<const char*, size_t> device;  // start → bytes, ordered so an address can be found inside a buffer
    std::map<const char*, size_t> pinned;  // cudaHostAlloc'd: start → bytes
    Memory() {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) capacity = default_device_capacity(size_t(pages) * size_t(page));
        if (const char* c = std::getenv("CUDA_CPU_MEMORY")) capacity = parse_capacity(c);
    }
};

// Buffers up to this size are filled with 0xFF bytes; larger ones keep the zero pages the kernel maps lazily, as
// filling gigabytes took seconds (4 GiB: 11 s) and touched all of it at once.
constexpr size_t kPoisonedAllocationLimit = size_t{256} << 20;

Memory& memory() {
    static Memory m;
    return m;
}

double emulated_gib() {
    return memory().capacity / double(1ull << 30);
}

// The cudaMalloc'd buffer holding `address`: [start, start + bytes), or null start when none does. On a GPU a host
// pointer passed where a device pointer belongs (or copy kinds swapped) fails; here it would silently work.
std::pair<const char*, size_t> device_buffer_holding(const void* address) {
    auto& m = memory();
    std::lock_guard lock(m.mutex);
    const char* a = static_cast<const char*>(address);
    auto it = m.device.upper_bound(a);
    if (it == m.device.begin()) return {nullptr, 0};
    --it;
    if (a >= it->first + it->second) return {nullptr, 0};
    return *it;
}

bool is_device_address(const void* address) {
    return device_buffer_holding(address).first != nullptr;
}

bool is_pinned_range(const void* address, size_t bytes) {
    auto& m = memory();
    std::lock_guard lock(m.mutex);
    const char* a = static_cast<const char*>(address);
    auto it = m.pinned.upper_bound(a);
    if (it == m.pinned.begin()) return false;
    --it;
    return a + bytes <= it->first + it->second;
}

// Host memory the copy engine cannot read directly: a copy from or to it is as synchronous as CUDA makes it.
bool is_pageable(const void* address, size_t bytes) {
    return !is_device_address(address) && !is_pinned_range(address, bytes);
}

bool is_device_range(const void* address, size_t bytes) {
    const auto [start, size] = device_buffer_holding(address);
    return start && static_cast<const char*>(address) + bytes <= start + size;
}

}  // namespace

void check_kernel_pointer(const void* pointer, unsigned argument, const KernelInvocation& kernel) {
    if (!pointer) return;
    const char* p = static_cast<const char*>(pointer);
    // One past the end of a buffer is a valid pointer too (an empty range, or an end marker).
    const auto reachable = [](const char* a) { return is_device_address(a) || is_pinned_range(a, 1); };
    if (reachable(p) || reachable(p - 1)) return;
    fatal(
        "argument %u of the kernel launched at %s:%d (in %s) is %p, which is neither device memory (cudaMalloc) "
        "nor pinned host memory (cudaMallocHost, cudaHostAlloc): a kernel on a GPU cannot dereference a pageable "
        "host pointer (it fails with cudaErrorIllegalAddress, \"an illegal memory access was encountered\"). Copy "
        "the data to device memory first.",
        argument, kernel.launch_file, kernel.launch_line, kernel.launch_function, pointer);
}

cudaError_t record_error(cudaError_t error) {
    if (error != cudaSuccess) last_error = error;
    return error;
}

}  // namespace cpu_backend

using cpu_backend::record_error;

cudaError_t cudaGetLastError() {
    const cudaError_t e = cpu_backend::last_error;
    cpu_backend::last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() {
    return cpu_backend::last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
    switch (error) {
        case cudaSuccess:
            return "cudaSuccess";
        case cudaErrorInvalidValue:
            return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation:
            return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration:
            return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevice:
            return "cudaErrorInvalidDevice";
        case cudaErrorInvalidDevicePointer:
            return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidResourceHandle:
            return "cudaErrorInvalidResourceHandle";
        case cudaErrorInvalidMemcpyDirection:
            return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorNotReady:
            return "cudaErrorNotReady";
        case cudaErrorNoDevice:
            return "cudaErrorNoDevice";
        case cudaErrorNotSupported:
            return "cudaErrorNotSupported";
        default:
            return "cudaErrorUnknown";
    }
}

const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess:
            return "no error";
        case cudaErrorInvalidValue:
            return "invalid argument";
        case cudaErrorMemoryAllocation:
            return "out of memory";
        case cudaErrorInvalidConfiguration:
            return "invalid configuration argument";
        case cudaErrorInvalidDevice:
            return "invalid device ordinal";
        case cudaErrorInvalidDevicePointer:
            return "invalid device pointer";
        case cudaErrorInvalidResourceHandle:
            return "invalid resource handle";
        case cudaErrorInvalidMemcpyDirection:
            return "invalid copy direction for memcpy";
        case cudaErrorNotReady:
            return "device not ready";
        case cudaErrorNoDevice:
            return "no CUDA-capable device is detected";
        case cudaErrorNotSupported:
            return "operation not supported";
        default:
            return "unrecognized error code";
    }
}

// --- the device ---------------------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return record_error(cudaErrorInvalidValue);
    *count = 1;  // the CPU itself
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
    if (!device) return record_error(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    return device == 0 ? cudaSuccess : record_error(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (!prop) return record_error(cudaErrorInvalidValue);
    if (device != 0) return record_error(cudaErrorInvalidDevice);
    *prop = cudaDeviceProp{};
    // The capacity in GiB, or in MiB below 1 GiB (lesson 07's 256 MiB would read "0.2 GiB").
    const double gib = cpu_backend::emulated_gib();
    std::snprintf(
        prop->name, sizeof prop->name,
        gib >= 1.0 ? "CPU backend (%u worker%s, emulated %.1f GiB)" : "CPU backend (%u worker%s, emulated %.0f MiB)",
        cpu_backend::configured_workers(), cpu_backend::configured_workers() == 1 ? "" : "s",
        gib >= 1.0 ? gib : gib * 1024.0);
    prop->totalGlobalMem = cpu_backend::memory().capacity;
    prop->sharedMemPerBlock = cpu_backend::kDefaultSharedBytes;
    prop->sharedMemPerBlockOptin = cpu_backend::kMaxSharedBytes;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->major = 8;  // the backend emulates what this project uses of sm_80: mma.sync, ldmatrix, shuffles
    prop->minor = 0;
    prop->multiProcessorCount = static_cast<int>(cpu_backend::configured_workers());
    prop->maxThreadsPerMultiProcessor = 1024;
    prop->l2CacheSize = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!value) return record_error(cudaErrorInvalidValue);
    if (device != 0) return record_error(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMaxSharedMemoryPerBlockOptin:
            *value = cpu_backend::kMaxSharedBytes;
            break;
        case cudaDevAttrMaxSharedMemoryPerBlock:
            *value = cpu_backend::kDefaultSharedBytes;
            break;
        case cudaDevAttrMultiProcessorCount:
            *value = static_cast<int>(cpu_backend::configured_workers());
            break;
        case cudaDevAttrWarpSize:
            *value = 32;
            break;
        case cudaDevAttrMaxThreadsPerBlock:
            *value = 1024;
            break;
        case cudaDevAttrComputeCapabilityMajor:
            *value = 8;
            break;
        case cudaDevAttrComputeCapabilityMinor:
            *value = 0;
            break;
        default:
            return record_error(cudaErrorNotSupported);
    }
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
    if (!version) return record_error(cudaErrorInvalidValue);
    *version = 0;  // no driver: the CPU backend
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
    if (!version) return record_error(cudaErrorInvalidValue);
    *version = 0;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    if (!free_bytes || !total_bytes) return record_error(cudaErrorInvalidValue);
    auto& m = cpu_backend::memory();
    std::lock_guard lock(m.mutex);
    *total_bytes = m.capacity;
    *free_bytes = m.capacity - m.used;
    return cudaSuccess;
}

// --- memory ---------------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    if (!ptr) return record_error(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;  // as CUDA: a null pointer, no error
    auto& m = cpu_backend::memory();
    std::lock_guard lock(m.mutex);
    if (bytes > m.capacity - m.used) return record_error(cudaErrorMemoryAllocation);
    void* p = nullptr;
    // Exactly `bytes` (not rounded up), so AddressSanitizer's redzone starts right after the last element.
    if (posix_memalign(&p, 256, bytes) != 0) return record_error(cudaErrorMemoryAllocation);
    if (bytes <= cpu_backend::kPoisonedAllocationLimit)
        std::memset(p, 0xFF, bytes);  // a GPU gives uninitialized memory: NaN
                                      // bytes make a read of it show
    m.device.emplace(static_cast<const char*>(p), bytes);
    m.used += bytes;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    if (!ptr) return cudaSuccess;
    if (cpu_backend::async_mode()) cpu_backend::synchronize_device();  // as CUDA: queued work may still use it
    auto& m = cpu_backend::memory();
    std::lock_guard lock(m.mutex);
    const auto it = m.device.find(static_cast<const char*>(ptr));
    if (it == m.device.end()) return record_error(cudaErrorInvalidValue);
    m.used -= it->second;
    m.device.erase(it);
    std::free(ptr);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
    if (!ptr) return record_error(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;
    void* p = nullptr;
    if (posix_memalign(&p, 256, bytes) != 0) return record_error(cudaErrorMemoryAllocation);
    auto& m = cpu_backend::memory();
    std::lock_guard lock(m.mutex);
    m.pinned.emplace(static_cast<const char*>(p), bytes);
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
    return cudaHostAlloc(ptr, bytes, 0);
}

cudaError_t cudaFreeHost(void* ptr) {
    if (!ptr) return cudaSuccess;
    if (cpu_backend::async_mode()) cpu_backend::synchronize_device();
    auto& m = cpu_backend::memory();
    std::lock_guard lock(m.mutex);
    if (m.pinned.erase(static_cast<const char*>(ptr)) == 0) return record_error(cudaErrorInvalidValue);
    std::free(ptr);
    return cudaSuccess;
}

namespace {
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return record_error(cudaErrorInvalidMemcpyDirection);
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return record_error(cudaErrorInvalidValue);
    if (kind != cudaMemcpyDefault) {
        // The kind must say where each side lives, and a device side must fit inside its buffer.
        const bool dst_on_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
        const bool src_on_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
        const bool dst_ok =
            dst_on_device ? cpu_backend::is_device_range(dst, bytes) : !cpu_backend::is_device_address(dst);
        const bool src_ok =
            src_on_device ? cpu_backend::is_device_range(src, bytes) : !cpu_backend::is_device_address(src);
        if (!dst_ok || !src_ok) return record_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (const cudaError_t e = check_copy(dst, src, bytes, kind); e != cudaSuccess || bytes == 0) return e;
    if (!cpu_backend::async_mode()) {
        std::memmove(dst, src, bytes);
        return cudaSuccess;
    }
    // On the legacy default stream. Device to device returns at once; anything touching the host returns when done.
    const auto copy = [dst, src, bytes] { std::memmove(dst, src, bytes); };
    if (cpu_backend::is_device_address(dst) && cpu_backend::is_device_address(src))
        cpu_backend::enqueue(0, copy);
    else
        cpu_backend::enqueue_and_wait(0, copy);
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // others are GPU hints
    return cpu_backend::set_max_dynamic_shared(kernel, value);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    if (const cudaError_t e = check_copy(dst, src, bytes, kind); e != cudaSuccess || bytes == 0) return e;
    if (!cpu_backend::async_mode()) {
        std::memmove(dst, src, bytes);
        return cudaSuccess;
    }
    // CUDA's rules for pageable host memory: a copy into it returns once done; a copy from it returns once the
    // source has been staged. Pinned and device memory: returns at once, the copy runs when the stream gets to it.
    if (cpu_backend::is_pageable(dst, bytes)) {
        cpu_backend::enqueue_and_wait(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
    } else if (cpu_backend::is_pageable(src, bytes)) {
        cpu_backend::enqueue_staged_copy(stream, dst, src, bytes);
    } else {
        cpu_backend::enqueue(stream, [dst, src, bytes] { cpu_backend::copy_in_parts(dst, src, bytes); });
    }
    return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
    return cudaMemsetAsync(ptr, value, bytes, 0);  // device memory: asynchronous with the host, as in CUDA
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return cudaSuccess;
    if (!ptr || !cpu_backend::is_device_range(ptr, bytes)) return record_error(cudaErrorInvalidValue);
    if (!cpu_backend::async_mode()) {
        std::memset(ptr, value, bytes);
        return cudaSuccess;
    }
    cpu_backend::enqueue(stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); });
    return cudaSuccess;
}

// Streams and events: streams.cpp.
