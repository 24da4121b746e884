// lessons/06_activation_checkpointing/policy_comparison.h — lesson 06's tables, kept out of its main.cu (which is
// the checkpointed training loop): the plan of a run and its prediction, the policies predicted before training,
// the driver of the default none-then-policy comparison, and the table that shows the two runs side by side.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lessons/06_activation_checkpointing/checkpointing.h"
#include "lessons/mixed_precision.h"

// Lesson 06's flags. add() runs before the command line is parsed: it sets the deeper default model, 784 → 16 × 1024
// → 10 (on the CPU backend 16 × 256), which --hidden and --epochs override.
struct CheckpointFlags {
    std::string checkpoint = "sqrt", precision = "mixed";
    bool compare = false, no_compare = false;
    void add(Cli& cli, Lesson& lesson);
};

// --checkpoint's policy for the lesson's model; one message and exit 2 for anything but none, sqrt, every=K, or for
// --compare with --no-compare. Also records the policy, the precision and the comparison in the JSON config.
CheckpointPolicy checkpoint_policy_or_exit(Lesson& lesson, const CheckpointFlags& flags);
// The CPU backend's smaller default model, said in one line (nothing for another model or on a GPU).
void print_cpu_default_model_note(const Lesson& lesson);

// What a run leaves for the side-by-side table.
struct CheckpointRun {
    CheckpointPlan plan;
    EpochMetrics last;            // the last epoch's figures
    double seconds = 0;           // training wall time, all epochs
    MemorySnapshot memory;        // the run's ledger
    size_t predicted_device = 0;  // the prediction of the run's whole device memory (model + the lesson's buffers)
    size_t measured_device = 0;   // the ledger's peak of the same
    int largest_batch = 0;        // from the prediction and cudaMemGetInfo
    std::vector<float> losses;    // every step's mean loss
    std::vector<std::vector<float>> parameters;  // the final weights, fp32 (the masters for mixed)
};

// Before anything of a run is allocated: the plan of `policy` for `shape`, the prediction of the run's device
// memory, and the largest batch that would fit `usable` bytes. A run that cannot fit gets one message naming what
// overflows and the largest batch that fits, and exit 2.
CheckpointRun plan_checkpointed_run(const Lesson& lesson, const ModelShape& shape, Precision precision,
                                    const CheckpointPolicy& policy, size_t usable);

// After a run's last epoch: its step losses, final parameters and ledger; the measured device peak (without the
// test set, which the main run's ledger holds).
void finish_checkpointed_run(CheckpointRun& run, const Lesson& lesson, bool main_run, MemoryLedger& ledger,
                             std::vector<std::vector<float>> parameters, std::vector<float> losses);

// Asks cudaMemGetInfo what the lesson may use (before anything is allocated), prints it, the chosen policy's plan
// and what every policy would keep, predicted from the shape alone. Returns the usable bytes.
size_t print_plan_and_predictions(const Lesson& lesson, Precision precision, const CheckpointPolicy& policy);

// One training run with `policy`, its buffers in `ledger` and phases in `timer` (the lesson's for the main run).
using TrainPolicy = std::function<CheckpointRun(const CheckpointPolicy&, bool main_run, MemoryLedger&, PhaseTimer&)>;

// With `compare` (and a policy other than none): none first, in a ledger and timer of its own, then the policy, the
// main run, in the lesson's. Then the runs side by side (memory measured and predicted, extra forward work, time,
// largest batch) and whether every step's loss and the final weights are bitwise equal; the JSON results get the
// same (checkpoint_runs, step_losses, weights_bitwise_equal, ...).
void run_policies(Lesson& lesson, const CheckpointPolicy& policy, bool compare, const TrainPolicy& train);
