// playground/vector_add.cu — your first kernel: c[i] = a[i] + b[i], checked against the CPU.
//
// Every .cu file in playground/ builds as an executable named after it, in both flavors:
//   make playground && build/cpu/playground/vector_add      (CPU backend, any machine)
//                      build/cuda/playground/vector_add     (NVIDIA GPU)
// Copy this file to playground/my_kernel.cu and change it: that is all it takes.
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/launch.h"  // the CUDA runtime API (real or CPU backend) and CUDA_CHECK

// One thread per element. The grid is rounded up to whole blocks, so the last block has threads past the end:
// the `if` keeps them from writing out of bounds.
__global__ void vector_add(const float* a, const float* b, float* c, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    const int n = 1'000'003;  // not a multiple of the block size, on purpose
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; ++i) {
        a[i] = 0.5f * i;
        b[i] = 1.0f - i;
    }

    float *d_a, *d_b, *d_c;
    CUDA_CHECK(cudaMalloc(&d_a, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_b, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_c, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_a, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_b, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    const int threads_per_block = 256;
    const int blocks = cuda_teach::ceil_div(n, threads_per_block);
    vector_add<<<blocks, threads_per_block, 0, 0>>>(d_a, d_b, d_c, n);
    CUDA_CHECK(cudaGetLastError());

    CUDA_CHECK(cudaMemcpy(c.data(), d_c, n * sizeof(float), cudaMemcpyDeviceToHost));  // waits for the kernel
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += c[i] != a[i] + b[i];
    std::printf("vector_add on %s: %d elements, %d wrong\n", BACKEND_NAME, n, wrong);

    CUDA_CHECK(cudaFree(d_a));
    CUDA_CHECK(cudaFree(d_b));
    CUDA_CHECK(cudaFree(d_c));
    return wrong == 0 ? 0 : 1;
}
