// lessons/07_batch_size/main.cu — Lesson 07: batch size. Lesson 05's training step; what changes is the batch:
//   * the same samples trained at each batch of --batches, the learning rate scaled with it (--lr-scaling), and per
//     batch: samples/s, a step's copy, kernels, input wait and host time, peak memory, test accuracy (batch_sweep.h);
//   * the largest batch that fits, from the ledger's exact prediction and cudaMemGetInfo, allocated and stepped;
//   * one size up: cudaMalloc returns cudaErrorMemoryAllocation, and the program says so instead of crashing.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "lessons/07_batch_size/batch_sweep.h"  // the sweep over --batches and its table
#include "lessons/batch_pipeline.h"  // lesson 03's data path (loader thread, pinned slots, async copies) as a class
#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"

#include "common/reference_mlp.h"  // batch_count
#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/loss_scaling.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

// One training run at `batch_size` (lesson 05's mixed-precision model): `samples` samples in whole batches (the last
// may be partial), its buffers in `ledger`, its phases in `timer`. `parameters`, if not null: the final weights.
SweepPoint train_run(Lesson& lesson, int batch_size, long samples, double lr, MemoryLedger& ledger, PhaseTimer& timer,
                     std::vector<std::vector<float>>* parameters) {
    const TrainOptions& o = lesson.options;
    const ModelShape shape = shape_at(lesson, batch_size);
    const size_t workspace_floats = bias_grad_workspace_floats(batch_size, o.widest_layer());  // two-pass bias gradient
    const long steps = long(cuda_teach::ceil_div<size_t>(size_t(samples), size_t(batch_size)));
    lesson.require_fits(shape, extra_device_bytes(lesson, batch_size, steps));  // exits if it cannot fit
    HalfMlp<float> net = allocate_initialized_model<__half, float>(ledger, shape, o.seed);
    float* workspace = ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    BatchPipeline data(lesson, ledger, timer, net.staged_pixels, net.staged_labels, {.batch = batch_size});
    DeviceLosses losses(ledger);
    const cudaStream_t compute = data.compute();
    // mixed: lesson 05's dynamic loss scaling, its state on the device.
    GradScalerState* scaler = ledger.allocate<GradScalerState>(MemoryCategory::workspace, "loss scaler state", 1);
    const GradScalerOptions scaling;
    init_grad_scaler(scaler, scaling, compute);
    const std::vector<GradientTensor> gradients = gradient_tensors(net);

    long step = 0;
    for (int epoch = 1; step < steps; ++epoch) {  // passes over the data until `steps` (the last may stop early)
        timer.begin_epoch(epoch);
        losses.start_epoch(compute);
        data.start_epoch(epoch, std::min<size_t>(batch_count(lesson.data.train.count, batch_size), steps - step));
        for (size_t b = 0; b < data.batches(); ++b) {
            const BatchPipeline::DeviceBatch batch = data.wait_for_batch(b);  // rule 3: after its copy
            const int rows = batch.rows;
            {  // uint8 → fp16 on the device, (p / 255 − mean) / std: 4 pixels per thread
                auto t = timer.scope(Phase::normalize, compute);
                const size_t n = size_t(rows) * kMnistPixels;
                normalize_pixels_kernel<true, __half><<<grid_for_4_per_thread(n, 256), 256, 0, compute>>>(
                    n, batch.pixels, net.input, kMnistMean, kMnistStd);
                CUDA_CHECK(cudaGetLastError());
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward_fastest_kernels(net, rows, compute);  // fp16 on tensor cores
            }
            {  // softmax-CE in fp32 from the fp16 logits; dlogits = scale · (p − onehot) / rows, stored in fp16
                auto t = timer.scope(Phase::loss, compute);
                const auto* logits = net.layers.back().output;
                softmax_cross_entropy(logits, batch.labels, net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses, &scaler->scale, compute);
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
                if (scaler != nullptr) {  // one launch unscales every gradient and raises found_inf
                    unscale_and_check(gradients.data(), int(gradients.size()), scaler, compute);
                    // The scale's state machine, on the device (one thread): halve and skip the step on inf/NaN,
                    // double after growth_interval clean steps; the optimizer reads the verdict from `scaler`.
                    update_grad_scaler_kernel<<<1, 1, 0, compute>>>(scaler, scaling, float(o.beta1), float(o.beta2));
                    CUDA_CHECK(cudaGetLastError());
                }
                optimizer_step(net, o, scheduled_lr(o.lr_schedule, lr, step, steps), int(step + 1), UpdateCounters{},
                               scaler, compute);
            }
            ++step;
            data.prefetch_next(b);  // queue the next batch's copy now
        }
        losses.copy_epoch_sum(timer, compute);
        timer.end_epoch();  // synchronizes the device
    }
    SweepPoint result = sweep_point(lesson, batch_size, lr, steps, timer.total());  // per step: copy, kernels, ...
    result.test_accuracy = lesson.evaluate_test_set(net.correct, test_set_evaluator(net), shape.batch, compute);
    result.memory = ledger.snapshot();
    if (parameters != nullptr) *parameters = download_parameters(ledger, net);
    return result;
}

int train(int argc, char** argv) {
    set_cpu_backend_device_memory();  // on the CPU backend: 256 MiB, so that the largest batch is found in seconds
    SweepFlags flags;                 // --batches, --samples, --lr-scaling, --no-largest (batch_sweep.h)
    Lesson lesson(argc, argv, "lesson07_batch_size",
                  "batch size: samples/s, step time and memory against the batch, and the largest batch that fits",
                  [&](Cli& cli) { flags.add(cli); });
    require_adamw_or_exit(lesson);
    const long samples = flags.samples_or_all(lesson);  // (also in the JSON config)
    lesson.upload_test_set();
    const int largest = largest_batch_that_fits_or_print(lesson, samples);  // (--batch's must fit, or exit 2)
    if (!flags.skip_largest && largest > 0) {
        prove_largest_batch(lesson, largest, flags.lr_scaling, train_run);  // allocated and stepped, then freed
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
    }
    run_sweep(lesson, flags.batches, largest, samples, flags.lr_scaling, train_run);
    return lesson.finish("time per phase at --batch " + std::to_string(lesson.options.batch) + ", " +
                         std::to_string(samples) + " samples");
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
