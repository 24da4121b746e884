// Plain CUDA, as the cooperative-groups samples write it: a grid-wide barrier (cg::this_grid().sync()) in kernels
// launched with cudaLaunchCooperativeKernel, the kernel passed as (void *) and its arguments as an array of addresses.
// The grid is sized by occupancy so that every block is resident at once, as a cooperative launch requires:
//   * a one-pass sum: each block writes its partial sum, the grid waits, block 0 adds the partials;
//   * a 1-D stencil iterated 7 times in place of 7 launches (a grid.sync() between steps, cg::sync(grid) too);
//   * a grid one block too large is refused with cudaErrorCooperativeLaunchTooLarge, and nothing runs;
//   * cudaLaunchKernel with an argument array (no barrier).
// With an argument it runs one must-fail case instead (tests/nvcc_cpu_test.sh).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t e = (call);                                                        \
        if (e != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static int failures = 0;
static void expect(bool ok, const char* what) {
    printf("%s: %s\n", ok ? "ok   " : "WRONG", what);
    failures += !ok;
}

// partials[blockIdx.x] = this block's grid-stride sum; after the grid barrier block 0 adds them into *total.
__global__ void sum_one_pass(const float* in, float* partials, float* total, int n) {
    extern __shared__ float block_sums[];
    cg::grid_group grid = cg::this_grid();
    cg::thread_block block = cg::this_thread_block();
    float sum = 0.0f;
    for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size()) sum += in[i];
    block_sums[threadIdx.x] = sum;
    block.sync();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) block_sums[threadIdx.x] += block_sums[threadIdx.x + stride];
        block.sync();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = block_sums[0];
    grid.sync();  // every block's partial is written
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float t = 0.0f;
        for (unsigned b = 0; b < gridDim.x; ++b) t += partials[b];
        *total = t;
    }
}

// x ← (x[i-1] + x[i] + x[i+1]) / 3 (ends fixed), `steps` times; a and b swap roles each step.
__global__ void smooth_steps(float* a, float* b, int n, int steps, int* valid) {
    cg::grid_group grid = cg::this_grid();
    if (grid.thread_rank() == 0) *valid = grid.is_valid() && grid.num_blocks() == gridDim.x;
    for (int s = 0; s < steps; ++s) {
        const float* from = s % 2 == 0 ? a : b;
        float* to = s % 2 == 0 ? b : a;
        for (int i = grid.thread_rank(); i < n; i += grid.size())
            to[i] = i == 0 || i == n - 1 ? from[i] : (from[i - 1] + from[i] + from[i + 1]) / 3.0f;
        if (s % 2 == 0)
            grid.sync();  // the next step reads its neighbours' results
        else
            cg::sync(grid);
    }
}

__global__ void scale(float* x, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}

// Must fail: block 1 returns before the barrier that block 0 waits at (a GPU hangs).
__global__ void block_skips_grid_sync(int* flag) {
    if (blockIdx.x == 1) return;
    cg::this_grid().sync();
    *flag = 1;
}

int main(int argc, char** argv) {
    int device = 0, cooperative = 0;
    CHECK(cudaGetDevice(&device));
    CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, device));
    if (!cooperative || !prop.cooperativeLaunch) {
        printf("the device does not support cooperative launches\n");
        return 1;
    }
    const int threads = 128;
    const size_t shared_bytes = threads * sizeof(float);
    int blocks_per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, sum_one_pass, threads, shared_bytes));
    const int resident_blocks = blocks_per_sm * prop.multiProcessorCount;
    printf("%d SMs x %d blocks of %d threads resident at once\n", prop.multiProcessorCount, blocks_per_sm, threads);

    if (argc > 1) {  // must-fail cases
        int* d_flag;
        CHECK(cudaMalloc(&d_flag, sizeof(int)));
        void* args[] = {&d_flag};
        if (!strcmp(argv[1], "block-skips-grid-sync"))
            CHECK(cudaLaunchCooperativeKernel((void*)block_skips_grid_sync, 2, 32, args, 0, NULL));
        CHECK(cudaDeviceSynchronize());
        printf("the must-fail case '%s' did not fail\n", argv[1]);
        return 1;
    }

    const int n = 100003;  // a prime: the grid-stride loops end mid-block
    std::vector<float> x(n);
    for (int i = 0; i < n; ++i) x[i] = (float)((i * 7919) % 1000) / 250.0f - 2.0f;
    float *d_in, *d_partials, *d_total, *d_other;
    int* d_valid;
    CHECK(cudaMalloc(&d_in, n * sizeof(float)));
    CHECK(cudaMalloc(&d_other, n * sizeof(float)));
    CHECK(cudaMalloc(&d_partials, resident_blocks * sizeof(float)));
    CHECK(cudaMalloc(&d_total, sizeof(float)));
    CHECK(cudaMalloc(&d_valid, sizeof(int)));
    CHECK(cudaMemcpy(d_in, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    // 1. The one-pass sum, with every block resident.
    const float poison = -12345.0f;
    CHECK(cudaMemcpy(d_total, &poison, sizeof(float), cudaMemcpyHostToDevice));
    int count = n;
    void* sum_args[] = {(void*)&d_in, (void*)&d_partials, (void*)&d_total, (void*)&count};
    CHECK(cudaLaunchCooperativeKernel((void*)sum_one_pass, dim3(resident_blocks), dim3(threads), sum_args, shared_bytes,
                                      NULL));
    float total = 0.0f;
    CHECK(cudaMemcpy(&total, d_total, sizeof(float), cudaMemcpyDeviceToHost));
    double expected = 0.0;
    for (float v : x) expected += v;
    expect(fabs(total - expected) <= 2e-6 * n,  // float sums in another order: n·ε·max|x|
           "one-pass sum with a grid barrier");

    // 2. One block more than fits: refused, nothing runs, and the error is also the last error.
    CHECK(cudaMemcpy(d_total, &poison, sizeof(float), cudaMemcpyHostToDevice));
    const cudaError_t too_large = cudaLaunchCooperativeKernel((void*)sum_one_pass, dim3(resident_blocks + 1),
                                                              dim3(threads), sum_args, shared_bytes, NULL);
    expect(too_large == cudaErrorCooperativeLaunchTooLarge, "a grid larger than the device holds is refused");
    expect(cudaGetLastError() == cudaErrorCooperativeLaunchTooLarge, "... and reported by cudaGetLastError");
    CHECK(cudaMemcpy(&total, d_total, sizeof(float), cudaMemcpyDeviceToHost));
    expect(total == poison, "... and the refused kernel did not run");

    // 3. Seven stencil steps in one launch (the kernel passed without a cast this time).
    const int steps = 7, stencil_blocks = resident_blocks < 3 ? resident_blocks : 3;
    void* smooth_args[] = {&d_in, &d_other, &count, (void*)&steps, &d_valid};
    CHECK(cudaLaunchCooperativeKernel(smooth_steps, stencil_blocks, threads, smooth_args));
    std::vector<float> got(n), a = x, b(n);
    CHECK(cudaMemcpy(got.data(), d_other, n * sizeof(float), cudaMemcpyDeviceToHost));  // the last step wrote b
    for (int s = 0; s < steps; ++s) {
        std::vector<float>& from = s % 2 == 0 ? a : b;
        std::vector<float>& to = s % 2 == 0 ? b : a;
        for (int i = 0; i < n; ++i)
            to[i] = i == 0 || i == n - 1 ? from[i] : (from[i - 1] + from[i] + from[i + 1]) / 3.0f;
    }
    int mismatches = 0;
    for (int i = 0; i < n; ++i) mismatches += got[i] != b[i];
    expect(mismatches == 0, "seven stencil steps, a grid barrier between each, match the CPU bit for bit");
    int valid = 0;
    CHECK(cudaMemcpy(&valid, d_valid, sizeof(int), cudaMemcpyDeviceToHost));
    expect(valid == 1, "grid.is_valid() in a cooperative launch");

    // 4. cudaLaunchKernel with an argument array.
    float factor = 0.5f;
    void* scale_args[] = {&d_other, &factor, &count};
    CHECK(cudaLaunchKernel((const void*)scale, dim3((n + 255) / 256), dim3(256), scale_args, 0, NULL));
    CHECK(cudaMemcpy(got.data(), d_other, n * sizeof(float), cudaMemcpyDeviceToHost));
    mismatches = 0;
    for (int i = 0; i < n; ++i) mismatches += got[i] != b[i] * 0.5f;
    expect(mismatches == 0, "cudaLaunchKernel with an argument array");

    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_other));
    CHECK(cudaFree(d_partials));
    CHECK(cudaFree(d_total));
    CHECK(cudaFree(d_valid));
    printf(failures == 0 ? "PASSED\n" : "FAILED\n");
    return failures == 0 ? 0 : 1;
}
