// common/phase_timer.h — where the time of a training epoch goes, measured the way the GPU sees it.
//
// defines: Phase, PhaseTimer (begin_epoch / begin / end / scope / end_epoch), EpochTiming, PhaseTotals.
//
// GPU work is asynchronous: a host clock read after a kernel launch measures the launch (microseconds), not
// the kernel. So each phase is bracketed by two CUDA events recorded on the phase's stream, and the elapsed
// times are read only in end_epoch(), after the epoch's final synchronization. Events come from a pool that
// is reused every epoch (no cudaEventCreate/Destroy per step). The `host` phase (work done by the CPU itself:
// shuffling, bookkeeping) is measured with the host clock. The wall time of the whole, synchronized epoch is
// measured separately with the host clock, so "sum of phases" vs "wall" shows the time no phase accounts for
// (launch gaps, synchronization).
//
//     timer.begin_epoch(epoch);
//     for each batch:
//         { auto t = timer.scope(Phase::h2d, stream, bytes); ledger.copy_to_device(...); }
//         { auto t = timer.scope(Phase::forward, stream); launch(...); }
//         ...
//     const EpochTiming& timing = timer.end_epoch();   // synchronizes, then reads the events
//
// With enable_trace(K), the first K training steps of each epoch are also kept as slices on a timeline (each phase
// where its stream ran it, from the same events; host phases from the host clock), and write_trace() writes them
// as Chrome Trace Event JSON, which ui.perfetto.dev and chrome://tracing open: the picture Nsight Systems gives on a
// GPU, from any machine. A step ends where its optimizer phase ends.
//
// In the cuda flavor each phase is also an NVTX range, so Nsight Systems shows the same names on its
// timeline. On the cpu backend the events read the host clock and kernels run on the CPU: the table says "CPU
// timings". PhaseTimer(TimerClock::host) uses the host clock for every phase (the CPU reference trainer).
#pragma once

#include <array>
#include <chrono>
#include <mutex>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/launch.h"

// input_wait: time the compute stream stood still waiting for its input copy on another stream (lesson 03 on);
// the copy time not in input_wait was hidden behind compute.
enum class Phase : int { h2d, input_wait, normalize, forward, loss, backward, optimizer, d2h, host };
inline constexpr int kPhaseCount = 9;
const char* phase_name(Phase phase);

enum class TimerClock { cuda_events, host };

struct PhaseTotals {
    double ms = 0;
    uint64_t calls = 0;
    uint64_t bytes = 0;  // for copy phases: bytes moved (0 = not a copy)
};

struct EpochTiming {
    int epoch = 0;
    std::array<PhaseTotals, kPhaseCount> phases{};
    double wall_ms = 0;  // host clock around the whole synchronized epoch
    std::string clock;   // how the phases were timed, for the table's title (e.g. "CUDA events (GPU time)")

    const PhaseTotals& operator[](Phase phase) const { return phases[static_cast<int>(phase)]; }
    double phases_ms() const;  // Σ phase ms
    // Bytes per second in GB/s (10^9 bytes); 0 when nothing was timed.
    static double gb_per_s(uint64_t bytes, double ms) { return ms > 0 ? double(bytes) / (ms * 1e-3) / 1e9 : 0.0; }
    EpochTiming& operator+=(const EpochTiming& other);  // adds phases and wall time (for totals over epochs)
};

class PhaseTimer {
  public:
    explicit PhaseTimer(TimerClock clock = TimerClock::cuda_events);
    ~PhaseTimer();
    PhaseTimer(const PhaseTimer&) = delete;
    PhaseTimer& operator=(const PhaseTimer&) = delete;

    void begin_epoch(int epoch);
    void begin(Phase phase, cudaStream_t stream = 0);
    // `bytes`: what a copy phase moved (added to the phase's byte count for the GB/s column).
    void end(Phase phase, cudaStream_t stream = 0, uint64_t bytes = 0);
    // Synchronizes the device (events mode), reads every event pair, and returns this epoch's totals.
    const EpochTiming& end_epoch();

    // begin() now, end() when the scope closes.
    class Scope {
      public:
        Scope(PhaseTimer& timer, Phase phase, cudaStream_t stream, uint64_t bytes)
            : timer_(timer), phase_(phase), stream_(stream), bytes_(bytes) {
            timer_.begin(phase_, stream_);
        }
        ~Scope() { timer_.end(phase_, stream_, bytes_); }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

      private:
        PhaseTimer& timer_;
        Phase phase_;
        cudaStream_t stream_;
        uint64_t bytes_;
    };
    [[nodiscard]] Scope scope(Phase phase, cudaStream_t stream = 0, uint64_t bytes = 0) {
        return Scope(*this, phase, stream, bytes);
    }

    // The timeline (see above): call before the first epoch. Slices of the first `steps_per_epoch` steps of every
    // epoch are kept; `bytes` and `flops` name each phase's work per step where the caller knows it.
    void enable_trace(int steps_per_epoch);
    bool tracing() const { return trace_steps_ > 0; }
    // Writes the kept slices as Chrome Trace Event JSON (`title`: the process name shown; `notes`: extra key/value
    // text for the file's metadata). Throws std::runtime_error if the file cannot be written.
    void write_trace(const std::string& path, const std::string& title,
                     const std::vector<std::pair<std::string, std::string>>& notes = {}) const;
    // Another host thread's work on the timeline (lesson 03's loader thread): thread-safe. Kept when `step` is among
    // the first steps_per_epoch; `track` ≥ 100 names the thread's own track (`track_name`), `what` the slice.
    using HostTime = std::chrono::steady_clock::time_point;
    void trace_host_work(int track, const char* track_name, const char* what, int epoch, int step, HostTime begin,
                         HostTime end, uint64_t bytes = 0);
    struct TraceSlice {
        const char* what;  // the slice's name: a phase's, or trace_host_work's
        Phase phase;
        int epoch, step;   // step: 0-based within the epoch (the optimizer phases ended before it began)
        int track;         // 0: the host thread; 1, 2, ...: streams in order of first use; 100...: other threads
        double start_us;   // from the first epoch's start (host clock; events placed through an anchor event)
        double duration_us;
        uint64_t bytes;
    };
    const std::vector<TraceSlice>& trace_slices() const { return trace_; }

    const std::vector<EpochTiming>& epochs() const { return epochs_; }
    EpochTiming total() const;  // all epochs added up (epoch = number of epochs)
    size_t events_created() const { return pool_.size(); }
    TimerClock clock() const { return clock_; }

  private:
    using HostClock = std::chrono::steady_clock;
    struct Pending {
        Phase phase;
        size_t start, stop;  // indices into pool_
        uint64_t bytes;
        int track = -1;  // the trace's stream track, -1 when the slice is not traced
        int step = 0;
    };
    struct Open {
        bool active = false;
        size_t start = 0;
        HostClock::time_point host_start;
        uint64_t nvtx_range = 0;
        int step = -1;  // the step it began in, when traced; -1: not traced
    };
    int stream_track(cudaStream_t stream);
    bool uses_events(Phase phase) const { return clock_ == TimerClock::cuda_events && phase != Phase::host; }
    size_t acquire_event();

    TimerClock clock_;
    std::vector<cudaEvent_t> pool_;
    size_t pool_used_ = 0;
    std::vector<Pending> pending_;
    std::array<Open, kPhaseCount> open_{};
    EpochTiming current_;
    bool in_epoch_ = false;
    HostClock::time_point epoch_start_;
    std::vector<EpochTiming> epochs_;
    // The timeline (enable_trace).
    int trace_steps_ = 0;
    int steps_done_ = 0;  // this epoch's optimizer phases ended so far: the current step
    size_t anchor_ = 0;       // an event recorded on stream 0 at begin_epoch, at host time epoch_start_
    HostClock::time_point trace_origin_;
    std::vector<cudaStream_t> trace_streams_;
    std::vector<TraceSlice> trace_;                  // guarded by trace_mutex_ (trace_host_work's other threads)
    std::vector<std::pair<int, std::string>> other_tracks_;
    mutable std::mutex trace_mutex_;
};
