// lessons/09_data_parallel/main.cu — Lesson 09: data parallelism. N processes (mpirun -n N), one per GPU, each on its
// own shard of every global batch; gradients summed across ranks every step: every rank holds the same weights.
// What changes from lesson 04 (same model, kernels and data path):
//   * rank r takes rows [r·B/N, (r+1)·B/N) of each global batch of B, its loss gradient scaled by rows_r/B: the sum
//     over ranks is the global batch's mean gradient (with N = 1 nothing is scaled: lesson 04's bits);
//   * each layer's gradients are one bucket, whose all-reduce starts the moment that layer's backward is done (an
//     event) while earlier layers are still differentiated; the optimizer waits on the buckets' events (--overlap off:
//     all after the backward pass). NCCL where built and one GPU per rank, else MPI; a deadline on every collective;
//   * after every epoch the ranks compare a checksum of their weights, and the run fails if any differs.
#include <mpi.h>
#include <chrono>
#include <thread>
#include "lessons/09_data_parallel/scaling_comparison.h"  // and allreduce.h: MPI and NCCL plumbing
#include "lessons/batch_pipeline.h"                       // lesson 03's data path
#include "lessons/lesson.h"
#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

__global__ void scale_kernel(float* x, size_t n, float factor) {  // dlogits · rows_r / B
    const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}

// One layer's weight and bias gradients, reduced together; buckets[0] is the last layer's (DDP's order too).
struct Bucket {
    Mlp::Layer* layer = nullptr;
    size_t index = 0;       // the layer's, from 0
    float* host = nullptr;  // host-staged MPI: their pinned copy, weight gradients then bias gradients
    size_t weights = 0, biases = 0;
    cudaEvent_t grads_ready, staged, reduce_start, reduced;
    MPI_Request requests[2];  // weights, biases
    double posted_ms = 0;     // when MPI_Iallreduce was called
};

int train(int argc, char** argv) {
    dp::RankArgs args = dp::start_rank(argc, argv);  // one GPU per rank; rank 0 prints; CPU: 512 images
    dp::Flags flags;
    Lesson lesson(args.argc(), args.argv(), "lesson09_data_parallel",
                  "data parallelism: N ranks, a bucketed all-reduce overlapped with the backward pass",
                  dp::flag_adder(flags), 512);
    const TrainOptions& o = lesson.options;
    if (!dp::split_is_possible(lesson)) return 2;  // every rank sees the same flags and data: every rank stops
    const bool overlap = flags.overlap == "on";
    const size_t workspace_floats = bias_grad_workspace_floats(o.batch, o.widest_layer());
    Mlp& net = lesson.allocate_model(BatchPipeline::staging_slots(false), true, workspace_floats * sizeof(float));
    float* workspace = lesson.ledger.allocate<float>(MemoryCategory::workspace, "bias-grad sums", workspace_floats);
    const dp::Engine engine = dp::choose_engine(flags, lesson.on_cpu_backend());  // prints which
    BatchPipeline data(lesson, lesson.ledger, lesson.timer, net.staged_pixels, net.staged_labels);
    DeviceLosses losses(lesson.ledger);
    const cudaStream_t compute = data.compute();
    cudaStream_t comm;  // the communication stream: staging copies, NCCL's kernels
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
    cudaEvent_t backward_start, backward_done;
    for (cudaEvent_t* e : {&backward_start, &backward_done}) CUDA_CHECK(cudaEventCreate(e));
    std::vector<Bucket> buckets(net.layers.size());  // one bucket per layer (DDP's are ~25 MB of parameters)
    for (size_t l = 0; l < buckets.size(); ++l) {
        Bucket& b = buckets[buckets.size() - 1 - l];
        b.layer = &net.layers[l], b.index = l, b.weights = size_t(b.layer->in) * b.layer->out, b.biases = b.layer->out;
        if (engine == dp::Engine::mpi_host_staged)
            b.host = lesson.ledger.allocate_host<float>(MemoryCategory::gradients, "bucket " + std::to_string(l + 1),
                                                        b.weights + b.biases, HostMemory::pinned);
        for (cudaEvent_t* e : {&b.grads_ready, &b.staged, &b.reduce_start, &b.reduced}) CUDA_CHECK(cudaEventCreate(e));
    }
    const auto stage = [&](Bucket& b, cudaMemcpyKind kind) {  // host-staged MPI: a bucket's copies, on the comm stream
        const bool down = kind == cudaMemcpyDeviceToHost;     // (counted in the "bytes moved" line)
        lesson.ledger.record_copy(CopyDirection(down), (b.weights + b.biases) * 4, HostMemory::pinned);  // 1: d→h
        float *weights = b.layer->weight_grad, *biases = b.layer->bias_grad, *host_biases = b.host + b.weights;
        CUDA_CHECK(cudaMemcpyAsync(down ? b.host : weights, down ? weights : b.host, b.weights * 4, kind, comm));
        CUDA_CHECK(cudaMemcpyAsync(down ? host_biases : biases, down ? biases : host_biases, b.biases * 4, kind, comm));
    };
    dp::Group group = dp::world_group(engine);
    dp::ReduceTimes reduce_times;
    const ForwardPass forward = [](Mlp& m, int rows, cudaStream_t s) { forward_fast(m, rows, kFastestGemm, s); };
    // One training step on this rank's shard of `batch`, the gradients summed over `g`'s ranks.
    const dp::Step step = [&](const dp::Group& g, const BatchPipeline::DeviceBatch& batch, BatchPipeline& pipeline,
                              PhaseTimer& timer, long step_number, int epoch, int step_in_epoch,
                              dp::ReduceTimes* times) {
        const cudaStream_t compute = pipeline.compute();  // (the comparison's pipeline has streams of its own)
        const int first = int(long(batch.rows) * g.index / g.ranks);
        const int rows = int(long(batch.rows) * (g.index + 1) / g.ranks) - first;
        dp::fail_if_asked(flags, g.index, step_number);  // the tests' failing rank
        {
            auto t = timer.scope(Phase::normalize, compute);
            normalize_pixels(batch.pixels + size_t(first) * kMnistPixels, net.input, size_t(rows) * kMnistPixels,
                             kMnistMean, kMnistStd, compute);
        }
        {  // (lesson 04's forward_fast)
            auto t = timer.scope(Phase::forward, compute);
            forward(net, rows, compute);
        }
        {
            auto t = timer.scope(Phase::loss, compute);
            Mlp::Layer& top = net.layers.back();
            softmax_cross_entropy(top.output, batch.labels + first, top.output_grad, net.row_losses, net.mean_loss,
                                  rows, kMnistClasses, compute);
            count_correct(top.output, batch.labels + first, net.correct, rows, kMnistClasses, nullptr, compute);
            if (times) losses.add(net.mean_loss, rows, step_number, compute);
            pipeline.done_reading(batch);
            if (g.ranks > 1) {  // the shard's mean gradient · rows/B: the sum over ranks is the global batch's mean
                const size_t count = size_t(rows) * kMnistClasses, blocks = (count + 255) / 256;
                scale_kernel<<<blocks, 256, 0, compute>>>(top.output_grad, count, float(rows) / float(batch.rows));
                CUDA_CHECK(cudaGetLastError());
            }
        }
        const auto start_reduce = [&](Bucket& b, cudaEvent_t after) {  // queue one bucket's reduction
            CUDA_CHECK(cudaStreamWaitEvent(comm, after, 0));           // not before its gradients exist
            CUDA_CHECK(cudaEventRecord(b.reduce_start, comm));
            if (engine == dp::Engine::mpi_host_staged) stage(b, cudaMemcpyDeviceToHost);  // MPI reads host memory
            if (engine == dp::Engine::nccl) {  // NCCL's kernels on the comm stream, in place: nothing staged
                dp::nccl_all_reduce(g, b.layer->weight_grad, b.weights, b.layer->bias_grad, b.biases, comm);
                CUDA_CHECK(cudaEventRecord(b.reduced, comm));
            }
            CUDA_CHECK(cudaEventRecord(b.staged, comm));
        };
        {
            auto t = timer.scope(Phase::backward, compute);  // lesson 04's backward_fast, a layer at a time
            CUDA_CHECK(cudaEventRecord(backward_start, compute));
            for (size_t l = net.layers.size(); l-- > 0;) {
                Mlp::Layer& layer = net.layers[l];
                linear_backward_weight(kFastestGemm, l == 0 ? net.input : net.layers[l - 1].output, layer.output_grad,
                                       layer.weight_grad, rows, layer.in, layer.out, 0.0f, compute);
                bias_grad_two_pass(layer.output_grad, layer.bias_grad, rows, layer.out, layer.out, 0.0f, workspace,
                                   workspace_floats, compute);
                Bucket& bucket = buckets[net.layers.size() - 1 - l];
                CUDA_CHECK(cudaEventRecord(bucket.grads_ready, compute));  // where DDP's gradient hook fires
                if (overlap) start_reduce(bucket, bucket.grads_ready);
                if (l == 0) continue;
                Mlp::Layer& previous = net.layers[l - 1];
                linear_backward_input(kFastestGemm, layer.output_grad, layer.weight, previous.output_grad, rows,
                                      layer.in, layer.out, compute);
                relu_backward(previous.output_grad, previous.output, previous.output_grad, size_t(rows) * layer.in,
                              compute);
            }
            CUDA_CHECK(cudaEventRecord(backward_done, compute));
        }
        if (!overlap)  // the baseline: every bucket after the whole backward pass
            for (Bucket& b : buckets) start_reduce(b, backward_done);
        // MPI on the host: each bucket's MPI_Iallreduce once staged (every rank posts in the same order), all polled
        // against one deadline, each sum copied back on the comm stream. `clock`: where the reduction's time goes.
        dp::StepClock clock(timer, times, epoch, step_in_epoch);
        for (size_t posted = 0, done = 0, count = buckets.size(); engine != dp::Engine::nccl && done < count;) {
            bool progress = false;
            clock.backward_ended_if(dp::event_done(backward_done));
            if (posted < count && dp::event_done(buckets[posted].staged)) {
                Bucket& b = buckets[posted++];
                const bool staged = engine == dp::Engine::mpi_host_staged;  // else CUDA-aware: device pointers
                float* weights = staged ? b.host : b.layer->weight_grad;
                float* biases = staged ? b.host + b.weights : b.layer->bias_grad;
                MPI_CHECK(
                    MPI_Iallreduce(MPI_IN_PLACE, weights, int(b.weights), MPI_FLOAT, MPI_SUM, g.mpi, &b.requests[0]));
                MPI_CHECK(
                    MPI_Iallreduce(MPI_IN_PLACE, biases, int(b.biases), MPI_FLOAT, MPI_SUM, g.mpi, &b.requests[1]));
                b.posted_ms = clock.ms(), progress = true;
            }
            int complete = 0;
            if (done < posted) MPI_CHECK(MPI_Testall(2, buckets[done].requests, &complete, MPI_STATUSES_IGNORE));
            if (complete) {
                Bucket& b = buckets[done++];
                if (engine == dp::Engine::mpi_host_staged) stage(b, cudaMemcpyHostToDevice);  // the sum back
                CUDA_CHECK(cudaEventRecord(b.reduced, comm));  // what the optimizer waits for
                clock.bucket_done(b.index, b.posted_ms, (b.weights + b.biases) * 4), progress = true;
            }
            if (clock.ms() > flags.timeout_s * 1e3)
                dp::abort_all("an all-reduce passed --comm-timeout at step " + std::to_string(step_number));
            if (!progress) std::this_thread::sleep_for(std::chrono::microseconds(20));  // the cores are shared
        }
        if (engine == dp::Engine::nccl) {  // the last bucket, with a deadline (ncclCommAbort past it); then the times
            dp::nccl_wait_or_abort(g, buckets.back().reduced, "the all-reduce of step " + std::to_string(step_number));
            std::vector<std::pair<double, double>> intervals;
            for (Bucket& b : buckets)
                intervals.emplace_back(dp::elapsed_ms(backward_start, b.reduce_start),
                                       dp::elapsed_ms(backward_start, b.reduced));
            clock.set(dp::elapsed_ms(backward_start, backward_done), intervals);
        }
        clock.finish();
        {
            auto t = timer.scope(Phase::optimizer, compute);
            for (Bucket& b : buckets)  // every bucket's sum must be back before the update
                if (int(b.index) != flags.unwaited_bucket) CUDA_CHECK(cudaStreamWaitEvent(compute, b.reduced, 0));
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
            step(group, data.wait_for_batch(b), data, lesson.timer, step_number++, epoch, int(b), &reduce_times);
            data.prefetch_next(b);
        }
        losses.copy_epoch_sum(lesson.timer, compute);
        const EpochTiming& timing = lesson.timer.end_epoch();
        // The loss and correct counts summed over the ranks' shards; then every rank's weights checksum compared.
        if (!dp::finish_epoch(lesson, group, epoch, timing, losses.epoch_sum(), net, forward, compute)) return 1;
    }
    dp::print_reduce_table(lesson, group, overlap, reduce_times);  // (the bytes: every weight and bias)
    if (flags.compare_steps > 0)
        dp::print_scaling_comparison(lesson, net, initial, flags.compare_steps, group, compute, step);
    if (!flags.save_weights.empty()) dp::write_parameters(flags.save_weights, download_parameters(lesson.ledger, net));
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
