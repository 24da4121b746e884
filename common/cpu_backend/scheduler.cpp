// common/cpu_backend/scheduler.cpp — runs a grid of CUDA threads on the CPU.
//
// A block runs on one OS thread. Thread 0 starts on a fiber. If it finishes without reaching a barrier or a warp
// collective, the block takes the fast path: the other threads run one after another as plain calls on that fiber. If
// one of them reaches a sync point after all (lanes that exited early, legal before a warp collective), the fiber
// becomes that thread's own, the threads after it get fibers, and the block goes on as the general case. Otherwise
// every thread gets a fiber, and the block is scheduled in passes: in a pass every runnable thread runs until its next sync
// point (barrier, warp collective) or its end, then hands over directly to the next runnable thread (one context
// switch per thread per sync point); the last one hands back to the scheduler. Between passes the scheduler
// completes what can complete: warp collectives whose live lanes have all arrived, then the block barrier once every
// thread waits at it. Anything that cannot complete is a bug in the kernel, reported with its block, thread and line.
// Under schedule fuzzing there is no fast path, and each pass runs the threads in a freshly shuffled order.
//
// The race build (ThreadSanitizer, `make test-race`): every CUDA thread is a fiber (no fast path) registered with
// TSan's fiber API. Switches between fibers create no happens-before; only the sync points do (when a __syncthreads
// or warp collective completes, each of its threads releases, then each acquires), and the end of the grid is
// acquired by the launching thread. So two CUDA threads touching the same address, at least one writing, with no
// sync point between them are reported, within a block or across blocks. Memory that blocks reuse must not look
// shared between them to TSan: each TSan fiber keeps a stack of its own, and shared memory, static and dynamic, is
// remapped for every block (fill_static_shared). The scheduler's own bookkeeping runs inside TSan's ignore
// annotations.
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <boost/context/fiber.hpp>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/cpu_backend/internal.h"
#include "common/cpu_backend/runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CPU_BACKEND_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define CPU_BACKEND_TSAN 1
extern "C" {
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
// Stop at the first race, as compute-sanitizer would report it; the must-fail tests fork children that start
// threads (one per block), which TSan refuses after a fork unless told otherwise.
const char* __tsan_default_options() {
    return "halt_on_error=1:die_after_fork=0";
}
}
#endif

thread_local constinit uint3 threadIdx{0, 0, 0};
thread_local constinit uint3 blockIdx{0, 0, 0};
thread_local constinit uint3 blockDim{1, 1, 1};
thread_local constinit uint3 gridDim{1, 1, 1};

namespace cpu_backend {
namespace {

namespace ctx = boost::context;

#if defined(CPU_BACKEND_TSAN)
constexpr bool kRaceCheck = true;
// The scheduler's own reads and writes (thread states, hand-over slots, threadIdx, combined warp results) are not
// the kernel's: hidden from TSan, or every hand-over between fibers would be reported as a race.
void tsan_ignore_begin() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
}
void tsan_ignore_end() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
}
struct TsanIgnoreScope {
    TsanIgnoreScope() { tsan_ignore_begin(); }
    ~TsanIgnoreScope() { tsan_ignore_end(); }
};
char grid_token;    // every CUDA thread releases it as it finishes; the launching thread acquires it after the grid
char launch_token;  // the launching thread releases it before the blocks run; every CUDA thread acquires it first
// Creating a TSan fiber costs milliseconds, so each worker keeps two sets of them (one per CUDA thread of a block),
// used by alternate blocks: two consecutive blocks are never the same TSan thread, so a race between them is seen.
// (A race between blocks k and k + 2 at the same thread index is not: they are one TSan thread.)
constexpr unsigned kTsanFiberSets = 2;
#else
constexpr bool kRaceCheck = false;
struct TsanIgnoreScope {};
#endif
#if defined(CUDA_TEACH_SANITIZE)
constexpr bool kSanitizeBuild = true;  // __shared__ is a plain static: one block at a time, process-wide
#else
constexpr bool kSanitizeBuild = false;
#endif

// --- fiber stacks: allocated once per worker, with a guard region below each, so an overflow faults -------------
// The cpu flavor is compiled with -fstack-clash-protection: a frame larger than a page (a big local array) is probed
// page by page as it is allocated, so it faults in the guard region instead of jumping over it into other memory.
// The SIGSEGV handler below turns that fault into a message naming the kernel, block and thread.
class StackPool {
  public:
    static constexpr size_t kGuardBytes = 64 * 1024;
    explicit StackPool(size_t size) : size_(size) {}
    StackPool(const StackPool&) = delete;
    ~StackPool() {
        for (void* base : free_) munmap(base, size_ + kGuardBytes);
    }
    ctx::stack_context allocate() {
        void* base;
        if (!free_.empty()) {
            base = free_.back();
            free_.pop_back();
        } else {
            base = mmap(nullptr, size_ + kGuardBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            // Stacks grow down: the guard region sits below the lowest address.
            if (base == MAP_FAILED || mprotect(base, kGuardBytes, PROT_NONE) != 0) {
                fatal(
                    "cannot map a fiber stack of %zu KiB with its guard region (%s): each CUDA thread waiting at a "
                    "sync point has one, and a cooperative launch keeps all of its grid's threads waiting at once "
                    "(Linux allows about vm.max_map_count / 2 stacks; CUDA_CPU_SM_COUNT sets how many blocks a "
                    "cooperative grid may have)",
                    size_ / 1024, std::strerror(errno));
            }
        }
        // Stack tops at one offset modulo 4 KiB would all share a few L1 cache sets and evict each other on
        // every switch; staggering them by cache lines ("coloring") spreads them over the whole cache.
#if defined(CPU_BACKEND_ASAN)
        // A reused stack still carries the redzones of the frames of the fiber that last ran on it.
        ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(base) + kGuardBytes, size_);
#endif
        const size_t color = (colors_++ % 63) * 64;
        ctx::stack_context stack;
        stack.size = size_ - color;
        stack.sp = static_cast<char*>(base) + kGuardBytes + size_ - color;
        return stack;
    }
    void deallocate(ctx::stack_context& stack) {
        const size_t color = size_ - stack.size;
        free_.push_back(static_cast<char*>(stack.sp) + color - size_ - kGuardBytes);
    }
    size_t size() const {
        return size_;
    }

  private:
    size_t size_;
    size_t colors_ = 0;
    std::vector<void*> free_;
};

enum class ThreadState { runnable, at_barrier, at_warp_collective, finished };

struct CudaThread {
    ctx::fiber fiber;  // the CUDA thread's continuation while it is suspended
    uint3 index{};
    unsigned linear = 0;
    ThreadState state = ThreadState::runnable;
    std::source_location site;  // where it waits
    bool at_grid_sync = false;  // the barrier it waits at is this_grid().sync(), not __syncthreads
    // A pending warp collective.
    unsigned mask = 0;
    WarpCombine combine = nullptr;
    const void* in = nullptr;
    void* out = nullptr;
#if defined(CPU_BACKEND_ASAN)
    const void* stack_bottom = nullptr;
    size_t stack_size = 0;
#endif
#if defined(CPU_BACKEND_TSAN)
    void* tsan_fiber = nullptr;  // TSan's context for this CUDA thread in this block: one of tsan_fibers
    void* tsan_fibers[kTsanFiberSets] = {};
    // Each TSan fiber keeps its own stack, so no other TSan thread ever touched that memory: no false races there.
    ctx::stack_context tsan_stacks[kTsanFiberSets] = {};
#endif
    const char* guard_low = nullptr;  // the guard region below its stack: a fault there is a stack overflow
    const char* guard_high = nullptr;
};

struct PooledStack {  // the StackAllocator concept Boost.Context asks for
    StackPool* pool;
    CudaThread* owner;
    unsigned set;  // the race build: which of the owner's TSan fibers (and its stack) runs this block
    ctx::stack_context allocate() {
#if defined(CPU_BACKEND_TSAN)
        ctx::stack_context& kept = owner->tsan_stacks[set];
        if (!kept.sp) kept = pool->allocate();
        ctx::stack_context stack = kept;
#else
        ctx::stack_context stack = pool->allocate();
#endif
        owner->guard_high = static_cast<const char*>(stack.sp) - stack.size;
        owner->guard_low = owner->guard_high - StackPool::kGuardBytes;
#if defined(CPU_BACKEND_ASAN)
        owner->stack_bottom = static_cast<char*>(stack.sp) - stack.size;  // ASan must know where it switches to
        owner->stack_size = stack.size;
#endif
        return stack;
    }
    void deallocate(ctx::stack_context& stack) noexcept {
#if defined(CPU_BACKEND_TSAN)
        (void)stack;  // kept for the next block that runs this TSan fiber
#else
        pool->deallocate(stack);
#endif
    }
};

// The barrier of a cooperative launch's grid: each block's OS thread waits here once all its CUDA threads have
// reached this_grid().sync(). A block that finishes while others wait (or before they arrive) would hang a GPU.
struct GridBarrier {
    explicit GridBarrier(uint64_t blocks_) : blocks(blocks_) {}
    std::mutex mutex;
    std::condition_variable released;
    const uint64_t blocks;
    uint64_t arrived = 0, generation = 0, exited = 0;
    uint3 first_exited{};  // the first block that finished
};

// What one worker knows about the block it is running.
struct BlockRun {
    const KernelInvocation* kernel = nullptr;
    uint3 block{};
    uint64_t serial = 0;  // counts the blocks this worker has run (block_serial())
    unsigned thread_count = 0;
    std::vector<CudaThread> threads;
    CudaThread* current = nullptr;        // the fiber running now; null on the fast path
    unsigned plain_thread = 0;            // the thread running now on the fast path
    GridBarrier* grid_barrier = nullptr;  // a cooperative launch's: null in an ordinary launch
    // The fast path is on offer (thread 0 runs first, alone) or taken (threads 1, 2, ... run as plain calls on thread
    // 0's fiber after it). A plain call that reaches a sync point turns it off: that fiber becomes its thread's own.
    bool plain_calls = false;
    // How many threads are in each blocked state, counted as they arrive (no sweep over the block after a pass).
    unsigned finished = 0, at_barrier = 0, at_warp_collective = 0;
    // A pass: threads hand over directly to the next runnable thread in pass order (one switch per thread per
    // sync point instead of two through the scheduler); the last one hands back to the scheduler.
    const unsigned* pass_order = nullptr;  // null: 0, 1, 2, ... (fuzzing shuffles it)
    unsigned pass_position = 0;            // where the search for the next runnable thread starts
    unsigned pass_end = 0;                 // positions [pass_end, thread_count) are not in this pass
    ctx::fiber scheduler;                  // the worker's own stack, while CUDA threads run
    ctx::fiber* park_slot = nullptr;       // where a resumed context must park the continuation that resumed it
    ctx::fiber discarded;                  // the park slot of a finished fiber
#if defined(CPU_BACKEND_ASAN)
    const void* worker_stack_bottom = nullptr;
    size_t worker_stack_size = 0;
#endif
#if defined(CPU_BACKEND_TSAN)
    void* tsan_scheduler = nullptr;  // TSan's context of the OS thread running the block
    unsigned tsan_set = 0;           // which set of TSan fibers this block uses
    uint64_t blocks_run = 0;
    // What the barriers release and acquire: allocated per block, so no synchronization carries over from one block
    // to the next (freed memory takes its TSan sync state with it).
    char* barrier_token = nullptr;
#endif
};

struct Config {
    unsigned workers = 1;
    std::atomic<bool> fuzz{false};  // changed at run time by set_schedule_fuzzing()
    std::atomic<uint64_t> fuzz_seed{0};
    size_t stack_bytes = 0;
};

Config& config() {
    static Config cfg;
    static const bool initialized = [](Config& c) {
        if (const char* w = std::getenv("CUDA_CPU_WORKERS")) {
            char* end = nullptr;
            const long n = std::strtol(w, &end, 10);
            if (end == w || *end != '\0' || n < 1 || n > 1024)
                fatal("CUDA_CPU_WORKERS must be a whole number from 1 to 1024, not '%s'", w);
            c.workers = static_cast<unsigned>(n);
        }
#if defined(CUDA_TEACH_SANITIZE)
        c.workers = 1;  // __shared__ is a plain static in this build: one block at a time, process-wide
#endif
        if (const char* f = std::getenv("CUDA_CPU_FUZZ"); f && *f) {
            char* end = nullptr;
            c.fuzz_seed = std::strtoull(f, &end, 10);
            if (end == f || *end != '\0' || *f == '-')
                fatal("CUDA_CPU_FUZZ must be a seed (a whole number >= 0), not '%s'", f);
            c.fuzz = true;
        }
#if defined(CPU_BACKEND_ASAN)
        size_t kib = 1024;  // AddressSanitizer's redzones make frames much larger
#else
        size_t kib = 256;
#endif
        if (const char* s = std::getenv("CUDA_CPU_STACK_KB")) {
            char* end = nullptr;
            const long n = std::strtol(s, &end, 10);
            if (end == s || *end != '\0' || n < 16 || n > 65536)
                fatal("CUDA_CPU_STACK_KB must be from 16 to 65536, not '%s'", s);
            kib = static_cast<size_t>(n);
        }
        c.stack_bytes = kib * 1024;
        return true;
    }(cfg);
    (void)initialized;
    return cfg;
}

struct Worker {
    Worker() {
        // The SIGSEGV of a stack overflow must be handled on another stack than the one that overflowed.
        stack_t current{};
        if (sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
            signal_stack.reset(new char[kSignalStackBytes]);
            stack_t ours{};
            ours.ss_sp = signal_stack.get();
            ours.ss_size = kSignalStackBytes;
            if (sigaltstack(&ours, nullptr) != 0) signal_stack.reset();
        }
#if defined(CPU_BACKEND_ASAN)
        // AddressSanitizer must be told the bounds of each stack a switch lands on, this OS thread's own too.
        pthread_attr_t attributes;
        pthread_getattr_np(pthread_self(), &attributes);
        void* bottom = nullptr;
        pthread_attr_getstack(&attributes, &bottom, &run.worker_stack_size);
        run.worker_stack_bottom = bottom;
        pthread_attr_destroy(&attributes);
#endif
    }
    ~Worker() {
        if (signal_stack) {
            stack_t off{};
            off.ss_flags = SS_DISABLE;
            sigaltstack(&off, nullptr);
        }
    }
    static constexpr size_t kSignalStackBytes = 64 * 1024;
    std::unique_ptr<char[]> signal_stack;  // set when this thread had no alternate signal stack yet
    BlockRun run;
    std::vector<unsigned> order;
    StackPool stacks{config().stack_bytes};
    // Whole pages of their own (the race build remaps them for every block).
    static constexpr size_t kDynamicSharedMapped = (kMaxSharedBytes + 4095) / 4096 * 4096;
    struct Unmap {
        void operator()(unsigned char* p) const { munmap(p, kDynamicSharedMapped); }
    };
    std::unique_ptr<unsigned char[], Unmap> dynamic_shared{map_dynamic_shared()};
    static unsigned char* map_dynamic_shared() {
        void* p = mmap(nullptr, kDynamicSharedMapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) fatal("cannot map shared memory for a worker");
        return static_cast<unsigned char*>(p);
    }
};
thread_local Worker* this_worker = nullptr;

thread_local std::unique_ptr<Worker> owned_worker;

#if defined(CPU_BACKEND_TSAN)
// In a forked child (the must-fail tests' children) TSan no longer tracks the parent's fibers correctly: the child
// creates its own, with fresh stacks (the old ones are left alone).
void forget_tsan_fibers_in_child() {
    if (!this_worker) return;
    for (CudaThread& t : this_worker->run.threads) {
        for (unsigned set = 0; set < kTsanFiberSets; ++set) {
            t.tsan_fibers[set] = nullptr;
            t.tsan_stacks[set] = {};
        }
    }
}
#endif

Worker& worker() {
    if (!this_worker) {
        owned_worker = std::make_unique<Worker>();
        this_worker = owned_worker.get();
#if defined(CPU_BACKEND_TSAN)
        // Never freed in the race build: freeing is a write TSan would check against the CUDA threads' reads.
        owned_worker.release();
        static const bool hooked = pthread_atfork(nullptr, nullptr, forget_tsan_fibers_in_child) == 0;
        (void)hooked;
#endif
    }
    return *this_worker;
}

// --- a stack overflow or an out-of-bounds access in a kernel: a message instead of a bare SIGSEGV -------------
struct sigaction previous_segv_action;

uint3 thread_index(unsigned linear);

// What the handler needs to name a code address's line, found before any fault (none of it is safe in a handler).
struct CodeLocator {
    char executable[4096] = {};
    uintptr_t load_bias = 0;  // run-time address = link-time address + load_bias (position-independent executables)
};
CodeLocator code_locator;

int find_load_bias(dl_phdr_info* info, size_t, void* bias) {
    *static_cast<uintptr_t*>(bias) = info->dlpi_addr;  // the first object listed is the executable
    return 1;
}

void append(char* text, size_t size, size_t& length, const char* format, ...) __attribute__((format(printf, 4, 5)));
void append(char* text, size_t size, size_t& length, const char* format, ...) {
    if (length >= size) return;
    va_list args;
    va_start(args, format);
    const int n = std::vsnprintf(text + length, size - length, format, args);
    va_end(args);
    if (n > 0) length = std::min(size - 1, length + size_t(n));
}

// addr2line's "/repo/build/cpu/../../kernels/x.cu:12 (discriminator 1)" as "/repo/kernels/x.cu:12", in place.
void tidy_source_path(char* path) {
    if (char* note = std::strstr(path, " (discriminator")) *note = '\0';
    for (char* up; (up = std::strstr(path, "/../")) != nullptr;) {
        char* parent = up;
        while (parent > path && parent[-1] != '/') --parent;
        if (parent == path || parent == up) break;  // nothing to remove: leave the rest as it is
        std::memmove(parent, up + 4, std::strlen(up + 4) + 1);
    }
}

// "at file:line (in function)" for a code address, from addr2line (binutils) on the executable: the cpu flavor is
// built with -g1 (line tables) for this. Runs a child process from the signal handler (about to abort anyway); any
// failure leaves the raw address.
void append_code_location(char* text, size_t size, size_t& length, uintptr_t pc) {
    char address[32];
    std::snprintf(address, sizeof address, "%#lx", static_cast<unsigned long>(pc - code_locator.load_bias));
    char output[2048];
    size_t got = 0;
    int fds[2];
    if (code_locator.executable[0] && pipe2(fds, O_CLOEXEC) == 0) {
        // posix_spawn, not fork: fork would run the pthread_atfork handlers (streams.cpp waits for the streams
        // there). Its stdout is set up here, without file actions, which allocate (TSan reports that in a handler).
        const int saved_stdout = dup(STDOUT_FILENO);
        dup2(fds[1], STDOUT_FILENO);
        char* const argv[] = {const_cast<char*>("addr2line"),
                              const_cast<char*>("-C"),
                              const_cast<char*>("-f"),
                              const_cast<char*>("-i"),
                              const_cast<char*>("-e"),
                              code_locator.executable,
                              address,
                              nullptr};
        pid_t child = -1;
        if (posix_spawnp(&child, "addr2line", nullptr, nullptr, argv, environ) != 0) child = -1;
        if (saved_stdout >= 0) {
            dup2(saved_stdout, STDOUT_FILENO);
            close(saved_stdout);
        }
        close(fds[1]);
        for (ssize_t n;
             child > 0 && got < sizeof output - 1 && (n = read(fds[0], output + got, sizeof output - 1 - got)) > 0;)
            got += size_t(n);
        close(fds[0]);
        int status = 0;
        if (child > 0) waitpid(child, &status, 0);
        if (child <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) got = 0;
    }
    output[got] = '\0';
    // addr2line -f -i: function, then file:line, for the innermost inlined function first, then its callers.
    char* lines[16];
    unsigned count = 0;
    for (char* p = output; *p && count < 16;) {
        lines[count++] = p;
        char* end = std::strchr(p, '\n');
        if (!end) break;
        *end = '\0';
        p = end + 1;
    }
    if (count < 2 || std::strncmp(lines[1], "??", 2) == 0) {
        append(text, size, length, "at %s+%s%s%s (no line: addr2line from binutils, and a build with -g1, give it)",
               code_locator.executable, address, count >= 1 ? " in " : "", count >= 1 ? lines[0] : "");
        return;
    }
    for (unsigned i = 1; i < count; i += 2) tidy_source_path(lines[i]);
    append(text, size, length, "at %s (in %s)", lines[1], lines[0]);
    for (unsigned i = 2; i + 1 < count; i += 2)
        append(text, size, length, ", inlined into %s at %s", lines[i], lines[i + 1]);
}

// Whether the faulting access was a write: the page fault's error code (x86-64 only; elsewhere, unknown).
const char* access_kind(const void* context) {
#if defined(__x86_64__)
    const auto* uc = static_cast<const ucontext_t*>(context);
    return (uc->uc_mcontext.gregs[REG_ERR] & 2) ? "wrote" : "read";
#else
    (void)context;
    return "accessed";
#endif
}

uintptr_t faulting_pc(const void* context) {
    const auto* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
    return uintptr_t(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
    return uintptr_t(uc->uc_mcontext.pc);
#else
    (void)uc;
    return 0;
#endif
}

[[noreturn]] void report_guard_page_fault(const Worker* w, const char* address, const GuardHit& hit, void* context) {
    char text[4096];
    size_t length = 0;
    const ptrdiff_t offset = address - hit.start;  // what the kernel indexed, in bytes
    const bool before = offset < 0;
    if (w && w->run.kernel) {
        const BlockRun& run = w->run;
        const uint3 t = run.current ? run.current->index : thread_index(run.plain_thread), b = run.block;
        append(text, sizeof text, length,
               "CPU backend: kernel fault in block (%u,%u,%u), kernel launched at %s:%d (in %s):\n  thread "
               "(%u,%u,%u) ",
               b.x, b.y, b.z, run.kernel->launch_file, run.kernel->launch_line, run.kernel->launch_function, t.x, t.y,
               t.z);
    } else {
        append(text, sizeof text, length, "CPU backend: host code ");  // on a GPU it could not reach device memory
    }
    append(text, sizeof text, length, "%s %s a %zu-byte device buffer at %p", access_kind(context),
           before ? "before the start of" : "past the end of", hit.bytes, static_cast<const void*>(hit.start));
    if (hit.file) append(text, sizeof text, length, " (cudaMalloc at %s:%d)", hit.file, hit.line);
    append(text, sizeof text, length, ": byte offset %td, ", offset);
    append_code_location(text, sizeof text, length, faulting_pc(context));
    append(text, sizeof text, length,
           ".\n  On a GPU this is an out-of-bounds access (compute-sanitizer: \"Invalid __global__ %s\"); guard the "
           "index (if (i < n)) or size the buffer for every thread.\n",
           *access_kind(context) == 'w' ? "write" : "read");
    (void)!write(STDERR_FILENO, text, length);
    std::abort();
}

void on_segv(int signal, siginfo_t* info, void* context) {
    const Worker* w = this_worker;
    const char* address = static_cast<const char*>(info->si_addr);
    // Whose stack runs now: the current fiber's, or on the fast path thread 0's, which the plain calls run on.
    const CudaThread* on_stack = !w || !w->run.kernel ? nullptr
                                 : w->run.current     ? w->run.current
                                 : w->run.plain_calls ? &w->run.threads[0]
                                                      : nullptr;
    if (on_stack && address >= on_stack->guard_low && address < on_stack->guard_high) {
        const BlockRun& run = w->run;
        const uint3 t = run.current ? run.current->index : thread_index(run.plain_thread), b = run.block;
        char text[1024];
        const int length = std::snprintf(
            text, sizeof text,
            "CPU backend: kernel fault in block (%u,%u,%u), kernel launched at %s:%d (in %s):\n  thread (%u,%u,%u) "
            "overflowed its stack of %zu KiB. A CUDA thread's local variables live on its fiber's stack here (on a "
            "GPU, large local arrays spill to local memory): set CUDA_CPU_STACK_KB higher (e.g. "
            "CUDA_CPU_STACK_KB=%zu), or make the array smaller or shared.\n",
            b.x, b.y, b.z, run.kernel->launch_file, run.kernel->launch_line, run.kernel->launch_function, t.x, t.y, t.z,
            config().stack_bytes / 1024, config().stack_bytes / 1024 * 4);
        if (length > 0) (void)!write(STDERR_FILENO, text, std::min(size_t(length), sizeof text - 1));
        std::abort();
    }
    if (GuardHit hit{}; guard_page_hit(address, hit)) report_guard_page_fault(w, address, hit, context);
    // Not ours: whoever handled SIGSEGV before (a sanitizer) gets it, or the default action ends the program.
    if (previous_segv_action.sa_flags & SA_SIGINFO) {
        if (previous_segv_action.sa_sigaction) return previous_segv_action.sa_sigaction(signal, info, context);
    } else if (previous_segv_action.sa_handler != SIG_DFL && previous_segv_action.sa_handler != SIG_IGN) {
        return previous_segv_action.sa_handler(signal);
    }
    sigaction(SIGSEGV, &previous_segv_action, nullptr);  // returning re-runs the faulting access: the default action
}

// Checked at every launch, not once: a program (or a test's child process) may have reset SIGSEGV since.
void install_stack_overflow_handler() {
    static std::mutex installing;  // two threads' first launches must not both install (the second would chain to us)
    std::lock_guard lock(installing);
    struct sigaction current {};
    if (sigaction(SIGSEGV, nullptr, &current) != 0 || current.sa_sigaction == on_segv) return;
    if (!code_locator.executable[0]) {
        const ssize_t n = readlink("/proc/self/exe", code_locator.executable, sizeof code_locator.executable - 1);
        code_locator.executable[n > 0 ? n : 0] = '\0';
        dl_iterate_phdr(find_load_bias, &code_locator.load_bias);
    }
    struct sigaction action {};
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_segv_action);
}

std::string where(const std::source_location& site) {
    return std::string(site.file_name()) + ":" + std::to_string(site.line()) + " (in " + site.function_name() + ")";
}

std::string launch_site(const KernelInvocation& kernel) {
    return std::string(kernel.launch_file) + ":" + std::to_string(kernel.launch_line) + " (in " +
           kernel.launch_function + ")";
}

std::string coords(uint3 v) {
    return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

uint3 thread_index(unsigned linear) {
    return {linear % blockDim.x, (linear / blockDim.x) % blockDim.y, linear / (blockDim.x * blockDim.y)};
}

// --- switching between CUDA threads and the scheduler (annotated for AddressSanitizer) ------------------------

// The next runnable thread of this pass, or null when the pass is over (then control returns to the scheduler).
CudaThread* next_in_pass(BlockRun& run) {
    while (run.pass_position < run.pass_end) {
        const unsigned k = run.pass_position++;
        CudaThread& t = run.threads[run.pass_order ? run.pass_order[k] : k];
        if (t.state == ThreadState::runnable) return &t;
    }
    return nullptr;
}

void asan_start_switch(void** fake_stack, const BlockRun& run, const CudaThread* to) {
#if defined(CPU_BACKEND_ASAN)
    if (to)
        __sanitizer_start_switch_fiber(fake_stack, to->stack_bottom, to->stack_size);
    else
        __sanitizer_start_switch_fiber(fake_stack, run.worker_stack_bottom, run.worker_stack_size);
#else
    (void)fake_stack, (void)run, (void)to;
#endif
}
void asan_finish_switch(void* fake_stack) {
#if defined(CPU_BACKEND_ASAN)
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
    (void)fake_stack;
#endif
}
// Tells TSan which CUDA thread runs from here on: called immediately before the real switch, since anything done
// in between is charged to the target. No synchronization: a context switch is not a happens-before edge.
void tsan_switch(const BlockRun& run, const CudaThread* to) {
#if defined(CPU_BACKEND_TSAN)
    __tsan_switch_to_fiber(to ? to->tsan_fiber : run.tsan_scheduler, __tsan_switch_to_fiber_no_sync);
#else
    (void)run, (void)to;
#endif
}

// Parks the running context's continuation in `my_slot` and runs `to` (the scheduler when null) until something
// transfers back here.
void transfer(BlockRun& run, ctx::fiber& my_slot, CudaThread* to) {
    run.current = to;
    if (to) threadIdx = to->index;
    run.park_slot = &my_slot;
    void* fake_stack = nullptr;
    asan_start_switch(&fake_stack, run, to);
    tsan_switch(run, to);
    ctx::fiber resumed_by = std::move(to ? to->fiber : run.scheduler).resume();
    asan_finish_switch(fake_stack);
    *run.park_slot = std::move(resumed_by);  // whoever resumed us said where its continuation goes
}

#if defined(CPU_BACKEND_TSAN)
// A sync point completes for threads [first, first + count) of the block where `members` has their bit: what each
// did before it happens before what any does after it. Done here, as it completes, under each member's TSan identity
// (no real switch): a thread acquiring only when it resumes could also pick up what a faster one released at the
// next sync point.
void tsan_complete_sync_point(const BlockRun& run, unsigned first, unsigned count, const uint32_t* members,
                              void* token) {
    for (int pass = 0; pass < 2; ++pass) {
        for (unsigned i = 0; i < count; ++i) {
            if (members && !(members[i / 32] >> (i % 32) & 1u)) continue;
            __tsan_switch_to_fiber(run.threads[first + i].tsan_fiber, __tsan_switch_to_fiber_no_sync);
            if (pass == 0)
                __tsan_release(token);
            else
                __tsan_acquire(token);
        }
    }
    __tsan_switch_to_fiber(run.tsan_scheduler, __tsan_switch_to_fiber_no_sync);
}
#endif

// A CUDA thread reached a sync point: let the rest of the pass run.
void yield_to_next(BlockRun& run, CudaThread& self) {
    transfer(run, self.fiber, next_in_pass(run));
}

// The scheduler runs one pass: every runnable thread among the first `thread_count` positions runs to its next sync
// point or its end.
void run_pass(BlockRun& run, unsigned thread_count) {
    run.pass_position = 0;
    run.pass_end = thread_count;
    if (CudaThread* first = next_in_pass(run)) transfer(run, run.scheduler, first);
    run.current = nullptr;
}

[[noreturn]] void block_fault(BlockRun& run, const std::string& message);

// Runs the kernel for the current CUDA thread. An exception escaping it is reported the same way on a fiber and on
// the fast path: device code cannot throw (nvcc rejects `throw` in a kernel), so this is host-only code at fault.
void run_catching(BlockRun& run, const KernelInvocation& kernel) {
    try {
        kernel.run(kernel.bound_kernel);
    } catch (const ctx::detail::forced_unwind&) {
        throw;  // Boost.Context unwinding a fiber's stack: not the kernel's
    } catch (const std::exception& e) {
        const uint3 thread = run.current ? run.current->index : thread_index(run.plain_thread);
        block_fault(run, "thread " + coords(thread) + " let an exception escape the kernel (" + e.what() +
                             "): device code cannot throw");
    } catch (...) {
        const uint3 thread = run.current ? run.current->index : thread_index(run.plain_thread);
        block_fault(run, "thread " + coords(thread) + " let an exception escape the kernel: device code cannot throw");
    }
}

// The fast path: thread 0 finished without reaching a sync point, so the others run one after another as plain calls
// on its fiber, threadIdx counted up like an odometer. Returns the thread this fiber ends as: thread 0 when every plain
// call finished (they are counted as finished here), or the thread that reached a sync point, whose fiber this became
// (leave_plain_calls).
CudaThread* run_plain_calls(BlockRun& run, const KernelInvocation& kernel) {
    run.current = nullptr;
    uint3 index{0, 0, 0};
    for (unsigned i = 1; i < run.thread_count; ++i) {
        if (++index.x == blockDim.x) {
            index.x = 0;
            if (++index.y == blockDim.y) {
                index.y = 0;
                ++index.z;
            }
        }
        run.plain_thread = i;
        threadIdx = index;
        run_catching(run, kernel);
        if (!run.plain_calls) return run.current;  // thread i became a fiber thread, and has now finished
    }
    run.plain_calls = false;
    run.finished += run.thread_count - 1;  // threads 1 … n−1; thread 0 is counted by its fiber's end
    return &run.threads[0];
}

void start_fiber(Worker& w, CudaThread& thread);

// A plain call (thread plain_thread) reached a sync point: a kernel where thread 0 exits before lanes of its warp, or
// other warps, meet at a warp collective (legal: exited lanes count as arrived) or, wrongly, at a barrier. The fiber
// the plain calls run on becomes this thread's own; the threads before it have finished; those after it get fibers
// and run in this pass. From here the block is scheduled as any other, which completes the collective or reports
// the barrier that finished threads skipped.
void leave_plain_calls(Worker& w) {
    BlockRun& run = w.run;
    const unsigned first_waiting = run.plain_thread;
    for (unsigned i = 0; i < first_waiting; ++i) {
        CudaThread& t = run.threads[i];
        t.linear = i;
        t.index = thread_index(i);
        t.state = ThreadState::finished;
    }
    run.finished = first_waiting;
    CudaThread& self = run.threads[first_waiting];
    const CudaThread& stack_owner = run.threads[0];  // whose stack this fiber runs on
    self.linear = first_waiting;
    self.index = thread_index(first_waiting);
    self.state = ThreadState::runnable;
    self.guard_low = stack_owner.guard_low;
    self.guard_high = stack_owner.guard_high;
#if defined(CPU_BACKEND_ASAN)
    self.stack_bottom = stack_owner.stack_bottom;
    self.stack_size = stack_owner.stack_size;
#endif
    for (unsigned i = first_waiting + 1; i < run.thread_count; ++i) {
        CudaThread& t = run.threads[i];
        t.linear = i;
        t.index = thread_index(i);
        t.state = ThreadState::runnable;
        start_fiber(w, t);
    }
    run.plain_calls = false;
    run.current = &self;
    run.pass_position = first_waiting + 1;  // the pass goes on with the threads after it
    run.pass_end = run.thread_count;
}

void start_fiber(Worker& w, CudaThread& thread) {
    BlockRun* run = &w.run;
    CudaThread* self = &thread;
#if defined(CPU_BACKEND_TSAN)
    void*& fiber = thread.tsan_fibers[run->tsan_set];
    if (!fiber) fiber = __tsan_create_fiber(0);
    thread.tsan_fiber = fiber;
    const std::string name = "CUDA thread " + coords(thread.index) + " of block " + coords(run->block);
    __tsan_set_fiber_name(fiber, name.c_str());
    // Entered under its identity here, without a real switch: everything the host did before the launch happens
    // before what it does now, and it starts inside the ignore annotations (the first switch into it, and a finished
    // fiber's clean-up that runs on it, are scheduler work).
    __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
    __tsan_acquire(&launch_token);
    tsan_ignore_begin();
    __tsan_switch_to_fiber(run->tsan_scheduler, __tsan_switch_to_fiber_no_sync);
    const unsigned set = run->tsan_set;
#else
    const unsigned set = 0;
#endif
    thread.fiber = ctx::fiber(std::allocator_arg, PooledStack{&w.stacks, &thread, set}, [run, self](ctx::fiber&& sink) {
        asan_finish_switch(nullptr);
        *run->park_slot = std::move(sink);
        const KernelInvocation* kernel = run->kernel;
#if defined(CPU_BACKEND_TSAN)
        tsan_ignore_end();
#endif
        run_catching(*run, *kernel);
        // Thread 0 reached no sync point: the others run here as plain calls. This fiber ends as the last of them,
        // or as the one that reached a sync point (run_plain_calls says which).
        CudaThread* const finishing = run->plain_calls ? run_plain_calls(*run, *kernel) : self;
#if defined(CPU_BACKEND_TSAN)
        __tsan_release(&grid_token);  // what this thread wrote happens before the host's next look at memory
        tsan_ignore_begin();
#endif
        finishing->state = ThreadState::finished;
        ++run->finished;
        // Hand over to the next thread of the pass (or the scheduler); this fiber and its stack are released.
        CudaThread* next = next_in_pass(*run);
        run->current = next;
        if (next) threadIdx = next->index;
        run->park_slot = &run->discarded;
        asan_start_switch(nullptr, *run, next);
#if defined(CPU_BACKEND_TSAN)
        void* target = next ? next->tsan_fiber : run->tsan_scheduler;  // read while still ignored
        tsan_ignore_end();  // a fiber ends its run with no ignores, as it started
        __tsan_switch_to_fiber(target, __tsan_switch_to_fiber_no_sync);
#endif
        return std::move(next ? next->fiber : run->scheduler);
    });
}

// --- the pass scheduler -----------------------------------------------------------------------------------------
std::atomic<uint64_t> launch_counter{0};

[[noreturn]] void block_fault(BlockRun& run, const std::string& message) {
    std::fprintf(stderr, "CPU backend: kernel fault in block %s (grid %s, block %s), kernel launched at %s:\n  %s\n",
                 coords(run.block).c_str(), coords(gridDim).c_str(), coords(blockDim).c_str(),
                 launch_site(*run.kernel).c_str(), message.c_str());
    std::fflush(stderr);
    std::abort();
}

const char* state_name(ThreadState s) {
    switch (s) {
        case ThreadState::runnable:
            return "running";
        case ThreadState::at_barrier:
            return "waiting at __syncthreads";
        case ThreadState::at_warp_collective:
            return "waiting at a warp collective";
        case ThreadState::finished:
            return "exited";
    }
    return "?";
}

// A warp collective is waiting and cannot complete: say which lane it waits for and where that lane is.
[[noreturn]] void report_stuck_warp_collective(BlockRun& run) {
    for (unsigned i = 0; i < run.thread_count; ++i) {
        const CudaThread& t = run.threads[i];
        if (t.state != ThreadState::at_warp_collective) continue;
        const unsigned base = i / 32 * 32;
        std::string blocker = "lanes of its mask are at different collectives";
        for (unsigned l = 0; l < 32 && base + l < run.thread_count; ++l) {
            const CudaThread& other = run.threads[base + l];
            if (!(t.mask >> l & 1u) || other.state == ThreadState::finished) continue;
            if (other.state != ThreadState::at_warp_collective || other.mask != t.mask || other.combine != t.combine) {
                blocker = "lane " + std::to_string(l) + " (thread " + coords(other.index) + ") is " +
                          state_name(other.state) + " at " + where(other.site);
                break;
            }
        }
        char mask_text[16];
        std::snprintf(mask_text, sizeof mask_text, "0x%08x", t.mask);
        block_fault(run, "warp collective with mask " + std::string(mask_text) + " at " + where(t.site) +
                             " can never complete: thread " + coords(t.index) + " waits, but " + blocker);
    }
    block_fault(run, "no thread can make progress");
}

void combine_nothing(WarpLaneSlot*, unsigned);  // __syncwarp's, defined below

bool same_site(const std::source_location& a, const std::source_location& b) {
    return a.line() == b.line() && a.column() == b.column() &&
           (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

// Lanes of one collective: the same operation with the same mask. The call sites may differ: since sm_70 (independent
// thread scheduling) lanes of divergent branches meet at a collective reached from different lines.
bool same_collective(const CudaThread& a, const CudaThread& b) {
    return a.mask == b.mask && a.combine == b.combine;
}

// Completes every warp collective whose live lanes have all arrived. Returns whether any lane was released.
bool complete_warp_collectives(BlockRun& run) {
    bool released = false;
    const unsigned n = run.thread_count;
    for (unsigned base = 0; base < n; base += 32) {
        const unsigned lanes_here = std::min(32u, n - base);
        for (unsigned lane = 0; lane < lanes_here; ++lane) {
            CudaThread& first = run.threads[base + lane];
            if (first.state != ThreadState::at_warp_collective) continue;
            // The live lanes this collective waits for: named in the mask, present in the block, not exited. An
            // exited lane (or one past a partial last warp) counts as arrived: in the PTX ISA a shfl.sync, vote.sync,
            // match.sync or bar.warp.sync waits only for the non-exited threads of membermask. What it contributes
            // is the combiner's business (no ballot bit, no vote, an unpredictable value for a shuffle reading it).
            unsigned group = 0;
            bool ready = true;
            for (unsigned l = 0; l < lanes_here; ++l) {
                if (!(first.mask >> l & 1u)) continue;
                const CudaThread& other = run.threads[base + l];
                if (other.state == ThreadState::finished) continue;
                if (other.state != ThreadState::at_warp_collective || !same_collective(other, first)) {
                    ready = false;
                    break;
                }
                group |= 1u << l;
            }
            if (!ready) continue;
            WarpLaneSlot slots[32] = {};
            for (unsigned l = 0; l < lanes_here; ++l) {
                if (group >> l & 1u) slots[l] = {run.threads[base + l].in, run.threads[base + l].out};
            }
            run.current = &first;  // so that a fault reported by the combiner names a thread of this warp
            {
                // The collective's own reads (ldmatrix's rows) are the backend's work, not the current thread's:
                // the counting build counts them as each lane's access instead (kernels/tensor_core.h).
                const counting::Paused not_counted;
                first.combine(slots, group);  // (mma.sync and ldmatrix refuse a group short of 32 lanes themselves)
            }
            run.current = nullptr;
#if defined(CPU_BACKEND_TSAN)
            {
                // A token of its own: the lanes of this collective synchronize with each other, not with lanes
                // that met at another collective of the warp. (Freed memory takes its TSan sync state with it.)
                const std::unique_ptr<char> token(new char);
                tsan_complete_sync_point(run, base, lanes_here, &group, token.get());
            }
#endif
            for (unsigned l = 0; l < lanes_here; ++l) {
                if (group >> l & 1u) run.threads[base + l].state = ThreadState::runnable;
            }
            run.at_warp_collective -= static_cast<unsigned>(std::popcount(group));
            released = true;
        }
    }
    return released;
}

const char* barrier_name(const CudaThread& t) {
    return t.at_grid_sync ? "this_grid().sync()" : "__syncthreads";
}

// A cooperative launch's grid barrier, once every thread of this block has reached it: waits for every other block.
void wait_for_grid(BlockRun& run, const CudaThread& waiting) {
    GridBarrier& grid = *run.grid_barrier;
    std::unique_lock lock(grid.mutex);
    const uint64_t generation = grid.generation;
    if (grid.exited == 0 && ++grid.arrived == grid.blocks) {  // the last block to arrive releases them all
        grid.arrived = 0;
        ++grid.generation;
        grid.released.notify_all();
        return;
    }
    grid.released.wait(lock, [&] { return grid.generation != generation || grid.exited > 0; });
    if (grid.generation != generation) return;
    const uint3 exited = grid.first_exited;
    lock.unlock();
    block_fault(run, "block " + coords(exited) + " finished the kernel without reaching the this_grid().sync() at " +
                         where(waiting.site) +
                         " where this block waits: every block of a cooperative launch must reach each grid "
                         "barrier (a GPU would hang)");
}

void grid_block_exited(GridBarrier& grid, uint3 block) {
    std::lock_guard lock(grid.mutex);
    if (grid.exited++ == 0) grid.first_exited = block;
    grid.released.notify_all();
}

// Every thread is blocked or finished and no collective can complete: release the barrier, or report the bug.
void complete_barrier_or_fault(BlockRun& run) {
    if (run.finished + run.at_barrier < run.thread_count) report_stuck_warp_collective(run);
    const CudaThread* waiting = nullptr;
    for (unsigned i = 0; i < run.thread_count && !waiting; ++i) {
        if (run.threads[i].state == ThreadState::at_barrier) waiting = &run.threads[i];
    }
    if (run.finished > 0) {
        const CudaThread* exited = nullptr;
        for (unsigned i = 0; i < run.thread_count && !exited; ++i) {
            if (run.threads[i].state == ThreadState::finished) exited = &run.threads[i];
        }
        block_fault(run, "thread " + coords(exited->index) + " finished the kernel without reaching the " +
                             barrier_name(*waiting) + " at " + where(waiting->site) + " where thread " +
                             coords(waiting->index) +
                             " waits (it skipped the barrier: a barrier inside a branch, or an early return before "
                             "it): every thread of a block must reach each barrier");
    }
    const std::source_location& site = waiting->site;
    for (unsigned i = 0; i < run.thread_count; ++i) {
        const CudaThread& t = run.threads[i];
        if (!same_site(t.site, site) || t.at_grid_sync != waiting->at_grid_sync) {
            const bool both_syncthreads = !t.at_grid_sync && !waiting->at_grid_sync;
            block_fault(run, std::string("threads of one block wait at different ") +
                                 (both_syncthreads ? "__syncthreads" : "barriers") + ": thread " +
                                 coords(waiting->index) + " at the " + barrier_name(*waiting) + " at " + where(site) +
                                 ", thread " + coords(t.index) + " at the " + barrier_name(t) + " at " + where(t.site) +
                                 " (a barrier inside divergent code)");
        }
    }
    if (waiting->at_grid_sync) wait_for_grid(run, *waiting);  // then every block's threads go on
#if defined(CPU_BACKEND_TSAN)
    tsan_complete_sync_point(run, 0, run.thread_count, nullptr, run.barrier_token);  // every thread of the block
#endif
    counting::at_barrier();  // every thread has arrived: their warps' pending accesses are complete
    for (unsigned i = 0; i < run.thread_count; ++i) run.threads[i].state = ThreadState::runnable;
    run.at_barrier = 0;
}

// How one launch's blocks are scheduled: fixed when launch() is called, even if the grid runs later.
struct Schedule {
    uint64_t launch_number;
    bool fuzz;
    uint64_t fuzz_seed;
    const StaticShared* static_shared;  // the kernel's static __shared__ variables, filled for every block
};

void run_block(Worker& w, const KernelInvocation& kernel, uint3 block, const Schedule& schedule) {
    BlockRun& run = w.run;
    run.kernel = &kernel;
    run.block = block;
    ++run.serial;
    run.thread_count = blockDim.x * blockDim.y * blockDim.z;
    run.current = nullptr;
    run.finished = run.at_barrier = run.at_warp_collective = 0;
    blockIdx = block;
    if (run.threads.size() < run.thread_count) run.threads.resize(run.thread_count);

    const bool fuzz = schedule.fuzz;
    std::vector<unsigned>& order = w.order;  // the order of a pass (shuffled only when fuzzing)
    std::minstd_rand shuffle_rng;  // small state: seeding it per block costs nothing (a Mersenne Twister would)
    if (fuzz) {
        const uint64_t block_linear = (uint64_t(block.z) * gridDim.y + block.y) * gridDim.x + block.x;
        const uint64_t seed =
            schedule.fuzz_seed * 0x9E3779B97F4A7C15ull ^ (schedule.launch_number << 32) ^ block_linear;
        shuffle_rng.seed(static_cast<uint32_t>(seed ^ seed >> 32));
        order.resize(run.thread_count);
        std::iota(order.begin(), order.end(), 0u);
    }

    // Without fuzzing, thread 0 goes first, alone, on a fiber: if it needs no sync point, nobody does (or the
    // kernel is wrong), and the others run as plain calls. Fuzzing skips this fast path: every thread is a fiber
    // from the start and the passes run in shuffled order, so even `if (threadIdx.x == 0) s = ...;` followed by a
    // read of s without a barrier shows up as a wrong result.
#if defined(CPU_BACKEND_TSAN)
    run.tsan_scheduler = __tsan_get_current_fiber();
    run.tsan_set = static_cast<unsigned>(run.blocks_run++ % kTsanFiberSets);
    const std::unique_ptr<char> barrier_token(new char);
    run.barrier_token = barrier_token.get();
#endif
    unsigned first_fiber = 0;
    if (!fuzz && !kRaceCheck) {  // the race build: every thread on a fiber of its own, as fuzzing does
        CudaThread& first = run.threads[0];
        first.linear = 0;
        first.index = {0, 0, 0};
        first.state = ThreadState::runnable;
        start_fiber(w, first);
        run.pass_order = nullptr;
        run.plain_calls = true;  // if thread 0 finishes, its fiber runs the others (run_plain_calls)
        run_pass(run, 1);        // only thread 0 exists yet: the pass is thread 0 alone (and the plain calls)
        run.plain_calls = false;
        if (run.finished == run.thread_count) return;  // the fast path, all the way
        // Thread 0 waits at a sync point: the others need fibers. Or a plain call reached one: they have them.
        first_fiber = first.state == ThreadState::finished ? run.thread_count : 1;
    }

    for (unsigned i = first_fiber; i < run.thread_count; ++i) {
        CudaThread& t = run.threads[i];
        t.linear = i;
        t.index = thread_index(i);
        t.state = ThreadState::runnable;
        start_fiber(w, t);
    }
    run.pass_order = fuzz ? order.data() : nullptr;
    for (;;) {
        if (fuzz) std::shuffle(order.begin(), order.end(), shuffle_rng);
        run_pass(run, run.thread_count);
        if (run.finished == run.thread_count) return;
        if (run.at_warp_collective > 0 && complete_warp_collectives(run)) continue;
        complete_barrier_or_fault(run);
    }
}

// --- the worker pool: blocks spread over OS threads; each block stays on the thread that starts it ------------
class WorkerPool {
  public:
    // Runs body(block_number) for every block number, on `workers` threads including the caller.
    template <typename Body>
    void run(uint64_t block_count, unsigned workers, const Body& body) {
        std::unique_lock lock(mutex_);
        while (threads_ + 1 < workers) {
            std::thread([this] { loop(); }).detach();  // the pool lives as long as the process
            ++threads_;
        }
        next_block_ = 0;
        block_count_ = block_count;
        job_ = [&body](uint64_t b) { body(b); };
        active_ = threads_;
        ++generation_;
        lock.unlock();
        wake_.notify_all();
        drain();
        lock.lock();
        done_.wait(lock, [this] { return active_ == 0; });
        job_ = nullptr;
    }

  private:
    void drain() {
        for (uint64_t b; (b = next_block_.fetch_add(1)) < block_count_;) job_(b);
    }
    void loop() {
        uint64_t seen = 0;
        for (;;) {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return generation_ != seen; });
            seen = generation_;
            lock.unlock();
            drain();
            lock.lock();
            if (--active_ == 0) done_.notify_all();
        }
    }
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    size_t threads_ = 0;
    std::function<void(uint64_t)> job_;
    std::atomic<uint64_t> next_block_{0};
    uint64_t block_count_ = 0;
    uint64_t generation_ = 0;
    size_t active_ = 0;
};

std::mutex attribute_mutex;
std::unordered_map<const void*, int> max_dynamic_shared;  // set by cudaFuncSetAttribute

}  // namespace

void fatal(const char* format, ...) {
    std::fprintf(stderr, "CPU backend: ");
    va_list args;
    va_start(args, format);
    std::vfprintf(stderr, format, args);
    va_end(args);
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
    std::abort();
}

size_t max_dynamic_shared_of(const void* kernel, size_t static_bytes) {
    std::lock_guard lock(attribute_mutex);
    if (auto it = max_dynamic_shared.find(kernel); it != max_dynamic_shared.end()) return size_t(it->second);
    return kDefaultSharedBytes > static_bytes ? kDefaultSharedBytes - static_bytes : 0;
}

uint64_t block_serial() {
    return this_worker ? this_worker->run.serial : 0;
}

bool in_kernel() {
    return this_worker != nullptr && this_worker->run.kernel != nullptr;
}

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
    if (bytes < 0 || static_cast<size_t>(bytes) > kMaxSharedBytes) return record_error(cudaErrorInvalidValue);
    std::lock_guard lock(attribute_mutex);
    max_dynamic_shared[kernel] = bytes;
    return cudaSuccess;
}

namespace {
#if defined(CPU_BACKEND_TSAN)
// Fresh pages, so that TSan forgets the previous block's accesses (its mmap hook resets their shadow): they are not
// races with this block's. The variable starts a page (runtime.h); bytes from `keep_from` to the end of its last
// page (what shares that page, or the whole variable) keep their values.
void reset_tsan_view(unsigned char* start, size_t bytes, size_t keep_from) {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    if (page != 4096) fatal("the race build needs 4 KiB pages (runtime.h aligns __shared__ to them), not %zu", page);
    const size_t mapped = (bytes + page - 1) / page * page;
    std::vector<unsigned char> kept(start + keep_from, start + mapped);
    if (mmap(start, mapped, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
        fatal("cannot remap shared memory for the race build");
    if (!kept.empty()) std::memcpy(start + keep_from, kept.data(), kept.size());
}
#endif

// A block finds the kernel's static __shared__ variables filled with 0xFF bytes, as its dynamic shared memory, not
// holding what the previous block left there.
void fill_static_shared(const StaticSharedVariable& variable) {
    unsigned char* start = static_shared_address(variable);
    if (!start) return;
#if defined(CPU_BACKEND_TSAN)
    reset_tsan_view(start, variable.bytes, variable.bytes);
#endif
    std::memset(start, 0xFF, variable.bytes);
}

void run_grid_now(const KernelInvocation& kernel, dim3 grid, dim3 block, size_t shared_bytes,
                  const Schedule& schedule) {
    const uint64_t block_count = uint64_t(grid.x) * grid.y * grid.z;
    install_stack_overflow_handler();
    // The counting build: every block's global and shared accesses, counted per warp instruction.
    const bool counted = counting::enabled();
    struct CountedLaunch {
        bool on;
        ~CountedLaunch() {
            if (on) counting::end_launch();
        }
    } counted_launch{counted};
    if (counted) counting::begin_launch(kernel, grid, block);
    // A cooperative launch: every block at once, each on an OS thread of its own (run_grid checked that the grid fits
    // and that this build may run blocks at once), meeting at the grid's barrier.
    std::optional<GridBarrier> grid_barrier;
    if (kernel.cooperative) grid_barrier.emplace(block_count);
    GridBarrier* const barrier = grid_barrier ? &*grid_barrier : nullptr;
    auto run_one = [&](uint64_t b) {
        Worker& w = worker();
        gridDim = {grid.x, grid.y, grid.z};
        blockDim = {block.x, block.y, block.z};
        // A GPU's shared memory starts as garbage: 0xFF bytes (NaN as floats) make reads of unwritten smem show.
#if defined(CPU_BACKEND_ASAN)
        // Only `shared_bytes` of the worker's buffer belong to this launch: past them is an overflow.
        ASAN_UNPOISON_MEMORY_REGION(w.dynamic_shared.get(), kMaxSharedBytes);
        ASAN_POISON_MEMORY_REGION(w.dynamic_shared.get() + shared_bytes, kMaxSharedBytes - shared_bytes);
#endif
#if defined(CPU_BACKEND_TSAN)
        // Fresh pages for each block, so that TSan forgets the previous block's accesses; nothing to keep.
        reset_tsan_view(w.dynamic_shared.get(), Worker::kDynamicSharedMapped, Worker::kDynamicSharedMapped);
#endif
        std::memset(w.dynamic_shared.get(), 0xFF, shared_bytes);
        for (const StaticSharedVariable& v : schedule.static_shared->variables) fill_static_shared(v);
#if defined(CPU_BACKEND_TSAN)
        // An inlined __device__ helper's `__shared__` belongs to no kernel's symbol: it is not filled, but TSan must
        // forget the previous block's accesses to it all the same, or they would be reported as races between blocks.
        for (const StaticSharedVariable& v : helper_shared_variables())
            reset_tsan_view(static_shared_address(v), v.bytes, 0);
#endif
        const uint3 block_index{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                                static_cast<unsigned>(b / (uint64_t(grid.x) * grid.y))};
        if (counted) counting::begin_block(w.dynamic_shared.get(), shared_bytes, *schedule.static_shared);
        w.run.grid_barrier = barrier;
        run_block(w, kernel, block_index, schedule);
        if (barrier) grid_block_exited(*barrier, block_index);
        w.run.grid_barrier = nullptr;
        if (counted) counting::end_block();
        w.run.kernel = nullptr;  // sync points outside a kernel are errors
    };
    if (barrier && block_count > 1) {
        std::vector<std::thread> blocks;
        blocks.reserve(block_count);
        for (uint64_t b = 0; b < block_count; ++b) blocks.emplace_back([&run_one, b] { run_one(b); });
        for (std::thread& t : blocks) t.join();
        return;
    }
    // Under fuzzing the blocks also run in a shuffled order: on a GPU they run in any order, or all at once.
    std::vector<uint32_t> block_order;
    if (schedule.fuzz && block_count <= (uint64_t{1} << 24)) {
        block_order.resize(block_count);
        std::iota(block_order.begin(), block_order.end(), 0u);
        std::mt19937_64 rng(schedule.fuzz_seed * 0xBF58476D1CE4E5B9ull ^ schedule.launch_number);
        std::shuffle(block_order.begin(), block_order.end(), rng);
    }
    const auto block_number = [&block_order](uint64_t k) { return block_order.empty() ? k : block_order[k]; };
#if defined(CPU_BACKEND_TSAN)
    // One block at a time on this thread, all of it scheduler work hidden from TSan; the CUDA threads' TSan fibers
    // acquire what this thread did before the launch, and it acquires what they did once the grid is done.
    __tsan_release(&launch_token);
    tsan_ignore_begin();
    for (uint64_t k = 0; k < block_count; ++k) run_one(block_number(k));
    tsan_ignore_end();
    __tsan_acquire(&grid_token);  // the launch happens before whatever this thread does next (copies, launches)
    return;
#endif
    const unsigned workers = static_cast<unsigned>(std::min<uint64_t>(config().workers, block_count));
    if (workers <= 1) {
        for (uint64_t k = 0; k < block_count; ++k) run_one(block_number(k));
    } else {
        static WorkerPool& pool = *new WorkerPool;  // never destroyed: its threads wait on it until exit
        static std::mutex pool_mutex;               // one grid at a time through the pool
        std::lock_guard lock(pool_mutex);
        pool.run(block_count, workers, [&](uint64_t k) { run_one(block_number(k)); });
    }
}
}  // namespace

cudaError_t run_grid(const KernelInvocation& kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream) {
    // The limits a GPU enforces at launch (compute capability 8.0 and later).
    const uint64_t threads = uint64_t(block.x) * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 ||
        block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        threads > 1024) {
        return record_error(cudaErrorInvalidConfiguration);
    }
    // Static shared memory counts too: nvcc refuses a kernel declaring more than 48 KiB of it, and by default the
    // dynamic part may only fill the rest of those 48 KiB; cudaFuncSetAttribute raises the dynamic part's limit up
    // to what the block's total may reach (227 KiB).
    const StaticShared& static_shared = static_shared_of(kernel.kernel_address);
    if (static_shared.bytes > kMaxStaticSharedBytes) {
        fatal(
            "the kernel launched at %s:%d (%s) declares %zu bytes of static __shared__ memory, more than the %zu "
            "that nvcc accepts (ptxas: \"uses too much shared data\"); use dynamic shared memory and "
            "cudaFuncSetAttribute for more",
            kernel.launch_file, kernel.launch_line, kernel.launch_function, static_shared.bytes, kMaxStaticSharedBytes);
    }
    size_t shared_limit = kDefaultSharedBytes - static_shared.bytes;
    {
        std::lock_guard lock(attribute_mutex);
        if (auto it = max_dynamic_shared.find(kernel.kernel_address); it != max_dynamic_shared.end())
            shared_limit = static_cast<size_t>(it->second);  // as on a GPU, the attribute is the limit
    }
    if (shared_bytes > shared_limit || static_shared.bytes + shared_bytes > kMaxSharedBytes) {
        return record_error(cudaErrorInvalidValue);
    }
    if (kernel.cooperative) {  // every block must fit on the device at once, as a GPU checks
        int per_sm = 0;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel.kernel_address, int(threads), shared_bytes);
        const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
        if (blocks > uint64_t(per_sm) * uint64_t(reported_sm_count()))
            return record_error(cudaErrorCooperativeLaunchTooLarge);
        const char* one_block_at_a_time = kRaceCheck            ? "the race build"
                                          : kSanitizeBuild      ? "the sanitizer build"
                                          : counting::enabled() ? "the counting build"
                                                                : nullptr;
        if (blocks > 1 && one_block_at_a_time) {
            fatal(
                "the cooperative launch at %s:%d has %llu blocks, which must run at once to meet at "
                "this_grid().sync(); %s runs one block at a time (build/cpu runs it)",
                kernel.launch_file, kernel.launch_line, static_cast<unsigned long long>(blocks), one_block_at_a_time);
        }
    }

    const Schedule schedule{launch_counter.fetch_add(1), config().fuzz, config().fuzz_seed, &static_shared};
    if (async_mode()) [[unlikely]] {
        // Queued on the stream's worker thread, which then runs the blocks (with its own fiber pool and, on the
        // one-worker path, its own thread_local shared memory). One grid at a time process-wide: the sanitizer
        // build's shared memory is a plain static, and float atomics stay deterministic. Copies still overlap.
        KernelInvocation queued = kernel;
        queued.bound_kernel = kernel.clone(kernel.bound_kernel);
        std::vector<const void*> pointers(kernel.pointer_arguments, kernel.pointer_arguments + kernel.argument_count);
        enqueue(stream, [queued, pointers = std::move(pointers), grid, block, shared_bytes, schedule]() mutable {
            queued.pointer_arguments = pointers.data();  // the lambda's own copy, wherever it was moved to
            {
                static std::mutex& one_grid_at_a_time = *new std::mutex;
                std::lock_guard lock(one_grid_at_a_time);
                run_grid_now(queued, grid, block, shared_bytes, schedule);
                check_canaries_after_grid(queued);
            }
            queued.destroy(queued.bound_kernel);
        });
        return cudaSuccess;
    }
    run_grid_now(kernel, grid, block, shared_bytes, schedule);
    check_canaries_after_grid(kernel);
    return cudaSuccess;
}

unsigned configured_workers() {
    return config().workers;
}

void set_schedule_fuzzing(bool enabled, uint64_t seed) {
    config().fuzz_seed = seed;
    config().fuzz = enabled;
}

unsigned char* dynamic_shared_memory() {
    return worker().dynamic_shared.get();
}

// --- sync points, called from kernel code ----------------------------------------------------------------------
namespace {
// A sync point reached by no fiber thread: outside a kernel (a fault), or by a plain call of the fast path. Out of line
// and cold: the check on the hot path stays a few instructions with a small stack frame (each fiber's frames live on
// its own stack, so every byte touched is a cache line).
[[gnu::cold, gnu::noinline]] void not_on_a_fiber(const char* what, const std::source_location& site) {
    Worker* w = this_worker;
    if (!w || !w->run.kernel || !w->run.plain_calls)
        fatal("%s called outside a kernel, at %s", what, where(site).c_str());
    leave_plain_calls(*w);  // a plain call of the fast path: its fiber becomes this thread's
}

inline BlockRun& current_block(const char* what, const std::source_location& site) {
    Worker* w = this_worker;
    if (!w || !w->run.kernel || !w->run.current) [[unlikely]]
        not_on_a_fiber(what, site);
    return w->run;
}
}  // namespace

namespace {
// The calling thread waits at a barrier (the block's, or the grid's) until complete_barrier_or_fault releases it.
void wait_at_barrier(BlockRun& run, const std::source_location& site, bool grid) {
    CudaThread& self = *run.current;
    self.state = ThreadState::at_barrier;
    ++run.at_barrier;
    self.site = site;
    self.at_grid_sync = grid;
    yield_to_next(run, self);
}
}  // namespace

void syncthreads(std::source_location site) {
    [[maybe_unused]] TsanIgnoreScope bookkeeping;
    wait_at_barrier(current_block("__syncthreads", site), site, false);
}

void grid_sync(std::source_location site) {
    [[maybe_unused]] TsanIgnoreScope bookkeeping;
    BlockRun& run = current_block("this_grid().sync()", site);
    if (!run.grid_barrier) {
        block_fault(run, "cooperative_groups::grid_group::sync() (this_grid().sync()) at " + where(site) +
                             " in a kernel not launched with cudaLaunchCooperativeKernel: only a cooperative launch "
                             "keeps every block of the grid resident at once, so a GPU may hang here "
                             "(this_grid().is_valid() is false)");
    }
    wait_at_barrier(run, site, true);
}

bool in_cooperative_launch() {
    return this_worker && this_worker->run.kernel && this_worker->run.grid_barrier;
}

void warp_collective(unsigned mask, WarpCombine combine, const void* in, void* out, std::source_location site) {
    [[maybe_unused]] TsanIgnoreScope bookkeeping;
    BlockRun& run = current_block("a warp collective", site);
    CudaThread& self = *run.current;
    if (!(mask >> (self.linear % 32) & 1u)) {
        char text[96];
        std::snprintf(text, sizeof text, "lane %u calls a warp collective with mask 0x%08x, which excludes it",
                      self.linear % 32, mask);
        block_fault(run, std::string(text) + ", at " + where(site));
    }
    self.state = ThreadState::at_warp_collective;
    ++run.at_warp_collective;
    self.site = site;
    self.mask = mask;
    self.combine = combine;
    self.in = in;
    self.out = out;
    yield_to_next(run, self);
}

void kernel_fault(const char* what) {
    [[maybe_unused]] TsanIgnoreScope bookkeeping;
    if (!this_worker || !this_worker->run.kernel) fatal("%s", what);
    BlockRun& run = this_worker->run;
    const uint3 thread = run.current ? run.current->index : thread_index(run.plain_thread);
    block_fault(run, "thread " + coords(thread) + ": " + what);
}

// --- the warp collectives of the CUDA API -------------------------------------------------------------------
namespace {
// PTX ISA, shfl.sync: which lane a lane reads from, given b (lane or offset) and c (segment mask, clamp).
int shuffle_source_lane(int lane, const ShuffleRequest& r) {
    const int b = r.lane_operand & 0x1f;
    const int clamp = r.clamp & 0x1f;
    const int segment_mask = (r.clamp >> 8) & 0x1f;
    const int max_lane = (lane & segment_mask) | (clamp & ~segment_mask);
    const int min_lane = lane & segment_mask;
    int j = lane;
    bool in_range = false;
    switch (r.mode) {
        case ShuffleMode::up:
            j = lane - b;
            in_range = j >= max_lane;
            break;
        case ShuffleMode::down:
            j = lane + b;
            in_range = j <= max_lane;
            break;
        case ShuffleMode::bfly:
            j = lane ^ b;
            in_range = j <= max_lane;
            break;
        case ShuffleMode::idx:
            j = min_lane | (b & ~segment_mask);
            in_range = j <= max_lane;
            break;
    }
    return in_range ? j : lane;
}

void combine_shuffle(WarpLaneSlot* lanes, unsigned group) {
    for (int lane = 0; lane < 32; ++lane) {
        if (!(group >> lane & 1u)) continue;
        const auto& request = *static_cast<const ShuffleRequest*>(lanes[lane].in);
        const int source = shuffle_source_lane(lane, request);
        // A source lane that exited (or lies past a partial last warp) or is outside the mask: the instruction is
        // legal, but the value read is unpredictable (PTX ISA, shfl.sync's pseudo-code: an inactive lane's source
        // value is unpredictable; Programming Guide: "If the target thread is inactive, the retrieved value is
        // undefined").
        // Correct code discards it (`if (lane + offset < n) v += other;`), so it is no fault here: it gets all-ones
        // bits (NaN as a float, -1 as an int), so that code which uses it gets a visibly wrong result.
        const uint64_t value =
            (group >> source & 1u) ? static_cast<const ShuffleRequest*>(lanes[source].in)->bits : ~uint64_t{0};
        *static_cast<uint64_t*>(lanes[lane].out) = value;
    }
}

void combine_ballot(WarpLaneSlot* lanes, unsigned group) {
    unsigned ballot = 0;
    for (int lane = 0; lane < 32; ++lane) {
        if ((group >> lane & 1u) && *static_cast<const int*>(lanes[lane].in) != 0) ballot |= 1u << lane;
    }
    for (int lane = 0; lane < 32; ++lane) {
        if (group >> lane & 1u) *static_cast<unsigned*>(lanes[lane].out) = ballot;
    }
}

// Every live lane of the mask voted true (lanes that exited do not vote).
void combine_all(WarpLaneSlot* lanes, unsigned group) {
    int all = 1;
    for (int lane = 0; lane < 32; ++lane) {
        if ((group >> lane & 1u) && *static_cast<const int*>(lanes[lane].in) == 0) all = 0;
    }
    for (int lane = 0; lane < 32; ++lane) {
        if (group >> lane & 1u) *static_cast<int*>(lanes[lane].out) = all;
    }
}

void combine_nothing(WarpLaneSlot*, unsigned) {}
}  // namespace

uint64_t shuffle(unsigned mask, const ShuffleRequest& request, std::source_location site) {
    uint64_t result = 0;
    warp_collective(mask, combine_shuffle, &request, &result, site);
    return result;
}

}  // namespace cpu_backend

void __syncwarp(unsigned mask, std::source_location site) {
    cpu_backend::warp_collective(mask, cpu_backend::combine_nothing, nullptr, nullptr, site);
}

unsigned __ballot_sync(unsigned mask, int predicate, std::source_location site) {
    unsigned result = 0;
    cpu_backend::warp_collective(mask, cpu_backend::combine_ballot, &predicate, &result, site);
    return result & mask;
}

int __any_sync(unsigned mask, int predicate, std::source_location site) {
    return __ballot_sync(mask, predicate, site) != 0;  // exited lanes do not vote
}

int __all_sync(unsigned mask, int predicate, std::source_location site) {
    int result = 0;
    cpu_backend::warp_collective(mask, cpu_backend::combine_all, &predicate, &result, site);
    return result;
}

unsigned __activemask() {
    [[maybe_unused]] cpu_backend::TsanIgnoreScope bookkeeping;
    const auto* w = cpu_backend::this_worker;
    if (!w || !w->run.kernel) return 0xffffffffu;
    const auto& run = w->run;
    if (!run.current) {  // a plain call of the fast path: the lanes before it in its warp have exited
        const unsigned lane = run.plain_thread % 32,
                       left = std::min(32u, run.thread_count - run.plain_thread / 32 * 32);
        return (left == 32 ? 0xffffffffu : (1u << left) - 1) & ~((1u << lane) - 1);
    }
    const unsigned base = run.current->linear / 32 * 32;
    unsigned live = 0;
    for (unsigned l = 0; l < 32 && base + l < run.thread_count; ++l) {
        if (run.threads[base + l].state != cpu_backend::ThreadState::finished) live |= 1u << l;
    }
    return live;
}
