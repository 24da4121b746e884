// common/cpu_backend/nvcc_implicit.h — what nvcc gives every .cu file that the file does not write: <cuda_runtime.h>
// included first, and the compiler's macros. tools/nvcc-cpu and the cpu flavor's build force-include it into each
// .cu file (g++ -include), as nvcc does with cuda_runtime.h; .cpp files get neither, as with nvcc.
//
//   __CUDACC__, __NVCC__        defined (1), as by nvcc: a file's `#ifdef __CUDACC__` branch is its CUDA one
//                               (cuda-samples' helper_math.h otherwise defines host copies of rsqrtf, fminf, min...).
//   __CUDACC_VER_MAJOR__/MINOR  the toolkit's version whose headers are used (CUDART_VERSION).
//   __CUDA_ARCH__               not defined, in host and device code alike. nvcc defines it only in the device pass;
//                               here device and host code are one compile, and the `#ifdef __CUDA_ARCH__` branches
//                               of public code mostly use PTX, intrinsics or architecture tunings this backend does
//                               not have, while their host branches are plain C++ that runs here.
//   __cplusplus                 C++20 (202002L): nvcc 12 and 13 default to C++17, but the backend needs C++20.
// __CUDACC__ is defined after the CUDA headers the backend includes: with it, those headers would declare device
// builtins g++ does not have.
#pragma once
#include <cuda_runtime.h>  // common/cpu_backend/cuda_include/cuda_runtime.h

#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#ifndef __NVCC__
#define __NVCC__ 1
#endif
#ifndef __CUDACC_VER_MAJOR__
#define __CUDACC_VER_MAJOR__ (CUDART_VERSION / 1000)
#define __CUDACC_VER_MINOR__ (CUDART_VERSION % 1000 / 10)
#endif
