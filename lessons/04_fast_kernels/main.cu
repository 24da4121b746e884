// lessons/04_fast_kernels/main.cu — Lesson 04: fast fp32 kernels. Lesson 03's data path (now the class
// BatchPipeline, lessons/batch_pipeline.h: the same code); the kernels change:
//   * the GEMM is a step of the staircase in kernels/ (gemm_v1_naive.cuh … gemm_v7_warp_tiled.cuh), each step one
//     idea: coalescing, shared-memory tiles, register blocking, vectorized loads, double buffering, warp tiles;
//     --gemm vN trains with any step;
//   * fused epilogues: bias and ReLU applied to each output inside the GEMM, so the activation is written once instead
//     of three times (GEMM, bias, ReLU kernels in lesson 03);
//   * the bias gradient is a deterministic two-pass reduction (kernels/bias_grad.cuh) that uses every SM;
//   * at the end, one training step timed with every GEMM step (gemm_staircase.h beside this file).
#include <algorithm>
#include <string>
#include <vector>

#include "lessons/04_fast_kernels/gemm_staircase.h"
#include "lessons/03_pinned_async/copy_figures.h"  // the bandwidth probe, and how much copy time was hidden
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
    Mlp& net = lesson.allocate_model(
        BatchPipeline::staging_slots(resident), /*stage_raw_pixels=*/true,
        (resident ? BatchPipeline::resident_bytes(lesson.data.train) : 0) + workspace_floats * sizeof(float));
    float* workspace =
        lesson.ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    lesson.add_config("resident", resident);
    lesson.add_config("gemm", gemm_step);
    const ForwardPass forward_with_gemm = [gemm](Mlp& n, int rows, cudaStream_t s) { forward_fast(n, rows, gemm, s); };
    print_h2d_bandwidth_probe(lesson, size_t(o.batch) * kMnistPixels);
    BatchPipeline data(lesson, lesson.ledger, timer, net.staged_pixels, net.staged_labels, {.resident = resident});
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
            {  // uint8 → float on the device, (p / 255 − mean) / std: 4 pixels per thread (uchar4 in, float4 out)
                auto t = timer.scope(Phase::normalize, compute);
                const size_t n = size_t(rows) * kMnistPixels;
                normalize_pixels_kernel<true, float><<<grid_for_4_per_thread(n, 256), 256, 0, compute>>>(
                    n, batch.pixels, net.input, kMnistMean, kMnistStd);
                CUDA_CHECK(cudaGetLastError());
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward_fast(net, rows, gemm, compute);  // per layer: step `gemm`, bias + ReLU fused
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
        lesson.finish_epoch(epoch, timing, losses.epoch_sum(), net, forward_with_gemm, compute);
    }
    report_copies(lesson, timer, data.image_bytes_copied(), resident);    // how much copy time compute never saw
    const RunGemmStep run_step = [&](GemmVersion version, Phase phase) {  // the table's runs: this file's kernels
        if (phase == Phase::forward) return forward_fast(net, o.batch, version, compute);
        backward_fast(net, o.batch, version, workspace, workspace_floats, compute);
    };
    print_gemm_staircase(lesson, o.layer_sizes(), run_step, compute);  // one step with every GEMM step
    return lesson.finish();
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
