// lessons/05_mixed_precision/precision_comparison.h — lesson 05's four precisions side by side, kept out of its
// main.cu (which is the mixed-precision training loop): what each run leaves behind, the driver of
// --precision all, and the tables.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lessons/mixed_precision.h"

// What a run leaves for the side-by-side table.
struct PrecisionRun {
    explicit PrecisionRun(Precision run_precision) : precision(run_precision) {}
    Precision precision;
    EpochMetrics last;                  // the last epoch's figures
    double seconds = 0;                 // training wall time, all epochs
    uint64_t updates = 0, stalled = 0;  // weight updates computed non-zero, and those that rounded away
    int skipped_steps = 0;              // mixed: steps skipped for inf/NaN gradients
    float final_scale = 0;              // mixed: the loss scale at the end
    UnderflowProbe probe;
    MemorySnapshot memory;
};

// Two zeroed device counters for optimizer_step: updates computed non-zero, and those that rounded away.
UpdateCounters allocate_update_counters(MemoryLedger& ledger, cudaStream_t stream);

// After a run's last epoch: reads its update counters and (mixed) the scaler's state, probes gradient underflow on
// the first test batch with the final `parameters`, snapshots the ledger. The main run (the one the lesson's
// tables and checksum report) also hands its step losses and final parameters to `lesson`.
void finish_precision_run(PrecisionRun& run, Lesson& lesson, bool main_run, MemoryLedger& ledger,
                          std::vector<std::vector<float>> parameters, UpdateCounters counters,
                          const GradScalerState* scaler, const GradScalerOptions& scaling,
                          const std::vector<float>& step_losses, cudaStream_t stream);

// Prints the scale changes the device logged since the last call, and the running count of skipped steps.
void print_scaler_news(MemoryLedger& ledger, const GradScalerState* device_state, int* changes_printed,
                       cudaStream_t stream);

// One training run of `precision`, its buffers in `ledger` and phases in `timer` (the lesson's for the main run).
using TrainPrecision = std::function<PrecisionRun(Precision, bool main_run, MemoryLedger&, PhaseTimer&)>;

// --precision all: fp32, fp16-pure and fp16-weights first, each in a ledger and timer of its own (freed before the
// next run), then mixed, the main run, in the lesson's; otherwise the one precision. Then the runs side by side:
// accuracy, updates rounded away, gradients flushed to zero, skipped steps, time, and memory by category (also in
// the JSON results as precision_runs).
void run_precisions(Lesson& lesson, const std::string& precision_flag, const TrainPrecision& train);
