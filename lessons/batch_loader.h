// lessons/batch_loader.h — a loader thread that gathers the next batches into pinned staging buffers while the
// GPU trains on the current one (lesson 03 on); with `workers` > 1, several threads that fill batches in parallel
// and hand them over in order (lesson 08).
//
// The host's part of a batch (pick 128 shuffled images, copy their pixels and labels next to each other) is work
// the GPU would otherwise wait for. A second thread does it ahead of time into `slots` page-locked buffers, so the
// training loop only hands each filled buffer to cudaMemcpyAsync.
//
// Completion rules — who waits on what before a staging buffer is read or refilled:
//   * The training loop reads slot s (with cudaMemcpyAsync) only after next() returned it: the loader thread has
//     finished writing it (the hand-over is under a mutex, so the writes are visible).
//   * The loader thread refills slot s only after the loop called release(s, copied) AND cudaEventSynchronize(copied)
//     returned: the copy that reads the slot has completed on the GPU. An async copy from pinned memory reads the
//     buffer whenever the copy engine gets to it, long after cudaMemcpyAsync returned; refilling the slot before
//     that would send the next batch's bytes in this batch's place.
//   * The event passed to release(s, ...) is recorded again only after the loader has waited on it: the loop gets
//     slot s back from next() only after the loader refilled it, which is after its wait.
// Workers (lesson 08): each worker claims the next batch whose slot is free and fills it without the lock; next()
// still returns batch 0, 1, 2, ... in order, whichever worker finishes first. A batch's bytes depend only on
// (epoch, the batch's samples): the same for any number of workers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/launch.h"
#include "common/memory_ledger.h"
#include "common/phase_timer.h"
#include "common/mnist.h"

class BatchLoader {
  public:
    struct Batch {
        int slot = 0;                     // which staging buffer (batch index % slots)
        size_t index = 0;                 // batch number within the epoch
        int rows = 0;                     // the last batch may be smaller
        const uint8_t* pixels = nullptr;  // pinned, [rows × 784]
        const uint8_t* labels = nullptr;  // pinned, [rows]
    };

    // What a worker does to fill a slot: `rows` samples (training-set indices) of epoch `epoch` into pixels
    // [rows × 784] and labels [rows]. The default copies them (gather_batch); lesson 08's also augments each image.
    using FillBatch = std::function<void(const MnistSplit& train, int epoch, const uint32_t* samples, size_t rows,
                                         uint8_t* pixels, uint8_t* labels)>;

    // Allocates `slots` pinned buffers of `batch` images through the ledger (input staging) and starts `workers`
    // threads (slots > workers, so that one filled batch can wait for its copy while each worker fills another).
    // With a `timer` that traces (--trace), each fill is a slice named `fill_name` on its worker's own track.
    BatchLoader(MemoryLedger& ledger, const MnistSplit& train, int batch, int slots, PhaseTimer* timer = nullptr,
                int workers = 1, FillBatch fill = nullptr, const char* fill_name = "gather");
    ~BatchLoader();  // stops the threads and joins them (the ledger frees the buffers)
    BatchLoader(const BatchLoader&) = delete;
    BatchLoader& operator=(const BatchLoader&) = delete;

    // Begins gathering batches 0, 1, ... of `order` (every batch of the previous epoch must have been released);
    // `epoch` is handed to the fill function.
    void start_epoch(std::vector<uint32_t> order, int epoch = 0);
    // The next batch of the epoch, in order; blocks until the loader thread has gathered it.
    Batch next();
    // The loop is done handing slot `slot` to the GPU: the loader may refill it once `copied` has completed.
    // std::logic_error for a slot next() did not hand out, or one released already.
    void release(int slot, cudaEvent_t copied);

    // Since construction: images filled, and the seconds the workers spent filling (summed over workers; their
    // waits for a free slot or a copy not counted). images / (busy_seconds / workers) is what the workers can
    // deliver per second when they never wait. next_wait_seconds: the caller's time in next(); of it,
    // fill_wait_seconds where the batch's fill had already begun when next() was called — the loader's own
    // slowness. The rest is back-pressure: the batch's worker was still waiting for the slot's previous copy, i.e.
    // for the device (and the fill after it is its consequence).
    struct Throughput {
        uint64_t images = 0;
        double busy_seconds = 0;
        double next_wait_seconds = 0;
        double fill_wait_seconds = 0;
    };
    Throughput throughput();

  private:
    struct Slot {
        uint8_t* pixels = nullptr;
        uint8_t* labels = nullptr;
        bool filled = false;           // gathered, not yet taken by next()
        bool free = true;              // released by the loop (or never used)
        bool taken = false;            // handed out by next(), not yet released
        cudaEvent_t copied = nullptr;  // wait for it before refilling (null: nothing to wait for)
        std::chrono::steady_clock::time_point fill_started{};  // this batch's fill began (its copy wait over)
    };
    void run(int worker);  // a worker thread
    void stop_workers();   // the destructor's (and a failed constructor's): stop and join the threads

    const MnistSplit& train_;
    const int batch_;
    std::vector<Slot> slots_;
    std::vector<uint32_t> order_;
    size_t batches_ = 0, next_to_fill_ = 0, next_to_take_ = 0;  // next_to_fill_: the next batch a worker claims
    int epoch_ = 0;                                             // start_epoch's `epoch` (for the fill function)
    int epoch_count_ = 0;                                       // epochs started (for the trace)
    PhaseTimer* timer_;
    FillBatch fill_;
    const char* fill_name_;
    const int workers_;
    Throughput throughput_;
    bool stopping_ = false;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<std::thread> threads_;
};
