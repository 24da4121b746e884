// lessons/07_batch_size/main.cu — Lesson 07: batch size. The pipeline is lesson 05's (mixed precision, tensor
// cores, loss scaling, pinned prefetched copies); what changes is the batch.
//
// What this lesson does:
//   * trains the same number of samples at each batch size of --batches (16 … 8192 by default, and the largest
//     that fits) and prints, per batch: samples/s, the time of a step split into the copy, the kernels, the wait
//     for input, and the host's own time per step (enqueueing launches: when it is about as long as the kernels,
//     the GPU waits for the host — the step is launch-bound), peak device memory by category, and the test accuracy
//     after those samples. Bigger batches are faster per sample, but not free: memory grows linearly and fewer
//     steps see the same samples;
//   * the learning rate is scaled with the batch (--lr-scaling: sqrt by default, lr·√(B/128): Adam's update size does
//     not grow with the batch, so linear scaling overshoots; README);
//   * finds the largest batch that fits from the ledger's exact prediction and cudaMemGetInfo (usable_device_bytes:
//     free memory minus a stated margin), capped by what the kernels' int indexing allows (max_indexable_batch),
//     then proves it by allocating that model and running a step. A --batch that does not fit gets one message
//     naming the category that overflows and the largest batch that does.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lessons/batch_pipeline.h"  // lesson 03's data path (loader thread, pinned slots, async copies) as a class
#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"

#include "common/reference_mlp.h"  // batch_count
#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
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

struct SweepPoint {
    int batch = 0;
    double lr = 0;
    long steps = 0;
    long samples = 0;
    double wall_ms = 0;                                            // training, all steps
    double copy_ms = 0, compute_ms = 0, wait_ms = 0, host_ms = 0;  // per step
    double test_accuracy = 0;
    MemorySnapshot memory;
};

// The device buffers one step needs besides the model (the same for every batch size of the sweep).
size_t extra_device_bytes(const Lesson& lesson, int batch, long steps) {
    return bias_grad_workspace_floats(batch, lesson.options.widest_layer()) * sizeof(float) + sizeof(GradScalerState) +
           size_t(steps) * sizeof(float) + 64;
}

ModelShape shape_at(const Lesson& lesson, int batch) {
    ModelShape shape = half_model_shape(lesson, Precision::mixed, BatchPipeline::kSlots);
    shape.batch = batch;
    return shape;
}

double scaled_lr(double lr, int batch, const std::string& rule) {
    if (rule == "sqrt") return lr * std::sqrt(batch / 128.0);
    if (rule == "linear") return lr * (batch / 128.0);
    return lr;
}

// Trains `samples` samples (whole batches; the last one may be partial) at `batch` with lesson 05's mixed-precision
// step, its buffers in `ledger` and its phases in `timer`, and evaluates the test set.
// `parameters`: if not null, receives the final weights (for finish()'s checksum).
SweepPoint train_at(Lesson& lesson, int batch, long samples, double lr, const GradScalerOptions& scaling,
                    MemoryLedger& ledger, PhaseTimer& timer, std::vector<std::vector<float>>* parameters = nullptr) {
    const TrainOptions& o = lesson.options;
    const size_t per_epoch = batch_count(lesson.data.train.count, batch);
    const long steps = long(cuda_teach::ceil_div<size_t>(size_t(samples), size_t(batch)));
    const ModelShape shape = shape_at(lesson, batch);
    lesson.require_fits(shape, extra_device_bytes(lesson, batch, steps));
    HalfMlp<float> net = allocate_model<__half, float>(ledger, shape, o.seed);
    const size_t workspace_floats = bias_grad_workspace_floats(batch, o.widest_layer());  // two-pass bias gradient
    float* workspace = ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    BatchPipeline data(lesson, ledger, timer, net.staged_pixels, net.staged_labels, false, batch);  // lesson 03's
    DeviceLosses losses(ledger);
    const cudaStream_t compute = data.compute();
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
            {
                auto t = timer.scope(Phase::normalize, compute);
                normalize_pixels(input.pixels, net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, compute);
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
    point.test_accuracy = lesson.evaluate_test_set(net.correct, evaluate_with(net), batch, compute);
    point.memory = ledger.snapshot();
    if (parameters != nullptr) *parameters = download_parameters(ledger, net);
    return point;
}

int train(int argc, char** argv) {
#if defined(CUDA_TEACH_CPU)
    setenv("CUDA_CPU_MEMORY", kCpuDeviceMemory, 0);  // before the first CUDA call reads it; an explicit one wins
#endif
    std::vector<int> batches = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
    long samples_flag = 0;
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
    samples_flag = samples_int > 0 ? samples_int : long(lesson.data.train.count);
    GradScalerOptions scaling;
    lesson.add_config("samples_per_batch_size", int64_t(samples_flag));
    lesson.add_config("lr_scaling", lr_scaling);
    lesson.upload_test_set();
    // --batch: the run whose tables finish() prints. It must fit: if not, one message naming the category that
    // overflows and the largest batch that fits, exit 2 (Lesson::require_fits).
    const long main_steps = long(cuda_teach::ceil_div<size_t>(size_t(samples_flag), size_t(o.batch)));
    lesson.require_fits(shape_at(lesson, o.batch), extra_device_bytes(lesson, o.batch, main_steps));

    // The largest batch that fits, from the exact prediction and what cudaMemGetInfo says is free.
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t usable = usable_device_bytes(free_bytes, total_bytes);
    const int largest = largest_batch_that_fits(shape_at(lesson, 1), extra_device_bytes(lesson, 1 << 20, 1 << 20),
                                                usable, max_indexable_batch(o.layer_sizes()));
    char line[480];
    std::snprintf(line, sizeof line,
                  "device memory: %s free of %s, %s usable after the margin (1/32 of the total + up to 64 MiB, for "
                  "the CUDA context and allocator rounding)%s\nthe largest batch that fits: %d (the ledger's "
                  "prediction; activations and input staging grow with the batch)\n"
                  "each batch size trains on the same %ld samples (--samples)\n\n",
                  format_bytes(free_bytes).c_str(), format_bytes(total_bytes).c_str(), format_bytes(usable).c_str(),
                  lesson.on_cpu_backend() ? " — CPU backend: emulated capacity (CUDA_CPU_MEMORY)" : "", largest,
                  samples_flag);
    print_flushed(line);

    // The proof, first, while nothing but the test set is allocated: the model at the largest batch, one step.
    if (!skip_largest && largest > 0) {  // the proof: allocate the largest batch's model and run one step
        MemoryLedger proof_ledger;
        PhaseTimer proof_timer;
        const long proof_samples = long(std::min<size_t>(size_t(largest), lesson.data.train.count));
        const SweepPoint p = train_at(lesson, largest, proof_samples, scaled_lr(o.lr, largest, lr_scaling), scaling,
                                      proof_ledger, proof_timer);
        std::snprintf(line, sizeof line,
                      "the largest batch, %d, allocated and stepped: %s of device memory at its peak (%s usable); "
                      "its step used %ld rows (the training images there are)\n\n",
                      largest, format_bytes(p.memory.total[int(MemorySpace::device)].peak).c_str(),
                      format_bytes(usable).c_str(), p.samples);
        print_flushed(line);
        lesson.add_result("largest_batch_peak_device_bytes", int64_t(p.memory.total[int(MemorySpace::device)].peak));
    }

    std::vector<int> sweep;
    for (const int b : batches) {
        if (size_t(b) > lesson.data.train.count || b > largest) continue;  // said in the README and below
        sweep.push_back(b);
    }
    if (std::find(sweep.begin(), sweep.end(), o.batch) == sweep.end()) sweep.push_back(o.batch);  // finish()'s run
    std::sort(sweep.begin(), sweep.end());
    sweep.erase(std::unique(sweep.begin(), sweep.end()), sweep.end());
    TextTable table({"batch", "lr", "steps", "samples/s", "ms/step", "copy", "kernels", "input wait", "host",
                     "peak memory", "activations", "test acc"},
                    "rrrrrrrrrrrr");
    std::vector<RunReport::Row> rows;
    for (const int b : sweep) {
        MemoryLedger point_ledger;
        PhaseTimer point_timer;
        const bool is_main = b == o.batch;
        MemoryLedger& ledger = is_main ? lesson.ledger : point_ledger;
        PhaseTimer& timer = is_main ? lesson.timer : point_timer;
        std::vector<std::vector<float>> parameters;
        const SweepPoint p = train_at(lesson, b, samples_flag, scaled_lr(o.lr, b, lr_scaling), scaling, ledger, timer,
                                      is_main ? &parameters : nullptr);
        if (is_main) {  // finish()'s run: its weights and its accuracy are the lesson's result
            lesson.set_final_parameters(std::move(parameters));
            lesson.set_final_test_accuracy(p.test_accuracy);
        }
        const double samples_per_s = p.wall_ms > 0 ? 1000.0 * double(p.samples) / p.wall_ms : 0.0;
        const double ms_per_step = p.wall_ms / double(p.steps);
        const size_t peak = p.memory.total[int(MemorySpace::device)].peak;
        const size_t activations = p.memory.usage(MemorySpace::device, MemoryCategory::activations).peak;
        table.add_row({std::to_string(b), fixed(p.lr, 5), std::to_string(p.steps), fixed(samples_per_s, 0),
                       fixed(ms_per_step, 3), fixed(p.copy_ms, 3), fixed(p.compute_ms, 3), fixed(p.wait_ms, 3),
                       fixed(p.host_ms, 3), format_bytes(peak), format_bytes(activations),
                       fixed(100.0 * p.test_accuracy, 2) + "%"});
        rows.push_back({{"batch", int64_t(b)},
                        {"lr", p.lr},
                        {"steps", int64_t(p.steps)},
                        {"samples_per_second", samples_per_s},
                        {"ms_per_step", ms_per_step},
                        {"copy_ms_per_step", p.copy_ms},
                        {"compute_ms_per_step", p.compute_ms},
                        {"input_wait_ms_per_step", p.wait_ms},
                        {"host_gap_ms_per_step", p.host_ms},
                        {"peak_device_bytes", int64_t(peak)},
                        {"activation_peak_bytes", int64_t(activations)},
                        {"test_accuracy", p.test_accuracy}});
        std::snprintf(line, sizeof line, "batch %5d: %8.0f samples/s, test %.2f%%\n", b, samples_per_s,
                      100.0 * p.test_accuracy);
        print_flushed(line);
    }
    std::string sweep_text = "\n";  // appended piece by piece (g++ 12's -Wrestrict misreads "literal" + string)
    sweep_text += std::to_string(samples_flag) + " training samples at each batch size (";
    sweep_text += lesson.on_cpu_backend() ? "CPU timings" : "CUDA events";
    sweep_text +=
        "; per step: copy on the copy stream, kernels on the compute stream, input wait = the compute stream waiting "
        "for its copy, host = the host's own work per step):\n";
    print_flushed(sweep_text + table.render());
    lesson.add_result("batch_sweep", rows);
    lesson.add_result("largest_batch_that_fits", int64_t(largest));

    return lesson.finish("time per phase at --batch " + std::to_string(o.batch) + ", " + std::to_string(samples_flag) +
                         " samples");
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
