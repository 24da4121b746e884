// lessons/09_data_parallel/main.cu — Lesson 09: data parallelism. N processes (mpirun -n N), one per GPU, each
// trains on its own shard of every global batch; the gradients are summed across ranks every step, so every rank
// takes the same optimizer step and holds the same weights.
//
// What changes from lesson 04 (same model, kernels and data path):
//   * rank r takes rows [r·B/N, (r+1)·B/N) of each global batch of B; its loss gradient is scaled by rows_r/B so
//     that the sum over ranks is the global batch's mean gradient (with N = 1 nothing is scaled: lesson 04's bits);
//   * each layer's gradients are one bucket: the moment that layer's backward is done (an event), its all-reduce
//     starts on a communication stream while the earlier layers are still being differentiated (DDP's and NCCL's
//     overlap); the optimizer waits on the buckets' events. --overlap off reduces after the whole backward pass;
//   * the engine: NCCL on GPUs when it was found at build time, else MPI (host-staged, or device pointers when the MPI
//     is CUDA-aware); every collective has a deadline (--comm-timeout), and a failing rank stops every rank;
//   * after every epoch the ranks compare a checksum of their weights, and the run fails if any differs.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lessons/09_data_parallel/allreduce.h"
#include "lessons/09_data_parallel/scaling_comparison.h"
#include "lessons/batch_pipeline.h"  // lesson 03's data path
#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"  // download_parameters

#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

using Clock = std::chrono::steady_clock;

__global__ void scale_kernel(float* x, size_t n, float factor) {  // dlogits · rows_r / B
    const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}

struct Bucket {            // one layer's weight and bias gradients, reduced together
    float* host = nullptr;  // pinned staging copy (host-staged MPI), weight gradients then bias gradients
    size_t weights = 0, floats = 0;
    cudaEvent_t grads_ready, staged, reduce_start, reduced;
    MPI_Request requests[2];
};

int train(int argc, char** argv) {
    const dp::World& world = dp::world();
    if (world.rank != 0 && !std::freopen("/dev/null", "w", stdout))  // rank 0 prints; the others' stderr stays
        throw std::runtime_error("cannot silence rank " + std::to_string(world.rank) + "'s stdout");
    dp::pick_device();  // one GPU per rank (before the Lesson checks the device)
    std::vector<std::string> storage;
    std::vector<char*> args = dp::argv_for_rank(argc, argv, world.rank, storage);
    std::string overlap_flag = "on", engine_flag = "auto", weights_path;
    double timeout_s = 60;
    int compare_steps = 3, fail_rank = -1, fail_step = -1, unwaited_bucket = -1;
    Lesson lesson(int(args.size()) - 1, args.data(), "lesson09_data_parallel",
                  "data parallelism: N ranks, a bucketed all-reduce overlapped with the backward pass", [&](Cli& cli) {
                      cli.add_choice("--overlap", &overlap_flag, {"on", "off"}, "all-reduce each layer's bucket during the backward pass, or after it");
                      cli.add_choice("--engine", &engine_flag, {"auto", "mpi", "nccl"}, "who carries the all-reduce (auto: NCCL when built with it, on GPUs)");
                      cli.add_double("--comm-timeout", &timeout_s, "S", "deadline of every collective, seconds", 0.1, 86400);
                      cli.add_int("--compare-steps", &compare_steps, "K", "steps per run of the N = 1, 2, 4 comparison (0: none)", 0, 1000000);
                      cli.add_int("--fail-rank", &fail_rank, "R", "test: rank R exits with an error at step --fail-step", -1, 1 << 20);
                      cli.add_int("--fail-step", &fail_step, "S", "test: the step at which --fail-rank fails", -1, 1 << 30);
                      cli.add_output_file("--save-weights", &weights_path, "FILE", "test: rank 0 writes the final weights there (float32: W_1, b_1, W_2, ...)");
                      cli.add_int("--plant-unwaited-bucket", &unwaited_bucket, "L", "test: the optimizer skips its wait for layer L's bucket (a planted bug)", -1, 1 << 20);
                  });
    const TrainOptions& o = lesson.options;
    dp::set_comm_timeout(timeout_s);
    const bool overlap = overlap_flag == "on";
    const int n = world.size, rank = world.rank;
    // Bad splits: every rank sees the same flags and data, so every rank stops here with the same exit code.
    const int last_rows = lesson.rows_in_batch(lesson.batches_per_epoch() - 1);
    std::string bad;
    if (lesson.data.train.count < size_t(n)) bad = std::to_string(n) + " ranks but " + std::to_string(lesson.data.train.count) + " training images: every rank needs at least one";
    else if (o.batch % n) bad = "--batch " + std::to_string(o.batch) + " cannot be split into " + std::to_string(n) + " equal shards (choose a multiple of the rank count)";
    else if (last_rows < n) bad = std::to_string(lesson.data.train.count) + " training images leave a last batch of " + std::to_string(last_rows) + " rows for " + std::to_string(n) + " ranks (every rank needs one: change --limit)";
    if (!bad.empty()) {
        if (rank == 0) std::fprintf(stderr, "lesson09_data_parallel: %s\n", bad.c_str());
        return 2;
    }
    const size_t workspace_floats = bias_grad_workspace_floats(o.batch, o.widest_layer());
    Mlp& net = lesson.model(BatchPipeline::staging_slots(false), true, workspace_floats * sizeof(float));
    float* workspace = lesson.ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    const dp::Engine engine = dp::choose_engine(engine_flag, lesson.on_cpu_backend());
    BatchPipeline data(lesson, net.staged_pixels, net.staged_labels, false);
    DeviceLosses losses(lesson.ledger);
    const cudaStream_t compute = data.compute();
    cudaStream_t comm;  // the communication stream: staging copies, NCCL kernels
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
    cudaEvent_t backward_start, backward_done;
    CUDA_CHECK(cudaEventCreate(&backward_start));
    CUDA_CHECK(cudaEventCreate(&backward_done));
    std::vector<Bucket> buckets(net.layers.size());  // gradient buckets: one per layer (DDP: ~25 MB each)
    size_t bytes_per_step = 0;
    for (size_t l = 0; l < buckets.size(); ++l) {
        Bucket& b = buckets[l];
        b.weights = size_t(net.layers[l].in) * net.layers[l].out, b.floats = b.weights + net.layers[l].out;
        bytes_per_step += b.floats * sizeof(float);
        if (engine == dp::Engine::mpi_host_staged)
            b.host = lesson.ledger.allocate_host<float>(MemoryCategory::gradients, "all-reduce bucket " + std::to_string(l + 1) + " (host staging)", b.floats, HostMemory::pinned);
        for (cudaEvent_t* e : {&b.grads_ready, &b.staged, &b.reduce_start, &b.reduced}) CUDA_CHECK(cudaEventCreate(e));
    }
    dp::Group group = dp::world_group(engine);
    dp::ReduceTimes reduce_times;
    const ForwardPass forward = [](Mlp& m, int rows, cudaStream_t s) { forward_fast(m, rows, kFastestGemm, s); };

    // One training step on this rank's shard of `batch`, the gradients summed over `g`'s ranks.
    const auto step = [&](const dp::Group& g, const BatchPipeline::DeviceBatch& batch, BatchPipeline& pipeline, PhaseTimer& timer, long step_number, int epoch, int step_in_epoch, dp::ReduceTimes* times) {
        const int first = int(long(batch.rows) * g.index / g.ranks), rows = int(long(batch.rows) * (g.index + 1) / g.ranks) - first;
        if (g.index == fail_rank && step_number == fail_step) throw std::runtime_error("rank " + std::to_string(rank) + ": the failure asked for by --fail-rank (step " + std::to_string(step_number) + ")");
        {
            auto t = timer.scope(Phase::normalize, compute);
            normalize_pixels(batch.pixels + size_t(first) * kMnistPixels, net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, compute);
        }
        {
            auto t = timer.scope(Phase::forward, compute);
            forward(net, rows, compute);
        }
        {
            auto t = timer.scope(Phase::loss, compute);
            Mlp::Layer& top = net.layers.back();
            softmax_cross_entropy(top.output, batch.labels + first, top.output_grad, net.row_losses, net.mean_loss, rows, kMnistClasses, compute);
            count_correct(top.output, batch.labels + first, net.correct, rows, kMnistClasses, nullptr, compute);
            if (times) losses.add(net.mean_loss, rows, step_number, compute);
            pipeline.done_reading(batch);
            if (g.ranks > 1) {  // the shard's mean gradient · rows_r/B: the ranks' sum is the global batch's mean
                const size_t count = size_t(rows) * kMnistClasses;
                scale_kernel<<<unsigned((count + 255) / 256), 256, 0, compute>>>(top.output_grad, count, float(rows) / float(batch.rows));
                CUDA_CHECK(cudaGetLastError());
            }
        }
        const auto start_reduce = [&](Bucket& b, size_t l, cudaEvent_t after) {  // queue bucket l's reduction
            Mlp::Layer& layer = net.layers[l];
            CUDA_CHECK(cudaStreamWaitEvent(comm, after, 0));  // not before its gradients exist
            CUDA_CHECK(cudaEventRecord(b.reduce_start, comm));
            if (engine == dp::Engine::mpi_host_staged) {  // MPI reads host memory: stage the bucket there
                CUDA_CHECK(cudaMemcpyAsync(b.host, layer.weight_grad, b.weights * sizeof(float), cudaMemcpyDeviceToHost, comm));
                CUDA_CHECK(cudaMemcpyAsync(b.host + b.weights, layer.bias_grad, (b.floats - b.weights) * sizeof(float), cudaMemcpyDeviceToHost, comm));
            }
#if defined(HAVE_NCCL)
            if (engine == dp::Engine::nccl) {  // NCCL's kernels on the comm stream, in place, one group per bucket
                NCCL_CHECK(ncclGroupStart());
                NCCL_CHECK(ncclAllReduce(layer.weight_grad, layer.weight_grad, b.weights, ncclFloat, ncclSum, g.nccl, comm));
                NCCL_CHECK(ncclAllReduce(layer.bias_grad, layer.bias_grad, b.floats - b.weights, ncclFloat, ncclSum, g.nccl, comm));
                NCCL_CHECK(ncclGroupEnd());
                CUDA_CHECK(cudaEventRecord(b.reduced, comm));
            }
#endif
            CUDA_CHECK(cudaEventRecord(b.staged, comm));
        };
        {
            auto t = timer.scope(Phase::backward, compute);  // lesson 04's backward_fast, a layer at a time
            CUDA_CHECK(cudaEventRecord(backward_start, compute));
            for (size_t l = net.layers.size(); l-- > 0;) {
                Mlp::Layer& layer = net.layers[l];
                linear_backward_weight(kFastestGemm, l == 0 ? net.input : net.layers[l - 1].output, layer.output_grad, layer.weight_grad, rows, layer.in, layer.out, 0.0f, compute);
                bias_grad_two_pass(layer.output_grad, layer.bias_grad, rows, layer.out, layer.out, 0.0f, workspace, workspace_floats, compute);
                CUDA_CHECK(cudaEventRecord(buckets[l].grads_ready, compute));  // DDP's per-parameter hook fires here
                if (overlap) start_reduce(buckets[l], l, buckets[l].grads_ready);
                if (l > 0) {
                    Mlp::Layer& previous = net.layers[l - 1];
                    linear_backward_input(kFastestGemm, layer.output_grad, layer.weight, previous.output_grad, rows, layer.in, layer.out, compute);
                    relu_backward(previous.output_grad, previous.output, previous.output_grad, size_t(rows) * layer.in, compute);
                }
            }
            CUDA_CHECK(cudaEventRecord(backward_done, compute));
        }
        if (!overlap)  // the baseline: every bucket after the whole backward pass
            for (size_t l = buckets.size(); l-- > 0;) start_reduce(buckets[l], l, backward_done);
        // The host carries MPI: post each bucket's MPI_Iallreduce once its staging copy is done (last layer first, the
        // order every rank posts in), poll them all against one deadline, and copy each result back on the comm stream.
        std::vector<std::pair<double, double>> intervals;
        double backward_end_ms = 0;
        if (engine != dp::Engine::nccl) {
            const Clock::time_point origin = Clock::now();
            const auto deadline = origin + std::chrono::duration<double>(timeout_s);
            const auto ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - origin).count(); };
            size_t posted = 0, done = 0, count = buckets.size();
            std::vector<double> posted_at(count);
            bool backward_seen = false;
            while (done < count) {
                bool progress = false;
                if (!backward_seen && dp::event_done(backward_done)) backward_seen = true, backward_end_ms = ms();
                if (posted < count && dp::event_done(buckets[count - 1 - posted].staged)) {
                    Bucket& b = buckets[count - 1 - posted];
                    Mlp::Layer& layer = net.layers[count - 1 - posted];
                    if (engine == dp::Engine::mpi_host_staged) {
                        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, b.host, int(b.floats), MPI_FLOAT, MPI_SUM, g.mpi, &b.requests[0]));
                        b.requests[1] = MPI_REQUEST_NULL;
                    } else {  // CUDA-aware MPI: device pointers, no staging
                        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, layer.weight_grad, int(b.weights), MPI_FLOAT, MPI_SUM, g.mpi, &b.requests[0]));
                        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, layer.bias_grad, int(b.floats - b.weights), MPI_FLOAT, MPI_SUM, g.mpi, &b.requests[1]));
                    }
                    posted_at[posted++] = ms(), progress = true;
                }
                int complete = 0;
                if (done < posted) MPI_CHECK(MPI_Testall(2, buckets[count - 1 - done].requests, &complete, MPI_STATUSES_IGNORE));
                if (complete) {
                    const size_t l = count - 1 - done;
                    Bucket& b = buckets[l];
                    if (engine == dp::Engine::mpi_host_staged) {
                        CUDA_CHECK(cudaMemcpyAsync(net.layers[l].weight_grad, b.host, b.weights * sizeof(float), cudaMemcpyHostToDevice, comm));
                        CUDA_CHECK(cudaMemcpyAsync(net.layers[l].bias_grad, b.host + b.weights, (b.floats - b.weights) * sizeof(float), cudaMemcpyHostToDevice, comm));
                    }
                    CUDA_CHECK(cudaEventRecord(b.reduced, comm));
                    intervals.emplace_back(posted_at[done], ms());
                    if (times) timer.trace_host_work(150, "MPI all-reduce (host clock)", dp::bucket_slice_name(l), epoch, step_in_epoch, origin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(posted_at[done])), Clock::now(), b.floats * sizeof(float));
                    ++done, progress = true;
                }
                if (Clock::now() > deadline) dp::abort_all("the all-reduce of bucket " + std::to_string(count - done) + " (step " + std::to_string(step_number) + ") did not complete within --comm-timeout: another rank failed or hangs");
                if (!progress) std::this_thread::sleep_for(std::chrono::microseconds(20));
            }
            if (!backward_seen) backward_end_ms = 0, CUDA_CHECK(cudaEventSynchronize(backward_done));  // (cannot happen: staged waits for it)
        }
#if defined(HAVE_NCCL)
        else {  // NCCL: wait for the last bucket with a deadline, then read the events' times
            dp::nccl_wait_or_abort(g.nccl, buckets[0].reduced, "the all-reduce of step " + std::to_string(step_number));
            CUDA_CHECK(cudaEventSynchronize(backward_done));
            backward_end_ms = dp::elapsed_ms(backward_start, backward_done);
            for (Bucket& b : buckets) intervals.emplace_back(dp::elapsed_ms(backward_start, b.reduce_start), dp::elapsed_ms(backward_start, b.reduced));
        }
#endif
        if (times) times->add_step(intervals, backward_end_ms);
        {
            auto t = timer.scope(Phase::optimizer, compute);
            for (size_t l = 0; l < buckets.size(); ++l)  // every bucket's sum must be back before the step
                if (int(l) != unwaited_bucket) CUDA_CHECK(cudaStreamWaitEvent(compute, buckets[l].reduced, 0));
            optimizer_update(net, o, lesson.lr_at(step_number), int(step_number + 1), compute);
        }
    };

    const std::vector<std::vector<float>> initial = download_parameters(lesson.ledger, net);  // for the comparison
    long step_number = 0;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        lesson.timer.begin_epoch(epoch);
        losses.start_epoch(compute);
        data.start_epoch(epoch);
        for (size_t b = 0; b < data.batches(); ++b) {
            step(group, data.wait_for_batch(b), data, lesson.timer, step_number, epoch, int(b), &reduce_times);
            ++step_number;
            data.prefetch_next(b);
        }
        losses.copy_epoch_sum(lesson.timer, compute);
        const EpochTiming& timing = lesson.timer.end_epoch();
        double loss_sum = losses.epoch_sum();  // this rank's shards: the epoch's figures are sums over ranks
        dp::allreduce_sum(&loss_sum, 1, MPI_DOUBLE, group.mpi, "the epoch's loss sum");
        dp::sum_device_counter(net.correct, group.mpi, compute);
        lesson.finish_epoch(epoch, timing, loss_sum, forward, compute);
        if (!dp::same_weights_on_every_rank(download_parameters(lesson.ledger, net), group.mpi, ("epoch " + std::to_string(epoch)).c_str())) return 1;
    }
    dp::print_reduce_table(lesson, engine, n, overlap, bytes_per_step, reduce_times, lesson.streams_overlap());
    if (compare_steps > 0)
        dp::print_scaling_comparison(lesson, net, initial, compare_steps, group, compute, [&](const dp::Group& g, int steps) {
            PhaseTimer timer;  // its own timer and pipeline: the lesson's tables stay about the training above
            MemoryLedger ledger;
            BatchPipeline pipeline(lesson, ledger, timer, net.staged_pixels, net.staged_labels, false);
            timer.begin_epoch(1);
            pipeline.start_epoch(1, size_t(steps));
            for (int s = 0; s < steps; ++s) {
                step(g, pipeline.wait_for_batch(s), pipeline, timer, s, 1, s, nullptr);
                pipeline.prefetch_next(s);
            }
            return timer.end_epoch().wall_ms / steps;
        });
    if (rank == 0 && !weights_path.empty()) dp::write_parameters(weights_path, download_parameters(lesson.ledger, net));
    return lesson.finish();
}

}  // namespace

int main(int argc, char** argv) {
    dp::start_mpi(&argc, &argv);
    const int code = run_lesson(train, argc, argv);
    if (code == 1) dp::abort_all("failed (see above); stopping every rank");  // the others may wait in a collective
    MPI_CHECK(MPI_Finalize());
    return code;
}
