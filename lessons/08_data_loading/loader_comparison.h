// lessons/08_data_loading/loader_comparison.h — lesson 08's data paths side by side, kept out of its main.cu (which
// is the training loop with augmentation): the modes, what a run leaves for the table, the driver of the comparison
// runs, and the table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lessons/batch_loader.h"
#include "lessons/lesson.h"

// Where the per-image work happens: nowhere (lesson 04's data path), in the loader's workers before the copy, or
// in a kernel after it.
enum class Augment { none, host, device };
const char* augment_name(Augment augment);
Augment augment_from_name(const std::string& name);  // "none", "host", "device"

struct LoaderMode {
    Augment augment = Augment::device;
    int workers = 1;
    std::string label() const;  // "host, 2 workers"
};

// What a run leaves for the side-by-side table.
struct LoaderRun {
    LoaderMode mode;
    long steps = 0;
    EpochTiming timing{};              // the run's phases, all its epochs
    BatchLoader::Throughput loader{};  // images the workers filled, their busy time, the loop's waits for them
    uint64_t image_bytes = 0;          // pixel bytes copied host → device, all epochs
    uint64_t images = 0;               // training images, all epochs
    double test_accuracy = 0;
};

// A run of `mode` for `batches` batches (0: the main run, the lesson's --epochs in full), its buffers in `ledger`
// and its phases in `timer` (the lesson's for the main run).
using TrainMode = std::function<LoaderRun(Lesson&, const LoaderMode&, size_t batches, MemoryLedger&, PhaseTimer&)>;

// After the main run's last epoch: its test accuracy (the last epoch's), how much copy time compute never saw
// (report_copies), every step's loss and the final weights (finish()'s checksum). Returns `run`.
LoaderRun finish_main_run(Lesson& lesson, LoaderRun run, PhaseTimer& timer, uint64_t image_bytes_per_epoch,
                          const std::vector<float>& step_losses, std::vector<std::vector<float>> parameters);

// Lesson 08's flags: --augment, --workers, --compare-steps.
struct LoaderFlags {
    std::string augment = "device";
    int workers = 1;
#if defined(CUDA_TEACH_CPU)
    int compare_steps = 3;  // a CPU backend's step takes about a second at the default width
#else
    int compare_steps = 40;
#endif
    void add(Cli& cli);
    LoaderMode mode(Lesson& lesson) const;  // the main run's, also recorded in the JSON config
};

// The comparison runs: each of `modes` trains `batches` batches of epoch 1 from the same seed in a ledger and timer
// of its own (freed before the next run). Then `main_run` (already trained) joins them in a table — per step: the
// host's wait for the loader's work and for a slot (back-pressure), the stream's input wait, h2d, kernels;
// kernels ÷ wall; loader images/s; bytes copied per image; test accuracy — also in the JSON results as
// loader_runs.
void compare_loaders(Lesson& lesson, const std::vector<LoaderMode>& modes, size_t batches, const TrainMode& train,
                     const LoaderRun& main_run);

// The comparison's modes: none, host with 1, 2 and 4 workers (and the --workers of the main run, if another), device.
std::vector<LoaderMode> comparison_modes(int main_workers);
