// kernels/bias_grad.cuh — the bias gradient: column sums of the output gradient over the batch.
//
// computes: db[c] = Σ_r dY[r][c] + beta·db[c]   (rows × cols, leading dimension ldy; db not read when beta == 0)
//           The bias is added to every row in the forward pass, so its gradient collects every row's gradient.
// versions (one): a block of 32 × 32 threads owns 32 columns. Thread (x, y) sums rows y, y+32, y+64, ... of
//   column x — consecutive x read consecutive addresses, so each row's 32 floats are one coalesced load. The 32
//   partial sums per column go through shared memory, transposed, so that warp y holds column y's partials in its
//   32 lanes, and a shuffle reduction (kernels/warp_reduce.cuh) finishes them. No atomics: every sum is taken in a
//   fixed order, so the result is bitwise reproducible.
// limits: only ceil(cols / 32) blocks, each walking every row: 1 block for the 10-wide output layer, 32 for a
//   1024-wide layer — far fewer than a GPU's SMs, so this kernel does not reach copy bandwidth on tall inputs.
//   (The fix would be a deterministic two-pass reduction: partial column sums over row chunks into a workspace,
//   then a second small reduction; see kernels/README.md.)
// launch: block (32, 32); grid ceil(cols / 32).
#pragma once

#include <stdexcept>

#include "common/launch.h"
#include "kernels/warp_reduce.cuh"

static __global__ void bias_grad_kernel(int rows, int cols, const float* dY, int ldy, float beta, float* db) {
    __shared__ float partial[32][33];  // +1 column: the transposed read below would otherwise be a 32-way conflict
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col0 = blockIdx.x * 32;

    float sum = 0.0f;
    if (col0 + tx < cols) {
        for (int r = ty; r < rows; r += 32) sum += dY[static_cast<size_t>(r) * ldy + col0 + tx];
    }
    partial[ty][tx] = sum;
    __syncthreads();

    // Warp ty (its lanes are tx = 0..31) now reduces column ty's 32 partial sums.
    const float total = group_sum(partial[tx][ty], 32);
    const int col = col0 + ty;
    if (tx == 0 && col < cols) db[col] = beta == 0.0f ? total : total + beta * db[col];
}

inline void bias_grad(const float* dY, float* db, int rows, int cols, int ldy, float beta = 0.0f,
                      cudaStream_t stream = 0) {
    if (rows < 0 || cols < 0 || ldy < cols) throw std::invalid_argument("bias_grad: bad sizes or ldy < cols");
    if (cols == 0) return;
    launch(bias_grad_kernel, dim3(ceil_div(cols, 32)), dim3(32, 32), 0, stream, rows, cols, dY, ldy, beta, db);
}
