// lessons/08_data_loading/main.cu — Lesson 08: the data-loading bottleneck. Lesson 04's model and kernels; every
// training image is augmented (a random affine as torchvision's RandomAffine, a pure function of seed, epoch, sample):
//   * --augment host: the loader's workers augment before the copy, as a PyTorch DataLoader's do, and the loop waits
//     for them; --workers N: N loader threads hand over batches in order (bitwise the same weights for any N);
//   * --augment device (the default): lesson 02's trick again. The uint8 originals are copied and one kernel augments
//     and normalizes each image after the copy (kernels/augment.cuh), bit for bit the host's pixels;
//   * each data path trains a few steps from the same seed, side by side (loader_comparison.h).
#include <algorithm>
#include <string>
#include <vector>

#include "lessons/08_data_loading/loader_comparison.h"  // the data paths side by side
#include "lessons/03_pinned_async/copy_figures.h"       // the bandwidth probe
#include "lessons/batch_pipeline.h"  // lesson 03's data path (loader thread, pinned slots, async copies) as a class
#include "lessons/lesson.h"

#include "common/augment.h"
#include "kernels/augment.cuh"
#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

// --augment host: what each loader worker does to a batch. The same transform the kernel applies, on the host.
BatchLoader::FillBatch augment_on_host(uint64_t seed) {
    return [seed](const MnistSplit& train, int epoch, const uint32_t* samples, size_t rows, uint8_t* pixels,
                  uint8_t* labels) {
        augment_images(train.images.data(), samples, rows, seed, epoch, pixels);  // 784 bilinear samples per image
        for (size_t r = 0; r < rows; ++r) labels[r] = train.labels[samples[r]];
    };
}

// One training run of `mode` (lesson 04's fp32 model and kernels), its buffers in `ledger`, its phases in `timer`:
// the lesson's --epochs with epoch lines (`batches` 0, the main run), or the first `batches` batches of epoch 1.
LoaderRun train_run(Lesson& lesson, const LoaderMode& mode, size_t batches, MemoryLedger& ledger, PhaseTimer& timer) {
    const TrainOptions& o = lesson.options;
    const ModelShape shape = lesson.model_shape(BatchPipeline::kSlots, /*stage_raw_pixels=*/true);
    const size_t workspace_floats = bias_grad_workspace_floats(o.batch, o.widest_layer());  // two-pass bias gradient
    lesson.require_fits(shape, workspace_floats * sizeof(float) + lesson.data.train.count * sizeof(uint32_t));
    Mlp net = allocate_initialized_model<float, float>(ledger, shape, o.seed);
    lesson.upload_test_set();
    float* workspace = ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    const bool main_run = batches == 0;
    if (main_run) print_h2d_bandwidth_probe(lesson, size_t(o.batch) * kMnistPixels);
    const bool on_host = mode.augment == Augment::host;  // the loader's workers augment before the copy
    BatchPipeline data(lesson, ledger, timer, net.staged_pixels, net.staged_labels,
                       {.workers = mode.workers,  // lesson 03's data path, with this mode's workers and their work
                        .fill = on_host ? augment_on_host(o.seed) : nullptr,
                        .fill_name = on_host ? "gather + augment" : "gather",
                        .samples_on_device = mode.augment == Augment::device});  // the kernel draws the parameters
    DeviceLosses losses(ledger, main_run ? lesson.total_steps() : 0);            // the test compares the first 20 steps
    const cudaStream_t compute = data.compute();

    LoaderRun result{.mode = mode};
    long step = 0;
    for (int epoch = 1; epoch <= (main_run ? o.epochs : 1); ++epoch) {
        timer.begin_epoch(epoch);
        losses.start_epoch(compute);
        data.start_epoch(epoch, batches);
        for (size_t b = 0; b < data.batches(); ++b) {
            const BatchPipeline::DeviceBatch batch = data.wait_for_batch(b);  // rule 3: after its copy
            const int rows = batch.rows;
            {  // uint8 → float on the device, (p / 255 − mean) / std
                auto t = timer.scope(Phase::normalize, compute);
                const size_t n = size_t(rows) * kMnistPixels;
                if (mode.augment == Augment::device) {  // the originals arrived: one block per image augments
                    const bool aligned16 = reinterpret_cast<uintptr_t>(batch.pixels) % 16 == 0;  // 16-byte loads
                    augment_normalize_kernel<<<rows, kAugmentThreads, 0, compute>>>(  // its pixels, then normalizes
                        batch.pixels, batch.samples, philox_key(o.seed), epoch, net.input, kMnistMean, kMnistStd,
                        aligned16);
                } else {  // none, or host: the pixels arrived ready (augmented by the loader); 4 pixels per thread
                    normalize_pixels_kernel<true, float><<<grid_for_4_per_thread(n, 256), 256, 0, compute>>>(
                        n, batch.pixels, net.input, kMnistMean, kMnistStd);
                }
                CUDA_CHECK(cudaGetLastError());
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward_fastest_kernels(net, rows, compute);  // lesson 04's top GEMM step, bias + ReLU fused
            }
            {  // the loss stays on the device: summed there, read once per epoch
                auto t = timer.scope(Phase::loss, compute);
                const auto* logits = net.layers.back().output;
                softmax_cross_entropy(logits, batch.labels, net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses, compute);
                count_correct(logits, batch.labels, net.correct, rows, kMnistClasses, nullptr, compute);
                losses.add(net.mean_loss, rows, step, compute);
                data.done_reading(batch);  // the last reader of its slot in this step
            }
            {
                auto t = timer.scope(Phase::backward, compute);
                backward_fastest_kernels(net, rows, workspace, workspace_floats, compute);
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                optimizer_update(net, o, lesson.lr_at(step), int(step + 1), compute);
            }
            ++step;
            result.images += uint64_t(rows);
            data.prefetch_next(b);  // queue the next batch's copy now
        }
        result.image_bytes += data.image_bytes_copied();
        losses.copy_epoch_sum(timer, compute);
        const EpochTiming& timing = timer.end_epoch();  // synchronizes the device: the loss sum is on the host
        if (main_run)
            lesson.finish_epoch(epoch, timing, losses.epoch_sum(), net.correct, test_set_evaluator(net), compute);
    }
    result.steps = step, result.timing = timer.total(), result.loader = data.loader_throughput();
    if (main_run)  // the last epoch's accuracy, the copy figures, every step's loss and the weights for finish()
        return finish_main_run(lesson, result, timer, data.image_bytes_copied(), losses.step_losses(compute),
                               download_parameters(ledger, net));
    result.test_accuracy = lesson.evaluate_test_set(net.correct, test_set_evaluator(net), shape.batch, compute);
    return result;
}

int train(int argc, char** argv) {
    LoaderFlags flags;  // --augment, --workers, --compare-steps (loader_comparison.h)
    Lesson lesson(argc, argv, "lesson08_data_loading",
                  "the data-loading bottleneck: loader workers, then augmentation moved after the copy",
                  [&](Cli& cli) { flags.add(cli); });
    const LoaderMode mode = flags.mode(lesson);  // (also in the JSON config)
    const LoaderRun main_run = train_run(lesson, mode, 0, lesson.ledger, lesson.timer);
    if (flags.compare_steps > 0) {
        const size_t batches = std::min<size_t>(size_t(flags.compare_steps), lesson.batches_per_epoch());
        compare_loaders(lesson, comparison_modes(flags.workers), batches, train_run, main_run);
    }
    return lesson.finish();
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
