// lessons/02_device_normalize/main.cu — Lesson 02: send the raw uint8 pixels, normalize them on the device.
//
// The one change from lesson 01: the batch crosses PCIe as the uint8 pixels MNIST stores (128 × 784 = 100,352
// bytes, a quarter of lesson 01's floats) and the normalize kernel (kernels/normalize.cuh) turns them into floats
// on the device. The host no longer keeps a float copy of the training set. Host and kernel share one formula
// (common/normalize_pixel.h), so the network sees bitwise the same inputs and the final weights equal lesson 01's.
// Every phase is timed with CUDA events; every byte is allocated through the memory ledger. README.md beside this
// file explains the tables it prints.
#include <cstdio>
#include <vector>

#include "lessons/lesson.h"

#include "common/reference_mlp.h"  // epoch_order, gather_batch: the batch order the reference trainer uses
#include "kernels/count_correct.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

int train(int argc, char** argv) {
    Lesson lesson(argc, argv, "lesson02_device_normalize",
                  "copy the raw uint8 pixels, normalize on the device (1 byte per pixel over PCIe)");
    const TrainOptions& o = lesson.options;
    const MnistSplit& train_set = lesson.data.train;
    MemoryLedger& ledger = lesson.ledger;
    PhaseTimer& timer = lesson.timer;
    Mlp& net = lesson.model(/*staging_slots=*/1, /*stage_raw_pixels=*/true);  // uint8 pixels land in staging

    // One batch in pageable host memory (plain operator new): what cudaMemcpy copies from.
    uint8_t* batch_pixels = ledger.allocate_host<uint8_t>(MemoryCategory::input_staging, "batch pixels (uint8)",
                                                          size_t(o.batch) * kMnistPixels, HostMemory::pageable);
    uint8_t* batch_labels =
        ledger.allocate_host<uint8_t>(MemoryCategory::input_staging, "batch labels", o.batch, HostMemory::pageable);

    long step = 0;
    uint64_t image_bytes_per_epoch = 0;
    std::vector<double> step_losses;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        timer.begin_epoch(epoch);
        std::vector<uint32_t> order;
        {
            auto t = timer.scope(Phase::host);
            order = epoch_order(o.seed, epoch, train_set.count);
        }
        double loss_sum = 0;
        image_bytes_per_epoch = 0;
        for (size_t b = 0; b < lesson.batches_per_epoch(); ++b) {
            const int rows = lesson.rows_in_batch(b);
            {  // host work: gather this batch's pixels and labels, in the epoch's shuffled order
                auto t = timer.scope(Phase::host);
                gather_batch(train_set, order, b * o.batch, rows, batch_pixels, batch_labels);
            }
            const size_t pixel_bytes = size_t(rows) * kMnistPixels;
            {  // 1 byte per pixel from pageable memory: the driver stages it through its own pinned buffer
                auto t = timer.scope(Phase::h2d, 0, pixel_bytes + rows);
                CUDA_CHECK(cudaMemcpy(net.staged_pixels, batch_pixels, pixel_bytes, cudaMemcpyHostToDevice));
                CUDA_CHECK(cudaMemcpy(net.staged_labels, batch_labels, rows, cudaMemcpyHostToDevice));
                ledger.record_copy(CopyDirection::host_to_device, pixel_bytes + rows, HostMemory::pageable);
            }
            image_bytes_per_epoch += pixel_bytes;
            {  // uint8 → float on the device: (p / 255 − mean) / std, the formula the host used in lesson 01
                auto t = timer.scope(Phase::normalize);
                normalize_pixels(net.staged_pixels, net.input, size_t(rows) * kMnistPixels);
            }
            {
                auto t = timer.scope(Phase::forward);
                forward_simple(net, rows, 0);
            }
            {  // mean loss and dlogits in one fused kernel; correct predictions counted on the device
                auto t = timer.scope(Phase::loss);
                const float* logits = net.layers.back().output;
                softmax_cross_entropy(logits, net.staged_labels, net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses);
                count_correct(logits, net.staged_labels, net.correct, rows, kMnistClasses);
            }
            float loss = 0;
            {  // the loss, every step: cudaMemcpy returns only when the GPU has run everything queued before it
                auto t = timer.scope(Phase::d2h, 0, sizeof(float));
                CUDA_CHECK(cudaMemcpy(&loss, net.mean_loss, sizeof(float), cudaMemcpyDeviceToHost));
                ledger.record_copy(CopyDirection::device_to_host, sizeof(float), HostMemory::pageable);
            }
            loss_sum += double(loss) * rows;
            step_losses.push_back(loss);
            {
                auto t = timer.scope(Phase::backward);
                backward_simple(net, rows, 0);
            }
            {
                auto t = timer.scope(Phase::optimizer);
                optimizer_update(net, o, lesson.lr_at(step), int(step + 1), 0);
            }
            ++step;
        }
        lesson.finish_epoch(epoch, timer.end_epoch(), loss_sum, forward_simple);
    }

    std::printf("\nimage bytes copied per epoch: %s (1 byte per pixel; lesson 01 copied 4× as many: %s)\n",
                format_bytes(image_bytes_per_epoch).c_str(), format_bytes(4 * image_bytes_per_epoch).c_str());
    lesson.add_result("image_bytes_per_epoch", int64_t(image_bytes_per_epoch));
    lesson.add_series("step_losses", step_losses);
    return lesson.finish();
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
