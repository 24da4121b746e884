// bench/backend_bench.cu — what the execution backend costs: per CUDA thread, per barrier, and on a real kernel.
//
// Prints three figures (never asserted; see common/cpu_backend/README.md):
//   1. ns per CUDA thread on the barrier-free path (a kernel that only writes its index);   goal on the CPU: ≤ 5 ns
//   2. ns per thread per __syncthreads (a kernel that does nothing but barriers);          goal on the CPU: ≤ 20 ns
//   3. GFLOP/s of a shared-memory tiled GEMM, beside a plain C++ triple loop in the same run.
// Built in both flavors: on a GPU the same kernels give the hardware's numbers, which puts the CPU's in scale.
// Timing uses CUDA events around synchronized launches (on the CPU backend events read the host clock).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/device_info.h"
#include "common/launch.h"

namespace {

__global__ void write_index(int* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}

// Nothing but barriers, so the difference between many rounds and one is the barriers' own cost.
__global__ void barriers_only(int* out, int rounds) {
    for (int r = 0; r < rounds; ++r) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = rounds;
}

constexpr int kTile = 16;
__global__ void tiled_gemm(const float* a, const float* b, float* c, int n) {
    __shared__ float a_tile[kTile][kTile];
    __shared__ float b_tile[kTile][kTile];
    const int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
    float sum = 0.0f;
    for (int k0 = 0; k0 < n; k0 += kTile) {
        a_tile[threadIdx.y][threadIdx.x] = (row < n && k0 + int(threadIdx.x) < n) ? a[row * n + k0 + threadIdx.x] : 0;
        b_tile[threadIdx.y][threadIdx.x] = (col < n && k0 + int(threadIdx.y) < n) ? b[(k0 + threadIdx.y) * n + col] : 0;
        __syncthreads();
        for (int k = 0; k < kTile; ++k) sum += a_tile[threadIdx.y][k] * b_tile[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n) c[row * n + col] = sum;
}

// Median milliseconds of `repeats` timed calls of `run` (after one warm-up), measured with CUDA events.
template <typename Run>
float median_ms(int repeats, Run run) {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    run();
    std::vector<float> times;
    for (int r = 0; r < repeats; ++r) {
        CUDA_CHECK(cudaEventRecord(start));
        run();
        CUDA_CHECK(cudaEventRecord(stop));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1) {
        const bool help = std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0;
        std::fprintf(help ? stdout : stderr,
                     "usage: %s\n  Prints what the execution backend costs per CUDA thread, per barrier, and a "
                     "tiled GEMM's GFLOP/s beside a plain C++ loop.\n",
                     argv[0]);
        return help ? 0 : 2;
    }
    require_device_or_exit(argv[0]);
    std::printf("backend benchmark on %s\n", device_summary().c_str());
    const bool cpu = std::strcmp(BACKEND_NAME, "cpu") == 0;

    // 1. The barrier-free fast path.
    const int n = 1 << 22, threads = 256;
    int* out = nullptr;
    CUDA_CHECK(cudaMalloc(&out, n * sizeof(int)));
    const float index_ms = median_ms(7, [&] {
        write_index<<<cuda_teach::ceil_div(n, threads), threads, 0, 0>>>(out, n);
        CUDA_CHECK(cudaGetLastError());
    });
    const double ns_per_thread = index_ms * 1e6 / n;

    // 2. Barriers: the difference between 65 barriers and 1, per thread per barrier.
    const int blocks = 256, rounds = 65;
    const float many_ms = median_ms(5, [&] {
        barriers_only<<<blocks, threads, 0, 0>>>(out, rounds);
        CUDA_CHECK(cudaGetLastError());
    });
    const float one_ms = median_ms(5, [&] {
        barriers_only<<<blocks, threads, 0, 0>>>(out, 1);
        CUDA_CHECK(cudaGetLastError());
    });
    const double ns_per_barrier = (many_ms - one_ms) * 1e6 / (double(blocks) * threads * (rounds - 1));
    CUDA_CHECK(cudaFree(out));

    // 3. A tiled GEMM, against the plain loop on the host.
    const int size = cpu ? 256 : 2048;
    std::vector<float> a(size_t(size) * size), b(a.size()), c(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
        a[i] = float(i % 7) - 3.0f;
        b[i] = float(i % 5) - 2.0f;
    }
    float *da, *db, *dc;
    CUDA_CHECK(cudaMalloc(&da, a.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&db, b.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dc, c.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
    const dim3 grid(cuda_teach::ceil_div(size, kTile), cuda_teach::ceil_div(size, kTile)), block(kTile, kTile);
    const float gemm_ms = median_ms(3, [&] {
        tiled_gemm<<<grid, block, 0, 0>>>(da, db, dc, size);
        CUDA_CHECK(cudaGetLastError());
    });
    const double flops = 2.0 * size * size * size;

    // The host loop (i-k-j order, so the inner loop streams rows), timed with the host clock: it is host work.
    const int host_size = 256;
    std::vector<float> hc(size_t(host_size) * host_size);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < host_size; ++i)
        for (int k = 0; k < host_size; ++k) {
            const float aik = a[size_t(i) * host_size + k];
            for (int j = 0; j < host_size; ++j) hc[size_t(i) * host_size + j] += aik * b[size_t(k) * host_size + j];
        }
    const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    volatile float sink = hc[size_t(host_size) * host_size / 2];  // keep the loop from being optimized away
    (void)sink;
    CUDA_CHECK(cudaFree(da));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dc));

    const char* unit = cpu ? "CPU-backend figures (host clock)" : "GPU figures (CUDA events)";
    std::printf("%s\n", unit);
    std::printf("  %-44s %10.2f ns   (%d threads in %.2f ms)%s\n", "per CUDA thread, barrier-free path:", ns_per_thread,
                n, index_ms, cpu ? "   goal <= 5 ns" : "");
    std::printf("  %-44s %10.2f ns   (%d blocks x %d threads x %d barriers)%s\n",
                "per thread per __syncthreads:", ns_per_barrier, blocks, threads, rounds - 1,
                cpu ? "   goal <= 20 ns" : "");
    std::printf("  %-44s %10.2f GFLOP/s (%d^3 in %.2f ms)\n",
                "tiled GEMM kernel (16x16 shared tiles):", flops / (gemm_ms * 1e6), size, gemm_ms);
    std::printf("  %-44s %10.2f GFLOP/s (%d^3 in %.2f ms, one host core)\n",
                "plain C++ loop on the host:", 2.0 * host_size * host_size * host_size / (host_ms * 1e6), host_size,
                host_ms);
    return 0;
}
