// lessons/06_activation_checkpointing/main.cu — Lesson 06: activation checkpointing. Lesson 05's pipeline (mixed
// precision, tensor cores, loss scaling, pinned prefetched copies) on a deeper model; what changes is which
// activations the backward pass finds kept and which it computes again.
//
// What changes from lesson 05:
//   * the model is deep: 784 → 16 hidden layers of 1024 → 10 (--hidden changes depth and width), so that the
//     activations kept for the backward pass are worth saving;
//   * --checkpoint sqrt (the default) keeps only the input of every ⌈√L⌉-th layer; the backward pass recomputes one
//     segment at a time into a reusable segment buffer, then runs that segment's backward (lessons/checkpointing.h).
//     --checkpoint every=K keeps every K-th; none is lesson 05's model. The memory of every policy is predicted
//     before anything is allocated, and the ledger's activation peak must come out equal to it;
//   * by default the lesson trains twice on the same seed and batches, none then the policy, and prints them side by
//     side: activation bytes, peak device memory, extra forward FLOPs, time per epoch, the largest batch that fits
//     each, and whether the two runs' losses and final weights are bitwise equal (they must be: the recomputation
//     runs the same kernels on the same inputs). --no-compare trains only the policy;
//   * --precision fp32 runs lesson 04's fp32 kernels instead of lesson 05's mixed precision.
// Lesson 05's comparison of precisions, update counters and underflow probe are gone.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "lessons/batch_loader.h"
#include "lessons/checkpointing.h"
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
constexpr int kDepth = 16, kWidth = 1024;  // the default model: 784 → 16 × 1024 → 10
// The CPU backend runs one GEMM of a 1024-wide layer at batch 128 in about a quarter of a second, some 28 s per
// step of this model, so there the default model is as deep but 256 wide, for one epoch of lesson.h's subset: the
// lesson, training twice to compare, then takes about a minute on 2 cores.
constexpr int kCpuWidth = 256, kCpuEpochs = 1;

// What a run leaves for the side-by-side table.
struct RunResult {
    CheckpointPlan plan;
    EpochMetrics last;            // the last epoch's figures
    double seconds = 0;           // training wall time, all epochs
    MemorySnapshot memory;        // the run's ledger
    size_t predicted_device = 0;  // the prediction of the run's whole device memory (model + the lesson's buffers)
    size_t measured_device = 0;   // the ledger's peak of the same
    int largest_batch = 0;        // from the prediction and cudaMemGetInfo
    std::vector<float> losses;    // every step's mean loss
    std::vector<std::vector<float>> parameters;  // the final weights, fp32 (the masters for mixed)
};

// The model-dependent calls, one spelling for each precision, so that the loop below reads as lesson 05's.
void forward(Mlp& net, int rows, cudaStream_t stream) {
    forward_fast(net, rows, kFastestGemm, stream);  // lesson 04: fp32, GEMM step 6
}
void forward(HalfMlp<float>& net, int rows, cudaStream_t stream) {
    forward_half(net, rows, kFastestHgemm, stream);  // lesson 05: fp16 on tensor cores
}
void backward(Mlp& net, const CheckpointPlan& plan, int rows, float* workspace, size_t workspace_floats,
              cudaStream_t stream) {
    backward_checkpointed(net, plan, rows, kFastestGemm, workspace, workspace_floats, stream);
}
void backward(HalfMlp<float>& net, const CheckpointPlan& plan, int rows, float* workspace, size_t workspace_floats,
              cudaStream_t stream) {
    backward_checkpointed(net, plan, rows, kFastestHgemm, workspace, workspace_floats, stream);
}

// The device memory the lesson allocates next to the model at `batch`: the two-pass bias gradient's workspace, the
// epoch's loss sum, every step's loss, and (mixed) the loss scaler's state.
size_t lesson_buffer_bytes(const Lesson& lesson, Precision precision, int batch) {
    const std::vector<int> sizes = lesson.options.layer_sizes();
    const int widest = *std::max_element(sizes.begin() + 1, sizes.end());
    return bias_grad_workspace_floats(batch, widest) * sizeof(float) + sizeof(double) +
           size_t(lesson.total_steps()) * sizeof(float) + (precision == Precision::mixed ? sizeof(GradScalerState) : 0);
}

ModelShape shape_of(const Lesson& lesson, Precision precision) {
    return half_model_shape(lesson, precision, kSlots);  // fp32: lesson.model_shape(kSlots) as it is
}

// One training run with `policy` (Net: Mlp for fp32, HalfMlp<float> for mixed), its buffers in `ledger`, its phases
// in `timer`. `usable`: what cudaMemGetInfo said the lesson may use, before anything was allocated.
template <typename Net>
RunResult train_run(Lesson& lesson, Precision precision, const CheckpointPolicy& policy, bool main_run,
                    MemoryLedger& ledger, PhaseTimer& timer, size_t usable, cudaStream_t compute, cudaStream_t copy) {
    const TrainOptions& o = lesson.options;
    const MnistSplit& train_set = lesson.data.train;
    lesson.set_run_label(main_run ? "" : policy.name);

    // The plan and its prediction first; refuse what cannot fit before allocating anything.
    const ModelShape shape = shape_of(lesson, precision);
    RunResult result;
    result.plan = plan_checkpoints(shape, policy);
    const size_t test_set_bytes = lesson.data.test.count * (kMnistPixels + 1);  // uploaded by train() already
    const size_t own_bytes = lesson_buffer_bytes(lesson, precision, o.batch);
    const std::string problem = check_checkpointed_fits(shape, policy, own_bytes + test_set_bytes,
                                                        "the test set and the lesson's own buffers", usable);
    if (!problem.empty()) {
        std::fprintf(stderr, "%s: %s\n", lesson.program().c_str(), problem.c_str());
        std::exit(2);
    }
    result.predicted_device = predict_checkpointed_memory(shape, policy).total() + own_bytes;
    result.largest_batch = largest_checkpointed_batch(
        shape, policy, [&](int b) { return lesson_buffer_bytes(lesson, precision, b) + test_set_bytes; }, usable,
        INT_MAX);

    Net net = allocate_checkpointed_model<typename Net::ParamType, typename Net::GradType>(ledger, shape, result.plan,
                                                                                           o.seed);
    const std::vector<int> sizes = o.layer_sizes();
    const int widest = *std::max_element(sizes.begin() + 1, sizes.end());
    const size_t workspace_floats = bias_grad_workspace_floats(o.batch, widest);  // the two-pass bias gradient's
    float* workspace = ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    double* loss_sum = ledger.allocate<double>(MemoryCategory::workspace, "epoch loss sum", 1);
    double* loss_sum_host =
        ledger.allocate_host<double>(MemoryCategory::workspace, "epoch loss sum (host)", 1, HostMemory::pinned);
    float* step_losses = ledger.allocate<float>(MemoryCategory::workspace, "step losses", size_t(lesson.total_steps()));
    // mixed: lesson 05's dynamic loss scaling, its state on the device.
    GradScalerState* scaler = nullptr;
    std::vector<GradientTensor> gradients;
    const GradScalerOptions scaling;
    if constexpr (std::is_same_v<Net, HalfMlp<float>>) {
        scaler = ledger.allocate<GradScalerState>(MemoryCategory::workspace, "loss scaler state", 1);
        init_grad_scaler(scaler, scaling, compute);
        gradients = gradient_tensors(net);
    }
    const float* loss_scale = scaler != nullptr ? &scaler->scale : nullptr;  // null: the loss is not scaled

    // Lesson 03's data path: kernels on `compute`, copies on `copy`. copied[s]: the copy into slot s is done.
    // consumed[s]: the kernels that read device slot s are done.
    cudaEvent_t copied[kSlots], consumed[kSlots];
    for (int s = 0; s < kSlots; ++s) {
        CUDA_CHECK(cudaEventCreateWithFlags(&copied[s], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&consumed[s], cudaEventDisableTiming));
    }
    BatchLoader loader(ledger, train_set, o.batch, kSlots);
    const auto slot_pixels = [&](int s) { return net.staged_pixels + size_t(s) * o.batch * kMnistPixels; };
    const auto slot_labels = [&](int s) { return net.staged_labels + size_t(s) * o.batch; };
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
    // The test set through the same forward pass: the checkpointed model's forward is the ordinary one.
    const Lesson::EvaluateBatch evaluate = [&](const uint8_t* pixels, const uint8_t* labels, int rows, int* correct,
                                               cudaStream_t s) {
        normalize_pixels(pixels, net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, s);
        forward(net, rows, s);
        count_correct(net.layers.back().output, labels, correct, rows, kMnistClasses, nullptr, s);
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
                auto t = timer.scope(Phase::normalize, compute);
                normalize_pixels(slot_pixels(s), net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd,
                                 compute);
            }
            {  // with a policy, most layers write into the segment buffer: only the checkpoints stay
                auto t = timer.scope(Phase::forward, compute);
                forward(net, rows, compute);
            }
            {
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
            {  // segment by segment from the last: recompute it from its checkpoint, then its backward
                auto t = timer.scope(Phase::backward, compute);
                backward(net, result.plan, rows, workspace, workspace_floats, compute);
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                if constexpr (std::is_same_v<Net, HalfMlp<float>>) {  // lesson 05: unscale, check, then AdamW
                    unscale_and_check(gradients.data(), int(gradients.size()), scaler, compute);
                    update_grad_scaler(scaler, scaling, float(o.beta1), float(o.beta2), compute);
                    optimizer_step(net, o, lesson.lr_at(step), int(step + 1), UpdateCounters{}, scaler, compute);
                } else {  // lesson 04's update
                    optimizer_update(net, o, lesson.lr_at(step), int(step + 1), compute);
                }
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
    }

    result.losses.resize(size_t(lesson.total_steps()));
    ledger.copy_to_host(result.losses.data(), step_losses, result.losses.size() * sizeof(float), compute);
    CUDA_CHECK(cudaStreamSynchronize(compute));  // pageable destination
    result.parameters = download_parameters(ledger, net);
    result.memory = ledger.snapshot();
    // The test set lives in the lesson's ledger: the main run's ledger holds it, a comparison run's does not.
    result.measured_device = result.memory.total[int(MemorySpace::device)].peak - (main_run ? test_set_bytes : 0);
    for (int s = 0; s < kSlots; ++s) {
        CUDA_CHECK(cudaEventDestroy(copied[s]));
        CUDA_CHECK(cudaEventDestroy(consumed[s]));
    }
    return result;
}

RunResult run(Lesson& lesson, Precision precision, const CheckpointPolicy& policy, bool main_run, size_t usable,
              cudaStream_t compute, cudaStream_t copy) {
    MemoryLedger side_ledger;  // a comparison run's buffers: its own table, freed before the next run
    PhaseTimer side_timer;
    MemoryLedger& ledger = main_run ? lesson.ledger : side_ledger;
    PhaseTimer& timer = main_run ? lesson.timer : side_timer;
    if (precision == Precision::fp32) {
        return train_run<Mlp>(lesson, precision, policy, main_run, ledger, timer, usable, compute, copy);
    }
    return train_run<HalfMlp<float>>(lesson, precision, policy, main_run, ledger, timer, usable, compute, copy);
}

std::string fixed(double value, int decimals) {
    char text[32];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

std::string plus_percent(double fraction) {  // 0.746 → "+74.6%"
    char text[32];
    std::snprintf(text, sizeof text, "%+.1f%%", 100.0 * fraction);
    return text;
}

// Before training: what each policy would keep, predicted from the shape alone (nothing is allocated for this).
void print_predictions(const Lesson& lesson, Precision precision, const CheckpointPolicy& chosen, size_t usable) {
    const ModelShape shape = shape_of(lesson, precision);
    const int layers = int(shape.layer_sizes.size()) - 1;
    const size_t test_set_bytes = lesson.data.test.count * (kMnistPixels + 1);
    const int sqrt_stride = parse_checkpoint_policy("sqrt", layers).stride;
    std::vector<CheckpointPolicy> policies = {parse_checkpoint_policy("none", layers)};
    for (const int k : {1, 2, 3, sqrt_stride, (layers + 1) / 2, layers, chosen.stride}) {
        const std::string name = "every=" + std::to_string(k);
        const bool seen = std::any_of(policies.begin(), policies.end(), [&](const auto& p) { return p.stride == k; });
        if (k >= 1 && !seen) policies.push_back(parse_checkpoint_policy(name, layers));
    }
    std::sort(policies.begin() + 1, policies.end(), [](const auto& a, const auto& b) { return a.stride < b.stride; });
    const size_t none_bytes = plan_checkpoints(shape, policies[0]).activation_bytes();
    const int indexable = max_indexable_batch(shape.layer_sizes);
    bool past_indexable = false;
    TextTable table({"policy", "activations", "of none", "extra forward", "largest batch", "kept layer inputs"},
                    "lrrrrl");
    for (const CheckpointPolicy& p : policies) {
        const CheckpointPlan plan = plan_checkpoints(shape, p);
        std::string name = p.name;
        if (p.stride == sqrt_stride) name += " (sqrt)";
        if (p.stride == chosen.stride) name += " ←";
        const int largest = largest_checkpointed_batch(
            shape, p, [&](int b) { return lesson_buffer_bytes(lesson, precision, b) + test_set_bytes; }, usable,
            INT_MAX);
        past_indexable = past_indexable || largest > indexable;
        std::string kept = p.stride == 0 ? "all (and every dY)" : std::to_string(plan.kept_inputs.size());
        table.add_row({name, format_bytes(plan.activation_bytes()),
                       fixed(100.0 * double(plan.activation_bytes()) / double(none_bytes), 1) + "%",
                       plus_percent(plan.extra_forward_fraction()),
                       std::to_string(largest) + (largest > indexable ? " *" : ""), kept});
    }
    print_flushed("activation memory of each policy at --batch " + std::to_string(shape.batch) + ", " +
                  std::to_string(layers) + " weight layers, predicted from the shape (" +
                  std::to_string(shape.activation_bytes * 8) +
                  "-bit activations; largest batch: the prediction against " + format_bytes(usable) + " usable):\n" +
                  table.render() +
                  "  extra forward: the forward FLOPs the backward pass recomputes per step, as a share of one "
                  "forward pass.\n" +
                  (past_indexable
                       ? "  * more rows than the kernels can index (int offsets: at most " + std::to_string(indexable) +
                             " rows of the widest layer): there memory is not "
                             "what limits the batch\n"
                       : std::string()) +
                  "\n");
}

// The runs side by side, and whether the policy changed a single bit of the training.
void print_comparison(Lesson& lesson, const std::vector<RunResult>& runs) {
    TextTable table({"policy", "activations now", "peak", "predicted", "device peak", "(predicted)", "extra forward",
                     "s/epoch", "largest batch"},
                    "lrrrrrrrr");
    std::vector<RunReport::Row> rows;
    for (const RunResult& r : runs) {
        const CategoryUsage& activations = r.memory.usage(MemorySpace::device, MemoryCategory::activations);
        const double seconds = r.seconds / lesson.options.epochs;
        table.add_row({r.plan.policy.name, format_bytes(activations.current), format_bytes(activations.peak),
                       format_bytes(r.plan.activation_bytes()), format_bytes(r.measured_device),
                       format_bytes(r.predicted_device), plus_percent(r.plan.extra_forward_fraction()),
                       fixed(seconds, 2), std::to_string(r.largest_batch)});
        rows.push_back({{"policy", r.plan.policy.name},
                        {"activation_peak_bytes", int64_t(activations.peak)},
                        {"predicted_activation_bytes", int64_t(r.plan.activation_bytes())},
                        {"peak_device_bytes", int64_t(r.measured_device)},
                        {"extra_forward_flops_fraction", r.plan.extra_forward_fraction()},
                        {"seconds_per_epoch", seconds},
                        {"largest_batch_that_fits", int64_t(r.largest_batch)}});
        if (activations.peak != r.plan.activation_bytes() || r.measured_device != r.predicted_device) {
            print_flushed("warning: " + r.plan.policy.name + ": the ledger's figures differ from the prediction\n");
        }
    }
    print_flushed("\nthe policies side by side (same seed, same batches" +
                  std::string(lesson.on_cpu_backend() ? "; CPU timings" : "") + "):\n" + table.render() +
                  "  device peak: the run's model and the lesson's buffers (not the test set), from the ledger; "
                  "largest batch: the\n  prediction against what cudaMemGetInfo left usable" +
                  (lesson.on_cpu_backend() ? " (CPU backend: its emulated capacity, CUDA_CPU_MEMORY)" : "") + ".\n");
    lesson.add_result("checkpoint_runs", rows);
    if (runs.size() < 2) return;

    const RunResult &none = runs.front(), &policy = runs.back();
    const double activation_ratio = double(policy.memory.usage(MemorySpace::device, MemoryCategory::activations).peak) /
                                    double(none.memory.usage(MemorySpace::device, MemoryCategory::activations).peak);
    const double time_ratio = none.seconds > 0 ? policy.seconds / none.seconds : 0.0;
    const bool losses_equal = none.losses == policy.losses;  // float ==: bitwise for these (no NaN)
    const bool weights_equal = none.parameters == policy.parameters;
    char line[400];
    std::snprintf(line, sizeof line,
                  "%s against none: %.3f× the activation memory, %.2f× the time per epoch; every step's loss %s, "
                  "the final weights %s\n",
                  policy.plan.policy.name.c_str(), activation_ratio, time_ratio,
                  losses_equal ? "bitwise equal" : "DIFFERENT", weights_equal ? "bitwise equal" : "DIFFERENT");
    print_flushed(line);
    lesson.add_result("activation_peak_ratio", activation_ratio);
    lesson.add_result("epoch_time_ratio", time_ratio);
    lesson.add_result("step_losses_equal", losses_equal);
    lesson.add_result("weights_bitwise_equal", weights_equal);
    lesson.add_series("step_losses_none", std::vector<double>(none.losses.begin(), none.losses.end()));
}

int train(int argc, char** argv) {
    std::string checkpoint_flag = "sqrt", precision_flag = "mixed";
    bool compare = false, no_compare = false;
    // The callback runs inside Lesson's constructor, after it has set the shared defaults and before it parses the
    // command line: this lesson's deeper default model goes in there, so that --hidden still overrides it and the
    // banner shows it.
    Lesson lesson(
        argc, argv, "lesson06_activation_checkpointing",
        "activation checkpointing: keep every k-th layer's input, recompute the rest in the backward pass",
        [&](Cli& cli) {
            TrainOptions& o = lesson.options;
            o.hidden.assign(kDepth, lesson.on_cpu_backend() ? kCpuWidth : kWidth);
            if (lesson.on_cpu_backend()) o.epochs = kCpuEpochs;
            cli.add_int_list("--hidden", &o.hidden, "LIST",
                             "hidden layer widths (default 16 × 1024; on the CPU backend 16 × 256)");
            cli.add_int("--epochs", &o.epochs, "N", "passes over the training images (default 5; CPU backend 1)");
            cli.add_string("--checkpoint", &checkpoint_flag, "none|sqrt|every=K",
                           "which layer inputs to keep: none (all, lesson 05), sqrt (every ⌈√L⌉-th), every=K");
            cli.add_flag("--compare", &compare, "train none first, then the policy, and compare them (the default)");
            cli.add_flag("--no-compare", &no_compare, "train only the --checkpoint policy");
            cli.add_choice("--precision", &precision_flag, {"mixed", "fp32"},
                           "mixed: lesson 05's fp16 model; fp32: lesson 04's kernels");
        });
    const TrainOptions& o = lesson.options;
    if (compare && no_compare) {
        std::fprintf(stderr, "%s: --compare and --no-compare contradict each other\n", lesson.program().c_str());
        return 2;
    }
    CheckpointPolicy policy;
    try {
        policy = parse_checkpoint_policy(checkpoint_flag, int(o.hidden.size()) + 1);
    } catch (const std::invalid_argument& error) {
        std::fprintf(stderr, "%s: %s\n", lesson.program().c_str(), error.what());
        return 2;
    }
    const Precision precision = precision_from_name(precision_flag);
    if (precision == Precision::mixed) require_adamw_or_exit(lesson);
    lesson.add_config("checkpoint", policy.name);
    lesson.add_config("checkpoint_stride", int64_t(policy.stride));
    lesson.add_config("precision", precision_flag);
    lesson.add_config("compare", !no_compare);
    if (lesson.on_cpu_backend() && o.hidden == std::vector<int>(kDepth, kCpuWidth)) {
        print_flushed("CPU backend: 16 hidden layers of 256 instead of 1024 by default (--hidden to choose), " +
                      std::to_string(o.epochs) + " epoch" + (o.epochs == 1 ? "" : "s") +
                      "; it trains twice (none, then the policy) unless --no-compare\n\n");
    }

    // What the lesson may use of the device, asked once before anything is allocated: the largest batch of every
    // policy is measured against it.
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t usable = usable_device_bytes(free_bytes, total_bytes);
    print_flushed("device memory: " + format_bytes(free_bytes) + " free of " + format_bytes(total_bytes) + ", " +
                  format_bytes(usable) + " usable (1/32 of the total + up to 64 MiB kept back)" +
                  (lesson.on_cpu_backend() ? " — CPU backend: emulated capacity (CUDA_CPU_MEMORY)" : "") + "\n");
    print_flushed("--checkpoint " + policy.name + ": " +
                  plan_checkpoints(shape_of(lesson, precision), policy).describe() + "\n\n");
    print_predictions(lesson, precision, policy, usable);
    lesson.upload_test_set();

    cudaStream_t compute, copy;
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    std::vector<RunResult> runs;
    if (!no_compare && policy.stride != 0) {  // none first, in its own buffers; then the policy, in full
        print_flushed("--- none (for comparison: every activation kept)\n");
        runs.push_back(run(lesson, precision, parse_checkpoint_policy("none", int(o.hidden.size()) + 1), false, usable,
                           compute, copy));
        print_flushed("--- " + policy.name + " (the lesson's policy)\n");
    }
    runs.push_back(run(lesson, precision, policy, true, usable, compute, copy));
    print_comparison(lesson, runs);
    const RunResult& main_run = runs.back();
    lesson.add_series("step_losses", std::vector<double>(main_run.losses.begin(), main_run.losses.end()));
    lesson.set_final_parameters(main_run.parameters);

    const int status = lesson.finish();
    CUDA_CHECK(cudaStreamDestroy(compute));
    CUDA_CHECK(cudaStreamDestroy(copy));
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
