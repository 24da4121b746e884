// lessons/06_activation_checkpointing/checkpointing.h — activation checkpointing for the MLP of lessons 04–07 (lesson 06): which layer inputs a
// policy keeps, the buffers it needs and their exact size, and the backward pass that recomputes the rest.
//
// defines: CheckpointPolicy (parse_checkpoint_policy), CheckpointSegment, CheckpointPlan (plan_checkpoints,
//          describe), predict_checkpointed_memory(), check_checkpointed_fits(), largest_checkpointed_batch(),
//          allocate_checkpointed_model(), backward_checkpointed() (fp32 and mixed fp16).
//
// The idea (Chen et al., 2016, "Training Deep Nets with Sublinear Memory Cost"): the backward pass of layer l needs
// its input X_l (for dW = X_lᵀ·dY_l, and as the ReLU mask of the layer before). Keeping every X_l costs memory in
// proportion to the depth L. Instead keep only the inputs of layers 0, k, 2k, ... (the checkpoints): they cut the
// network into segments of k layers. In the backward pass, segment by segment from the last, run that segment's
// forward again from its checkpoint into one reusable segment buffer, then its backward. Memory: L/k checkpoints +
// one segment of k activations, smallest near k = √L (both ~√L); time: about one extra forward pass.
//
// The buffers of a plan (activations, one batch; B rows, the element type of the model):
//   none      lesson 05's set (allocate_mlp): X, and per layer its output Y_l and its gradient dY_l.
//   every=k   X and the kept layer inputs (checkpoints); the logits; the segment buffer: slot j holds the output of
//   (sqrt:    the segment's layer j (j < k - 1), shared by every segment, as wide as the widest layer that uses it;
//   k = ⌈√L⌉) two gradient buffers, dY of layers L-1, L-3, ... in one and of L-2, L-4, ... in the other (layer l
//             reads dY_l from one and writes dX_l = dY_{l-1} into the other).
// A plan is a pure function of the shape and the policy, so predict_checkpointed_memory() knows the bytes before
// anything is allocated, and allocate_checkpointed_model() allocates exactly those buffers: the ledger's activation
// peak equals the prediction.
//
// How the pieces run: with a policy, layers[l].output of the model points at the buffer layer l writes (a
// checkpoint, a segment slot or the logits), so the ordinary forward pass (forward_fast, forward_half) runs the
// checkpointed model unchanged: within one pass, a slot is read by the next layer before a later segment overwrites
// it. What changes is the backward pass: backward_checkpointed() recomputes each segment but the last (whose
// activations the forward pass has just left in the slots) with the same kernel calls as the forward pass, then runs
// lesson 04's / 05's backward kernels over it in the same order. Same kernels, same inputs, same order: the
// gradients are bitwise those of backward_fast / backward_half (tests/test_checkpointing.cu).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lessons/lesson.h"
#include "lessons/mixed_precision.h"

#include "kernels/gemm_version.h"
#include "kernels/hgemm_version.h"

// --checkpoint none | sqrt | every=K. stride: 0 for none (keep everything, recompute nothing), else the distance
// between kept layer inputs (sqrt: ⌈√L⌉ for L weight layers).
struct CheckpointPolicy {
    std::string name;  // "none", "sqrt", "every=K"
    int stride = 0;
};
// Throws std::invalid_argument with one message for anything but none, sqrt, every=K (K ≥ 1). `layers`: the weight
// layers of the model (hidden + 1), for sqrt.
CheckpointPolicy parse_checkpoint_policy(const std::string& text, int layers);

struct CheckpointSegment {
    int first = 0, end = 0;  // layers [first, end), 0-based
};

struct CheckpointPlan {
    CheckpointPolicy policy;
    std::vector<int> layer_sizes;  // 784, hidden..., 10
    int batch = 0;
    size_t element_bytes = 4;                 // per activation element (4: fp32, 2: fp16)
    std::vector<CheckpointSegment> segments;  // forward order; none: one segment of every layer
    std::vector<int> kept_inputs;             // layers whose input is a checkpoint (0 always: X)
    std::vector<int> slot_widths;             // the segment buffer: slot j is batch × slot_widths[j]
    std::array<int, 2> gradient_widths{};     // the two dY buffers: batch × width each (none: unused, 0)

    int layers() const { return int(layer_sizes.size()) - 1; }
    bool keeps_everything() const { return policy.stride == 0; }
    // Activation elements per row of the batch, and bytes for the whole batch (what the ledger's "activations" peak
    // will be).
    size_t elements_per_row() const;
    size_t activation_bytes() const;
    // Multiply-adds of one forward pass per row (Σ in·out), and of what backward_checkpointed recomputes per row:
    // every segment but the last, each without its last layer (whose output is the next checkpoint).
    double forward_macs_per_row() const;
    double recomputed_macs_per_row() const;
    double extra_forward_fraction() const { return recomputed_macs_per_row() / forward_macs_per_row(); }
    // One line for the banner and the README, layers counted from 0: "keeps the inputs of layers 0, 5, 10, 15
    // (layers 0-16); segments 0-4, 5-9, 10-14, 15-16; ...".
    std::string describe() const;
};

// The plan of `policy` for `shape` (its layer sizes, batch and activation element size).
CheckpointPlan plan_checkpoints(const ModelShape& shape, const CheckpointPolicy& policy);

// predict_device_memory(shape) with the activations of the plan instead of lesson 05's set: the other categories do
// not depend on the policy.
MemoryPrediction predict_checkpointed_memory(const ModelShape& shape, const CheckpointPolicy& policy);

// As check_device_fits (common/memory_ledger.h) for a checkpointed model: "" when the prediction plus `extra_bytes`
// fits in `available_bytes`, else one message naming what overflows and the largest batch that fits this policy.
std::string check_checkpointed_fits(const ModelShape& shape, const CheckpointPolicy& policy, size_t extra_bytes,
                                    const std::string& extra_name, size_t available_bytes);

// The largest batch b ≤ max_batch whose prediction plus extra_bytes(b) fits in available_bytes (0: none fits).
// Bisection: the prediction grows with the batch. `extra_bytes(b)`: the lesson's own buffers at batch b.
int largest_checkpointed_batch(ModelShape shape, const CheckpointPolicy& policy,
                               const std::function<size_t(int batch)>& extra_bytes, size_t available_bytes,
                               int max_batch);

// Allocates the model of `plan` through `ledger` and initializes it as allocate_initialized_model (lessons/mlp.h)
// does (the same Philox initialization, fp16 working copy cast from the fp32 masters, optimizer state zeroed). none:
// allocate_initialized_model itself. Otherwise every category but the activations is allocate_mlp's, and the activations are the plan's
// buffers, layers[l].output / output_grad pointing into them. Param/Grad: float/float (fp32), __half/float (mixed).
template <typename Param, typename Grad>
MlpBuffers<Param, Param, Grad> allocate_checkpointed_model(MemoryLedger& ledger, const ModelShape& shape,
                                                           const CheckpointPlan& plan, uint64_t seed);

// The backward pass of a model from allocate_checkpointed_model(), right after the forward pass and the loss of the
// same `rows` (dlogits in layers.back().output_grad): per segment from the last, recompute its activations (not for
// the last segment), then dW, db, dX and the ReLU mask per layer exactly as backward_fast / backward_half do.
void backward_checkpointed(Mlp& net, const CheckpointPlan& plan, int rows, GemmVersion version, float* workspace,
                           size_t workspace_floats, cudaStream_t stream);
void backward_checkpointed(HalfMlp<float>& net, const CheckpointPlan& plan, int rows, HgemmVersion version,
                           float* workspace, size_t workspace_floats, cudaStream_t stream);
// One segment of it, with the fastest kernels (lesson 06's main.cu runs the segments from the last):
// recompute_segment runs the forward kernels of the segment's layers but its last again, from the segment's
// checkpoint, into the segment buffer (the same kernels on the same inputs: the same bits); backward_segment runs its
// layers' backward, last layer first.
void recompute_segment(Mlp& net, const CheckpointSegment& segment, int rows, cudaStream_t stream);
void recompute_segment(HalfMlp<float>& net, const CheckpointSegment& segment, int rows, cudaStream_t stream);
void backward_segment(Mlp& net, const CheckpointSegment& segment, int rows, float* workspace, size_t workspace_floats,
                      cudaStream_t stream);
void backward_segment(HalfMlp<float>& net, const CheckpointSegment& segment, int rows, float* workspace,
                      size_t workspace_floats, cudaStream_t stream);
// The whole backward pass with the fastest kernels (lesson 04's GEMM step 6, lesson 05's pipelined HGEMM), as
// backward_fastest_kernels does for the model without checkpoints.
inline void backward_checkpointed(Mlp& net, const CheckpointPlan& plan, int rows, float* workspace,
                                  size_t workspace_floats, cudaStream_t stream) {
    backward_checkpointed(net, plan, rows, kFastestGemm, workspace, workspace_floats, stream);
}
inline void backward_checkpointed(HalfMlp<float>& net, const CheckpointPlan& plan, int rows, float* workspace,
                                  size_t workspace_floats, cudaStream_t stream) {
    backward_checkpointed(net, plan, rows, kFastestHgemm, workspace, workspace_floats, stream);
}
