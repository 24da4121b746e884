// tests/playground_fixtures/planted_overflow.cu — a planted bug for CI's check of `make check-playground`: the
// off-by-one bounds check of a learner's first kernel. Every tree must stop at the write: AddressSanitizer in the
// sanitizer tree, the guard page after the buffer in the race tree and the default cpu build.
// (Not in playground/, so that `make playground` does not build it.)
#include <cstdio>

#include "common/launch.h"

__global__ void scale(float* data, int n, float factor) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) data[i] *= factor;  // the bug: `<=` lets thread n touch data[n], one past the end
}

int main() {
    const int n = 1024;  // 4 KiB: a multiple of 256 bytes, so data[n] is the first byte of the guard page
    float* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(d, 0, n * sizeof(float)));
    scale<<<cuda_teach::ceil_div(n + 1, 256), 256, 0, 0>>>(d, n, 2.0f);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(d));
    std::printf("planted_overflow: finished (the out-of-bounds write went unnoticed)\n");
    return 0;
}
