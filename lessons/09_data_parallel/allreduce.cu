// lessons/09_data_parallel/allreduce.cu — see allreduce.h.
#include "lessons/09_data_parallel/allreduce.h"

#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>  // MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <thread>

namespace dp {
namespace {

World g_world;
double g_timeout_s = 60;

}  // namespace

World start_mpi(int* argc, char*** argv) {
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        std::fprintf(stderr, "MPI_Init failed (is this running under mpirun?)\n");
        std::exit(1);
    }
    // Errors come back as codes: MPI_CHECK names the rank and the call instead of MPI's generic abort.
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_world.size));
    MPI_Comm node;  // the ranks sharing this machine: local_rank picks the GPU
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &g_world.local_rank));
    MPI_CHECK(MPI_Comm_size(node, &g_world.local_size));
    MPI_CHECK(MPI_Comm_free(&node));
    return g_world;
}

const World& world() {
    return g_world;
}

void abort_all(const std::string& message) {
    std::fprintf(stderr, "rank %d of %d: %s\n", g_world.rank, g_world.size, message.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // (MPI_Abort does not return; if it did, still no hang)
}

void mpi_check(int code, const char* call, const char* file, int line) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(code, text, &length);
    abort_all(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + text);
}

void set_comm_timeout(double seconds) {
    g_timeout_s = seconds;
}
double comm_timeout() {
    return g_timeout_s;
}

void wait_or_abort(MPI_Request* request, double seconds, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));  // also what makes a nonblocking collective progress
        if (done) return;
        if (std::chrono::steady_clock::now() > deadline) {
            char text[64];
            std::snprintf(text, sizeof text, "%.0f s", seconds);
            abort_all(what + " did not complete within " + text +
                      " (--comm-timeout): another rank failed or hangs; stopping every rank");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

void allreduce_sum(void* buffer, int count, MPI_Datatype type, MPI_Comm comm, const char* what) {
    MPI_Request request;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer, count, type, MPI_SUM, comm, &request));
    wait_or_abort(&request, g_timeout_s, what);
}

void add_flags(Cli& cli, Flags& f) {
    cli.add_choice("--overlap", &f.overlap, {"on", "off"},
                   "all-reduce each layer's bucket during the backward pass (on), or after it (off)");
    cli.add_choice("--engine", &f.engine, {"auto", "mpi", "nccl"},
                   "who carries the all-reduce (auto: NCCL where it was built and each rank has a GPU, else MPI)");
    cli.add_double("--comm-timeout", &f.timeout_s, "S", "deadline of every collective, in seconds", 0.1, 86400);
    cli.add_int("--compare-steps", &f.compare_steps, "K", "steps per run of the N = 1, 2, 4 comparison (0: none)", 0,
                1000000);
    cli.add_int("--fail-rank", &f.fail_rank, "R", "test: rank R fails (an exception) at step --fail-step", -1, 1 << 20);
    cli.add_int("--fail-step", &f.fail_step, "S", "test: the step at which --fail-rank fails", -1, 1 << 30);
    cli.add_output_file("--save-weights", &f.save_weights, "FILE",
                        "test: rank 0 writes the final weights there (float32: W_1, b_1, W_2, ...)");
    cli.add_int("--plant-unwaited-bucket", &f.unwaited_bucket, "L",
                "test: a planted bug: the optimizer does not wait for bucket L (0: the first layer's)", -1, 1 << 20);
}

RankArgs start_rank(int argc, char** argv) {
    if (g_world.rank != 0 && !std::freopen("/dev/null", "w", stdout)) abort_all("cannot silence this rank's stdout");
    pick_device();
    RankArgs args;
    args.pointers = argv_for_rank(argc, argv, g_world.rank, args.storage);
    return args;
}

bool split_is_possible(const Lesson& lesson) {
    const int n = g_world.size, batch = lesson.options.batch;
    const size_t images = lesson.data.train.count;
    const int last_rows = lesson.rows_in_batch(lesson.batches_per_epoch() - 1);
    std::string bad;
    if (images < size_t(n))
        bad = std::to_string(n) + " ranks but " + std::to_string(images) + " training images: every rank needs one";
    else if (batch % n)
        bad = "--batch " + std::to_string(batch) + " cannot be split into " + std::to_string(n) +
              " equal shards (choose a multiple of the rank count)";
    else if (last_rows < n)
        bad = std::to_string(images) + " training images leave a last batch of " + std::to_string(last_rows) +
              " rows for " + std::to_string(n) + " ranks (every rank needs one: change --limit)";
    if (!bad.empty() && g_world.rank == 0) std::fprintf(stderr, "lesson09_data_parallel: %s\n", bad.c_str());
    return bad.empty();
}

void fail_if_asked(const Flags& flags, int rank, long step) {
    if (rank == flags.fail_rank && step == flags.fail_step)
        throw std::runtime_error("rank " + std::to_string(rank) + ": failing at step " + std::to_string(step) +
                                 ", as --fail-rank asked");
}

void StepClock::bucket_done(size_t layer, double posted_ms, size_t bytes) {
    intervals_.emplace_back(posted_ms, ms());
    if (!times_) return;
    using namespace std::chrono;
    const auto begin = origin_ + duration_cast<steady_clock::duration>(duration<double, std::milli>(posted_ms));
    timer_.trace_host_work(150, "MPI all-reduce (host clock)", bucket_slice_name(layer), epoch_, step_, begin,
                           steady_clock::now(), bytes);
}

const char* engine_name(Engine engine) {
    switch (engine) {
        case Engine::nccl:
            return "NCCL";
        case Engine::mpi_cuda_aware:
            return "MPI, CUDA-aware (device pointers)";
        case Engine::mpi_host_staged:
            break;
    }
    return "MPI, host-staged (pinned host buckets)";
}

void pick_device() {
#if defined(CUDA_TEACH_CPU)
    if (std::getenv("CUDA_CPU_WORKERS") == nullptr) {  // the ranks share the cores: one share each
        const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
        setenv("CUDA_CPU_WORKERS", std::to_string(std::max(1u, cores / unsigned(g_world.local_size))).c_str(), 0);
    }
#else
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) return;  // the Lesson says there is no device
    CUDA_CHECK(cudaSetDevice(g_world.local_rank % gpus));
    if (g_world.local_rank == 0 && gpus < g_world.local_size)
        std::fprintf(stderr,
                     "note: %d ranks on this machine but %d GPU%s: ranks share GPUs (rank r uses GPU r mod %d), "
                     "so they also share its time and memory\n",
                     g_world.local_size, gpus, gpus == 1 ? "" : "s", gpus);
#endif
}

Engine choose_engine(const Flags& flags, bool cpu_backend) {
    set_comm_timeout(flags.timeout_s);
    const std::string& flag = flags.engine;
    std::string why;
    Engine engine = Engine::mpi_host_staged;
    int gpus = 0;
    if (!cpu_backend) CUDA_CHECK(cudaGetDeviceCount(&gpus));
#if defined(HAVE_NCCL)
    const bool nccl_built = true;
#else
    const bool nccl_built = false;
#endif
    std::string refused;
    if (flag == "nccl" && !nccl_built)
        refused = "--engine nccl: this build has no NCCL (CMake did not find it)";
    else if (flag == "nccl" && cpu_backend)
        refused = "--engine nccl: NCCL needs GPUs; the CPU backend reduces with MPI";
    else if (flag == "nccl" && gpus < g_world.local_size)
        refused = "--engine nccl: NCCL needs a GPU per rank";
    if (!refused.empty()) {
        if (g_world.rank == 0) std::fprintf(stderr, "lesson09_data_parallel: %s\n", refused.c_str());
        MPI_Finalize();
        std::exit(2);
    }
    if (flag != "mpi" && nccl_built && !cpu_backend && gpus >= g_world.local_size) {
        engine = Engine::nccl, why = "built with NCCL, one GPU per rank";
    } else {
        engine = !cpu_backend && mpi_is_cuda_aware() ? Engine::mpi_cuda_aware : Engine::mpi_host_staged;
        why = flag == "mpi" ? "--engine mpi"
              : cpu_backend ? "the CPU backend (its \"device\" memory is host memory; staged as on a GPU)"
              : !nccl_built ? "NCCL not found at build time"
                            : "fewer GPUs than ranks on this machine";
        if (engine == Engine::mpi_host_staged && !cpu_backend) why += "; this MPI is not CUDA-aware";
    }
    if (g_world.rank == 0)
        std::printf("engine: %s, %d rank%s (%s)\n", engine_name(engine), g_world.size, g_world.size == 1 ? "" : "s",
                    why.c_str());
    std::fflush(stdout);
    return engine;
}

Group world_group(Engine engine) {
    Group group{MPI_COMM_WORLD, g_world.size, g_world.rank, engine};
#if defined(HAVE_NCCL)
    if (engine == Engine::nccl) group.nccl = nccl_start();
#endif
    return group;
}

Group split_group(const Group& world, int ranks, bool* member) {
    *member = world.index < ranks;
    Group group = world;
    MPI_CHECK(MPI_Comm_split(world.mpi, *member ? 0 : MPI_UNDEFINED, world.index, &group.mpi));
    group.ranks = ranks;
#if defined(HAVE_NCCL)
    if (world.engine == Engine::nccl)
        group.nccl = nccl_split(world.nccl, *member ? 0 : NCCL_SPLIT_NOCOLOR, world.index);
#endif
    return group;
}

void free_group(Group& group) {
    if (group.mpi != MPI_COMM_WORLD && group.mpi != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&group.mpi));
#if defined(HAVE_NCCL)
    if (group.nccl) NCCL_CHECK(ncclCommDestroy(group.nccl)), group.nccl = nullptr;
#endif
}

bool event_done(cudaEvent_t event) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) return false;
    CUDA_CHECK(status);
    return true;
}

float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
    return ms;
}

const char* bucket_slice_name(size_t layer) {
    static const char* names[] = {"all-reduce bucket 1", "all-reduce bucket 2", "all-reduce bucket 3",
                                  "all-reduce bucket 4", "all-reduce bucket 5", "all-reduce bucket 6",
                                  "all-reduce bucket 7", "all-reduce bucket 8"};
    return layer < std::size(names) ? names[layer] : "all-reduce bucket 9+";
}

void sum_device_counter(int* device_counter, MPI_Comm comm, cudaStream_t stream) {
    int value = 0;
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemcpy(&value, device_counter, sizeof value, cudaMemcpyDeviceToHost));
    allreduce_sum(&value, 1, MPI_INT, comm, "the epoch's correct count");
    // On `stream`, whose kernels read the counter next: a synchronous cudaMemcpy from pageable memory may return
    // before its copy has landed, and a non-blocking stream does not wait for it (CUDA_CPU_ASYNC=late caught that).
    CUDA_CHECK(cudaMemcpyAsync(device_counter, &value, sizeof value, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // `value` is this function's: the copy is done with it on return
}

bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;
#else
    return false;
#endif
}

double algbw_gb_s(double bytes, double seconds) {
    return seconds > 0 ? bytes / seconds / 1e9 : 0;
}
double busbw_gb_s(double bytes, double seconds, int ranks) {
    return algbw_gb_s(bytes, seconds) * 2.0 * (ranks - 1) / ranks;
}

void ReduceTimes::add_step(std::vector<std::pair<double, double>> intervals, double backward_end_ms) {
    std::sort(intervals.begin(), intervals.end());
    double covered_to = -1e300;
    for (const auto& [begin, end] : intervals) {  // the union, piece by piece, split at the backward pass's end
        const double from = std::max(begin, covered_to);
        if (end <= from) continue;
        total_ms += end - from;
        exposed_ms += std::max(0.0, end - std::max(from, backward_end_ms));
        covered_to = end;
    }
    ++steps;
}

uint64_t parameters_checksum(const std::vector<std::vector<float>>& parameters) {
    uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a, as Lesson::finish's "final weights: checksum"
    for (const std::vector<float>& tensor : parameters) {
        const auto* p = reinterpret_cast<const unsigned char*>(tensor.data());
        for (size_t i = 0; i < tensor.size() * sizeof(float); ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
    }
    return hash;
}

bool same_weights_on_every_rank(const std::vector<std::vector<float>>& parameters, MPI_Comm comm, const char* when) {
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    std::vector<uint64_t> all(size, 0);
    all[rank] = parameters_checksum(parameters);  // each rank fills its own entry; the sum gathers them
    allreduce_sum(all.data(), size, MPI_UINT64_T, comm, "the weights checksum exchange");
    bool same = true;
    std::string line;
    for (int r = 0; r < size; ++r) {
        char text[48];
        std::snprintf(text, sizeof text, "%srank %d %016" PRIx64, r ? ", " : "", r, all[r]);
        line += text;
        same = same && all[r] == all[0];
    }
    if (rank == 0 && same) std::printf("        weights after %s: %s — identical on every rank\n", when, line.c_str());
    if (!same)
        std::fprintf(stderr, "rank %d: the weights differ across ranks after %s: %s\n", rank, when, line.c_str());
    std::fflush(stdout);
    return same;
}

void write_parameters(const std::string& path, const std::vector<std::vector<float>>& parameters) {
    if (g_world.rank != 0) return;
    std::FILE* file = std::fopen(path.c_str(), "wb");
    bool ok = file != nullptr;
    for (const std::vector<float>& tensor : parameters)
        ok = ok && std::fwrite(tensor.data(), sizeof(float), tensor.size(), file) == tensor.size();
    if (file && std::fclose(file) != 0) ok = false;
    if (!ok) throw std::runtime_error("--save-weights: cannot write " + path);
}

std::vector<char*> argv_for_rank(int argc, char** argv, int rank, std::vector<std::string>& storage) {
    storage.assign(argv, argv + argc);
    if (rank != 0) {
        std::vector<std::string> kept;
        for (size_t i = 0; i < storage.size(); ++i) {
            const std::string& a = storage[i];
            const bool json = a == "--json", trace = a == "--trace";
            if ((json || trace) && i + 1 < storage.size()) {
                if (trace) kept.insert(kept.end(), {a, storage[i + 1] + ".rank" + std::to_string(rank) + ".json"});
                ++i;
            } else if (a.starts_with("--json=")) {
            } else if (a.starts_with("--trace=")) {
                kept.push_back(a + ".rank" + std::to_string(rank) + ".json");
            } else {
                kept.push_back(a);
            }
        }
        storage = kept;
    }
    std::vector<char*> pointers;
    for (std::string& s : storage) pointers.push_back(s.data());
    pointers.push_back(nullptr);
    return pointers;
}

#if defined(HAVE_NCCL)
void nccl_check(ncclResult_t result, const char* call, const char* file, int line) {
    if (result == ncclSuccess) return;
    abort_all(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
              ncclGetErrorString(result));
}

ncclComm_t nccl_start() {
    ncclUniqueId id;
    if (g_world.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, g_world.size, id, g_world.rank));
    return comm;
}

ncclComm_t nccl_split(ncclComm_t comm, int color, int key) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    ncclComm_t split = nullptr;
    NCCL_CHECK(ncclCommSplit(comm, color, key, &split, nullptr));
    return split;
#else
    (void)comm, (void)color, (void)key;
    abort_all("the scaling comparison needs ncclCommSplit (NCCL 2.18 or later); run with --compare-steps 0");
#endif
}

void nccl_wait_or_abort(const Group& group, cudaEvent_t done, const std::string& what) {
    ncclComm_t comm = group.nccl;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(g_timeout_s);
    for (;;) {
        const cudaError_t status = cudaEventQuery(done);
        if (status == cudaSuccess) return;
        if (status != cudaErrorNotReady) CUDA_CHECK(status);
        ncclResult_t async = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
        if (async != ncclSuccess || std::chrono::steady_clock::now() > deadline) {
            ncclCommAbort(comm);  // frees the kernels that wait for a peer that will never come
            abort_all(what + (async != ncclSuccess ? std::string(": ") + ncclGetErrorString(async)
                                                   : std::string(" did not complete within --comm-timeout")));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}
void nccl_all_reduce(const Group& group, float* a, size_t a_count, float* b, size_t b_count, cudaStream_t stream) {
    NCCL_CHECK(ncclGroupStart());  // one launch for the bucket's two tensors
    NCCL_CHECK(ncclAllReduce(a, a, a_count, ncclFloat, ncclSum, group.nccl, stream));
    NCCL_CHECK(ncclAllReduce(b, b, b_count, ncclFloat, ncclSum, group.nccl, stream));
    NCCL_CHECK(ncclGroupEnd());
}
#else
void nccl_all_reduce(const Group&, float*, size_t, float*, size_t, cudaStream_t) {
    abort_all("NCCL is not in this build");
}
void nccl_wait_or_abort(const Group&, cudaEvent_t, const std::string&) {
    abort_all("NCCL is not in this build");
}
#endif

}  // namespace dp
