// lessons/05_mixed_precision/main.cu — Lesson 05: half precision done right. The data path is lesson 04's.
//   * the model runs in fp16: weights (a working copy), activations and activation gradients are __half, and the
//     GEMMs run on tensor cores (mma.sync m16n8k16, kernels/hgemm.cuh): fp16 products, fp32 accumulation;
//   * fp32 master weights take the optimizer's update, and the same kernel writes the fp16 copy the next step uses
//     (an update of lr·g is far below fp16's spacing near a weight's value: applied to an fp16 weight it rounds away);
//   * dynamic loss scaling (PyTorch's GradScaler, kernels/loss_scaling.cuh): the loss gradient is multiplied by a
//     scale (2^16 to start) so that small gradients do not flush to zero in fp16; after backward one kernel unscales
//     every fp32 gradient and raises a device flag on inf/NaN, the step is skipped and the scale halves; after 2000
//     clean steps in a row it doubles. Nothing of this needs the host to wait;
//   * --precision all (the default) first trains the same model three wrong-or-slower ways on the same seed — fp32
//     (lesson 04), fp16-pure, fp16-weights — and prints them side by side with mixed (precision_comparison.h); the
//     loop below is the same for all four. Lesson 04's --resident and staircase table are gone (see `bench`).
#include <string>
#include <type_traits>
#include <vector>

#include "lessons/05_mixed_precision/precision_comparison.h"  // --precision all: the four runs side by side
#include "lessons/batch_pipeline.h"  // lesson 03's data path (loader thread, pinned slots, async copies) as a class
#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"  // the fp16 model: HalfMlp, forward_half, backward_half, optimizer_step

#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/loss_scaling.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

constexpr long kCountEvery = 10;  // the optimizer counts updates that rounded away on steps 0, 10, 20, ...

// One training run of `precision` (Net: Mlp for fp32, HalfMlp<__half> for fp16-pure, HalfMlp<float> for the other
// two), its buffers in `ledger`, its phases in `timer`.
template <typename Net>
PrecisionRun train_run(Lesson& lesson, Precision precision, bool main_run, MemoryLedger& ledger, PhaseTimer& timer,
                       const GradScalerOptions& scaling) {
    const TrainOptions& o = lesson.options;
    const ModelShape shape = half_model_shape(lesson, precision, BatchPipeline::kSlots);
    const size_t workspace_floats = bias_grad_workspace_floats(o.batch, o.widest_layer());  // two-pass bias gradient
    lesson.require_fits(shape, workspace_floats * sizeof(float) + sizeof(GradScalerState) +
                                   size_t(lesson.total_steps()) * sizeof(float) + 64);
    Net net = allocate_initialized_model<typename Net::ParamType, typename Net::GradType>(ledger, shape, o.seed);
    lesson.upload_test_set();
    float* workspace = ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    BatchPipeline data(lesson, ledger, timer, net.staged_pixels, net.staged_labels);  // lesson 03's data path
    DeviceLosses losses(ledger, lesson.total_steps());  // every step's loss kept: the test compares the first 20
    const cudaStream_t compute = data.compute();
    const UpdateCounters counters = allocate_update_counters(ledger, compute);  // updates computed, rounded away
    // mixed: the scaler's state lives on the device; the loss kernel reads the scale from there.
    GradScalerState* scaler = nullptr;
    std::vector<GradientTensor> gradients;
    if constexpr (std::is_same_v<Net, HalfMlp<float>>) {
        if (precision == Precision::mixed) {
            scaler = ledger.allocate<GradScalerState>(MemoryCategory::workspace, "loss scaler state", 1);
            init_grad_scaler(scaler, scaling, compute);
            gradients = gradient_tensors(net);
        }
    }
    const float* loss_scale = scaler != nullptr ? &scaler->scale : nullptr;  // null: the loss is not scaled
    int scale_changes_printed = 0;

    PrecisionRun result{precision};
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
            {
                auto t = timer.scope(Phase::forward, compute);
                forward_fastest_kernels(net, rows, compute);  // fp16 on tensor cores (fp32: lesson 04's)
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
                // Counting lost updates costs a block reduction per launch: every kCountEvery-th step is a sample.
                const UpdateCounters count = step % kCountEvery == 0 ? counters : UpdateCounters{};
                optimizer_step(net, o, lesson.lr_at(step), int(step + 1), count, scaler, compute);
            }
            ++step;
            data.prefetch_next(b);  // queue the next batch's copy now
        }
        losses.copy_epoch_sum(timer, compute);
        const EpochTiming& timing = timer.end_epoch();  // synchronizes the device: the loss sum is on the host
        result.last =
            lesson.finish_epoch(epoch, timing, losses.epoch_sum(), net.correct, test_set_evaluator(net), compute);
        result.seconds += result.last.seconds;
        if (scaler != nullptr) print_scaler_news(ledger, scaler, &scale_changes_printed, compute);
    }
    finish_precision_run(result, lesson, main_run, ledger, download_parameters(ledger, net), counters, scaler, scaling,
                         losses.step_losses(compute), compute);
    return result;
}

int train(int argc, char** argv) {
    std::string precision_flag = "all";
    GradScalerFlags scaler_flags;  // --init-scale, --growth-factor, --backoff-factor, --growth-interval
    Lesson lesson(
        argc, argv, "lesson05_mixed_precision",
        "half precision done right: fp32 master weights, tensor cores by hand (mma.sync), dynamic loss scaling",
        [&](Cli& cli) {
            cli.add_choice("--precision", &precision_flag, {"all", "mixed", "fp32", "fp16-pure", "fp16-weights"},
                           "all: train fp32, fp16-pure, fp16-weights, then mixed, and compare them");
            scaler_flags.add(cli);
        },
        kCpuTrainImages / 2);  // --precision all trains four models: half the usual CPU subset
    require_adamw_or_exit(lesson);
    const GradScalerOptions scaling = scaler_flags.options();
    lesson.add_config("precision", precision_flag);
    scaler_flags.record_config(lesson);

    run_precisions(lesson, precision_flag, [&](Precision p, bool main_run, MemoryLedger& ledger, PhaseTimer& timer) {
        lesson.set_gemms_on_tensor_cores(p != Precision::fp32);  // the tables' bytes and peak: fp16 on tensor cores
        if (p == Precision::fp32) return train_run<Mlp>(lesson, p, main_run, ledger, timer, scaling);  // lesson 04's
        if (p == Precision::fp16_pure) return train_run<HalfMlp<__half>>(lesson, p, main_run, ledger, timer, scaling);
        return train_run<HalfMlp<float>>(lesson, p, main_run, ledger, timer, scaling);  // fp32 gradients
    });
    return lesson.finish();
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
