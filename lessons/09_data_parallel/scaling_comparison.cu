// lessons/09_data_parallel/scaling_comparison.cu — see scaling_comparison.h.
#include "lessons/09_data_parallel/scaling_comparison.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/report.h"
#include "kernels/count_correct.cuh"
#include "kernels/normalize.cuh"

namespace dp {

void print_reduce_table(Lesson& lesson, const Group& group, bool overlap, const ReduceTimes& times) {
    const Engine engine = group.engine;
    const int ranks = group.ranks;
    const bool streams_overlap = lesson.streams_overlap();
    size_t bytes_per_step = 0;  // every weight and bias, in fp32
    for (int l = 0; l <= int(lesson.options.hidden.size()); ++l) {
        const int in = l == 0 ? int(kMnistPixels) : lesson.options.hidden[l - 1];
        const int out = l == int(lesson.options.hidden.size()) ? kMnistClasses : lesson.options.hidden[l];
        bytes_per_step += (size_t(in) * out + out) * sizeof(float);
    }
    const double steps = double(std::max(1L, times.steps));
    const double total_ms = times.total_ms / steps, exposed_ms = times.exposed_ms / steps;
    const double algbw = algbw_gb_s(double(bytes_per_step), total_ms * 1e-3);
    const double busbw = busbw_gb_s(double(bytes_per_step), total_ms * 1e-3, ranks);
    TextTable table({"all-reduce per step", "value"}, "lr");
    table.add_row({"engine", engine_name(engine)});
    table.add_row({"ranks", std::to_string(ranks)});
    table.add_row({"buckets", std::to_string(lesson.options.hidden.size() + 1) + " (one per layer)"});
    table.add_row({"bytes reduced per rank", fixed(bytes_per_step / 1e6, 3) + " MB"});
    table.add_row({"in flight (ms)", fixed(total_ms, 3)});
    table.add_row({"exposed after backward (ms)", fixed(exposed_ms, 3)});
    table.add_row({"hidden under backward", fixed(100 * times.hidden_fraction(), 1) + " %"});
    table.add_row({"algbw (GB/s)", fixed(algbw, 3)});
    table.add_row({"busbw (GB/s)", fixed(busbw, 3)});
    if (world().rank == 0) {
        std::printf(
            "\nthe all-reduce, mean over %ld steps (--overlap %s; host clock from MPI_Iallreduce to MPI_Test's "
            "completion, or NCCL's events):\n%s",
            times.steps, overlap ? "on" : "off", table.render().c_str());
        std::printf(
            "  algbw = bytes / time in flight; busbw = algbw · 2(N−1)/N (nccl-tests: what each link of a ring "
            "carries)%s\n",
            streams_overlap ? ""
                            : ".\n  Streams run one after another here (CPU backend without CUDA_CPU_ASYNC=1): "
                              "nothing can hide under the backward pass");
        std::fflush(stdout);
    }
    lesson.add_config("ranks", double(ranks));
    lesson.add_config("overlap", overlap);
    lesson.add_config("engine", std::string(engine_name(engine)));
    lesson.add_result("allreduce_bytes_per_step", double(bytes_per_step));
    lesson.add_result("allreduce_ms_per_step", total_ms);
    lesson.add_result("allreduce_exposed_ms_per_step", exposed_ms);
    lesson.add_result("allreduce_hidden_fraction", times.hidden_fraction());
    lesson.add_result("allreduce_algbw_gb_per_s", algbw);
    lesson.add_result("allreduce_busbw_gb_per_s", busbw);
}

bool finish_epoch(Lesson& lesson, const Group& group, int epoch, const EpochTiming& timing, double loss_sum, Mlp& net,
                  const ForwardPass& forward, cudaStream_t stream) {
    allreduce_sum(&loss_sum, 1, MPI_DOUBLE, group.mpi, "the epoch's loss sum");
    sum_device_counter(net.correct, group.mpi, stream);
    lesson.finish_epoch(epoch, timing, loss_sum, net, forward, stream);
    const std::string when = "epoch " + std::to_string(epoch);
    return same_weights_on_every_rank(download_parameters(lesson.ledger, net), group.mpi, when.c_str());
}

namespace {

void upload(Mlp& net, const std::vector<std::vector<float>>& parameters, bool zero_optimizer_state) {
    for (size_t l = 0; l < net.layers.size(); ++l) {
        Mlp::Layer& layer = net.layers[l];
        const size_t w = size_t(layer.in) * layer.out, b = size_t(layer.out);
        CUDA_CHECK(cudaMemcpy(layer.weight, parameters[2 * l].data(), w * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(layer.bias, parameters[2 * l + 1].data(), b * sizeof(float), cudaMemcpyHostToDevice));
        if (!zero_optimizer_state) continue;
        for (auto [state, count] :
             {std::pair{layer.weight_m, w}, {layer.weight_v, w}, {layer.bias_m, b}, {layer.bias_v, b}})
            if (state) CUDA_CHECK(cudaMemset(state, 0, count * sizeof(float)));
    }
    CUDA_CHECK(cudaDeviceSynchronize());  // cudaMemset is asynchronous, on the legacy stream: the pipeline's streams
                                          // (non-blocking) would not wait for it
}

}  // namespace

void print_scaling_comparison(Lesson& lesson, Mlp& net, const std::vector<std::vector<float>>& initial, int steps,
                              const Group& world_group, cudaStream_t stream, const Step& step) {
    steps = int(std::min<size_t>(size_t(steps), lesson.batches_per_epoch()));  // the runs read one epoch's batches
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<std::vector<float>> final_parameters = download_parameters(lesson.ledger, net);
    const Lesson::EvaluateBatch evaluate = [&](const uint8_t* pixels, const uint8_t* labels, int rows, int* correct,
                                               cudaStream_t s) {
        normalize_pixels(pixels, net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, s);
        forward_fast(net, rows, kFastestGemm, s);
        count_correct(net.layers.back().output, labels, correct, rows, kMnistClasses, nullptr, s);
    };
    TextTable table({"ranks", "ms per step", "images/s", "scaling efficiency", "test accuracy"}, "rrrrr");
    std::vector<RunReport::Row> rows;
    double t1 = 0;
    for (int n = 1; n <= world_group.ranks; n *= 2) {
        bool member = false;
        Group group = split_group(world_group, n, &member);
        double ms = 0, accuracy = 0;
        if (member) {
            upload(net, initial, true);
            PhaseTimer timer;  // its own timer, ledger and pipeline: the lesson's tables stay about the training
            MemoryLedger ledger;
            BatchPipeline pipeline(lesson, ledger, timer, net.staged_pixels, net.staged_labels);
            timer.begin_epoch(1);
            pipeline.start_epoch(1, size_t(steps));
            for (int s = 0; s < steps; ++s) {
                step(group, pipeline.wait_for_batch(s), pipeline, timer, s, 1, s, nullptr);
                pipeline.prefetch_next(s);
            }
            ms = timer.end_epoch().wall_ms / steps;
            accuracy = lesson.evaluate_test_set(net.correct, evaluate, lesson.options.batch, stream);
            if (!same_weights_on_every_rank(download_parameters(lesson.ledger, net), group.mpi,
                                            ("the comparison's run with " + std::to_string(n) + " ranks").c_str()))
                abort_all("the comparison's ranks disagree");
        }
        free_group(group);
        MPI_Request barrier;  // the others wait here, sleeping between polls (a blocking MPI wait would spin a core)
        MPI_CHECK(MPI_Ibarrier(world_group.mpi, &barrier));
        wait_or_abort(&barrier, comm_timeout() + 3600, "the scaling comparison's barrier");
        if (n == 1) t1 = ms;
        const double images_per_s = ms > 0 ? lesson.options.batch / (ms * 1e-3) : 0;
        const double efficiency = ms > 0 ? t1 / (n * ms) : 0;
        table.add_row({std::to_string(n), fixed(ms, 2), fixed(images_per_s, 0), fixed(100 * efficiency, 1) + " %",
                       fixed(100 * accuracy, 2) + " %"});
        rows.push_back({{"ranks", double(n)},
                        {"ms_per_step", ms},
                        {"scaling_efficiency", efficiency},
                        {"test_accuracy", accuracy}});
    }
    for (int n = 1; n <= 4; n *= 2)
        if (n > world_group.ranks)
            table.add_row({std::to_string(n), "-", "-", "-", "(mpirun -n " + std::to_string(n) + ")"});
    upload(net, final_parameters, false);  // finish()'s checksum is the training's
    if (world().rank == 0) {
        std::printf(
            "\nthe same global batches (%d images) on N ranks, %d steps each from the initial weights (wall "
            "clock; scaling efficiency T_1 / (N·T_N), 100 %% = N times faster):\n%s",
            lesson.options.batch, steps, table.render().c_str());
        std::fflush(stdout);
    }
    lesson.add_result("scaling", rows);
}

}  // namespace dp
