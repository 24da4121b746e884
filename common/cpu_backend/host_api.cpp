// common/cpu_backend/host_api.cpp — the CUDA runtime API subset, on the CPU.
//
// "Device" memory is host memory, counted against an emulated capacity (CUDA_CPU_MEMORY, default 8G or half the
// host's RAM) so that running out of memory behaves as on a GPU: cudaMalloc returns cudaErrorMemoryAllocation. Each
// buffer is mapped on its own between two PROT_NONE guard pages, its end against the upper one (see "guarded device
// buffers" below), so that an out-of-bounds access faults at the kernel's line; the sanitizer build keeps malloc,
// whose AddressSanitizer redzones see more. A kernel's pointer arguments are checked at launch (check_kernel_pointer). By default
// everything is synchronous: a launch has finished when launch() returns and an async copy is a memcpy, which hides
// missing synchronization. With CUDA_CPU_ASYNC=1 copies and memsets are queued on their stream (streams.cpp) and
// return when CUDA's rules let them: run the suite that way, and on a GPU when you can.
#include <cxxabi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <vector>

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

// --- guarded device buffers --------------------------------------------------------------------------------------
// A buffer of `bytes` is mapped as [guard page][head][bytes][tail][guard page]: its start is 256-byte aligned, as
// cudaMalloc's is, and bytes rounded up to 256 end exactly at the upper guard page. So an access one element past a
// buffer whose size is a multiple of 256 (most of them), or a page or less past any buffer, faults at once: the
// SIGSEGV handler (scheduler.cpp) names the kernel, block, thread and line. The few bytes between the end and the
// next 256-byte boundary (tail), and the slack below the start (head), cannot fault without moving the start off
// CUDA's alignment: they hold a canary, checked as each grid ends for the buffers it was given (so the kernel is
// named) and for every buffer at synchronization points and cudaFree. Only the requested bytes count against the capacity: cudaMemGetInfo and the ledger are unchanged.
struct DeviceAllocation {
    size_t bytes = 0;         // what was asked for
    char* mapping = nullptr;  // the guarded mapping; null: posix_memalign (the sanitizer build, or mmap refused)
    size_t mapping_bytes = 0;
    const char* file = nullptr;  // where cudaMalloc was called, when known (typed pointers: runtime.h)
    int line = 0;
};

constexpr size_t kGranule = 256;  // cudaMalloc's alignment
constexpr size_t kGuardPage = 4096;

size_t round_up(size_t n, size_t to) {
    return (n + to - 1) / to * to;
}

// A byte pattern that depends on the address (a kernel storing one repeated value cannot reproduce it) and is
// neither 0x00 nor 0xFF (the fill of new memory).
unsigned char canary_byte(uintptr_t address) {
    const unsigned char b = static_cast<unsigned char>((address * 0x9Du) ^ 0xA5u);
    return b == 0x00 || b == 0xFF ? 0x5A : b;
}
const unsigned char* canary_page() {  // canary_byte of every offset in a page, for memcmp
    static const auto page = [] {
        std::array<unsigned char, kGuardPage> p{};
        for (size_t i = 0; i < kGuardPage; ++i) p[i] = canary_byte(i);
        return p;
    }();
    return page.data();
}
void fill_canary(char* from, char* to) {
    if (from < to) std::memcpy(from, canary_page() + (uintptr_t(from) % kGuardPage), size_t(to - from));
}
// The first byte in [from, to) that is not the canary any more, or null. Never crosses a page (head and tail don't).
const char* changed_canary(const char* from, const char* to) {
    if (from >= to || std::memcmp(from, canary_page() + (uintptr_t(from) % kGuardPage), size_t(to - from)) == 0)
        return nullptr;
    for (const char* p = from; p < to; ++p)
        if (static_cast<unsigned char>(*p) != canary_byte(uintptr_t(p))) return p;
    return nullptr;
}

// Maps a guarded buffer; null when the system refuses (too many mappings: vm.max_map_count), and the caller falls
// back to posix_memalign.
char* map_guarded(size_t bytes, DeviceAllocation& a) {
    static_assert(kGuardPage % kGranule == 0);
    if (sysconf(_SC_PAGESIZE) != long(kGuardPage)) return nullptr;  // other page sizes: unguarded
    const size_t rounded = round_up(bytes, kGranule), data = round_up(rounded, kGuardPage);
    if (rounded < bytes || data > SIZE_MAX - 2 * kGuardPage) return nullptr;
    const size_t total = data + 2 * kGuardPage;
    void* m = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    char* mapping = static_cast<char*>(m);
    if (mprotect(mapping + kGuardPage, data, PROT_READ | PROT_WRITE) != 0) {
        munmap(mapping, total);
        return nullptr;
    }
    a.mapping = mapping;
    a.mapping_bytes = total;
    char* start = mapping + kGuardPage + data - rounded;
    fill_canary(mapping + kGuardPage, start);
    fill_canary(start + bytes, start + rounded);
    return start;
}

struct Memory {
    std::mutex mutex;
    size_t capacity = 8ull << 30;
    size_t used = 0;
    std::map<const char*, DeviceAllocation> device;  // start → allocation, ordered so an address can be found
    std::map<const char*, size_t> pinned;            // cudaHostAlloc'd: start → bytes
    std::set<const char*> registered;                // of those, cudaHostRegister'd (the program's own memory)
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
    if (a >= it->first + it->second.bytes) return {nullptr, 0};
    return {it->first, it->second.bytes};
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

int reported_sm_count() {
    static const int count = [] {
        if (const char* text = std::getenv("CUDA_CPU_SM_COUNT")) {
            char* end = nullptr;
            const long value = std::strtol(text, &end, 10);
            if (*text == '\0' || *end != '\0' || value < 1 || value > 1024)
                fatal("CUDA_CPU_SM_COUNT=%s: expected a whole number from 1 to 1024", text);
            return static_cast<int>(value);
        }
#if defined(CUDA_TEACH_COUNTERS)
        return 1;
#else
        return static_cast<int>(configured_workers());
#endif
    }();
    return count;
}

void for_each_device_range(const std::function<void(const void*, size_t)>& f) {
    auto& m = memory();
    std::lock_guard lock(m.mutex);
    for (const auto& [start, allocation] : m.device) f(start, allocation.bytes);
    for (const auto& [start, bytes] : m.pinned) f(start, bytes);
}

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

namespace {
std::string describe_buffer(const char* start, const DeviceAllocation& a) {
    char text[512];
    if (a.file)
        std::snprintf(text, sizeof text, "a %zu-byte device buffer at %p (cudaMalloc at %s:%d)", a.bytes,
                      static_cast<const void*>(start), a.file, a.line);
    else
        std::snprintf(text, sizeof text, "a %zu-byte device buffer at %p", a.bytes, static_cast<const void*>(start));
    return text;
}

// The first changed canary byte of a guarded buffer, or null.
const char* changed_canary_of(const char* start, const DeviceAllocation& a) {
    if (!a.mapping) return nullptr;
    if (const char* bad = changed_canary(start + a.bytes, start + round_up(a.bytes, kGranule))) return bad;
    return changed_canary(a.mapping + kGuardPage, start);
}

// The kernel's name from the symbol table; else as its <<<>>> launch spelled it (a template deduced there).
std::string kernel_name(const void* kernel_address, const char* kernel_text = nullptr) {
    std::string name = kernel_address ? static_shared_of(kernel_address).kernel_name : std::string();
    if (name.empty() && kernel_text) return kernel_text;
    int status = -1;
    if (char* plain = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status); plain && status == 0) {
        name = plain;
        std::free(plain);
    }
    return name.empty() ? "?" : name;
}

constexpr const char* kCanaryNote =
    "It is the slack up to the next 256-byte boundary (or below the start), which holds a canary here (a write "
    "further out faults at once, with its line); a GPU would not notice this write, but it is out of bounds "
    "(compute-sanitizer reports it). For the line: make check-playground, or the build/cpu-sanitize tree "
    "(AddressSanitizer).";

std::string where_in(const char* bad, const char* start) {
    return "byte offset " + std::to_string(bad - start) + (bad < start ? " (before its start)" : "");
}
}  // namespace

namespace {
struct LastKernel {  // the latest grid to end, for a canary found changed at a synchronization point
    const void* address = nullptr;
    const char* file = "?";
    int line = 0;
    const char* function = "?";
    const char* text = nullptr;
} last_kernel;  // guarded by memory().mutex

// A canary found changed at a synchronization point or at cudaFree: which kernel wrote it is no longer known.
void check_canary_at(const char* where, const char* start, const DeviceAllocation& a) {
    const char* bad = changed_canary_of(start, a);
    if (!bad) return;
    fatal(
        "kernel fault: %s found that a kernel (or host code) wrote %s %s: %s was changed. The latest kernel "
        "launched was %s, at %s:%d (in %s). %s",
        where, bad < start ? "before the start of" : "past the end of", describe_buffer(start, a).c_str(),
        where_in(bad, start).c_str(),
        last_kernel.address || last_kernel.text ? kernel_name(last_kernel.address, last_kernel.text).c_str() : "none",
        last_kernel.file, last_kernel.line, last_kernel.function, kCanaryNote);
}
}  // namespace

// The buffers the kernel was given (found here, with the kernel named exactly) are checked as each grid ends: a few
// map look-ups. Checking every buffer each time cost 80 ns per live buffer per launch (400 buffers: +32 us on a
// 2 us launch), so the others (reached through a pointer held elsewhere) wait for the next synchronization point.
void check_canaries_after_grid(const KernelInvocation& kernel) {
    auto& m = memory();
    std::lock_guard lock(m.mutex);
    last_kernel = {kernel.kernel_address, kernel.launch_file, kernel.launch_line, kernel.launch_function,
                   kernel.kernel_text};
    for (unsigned i = 0; i < kernel.argument_count; ++i) {
        const char* p = static_cast<const char*>(kernel.pointer_arguments[i]);
        if (!p) continue;
        auto it = m.device.upper_bound(p);
        if (it == m.device.begin()) continue;
        --it;
        if (p > it->first + it->second.bytes) continue;  // not in a device buffer or one past it (pinned memory)
        const char* bad = changed_canary_of(it->first, it->second);
        if (!bad) continue;
        fatal("kernel fault: the kernel %s launched at %s:%d (in %s) wrote %s %s (its argument %u): %s was changed. %s",
              kernel_name(kernel.kernel_address, kernel.kernel_text).c_str(), kernel.launch_file, kernel.launch_line,
              kernel.launch_function, bad < it->first ? "before the start of" : "past the end of",
              describe_buffer(it->first, it->second).c_str(), i, where_in(bad, it->first).c_str(), kCanaryNote);
    }
}

void check_all_canaries(const char* where) {
    auto& m = memory();
    std::lock_guard lock(m.mutex);
    for (const auto& [start, a] : m.device) check_canary_at(where, start, a);
}

bool guard_page_hit(const void* address, GuardHit& hit) {
    // Called from the SIGSEGV handler: the thread that faulted may not wait for a lock another thread holds forever
    // (none does: the lock is held for bookkeeping only), but it must not deadlock on one its own thread holds.
    auto& m = memory();
    std::unique_lock lock(m.mutex, std::try_to_lock);
    for (int attempt = 0; !lock.owns_lock() && attempt < 1000; ++attempt) {
        sched_yield();
        (void)lock.try_lock();
    }
    if (!lock.owns_lock()) return false;
    const char* a = static_cast<const char*>(address);
    auto it = m.device.upper_bound(a);
    const auto found = [&](const std::pair<const char* const, DeviceAllocation>& buffer) {
        hit = {buffer.first, buffer.second.bytes, buffer.second.file, buffer.second.line};
        return true;
    };
    // The lower guard page of the buffer above, or the upper one of the buffer below.
    if (it != m.device.end() && it->second.mapping && a >= it->second.mapping && a < it->second.mapping + kGuardPage)
        return found(*it);
    if (it == m.device.begin()) return false;
    --it;
    const DeviceAllocation& below = it->second;
    if (below.mapping && a >= below.mapping + below.mapping_bytes - kGuardPage &&
        a < below.mapping + below.mapping_bytes)
        return found(*it);
    return false;
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
    prop->multiProcessorCount = cpu_backend::reported_sm_count();
    prop->maxThreadsPerMultiProcessor = 1024;
    prop->l2CacheSize = 0;
    // As cudaDeviceGetAttribute reports them (host_api_extra.cpp): one address space, pinned memory mapped.
    prop->unifiedAddressing = 1;
    prop->canMapHostMemory = 1;
    prop->managedMemory = 1;
    prop->asyncEngineCount = 1;
    prop->totalConstMem = 65536;
    prop->regsPerMultiprocessor = 65536;
    prop->maxBlocksPerMultiProcessor = 32;
    prop->cooperativeLaunch = 1;  // cudaLaunchCooperativeKernel (runtime.h)
    prop->sharedMemPerMultiprocessor = cpu_backend::kMaxSharedBytes;
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
            *value = cpu_backend::reported_sm_count();
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
            return cpu_backend::more_device_attributes(value, attr);  // host_api_extra.cpp
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
cudaError_t cpu_backend::device_malloc(void** ptr, size_t bytes, const char* file, int line) {
    if (!ptr) return record_error(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;  // as CUDA: a null pointer, no error
    auto& m = cpu_backend::memory();
    std::lock_guard lock(m.mutex);
    if (bytes > m.capacity - m.used) return record_error(cudaErrorMemoryAllocation);
    cpu_backend::DeviceAllocation allocation{bytes, nullptr, 0, file, line};
    void* p = nullptr;
#if !defined(__SANITIZE_ADDRESS__)
    p = cpu_backend::map_guarded(bytes, allocation);
#endif
    // Exactly `bytes` (not rounded up), so AddressSanitizer's redzone starts right after the last element.
    if (!p && posix_memalign(&p, cpu_backend::kGranule, bytes) != 0) return record_error(cudaErrorMemoryAllocation);
    if (bytes <= cpu_backend::kPoisonedAllocationLimit)
        std::memset(p, 0xFF, bytes);  // a GPU gives uninitialized memory: NaN bytes make a read of it show
    m.device.emplace(static_cast<const char*>(p), allocation);
    m.used += bytes;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    return cpu_backend::device_malloc(ptr, bytes, nullptr, 0);
}

cudaError_t cudaFree(void* ptr) {
    if (!ptr) return cudaSuccess;
    if (cpu_backend::async_mode()) cpu_backend::synchronize_device();  // as CUDA: queued work may still use it
    auto& m = cpu_backend::memory();
    std::lock_guard lock(m.mutex);
    const auto it = m.device.find(static_cast<const char*>(ptr));
    if (it == m.device.end()) return record_error(cudaErrorInvalidValue);
    const cpu_backend::DeviceAllocation a = it->second;
    cpu_backend::check_canary_at("cudaFree", it->first, a);
    m.used -= a.bytes;
    m.device.erase(it);
    if (a.mapping)
        munmap(a.mapping, a.mapping_bytes);
    else
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
    if (m.registered.count(static_cast<const char*>(ptr))) return record_error(cudaErrorInvalidValue);
    if (m.pinned.erase(static_cast<const char*>(ptr)) == 0) return record_error(cudaErrorInvalidValue);
    std::free(ptr);
    return cudaSuccess;
}

// cudaHostRegister pins the program's own memory: kernels may then take pointers into it, as into cudaHostAlloc's
// (the backend's checks treat it as pinned), until cudaHostUnregister.
cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned int) {
    if (!ptr || bytes == 0) return record_error(cudaErrorInvalidValue);
    if (cpu_backend::is_pinned_range(ptr, 1) || cpu_backend::is_device_address(ptr))
        return record_error(cudaErrorHostMemoryAlreadyRegistered);
    auto& m = cpu_backend::memory();
    std::lock_guard lock(m.mutex);
    m.pinned.emplace(static_cast<const char*>(ptr), bytes);
    m.registered.insert(static_cast<const char*>(ptr));
    return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* ptr) {
    if (cpu_backend::async_mode()) cpu_backend::synchronize_device();  // queued copies may still use it
    auto& m = cpu_backend::memory();
    std::lock_guard lock(m.mutex);
    if (m.registered.erase(static_cast<const char*>(ptr)) == 0) return record_error(cudaErrorHostMemoryNotRegistered);
    m.pinned.erase(static_cast<const char*>(ptr));
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

namespace {
// The work of a queued copy. Late schedule, from pinned host memory: the source is compared, when the copy runs,
// with its bytes when the copy was queued; a host that refilled it in between is reported (on a GPU the copy would
// carry the new bytes, or a mix of both).
cpu_backend::Work queued_copy(void* dst, const void* src, size_t bytes) {
    if (!cpu_backend::late_mode() || cpu_backend::is_device_address(src)) {
        return [dst, src, bytes] { cpu_backend::copy_in_parts(dst, src, bytes); };
    }
    const auto* first = static_cast<const unsigned char*>(src);
    auto snapshot = std::make_shared<std::vector<unsigned char>>(first, first + bytes);
    return [dst, src, bytes, snapshot] {
        if (std::memcmp(src, snapshot->data(), bytes) != 0) {
            cpu_backend::fatal(
                "cudaMemcpyAsync of %zu bytes from pinned host memory %p: the host changed the source after the call "
                "and before the copy ran (CUDA_CPU_ASYNC=late runs every copy as late as CUDA allows). On a GPU the "
                "copy would carry the new bytes, or a mix of old and new: wait for an event recorded after the copy "
                "(cudaEventSynchronize) before refilling the buffer.",
                bytes, src);
        }
        cpu_backend::copy_in_parts(dst, src, bytes);
    };
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (const cudaError_t e = check_copy(dst, src, bytes, kind); e != cudaSuccess || bytes == 0) return e;
    if (!cpu_backend::async_mode()) {
        std::memmove(dst, src, bytes);
        cpu_backend::check_all_canaries("cudaMemcpy");  // a synchronization point (the one most programs have)
        return cudaSuccess;
    }
    // On the legacy default stream, with CUDA's "API synchronization behavior" for cudaMemcpy: device to device
    // returns at once; from pageable host memory to the device it returns once the source is staged, "but the DMA to
    // final destination may not have completed", so a kernel on a non-blocking stream that reads the destination
    // without a wait reads poison under the late schedule; anything else touching the host returns when done.
    const auto copy = [dst, src, bytes] { std::memmove(dst, src, bytes); };
    if (cpu_backend::is_device_address(dst) && cpu_backend::is_device_address(src)) {
        cpu_backend::enqueue(0, copy, {dst, bytes});  // poisoned until it runs (late schedule)
    } else if (cpu_backend::is_device_address(dst) && cpu_backend::is_pageable(src, bytes)) {
        cpu_backend::enqueue_staged_copy(0, dst, src, bytes);
        cpu_backend::check_all_canaries("cudaMemcpy");
    } else {
        cpu_backend::enqueue_and_wait(0, copy);
        cpu_backend::check_all_canaries("cudaMemcpy");
    }
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
        cpu_backend::enqueue(stream, queued_copy(dst, src, bytes), {dst, bytes});
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
    cpu_backend::enqueue(stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); }, {ptr, bytes});
    return cudaSuccess;
}

// Streams and events: streams.cpp.

// 2D copies: `height` rows of `width` bytes, each row starting `pitch` bytes after the previous one (so the bytes
// between a row's end and the next row's start are not touched), row by row through the 1D copies' rules.
namespace {
template <typename CopyRow>
cudaError_t copy_rows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                      CopyRow copy_row) {
    if (width > dpitch || width > spitch) return record_error(cudaErrorInvalidPitchValue);
    for (size_t row = 0; row < height; ++row) {
        const cudaError_t e =
            copy_row(static_cast<char*>(dst) + row * dpitch, static_cast<const char*>(src) + row * spitch, width);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
    return copy_rows(dst, dpitch, src, spitch, width, height,
                     [kind](void* d, const void* s, size_t bytes) { return cudaMemcpy(d, s, bytes, kind); });
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
    return copy_rows(dst, dpitch, src, spitch, width, height, [kind, stream](void* d, const void* s, size_t bytes) {
        return cudaMemcpyAsync(d, s, bytes, kind, stream);
    });
}

// What the backend knows of a kernel: its static __shared__ bytes (from the symbol table) and the limits it enforces.
// Registers and local memory are the GPU compiler's business: 0 here.
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* kernel) {
    if (!attributes || !kernel) return record_error(cudaErrorInvalidDeviceFunction);
    *attributes = cudaFuncAttributes{};
    const size_t static_bytes = cpu_backend::static_shared_of(kernel).bytes;
    attributes->sharedSizeBytes = static_bytes;
    attributes->maxThreadsPerBlock = 1024;
    attributes->maxDynamicSharedSizeBytes = int(cpu_backend::max_dynamic_shared_of(kernel, static_bytes));
    attributes->ptxVersion = 80;
    attributes->binaryVersion = 80;
    return cudaSuccess;
}

// An estimate, from threads and shared memory only (the backend does not know the kernel's registers): how many
// blocks of `block_size` threads fit on one of the emulated device's SMs (1024 threads, 32 blocks, 228 KiB of shared
// memory each: an H100's shared memory with this backend's thread limit).
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* kernel, int block_size,
                                                          size_t dynamic_shared_bytes) {
    if (!blocks || !kernel || block_size <= 0 || block_size > 1024) return record_error(cudaErrorInvalidValue);
    constexpr int kThreadsPerSm = 1024, kBlocksPerSm = 32;
    constexpr size_t kSharedPerSm = 228 * 1024;
    int fit = std::min(kThreadsPerSm / block_size, kBlocksPerSm);
    const size_t shared_per_block = cpu_backend::static_shared_of(kernel).bytes + dynamic_shared_bytes;
    if (shared_per_block > 0) fit = std::min<int>(fit, int(kSharedPerSm / shared_per_block));
    *blocks = fit;
    return cudaSuccess;
}

// A failed assert(): in a kernel, a kernel fault naming the block and thread (a GPU reports the failed assertion
// with its block and thread, then cudaErrorAssert); in host code, glibc's message and abort().
extern "C" [[noreturn]] void __assert_fail(const char* assertion, const char* file, unsigned int line,
                                           const char* function) noexcept {
    if (cpu_backend::in_kernel()) {
        char what[1024];
        std::snprintf(what, sizeof what, "assert(%s) failed at %s:%u (in %s)", assertion, file, line, function);
        cpu_backend::kernel_fault(what);
    }
    std::fprintf(stderr, "%s: %s:%u: %s: Assertion `%s' failed.\n", program_invocation_short_name, file, line, function,
                 assertion);
    std::abort();
}
