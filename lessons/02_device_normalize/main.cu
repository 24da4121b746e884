// lessons/02_device_normalize/main.cu — Lesson 02: send the raw uint8 pixels, normalize them on the device. The one
// change from lesson 01: the batch crosses PCIe as the uint8 pixels MNIST stores (128 × 784 = 100,352 bytes, a quarter
// of lesson 01's floats), and one more kernel (kernels/normalize.cuh) turns them into floats on the device, with the
// formula the host used (common/normalize_pixel.h): bitwise the same inputs, so the same weights as lesson 01. The
// model's buffers are lesson 01's, by lesson.allocate_model(); README.md says which file holds each part of the loop.
#include <cstdio>
#include <vector>

#include "lessons/lesson.h"  // the harness: flags, MNIST, timers, evaluation, tables (what every lesson repeats)

#include "common/reference_mlp.h"  // epoch_order, gather_batch: as the reference trainer does
#include "kernels/count_correct.cuh"
#include "kernels/elementwise.cuh"  // bias_add_kernel, relu_forward_kernel, relu_backward_kernel
#include "kernels/gemm_v1_naive.cuh"
#include "kernels/normalize.cuh"
#include "kernels/bias_grad.cuh"
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

int train(int argc, char** argv) {
    Lesson lesson(argc, argv, "lesson02_device_normalize",
                  "copy the raw uint8 pixels, normalize on the device (1 byte per pixel over PCIe)");
    const TrainOptions& o = lesson.options;
    const MnistSplit& train_set = lesson.data.train;
    MemoryLedger& ledger = lesson.ledger;
    PhaseTimer& timer = lesson.timer;
    const cudaStream_t compute = 0;  // the default stream: every call runs after the previous one has finished
    Mlp& net = lesson.allocate_model(/*staging_slots=*/1, /*stage_raw_pixels=*/true);  // uint8 pixels land in staging

    // One batch in pageable host memory (plain operator new): what cudaMemcpy copies from.
    uint8_t* batch_pixels = ledger.allocate_host<uint8_t>(MemoryCategory::input_staging, "batch pixels (uint8)",
                                                          size_t(o.batch) * kMnistPixels, HostMemory::pageable);
    uint8_t* batch_labels =
        ledger.allocate_host<uint8_t>(MemoryCategory::input_staging, "batch labels", o.batch, HostMemory::pageable);

    long step = 0;
    uint64_t image_bytes_per_epoch = 0;
    std::vector<double> step_losses;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
        timer.begin_epoch(epoch);
        timer.begin(Phase::host);
        const std::vector<uint32_t> order = epoch_order(o.seed, epoch, train_set.count);  // this epoch's shuffle
        timer.end(Phase::host);
        double loss_sum = 0;
        image_bytes_per_epoch = 0;
        for (size_t b = 0; b < lesson.batches_per_epoch(); ++b) {
            const int rows = lesson.rows_in_batch(b);
            {  // host work: gather this batch's pixels and labels, in the epoch's shuffled order
                auto t = timer.scope(Phase::host);
                gather_batch(train_set, order, b * o.batch, rows, batch_pixels, batch_labels);
            }
            const size_t pixel_bytes = size_t(rows) * kMnistPixels;
            {  // 1 byte per pixel from pageable memory: the driver stages it through its own pinned buffer
                auto t = timer.scope(Phase::h2d, compute, pixel_bytes + rows);
                CUDA_CHECK(cudaMemcpy(net.staged_pixels, batch_pixels, pixel_bytes, cudaMemcpyHostToDevice));
                CUDA_CHECK(cudaMemcpy(net.staged_labels, batch_labels, rows, cudaMemcpyHostToDevice));
                ledger.record_copy(CopyDirection::host_to_device, pixel_bytes + rows, HostMemory::pageable);
            }
            image_bytes_per_epoch += pixel_bytes;
            {  // uint8 → float on the device, (p / 255 − mean) / std: 4 pixels per thread (uchar4 in, float4 out)
                auto t = timer.scope(Phase::normalize, compute);
                const size_t n = size_t(rows) * kMnistPixels;
                normalize_pixels_kernel<true, float><<<grid_for_4_per_thread(n, 256), 256, 0, compute>>>(
                    n, net.staged_pixels, net.input, kMnistMean, kMnistStd);
                CUDA_CHECK(cudaGetLastError());
            }
            {
                auto t = timer.scope(Phase::forward, compute);
                forward(net, rows, compute);
            }
            {  // mean loss and dlogits in one fused kernel, then the batch mean; correct predictions counted
                auto t = timer.scope(Phase::loss, compute);
                const float* logits = net.layers.back().output;
                softmax_cross_entropy(logits, net.staged_labels, net.layers.back().output_grad, net.row_losses,
                                      net.mean_loss, rows, kMnistClasses, compute);
                count_correct(logits, net.staged_labels, net.correct, rows, kMnistClasses, nullptr, compute);
            }
            float loss = 0;
            {  // the loss, every step: cudaMemcpy returns only when the GPU has run everything queued before it
                auto t = timer.scope(Phase::d2h, compute, sizeof(float));
                CUDA_CHECK(cudaMemcpy(&loss, net.mean_loss, sizeof(float), cudaMemcpyDeviceToHost));
                ledger.record_copy(CopyDirection::device_to_host, sizeof(float), HostMemory::pageable);
            }
            loss_sum += double(loss) * rows;
            step_losses.push_back(loss);
            {
                auto t = timer.scope(Phase::backward, compute);
                backward(net, rows, compute);
            }
            {
                auto t = timer.scope(Phase::optimizer, compute);
                optimizer_update(net, o, lesson.lr_at(step), int(step + 1), compute);  // lesson 01's optimizer_step
            }
            ++step;
        }
        lesson.finish_epoch(epoch, timer.end_epoch(), loss_sum, net, forward,
                            compute);  // + the test set, on the device
    }

    std::printf("\nimage bytes copied per epoch: %s (1 byte per pixel; lesson 01 copied 4× as many: %s)\n",
                format_bytes(image_bytes_per_epoch).c_str(), format_bytes(4 * image_bytes_per_epoch).c_str());
    lesson.add_result("image_bytes_per_epoch", int64_t(image_bytes_per_epoch));
    lesson.add_series("step_losses", step_losses);
    return lesson.finish();  // tables, the weights' checksum, JSON
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
