// Plain CUDA as sm_70+ tutorials write it: warp collectives after lanes (and whole warps, thread 0 among them)
// returned early, __match_any_sync / __match_all_sync, scoped and bfloat16 atomics, clock64 and __nanosleep, a kernel
// launched without its default arguments, and a cooperative-groups shuffle of a 24-byte struct. Each result is checked
// against the host. tests/nvcc_cpu_test.sh compiles it with tools/nvcc-cpu, unmodified, and runs it.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int failures = 0;
static void expect(bool ok, const char* what) {
    printf("%s: %s\n", ok ? "ok" : "WRONG", what);
    failures += !ok;
}

// Warp 0 (thread 0 among it) returns at once; the other warps sum their lanes with a full-mask shuffle reduction.
// Legal: the exited lanes are not named by any collective that runs.
__global__ void warp_sums_after_warp0_leaves(const int* in, int* sums) {
    int t = threadIdx.x + blockDim.x * threadIdx.y;  // a 2D block: x fastest, as lanes are numbered
    if (t < 32) return;
    int v = in[blockIdx.x * blockDim.x * blockDim.y + t];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    __syncwarp();
    if (t % 32 == 0) sums[blockIdx.x * (blockDim.x * blockDim.y / 32) + t / 32] = v;
}

// Thread 0 alone returns; its warp's other 31 lanes vote with the full mask (exited lanes count as arrived and do not
// vote) and sum with a shuffle whose sources are all live.
__global__ void vote_after_thread0_leaves(const int* in, unsigned* ballots, int* sums) {
    int lane = threadIdx.x % 32;
    if (threadIdx.x == 0) return;
    unsigned ballot = __ballot_sync(0xffffffff, in[threadIdx.x] > 4);
    int v = in[threadIdx.x];
    for (int offset = 1; offset < 32; offset *= 2) {
        int other = __shfl_down_sync(0xffffffff, v, offset);
        if (lane + offset < 32) v += other;  // lanes 1..31 live: every source read is live
    }
    ballots[threadIdx.x] = ballot;
    if (lane == (threadIdx.x < 32 ? 1 : 0)) sums[threadIdx.x / 32] = v;  // warp 0: lane 1 holds lanes 1..31
}

// Each lane: the lanes holding the same key, and whether the whole warp agrees on a second value.
__global__ void match_keys(const int* keys, const double* values, unsigned* same_key, unsigned* all_mask, int* all_pred,
                           int n) {
    int i = threadIdx.x;
    if (i >= n) return;  // a partial warp: lanes past n have exited
    unsigned live = (n >= 32 ? 0xffffffffu : (1u << n) - 1u);
    same_key[i] = __match_any_sync(live, keys[i]);
    int pred = 0;
    all_mask[i] = __match_all_sync(live, values[i], &pred);
    all_pred[i] = pred;
}

__global__ void scoped_and_bf16_atomics(int* block_count, unsigned long long* system_count, __nv_bfloat16* bf_sum,
                                        __nv_bfloat162* bf2_sum, long long* elapsed) {
    long long start = clock64();
    atomicAdd_block(&block_count[blockIdx.x], 1);
    atomicAdd_system(system_count, 2ull);
    atomicAdd(bf_sum, __float2bfloat16(1.0f));  // small integers: exact in bfloat16 up to 256
    __nv_bfloat162 pair;
    pair.x = __float2bfloat16(1.0f);
    pair.y = __float2bfloat16(-0.5f);
    atomicAdd(bf2_sum, pair);
    __nanosleep(100);
    long long stop = clock64();
    if (threadIdx.x == 0) elapsed[blockIdx.x] = stop - start;
}

// Launched as scale<<<...>>>(x, n): factor and offset take their defaults. The static __shared__ array must be the
// block's own, also on this path.
__global__ void scale(float* x, int n, float factor = 2.0f, float offset = 0.5f) {
    __shared__ float tile[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) x[i] = tile[blockDim.x - 1 - threadIdx.x] * factor + offset;
}

struct Triple {
    double a, b;
    int c;
};
// A tile shuffles a 24-byte struct (more than the 8 bytes a __shfl_sync moves): each lane gets lane (rank + 1) % 16's.
__global__ void rotate_triples(Triple* out) {
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(cg::this_thread_block());
    Triple mine{threadIdx.x * 0.5, -1.0 * threadIdx.x, int(threadIdx.x) * 3};
    out[threadIdx.x] = tile.shfl(mine, (tile.thread_rank() + 1) % 16);
}

int main() {
    // Warp 0 leaves: 2 blocks of 16 x 8 threads (4 warps each).
    const int blocks = 2, per_block = 128;
    std::vector<int> in(blocks * per_block);
    for (size_t i = 0; i < in.size(); ++i) in[i] = int(i * 7 % 11);
    int *d_in, *d_sums;
    CHECK(cudaMalloc(&d_in, in.size() * sizeof(int)));
    CHECK(cudaMalloc(&d_sums, blocks * 4 * sizeof(int)));
    CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d_sums, 0xff, blocks * 4 * sizeof(int)));  // -1: warp 0's slots must stay so
    warp_sums_after_warp0_leaves<<<blocks, dim3(16, 8)>>>(d_in, d_sums);
    CHECK(cudaGetLastError());
    std::vector<int> sums(blocks * 4);
    CHECK(cudaMemcpy(sums.data(), d_sums, sums.size() * sizeof(int), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int w = 0; w < blocks * 4; ++w) {
        int want = -1;
        if (w % 4 != 0) {
            want = 0;
            for (int l = 0; l < 32; ++l) want += in[w * 32 + l];
        }
        ok &= sums[w] == want;
    }
    expect(ok, "warp 0 returns, the other warps reduce with full-mask shuffles and __syncwarp");

    // Thread 0 leaves: lanes 1..31 of warp 0 and all of warp 1 vote and sum.
    unsigned* d_ballots;
    CHECK(cudaMalloc(&d_ballots, 64 * sizeof(unsigned)));
    vote_after_thread0_leaves<<<1, 64>>>(d_in, d_ballots, d_sums);
    CHECK(cudaGetLastError());
    std::vector<unsigned> ballots(64);
    CHECK(cudaMemcpy(ballots.data(), d_ballots, 64 * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(sums.data(), d_sums, 2 * sizeof(int), cudaMemcpyDeviceToHost));
    ok = true;
    for (int w = 0; w < 2; ++w) {
        unsigned want = 0;
        int sum = 0;
        for (int l = w == 0 ? 1 : 0; l < 32; ++l) {
            want |= unsigned(in[w * 32 + l] > 4) << l;
            sum += in[w * 32 + l];
        }
        for (int l = w == 0 ? 1 : 0; l < 32; ++l) ok &= ballots[w * 32 + l] == want;
        ok &= sums[w] == sum;
    }
    expect(ok, "thread 0 returns, its warp's other lanes ballot and shuffle with the full mask");

    // __match_any_sync / __match_all_sync on 29 live lanes.
    const int n = 29;
    std::vector<int> keys(32);
    std::vector<double> same(32, 0.0), differ(32, 0.0);
    for (int i = 0; i < 32; ++i) keys[i] = i * i % 5;
    differ[17] = -0.0;  // equal as numbers, not as bits: match compares bits
    int *d_keys, *d_pred;
    double* d_values;
    unsigned *d_any, *d_all;
    CHECK(cudaMalloc(&d_keys, 32 * sizeof(int)));
    CHECK(cudaMalloc(&d_values, 32 * sizeof(double)));
    CHECK(cudaMalloc(&d_any, 32 * sizeof(unsigned)));
    CHECK(cudaMalloc(&d_all, 32 * sizeof(unsigned)));
    CHECK(cudaMalloc(&d_pred, 32 * sizeof(int)));
    CHECK(cudaMemcpy(d_keys, keys.data(), 32 * sizeof(int), cudaMemcpyHostToDevice));
    ok = true;
    for (int round = 0; round < 2; ++round) {
        CHECK(cudaMemcpy(d_values, (round == 0 ? same : differ).data(), 32 * sizeof(double), cudaMemcpyHostToDevice));
        match_keys<<<1, 32>>>(d_keys, d_values, d_any, d_all, d_pred, n);
        CHECK(cudaGetLastError());
        std::vector<unsigned> any(32), all(32);
        std::vector<int> pred(32);
        CHECK(cudaMemcpy(any.data(), d_any, 32 * sizeof(unsigned), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(all.data(), d_all, 32 * sizeof(unsigned), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(pred.data(), d_pred, 32 * sizeof(int), cudaMemcpyDeviceToHost));
        const unsigned live = (1u << n) - 1u;
        for (int i = 0; i < n; ++i) {
            unsigned want = 0;
            for (int j = 0; j < n; ++j) want |= unsigned(keys[j] == keys[i]) << j;
            ok &= any[i] == want;
            ok &= round == 0 ? (all[i] == live && pred[i] == 1) : (all[i] == 0 && pred[i] == 0);
        }
    }
    expect(ok, "__match_any_sync groups lanes by key; __match_all_sync sees one lane differ");

    // Scoped and bfloat16 atomics, clock64, __nanosleep.
    int* d_block_count;
    unsigned long long* d_system_count;
    __nv_bfloat16* d_bf;
    __nv_bfloat162* d_bf2;
    long long* d_elapsed;
    CHECK(cudaMalloc(&d_block_count, 3 * sizeof(int)));
    CHECK(cudaMalloc(&d_system_count, sizeof(unsigned long long)));
    CHECK(cudaMalloc(&d_bf, sizeof(__nv_bfloat16)));
    CHECK(cudaMalloc(&d_bf2, sizeof(__nv_bfloat162)));
    CHECK(cudaMalloc(&d_elapsed, 3 * sizeof(long long)));
    CHECK(cudaMemset(d_block_count, 0, 3 * sizeof(int)));
    CHECK(cudaMemset(d_system_count, 0, sizeof(unsigned long long)));
    CHECK(cudaMemset(d_bf, 0, sizeof(__nv_bfloat16)));
    CHECK(cudaMemset(d_bf2, 0, sizeof(__nv_bfloat162)));
    CHECK(cudaMemset(d_elapsed, 0xff, 3 * sizeof(long long)));
    scoped_and_bf16_atomics<<<3, 40>>>(d_block_count, d_system_count, d_bf, d_bf2, d_elapsed);
    CHECK(cudaGetLastError());
    int block_count[3];
    unsigned long long system_count;
    __nv_bfloat16 bf;
    __nv_bfloat162 bf2;
    long long elapsed[3];
    CHECK(cudaMemcpy(block_count, d_block_count, sizeof(block_count), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&system_count, d_system_count, sizeof(system_count), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&bf, d_bf, sizeof(bf), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&bf2, d_bf2, sizeof(bf2), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(elapsed, d_elapsed, sizeof(elapsed), cudaMemcpyDeviceToHost));
    ok = block_count[0] == 40 && block_count[1] == 40 && block_count[2] == 40 && system_count == 240;
    expect(ok, "atomicAdd_block and atomicAdd_system");
    expect(__bfloat162float(bf) == 120.0f && __bfloat162float(bf2.x) == 120.0f && __bfloat162float(bf2.y) == -60.0f,
           "atomicAdd on __nv_bfloat16 and __nv_bfloat162");
    expect(elapsed[0] >= 0 && elapsed[1] >= 0 && elapsed[2] >= 0, "clock64 counts up across __nanosleep");

    // Default arguments left out of the launch.
    const int count = 100;
    std::vector<float> x(count);
    for (int i = 0; i < count; ++i) x[i] = float(i);
    float* d_x;
    CHECK(cudaMalloc(&d_x, count * sizeof(float)));
    CHECK(cudaMemcpy(d_x, x.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    scale<<<(count + 63) / 64, 64>>>(d_x, count);
    CHECK(cudaGetLastError());
    std::vector<float> got(count);
    CHECK(cudaMemcpy(got.data(), d_x, count * sizeof(float), cudaMemcpyDeviceToHost));
    ok = true;
    for (int i = 0; i < count; ++i) {
        int block = i / 64, mirrored = block * 64 + 63 - i % 64;
        ok &= got[i] == (mirrored < count ? float(mirrored) : 0.0f) * 2.0f + 0.5f;
    }
    expect(ok, "a kernel launched without its default arguments, its __shared__ tile per block");

    // A tile's shfl of a struct wider than 8 bytes.
    Triple* d_triples;
    CHECK(cudaMalloc(&d_triples, 32 * sizeof(Triple)));
    rotate_triples<<<1, 32>>>(d_triples);
    CHECK(cudaGetLastError());
    std::vector<Triple> triples(32);
    CHECK(cudaMemcpy(triples.data(), d_triples, 32 * sizeof(Triple), cudaMemcpyDeviceToHost));
    ok = true;
    for (int t = 0; t < 32; ++t) {
        int from = t / 16 * 16 + (t % 16 + 1) % 16;
        ok &= triples[t].a == from * 0.5 && triples[t].b == -1.0 * from && triples[t].c == from * 3;
    }
    expect(ok, "thread_block_tile<16>::shfl of a 24-byte struct");

    CHECK(cudaDeviceSynchronize());
    printf(failures ? "FAILED\n" : "PASSED\n");
    return failures ? 1 : 0;
}
