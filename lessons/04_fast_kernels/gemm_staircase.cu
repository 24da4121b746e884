// lessons/04_fast_kernels/gemm_staircase.cu — see gemm_staircase.h.
#include "lessons/04_fast_kernels/gemm_staircase.h"

#include <cstdio>
#include <string>

#include "common/access_counters.h"

// One training step's forward and backward with every step of the GEMM staircase, timed with CUDA events (no
// optimizer step: the weights stay as trained). At batch 128 a layer's GEMM is a fraction of a GFLOP, which a GPU
// finishes in microseconds — about what a kernel launch costs — so there the last steps are launch-bound; with
// --batch 1024 or more they are compute-bound and the staircase shows its full height.
namespace {

// The counting build (build/cpu-counters): what each GEMM step asks of the memory system in one training step,
// counted from every warp's addresses. These are the figures that make the staircase fast on a GPU, and they are the
// same on any machine: global sectors per request fall at step 2 (coalescing), global sectors fall by the tile
// factor at step 3 (shared-memory tiles), shared requests per multiply-add fall at steps 4-5 (register blocking,
// float4), bank conflicts show where a layout has them.
void print_gemm_staircase_counts(Lesson& lesson, const RunGemmStep& run, cudaStream_t stream, int rows,
                                 const StepGemmFlops& flops) {
    TextTable table({"GEMM step", "global ld req", "sectors/req", "global sectors", "shared ld req", "wavefronts/req",
                     "bank conflicts", "FMA per shared ld"},
                    "lrrrrrrr");
    const double fmas = (flops.forward + flops.backward) / 2.0;
    for (int v = 1; v <= kGemmVersionCount; ++v) {
        const GemmVersion version = gemm_version_from_int(v);
        reset_access_counts();
        run(version, Phase::forward);
        run(version, Phase::backward);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        KernelAccessCounts gemm{"gemm"};
        for (const KernelAccessCounts& k : access_counts())
            if (k.kernel.starts_with("gemm_")) gemm += k;  // the GEMM kernels only (not bias, ReLU, loss)
        const uint64_t global_sectors = gemm.global_load.transactions + gemm.global_store.transactions;
        const uint64_t conflicts = gemm.shared_load.replays() + gemm.shared_store.replays();
        char step[64];
        std::snprintf(step, sizeof step, "v%d %s", v, gemm_version_name(version));
        table.add_row({step, std::to_string(gemm.global_load.requests), fixed(gemm.global_load.per_request(), 2),
                       std::to_string(global_sectors), std::to_string(gemm.shared_load.requests),
                       gemm.shared_load.requests ? fixed(gemm.shared_load.per_request(), 2) : "-",
                       std::to_string(conflicts),
                       gemm.shared_load.requests ? fixed(fmas / double(gemm.shared_load.requests), 1) : "-"});
        const std::string key = "gemm_v" + std::to_string(v);
        lesson.add_result(key + "_global_load_requests", double(gemm.global_load.requests));
        lesson.add_result(key + "_global_sectors", double(global_sectors));
        lesson.add_result(key + "_shared_load_requests", double(gemm.shared_load.requests));
        lesson.add_result(key + "_shared_wavefronts",
                          double(gemm.shared_load.transactions + gemm.shared_store.transactions));
        lesson.add_result(key + "_bank_conflicts", double(conflicts));
    }
    std::printf(
        "\none training step of %d images with each GEMM step: the GEMM kernels' memory requests, counted "
        "exactly (the counting build; CPU times would say nothing here):\n%s"
        "  sectors: 32-byte pieces of global memory a warp's request touches (a perfectly coalesced request: 4 "
        "for floats, 16 for float4s);\n  wavefronts: shared-memory passes a request needs (1 is conflict-free); FMA "
        "per shared ld: multiply-adds per shared load request.\n",
        rows, table.render().c_str());
    std::fflush(stdout);
}

}  // namespace

void print_gemm_staircase(Lesson& lesson, const std::vector<int>& layer_sizes, const RunGemmStep& run,
                          cudaStream_t stream) {
    const int rows = lesson.options.batch, repeats = lesson.on_cpu_backend() ? 1 : 20;
    const StepGemmFlops flops = training_step_gemm_flops(layer_sizes, rows);
    if (access_counting_available()) return print_gemm_staircase_counts(lesson, run, stream, rows, flops);
    TextTable table({"GEMM step", "forward ms", "backward ms", "GFLOP/s", "speed-up vs v1"}, "lrrrr");
    PhaseTimer timer;
    double v1_ms = 0;
    for (int v = 1; v <= kGemmVersionCount; ++v) {
        const GemmVersion version = gemm_version_from_int(v);
        if (!lesson.on_cpu_backend()) {     // untimed warm-up: with lazy module loading (CUDA 12.2 on), a kernel's
            run(version, Phase::forward);   // first launch also loads it, which would skew the first
            run(version, Phase::backward);  // repeat by 10-20 % at batch 128
        }  // (the CPU backend loads nothing, and one emulated step costs seconds: no warm-up there)
        timer.begin_epoch(v);
        for (int repeat = 0; repeat < repeats; ++repeat) {
            {
                auto t = timer.scope(Phase::forward, stream);
                run(version, Phase::forward);
            }
            {
                auto t = timer.scope(Phase::backward, stream);
                run(version, Phase::backward);
            }
        }
        const EpochTiming& timing = timer.end_epoch();
        const double forward_ms = timing[Phase::forward].ms / repeats,
                     backward_ms = timing[Phase::backward].ms / repeats;
        if (v == 1) v1_ms = forward_ms + backward_ms;
        char cells[4][32];
        std::snprintf(cells[0], sizeof cells[0], "%.3f", forward_ms);
        std::snprintf(cells[1], sizeof cells[1], "%.3f", backward_ms);
        std::snprintf(cells[2], sizeof cells[2], "%.1f",
                      (flops.forward + flops.backward) / ((forward_ms + backward_ms) * 1e6));
        std::snprintf(cells[3], sizeof cells[3], "%.2f×", v1_ms / (forward_ms + backward_ms));
        char step[64], forward_key[32], backward_key[32];
        std::snprintf(step, sizeof step, "v%d %s", v, gemm_version_name(version));
        std::snprintf(forward_key, sizeof forward_key, "gemm_v%d_forward_ms", v);
        std::snprintf(backward_key, sizeof backward_key, "gemm_v%d_backward_ms", v);
        table.add_row({step, cells[0], cells[1], cells[2], cells[3]});
        lesson.add_result(forward_key, forward_ms);
        lesson.add_result(backward_key, backward_ms);
    }
    const std::string how = lesson.on_cpu_backend()
                                ? "CPU timings, one run; the counting build shows what a GPU would see: make counters"
                                : "CUDA events, the mean of " + std::to_string(repeats) + " runs after a warm-up";
    std::printf("\none training step of %d images with each GEMM step (%s):\n%s", rows, how.c_str(),
                table.render().c_str());
    std::fflush(stdout);
}
