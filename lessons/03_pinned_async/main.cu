// lessons/03_pinned_async/main.cu — Lesson 03: the data loading bottleneck, overlapped. The model and kernels are
// lesson 02's (so are the weights). New: pinned staging buffers (cudaMallocHost: the copy engine reads them directly,
// so cudaMemcpyAsync returns at once); a loader thread (lessons/batch_loader.h) gathers batch i+1 while batch i
// trains; copies on a stream of their own, kernels on another, events between them (the completion rules are stated
// where they apply); the loss summed on the device. --resident: resident_training_set.cuh, beside this file.
#include <cstdio>
#include <optional>
#include <vector>

#include "lessons/03_pinned_async/copy_figures.h"             // the bandwidth probe, and how much copy time was hidden
#include "lessons/03_pinned_async/resident_training_set.cuh"  // --resident
#include "lessons/batch_loader.h"
#include "lessons/lesson.h"  // the harness: flags, MNIST, timers, evaluation, tables (what every lesson repeats)

#include "common/reference_mlp.h"  // epoch_order, gather_batch: as the reference trainer does
#include "kernels/bias_grad.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/elementwise.cuh"  // bias_add_kernel, relu_forward_kernel, relu_backward_kernel
#include "kernels/gemm_v1_naive.cuh"
#include "kernels/normalize.cuh"
#include "kernels/softmax_cross_entropy.cuh"

namespace {

// Y_l = relu(X_l·W_l + b_l) for each layer (no ReLU on the last: its Y is the logits). Three kernels per layer.
void forward(Mlp& net, int rows, cudaStream_t stream) {
    const float* x = net.input;
    for (size_t l = 0; l < net.layers.size(); ++l) {
        Mlp::Layer& layer = net.layers[l];
        gemm_naive_kernel<false, false><<<dim3((rows + 31) / 32, (layer.out + 7) / 8), dim3(32, 8), 0, stream>>>(
            rows, layer.out, layer.in, 1.0f, x, layer.in, layer.weight, layer.out, 0.0f, layer.output, layer.out,
            nullptr, false);  // Y = X·W
        CUDA_CHECK(cudaGetLastError());
        bias_add_kernel<<<dim3((layer.out + 31) / 32, (rows + 7) / 8), dim3(32, 8), 0, stream>>>(
            rows, layer.out, layer.bias, layer.output, layer.out);  // Y += b
        CUDA_CHECK(cudaGetLastError());
        if (l + 1 < net.layers.size()) {  // 4 elements per thread, float4 (cudaMalloc'd buffers are 256-byte aligned)
            const size_t n = size_t(rows) * layer.out;
            relu_forward_kernel<true><<<grid_for_4_per_thread(n, 256), 256, 0, stream>>>(n, layer.output, layer.output);
            CUDA_CHECK(cudaGetLastError());
        }
        x = layer.output;
    }
}

// From dlogits in the last layer's output_grad: dW = Xᵀ·dY, db = Σ_rows dY, dX = dY·Wᵀ masked by the ReLU before.
void backward(Mlp& net, int rows, cudaStream_t stream) {
    for (size_t l = net.layers.size(); l-- > 0;) {
        Mlp::Layer& layer = net.layers[l];
        const float* x = l == 0 ? net.input : net.layers[l - 1].output;
        gemm_naive_kernel<true, false><<<dim3((layer.in + 31) / 32, (layer.out + 7) / 8), dim3(32, 8), 0, stream>>>(
            layer.in, layer.out, rows, 1.0f, x, layer.in, layer.output_grad, layer.out, 0.0f, layer.weight_grad,
            layer.out, nullptr, false);  // dW = Xᵀ·dY
        CUDA_CHECK(cudaGetLastError());
        bias_grad_kernel<float, float><<<dim3((layer.out + 31) / 32), dim3(32, 32), 0, stream>>>(
            rows, layer.out, layer.output_grad, layer.out, 0.0f, layer.bias_grad);  // db = Σ dY
        CUDA_CHECK(cudaGetLastError());
        if (l == 0) continue;  // the images need no gradient
        Mlp::Layer& previous = net.layers[l - 1];
        const size_t inputs = size_t(rows) * layer.in;
        gemm_naive_kernel<false, true><<<dim3((rows + 31) / 32, (layer.in + 7) / 8), dim3(32, 8), 0, stream>>>(
            rows, layer.in, layer.out, 1.0f, layer.output_grad, layer.out, layer.weight, layer.out, 0.0f,
            previous.output_grad, layer.in, nullptr, false);  // dX = dY·Wᵀ
        CUDA_CHECK(cudaGetLastError());
        relu_backward_kernel<true><<<grid_for_4_per_thread(inputs, 256), 256, 0, stream>>>(
            inputs, previous.output_grad, previous.output, previous.output_grad);  // zero where the ReLU was off
        CUDA_CHECK(cudaGetLastError());
    }
}

constexpr int kSlots = 2;  // staging buffers: one is copied (and read by the kernels) while the loader fills the other

int train(int argc, char** argv) {
    bool resident = false;
    Lesson lesson(argc, argv, "lesson03_pinned_async",
                  "pinned staging, a loader thread, async copies on a second stream, the next batch prefetched",
                  [&](Cli& cli) {
                      cli.add_flag("--resident", &resident,
                                   "keep the whole uint8 training set on the device and gather batches there");
                  });
    const TrainOptions& o = lesson.options;
    const MnistSplit& train_set = lesson.data.train;
    MemoryLedger& ledger = lesson.ledger;
    PhaseTimer& timer = lesson.timer;
    const size_t resident_bytes = resident ? ResidentTrainingSet::bytes(train_set) : 0;  // counted in the fit check
    Mlp& net =
        lesson.allocate_model(/*staging_slots=*/resident ? 1 : kSlots, /*stage_raw_pixels=*/true, resident_bytes);
    lesson.add_config("resident", resident);
    print_h2d_bandwidth_probe(lesson, size_t(o.batch) * kMnistPixels);

    // Kernels go to `compute`, copies to `copy`: work on different streams may run at the same time.
    cudaStream_t compute, copy;
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    // copied[s]: the copy into slot s is done. consumed[s]: the kernels that read device slot s are done.
    cudaEvent_t copied[kSlots], consumed[kSlots];
    for (cudaEvent_t& event : copied) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    for (cudaEvent_t& event : consumed) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    double* loss_sum = ledger.allocate<double>(MemoryCategory::workspace, "epoch loss sum", 1);
    double* loss_sum_host =  // cudaMallocHost: pinned, so the copy into it can be asynchronous too
        ledger.allocate_host<double>(MemoryCategory::workspace, "epoch loss sum (host)", 1, HostMemory::pinned);
    std::optional<BatchLoader> loader;             // the loader thread and its pinned slots (cudaMallocHost)
    std::optional<ResidentTrainingSet> on_device;  // --resident: no loader, no per-batch copy
    if (resident)
        on_device.emplace(ledger, train_set, compute);
    else
        loader.emplace(ledger, train_set, o.batch, kSlots, &timer);  // &timer: its gathers on the --trace timeline
    const auto slot_pixels = [&](int s) { return net.staged_pixels + size_t(s) * o.batch * kMnistPixels; };
    const auto slot_labels = [&](int s) { return net.staged_labels + size_t(s) * o.batch; };

    uint64_t image_bytes_per_epoch = 0;
    // The loader's next batch (the host waits if it is behind), its copy queued into device slot batch.slot.
    const auto prefetch_next = [&] {
        timer.begin(Phase::host);
        const BatchLoader::Batch batch = loader->next();
        timer.end(Phase::host);
        const int s = batch.slot;
        // Rule 1: the kernels that read this device slot last time must be done before it is overwritten.
        CUDA_CHECK(cudaStreamWaitEvent(copy, consumed[s]));
        const size_t pixel_bytes = size_t(batch.rows) * kMnistPixels;
        timer.begin(Phase::h2d, copy);  // from pinned memory: both calls return at once, the copies run later
        CUDA_CHECK(cudaMemcpyAsync(slot_pixels(s), batch.pixels, pixel_bytes, cudaMemcpyHostToDevice, copy));
        CUDA_CHECK(cudaMemcpyAsync(slot_labels(s), batch.labels, batch.rows, cudaMemcpyHostToDevice, copy));
        timer.end(Phase::h2d, copy, pixel_bytes + batch.rows);
        ledger.record_copy(CopyDirection::host_to_device, pixel_bytes + batch.rows, HostMemory::pinned);
        image_bytes_per_epoch += pixel_bytes;
        CUDA_CHECK(cudaEventRecord(copied[s], copy));
        loader->release(s, copied[s]);  // rule 2: the loader refills host slot s only after copied[s]
    };

    long step = 0;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        timer.begin_epoch(epoch);
        timer.begin(Phase::host);
        const std::vector<uint32_t> order = epoch_order(o.seed, epoch, train_set.count);  // this epoch's shuffle
        timer.end(Phase::host);
        CUDA_CHECK(cudaMemsetAsync(loss_sum, 0, sizeof(double), compute));
        image_bytes_per_epoch = 0;
        if (resident) {  // 4 bytes per image per epoch instead of 785
            auto t = timer.scope(Phase::h2d, compute, order.size() * sizeof(uint32_t));
            on_device->upload_order(ledger, order, compute);
        } else {
            loader->start_epoch(order);
            prefetch_next();  // batch 0
        }
        for (size_t b = 0; b < lesson.batches_per_epoch(); ++b) {
            const int rows = lesson.rows_in_batch(b);
            const int s = resident ? 0 : int(b % kSlots);
            if (!resident) {  // rule 3: the kernels read slot s only after its copy (the stall is timed)
                timer.begin(Phase::input_wait, compute);
                CUDA_CHECK(cudaStreamWaitEvent(compute, copied[s]));
                timer.end(Phase::input_wait, compute);
            }
            {  // uint8 → float on the device, (p / 255 − mean) / std: 4 pixels per thread (uchar4 in, float4 out)
                auto t = timer.scope(Phase::normalize, compute);
                if (resident) on_device->gather(b * o.batch, rows, slot_pixels(s), slot_labels(s), compute);
                const size_t n = size_t(rows) * kMnistPixels;
                normalize_pixels_kernel<true, float><<<grid_for_4_per_thread(n, 256), 256, 0, compute>>>(
                    n, slot_pixels(s), net.input, kMnistMean, kMnistStd);
                CUDA_CHECK(cudaGetLastError());
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward(net, rows, compute);
            }
            {  // the loss stays on the device: summed there, read once per epoch
                auto t = timer.scope(Phase::loss, compute);
                const float* logits = net.layers.back().output;
                softmax_cross_entropy(logits, slot_labels(s), net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses, compute);
                count_correct(logits, slot_labels(s), net.correct, rows, kMnistClasses, nullptr, compute);
                accumulate_loss(net.mean_loss, rows, loss_sum, compute);
                CUDA_CHECK(cudaEventRecord(consumed[s], compute));  // the last reader of slot s in this step
            }
            {
                auto t = timer.scope(Phase::backward, compute);
                backward(net, rows, compute);
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                optimizer_update(net, o, lesson.lr_at(step), int(step + 1), compute);  // lesson 01's optimizer_step
            }
            ++step;
            if (!resident && b + 1 < lesson.batches_per_epoch()) prefetch_next();  // batch b+1's copy, queued now
        }
        {  // into pinned memory: asynchronous, read after the epoch's synchronization (rule 4)
            auto t = timer.scope(Phase::d2h, compute, sizeof(double));
            CUDA_CHECK(cudaMemcpyAsync(loss_sum_host, loss_sum, sizeof(double), cudaMemcpyDeviceToHost, compute));
            ledger.record_copy(CopyDirection::device_to_host, sizeof(double), HostMemory::pinned);
        }
        const EpochTiming& timing = timer.end_epoch();  // synchronizes the device: *loss_sum_host is written
        lesson.finish_epoch(epoch, timing, *loss_sum_host, net, forward, compute);
    }

    report_copies(lesson, timer, image_bytes_per_epoch, resident);  // how much of the copy time compute never saw
    const int status = lesson.finish();
    loader.reset();  // the loader thread first: it waits on the copied[] events destroyed below
    for (cudaEvent_t event : copied) CUDA_CHECK(cudaEventDestroy(event));
    for (cudaEvent_t event : consumed) CUDA_CHECK(cudaEventDestroy(event));
    CUDA_CHECK(cudaStreamDestroy(compute));
    CUDA_CHECK(cudaStreamDestroy(copy));
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
