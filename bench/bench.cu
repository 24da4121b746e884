// bench/bench.cu — validates every kernel in kernels/ against the float64 reference, then times them.
//
//   build/cuda/bench/bench               every GEMM step (kernels/gemm_v1_naive.cuh … gemm_v7_warp_tiled.cuh)
//                                        at the MLP's shapes (batch 128 and 1024, 784 → 1024 → 1024 → 10: forward,
//                                        input gradient, weight gradient) and at 4096³, beside cuBLAS SGEMM; then
//                                        every tensor-core HGEMM step (kernels/hgemm_v1_warp_tile.cuh …
//                                        hgemm_v3_pipelined.cuh: fp16 in, fp32 accumulation) at the same shapes,
//                                        beside cuBLAS HGEMM (cublasGemmEx, fp16 in, fp32 compute); then the
//                                        memory-bound kernels beside a device-to-device copy
//   build/cuda/bench/bench --quick       fewer repetitions, smaller memory-bound sizes
//   build/cuda/bench/bench --version 6   only GEMM step 6 (and cuBLAS)
//   build/cuda/bench/bench --hgemm-version 3   only HGEMM step 3 (and cuBLAS HGEMM)
//   build/cpu/bench/bench                the same on the CPU backend: small sizes (256³ instead of 4096³), few runs
//
// Figures are printed, never asserted. Method (what keeps them honest):
//   * validation first: each step and every transpose against the float64 reference (and cuBLAS through the same
//     row-major wrapper), so a fast wrong kernel is reported as wrong, not fast. Two shapes: 131×67×97 (off every
//     tile boundary: steps 5–7's element-wise fallback; on a GPU steps 4–7's 16×16 tiles, the small-batch path)
//     and 2180×2052×20 (leading dimensions multiples of 4 and 18 × 17 = 306 output tiles of 128×128, ≥ 2 per SM
//     up to 153 SMs: the float4 loads and 128×128 tiles — the paths timed at the large shapes; on the CPU backend
//     only steps 4–7 run this one, the others would take minutes);
//   * CUDA events around the runs, after warm-up runs; the median of the runs (robust to a stray slow one);
//   * two timings per GEMM: "launch", one launch between two events, synchronized after each (what a lone call
//     costs, host launch overhead included), and "stream", n launches back to back on one stream between two
//     events, divided by n (n chosen so the group takes ≈ 2 ms; 1, the same measurement, for longer kernels): the
//     kernel's own throughput. Small shapes are launch-bound on a GPU, so "% of cuBLAS" at batch 128 compares
//     kernels only in the stream rows;
//   * GEMM inputs and outputs rotate over enough buffer sets to exceed twice the L2 cache, so a run does not find
//     its operands left in L2 by the previous one (memory-bound kernels use working sets far larger than L2);
//   * GEMM: GFLOP/s = 2·M·N·K / time, and % of cuBLAS SGEMM (FP32, no TF32) on the same shape, same timing, same
//     run; HGEMM: the same with % of cuBLAS's fp16 GEMM (fp16 in, fp32 compute, the output type of the lessons:
//     fp16 for the forward and input-gradient GEMMs and the square, fp32 for the weight gradients);
//   * memory-bound kernels: GB/s = bytes the kernel must move / time, and % of a cudaMemcpy device-to-device copy
//     (2 bytes moved per byte copied) measured in the same run.
// Goals on an H200 (to be measured when a GPU is available; nothing here has been): the top GEMM step (kFastestGemm)
// ≥ 85% of cuBLAS at 4096³; memory-bound kernels ≥ 80% of the copy bandwidth, the two-pass bias_grad included,
// except the one-pass bias_grad (only ceil(cols / 32) blocks, 32 for the 1024-wide rows timed here: too few to
// fill the GPU; see kernels/bias_grad.cuh) and count_correct (it reads the logits but its figure is dominated by
// the per-row argmax over 10 classes; no goal set).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/access_counters.h"
#include "common/device_info.h"
#include "common/device_buffer.h"
#include "common/launch.h"
#include "common/reference_ops.h"
#include "common/report.h"
#include "kernels/bias_grad.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/count_correct.cuh"
#include "kernels/gemm.cuh"
#include "kernels/hgemm.cuh"
#include "kernels/normalize.cuh"
#include "kernels/optimizers.cuh"
#include "kernels/softmax_cross_entropy.cuh"

#if !defined(CUDA_TEACH_CPU)
#include <cublas_v2.h>
#endif

namespace {

#if defined(CUDA_TEACH_CPU)
constexpr bool kCpuBackend = true;
#else
constexpr bool kCpuBackend = false;
#endif

// ---------------------------------------------------------------------------------------------------------------
// Options

struct Options {
    bool quick = false;
    bool once = false;     // one launch per GEMM/HGEMM step, nothing else (for a profiler; counts in the counting build)
    std::string csv;       // --once in the counting build: the counts per step as CSV
    int only_version = 0;        // 0: all GEMM versions
    int only_hgemm_version = 0;  // 0: all HGEMM versions
};

void print_usage() {
    std::printf(
        "usage: bench [--quick] [--version N] [--hgemm-version N] [--once [--csv FILE]] [--help]\n"
        "Validates every kernel in kernels/ against the float64 reference, then times it (in the counting build,\n"
        "build/cpu-counters: counts every kernel's memory requests instead).\n"
        "  --quick            fewer repetitions and smaller memory-bound sizes\n"
        "  --once             only one launch of each GEMM and HGEMM step at 256^3 (64x64 block tiles; GEMM step 7\n"
        "                     128x128, its design point): what\n"
        "                     tools/gpu_check.sh profiles with Nsight Compute; counted in the counting build\n"
        "  --csv FILE         with --once in the counting build: write each step's counts to FILE\n"
        "  --version N        time only GEMM step N (1 naive, 2 coalesced, 3 smem_tiled, 4 register_blocked,\n"
        "                     5 vectorized, 6 double_buffered, 7 warp_tiled)\n"
        "  --hgemm-version N  time only tensor-core HGEMM step N (1 warp_tile, 2 block_tile, 3 pipelined)\n"
        "  --help             this text\n");
}

Options parse_options(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            print_usage();
            std::exit(0);
        } else if (arg == "--quick") {
            options.quick = true;
        } else if (arg == "--once") {
            options.once = true;
        } else if (arg == "--csv") {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench: --csv needs a file name\n");
                std::exit(2);
            }
            options.csv = argv[++i];
        } else if (arg == "--hgemm-version" || arg.rfind("--hgemm-version=", 0) == 0) {
            std::string value = arg == "--hgemm-version" ? (i + 1 < argc ? argv[++i] : "") : arg.substr(16);
            char* end = nullptr;
            const long version = std::strtol(value.c_str(), &end, 10);
            if (value.empty() || *end != '\0' || version < 1 || version > kHgemmVersionCount) {
                std::fprintf(stderr, "bench: --hgemm-version needs 1..%d, not '%s'\n", kHgemmVersionCount,
                             value.c_str());
                std::exit(2);
            }
            options.only_hgemm_version = static_cast<int>(version);
        } else if (arg == "--version" || arg.rfind("--version=", 0) == 0) {
            std::string value = arg == "--version" ? (i + 1 < argc ? argv[++i] : "") : arg.substr(10);
            char* end = nullptr;
            const long version = std::strtol(value.c_str(), &end, 10);
            if (value.empty() || *end != '\0' || version < 1 || version > kGemmVersionCount) {
                std::fprintf(stderr, "bench: --version needs 1..%d, not '%s'\n", kGemmVersionCount, value.c_str());
                std::exit(2);
            }
            options.only_version = static_cast<int>(version);
        } else {
            std::fprintf(stderr, "bench: unknown argument '%s' (try --help)\n", arg.c_str());
            std::exit(2);
        }
    }
    if (!options.csv.empty() && !options.once) {
        std::fprintf(stderr, "bench: --csv goes with --once\n");
        std::exit(2);
    }
    return options;
}

// ---------------------------------------------------------------------------------------------------------------
// Device memory and timing

std::mt19937_64 rng(2024);

std::vector<float> random_floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

std::vector<uint8_t> random_bytes(size_t n, int max_value = 255) {
    std::uniform_int_distribution<int> dist(0, max_value);
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = static_cast<uint8_t>(dist(rng));
    return v;
}

struct Timing {
    double median_ms;
    int runs;
};

struct TimingPlan {
    int warmup, max_runs, min_runs;
    double budget_ms;  // stop adding runs once the measured runs add up to this
};

TimingPlan timing_plan(const Options& options) {
    if (kCpuBackend) return {1, 2, 2, 0.0};
    return options.quick ? TimingPlan{2, 10, 3, 100.0} : TimingPlan{5, 50, 5, 500.0};
}

// Median of timed samples; run(i) gets the run's index (for rotating buffers). A sample is `launches` runs back to
// back between two events, divided by their count: 1 (the default) times a lone, synchronized launch, host launch
// overhead included; many keep the stream busy and time the kernel's own throughput.
Timing time_runs(const TimingPlan& plan, const std::function<void(int)>& run, int launches = 1) {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    int index = 0;
    for (int i = 0; i < plan.warmup; ++i) run(index++);
    std::vector<float> times;
    double total = 0.0;
    while (static_cast<int>(times.size()) < plan.max_runs &&
           (static_cast<int>(times.size()) < plan.min_runs || total < plan.budget_ms)) {
        CUDA_CHECK(cudaEventRecord(start));
        for (int l = 0; l < launches; ++l) run(index++);
        CUDA_CHECK(cudaEventRecord(stop));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms / launches);
        total += ms;
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    const size_t mid = times.size() / 2;  // an even count takes the mean of the two middle runs
    const double median = times.size() % 2 == 1 ? times[mid] : 0.5 * (double(times[mid - 1]) + times[mid]);
    return {median, static_cast<int>(times.size())};
}

// Back-to-back launches per stream sample: enough for the group to take about 2 ms (at most 200), so that the GPU
// never waits for the host between two kernels.
int stream_launches(const Timing& single) {
    return static_cast<int>(std::clamp(std::ceil(2.0 / std::max(single.median_ms, 1e-6)), 1.0, 200.0));
}

size_t l2_bytes() {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    return static_cast<size_t>(std::max(prop.l2CacheSize, 0));
}

// ---------------------------------------------------------------------------------------------------------------
// cuBLAS, through the row-major trick (cuda flavor only)

#if !defined(CUDA_TEACH_CPU)
#define CUBLAS_CHECK(call)                                                                                     \
    do {                                                                                                       \
        const cublasStatus_t cublas_status_ = (call);                                                          \
        if (cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            std::fprintf(stderr, "cuBLAS error %d at %s:%d: %s\n", static_cast<int>(cublas_status_), __FILE__, \
                         __LINE__, #call);                                                                     \
            std::exit(EXIT_FAILURE);                                                                           \
        }                                                                                                      \
    } while (0)

cublasHandle_t cublas_handle() {
    static cublasHandle_t handle = [] {
        cublasHandle_t h;
        CUBLAS_CHECK(cublasCreate(&h));
        CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));  // plain FP32: no TF32 tensor cores
        return h;
    }();
    return handle;
}

// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, and a row-major matrix read column-major is
// its transpose: so pass B first, A second, and swap M and N. The transpose flags carry over unchanged.
void cublas_gemm(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
    const auto op = [](Transpose t) { return t == Transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
    CUBLAS_CHECK(cublasSgemm(cublas_handle(), op(op_b), op(op_a), N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
}

// cuBLAS's tensor-core GEMM for what hgemm computes (without its epilogue): A and B fp16, products summed in fp32
// (CUBLAS_COMPUTE_32F), C written as fp16 or fp32. The same row-major trick.
template <typename OutT>
void cublas_hgemm(Transpose op_a, Transpose op_b, int M, int N, int K, float alpha, const __half* A, int lda,
                  const __half* B, int ldb, OutT* C, int ldc) {
    const auto op = [](Transpose t) { return t == Transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
    const float beta = 0.0f;
    const cudaDataType c_type = std::is_same_v<OutT, float> ? CUDA_R_32F : CUDA_R_16F;
    CUBLAS_CHECK(cublasGemmEx(cublas_handle(), op(op_b), op(op_a), N, M, K, &alpha, B, CUDA_R_16F, ldb, A, CUDA_R_16F,
                              lda, &beta, C, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
#endif

// ---------------------------------------------------------------------------------------------------------------
// Validation

bool report_mismatches(const char* what, const std::vector<float>& got, const std::vector<double>& ref, double abs_tol,
                       double rel_tol) {
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(got[i] - ref[i]);
        if (!(err <= abs_tol + std::fabs(ref[i]) * rel_tol)) {
            if (bad < 3) std::printf("    %s[%zu]: got %g, reference %g\n", what, i, got[i], ref[i]);
            ++bad;
        }
    }
    if (bad > 0) std::printf("  MISMATCH %s: %zu of %zu elements\n", what, bad, got.size());
    return bad == 0;
}

using GemmFunction = std::function<void(Transpose, Transpose, int, int, int, float, const float*, int, const float*,
                                        int, float, float*, int, GemmEpilogue)>;

struct ValidationShape {
    int M, N, K;
};
// Off every tile boundary (steps 5–7: element-wise loads; steps 4–7: 16×16 tiles on a GPU, whose SMs 45 blocks
// cannot fill, 128×128 on the CPU backend's one worker: choose_gemm_plan in kernels/gemm_common.cuh).
constexpr ValidationShape kOddShape{131, 67, 97};
// Every leading dimension a multiple of 4 (steps 5–7: float4 loads) and ceil(2180/128) · ceil(2052/128) = 18 · 17 =
// 306 output tiles: steps 4–7 choose 128×128 tiles on a GPU with up to 153 SMs (they want ≥ 2 blocks per SM), the
// paths the large timed shapes take. K = 20: three k-steps, the last one partial.
constexpr ValidationShape kAlignedShape{2180, 2052, 20};

bool validate_gemm(const char* name, const GemmFunction& gemm_fn, bool epilogue_supported, ValidationShape shape) {
    bool ok = true;
    const int M = shape.M, N = shape.N, K = shape.K;
    for (Transpose ta : {Transpose::no, Transpose::yes}) {
        for (Transpose tb : {Transpose::no, Transpose::yes}) {
            const bool trans_a = ta == Transpose::yes, trans_b = tb == Transpose::yes;
            const int lda = trans_a ? M : K, ldb = trans_b ? K : N;
            const std::vector<float> a = random_floats(static_cast<size_t>(M) * K);
            const std::vector<float> b = random_floats(static_cast<size_t>(K) * N);
            const std::vector<float> bias = random_floats(N);
            DeviceBuffer<float> d_a(a), d_b(b), d_c(static_cast<size_t>(M) * N), d_bias(bias);
            const bool fuse = epilogue_supported && !trans_a && !trans_b;  // the forward GEMM: bias + ReLU
            gemm_fn(ta, tb, M, N, K, 1.0f, d_a.get(), lda, d_b.get(), ldb, 0.0f, d_c.get(), N,
                    GemmEpilogue{fuse ? d_bias.get() : nullptr, fuse});
            std::vector<double> ref(static_cast<size_t>(M) * N);
            reference::gemm<float, double>(trans_a, trans_b, M, N, K, 1.0, a.data(), lda, b.data(), ldb, 0.0,
                                           ref.data(), N);
            if (fuse) {
                for (int r = 0; r < M; ++r) {
                    for (int c = 0; c < N; ++c) ref[r * N + c] = std::max(ref[r * N + c] + bias[c], 0.0);
                }
            }
            const std::string what = std::string(name) + (trans_a ? " T" : " N") + (trans_b ? "T" : "N");
            ok = report_mismatches(what.c_str(), d_c.download(), ref, 1e-6 * K + 1e-6, 1e-5) && ok;
        }
    }
    return ok;
}

// ---------------------------------------------------------------------------------------------------------------
// GEMM benchmark

struct GemmShape {
    std::string name;
    Transpose op_a, op_b;
    int M, N, K;
    bool bias_relu;  // the forward GEMM of a hidden layer: bias + ReLU in the epilogue
};

std::vector<GemmShape> gemm_shapes() {
    std::vector<GemmShape> shapes;
    const std::vector<int> batches = kCpuBackend ? std::vector<int>{32} : std::vector<int>{128, 1024};
    const int layers[3][2] = {{784, 1024}, {1024, 1024}, {1024, 10}};
    for (int batch : batches) {
        for (int l = 0; l < 3; ++l) {
            const int in = layers[l][0], out = layers[l][1];
            char tag_text[32];  // (snprintf rather than string + to_string: g++ 12 warns falsely on the latter)
            std::snprintf(tag_text, sizeof tag_text, "L%d B=%d", l + 1, batch);
            const std::string tag = tag_text;
            shapes.push_back({tag + " fwd  Y=XW", Transpose::no, Transpose::no, batch, out, in, l < 2});
            shapes.push_back({tag + " dX=dY.Wt", Transpose::no, Transpose::yes, batch, in, out, false});
            shapes.push_back({tag + " dW=Xt.dY", Transpose::yes, Transpose::no, in, out, batch, false});
        }
    }
    if (kCpuBackend) {
        shapes.push_back({"square 256^3", Transpose::no, Transpose::no, 256, 256, 256, false});
    } else {
        shapes.push_back({"square 4096^3", Transpose::no, Transpose::no, 4096, 4096, 4096, false});
    }
    return shapes;
}

void bench_gemm(const Options& options, const std::vector<int>& versions) {
    const TimingPlan plan = timing_plan(options);
    const size_t l2 = l2_bytes();
    std::printf("\nGEMM, FP32: GFLOP/s (median of runs)%s\n",
                kCpuBackend ? " (CPU backend: launches are synchronous, so one timing: a lone launch)"
                            : "; in brackets: % of cuBLAS SGEMM on the same shape with the same timing.\n"
                              "  launch: one synchronized launch per sample (host launch overhead included);"
                              " stream: back-to-back launches / count (the kernel alone)");
    std::printf("  %-22s %5s %5s %5s %-6s ", "shape", "M", "N", "K", "timing");
    for (int v : versions) std::printf("| %d %-17s", v, gemm_version_name(gemm_version_from_int(v)));
    if (!kCpuBackend) std::printf("| %-9s", "cuBLAS");
    std::printf("| sets\n");

    double top_step_percent = -1.0;
    for (const GemmShape& s : gemm_shapes()) {
        const bool ta = s.op_a == Transpose::yes, tb = s.op_b == Transpose::yes;
        const int lda = ta ? s.M : s.K, ldb = tb ? s.K : s.N, ldc = s.N;
        const size_t a_count = static_cast<size_t>(s.M) * s.K, b_count = static_cast<size_t>(s.K) * s.N,
                     c_count = static_cast<size_t>(s.M) * s.N;
        const size_t set_bytes = (a_count + b_count + c_count) * sizeof(float);
        // Enough sets that cycling through them touches more than 2× the L2 cache between two uses of one set.
        const int sets = static_cast<int>(std::clamp<size_t>(l2 == 0 ? 1 : (2 * l2) / set_bytes + 1, 1, 256));
        std::vector<std::unique_ptr<DeviceBuffer<float>>> a, b, c;
        for (int i = 0; i < sets; ++i) {
            a.push_back(std::make_unique<DeviceBuffer<float>>(random_floats(a_count)));
            b.push_back(std::make_unique<DeviceBuffer<float>>(random_floats(b_count)));
            c.push_back(std::make_unique<DeviceBuffer<float>>(c_count));
        }
        DeviceBuffer<float> bias(random_floats(s.N));
        const GemmEpilogue epilogue{s.bias_relu ? bias.get() : nullptr, s.bias_relu};
        const double flop = 2.0 * s.M * s.N * s.K;
        const auto gflops = [&](const Timing& t) { return flop / (t.median_ms * 1e6); };

        // [0]: launch timing, [1]: stream timing (cuda flavor only).
        const int timings = kCpuBackend ? 1 : 2;
        double cublas_gflops[2] = {0.0, 0.0};
#if !defined(CUDA_TEACH_CPU)
        const std::function<void(int)> run_cublas = [&](int i) {
            const int k = i % sets;
            cublas_gemm(s.op_a, s.op_b, s.M, s.N, s.K, 1.0f, a[k]->get(), lda, b[k]->get(), ldb, 0.0f, c[k]->get(),
                        ldc);
        };
        const Timing cublas_single = time_runs(plan, run_cublas);
        cublas_gflops[0] = gflops(cublas_single);
        const int cublas_launches = stream_launches(cublas_single);  // 1 for long kernels: the same measurement
        cublas_gflops[1] =
            cublas_launches == 1 ? cublas_gflops[0] : gflops(time_runs(plan, run_cublas, cublas_launches));
#endif
        std::vector<double> step_gflops[2];
        for (int v : versions) {
            const GemmVersion version = gemm_version_from_int(v);
            const std::function<void(int)> run = [&](int i) {
                const int k = i % sets;
                gemm(version, s.op_a, s.op_b, s.M, s.N, s.K, 1.0f, a[k]->get(), lda, b[k]->get(), ldb, 0.0f,
                     c[k]->get(), ldc, epilogue);
            };
            const Timing single = time_runs(plan, run);
            step_gflops[0].push_back(gflops(single));
            if (timings == 2) {
                const int launches = stream_launches(single);  // 1 for long kernels: the same measurement
                step_gflops[1].push_back(launches == 1 ? gflops(single) : gflops(time_runs(plan, run, launches)));
            }
        }
        for (int t = 0; t < timings; ++t) {
            if (t == 0) {
                std::printf("  %-22s %5d %5d %5d ", s.name.c_str(), s.M, s.N, s.K);
            } else {
                std::printf("  %-22s %5s %5s %5s ", "", "", "", "");
            }
            std::printf("%-6s ", t == 0 ? "launch" : "stream");
            for (size_t i = 0; i < versions.size(); ++i) {
                const double g = step_gflops[t][i];
                if (kCpuBackend) {
                    std::printf("| %8.3f           ", g);
                } else {
                    std::printf("| %8.0f (%4.0f%%)   ", g, 100.0 * g / cublas_gflops[t]);
                }
                if (t == timings - 1 && s.M == 4096 && gemm_version_from_int(versions[i]) == kFastestGemm) {
                    top_step_percent = 100.0 * g / cublas_gflops[t];
                }
            }
            if (!kCpuBackend) std::printf("| %8.0f ", cublas_gflops[t]);
            std::printf("| %d\n", sets);
        }
        std::fflush(stdout);
    }
    if (!kCpuBackend) {
        std::printf(
            "  (forward shapes of hidden layers include our fused bias + ReLU epilogue; cuBLAS does the bare "
            "GEMM)\n");
        if (top_step_percent >= 0.0) {
            std::printf("  goal: %s (step %d, the top) >= 85%% of cuBLAS at 4096^3 (stream timing); measured %.0f%%\n",
                        gemm_version_name(kFastestGemm), kGemmVersionCount, top_step_percent);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tensor-core GEMM: fp16 inputs, fp32 accumulation (kernels/hgemm.cuh)

std::vector<__half> to_halves(const std::vector<float>& values) {
    std::vector<__half> h(values.size());
    for (size_t i = 0; i < values.size(); ++i) h[i] = __float2half(values[i]);
    return h;
}

std::vector<float> to_floats(const std::vector<__half>& halves) {
    std::vector<float> f(halves.size());
    for (size_t i = 0; i < halves.size(); ++i) f[i] = __half2float(halves[i]);
    return f;
}

using HgemmFunction = std::function<void(Transpose, Transpose, int, int, int, float, const __half*, int, const __half*,
                                         int, float*, int, HgemmEpilogue)>;

// Every leading dimension a multiple of 8 (steps 2–3: 16-byte copies) and ceil(1288/128) · ceil(1416/128) = 11 · 12
// = 132 output tiles (128×128 tiles): the paths the large timed shapes take. (kAlignedShape's sizes are multiples of
// 4 only.)
constexpr ValidationShape kHgemmAlignedShape{1288, 1416, 40};

// Against the float64 reference on the same fp16 values (exact in float). Each product of two fp16 values is exact
// in fp32, and each of the K fp32 additions errs by at most 2^-24 of a partial sum, itself at most Σ|a·b| ≤ K for
// inputs in [-1, 1]; 6 more roundings cover the tensor cores' block-wise additions and the epilogue (the
// derivation is in tests/test_kernels_hgemm.cu): |error| ≤ (K + 6)·2^-24·(K + 1), the 1 for the bias.
bool validate_hgemm(const char* name, const HgemmFunction& hgemm_fn, bool epilogue_supported, ValidationShape shape) {
    bool ok = true;
    const int M = shape.M, N = shape.N, K = shape.K;
    for (Transpose ta : {Transpose::no, Transpose::yes}) {
        for (Transpose tb : {Transpose::no, Transpose::yes}) {
            const bool trans_a = ta == Transpose::yes, trans_b = tb == Transpose::yes;
            const int lda = trans_a ? M : K, ldb = trans_b ? K : N;
            const std::vector<__half> a = to_halves(random_floats(static_cast<size_t>(M) * K));
            const std::vector<__half> b = to_halves(random_floats(static_cast<size_t>(K) * N));
            const std::vector<__half> bias = to_halves(random_floats(N));
            DeviceBuffer<__half> d_a(a), d_b(b), d_bias(bias);
            DeviceBuffer<float> d_c(static_cast<size_t>(M) * N);
            const bool fuse = epilogue_supported && !trans_a && !trans_b;  // the forward GEMM: bias + ReLU
            hgemm_fn(ta, tb, M, N, K, 1.0f, d_a.get(), lda, d_b.get(), ldb, d_c.get(), N,
                     HgemmEpilogue{fuse ? d_bias.get() : nullptr, fuse});
            std::vector<double> ref(static_cast<size_t>(M) * N);
            reference::gemm<float, double>(trans_a, trans_b, M, N, K, 1.0, to_floats(a).data(), lda,
                                           to_floats(b).data(), ldb, 0.0, ref.data(), N);
            if (fuse) {
                for (int r = 0; r < M; ++r) {
                    for (int c = 0; c < N; ++c) ref[r * N + c] = std::max(ref[r * N + c] + __half2float(bias[c]), 0.0);
                }
            }
            const std::string what = std::string(name) + (trans_a ? " T" : " N") + (trans_b ? "T" : "N");
            ok = report_mismatches(what.c_str(), d_c.download(), ref, (K + 6) * std::ldexp(1.0, -24) * (K + 1), 0.0) &&
                 ok;
        }
    }
    return ok;
}

// One shape: every chosen HGEMM step (and cuBLAS in the cuda flavor), output type OutT, rows printed as bench_gemm
// prints them. top_step_percent: the top step's % of cuBLAS at 4096³ (stream timing), when measured.
template <typename OutT>
void bench_hgemm_shape(const TimingPlan& plan, size_t l2, const GemmShape& s, const std::vector<int>& versions,
                       double& top_step_percent) {
    const bool ta = s.op_a == Transpose::yes, tb = s.op_b == Transpose::yes;
    const int lda = ta ? s.M : s.K, ldb = tb ? s.K : s.N, ldc = s.N;
    const size_t a_count = static_cast<size_t>(s.M) * s.K, b_count = static_cast<size_t>(s.K) * s.N,
                 c_count = static_cast<size_t>(s.M) * s.N;
    const size_t set_bytes = (a_count + b_count) * sizeof(__half) + c_count * sizeof(OutT);
    // Enough sets that cycling through them touches more than 2× the L2 cache between two uses of one set.
    const int sets = static_cast<int>(std::clamp<size_t>(l2 == 0 ? 1 : (2 * l2) / set_bytes + 1, 1, 256));
    std::vector<std::unique_ptr<DeviceBuffer<__half>>> a, b;
    std::vector<std::unique_ptr<DeviceBuffer<OutT>>> c;
    for (int i = 0; i < sets; ++i) {
        a.push_back(std::make_unique<DeviceBuffer<__half>>(to_halves(random_floats(a_count))));
        b.push_back(std::make_unique<DeviceBuffer<__half>>(to_halves(random_floats(b_count))));
        c.push_back(std::make_unique<DeviceBuffer<OutT>>(c_count));
    }
    DeviceBuffer<__half> bias(to_halves(random_floats(s.N)));
    const HgemmEpilogue epilogue{s.bias_relu ? bias.get() : nullptr, s.bias_relu};
    const double flop = 2.0 * s.M * s.N * s.K;
    const auto gflops = [&](const Timing& t) { return flop / (t.median_ms * 1e6); };

    // [0]: launch timing, [1]: stream timing (cuda flavor only).
    const int timings = kCpuBackend ? 1 : 2;
    double cublas_gflops[2] = {0.0, 0.0};
#if !defined(CUDA_TEACH_CPU)
    const std::function<void(int)> run_cublas = [&](int i) {
        const int k = i % sets;
        cublas_hgemm(s.op_a, s.op_b, s.M, s.N, s.K, 1.0f, a[k]->get(), lda, b[k]->get(), ldb, c[k]->get(), ldc);
    };
    const Timing cublas_single = time_runs(plan, run_cublas);
    cublas_gflops[0] = gflops(cublas_single);
    const int cublas_launches = stream_launches(cublas_single);  // 1 for long kernels: the same measurement
    cublas_gflops[1] = cublas_launches == 1 ? cublas_gflops[0] : gflops(time_runs(plan, run_cublas, cublas_launches));
#endif
    std::vector<double> step_gflops[2];
    for (int v : versions) {
        const HgemmVersion version = hgemm_version_from_int(v);
        const std::function<void(int)> run = [&](int i) {
            const int k = i % sets;
            hgemm(version, s.op_a, s.op_b, s.M, s.N, s.K, 1.0f, a[k]->get(), lda, b[k]->get(), ldb, c[k]->get(), ldc,
                  epilogue);
        };
        const Timing single = time_runs(plan, run);
        step_gflops[0].push_back(gflops(single));
        if (timings == 2) {
            const int launches = stream_launches(single);  // 1 for long kernels: the same measurement
            step_gflops[1].push_back(launches == 1 ? gflops(single) : gflops(time_runs(plan, run, launches)));
        }
    }
    for (int t = 0; t < timings; ++t) {
        if (t == 0) {
            std::printf("  %-22s %5d %5d %5d %-4s ", s.name.c_str(), s.M, s.N, s.K,
                        std::is_same_v<OutT, float> ? "fp32" : "fp16");
        } else {
            std::printf("  %-22s %5s %5s %5s %-4s ", "", "", "", "", "");
        }
        std::printf("%-6s ", t == 0 ? "launch" : "stream");
        for (size_t i = 0; i < versions.size(); ++i) {
            const double g = step_gflops[t][i];
            if (kCpuBackend) {
                std::printf("| %8.3f           ", g);
            } else {
                std::printf("| %8.0f (%4.0f%%)   ", g, 100.0 * g / cublas_gflops[t]);
            }
            if (t == timings - 1 && s.M == 4096 && hgemm_version_from_int(versions[i]) == kFastestHgemm) {
                top_step_percent = 100.0 * g / cublas_gflops[t];
            }
        }
        if (!kCpuBackend) std::printf("| %8.0f ", cublas_gflops[t]);
        std::printf("| %d\n", sets);
    }
    std::fflush(stdout);
}

void bench_hgemm(const Options& options, const std::vector<int>& versions) {
    const TimingPlan plan = timing_plan(options);
    const size_t l2 = l2_bytes();
    std::printf("\nHGEMM, tensor cores, fp16 in, fp32 accumulation: GFLOP/s (median of runs)%s\n",
                kCpuBackend ? " (CPU backend: launches are synchronous, so one timing: a lone launch)"
                            : "; in brackets: % of cuBLAS (cublasGemmEx, fp16 in, CUBLAS_COMPUTE_32F) on the same\n"
                              "  shape, output type and timing. launch: one synchronized launch per sample; stream:"
                              " back-to-back launches / count");
    std::printf("  %-22s %5s %5s %5s %-4s %-6s ", "shape", "M", "N", "K", "out", "timing");
    for (int v : versions) std::printf("| %d %-17s", v, hgemm_version_name(hgemm_version_from_int(v)));
    if (!kCpuBackend) std::printf("| %-9s", "cuBLAS");
    std::printf("| sets\n");

    double top_step_percent = -1.0;
    for (const GemmShape& s : gemm_shapes()) {
        // What the mixed-precision lessons write: fp32 weight gradients, fp16 activations and input gradients.
        if (s.op_a == Transpose::yes) {
            bench_hgemm_shape<float>(plan, l2, s, versions, top_step_percent);
        } else {
            bench_hgemm_shape<__half>(plan, l2, s, versions, top_step_percent);
        }
    }
    if (!kCpuBackend) {
        std::printf(
            "  (forward shapes of hidden layers include our fused bias + ReLU epilogue; cuBLAS does the bare "
            "GEMM)\n");
        if (top_step_percent >= 0.0) {
            std::printf("  %s (HGEMM step %d, the top) at 4096^3: %.0f%% of cuBLAS (stream timing; no goal set)\n",
                        hgemm_version_name(kFastestHgemm), kHgemmVersionCount, top_step_percent);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Memory-bound kernels

bool validate_memory_bound() {
    bool ok = true;
    const size_t n = 10007;
    // normalize
    {
        const std::vector<uint8_t> pixels = random_bytes(n);
        DeviceBuffer<uint8_t> d_pixels(pixels);
        DeviceBuffer<float> d_out(n);
        normalize_pixels(d_pixels.get(), d_out.get(), n);
        std::vector<double> ref(n);
        reference::normalize_pixels(n, pixels.data(), ref.data(), reference::kMnistMean, reference::kMnistStd);
        ok = report_mismatches("normalize_pixels", d_out.download(), ref, 1e-6, 1e-6) && ok;
    }
    // relu forward / backward
    {
        const std::vector<float> x = random_floats(n), dy = random_floats(n);
        DeviceBuffer<float> d_x(x), d_dy(dy), d_y(n), d_dx(n);
        relu_forward(d_x.get(), d_y.get(), n);
        relu_backward(d_dy.get(), d_y.get(), d_dx.get(), n);
        std::vector<double> y(n), dx(n);
        const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
        reference::relu_forward(n, xd.data(), y.data());
        reference::relu_backward(n, dyd.data(), y.data(), dx.data());
        ok = report_mismatches("relu_forward", d_y.download(), y, 0.0, 0.0) && ok;
        ok = report_mismatches("relu_backward", d_dx.download(), dx, 0.0, 0.0) && ok;
    }
    // bias add and bias gradient
    {
        const int rows = 97, cols = 103;
        const std::vector<float> y = random_floats(rows * cols), bias = random_floats(cols);
        DeviceBuffer<float> d_y(y), d_bias(bias), d_db(cols);
        bias_add(d_bias.get(), d_y.get(), rows, cols, cols);
        bias_grad(d_y.get(), d_db.get(), rows, cols, cols);
        std::vector<double> yd(y.begin(), y.end()), bd(bias.begin(), bias.end()), db(cols);
        reference::bias_add(rows, cols, bd.data(), yd.data(), cols);
        reference::bias_grad(rows, cols, yd.data(), cols, db.data());
        ok = report_mismatches("bias_add", d_y.download(), yd, 1e-6, 1e-6) && ok;
        ok = report_mismatches("bias_grad", d_db.download(), db, 1e-4, 1e-5) && ok;
    }
    // the two-pass bias gradient over several row chunks (1001 rows: 4 chunks, the last partial)
    {
        const int rows = 1001, cols = 103;
        const std::vector<float> dy = random_floats(static_cast<size_t>(rows) * cols);
        const size_t workspace_floats = bias_grad_workspace_floats(rows, cols);
        DeviceBuffer<float> d_dy(dy), d_db(cols), workspace(workspace_floats);
        bias_grad_two_pass(d_dy.get(), d_db.get(), rows, cols, cols, 0.0f, workspace.get(), workspace_floats);
        const std::vector<double> dyd(dy.begin(), dy.end());
        std::vector<double> db(cols);
        reference::bias_grad(rows, cols, dyd.data(), cols, db.data());
        ok = report_mismatches("bias_grad_two_pass", d_db.download(), db, 1e-4, 1e-5) && ok;
    }
    // softmax cross-entropy and count_correct
    {
        const int batch = 1001, classes = 10;
        const std::vector<float> logits = random_floats(static_cast<size_t>(batch) * classes, -5.0f, 5.0f);
        const std::vector<uint8_t> labels = random_bytes(batch, classes - 1);
        DeviceBuffer<float> d_logits(logits), d_dlogits(logits.size()), d_rows(batch), d_loss(1);
        DeviceBuffer<uint8_t> d_labels(labels);
        DeviceBuffer<int> d_correct(1);
        CUDA_CHECK(cudaMemset(d_correct.get(), 0, sizeof(int)));
        softmax_cross_entropy(d_logits.get(), d_labels.get(), d_dlogits.get(), d_rows.get(), d_loss.get(), batch,
                              classes);
        count_correct(d_logits.get(), d_labels.get(), d_correct.get(), batch, classes);
        const std::vector<double> ld(logits.begin(), logits.end());
        std::vector<double> dl(logits.size());
        const double loss =
            reference::softmax_cross_entropy(batch, classes, ld.data(), classes, labels.data(), dl.data());
        ok = report_mismatches("softmax_cross_entropy loss", d_loss.download(), {loss}, 1e-5, 1e-5) && ok;
        ok = report_mismatches("softmax_cross_entropy dlogits", d_dlogits.download(), dl, 1e-8, 1e-5) && ok;
        const int correct = reference::count_correct(batch, classes, logits.data(), classes, labels.data());
        ok = report_mismatches("count_correct", {static_cast<float>(d_correct.download()[0])}, {double(correct)}, 0,
                               0) &&
             ok;
    }
    // optimizers, one step each
    {
        const std::vector<float> p = random_floats(n), g = random_floats(n), m = random_floats(n, -0.1f, 0.1f);
        const std::vector<float> v = random_floats(n, 0.0f, 0.01f);
        DeviceBuffer<float> d_p(p), d_g(g), d_m(m), d_v(v), d_p2(p), d_vel(m);
        const SgdParams sgd{0.05f, 0.9f, 1e-4f};
        const AdamWParams adamw{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
        sgd_momentum_step(d_p2.get(), d_g.get(), d_vel.get(), n, sgd);
        adamw_step(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, adamw, 3);
        std::vector<double> pd(p.begin(), p.end()), gd(g.begin(), g.end()), md(m.begin(), m.end()),
            vd(v.begin(), v.end()), p2(p.begin(), p.end()), vel(m.begin(), m.end());
        reference::sgd_momentum_step(n, p2.data(), gd.data(), vel.data(), sgd.lr, sgd.momentum, sgd.weight_decay);
        reference::adamw_step(n, pd.data(), gd.data(), md.data(), vd.data(), adamw.lr, adamw.beta1, adamw.beta2,
                              adamw.eps, adamw.weight_decay, 3);
        ok = report_mismatches("sgd_momentum_step", d_p2.download(), p2, 1e-6, 1e-5) && ok;
        ok = report_mismatches("adamw_step", d_p.download(), pd, 1e-6, 1e-5) && ok;
    }
    return ok;
}

void bench_memory_bound(const Options& options) {
    const TimingPlan plan = timing_plan(options);
    // Working sets far larger than L2 on a GPU (64 Mi floats = 256 MiB per array).
    const size_t n = kCpuBackend ? (size_t{1} << 18) : (options.quick ? (size_t{1} << 24) : (size_t{1} << 26));
    const int cols = 1024, rows = static_cast<int>(n / cols);
    const int classes = 10, batch = static_cast<int>(n / classes);

    DeviceBuffer<float> x(random_floats(n)), y(n), z(random_floats(n)), w(random_floats(n, 0.0f, 1.0f)), u(n);
    DeviceBuffer<uint8_t> pixels(random_bytes(n));
    DeviceBuffer<uint8_t> labels(random_bytes(batch, classes - 1));
    DeviceBuffer<float> bias(random_floats(cols)), row_losses(batch), loss(1);
    DeviceBuffer<int> correct(1);
    CUDA_CHECK(cudaMemset(u.get(), 0, u.bytes()));
    CUDA_CHECK(cudaMemset(correct.get(), 0, sizeof(int)));

    const Timing copy = time_runs(
        plan, [&](int) { CUDA_CHECK(cudaMemcpyAsync(y.get(), x.get(), n * sizeof(float), cudaMemcpyDeviceToDevice)); });
    const double copy_gbs = 2.0 * n * sizeof(float) / (copy.median_ms * 1e6);
    std::printf(
        "\nMemory-bound kernels: GB/s = bytes the kernel must move / median time; %% of the copy "
        "bandwidth%s\n",
        kCpuBackend ? ""
                    : " (goal: >= 80% for normalize, ReLUs, bias_add, softmax, bias_grad two-pass, optimizers; not the "
                      "one-pass bias_grad: its ceil(cols / 32) = 32 blocks cannot fill the GPU)");
    std::printf("  %-44s %12s %10s %9s %8s\n", "kernel", "size", "time (us)", "GB/s", "% copy");
    const auto row = [&](const char* name, const std::string& size, double bytes, const Timing& t) {
        const double gbs = bytes / (t.median_ms * 1e6);
        std::printf("  %-44s %12s %10.1f %9.1f %7.0f%%\n", name, size.c_str(), t.median_ms * 1e3, gbs,
                    100.0 * gbs / copy_gbs);
    };
    const std::string n_str = std::to_string(n);
    row("cudaMemcpy device to device (read + write)", n_str, 2.0 * n * 4, copy);

    row("normalize_pixels (1 B in, 4 B out)", n_str, 5.0 * n,
        time_runs(plan, [&](int) { normalize_pixels(pixels.get(), y.get(), n); }));
    row("relu_forward", n_str, 8.0 * n, time_runs(plan, [&](int) { relu_forward(x.get(), y.get(), n); }));
    row("relu_backward", n_str, 12.0 * n, time_runs(plan, [&](int) { relu_backward(z.get(), x.get(), y.get(), n); }));
    row("bias_add (rows x 1024)", std::to_string(rows) + "x1024", 8.0 * n,
        time_runs(plan, [&](int) { bias_add(bias.get(), y.get(), rows, cols, cols); }));
    // The loss pass proper; the mean over rows is a single-block reduction, timed below at a training batch.
    row("softmax_cross_entropy, rows only (10 classes)", std::to_string(batch) + "x10",
        batch * (10.0 * 4 + 1 + 10.0 * 4 + 4), time_runs(plan, [&](int) {
            softmax_cross_entropy(x.get(), labels.get(), y.get(), row_losses.get(), static_cast<float*>(nullptr), batch,
                                  classes);
        }));
    row("count_correct (10 classes)", std::to_string(batch) + "x10", batch * (10.0 * 4 + 1),
        time_runs(plan, [&](int) { count_correct(x.get(), labels.get(), correct.get(), batch, classes); }));
    row("bias_grad one-pass (rows x 1024, column sums)", std::to_string(rows) + "x1024", 4.0 * n,
        time_runs(plan, [&](int) { bias_grad(x.get(), bias.get(), rows, cols, cols); }));
    // Bytes: the input once, plus the partials written by pass 1 and read by pass 2 (1/256 of the input each).
    const size_t workspace_floats = bias_grad_workspace_floats(rows, cols);
    DeviceBuffer<float> workspace(workspace_floats);
    row("bias_grad two-pass (rows x 1024, column sums)", std::to_string(rows) + "x1024",
        4.0 * n + 8.0 * workspace_floats, time_runs(plan, [&](int) {
            bias_grad_two_pass(x.get(), bias.get(), rows, cols, cols, 0.0f, workspace.get(), workspace_floats);
        }));
    row("sgd_momentum_step (p, g, v in; p, v out)", n_str, 20.0 * n, time_runs(plan, [&](int) {
            sgd_momentum_step(y.get(), z.get(), u.get(), n, SgdParams{1e-6f, 0.9f, 0.0f});
        }));
    row("adamw_step (p, g, m, v in; p, m, v out)", n_str, 28.0 * n,
        time_runs(plan, [&](int) { adamw_step(y.get(), z.get(), u.get(), w.get(), n, AdamWParams{1e-6f}, 1); }));

    // At a training batch these kernels are launch-bound: report time, not bandwidth.
    const int train_batch = 1024;
    const Timing loss_step = time_runs(plan, [&](int) {
        softmax_cross_entropy(x.get(), labels.get(), y.get(), row_losses.get(), loss.get(), train_batch, classes);
    });
    std::printf("  softmax_cross_entropy + mean loss at batch %d: %.1f us%s\n", train_batch, loss_step.median_ms * 1e3,
                kCpuBackend ? "" : " (launch-bound at this size)");
}

// One launch of each chosen GEMM and HGEMM step at 256×256×256, no transposes, 16-byte aligned, the 64×64 block tile
// forced (the launchers otherwise pick it by SM count, so a GPU and the CPU backend would run different tiles). In
// the counting build each row holds that launch's counts; elsewhere only the names (a profiler measures them).
constexpr int kOnceSize = 256;
std::vector<KernelAccessCounts> run_each_step_once(const std::vector<int>& versions,
                                                   const std::vector<int>& hgemm_versions,
                                                   std::vector<std::string>& kernels) {
    constexpr int n = kOnceSize;
    const auto no = Transpose::no;
    DeviceBuffer<float> a(random_floats(size_t(n) * n)), b(random_floats(size_t(n) * n)), c(size_t(n) * n);
    std::vector<KernelAccessCounts> rows;
    const auto counted = [&rows, &kernels](const std::string& step) {
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<KernelAccessCounts> launched = access_counts();
        kernels.push_back(launched.empty() ? std::string() : launched.front().kernel);
        KernelAccessCounts k = total_access_counts();
        k.kernel = step;
        rows.push_back(k);
        reset_access_counts();
    };
    reset_access_counts();
    for (int v : versions) {
        const GemmVersion version = gemm_version_from_int(v);
        if (v == 4)
            gemm_register_blocked_with_tile(GemmBlockTile::t64, no, no, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f,
                                            c.get(), n, {}, nullptr);
        else if (v == 5)
            gemm_vectorized_with_tile(GemmBlockTile::t64, no, no, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f,
                                      c.get(), n, {}, nullptr);
        else if (v == 6)
            gemm_double_buffered_with_tile(GemmBlockTile::t64, no, no, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f,
                                           c.get(), n, {}, nullptr);
        else if (v == 7)  // its design point: 4 warps of 64×64, 8×16 outputs per lane (64×64 tiles give 4×8)
            gemm_warp_tiled_with_tile(GemmBlockTile::t128, no, no, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f,
                                      c.get(), n, {}, nullptr);
        else
            gemm(version, no, no, n, n, n, 1.0f, a.get(), n, b.get(), n, 0.0f, c.get(), n);
        counted("gemm " + std::to_string(v) + " " + gemm_version_name(version));
    }
    DeviceBuffer<__half> ah(size_t(n) * n), bh(size_t(n) * n);
    {
        const std::vector<float> af = random_floats(size_t(n) * n), bf = random_floats(size_t(n) * n);
        std::vector<__half> a16(af.size()), b16(bf.size());
        for (size_t i = 0; i < af.size(); ++i) a16[i] = __float2half(af[i]), b16[i] = __float2half(bf[i]);
        ah.upload(a16);
        bh.upload(b16);
    }
    for (int v : hgemm_versions) {
        const HgemmVersion version = hgemm_version_from_int(v);
        if (v == 2)
            hgemm_block_tile_with_tile(GemmTile::t64, no, no, n, n, n, 1.0f, ah.get(), n, bh.get(), n, c.get(), n, {},
                                       nullptr);
        else if (v == 3)
            hgemm_pipelined_with_tile(GemmTile::t64, no, no, n, n, n, 1.0f, ah.get(), n, bh.get(), n, c.get(), n, {},
                                      nullptr);
        else
            hgemm(version, no, no, n, n, n, 1.0f, ah.get(), n, bh.get(), n, c.get(), n);
        counted("hgemm " + std::to_string(v) + " " + hgemm_version_name(version));
    }
    return rows;
}

// The counting build: the GEMM staircase as the figures that make it fast on a GPU.
void print_staircase_counts(const std::vector<KernelAccessCounts>& steps) {
    const double fmas = double(kOnceSize) * kOnceSize * kOnceSize;
    std::printf("\nGEMM and HGEMM steps at %d^3, one launch each (64x64 block tiles; GEMM step 7 128x128): memory "
                "requests counted per warp instruction (the counting build)\n",
                kOnceSize);
    std::printf("  %-22s %14s %12s %14s %14s %15s %15s %12s\n", "step", "global ld req", "sectors/req",
                "global sectors", "shared ld req", "wavefronts/req", "bank conflicts", "FMA/shld req");
    for (const KernelAccessCounts& k : steps) {
        std::printf("  %-22s %14llu %12.2f %14llu %14llu %15s %15llu %12s\n", k.kernel.c_str(),
                    (unsigned long long)k.global_load.requests, k.global_load.per_request(),
                    (unsigned long long)(k.global_load.transactions + k.global_store.transactions),
                    (unsigned long long)k.shared_load.requests,
                    k.shared_load.requests ? fixed(k.shared_load.per_request(), 2).c_str() : "-",
                    (unsigned long long)(k.shared_load.replays() + k.shared_store.replays()),
                    k.shared_load.requests ? fixed(fmas / double(k.shared_load.requests), 1).c_str() : "-");
    }
    std::printf("\n%s", render_access_counts(steps).c_str());
}

void write_counts_csv(const std::string& path, const std::vector<KernelAccessCounts>& steps,
                      const std::vector<std::string>& kernels) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
        std::fprintf(stderr, "bench: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        std::exit(1);
    }
    std::fprintf(f, "step,kernel,global_ld_requests,global_ld_sectors,global_st_requests,global_st_sectors,"
                    "shared_ld_requests,shared_ld_wavefronts,shared_st_requests,shared_st_wavefronts,"
                    "shared_ld_conflicts,shared_st_conflicts\n");
    for (size_t i = 0; i < steps.size(); ++i) {
        const KernelAccessCounts& k = steps[i];
        std::string kernel = i < kernels.size() ? kernels[i] : "";  // quoted: template arguments hold commas
        std::fprintf(f, "%s,\"%s\",%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", k.kernel.c_str(),
                     kernel.c_str(),
                     (unsigned long long)k.global_load.requests, (unsigned long long)k.global_load.transactions,
                     (unsigned long long)k.global_store.requests, (unsigned long long)k.global_store.transactions,
                     (unsigned long long)k.shared_load.requests, (unsigned long long)k.shared_load.transactions,
                     (unsigned long long)k.shared_store.requests, (unsigned long long)k.shared_store.transactions,
                     (unsigned long long)k.shared_load.replays(), (unsigned long long)k.shared_store.replays());
    }
    if (std::fclose(f) != 0) {
        std::fprintf(stderr, "bench: writing %s failed\n", path.c_str());
        std::exit(1);
    }
}

void print_memory_bound_counts(const std::vector<KernelAccessCounts>& memory_bound) {
    std::printf("\nThe other kernels, as the validation ran them (sizes 10007, 97 x 103, 1001 x 103, 1001 x 10):\n%s",
                render_access_counts(memory_bound).c_str());
    std::printf(
        "\nsectors/req: 32-byte sectors per warp request (4 = 32 coalesced floats; 16 = 32 coalesced float4s; 32 = a "
        "sector per lane); ideal: the same bytes packed.\nwavefronts/req: shared-memory passes per request (1 per "
        "128 bytes when conflict-free); bank conflicts: the extra passes.\nNo timings in this build: its "
        "instrumentation costs more than the kernels (build/cpu or a GPU times them).\n");
}

}  // namespace

// The work model of one GEMM (arithmetic from the launch plans, not a measurement): per step, the block tile, the K
// slices, the blocks and warps the grid has, warps per SM if spread evenly, and the k-steps one block walks in a row
// (its critical path: each waits on its tiles and a barrier). Steps 1–2 have no k-steps (a thread walks all of K).
void print_gemm_work_model(int M, int N, int K, int sm_count) {
    std::printf("\nWork model of the %dx%dx%d GEMM on %d SMs (arithmetic from the launch plans, not a measurement):\n",
                M, N, K, sm_count);
    std::printf("  %-22s %8s %7s %8s %8s %9s %10s\n", "step", "tile", "slices", "blocks", "warps", "warps/SM",
                "k-steps");
    const auto row = [&](const char* step, int tile, int slices, long long blocks, int warps_per_block, int k_steps) {
        const long long warps = blocks * warps_per_block;
        std::printf("  %-22s %4dx%-4d %7d %8lld %8lld %9.1f %6d%s\n", step, tile, tile, slices, blocks, warps,
                    double(warps) / sm_count, k_steps, slices > 1 ? " + 1 reduction" : "");
    };
    // Step 3: 32×32 tiles of 32×32 threads, 32 k per step, never split.
    row("3 smem_tiled", 32, 1, (long long)cuda_teach::ceil_div(M, 32) * cuda_teach::ceil_div(N, 32), 32,
        cuda_teach::ceil_div(K, 32));
    for (int v = static_cast<int>(GemmVersion::register_blocked); v <= kGemmVersionCount; ++v) {
        const auto warps = v == static_cast<int>(GemmVersion::warp_tiled) ? gemm_warp_tiled_warps
                                                                          : gemm_register_blocked_warps;
        const GemmPlan plan = choose_gemm_plan(M, N, K, sm_count, warps);
        char step[32];
        std::snprintf(step, sizeof step, "%d %s", v, gemm_version_name(gemm_version_from_int(v)));
        row(step, static_cast<int>(plan.tile), plan.split.splits,
            gemm_block_count(plan.tile, M, N) * plan.split.splits, warps(plan.tile),
            cuda_teach::ceil_div(plan.split.k_slice, 8));
    }
}

int main(int argc, char** argv) {
    const Options options = parse_options(argc, argv);
    require_device_or_exit("bench");
    std::printf("bench: %s\n", device_summary().c_str());
    if (!options.once) {  // the lessons' forward at batch 128 on an H100 SXM / H200, and on this device
        print_gemm_work_model(128, 1024, 784, 132);
        if (const int sm_count = gemm_sm_count(); sm_count != 132) print_gemm_work_model(128, 1024, 784, sm_count);
    }
    if (kCpuBackend) {
        std::printf(
            "NOTE: these are CPU-backend figures (kernels emulated on the CPU, one fiber per CUDA thread): "
            "small sizes, 256^3 instead of 4096^3, few runs. They say nothing about GPU performance.\n");
    }

    std::vector<int> versions;
    for (int v = 1; v <= kGemmVersionCount; ++v) {
        if (options.only_version == 0 || options.only_version == v) versions.push_back(v);
    }
    std::vector<int> hgemm_versions;
    for (int v = 1; v <= kHgemmVersionCount; ++v) {
        if (options.only_hgemm_version == 0 || options.only_hgemm_version == v) hgemm_versions.push_back(v);
    }
    if (options.once) {
        std::vector<std::string> kernels;
        const std::vector<KernelAccessCounts> steps = run_each_step_once(versions, hgemm_versions, kernels);
        if (access_counting_available()) {
            print_staircase_counts(steps);
            if (!options.csv.empty()) write_counts_csv(options.csv, steps, kernels);
        } else {
            if (!options.csv.empty()) {
                std::fprintf(stderr, "bench: --csv needs the counting build (build/cpu-counters): nothing counts here\n");
                return 2;
            }
            std::printf("ran each GEMM and HGEMM step once at %d^3 (64x64 block tiles; GEMM step 7 128x128), for a "
                        "profiler\n",
                        kOnceSize);
        }
        return 0;
    }

    // 1. Validate, before any timing.
    std::printf(
        "\nValidating against the float64 reference (all transposes; M=131 N=67 K=97, and M=2180 N=2052 K=20%s "
        "or, for HGEMM, M=1288 N=1416 K=40):\n",
        kCpuBackend ? " for GEMM steps 4-7 only" : "");
    bool ok = true;
    for (int v : versions) {
        const GemmVersion version = gemm_version_from_int(v);
        const GemmFunction fn = [version](Transpose ta, Transpose tb, int M, int N, int K, float alpha, const float* A,
                                          int lda, const float* B, int ldb, float beta, float* C, int ldc,
                                          GemmEpilogue e) {
            gemm(version, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, e);
        };
        bool good = validate_gemm(gemm_version_name(version), fn, true, kOddShape);
        if (!kCpuBackend || v >= static_cast<int>(GemmVersion::register_blocked)) {
            good = validate_gemm(gemm_version_name(version), fn, true, kAlignedShape) && good;
        }
        std::printf("  gemm %d %-16s %s\n", v, gemm_version_name(version), good ? "ok" : "WRONG");
        ok = ok && good;
    }
#if !defined(CUDA_TEACH_CPU)
    const GemmFunction cublas_fn = [](Transpose ta, Transpose tb, int M, int N, int K, float alpha, const float* A,
                                      int lda, const float* B, int ldb, float beta, float* C, int ldc, GemmEpilogue) {
        cublas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    };
    const bool cublas_ok = validate_gemm("cublas", cublas_fn, false, kOddShape) &&
                           validate_gemm("cublas", cublas_fn, false, kAlignedShape);
    std::printf("  %-23s %s\n", "cuBLAS (row-major wrap)", cublas_ok ? "ok" : "WRONG");
    ok = ok && cublas_ok;
#endif
    for (int v : hgemm_versions) {
        const HgemmVersion version = hgemm_version_from_int(v);
        const HgemmFunction fn = [version](Transpose ta, Transpose tb, int M, int N, int K, float alpha,
                                           const __half* A, int lda, const __half* B, int ldb, float* C, int ldc,
                                           HgemmEpilogue e) {
            hgemm(version, ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, e);
        };
        const bool good = validate_hgemm(hgemm_version_name(version), fn, true, kOddShape) &&
                          validate_hgemm(hgemm_version_name(version), fn, true, kHgemmAlignedShape);
        std::printf("  hgemm %d %-15s %s\n", v, hgemm_version_name(version), good ? "ok" : "WRONG");
        ok = ok && good;
    }
#if !defined(CUDA_TEACH_CPU)
    const HgemmFunction cublas_hgemm_fn =
        [](Transpose ta, Transpose tb, int M, int N, int K, float alpha, const __half* A, int lda, const __half* B,
           int ldb, float* C, int ldc, HgemmEpilogue) { cublas_hgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc); };
    const bool cublas_hgemm_ok = validate_hgemm("cublas hgemm", cublas_hgemm_fn, false, kOddShape) &&
                                 validate_hgemm("cublas hgemm", cublas_hgemm_fn, false, kHgemmAlignedShape);
    std::printf("  %-23s %s\n", "cuBLAS HGEMM (GemmEx)", cublas_hgemm_ok ? "ok" : "WRONG");
    ok = ok && cublas_hgemm_ok;
#endif
    reset_access_counts();
    const bool memory_ok = validate_memory_bound();
    const std::vector<KernelAccessCounts> memory_bound_counts = access_counts();
    std::printf("  %-23s %s\n", "memory-bound kernels", memory_ok ? "ok" : "WRONG");
    ok = ok && memory_ok;
    if (!ok) {
        std::fprintf(stderr, "bench: validation failed; not timing wrong kernels\n");
        return EXIT_FAILURE;
    }
    if (access_counting_available()) {
        std::vector<std::string> kernels;
        print_staircase_counts(run_each_step_once(versions, hgemm_versions, kernels));
        print_memory_bound_counts(memory_bound_counts);
        return 0;
    }

    // 2. Time.
    bench_gemm(options, versions);
    bench_hgemm(options, hgemm_versions);
    bench_memory_bound(options);
    return 0;
}
