// lessons/batch_pipeline.cu — lesson 03's data path as a class (see batch_pipeline.h; lesson 03's main.cu is the
// same code written out, with the reasons).
#include "lessons/batch_pipeline.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "common/reference_mlp.h"             // epoch_order: the batch order the reference trainer uses
#include "kernels/softmax_cross_entropy.cuh"  // accumulate_loss

namespace {

// Teardown runs in a destructor, which must not throw: a failure is reported, not raised.
void check_at_teardown(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        std::fprintf(stderr, "BatchPipeline teardown: %s: %s\n", what, cudaGetErrorString(status));
}

}  // namespace

BatchPipeline::BatchPipeline(Lesson& lesson, MemoryLedger& ledger, PhaseTimer& timer, uint8_t* device_pixels,
                             uint8_t* device_labels, const Options& options)
    : lesson_(lesson),
      ledger_(ledger),
      timer_(timer),
      train_(lesson.data.train),
      batch_(options.batch > 0 ? options.batch : lesson.options.batch),
      resident_(options.resident),
      samples_on_device_(options.samples_on_device),
      device_pixels_(device_pixels),
      device_labels_(device_labels) {
    if (options.workers < 1) throw std::invalid_argument("BatchPipeline: workers must be >= 1");
    if (resident_ && (options.workers != 1 || options.fill))
        throw std::invalid_argument("BatchPipeline: a resident training set has no loader to give workers or a fill");
    // Kernels go to `compute`, copies to `copy`: work on different streams may run at the same time.
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    // copied[h]: the copy out of host slot h is done. consumed[d]: the kernels that read device slot d are done.
    copied_.resize(size_t(resident_ ? kSlots : std::max(kSlots, options.workers + 1)));
    for (cudaEvent_t& event : copied_) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    for (int s = 0; s < kSlots; ++s) CUDA_CHECK(cudaEventCreateWithFlags(&consumed_[s], cudaEventDisableTiming));
    try {
        if (resident_) {  // lesson 03's --resident: uploaded once, and the epoch's order is its buffer
            resident_set_.emplace(ledger_, train_, compute_);
            order_on_device_ = resident_set_->order;
        } else {
            if (samples_on_device_) {
                order_on_device_ =
                    ledger_.allocate<uint32_t>(MemoryCategory::input_staging, "epoch order", train_.count);
            }
            // (A batch larger than the training set is one batch of all the images: the host slots need no more.)
            loader_.emplace(ledger_, train_, int(std::min<size_t>(size_t(batch_), train_.count)), int(copied_.size()),
                            &timer_, options.workers, options.fill, options.fill_name);
        }
    } catch (...) {  // the destructor does not run for a constructor that throws: release what exists
        release_streams_and_events();
        throw;
    }
}

BatchPipeline::~BatchPipeline() {
    // The loader thread first: it may be inside cudaEventSynchronize(copied[s]), on an event destroyed below.
    loader_.reset();
    release_streams_and_events();
}

void BatchPipeline::release_streams_and_events() {
    check_at_teardown(cudaStreamSynchronize(copy_), "cudaStreamSynchronize(copy)");
    check_at_teardown(cudaStreamSynchronize(compute_), "cudaStreamSynchronize(compute)");
    for (cudaEvent_t event : copied_) check_at_teardown(cudaEventDestroy(event), "cudaEventDestroy(copied)");
    for (int s = 0; s < kSlots; ++s) check_at_teardown(cudaEventDestroy(consumed_[s]), "cudaEventDestroy(consumed)");
    check_at_teardown(cudaStreamDestroy(compute_), "cudaStreamDestroy(compute)");
    check_at_teardown(cudaStreamDestroy(copy_), "cudaStreamDestroy(copy)");
}

int BatchPipeline::rows_of(size_t b) const {
    return int(std::min<size_t>(size_t(batch_), train_.count - b * size_t(batch_)));
}

void BatchPipeline::start_epoch(int epoch, size_t batches) {
    const size_t all = batch_count(train_.count, batch_);
    batches_ = batches == 0 ? all : std::min(batches, all);
    image_bytes_ = 0;
    std::vector<uint32_t> order;
    {
        auto t = timer_.scope(Phase::host);
        order = epoch_order(lesson_.options.seed, epoch, train_.count);
    }
    // An epoch cut short (lesson 07's last) hands the loader only the images it will read: it gathers nothing the
    // loop would not take, so the next epoch starts with every slot released.
    order.resize(std::min(order.size(), batches_ * size_t(batch_)));
    if (resident_ || samples_on_device_) {  // resident: 4 bytes per image per epoch instead of 785
        // (On the compute stream, which is the one that reads it; the kernels of the last epoch that read the old
        // order are queued before it there.)
        auto t = timer_.scope(Phase::h2d, compute_, order.size() * sizeof(uint32_t));
        ledger_.copy_to_device(order_on_device_, order.data(), order.size() * sizeof(uint32_t), compute_);
        if (resident_) return;
    }
    loader_->start_epoch(std::move(order), epoch);
    prefetch(next_from_loader());  // the host waits for the loader's first batch
}

BatchLoader::Batch BatchPipeline::next_from_loader() {
    auto t = timer_.scope(Phase::host);
    return loader_->next();
}

BatchLoader::Throughput BatchPipeline::loader_throughput() {
    return loader_ ? loader_->throughput() : BatchLoader::Throughput{};
}

void BatchPipeline::prefetch(const BatchLoader::Batch& batch) {
    const int s = int(batch.index % kSlots), h = batch.slot;  // device slot, host slot
    if (!read_done_[s]) {  // rule 1 would wait on a stale consumed[s]: a silent race, so refused
        throw std::logic_error("BatchPipeline: a batch copied into slot " + std::to_string(s) +
                               " before done_reading() marked the slot's previous batch read");
    }
    read_done_[s] = false;
    host_slot_of_[s] = h;  // wait_for_batch waits for this copy's event
    uint8_t *pixels = slot_pixels(s), *labels = slot_labels(s);
    // Rule 1: the kernels that read this device slot last time must be done before it is overwritten.
    CUDA_CHECK(cudaStreamWaitEvent(copy_, consumed_[s]));
    const size_t pixel_bytes = size_t(batch.rows) * kMnistPixels;
    {
        auto t = timer_.scope(Phase::h2d, copy_, pixel_bytes + batch.rows);
        ledger_.copy_to_device(pixels, batch.pixels, pixel_bytes, copy_);  // pinned: returns at once
        ledger_.copy_to_device(labels, batch.labels, batch.rows, copy_);
    }
    image_bytes_ += pixel_bytes;
    CUDA_CHECK(cudaEventRecord(copied_[h], copy_));
    // Rule 2: the loader refills host slot h only after copied[h] (batch_loader.h) — the copy reads it later.
    loader_->release(h, copied_[h]);
}

BatchPipeline::DeviceBatch BatchPipeline::wait_for_batch(size_t b) {
    if (b >= batches_) {
        throw std::logic_error("BatchPipeline::wait_for_batch(" + std::to_string(b) + "): the epoch has " +
                               std::to_string(batches_) + " batches");
    }
    DeviceBatch batch;
    batch.rows = rows_of(b);
    batch.slot = resident_ ? 0 : int(b % kSlots);
    batch.pixels = slot_pixels(batch.slot);
    batch.labels = slot_labels(batch.slot);
    if (order_on_device_ != nullptr) batch.samples = order_on_device_ + b * size_t(batch_);
    if (resident_) {  // the batch is gathered on the device, from the resident training set, in the epoch's order
        auto t = timer_.scope(Phase::normalize, compute_);
        resident_set_->gather(b * size_t(batch_), batch.rows, slot_pixels(batch.slot), slot_labels(batch.slot),
                              compute_);
        return batch;
    }
    // Rule 3: the kernels read slot s only after its copy (the stall is timed).
    timer_.begin(Phase::input_wait, compute_);
    CUDA_CHECK(cudaStreamWaitEvent(compute_, copied_[size_t(host_slot_of_[batch.slot])]));  // batch b's copy
    timer_.end(Phase::input_wait, compute_);
    return batch;
}

void BatchPipeline::done_reading(const DeviceBatch& batch) {
    CUDA_CHECK(cudaEventRecord(consumed_[batch.slot], compute_));
    read_done_[batch.slot] = true;
}

void BatchPipeline::prefetch_next(size_t b) {
    if (resident_ || b + 1 >= batches_) return;
    prefetch(next_from_loader());
}

DeviceLosses::DeviceLosses(MemoryLedger& ledger, long keep_steps) : ledger_(ledger), keep_steps_(keep_steps) {
    sum_ = ledger_.allocate<double>(MemoryCategory::workspace, "epoch loss sum", 1);
    sum_host_ =
        ledger_.allocate_host<double>(MemoryCategory::workspace, "epoch loss sum (host)", 1, HostMemory::pinned);
    if (keep_steps_ > 0) {
        // Every step's loss, copied on the device (no host wait): the tests compare them with the reference.
        steps_ = ledger_.allocate<float>(MemoryCategory::workspace, "step losses", size_t(keep_steps_));
    }
}

void DeviceLosses::start_epoch(cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(sum_, 0, sizeof(double), stream));
}

void DeviceLosses::add(const float* mean_loss, int rows, long step, cudaStream_t stream) {
    accumulate_loss(mean_loss, rows, sum_, stream);
    if (steps_ != nullptr && step < keep_steps_) {
        CUDA_CHECK(cudaMemcpyAsync(steps_ + step, mean_loss, sizeof(float), cudaMemcpyDeviceToDevice, stream));
    }
}

void DeviceLosses::copy_epoch_sum(PhaseTimer& timer, cudaStream_t stream) {
    auto t = timer.scope(Phase::d2h, stream, sizeof(double));
    ledger_.copy_to_host(sum_host_, sum_, sizeof(double), stream);
}

std::vector<float> DeviceLosses::step_losses(cudaStream_t stream) const {
    std::vector<float> losses(static_cast<size_t>(keep_steps_));
    if (keep_steps_ == 0) return losses;
    ledger_.copy_to_host(losses.data(), steps_, losses.size() * sizeof(float), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // pageable destination
    return losses;
}
