// lessons/06_activation_checkpointing/main.cu — Lesson 06: activation checkpointing. Lesson 05's pipeline (mixed
// precision, tensor cores, loss scaling, pinned prefetched copies) on a deeper model; what changes is which
// activations the backward pass finds kept and which it computes again.
//   * the model is deep: 784 → 16 hidden layers of 1024 → 10 (--hidden changes depth and width), so that the
//     activations kept for the backward pass are worth saving;
//   * --checkpoint sqrt (the default) keeps only the input of every ⌈√L⌉-th layer; the backward pass recomputes one
//     segment at a time into a reusable segment buffer, then runs its backward (checkpointing.h). every=K keeps every
//     K-th; none is lesson 05's model. The memory of every policy is predicted before anything is allocated, and the
//     ledger's activation peak must come out equal to it;
//   * by default it trains twice on the same seed and batches, none then the policy, and prints them side by side
//     (policy_comparison.h): activation bytes, peak device memory, extra forward FLOPs, time per epoch, the largest
//     batch that fits each, and whether the two runs' losses and final weights are bitwise equal (they must be);
//   * --precision fp32 runs lesson 04's fp32 kernels instead. Lesson 05's precisions table and probes are gone.
#include <string>
#include <type_traits>
#include <vector>

#include "lessons/06_activation_checkpointing/checkpointing.h"      // the plan, its model, its segments
#include "lessons/06_activation_checkpointing/policy_comparison.h"  // none vs the policy, side by side
#include "lessons/batch_pipeline.h"  // lesson 03's data path (loader thread, pinned slots, async copies) as a class
#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"  // the fp16 model: HalfMlp, forward_half, backward_half, optimizer_step

#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/loss_scaling.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

constexpr int kDepth = 16, kWidth = 1024;  // the default model: 784 → 16 × 1024 → 10
// On the CPU backend a step of 16 × 1024 takes some 28 s: there the default is as deep but 256 wide, for one epoch.
constexpr int kCpuWidth = 256, kCpuEpochs = 1;

// One training run with `policy` (Net: Mlp for fp32, HalfMlp<float> for mixed), its buffers in `ledger`, its phases
// in `timer`. `usable`: what cudaMemGetInfo said the lesson may use, before anything was allocated.
template <typename Net>
CheckpointRun train_run(Lesson& lesson, Precision precision, const CheckpointPolicy& policy, bool main_run,
                        MemoryLedger& ledger, PhaseTimer& timer, size_t usable) {
    const TrainOptions& o = lesson.options;
    const ModelShape shape = half_model_shape(lesson, precision, BatchPipeline::kSlots);
    const size_t workspace_floats = bias_grad_workspace_floats(o.batch, o.widest_layer());   // two-pass bias gradient
    CheckpointRun result = plan_checkpointed_run(lesson, shape, precision, policy, usable);  // exits if it cannot fit
    Net net = allocate_checkpointed_model<typename Net::ParamType, typename Net::GradType>(ledger, shape, result.plan,
                                                                                           o.seed);
    float* workspace = ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    BatchPipeline data(lesson, ledger, timer, net.staged_pixels, net.staged_labels);  // lesson 03's data path
    DeviceLosses losses(ledger, lesson.total_steps());  // every step's loss kept: none and the policy compared
    const cudaStream_t compute = data.compute();
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

    long step = 0;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        timer.begin_epoch(epoch);
        losses.start_epoch(compute);
        data.start_epoch(epoch);
        for (size_t b = 0; b < data.batches(); ++b) {
            const BatchPipeline::DeviceBatch batch = data.wait_for_batch(b);  // rule 3: after its copy
            const int rows = batch.rows;
            {  // uint8 → fp16 or fp32 on the device, (p / 255 − mean) / std: 4 pixels per thread
                auto t = timer.scope(Phase::normalize, compute);
                const size_t n = size_t(rows) * kMnistPixels;
                normalize_pixels_kernel<true, typename Net::ActType>
                    <<<grid_for_4_per_thread(n, 256), 256, 0, compute>>>(n, batch.pixels, net.input, kMnistMean,
                                                                         kMnistStd);
                CUDA_CHECK(cudaGetLastError());
            }
            {  // with a policy, most layers write into the segment buffer: only the checkpoints stay
                auto t = timer.scope(Phase::forward, compute);
                forward_fastest_kernels(net, rows,
                                        compute);  // the ordinary forward pass: the plan decides where outputs go
            }
            {  // softmax-CE in fp32 from the (fp16) logits; dlogits = scale · (p − onehot) / rows, stored in fp16
                auto t = timer.scope(Phase::loss, compute);
                const auto* logits = net.layers.back().output;
                softmax_cross_entropy(logits, batch.labels, net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses, loss_scale, compute);
                count_correct(logits, batch.labels, net.correct, rows, kMnistClasses, nullptr, compute);
                losses.add(net.mean_loss, rows, step, compute);
                data.done_reading(batch);  // the last reader of its slot in this step
            }
            {  // segment by segment from the last: recompute it from its checkpoint, then its backward
                auto t = timer.scope(Phase::backward, compute);
                const std::vector<CheckpointSegment>& segments = result.plan.segments;
                for (size_t s = segments.size(); s-- > 0;) {  // the last segment's activations are still there
                    if (s + 1 < segments.size()) recompute_segment(net, segments[s], rows, compute);
                    backward_segment(net, segments[s], rows, workspace, workspace_floats, compute);
                }
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                if (scaler != nullptr) {  // one launch unscales every gradient and raises found_inf; then the
                    unscale_and_check(gradients.data(), int(gradients.size()), scaler, compute);  // scale's update
                    update_grad_scaler(scaler, scaling, float(o.beta1), float(o.beta2), compute);
                }
                optimizer_step(net, o, lesson.lr_at(step), int(step + 1), UpdateCounters{}, scaler, compute);
            }
            ++step;
            data.prefetch_next(b);  // queue the next batch's copy now
        }
        losses.copy_epoch_sum(timer, compute);
        const EpochTiming& timing = timer.end_epoch();  // synchronizes the device: the loss sum is on the host
        result.last =
            lesson.finish_epoch(epoch, timing, losses.epoch_sum(), net.correct, test_set_evaluator(net), compute);
        result.seconds += result.last.seconds;
    }
    finish_checkpointed_run(result, lesson, main_run, ledger, download_parameters(ledger, net),
                            losses.step_losses(compute));
    return result;
}

int train(int argc, char** argv) {
    std::string checkpoint_flag = "sqrt", precision_flag = "mixed";
    bool compare = false, no_compare = false;
    // The callback runs before the command line is parsed: the deeper default model goes there (--hidden overrides).
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
    const CheckpointPolicy policy = checkpoint_policy_or_exit(lesson, checkpoint_flag, compare, no_compare);
    const Precision precision = precision_from_name(precision_flag);
    if (precision == Precision::mixed) require_adamw_or_exit(lesson);
    lesson.add_config("precision", precision_flag);
    lesson.add_config("compare", !no_compare);
    if (lesson.on_cpu_backend() && o.hidden == std::vector<int>(kDepth, kCpuWidth))
        print_cpu_default_model_note(lesson);
    const size_t usable = print_plan_and_predictions(lesson, precision, policy);  // and the device memory
    lesson.upload_test_set();
    run_policies(lesson, policy, !no_compare,
                 [&](const CheckpointPolicy& p, bool main_run, MemoryLedger& ledger, PhaseTimer& timer) {
                     if (precision == Precision::fp32)
                         return train_run<Mlp>(lesson, precision, p, main_run, ledger, timer, usable);
                     return train_run<HalfMlp<float>>(lesson, precision, p, main_run, ledger, timer, usable);
                 });
    return lesson.finish();
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
