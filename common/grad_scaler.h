// common/grad_scaler.h — dynamic loss scaling as a state machine (PyTorch's torch.amp.GradScaler): the state the
// device kernels of kernels/loss_scaling.cuh keep, and the same machine on the host (GradScalerReference) that the
// tests compare them with and that reads as the explanation. Plain host C++: a .cpp may include it.
//
// defines: GradScalerOptions, ScaleChange, kGradScalerLogSize, inverse_of_scale, GradScalerState, check_grad_scaler_options,
//          GradScalerReference.
//
// Why: fp16 holds magnitudes from 2^-24 to 65504. Gradients of a trained network are mostly far below 1, and many
// would flush to zero in fp16. Multiplying the loss by `scale` multiplies every gradient by it (the chain rule is
// linear), lifting them into fp16's range; dividing the fp32 gradients by `scale` afterwards (unscaling) gives the
// true gradients back. Too large a scale overflows to inf: then the step is skipped and the scale halved. A scale
// that has not overflowed for growth_interval steps in a row is doubled, so it stays near the largest safe value.
//
// One training step, in stream order (lesson 05):
//   1. backward from the loss gradient multiplied by `scale`;
//   2. unscale_and_check: g *= inv_scale in every gradient tensor, inv_scale = float(1 / double(scale)) as PyTorch
//      computes it; any inf or NaN (before the multiply) sets found_inf;
//   3. update_grad_scaler (torch._amp_update_scale_), below;
//   4. the optimizer (adamw_step_mixed) does nothing if step_skipped, else uses bias_correction1/2.
// The update, given found_inf:
//   found_inf:  scale *= backoff_factor; growth_tracker = 0; skipped_steps += 1
//   otherwise:  growth_tracker += 1; if it reaches growth_interval: scale *= growth_factor (unless that would be
//               inf: then the scale stays), growth_tracker = 0. optimizer_steps += 1 and
//               bias_correction{1,2} = float(1 − β{1,2}^optimizer_steps), computed in double as adamw_step does.
//   always:     inv_scale = float(1 / double(scale)); step_skipped = found_inf; found_inf = 0; iteration += 1;
//               a changed scale is logged.
// No step sees a stale flag: found_inf is raised only by unscale_and_check (any number of launches in one step, so
// a model with more tensors than one launch takes works too) and cleared only by update_grad_scaler, the kernel
// that consumes it, before the next step's backward. The optimizer reads step_skipped, which every update rewrites.
#pragma once

#include <cstddef>

struct GradScalerOptions {
    float init_scale = 65536.0f;  // 2^16
    float growth_factor = 2.0f;   // > 1
    float backoff_factor = 0.5f;  // in (0, 1)
    int growth_interval = 2000;   // clean steps in a row before the scale grows, ≥ 1
};

// One change of the scale. `iteration` counts steps from 0 (the update_grad_scaler call that changed it).
struct ScaleChange {
    int iteration;
    float old_scale;
    float new_scale;
    int grew;  // 1: growth after growth_interval clean steps; 0: backoff after an inf/NaN gradient
};

// The log keeps the FIRST kGradScalerLogSize changes (a lesson prints the new ones once per epoch: a scale that
// settles changes a few times early and rarely after); change_count keeps counting past it.
inline constexpr int kGradScalerLogSize = 64;

// float(1 / double(scale)), PyTorch's inv_scale (the same float as 1.0f / scale: double has more than 2·24 + 2 bits,
// so rounding twice is harmless). constexpr, so device code may call it too (nvcc --expt-relaxed-constexpr).
constexpr float inverse_of_scale(float scale) {
    return static_cast<float>(1.0 / static_cast<double>(scale));
}

// Device-resident (the lesson allocates one and copies it back once per epoch); every field is 4 bytes, so the
// struct has no padding and two states compare with memcmp.
struct GradScalerState {
    float scale;             // what the loss gradient is multiplied by
    float inv_scale;         // float(1 / double(scale)), what unscale_and_check multiplies by: computed once per
                             // change of the scale by one thread, not by every thread of every unscale launch
    int growth_tracker;      // clean steps in a row since the last change or overflow
    int found_inf;           // raised by unscale_and_check in this step, cleared by update_grad_scaler
    int step_skipped;        // update_grad_scaler's verdict on the last step (1 before the first update)
    int iteration;           // update_grad_scaler calls so far
    int optimizer_steps;     // of those, clean: the optimizer's step t
    int skipped_steps;       // of those, skipped (found_inf)
    float bias_correction1;  // 1 − β1^optimizer_steps, for the optimizer (0 before the first clean step)
    float bias_correction2;  // 1 − β2^optimizer_steps
    int change_count;        // scale changes so far; the first kGradScalerLogSize are in `changes`
    ScaleChange changes[kGradScalerLogSize];
};

// Throws std::invalid_argument naming `who` unless init_scale is finite and > 0, growth_factor > 1 and finite,
// 0 < backoff_factor < 1 and growth_interval ≥ 1 (PyTorch's own checks, plus the ones it leaves to chance).
void check_grad_scaler_options(const GradScalerOptions& options, const char* who);

// The same state machine on the host, element for element what the kernels do (float arithmetic for the scale and
// the gradients, double for the bias corrections).
class GradScalerReference {
  public:
    explicit GradScalerReference(const GradScalerOptions& options = {});

    // float(1.0 / double(scale)): what unscale_and_check multiplies by (state().inv_scale).
    float inv_scale() const;
    // g[i] *= inv_scale() for i < n; raises found_inf if any g[i] was inf or NaN.
    void unscale_and_check(float* g, size_t n);
    // update_grad_scaler: the transition above; beta1/beta2 are AdamW's, for the bias corrections.
    void update(float beta1, float beta2);

    const GradScalerState& state() const { return state_; }
    const GradScalerOptions& options() const { return options_; }

  private:
    GradScalerOptions options_;
    GradScalerState state_;
};
