// lessons/09_data_parallel/scaling_comparison.h — lesson 09's two tables: where the all-reduce's time went, and the
// same training with N = 1, 2 (and 4) ranks side by side.
#pragma once

#include <functional>
#include <vector>

#include "lessons/09_data_parallel/allreduce.h"
#include "lessons/lesson.h"

namespace dp {

// The all-reduce per step (the training above): bytes reduced, time some reduction was in flight, the part of it
// after the backward pass (exposed), algorithm and bus bandwidth (nccl-tests' definitions), the fraction hidden.
// Printed by rank 0 and recorded in the JSON results. `streams_overlap`: false on the synchronous CPU backend, where
// nothing can overlap (said so).
void print_reduce_table(Lesson& lesson, Engine engine, int ranks, bool overlap, size_t bytes_per_step,
                        const ReduceTimes& times, bool streams_overlap);

// For N = 1, 2, 4 ≤ the rank count: the first N ranks (a communicator of their own) train `steps` steps of the same
// global batches from the `initial` parameters (optimizer state zeroed); `run` returns the milliseconds per step.
// Then the test accuracy. Ranks outside a group wait for it (polling, with the deadline). Rank 0 prints step time,
// scaling efficiency T_1 / (N · T_N) and accuracy per N. The model's final parameters are put back afterwards.
using RunSteps = std::function<double(const Group& group, int steps)>;
void print_scaling_comparison(Lesson& lesson, Mlp& net, const std::vector<std::vector<float>>& initial, int steps,
                              const Group& world, cudaStream_t stream, const RunSteps& run);

}  // namespace dp
