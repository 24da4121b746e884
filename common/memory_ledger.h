// common/memory_ledger.h — every byte a lesson allocates, by what it is for, and every byte it copies.
//
// defines: MemoryCategory, MemorySpace, MemoryLedger (allocate / allocate_host / track / free / copy_to_device /
//          copy_to_host / record_copy / snapshot), MemorySnapshot, ModelShape, predict_device_memory() (what
//          lessons/mlp.h's allocate_mlp() allocates, exactly), OutOfMemoryError.
//
// A lesson never calls cudaMalloc directly:
//     MemoryLedger ledger;
//     float* w1 = ledger.allocate<float>(MemoryCategory::parameters, "W1", 784 * 256);
//     uint8_t* staging = ledger.allocate_host<uint8_t>(MemoryCategory::input_staging, "pixels", n, HostMemory::pinned);
//     ledger.copy_to_device(d_pixels, staging, bytes, stream);  // counted as a pinned host-to-device copy
// and at the end prints the table (report.h): current and peak bytes per category, the pinned and pageable
// host buffers, bytes moved each way, and cudaMemGetInfo before the first allocation and now. The ledger
// frees whatever is still allocated when it is destroyed.
//
// A failed allocation throws OutOfMemoryError saying what was asked for (category, name, bytes) and what is
// in use, and clears the CUDA error state so the program can report it cleanly.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/launch.h"

enum class MemoryCategory : int {
    parameters,       // weights and biases the forward pass reads
    gradients,        // dL/dW, dL/db
    optimizer_state,  // SGD velocity; AdamW first and second moments
    master_weights,   // fp32 copy of low-precision parameters (mixed precision)
    activations,      // layer inputs/outputs and their gradients for one batch
    input_staging,    // raw images and labels on their way in
    workspace,        // scratch: per-sample losses, counters, reduction buffers
};
inline constexpr int kMemoryCategoryCount = 7;
const char* memory_category_name(MemoryCategory category);

enum class MemorySpace : int { device, host_pinned, host_pageable };
inline constexpr int kMemorySpaceCount = 3;
const char* memory_space_name(MemorySpace space);

enum class HostMemory { pinned, pageable };  // cudaMallocHost (page-locked, DMA-able) vs operator new

enum class CopyDirection { host_to_device, device_to_host };

struct CategoryUsage {
    size_t current = 0;
    size_t peak = 0;
};

// Plain numbers for reports and JSON (no CUDA types).
struct MemorySnapshot {
    std::array<std::array<CategoryUsage, kMemoryCategoryCount>, kMemorySpaceCount> by_space{};
    std::array<CategoryUsage, kMemorySpaceCount> total{};  // peak of the sum, not the sum of peaks
    uint64_t h2d_pageable_bytes = 0, h2d_pinned_bytes = 0, d2h_pageable_bytes = 0, d2h_pinned_bytes = 0;
    uint64_t h2d_copies = 0, d2h_copies = 0;
    bool device_queried = false;  // false when no device memory was ever allocated (the CPU reference)
    size_t device_free_before = 0, device_total_before = 0;
    size_t device_free_now = 0, device_total_now = 0;

    const CategoryUsage& usage(MemorySpace space, MemoryCategory category) const {
        return by_space[static_cast<int>(space)][static_cast<int>(category)];
    }
};

class OutOfMemoryError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class MemoryLedger {
  public:
    MemoryLedger() = default;
    ~MemoryLedger();  // frees every allocation still held
    MemoryLedger(const MemoryLedger&) = delete;
    MemoryLedger& operator=(const MemoryLedger&) = delete;

    // Device memory (cudaMalloc). `count` elements of T; count 0 is allowed (records 0 bytes).
    template <typename T>
    T* allocate(MemoryCategory category, const std::string& name, size_t count) {
        return static_cast<T*>(allocate_bytes(category, name, checked_bytes(count, sizeof(T), name)));
    }
    // Host memory: pinned (cudaMallocHost) or pageable (operator new), tracked separately.
    template <typename T>
    T* allocate_host(MemoryCategory category, const std::string& name, size_t count, HostMemory kind) {
        return static_cast<T*>(allocate_host_bytes(category, name, checked_bytes(count, sizeof(T), name), kind));
    }
    void* allocate_bytes(MemoryCategory category, const std::string& name, size_t bytes);

    // A buffer the program allocated itself (its own cudaMalloc, as lesson 01 shows): counted like the others, but
    // the program frees it (cudaFree(ledger.untrack(p))); the ledger never does. Returns `pointer`.
    void* track(void* pointer, size_t bytes, MemoryCategory category, const std::string& name,
                MemorySpace space = MemorySpace::device);
    // Stops counting a tracked buffer (before the program frees it) and returns it; anything else throws.
    void* untrack(const void* pointer);
    // Records the device's free memory before anything is allocated (cudaMemGetInfo), for the memory table's
    // "before" line; the first allocation through the ledger does it too.
    void note_device_memory_before() { query_device_before(); }
    void* allocate_host_bytes(MemoryCategory category, const std::string& name, size_t bytes, HostMemory kind);

    // Frees a pointer this ledger returned (device or host). Freeing anything else throws.
    void free(const void* pointer);
    void free_all();

    // cudaMemcpyAsync on `stream`, counted by direction and by whether the host side is pinned memory
    // allocated through this ledger (anything else counts as pageable).
    // Completion rule: these return before the copy is done. With pinned host memory the copy engine reads or
    // writes the host buffer whenever the stream gets there, so the caller must not refill the source, free it, or
    // read the destination until the stream has passed the copy (an event or a synchronize after it). With
    // pageable memory CUDA stages the bytes and the source may be reused on return, but a device→host destination
    // still must not be read before a synchronize. Each caller says where its wait is.
    // (The ledger itself never waits, and frees memory only when asked: cudaFree/cudaFreeHost wait for the device.)
    void copy_to_device(void* device_dst, const void* host_src, size_t bytes, cudaStream_t stream = 0);
    void copy_to_host(void* host_dst, const void* device_src, size_t bytes, cudaStream_t stream = 0);
    // For copies made some other way (cudaMemcpy2D, a copy in a library, ...).
    void record_copy(CopyDirection direction, size_t bytes, HostMemory host_side);

    bool is_pinned(const void* host_pointer) const;  // inside a pinned buffer allocated here?

    size_t current(MemoryCategory category, MemorySpace space = MemorySpace::device) const;
    size_t peak(MemoryCategory category, MemorySpace space = MemorySpace::device) const;
    size_t total_current(MemorySpace space = MemorySpace::device) const;
    size_t total_peak(MemorySpace space = MemorySpace::device) const;

    // Everything above as plain numbers; queries cudaMemGetInfo for "now" if device memory was ever
    // allocated.
    MemorySnapshot snapshot() const;

    // "parameters 1.2 MiB, activations 3.0 MiB, ..." (the current non-zero device categories).
    std::string describe_current(MemorySpace space = MemorySpace::device) const;

  private:
    struct Allocation {
        size_t bytes;  // as requested
        MemoryCategory category;
        MemorySpace space;
        std::string name;
        bool tracked = false;  // allocated by the program (track), freed by it
    };
    static size_t checked_bytes(size_t count, size_t element_bytes, const std::string& name);
    void add(void* pointer, size_t bytes, MemoryCategory category, MemorySpace space, const std::string& name);
    void query_device_before();
    [[noreturn]] void throw_allocation_failure(MemoryCategory category, const std::string& name, size_t bytes,
                                               MemorySpace space, const std::string& cause) const;
    const Allocation* find_containing(const void* pointer, MemorySpace space) const;

    std::map<uintptr_t, Allocation> allocations_;  // by start address
    MemorySnapshot stats_;
};

// ---- Prediction: what an MLP of this shape needs, per category, before allocating anything. ----

struct ModelShape {
    std::vector<int> layer_sizes;  // 784, hidden..., 10
    int batch = 128;
    size_t parameter_bytes = 4;   // per parameter element (and gradient, unless gradient_bytes): 4 or 2 (fp16)
    size_t activation_bytes = 4;  // per activation element
    OptimizerKind optimizer = OptimizerKind::sgd;
    bool master_weights = false;   // an fp32 copy of the parameters (with 2-byte parameters)
    int staging_slots = 1;         // device input staging buffers (2: one is filled while the other is read)
    bool stage_raw_pixels = true;  // false: the batch arrives as floats straight into X; only labels are staged
    size_t gradient_bytes = 0;     // per gradient element; 0: the same as parameter_bytes (mixed precision: 4)
    size_t gradient_element_bytes() const { return gradient_bytes != 0 ? gradient_bytes : parameter_bytes; }
};

struct MemoryPrediction {
    std::array<size_t, kMemoryCategoryCount> bytes{};
    size_t total() const;
    size_t operator[](MemoryCategory category) const { return bytes[static_cast<int>(category)]; }
};

size_t parameter_count(const std::vector<int>& layer_sizes);  // Σ in·out + out

// Before allocating: does predict_device_memory(shape) plus `extra_bytes` (other device buffers the program will
// allocate, e.g. a resident test set) fit in `available_bytes`? "" when it does; otherwise one message naming the
// category whose allocation would overflow (allocated in the order of MemoryCategory, then the extra) and the
// largest batch that would fit (or that no batch fits, when the batch-independent part alone is too big).
std::string check_device_fits(const ModelShape& shape, size_t extra_bytes, const std::string& extra_name,
                              size_t available_bytes);
// The largest batch (≤ max_batch) whose prediction plus extra_bytes fits in available_bytes; 0 if none.
int largest_batch_that_fits(ModelShape shape, size_t extra_bytes, size_t available_bytes, int max_batch);
// What a program may plan to use of the device's free memory (cudaMemGetInfo): free minus a safety margin of
// 1/32 of the total + 64 MiB (less on a small device), for the CUDA context, allocator rounding and the kernels'
// own needs.
size_t usable_device_bytes(size_t free_bytes, size_t total_bytes);

// The canonical device buffer set of an MLP lesson (what allocate_mlp() allocates), for layers l = 1..L of
// shape in_l → out_l and batch B:
//   parameters      W_l [in_l × out_l], b_l [out_l]                        parameter_bytes each
//   gradients       dW_l, db_l (same shapes)                                gradient_element_bytes() each
//   optimizer state sgd: velocity for W_l, b_l; adamw: m and v for both     4 bytes each (fp32)
//   master weights  fp32 W_l, b_l when master_weights                       4 bytes each
//   activations     input X [B × in_1]; per layer output Y_l [B × out_l] and its gradient dY_l [B × out_l]
//   input staging   raw pixels [B × in_1] (unless !stage_raw_pixels) and labels [B], one byte each, per slot
//   workspace       row_losses [B] (float: softmax_cross_entropy's per-row scratch), mean_loss [1] (float: the
//                   batch's mean loss it reduces into) and one int counter (correct predictions)
MemoryPrediction predict_device_memory(const ModelShape& shape);

