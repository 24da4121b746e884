// Plain CUDA, as a kernel-exercise repository writes it: three versions of a sum reduction (shared memory with
// extern __shared__, warp shuffles, cooperative groups), a CPU reference, and a main that validates each version.
// tests/nvcc_cpu_test.sh compiles it with tools/nvcc-cpu, unmodified, and runs it.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

#define cudaCheck(call)                                                                              \
    do {                                                                                             \
        cudaError_t err = (call);                                                                    \
        if (err != cudaSuccess) {                                                                    \
            printf("[CUDA ERROR] at file %s:%d:\n%s\n", __FILE__, __LINE__, cudaGetErrorString(err)); \
            exit(EXIT_FAILURE);                                                                      \
        }                                                                                            \
    } while (0)

int ceil_div(int a, int b) { return (a + b - 1) / b; }  // user code defines its own: no clash

// version 1: a tree in dynamic shared memory
__global__ void sum_kernel1(const float* in, float* block_sums, int n) {
    extern __shared__ float shared[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    shared[threadIdx.x] = i < n ? __ldcs(in + i) : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) __stcs(block_sums + blockIdx.x, shared[0]);
}

// version 2: warp shuffles, one atomicAdd per warp
__global__ void sum_kernel2(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    if (threadIdx.x % 32 == 0) atomicAdd(out, v);
}

// version 3: cooperative groups, the warp's sum by cg::reduce, then a second cg::reduce over the warps' sums
template <int BLOCK>
__global__ void sum_kernel3(const float* in, float* out, int n) {
    __shared__ float warp_sums[BLOCK / 32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int i = blockIdx.x * BLOCK + block.thread_rank();
    float v = cg::reduce(warp, i < n ? in[i] : 0.0f, cg::plus<float>());
    if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = v;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        float w = warp.thread_rank() < warp.meta_group_size() ? warp_sums[warp.thread_rank()] : 0.0f;
        w = cg::reduce(warp, w, [](float a, float b) { return a + b; });
        if (warp.thread_rank() == 0) atomicAdd(out, w);
    }
}

// the maximum, by cg::greater on tiles of 8 (meta_group_rank names the tile within the block)
__global__ void max_kernel(const float* in, float* tile_max, int n) {
    auto tile = cg::tiled_partition<8>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float m = cg::reduce(tile, i < n ? in[i] : -INFINITY, cg::greater<float>());
    if (tile.thread_rank() == 0) tile_max[blockIdx.x * tile.meta_group_size() + tile.meta_group_rank()] = m;
}

// a host launcher with the kernel's name, as tutorials write them
void sum_kernel1(const float* d_in, float* d_block_sums, int n, int block_size) {
    sum_kernel1<<<ceil_div(n, block_size), block_size, block_size * sizeof(float)>>>(d_in, d_block_sums, n);
    cudaCheck(cudaGetLastError());
}

int main() {
    const int n = 100003;  // a prime: a partial last block
    std::vector<float> h(n);
    srand(7);
    for (float& x : h) x = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    double reference = 0.0;
    float reference_max = -INFINITY;
    for (float x : h) {
        reference += x;
        reference_max = fmaxf(reference_max, x);
    }

    float *d_in, *d_out, *d_partial;
    cudaCheck(cudaMalloc(&d_in, n * sizeof(float)));
    cudaCheck(cudaMalloc(&d_out, sizeof(float)));
    cudaCheck(cudaMalloc(&d_partial, ceil_div(n, 128) * 16 * sizeof(float)));
    cudaCheck(cudaMemcpy(d_in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    int failures = 0;
    auto check = [&](const char* name, double got, double want, double tolerance) {
        bool ok = std::fabs(got - want) <= tolerance;
        printf("%-12s %s: got %.6f, expected %.6f\n", name, ok ? "ok" : "WRONG", got, want);
        failures += !ok;
    };

    for (int block_size : {64, 128, 256, 512}) {
        sum_kernel1(d_in, d_partial, n, block_size);
        std::vector<float> sums(ceil_div(n, block_size));
        cudaCheck(cudaMemcpy(sums.data(), d_partial, sums.size() * sizeof(float), cudaMemcpyDeviceToHost));
        double total = 0;
        for (float s : sums) total += s;
        check("version 1", total, reference, 1e-2);
    }

    cudaCheck(cudaMemset(d_out, 0, sizeof(float)));
    sum_kernel2<<<ceil_div(n, 256), 256>>>(d_in, d_out, n);
    cudaCheck(cudaGetLastError());
    float got;
    cudaCheck(cudaMemcpy(&got, d_out, sizeof(float), cudaMemcpyDeviceToHost));
    check("version 2", got, reference, 1e-2);

    cudaCheck(cudaMemset(d_out, 0, sizeof(float)));
    sum_kernel3<256><<<ceil_div(n, 256), 256>>>(
        d_in,  // a launch may span lines,
        d_out, /* and hold comments with <<< in them */
        n);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaMemcpy(&got, d_out, sizeof(float), cudaMemcpyDeviceToHost));
    check("version 3", got, reference, 1e-2);

    max_kernel<<<ceil_div(n, 128), 128>>>(d_in, d_partial, n);
    cudaCheck(cudaGetLastError());
    std::vector<float> maxima(ceil_div(n, 128) * 16);
    cudaCheck(cudaMemcpy(maxima.data(), d_partial, maxima.size() * sizeof(float), cudaMemcpyDeviceToHost));
    float m = -INFINITY;
    for (float x : maxima) m = fmaxf(m, x);
    check("max", m, reference_max, 0.0);

    cudaCheck(cudaFree(d_in));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_partial));
    printf(failures ? "FAILED\n" : "PASSED\n");
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
