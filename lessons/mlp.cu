// lessons/mlp.cu — see mlp.h. Compiled once into lesson_common.
#include "lessons/mlp.h"

#include <algorithm>
#include <type_traits>

#include "common/reference_mlp.h"  // init_parameters: the reference trainer's Philox initialization
#include "kernels/bias_grad.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/fp16_elementwise.cuh"  // cast_to_half
#include "kernels/gemm.cuh"
#include "kernels/optimizers.cuh"

template <typename Param, typename Grad>
MlpBuffers<Param, Param, Grad> allocate_initialized_model(MemoryLedger& ledger, const ModelShape& shape,
                                                          uint64_t seed) {
    MlpBuffers<Param, Param, Grad> net = allocate_mlp<Param, Param, Grad>(ledger, shape);
    initialize_model(ledger, net, seed);
    return net;
}

template <typename Param, typename Grad>
void initialize_model(MemoryLedger& ledger, MlpBuffers<Param, Param, Grad>& net, uint64_t seed) {
    std::vector<int> layer_sizes = {net.layers.front().in};
    for (const auto& layer : net.layers) layer_sizes.push_back(layer.out);
    const std::vector<LayerParameters> init = init_parameters(seed, layer_sizes);
    for (size_t l = 0; l < net.layers.size(); ++l) {
        auto& layer = net.layers[l];
        const std::vector<float>& weight = init[l].weight;
        const std::vector<float>& bias = init[l].bias;
        if constexpr (std::is_same_v<Param, float>) {
            ledger.copy_to_device(layer.weight, weight.data(), weight.size() * sizeof(float));
            ledger.copy_to_device(layer.bias, bias.data(), bias.size() * sizeof(float));
        } else if (layer.master_weight != nullptr) {  // mixed: fp32 masters; the working copy made from them
            ledger.copy_to_device(layer.master_weight, weight.data(), weight.size() * sizeof(float));
            ledger.copy_to_device(layer.master_bias, bias.data(), bias.size() * sizeof(float));
            cast_to_half(layer.master_weight, layer.weight, weight.size());
            cast_to_half(layer.master_bias, layer.bias, bias.size());
        } else {  // fp16 is all there is: round the initialization on the host
            const auto rounded = [](const std::vector<float>& x) {
                std::vector<__half> h(x.size());
                std::transform(x.begin(), x.end(), h.begin(), [](float v) { return __float2half_rn(v); });
                return h;
            };
            const std::vector<__half> weight_half = rounded(weight), bias_half = rounded(bias);
            ledger.copy_to_device(layer.weight, weight_half.data(), weight_half.size() * sizeof(__half));
            ledger.copy_to_device(layer.bias, bias_half.data(), bias_half.size() * sizeof(__half));
            CUDA_CHECK(cudaDeviceSynchronize());  // pageable sources that go out of scope here
        }
        // The optimizer state starts at zero (the gradients are overwritten by every backward pass).
        CUDA_CHECK(cudaMemset(layer.weight_m, 0, weight.size() * sizeof(float)));
        CUDA_CHECK(cudaMemset(layer.bias_m, 0, bias.size() * sizeof(float)));
        if (layer.weight_v != nullptr) {
            CUDA_CHECK(cudaMemset(layer.weight_v, 0, weight.size() * sizeof(float)));
            CUDA_CHECK(cudaMemset(layer.bias_v, 0, bias.size() * sizeof(float)));
        }
    }
    CUDA_CHECK(cudaMemset(net.correct, 0, sizeof(int)));
    CUDA_CHECK(cudaDeviceSynchronize());  // the pageable init vectors are done with before they go out of scope
}

std::vector<float> download_floats(MemoryLedger& ledger, const __half* device, size_t count, cudaStream_t stream) {
    std::vector<__half> halves(count);
    ledger.copy_to_host(halves.data(), device, count * sizeof(__half), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> floats(count);
    std::transform(halves.begin(), halves.end(), floats.begin(), [](__half x) { return __half2float(x); });
    return floats;
}

std::vector<float> download_floats(MemoryLedger& ledger, const float* device, size_t count, cudaStream_t stream) {
    std::vector<float> floats(count);
    ledger.copy_to_host(floats.data(), device, count * sizeof(float), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return floats;
}

template <typename Param, typename Act, typename Grad>
std::vector<std::vector<float>> download_parameters(MemoryLedger& ledger, MlpBuffers<Param, Act, Grad>& net) {
    CUDA_CHECK(cudaDeviceSynchronize());  // every stream's updates have landed (the copies below are on stream 0)
    std::vector<std::vector<float>> tensors;
    for (auto& layer : net.layers) {
        const size_t weights = size_t(layer.in) * layer.out, biases = size_t(layer.out);
        if (layer.master_weight != nullptr) {  // mixed precision: the fp32 masters are the weights
            tensors.push_back(download_floats(ledger, layer.master_weight, weights, 0));
            tensors.push_back(download_floats(ledger, layer.master_bias, biases, 0));
        } else {
            tensors.push_back(download_floats(ledger, layer.weight, weights, 0));
            tensors.push_back(download_floats(ledger, layer.bias, biases, 0));
        }
    }
    return tensors;
}

void optimizer_update(Mlp& net, const TrainOptions& o, double lr, int step, cudaStream_t stream) {
    if (o.optimizer == OptimizerKind::sgd) {  // --optimizer sgd: momentum SGD, the velocity in weight_m
        const SgdParams h{float(lr), float(o.momentum), float(o.weight_decay)};
        for (Mlp::Layer& layer : net.layers) {
            sgd_momentum_step(layer.weight, layer.weight_grad, layer.weight_m, size_t(layer.in) * layer.out, h, stream);
            sgd_momentum_step(layer.bias, layer.bias_grad, layer.bias_m, size_t(layer.out), h, stream);
        }
        return;
    }
    const AdamWParams h{float(lr), float(o.beta1), float(o.beta2), float(o.epsilon), float(o.weight_decay)};
    for (Mlp::Layer& layer : net.layers) {
        adamw_step(layer.weight, layer.weight_grad, layer.weight_m, layer.weight_v, size_t(layer.in) * layer.out, h,
                   step, stream);
        adamw_step(layer.bias, layer.bias_grad, layer.bias_m, layer.bias_v, size_t(layer.out), h, step, stream);
    }
}

// ---- The fast model (lesson 04 on) ----

void forward_fast(Mlp& net, int rows, GemmVersion gemm_version, cudaStream_t stream) {
    const float* x = net.input;
    for (size_t l = 0; l < net.layers.size(); ++l) {
        Mlp::Layer& layer = net.layers[l];
        const bool relu = l + 1 < net.layers.size();
        linear_forward(gemm_version, x, layer.weight, layer.bias, relu, layer.output, rows, layer.in, layer.out,
                       stream);  // Y = act(X·W + b): one kernel, Y written once
        x = layer.output;
    }
}

void backward_fast(Mlp& net, int rows, GemmVersion gemm_version, float* workspace, size_t workspace_floats,
                   cudaStream_t stream) {
    for (size_t l = net.layers.size(); l-- > 0;) {
        Mlp::Layer& layer = net.layers[l];
        const float* x = l == 0 ? net.input : net.layers[l - 1].output;
        linear_backward_weight(gemm_version, x, layer.output_grad, layer.weight_grad, rows, layer.in, layer.out, 0.0f,
                               stream);  // dW = Xᵀ·dY
        bias_grad_two_pass(layer.output_grad, layer.bias_grad, rows, layer.out, layer.out, 0.0f, workspace,
                           workspace_floats, stream);  // db = Σ dY, every row chunk in parallel
        if (l > 0) {
            Mlp::Layer& previous = net.layers[l - 1];
            linear_backward_input(gemm_version, layer.output_grad, layer.weight, previous.output_grad, rows, layer.in,
                                  layer.out, stream);  // dX = dY·Wᵀ
            relu_backward(previous.output_grad, previous.output, previous.output_grad, size_t(rows) * layer.in, stream);
        }
    }
}

StepGemmFlops training_step_gemm_flops(const std::vector<int>& layer_sizes, int rows) {
    StepGemmFlops flops;
    for (size_t l = 0; l + 1 < layer_sizes.size(); ++l) {
        const double gemm = 2.0 * rows * layer_sizes[l] * layer_sizes[l + 1];
        flops.forward += gemm;                       // Y = X·W
        flops.backward += l == 0 ? gemm : 2 * gemm;  // dW = Xᵀ·dY; dX = dY·Wᵀ except for the first layer
    }
    return flops;
}

template Mlp allocate_initialized_model<float, float>(MemoryLedger&, const ModelShape&, uint64_t);
template MlpBuffers<__half, __half, float> allocate_initialized_model<__half, float>(MemoryLedger&, const ModelShape&,
                                                                                     uint64_t);
template MlpBuffers<__half, __half, __half> allocate_initialized_model<__half, __half>(MemoryLedger&, const ModelShape&,
                                                                                       uint64_t);
template void initialize_model<float, float>(MemoryLedger&, Mlp&, uint64_t);
template void initialize_model<__half, float>(MemoryLedger&, MlpBuffers<__half, __half, float>&, uint64_t);
template std::vector<std::vector<float>> download_parameters(MemoryLedger&, Mlp&);
template std::vector<std::vector<float>> download_parameters(MemoryLedger&, MlpBuffers<__half, __half, float>&);
template std::vector<std::vector<float>> download_parameters(MemoryLedger&, MlpBuffers<__half, __half, __half>&);
