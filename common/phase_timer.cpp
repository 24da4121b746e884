// common/phase_timer.cpp — see phase_timer.h.
#include "common/phase_timer.h"

#include <stdexcept>

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
    epoch_start_ = HostClock::now();
}

void PhaseTimer::begin(Phase phase, cudaStream_t stream) {
    Open& open = open_[static_cast<int>(phase)];
    if (!in_epoch_)
        throw std::logic_error(std::string("PhaseTimer::begin(") + phase_name(phase) + ") outside an epoch");
    if (open.active) throw std::logic_error(std::string("PhaseTimer::begin(") + phase_name(phase) + ") twice");
    open.active = true;
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
    PhaseTotals& totals = current_.phases[static_cast<int>(phase)];
    if (uses_events(phase)) {
        const size_t stop = acquire_event();
        CUDA_CHECK(cudaEventRecord(pool_[stop], stream));
        pending_.push_back(Pending{phase, open.start, stop, bytes});  // read after the epoch's synchronization
    } else {
        totals.ms += std::chrono::duration<double, std::milli>(HostClock::now() - open.host_start).count();
        totals.calls += 1;
        totals.bytes += bytes;
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
    for (const Pending& p : pending_) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[p.start], pool_[p.stop]));
        PhaseTotals& totals = current_.phases[static_cast<int>(p.phase)];
        totals.ms += ms;
        totals.calls += 1;
        totals.bytes += p.bytes;
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
