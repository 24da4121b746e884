// lessons/06_activation_checkpointing/main.cu — Lesson 06: activation checkpointing. Lesson 05's training step on a
// deeper model (784 → 16 × 1024 → 10), so that the activations kept for the backward pass are worth saving:
//   * --checkpoint sqrt (the default) keeps only the input of every ⌈√L⌉-th layer; the backward pass recomputes one
//     segment at a time from its checkpoint, then runs that segment's backward (checkpointing.h); none is lesson 05's;
//   * every policy's memory is predicted before anything is allocated, and the ledger's peak must equal it;
//   * it trains none, then the policy, from the same seed and prints them side by side (policy_comparison.h): memory,
//     extra FLOPs, time, the largest batch, and whether the two runs' weights are bitwise equal (they must be).
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
                forward_fastest_kernels(net, rows, compute);  // the plan decides where the outputs go
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
                if (scaler != nullptr) {  // one launch unscales every gradient and raises found_inf
                    unscale_and_check(gradients.data(), int(gradients.size()), scaler, compute);
                    // The scale's state machine, on the device (one thread): halve and skip the step on inf/NaN,
                    // double after growth_interval clean steps; the optimizer reads the verdict from `scaler`.
                    update_grad_scaler_kernel<<<1, 1, 0, compute>>>(scaler, scaling, float(o.beta1), float(o.beta2));
                    CUDA_CHECK(cudaGetLastError());
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
    CheckpointFlags flags;  // --checkpoint, --compare, --precision, and the deeper model (policy_comparison.h)
    Lesson lesson(argc, argv, "lesson06_activation_checkpointing",
                  "activation checkpointing: keep every k-th layer's input, recompute the rest in the backward pass",
                  [&](Cli& cli) { flags.add(cli, lesson); });
    const CheckpointPolicy policy = checkpoint_policy_or_exit(lesson, flags);
    const Precision precision = precision_from_name(flags.precision);
    if (precision == Precision::mixed) require_adamw_or_exit(lesson);
    print_cpu_default_model_note(lesson);
    const size_t usable = print_plan_and_predictions(lesson, precision, policy);  // and the device memory
    lesson.upload_test_set();
    run_policies(lesson, policy, !flags.no_compare,
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
