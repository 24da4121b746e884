// lessons/08_data_loading/main.cu — Lesson 08: the data-loading bottleneck. Lesson 04's model and kernels; the
// loader changes.
//
// What changes from lesson 04:
//   * every training image is augmented, as torchvision's RandomAffine(degrees=10, translate=(0.1, 0.1),
//     scale=(0.9, 1.1), interpolation=BILINEAR) would do it (fill 0; common/augment.h), with parameters drawn from
//     Philox(seed, epoch, sample): the augmented image is a pure function of (seed, epoch, sample);
//   * --augment host: the loader augments each image before the copy, as a PyTorch DataLoader's workers do. That
//     is real work for a CPU core, and the training loop now waits for the loader: it is the bottleneck;
//   * --workers N: N loader threads fill N + 1 staging slots and hand the batches over in order
//     (lessons/batch_loader.h); the weights are bitwise the same for every N;
//   * --augment device: lesson 02's trick a second time. The uint8 originals are copied (1 byte per pixel, as
//     before) and one kernel augments and normalizes each image after the copy (kernels/augment.cuh); the loader
//     only gathers. The kernel's pixels are the host's bit for bit, so --augment host and device train the same
//     weights;
//   * --augment none: lesson 04's data path;
//   * at the end (unless --compare-steps 0), each data path trains a few steps from the same seed and the runs are
//     printed side by side (loader_comparison.h, beside this file).
// Lesson 04's --resident and --gemm and its GEMM staircase table are gone (the kernels are lesson 04's fastest).
#include <algorithm>
#include <string>
#include <vector>

#include "lessons/08_data_loading/loader_comparison.h"  // the data paths side by side
#include "lessons/03_pinned_async/copy_figures.h"       // the bandwidth probe, and how much copy time was hidden
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

// One training run of `mode` on `net` (its buffers in `ledger`, its phases in `timer`): the lesson's --epochs with
// epoch lines (`batches` 0, the main run), or the first `batches` batches of epoch 1 (a comparison run).
LoaderRun train_run(Lesson& lesson, const LoaderMode& mode, Mlp& net, size_t batches, MemoryLedger& ledger,
                    PhaseTimer& timer, float* workspace, size_t workspace_floats) {
    const TrainOptions& o = lesson.options;
    const bool main_run = batches == 0;
    BatchPipeline::Options options;  // lesson 03's data path, with this mode's workers and their work
    options.workers = mode.workers;
    if (mode.augment == Augment::host) {  // the loader's workers augment before the copy
        options.fill = augment_on_host(o.seed);
        options.fill_name = "gather + augment";
    }
    options.samples_on_device = mode.augment == Augment::device;  // the kernel draws each sample's parameters
    BatchPipeline data(lesson, ledger, timer, net.staged_pixels, net.staged_labels, options);
    DeviceLosses losses(ledger, main_run ? lesson.total_steps() : 0);  // the test compares the first 20 steps
    const cudaStream_t compute = data.compute();
    const ForwardPass forward_with_gemm = [](Mlp& n, int rows, cudaStream_t s) {
        forward_fast(n, rows, kFastestGemm, s);
    };

    LoaderRun run;
    run.mode = mode;
    for (int epoch = 1; epoch <= (main_run ? o.epochs : 1); ++epoch) {
        timer.begin_epoch(epoch);
        losses.start_epoch(compute);
        data.start_epoch(epoch, batches);
        for (size_t b = 0; b < data.batches(); ++b) {
            const BatchPipeline::DeviceBatch batch = data.wait_for_batch(b);  // rule 3: after its copy
            const int rows = batch.rows;
            {  // uint8 → float on the device, (p / 255 − mean) / std: 4 pixels per thread
                auto t = timer.scope(Phase::normalize, compute);
                const size_t n = size_t(rows) * kMnistPixels;
                if (mode.augment == Augment::device) {  // the originals arrived: one block per image augments
                    const bool aligned16 = reinterpret_cast<uintptr_t>(batch.pixels) % 16 == 0;  // 16-byte loads
                    augment_normalize_kernel<<<rows, kAugmentThreads, 0, compute>>>(  // its pixels, then normalizes
                        batch.pixels, batch.samples, philox_key(o.seed), epoch, net.input, kMnistMean, kMnistStd,
                        aligned16);
                } else {  // none, or host: the pixels arrived ready (augmented by the loader)
                    normalize_pixels_kernel<true, float><<<grid_for_4_per_thread(n, 256), 256, 0, compute>>>(
                        n, batch.pixels, net.input, kMnistMean, kMnistStd);
                }
                CUDA_CHECK(cudaGetLastError());
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward_fast(net, rows, kFastestGemm, compute);  // lesson 04's fastest GEMM step, bias + ReLU fused
            }
            {  // the loss stays on the device: summed there, read once per epoch
                auto t = timer.scope(Phase::loss, compute);
                const float* logits = net.layers.back().output;
                softmax_cross_entropy(logits, batch.labels, net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses, compute);
                count_correct(logits, batch.labels, net.correct, rows, kMnistClasses, nullptr, compute);
                losses.add(net.mean_loss, rows, run.steps, compute);
                data.done_reading(batch);  // the last reader of its slot in this step
            }
            {
                auto t = timer.scope(Phase::backward, compute);
                backward_fast(net, rows, kFastestGemm, workspace, workspace_floats, compute);
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                optimizer_update(net, o, lesson.lr_at(run.steps), int(run.steps + 1), compute);
            }
            ++run.steps;
            run.images += uint64_t(rows);
            data.prefetch_next(b);  // queue the next batch's copy now (the host waits here for a slow loader)
        }
        run.image_bytes += data.image_bytes_copied();
        losses.copy_epoch_sum(timer, compute);
        const EpochTiming& timing = timer.end_epoch();  // synchronizes the device: the loss sum is on the host
        if (main_run) {
            run.test_accuracy =
                lesson.finish_epoch(epoch, timing, losses.epoch_sum(), net, forward_with_gemm, compute).test_accuracy;
        }
    }
    run.timing = timer.total();
    run.loader = data.loader_throughput();
    if (main_run) {
        report_copies(lesson, timer, data.image_bytes_copied(), false);  // how much copy time compute never saw
        const std::vector<float> steps = losses.step_losses(compute);
        lesson.add_series("step_losses", std::vector<double>(steps.begin(), steps.end()));
    } else {
        run.test_accuracy =
            lesson.evaluate_test_set(net.correct, Lesson::test_set_evaluator(net, forward_with_gemm), o.batch, compute);
    }
    return run;
}

int train(int argc, char** argv) {
    std::string augment_flag = "device";
    int workers = 1;
#if defined(CUDA_TEACH_CPU)
    int compare_steps = 3;  // a CPU backend's step takes about a second at the default width
#else
    int compare_steps = 40;
#endif
    Lesson lesson(argc, argv, "lesson08_data_loading",
                  "the data-loading bottleneck: loader workers, then augmentation moved after the copy", [&](Cli& cli) {
                      cli.add_choice("--augment", &augment_flag, {"device", "host", "none"},
                                     "where each training image is augmented (random affine): in a kernel after the "
                                     "copy, in the loader before it, or not at all (lesson 04's data path)");
                      cli.add_int("--workers", &workers, "N", "loader threads filling the staging slots", 1, 64);
                      cli.add_int("--compare-steps", &compare_steps, "N",
                                  "steps each data path trains for the side-by-side table (0: none)", 0);
                  });
    const TrainOptions& o = lesson.options;
    const LoaderMode mode{augment_from_name(augment_flag), workers};
    lesson.add_config("augment", augment_flag);
    lesson.add_config("workers", int64_t(workers));
    const size_t workspace_floats = bias_grad_workspace_floats(o.batch, o.widest_layer());  // two-pass bias gradient
    const size_t extra_bytes = workspace_floats * sizeof(float) + lesson.data.train.count * sizeof(uint32_t);

    // A comparison run: a model of its own (the same initial weights) in the run's ledger, freed before the next.
    const TrainMode train_mode = [&](const LoaderMode& m, size_t batches, MemoryLedger& ledger, PhaseTimer& timer) {
        const ModelShape shape = lesson.model_shape(BatchPipeline::kSlots, /*stage_raw_pixels=*/true);
        lesson.require_fits(shape, extra_bytes);
        lesson.upload_test_set();
        Mlp net = allocate_initialized_model<float, float>(ledger, shape, o.seed);
        float* workspace =
            ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
        return train_run(lesson, m, net, batches, ledger, timer, workspace, workspace_floats);
    };

    Mlp& net = lesson.allocate_model(BatchPipeline::kSlots, /*stage_raw_pixels=*/true, extra_bytes);
    float* workspace =
        lesson.ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    print_h2d_bandwidth_probe(lesson, size_t(o.batch) * kMnistPixels);
    const LoaderRun main_run =
        train_run(lesson, mode, net, 0, lesson.ledger, lesson.timer, workspace, workspace_floats);
    if (compare_steps > 0) {
        const size_t batches = std::min<size_t>(size_t(compare_steps), lesson.batches_per_epoch());
        compare_loaders(lesson, comparison_modes(workers), batches, train_mode, main_run);
    }
    return lesson.finish();
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
