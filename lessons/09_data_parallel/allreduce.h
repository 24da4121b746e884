// lessons/09_data_parallel/allreduce.h — the plumbing of lesson 09 that is not its idea: starting MPI, naming the
// rank in every failure, a deadline on every collective, NCCL's bootstrap, bandwidth as nccl-tests defines it, and the
// per-epoch check that every rank holds the same weights. The all-reduce itself is in main.cu.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/launch.h"

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
Engine choose_engine(const std::string& flag, bool cpu_backend);
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

// FNV-1a of the parameters' bytes (as Lesson::finish prints it), gathered from every rank of `comm`: rank 0 prints one
// line; if any differs, every rank prints which ones to stderr and the call returns false.
bool same_weights_on_every_rank(const std::vector<std::vector<float>>& parameters, MPI_Comm comm, const char* when);
uint64_t parameters_checksum(const std::vector<std::vector<float>>& parameters);
// The parameters' float32 bytes, one tensor after another (--save-weights, for the tests' comparisons).
void write_parameters(const std::string& path, const std::vector<std::vector<float>>& parameters);

// argv for this rank's Lesson: rank 0 keeps everything; the others write --json nowhere (one report per run) and
// --trace FILE as FILE.rankR.json (one timeline per rank).
std::vector<char*> argv_for_rank(int argc, char** argv, int rank, std::vector<std::string>& storage);

#if defined(HAVE_NCCL)
void nccl_check(ncclResult_t result, const char* call, const char* file, int line);
#define NCCL_CHECK(call) ::dp::nccl_check((call), #call, __FILE__, __LINE__)
// One communicator over MPI_COMM_WORLD's ranks: rank 0's ncclUniqueId broadcast with MPI (NCCL's usual bootstrap).
ncclComm_t nccl_start();
// The ranks of `comm` with the same `color` in a communicator of their own (the scaling comparison's groups).
ncclComm_t nccl_split(ncclComm_t comm, int color, int key);
// Waits for `done` (recorded on the comm stream after the NCCL calls), polling ncclCommGetAsyncError; past the deadline
// or on an error, ncclCommAbort (so no kernel waits forever for a dead peer) and abort_all.
void nccl_wait_or_abort(ncclComm_t comm, cudaEvent_t done, const std::string& what);
#endif

}  // namespace dp
