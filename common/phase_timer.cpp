// common/phase_timer.cpp — see phase_timer.h.
#include "common/phase_timer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#if !defined(CUDA_TEACH_CPU)
#include <nvtx3/nvToolsExt.h>
#endif

const char* phase_name(Phase phase) {
    switch (phase) {
        case Phase::h2d:
            return "h2d";
        case Phase::input_wait:
            return "input wait";
        case Phase::normalize:
            return "normalize";
        case Phase::forward:
            return "forward";
        case Phase::loss:
            return "loss";
        case Phase::backward:
            return "backward";
        case Phase::optimizer:
            return "optimizer";
        case Phase::d2h:
            return "d2h";
        case Phase::host:
            return "host";
    }
    return "?";
}

double EpochTiming::phases_ms() const {
    double sum = 0;
    for (const PhaseTotals& p : phases) sum += p.ms;
    return sum;
}

EpochTiming& EpochTiming::operator+=(const EpochTiming& other) {
    for (int i = 0; i < kPhaseCount; ++i) {
        phases[i].ms += other.phases[i].ms;
        phases[i].calls += other.phases[i].calls;
        phases[i].bytes += other.phases[i].bytes;
    }
    wall_ms += other.wall_ms;
    if (clock.empty()) clock = other.clock;
    return *this;
}

namespace {

std::string clock_description(TimerClock clock) {
    if (clock == TimerClock::host) return "CPU timings (host clock)";
#if defined(CUDA_TEACH_CPU)
    return std::string("CPU timings: the ") + BACKEND_NAME + " backend runs the kernels on the CPU";
#else
    return "GPU time from CUDA events";
#endif
}

}  // namespace

PhaseTimer::PhaseTimer(TimerClock clock) : clock_(clock) {
    current_.clock = clock_description(clock);
}

PhaseTimer::~PhaseTimer() {
    for (cudaEvent_t event : pool_) cudaEventDestroy(event);  // no CUDA_CHECK in a destructor
}

size_t PhaseTimer::acquire_event() {
    if (pool_used_ == pool_.size()) {  // grows during the first epoch only; later epochs reuse the same events
        cudaEvent_t event;
        CUDA_CHECK(cudaEventCreate(&event));
        pool_.push_back(event);
    }
    return pool_used_++;
}

void PhaseTimer::begin_epoch(int epoch) {
    if (in_epoch_) throw std::logic_error("PhaseTimer::begin_epoch: the previous epoch was not ended");
    in_epoch_ = true;
    current_ = EpochTiming{};
    current_.epoch = epoch;
    current_.clock = clock_description(clock_);
    pending_.clear();
    pool_used_ = 0;
    steps_done_ = 0;
    epoch_start_ = HostClock::now();
    if (tracing()) {
        // The device-side origin: recorded now on stream 0, which has nothing queued at an epoch's start (the last
        // one ended synchronized), so the GPU passes it at about this host time.
        if (clock_ == TimerClock::cuda_events) {
            anchor_ = acquire_event();
            CUDA_CHECK(cudaEventRecord(pool_[anchor_], 0));
        }
    }
}

void PhaseTimer::enable_trace(int steps_per_epoch) {
    if (in_epoch_ || !epochs_.empty())
        throw std::logic_error("PhaseTimer::enable_trace: call it before the first epoch");
    if (steps_per_epoch < 1) throw std::invalid_argument("PhaseTimer::enable_trace: at least 1 step per epoch");
    trace_steps_ = steps_per_epoch;
    trace_origin_ = HostClock::now();  // before any thread can trace (a loader starts gathering before epoch 1)
}

void PhaseTimer::trace_host_work(int track, const char* track_name, const char* what, int epoch, int step,
                                 HostTime begin, HostTime end, uint64_t bytes) {
    if (!tracing() || step >= trace_steps_) return;
    using Us = std::chrono::duration<double, std::micro>;
    std::lock_guard lock(trace_mutex_);
    bool named = false;
    for (const auto& [t, name] : other_tracks_) named = named || t == track;
    if (!named) other_tracks_.emplace_back(track, track_name);
    trace_.push_back(TraceSlice{what, Phase::host, epoch, step, track, Us(begin - trace_origin_).count(),
                                Us(end - begin).count(), bytes});
}

int PhaseTimer::stream_track(cudaStream_t stream) {
    for (size_t i = 0; i < trace_streams_.size(); ++i)
        if (trace_streams_[i] == stream) return static_cast<int>(i) + 1;
    trace_streams_.push_back(stream);
    return static_cast<int>(trace_streams_.size());
}

void PhaseTimer::begin(Phase phase, cudaStream_t stream) {
    Open& open = open_[static_cast<int>(phase)];
    if (!in_epoch_)
        throw std::logic_error(std::string("PhaseTimer::begin(") + phase_name(phase) + ") outside an epoch");
    if (open.active) throw std::logic_error(std::string("PhaseTimer::begin(") + phase_name(phase) + ") twice");
    open.active = true;
    // Traced: what begins in the first trace_steps_ steps (a step ends where its optimizer phase does).
    open.step = tracing() && steps_done_ < trace_steps_ ? steps_done_ : -1;
#if !defined(CUDA_TEACH_CPU)
    open.nvtx_range = nvtxRangeStartA(phase_name(phase));  // start/end ranges may overlap, unlike push/pop
#endif
    if (uses_events(phase)) {
        open.start = acquire_event();
        CUDA_CHECK(cudaEventRecord(pool_[open.start], stream));
    } else {
        open.host_start = HostClock::now();
    }
}

void PhaseTimer::end(Phase phase, cudaStream_t stream, uint64_t bytes) {
    Open& open = open_[static_cast<int>(phase)];
    if (!open.active) throw std::logic_error(std::string("PhaseTimer::end(") + phase_name(phase) + ") without begin");
    open.active = false;
    if (phase == Phase::optimizer) ++steps_done_;
    PhaseTotals& totals = current_.phases[static_cast<int>(phase)];
    if (uses_events(phase)) {
        const size_t stop = acquire_event();
        CUDA_CHECK(cudaEventRecord(pool_[stop], stream));
        pending_.push_back(Pending{phase, open.start, stop, bytes, open.step >= 0 ? stream_track(stream) : -1,
                                   open.step});  // read after the epoch's synchronization
    } else {
        const HostClock::time_point now = HostClock::now();
        totals.ms += std::chrono::duration<double, std::milli>(now - open.host_start).count();
        totals.calls += 1;
        totals.bytes += bytes;
        if (open.step >= 0) {
            using Us = std::chrono::duration<double, std::micro>;
            std::lock_guard lock(trace_mutex_);
            trace_.push_back(TraceSlice{phase_name(phase), phase, current_.epoch, open.step, 0,
                                        Us(open.host_start - trace_origin_).count(), Us(now - open.host_start).count(),
                                        bytes});
        }
    }
#if !defined(CUDA_TEACH_CPU)
    nvtxRangeEnd(open.nvtx_range);
#endif
}

const EpochTiming& PhaseTimer::end_epoch() {
    if (!in_epoch_) throw std::logic_error("PhaseTimer::end_epoch without begin_epoch");
    for (int p = 0; p < kPhaseCount; ++p) {
        if (open_[p].active) {
            throw std::logic_error(std::string("PhaseTimer::end_epoch: phase ") + phase_name(Phase(p)) + " still open");
        }
    }
    if (clock_ == TimerClock::cuda_events) CUDA_CHECK(cudaDeviceSynchronize());
    current_.wall_ms = std::chrono::duration<double, std::milli>(HostClock::now() - epoch_start_).count();
    const double epoch_offset_us =
        std::chrono::duration<double, std::micro>(epoch_start_ - trace_origin_).count();
    for (const Pending& p : pending_) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[p.start], pool_[p.stop]));
        PhaseTotals& totals = current_.phases[static_cast<int>(p.phase)];
        totals.ms += ms;
        totals.calls += 1;
        totals.bytes += p.bytes;
        if (p.track >= 0) {
            float from_anchor_ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&from_anchor_ms, pool_[anchor_], pool_[p.start]));
            std::lock_guard lock(trace_mutex_);
            trace_.push_back(TraceSlice{phase_name(p.phase), p.phase, current_.epoch, p.step, p.track,
                                        epoch_offset_us + 1e3 * double(from_anchor_ms), 1e3 * double(ms), p.bytes});
        }
    }
    pending_.clear();
    pool_used_ = 0;
    in_epoch_ = false;
    epochs_.push_back(current_);
    return epochs_.back();
}

EpochTiming PhaseTimer::total() const {
    EpochTiming sum;
    sum.clock = clock_description(clock_);
    for (const EpochTiming& e : epochs_) sum += e;
    sum.epoch = static_cast<int>(epochs_.size());
    return sum;
}

namespace {
constexpr int kOtherTracks = 100;  // trace_host_work's tracks
}  // namespace

void PhaseTimer::write_trace(const std::string& path, const std::string& title,
                             const std::vector<std::pair<std::string, std::string>>& notes) const {
    using nlohmann::json;
    // Track names: the host thread, then each stream by the phases it ran ("stream 2: h2d").
    std::unique_lock lock(trace_mutex_);
    std::vector<TraceSlice> slices = trace_;
    const std::vector<std::pair<int, std::string>> other_tracks = other_tracks_;
    lock.unlock();
    std::map<int, std::set<int>> phases_of_track;
    for (const TraceSlice& s : slices) phases_of_track[s.track].insert(static_cast<int>(s.phase));
    json events = json::array();
    constexpr int kPid = 1;
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kPid}, {"args", {{"name", title}}}});
    for (const auto& [track, phases] : phases_of_track) {
        std::string name;
        if (track == 0) {
            name = "host thread (host clock)";
        } else if (track >= kOtherTracks) {
            for (const auto& [t, n] : other_tracks)
                if (t == track) name = n;
        } else {
            name = "stream " + std::to_string(track) + (clock_ == TimerClock::cuda_events ? " (CUDA events):" : ":");
            for (int p : phases) name += std::string(" ") + phase_name(Phase(p));
        }
        events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", kPid}, {"tid", track}, {"args", {{"name", name}}}});
        events.push_back(
            {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", kPid}, {"tid", track}, {"args", {{"sort_index", track}}}});
    }
    std::stable_sort(slices.begin(), slices.end(), [](const TraceSlice& a, const TraceSlice& b) {
        return a.track != b.track ? a.track < b.track : a.start_us < b.start_us;
    });
    for (const TraceSlice& s : slices) {
        json args = {{"epoch", s.epoch}, {"step", s.step}};
        if (s.bytes) args["bytes"] = s.bytes;
        events.push_back({{"name", s.what},
                          {"cat", s.track == 0 || s.track >= kOtherTracks ? "host" : "device"},
                          {"ph", "X"},
                          {"ts", s.start_us},
                          {"dur", s.duration_us},
                          {"pid", kPid},
                          {"tid", s.track},
                          {"args", args}});
    }
    json other = {{"what", "the first " + std::to_string(trace_steps_) +
                               " training steps of each epoch (--trace-steps); later steps are not in this file"},
                  {"clock", current_.clock.empty() ? clock_description(clock_) : current_.clock},
                  {"alignment", "stream slices are placed from an event recorded on stream 0 at each epoch's start, "
                                "at a known host time; host slices by the host clock"}};
    for (const auto& [key, value] : notes) other[key] = value;
    const json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
    const std::string temporary = path + ".tmp";
    {
        std::ofstream out(temporary);
        out << trace.dump(1) << "\n";
        if (!out) throw std::runtime_error("cannot write " + temporary);
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename to " + path);
}
