// common/reference_ops.cpp — float64 CPU reference ops (see reference_ops.h for the contract of each).
#include "common/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace reference {

template <typename In, typename Out>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const In* A, int lda, const In* B, int ldb,
          double beta, Out* C, int ldc) {
    if (M < 0 || N < 0 || K < 0) throw std::invalid_argument("reference::gemm: negative size");
    std::vector<double> a_row(static_cast<size_t>(K));
    std::vector<double> acc(static_cast<size_t>(N));
    for (int i = 0; i < M; ++i) {
        // Gather row i of op(A) once, so the inner loops below are contiguous whatever the transposes.
        for (int k = 0; k < K; ++k) {
            a_row[k] = trans_a ? static_cast<double>(A[static_cast<size_t>(k) * lda + i])
                               : static_cast<double>(A[static_cast<size_t>(i) * lda + k]);
        }
        if (!trans_b) {
            // acc = Σ_k a_row[k] · B[k][:]  (rows of B are contiguous)
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int k = 0; k < K; ++k) {
                const double a = a_row[k];
                const In* b_row = B + static_cast<size_t>(k) * ldb;
                for (int j = 0; j < N; ++j) acc[j] += a * static_cast<double>(b_row[j]);
            }
        } else {
            // op(B)[k][j] = B[j][k]: each output is a dot product of two contiguous rows.
            for (int j = 0; j < N; ++j) {
                const In* b_row = B + static_cast<size_t>(j) * ldb;
                double sum = 0.0;
                for (int k = 0; k < K; ++k) sum += a_row[k] * static_cast<double>(b_row[k]);
                acc[j] = sum;
            }
        }
        Out* c_row = C + static_cast<size_t>(i) * ldc;
        for (int j = 0; j < N; ++j) {
            const double old = beta == 0.0 ? 0.0 : beta * static_cast<double>(c_row[j]);
            c_row[j] = static_cast<Out>(alpha * acc[j] + old);
        }
    }
}

template <typename T>
void bias_add(int rows, int cols, const T* bias, T* Y, int ldy) {
    for (int r = 0; r < rows; ++r) {
        T* y = Y + static_cast<size_t>(r) * ldy;
        for (int c = 0; c < cols; ++c) y[c] = static_cast<T>(static_cast<double>(y[c]) + bias[c]);
    }
}

template <typename T>
void relu_forward(size_t n, const T* x, T* y) {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

template <typename T>
void relu_backward(size_t n, const T* dy, const T* activation, T* dx) {
    for (size_t i = 0; i < n; ++i) dx[i] = activation[i] > T(0) ? dy[i] : T(0);
}

template <typename T, typename Label>
double softmax_cross_entropy(int batch, int classes, const T* logits, int ld, const Label* labels, T* dlogits) {
    double total = 0.0;
    std::vector<double> e(static_cast<size_t>(classes));
    for (int r = 0; r < batch; ++r) {
        const T* z = logits + static_cast<size_t>(r) * ld;
        const int label = static_cast<int>(labels[r]);
        if (label < 0 || label >= classes) {
            throw std::invalid_argument("reference::softmax_cross_entropy: label " + std::to_string(label) +
                                        " out of range for " + std::to_string(classes) + " classes");
        }
        double row_max = -INFINITY;
        for (int c = 0; c < classes; ++c) row_max = std::max(row_max, static_cast<double>(z[c]));
        double sum = 0.0;
        for (int c = 0; c < classes; ++c) {
            e[c] = std::exp(static_cast<double>(z[c]) - row_max);
            sum += e[c];
        }
        // loss_r = logsumexp(z) − z[label] = log(sum) + max − z[label]
        total += std::log(sum) + row_max - static_cast<double>(z[label]);
        if (dlogits != nullptr) {
            T* d = dlogits + static_cast<size_t>(r) * ld;
            for (int c = 0; c < classes; ++c) {
                d[c] = static_cast<T>((e[c] / sum - (c == label ? 1.0 : 0.0)) / batch);
            }
        }
    }
    return batch > 0 ? total / batch : 0.0;
}

template <typename T>
void bias_grad(int rows, int cols, const T* dY, int ldy, T* db) {
    std::vector<double> sum(static_cast<size_t>(cols), 0.0);
    for (int r = 0; r < rows; ++r) {
        const T* row = dY + static_cast<size_t>(r) * ldy;
        for (int c = 0; c < cols; ++c) sum[c] += static_cast<double>(row[c]);
    }
    for (int c = 0; c < cols; ++c) db[c] = static_cast<T>(sum[c]);
}

template <typename T>
void sgd_momentum_step(size_t n, T* param, const T* grad, T* velocity, double lr, double momentum,
                       double weight_decay) {
    for (size_t i = 0; i < n; ++i) {
        const double p = param[i];
        const double g = static_cast<double>(grad[i]) + weight_decay * p;
        const double v = momentum * static_cast<double>(velocity[i]) + g;
        velocity[i] = static_cast<T>(v);
        param[i] = static_cast<T>(p - lr * v);
    }
}

template <typename T>
void adamw_step(size_t n, T* param, const T* grad, T* m, T* v, double lr, double beta1, double beta2, double eps,
                double weight_decay, int t) {
    if (t < 1) throw std::invalid_argument("reference::adamw_step: step t starts at 1");
    const double bias_correction1 = 1.0 - std::pow(beta1, t);
    const double bias_correction2 = 1.0 - std::pow(beta2, t);
    for (size_t i = 0; i < n; ++i) {
        const double g = grad[i];
        const double mi = beta1 * static_cast<double>(m[i]) + (1.0 - beta1) * g;
        const double vi = beta2 * static_cast<double>(v[i]) + (1.0 - beta2) * g * g;
        m[i] = static_cast<T>(mi);
        v[i] = static_cast<T>(vi);
        double p = static_cast<double>(param[i]);
        p -= lr * weight_decay * p;
        p -= lr * (mi / bias_correction1) / (std::sqrt(vi / bias_correction2) + eps);
        param[i] = static_cast<T>(p);
    }
}

template <typename T>
void argmax_rows(int rows, int cols, const T* logits, int ld, int32_t* predictions) {
    for (int r = 0; r < rows; ++r) {
        const T* z = logits + static_cast<size_t>(r) * ld;
        int best = 0;
        for (int c = 1; c < cols; ++c) {
            if (z[c] > z[best]) best = c;  // strict: ties keep the lowest index
        }
        predictions[r] = best;
    }
}

template <typename T, typename Label>
int count_correct(int rows, int cols, const T* logits, int ld, const Label* labels) {
    std::vector<int32_t> predictions(static_cast<size_t>(std::max(rows, 0)));
    argmax_rows(rows, cols, logits, ld, predictions.data());
    int correct = 0;
    for (int r = 0; r < rows; ++r) correct += predictions[r] == static_cast<int32_t>(labels[r]) ? 1 : 0;
    return correct;
}

template <typename T>
void normalize_pixels(size_t n, const uint8_t* pixels, T* out, double mean, double std) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>((pixels[i] / 255.0 - mean) / std);
}

// Explicit instantiations: the element types tests, the reference trainer and the gradient check use.
template void gemm<float, double>(bool, bool, int, int, int, double, const float*, int, const float*, int, double,
                                  double*, int);
template void gemm<float, float>(bool, bool, int, int, int, double, const float*, int, const float*, int, double,
                                 float*, int);
template void gemm<double, double>(bool, bool, int, int, int, double, const double*, int, const double*, int, double,
                                   double*, int);

#define REFERENCE_INSTANTIATE_FOR(T)                                                                        \
    template void bias_add<T>(int, int, const T*, T*, int);                                                 \
    template void relu_forward<T>(size_t, const T*, T*);                                                    \
    template void relu_backward<T>(size_t, const T*, const T*, T*);                                         \
    template double softmax_cross_entropy<T, uint8_t>(int, int, const T*, int, const uint8_t*, T*);         \
    template double softmax_cross_entropy<T, int32_t>(int, int, const T*, int, const int32_t*, T*);         \
    template void bias_grad<T>(int, int, const T*, int, T*);                                                \
    template void sgd_momentum_step<T>(size_t, T*, const T*, T*, double, double, double);                   \
    template void adamw_step<T>(size_t, T*, const T*, T*, T*, double, double, double, double, double, int); \
    template void argmax_rows<T>(int, int, const T*, int, int32_t*);                                        \
    template int count_correct<T, uint8_t>(int, int, const T*, int, const uint8_t*);                        \
    template int count_correct<T, int32_t>(int, int, const T*, int, const int32_t*);                        \
    template void normalize_pixels<T>(size_t, const uint8_t*, T*, double, double);

REFERENCE_INSTANTIATE_FOR(float)
REFERENCE_INSTANTIATE_FOR(double)
#undef REFERENCE_INSTANTIATE_FOR

}  // namespace reference
