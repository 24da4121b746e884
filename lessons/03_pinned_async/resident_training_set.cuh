// lessons/03_pinned_async/resident_training_set.cuh — lesson 03's --resident (and lesson 04's, through
// BatchPipeline): the fastest copy is no copy.
//
// The whole uint8 training set and its labels go to the device once (47 MB for MNIST); per epoch only the shuffled
// order crosses PCIe (4 bytes per image instead of 785), and each batch is gathered on the device by
// gather_rows_kernel (kernels/gather_rows.cuh), bitwise the batch the host loader would have copied.
#pragma once

#include <cstdint>
#include <vector>

#include "common/memory_ledger.h"
#include "common/mnist.h"
#include "kernels/gather_rows.cuh"

struct ResidentTrainingSet {
    uint8_t* pixels = nullptr;  // device: [count × 784]
    uint8_t* labels = nullptr;  // device: [count]
    uint32_t* order = nullptr;  // device: the epoch's order
    size_t count = 0;

    // The device bytes it takes: the training set, its labels, an epoch's order.
    static size_t bytes(const MnistSplit& train) { return train.count * (kMnistPixels + 1 + sizeof(uint32_t)); }

    // Allocates and uploads the set on `stream`, and waits: the sources are pageable vectors.
    ResidentTrainingSet(MemoryLedger& ledger, const MnistSplit& train, cudaStream_t stream) : count(train.count) {
        pixels = ledger.allocate<uint8_t>(MemoryCategory::input_staging, "training set pixels", train.images.size());
        labels = ledger.allocate<uint8_t>(MemoryCategory::input_staging, "training set labels", count);
        order = ledger.allocate<uint32_t>(MemoryCategory::input_staging, "epoch order", count);
        CUDA_CHECK(cudaMemcpyAsync(pixels, train.images.data(), train.images.size(), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaMemcpyAsync(labels, train.labels.data(), count, cudaMemcpyHostToDevice, stream));
        ledger.record_copy(CopyDirection::host_to_device, train.images.size(), HostMemory::pageable);
        ledger.record_copy(CopyDirection::host_to_device, count, HostMemory::pageable);
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    // The epoch's order: all that crosses PCIe per epoch. Pageable source: CUDA stages it before returning.
    void upload_order(MemoryLedger& ledger, const std::vector<uint32_t>& epoch_order, cudaStream_t stream) {
        const size_t bytes = epoch_order.size() * sizeof(uint32_t);
        CUDA_CHECK(cudaMemcpyAsync(order, epoch_order.data(), bytes, cudaMemcpyHostToDevice, stream));
        ledger.record_copy(CopyDirection::host_to_device, bytes, HostMemory::pageable);
    }

    // Rows order[first .. first + rows) into a batch buffer: one block of 256 threads per row.
    void gather(size_t first, int rows, uint8_t* batch_pixels, uint8_t* batch_labels, cudaStream_t stream) const {
        gather_rows_kernel<<<rows, 256, 0, stream>>>(pixels, labels, order, first, kMnistPixels, batch_pixels,
                                                     batch_labels);
        CUDA_CHECK(cudaGetLastError());
    }
};
