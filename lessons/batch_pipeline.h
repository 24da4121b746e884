// lessons/batch_pipeline.h — lesson 03's data path as one class, for the lessons after it (04 on), so that their
// main.cu shows their own idea: a loader thread gathers batches into pinned slots, copies run on their own stream,
// the next batch's copy is queued while this one trains, and events order it all.
//
// Lesson 03 writes every line of this out in its main.cu, because the pipeline is its idea: read it there first.
// The three completion rules are the same and carry the same numbers:
//   rule 1: a device slot is overwritten only after the kernels that read it last time are done
//           (the copy stream waits for consumed[s], recorded by done_reading);
//   rule 2: the loader refills a pinned host slot only after the copy that reads it has completed
//           (BatchLoader::release with copied[h], the event of that host slot's copy);
//   rule 3: the kernels read a device slot only after its copy (the compute stream waits for copied[h], h the
//           batch's host slot; the stall is timed as `input wait`).
//
//     BatchPipeline data(lesson, net.staged_pixels, net.staged_labels);
//     for each epoch:  data.start_epoch(epoch);                         // the epoch's order; batch 0's copy queued
//       for b < data.batches(): const DeviceBatch batch = data.wait_for_batch(b);   // rule 3
//                      ... kernels on data.compute() read batch.pixels, batch.labels ...
//                      data.done_reading(batch);                          // after the last kernel that reads it
//                      ... backward, optimizer ...
//                      data.prefetch_next(b);                             // batch b+1's copy queued now
//
// --resident (lesson 04; lesson 03 writes it out): the uint8 training set lives on the device; no loader and no per-batch copy:
// wait_for_batch gathers the batch there (ResidentTrainingSet::gather, timed with `normalize`) from the epoch's order, which is
// all that crosses PCIe (4 bytes per image).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "lessons/03_pinned_async/resident_training_set.cuh"  // ResidentTrainingSet::bytes
#include "lessons/batch_loader.h"
#include "lessons/lesson.h"

// What a lesson changes of lesson 03's path; the defaults are lesson 03's (designated initializers name what
// is changed: `{.resident = true}`, `{.batch = 512}`, `{.workers = 4, .fill = augment}`).
struct DataPathOptions {
    bool resident = false;  // lesson 03's --resident: the training set on the device, batches gathered there
    int batch = 0;          // rows per batch (0: the lesson's --batch)
    int workers = 1;        // loader threads (lesson 08); host staging slots: max(2, workers + 1)
    BatchLoader::FillBatch fill = nullptr;  // what a worker does to a batch (null: gather the samples' bytes)
    const char* fill_name = "gather";       // the fill's name on the --trace timeline
    bool samples_on_device = false;         // upload each epoch's order (4 bytes per image): DeviceBatch::samples
};

class BatchPipeline {
  public:
    // Device slots: one is copied into while the kernels read the other. (Host slots: kSlots, or workers + 1.)
    static constexpr int kSlots = 2;

    // The staging slots the model's buffers need (ModelShape::staging_slots): one when resident.
    static int staging_slots(bool resident) { return resident ? 1 : kSlots; }
    // The device bytes --resident adds (the training set, its labels, the epoch's order).
    static size_t resident_bytes(const MnistSplit& train) { return ResidentTrainingSet::bytes(train); }

    using Options = DataPathOptions;

    // `device_pixels`/`device_labels`: the model's staging slots (staging_slots(resident) of `batch` rows each);
    // buffers through `ledger`, phases into `timer` (the lesson's, or a comparison run's own). Creates the two streams
    // and the events; starts the loader thread(s), or uploads the training set when resident.
    BatchPipeline(Lesson& lesson, MemoryLedger& ledger, PhaseTimer& timer, uint8_t* device_pixels,
                  uint8_t* device_labels, const Options& options = {});
    ~BatchPipeline();  // stops the loader (it may wait on an event), waits for both streams, destroys them
    BatchPipeline(const BatchPipeline&) = delete;
    BatchPipeline& operator=(const BatchPipeline&) = delete;

    cudaStream_t compute() const { return compute_; }  // kernels
    cudaStream_t copy() const { return copy_; }        // host → device copies

    // The epoch's shuffled order (epoch_order: the reference trainer's), handed to the loader, and batch 0's copy
    // queued (resident: the order uploaded). `batches`: how many batches of the epoch will be read (0: all of them;
    // fewer: only those are gathered).
    void start_epoch(int epoch, size_t batches = 0);
    size_t batches() const { return batches_; }  // this epoch's, after start_epoch

    struct DeviceBatch {
        const uint8_t* pixels = nullptr;    // device, [rows × 784] uint8
        const uint8_t* labels = nullptr;    // device, [rows]
        const uint32_t* samples = nullptr;  // device, [rows]: training-set indices (Options::samples_on_device)
        int rows = 0;                       // the last batch of an epoch may be smaller
        int slot = 0;                       // device slot
    };
    // Rule 3: the compute stream waits for batch b's copy (timed as input wait); resident: gathers batch b.
    // b < batches(), else std::logic_error.
    DeviceBatch wait_for_batch(size_t b);
    // Records that the kernels queued so far on compute() are the last readers of batch's slot (rule 1's event).
    // Required before the slot is copied into again: prefetch_next throws std::logic_error otherwise (a missing
    // record would leave rule 1 waiting on a stale event: a silent race).
    void done_reading(const DeviceBatch& batch);
    // Queues batch b+1's copy, if the epoch has one: the host waits for the loader (timed as host) if it is behind.
    void prefetch_next(size_t b);

    bool resident() const { return resident_; }

    // The loader's figures (BatchLoader::throughput: images, busy time, the training loop's waits for it; zero
    // when resident).
    BatchLoader::Throughput loader_throughput();
    uint64_t image_bytes_copied() const { return image_bytes_; }  // this epoch's so far

  private:
    void prefetch(const BatchLoader::Batch& batch);  // rules 1 and 2
    BatchLoader::Batch next_from_loader();           // the host waits for the loader (timed as host)
    void release_streams_and_events();               // the destructor's, and a failed constructor's
    int rows_of(size_t b) const;
    uint8_t* slot_pixels(int s) const { return device_pixels_ + size_t(s) * batch_ * kMnistPixels; }
    uint8_t* slot_labels(int s) const { return device_labels_ + size_t(s) * batch_; }

    Lesson& lesson_;
    MemoryLedger& ledger_;
    PhaseTimer& timer_;
    const MnistSplit& train_;
    const int batch_;
    const bool resident_;
    const bool samples_on_device_;
    uint8_t* const device_pixels_;
    uint8_t* const device_labels_;
    cudaStream_t compute_ = nullptr, copy_ = nullptr;
    // copied_[h]: the copy out of host slot h is done (rules 2 and 3); consumed_[d]: the kernels reading device
    // slot d are done (rule 1). One host slot per batch in flight: more than kSlots with several workers.
    std::vector<cudaEvent_t> copied_;
    cudaEvent_t consumed_[kSlots] = {};
    std::optional<BatchLoader> loader_;  // declared after the events it waits on: destroyed first (and explicitly)
    std::optional<ResidentTrainingSet> resident_set_;  // --resident: the training set on the device (lesson 03's)
    uint32_t* order_on_device_ = nullptr;              // --resident, samples_on_device: the epoch's order
    size_t batches_ = 0;                               // batches read this epoch
    uint64_t image_bytes_ = 0;
    bool read_done_[kSlots] = {true, true};  // done_reading() since the slot's last copy (checked by prefetch)
    int host_slot_of_[kSlots] = {0, 0};      // the host slot device slot d was last copied from (its copied_ event)
};

// The loss, kept on the device: summed over each epoch (read once per epoch) and, with `keep_steps`, every step's
// mean loss (read once at the end). The host never waits for a step's loss.
class DeviceLosses {
  public:
    // Allocates the epoch sum (device and pinned host) and, if keep_steps > 0, keep_steps floats for step losses.
    DeviceLosses(MemoryLedger& ledger, long keep_steps = 0);
    void start_epoch(cudaStream_t stream);  // the sum to 0
    // After the loss kernel: adds mean_loss · rows to the epoch's sum; records it as step `step`'s loss.
    void add(const float* mean_loss, int rows, long step, cudaStream_t stream);
    // Queues the copy of the epoch's sum to the host (timed as d2h); read it with epoch_sum() once the stream is
    // synchronized (PhaseTimer::end_epoch does it).
    void copy_epoch_sum(PhaseTimer& timer, cudaStream_t stream);
    double epoch_sum() const { return *sum_host_; }
    std::vector<float> step_losses(cudaStream_t stream) const;  // every kept step's loss (synchronizes)

  private:
    MemoryLedger& ledger_;
    double* sum_ = nullptr;
    double* sum_host_ = nullptr;
    float* steps_ = nullptr;
    long keep_steps_ = 0;
};
