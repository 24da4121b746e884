// common/phase_work.h — the work each phase of an MLP training epoch must do: FLOPs, and bytes it must move to and
// from device memory, counted from the shapes run.
//
// defines: PhaseWork, EpochWork, mlp_epoch_work(), model_flops().
//
// With a time, a phase's work gives its achieved rate (GFLOP/s, GB/s), and with the device's peaks
// (device_peaks.h) the fraction of the limit it reached. The bytes are a lower bound: each input read once and each
// output written once per kernel launch, as if every cache were perfect. A naive kernel moves far more (that is the
// point of lesson 04's staircase), so its GB/s here is what a perfect kernel would need at that speed.
//
// Counted per epoch of `samples` images in ⌈samples / batch⌉ steps, for layers n_0 = 784, n_1, ..., n_L = 10:
//   normalize  2 FLOPs per pixel (scale, shift); 1 byte in (uint8), e bytes out, per pixel
//   forward    per layer: 2·rows·in·out FLOPs (the GEMM; bias and ReLU fused in its epilogue are not counted);
//              bytes: X (rows·in), W (in·out) and b (out) read, Y (rows·out) written, e bytes each
//   loss       no FLOPs counted (a few per logit); bytes: logits read, labels (1 byte), dlogits written
//   backward   per layer: dW = Xᵀ·dY, 2·rows·in·out; dX = dY·Wᵀ, 2·rows·in·out, skipped for the first layer (no
//              one needs the gradient of the input); db, rows·out adds. Bytes: dY, X read; dW, db written; for
//              dX (its own launch), dY again, W and the layer's input activation (the ReLU mask) read, dX written
//   optimizer  per parameter and step: SGD with momentum 6 FLOPs, 5 fp32 values moved (p, g, v in; p, v out);
//              AdamW 13 FLOPs, 7 values (p, g, m, v in; p, m, v out)
// e: bytes per activation and weight element (4 for fp32; the optimizer always counts fp32).
// The model FLOPs (model_flops: forward + backward) are what MFU divides by the time: work a recomputation adds
// (lesson 06) is not model work.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "common/cli.h"
#include "common/phase_timer.h"

struct PhaseWork {
    double flops = 0;
    double bytes_device = 0;   // the lower bound above
    bool tensor_core = false;  // its FLOPs run on tensor cores (for the peak they are set against)
};
using EpochWork = std::array<PhaseWork, kPhaseCount>;

struct WorkShape {
    std::vector<int> layer_sizes;  // 784, hidden..., 10
    size_t samples = 0;            // images trained in the epoch
    int batch = 0;
    OptimizerKind optimizer = OptimizerKind::sgd;
    int element_bytes = 4;         // activations and weights as the kernels read them (2: fp16)
    bool tensor_core_gemms = false;
};
EpochWork mlp_epoch_work(const WorkShape& shape);
double model_flops(const EpochWork& work);  // forward + backward
