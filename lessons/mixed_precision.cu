// lessons/mixed_precision.cu — see mixed_precision.h. Compiled once into lesson_common.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <type_traits>

#include "lessons/mixed_precision.h"

#include "common/reference_mlp.h"
#include "kernels/bias_grad.cuh"
#include "kernels/fp16_elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/hgemm.cuh"
#include "kernels/normalize.cuh"
#include "kernels/optimizers.cuh"
#include "kernels/softmax_cross_entropy.cuh"

const char* precision_name(Precision precision) {
    switch (precision) {
        case Precision::fp32:
            return "fp32";
        case Precision::fp16_pure:
            return "fp16-pure";
        case Precision::fp16_weights:
            return "fp16-weights";
        case Precision::mixed:
            return "mixed";
    }
    return "?";
}

Precision precision_from_name(const std::string& name) {
    for (const Precision p : kAllPrecisions) {
        if (name == precision_name(p)) return p;
    }
    throw std::invalid_argument("unknown precision '" + name + "' (fp32, fp16-pure, fp16-weights, mixed)");
}

void GradScalerFlags::add(Cli& cli) {
    cli.add_double("--init-scale", &init_scale, "S", "the loss scale to start with", 1.0, 1e30);
    cli.add_double("--growth-factor", &growth, "F", "the scale's growth after a clean interval", 1.0, 1e3, false);
    cli.add_double("--backoff-factor", &backoff, "F", "the scale's factor after an inf/NaN step", 0.0, 1.0, false);
    cli.add_int("--growth-interval", &interval, "N", "clean steps in a row before the scale grows");
}

GradScalerOptions GradScalerFlags::options() const {
    GradScalerOptions scaling;
    scaling.init_scale = float(init_scale);
    scaling.growth_factor = float(growth);
    scaling.backoff_factor = float(backoff);
    scaling.growth_interval = interval;
    return scaling;
}

void GradScalerFlags::record_config(Lesson& lesson) const {
    lesson.add_config("init_scale", init_scale);
    lesson.add_config("growth_factor", growth);
    lesson.add_config("backoff_factor", backoff);
    lesson.add_config("growth_interval", int64_t(interval));
}

void require_adamw_or_exit(const Lesson& lesson) {
    if (lesson.options.optimizer == OptimizerKind::adamw) return;
    std::fprintf(stderr,
                 "%s: --optimizer sgd: this lesson's fp16 optimizer kernels are AdamW's (adamw_step_counted, "
                 "adamw_step_mixed in kernels/optimizers.cuh); lessons 01-04 train with sgd\n",
                 lesson.program().c_str());
    std::exit(2);
}

ModelShape half_model_shape(const Lesson& lesson, Precision precision, int staging_slots) {
    ModelShape shape = lesson.model_shape(staging_slots, true);
    if (precision == Precision::fp32) return shape;
    shape.parameter_bytes = sizeof(__half);
    shape.activation_bytes = sizeof(__half);
    shape.gradient_bytes = precision == Precision::fp16_pure ? sizeof(__half) : sizeof(float);
    shape.master_weights = precision == Precision::mixed;
    return shape;
}

template <typename Grad>
void forward_half(HalfMlp<Grad>& net, int rows, HgemmVersion version, cudaStream_t stream) {
    const __half* x = net.input;
    for (size_t l = 0; l < net.layers.size(); ++l) {
        auto& layer = net.layers[l];
        const bool relu = l + 1 < net.layers.size();
        linear_forward_half(version, x, layer.weight, layer.bias, relu, layer.output, rows, layer.in, layer.out,
                            stream);  // Y = act(X·W + b) on tensor cores, written once in fp16
        x = layer.output;
    }
}

template <typename Grad>
void backward_half(HalfMlp<Grad>& net, int rows, HgemmVersion version, float* workspace, size_t workspace_floats,
                   cudaStream_t stream) {
    for (size_t l = net.layers.size(); l-- > 0;) {
        auto& layer = net.layers[l];
        const __half* x = l == 0 ? net.input : net.layers[l - 1].output;
        linear_backward_weight_half(version, x, layer.output_grad, layer.weight_grad, rows, layer.in, layer.out,
                                    stream);  // dW = Xᵀ·dY, fp32 accumulation
        bias_grad_two_pass(layer.output_grad, layer.bias_grad, rows, layer.out, layer.out, 0.0f, workspace,
                           workspace_floats, stream);  // db = Σ dY, summed in fp32
        if (l > 0) {
            auto& previous = net.layers[l - 1];
            linear_backward_input_half(version, layer.output_grad, layer.weight, previous.output_grad, rows, layer.in,
                                       layer.out, stream);  // dX = dY·Wᵀ, fp16
            relu_backward_half(previous.output_grad, previous.output, previous.output_grad, size_t(rows) * layer.in,
                               stream);
        }
    }
}

namespace {

AdamWParams adamw_params(const TrainOptions& o, double lr) {
    return AdamWParams{float(lr), float(o.beta1), float(o.beta2), float(o.epsilon), float(o.weight_decay)};
}

}  // namespace

void optimizer_step(Mlp& net, const TrainOptions& options, double lr, int step, UpdateCounters counters,
                    const GradScalerState* scaler, cudaStream_t stream) {
    if (scaler != nullptr) throw std::invalid_argument("optimizer_step: loss scaling is for the mixed model only");
    const AdamWParams h = adamw_params(options, lr);
    for (Mlp::Layer& layer : net.layers) {
        adamw_step_counted(layer.weight, layer.weight_grad, layer.weight_m, layer.weight_v,
                           size_t(layer.in) * layer.out, h, step, counters.device, stream);
        adamw_step_counted(layer.bias, layer.bias_grad, layer.bias_m, layer.bias_v, size_t(layer.out), h, step,
                           counters.device, stream);
    }
}

void optimizer_step(HalfMlp<__half>& net, const TrainOptions& options, double lr, int step, UpdateCounters counters,
                    const GradScalerState* scaler, cudaStream_t stream) {
    if (scaler != nullptr) throw std::invalid_argument("optimizer_step: loss scaling is for the mixed model only");
    const AdamWParams h = adamw_params(options, lr);
    for (auto& layer : net.layers) {
        adamw_step_counted(layer.weight, layer.weight_grad, layer.weight_m, layer.weight_v,
                           size_t(layer.in) * layer.out, h, step, counters.device, stream);
        adamw_step_counted(layer.bias, layer.bias_grad, layer.bias_m, layer.bias_v, size_t(layer.out), h, step,
                           counters.device, stream);
    }
}

void optimizer_step(HalfMlp<float>& net, const TrainOptions& options, double lr, int step, UpdateCounters counters,
                    const GradScalerState* scaler, cudaStream_t stream) {
    const AdamWParams h = adamw_params(options, lr);
    for (auto& layer : net.layers) {
        if (layer.master_weight == nullptr) {  // fp16-weights: the update lands on the fp16 weight
            adamw_step_counted(layer.weight, layer.weight_grad, layer.weight_m, layer.weight_v,
                               size_t(layer.in) * layer.out, h, step, counters.device, stream);
            adamw_step_counted(layer.bias, layer.bias_grad, layer.bias_m, layer.bias_v, size_t(layer.out), h, step,
                               counters.device, stream);
        } else {  // mixed: the fp32 master takes the update; the fp16 copy is rewritten from it in the same kernel
            adamw_step_mixed(layer.master_weight, layer.weight, layer.weight_grad, layer.weight_m, layer.weight_v,
                             size_t(layer.in) * layer.out, h, scaler, counters.device, stream);
            adamw_step_mixed(layer.master_bias, layer.bias, layer.bias_grad, layer.bias_m, layer.bias_v,
                             size_t(layer.out), h, scaler, counters.device, stream);
        }
    }
}

std::vector<GradientTensor> gradient_tensors(HalfMlp<float>& net) {
    std::vector<GradientTensor> tensors;
    for (auto& layer : net.layers) {
        tensors.push_back({layer.weight_grad, size_t(layer.in) * layer.out});
        tensors.push_back({layer.bias_grad, size_t(layer.out)});
    }
    return tensors;
}

UnderflowProbe probe_gradient_underflow(const Lesson& lesson, const std::vector<std::vector<float>>& parameters,
                                        const uint8_t* pixels, const uint8_t* labels, int rows, float scale,
                                        cudaStream_t stream) {
    MemoryLedger ledger;  // the probe's own buffers, freed on return
    ModelShape shape = lesson.model_shape(1, false);
    shape.batch = rows;
    Mlp reference = allocate_mlp<float, float>(ledger, shape);
    const ModelShape half_shape = [&] {
        ModelShape s = half_model_shape(lesson, Precision::fp16_pure, 1);
        s.batch = rows;
        s.stage_raw_pixels = false;
        return s;
    }();
    HalfMlp<__half> half = allocate_mlp<__half, __half, __half>(ledger, half_shape);
    int widest = 0;
    for (const auto& layer : reference.layers) widest = std::max(widest, layer.out);
    const size_t workspace_floats = bias_grad_workspace_floats(rows, widest);
    float* workspace = ledger.allocate<float>(MemoryCategory::workspace, "bias-grad partial sums", workspace_floats);
    float* device_scale = ledger.allocate<float>(MemoryCategory::workspace, "loss scale", 1);

    for (size_t l = 0; l < reference.layers.size(); ++l) {
        const std::vector<float>& w = parameters[2 * l];
        const std::vector<float>& b = parameters[2 * l + 1];
        ledger.copy_to_device(reference.layers[l].weight, w.data(), w.size() * sizeof(float), stream);
        ledger.copy_to_device(reference.layers[l].bias, b.data(), b.size() * sizeof(float), stream);
        cast_to_half(reference.layers[l].weight, half.layers[l].weight, w.size(), stream);
        cast_to_half(reference.layers[l].bias, half.layers[l].bias, b.size(), stream);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));  // pageable sources

    // fp32: lesson 04's kernels.
    normalize_pixels(pixels, reference.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, stream);
    forward_fast(reference, rows, kFastestGemm, stream);
    softmax_cross_entropy(reference.layers.back().output, labels, reference.layers.back().output_grad,
                          reference.row_losses, reference.mean_loss, rows, kMnistClasses, stream);
    backward_fast(reference, rows, kFastestGemm, workspace, workspace_floats, stream);
    std::vector<std::vector<float>> fp32_grads;
    for (const auto& layer : reference.layers) {
        fp32_grads.push_back(download_floats(ledger, layer.weight_grad, size_t(layer.in) * layer.out, stream));
        fp32_grads.push_back(download_floats(ledger, layer.bias_grad, size_t(layer.out), stream));
    }

    UnderflowProbe probe;
    probe.scale = scale;
    for (const auto& g : fp32_grads) {
        probe.nonzero_elements += uint64_t(std::count_if(g.begin(), g.end(), [](float x) { return x != 0.0f; }));
    }
    for (const float s : {1.0f, scale}) {
        ledger.copy_to_device(device_scale, &s, sizeof(float), stream);
        normalize_pixels(pixels, half.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, stream);
        forward_half(half, rows, kFastestHgemm, stream);
        softmax_cross_entropy(half.layers.back().output, labels, half.layers.back().output_grad, half.row_losses,
                              half.mean_loss, rows, kMnistClasses, device_scale, stream);
        backward_half(half, rows, kFastestHgemm, workspace, workspace_floats, stream);
        uint64_t flushed = 0, overflowed = 0;
        for (size_t l = 0; l < half.layers.size(); ++l) {
            const std::vector<float> dw = download_floats(ledger, half.layers[l].weight_grad,
                                                          size_t(half.layers[l].in) * half.layers[l].out, stream);
            const std::vector<float> db =
                download_floats(ledger, half.layers[l].bias_grad, size_t(half.layers[l].out), stream);
            const auto count = [&](const std::vector<float>& fp16, const std::vector<float>& fp32) {
                for (size_t i = 0; i < fp16.size(); ++i) {
                    if (fp32[i] == 0.0f) continue;
                    if (fp16[i] == 0.0f) ++flushed;
                    if (std::isinf(fp16[i])) ++overflowed;
                }
            };
            count(dw, fp32_grads[2 * l]);
            count(db, fp32_grads[2 * l + 1]);
        }
        const double n = probe.nonzero_elements > 0 ? double(probe.nonzero_elements) : 1.0;
        if (s == 1.0f) {
            probe.unscaled = double(flushed) / n;
        } else {
            probe.scaled = double(flushed) / n;
            probe.overflowed_scaled = double(overflowed) / n;
        }
    }
    return probe;
}

template void forward_half<float>(HalfMlp<float>&, int, HgemmVersion, cudaStream_t);
template void forward_half<__half>(HalfMlp<__half>&, int, HgemmVersion, cudaStream_t);
template void backward_half<float>(HalfMlp<float>&, int, HgemmVersion, float*, size_t, cudaStream_t);
template void backward_half<__half>(HalfMlp<__half>&, int, HgemmVersion, float*, size_t, cudaStream_t);
