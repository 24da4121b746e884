// lessons/01_naive_fp32/main.cu — Lesson 01: the baseline every later lesson changes one thing of.
//
// The training loop as a first CUDA program writes it: every buffer its own cudaMalloc; the training set normalized
// to float32 on the host once (4 bytes per pixel from then on); each batch gathered into pageable memory and sent with
// cudaMemcpy (128 × 784 × 4 = 401,408 bytes); the simple kernels one after the other on the default stream (naive
// GEMM, then bias and ReLU as kernels of their own; the fused loss; one optimizer kernel per tensor); the loss read
// back after every step, a cudaMemcpy that waits for the GPU. Phases are timed with CUDA events (lesson.timer); the
// ledger counts every byte allocated and copied. README.md beside this file explains what it prints.
#include <cstdio>
#include <string>
#include <vector>

#include "lessons/lesson.h"  // the harness: flags, MNIST, timers, evaluation, tables (what every lesson repeats)

#include "common/reference_mlp.h"  // init_parameters, epoch_order, gather_batch: as the reference trainer does
#include "kernels/count_correct.cuh"
#include "kernels/elementwise.cuh"  // bias_add_kernel, relu_forward_kernel, relu_backward_kernel
#include "kernels/gemm_v1_naive.cuh"
#include "kernels/bias_grad.cuh"
#include "kernels/optimizers.cuh"
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

// One AdamW (or, with --optimizer sgd, momentum SGD) step on every weight and bias: one elementwise kernel each.
void optimizer_step(Mlp& net, const TrainOptions& o, double lr, int step, cudaStream_t stream) {
    const AdamWParams adamw{float(lr), float(o.beta1), float(o.beta2), float(o.epsilon), float(o.weight_decay)};
    const SgdParams sgd{float(lr), float(o.momentum), float(o.weight_decay)};
    const float bc1 = adamw_bias_correction(adamw.beta1, step), bc2 = adamw_bias_correction(adamw.beta2, step);
    const auto update = [&](float* p, const float* g, float* m, float* v,
                            size_t n) {  // 4 per thread; SGD: m = velocity
        if (o.optimizer == OptimizerKind::sgd)
            sgd_momentum_kernel<true><<<grid_for_4_per_thread(n, 256), 256, 0, stream>>>(n, p, g, m, sgd);
        else
            adamw_kernel<true><<<grid_for_4_per_thread(n, 256), 256, 0, stream>>>(n, p, g, m, v, adamw, bc1, bc2);
        CUDA_CHECK(cudaGetLastError());
    };
    for (Mlp::Layer& layer : net.layers) {
        update(layer.weight, layer.weight_grad, layer.weight_m, layer.weight_v, size_t(layer.in) * layer.out);
        update(layer.bias, layer.bias_grad, layer.bias_m, layer.bias_v, size_t(layer.out));
    }
}

int train(int argc, char** argv) {
    Lesson lesson(argc, argv, "lesson01_naive_fp32",
                  "naive fp32: images normalized to float on the host, then copied (4 bytes per pixel)");
    const TrainOptions& o = lesson.options;
    const MnistSplit& train_set = lesson.data.train;
    MemoryLedger& ledger = lesson.ledger;
    PhaseTimer& timer = lesson.timer;
    const cudaStream_t compute = 0;  // the default stream: every call runs after the previous one has finished
    lesson.require_fits(lesson.model_shape(/*staging_slots=*/1, /*stage_raw_pixels=*/false));  // else exit 2

    // The model's device memory: one cudaMalloc per buffer; the ledger only counts it, by category.
    using C = MemoryCategory;
    std::vector<void*> device_buffers;
    const auto device_malloc = [&](auto** buffer, size_t count, C category, const std::string& name,
                                   const std::vector<float>* initial = nullptr) {
        CUDA_CHECK(cudaMalloc(buffer, count * sizeof(**buffer)));
        ledger.track(*buffer, count * sizeof(**buffer), category, name);
        device_buffers.push_back(*buffer);
        if (category == C::optimizer_state) CUDA_CHECK(cudaMemset(*buffer, 0, count * sizeof(**buffer)));  // from 0
        if (initial == nullptr) return;  // else the initial weights, from the host (a pageable copy, counted)
        CUDA_CHECK(cudaMemcpy(*buffer, initial->data(), count * sizeof(**buffer), cudaMemcpyHostToDevice));
        ledger.record_copy(CopyDirection::host_to_device, count * sizeof(**buffer), HostMemory::pageable);
    };
    Mlp net;
    const std::vector<int> sizes = o.layer_sizes();                              // 784, hidden..., 10
    const std::vector<LayerParameters> init = init_parameters(o.seed, sizes);    // the reference trainer's Philox init
    device_malloc(&net.input, size_t(o.batch) * sizes[0], C::activations, "X");  // the batch's floats land here
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
        Mlp::Layer& layer = net.layers.emplace_back(Mlp::Layer{sizes[l], sizes[l + 1]});
        const size_t weights = size_t(layer.in) * layer.out, biases = size_t(layer.out);
        const std::string n = std::to_string(l + 1);
        device_malloc(&layer.weight, weights, C::parameters, "W" + n, &init[l].weight);
        device_malloc(&layer.bias, biases, C::parameters, "b" + n, &init[l].bias);
        device_malloc(&layer.weight_grad, weights, C::gradients, "dW" + n);
        device_malloc(&layer.bias_grad, biases, C::gradients, "db" + n);
        device_malloc(&layer.weight_m, weights, C::optimizer_state, "m_W" + n);  // AdamW's 1st moment; SGD's velocity
        device_malloc(&layer.bias_m, biases, C::optimizer_state, "m_b" + n);
        if (o.optimizer == OptimizerKind::adamw) {  // AdamW's second moments
            device_malloc(&layer.weight_v, weights, C::optimizer_state, "v_W" + n);
            device_malloc(&layer.bias_v, biases, C::optimizer_state, "v_b" + n);
        }
        device_malloc(&layer.output, size_t(o.batch) * layer.out, C::activations, "Y" + n);
        device_malloc(&layer.output_grad, size_t(o.batch) * layer.out, C::activations, "dY" + n);
    }
    device_malloc(&net.staged_labels, size_t(o.batch), C::input_staging, "labels");
    device_malloc(&net.row_losses, size_t(o.batch), C::workspace, "row_losses");  // the loss kernel's scratch
    device_malloc(&net.mean_loss, 1, C::workspace, "mean_loss");
    device_malloc(&net.correct, 1, C::workspace, "correct");  // correct predictions, counted on the device
    CUDA_CHECK(cudaMemset(net.correct, 0, sizeof(int)));
    lesson.upload_test_set();  // the harness evaluates on the test set, uploaded once
    // The training set as float32, normalized on the host once (before training): 4 bytes per pixel from now on.
    float* train_floats = ledger.allocate_host<float>(C::input_staging, "training set as float",
                                                      train_set.images.size(), HostMemory::pageable);
    for (size_t i = 0; i < train_set.images.size(); ++i) train_floats[i] = normalize_pixel(train_set.images[i]);
    // One batch in pageable host memory (plain operator new): what cudaMemcpy copies from.
    float* batch_pixels = ledger.allocate_host<float>(C::input_staging, "batch pixels (float)",
                                                      size_t(o.batch) * kMnistPixels, HostMemory::pageable);
    uint8_t* batch_labels =
        ledger.allocate_host<uint8_t>(C::input_staging, "batch labels", o.batch, HostMemory::pageable);

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
            {  // host work: gather this batch's floats and labels, in the epoch's shuffled order
                auto t = timer.scope(Phase::host);
                gather_batch(train_set, train_floats, order, b * o.batch, rows, batch_pixels, batch_labels);
            }
            const size_t pixel_bytes = size_t(rows) * kMnistPixels * sizeof(float);
            {  // 4 bytes per pixel from pageable memory: the driver stages it through its own pinned buffer
                auto t = timer.scope(Phase::h2d, compute, pixel_bytes + rows);
                CUDA_CHECK(cudaMemcpy(net.input, batch_pixels, pixel_bytes, cudaMemcpyHostToDevice));
                CUDA_CHECK(cudaMemcpy(net.staged_labels, batch_labels, rows, cudaMemcpyHostToDevice));
                ledger.record_copy(CopyDirection::host_to_device, pixel_bytes + rows, HostMemory::pageable);
            }
            image_bytes_per_epoch += pixel_bytes;
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
                optimizer_step(net, o, lesson.lr_at(step), int(step + 1), compute);
            }
            ++step;
        }
        lesson.finish_epoch(epoch, timer.end_epoch(), loss_sum, net, forward,
                            compute);  // + the test set, on the device
    }

    std::printf("\nimage bytes copied per epoch: %s (4 bytes per pixel)\n",
                format_bytes(image_bytes_per_epoch).c_str());
    lesson.add_result("image_bytes_per_epoch", int64_t(image_bytes_per_epoch));
    lesson.add_series("step_losses", step_losses);
    const int status = lesson.finish(net);  // tables, the weights' checksum, JSON
    for (void* buffer : device_buffers) CUDA_CHECK(cudaFree(ledger.untrack(buffer)));
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    return run_lesson(train, argc, argv);
}
