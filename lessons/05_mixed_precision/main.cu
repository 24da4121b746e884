// lessons/05_mixed_precision/main.cu — Lesson 05: half precision done right. The data path is lesson 04's.
//
// What changes from lesson 04:
//   * the model runs in fp16: weights (a working copy), activations and activation gradients are __half, and the
//     GEMMs run on tensor cores (mma.sync m16n8k16, kernels/hgemm.cuh): fp16 products, fp32 accumulation;
//   * fp32 master weights take the optimizer's update, and the same kernel writes the fp16 copy the next step uses
//     (an update of lr·g is far below fp16's spacing near a weight's value: applied to an fp16 weight it rounds away);
//   * dynamic loss scaling (PyTorch's GradScaler, kernels/loss_scaling.cuh): the loss gradient is multiplied by a
//     scale (2^16 to start) so that small gradients do not flush to zero in fp16; after backward one kernel unscales
//     every fp32 gradient and raises a device flag on inf/NaN; then the step is skipped and the scale halves; after
//     2000 clean steps in a row it doubles. Nothing of this needs the host to wait;
//   * --precision all (the default) first trains the same model three wrong-or-slower ways on the same seed — fp32
//     (lesson 04), fp16-pure, fp16-weights — and prints them side by side with mixed (lessons/mixed_precision.h).
// Lesson 04's --resident and its GEMM staircase table are gone (the staircase of this lesson's GEMM is in `bench`).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "lessons/batch_loader.h"
#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"

#include "common/reference_mlp.h"  // epoch_order: the batch order the reference trainer uses
#include "kernels/bias_grad.cuh"
#include "kernels/evaluate.cuh"
#include "kernels/gemm.cuh"
#include "kernels/hgemm.cuh"
#include "kernels/loss_scaling.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

constexpr int kSlots = 2;  // staging buffers: one is copied (and read by the kernels) while the loader fills the other
constexpr long kCountEvery = 10;  // the optimizer counts updates that rounded away on steps 0, 10, 20, ...

// What a run leaves for the side-by-side table.
struct RunResult {
    Precision precision = Precision::mixed;
    EpochMetrics last;                  // the last epoch's figures
    double seconds = 0;                 // training wall time, all epochs
    uint64_t updates = 0, stalled = 0;  // weight updates computed non-zero, and those that rounded away
    int skipped_steps = 0;              // mixed: steps skipped for inf/NaN gradients
    float final_scale = 0;              // mixed: the loss scale at the end
    UnderflowProbe probe;
    MemorySnapshot memory;
};

// The model-dependent calls, one spelling for every precision, so that the loop below reads as lesson 04's.
void forward(Mlp& net, int rows, cudaStream_t stream) {
    forward_fast(net, rows, kFastestGemm, stream);  // lesson 04: fp32, GEMM step 6
}
template <typename Grad>
void forward(HalfMlp<Grad>& net, int rows, cudaStream_t stream) {
    forward_half(net, rows, kFastestHgemm, stream);  // fp16 on tensor cores
}
void backward(Mlp& net, int rows, float* workspace, size_t workspace_floats, cudaStream_t stream) {
    backward_fast(net, rows, kFastestGemm, workspace, workspace_floats, stream);
}
template <typename Grad>
void backward(HalfMlp<Grad>& net, int rows, float* workspace, size_t workspace_floats, cudaStream_t stream) {
    backward_half(net, rows, kFastestHgemm, workspace, workspace_floats, stream);
}

// Prints the scale changes the device logged since the last call, and the running count of skipped steps.
void print_scaler_news(MemoryLedger& ledger, const GradScalerState* device_state, int* changes_printed,
                       cudaStream_t stream) {
    GradScalerState state;
    ledger.copy_to_host(&state, device_state, sizeof state, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // pageable destination
    std::string text;
    const int logged = std::min(state.change_count, kGradScalerLogSize);
    for (int i = *changes_printed; i < logged; ++i) {
        const ScaleChange& c = state.changes[i];
        char line[160];
        std::snprintf(line, sizeof line, "  loss scale %g → %g at step %d (%s)\n", c.old_scale, c.new_scale,
                      c.iteration + 1, c.grew ? "2000 clean steps in a row: grow" : "inf/NaN gradient: step skipped");
        text += line;
    }
    *changes_printed = logged;
    char line[160];
    std::snprintf(line, sizeof line, "  loss scale now %g; steps skipped so far: %d%s\n", state.scale,
                  state.skipped_steps, state.change_count > logged ? " (more changes than the log keeps)" : "");
    print_flushed(text + line);
}

// One training run of `precision` (Net: Mlp for fp32, HalfMlp<__half> for fp16-pure, HalfMlp<float> for the other
// two), its buffers in `ledger`, its phases in `timer`. The run lesson.finish() reports is the one without a label.
template <typename Net>
RunResult train_run(Lesson& lesson, Precision precision, bool main_run, MemoryLedger& ledger, PhaseTimer& timer,
                    const GradScalerOptions& scaling, cudaStream_t compute, cudaStream_t copy) {
    const TrainOptions& o = lesson.options;
    const MnistSplit& train_set = lesson.data.train;
    const bool mixed = precision == Precision::mixed;
    lesson.set_run_label(main_run ? "" : precision_name(precision));

    const ModelShape shape = half_model_shape(lesson, precision, kSlots);
    const std::vector<int> sizes = o.layer_sizes();
    const int widest = *std::max_element(sizes.begin() + 1, sizes.end());
    const size_t workspace_floats = bias_grad_workspace_floats(o.batch, widest);  // the two-pass bias gradient's
    lesson.require_fits(shape, workspace_floats * sizeof(float) + sizeof(GradScalerState) +
                                   size_t(lesson.total_steps()) * sizeof(float) + 64);
    Net net = allocate_model<typename Net::ParamType, typename Net::GradType>(ledger, shape, o.seed);
    lesson.upload_test_set();
    float* workspace = ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    double* loss_sum = ledger.allocate<double>(MemoryCategory::workspace, "epoch loss sum", 1);
    double* loss_sum_host =
        ledger.allocate_host<double>(MemoryCategory::workspace, "epoch loss sum (host)", 1, HostMemory::pinned);
    // Every step's loss, copied on the device (no host wait): the test compares the first 20 with the reference.
    float* step_losses = ledger.allocate<float>(MemoryCategory::workspace, "step losses", size_t(lesson.total_steps()));
    const UpdateCounters counters{ledger.allocate<unsigned long long>(MemoryCategory::workspace, "update counters", 2)};
    CUDA_CHECK(cudaMemsetAsync(counters.device, 0, 2 * sizeof(unsigned long long), compute));
    // mixed: the scaler's state lives on the device; the loss kernel reads the scale from there.
    GradScalerState* scaler = nullptr;
    std::vector<GradientTensor> gradients;
    if constexpr (std::is_same_v<Net, HalfMlp<float>>) {
        if (mixed) {
            scaler = ledger.allocate<GradScalerState>(MemoryCategory::workspace, "loss scaler state", 1);
            init_grad_scaler(scaler, scaling, compute);
            gradients = gradient_tensors(net);
        }
    }
    const float* loss_scale = scaler != nullptr ? &scaler->scale : nullptr;  // null: the loss is not scaled
    int scale_changes_printed = 0;

    // Kernels go to `compute`, copies to `copy`. copied[s]: the copy into slot s is done. consumed[s]: the kernels
    // that read device slot s are done.
    cudaEvent_t copied[kSlots], consumed[kSlots];
    for (int s = 0; s < kSlots; ++s) {
        CUDA_CHECK(cudaEventCreateWithFlags(&copied[s], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&consumed[s], cudaEventDisableTiming));
    }
    BatchLoader loader(ledger, train_set, o.batch, kSlots);
    const auto slot_pixels = [&](int s) { return net.staged_pixels + size_t(s) * o.batch * kMnistPixels; };
    const auto slot_labels = [&](int s) { return net.staged_labels + size_t(s) * o.batch; };
    // Queues the copy of a gathered batch into device slot batch.slot, on the copy stream (lesson 03's rules).
    const auto prefetch = [&](const BatchLoader::Batch& batch) {
        const int s = batch.slot;
        CUDA_CHECK(cudaStreamWaitEvent(copy, consumed[s]));  // rule 1: its last readers are done
        const size_t pixel_bytes = size_t(batch.rows) * kMnistPixels;
        {
            auto t = timer.scope(Phase::h2d, copy, pixel_bytes + batch.rows);
            ledger.copy_to_device(slot_pixels(s), batch.pixels, pixel_bytes, copy);  // pinned: returns at once
            ledger.copy_to_device(slot_labels(s), batch.labels, batch.rows, copy);
        }
        CUDA_CHECK(cudaEventRecord(copied[s], copy));
        loader.release(s, copied[s]);  // rule 2: the loader refills host slot s only after the copy read it
    };
    // The test set, a batch at a time, through the same forward pass (Lesson::finish_epoch calls it).
    const Lesson::EvaluateBatch evaluate = [&](const uint8_t* pixels, const uint8_t* labels, int rows, int* correct,
                                               cudaStream_t s) {
        normalize_pixels(pixels, net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, s);
        forward(net, rows, s);
        count_correct(net.layers.back().output, labels, correct, rows, kMnistClasses, nullptr, s);
    };

    RunResult result;
    result.precision = precision;
    long step = 0;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        timer.begin_epoch(epoch);
        std::vector<uint32_t> order;
        {
            auto t = timer.scope(Phase::host);
            order = epoch_order(o.seed, epoch, train_set.count);
        }
        CUDA_CHECK(cudaMemsetAsync(loss_sum, 0, sizeof(double), compute));
        loader.start_epoch(order);
        BatchLoader::Batch first;
        {
            auto t = timer.scope(Phase::host);  // the host waits for the loader thread's first batch
            first = loader.next();
        }
        prefetch(first);
        for (size_t b = 0; b < lesson.batches_per_epoch(); ++b) {
            const int rows = lesson.rows_in_batch(b);
            const int s = int(b % kSlots);
            timer.begin(Phase::input_wait, compute);  // rule 3: the kernels read slot s only after its copy
            CUDA_CHECK(cudaStreamWaitEvent(compute, copied[s]));
            timer.end(Phase::input_wait, compute);
            {
                auto t = timer.scope(Phase::normalize, compute);  // uint8 → fp16 (or fp32) in one pass
                normalize_pixels(slot_pixels(s), net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd,
                                 compute);
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward(net, rows, compute);
            }
            {  // softmax-CE in fp32 from the (fp16) logits; dlogits = scale · (p − onehot) / rows, stored in fp16
                auto t = timer.scope(Phase::loss, compute);
                const auto* logits = net.layers.back().output;
                softmax_cross_entropy(logits, slot_labels(s), net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses, loss_scale, compute);
                count_correct(logits, slot_labels(s), net.correct, rows, kMnistClasses, nullptr, compute);
                accumulate_loss(net.mean_loss, rows, loss_sum, compute);
                CUDA_CHECK(cudaMemcpyAsync(step_losses + step, net.mean_loss, sizeof(float), cudaMemcpyDeviceToDevice,
                                           compute));
                CUDA_CHECK(cudaEventRecord(consumed[s], compute));  // the last reader of slot s in this step
            }
            {
                auto t = timer.scope(Phase::backward, compute);
                backward(net, rows, workspace, workspace_floats, compute);
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                if (scaler != nullptr) {  // one launch unscales every gradient and raises found_inf; then the
                    unscale_and_check(gradients.data(), int(gradients.size()), scaler, compute);  // scale's update
                    update_grad_scaler(scaler, scaling, float(o.beta1), float(o.beta2), compute);
                }
                // Counting lost updates costs a block reduction per launch: every kCountEvery-th step is a sample.
                const UpdateCounters count = step % kCountEvery == 0 ? counters : UpdateCounters{};
                optimizer_step(net, o, lesson.lr_at(step), int(step + 1), count, scaler, compute);
            }
            ++step;
            if (b + 1 < lesson.batches_per_epoch()) {  // queue the next batch's copy now
                BatchLoader::Batch next;
                {
                    auto t = timer.scope(Phase::host);
                    next = loader.next();
                }
                prefetch(next);
            }
        }
        {
            auto t = timer.scope(Phase::d2h, compute, sizeof(double));
            ledger.copy_to_host(loss_sum_host, loss_sum, sizeof(double), compute);
        }
        const EpochTiming& timing = timer.end_epoch();  // synchronizes the device: *loss_sum_host is written
        result.last = lesson.finish_epoch(epoch, timing, *loss_sum_host, net.correct, evaluate, compute);
        result.seconds += result.last.seconds;
        if (scaler != nullptr) print_scaler_news(ledger, scaler, &scale_changes_printed, compute);
    }

    unsigned long long counts[2];
    ledger.copy_to_host(counts, counters.device, sizeof counts, compute);
    CUDA_CHECK(cudaStreamSynchronize(compute));
    result.updates = counts[0];
    result.stalled = counts[1];
    if (scaler != nullptr) {
        GradScalerState state;
        ledger.copy_to_host(&state, scaler, sizeof state, compute);
        CUDA_CHECK(cudaStreamSynchronize(compute));
        result.skipped_steps = state.skipped_steps;
        result.final_scale = state.scale;
    }
    // The underflow probe: this run's final weights, the first test batch, gradients in fp32 and in fp16.
    std::vector<std::vector<float>> parameters = download_parameters(ledger, net);
    const int probe_rows = int(std::min<size_t>(o.batch, lesson.data.test.count));
    const float probe_scale = mixed ? result.final_scale : float(scaling.init_scale);
    result.probe = probe_gradient_underflow(lesson, parameters, lesson.test_pixels(), lesson.test_labels(), probe_rows,
                                            probe_scale, compute);
    if (main_run) {
        std::vector<float> losses(size_t(lesson.total_steps()));
        ledger.copy_to_host(losses.data(), step_losses, losses.size() * sizeof(float), compute);
        CUDA_CHECK(cudaStreamSynchronize(compute));
        lesson.add_series("step_losses", std::vector<double>(losses.begin(), losses.end()));
        lesson.set_final_parameters(std::move(parameters));
    }
    result.memory = ledger.snapshot();
    for (int s = 0; s < kSlots; ++s) {
        CUDA_CHECK(cudaEventDestroy(copied[s]));
        CUDA_CHECK(cudaEventDestroy(consumed[s]));
    }
    return result;
}

RunResult run(Lesson& lesson, Precision precision, bool main_run, const GradScalerOptions& scaling,
              cudaStream_t compute, cudaStream_t copy) {
    MemoryLedger side_ledger;  // a comparison run's buffers: its own table, freed before the next run
    PhaseTimer side_timer;
    MemoryLedger& ledger = main_run ? lesson.ledger : side_ledger;
    PhaseTimer& timer = main_run ? lesson.timer : side_timer;
    switch (precision) {
        case Precision::fp32:
            return train_run<Mlp>(lesson, precision, main_run, ledger, timer, scaling, compute, copy);
        case Precision::fp16_pure:
            return train_run<HalfMlp<__half>>(lesson, precision, main_run, ledger, timer, scaling, compute, copy);
        case Precision::fp16_weights:
        case Precision::mixed:
            return train_run<HalfMlp<float>>(lesson, precision, main_run, ledger, timer, scaling, compute, copy);
    }
    throw std::logic_error("run: unknown precision");
}

// The model's own memory (what precision changes); input staging and workspace are the same for every run.
constexpr MemoryCategory kModelCategories[] = {MemoryCategory::parameters, MemoryCategory::gradients,
                                               MemoryCategory::optimizer_state, MemoryCategory::master_weights,
                                               MemoryCategory::activations};

// With `decimals` decimals, or two significant digits where those would show a nonzero share as 0 (0.00041%).
std::string percent(double fraction, int decimals = 2) {
    const double value = 100.0 * fraction;
    char text[32];
    if (value != 0 && std::fabs(value) < 0.5 * std::pow(10.0, -decimals)) {
        std::snprintf(text, sizeof text, "%.2g%%", value);
    } else {
        std::snprintf(text, sizeof text, "%.*f%%", decimals, value);
    }
    return text;
}

// The runs side by side: what each precision costs in accuracy, lost updates and lost gradients, time and memory.
void print_comparison(Lesson& lesson, const std::vector<RunResult>& runs) {
    TextTable table({"precision", "test acc", "train loss", "updates rounded away", "fp16 grads → 0 (no scaling)",
                     "(× scale)", "skipped steps", "s/epoch"},
                    "lrrrrrrr");
    std::vector<RunReport::Row> rows;
    for (const RunResult& r : runs) {
        const double stalled = r.updates > 0 ? double(r.stalled) / double(r.updates) : 0.0;
        char scale[48], seconds[32];
        std::snprintf(scale, sizeof scale, "%s (×%g)", percent(r.probe.scaled, 3).c_str(), r.probe.scale);
        std::snprintf(seconds, sizeof seconds, "%.2f", r.seconds / lesson.options.epochs);
        table.add_row({precision_name(r.precision), percent(r.last.test_accuracy),
                       std::to_string(r.last.train_loss).substr(0, 6), percent(stalled, 3),
                       percent(r.probe.unscaled, 3), scale,
                       r.precision == Precision::mixed ? std::to_string(r.skipped_steps) : "-", seconds});
        size_t model_peak = 0;
        for (const MemoryCategory c : kModelCategories) model_peak += r.memory.usage(MemorySpace::device, c).peak;
        rows.push_back({{"mode", std::string(precision_name(r.precision))},
                        {"test_accuracy", r.last.test_accuracy},
                        {"final_train_loss", r.last.train_loss},
                        {"stalled_update_fraction", stalled},
                        {"underflow_fraction_unscaled", r.probe.unscaled},
                        {"underflow_fraction_scaled", r.probe.scaled},
                        {"overflow_fraction_scaled", r.probe.overflowed_scaled},
                        {"probe_scale", double(r.probe.scale)},
                        {"skipped_steps", int64_t(r.skipped_steps)},
                        {"seconds_per_epoch", r.seconds / lesson.options.epochs},
                        {"peak_device_bytes", int64_t(model_peak)}});
    }
    print_flushed(
        "\nthe precisions side by side (same seed, same batches" +
        std::string(lesson.on_cpu_backend() ? "; CPU timings" : "") + "):\n" + table.render() +
        "  updates rounded away: of the weight updates that change the weight in fp32, the fraction that left\n"
        "    the stored weight unchanged: fp16 storage rounded them away (every 10th step counted; 0 by\n"
        "    construction where the optimizer stores fp32: fp32 and mixed).\n"
        "  fp16 grads → 0: on the first test batch, with the run's final weights, of the weight and bias\n"
        "    gradient elements that are non-zero in fp32, the fraction that are zero in fp16, without and\n"
        "    with the loss scale.\n");

    // Memory by category: the halving of parameters and activations, and what the master weights add back.
    std::vector<std::string> headers = {"category"};
    std::string align = "l";
    for (const RunResult& r : runs) headers.push_back(precision_name(r.precision)), align += 'r';
    TextTable memory(headers, align);
    std::vector<size_t> sums(runs.size(), 0);
    for (const MemoryCategory c : kModelCategories) {
        std::vector<std::string> cells = {memory_category_name(c)};
        for (size_t i = 0; i < runs.size(); ++i) {
            const size_t peak = runs[i].memory.usage(MemorySpace::device, c).peak;
            cells.push_back(format_bytes(peak));
            sums[i] += peak;
        }
        memory.add_row(cells);
    }
    memory.add_rule();
    std::vector<std::string> total = {"total"};
    for (const size_t sum : sums) total.push_back(format_bytes(sum));
    memory.add_row(total);
    print_flushed("\npeak device memory of the model, by category:\n" + memory.render());
    lesson.add_result("precision_runs", rows);
}

int train(int argc, char** argv) {
    std::string precision_flag = "all";
    GradScalerOptions scaling;
    double init_scale = scaling.init_scale, growth = scaling.growth_factor, backoff = scaling.backoff_factor;
    int interval = scaling.growth_interval;
    Lesson lesson(
        argc, argv, "lesson05_mixed_precision",
        "half precision done right: fp32 master weights, tensor cores by hand (mma.sync), dynamic loss "
        "scaling",
        [&](Cli& cli) {
            cli.add_choice("--precision", &precision_flag, {"all", "mixed", "fp32", "fp16-pure", "fp16-weights"},
                           "all: train fp32, fp16-pure, fp16-weights, then mixed, and compare them");
            cli.add_double("--init-scale", &init_scale, "S", "the loss scale to start with", 1.0, 1e30);
            cli.add_double("--growth-factor", &growth, "F", "the scale's growth after a clean interval", 1.0, 1e3,
                           false);
            cli.add_double("--backoff-factor", &backoff, "F", "the scale's factor after an inf/NaN step", 0.0, 1.0,
                           false);
            cli.add_int("--growth-interval", &interval, "N", "clean steps in a row before the scale grows");
        },
        kCpuTrainImages / 2);  // --precision all trains four models: half the usual CPU subset
    require_adamw_or_exit(lesson);
    scaling.init_scale = float(init_scale);
    scaling.growth_factor = float(growth);
    scaling.backoff_factor = float(backoff);
    scaling.growth_interval = interval;
    lesson.add_config("precision", precision_flag);
    lesson.add_config("init_scale", init_scale);
    lesson.add_config("growth_factor", growth);
    lesson.add_config("backoff_factor", backoff);
    lesson.add_config("growth_interval", int64_t(interval));

    cudaStream_t compute, copy;
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    std::vector<RunResult> runs;
    if (precision_flag == "all") {  // the three comparisons first, each in its own buffers; mixed last, in full
        for (const Precision p : {Precision::fp32, Precision::fp16_pure, Precision::fp16_weights}) {
            print_flushed(std::string("--- ").append(precision_name(p)).append(" (for comparison)\n"));
            runs.push_back(run(lesson, p, false, scaling, compute, copy));
        }
        print_flushed("--- mixed (the lesson's recipe)\n");
        runs.push_back(run(lesson, Precision::mixed, true, scaling, compute, copy));
    } else {
        runs.push_back(run(lesson, precision_from_name(precision_flag), true, scaling, compute, copy));
    }
    print_comparison(lesson, runs);

    const int status = lesson.finish();
    CUDA_CHECK(cudaStreamDestroy(compute));
    CUDA_CHECK(cudaStreamDestroy(copy));
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
