// lessons/07_batch_size/main.cu — Lesson 07: batch size. The pipeline is lesson 05's (mixed precision, tensor
// cores, loss scaling, pinned prefetched copies); what changes is the batch.
//
// What this lesson does:
//   * trains the same number of samples at each batch size of --batches (16 … 8192 by default, and the largest
//     that fits) and prints, per batch: samples/s, the time of a step split into the copy, the kernels, the wait
//     for input, and the host's own time per step (when it is about as long as the kernels, the GPU waits for the
//     host: the step is launch-bound), peak device memory by category, and the test accuracy after those samples
//     (batch_sweep.h beside this file). Bigger batches are faster per sample, but memory grows linearly and fewer
//     steps see the same samples;
//   * the learning rate is scaled with the batch (--lr-scaling: sqrt by default, lr·√(B/128); README);
//   * finds the largest batch that fits from the ledger's exact prediction and cudaMemGetInfo, proves it by
//     allocating that model and running a step, and shows what happens one size up: cudaMalloc returns
//     cudaErrorMemoryAllocation, and the program reports it instead of crashing.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lessons/07_batch_size/batch_sweep.h"  // the sweep over --batches and its table
#include "lessons/batch_pipeline.h"  // lesson 03's data path (loader thread, pinned slots, async copies) as a class
#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"

#include "common/reference_mlp.h"  // batch_count
#include "kernels/bias_grad.cuh"
#include "kernels/hgemm.cuh"
#include "kernels/loss_scaling.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

#if defined(CUDA_TEACH_CPU)
// The CPU backend's emulated device memory for this lesson, unless CUDA_CPU_MEMORY says otherwise: small enough
// that the largest batch that fits can be allocated and stepped in seconds.
constexpr const char* kCpuDeviceMemory = "256M";
#endif

// Trains `samples` samples (whole batches; the last one may be partial) at `batch` with lesson 05's mixed-precision
// step, its buffers in `ledger` and its phases in `timer`, and evaluates the test set.
// `parameters`: if not null, receives the final weights (for finish()'s checksum).
SweepPoint train_at(Lesson& lesson, int batch, long samples, double lr, MemoryLedger& ledger, PhaseTimer& timer,
                    std::vector<std::vector<float>>* parameters) {
    const TrainOptions& o = lesson.options;
    const size_t per_epoch = batch_count(lesson.data.train.count, batch);
    const long steps = long(cuda_teach::ceil_div<size_t>(size_t(samples), size_t(batch)));
    const ModelShape shape = shape_at(lesson, batch);
    lesson.require_fits(shape, extra_device_bytes(lesson, batch, steps));
    HalfMlp<float> net = allocate_initialized_model<__half, float>(ledger, shape, o.seed);
    const size_t workspace_floats = bias_grad_workspace_floats(batch, o.widest_layer());  // two-pass bias gradient
    float* workspace = ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    BatchPipeline data(lesson, ledger, timer, net.staged_pixels, net.staged_labels, {.batch = batch});  // lesson 03's
    DeviceLosses losses(ledger);
    const cudaStream_t compute = data.compute();
    const GradScalerOptions scaling;  // PyTorch's defaults
    GradScalerState* scaler = ledger.allocate<GradScalerState>(MemoryCategory::workspace, "loss scaler state", 1);
    init_grad_scaler(scaler, scaling, compute);
    const std::vector<GradientTensor> gradients = gradient_tensors(net);

    // One "epoch" of the timer = the whole point; the data's epochs follow each other inside it.
    timer.begin_epoch(1);
    losses.start_epoch(compute);
    long step = 0;
    for (int epoch = 1; step < steps; ++epoch) {
        const size_t batches = std::min<size_t>(per_epoch, size_t(steps - step));
        data.start_epoch(epoch, batches);
        for (size_t b = 0; b < batches; ++b, ++step) {
            const BatchPipeline::DeviceBatch input = data.wait_for_batch(b);  // rule 3: after its copy
            const int rows = input.rows;
            {  // uint8 → fp16 on the device, (p / 255 − mean) / std: 4 pixels per thread
                auto t = timer.scope(Phase::normalize, compute);
                const size_t n = size_t(rows) * kMnistPixels;
                normalize_pixels_kernel<true, __half><<<grid_for_4_per_thread(n, 256), 256, 0, compute>>>(
                    n, input.pixels, net.input, kMnistMean, kMnistStd);
                CUDA_CHECK(cudaGetLastError());
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward_half(net, rows, kFastestHgemm, compute);
            }
            {
                auto t = timer.scope(Phase::loss, compute);
                softmax_cross_entropy(net.layers.back().output, input.labels, net.layers.back().output_grad,
                                      net.row_losses, net.mean_loss, rows, kMnistClasses, &scaler->scale, compute);
                losses.add(net.mean_loss, rows, step, compute);
                data.done_reading(input);
            }
            {
                auto t = timer.scope(Phase::backward, compute);
                backward_half(net, rows, kFastestHgemm, workspace, workspace_floats, compute);
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                unscale_and_check(gradients.data(), int(gradients.size()), scaler, compute);
                update_grad_scaler(scaler, scaling, float(o.beta1), float(o.beta2), compute);
                optimizer_step(net, o, scheduled_lr(o.lr_schedule, lr, step, steps), int(step + 1), UpdateCounters{},
                               scaler, compute);
            }
            data.prefetch_next(b);
        }
    }
    const EpochTiming& timing = timer.end_epoch();

    SweepPoint point;
    point.batch = batch;
    point.lr = lr;
    point.steps = steps;
    for (long i = 0; i < steps; ++i) {
        point.samples +=
            long(std::min<size_t>(batch, lesson.data.train.count - (size_t(i) % per_epoch) * size_t(batch)));
    }
    point.wall_ms = timing.wall_ms;
    point.copy_ms = timing[Phase::h2d].ms / steps;
    point.wait_ms = timing[Phase::input_wait].ms / steps;
    point.host_ms = timing[Phase::host].ms / steps;
    for (const Phase p : {Phase::normalize, Phase::forward, Phase::loss, Phase::backward, Phase::optimizer}) {
        point.compute_ms += timing[p].ms / steps;
    }
    point.test_accuracy = lesson.evaluate_test_set(net.correct, test_set_evaluator(net), batch, compute);
    point.memory = ledger.snapshot();
    if (parameters != nullptr) *parameters = download_parameters(ledger, net);
    return point;
}

int train(int argc, char** argv) {
#if defined(CUDA_TEACH_CPU)
    setenv("CUDA_CPU_MEMORY", kCpuDeviceMemory, 0);  // before the first CUDA call reads it; an explicit one wins
#endif
    std::vector<int> batches = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
    int samples_int = 0;
    std::string lr_scaling = "sqrt";
    bool skip_largest = false;
    Lesson lesson(
        argc, argv, "lesson07_batch_size",
        "batch size: samples/s, step time and memory against the batch, and the largest batch that fits",
        [&](Cli& cli) {
            cli.add_int_list("--batches", &batches, "LIST",
                             "the batch sizes to compare (those above the training images are skipped)");
            cli.add_int("--samples", &samples_int, "N",
                        "training samples at each batch size (default: one pass over the training images)", 0);
            cli.add_choice("--lr-scaling", &lr_scaling, {"sqrt", "linear", "none"},
                           "the learning rate at batch B: lr·√(B/128), lr·B/128, or lr");
            cli.add_flag("--no-largest", &skip_largest, "do not find, allocate and step the largest batch that fits");
            cli.mark_unused("--epochs", "each batch size trains on --samples samples");
        });
    require_adamw_or_exit(lesson);
    const TrainOptions& o = lesson.options;
    const long samples = samples_int > 0 ? samples_int : long(lesson.data.train.count);
    lesson.add_config("samples_per_batch_size", int64_t(samples));
    lesson.add_config("lr_scaling", lr_scaling);
    lesson.upload_test_set();
    // --batch: the run whose tables finish() prints. It must fit: if not, one message naming the category that
    // overflows and the largest batch that fits, exit 2 (Lesson::require_fits).
    const long main_steps = long(cuda_teach::ceil_div<size_t>(size_t(samples), size_t(o.batch)));
    lesson.require_fits(shape_at(lesson, o.batch), extra_device_bytes(lesson, o.batch, main_steps));
    const int largest = largest_batch_that_fits_or_print(lesson, samples);

    if (!skip_largest && largest > 0) {  // the proof, while nothing but the test set is allocated: one step
        {
            MemoryLedger proof_ledger;  // freed at the end of this block
            PhaseTimer proof_timer;
            const long proof_samples = long(std::min<size_t>(size_t(largest), lesson.data.train.count));
            const SweepPoint p = train_at(lesson, largest, proof_samples, scaled_lr(o.lr, largest, lr_scaling),
                                          proof_ledger, proof_timer, nullptr);
            const size_t peak = p.memory.total[int(MemorySpace::device)].peak;
            std::printf("the largest batch, %d, allocated and stepped: %s of device memory at its peak\n", largest,
                        format_bytes(peak).c_str());
            lesson.add_result("largest_batch_peak_device_bytes", int64_t(peak));
        }
        // What does not fit: the first batch whose model needs more than is free, in one cudaMalloc. CUDA answers
        // with an error code (nothing crashes); cudaGetLastError clears it, so the next checked call is not blamed.
        size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        const int first_too_big = largest_batch_that_fits(shape_at(lesson, 1), 0, free_bytes, 1 << 30) + 1;
        const size_t bytes = predict_device_memory(shape_at(lesson, first_too_big)).total();
        void* buffer = nullptr;
        const cudaError_t status = cudaMalloc(&buffer, bytes);
        if (status != cudaErrorMemoryAllocation) CUDA_CHECK(status);  // anything else is a real error
        cudaGetLastError();                                           // clear the expected one
        if (buffer != nullptr) CUDA_CHECK(cudaFree(buffer));
        std::printf("batch %d would need %zu bytes, %zu are free: cudaMalloc returns %s\n\n", first_too_big, bytes,
                    free_bytes, cudaGetErrorName(status));
        std::fflush(stdout);
    }
    const TrainAt train_one = [&](int batch, long n, double lr, MemoryLedger& ledger, PhaseTimer& timer,
                                  std::vector<std::vector<float>>* parameters) {
        return train_at(lesson, batch, n, lr, ledger, timer, parameters);
    };
    run_sweep(lesson, batches, largest, samples, lr_scaling, train_one);
    return lesson.finish("time per phase at --batch " + std::to_string(o.batch) + ", " + std::to_string(samples) +
                         " samples");
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
