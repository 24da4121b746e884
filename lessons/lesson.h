// lessons/lesson.h — the harness: what every lesson repeats, so that a lesson's main.cu is its CUDA program.
//
// defines: Lesson (flags, device check, data, banner, the fit check, allocate_model(), test-set evaluation, epoch
//          lines, final tables and JSON), ForwardPass, max_indexable_batch(), run_lesson(). The model itself is
//          lessons/mlp.h's.
//
// A lesson's main.cu:
//     int train(int argc, char** argv) {
//         Lesson lesson(argc, argv, "lesson02_device_normalize", "one line: the idea");  // exits on bad flags/data
//         Mlp& net = lesson.allocate_model();          // allocated, initialized, test set uploaded (lesson 01
//                                                      // writes its cudaMallocs out instead)
//         for (int epoch = 1; epoch <= lesson.options.epochs; ++epoch) {
//             lesson.timer.begin_epoch(epoch);
//             ... the lesson's loop: copy, normalize, forward, loss, backward, optimizer, each a timed phase ...
//             lesson.finish_epoch(epoch, lesson.timer.end_epoch(), loss_sum, net, forward, stream);
//         }
//         return lesson.finish();                      // timing and memory tables, the weights' checksum, JSON
//     }
//     int main(int argc, char** argv) { return run_lesson(train, argc, argv); }
//
// Defaults (every lesson from 01 on, and what the reference trainer does with the same flags): MLP
// 784-1024-1024-10, ReLU, softmax cross-entropy, AdamW (lr 1e-3, weight decay 0.01), cosine decay of the learning
// rate to 0 over the run, batch 128, 5 epochs, seed 1 (Philox initialization and batch order, common/reference_mlp.h).
// On the CPU backend a step of this model takes about a second, so there the lessons train on the first
// kCpuTrainImages images and evaluate on the first kCpuTestImages, and say so; --full (or --limit / --test-limit)
// overrides that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/memory_ledger.h"
#include "lessons/mlp.h"  // Mlp: the model's device buffers
#include "common/mnist.h"
#include "common/device_peaks.h"
#include "common/phase_timer.h"
#include "common/phase_work.h"
#include "common/report.h"
#include "kernels/gemm_version.h"  // GemmVersion (host-only: this header is also read by g++ in the cuda flavor)

// The forward pass of `rows` images whose normalized pixels are in net.input: leaves the logits in
// net.layers.back().output. Training and test-set evaluation call the same one.
using ForwardPass = std::function<void(Mlp& net, int rows, cudaStream_t stream)>;

inline constexpr size_t kCpuTrainImages = 1280;  // 10 batches of 128
inline constexpr size_t kCpuTestImages = 1000;

class Lesson {
  public:
    // Parses the shared flags, those `add_flags` registers, and --full; checks that there is a device; loads MNIST;
    // prints the banner. Bad flags exit 2, missing or corrupt data exits 1, each with one message.
    // `cpu_train_images`: the CPU backend's default subset (a lesson that trains several models may want fewer).
    Lesson(int argc, char** argv, const char* program, const char* idea,
           const std::function<void(Cli&)>& add_flags = nullptr, size_t cpu_train_images = kCpuTrainImages);

    TrainOptions options;
    MnistDataset data;
    MemoryLedger ledger;  // every device and host buffer, by category (common/memory_ledger.h)
    PhaseTimer timer;     // CUDA events per phase (common/phase_timer.h)

    // The device buffers of the model (common/memory_ledger.h: allocate_mlp), after checking that the prediction
    // fits the device (else one message naming the category that overflows and the largest batch that fits, exit 2).
    // Weights and biases are the Philox initialization (init_parameters), optimizer state zeroed, and the test set
    // uploaded once (it stays on the device: evaluating it moves no pixels). `staging_slots` and
    // `stage_raw_pixels` are ModelShape's. Call once.
    // `extra_device_bytes`: device memory the lesson allocates itself next to the model (counted in the fit check).
    Mlp& allocate_model(int staging_slots = 1, bool stage_raw_pixels = true, size_t extra_device_bytes = 0);

    // The pieces of allocate_model() for a lesson that allocates another kind of model itself (lesson 05's fp16
    // buffers):
    // the fp32 ModelShape of the flags; exit 2 with one message unless `shape` plus `extra_device_bytes` (and the
    // test set) fits the device; the test set uploaded once (a no-op after the first call).
    ModelShape model_shape(int staging_slots = 1, bool stage_raw_pixels = true) const;
    void require_fits(const ModelShape& shape, size_t extra_device_bytes = 0);
    void upload_test_set();
    const uint8_t* test_pixels() const { return test_pixels_; }  // on the device, after upload_test_set()
    const uint8_t* test_labels() const { return test_labels_; }

    size_t batches_per_epoch() const;             // ⌈training images / batch⌉
    long total_steps() const;                     // batches_per_epoch · epochs
    double lr_at(long step) const;                // the scheduled learning rate of step 0, 1, ...
    int rows_in_batch(size_t batch_index) const;  // batch, or fewer for the last one

    // After timer.end_epoch(): reads the epoch's count of correct training predictions (net.correct, which the
    // loop fills with count_correct), evaluates the test set with `forward` on `stream`, prints the epoch line
    // and records it for the JSON report. loss_sum: Σ over the epoch's batches of mean loss · rows.
    EpochMetrics finish_epoch(int epoch, const EpochTiming& timing, double loss_sum, Mlp& net,
                              const ForwardPass& forward, cudaStream_t stream = 0);
    // The same for any model: `correct` is the device counter the training loop counted into (zeroed here for the
    // next epoch); `evaluate` runs one chunk of the device-resident test set (normalize, forward, count_correct into
    // `correct`). Returns the epoch's figures.
    using EvaluateBatch =
        std::function<void(const uint8_t* pixels, const uint8_t* labels, int rows, int* correct, cudaStream_t)>;
    EpochMetrics finish_epoch(int epoch, const EpochTiming& timing, double loss_sum, int* correct,
                              const EvaluateBatch& evaluate, cudaStream_t stream = 0);
    // An fp32 model's EvaluateBatch: normalize the chunk into net.input, `forward`, count_correct. `net` must
    // outlive it. (The fp16 models': test_set_evaluator in lessons/mixed_precision.h.)
    static EvaluateBatch test_set_evaluator(Mlp& net, const ForwardPass& forward);
    // The fraction of the test set `evaluate` classifies correctly, in chunks of `chunk_rows` (at most the batch the
    // model's buffers were allocated for), counted into the device counter `correct` (zeroed before and after).
    double evaluate_test_set(int* correct, const EvaluateBatch& evaluate, int chunk_rows, cudaStream_t stream = 0);
    // Several runs in one invocation (lesson 05's --precision all): epoch lines start with "[label] ", and only
    // the run without a label goes into the JSON report's epochs (the others report through add_result).
    void set_run_label(const std::string& label) { run_label_ = label; }

    // The final parameters, for finish()'s checksum, as fp32 (W_1, b_1, W_2, ...): set by a lesson whose model is
    // not allocate_model()'s; otherwise finish() reads allocate_model()'s.
    void set_final_parameters(std::vector<std::vector<float>> tensors) { final_parameters_ = std::move(tensors); }

    // Whether the model's GEMMs run in fp16 on tensor cores (lesson 05's precisions but fp32): then each phase's work
    // (common/phase_work.h) counts 2-byte operands and the MFU is set against the tensor-core peak. Default: fp32 on
    // the FP32 units.
    void set_gemms_on_tensor_cores(bool fp16_tensor_cores) {
        gemm_element_bytes_ = fp16_tensor_cores ? 2 : 4, tensor_core_gemms_ = fp16_tensor_cores;
    }

    // The test accuracy finish() reports, for a lesson that evaluates outside finish_epoch (lesson 07's sweep).
    void set_final_test_accuracy(double accuracy) { last_test_accuracy_ = accuracy; }
    double final_test_accuracy() const { return last_test_accuracy_; }  // the last epoch's, or the one set

    // Anything else the lesson wants in the JSON report's "results" (and nowhere else).
    void add_result(const std::string& key, RunReport::Scalar value) { report_.add_result(key, std::move(value)); }
    void add_config(const std::string& key, RunReport::Scalar value) { report_.add_config(key, std::move(value)); }
    void add_result(const std::string& key, const std::vector<RunReport::Row>& rows) { report_.add_result(key, rows); }

    // Prints the time per phase over all epochs, the memory by category and the bytes moved, and a checksum of the
    // final weights (equal checksums = bitwise-equal weights); writes --json. Returns the exit code (0).
    // `timing_title`: the timing table's title, when "all N epochs" does not describe what the timer holds.
    int finish(const std::string& timing_title = "");
    // The same for an fp32 model the lesson allocated itself (lesson 01): its weights give the checksum.
    int finish(Mlp& net);

    // The measured host→device bandwidth (lesson 03's probe): the h2d phase's limit in the final table.
    void set_h2d_peak(double bytes_per_s) {
        peaks_.h2d_bytes_per_s = bytes_per_s;
        report_.set_device_peaks(peaks_);
    }

    // Per-step values (e.g. each step's loss) for the JSON results.
    void add_series(const std::string& key, const std::vector<double>& values);

    const std::string& program() const { return program_; }
    bool on_cpu_backend() const;
    // Can work on two streams run at the same time here? On a GPU, yes; on the CPU backend only with
    // CUDA_CPU_ASYNC=1 (by default it runs each call to completion before returning).
    bool streams_overlap() const;

  private:
    std::string program_;
    RunReport report_;
    Mlp net_;
    bool model_allocated_ = false;
    const uint8_t* test_pixels_ = nullptr;  // device: the whole (or --test-limit) test set, uploaded once
    const uint8_t* test_labels_ = nullptr;
    double last_test_accuracy_ = 0;
    std::string run_label_;
    std::vector<std::vector<float>> final_parameters_;
    std::string trace_path_;  // --trace FILE: the timeline of timer's first --trace-steps steps per epoch
    int trace_steps_ = 5;
    DevicePeaks peaks_;       // the device's limits (common/device_peaks.h), unknown on the CPU backend
    EpochWork work_total_{};  // every finished epoch's work (common/phase_work.h), for the final table
    int gemm_element_bytes_ = 4;
    bool tensor_core_gemms_ = false;
};

// An fp32 model's test-set evaluator with the fastest kernels (forward_fastest_kernels); the fp16 models' is the
// template in lessons/mixed_precision.h. `net` must outlive it.
inline Lesson::EvaluateBatch test_set_evaluator(Mlp& net) {
    return Lesson::test_set_evaluator(net,
                                      [](Mlp& n, int rows, cudaStream_t s) { forward_fastest_kernels(n, rows, s); });
}

// The largest batch the kernels can index (gemm_max_rows of the widest matrix a batch-sized GEMM operand has: the
// images, 784, or a layer): past it, the GEMMs refuse the call whatever memory is free. Lessons 06 and 07 cap the
// largest batch that fits with it.
int max_indexable_batch(const std::vector<int>& layer_sizes);

// Runs a lesson's train(): anything it throws (a bad kernel argument, an allocation the ledger could not make)
// becomes one line on stderr and exit code 1 instead of std::terminate's abort.
int run_lesson(int (*train)(int, char**), int argc, char** argv);
