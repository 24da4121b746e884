// common/reference_mlp.cpp — see reference_mlp.h.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "common/reference_mlp.h"

#include "common/augment.h"
#include "common/philox.h"
#include "common/reference_ops.h"
#include "common/report.h"

float init_bound(int fan_in, bool output_layer) {
    // Kaiming: a ReLU zeroes half of its inputs, so twice the variance keeps activations at unit scale (var
    // 2/in). The output layer has no ReLU after it: LeCun (var 1/in). Uniform(±b) has variance b²/3.
    return std::sqrt((output_layer ? 3.0f : 6.0f) / static_cast<float>(fan_in));
}

std::vector<LayerParameters> init_parameters(uint64_t seed, const std::vector<int>& layer_sizes) {
    if (layer_sizes.size() < 2)
        throw std::invalid_argument("init_parameters: need at least an input and an output size");
    const PhiloxKey key = philox_key(seed);
    std::vector<LayerParameters> layers;
    for (size_t l = 0; l + 1 < layer_sizes.size(); ++l) {
        LayerParameters p;
        p.in = layer_sizes[l];
        p.out = layer_sizes[l + 1];
        const float bound = init_bound(p.in, l + 2 == layer_sizes.size());
        p.weight.resize(size_t(p.in) * p.out);
        for (size_t i = 0; i < p.weight.size(); ++i) {
            const float u = philox_uniform(key, kPhiloxStreamInit, static_cast<uint32_t>(l), i);  // [0, 1)
            p.weight[i] = (2.0f * u - 1.0f) * bound;
        }
        p.bias.assign(size_t(p.out), 0.0f);
        layers.push_back(std::move(p));
    }
    return layers;
}

std::vector<uint32_t> epoch_order(uint64_t seed, int epoch, size_t n) {
    std::vector<uint32_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
    const PhiloxKey key = philox_key(seed);
    // Fisher–Yates from the back: position i swaps with a uniform j in [0, i]. 64 random bits keep the modulo
    // bias below 2^-32 for any n that fits in memory.
    for (size_t i = n; i-- > 1;) {
        const uint64_t r = philox_uint64(key, kPhiloxStreamShuffle, static_cast<uint32_t>(epoch), i);
        std::swap(order[i], order[r % (i + 1)]);
    }
    return order;
}

size_t batch_count(size_t n, int batch) {
    return (n + size_t(batch) - 1) / size_t(batch);
}

void gather_batch(const MnistSplit& split, const std::vector<uint32_t>& order, size_t first, size_t rows,
                  uint8_t* pixels, uint8_t* labels) {
    if (first + rows > order.size()) throw std::out_of_range("gather_batch: batch runs past the end of the order");
    for (size_t r = 0; r < rows; ++r) {
        const uint32_t sample = order[first + r];
        std::copy_n(split.image(sample), kMnistPixels, pixels + r * kMnistPixels);
        labels[r] = split.labels[sample];
    }
}

void gather_batch(const MnistSplit& split, const float* images, const std::vector<uint32_t>& order, size_t first,
                  size_t rows, float* pixels, uint8_t* labels) {
    if (first + rows > order.size()) throw std::out_of_range("gather_batch: batch runs past the end of the order");
    for (size_t r = 0; r < rows; ++r) {
        const uint32_t sample = order[first + r];
        std::copy_n(images + size_t(sample) * kMnistPixels, kMnistPixels, pixels + r * kMnistPixels);
        labels[r] = split.labels[sample];
    }
}

ReferenceConfig ReferenceConfig::from_options(const TrainOptions& o, size_t train_count) {
    ReferenceConfig c;
    c.lr_schedule = o.lr_schedule;
    c.total_steps = long(o.epochs) * long(batch_count(train_count, o.batch));
    c.layer_sizes = o.layer_sizes();
    c.batch = o.batch;
    c.optimizer = o.optimizer;
    c.lr = o.lr;
    c.momentum = o.momentum;
    c.weight_decay = o.weight_decay;
    c.beta1 = o.beta1;
    c.beta2 = o.beta2;
    c.epsilon = o.epsilon;
    c.seed = o.seed;
    return c;
}

ReferenceMlp::ReferenceMlp(const ReferenceConfig& config) : config_(config) {
    if (config_.layer_sizes.size() < 2 || config_.batch <= 0) {
        throw std::invalid_argument("ReferenceMlp: need at least two layer sizes and a positive batch");
    }
    using C = MemoryCategory;
    const auto host = [this](C category, const std::string& name, size_t count) {
        double* p = ledger_.allocate_host<double>(category, name, count, HostMemory::pageable);
        std::fill_n(p, count, 0.0);
        return p;
    };
    const size_t batch = size_t(config_.batch);
    const std::vector<LayerParameters> init = init_parameters(config_.seed, config_.layer_sizes);
    input_ = host(C::activations, "X", batch * config_.layer_sizes[0]);
    labels_ = ledger_.allocate_host<uint8_t>(C::input_staging, "labels", batch, HostMemory::pageable);
    for (int l = 0; l < layers(); ++l) {
        const std::string n = std::to_string(l + 1);
        const size_t weights = weight_count(l), out = size_t(config_.layer_sizes[l + 1]);
        weight_.push_back(host(C::parameters, "W" + n, weights));
        bias_.push_back(host(C::parameters, "b" + n, out));
        std::copy(init[l].weight.begin(), init[l].weight.end(), weight_[l]);  // float32 → float64, exactly
        std::copy(init[l].bias.begin(), init[l].bias.end(), bias_[l]);
        weight_grad_.push_back(host(C::gradients, "dW" + n, weights));
        bias_grad_.push_back(host(C::gradients, "db" + n, out));
        const bool adamw = config_.optimizer == OptimizerKind::adamw;
        weight_m_.push_back(host(C::optimizer_state, (adamw ? "m_W" : "velocity_W") + n, weights));
        bias_m_.push_back(host(C::optimizer_state, (adamw ? "m_b" : "velocity_b") + n, out));
        weight_v_.push_back(adamw ? host(C::optimizer_state, "v_W" + n, weights) : nullptr);
        bias_v_.push_back(adamw ? host(C::optimizer_state, "v_b" + n, out) : nullptr);
        output_.push_back(host(C::activations, "Y" + n, batch * out));
        output_grad_.push_back(host(C::activations, "dY" + n, batch * out));
    }
}

double ReferenceMlp::predicted_bytes(const ReferenceConfig& config) {
    const std::vector<int>& sizes = config.layer_sizes;
    if (sizes.size() < 2) return 0;
    const double batch = config.batch;
    double parameters = 0, outputs = 0;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
        parameters += double(sizes[l]) * sizes[l + 1] + sizes[l + 1];
        outputs += sizes[l + 1];
    }
    // Per parameter: value, gradient, and velocity (sgd) or m and v (adamw), all float64.
    const double copies = config.optimizer == OptimizerKind::adamw ? 4 : 3;
    const double activations = batch * (sizes[0] + 2 * outputs);          // X, then Y_l and dY_l per layer
    return sizeof(double) * (copies * parameters + activations) + batch;  // + the labels, one byte each
}

void ReferenceMlp::forward(const double* inputs, int rows) {
    const double* x = inputs;
    for (int l = 0; l < layers(); ++l) {
        const int in = config_.layer_sizes[l], out = config_.layer_sizes[l + 1];
        reference::gemm(false, false, rows, out, in, 1.0, x, in, weight_[l], out, 0.0, output_[l], out);
        reference::bias_add(rows, out, bias_[l], output_[l], out);
        if (l + 1 < layers()) reference::relu_forward(size_t(rows) * out, output_[l], output_[l]);
        x = output_[l];
    }
}

void ReferenceMlp::backward(const double* inputs, int rows) {
    for (int l = layers() - 1; l >= 0; --l) {
        const int in = config_.layer_sizes[l], out = config_.layer_sizes[l + 1];
        const double* x = l == 0 ? inputs : output_[l - 1];
        reference::gemm(true, false, in, out, rows, 1.0, x, in, output_grad_[l], out, 0.0, weight_grad_[l], out);
        reference::bias_grad(rows, out, output_grad_[l], out, bias_grad_[l]);
        if (l > 0) {  // dX = dY·Wᵀ, then through the previous layer's ReLU (its output > 0 where it was active)
            reference::gemm(false, true, rows, in, out, 1.0, output_grad_[l], out, weight_[l], out, 0.0,
                            output_grad_[l - 1], in);
            reference::relu_backward(size_t(rows) * in, output_grad_[l - 1], output_[l - 1], output_grad_[l - 1]);
        }
    }
}

void ReferenceMlp::update() {
    const double lr = scheduled_lr(config_.lr_schedule, config_.lr, steps_, config_.total_steps);
    ++steps_;
    for (int l = 0; l < layers(); ++l) {
        const size_t out = size_t(config_.layer_sizes[l + 1]);
        if (config_.optimizer == OptimizerKind::sgd) {
            reference::sgd_momentum_step(weight_count(l), weight_[l], weight_grad_[l], weight_m_[l], lr,
                                         config_.momentum, config_.weight_decay);
            reference::sgd_momentum_step(out, bias_[l], bias_grad_[l], bias_m_[l], lr, config_.momentum,
                                         config_.weight_decay);
        } else {
            reference::adamw_step(weight_count(l), weight_[l], weight_grad_[l], weight_m_[l], weight_v_[l], lr,
                                  config_.beta1, config_.beta2, config_.epsilon, config_.weight_decay, steps_);
            reference::adamw_step(out, bias_[l], bias_grad_[l], bias_m_[l], bias_v_[l], lr, config_.beta1,
                                  config_.beta2, config_.epsilon, config_.weight_decay, steps_);
        }
    }
}

namespace {

void check_rows(int rows, int batch) {
    if (rows <= 0 || rows > batch) {
        throw std::invalid_argument("ReferenceMlp: " + std::to_string(rows) + " rows, expected 1.." +
                                    std::to_string(batch));
    }
}

// Times a phase with the host clock when a timer is given.
struct MaybePhase {
    MaybePhase(PhaseTimer* timer, Phase phase) : timer_(timer), phase_(phase) {
        if (timer_) timer_->begin(phase_);
    }
    ~MaybePhase() {
        if (timer_) timer_->end(phase_);
    }
    PhaseTimer* timer_;
    Phase phase_;
};

}  // namespace

StepResult ReferenceMlp::train_step(const double* inputs, const uint8_t* labels, int rows, PhaseTimer* timer) {
    check_rows(rows, config_.batch);
    const int classes = config_.layer_sizes.back();
    StepResult result;
    {
        MaybePhase phase(timer, Phase::forward);
        forward(inputs, rows);
    }
    {
        MaybePhase phase(timer, Phase::loss);
        result.loss =
            reference::softmax_cross_entropy(rows, classes, output_.back(), classes, labels, output_grad_.back());
        result.correct = reference::count_correct(rows, classes, output_.back(), classes, labels);
    }
    {
        MaybePhase phase(timer, Phase::backward);
        backward(inputs, rows);
    }
    {
        MaybePhase phase(timer, Phase::optimizer);
        update();
    }
    return result;
}

double ReferenceMlp::compute_gradients(const double* inputs, const uint8_t* labels, int rows) {
    check_rows(rows, config_.batch);
    const int classes = config_.layer_sizes.back();
    forward(inputs, rows);
    const double mean_loss =
        reference::softmax_cross_entropy(rows, classes, output_.back(), classes, labels, output_grad_.back());
    backward(inputs, rows);
    return mean_loss;
}

double ReferenceMlp::loss(const double* inputs, const uint8_t* labels, int rows) {
    check_rows(rows, config_.batch);
    const int classes = config_.layer_sizes.back();
    forward(inputs, rows);
    return reference::softmax_cross_entropy<double, uint8_t>(rows, classes, output_.back(), classes, labels, nullptr);
}

int ReferenceMlp::count_correct(const double* inputs, const uint8_t* labels, int rows) {
    check_rows(rows, config_.batch);
    const int classes = config_.layer_sizes.back();
    forward(inputs, rows);
    return reference::count_correct(rows, classes, output_.back(), classes, labels);
}

void ReferenceMlp::normalize_batch(const MnistSplit& split, const std::vector<uint32_t>& order, size_t first,
                                   int rows, int epoch) {
    if (config_.layer_sizes[0] != kMnistPixels) {
        throw std::invalid_argument("ReferenceMlp: MNIST needs 784 inputs, the model has " +
                                    std::to_string(config_.layer_sizes[0]));
    }
    for (int r = 0; r < rows; ++r) {
        const uint32_t sample = order[first + r];
        const uint8_t* pixels = split.image(sample);
        uint8_t augmented[kMnistPixels];
        if (config_.augment && epoch > 0) {  // the image lesson 08's loader (or kernel) makes of this sample
            augment_image(pixels, augment_params(philox_key(config_.seed), epoch, sample), augmented);
            pixels = augmented;
        }
        double* x = input_ + size_t(r) * kMnistPixels;
        for (int i = 0; i < kMnistPixels; ++i) x[i] = normalize_pixel(pixels[i]);  // float32, as on the GPU
        labels_[r] = split.labels[sample];
    }
}

EpochResult ReferenceMlp::train_epoch(const MnistSplit& train, int epoch, PhaseTimer* timer, ProgressBar* progress) {
    std::vector<uint32_t> order;
    {
        MaybePhase phase(timer, Phase::host);
        order = epoch_order(config_.seed, epoch, train.count);
    }
    EpochResult result;
    double loss_sum = 0;
    size_t correct = 0;
    const size_t batches = batch_count(train.count, config_.batch);
    for (size_t b = 0; b < batches; ++b) {
        const size_t first = b * size_t(config_.batch);
        const int rows = static_cast<int>(std::min<size_t>(config_.batch, train.count - first));
        {
            MaybePhase phase(timer, Phase::normalize);
            normalize_batch(train, order, first, rows, epoch);
        }
        const StepResult step = train_step(input_, labels_, rows, timer);
        loss_sum += step.loss * rows;
        result.step_losses.push_back(step.loss);
        correct += size_t(step.correct);
        result.samples += size_t(rows);
        ++result.steps;
        if (progress != nullptr) progress->update(b + 1, step.loss);
    }
    result.mean_loss = result.samples ? loss_sum / double(result.samples) : 0.0;
    result.train_accuracy = result.samples ? double(correct) / double(result.samples) : 0.0;
    return result;
}

double ReferenceMlp::evaluate(const MnistSplit& split) {
    std::vector<uint32_t> identity(split.count);
    for (size_t i = 0; i < split.count; ++i) identity[i] = static_cast<uint32_t>(i);
    size_t correct = 0;
    for (size_t first = 0; first < split.count; first += size_t(config_.batch)) {
        const int rows = static_cast<int>(std::min<size_t>(config_.batch, split.count - first));
        normalize_batch(split, identity, first, rows);
        correct += size_t(count_correct(input_, labels_, rows));
    }
    return split.count ? double(correct) / double(split.count) : 0.0;
}
