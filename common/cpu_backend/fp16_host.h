// common/cpu_backend/fp16_host.h — the half-precision functions that CUDA's cuda_fp16.h declares for the
// device only, written for the host so that kernels using them run on the CPU backend (cpu flavor only).
//
// defines (CUDA's names, signatures and rounding):
//   fused multiply-add   __hfma, __hfma_sat, __hfma_relu, __hfma2, __hfma2_sat, __hfma2_relu, __hcmadd
//   math                 hsqrt hrsqrt hrcp hexp hexp2 hexp10 hlog hlog2 hlog10 hsin hcos htanh htanh_approx,
//                        and their __half2 forms h2sqrt, h2exp, ...
//   rounding             hrint htrunc hceil hfloor (and h2rint, ...)
//   half → integer       __half2{int,uint,short,ushort,ll,ull}_{rn,rd,ru}   (the _rz ones are in cuda_fp16.h)
//   atomics              atomicAdd(__half*, __half), atomicAdd(__half2*, __half2)
//   warp shuffles        __shfl_sync, __shfl_up/down/xor_sync of __half2 (runtime.h's templates take __half)
//
// Included by common/cpu_backend/runtime.h after <cuda_fp16.h>. Under a plain host compiler (no __CUDACC__),
// cuda_fp16.h already gives the conversions, __hadd/__hmul/__hdiv..., comparisons, operators and the __half2
// basics, all bit-exact IEEE round-to-nearest-even; it does not even declare the functions below, so there is
// no clash.
//
// Accuracy. Every function here returns the correctly rounded result (round to nearest, ties to even) of the
// exact mathematical value, like IEEE arithmetic would:
//   - __hfma is one rounding of the exact a·b + c. The exact value is formed in integers (every half is an
//     integer times 2^-24, so a·b + c is an integer times 2^-48 of at most 82 bits: it fits an unsigned
//     __int128) and rounded once. Going through float (a·b is exact in float, the addition is not) would
//     round twice: __hfma(2^-11·(1+2^-10), 1-2^-10, 1+2^-10) must be 1+2^-10, float gives 1+2^-9.
//     tests/test_fp16.cu checks it.
//   - the math functions evaluate in double, then round that double to half once. Double rounding (exact →
//     double → half) could only go wrong if the exact result lay within 2^-53 (relative) of a point halfway
//     between two halves; tests/test_fp16.cu shows, for all 65536 inputs of each function, that it never
//     does.
// On a GPU, __hfma, the rounding functions and the integer conversions are exact as well, but hsqrt, hrcp,
// hexp, ... are computed with fp32 approximation instructions and then rounded to half, so a GPU may differ
// from these in the last place (tests/test_fp16.cu allows 1 ulp against hardware, none against this file). A
// NaN result is the canonical half NaN 0x7FFF, as the hardware produces.
#pragma once

#if defined(__CUDACC__)
#error "fp16_host.h is the cpu flavor's stand-in for cuda_fp16.h's device functions; nvcc has the real ones"
#endif

#include <cuda_fp16.h>

// For warpSize and the __shfl_*_sync templates. (runtime.h includes this file at its end; #pragma once makes
// the two orders equivalent.)
#include "common/cpu_backend/runtime.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <source_location>

namespace cpu_backend::fp16 {

inline constexpr uint16_t kCanonicalNan = 0x7FFF;
inline constexpr uint16_t kPositiveInfinity = 0x7C00;

inline uint16_t bits_of(__half h) {
    return __half_as_ushort(h);
}
inline __half from_bits(uint16_t bits) {
    return __ushort_as_half(bits);
}
inline bool is_nan(__half h) {
    return (bits_of(h) & 0x7FFF) > kPositiveInfinity;
}
inline bool is_inf(__half h) {
    return (bits_of(h) & 0x7FFF) == kPositiveInfinity;
}

// Rounds (-1)^negative · magnitude · 2^exponent to the nearest half, ties to even; too large → ±infinity.
//
// The one idea: a half with biased exponent field e ≥ 1 is (1024 + mantissa) · 2^(e - 25), and a subnormal is
// mantissa · 2^-24. So with Q the exponent of the last place at the value's size (Q = E - 10 for a value in
// [2^E, 2^(E+1)), but never below -24), the rounded value is q · 2^Q for an integer q ≤ 2048, and its bit
// pattern is simply ((Q + 24) << 10) + q: that formula covers subnormals, the carry to the next power of two
// (q = 2048) and, past 65504, lands on or above the infinity pattern.
inline __half round_to_half(bool negative, unsigned __int128 magnitude, int exponent) {
    const uint16_t sign = negative ? 0x8000 : 0;
    if (magnitude == 0) return from_bits(sign);
    const uint64_t high = static_cast<uint64_t>(magnitude >> 64);
    const int leading_bit =
        high != 0 ? 127 - std::countl_zero(high) : 63 - std::countl_zero(static_cast<uint64_t>(magnitude));
    const int E = leading_bit + exponent;  // value in [2^E, 2^(E+1))
    if (E > 15) return from_bits(sign | kPositiveInfinity);
    if (E < -25) return from_bits(sign);  // below half of the smallest subnormal 2^-24
    if (E == -25) {                       // [2^-25, 2^-24): exactly 2^-25 is a tie and goes to the even 0
        const bool power_of_two = (magnitude & (magnitude - 1)) == 0;
        return from_bits(sign | (power_of_two ? 0 : 1));
    }
    const int Q = E - 10 > -24 ? E - 10 : -24;
    const int shift = Q - exponent;  // ≤ leading_bit ≤ 127 here
    unsigned q;
    if (shift <= 0) {
        q = static_cast<unsigned>(magnitude << -shift);  // exact, < 2^11
    } else {
        q = static_cast<unsigned>(magnitude >> shift);
        const unsigned __int128 remainder = magnitude & ((static_cast<unsigned __int128>(1) << shift) - 1);
        const unsigned __int128 halfway = static_cast<unsigned __int128>(1) << (shift - 1);
        if (remainder > halfway || (remainder == halfway && (q & 1u))) ++q;
    }
    const unsigned pattern = (static_cast<unsigned>(Q + 24) << 10) + q;
    return from_bits(sign | (pattern >= kPositiveInfinity ? kPositiveInfinity : static_cast<uint16_t>(pattern)));
}

// double → half with a single rounding (cuda_fp16.h's __double2half does the same; this one is used so that
// every function here shares round_to_half, which the tests check against an independent reference).
inline __half double_to_half(double x) {
    if (std::isnan(x)) return from_bits(kCanonicalNan);
    const uint64_t bits = std::bit_cast<uint64_t>(x);
    const bool negative = bits >> 63;
    if (std::isinf(x)) return from_bits((negative ? 0x8000 : 0) | kPositiveInfinity);
    const int biased = static_cast<int>(bits >> 52 & 0x7FF);
    const uint64_t fraction = bits & ((uint64_t{1} << 52) - 1);
    if (biased == 0) return round_to_half(negative, fraction, -1074);  // double subnormal (or zero)
    return round_to_half(negative, fraction | (uint64_t{1} << 52), biased - 1075);
}

// A finite half as (-1)^negative · significand · 2^exponent with an integer significand.
struct Decomposed {
    bool negative;
    uint32_t significand;
    int exponent;
};
inline Decomposed decompose(__half h) {
    const uint16_t b = bits_of(h);
    const int field = b >> 10 & 0x1F;
    const uint32_t mantissa = b & 0x3FF;
    if (field == 0) return {bool(b >> 15), mantissa, -24};
    return {bool(b >> 15), mantissa | 0x400u, field - 25};
}

// a·b + c, rounded once.
inline __half fma_rn(__half a, __half b, __half c) {
    if (is_nan(a) || is_nan(b) || is_nan(c) || is_inf(a) || is_inf(b) || is_inf(c)) {
        // inf·0, inf - inf → NaN; otherwise an infinity: float gets these right, and its result is exact.
        const float r = std::fma(__half2float(a), __half2float(b), __half2float(c));
        return std::isnan(r) ? from_bits(kCanonicalNan) : __float2half_rn(r);
    }
    const Decomposed da = decompose(a), db = decompose(b), dc = decompose(c);
    const bool product_negative = da.negative != db.negative;
    const uint64_t product = uint64_t{da.significand} * db.significand;  // < 2^22
    const int product_exponent = da.exponent + db.exponent;              // ≥ -48
    // Align both terms to the smaller exponent (≥ -48); the largest shift is 10 - (-48) = 58 bits: fits.
    const int low = product_exponent < dc.exponent ? product_exponent : dc.exponent;
    const unsigned __int128 p = static_cast<unsigned __int128>(product) << (product_exponent - low);
    const unsigned __int128 s = static_cast<unsigned __int128>(dc.significand) << (dc.exponent - low);
    if (product_negative == dc.negative) return round_to_half(dc.negative, p + s, low);
    if (p == s) return from_bits(0);  // exact cancellation is +0 in round-to-nearest (IEEE 754 §6.3)
    return p > s ? round_to_half(product_negative, p - s, low) : round_to_half(dc.negative, s - p, low);
}
// (The zero cases fall out right: p + s == 0 keeps the common sign, so -0·x + -0 is -0, and 0·x + c is c.)

template <typename Function>
__half2 per_lane(__half2 a, Function f) {
    return __halves2half2(f(__low2half(a)), f(__high2half(a)));
}

// PTX .sat: clamp to [0, 1], NaN → +0; .relu: negative → +0, NaN stays NaN. Written exactly as cuda_fp16.h's
// own fallbacks for GPUs without these instructions (its host __hmax orders -0 below +0, so -0 also becomes
// +0).
inline __half saturate(__half h) {
    return __hmin(__hmax(h, from_bits(0)), from_bits(0x3C00));
}
inline __half relu(__half h) {
    return __hmax_nan(h, from_bits(0));
}

template <double (*F)(double)>
__half math1(__half a) {
    return double_to_half(F(static_cast<double>(__half2float(a))));
}
inline double rsqrt_exact(double x) {
    return 1.0 / std::sqrt(x);
}
inline double rcp_exact(double x) {
    return 1.0 / x;
}
inline double exp10_exact(double x) {
    return std::pow(10.0, x);
}
inline double sqrt_d(double x) {
    return std::sqrt(x);
}
inline double exp_d(double x) {
    return std::exp(x);
}
inline double exp2_d(double x) {
    return std::exp2(x);
}
inline double log_d(double x) {
    return std::log(x);
}
inline double log2_d(double x) {
    return std::log2(x);
}
inline double log10_d(double x) {
    return std::log10(x);
}
inline double sin_d(double x) {
    return std::sin(x);
}
inline double cos_d(double x) {
    return std::cos(x);
}
inline double tanh_d(double x) {
    return std::tanh(x);
}

// half → integer type T: round the value with `round` (exact on a float holding a half), saturate to T's
// range, NaN → nan_result (0, or 0x8000000000000000 for the 64-bit types, as CUDA documents).
template <typename T>
T to_integer(__half h, float (*round)(float), T nan_result) {
    if (is_nan(h)) return nan_result;
    const float f = round(__half2float(h));
    if (f >= static_cast<float>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    if (f <= static_cast<float>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    return static_cast<T>(f);
}
// Round to the nearest integer, ties to even, whatever the floating-point environment's rounding mode.
inline float round_half_even(float f) {
    if (!(std::fabs(f) < 8388608.0f)) return f;  // |f| ≥ 2^23 is an integer already (or inf)
    const float down = std::floor(f);
    const float diff = f - down;  // exact
    if (diff > 0.5f || (diff == 0.5f && std::fmod(down, 2.0f) != 0.0f)) return std::copysign(down + 1.0f, f);
    return std::copysign(down, f);  // copysign keeps -0 for -0.3 → -0, like rint
}
inline float round_down(float f) {
    return std::floor(f);
}
inline float round_up(float f) {
    return std::ceil(f);
}
inline float round_toward_zero(float f) {
    return std::trunc(f);
}

// Rounding a half to an integral half: exact, since the integer is always representable.
inline __half round_integral(__half h, float (*round)(float)) {
    if (is_nan(h)) return from_bits(kCanonicalNan);
    return __float2half_rn(round(__half2float(h)));
}

// __half2 is not trivially copyable (it has a user-written copy assignment), so it travels as its 32 bits.
inline uint32_t half2_bits(__half2 v) {
    return uint32_t{bits_of(__low2half(v))} | (uint32_t{bits_of(__high2half(v))} << 16);
}
inline __half2 half2_from_bits(uint32_t bits) {
    return __halves2half2(from_bits(static_cast<uint16_t>(bits)), from_bits(static_cast<uint16_t>(bits >> 16)));
}

// atomicAdd through a compare-and-swap loop on the value's bits (blocks may run on several workers at once).
template <typename Bits, typename T, typename ToBits, typename FromBits, typename Add>
T atomic_add_bits(T* address, T value, ToBits to_bits, FromBits from, Add add) {
    static_assert(sizeof(Bits) == sizeof(T));
    Bits* bits_address = reinterpret_cast<Bits*>(address);
    Bits expected = __atomic_load_n(bits_address, __ATOMIC_RELAXED);
    for (;;) {
        const T old = from(expected);
        const Bits desired = to_bits(add(old, value));
        if (__atomic_compare_exchange_n(bits_address, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return old;
    }
}

}  // namespace cpu_backend::fp16

// --- fused multiply-add
// ---------------------------------------------------------------------------------------
inline __half __hfma(const __half a, const __half b, const __half c) {
    return cpu_backend::fp16::fma_rn(a, b, c);
}
inline __half __hfma_sat(const __half a, const __half b, const __half c) {
    return cpu_backend::fp16::saturate(__hfma(a, b, c));
}
inline __half __hfma_relu(const __half a, const __half b, const __half c) {
    return cpu_backend::fp16::relu(__hfma(a, b, c));
}
inline __half2 __hfma2(const __half2 a, const __half2 b, const __half2 c) {
    return __halves2half2(__hfma(__low2half(a), __low2half(b), __low2half(c)),
                          __hfma(__high2half(a), __high2half(b), __high2half(c)));
}
inline __half2 __hfma2_sat(const __half2 a, const __half2 b, const __half2 c) {
    return cpu_backend::fp16::per_lane(__hfma2(a, b, c), cpu_backend::fp16::saturate);
}
inline __half2 __hfma2_relu(const __half2 a, const __half2 b, const __half2 c) {
    return cpu_backend::fp16::per_lane(__hfma2(a, b, c), cpu_backend::fp16::relu);
}
// Complex multiply-add (low half = real part): as cuda_fp16.h documents it, with two fmas per part.
inline __half2 __hcmadd(const __half2 a, const __half2 b, const __half2 c) {
    const __half ar = __low2half(a), ai = __high2half(a), br = __low2half(b), bi = __high2half(b);
    const __half real = __hfma(__hneg(ai), bi, __hfma(ar, br, __low2half(c)));
    const __half imag = __hfma(ai, br, __hfma(ar, bi, __high2half(c)));
    return __halves2half2(real, imag);
}

// --- math functions (correctly rounded; a GPU may be 1 ulp off, see the top of this file)
// -------------------------
inline __half hsqrt(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::sqrt_d>(a);
}
inline __half hrsqrt(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::rsqrt_exact>(a);
}
inline __half hrcp(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::rcp_exact>(a);
}
inline __half hexp(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::exp_d>(a);
}
inline __half hexp2(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::exp2_d>(a);
}
inline __half hexp10(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::exp10_exact>(a);
}
inline __half hlog(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::log_d>(a);
}
inline __half hlog2(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::log2_d>(a);
}
inline __half hlog10(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::log10_d>(a);
}
inline __half hsin(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::sin_d>(a);
}
inline __half hcos(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::cos_d>(a);
}
inline __half htanh(const __half a) {
    return cpu_backend::fp16::math1<cpu_backend::fp16::tanh_d>(a);
}
// On sm_75+ this is the tanh.approx.f16 instruction (relative error about 2^-11); here it is simply htanh.
inline __half htanh_approx(const __half a) {
    return htanh(a);
}

inline __half2 h2sqrt(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hsqrt);
}
inline __half2 h2rsqrt(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hrsqrt);
}
inline __half2 h2rcp(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hrcp);
}
inline __half2 h2exp(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hexp);
}
inline __half2 h2exp2(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hexp2);
}
inline __half2 h2exp10(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hexp10);
}
inline __half2 h2log(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hlog);
}
inline __half2 h2log2(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hlog2);
}
inline __half2 h2log10(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hlog10);
}
inline __half2 h2sin(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hsin);
}
inline __half2 h2cos(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, hcos);
}
inline __half2 h2tanh(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, htanh);
}
inline __half2 h2tanh_approx(const __half2 a) {
    return cpu_backend::fp16::per_lane(a, htanh_approx);
}

// --- rounding to an integral value (exact)
// ------------------------------------------------------------------------
inline __half hrint(const __half h) {
    return cpu_backend::fp16::round_integral(h, cpu_backend::fp16::round_half_even);
}
inline __half htrunc(const __half h) {
    return cpu_backend::fp16::round_integral(h, cpu_backend::fp16::round_toward_zero);
}
inline __half hceil(const __half h) {
    return cpu_backend::fp16::round_integral(h, cpu_backend::fp16::round_up);
}
inline __half hfloor(const __half h) {
    return cpu_backend::fp16::round_integral(h, cpu_backend::fp16::round_down);
}
inline __half2 h2rint(const __half2 h) {
    return cpu_backend::fp16::per_lane(h, hrint);
}
inline __half2 h2trunc(const __half2 h) {
    return cpu_backend::fp16::per_lane(h, htrunc);
}
inline __half2 h2ceil(const __half2 h) {
    return cpu_backend::fp16::per_lane(h, hceil);
}
inline __half2 h2floor(const __half2 h) {
    return cpu_backend::fp16::per_lane(h, hfloor);
}

// --- half → integer, round to nearest even (rn), down (rd), up (ru); saturating
// -----------------------------------
#define CPU_BACKEND_HALF_TO_INTEGER(name, T, nan_result)                                            \
    inline T name##_rn(const __half h) {                                                            \
        return cpu_backend::fp16::to_integer<T>(h, cpu_backend::fp16::round_half_even, nan_result); \
    }                                                                                               \
    inline T name##_rd(const __half h) {                                                            \
        return cpu_backend::fp16::to_integer<T>(h, cpu_backend::fp16::round_down, nan_result);      \
    }                                                                                               \
    inline T name##_ru(const __half h) {                                                            \
        return cpu_backend::fp16::to_integer<T>(h, cpu_backend::fp16::round_up, nan_result);        \
    }
CPU_BACKEND_HALF_TO_INTEGER(__half2int, int, 0)
CPU_BACKEND_HALF_TO_INTEGER(__half2uint, unsigned int, 0u)
CPU_BACKEND_HALF_TO_INTEGER(__half2short, short int, static_cast<short>(0))
CPU_BACKEND_HALF_TO_INTEGER(__half2ushort, unsigned short int, static_cast<unsigned short>(0))
CPU_BACKEND_HALF_TO_INTEGER(__half2ll, long long int, static_cast<long long>(0x8000000000000000ull))
CPU_BACKEND_HALF_TO_INTEGER(__half2ull, unsigned long long int, 0x8000000000000000ull)
#undef CPU_BACKEND_HALF_TO_INTEGER

// --- atomics
// ------------------------------------------------------------------------------------------------------
inline __half atomicAdd(__half* address, const __half value) {
    using namespace cpu_backend::fp16;
    return atomic_add_bits<uint16_t>(address, value, bits_of, from_bits,
                                     [](__half a, __half b) { return __hadd(a, b); });
}
// On a GPU each of the two halves is added atomically on its own, not the pair as a unit; one 32-bit CAS is
// stronger, which no correct program can tell apart.
inline __half2 atomicAdd(__half2* address, const __half2 value) {
    using namespace cpu_backend::fp16;
    return atomic_add_bits<uint32_t>(address, value, half2_bits, half2_from_bits,
                                     [](__half2 a, __half2 b) { return __hadd2(a, b); });
}

// --- warp shuffles of __half2
// ------------------------------------------------------------------------------------ runtime.h's
// __shfl_*_sync templates take any trivially copyable type of up to 8 bytes, __half included; these overloads
// (preferred over the templates) move a __half2 as its 32 bits.
inline __half2 __shfl_sync(unsigned mask, __half2 var, int src_lane, int width = warpSize,
                           std::source_location site = std::source_location::current()) {
    using namespace cpu_backend::fp16;
    return half2_from_bits(__shfl_sync(mask, half2_bits(var), src_lane, width, site));
}
inline __half2 __shfl_up_sync(unsigned mask, __half2 var, unsigned delta, int width = warpSize,
                              std::source_location site = std::source_location::current()) {
    using namespace cpu_backend::fp16;
    return half2_from_bits(__shfl_up_sync(mask, half2_bits(var), delta, width, site));
}
inline __half2 __shfl_down_sync(unsigned mask, __half2 var, unsigned delta, int width = warpSize,
                                std::source_location site = std::source_location::current()) {
    using namespace cpu_backend::fp16;
    return half2_from_bits(__shfl_down_sync(mask, half2_bits(var), delta, width, site));
}
inline __half2 __shfl_xor_sync(unsigned mask, __half2 var, int lane_mask, int width = warpSize,
                               std::source_location site = std::source_location::current()) {
    using namespace cpu_backend::fp16;
    return half2_from_bits(__shfl_xor_sync(mask, half2_bits(var), lane_mask, width, site));
}
