// Reads through a texture object (tex2D, cudaCreateTextureObject), which the CPU backend does not have:
// tools/nvcc-cpu must refuse it with one line naming textures (tests/nvcc_cpu_test.sh), not g++'s errors.
#include <cuda_runtime.h>
#include <cstdio>

__global__ void copy_from_texture(float* out, cudaTextureObject_t texture, int width) {
    const int x = threadIdx.x, y = blockIdx.x;
    out[y * width + x] = tex2D<float>(texture, x + 0.5f, y + 0.5f);
}

int main() {
    const int width = 32, height = 4;
    cudaChannelFormatDesc format = cudaCreateChannelDesc<float>();
    cudaArray_t array;
    cudaMallocArray(&array, &format, width, height);
    cudaResourceDesc resource = {};
    resource.resType = cudaResourceTypeArray;
    resource.res.array.array = array;
    cudaTextureDesc description = {};
    description.filterMode = cudaFilterModePoint;
    cudaTextureObject_t texture;
    cudaCreateTextureObject(&texture, &resource, &description, nullptr);
    float* out;
    cudaMalloc(&out, width * height * sizeof(float));
    copy_from_texture<<<height, width>>>(out, texture, width);
    std::printf("PASSED\n");
    return 0;
}
