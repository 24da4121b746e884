// common/device_buffer.h — a typed device allocation that frees itself, for tests, benchmarks and the playground.
// (Lessons allocate through the MemoryLedger instead, so that every byte is accounted for by category.)
//
// Every new buffer is poisoned with 0xFF bytes (NaN as float or half): an element a kernel forgot to write then
// fails a comparison instead of passing as a leftover zero.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/launch.h"

template <typename T>
class DeviceBuffer {
  public:
    explicit DeviceBuffer(size_t count) : count_(count) {
        CUDA_CHECK(cudaMalloc(&data_, bytes() == 0 ? 1 : bytes()));
        poison();
    }
    explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
    ~DeviceBuffer() { CUDA_CHECK(cudaFree(data_)); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return data_; }
    size_t size() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }
    void poison() { CUDA_CHECK(cudaMemset(data_, 0xFF, bytes())); }
    void upload(const std::vector<T>& host) {
        if (host.size() != count_) {
            std::fprintf(stderr, "DeviceBuffer::upload: %zu elements for a buffer of %zu\n", host.size(), count_);
            std::exit(EXIT_FAILURE);
        }
        CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
    }
    // Waits for all work on the device, then copies the whole buffer back.
    std::vector<T> download() const {
        std::vector<T> host(count_);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
        return host;
    }

  private:
    T* data_ = nullptr;
    size_t count_ = 0;
};
