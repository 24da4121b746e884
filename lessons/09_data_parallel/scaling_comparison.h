// lessons/09_data_parallel/scaling_comparison.h — lesson 09's two tables: where the all-reduce's time went, and the
// same training with N = 1, 2 (and 4) ranks side by side.
#pragma once

#include <functional>
#include <vector>

#include "lessons/09_data_parallel/allreduce.h"
#include "lessons/batch_pipeline.h"
#include "lessons/lesson.h"

namespace dp {

// The all-reduce per step (the training above): bytes reduced, time some reduction was in flight, the part of it
// after the backward pass (exposed), algorithm and bus bandwidth (nccl-tests' definitions), the fraction hidden.
// Printed by rank 0 and recorded in the JSON results. On the synchronous CPU backend nothing can overlap: said so.
void print_reduce_table(Lesson& lesson, const Group& group, bool overlap, const ReduceTimes& times);

// main.cu's training step: this rank's shard of `batch`, the gradients summed over `group`; `times` (may be null)
// collects where the all-reduce's time went, and the step's slices go on the --trace timeline.
using Step = std::function<void(const Group& group, const BatchPipeline::DeviceBatch& batch, BatchPipeline& pipeline,
                                PhaseTimer& timer, long step, int epoch, int step_in_epoch, ReduceTimes* times)>;

// After an epoch: the loss sum and the correct count (net.correct) summed over the ranks, Lesson::finish_epoch (the
// epoch line: rank 0), then same_weights_on_every_rank. False if the weights differ.
bool finish_epoch(Lesson& lesson, const Group& group, int epoch, const EpochTiming& timing, double loss_sum, Mlp& net,
                  const ForwardPass& forward, cudaStream_t stream);

// For N = 1, 2, 4 ≤ the rank count: the first N ranks (a communicator of their own) train `steps` steps of the same
// global batches from the `initial` parameters (optimizer state zeroed), with a timer and data pipeline of their
// own; then the test accuracy. Ranks outside a group wait for it (polling, with a deadline). Rank 0 prints step
// time, scaling efficiency T_1 / (N · T_N) and accuracy per N. The model's final parameters are put back afterwards.
void print_scaling_comparison(Lesson& lesson, Mlp& net, const std::vector<std::vector<float>>& initial, int steps,
                              const Group& world, cudaStream_t stream, const Step& step);

}  // namespace dp
