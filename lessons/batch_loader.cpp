// lessons/batch_loader.cpp — see batch_loader.h.
#include "lessons/batch_loader.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "common/reference_mlp.h"  // batch_count

BatchLoader::BatchLoader(MemoryLedger& ledger, const MnistSplit& train, int batch, int slots, PhaseTimer* timer,
                         int workers, FillBatch fill, const char* fill_name)
    : train_(train),
      batch_(batch),
      slots_(size_t(slots)),
      timer_(timer),
      fill_(std::move(fill)),
      fill_name_(fill_name),
      workers_(workers) {
    if (batch < 1 || slots < 1) throw std::invalid_argument("BatchLoader: need batch >= 1 and slots >= 1");
    if (workers < 1 || workers >= slots)
        throw std::invalid_argument("BatchLoader: need 1 <= workers < slots (got " + std::to_string(workers) +
                                    " workers, " + std::to_string(slots) + " slots)");
    if (!fill_) {
        fill_ = [](const MnistSplit& split, int, const uint32_t* samples, size_t rows, uint8_t* pixels,
                   uint8_t* labels) {
            for (size_t r = 0; r < rows; ++r) {
                std::copy_n(split.image(samples[r]), kMnistPixels, pixels + r * kMnistPixels);
                labels[r] = split.labels[samples[r]];
            }
        };
    }
    for (size_t s = 0; s < slots_.size(); ++s) {
        const std::string n = std::to_string(s);
        slots_[s].pixels = ledger.allocate_host<uint8_t>(MemoryCategory::input_staging, "staging pixels " + n,
                                                         size_t(batch) * kMnistPixels, HostMemory::pinned);
        slots_[s].labels = ledger.allocate_host<uint8_t>(MemoryCategory::input_staging, "staging labels " + n,
                                                         size_t(batch), HostMemory::pinned);
    }
    try {
        for (int w = 0; w < workers; ++w) threads_.emplace_back(&BatchLoader::run, this, w);
    } catch (...) {  // a thread that would not start: stop those that did (a joinable std::thread must be joined)
        stop_workers();
        throw;
    }
}

BatchLoader::~BatchLoader() {
    stop_workers();
}

void BatchLoader::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    for (std::thread& thread : threads_) thread.join();
}

void BatchLoader::start_epoch(std::vector<uint32_t> order, int epoch) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (next_to_take_ != batches_) throw std::logic_error("BatchLoader::start_epoch: the last epoch is not done");
        for (const Slot& slot : slots_) {
            if (!slot.free) throw std::logic_error("BatchLoader::start_epoch: a slot was never released");
        }
        order_ = std::move(order);
        batches_ = batch_count(order_.size(), batch_);
        next_to_fill_ = next_to_take_ = 0;
        epoch_ = epoch;
        ++epoch_count_;
    }
    changed_.notify_all();
}

BatchLoader::Batch BatchLoader::next() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (next_to_take_ >= batches_) throw std::logic_error("BatchLoader::next: past the end of the epoch");
    Slot& slot = slots_[next_to_take_ % slots_.size()];
    const auto called = std::chrono::steady_clock::now();
    if (!slot.filled) {
        changed_.wait(lock, [&] { return slot.filled; });
        // Whose fault was the wait? If the fill had begun before we asked, the loader is simply slower than the
        // loop. If not, its worker was still waiting for the slot's previous copy (batches are claimed in order,
        // and the slot was released long ago): the device held it up, and the fill after that is its consequence.
        const auto now = std::chrono::steady_clock::now();
        const double waited = std::chrono::duration<double>(now - called).count();
        throughput_.next_wait_seconds += waited;
        if (slot.fill_started <= called) throughput_.fill_wait_seconds += waited;
    }
    slot.filled = false;
    slot.taken = true;
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
        if (slot < 0 || size_t(slot) >= slots_.size() || !slots_[size_t(slot)].taken) {
            // A slot released twice, or never handed out, would let a worker refill it under a copy still reading.
            throw std::logic_error("BatchLoader::release(" + std::to_string(slot) +
                                   "): not a slot next() handed out and not yet released");
        }
        slots_[size_t(slot)].taken = false;
        slots_[size_t(slot)].free = true;
        slots_[size_t(slot)].copied = copied;
    }
    changed_.notify_all();
}

BatchLoader::Throughput BatchLoader::throughput() {
    std::lock_guard<std::mutex> lock(mutex_);
    return throughput_;
}

void BatchLoader::run(int worker) {
    const int track = 100 + worker;  // the trace's track of this worker (host clock)
    const std::string track_name = workers_ > 1 ? "loader worker " + std::to_string(worker) + " (host clock)"
                                                : std::string("loader thread (host clock)");
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        // Work exists when a batch of the epoch is left to claim and its slot has been given back.
        changed_.wait(lock, [&] {
            return stopping_ || (next_to_fill_ < batches_ && slots_[next_to_fill_ % slots_.size()].free);
        });
        if (stopping_) return;
        const size_t index = next_to_fill_++;  // claimed: no other worker fills this batch
        Slot& slot = slots_[index % slots_.size()];
        slot.free = false;
        const cudaEvent_t copied = slot.copied;
        const size_t rows = std::min<size_t>(batch_, order_.size() - index * size_t(batch_));
        const uint32_t* samples = order_.data() + index * size_t(batch_);  // order_ is not replaced mid-epoch
        const int epoch = epoch_, epoch_count = epoch_count_;
        lock.unlock();  // fill without the lock: the loop and the other workers keep running
        // The completion rule: the GPU copy that last read this slot must be over before we overwrite it.
        const auto waited = std::chrono::steady_clock::now();
        if (copied != nullptr) CUDA_CHECK(cudaEventSynchronize(copied));
        const auto started = std::chrono::steady_clock::now();
        {
            std::lock_guard<std::mutex> stamp(mutex_);
            slot.fill_started = started;
        }
        fill_(train_, epoch, samples, rows, slot.pixels, slot.labels);
        const auto done = std::chrono::steady_clock::now();
        if (timer_) {
            if (copied != nullptr)
                timer_->trace_host_work(track, track_name.c_str(), "wait for copied[s]", epoch_count, int(index),
                                        waited, started);
            timer_->trace_host_work(track, track_name.c_str(), fill_name_, epoch_count, int(index), started, done,
                                    rows * (kMnistPixels + 1));
        }
        lock.lock();
        slot.filled = true;
        throughput_.images += rows;
        throughput_.busy_seconds += std::chrono::duration<double>(done - started).count();
        changed_.notify_all();
    }
}
