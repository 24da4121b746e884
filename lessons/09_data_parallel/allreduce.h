// lessons/09_data_parallel/allreduce.h — the plumbing of lesson 09 that is not its idea: starting MPI, naming the
// rank in every failure, a deadline on every collective, NCCL's bootstrap, bandwidth as nccl-tests defines it, and the
// per-epoch check that every rank holds the same weights. The all-reduce itself is in main.cu.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/launch.h"
#include "common/phase_timer.h"
#include "lessons/lesson.h"

#if defined(HAVE_NCCL)
#include <nccl.h>
#endif

namespace dp {

struct World {
    int rank = 0, size = 1;              // in MPI_COMM_WORLD
    int local_rank = 0, local_size = 1;  // on this machine (MPI_COMM_TYPE_SHARED): which GPU is ours
};

// Who carries the all-reduce. NCCL: its kernels on the comm stream, device memory in place. MPI, CUDA-aware: device
// pointers handed to MPI. MPI, host-staged: each bucket copied to pinned host memory, reduced there, copied back.
enum class Engine { mpi_host_staged, mpi_cuda_aware, nccl };
const char* engine_name(Engine engine);

// The ranks that reduce together: MPI_COMM_WORLD, or a part of it (the scaling comparison); `index`: ours in it.
struct Group {
    MPI_Comm mpi = MPI_COMM_WORLD;
    int ranks = 1, index = 0;
    Engine engine = Engine::mpi_host_staged;
#if defined(HAVE_NCCL)
    ncclComm_t nccl = nullptr;
#endif
};

// The lesson's own flags.
struct Flags {
    std::string overlap = "on", engine = "auto", save_weights;
    double timeout_s = 60;
    int compare_steps = 3, fail_rank = -1, fail_step = -1, unwaited_bucket = -1;
};
void add_flags(Cli& cli, Flags& flags);
inline std::function<void(Cli&)> flag_adder(Flags& flags) {
    return [&flags](Cli& cli) { add_flags(cli, flags); };
}

// Before the Lesson: rank 0 prints (the others' stdout goes to /dev/null; stderr stays), pick_device(), and this
// rank's argv (argv_for_rank below).
struct RankArgs {
    std::vector<std::string> storage;
    std::vector<char*> pointers;
    int argc() const { return int(pointers.size()) - 1; }
    char** argv() { return pointers.data(); }
};
RankArgs start_rank(int argc, char** argv);
// Can the ranks split the data: at least one image per rank, --batch a multiple of the rank count, and a last batch
// with a row for every rank? If not, rank 0 says why and every rank returns false (the lesson exits 2).
bool split_is_possible(const Lesson& lesson);
// --fail-rank R --fail-step S: rank R throws at step S (the tests' failing rank).
void fail_if_asked(const Flags& flags, int rank, long step);

// MPI_Init, errors returned instead of aborting (so MPI_CHECK can name the rank), the node-local rank. Call first.
World start_mpi(int* argc, char*** argv);
const World& world();

// Prints "rank R: <message>" to stderr and ends every rank (MPI_Abort): mpirun exits non-zero, nobody hangs.
[[noreturn]] void abort_all(const std::string& message);

// Every MPI call is checked: a failure names the call, the rank and MPI's own words, then abort_all.
void mpi_check(int code, const char* call, const char* file, int line);
#define MPI_CHECK(call) ::dp::mpi_check((call), #call, __FILE__, __LINE__)

// MPI has no timeout of its own: poll MPI_Test until `request` completes, sleeping between polls (the ranks share the
// cores with the kernels), and abort_all naming `what` once `seconds` have passed (a rank died or hangs).
void wait_or_abort(MPI_Request* request, double seconds, const std::string& what);
// The deadline every collective of the lesson gets (--comm-timeout).
void set_comm_timeout(double seconds);
double comm_timeout();
// A blocking all-reduce (sum) with the deadline: for small per-epoch figures (loss sums, counts, checksums).
void allreduce_sum(void* buffer, int count, MPI_Datatype type, MPI_Comm comm, const char* what);

// Before the Lesson (which checks the device): one GPU per node-local rank; says so when ranks must share GPUs.
// On the CPU backend: each rank's kernel workers get cores / ranks-on-this-machine (unless CUDA_CPU_WORKERS is set).
void pick_device();
// --engine (auto, mpi, nccl) against what was built and found: the engine, and one line saying which runs and why.
// A request that cannot be met is one message and exit 2 on every rank.
// Also sets the deadline of every collective (--comm-timeout).
Engine choose_engine(const Flags& flags, bool cpu_backend);
// MPI_COMM_WORLD as a Group, with its NCCL communicator when the engine is NCCL.
Group world_group(Engine engine);
// The first `ranks` ranks of `world` as a group of their own (MPI_Comm_split, ncclCommSplit); others get member = false.
Group split_group(const Group& world, int ranks, bool* member);
void free_group(Group& group);  // (not MPI_COMM_WORLD)

// cudaEventQuery as a yes/no; any error but "not ready" is checked.
bool event_done(cudaEvent_t event);
float elapsed_ms(cudaEvent_t from, cudaEvent_t to);  // both complete
// The trace slice name of layer l's bucket (a string that lives forever, as PhaseTimer::trace_host_work needs).
const char* bucket_slice_name(size_t layer);
// Sums a device int (the epoch's correct count) over `comm`'s ranks, in place; `stream` is synchronized first.
void sum_device_counter(int* device_counter, MPI_Comm comm, cudaStream_t stream);

// Does this Open MPI take device pointers (CUDA-aware)? Compile time and run time must both say yes.
bool mpi_is_cuda_aware();

// nccl-tests' figures for an all-reduce of `bytes` that took `seconds` over `ranks`: algorithm bandwidth bytes/time,
// bus bandwidth algbw · 2(n−1)/n (what each link carries in a ring: comparable across rank counts), in GB/s.
double algbw_gb_s(double bytes, double seconds);
double busbw_gb_s(double bytes, double seconds, int ranks);

// Where the reduction's time went, summed over steps. Per step: the buckets' reduction intervals (ms from any common
// origin) and the moment the backward pass ended; `total` is the length of the intervals' union (the time some
// reduction was in flight), `exposed` the part of it after the backward pass ended (what the optimizer waits for).
struct ReduceTimes {
    double total_ms = 0, exposed_ms = 0;
    long steps = 0;
    void add_step(std::vector<std::pair<double, double>> intervals, double backward_end_ms);
    double hidden_fraction() const { return total_ms > 0 ? 1.0 - exposed_ms / total_ms : 0.0; }
};

// One step's reduction times (host clock, ms from construction): the backward pass's end, each bucket's interval
// (on the --trace timeline too, when `times` is given), added to `times` by finish().
class StepClock {
  public:
    StepClock(PhaseTimer& timer, ReduceTimes* times, int epoch, int step)
        : timer_(timer), times_(times), epoch_(epoch), step_(step), origin_(std::chrono::steady_clock::now()) {}
    double ms() const {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin_).count();
    }
    void backward_ended_if(bool ended) {  // the first time `ended` holds is the backward pass's end
        if (ended && backward_end_ms_ < 0) backward_end_ms_ = ms();
    }
    void bucket_done(size_t layer, double posted_ms, size_t bytes);                       // [posted_ms, now]
    void set(double backward_end_ms, std::vector<std::pair<double, double>> intervals) {  // times from events (NCCL)
        backward_end_ms_ = backward_end_ms, intervals_ = std::move(intervals);
    }
    void finish() {
        if (times_) times_->add_step(intervals_, backward_end_ms_ < 0 ? 0 : backward_end_ms_);
    }

  private:
    PhaseTimer& timer_;
    ReduceTimes* times_;
    int epoch_, step_;
    std::chrono::steady_clock::time_point origin_;
    double backward_end_ms_ = -1;
    std::vector<std::pair<double, double>> intervals_;
};

// FNV-1a of the parameters' bytes (as Lesson::finish prints it), gathered from every rank of `comm`: rank 0 prints one
// line; if any differs, every rank prints which ones to stderr and the call returns false.
bool same_weights_on_every_rank(const std::vector<std::vector<float>>& parameters, MPI_Comm comm, const char* when);
uint64_t parameters_checksum(const std::vector<std::vector<float>>& parameters);
// The parameters' float32 bytes, one tensor after another (--save-weights, for the tests' comparisons): rank 0 writes.
void write_parameters(const std::string& path, const std::vector<std::vector<float>>& parameters);

// argv for this rank's Lesson: rank 0 keeps everything; the others write --json nowhere (one report per run) and
// --trace FILE as FILE.rankR.json (one timeline per rank).
std::vector<char*> argv_for_rank(int argc, char** argv, int rank, std::vector<std::string>& storage);

// One bucket on NCCL: both all-reduces (sum, in place) in one ncclGroupStart/End, queued on `stream`; and the wait for
// the event recorded after the last bucket: polling ncclCommGetAsyncError, past the deadline or on an error
// ncclCommAbort (so no kernel waits forever for a dead peer) and abort_all. Without NCCL in the build: abort_all.
void nccl_all_reduce(const Group& group, float* a, size_t a_count, float* b, size_t b_count, cudaStream_t stream);
void nccl_wait_or_abort(const Group& group, cudaEvent_t done, const std::string& what);

#if defined(HAVE_NCCL)
void nccl_check(ncclResult_t result, const char* call, const char* file, int line);
#define NCCL_CHECK(call) ::dp::nccl_check((call), #call, __FILE__, __LINE__)
// One communicator over MPI_COMM_WORLD's ranks: rank 0's ncclUniqueId broadcast with MPI (NCCL's usual bootstrap).
ncclComm_t nccl_start();
// The ranks of `comm` with the same `color` in a communicator of their own (the scaling comparison's groups).
ncclComm_t nccl_split(ncclComm_t comm, int color, int key);
#endif

}  // namespace dp
