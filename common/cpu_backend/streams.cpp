// common/cpu_backend/streams.cpp — streams and events: synchronous by default, asynchronous with CUDA_CPU_ASYNC=1.
//
// Synchronous mode (the default): every launch, copy and memset has finished when its call returns, so streams and
// events have nothing to wait for, and an event reads the host clock when it is recorded.
//
// Asynchronous mode: each stream is a FIFO of work items run in order by its own worker thread, so a call returns
// before its work runs, as on a GPU; a missing wait then gives wrong results here too. An item may carry
// dependencies ("stream X has completed its item n"), which is how the ordering rules are expressed:
//   - cudaStreamWaitEvent queues an empty item that depends on the event's record item;
//   - the legacy default stream (0): an item on it depends on the last item queued so far on every blocking
//     stream, and an item on a blocking stream depends on the last item queued so far on stream 0;
//     cudaStreamNonBlocking streams get neither;
//   - an event is a (stream, item number) pair: complete once that stream has completed that item; the record item
//     reads steady_clock when the stream reaches it, so elapsed times measure what really ran in between.
// Every dependency points to an item queued earlier, so waits can never form a cycle. Under CUDA_CPU_FUZZ=<seed>
// each stream sleeps a seeded random time before each item (0 to 0.25, 1 or 4 ms: a pace per stream and seed), so a
// missing wait shows up for many seeds, and always for the same ones. And a cudaMemcpyAsync on a stream other than
// stream 0 lands in two halves (copy_in_parts): the first when the stream reaches it, the second only once no other
// stream has work it could run (at least 2 ms later, at most 100 ms), so whoever reads the destination, or refills
// the source, without waiting for the copy's event sees a half-done copy whatever the seed.
//
// Late schedule (CUDA_CPU_ASYNC=late): every item runs as late as CUDA's ordering rules allow, only once something
// demands it — a host wait (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a blocking copy, a
// query: a polling loop must progress), or a demanded item that depends on it (a later item of its stream, an
// event wait, the legacy stream's implicit waits). Demand is a per-stream watermark, propagated along dependencies.
// As soon as an item could legally start but is not yet demanded, the range it writes (a copy's or memset's
// destination) is filled with poison (0xFF bytes: NaN as floats), so a reader that did not wait for it reads poison
// every time, not for some seeds. A copy from pinned host memory also compares its source, when it runs, with a snapshot
// taken when it was queued: a host that refilled the buffer before the copy completed is reported (fatal).
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "common/cpu_backend/internal.h"
#include "common/cpu_backend/runtime.h"

namespace cpu_backend {
namespace {

struct StreamState;
using StreamRef = std::shared_ptr<StreamState>;

struct Dependency {
    StreamRef stream;
    uint64_t item;  // complete once stream->completed >= item
};

struct WorkItem {
    Work work;
    std::vector<Dependency> after;
    WrittenRange writes;  // late schedule: poisoned once the item could start, until it runs
    uint64_t number = 0;  // its stream's item number (1, 2, ...)
};

struct StreamState {
    uint64_t id = 0;       // creation number: seeds this stream's fuzz delays (the legacy stream is 0)
    bool legacy = false;   // the legacy default stream, stream 0
    bool blocking = true;  // synchronizes with the legacy default stream
    std::deque<WorkItem> queue;
    uint64_t submitted = 0, completed = 0;  // item numbers: queued so far, finished so far
    uint64_t demanded = 0;                  // late schedule: items up to this number may run
    bool active = false;  // running an item (or sleeping its fuzz delay before one), not waiting for anything
    bool thread_running = false;
    bool destroyed = false;  // cudaStreamDestroy: the worker ends once the queue is empty
};

// The lock and the one condition variable every wait uses (new work, finished work). Replaced, not reused, in a
// forked child: the parent's worker threads do not exist there, and a condition variable they waited on must not
// be touched again.
struct Sync {
    std::mutex mutex;
    std::condition_variable progress;
};
Sync* sync_state = new Sync;  // never destroyed: detached workers may wait on it until the process exits
Sync& sync() {
    return *sync_state;
}

struct Registry {  // guarded by sync().mutex
    StreamRef legacy;
    std::vector<StreamRef> live;  // every stream with a handle or with work still queued, the legacy one included
    uint64_t next_id = 1;
    size_t staged_bytes = 0;  // pageable sources copied aside by cudaMemcpyAsync and not yet copied on
    bool fuzz = false;
    uint64_t fuzz_seed = 0;
    uint64_t fuzz_generation = 0;  // bumped by set_stream_fuzzing: workers reseed at their next item
};
Registry& registry() {
    static Registry& r = *[] {
        auto* created = new Registry;
        created->legacy = std::make_shared<StreamState>();
        created->legacy->legacy = true;
        created->live.push_back(created->legacy);
        if (const char* f = std::getenv("CUDA_CPU_FUZZ"); f && *f) {
            char* end = nullptr;
            created->fuzz_seed = std::strtoull(f, &end, 10);
            if (end == f || *end != '\0' || *f == '-')
                fatal("CUDA_CPU_FUZZ must be a seed (a whole number >= 0), not '%s'", f);
            created->fuzz = true;
        }
        return created;
    }();
    return r;
}

// Like a driver's pinned staging pool: beyond this many bytes of staged pageable sources, the host waits.
constexpr size_t kStagingLimit = size_t{256} << 20;

// CUDA_CPU_ASYNC=late: the late schedule (above). Read once, with async_flag.
std::atomic<bool> late_schedule{false};

std::atomic<bool>& async_flag() {
    static std::atomic<bool> flag{[] {
        const char* a = std::getenv("CUDA_CPU_ASYNC");
        if (!a || !*a || std::strcmp(a, "0") == 0) return false;
        if (std::strcmp(a, "late") == 0) {
            late_schedule.store(true);
        } else if (std::strcmp(a, "1") != 0) {
            fatal("CUDA_CPU_ASYNC must be 0, 1 or late, not '%s'", a);
        }
#if defined(CUDA_TEACH_RACECHECK)
        // ThreadSanitizer crashed inside its own runtime ("SEGV ... nested bug") in 1 of 2 runs of lesson 03 with
        // asynchronous streams, and the cause was not found: refused rather than trusted. The plain cpu tree runs
        // asynchronous streams (CI: CUDA_CPU_ASYNC=1 CUDA_CPU_FUZZ=5 over the whole suite).
        fatal(
            "CUDA_CPU_ASYNC=1 is not supported in the race build (ThreadSanitizer has crashed in its own runtime "
            "with asynchronous streams); run it in the plain cpu tree, build/cpu");
#endif
        return true;
    }()};
    return flag;
}

thread_local bool on_stream_worker = false;
thread_local StreamState* running_stream = nullptr;  // the stream whose worker this thread is

bool satisfied(const Dependency& d) {
    return d.stream->completed >= d.item;
}

bool late() {
    return late_schedule.load(std::memory_order_relaxed);
}

bool demanded(const StreamState& s, const WorkItem& item) {
    return !late() || item.number <= s.demanded;
}

// Late schedule: items up to `item` of `s` may run, and so may everything they depend on. Called with the lock held.
void demand_locked(StreamState& s, uint64_t item) {
    if (!late() || item <= s.demanded) return;
    s.demanded = item;
    for (const WorkItem& queued : s.queue) {
        if (queued.number > item) break;
        for (const Dependency& d : queued.after) demand_locked(*d.stream, d.item);
    }
    sync().progress.notify_all();
}

// Whether the stream runs an item now or could start its next one. Called with sync().mutex held.
bool has_runnable_work(const StreamState& s) {
    return s.active ||
           (!s.queue.empty() && std::all_of(s.queue.front().after.begin(), s.queue.front().after.end(), satisfied) &&
            demanded(s, s.queue.front()));
}

void remove_from_registry(const StreamState* s) {
    auto& live = registry().live;
    live.erase(std::remove_if(live.begin(), live.end(), [s](const StreamRef& r) { return r.get() == s; }), live.end());
}

void worker_loop(StreamRef s) {
    on_stream_worker = true;
    running_stream = s.get();
    std::mt19937_64 rng;
    uint64_t seeded_generation = ~uint64_t{0};
    unsigned max_delay_us = 0;
    std::unique_lock lock(sync().mutex);
    for (;;) {
        sync().progress.wait(lock, [&] { return !s->queue.empty() || s->destroyed; });
        if (s->queue.empty()) {  // destroyed and drained
            s->thread_running = false;
            remove_from_registry(s.get());
            return;
        }
        // Taken off the queue only once runnable: until then has_runnable_work sees it waiting there.
        sync().progress.wait(lock, [&] {
            const WorkItem& front = s->queue.front();
            return std::all_of(front.after.begin(), front.after.end(), satisfied);
        });
        if (late()) {
            // It could start now: poison what it will write, then wait until something demands it.
            if (const WrittenRange writes = std::exchange(s->queue.front().writes, {}); writes.bytes > 0) {
                lock.unlock();
                std::memset(writes.data, 0xFF, writes.bytes);
                lock.lock();
            }
            sync().progress.wait(lock, [&] { return demanded(*s, s->queue.front()); });
        }
        WorkItem item = std::move(s->queue.front());
        s->queue.pop_front();
        s->active = true;
        unsigned delay_us = 0;
        if (const Registry& r = registry(); r.fuzz) {
            if (seeded_generation != r.fuzz_generation) {  // the same seed gives every stream the same delays
                seeded_generation = r.fuzz_generation;
                rng.seed(r.fuzz_seed * 0x9E3779B97F4A7C15ull ^ (s->id + 1) * 0xBF58476D1CE4E5B9ull);
                // Each stream gets a pace for this seed: a copy stream much slower than the compute stream it
                // feeds (or the reverse) is what exposes a wait missing between them.
                constexpr unsigned kPaces[] = {250, 1000, 4000};
                max_delay_us = kPaces[rng() % 3];
            }
            // 0 to the pace in eighths: two streams' delays differ by far more than a thread's wake-up jitter (or
            // not at all), so a given seed exposes a given race every time, not by luck.
            delay_us = static_cast<unsigned>(rng() % 9) * max_delay_us / 8;
        }
        lock.unlock();
        if (delay_us) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
        item.work();
        item = {};  // release what the work captured (a staging buffer) before reporting completion
        lock.lock();
        s->active = false;
        ++s->completed;
        sync().progress.notify_all();
    }
}

// Before fork: finish all queued work and hold the lock, so the child starts from a quiet, consistent state.
void before_fork() {
    if (async_flag().load()) synchronize_device();
    sync().mutex.lock();
}
void after_fork_in_parent() {
    sync().mutex.unlock();
}
void after_fork_in_child() {
    sync_state = new Sync;  // the parent's lock and condition variable belong to threads that do not exist here
    for (const StreamRef& s : registry().live) s->thread_running = false;  // started again on the next item
}

void drain_at_exit() {
    if (!on_stream_worker && async_flag().load()) synchronize_device();
}

// Called with sync().mutex held.
void start_worker_locked(const StreamRef& s) {
    if (s->thread_running) return;
    static const bool hooks = [] {
        pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
        std::atexit(drain_at_exit);  // main returning with work queued: finish it before statics go away
        return true;
    }();
    (void)hooks;
    s->thread_running = true;
    std::thread(worker_loop, s).detach();
}

// Queues `work` on `s` with the legacy-stream rules and any extra dependency; returns its item number.
// `writes`: what the work writes, poisoned under the late schedule (the header). Called with sync().mutex held.
uint64_t enqueue_locked(const StreamRef& s, Work work, const Dependency* extra, WrittenRange writes = {}) {
    Registry& r = registry();
    WorkItem item{std::move(work), {}, late() ? writes : WrittenRange{}, s->submitted + 1};
    if (s->legacy) {
        for (const StreamRef& other : r.live) {
            if (other->blocking && !other->legacy && other->submitted > other->completed)
                item.after.push_back({other, other->submitted});
        }
    } else if (s->blocking && r.legacy->submitted > r.legacy->completed) {
        item.after.push_back({r.legacy, r.legacy->submitted});
    }
    if (extra) item.after.push_back(*extra);
    s->queue.push_back(std::move(item));
    const uint64_t number = ++s->submitted;
    start_worker_locked(s);
    sync().progress.notify_all();
    return number;
}

void wait_locked(std::unique_lock<std::mutex>& lock, const StreamRef& s, uint64_t item) {
    if (on_stream_worker) fatal("a CUDA call that waits for the device was made from stream work");
    demand_locked(*s, item);
    sync().progress.wait(lock, [&] { return s->completed >= item; });
}

}  // namespace

}  // namespace cpu_backend

struct CUstream_st {
    cpu_backend::StreamRef state;
};

struct EventState {
    unsigned flags = 0;
    bool recorded = false;
    cpu_backend::StreamRef stream;  // where it was last recorded in asynchronous mode; null: complete
    uint64_t item = 0;
    uint64_t records = 0;  // counts cudaEventRecord calls, so a stale record item does not set the time
    std::chrono::steady_clock::time_point time;
};
struct CUevent_st {
    std::shared_ptr<EventState> state;  // shared with a queued record item, which may outlive cudaEventDestroy
};

namespace cpu_backend {
namespace {

// cudaStreamPerThread: a stream of each host thread's own, blocking (it synchronizes with the legacy default stream
// both ways, like a cudaStreamCreate stream) and not with other threads' per-thread streams or any other stream
// (CUDA Runtime API, "Stream synchronization behavior": "The per-thread default stream is not a non-blocking stream
// and will synchronize with the legacy default stream if both are used in a program"). Created at the thread's first
// use; when the thread ends, its queued work still runs and then its worker ends, as after cudaStreamDestroy.
struct PerThreadStream {
    StreamRef state;
    ~PerThreadStream() {
        if (!state) return;
        std::lock_guard lock(sync().mutex);
        state->destroyed = true;
        if (!state->thread_running) remove_from_registry(state.get());
        sync().progress.notify_all();
    }
};
thread_local PerThreadStream per_thread_stream;

// Stream 0 and cudaStreamLegacy are the legacy default stream; cudaStreamPerThread is this thread's own stream.
// Called with sync().mutex held.
const StreamRef& resolve(cudaStream_t stream) {
    if (stream == nullptr || stream == cudaStreamLegacy) return registry().legacy;
    if (stream == cudaStreamPerThread) {
        if (!per_thread_stream.state) {
            auto created = std::make_shared<StreamState>();
            Registry& r = registry();
            created->id = r.next_id++;
            r.live.push_back(created);
            per_thread_stream.state = std::move(created);
        }
        return per_thread_stream.state;
    }
    return stream->state;
}

bool event_complete(const EventState& e) {
    return !e.recorded || !e.stream || e.stream->completed >= e.item;
}

}  // namespace

bool async_mode() {
    return async_flag().load(std::memory_order_relaxed);
}

void enqueue(cudaStream_t stream, Work work, WrittenRange writes) {
    std::lock_guard lock(sync().mutex);
    enqueue_locked(resolve(stream), std::move(work), nullptr, writes);
}

bool late_mode() {
    return async_mode() && late();
}

void enqueue_and_wait(cudaStream_t stream, Work work) {
    std::unique_lock lock(sync().mutex);
    const StreamRef& s = resolve(stream);
    wait_locked(lock, s, enqueue_locked(s, std::move(work), nullptr));
}

void copy_in_parts(void* dst, const void* src, size_t bytes) {
    StreamState* self = running_stream;
    bool split;
    {
        std::lock_guard lock(sync().mutex);
        split = registry().fuzz && self && !self->legacy && bytes >= 2;
    }
    auto* d = static_cast<unsigned char*>(dst);
    const auto* from = static_cast<const unsigned char*>(src);
    if (!split || (d < from + bytes && from < d + bytes)) {  // overlapping ranges: memmove's order matters
        std::memmove(dst, src, bytes);
        return;
    }
    const size_t first = bytes / 2;
    std::memcpy(d, from, first);
    {
        // The other half lands once no other stream could still run something that reads it first (or until the
        // limit: a kernel spinning on a host flag set after this copy must not wait forever). The grace gives the
        // host time to queue the reader that follows this copy.
        std::unique_lock lock(sync().mutex);
        self->active = false;  // another stream's copy waiting the same way must not wait for this one
        sync().progress.notify_all();
        const auto start = std::chrono::steady_clock::now();
        sync().progress.wait_until(lock, start + std::chrono::milliseconds(2), [] { return false; });
        sync().progress.wait_until(lock, start + std::chrono::milliseconds(100), [self] {
            const auto& live = registry().live;
            return std::none_of(live.begin(), live.end(), [self](const StreamRef& other) {
                return other.get() != self && has_runnable_work(*other);
            });
        });
        self->active = true;
    }
    std::memcpy(d + first, from + first, bytes - first);
}

void enqueue_staged_copy(cudaStream_t stream, void* dst, const void* src, size_t bytes) {
    Registry& r = registry();
    {
        std::unique_lock lock(sync().mutex);
        const auto room = [&] { return r.staged_bytes == 0 || r.staged_bytes + bytes <= kStagingLimit; };
        if (!room()) {  // the host waits for earlier staged copies: under the late schedule, that demands them
            for (const StreamRef& s : r.live) demand_locked(*s, s->submitted);
        }
        sync().progress.wait(lock, room);
        r.staged_bytes += bytes;
    }
    void* staged = std::malloc(bytes);
    if (!staged) fatal("cannot stage a %zu-byte pageable copy", bytes);
    std::memcpy(staged, src, bytes);  // the caller may reuse its buffer as soon as this call returns
    enqueue(stream,
            [dst, staged, bytes, &r] {
                copy_in_parts(dst, staged, bytes);
                std::free(staged);
                std::lock_guard lock(sync().mutex);
                r.staged_bytes -= bytes;
            },
            {dst, bytes});
}

void synchronize_device() {
    std::unique_lock lock(sync().mutex);
    std::vector<Dependency> pending;
    for (const StreamRef& s : registry().live) {
        if (s->completed < s->submitted) pending.push_back({s, s->submitted});
    }
    if (pending.empty()) return;
    if (on_stream_worker) fatal("a CUDA call that waits for the device was made from stream work");
    for (const Dependency& d : pending) demand_locked(*d.stream, d.item);
    sync().progress.wait(lock, [&] { return std::all_of(pending.begin(), pending.end(), satisfied); });
}

void set_async_streams(bool enabled) {
    if (!enabled) synchronize_device();  // nothing may stay queued once calls run inline again
    async_flag().store(enabled);
}

bool async_streams() {
    return async_mode();
}

void set_late_schedule(bool enabled) {
    if (!enabled) synchronize_device();  // nothing may stay waiting for a demand that will not come
    late_schedule.store(enabled);
}

bool late_schedule_enabled() {
    return late();
}

void set_stream_fuzzing(bool enabled, uint64_t seed) {
    std::lock_guard lock(sync().mutex);
    Registry& r = registry();
    r.fuzz = enabled;
    r.fuzz_seed = seed;
    ++r.fuzz_generation;
    r.next_id = 1;  // streams created from here on are numbered (and delayed) the same whatever came before
}

}  // namespace cpu_backend

using cpu_backend::record_error;

cudaError_t cudaDeviceSynchronize() {
    if (cpu_backend::async_mode()) cpu_backend::synchronize_device();
    cpu_backend::check_all_canaries("cudaDeviceSynchronize");  // host_api.cpp: writes past a device buffer's end
    return cudaSuccess;  // synchronous mode: every launch and copy has already finished
}
cudaError_t cudaDeviceReset() {
    return cudaDeviceSynchronize();
}

// --- streams -----------------------------------------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
    if (!stream) return record_error(cudaErrorInvalidValue);
    if (flags & ~unsigned(cudaStreamNonBlocking)) return record_error(cudaErrorInvalidValue);
    auto state = std::make_shared<cpu_backend::StreamState>();
    state->blocking = !(flags & cudaStreamNonBlocking);
    {
        std::lock_guard lock(cpu_backend::sync().mutex);
        auto& r = cpu_backend::registry();
        state->id = r.next_id++;
        r.live.push_back(state);
        // Started now rather than at the first item: a thread's start-up time would otherwise skew the fuzz delays.
        if (cpu_backend::async_mode()) cpu_backend::start_worker_locked(state);
    }
    *stream = new CUstream_st{std::move(state)};
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    return cudaStreamCreateWithFlags(stream, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
        return record_error(cudaErrorInvalidResourceHandle);
    {
        // As in CUDA: returns at once; queued work still runs, then the worker ends.
        std::lock_guard lock(cpu_backend::sync().mutex);
        auto& s = *stream->state;
        s.destroyed = true;
        if (!s.thread_running) cpu_backend::remove_from_registry(&s);
        cpu_backend::sync().progress.notify_all();
    }
    delete stream;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (cpu_backend::async_mode()) {
        std::unique_lock lock(cpu_backend::sync().mutex);
        const auto& s = cpu_backend::resolve(stream);
        // Stream 0 also waits for the blocking streams' earlier work: an empty item on it carries exactly those waits.
        const uint64_t item = s->legacy ? cpu_backend::enqueue_locked(
                                              s, [] {}, nullptr)
                                        : s->submitted;
        cpu_backend::wait_locked(lock, s, item);
    }
    cpu_backend::check_all_canaries("cudaStreamSynchronize");
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    if (!cpu_backend::async_mode()) return cudaSuccess;
    std::lock_guard lock(cpu_backend::sync().mutex);
    const auto& s = cpu_backend::resolve(stream);
    cpu_backend::demand_locked(*s, s->submitted);  // late schedule: a polling loop must see the work finish
    return s->completed == s->submitted ? cudaSuccess : cudaErrorNotReady;  // not an error: not sticky
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
    if (!event) return record_error(cudaErrorInvalidResourceHandle);
    if (!cpu_backend::async_mode()) return cudaSuccess;
    std::lock_guard lock(cpu_backend::sync().mutex);
    const EventState& e = *event->state;
    if (cpu_backend::event_complete(e)) return cudaSuccess;  // never recorded, or already reached: nothing to wait
    // The event's most recent record at the time of this call, as CUDA says: a later record does not move it.
    const cpu_backend::Dependency after{e.stream, e.item};
    cpu_backend::enqueue_locked(
        cpu_backend::resolve(stream), [] {}, &after);
    return cudaSuccess;
}

// --- events ------------------------------------------------------------------------------------------------------
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
    if (!event) return record_error(cudaErrorInvalidValue);
    auto state = std::make_shared<EventState>();
    state->flags = flags;
    *event = new CUevent_st{std::move(state)};
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
    return cudaEventCreateWithFlags(event, 0);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event) return record_error(cudaErrorInvalidResourceHandle);
    delete event;  // a queued record item keeps the state alive until it has run
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event) return record_error(cudaErrorInvalidResourceHandle);
    EventState& e = *event->state;
    if (!cpu_backend::async_mode()) {
        e.time = std::chrono::steady_clock::now();  // all earlier work on the stream has already finished
        e.recorded = true;
        e.stream = nullptr;
        return cudaSuccess;
    }
    std::lock_guard lock(cpu_backend::sync().mutex);
    const auto& s = cpu_backend::resolve(stream);
    const uint64_t record = ++e.records;
    std::shared_ptr<EventState> shared = event->state;
    // The time is read when the stream reaches the record, not when the host queues it.
    e.item = cpu_backend::enqueue_locked(
        s,
        [shared, record] {
            const auto now = std::chrono::steady_clock::now();
            std::lock_guard inner(cpu_backend::sync().mutex);
            if (shared->records == record) shared->time = now;
        },
        nullptr);
    e.stream = s;
    e.recorded = true;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event) return record_error(cudaErrorInvalidResourceHandle);
    if (cpu_backend::async_mode()) {
        std::unique_lock lock(cpu_backend::sync().mutex);
        const EventState& e = *event->state;
        if (!cpu_backend::event_complete(e)) {
            const cpu_backend::StreamRef s = e.stream;  // a copy: a record from another thread may replace e.stream
            cpu_backend::wait_locked(lock, s, e.item);
        }
    }
    cpu_backend::check_all_canaries("cudaEventSynchronize");
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event) return record_error(cudaErrorInvalidResourceHandle);
    if (!cpu_backend::async_mode()) return cudaSuccess;
    std::lock_guard lock(cpu_backend::sync().mutex);
    const EventState& e = *event->state;
    if (!cpu_backend::event_complete(e)) cpu_backend::demand_locked(*e.stream, e.item);  // late: polling progresses
    return cpu_backend::event_complete(e) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms) return record_error(cudaErrorInvalidValue);
    if (!start || !end) return record_error(cudaErrorInvalidResourceHandle);
    std::unique_lock lock(cpu_backend::sync().mutex, std::defer_lock);
    if (cpu_backend::async_mode()) lock.lock();
    const EventState &a = *start->state, &b = *end->state;
    if (!a.recorded || !b.recorded || (a.flags & cudaEventDisableTiming) || (b.flags & cudaEventDisableTiming))
        return record_error(cudaErrorInvalidResourceHandle);
    if (!cpu_backend::event_complete(a) || !cpu_backend::event_complete(b)) return cudaErrorNotReady;
    *ms = std::chrono::duration<float, std::milli>(b.time - a.time).count();
    return cudaSuccess;
}
