// Plain CUDA in the style of NVIDIA's cuda-samples: it includes only <cstdio> (nvcc 13 declares no host printf),
// relying on what nvcc gives every .cu file (<cuda_runtime.h> and the C headers it pulls in: exit, memset), a helper
// that defines its error-checking macro only `#ifdef __CUDA_RUNTIME_H__` (as Common/helper_cuda.h does), a host
// fallback `#ifndef __CUDACC__` (as Common/helper_math.h has), and CUDA's math API and integer intrinsics called from
// a kernel, each checked against its documented value. tests/nvcc_cpu_test.sh compiles it with tools/nvcc-cpu,
// unmodified, and runs it.

#include <cstdio>

// --- the helper, as a samples' header writes it ---
#ifdef __CUDA_RUNTIME_H__
template <typename T>
void check(T result, char const* const func, const char* const file, int const line) {
    if (result) {
        fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\" \n", file, line, static_cast<unsigned int>(result),
                cudaGetErrorName(result), func);
        exit(EXIT_FAILURE);
    }
}
#define checkCudaErrors(val) check((val), #val, __FILE__, __LINE__)
#endif

#ifndef __CUDACC__
inline float rsqrtf(float x) {
    return 1.0f / sqrtf(x);
}  // nvcc defines __CUDACC__: this is not compiled
#endif

#define CHECKS 40

__device__ int bits_of(float x) {
    return __float_as_int(x);
}
// GPU approximations are within a few ulp: compare with a tolerance where CUDA does not promise exactness.
__device__ bool near(float a, float b) {
    return fabsf(a - b) < 1e-6f;
}

__global__ void math_api(int* ok, unsigned* word) {
    int k = 0;
    // single precision functions CUDA has beyond C's
    ok[k++] = sinpif(0.5f) == 1.0f && sinpif(1.0f) == 0.0f && cospif(0.5f) == 0.0f && cospif(1.0f) == -1.0f;
    float s, c;
    sincospif(0.25f, &s, &c);
    ok[k++] = fabsf(s - 0.70710678f) < 1e-6f && fabsf(c - 0.70710678f) < 1e-6f;
    sincosf(0.0f, &s, &c);
    ok[k++] = s == 0.0f && c == 1.0f;
    ok[k++] = fabsf(erfinvf(erff(0.3f)) - 0.3f) < 1e-6f && fabsf(erfcinvf(erfcf(2.5f)) - 2.5f) < 1e-5f;
    ok[k++] = near(normcdff(0.0f), 0.5f) && fabsf(normcdfinvf(0.975f) - 1.959964f) < 1e-5f;
    ok[k++] = near(rsqrtf(4.0f), 0.5f) && near(rcbrtf(8.0f), 0.5f) && near(exp10f(2.0f) / 100.0f, 1.0f);
    ok[k++] = near(norm3df(2.0f, 3.0f, 6.0f) / 7.0f, 1.0f) && near(rhypotf(3.0f, 4.0f), 0.2f);
    ok[k++] = fminf(1.0f, 2.0f) == 1.0f && fmaxf(1.0f, 2.0f) == 2.0f && fmaf(2.0f, 3.0f, 1.0f) == 7.0f;
    // fast intrinsics and IEEE rounding modes
    ok[k++] = __saturatef(1.5f) == 1.0f && __saturatef(-0.5f) == 0.0f && __fdividef(1.0f, 4.0f) == 0.25f;
    ok[k++] = __frcp_rn(4.0f) == 0.25f && __fsqrt_rn(9.0f) == 3.0f && __fmaf_rn(2.0f, 3.0f, 1.0f) == 7.0f;
    ok[k++] = near(__expf(0.0f), 1.0f) && near(__logf(1.0f), 0.0f) && near(__sinf(0.0f), 0.0f) &&
              near(__cosf(0.0f), 1.0f) && near(__powf(2.0f, 3.0f) / 8.0f, 1.0f);
    ok[k++] = __fadd_rz(1.0f, 1e-8f) == 1.0f && __fadd_ru(1.0f, 1e-8f) == nextafterf(1.0f, 2.0f);
    ok[k++] = __fmul_rd(1.0f / 3.0f, 3.0f) < __fmul_ru(1.0f / 3.0f, 3.0f) && __fmul_rn(0.5f, 3.0f) == 1.5f;
    ok[k++] = __fdiv_rd(1.0f, 3.0f) < __fdiv_ru(1.0f, 3.0f) && __fsqrt_rd(2.0f) < __fsqrt_ru(2.0f);
    // conversions: round to nearest even, toward zero, down, up; saturating
    ok[k++] = __float2int_rn(2.5f) == 2 && __float2int_rn(3.5f) == 4 && __float2int_rz(-2.7f) == -2;
    ok[k++] = __float2int_rd(-2.5f) == -3 && __float2int_ru(2.1f) == 3 && __float2int_rn(1e10f) == 2147483647;
    ok[k++] = __float2uint_rn(-1.0f) == 0u && __double2int_rn(-7.5) == -8 && __float2ll_rz(1e12f) == 999999995904LL;
    ok[k++] = __int_as_float(0x3f800000) == 1.0f && bits_of(-2.0f) == (int)0xc0000000;
    ok[k++] = __double_as_longlong(1.0) == 0x3ff0000000000000LL && __hiloint2double(0x3ff00000, 0) == 1.0;
    ok[k++] = __int2float_rz(16777217) == 16777216.0f && __int2float_ru(16777217) == 16777218.0f;
    // integer intrinsics
    ok[k++] = __popc(0xF0F0u) == 8 && __popcll(0xFFFFFFFFFFull) == 40 && __clz(1) == 31 && __clzll(1LL) == 63;
    ok[k++] = __ffs(8) == 4 && __ffs(0) == 0 && __ffsll(1LL << 40) == 41;
    ok[k++] = __brev(1u) == 0x80000000u && __brevll(1ull) == 0x8000000000000000ull;
    ok[k++] = __byte_perm(0x33221100u, 0x77665544u, 0x5140u) == 0x55114400u;
    ok[k++] = __umulhi(0x80000000u, 4u) == 2u && __mulhi(-2, 0x40000000) == -1 && __mul24(3, 5) == 15;
    ok[k++] = __funnelshift_l(0x80000000u, 1u, 1u) == 3u && __funnelshift_r(1u, 1u, 1u) == 0x80000000u;
    ok[k++] = __hadd(-3, 0) == -2 && __rhadd(1, 2) == 2 && __uhadd(0xFFFFFFFFu, 1u) == 0x80000000u;
    ok[k++] = __sad(1, 4, 10u) == 13u && __usad(7u, 2u, 0u) == 5u;
    ok[k++] = min(3, 5) == 3 && max(3u, 5u) == 5u && min(2.0f, 1.0f) == 1.0f && max(-1.0, 1.0) == 1.0;
    // classification, unqualified, in device code
    const float inf = __int_as_float(0x7f800000), nan = __int_as_float(0x7fc00000);
    ok[k++] = isinf(inf) && isnan(nan) && !isfinite(nan) && isfinite(1.0f) && signbit(-0.0f) && !signbit(0.0f);
    // double precision
    ok[k++] =
        sinpi(0.5) == 1.0 && cospi(1.0) == -1.0 && fabs(rsqrt(4.0) - 0.5) < 1e-15 && fabs(normcdf(0.0) - 0.5) < 1e-15;
    ok[k++] = fabs(erfinv(erf(0.75)) - 0.75) < 1e-14 && fabs(normcdfinv(0.5)) < 1e-15;
    ok[k++] = __dadd_rz(1.0, 1e-20) == 1.0 && __dadd_ru(1.0, 1e-20) > 1.0 && __fma_rn(2.0, 3.0, 1.0) == 7.0;
    while (k < CHECKS) ok[k++] = 1;
    // bitwise atomics from every thread: each sets, clears and toggles its own bit
    atomicOr(word, 1u << (threadIdx.x % 32));
    atomicAnd(word + 1, ~(1u << (threadIdx.x % 32)));
    atomicXor(word + 2, 1u << (threadIdx.x % 32));
    atomicMax(word + 3, threadIdx.x);
    atomicMin(word + 4, threadIdx.x);
}

int main(int argc, char** argv) {
    int* d_ok;
    unsigned* d_word;
    checkCudaErrors(cudaMalloc(&d_ok, CHECKS * sizeof(int)));
    checkCudaErrors(cudaMalloc(&d_word, 5 * sizeof(unsigned)));
    const unsigned start[5] = {0u, 0xFFFFFFFFu, 0u, 0u, 0xFFFFFFFFu};
    checkCudaErrors(cudaMemcpy(d_word, start, sizeof start, cudaMemcpyHostToDevice));
    math_api<<<1, 32>>>(d_ok, d_word);
    checkCudaErrors(cudaGetLastError());
    int ok[CHECKS];
    unsigned word[5];
    checkCudaErrors(cudaMemcpy(ok, d_ok, sizeof ok, cudaMemcpyDeviceToHost));
    checkCudaErrors(cudaMemcpy(word, d_word, sizeof word, cudaMemcpyDeviceToHost));
    int failures = 0;
    for (int k = 0; k < CHECKS; ++k) {
        if (!ok[k]) {
            printf("check %d failed\n", k);
            ++failures;
        }
    }
    const unsigned expected[5] = {0xFFFFFFFFu, 0u, 0xFFFFFFFFu, 31u, 0u};
    for (int k = 0; k < 5; ++k) {
        if (word[k] != expected[k]) {
            printf("atomic word %d: %08x, expected %08x\n", k, word[k], expected[k]);
            ++failures;
        }
    }
    checkCudaErrors(cudaFree(d_ok));
    checkCudaErrors(cudaFree(d_word));
    printf(failures ? "FAILED\n" : "PASSED\n");
    exit(failures ? EXIT_FAILURE : EXIT_SUCCESS);
}
