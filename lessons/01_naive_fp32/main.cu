// lessons/01_naive_fp32/main.cu — Lesson 01: the baseline every later lesson changes one thing of.
//
// The training loop as a first CUDA program usually writes it:
//   * the whole training set is normalized to float32 on the host, once — from then on 4 bytes per pixel;
//   * each batch is gathered into pageable host memory and sent with cudaMemcpy (128 × 784 × 4 = 401,408 bytes);
//   * the simple kernels: naive GEMM, then bias and ReLU as separate kernels (forward_simple in lessons/lesson.cu);
//   * the loss is read back after every step with cudaMemcpy, which waits for the GPU to finish the step so far.
// Every phase is timed with CUDA events; every byte is allocated through the memory ledger. README.md beside this
// file explains the tables it prints.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "lessons/lesson.h"

#include "common/reference_mlp.h"  // epoch_order: the batch order the reference trainer uses
#include "kernels/count_correct.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

int train(int argc, char** argv) {
    Lesson lesson(argc, argv, "lesson01_naive_fp32",
                  "naive fp32: images normalized to float on the host, then copied (4 bytes per pixel)");
    const TrainOptions& o = lesson.options;
    const MnistSplit& train_set = lesson.data.train;
    MemoryLedger& ledger = lesson.ledger;
    PhaseTimer& timer = lesson.timer;
    Mlp& net = lesson.model(/*staging_slots=*/1, /*stage_raw_pixels=*/false);  // floats go straight into X

    // The training set as float32, normalized on the host once: 4 × the bytes of the uint8 images, in host memory.
    const auto start = std::chrono::steady_clock::now();
    float* train_floats = ledger.allocate_host<float>(MemoryCategory::input_staging, "training set as float",
                                                      train_set.images.size(), HostMemory::pageable);
    for (size_t i = 0; i < train_set.images.size(); ++i) train_floats[i] = normalize_pixel(train_set.images[i]);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "host: normalized the training set to float32 once: %s in %.1f ms (before training, not in the "
        "tables)\n\n",
        format_bytes(train_set.images.size() * sizeof(float)).c_str(), ms);

    // One batch in pageable host memory (plain operator new): what cudaMemcpy copies from.
    float* batch_pixels = ledger.allocate_host<float>(MemoryCategory::input_staging, "batch pixels (float)",
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
            {  // host work: gather this batch's floats and labels, in the epoch's shuffled order
                auto t = timer.scope(Phase::host);
                for (int r = 0; r < rows; ++r) {
                    const uint32_t sample = order[b * o.batch + r];
                    std::copy_n(train_floats + size_t(sample) * kMnistPixels, kMnistPixels,
                                batch_pixels + size_t(r) * kMnistPixels);
                    batch_labels[r] = train_set.labels[sample];
                }
            }
            const size_t pixel_bytes = size_t(rows) * kMnistPixels * sizeof(float);
            {  // 4 bytes per pixel from pageable memory: the driver stages it through its own pinned buffer
                auto t = timer.scope(Phase::h2d, 0, pixel_bytes + rows);
                CUDA_CHECK(cudaMemcpy(net.input, batch_pixels, pixel_bytes, cudaMemcpyHostToDevice));
                CUDA_CHECK(cudaMemcpy(net.staged_labels, batch_labels, rows, cudaMemcpyHostToDevice));
                ledger.record_copy(CopyDirection::host_to_device, pixel_bytes + rows, HostMemory::pageable);
            }
            image_bytes_per_epoch += pixel_bytes;
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

    std::printf("\nimage bytes copied per epoch: %s (4 bytes per pixel)\n",
                format_bytes(image_bytes_per_epoch).c_str());
    lesson.add_result("image_bytes_per_epoch", int64_t(image_bytes_per_epoch));
    lesson.add_series("step_losses", step_losses);
    return lesson.finish();
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
