// lessons/batch_loader.cpp — see batch_loader.h.
#include "lessons/batch_loader.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "common/reference_mlp.h"  // gather_batch, batch_count

BatchLoader::BatchLoader(MemoryLedger& ledger, const MnistSplit& train, int batch, int slots, PhaseTimer* timer)
    : train_(train), batch_(batch), slots_(size_t(slots)), timer_(timer) {
    if (batch < 1 || slots < 1) throw std::invalid_argument("BatchLoader: need batch >= 1 and slots >= 1");
    for (size_t s = 0; s < slots_.size(); ++s) {
        const std::string n = std::to_string(s);
        slots_[s].pixels = ledger.allocate_host<uint8_t>(MemoryCategory::input_staging, "staging pixels " + n,
                                                         size_t(batch) * kMnistPixels, HostMemory::pinned);
        slots_[s].labels = ledger.allocate_host<uint8_t>(MemoryCategory::input_staging, "staging labels " + n,
                                                         size_t(batch), HostMemory::pinned);
    }
    thread_ = std::thread(&BatchLoader::run, this);
}

BatchLoader::~BatchLoader() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
}

void BatchLoader::start_epoch(std::vector<uint32_t> order) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (next_to_take_ != batches_) throw std::logic_error("BatchLoader::start_epoch: the last epoch is not done");
        for (const Slot& slot : slots_) {
            if (!slot.free) throw std::logic_error("BatchLoader::start_epoch: a slot was never released");
        }
        order_ = std::move(order);
        batches_ = batch_count(order_.size(), batch_);
        next_to_fill_ = next_to_take_ = 0;
        ++epoch_;
    }
    changed_.notify_all();
}

BatchLoader::Batch BatchLoader::next() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (next_to_take_ >= batches_) throw std::logic_error("BatchLoader::next: past the end of the epoch");
    Slot& slot = slots_[next_to_take_ % slots_.size()];
    changed_.wait(lock, [&] { return slot.filled; });
    slot.filled = false;
    Batch batch;
    batch.slot = int(next_to_take_ % slots_.size());
    batch.index = next_to_take_;
    batch.rows = int(std::min<size_t>(batch_, order_.size() - next_to_take_ * size_t(batch_)));
    batch.pixels = slot.pixels;
    batch.labels = slot.labels;
    ++next_to_take_;
    return batch;
}

void BatchLoader::release(int slot, cudaEvent_t copied) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        slots_.at(size_t(slot)).free = true;
        slots_[size_t(slot)].copied = copied;
    }
    changed_.notify_all();
}

void BatchLoader::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        // Work exists when a batch of the epoch is left to gather and its slot has been given back.
        changed_.wait(lock, [&] {
            return stopping_ || (next_to_fill_ < batches_ && slots_[next_to_fill_ % slots_.size()].free);
        });
        if (stopping_) return;
        const size_t index = next_to_fill_;
        Slot& slot = slots_[index % slots_.size()];
        slot.free = false;
        const cudaEvent_t copied = slot.copied;
        const size_t rows = std::min<size_t>(batch_, order_.size() - index * size_t(batch_));
        const int epoch = epoch_;
        lock.unlock();  // gather without the lock: the loop keeps running
        // The completion rule: the GPU copy that last read this slot must be over before we overwrite it.
        const auto waited = std::chrono::steady_clock::now();
        if (copied != nullptr) CUDA_CHECK(cudaEventSynchronize(copied));
        const auto started = std::chrono::steady_clock::now();
        gather_batch(train_, order_, index * size_t(batch_), rows, slot.pixels, slot.labels);
        if (timer_) {
            const auto done = std::chrono::steady_clock::now();
            if (copied != nullptr)
                timer_->trace_host_work(100, "loader thread (host clock)", "wait for copied[s]", epoch, int(index),
                                        waited, started);
            timer_->trace_host_work(100, "loader thread (host clock)", "gather", epoch, int(index), started, done,
                                    rows * (kMnistPixels + 1));
        }
        lock.lock();
        slot.filled = true;
        ++next_to_fill_;
        changed_.notify_all();
    }
}
