// common/reference_ops.h — the CPU reference for every kernel in kernels/: plain loops, accumulating in double.
//
// defines: reference::gemm, bias_add, relu_forward, relu_backward, softmax_cross_entropy, bias_grad,
//          sgd_momentum_step, adamw_step, argmax_rows, count_correct, normalize_pixels.
//
// Tests compare each kernel with these functions (tolerance abs + |ref|·eps); the CPU reference trainer and
// the gradient check build a whole MLP from them. They favour being obviously right over being fast, but keep
// the inner loops contiguous so a reference training step at MNIST sizes takes seconds, not minutes.
//
// Conventions shared with the kernels:
//   * Every matrix is row-major with an explicit leading dimension (the distance between rows, in elements).
//   * op(A) is A, or Aᵀ when trans_a: the three GEMMs of a linear layer Y = X·W are
//       forward  Y  = X  · W     gemm(false, false, ...)
//       backward dX = dY · Wᵀ    gemm(false, true,  ...)
//       backward dW = Xᵀ · dY    gemm(true,  false, ...)
//   * Labels are class indices, uint8_t (MNIST stores them as bytes) or int32_t.
//   * Argmax ties go to the lowest index.
//
// Element types: In is the input type (float or double), Out/T the output type. Instantiated for float and
// double in reference_ops.cpp; a float output is rounded once from the double result.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/normalize_pixel.h"

namespace reference {

// C = alpha · op(A) · op(B) + beta · C, with op(A) M×K and op(B) K×N, C M×N.
// A is stored M×K (lda ≥ K) or, when trans_a, K×M (lda ≥ M); likewise B is K×N or, when trans_b, N×K.
// As in BLAS, C is not read when beta == 0 (so a NaN-poisoned output is fine).
// Instantiated for (In, Out) = (float, double), (float, float), (double, double).
template <typename In, typename Out>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const In* A, int lda, const In* B, int ldb,
          double beta, Out* C, int ldc);

// Y[r][c] += bias[c] for a rows×cols matrix with leading dimension ldy.
template <typename T>
void bias_add(int rows, int cols, const T* bias, T* Y, int ldy);

// y = max(x, 0) element-wise (y may alias x).
template <typename T>
void relu_forward(size_t n, const T* x, T* y);

// dx = dy where the ReLU was active (activation > 0), else 0. `activation` may be the ReLU's input or output:
// both are > 0 exactly where the ReLU passes its input through. dx may alias dy.
template <typename T>
void relu_backward(size_t n, const T* dy, const T* activation, T* dx);

// Softmax cross-entropy over `batch` rows of `classes` logits (leading dimension ld):
//   returns the mean loss  (1/batch) Σ_r [logsumexp(logits_r) − logits_r[label_r]]
//   writes dlogits = (softmax(logits) − onehot(label)) / batch  (same leading dimension), unless dlogits is null.
// Stable for any finite logits (subtracts the row max). Throws std::invalid_argument on a label ≥ classes.
template <typename T, typename Label>
double softmax_cross_entropy(int batch, int classes, const T* logits, int ld, const Label* labels, T* dlogits);

// db[c] = Σ_r dY[r][c]: the bias gradient is the column sum of the output gradient over the batch.
template <typename T>
void bias_grad(int rows, int cols, const T* dY, int ldy, T* db);

// SGD with momentum (PyTorch convention, L2 weight decay added to the gradient):
//   g = grad + weight_decay·p;  v = momentum·v + g;  p -= lr·v
template <typename T>
void sgd_momentum_step(size_t n, T* param, const T* grad, T* velocity, double lr, double momentum, double weight_decay);

// AdamW (Loshchilov & Hutter; PyTorch's torch.optim.AdamW), step t = 1, 2, ...:
//   p -= lr·weight_decay·p                        (decoupled weight decay, applied to the old p)
//   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//   p -= lr · (m / (1−β1ᵗ)) / (sqrt(v / (1−β2ᵗ)) + eps)
template <typename T>
void adamw_step(size_t n, T* param, const T* grad, T* m, T* v, double lr, double beta1, double beta2, double eps,
                double weight_decay, int t);

// predictions[r] = argmax_c logits[r][c] (lowest index on ties).
template <typename T>
void argmax_rows(int rows, int cols, const T* logits, int ld, int32_t* predictions);

// Number of rows whose argmax equals the label.
template <typename T, typename Label>
int count_correct(int rows, int cols, const T* logits, int ld, const Label* labels);

// out[i] = (pixels[i] / 255 − mean) / std, the formula of normalize_pixel() (common/normalize_pixel.h) computed
// in double: the float64 ground truth. The float32 inputs of lessons and the reference trainer come from
// normalize_pixel() itself, which kernels/normalize.cuh matches bit for bit.
template <typename T>
void normalize_pixels(size_t n, const uint8_t* pixels, T* out, double mean, double std);

// The same mean and std as normalize_pixel() (the float32 constants, widened exactly).
inline constexpr double kMnistMean = ::kMnistMean;
inline constexpr double kMnistStd = ::kMnistStd;

}  // namespace reference
