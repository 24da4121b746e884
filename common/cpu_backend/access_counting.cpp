// common/cpu_backend/access_counting.cpp — the counting build: every global and shared memory access a CUDA thread
// makes, grouped into warp-level instructions and counted as a GPU's L1 would count them (sectors, wavefronts).
//
// How the accesses are seen: the counting tree (CMake option COUNTERS, `make counters`, build/cpu-counters) compiles
// every file but this backend with GCC's ThreadSanitizer instrumentation (-fsanitize=thread at compile time only),
// which emits a call before each memory access: __tsan_read4(address), __tsan_write16(address), ... It does not link
// ThreadSanitizer's runtime: this file defines those entry points instead. Outside a counted block (host code, other
// threads) each costs one thread-local load and a compare. Inside one, the access is classified by its address
// (the block's shared memory, a cudaMalloc'd or pinned buffer, or neither: a local variable, a kernel parameter) and
// filed under (instruction site, warp, how many times this lane executed that site before). The instruction site is
// the hook's return address: one per load or store instruction of the compiled kernel.
//
// One warp-level instruction = the k-th execution of one site by the lanes of one warp. In converged code that is
// exactly what a GPU executes; under divergence (a lane-dependent trip count, a branch taken by some lanes) the k-th
// executions of the lanes that get there are paired, as a GPU executes iteration k of a loop for the lanes still in
// it. The warp's pending instructions are counted at every __syncthreads (every thread has arrived, so nothing more
// can join them) and at the end of the block.
//
// Counting (the rules, with their sources, are in README.md beside this file, "Counting memory transactions"):
//   global: 1 request per warp instruction; its sectors are the distinct 32-byte-aligned segments the active lanes'
//           bytes fall in; ideal = the distinct bytes requested / 32, rounded up.
//   shared: 32 banks of 4 bytes; a warp instruction of 1-4-byte accesses is one phase of 32 lanes, 8-byte accesses
//           two phases of 16 lanes, 16-byte accesses four phases of 8 lanes (two of 16 for a 16-byte load whose
//           lanes pair up on one address: lane n with n^1, or n with n^2); each phase costs as many wavefronts as
//           the most distinct 4-byte words any one bank must deliver (the same word to several lanes is a broadcast);
//           ideal = per phase, the distinct words / 32, rounded up (at least 1).
#include <cxxabi.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/access_counters.h"
#include "common/cpu_backend/internal.h"

namespace cpu_backend::counting {
namespace {

enum class Mode { off, summary, per_launch };

Mode configured_mode() {
#if defined(CUDA_TEACH_COUNTERS)
    static const Mode mode = [] {
        const char* value = std::getenv("CUDA_CPU_COUNTERS");
        if (!value || !*value || std::strcmp(value, "summary") == 0) return Mode::summary;
        if (std::strcmp(value, "per-launch") == 0) return Mode::per_launch;
        if (std::strcmp(value, "off") == 0) return Mode::off;
        fatal("CUDA_CPU_COUNTERS=%s: expected summary, per-launch or off", value);
    }();
    return mode;
#else
    return Mode::off;
#endif
}

enum Kind : uint8_t { global_load, global_store, shared_load, shared_store };
constexpr bool is_shared(Kind k) { return k == shared_load || k == shared_store; }

// One warp-level instruction being assembled: each active lane's address.
struct WarpInstruction {
    Kind kind;
    uint32_t size;
    uint32_t lanes = 0;  // bit l: lane l executed it
    std::array<uintptr_t, 32> addresses;
};

struct SiteLane {
    const void* site;
    uint32_t thread;
    bool operator==(const SiteLane&) const = default;
};
struct SiteWarpOccurrence {
    const void* site;
    uint32_t warp;
    uint32_t occurrence;
    Kind kind;
    bool operator==(const SiteWarpOccurrence&) const = default;
};
struct Hash {
    static uint64_t mix(uint64_t x) {
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        return x ^ (x >> 33);
    }
    size_t operator()(const SiteLane& k) const { return mix(uintptr_t(k.site) ^ (uint64_t(k.thread) << 48)); }
    size_t operator()(const SiteWarpOccurrence& k) const {
        return mix(uintptr_t(k.site) ^ (uint64_t(k.warp) << 40) ^ (uint64_t(k.occurrence) << 20) ^ k.kind);
    }
};

struct Range {
    uintptr_t begin, end;
};

using Counts = std::array<AccessCounts, 4>;  // by Kind

// The block running on this OS thread, while it runs under counting.
struct BlockCounting {
    std::vector<Range> shared;        // this block's shared memory: dynamic, then each static __shared__ variable
    const std::vector<Range>* global;  // device and pinned buffers, sorted (a snapshot taken at launch)
    std::unordered_map<SiteLane, uint32_t, Hash> executions;  // how often each lane ran each site
    std::unordered_map<SiteWarpOccurrence, WarpInstruction, Hash> pending;
    Counts counts{};
    uint64_t atomics = 0;

    bool in(const std::vector<Range>& ranges, uintptr_t a) const {
        auto it = std::upper_bound(ranges.begin(), ranges.end(), a,
                                   [](uintptr_t x, const Range& r) { return x < r.begin; });
        return it != ranges.begin() && a < (--it)->end;
    }
    bool in_shared(uintptr_t a) const {
        for (const Range& r : shared)
            if (a >= r.begin && a < r.end) return true;
        return false;
    }

    void record(const void* address, unsigned size, bool store, const void* site) {
        const uintptr_t a = reinterpret_cast<uintptr_t>(address);
        Kind kind;
        if (in_shared(a))
            kind = store ? shared_store : shared_load;
        else if (in(*global, a))
            kind = store ? global_store : global_load;
        else
            return;  // a local variable, a kernel parameter: registers or the stack frame on a GPU
        const uint32_t thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        const uint32_t occurrence = executions[{site, thread}]++;
        WarpInstruction& w = pending[{site, thread / 32, occurrence, kind}];
        if (w.lanes == 0) {
            w.kind = kind;
            w.size = size;
        }
        w.lanes |= 1u << (thread % 32);
        w.addresses[thread % 32] = a;
    }

    void count_atomic(const void* address) {
        const uintptr_t a = reinterpret_cast<uintptr_t>(address);
        if (in_shared(a) || in(*global, a)) ++atomics;
    }

    void flush() {
        for (const auto& [key, w] : pending)
            count_warp_instruction(is_shared(w.kind), w.size, w.lanes, w.addresses.data(), counts[w.kind],
                                   w.kind == shared_load || w.kind == global_load);
        pending.clear();
    }
};

thread_local BlockCounting* counted_block = nullptr;

}  // namespace

// The arithmetic of one warp instruction (a free function, so the tests can feed it hand-made patterns).
void count_warp_instruction(bool shared, unsigned size, uint32_t lanes, const uintptr_t* addresses, AccessCounts& out,
                            bool load) {
    if (lanes == 0) return;
    const unsigned active = static_cast<unsigned>(std::popcount(lanes));
    out.requests += 1;
    out.lane_accesses += active;
    out.bytes_requested += uint64_t(active) * size;
    if (!shared) {
        // Sectors: the distinct 32-byte segments touched. Ideal: the distinct bytes, packed.
        std::array<uintptr_t, 32 * 9> sectors;  // an access of up to 256 bytes spans at most 9 sectors
        std::array<std::pair<uintptr_t, uintptr_t>, 32> spans;
        unsigned n_sectors = 0, n_spans = 0;
        for (unsigned lane = 0; lane < 32; ++lane) {
            if (!(lanes >> lane & 1)) continue;
            const uintptr_t first = addresses[lane], last = first + size - 1;
            for (uintptr_t s = first >> 5; s <= last >> 5 && n_sectors < sectors.size(); ++s) sectors[n_sectors++] = s;
            spans[n_spans++] = {first, last + 1};
        }
        std::sort(sectors.begin(), sectors.begin() + n_sectors);
        out.transactions += static_cast<uint64_t>(std::unique(sectors.begin(), sectors.begin() + n_sectors) -
                                                  sectors.begin());
        std::sort(spans.begin(), spans.begin() + n_spans);
        uint64_t distinct = 0;
        uintptr_t covered_to = 0;
        for (unsigned i = 0; i < n_spans; ++i) {
            const auto [b, e] = spans[i];
            const uintptr_t from = std::max(b, covered_to);
            if (e > from) distinct += e - from;
            covered_to = std::max(covered_to, e);
        }
        out.ideal_transactions += (distinct + 31) / 32;
        return;
    }
    // Shared: phases of 128 bytes' worth of lanes; in each, the busiest bank's distinct words.
    unsigned lanes_per_phase = size <= 4 ? 32 : size <= 8 ? 16 : 8;
    if (load && size == 16) {
        // A 16-byte load whose active lanes pair up on one address (lane n with n^1, or n with n^2: a quarter-warp
        // reading at most 4 distinct rows) is served a half-warp at a time, 2 phases instead of 4: NVIDIA's rule
        // for LDS.128 (forums.developer.nvidia.com/t/unexpected-shared-memory-bank-conflict/77228), which issue 35
        // reports measured on sm_86 and sm_90 as 2 wavefronts for a broadcast per half-warp.
        for (const unsigned partner_bit : {1u, 2u}) {
            bool paired = true;
            for (unsigned lane = 0; lane < 32 && paired; ++lane) {
                const unsigned partner = lane ^ partner_bit;
                if ((lanes >> lane & 1) && (lanes >> partner & 1)) paired = addresses[lane] == addresses[partner];
            }
            if (paired) lanes_per_phase = 16;
        }
    }
    const unsigned words_per_access = size <= 4 ? 1 : (size + 3) / 4;
    for (unsigned phase = 0; phase < 32 / lanes_per_phase; ++phase) {
        std::array<uintptr_t, 32 * 4> words;
        unsigned n = 0;
        for (unsigned lane = phase * lanes_per_phase; lane < (phase + 1) * lanes_per_phase; ++lane) {
            if (!(lanes >> lane & 1)) continue;
            for (unsigned w = 0; w < words_per_access && n < words.size(); ++w) words[n++] = (addresses[lane] >> 2) + w;
        }
        if (n == 0) continue;
        std::sort(words.begin(), words.begin() + n);
        n = static_cast<unsigned>(std::unique(words.begin(), words.begin() + n) - words.begin());
        std::array<unsigned, 32> per_bank{};
        unsigned busiest = 0;
        for (unsigned i = 0; i < n; ++i) busiest = std::max(busiest, ++per_bank[words[i] % 32]);
        out.transactions += busiest;
        out.ideal_transactions += std::max(1u, (n + 31) / 32);
    }
}

namespace {

// --- per launch, per kernel --------------------------------------------------------------------------------------
struct KernelTotals {
    std::vector<KernelAccessCounts> by_kernel;  // in first-launch order
    std::unordered_map<std::string, size_t> index;
    KernelAccessCounts& row(const std::string& name) {
        auto [it, added] = index.try_emplace(name, by_kernel.size());
        if (added) by_kernel.push_back(KernelAccessCounts{name});
        return by_kernel[it->second];
    }
};

struct State {
    std::mutex mutex;
    // Held from begin_launch to end_launch: one counted grid at a time, even when several host threads launch (the
    // launch's state below is the process's).
    std::mutex launch_mutex;
    KernelTotals since_reset, whole_run;
    // The launch running now (kernels run one at a time, also with asynchronous streams).
    std::string kernel_name;
    dim3 grid, block;
    std::vector<Range> global;
    KernelAccessCounts launch;
    bool summary_registered = false;
};
State& state() {
    static State& s = *new State;  // never destroyed: the exit summary reads it
    return s;
}

// "void (anonymous namespace)::gemm_v3_smem_tiled<32, false, false>(float const*, ...)" → "gemm_v3_smem_tiled<32,
// false, false>": the name a reader finds in the source.
std::string readable_kernel_name(const KernelInvocation& kernel) {
    const std::string& mangled = static_shared_of(kernel.kernel_address).kernel_name;
    std::string name;
    if (!mangled.empty()) {
        int status = 0;
        std::unique_ptr<char, decltype(&std::free)> demangled(
            abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
        name = status == 0 && demangled ? demangled.get() : mangled;
    } else if (kernel.kernel_text) {
        name = kernel.kernel_text;
    } else {
        char text[64];
        std::snprintf(text, sizeof text, "kernel at %p", kernel.kernel_address);
        return text;
    }
    for (size_t at; (at = name.find("(anonymous namespace)::")) != std::string::npos;) name.erase(at, 23);
    // The parameter list: the parentheses that close the name.
    if (!name.empty() && name.back() == ')') {
        int depth = 0;
        for (size_t i = name.size(); i-- > 0;) {
            if (name[i] == ')') ++depth;
            if (name[i] == '(' && --depth == 0) {
                name.erase(i);
                break;
            }
        }
    }
    // The return type of a template's specialization: everything before the first space outside <>.
    int angle = 0;
    for (size_t i = 0; i < name.size(); ++i) {
        if (name[i] == '<') ++angle;
        if (name[i] == '>') --angle;
        if (name[i] == ' ' && angle == 0) {
            name.erase(0, i + 1);
            break;
        }
    }
    return name;
}

void print_row(FILE* out, const KernelAccessCounts& k) {
    const auto global = [&](const char* what, const AccessCounts& c) {
        if (c.requests)
            std::fprintf(out, "  global %s %" PRIu64 " req, %.2f sectors/req (ideal %.2f, %.0f%%)", what, c.requests,
                         c.per_request(), double(c.ideal_transactions) / double(c.requests),
                         100.0 * c.efficiency());
    };
    const auto shared = [&](const char* what, const AccessCounts& c) {
        if (c.requests)
            std::fprintf(out, "  shared %s %" PRIu64 " req, %.2f wavefronts/req (%" PRIu64 " conflicts)", what,
                         c.requests, c.per_request(), c.replays());
    };
    global("ld", k.global_load);
    global("st", k.global_store);
    shared("ld", k.shared_load);
    shared("st", k.shared_store);
    if (k.atomics) std::fprintf(out, "  atomics %" PRIu64, k.atomics);
    std::fprintf(out, "\n");
}

void print_summary() {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (s.whole_run.by_kernel.empty()) return;
    std::fflush(stdout);  // after what the program printed, not inside it
    std::fprintf(stderr,
                 "\nCPU backend, counting build: memory requests of every kernel of this run, counted exactly from "
                 "each warp's addresses\n(global: 32-byte sectors per request; shared: wavefronts per request, bank "
                 "conflicts = replays; common/cpu_backend/README.md)\n");
    for (const KernelAccessCounts& k : s.whole_run.by_kernel) {
        std::fprintf(stderr, "%s × %" PRIu64 "\n", k.kernel.c_str(), k.launches);
        print_row(stderr, k);
    }
}

}  // namespace

bool enabled() {
    return configured_mode() != Mode::off;
}

void begin_launch(const KernelInvocation& kernel, dim3 grid, dim3 block) {
    State& s = state();
    s.launch_mutex.lock();  // released by end_launch, on this thread
    std::lock_guard lock(s.mutex);
    s.kernel_name = readable_kernel_name(kernel);
    s.grid = grid;
    s.block = block;
    s.global.clear();
    for_each_device_range([&s](const void* begin, size_t bytes) {
        s.global.push_back({uintptr_t(begin), uintptr_t(begin) + bytes});
    });
    std::sort(s.global.begin(), s.global.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    s.launch = KernelAccessCounts{s.kernel_name, 1};
    if (configured_mode() == Mode::summary && !s.summary_registered) {
        s.summary_registered = true;
        std::atexit(print_summary);
    }
}

void end_launch() {
    State& s = state();
    struct Release {
        std::mutex& m;
        ~Release() { m.unlock(); }
    } release{s.launch_mutex};
    std::lock_guard lock(s.mutex);
    s.since_reset.row(s.kernel_name) += s.launch;
    s.whole_run.row(s.kernel_name) += s.launch;
    if (configured_mode() == Mode::per_launch) {
        std::fprintf(stderr, "[counters] %s<<<(%u,%u,%u), (%u,%u,%u)>>>", s.kernel_name.c_str(), s.grid.x, s.grid.y,
                     s.grid.z, s.block.x, s.block.y, s.block.z);
        print_row(stderr, s.launch);
    }
}

void begin_block(const unsigned char* dynamic_shared, size_t dynamic_bytes, const StaticShared& static_shared) {
    thread_local BlockCounting block;
    block.shared.clear();
    block.shared.push_back({uintptr_t(dynamic_shared), uintptr_t(dynamic_shared) + dynamic_bytes});
    for (const StaticSharedVariable& v : static_shared.variables) {
        if (const unsigned char* start = static_shared_address(v))
            block.shared.push_back({uintptr_t(start), uintptr_t(start) + v.bytes});
    }
    block.global = &state().global;
    block.executions.clear();
    block.pending.clear();
    block.counts = {};
    block.atomics = 0;
    counted_block = &block;
}

void at_barrier() {
    if (counted_block) counted_block->flush();
}

void end_block() {
    BlockCounting* block = counted_block;
    if (!block) return;
    counted_block = nullptr;
    block->flush();
    State& s = state();
    std::lock_guard lock(s.mutex);
    s.launch.global_load += block->counts[global_load];
    s.launch.global_store += block->counts[global_store];
    s.launch.shared_load += block->counts[shared_load];
    s.launch.shared_store += block->counts[shared_store];
    s.launch.atomics += block->atomics;
}

std::vector<KernelAccessCounts> by_kernel() {
    State& s = state();
    std::lock_guard lock(s.mutex);
    return s.since_reset.by_kernel;
}

void reset() {
    State& s = state();
    std::lock_guard lock(s.mutex);
    s.since_reset = {};
}

// Nested ignore scopes (Paused, and the race build's annotations that kernels/tensor_core.h uses).
thread_local int ignore_depth = 0;
thread_local BlockCounting* ignored_block = nullptr;
void ignore_begin() {
    if (ignore_depth++ == 0) {
        ignored_block = counted_block;
        counted_block = nullptr;
    }
}
void ignore_end() {
    if (ignore_depth > 0 && --ignore_depth == 0) counted_block = ignored_block;
}

// The hooks' bodies (out of the extern "C" block, so they can see this namespace's thread_local).
void on_access(const void* address, unsigned size, bool store, const void* site) {
    if (BlockCounting* block = counted_block) [[unlikely]]
        block->record(address, size, store, site);
}
void on_atomic(const void* address) {
    if (BlockCounting* block = counted_block) [[unlikely]]
        block->count_atomic(address);
}

}  // namespace cpu_backend::counting

#if defined(CUDA_TEACH_COUNTERS)
// --- ThreadSanitizer's compile-time interface, implemented to count instead of to detect races ----------------
// The instrumented code calls these (GCC's sanitizer.def lists them); the semantics of the atomics are kept, with
// sequentially consistent ordering (at least what any caller asked for).
using cpu_backend::counting::on_access;
using cpu_backend::counting::on_atomic;
#define SITE __builtin_return_address(0)
extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
// kernels/tensor_core.h hides the backend's own work from the race detector with these (its bookkeeping, and in
// this build the poison a cp.async leaves until it lands): here they stop counting until the matching End.
void AnnotateIgnoreReadsBegin(const char*, int) {
    cpu_backend::counting::ignore_begin();
}
void AnnotateIgnoreReadsEnd(const char*, int) {
    cpu_backend::counting::ignore_end();
}
void AnnotateIgnoreWritesBegin(const char*, int) {
    cpu_backend::counting::ignore_begin();
}
void AnnotateIgnoreWritesEnd(const char*, int) {
    cpu_backend::counting::ignore_end();
}
#define ACCESS_HOOKS(N)                                                                              \
    void __tsan_read##N(void* a) { on_access(a, N, false, SITE); }                                   \
    void __tsan_write##N(void* a) { on_access(a, N, true, SITE); }                                   \
    void __tsan_unaligned_read##N(void* a) { on_access(a, N, false, SITE); }                         \
    void __tsan_unaligned_write##N(void* a) { on_access(a, N, true, SITE); }                         \
    void __tsan_volatile_read##N(void* a) { on_access(a, N, false, SITE); }                          \
    void __tsan_volatile_write##N(void* a) { on_access(a, N, true, SITE); }
ACCESS_HOOKS(1)
ACCESS_HOOKS(2)
ACCESS_HOOKS(4)
ACCESS_HOOKS(8)
ACCESS_HOOKS(16)
void __tsan_read_range(void* a, unsigned long size) { on_access(a, unsigned(size), false, SITE); }
void __tsan_write_range(void* a, unsigned long size) { on_access(a, unsigned(size), true, SITE); }

#define ATOMIC_HOOKS(N, T)                                                                                        \
    T __tsan_atomic##N##_load(const volatile T* a, int) { /* the read of a CAS loop: not an atomic operation */  \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                              \
    }                                                                                                             \
    void __tsan_atomic##N##_store(volatile T* a, T v, int) {                                                      \
        on_atomic((const void*)a);                                                                                \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                                 \
    }                                                                                                             \
    T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                                      \
        on_atomic((const void*)a);                                                                                \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                       \
    }                                                                                                             \
    T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) {                                                     \
        on_atomic((const void*)a);                                                                                \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                        \
    }                                                                                                             \
    T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) {                                                     \
        on_atomic((const void*)a);                                                                                \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                        \
    }                                                                                                             \
    T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) {                                                     \
        on_atomic((const void*)a);                                                                                \
        return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                        \
    }                                                                                                             \
    T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) {                                                      \
        on_atomic((const void*)a);                                                                                \
        return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                         \
    }                                                                                                             \
    T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) {                                                     \
        on_atomic((const void*)a);                                                                                \
        return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                        \
    }                                                                                                             \
    T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) {                                                    \
        on_atomic((const void*)a);                                                                                \
        return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                       \
    }                                                                                                             \
    /* A compare-and-swap counts when it succeeds: a float atomicAdd's loop is one operation, however often  */  \
    /* another worker made it retry.                                                                          */  \
    int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* expected, T desired, int, int) {             \
        const bool done =                                                                                         \
            __atomic_compare_exchange_n(a, expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);         \
        if (done) on_atomic((const void*)a);                                                                      \
        return done;                                                                                              \
    }                                                                                                             \
    int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* expected, T desired, int, int) {               \
        const bool done =                                                                                         \
            __atomic_compare_exchange_n(a, expected, desired, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);          \
        if (done) on_atomic((const void*)a);                                                                      \
        return done;                                                                                              \
    }                                                                                                             \
    T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T expected, T desired, int, int) {                   \
        const T wanted = expected;                                                                                \
        __atomic_compare_exchange_n(a, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
        if (expected == wanted) on_atomic((const void*)a);                                                        \
        return expected;                                                                                          \
    }
ATOMIC_HOOKS(8, int8_t)
ATOMIC_HOOKS(16, int16_t)
ATOMIC_HOOKS(32, int32_t)
ATOMIC_HOOKS(64, int64_t)
void __tsan_atomic_thread_fence(int) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
void __tsan_atomic_signal_fence(int) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
}  // extern "C"
#endif
