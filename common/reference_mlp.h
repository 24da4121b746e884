// common/reference_mlp.h — the CPU reference trainer: the same MLP, initialization and batch order as the lessons,
// computed in float64 with the ops of reference_ops.h.
//
// defines: init_parameters(), init_bound(), epoch_order(), gather_batch(), batch_count(), ReferenceConfig,
//          ReferenceMlp (train_step / compute_gradients / loss / count_correct / train_epoch / evaluate).
//
// What a lesson shares with the reference, so that its first steps can be compared number for number:
//   * init_parameters(seed, layer_sizes): the float32 weights and biases the lesson uploads. Layer l maps in → out
//     with W_l stored row-major [in × out] (y = x·W + b). Weights are uniform in ±init_bound(fan_in, last):
//     Kaiming for layers followed by a ReLU (bound √(6/in)), LeCun for the output layer (√(3/in)); biases are 0.
//     Element i of W_l is philox_uniform(philox_key(seed), kPhiloxStreamInit, l, i): a kernel can compute it too.
//   * epoch_order(seed, epoch, n): the permutation of the training set for epoch 1, 2, ... (Fisher–Yates driven by
//     Philox stream kPhiloxStreamShuffle). Batch b of the epoch is order[b·B, min((b+1)·B, n)); the last batch may
//     be smaller. gather_batch() copies one batch's pixels and labels into a (pinned) staging buffer.
//   * inputs: normalize_pixel() (common/normalize_pixel.h, the same function the normalize kernel calls), in
//     float32; the reference then works in float64. With `augment` (reference --augment, lesson 08) each training
//     image is first augmented by augment_image(augment_params(seed, epoch, sample)) (common/augment.h), the
//     function lesson 08's loader and kernel compute.
//   * loss: mean softmax cross-entropy over the batch; the last layer has no ReLU.
//   * sgd: v = momentum·v + g + wd·p; p -= lr·v.  adamw: see reference::adamw_step (t counts steps from 1).
//     The learning rate of step t (from 0) is scheduled_lr(schedule, lr, t, total_steps) (cli.h): constant or cosine.
#pragma once

#include <cstdint>
#include <vector>

#include "common/cli.h"
#include "common/memory_ledger.h"
#include "common/mnist.h"
#include "common/phase_timer.h"

class ProgressBar;

struct LayerParameters {
    int in = 0, out = 0;
    std::vector<float> weight;  // [in × out], row-major
    std::vector<float> bias;    // [out]
};

// Half-width of the uniform initialization of a layer with `fan_in` inputs (float32, as the lessons use it).
float init_bound(int fan_in, bool output_layer);
std::vector<LayerParameters> init_parameters(uint64_t seed, const std::vector<int>& layer_sizes);

// The order in which epoch `epoch` (1-based) visits samples 0..n-1.
std::vector<uint32_t> epoch_order(uint64_t seed, int epoch, size_t n);
size_t batch_count(size_t n, int batch);  // ⌈n / batch⌉
// Copies samples order[first .. first+rows) into pixels [rows × 784] and labels [rows].
void gather_batch(const MnistSplit& split, const std::vector<uint32_t>& order, size_t first, size_t rows,
                  uint8_t* pixels, uint8_t* labels);
// The same from a float copy of the split's images (lesson 01 normalizes the training set on the host first).
void gather_batch(const MnistSplit& split, const float* images, const std::vector<uint32_t>& order, size_t first,
                  size_t rows, float* pixels, uint8_t* labels);

struct ReferenceConfig {
    std::vector<int> layer_sizes{784, 256, 10};
    int batch = 128;
    OptimizerKind optimizer = OptimizerKind::sgd;
    double lr = 0.05, momentum = 0.9, weight_decay = 0.0;
    LrSchedule lr_schedule = LrSchedule::constant;  // cosine: lr at step t is scheduled_lr(..., t, total_steps)
    long total_steps = 0;                           // steps in the whole run (cosine needs it; set before training)
    double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
    uint64_t seed = 1;
    bool augment = false;  // lesson 08's random affine on every training image (common/augment.h), before normalizing

    // total_steps = options.epochs · ⌈train_count / batch⌉.
    static ReferenceConfig from_options(const TrainOptions& options, size_t train_count);
};

struct StepResult {
    double loss = 0;  // mean over the batch, before the update
    int correct = 0;  // argmax == label, before the update
};

struct EpochResult {
    double mean_loss = 0;       // over every training sample of the epoch
    double train_accuracy = 0;  // from the training forward passes (before each step's update)
    size_t samples = 0;
    int steps = 0;
    std::vector<double> step_losses;  // each step's mean batch loss, in order
};

class ReferenceMlp {
  public:
    // Parameters from init_parameters(config.seed, config.layer_sizes); every buffer comes from the host
    // (pageable) part of memory(), by category, so the reference can print the same memory table as a lesson.
    explicit ReferenceMlp(const ReferenceConfig& config);

    // The bytes the constructor allocates through memory() (all host pageable), from the shape alone, so a
    // program can refuse a model that does not fit before allocating anything. In double: no overflow for any
    // shape the flags allow. (The constructor also holds the float32 initial values, 4 bytes per parameter,
    // while it converts them.)
    static double predicted_bytes(const ReferenceConfig& config);

    // inputs: rows × layer_sizes[0] normalized values; rows ≤ config.batch.
    StepResult train_step(const double* inputs, const uint8_t* labels, int rows, PhaseTimer* timer = nullptr);
    // Forward + backward, gradients left in weight_grad()/bias_grad(), no update. Returns the mean loss.
    double compute_gradients(const double* inputs, const uint8_t* labels, int rows);
    double loss(const double* inputs, const uint8_t* labels, int rows);  // forward only
    int count_correct(const double* inputs, const uint8_t* labels, int rows);

    // One epoch over `train` in epoch_order(seed, epoch, n), timing phases (host clock) into `timer`.
    EpochResult train_epoch(const MnistSplit& train, int epoch, PhaseTimer* timer = nullptr,
                            ProgressBar* progress = nullptr);
    double evaluate(const MnistSplit& split);  // accuracy 0..1

    int layers() const { return static_cast<int>(config_.layer_sizes.size()) - 1; }
    const ReferenceConfig& config() const { return config_; }
    // Layer l = 0..layers()-1; sizes in × out and out.
    double* weight(int l) { return weight_[l]; }
    double* bias(int l) { return bias_[l]; }
    const double* weight_grad(int l) const { return weight_grad_[l]; }
    const double* bias_grad(int l) const { return bias_grad_[l]; }
    const double* output(int l) const { return output_[l]; }  // the last forward pass: rows × out (post-ReLU)
    size_t weight_count(int l) const { return size_t(config_.layer_sizes[l]) * config_.layer_sizes[l + 1]; }
    int steps_taken() const { return steps_; }
    const MemoryLedger& memory() const { return ledger_; }

  private:
    // epoch > 0 with config.augment: the training images augmented for that epoch first.
    void normalize_batch(const MnistSplit& split, const std::vector<uint32_t>& order, size_t first, int rows,
                         int epoch = 0);
    void forward(const double* inputs, int rows);
    void backward(const double* inputs, int rows);  // from dlogits in output_grad_.back()
    void update();

    ReferenceConfig config_;
    MemoryLedger ledger_;
    std::vector<double*> weight_, bias_, weight_grad_, bias_grad_, weight_m_, bias_m_, weight_v_, bias_v_;
    std::vector<double*> output_, output_grad_;
    double* input_ = nullptr;  // [batch × in] normalized batch
    uint8_t* labels_ = nullptr;
    int steps_ = 0;
};
