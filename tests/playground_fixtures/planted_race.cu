// tests/playground_fixtures/planted_race.cu — a planted bug for CI's check of `make check-playground`: a histogram
// counted with `+=` instead of atomicAdd, a data race between the threads of a block (and between blocks). The race
// tree (ThreadSanitizer) must report it; the sanitizer tree finds nothing (it is not a memory error), and the counts
// may even come out right, as the README says. (Not in playground/, so that `make playground` does not build it.)
#include <cstdio>
#include <vector>

#include "common/launch.h"

constexpr int kBins = 16;

__global__ void histogram(const int* values, int n, int* bins) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) bins[values[i] % kBins] += 1;  // the bug: a read-modify-write that other threads do at once
}

int main() {
    const int n = 4096;
    std::vector<int> values(n);
    for (int i = 0; i < n; ++i) values[i] = i * 7;
    int *d_values = nullptr, *d_bins = nullptr;
    CUDA_CHECK(cudaMalloc(&d_values, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_bins, kBins * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_values, values.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_bins, 0, kBins * sizeof(int)));
    histogram<<<cuda_teach::ceil_div(n, 256), 256, 0, 0>>>(d_values, n, d_bins);
    CUDA_CHECK(cudaGetLastError());
    std::vector<int> bins(kBins);
    CUDA_CHECK(cudaMemcpy(bins.data(), d_bins, kBins * sizeof(int), cudaMemcpyDeviceToHost));
    int total = 0;
    for (int b : bins) total += b;
    std::printf("planted_race: %d of %d values counted\n", total, n);
    CUDA_CHECK(cudaFree(d_values));
    CUDA_CHECK(cudaFree(d_bins));
    return 0;
}
