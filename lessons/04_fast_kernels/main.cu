// lessons/04_fast_kernels/main.cu — Lesson 04: fast fp32 kernels. The data path is lesson 03's; the kernels change.
//
// What changes from lesson 03:
//   * the GEMM is the top of the staircase in kernels/ (gemm_v1_naive.cuh … gemm_v7_warp_tiled.cuh), each
//     step one idea: coalescing, shared-memory tiles, register blocking, vectorized loads, double buffering,
//     warp tiles;
//     --gemm vN runs the whole model with any step, so you can watch the forward and backward phases shrink;
//   * fused epilogues: bias and ReLU are applied to each output inside the GEMM (forward_fast in lessons/lesson.cu),
//     so the activation is written once instead of three times (GEMM, bias_add, relu_forward);
//   * the bias gradient is a deterministic two-pass reduction (kernels/bias_grad.cuh) that uses every SM;
//   * at the end, one training step timed with every GEMM step: what each idea buys at this shape.
// The loss kernel was already fused (softmax + cross-entropy + gradient in one pass) in lesson 01.
#include <algorithm>
#include <string>
#include <vector>

#include "lessons/batch_pipeline.h"  // lesson 03's data path (loader thread, pinned slots, async copies) as a class
#include "lessons/lesson.h"

#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

int train(int argc, char** argv) {
    bool resident = false;
    std::string gemm_step = "v7";  // the top of the staircase, kFastestGemm
    static_assert(kGemmVersionCount == 7, "--gemm's choices below list every step");
    Lesson lesson(argc, argv, "lesson04_fast_kernels",
                  "fast fp32 kernels: the GEMM staircase, fused bias + ReLU epilogues, a two-pass bias gradient",
                  [&](Cli& cli) {
                      cli.add_flag("--resident", &resident,
                                   "keep the whole uint8 training set on the device and gather batches there");
                      cli.add_choice("--gemm", &gemm_step, {"v1", "v2", "v3", "v4", "v5", "v6", "v7"},
                                     "the GEMM step every layer uses (kernels/gemm_vN_*.cuh)");
                  });
    const GemmVersion gemm = gemm_version_from_int(std::stoi(gemm_step.substr(1)));
    const TrainOptions& o = lesson.options;
    PhaseTimer& timer = lesson.timer;
    const size_t workspace_floats = bias_grad_workspace_floats(o.batch, o.widest_layer());  // two-pass bias gradient
    Mlp& net = lesson.model(
        BatchPipeline::staging_slots(resident), /*stage_raw_pixels=*/true,
        (resident ? BatchPipeline::resident_bytes(lesson.data.train) : 0) + workspace_floats * sizeof(float));
    float* workspace =
        lesson.ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    lesson.add_config("resident", resident);
    lesson.add_config("gemm", gemm_step);
    const ForwardPass forward = [gemm](Mlp& n, int rows, cudaStream_t s) { forward_fast(n, rows, gemm, s); };
    lesson.print_h2d_bandwidth_probe(size_t(o.batch) * kMnistPixels);
    BatchPipeline data(lesson, net.staged_pixels, net.staged_labels, resident);  // lesson 03's data path
    DeviceLosses losses(lesson.ledger);
    const cudaStream_t compute = data.compute();

    long step = 0;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        timer.begin_epoch(epoch);
        losses.start_epoch(compute);
        data.start_epoch(epoch);
        for (size_t b = 0; b < data.batches(); ++b) {
            const BatchPipeline::DeviceBatch batch = data.wait_for_batch(b);  // rule 3: after its copy
            const int rows = batch.rows;
            {
                auto t = timer.scope(Phase::normalize, compute);
                normalize_pixels(batch.pixels, net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, compute);
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward(net, rows, compute);
            }
            {  // the loss stays on the device: summed there, read once per epoch
                auto t = timer.scope(Phase::loss, compute);
                const float* logits = net.layers.back().output;
                softmax_cross_entropy(logits, batch.labels, net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses, compute);
                count_correct(logits, batch.labels, net.correct, rows, kMnistClasses, nullptr, compute);
                losses.add(net.mean_loss, rows, step, compute);
                data.done_reading(batch);  // the last reader of its slot in this step
            }
            {
                auto t = timer.scope(Phase::backward, compute);
                backward_fast(net, rows, gemm, workspace, workspace_floats, compute);
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                optimizer_update(net, o, lesson.lr_at(step), int(step + 1), compute);
            }
            ++step;
            data.prefetch_next(b);  // queue the next batch's copy now
        }
        losses.copy_epoch_sum(timer, compute);
        const EpochTiming& timing = timer.end_epoch();  // synchronizes the device: the loss sum is on the host
        lesson.finish_epoch(epoch, timing, losses.epoch_sum(), forward, compute);
    }
    data.report_copies(lesson);
    print_gemm_staircase(lesson, net, workspace, workspace_floats, compute);
    return lesson.finish();
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
