// tests/test_launch_syntax.cu — CUDA's launch syntax as written, in both flavors: <<<>>> inside a template and
// across lines (its kernel's type deduced from the arguments, which convert as a call converts them), extern
// __shared__, cooperative groups' tiles and cg::reduce, and a bad configuration reported by cudaGetLastError. On the
// cpu flavor this is what tools/cuda_cpu_translate.py must get right.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include <vector>

#include "tests/test_support.h"

namespace cg = cooperative_groups;

namespace {

template <typename T>
__global__ void scaled_copy(const T* in, T* out, T scale, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * scale;
}

// The launch is in a template, spans lines, and deduces T; `scale` arrives as a double and converts to T.
template <typename T>
void scaled_copy_launch(const T* in, T* out, double scale, int n, cudaStream_t stream) {
    scaled_copy<<<(n + 127) / 128, 128, 0,  // <<< in a comment: left alone
                  stream>>>(in, out, static_cast<T>(scale), n);
    CUDA_CHECK(cudaGetLastError());
}

// Each block reverses its slice through dynamic shared memory (a partial last block reverses what it has).
__global__ void reverse_in_block(const float* in, float* out, int n) {
    extern __shared__ float tile[];
    const int first = blockIdx.x * blockDim.x;
    const int count = min(int(blockDim.x), n - first);
    if (int(threadIdx.x) < count) tile[threadIdx.x] = in[first + threadIdx.x];
    __syncthreads();
    if (int(threadIdx.x) < count) out[first + threadIdx.x] = tile[count - 1 - threadIdx.x];
}

// Each tile of W threads writes its sum and its maximum (cg::reduce), from its first thread.
template <int W>
__global__ void tile_reduce(const float* in, float* sums, float* maxima) {
    const cg::thread_block block = cg::this_thread_block();
    const cg::thread_block_tile<W> tile = cg::tiled_partition<W>(block);
    const float v = in[blockIdx.x * blockDim.x + block.thread_rank()];
    const float sum = cg::reduce(tile, v, cg::plus<float>());
    const float largest = cg::reduce(tile, v, cg::greater<float>());
    const int slot = blockIdx.x * tile.meta_group_size() + tile.meta_group_rank();
    if (tile.thread_rank() == 0) {
        sums[slot] = sum;
        maxima[slot] = largest;
    }
}

template <int W>
void check_tile_reduce(const std::vector<float>& host, int blocks, int threads) {
    DeviceBuffer<float> in(host), sums(host.size() / W), maxima(host.size() / W);
    tile_reduce<W><<<blocks, threads>>>(in.get(), sums.get(), maxima.get());
    CUDA_CHECK(cudaGetLastError());
    const std::vector<float> got_sums = sums.download(), got_maxima = maxima.download();
    for (size_t t = 0; t < host.size() / W; ++t) {
        double sum = 0;
        float largest = host[t * W];
        for (int k = 0; k < W; ++k) {
            sum += host[t * W + k];
            largest = std::max(largest, host[t * W + k]);
        }
        INFO("width " << W << ", tile " << t);
        REQUIRE(test_support::close_enough(got_sums[t], sum, 1e-5, 1e-5));
        REQUIRE(got_maxima[t] == largest);
    }
}

}  // namespace

TEST_CASE("a <<<>>> launch in a template deduces the kernel's type and converts its arguments", "[launch]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (int n : {1, 10, 784, 1009}) {
        const std::vector<float> host = test_support::random_floats(rng, size_t(n));
        DeviceBuffer<float> in(host), out{size_t(n)};  // out: poisoned with NaN
        scaled_copy_launch(in.get(), out.get(), 0.5, n, nullptr);
        const std::vector<float> got = out.download();
        for (int i = 0; i < n; ++i) REQUIRE(got[i] == host[i] * 0.5f);
    }
}

TEST_CASE("extern __shared__ is the block's dynamic shared memory, sized at the launch", "[launch]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    for (int n : {1, 10, 257, 1009}) {
        const std::vector<float> host = test_support::random_floats(rng, size_t(n));
        DeviceBuffer<float> in(host), out{size_t(n)};
        const int threads = 128;
        reverse_in_block<<<(n + threads - 1) / threads, threads, threads * sizeof(float)>>>(in.get(), out.get(), n);
        CUDA_CHECK(cudaGetLastError());
        const std::vector<float> got = out.download();
        for (int first = 0; first < n; first += threads) {
            const int count = std::min(threads, n - first);
            for (int k = 0; k < count; ++k) REQUIRE(got[first + k] == host[first + count - 1 - k]);
        }
    }
}

TEST_CASE("cg::reduce over tiles of 1 to 32 threads gives each tile its sum and maximum", "[launch][cooperative]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const int blocks = 3, threads = 96;  // three warps a block
    const std::vector<float> host = test_support::random_floats(rng, size_t(blocks * threads));
    check_tile_reduce<1>(host, blocks, threads);
    check_tile_reduce<2>(host, blocks, threads);
    check_tile_reduce<4>(host, blocks, threads);
    check_tile_reduce<8>(host, blocks, threads);
    check_tile_reduce<16>(host, blocks, threads);
    check_tile_reduce<32>(host, blocks, threads);
}

TEST_CASE("a <<<>>> launch with a bad configuration sets the error cudaGetLastError returns once", "[launch]") {
    REQUIRE_DEVICE();
    DeviceBuffer<float> in(std::vector<float>(8, 1.0f)), out{size_t(8)};
    scaled_copy<<<1, 1025>>>(in.get(), out.get(), 2.0f, 8);  // more than 1024 threads a block
    REQUIRE(cudaGetLastError() == cudaErrorInvalidConfiguration);
    REQUIRE(cudaGetLastError() == cudaSuccess);  // read, and cleared
    scaled_copy<<<1, 8, 0, nullptr>>>(in.get(), out.get(), 2.0f, 8);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    REQUIRE(out.download() == std::vector<float>(8, 2.0f));
}
