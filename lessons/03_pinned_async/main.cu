// lessons/03_pinned_async/main.cu — Lesson 03: the data loading bottleneck. Pinned staging, a loader thread, async
// copies on a second stream, and the next batch on its way while this one trains.
//
// What changes from lesson 02 (the model and its kernels do not change, so neither do the weights):
//   * page-locked (pinned) staging buffers: the GPU's copy engine reads them directly, so cudaMemcpyAsync returns at
//     once and the copy runs while kernels do (from pageable memory the driver must copy through a pinned buffer of
//     its own first, and the host waits);
//   * a loader thread (lessons/batch_loader.h) gathers batch i+1 while batch i trains;
//   * two streams: copies on `copy`, kernels on `compute`; events order them (the completion rules are stated where
//     each copy is queued);
//   * the loss is summed on the device and read once per epoch, not after every step.
// --resident keeps the whole uint8 training set on the device (47 MB for MNIST) and gathers each batch there:
// the fastest copy is no copy.
#include <cstdio>
#include <optional>
#include <vector>

#include "lessons/batch_loader.h"
#include "lessons/batch_pipeline.h"  // report_copies (the rest of it is this file, written out)
#include "lessons/lesson.h"

#include "common/reference_mlp.h"  // epoch_order: the batch order the reference trainer uses
#include "kernels/count_correct.cuh"
#include "kernels/gather_rows.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

constexpr int kSlots = 2;  // staging buffers: one is copied (and read by the kernels) while the loader fills the other

int train(int argc, char** argv) {
    bool resident = false;
    Lesson lesson(argc, argv, "lesson03_pinned_async",
                  "pinned staging, a loader thread, async copies on a second stream, the next batch prefetched",
                  [&](Cli& cli) {
                      cli.add_flag("--resident", &resident,
                                   "keep the whole uint8 training set on the device and gather batches there");
                  });
    const TrainOptions& o = lesson.options;
    const MnistSplit& train_set = lesson.data.train;
    MemoryLedger& ledger = lesson.ledger;
    PhaseTimer& timer = lesson.timer;
    // --resident: the training set, its labels and each epoch's order live on the device too.
    const size_t resident_bytes = resident ? train_set.count * (kMnistPixels + 1 + sizeof(uint32_t)) : 0;
    Mlp& net = lesson.model(/*staging_slots=*/resident ? 1 : kSlots, /*stage_raw_pixels=*/true, resident_bytes);
    lesson.add_config("resident", resident);
    lesson.print_h2d_bandwidth_probe(size_t(o.batch) * kMnistPixels);

    // Kernels go to `compute`, copies to `copy`: work on different streams may run at the same time.
    cudaStream_t compute, copy;
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    // copied[s]: the copy into slot s is done. consumed[s]: the kernels that read device slot s are done.
    cudaEvent_t copied[kSlots], consumed[kSlots];
    for (int s = 0; s < kSlots; ++s) {
        CUDA_CHECK(cudaEventCreateWithFlags(&copied[s], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&consumed[s], cudaEventDisableTiming));
    }
    double* loss_sum = ledger.allocate<double>(MemoryCategory::workspace, "epoch loss sum", 1);
    double* loss_sum_host =
        ledger.allocate_host<double>(MemoryCategory::workspace, "epoch loss sum (host)", 1, HostMemory::pinned);

    // --resident: the training set and each epoch's order live on the device; no loader, no per-batch copy.
    uint8_t *resident_pixels = nullptr, *resident_labels = nullptr;
    uint32_t* order_on_device = nullptr;
    std::optional<BatchLoader> loader;
    if (resident) {
        resident_pixels =
            ledger.allocate<uint8_t>(MemoryCategory::input_staging, "training set pixels", train_set.images.size());
        resident_labels =
            ledger.allocate<uint8_t>(MemoryCategory::input_staging, "training set labels", train_set.count);
        order_on_device = ledger.allocate<uint32_t>(MemoryCategory::input_staging, "epoch order", train_set.count);
        ledger.copy_to_device(resident_pixels, train_set.images.data(), train_set.images.size(), compute);
        ledger.copy_to_device(resident_labels, train_set.labels.data(), train_set.count, compute);
        CUDA_CHECK(cudaStreamSynchronize(compute));  // the sources are pageable vectors: done before going on
    } else {
        loader.emplace(ledger, train_set, o.batch, kSlots, &timer);  // &timer: its gathers on the --trace timeline
    }
    const auto slot_pixels = [&](int s) { return net.staged_pixels + size_t(s) * o.batch * kMnistPixels; };
    const auto slot_labels = [&](int s) { return net.staged_labels + size_t(s) * o.batch; };

    uint64_t image_bytes_per_epoch = 0;
    // Queues the copy of a gathered batch into device slot batch.slot, on the copy stream.
    const auto prefetch = [&](const BatchLoader::Batch& batch) {
        const int s = batch.slot;
        // Rule 1: the kernels that read this device slot last time must be done before it is overwritten.
        CUDA_CHECK(cudaStreamWaitEvent(copy, consumed[s]));
        const size_t pixel_bytes = size_t(batch.rows) * kMnistPixels;
        {
            auto t = timer.scope(Phase::h2d, copy, pixel_bytes + batch.rows);
            ledger.copy_to_device(slot_pixels(s), batch.pixels, pixel_bytes, copy);  // pinned: returns at once
            ledger.copy_to_device(slot_labels(s), batch.labels, batch.rows, copy);
        }
        image_bytes_per_epoch += pixel_bytes;
        CUDA_CHECK(cudaEventRecord(copied[s], copy));
        // Rule 2: the loader refills host slot s only after copied[s] (batch_loader.h) — the copy reads it later.
        loader->release(s, copied[s]);
    };

    long step = 0;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        timer.begin_epoch(epoch);
        std::vector<uint32_t> order;
        {
            auto t = timer.scope(Phase::host);
            order = epoch_order(o.seed, epoch, train_set.count);
        }
        CUDA_CHECK(cudaMemsetAsync(loss_sum, 0, sizeof(double), compute));
        image_bytes_per_epoch = 0;
        if (resident) {  // 4 bytes per image per epoch instead of 785
            auto t = timer.scope(Phase::h2d, compute, order.size() * sizeof(uint32_t));
            ledger.copy_to_device(order_on_device, order.data(), order.size() * sizeof(uint32_t), compute);
        } else {
            loader->start_epoch(order);
            BatchLoader::Batch first;
            {
                auto t = timer.scope(Phase::host);  // the host waits for the loader thread's first batch
                first = loader->next();
            }
            prefetch(first);
        }
        for (size_t b = 0; b < lesson.batches_per_epoch(); ++b) {
            const int rows = lesson.rows_in_batch(b);
            const int s = resident ? 0 : int(b % kSlots);
            if (!resident) {  // Rule 3: the kernels read slot s only after its copy (the stall is timed)
                timer.begin(Phase::input_wait, compute);
                CUDA_CHECK(cudaStreamWaitEvent(compute, copied[s]));
                timer.end(Phase::input_wait, compute);
            }
            {
                auto t = timer.scope(Phase::normalize, compute);
                if (resident) {
                    gather_rows(resident_pixels, resident_labels, order_on_device, b * o.batch, rows, kMnistPixels,
                                slot_pixels(s), slot_labels(s), compute);
                }
                normalize_pixels(slot_pixels(s), net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd,
                                 compute);
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward_simple(net, rows, compute);
            }
            {  // the loss stays on the device: summed there, read once per epoch
                auto t = timer.scope(Phase::loss, compute);
                const float* logits = net.layers.back().output;
                softmax_cross_entropy(logits, slot_labels(s), net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses, compute);
                count_correct(logits, slot_labels(s), net.correct, rows, kMnistClasses, nullptr, compute);
                accumulate_loss(net.mean_loss, rows, loss_sum, compute);
                CUDA_CHECK(cudaEventRecord(consumed[s], compute));  // the last reader of slot s in this step
            }
            {
                auto t = timer.scope(Phase::backward, compute);
                backward_simple(net, rows, compute);
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                optimizer_update(net, o, lesson.lr_at(step), int(step + 1), compute);
            }
            ++step;
            if (!resident && b + 1 < lesson.batches_per_epoch()) {  // queue the next batch's copy now
                BatchLoader::Batch next;
                {
                    auto t = timer.scope(Phase::host);
                    next = loader->next();
                }
                prefetch(next);
            }
        }
        {
            auto t = timer.scope(Phase::d2h, compute, sizeof(double));
            ledger.copy_to_host(loss_sum_host, loss_sum, sizeof(double), compute);
        }
        const EpochTiming& timing = timer.end_epoch();  // synchronizes the device: *loss_sum_host is written
        lesson.finish_epoch(epoch, timing, *loss_sum_host, forward_simple, compute);
    }

    report_copies(lesson, timer, image_bytes_per_epoch, resident);  // how much of the copy time compute never saw

    const int status = lesson.finish();
    loader.reset();  // the loader thread first: it waits on the copied[] events destroyed below
    for (int s = 0; s < kSlots; ++s) {
        CUDA_CHECK(cudaEventDestroy(copied[s]));
        CUDA_CHECK(cudaEventDestroy(consumed[s]));
    }
    CUDA_CHECK(cudaStreamDestroy(compute));
    CUDA_CHECK(cudaStreamDestroy(copy));
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
