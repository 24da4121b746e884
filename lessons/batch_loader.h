// lessons/batch_loader.h — a loader thread that gathers the next batches into pinned staging buffers while the
// GPU trains on the current one (lesson 03 on).
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
#pragma once

#include <condition_variable>
#include <cstdint>
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

    // Allocates `slots` pinned buffers of `batch` images through the ledger (input staging) and starts the thread.
    // With a `timer` that traces (--trace), each gather is a slice on the loader thread's own track.
    BatchLoader(MemoryLedger& ledger, const MnistSplit& train, int batch, int slots, PhaseTimer* timer = nullptr);
    ~BatchLoader();  // stops the thread and joins it (the ledger frees the buffers)
    BatchLoader(const BatchLoader&) = delete;
    BatchLoader& operator=(const BatchLoader&) = delete;

    // Begins gathering batches 0, 1, ... of `order` (every batch of the previous epoch must have been released).
    void start_epoch(std::vector<uint32_t> order);
    // The next batch of the epoch, in order; blocks until the loader thread has gathered it.
    Batch next();
    // The loop is done handing slot `slot` to the GPU: the loader may refill it once `copied` has completed.
    void release(int slot, cudaEvent_t copied);

  private:
    struct Slot {
        uint8_t* pixels = nullptr;
        uint8_t* labels = nullptr;
        bool filled = false;           // gathered, not yet taken by next()
        bool free = true;              // released by the loop (or never used)
        cudaEvent_t copied = nullptr;  // wait for it before refilling (null: nothing to wait for)
    };
    void run();  // the loader thread

    const MnistSplit& train_;
    const int batch_;
    std::vector<Slot> slots_;
    std::vector<uint32_t> order_;
    size_t batches_ = 0, next_to_fill_ = 0, next_to_take_ = 0;
    int epoch_ = 0;  // epochs started (for the trace)
    PhaseTimer* timer_;
    bool stopping_ = false;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::thread thread_;
};
