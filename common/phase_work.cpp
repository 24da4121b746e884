// common/phase_work.cpp — see phase_work.h.
#include "common/phase_work.h"

EpochWork mlp_epoch_work(const WorkShape& shape) {
    EpochWork w{};
    if (shape.layer_sizes.size() < 2 || shape.samples == 0 || shape.batch <= 0) return w;
    const double rows = double(shape.samples), e = shape.element_bytes;
    const double steps = double((shape.samples + size_t(shape.batch) - 1) / size_t(shape.batch));
    PhaseWork& normalize = w[int(Phase::normalize)];
    PhaseWork& forward = w[int(Phase::forward)];
    PhaseWork& loss = w[int(Phase::loss)];
    PhaseWork& backward = w[int(Phase::backward)];
    PhaseWork& optimizer = w[int(Phase::optimizer)];
    const double pixels = rows * shape.layer_sizes.front();
    normalize.flops = 2 * pixels;
    normalize.bytes_device = pixels * (1 + e);
    double parameters = 0;
    for (size_t l = 0; l + 1 < shape.layer_sizes.size(); ++l) {
        const double in = shape.layer_sizes[l], out = shape.layer_sizes[l + 1];
        parameters += in * out + out;
        forward.flops += 2 * rows * in * out;
        forward.bytes_device += e * (rows * in + steps * (in * out + out) + rows * out);
        backward.flops += 2 * rows * in * out + rows * out;                  // dW, db
        backward.bytes_device += e * (rows * out + rows * in + steps * (in * out + out));  // dY, X in; dW, db out
        if (l > 0) {
            backward.flops += 2 * rows * in * out;                           // dX
            backward.bytes_device += e * (rows * out + steps * in * out + 2 * rows * in);  // dY, W, ReLU input; dX
        }
    }
    const double classes = shape.layer_sizes.back();
    loss.bytes_device = rows * (2 * e * classes + 1);
    const bool adamw = shape.optimizer == OptimizerKind::adamw;
    optimizer.flops = steps * parameters * (adamw ? 13 : 6);
    optimizer.bytes_device = steps * parameters * 4 * (adamw ? 7 : 5);
    forward.tensor_core = backward.tensor_core = shape.tensor_core_gemms;
    return w;
}

double model_flops(const EpochWork& work) {
    return work[int(Phase::forward)].flops + work[int(Phase::backward)].flops;
}
