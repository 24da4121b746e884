// common/memory_ledger.cpp — see memory_ledger.h.
#include "common/memory_ledger.h"

#include <algorithm>
#include <new>

#include "common/report.h"

const char* memory_category_name(MemoryCategory category) {
    switch (category) {
        case MemoryCategory::parameters:
            return "parameters";
        case MemoryCategory::gradients:
            return "gradients";
        case MemoryCategory::optimizer_state:
            return "optimizer state";
        case MemoryCategory::master_weights:
            return "master weights";
        case MemoryCategory::activations:
            return "activations";
        case MemoryCategory::input_staging:
            return "input staging";
        case MemoryCategory::workspace:
            return "workspace";
    }
    return "?";
}

const char* memory_space_name(MemorySpace space) {
    switch (space) {
        case MemorySpace::device:
            return "device";
        case MemorySpace::host_pinned:
            return "host pinned";
        case MemorySpace::host_pageable:
            return "host pageable";
    }
    return "?";
}

MemoryLedger::~MemoryLedger() {
    free_all();
}

size_t MemoryLedger::checked_bytes(size_t count, size_t element_bytes, const std::string& name) {
    if (element_bytes != 0 && count > SIZE_MAX / element_bytes) {
        throw OutOfMemoryError("allocation '" + name + "': " + std::to_string(count) + " elements of " +
                               std::to_string(element_bytes) + " bytes overflow size_t");
    }
    return count * element_bytes;
}

void MemoryLedger::query_device_before() {
    if (stats_.device_queried) return;
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        stats_.device_free_before = free_bytes;
        stats_.device_total_before = total_bytes;
        stats_.device_queried = true;
    } else {
        cudaGetLastError();  // leave no sticky error behind; the cudaMalloc that follows reports the real
                             // problem
    }
}

void MemoryLedger::throw_allocation_failure(MemoryCategory category, const std::string& name, size_t bytes,
                                            MemorySpace space, const std::string& cause) const {
    std::string message = std::string("out of ") + memory_space_name(space) + " memory: cannot allocate " +
                          memory_category_name(category) + " '" + name + "' (" + format_bytes(bytes) + ", " +
                          std::to_string(bytes) + " bytes; " + cause +
                          "). In use through the ledger: " + format_bytes(total_current(space));
    const std::string parts = describe_current(space);
    if (!parts.empty()) message += " (" + parts + ")";
    if (space == MemorySpace::device) {
        size_t free_bytes = 0, total_bytes = 0;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
            message += "; the device has " + format_bytes(free_bytes) + " free of " + format_bytes(total_bytes);
        } else {
            cudaGetLastError();
        }
    }
    message += ". Try a smaller --batch or --hidden.";
    throw OutOfMemoryError(message);
}

void* MemoryLedger::allocate_bytes(MemoryCategory category, const std::string& name, size_t bytes) {
    query_device_before();
    void* pointer = nullptr;
    // cudaMalloc(0) may return nullptr; allocate one byte so every allocation has its own address.
    const cudaError_t status = cudaMalloc(&pointer, std::max<size_t>(bytes, 1));
    if (status != cudaSuccess) {
        cudaGetLastError();  // clear the error so later CUDA_CHECKs do not report this allocation again
        throw_allocation_failure(category, name, bytes, MemorySpace::device,
                                 std::string("cudaMalloc: ") + cudaGetErrorName(status));
    }
    add(pointer, bytes, category, MemorySpace::device, name);
    return pointer;
}

void* MemoryLedger::allocate_host_bytes(MemoryCategory category, const std::string& name, size_t bytes,
                                        HostMemory kind) {
    void* pointer = nullptr;
    if (kind == HostMemory::pinned) {
        const cudaError_t status = cudaMallocHost(&pointer, std::max<size_t>(bytes, 1));
        if (status != cudaSuccess) {
            cudaGetLastError();
            throw_allocation_failure(category, name, bytes, MemorySpace::host_pinned,
                                     std::string("cudaMallocHost: ") + cudaGetErrorName(status));
        }
        add(pointer, bytes, category, MemorySpace::host_pinned, name);
    } else {
        pointer = ::operator new (std::max<size_t>(bytes, 1), std::align_val_t{64}, std::nothrow);
        if (pointer == nullptr) {
            throw_allocation_failure(category, name, bytes, MemorySpace::host_pageable, "operator new failed");
        }
        add(pointer, bytes, category, MemorySpace::host_pageable, name);
    }
    return pointer;
}

void MemoryLedger::add(void* pointer, size_t bytes, MemoryCategory category, MemorySpace space,
                       const std::string& name) {
    allocations_[reinterpret_cast<uintptr_t>(pointer)] = Allocation{bytes, category, space, name};
    CategoryUsage& usage = stats_.by_space[static_cast<int>(space)][static_cast<int>(category)];
    usage.current += bytes;
    usage.peak = std::max(usage.peak, usage.current);
    CategoryUsage& total = stats_.total[static_cast<int>(space)];
    total.current += bytes;
    total.peak = std::max(total.peak, total.current);
}

void* MemoryLedger::track(void* pointer, size_t bytes, MemoryCategory category, const std::string& name,
                          MemorySpace space) {
    if (pointer == nullptr) throw std::invalid_argument("MemoryLedger::track: '" + name + "' is null");
    if (allocations_.count(reinterpret_cast<uintptr_t>(pointer)) != 0)
        throw std::invalid_argument("MemoryLedger::track: '" + name + "' is already counted");
    if (space == MemorySpace::device) query_device_before();
    add(pointer, bytes, category, space, name);
    allocations_[reinterpret_cast<uintptr_t>(pointer)].tracked = true;
    return pointer;
}

void* MemoryLedger::untrack(const void* pointer) {
    const auto it = allocations_.find(reinterpret_cast<uintptr_t>(pointer));
    if (it == allocations_.end() || !it->second.tracked)
        throw std::invalid_argument("MemoryLedger::untrack: this pointer was not tracked by the ledger");
    const Allocation& a = it->second;
    stats_.by_space[static_cast<int>(a.space)][static_cast<int>(a.category)].current -= a.bytes;
    stats_.total[static_cast<int>(a.space)].current -= a.bytes;
    allocations_.erase(it);
    return const_cast<void*>(pointer);
}

void MemoryLedger::free(const void* pointer) {
    if (pointer == nullptr) return;
    const auto it = allocations_.find(reinterpret_cast<uintptr_t>(pointer));
    if (it == allocations_.end()) {
        throw std::invalid_argument("MemoryLedger::free: this pointer was not allocated by the ledger");
    }
    const Allocation& a = it->second;
    void* p = const_cast<void*>(pointer);
    if (a.tracked) {  // the program's own: it frees it (a ledger destroyed first just stops counting)
        untrack(pointer);
        return;
    }
    switch (a.space) {
        case MemorySpace::device:
            CUDA_CHECK(cudaFree(p));
            break;
        case MemorySpace::host_pinned:
            CUDA_CHECK(cudaFreeHost(p));
            break;
        case MemorySpace::host_pageable:
            ::operator delete (p, std::align_val_t{64});
            break;
    }
    stats_.by_space[static_cast<int>(a.space)][static_cast<int>(a.category)].current -= a.bytes;
    stats_.total[static_cast<int>(a.space)].current -= a.bytes;
    allocations_.erase(it);
}

void MemoryLedger::free_all() {
    while (!allocations_.empty()) free(reinterpret_cast<const void*>(allocations_.begin()->first));
}

const MemoryLedger::Allocation* MemoryLedger::find_containing(const void* pointer, MemorySpace space) const {
    const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
    auto it = allocations_.upper_bound(address);
    if (it == allocations_.begin()) return nullptr;
    --it;
    const Allocation& a = it->second;
    if (a.space != space || address >= it->first + std::max<size_t>(a.bytes, 1)) return nullptr;
    return &a;
}

bool MemoryLedger::is_pinned(const void* host_pointer) const {
    return find_containing(host_pointer, MemorySpace::host_pinned) != nullptr;
}

void MemoryLedger::copy_to_device(void* device_dst, const void* host_src, size_t bytes, cudaStream_t stream) {
    CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
    record_copy(CopyDirection::host_to_device, bytes, is_pinned(host_src) ? HostMemory::pinned : HostMemory::pageable);
}

void MemoryLedger::copy_to_host(void* host_dst, const void* device_src, size_t bytes, cudaStream_t stream) {
    CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream));
    record_copy(CopyDirection::device_to_host, bytes, is_pinned(host_dst) ? HostMemory::pinned : HostMemory::pageable);
}

void MemoryLedger::record_copy(CopyDirection direction, size_t bytes, HostMemory host_side) {
    const bool pinned = host_side == HostMemory::pinned;
    if (direction == CopyDirection::host_to_device) {
        (pinned ? stats_.h2d_pinned_bytes : stats_.h2d_pageable_bytes) += bytes;
        ++stats_.h2d_copies;
    } else {
        (pinned ? stats_.d2h_pinned_bytes : stats_.d2h_pageable_bytes) += bytes;
        ++stats_.d2h_copies;
    }
}

size_t MemoryLedger::current(MemoryCategory category, MemorySpace space) const {
    return stats_.usage(space, category).current;
}
size_t MemoryLedger::peak(MemoryCategory category, MemorySpace space) const {
    return stats_.usage(space, category).peak;
}
size_t MemoryLedger::total_current(MemorySpace space) const {
    return stats_.total[static_cast<int>(space)].current;
}
size_t MemoryLedger::total_peak(MemorySpace space) const {
    return stats_.total[static_cast<int>(space)].peak;
}

std::string MemoryLedger::describe_current(MemorySpace space) const {
    std::string text;
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
        const size_t bytes = stats_.by_space[static_cast<int>(space)][c].current;
        if (bytes == 0) continue;
        text += std::string(text.empty() ? "" : ", ") + memory_category_name(static_cast<MemoryCategory>(c)) + " " +
                format_bytes(bytes);
    }
    return text;
}

MemorySnapshot MemoryLedger::snapshot() const {
    MemorySnapshot snapshot = stats_;
    if (snapshot.device_queried) {
        size_t free_bytes = 0, total_bytes = 0;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
            snapshot.device_free_now = free_bytes;
            snapshot.device_total_now = total_bytes;
        } else {
            cudaGetLastError();
        }
    }
    return snapshot;
}

size_t MemoryPrediction::total() const {
    size_t sum = 0;
    for (size_t b : bytes) sum += b;
    return sum;
}

size_t parameter_count(const std::vector<int>& layer_sizes) {
    size_t count = 0;
    for (size_t l = 0; l + 1 < layer_sizes.size(); ++l) {
        count += size_t(layer_sizes[l]) * layer_sizes[l + 1] + layer_sizes[l + 1];
    }
    return count;
}

MemoryPrediction predict_device_memory(const ModelShape& shape) {
    MemoryPrediction p;
    const auto set = [&p](MemoryCategory c, size_t bytes) { p.bytes[static_cast<int>(c)] = bytes; };
    const size_t params = parameter_count(shape.layer_sizes);
    const size_t batch = static_cast<size_t>(shape.batch);
    const size_t inputs = shape.layer_sizes.empty() ? 0 : size_t(shape.layer_sizes[0]);
    size_t outputs = 0;  // Σ out_l
    for (size_t l = 1; l < shape.layer_sizes.size(); ++l) outputs += size_t(shape.layer_sizes[l]);
    set(MemoryCategory::parameters, params * shape.parameter_bytes);
    set(MemoryCategory::gradients, params * shape.gradient_element_bytes());
    set(MemoryCategory::optimizer_state, params * sizeof(float) * (shape.optimizer == OptimizerKind::adamw ? 2 : 1));
    set(MemoryCategory::master_weights, shape.master_weights ? params * sizeof(float) : 0);
    set(MemoryCategory::activations, batch * (inputs + 2 * outputs) * shape.activation_bytes);
    set(MemoryCategory::input_staging,
        size_t(shape.staging_slots) * ((shape.stage_raw_pixels ? batch * inputs : 0) + batch));
    // row_losses [batch], mean_loss [1], correct [1]
    set(MemoryCategory::workspace, batch * sizeof(float) + sizeof(float) + sizeof(int));
    return p;
}

int largest_batch_that_fits(ModelShape shape, size_t extra_bytes, size_t available_bytes, int max_batch) {
    const auto fits = [&](int batch) {
        shape.batch = batch;
        return predict_device_memory(shape).total() + extra_bytes <= available_bytes;
    };
    if (max_batch < 1 || !fits(1)) return 0;
    int lo = 1, hi = max_batch;  // fits(lo) holds; the prediction grows with the batch, so bisect
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (fits(mid))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

std::string check_device_fits(const ModelShape& shape, size_t extra_bytes, const std::string& extra_name,
                              size_t available_bytes) {
    const MemoryPrediction prediction = predict_device_memory(shape);
    if (prediction.total() + extra_bytes <= available_bytes) return "";
    // What overflows: if the batch-independent part (the model's own state and the extra) fits, the batch's buffers
    // are to blame, else the model is; either way name the biggest category of the part to blame.
    using C = MemoryCategory;
    const std::vector<std::pair<std::string, size_t>> model_part = {
        {memory_category_name(C::parameters), prediction[C::parameters]},
        {memory_category_name(C::gradients), prediction[C::gradients]},
        {memory_category_name(C::optimizer_state), prediction[C::optimizer_state]},
        {memory_category_name(C::master_weights), prediction[C::master_weights]},
        {extra_name, extra_bytes}};
    const std::vector<std::pair<std::string, size_t>> batch_part = {
        {memory_category_name(C::activations), prediction[C::activations]},
        {memory_category_name(C::input_staging), prediction[C::input_staging]},
        {memory_category_name(C::workspace), prediction[C::workspace]}};
    size_t model_bytes = 0;
    for (const auto& [name, bytes] : model_part) model_bytes += bytes;
    const auto& blamed = model_bytes > available_bytes ? model_part : batch_part;
    const std::string overflowing = std::max_element(blamed.begin(), blamed.end(), [](const auto& a, const auto& b) {
                                        return a.second < b.second;
                                    })->first;
    std::string message = "the model needs " + format_bytes(prediction.total() + extra_bytes) + " of device memory (" +
                          format_bytes(prediction.total()) + " for --batch " + std::to_string(shape.batch) +
                          ", activations " + format_bytes(prediction[MemoryCategory::activations]);
    if (extra_bytes > 0) message += ", " + extra_name + " " + format_bytes(extra_bytes);
    message += ") but only " + format_bytes(available_bytes) + " can be used; " + overflowing + " is what overflows. ";
    const int largest = largest_batch_that_fits(shape, extra_bytes, available_bytes, shape.batch);
    if (largest > 0) {
        message += "The largest batch that fits is --batch " + std::to_string(largest) + ".";
    } else {
        message += "No batch fits: what does not depend on the batch (parameters, gradients, optimizer state" +
                   std::string(extra_bytes > 0 ? ", " + extra_name : "") + ") alone needs " +
                   format_bytes(model_bytes) + "; use a smaller --hidden.";
    }
    return message;
}

size_t usable_device_bytes(size_t free_bytes, size_t total_bytes) {
    const size_t margin = total_bytes / 32 + std::min(size_t{64} << 20, total_bytes / 32);
    return free_bytes > margin ? free_bytes - margin : 0;
}
