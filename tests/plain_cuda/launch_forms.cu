// Plain CUDA: the forms a <<<>>> launch takes in tutorials, each checked against a CPU reference. A template kernel
// whose arguments deduce its type, explicit template arguments, a launch through a function pointer, NULL as a
// pointer argument, a stream, cache-hinted loads of float4, atomicInc's wrap-around, tile shuffles at every width,
// cudaMemcpy2D, and a full-mask shuffle reduction and ballot after a bounds-check return. With an argument it runs
// one must-fail case instead (tests/nvcc_cpu_test.sh).
#include <cooperative_groups.h>
#include <cooperative_groups/scan.h>
#include <cuda_runtime.h>

#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        cudaError_t e = (call);                                                                     \
        if (e != cudaSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));              \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

static int failures = 0;
static void expect(bool ok, const char* what) {
    printf("%s: %s\n", ok ? "ok   " : "WRONG", what);
    failures += !ok;
}

template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

template <typename T, int kScale>
__global__ void scale_by(T* y, const T* optional_bias, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * kScale + (optional_bias ? optional_bias[i] : T(0));
}

__global__ void copy4(const float4* in, float4* out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) __stcg(out + i, __ldcg(in + i));
}

__global__ void count_up(unsigned* counter, unsigned limit, unsigned* seen) {
    seen[blockIdx.x * blockDim.x + threadIdx.x] = atomicInc(counter, limit);
}

// Each tile of width W: lane 0's value broadcast, and the sum by shfl_down.
template <int W>
__global__ void tile_shuffles(const int* in, int* broadcast, int* sums) {
    cg::thread_block_tile<W> tile = cg::tiled_partition<W>(cg::this_thread_block());
    int v = in[threadIdx.x];
    broadcast[threadIdx.x] = tile.shfl(v, 0);
    for (int offset = W / 2; offset > 0; offset /= 2) v += tile.shfl_down(v, offset);
    if (tile.thread_rank() == 0) sums[tile.meta_group_rank()] = v;
}

// Prefix sums within tiles of 8: inclusive and exclusive.
__global__ void tile_prefix_sums(const int* in, int* inclusive, int* exclusive) {
    cg::thread_block_tile<8> tile = cg::tiled_partition<8>(cg::this_thread_block());
    int v = in[threadIdx.x];
    inclusive[threadIdx.x] = cg::inclusive_scan(tile, v);
    exclusive[threadIdx.x] = cg::exclusive_scan(tile, v, cg::plus<int>());
}

template <int W>
void check_tile_width(const int* d_in, int* d_broadcast, int* d_sums, const std::vector<int>& h) {
    tile_shuffles<W><<<1, 64>>>(d_in, d_broadcast, d_sums);
    CHECK(cudaGetLastError());
    std::vector<int> broadcast(64), sums(64 / W);
    CHECK(cudaMemcpy(broadcast.data(), d_broadcast, 64 * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(sums.data(), d_sums, sums.size() * sizeof(int), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int t = 0; t < 64; ++t) ok &= broadcast[t] == h[t / W * W];
    for (int g = 0; g < 64 / W; ++g) {
        int s = 0;
        for (int t = g * W; t < g * W + W; ++t) s += h[t];
        ok &= sums[g] == s;
    }
    char what[64];
    snprintf(what, sizeof what, "tile shuffles, width %d", W);
    expect(ok, what);
}

__constant__ float coefficients[3];  // c0 + c1 x + c2 x^2

__global__ void polynomial(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = coefficients[0] + x[i] * (coefficients[1] + x[i] * coefficients[2]);
}

__global__ void assert_positive(const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) assert(x[i] >= 0.0f);
}

// Legal CUDA: the full mask after a bounds-check return. Only the non-exited lanes named in the mask must arrive
// (PTX ISA, shfl.sync and vote.sync); a value shuffled from an exited lane is unpredictable, so it is not used.
__global__ void shuffle_after_exit(const float* in, float* sums, unsigned* ballots, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;  // lanes past n have exited...
    int lane = threadIdx.x % 32, live = n - (i - lane) < 32 ? n - (i - lane) : 32;
    float v = in[i];
    for (int offset = 16; offset > 0; offset /= 2) {
        float other = __shfl_down_sync(0xffffffff, v, offset);  // ...and the mask still names them
        if (lane + offset < live) v += other;
    }
    ballots[i] = __ballot_sync(0xffffffff, in[i] > 10.0f);
    if (lane == 0) sums[i / 32] = v;
}
__global__ void trap_in_block_3() {
    if (blockIdx.x == 3 && threadIdx.x == 5) __trap();
}
__global__ void grid_barrier(int* flag) {
    cg::this_grid().sync();
    *flag = 1;
}

int main(int argc, char** argv) {
    const int n = 1009;
    std::vector<float> x(n), y(n), bias(n);
    for (int i = 0; i < n; ++i) {
        x[i] = 0.5f * i;
        y[i] = 1.0f + (i % 7);
        bias[i] = -1.0f * (i % 3);
    }
    float *d_x, *d_y, *d_bias;
    CHECK(cudaMalloc(&d_x, n * sizeof(float)));
    CHECK(cudaMalloc(&d_y, n * sizeof(float)));
    CHECK(cudaMalloc(&d_bias, n * sizeof(float)));
    CHECK(cudaMemcpy(d_x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_bias, bias.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    if (argc > 1) {  // must-fail cases: each stops the program with a kernel fault
        if (!strcmp(argv[1], "trap")) trap_in_block_3<<<4, 32>>>();
        if (!strcmp(argv[1], "grid-sync")) grid_barrier<<<2, 32>>>((int*)d_y);
        if (!strcmp(argv[1], "assert")) assert_positive<<<(n + 127) / 128, 128>>>(d_bias, n);  // bias[1] < 0
        CHECK(cudaDeviceSynchronize());
        printf("no fault\n");
        return 0;
    }

    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaMemcpyAsync(d_y, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
    axpy<<<(n + 127) / 128, 128, 0, stream>>>(2.0f, d_x, d_y, n);  // T deduced as float
    CHECK(cudaGetLastError());
    scale_by<float, 3><<<(n + 255) / 256, 256, 0, stream>>>(d_y, NULL, n);  // NULL as the pointer argument
    CHECK(cudaGetLastError());
    void (*kernel)(float*, const float*, int) = scale_by<float, 1>;
    kernel<<<dim3((n + 63) / 64), dim3(64), 0, stream>>>(d_y, d_bias, n);  // through a function pointer
    CHECK(cudaGetLastError());
    std::vector<float> got(n);
    CHECK(cudaMemcpyAsync(got.data(), d_y, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    bool ok = true;
    for (int i = 0; i < n; ++i) ok &= got[i] == (2.0f * x[i] + y[i]) * 3 + bias[i];
    expect(ok, "axpy (deduced), scale_by<float, 3> (NULL argument), scale_by through a pointer, on a stream");

    const int n4 = n / 4;
    copy4<<<(n4 + 31) / 32, 32>>>(reinterpret_cast<const float4*>(d_x), reinterpret_cast<float4*>(d_y), n4);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), d_y, n4 * 4 * sizeof(float), cudaMemcpyDeviceToHost));
    ok = true;
    for (int i = 0; i < n4 * 4; ++i) ok &= got[i] == x[i];
    expect(ok, "__ldcg / __stcg of float4");

    unsigned *d_counter, *d_seen;
    CHECK(cudaMalloc(&d_counter, sizeof(unsigned)));
    CHECK(cudaMalloc(&d_seen, 64 * sizeof(unsigned)));
    CHECK(cudaMemset(d_counter, 0, sizeof(unsigned)));
    count_up<<<2, 32>>>(d_counter, 9, d_seen);  // counts 0..9, then wraps to 0
    CHECK(cudaGetLastError());
    std::vector<unsigned> seen(64);
    unsigned final_count;
    CHECK(cudaMemcpy(seen.data(), d_seen, 64 * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&final_count, d_counter, sizeof(unsigned), cudaMemcpyDeviceToHost));
    std::vector<int> histogram(10);
    ok = true;
    for (unsigned s : seen) ok &= s < 10 && ++histogram[s] > 0;
    for (int v = 0; v < 10; ++v) ok &= histogram[v] == (v < 4 ? 7 : 6);  // 64 increments of a counter mod 10
    expect(ok && final_count == 4, "atomicInc wraps at its limit");

    const int width = 5, height = 3, src_pitch = 8, dst_pitch = 7;  // in floats
    std::vector<float> src(src_pitch * height), back(dst_pitch * height, -1.0f);
    for (int i = 0; i < src_pitch * height; ++i) src[i] = float(i);
    float* d_2d;
    CHECK(cudaMalloc(&d_2d, dst_pitch * height * sizeof(float)));
    CHECK(cudaMemset(d_2d, 0, dst_pitch * height * sizeof(float)));
    CHECK(cudaMemcpy2D(d_2d, dst_pitch * sizeof(float), src.data(), src_pitch * sizeof(float), width * sizeof(float),
                       height, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back.data(), d_2d, dst_pitch * height * sizeof(float), cudaMemcpyDeviceToHost));
    ok = true;
    for (int r = 0; r < height; ++r)
        for (int c = 0; c < dst_pitch; ++c) ok &= back[r * dst_pitch + c] == (c < width ? src[r * src_pitch + c] : 0.0f);
    expect(ok, "cudaMemcpy2D with pitches (the bytes past each row's width untouched)");

    const float host_coefficients[3] = {1.0f, -2.0f, 0.5f};
    CHECK(cudaMemcpyToSymbol(coefficients, host_coefficients, sizeof(host_coefficients)));
    polynomial<<<(n + 255) / 256, 256>>>(d_x, d_y, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), d_y, n * sizeof(float), cudaMemcpyDeviceToHost));
    ok = true;
    for (int i = 0; i < n; ++i) ok &= got[i] == 1.0f + x[i] * (-2.0f + x[i] * 0.5f);
    float read_back[3];
    CHECK(cudaMemcpyFromSymbol(read_back, coefficients, sizeof(read_back)));
    expect(ok && read_back[2] == 0.5f, "__constant__ coefficients set by cudaMemcpyToSymbol");

    int blocks_per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, polynomial, 256, 0));
    cudaFuncAttributes attributes;
    CHECK(cudaFuncGetAttributes(&attributes, polynomial));
    expect(blocks_per_sm >= 1 && attributes.maxThreadsPerBlock >= 256,
           "cudaOccupancyMaxActiveBlocksPerMultiprocessor and cudaFuncGetAttributes answer");

    const int n_exit = 50;  // warp 1 has 18 live lanes, 14 exited: the 64-thread block's own shuffles and ballot
    float* d_warp_sums;
    unsigned* d_ballots;
    CHECK(cudaMalloc(&d_warp_sums, 2 * sizeof(float)));
    CHECK(cudaMalloc(&d_ballots, 64 * sizeof(unsigned)));
    shuffle_after_exit<<<1, 64>>>(d_x, d_warp_sums, d_ballots, n_exit);
    CHECK(cudaGetLastError());
    float warp_sums[2];
    std::vector<unsigned> ballots(n_exit);
    CHECK(cudaMemcpy(warp_sums, d_warp_sums, sizeof(warp_sums), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(ballots.data(), d_ballots, n_exit * sizeof(unsigned), cudaMemcpyDeviceToHost));
    ok = true;
    for (int w = 0; w < 2; ++w) {
        float sum = 0.0f;
        unsigned ballot = 0;
        for (int i = 32 * w; i < 32 * w + 32 && i < n_exit; ++i) {
            sum += x[i];
            ballot |= unsigned(x[i] > 10.0f) << (i - 32 * w);
        }
        ok &= warp_sums[w] == sum;  // halves of integers: exact in any order
        for (int i = 32 * w; i < 32 * w + 32 && i < n_exit; ++i) ok &= ballots[i] == ballot;
    }
    expect(ok, "a full-mask shuffle reduction and ballot after a bounds-check return");

    std::vector<int> h(64);
    for (int i = 0; i < 64; ++i) h[i] = i * i % 17;
    int *d_in, *d_broadcast, *d_sums;
    CHECK(cudaMalloc(&d_in, 64 * sizeof(int)));
    CHECK(cudaMalloc(&d_broadcast, 64 * sizeof(int)));
    CHECK(cudaMalloc(&d_sums, 64 * sizeof(int)));
    CHECK(cudaMemcpy(d_in, h.data(), 64 * sizeof(int), cudaMemcpyHostToDevice));
    check_tile_width<4>(d_in, d_broadcast, d_sums, h);
    check_tile_width<8>(d_in, d_broadcast, d_sums, h);
    check_tile_width<16>(d_in, d_broadcast, d_sums, h);
    check_tile_width<32>(d_in, d_broadcast, d_sums, h);

    int *d_inclusive, *d_exclusive;
    CHECK(cudaMalloc(&d_inclusive, 64 * sizeof(int)));
    CHECK(cudaMalloc(&d_exclusive, 64 * sizeof(int)));
    tile_prefix_sums<<<1, 64>>>(d_in, d_inclusive, d_exclusive);
    CHECK(cudaGetLastError());
    std::vector<int> inclusive(64), exclusive(64);
    CHECK(cudaMemcpy(inclusive.data(), d_inclusive, 64 * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(exclusive.data(), d_exclusive, 64 * sizeof(int), cudaMemcpyDeviceToHost));
    ok = true;
    for (int t = 0; t < 64; ++t) {
        int sum = 0;
        for (int k = t / 8 * 8; k < t; ++k) sum += h[k];
        ok &= exclusive[t] == sum && inclusive[t] == sum + h[t];
    }
    expect(ok, "cg::inclusive_scan and cg::exclusive_scan over tiles of 8");

    printf(failures ? "FAILED\n" : "PASSED\n");
    return failures ? 1 : 0;
}
