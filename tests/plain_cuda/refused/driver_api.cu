// Uses the CUDA driver API (cuInit, cuDeviceGet, cuCtxCreate), which the CPU backend does not have:
// tools/nvcc-cpu must refuse it with one line naming the driver API (tests/nvcc_cpu_test.sh), not the linker's errors.
#include <cuda.h>
#include <cstdio>

__global__ void scale(float* x, float a) {
    x[threadIdx.x] *= a;
}

int main() {
    CUdevice device;
    CUcontext context;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS) return 1;
    if (cuCtxCreate(&context, nullptr, 0, device) != CUDA_SUCCESS) return 1;
    float* x;
    cudaMalloc(&x, 32 * sizeof(float));
    scale<<<1, 32>>>(x, 2.0f);
    cudaFree(x);
    std::printf("PASSED\n");
    return 0;
}
