// lessons/07_batch_size/batch_sweep.h — lesson 07's tables, kept out of its main.cu (which is the training loop at
// one batch size): the shape and buffers of a point of the sweep, the largest batch that fits, the sweep over
// --batches and its table (samples/s, step time split into copy, kernels, input wait and host, peak memory by
// category, test accuracy), printed and in the JSON results.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lessons/batch_pipeline.h"
#include "lessons/mixed_precision.h"

// What one point of the sweep measured.
struct SweepPoint {
    int batch = 0;
    double lr = 0;
    long steps = 0;
    long samples = 0;
    double wall_ms = 0;                                            // training, all steps
    double copy_ms = 0, compute_ms = 0, wait_ms = 0, host_ms = 0;  // per step
    double test_accuracy = 0;
    MemorySnapshot memory;
};

// Lesson 07's flags: the batch sizes, the samples each trains on, the learning-rate rule, --no-largest.
struct SweepFlags {
    std::vector<int> batches = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
    int samples = 0;  // 0: one pass over the training images
    std::string lr_scaling = "sqrt";
    bool skip_largest = false;
    void add(Cli& cli);
    long samples_or_all(Lesson& lesson) const;  // --samples, or the training images; also in the JSON config
};

// Lesson 05's mixed-precision model at `batch` (two staging slots: lesson 03's data path).
ModelShape shape_at(const Lesson& lesson, int batch);
// The device buffers one run needs besides the model: the bias-gradient workspace, the scaler, the step losses.
size_t extra_device_bytes(const Lesson& lesson, int batch, long steps);
// The learning rate at batch B for --lr-scaling: lr·√(B/128) (sqrt), lr·B/128 (linear) or lr (none).
double scaled_lr(double lr, int batch, const std::string& rule);

// On the CPU backend: an emulated device memory of 256 MiB, unless CUDA_CPU_MEMORY says otherwise, small enough that
// the largest batch that fits is allocated and stepped in seconds. Before the first CUDA call (which reads it).
void set_cpu_backend_device_memory();

// First, --batch's run (the one whose tables finish() prints) must fit: if not, one message naming the category that
// overflows and the largest batch that fits, exit 2 (Lesson::require_fits). Then the largest batch that fits: from the exact prediction (shape_at + extra_device_bytes) and cudaMemGetInfo
// (usable_device_bytes: free memory minus a stated margin), capped by what the kernels' int indexing allows. Prints
// the device memory and the answer.
int largest_batch_that_fits_or_print(Lesson& lesson, long samples);

// Trains at one batch size (main.cu's train_run): `parameters`, if not null, receives the final weights.
using TrainAt = std::function<SweepPoint(Lesson&, int batch, long samples, double lr, MemoryLedger&, PhaseTimer&,
                                         std::vector<std::vector<float>>* parameters)>;

// A point's figures from its run's timing (all its epochs added up): the samples its `steps` steps saw and, per step,
// the copy, the kernels, the input wait and the host's own time.
SweepPoint sweep_point(const Lesson& lesson, int batch, double lr, long steps, const EpochTiming& timing);

// The proof that the largest batch fits: its model allocated (in a ledger of its own, freed on return) and trained
// on that many samples; prints its peak device memory and records it in the JSON results.
void prove_largest_batch(Lesson& lesson, int largest, const std::string& lr_scaling, const TrainAt& train_at);

// Each batch of `batches` that fits (≤ largest, ≤ the training images), and --batch (finish()'s run, in the lesson's
// ledger and timer), trained on `samples` samples; then the table.
void run_sweep(Lesson& lesson, const std::vector<int>& batches, int largest, long samples,
               const std::string& lr_scaling, const TrainAt& train_at);
