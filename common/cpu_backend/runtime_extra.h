// common/cpu_backend/runtime_extra.h — the rest of CUDA's math API, integer intrinsics, atomics and host API for the cpu
// flavor, in the global namespace for host and device code as nvcc's <cuda_runtime.h> declares them (runtime.h has
// the ones this project's kernels use; this file adds what public CUDA programs call beyond them).
//
// Accuracy: the functions CUDA has and C++ lacks (sinpif, erfinvf, normcdff, rcbrtf, ...) are computed in double (or
// long double) and rounded once, so they are at least as accurate as CUDA documents; the fast intrinsics (__sinf,
// __exp10f, ...) are the accurate functions here, as runtime.h says for __expf. The _rz/_ru/_rd intrinsics
// switch the host's rounding mode around one operation: exact, as on a GPU.
#pragma once

#include "common/cpu_backend/runtime.h"  // (which includes this file at its end)

#include <cfenv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>

// nvcc's math_functions.h puts these in the global namespace; libstdc++'s <cmath> keeps them in std::, so a template
// calling unqualified isfinite(x) (llm.c's validate_result) would not compile without them.
using std::fpclassify;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::isnormal;
using std::signbit;

namespace cpu_backend {

// A value the compiler cannot know: read back from a volatile object.
template <typename T>
inline T opaque(T value) {
    volatile T copy = value;
    return copy;
}
// One floating-point operation under a rounding mode (FE_TOWARDZERO, FE_UPWARD, FE_DOWNWARD). The operands are
// read from volatiles after fesetround and the result stored to one before it is restored, so the compiler (which
// assumes round-to-nearest) can neither fold the operation nor move it out from between the two calls.
template <typename R, typename Op, typename... T>
inline R with_rounding(int mode, Op op, T... operands) {
    const int saved = std::fegetround();
    std::fesetround(mode);
    volatile R result = op(opaque(operands)...);
    std::fesetround(saved);
    return result;
}

// CUDA's float/double-to-integer conversions saturate (cvt.*i.sat): NaN gives 0, out of range the nearest limit.
template <typename I>
inline I saturate_to(long double rounded) {
    if (rounded != rounded) return 0;
    if (rounded <= static_cast<long double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
    if (rounded >= static_cast<long double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
    return static_cast<I>(rounded);
}

// sin(pi x) and cos(pi x) with the argument reduced exactly (remainder by 2 is exact), so integers and halves give
// exact zeros and ones as CUDA's do, and large arguments keep their accuracy.
inline double sinpi(double x) {
    if (!std::isfinite(x)) return std::nan("");
    const double r = std::remainder(x, 2.0);  // [-1, 1], exact
    double a = std::fabs(r);
    if (a > 0.5) a = 1.0 - a;  // sin(pi a) = sin(pi (1 - a)); exact for a in [0.5, 1]
    const double s = a <= 0.25 ? std::sin(M_PI * a) : std::cos(M_PI * (0.5 - a));
    return std::copysign(s, r);  // s >= 0 here; the sign of r (sinpi(-0) is -0)
}
inline double cospi(double x) {
    if (!std::isfinite(x)) return std::nan("");
    const double a = std::fabs(std::remainder(x, 2.0));  // [0, 1], exact
    if (a <= 0.25) return std::cos(M_PI * a);
    if (a <= 0.75) return std::sin(M_PI * (0.5 - a));
    return -std::cos(M_PI * (1.0 - a));
}

// erfinv: Giles' single-precision approximation as the start, then Newton steps on erf in long double.
inline double erfinv(double y) {
    if (y <= -1.0) return y == -1.0 ? -INFINITY : std::nan("");
    if (y >= 1.0) return y == 1.0 ? INFINITY : std::nan("");
    if (y == 0) return y;
    long double w = -std::log((1.0 - y) * (1.0 + y)), x;
    if (w < 5.0L) {
        w -= 2.5L;
        x = ((((2.81022636e-08L * w + 3.43273939e-07L) * w - 3.5233877e-06L) * w - 4.39150654e-06L) * w +
             0.00021858087L) *
                w -
            0.00125372503L;
        x = ((x * w - 0.00417768164L) * w + 0.246640727L) * w + 1.50140941L;
    } else {
        w = std::sqrt(w) - 3.0L;
        x = (((-0.000200214257L * w + 0.000100950558L) * w + 0.00134934322L) * w - 0.00367342844L) * w + 0.00573950773L;
        x = ((x * w - 0.0076224613L) * w + 0.00943887047L) * w + 1.00167406L;
        x = x * w + 2.83297682L;
    }
    x *= y;
    const long double two_over_sqrt_pi = 1.128379167095512573896158903121545172L;
    for (int i = 0; i < 4; ++i) x -= (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
    return static_cast<double>(x);
}
// erfcinv(y) solves erfc(x) = y directly (1 - y would lose the digits of a small y): Newton on log(erfc), which is
// nearly linear in x^2 for large x.
inline double erfcinv(double y) {
    if (y <= 0.0) return y == 0.0 ? INFINITY : std::nan("");
    if (y >= 2.0) return y == 2.0 ? -INFINITY : std::nan("");
    if (y > 0.0625 && y < 1.9375) return erfinv(1.0 - y);
    if (y >= 1.9375) return -cpu_backend::erfcinv(2.0 - y);
    long double x = std::sqrt(-std::log(static_cast<long double>(y)));  // erfc(x) ~ exp(-x^2) / (x sqrt(pi))
    const long double two_over_sqrt_pi = 1.128379167095512573896158903121545172L;
    for (int i = 0; i < 50; ++i) {
        const long double e = std::erfc(x);
        const long double step =
            (std::log(e) - std::log(static_cast<long double>(y))) / (-two_over_sqrt_pi * std::exp(-x * x) / e);
        x -= step;
        if (std::fabs(step) <= 1e-18L * x) break;
    }
    return static_cast<double>(x);
}
// erfcx(x) = exp(x^2) erfc(x), without the overflow: long double carries it to x = 100, the asymptotic series beyond.
inline double erfcx(double x) {
    if (x != x) return x;
    if (x < 100.0) return static_cast<double>(std::exp(static_cast<long double>(x) * x) * std::erfc((long double)x));
    const double inv2 = 1.0 / (x * x);
    return (1.0 - 0.5 * inv2 * (1.0 - 1.5 * inv2 * (1.0 - 2.5 * inv2))) / (x * 1.772453850905516027298167483341);
}
inline long double norm(int dim, const double* p) {
    long double sum = 0;
    for (int i = 0; i < dim; ++i) sum += static_cast<long double>(p[i]) * p[i];
    return std::sqrt(sum);
}
inline long double norm(int dim, const float* p) {
    long double sum = 0;
    for (int i = 0; i < dim; ++i) sum += static_cast<long double>(p[i]) * p[i];
    return std::sqrt(sum);
}
inline double bessel_i0(double x) {
    return std::cyl_bessel_i(0.0, std::fabs(x));  // even
}
inline double bessel_i1(double x) {
    return std::copysign(std::cyl_bessel_i(1.0, std::fabs(x)), x);  // odd
}

}  // namespace cpu_backend

// --- single precision functions CUDA has and C++ does not --------------------------------------------------------
inline float sinpif(float x) {
    return float(cpu_backend::sinpi(x));
}
inline float cospif(float x) {
    return float(cpu_backend::cospi(x));
}
inline void sincospif(float x, float* s, float* c) {
    *s = sinpif(x);
    *c = cospif(x);
}
inline float erfinvf(float y) {
    return float(cpu_backend::erfinv(y));
}
inline float erfcinvf(float y) {
    return float(cpu_backend::erfcinv(y));
}
inline float erfcxf(float x) {
    return float(cpu_backend::erfcx(x));
}
inline float normcdff(float x) {
    return float(0.5 * std::erfc(-double(x) * M_SQRT1_2));
}
inline float normcdfinvf(float p) {
    return float(-M_SQRT2 * cpu_backend::erfcinv(2.0 * p));
}
inline float rcbrtf(float x) {
    return float(1.0 / std::cbrt(double(x)));
}
inline float rhypotf(float x, float y) {
    return float(1.0 / std::hypot(double(x), double(y)));
}
inline float norm3df(float a, float b, float c) {
    return float(std::hypot(double(a), double(b), double(c)));
}
inline float rnorm3df(float a, float b, float c) {
    return float(1.0 / std::hypot(double(a), double(b), double(c)));
}
inline float norm4df(float a, float b, float c, float d) {
    return float(std::sqrt((long double)a * a + (long double)b * b + (long double)c * c + (long double)d * d));
}
inline float rnorm4df(float a, float b, float c, float d) {
    return float(1.0L / std::sqrt((long double)a * a + (long double)b * b + (long double)c * c + (long double)d * d));
}
inline float normf(int dim, const float* p) {
    return float(cpu_backend::norm(dim, p));
}
inline float rnormf(int dim, const float* p) {
    return float(1.0L / cpu_backend::norm(dim, p));
}
inline float cyl_bessel_i0f(float x) {
    return float(cpu_backend::bessel_i0(x));
}
inline float cyl_bessel_i1f(float x) {
    return float(cpu_backend::bessel_i1(x));
}
inline float fdividef(float x, float y) {
    return x / y;
}

// --- double precision ----------------------------------------------------------------------------------------------
inline double sinpi(double x) {
    return cpu_backend::sinpi(x);
}
inline double cospi(double x) {
    return cpu_backend::cospi(x);
}
inline void sincospi(double x, double* s, double* c) {
    *s = sinpi(x);
    *c = cospi(x);
}
inline double erfinv(double y) {
    return cpu_backend::erfinv(y);
}
inline double erfcinv(double y) {
    return cpu_backend::erfcinv(y);
}
inline double erfcx(double x) {
    return cpu_backend::erfcx(x);
}
inline double normcdf(double x) {
    return 0.5 * double(std::erfc(-(long double)x * 0.707106781186547524400844362104849039L));
}
inline double normcdfinv(double p) {
    return -M_SQRT2 * cpu_backend::erfcinv(2.0 * p);
}
inline double rsqrt(double x) {
    return double(1.0L / std::sqrt((long double)x));
}
inline double rcbrt(double x) {
    return double(1.0L / std::cbrt((long double)x));
}
inline double rhypot(double x, double y) {
    return double(1.0L / std::hypot((long double)x, (long double)y));
}
inline double norm3d(double a, double b, double c) {
    return std::hypot(a, b, c);
}
inline double rnorm3d(double a, double b, double c) {
    return double(1.0L / std::hypot((long double)a, (long double)b, (long double)c));
}
inline double norm4d(double a, double b, double c, double d) {
    return double(std::sqrt((long double)a * a + (long double)b * b + (long double)c * c + (long double)d * d));
}
inline double rnorm4d(double a, double b, double c, double d) {
    return double(1.0L / std::sqrt((long double)a * a + (long double)b * b + (long double)c * c + (long double)d * d));
}
inline double norm(int dim, const double* p) {
    return double(cpu_backend::norm(dim, p));
}
inline double rnorm(int dim, const double* p) {
    return double(1.0L / cpu_backend::norm(dim, p));
}
inline double cyl_bessel_i0(double x) {
    return cpu_backend::bessel_i0(x);
}
inline double cyl_bessel_i1(double x) {
    return cpu_backend::bessel_i1(x);
}

// --- fast single precision intrinsics: accurate here (a GPU's are approximate) ----------------------------------
inline float __sinf(float x) {
    return std::sin(x);
}
inline float __cosf(float x) {
    return std::cos(x);
}
inline float __tanf(float x) {
    return std::tan(x);
}
inline void __sincosf(float x, float* s, float* c) {
    *s = std::sin(x);
    *c = std::cos(x);
}
inline float __exp10f(float x) {
    return float(std::pow(10.0, double(x)));
}
inline float __log2f(float x) {
    return std::log2(x);
}
inline float __log10f(float x) {
    return std::log10(x);
}
inline float __frsqrt_rn(float x) {
    return float(1.0 / std::sqrt(double(x)));  // one rounding of the exact value, as CUDA's _rn
}

// --- IEEE operations with a rounding mode: _rn (nearest), _rz (toward zero), _ru (up), _rd (down) ---------------
#define CUDA_CPU_ROUNDED_FAMILY(NAME, TYPE, ARITY, EXPRESSION)                                      \
    inline TYPE NAME##_rz(CUDA_CPU_PARAMS_##ARITY(TYPE)) {                                          \
        return cpu_backend::with_rounding<TYPE>(FE_TOWARDZERO, CUDA_CPU_LAMBDA_##ARITY(EXPRESSION), \
                                                CUDA_CPU_ARGS_##ARITY);                             \
    }                                                                                               \
    inline TYPE NAME##_ru(CUDA_CPU_PARAMS_##ARITY(TYPE)) {                                          \
        return cpu_backend::with_rounding<TYPE>(FE_UPWARD, CUDA_CPU_LAMBDA_##ARITY(EXPRESSION),     \
                                                CUDA_CPU_ARGS_##ARITY);                             \
    }                                                                                               \
    inline TYPE NAME##_rd(CUDA_CPU_PARAMS_##ARITY(TYPE)) {                                          \
        return cpu_backend::with_rounding<TYPE>(FE_DOWNWARD, CUDA_CPU_LAMBDA_##ARITY(EXPRESSION),   \
                                                CUDA_CPU_ARGS_##ARITY);                             \
    }
#define CUDA_CPU_PARAMS_1(T) T a
#define CUDA_CPU_PARAMS_2(T) T a, T b
#define CUDA_CPU_PARAMS_3(T) T a, T b, T c
#define CUDA_CPU_ARGS_1 a
#define CUDA_CPU_ARGS_2 a, b
#define CUDA_CPU_ARGS_3 a, b, c
#define CUDA_CPU_LAMBDA_1(E) [](auto a) { return E; }
#define CUDA_CPU_LAMBDA_2(E) [](auto a, auto b) { return E; }
#define CUDA_CPU_LAMBDA_3(E) [](auto a, auto b, auto c) { return E; }

// runtime.h has __fadd_rn, __fmul_rn, __fmaf_rn, __frcp_rn, __fsqrt_rn.
inline float __fsub_rn(float a, float b) {
    return a - b;
}
inline float __fdiv_rn(float a, float b) {
    return a / b;
}
inline float __fmaf_ieee_rn(float a, float b, float c) {
    return std::fma(a, b, c);
}
CUDA_CPU_ROUNDED_FAMILY(__fadd, float, 2, a + b)
CUDA_CPU_ROUNDED_FAMILY(__fsub, float, 2, a - b)
CUDA_CPU_ROUNDED_FAMILY(__fmul, float, 2, a* b)
CUDA_CPU_ROUNDED_FAMILY(__fdiv, float, 2, a / b)
CUDA_CPU_ROUNDED_FAMILY(__fmaf, float, 3, std::fma(a, b, c))
CUDA_CPU_ROUNDED_FAMILY(__fmaf_ieee, float, 3, std::fma(a, b, c))
CUDA_CPU_ROUNDED_FAMILY(__frcp, float, 1, 1.0f / a)
CUDA_CPU_ROUNDED_FAMILY(__fsqrt, float, 1, std::sqrt(a))
inline double __dadd_rn(double a, double b) {
    return a + b;
}
inline double __dsub_rn(double a, double b) {
    return a - b;
}
inline double __dmul_rn(double a, double b) {
    return a * b;
}
inline double __ddiv_rn(double a, double b) {
    return a / b;
}
inline double __drcp_rn(double a) {
    return 1.0 / a;
}
inline double __dsqrt_rn(double a) {
    return std::sqrt(a);
}
inline double __fma_rn(double a, double b, double c) {
    return std::fma(a, b, c);
}
CUDA_CPU_ROUNDED_FAMILY(__dadd, double, 2, a + b)
CUDA_CPU_ROUNDED_FAMILY(__dsub, double, 2, a - b)
CUDA_CPU_ROUNDED_FAMILY(__dmul, double, 2, a* b)
CUDA_CPU_ROUNDED_FAMILY(__ddiv, double, 2, a / b)
CUDA_CPU_ROUNDED_FAMILY(__drcp, double, 1, 1.0 / a)
CUDA_CPU_ROUNDED_FAMILY(__dsqrt, double, 1, std::sqrt(a))
CUDA_CPU_ROUNDED_FAMILY(__fma, double, 3, std::fma(a, b, c))

// --- conversions: float/double to integers (saturating), integers to float/double (rounded as named) -----------
#define CUDA_CPU_TO_INTEGER(FROM, FROM_TYPE, TO, TO_TYPE)                         \
    inline TO_TYPE __##FROM##2##TO##_rn(FROM_TYPE x) {                            \
        return cpu_backend::saturate_to<TO_TYPE>(std::nearbyint((long double)x)); \
    }                                                                             \
    inline TO_TYPE __##FROM##2##TO##_rz(FROM_TYPE x) {                            \
        return cpu_backend::saturate_to<TO_TYPE>(std::trunc((long double)x));     \
    }                                                                             \
    inline TO_TYPE __##FROM##2##TO##_ru(FROM_TYPE x) {                            \
        return cpu_backend::saturate_to<TO_TYPE>(std::ceil((long double)x));      \
    }                                                                             \
    inline TO_TYPE __##FROM##2##TO##_rd(FROM_TYPE x) {                            \
        return cpu_backend::saturate_to<TO_TYPE>(std::floor((long double)x));     \
    }
CUDA_CPU_TO_INTEGER(float, float, int, int)
CUDA_CPU_TO_INTEGER(float, float, uint, unsigned)
CUDA_CPU_TO_INTEGER(float, float, ll, long long)
CUDA_CPU_TO_INTEGER(float, float, ull, unsigned long long)
CUDA_CPU_TO_INTEGER(double, double, int, int)
CUDA_CPU_TO_INTEGER(double, double, uint, unsigned)
CUDA_CPU_TO_INTEGER(double, double, ll, long long)
CUDA_CPU_TO_INTEGER(double, double, ull, unsigned long long)
#undef CUDA_CPU_TO_INTEGER

#define CUDA_CPU_TO_FLOATING(FROM, FROM_TYPE, TO, TO_TYPE) \
    inline TO_TYPE __##FROM##2##TO##_rn(FROM_TYPE x) {     \
        return static_cast<TO_TYPE>(x);                    \
    }                                                      \
    CUDA_CPU_ROUNDED_FAMILY(__##FROM##2##TO, TO_TYPE, 1, static_cast<TO_TYPE>(a))
// (the _rz/_ru/_rd lambdas take FROM_TYPE through `auto`: the conversion itself is what is rounded)
#undef CUDA_CPU_PARAMS_1
#define CUDA_CPU_PARAMS_1(T) CUDA_CPU_FROM_TYPE a
#define CUDA_CPU_FROM_TYPE int
CUDA_CPU_TO_FLOATING(int, int, float, float)
#undef CUDA_CPU_FROM_TYPE
#define CUDA_CPU_FROM_TYPE unsigned
CUDA_CPU_TO_FLOATING(uint, unsigned, float, float)
#undef CUDA_CPU_FROM_TYPE
#define CUDA_CPU_FROM_TYPE long long
CUDA_CPU_TO_FLOATING(ll, long long, float, float)
CUDA_CPU_TO_FLOATING(ll, long long, double, double)
#undef CUDA_CPU_FROM_TYPE
#define CUDA_CPU_FROM_TYPE unsigned long long
CUDA_CPU_TO_FLOATING(ull, unsigned long long, float, float)
CUDA_CPU_TO_FLOATING(ull, unsigned long long, double, double)
#undef CUDA_CPU_FROM_TYPE
#define CUDA_CPU_FROM_TYPE double
CUDA_CPU_TO_FLOATING(double, double, float, float)
#undef CUDA_CPU_FROM_TYPE
#undef CUDA_CPU_TO_FLOATING
#undef CUDA_CPU_ROUNDED_FAMILY
#undef CUDA_CPU_PARAMS_1
#undef CUDA_CPU_PARAMS_2
#undef CUDA_CPU_PARAMS_3
#undef CUDA_CPU_ARGS_1
#undef CUDA_CPU_ARGS_2
#undef CUDA_CPU_ARGS_3
#undef CUDA_CPU_LAMBDA_1
#undef CUDA_CPU_LAMBDA_2
#undef CUDA_CPU_LAMBDA_3

inline double __int2double_rn(int x) {
    return x;
}
inline double __uint2double_rn(unsigned x) {
    return x;
}
inline long long __double_as_longlong(double x) {
    return std::bit_cast<long long>(x);
}
inline double __longlong_as_double(long long x) {
    return std::bit_cast<double>(x);
}
inline int __double2hiint(double x) {
    return int(std::bit_cast<uint64_t>(x) >> 32);
}
inline int __double2loint(double x) {
    return int(uint32_t(std::bit_cast<uint64_t>(x)));
}
inline double __hiloint2double(int hi, int lo) {
    return std::bit_cast<double>((uint64_t(uint32_t(hi)) << 32) | uint32_t(lo));
}

// --- integer intrinsics ----------------------------------------------------------------------------------------------
inline unsigned long long __brevll(unsigned long long x) {
    unsigned long long r = 0;
    for (int i = 0; i < 64; ++i) r |= ((x >> i) & 1ull) << (63 - i);
    return r;
}
inline int __clzll(long long x) {
    return std::countl_zero(static_cast<unsigned long long>(x));
}
inline int __ffsll(long long x) {
    return x == 0 ? 0 : std::countr_zero(static_cast<unsigned long long>(x)) + 1;
}
// prmt: byte i of the result is byte (s >> 4i) & 7 of the 8-byte value {y, x}.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t bytes = (uint64_t(y) << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= unsigned((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    return unsigned((((uint64_t(hi) << 32) | lo) << (shift & 31)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned shift) {
    return unsigned((((uint64_t(hi) << 32) | lo) << (shift < 32 ? shift : 32)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return unsigned(((uint64_t(hi) << 32) | lo) >> (shift & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned shift) {
    return unsigned(((uint64_t(hi) << 32) | lo) >> (shift < 32 ? shift : 32));
}
inline int __hadd(int a, int b) {
    return int((int64_t(a) + b) >> 1);
}
inline int __rhadd(int a, int b) {
    return int((int64_t(a) + b + 1) >> 1);
}
inline unsigned __uhadd(unsigned a, unsigned b) {
    return unsigned((uint64_t(a) + b) >> 1);
}
inline unsigned __urhadd(unsigned a, unsigned b) {
    return unsigned((uint64_t(a) + b + 1) >> 1);
}
// The low 24 bits of each operand (sign-extended for __mul24), the low 32 bits of the product.
inline int __mul24(int a, int b) {
    const int64_t a24 = int32_t(uint32_t(a) << 8) >> 8, b24 = int32_t(uint32_t(b) << 8) >> 8;
    return int(uint32_t(a24 * b24));
}
inline unsigned __umul24(unsigned a, unsigned b) {
    return unsigned((uint64_t(a & 0xffffffu) * (b & 0xffffffu)));
}
inline int __mulhi(int a, int b) {
    return int((int64_t(a) * b) >> 32);
}
inline long long __mul64hi(long long a, long long b) {
    return static_cast<long long>((static_cast<__int128>(a) * b) >> 64);
}
inline unsigned __sad(int x, int y, unsigned z) {
    return z + unsigned(x > y ? int64_t(x) - y : int64_t(y) - x);
}
inline unsigned __usad(unsigned x, unsigned y, unsigned z) {
    return z + (x > y ? x - y : y - x);
}
inline int __dp4a(int a, int b, int c) {
    int sum = c;
    for (int i = 0; i < 4; ++i) sum += int(int8_t(a >> (8 * i))) * int(int8_t(b >> (8 * i)));
    return sum;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    unsigned sum = c;
    for (int i = 0; i < 4; ++i) sum += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
    return sum;
}
inline unsigned umin(unsigned a, unsigned b) {
    return a < b ? a : b;
}
inline unsigned umax(unsigned a, unsigned b) {
    return a > b ? a : b;
}
inline long long llmin(long long a, long long b) {
    return a < b ? a : b;
}
inline long long llmax(long long a, long long b) {
    return a > b ? a : b;
}
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) {
    return a < b ? a : b;
}
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
}

// --- the atomics runtime.h does not have -------------------------------------------------------------------------
#define CUDA_CPU_ATOMIC_BITWISE(NAME, BUILTIN)                                              \
    inline int NAME(int* address, int value) {                                              \
        return BUILTIN(address, value, __ATOMIC_RELAXED);                                   \
    }                                                                                       \
    inline unsigned NAME(unsigned* address, unsigned value) {                               \
        return BUILTIN(address, value, __ATOMIC_RELAXED);                                   \
    }                                                                                       \
    inline unsigned long long NAME(unsigned long long* address, unsigned long long value) { \
        return BUILTIN(address, value, __ATOMIC_RELAXED);                                   \
    }
CUDA_CPU_ATOMIC_BITWISE(atomicAnd, __atomic_fetch_and)
CUDA_CPU_ATOMIC_BITWISE(atomicOr, __atomic_fetch_or)
CUDA_CPU_ATOMIC_BITWISE(atomicXor, __atomic_fetch_xor)
#undef CUDA_CPU_ATOMIC_BITWISE
inline unsigned atomicSub(unsigned* address, unsigned value) {
    return __atomic_fetch_sub(address, value, __ATOMIC_RELAXED);
}
inline unsigned long long atomicExch(unsigned long long* address, unsigned long long value) {
    return __atomic_exchange_n(address, value, __ATOMIC_RELAXED);
}
inline unsigned atomicMin(unsigned* address, unsigned value) {
    return atomic_integer_update(address, value, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
inline long long atomicMin(long long* address, long long value) {
    return atomic_integer_update(address, value, [](long long a, long long b) { return a < b ? a : b; });
}
inline long long atomicMax(long long* address, long long value) {
    return atomic_integer_update(address, value, [](long long a, long long b) { return a > b ? a : b; });
}
inline unsigned long long atomicMin(unsigned long long* address, unsigned long long value) {
    return atomic_integer_update(address, value,
                                 [](unsigned long long a, unsigned long long b) { return a < b ? a : b; });
}
inline unsigned long long atomicMax(unsigned long long* address, unsigned long long value) {
    return atomic_integer_update(address, value,
                                 [](unsigned long long a, unsigned long long b) { return a > b ? a : b; });
}

// Scoped atomics (sm_60+): atomicAdd_block is atomic among the block's threads, atomicAdd_system also towards the host
// and peer devices. Every atomic here is atomic for the whole process, at least as strong as either scope.
#define CUDA_CPU_SCOPED_ATOMIC(NAME)                                                 \
    template <typename... Args>                                                      \
    inline auto NAME##_block(Args... args) -> decltype(NAME(args...)) {              \
        return NAME(args...);                                                        \
    }                                                                                \
    template <typename... Args>                                                      \
    inline auto NAME##_system(Args... args) -> decltype(NAME(args...)) {             \
        return NAME(args...);                                                        \
    }
CUDA_CPU_SCOPED_ATOMIC(atomicAdd)
CUDA_CPU_SCOPED_ATOMIC(atomicSub)
CUDA_CPU_SCOPED_ATOMIC(atomicExch)
CUDA_CPU_SCOPED_ATOMIC(atomicMin)
CUDA_CPU_SCOPED_ATOMIC(atomicMax)
CUDA_CPU_SCOPED_ATOMIC(atomicInc)
CUDA_CPU_SCOPED_ATOMIC(atomicDec)
CUDA_CPU_SCOPED_ATOMIC(atomicCAS)
CUDA_CPU_SCOPED_ATOMIC(atomicAnd)
CUDA_CPU_SCOPED_ATOMIC(atomicOr)
CUDA_CPU_SCOPED_ATOMIC(atomicXor)
#undef CUDA_CPU_SCOPED_ATOMIC

// --- __match_any_sync / __match_all_sync (sm_70+) ---------------------------------------------------------------
// The lanes of the mask compare a 32- or 64-bit value, bit for bit (PTX ISA, match.sync). As for every warp collective
// here, lanes that exited count as arrived and take no part ("all non-exited threads in membermask").
namespace cpu_backend {
// Each lane's answer: the live lanes whose value has the same bits as its own.
inline void combine_match_any(WarpLaneSlot* lanes, unsigned group) {
    for (int lane = 0; lane < 32; ++lane) {
        if (!(group >> lane & 1u)) continue;
        const uint64_t mine = *static_cast<const uint64_t*>(lanes[lane].in);
        unsigned same = 0;
        for (int other = 0; other < 32; ++other) {
            if ((group >> other & 1u) && *static_cast<const uint64_t*>(lanes[other].in) == mine) same |= 1u << other;
        }
        *static_cast<unsigned*>(lanes[lane].out) = same;
    }
}
// Each lane's answer: 1 if every live lane of the mask holds the same bits, else 0.
inline void combine_match_all(WarpLaneSlot* lanes, unsigned group) {
    const int first = std::countr_zero(group);
    const uint64_t bits = *static_cast<const uint64_t*>(lanes[first].in);
    int all = 1;
    for (int lane = 0; lane < 32; ++lane) {
        if ((group >> lane & 1u) && *static_cast<const uint64_t*>(lanes[lane].in) != bits) all = 0;
    }
    for (int lane = 0; lane < 32; ++lane) {
        if (group >> lane & 1u) *static_cast<int*>(lanes[lane].out) = all;
    }
}
template <typename T>
uint64_t match_bits(T value) {
    static_assert(std::is_arithmetic_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                  "__match_any_sync/__match_all_sync take int, unsigned, long, long long (and unsigned), float or double");
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    return std::bit_cast<Bits>(value);
}
}  // namespace cpu_backend

// The lanes of `mask` whose `value` equals this lane's.
template <typename T>
unsigned __match_any_sync(unsigned mask, T value, std::source_location site = std::source_location::current()) {
    const uint64_t bits = cpu_backend::match_bits(value);
    unsigned same = 0;
    cpu_backend::warp_collective(mask, cpu_backend::combine_match_any, &bits, &same, site);
    return same;
}
// `mask` if every lane of it holds the same `value` (*pred = true), else 0 (*pred = false).
template <typename T>
unsigned __match_all_sync(unsigned mask, T value, int* pred,
                          std::source_location site = std::source_location::current()) {
    const uint64_t bits = cpu_backend::match_bits(value);
    int all = 0;
    cpu_backend::warp_collective(mask, cpu_backend::combine_match_all, &bits, &all, site);
    *pred = all;
    return all ? mask : 0u;
}

// --- time in a kernel ----------------------------------------------------------------------------------------------
// clock64(): the host's steady clock in nanoseconds, which is cycles of the nominal 1 GHz clock that
// cudaDevAttrClockRate reports; differences time what a thread did, as on a GPU (CPU time, not a GPU's).
long long clock64();
// __nanosleep(ns): CUDA promises a sleep of about 0 to 2·ns (at most 1 ms); here the OS thread yields, which is within
// that promise, so a spin-wait with back-off lets other work run.
void __nanosleep(unsigned ns);

// --- host API: the calls public programs make beyond runtime.h's (host_api_extra.cpp defines the rest) ----------
template <typename T>
cudaError_t cudaGetSymbolAddress(void** address, const T& symbol) {
    if (!address) return cudaErrorInvalidValue;
    *address = const_cast<void*>(static_cast<const void*>(&symbol));  // a __device__ variable is a host variable
    return cudaSuccess;
}
template <typename T>
cudaError_t cudaGetSymbolSize(size_t* bytes, const T&) {
    if (!bytes) return cudaErrorInvalidValue;
    *bytes = sizeof(T);
    return cudaSuccess;
}
// Ordered after the stream's earlier work by waiting for it, then a plain copy (the host waits; a GPU's would not).
template <typename T>
cudaError_t cudaMemcpyToSymbolAsync(const T& symbol, const void* source, size_t count, size_t offset = 0,
                                    cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t stream = 0) {
    if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return e;
    return cudaMemcpyToSymbol(symbol, source, count, offset, kind);
}
template <typename T>
cudaError_t cudaMemcpyFromSymbolAsync(void* destination, const T& symbol, size_t count, size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyDeviceToHost, cudaStream_t stream = 0) {
    if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return e;
    return cudaMemcpyFromSymbol(destination, symbol, count, offset, kind);
}
template <typename T>
cudaError_t cudaMallocManaged(T** ptr, size_t bytes, unsigned flags = cudaMemAttachGlobal,
                              std::source_location site = std::source_location::current()) {
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost) return cudaErrorInvalidValue;
    // Device memory is host memory here: a managed buffer is a device buffer the host may also read and write
    // (after synchronizing, as on a GPU without concurrent managed access).
    return cpu_backend::device_malloc(reinterpret_cast<void**>(ptr), bytes, site.file_name(), int(site.line()));
}
template <typename T>
cudaError_t cudaHostGetDevicePointer(T** device, void* host, unsigned flags) {
    return cudaHostGetDevicePointer(reinterpret_cast<void**>(device), host, flags);
}
template <typename... KernelParams>
cudaError_t cudaFuncSetCacheConfig(void (*)(KernelParams...), cudaFuncCache) {
    return cudaSuccess;  // a cache-size preference: nothing to prefer on the CPU
}
// The block size with the most resident threads per SM by cudaOccupancyMaxActiveBlocksPerMultiprocessor's estimate
// (threads and shared memory), and the grid that fills every SM with it: cuda_runtime.h's search, in steps of a warp.
template <typename SharedBytesOfBlockSize, typename Kernel>
cudaError_t cudaOccupancyMaxPotentialBlockSizeVariableSMem(int* min_grid_size, int* block_size, Kernel kernel,
                                                           SharedBytesOfBlockSize shared_bytes_of,
                                                           int block_size_limit = 0, unsigned = 0) {
    if (!min_grid_size || !block_size) return cudaErrorInvalidValue;
    const int limit = block_size_limit > 0 && block_size_limit < 1024 ? block_size_limit : 1024;
    int best_threads = 0, best_size = 0, best_blocks = 0;
    for (int size = (limit + 31) / 32 * 32; size > 0; size -= 32) {
        const int threads = size < limit ? size : limit;
        int blocks = 0;
        if (const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads,
                                                                                size_t(shared_bytes_of(threads)));
            e != cudaSuccess)
            return e;
        if (blocks * threads > best_threads) best_threads = blocks * threads, best_size = threads, best_blocks = blocks;
    }
    int sm_count = 0;
    if (const cudaError_t e = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0); e != cudaSuccess)
        return e;
    *block_size = best_size;
    *min_grid_size = best_blocks * sm_count;
    return cudaSuccess;
}
template <typename Kernel>
cudaError_t cudaOccupancyMaxPotentialBlockSize(int* min_grid_size, int* block_size, Kernel kernel,
                                               size_t shared_bytes = 0, int block_size_limit = 0) {
    return cudaOccupancyMaxPotentialBlockSizeVariableSMem(
        min_grid_size, block_size, kernel, [shared_bytes](int) { return shared_bytes; }, block_size_limit);
}
template <typename Kernel>
cudaError_t cudaOccupancyMaxPotentialBlockSizeWithFlags(int* min_grid_size, int* block_size, Kernel kernel,
                                                        size_t shared_bytes = 0, int block_size_limit = 0,
                                                        unsigned = 0) {
    return cudaOccupancyMaxPotentialBlockSize(min_grid_size, block_size, kernel, shared_bytes, block_size_limit);
}

namespace cpu_backend {
// cudaDeviceGetAttribute's attributes beyond the ones host_api.cpp answers itself (host_api_extra.cpp).
cudaError_t more_device_attributes(int* value, cudaDeviceAttr attr);
}  // namespace cpu_backend
