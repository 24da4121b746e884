// kernels/bias_grad.cuh — the bias gradient: column sums of the output gradient over the batch.
//
// computes: db[c] = Σ_r dY[r][c] + beta·db[c]   (rows × cols, leading dimension ldy; db not read when beta == 0)
//           The bias is added to every row in the forward pass, so its gradient collects every row's gradient.
//           dY and db are each float or __half (lesson 05: fp16 activation gradients, fp32 or fp16 db): the values
//           are converted to fp32 on load, summed in fp32 in the same fixed order whatever the types, and the
//           result (with beta·db) is rounded once into db. The two-pass workspace is fp32 either way.
// reference: reference::bias_grad(rows, cols, dY, ldy, db) in common/reference_ops.h (the same order; no beta).
// versions (both without atomics: every sum is taken in a fixed order, so results are bitwise reproducible):
//   bias_grad (one pass, the simple kernel of lessons 01–03): a block of 32 × 32 threads owns 32 columns. Thread
//     (x, y) sums rows y, y+32, y+64, ... of column x — consecutive x read consecutive addresses, so each row's 32
//     floats are one coalesced load. The 32 partial sums per column go through shared memory, transposed, so that
//     warp y holds column y's partials in its 32 lanes, and a shuffle reduction (kernels/warp_reduce.cuh) finishes
//     them. Limit: only ceil(cols / 32) blocks, each walking every row — 1 block for the 10-wide output layer, 32
//     for a 1024-wide layer, far fewer than a GPU's SMs: it cannot reach copy bandwidth on tall inputs.
//     launch: block (32, 32); grid ceil(cols / 32).
//   bias_grad_two_pass (scales with rows): pass 1 cuts the rows into chunks of 256 and gives every (32 columns,
//     chunk) pair its own block — grid (ceil(cols / 32), ceil(rows / 256)), 32 × 235 blocks for 60000 × 1024
//     instead of 32 — whose 32 × 8 threads each sum 32 rows of one column (loaded together), then add the 8 sums
//     per column in order and write one partial sum per column into a caller-owned workspace: a chunks × cols
//     matrix. Pass 2 is the one-pass kernel itself, run on that matrix: it adds each column's chunk partials in a
//     fixed order (and beta·db). The workspace, bias_grad_workspace_floats(rows, cols) = ceil(rows / 256) · cols
//     floats, is allocated once by the caller (no allocation per step); pass 2 reads 1/256 of what pass 1 reads.
//     launch: pass 1 block (32, 8), grid (ceil(cols / 32), ceil(rows / 256)); pass 2 as the one-pass kernel.
#pragma once

#include <cstddef>
#include <cstdio>
#include <stdexcept>

#include "common/launch.h"
#include "kernels/dtype.cuh"  // as_float, float_to, kIsFloatOrHalf
#include "kernels/warp_reduce.cuh"

// db[c] = Σ_r dY[r][c] (+ beta·db[c]) for r < rows: one block per 32 columns. TY, TB: float or __half.
template <typename TY, typename TB>
__global__ void bias_grad_kernel(int rows, int cols, const TY* dY, int ldy, float beta, TB* db) {
    __shared__ float partial[32][33];  // +1 column: the transposed read below would otherwise be a 32-way conflict
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col0 = blockIdx.x * 32;

    float sum = 0.0f;
    if (col0 + tx < cols) {
        for (int r = ty; r < rows; r += 32) sum += as_float(dY[static_cast<size_t>(r) * ldy + col0 + tx]);
    }
    partial[ty][tx] = sum;
    __syncthreads();

    // Warp ty (its lanes are tx = 0..31) now reduces column ty's 32 partial sums.
    const float total = group_sum(partial[tx][ty], 32);
    const int col = col0 + ty;
    if (tx == 0 && col < cols) db[col] = float_to<TB>(beta == 0.0f ? total : total + beta * as_float(db[col]));
}

inline constexpr int kBiasGradChunkRows = 256;  // rows per pass-1 block: 32 per thread of a 32 × 8 block

// Pass 1: partials[chunk][c] = Σ dY[r][c] over the chunk's rows r = 256·chunk .. 256·chunk + 255 (and r < rows).
template <typename TY>
__global__ void bias_grad_partial_kernel(int rows, int cols, const TY* dY, int ldy, float* partials) {
    __shared__ float partial[8][32];  // partial[y][x]: thread (x, y)'s sum
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * 32 + tx, row0 = blockIdx.y * kBiasGradChunkRows;

    float sum = 0.0f;
    if (col < cols) {
        // Rows ty, ty+8, ..., ty+248 of the chunk. A fixed trip count, unrolled: the 32 loads are independent and
        // can all be in flight at once; the additions still happen in row order.
#pragma unroll
        for (int i = 0; i < kBiasGradChunkRows / 8; ++i) {
            const int r = row0 + 8 * i + ty;
            if (r < rows) sum += as_float(dY[static_cast<size_t>(r) * ldy + col]);  // a warp: 32 consecutive values
        }
    }
    partial[ty][tx] = sum;
    __syncthreads();

    // Warp 0 adds each column's 8 partial sums, y = 0..7 in order (consecutive lanes, consecutive words: no bank
    // conflict), and writes 32 consecutive partials: one coalesced store.
    if (ty == 0 && col < cols) {
        float total = 0.0f;
        for (int y = 0; y < 8; ++y) total += partial[y][tx];
        partials[static_cast<size_t>(blockIdx.y) * cols + col] = total;
    }
}

// The one-pass launcher: no workspace, one launch; fine for the batch sizes of lessons 01–03. TY, TB: float or
// __half.
template <typename TY, typename TB>
void bias_grad(const TY* dY, TB* db, int rows, int cols, int ldy, float beta = 0.0f, cudaStream_t stream = 0) {
    static_assert(kIsFloatOrHalf<TY> && kIsFloatOrHalf<TB>, "bias_grad: dY and db must be float or __half");
    if (rows < 0 || cols < 0 || ldy < cols) throw std::invalid_argument("bias_grad: bad sizes or ldy < cols");
    if (cols == 0) return;
    bias_grad_kernel<TY, TB>
        <<<dim3(cuda_teach::ceil_div(cols, 32)), dim3(32, 32), 0, stream>>>(rows, cols, dY, ldy, beta, db);
    CUDA_CHECK(cudaGetLastError());
}

// Row chunks of pass 1: ceil(rows / 256), written so that rows near INT_MAX cannot overflow.
inline int bias_grad_chunks(int rows) {
    return rows / kBiasGradChunkRows + (rows % kBiasGradChunkRows != 0 ? 1 : 0);
}

// Floats of workspace bias_grad_two_pass needs for a rows × cols input: one partial sum per column per chunk.
inline size_t bias_grad_workspace_floats(int rows, int cols) {
    if (rows <= 0 || cols <= 0) return 0;
    return static_cast<size_t>(bias_grad_chunks(rows)) * static_cast<size_t>(cols);
}

// The two-pass launcher: same result contract as bias_grad (bitwise reproducible, though not the same bits as the
// one-pass kernel: the additions are grouped differently). `workspace` holds at least workspace_floats floats of
// device memory, and workspace_floats ≥ bias_grad_workspace_floats(rows, cols); its contents need no initializing.
// TY, TB: float or __half; the workspace is float for every type (the partial sums stay fp32).
template <typename TY, typename TB>
void bias_grad_two_pass(const TY* dY, TB* db, int rows, int cols, int ldy, float beta, float* workspace,
                        size_t workspace_floats, cudaStream_t stream = 0) {
    static_assert(kIsFloatOrHalf<TY> && kIsFloatOrHalf<TB>, "bias_grad_two_pass: dY and db must be float or __half");
    if (rows < 0 || cols < 0 || ldy < cols) throw std::invalid_argument("bias_grad_two_pass: bad sizes or ldy < cols");
    const size_t needed = bias_grad_workspace_floats(rows, cols);
    if (workspace_floats < needed || (needed > 0 && workspace == nullptr)) {
        char text[200];  // built only on this error path: a normal call allocates nothing on the host
        std::snprintf(text, sizeof text,
                      "bias_grad_two_pass: the workspace holds %zu floats%s, but %d x %d needs %zu "
                      "(bias_grad_workspace_floats)",
                      workspace_floats, workspace == nullptr ? " (null)" : "", rows, cols, needed);
        throw std::invalid_argument(text);
    }
    if (cols == 0) return;
    const int chunks = bias_grad_chunks(rows);
    if (chunks > 65535) {  // grid.y's limit
        throw std::invalid_argument("bias_grad_two_pass: more than 65535 * 256 rows");
    }
    if (chunks > 0) {
        bias_grad_partial_kernel<TY>
            <<<dim3(cuda_teach::ceil_div(cols, 32), chunks), dim3(32, 8), 0, stream>>>(rows, cols, dY, ldy, workspace);
        CUDA_CHECK(cudaGetLastError());
    }
    // Pass 2: the one-pass kernel over the chunks × cols matrix of partials (0 rows when rows == 0: db = beta·db).
    bias_grad_kernel<float, TB><<<dim3(cuda_teach::ceil_div(cols, 32)), dim3(32, 32), 0, stream>>>(
        chunks, cols, static_cast<const float*>(workspace), cols, beta, db);
    CUDA_CHECK(cudaGetLastError());
}
