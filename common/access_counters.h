// common/access_counters.h — what Nsight Compute's memory counters would say about each kernel, counted exactly on
// the CPU backend's counting build (build/cpu-counters, `make counters`), from the address of every access.
//
// Why: on a CPU a fiber per CUDA thread has its own cost model, so the lessons' CPU timings cannot show why a
// coalesced or tiled kernel is fast on a GPU. What makes it fast is a property of the addresses each warp touches,
// which the backend runs exactly: how many 32-byte sectors a warp's global load touches, and how many times shared
// memory must replay a request (bank conflicts). In the counting build every global and shared access a CUDA thread
// makes is seen with its address, size and instruction site, grouped into warp-level instructions, and counted as
// the hardware would (common/cpu_backend/README.md, "Counting memory transactions", has the model and its limits).
//
// In every other build (the cuda flavor, build/cpu) access_counting_available() is false and the counts are empty:
// on a GPU, Nsight Compute is the tool (tools/gpu_check.sh runs it beside these counts).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// One kind of access (global or shared, load or store), summed over warp-level instructions.
struct AccessCounts {
    uint64_t requests = 0;         // warp-level instructions (Nsight Compute: ..._requests / ..._op_ld.sum)
    uint64_t transactions = 0;     // global: 32-byte sectors touched; shared: wavefronts (1 + bank-conflict replays)
    uint64_t ideal_transactions = 0;  // what the same bytes would cost perfectly coalesced / conflict-free
    uint64_t bytes_requested = 0;  // active lanes × access size, summed
    uint64_t lane_accesses = 0;    // active lanes, summed

    double per_request() const { return requests ? double(transactions) / double(requests) : 0.0; }
    // ideal / actual: 1.0 is perfectly coalesced (global) or conflict-free (shared)
    double efficiency() const { return transactions ? double(ideal_transactions) / double(transactions) : 1.0; }
    uint64_t replays() const { return transactions - ideal_transactions; }  // shared: the bank conflicts
    AccessCounts& operator+=(const AccessCounts& o) {
        requests += o.requests;
        transactions += o.transactions;
        ideal_transactions += o.ideal_transactions;
        bytes_requested += o.bytes_requested;
        lane_accesses += o.lane_accesses;
        return *this;
    }
};

struct KernelAccessCounts {
    KernelAccessCounts() = default;
    explicit KernelAccessCounts(std::string kernel_name, uint64_t launch_count = 0)
        : kernel(std::move(kernel_name)), launches(launch_count) {}

    std::string kernel;  // demangled, without its parameter list: "gemm_smem_tiled_kernel<false, false>"
    uint64_t launches = 0;
    AccessCounts global_load, global_store, shared_load, shared_store;
    uint64_t atomics = 0;  // lane-level atomic operations (global and shared), counted but not modelled
    KernelAccessCounts& operator+=(const KernelAccessCounts& o) {
        launches += o.launches;
        global_load += o.global_load;
        global_store += o.global_store;
        shared_load += o.shared_load;
        shared_store += o.shared_store;
        atomics += o.atomics;
        return *this;
    }
};

// Whether this build counts (the cpu flavor's counting tree, with CUDA_CPU_COUNTERS not `off`).
bool access_counting_available();
// Per kernel name, summed over launches since the last reset, in the order each kernel was first launched.
std::vector<KernelAccessCounts> access_counts();
// Everything since the last reset, as one row named "all kernels".
KernelAccessCounts total_access_counts();
// A table of rows (one per kernel): requests, sectors or wavefronts per request, coalescing efficiency, conflicts.
std::string render_access_counts(const std::vector<KernelAccessCounts>& rows);
// Forgets what was counted (the exit summary of CUDA_CPU_COUNTERS=summary still covers the whole run).
void reset_access_counts();
