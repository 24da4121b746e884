// <math.h> for the cpu flavor: C's math functions and C++'s float overloads of them in the global namespace, as
// libstdc++'s <math.h> gives them, but not `using std::lerp`: that one comes with C++20 (which the CPU backend
// needs), and CUDA code, compiled by nvcc as C++17, often defines a lerp of its own (llm.c's adamw.cu does).
#ifndef CUDA_CPU_MATH_H
#define CUDA_CPU_MATH_H

#define _GLIBCXX_INCLUDE_NEXT_C_HEADERS
#include_next <math.h>  // libstdc++'s, which with the macro above includes the C library's and nothing else
#undef _GLIBCXX_INCLUDE_NEXT_C_HEADERS

#ifdef __cplusplus
#include <cmath>

using std::abs;
using std::acos;
using std::acosh;
using std::asin;
using std::asinh;
using std::atan;
using std::atan2;
using std::atanh;
using std::cbrt;
using std::ceil;
using std::copysign;
using std::cos;
using std::cosh;
using std::erf;
using std::erfc;
using std::exp;
using std::exp2;
using std::expm1;
using std::fabs;
using std::fdim;
using std::floor;
using std::fma;
using std::fmax;
using std::fmin;
using std::fmod;
using std::fpclassify;
using std::frexp;
using std::hypot;
using std::ilogb;
using std::isfinite;
using std::isgreater;
using std::isgreaterequal;
using std::isinf;
using std::isless;
using std::islessequal;
using std::islessgreater;
using std::isnan;
using std::isnormal;
using std::isunordered;
using std::ldexp;
using std::lgamma;
using std::llrint;
using std::llround;
using std::log;
using std::log10;
using std::log1p;
using std::log2;
using std::logb;
using std::lrint;
using std::lround;
using std::modf;
using std::nearbyint;
using std::nextafter;
using std::nexttoward;
using std::pow;
using std::remainder;
using std::remquo;
using std::rint;
using std::round;
using std::scalbln;
using std::scalbn;
using std::signbit;
using std::sin;
using std::sinh;
using std::sqrt;
using std::tan;
using std::tanh;
using std::tgamma;
using std::trunc;
#endif  // __cplusplus
#endif  // CUDA_CPU_MATH_H
