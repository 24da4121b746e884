// common/grad_scaler.cpp — GradScalerReference: the loss-scaling state machine of common/grad_scaler.h on the host.
#include "common/grad_scaler.h"

#include <cmath>
#include <stdexcept>
#include <string>

void check_grad_scaler_options(const GradScalerOptions& o, const char* who) {
    if (!(std::isfinite(o.init_scale) && o.init_scale > 0.0f) ||
        !(std::isfinite(o.growth_factor) && o.growth_factor > 1.0f) ||
        !(o.backoff_factor > 0.0f && o.backoff_factor < 1.0f) || o.growth_interval < 1) {
        throw std::invalid_argument(std::string(who) +
                                    ": need a finite init_scale > 0, a finite growth_factor > 1, 0 < backoff_factor "
                                    "< 1 and growth_interval >= 1");
    }
}

GradScalerReference::GradScalerReference(const GradScalerOptions& options) : options_(options), state_{} {
    check_grad_scaler_options(options, "GradScalerReference");
    state_.scale = options.init_scale;
    state_.inv_scale = inverse_of_scale(options.init_scale);
    state_.step_skipped = 1;  // no verdict yet: an optimizer launched before the first update does nothing
}

float GradScalerReference::inv_scale() const {
    return state_.inv_scale;
}

void GradScalerReference::unscale_and_check(float* g, size_t n) {
    const float inv = inv_scale();
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(g[i])) state_.found_inf = 1;  // the value as backward left it, as PyTorch checks
        g[i] *= inv;
    }
}

void GradScalerReference::update(float beta1, float beta2) {
    GradScalerState& s = state_;
    const float old_scale = s.scale;
    const bool found_inf = s.found_inf != 0;
    bool grew = false;
    if (found_inf) {
        s.scale = old_scale * options_.backoff_factor;
        s.growth_tracker = 0;
        s.skipped_steps += 1;
    } else {
        s.growth_tracker += 1;
        if (s.growth_tracker == options_.growth_interval) {
            const float grown = old_scale * options_.growth_factor;
            if (std::isfinite(grown)) {
                s.scale = grown;
                grew = true;
            }
            s.growth_tracker = 0;
        }
        s.optimizer_steps += 1;
        // adamw_step's formula (kernels/optimizers.cuh), so that the optimizer gets the same bits either way.
        s.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), s.optimizer_steps));
        s.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), s.optimizer_steps));
    }
    if (s.scale != old_scale) {
        if (s.change_count < kGradScalerLogSize) {
            s.changes[s.change_count] = ScaleChange{s.iteration, old_scale, s.scale, grew ? 1 : 0};
        }
        s.change_count += 1;
    }
    s.inv_scale = inverse_of_scale(s.scale);
    s.step_skipped = found_inf ? 1 : 0;
    s.found_inf = 0;
    s.iteration += 1;
}
