// lessons/06_activation_checkpointing/policy_comparison.cu — see policy_comparison.h.
#include "lessons/06_activation_checkpointing/policy_comparison.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "lessons/batch_pipeline.h"  // BatchPipeline::kSlots: the staging slots of the model's shape

#include "kernels/bias_grad.cuh"

namespace {

// The device memory the lesson allocates next to the model at `batch`: the two-pass bias gradient's workspace, the
// epoch's loss sum, every step's loss, and (mixed) the loss scaler's state.
size_t lesson_buffer_bytes(const Lesson& lesson, Precision precision, int batch) {
    return bias_grad_workspace_floats(batch, lesson.options.widest_layer()) * sizeof(float) + sizeof(double) +
           size_t(lesson.total_steps()) * sizeof(float) + (precision == Precision::mixed ? sizeof(GradScalerState) : 0);
}

std::string plus_percent(double fraction) {  // 0.746 → "+74.6%"
    char text[32];
    std::snprintf(text, sizeof text, "%+.1f%%", 100.0 * fraction);
    return text;
}

// Before training: what each policy would keep, predicted from the shape alone (nothing is allocated for this).
void print_predictions(const Lesson& lesson, Precision precision, const CheckpointPolicy& chosen, size_t usable) {
    const ModelShape shape = half_model_shape(lesson, precision, BatchPipeline::kSlots);
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
void print_comparison(Lesson& lesson, const std::vector<CheckpointRun>& runs) {
    TextTable table({"policy", "activations now", "peak", "predicted", "device peak", "(predicted)", "extra forward",
                     "s/epoch", "largest batch"},
                    "lrrrrrrrr");
    std::vector<RunReport::Row> rows;
    for (const CheckpointRun& r : runs) {
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

    const CheckpointRun &none = runs.front(), &policy = runs.back();
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

}  // namespace

namespace {
constexpr int kDepth = 16, kWidth = 1024;  // the default model: 784 → 16 × 1024 → 10
// On the CPU backend a step of 16 × 1024 takes some 28 s: there the default is as deep but 256 wide. It keeps the
// 5 epochs of the other lessons: in one epoch (10 steps of the CPU subset) the deep model reaches only about 49 %.
constexpr int kCpuWidth = 256;
}  // namespace

void CheckpointFlags::add(Cli& cli, Lesson& lesson) {
    TrainOptions& o = lesson.options;
    o.hidden.assign(kDepth, lesson.on_cpu_backend() ? kCpuWidth : kWidth);
    cli.add_int_list("--hidden", &o.hidden, "LIST",
                     "hidden layer widths (default 16 × 1024; on the CPU backend 16 × 256)");
    cli.add_int("--epochs", &o.epochs, "N", "passes over the training images (default 5)");
    cli.add_string("--checkpoint", &checkpoint, "none|sqrt|every=K",
                   "which layer inputs to keep: none (all, lesson 05), sqrt (every ⌈√L⌉-th), every=K");
    cli.add_flag("--compare", &compare, "train none first, then the policy, and compare them (the default)");
    cli.add_flag("--no-compare", &no_compare, "train only the --checkpoint policy");
    cli.add_choice("--precision", &precision, {"mixed", "fp32"},
                   "mixed: lesson 05's fp16 model; fp32: lesson 04's kernels");
}

CheckpointPolicy checkpoint_policy_or_exit(Lesson& lesson, const CheckpointFlags& flags) {
    if (flags.compare && flags.no_compare) {
        std::fprintf(stderr, "%s: --compare and --no-compare contradict each other\n", lesson.program().c_str());
        std::exit(2);
    }
    CheckpointPolicy policy;
    try {
        policy = parse_checkpoint_policy(flags.checkpoint, int(lesson.options.hidden.size()) + 1);
    } catch (const std::invalid_argument& error) {
        std::fprintf(stderr, "%s: %s\n", lesson.program().c_str(), error.what());
        std::exit(2);
    }
    lesson.add_config("checkpoint", policy.name);
    lesson.add_config("checkpoint_stride", int64_t(policy.stride));
    lesson.add_config("precision", flags.precision);
    lesson.add_config("compare", !flags.no_compare);
    return policy;
}

void print_cpu_default_model_note(const Lesson& lesson) {
    if (!lesson.on_cpu_backend() || lesson.options.hidden != std::vector<int>(kDepth, kCpuWidth)) return;
    // One GEMM of a 1024-wide layer at batch 128 takes about a quarter of a second on the CPU backend, some 28 s per
    // step of 16 × 1024; 16 × 256 for 5 epochs of lesson.h's subset, trained twice to compare, takes a few minutes.
    const int epochs = lesson.options.epochs;
    print_flushed("CPU backend: 16 hidden layers of 256 instead of 1024 by default (--hidden to choose), " +
                  std::to_string(epochs) + " epoch" + (epochs == 1 ? "" : "s") +
                  "; it trains twice (none, then the policy) unless --no-compare\n\n");
}

CheckpointRun plan_checkpointed_run(const Lesson& lesson, const ModelShape& shape, Precision precision,
                                    const CheckpointPolicy& policy, size_t usable) {
    CheckpointRun run;
    run.plan = plan_checkpoints(shape, policy);
    const size_t test_set_bytes = lesson.data.test.count * (kMnistPixels + 1);  // uploaded by train() already
    const size_t own_bytes = lesson_buffer_bytes(lesson, precision, lesson.options.batch);
    const std::string problem = check_checkpointed_fits(shape, policy, own_bytes + test_set_bytes,
                                                        "the test set and the lesson's own buffers", usable);
    if (!problem.empty()) {
        std::fprintf(stderr, "%s: %s\n", lesson.program().c_str(), problem.c_str());
        std::exit(2);
    }
    run.predicted_device = predict_checkpointed_memory(shape, policy).total() + own_bytes;
    run.largest_batch = largest_checkpointed_batch(
        shape, policy, [&](int b) { return lesson_buffer_bytes(lesson, precision, b) + test_set_bytes; }, usable,
        INT_MAX);
    return run;
}

void finish_checkpointed_run(CheckpointRun& run, const Lesson& lesson, bool main_run, MemoryLedger& ledger,
                             std::vector<std::vector<float>> parameters, std::vector<float> losses) {
    run.losses = std::move(losses);
    run.parameters = std::move(parameters);
    run.memory = ledger.snapshot();
    // The test set lives in the lesson's ledger: the main run's ledger holds it, a comparison run's does not.
    const size_t test_set_bytes = lesson.data.test.count * (kMnistPixels + 1);
    run.measured_device = run.memory.total[int(MemorySpace::device)].peak - (main_run ? test_set_bytes : 0);
}

size_t print_plan_and_predictions(const Lesson& lesson, Precision precision, const CheckpointPolicy& policy) {
    // What the lesson may use of the device, asked once before anything is allocated: the largest batch of every
    // policy is measured against it.
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t usable = usable_device_bytes(free_bytes, total_bytes);
    print_flushed("device memory: " + format_bytes(free_bytes) + " free of " + format_bytes(total_bytes) + ", " +
                  format_bytes(usable) + " usable (1/32 of the total + up to 64 MiB kept back)" +
                  (lesson.on_cpu_backend() ? " — CPU backend: emulated capacity (CUDA_CPU_MEMORY)" : "") + "\n");
    print_flushed("--checkpoint " + policy.name + ": " +
                  plan_checkpoints(half_model_shape(lesson, precision, BatchPipeline::kSlots), policy).describe() +
                  "\n\n");
    print_predictions(lesson, precision, policy, usable);
    return usable;
}

void run_policies(Lesson& lesson, const CheckpointPolicy& policy, bool compare, const TrainPolicy& train) {
    std::vector<CheckpointRun> runs;
    if (compare && policy.stride != 0) {  // none first, in its own buffers; then the policy, in full
        print_flushed("--- none (for comparison: every activation kept)\n");
        MemoryLedger side_ledger;  // a comparison run's buffers: its own table, freed before the next run
        PhaseTimer side_timer;
        lesson.set_run_label("none");
        runs.push_back(train(parse_checkpoint_policy("none", int(lesson.options.hidden.size()) + 1), false, side_ledger,
                             side_timer));
        print_flushed("--- " + policy.name + " (the lesson's policy)\n");
    }
    lesson.set_run_label("");
    runs.push_back(train(policy, true, lesson.ledger, lesson.timer));
    print_comparison(lesson, runs);
    const CheckpointRun& main_run = runs.back();
    lesson.add_series("step_losses", std::vector<double>(main_run.losses.begin(), main_run.losses.end()));
    lesson.set_final_parameters(main_run.parameters);
}
