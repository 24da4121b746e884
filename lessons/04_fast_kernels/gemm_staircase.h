// lessons/04_fast_kernels/gemm_staircase.h — lesson 04's closing table: one training step's forward and backward
// with every step of the GEMM staircase (kernels/gemm_v1_naive.cuh …), timed with CUDA events; in the counting build
// (build/cpu-counters) the GEMM kernels' memory requests instead, which say on any machine what makes each step
// faster on a GPU. The weights do not change (no optimizer step).
#pragma once

#include <functional>
#include <vector>

#include "lessons/lesson.h"

// Runs one phase (Phase::forward or Phase::backward) of a training step with GEMM step `version`, on the lesson's
// compute stream: lesson 04's forward(net, batch, version, ...) and backward(...).
using RunGemmStep = std::function<void(GemmVersion version, Phase phase)>;

// layer_sizes: 784, hidden..., 10 (for the FLOP count); the batch is the lesson's --batch. Also records each step's
// times (or counts) in the JSON results.
void print_gemm_staircase(Lesson& lesson, const std::vector<int>& layer_sizes, const RunGemmStep& run,
                          cudaStream_t stream);
