// A 64-thread tile (tiled_partition<64>, with block_tile_memory as the samples' reduction declares it), which the CPU
// backend does not have: tools/nvcc-cpu must refuse it with one line naming the feature (tests/nvcc_cpu_test.sh).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>
#include <cstdio>

namespace cg = cooperative_groups;

__global__ void sum_per_64(const float* in, float* out) {
    __shared__ cg::block_tile_memory<128> scratch;
    cg::thread_block block = cg::this_thread_block(scratch);
    cg::thread_block_tile<64> tile = cg::tiled_partition<64>(block);
    const float sum = cg::reduce(tile, in[block.thread_rank()], cg::plus<float>());
    if (tile.thread_rank() == 0) out[tile.meta_group_rank()] = sum;
}

int main() {
    float *in, *out;
    cudaMalloc(&in, 128 * sizeof(float));
    cudaMalloc(&out, 2 * sizeof(float));
    sum_per_64<<<1, 128>>>(in, out);
    std::printf("PASSED\n");
    return 0;
}
